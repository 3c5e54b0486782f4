"""leaseq's metrics page read by the Prometheus project's own Python client parser, an independent
check of the text format the server writes by hand (`crates/server/src/metrics.rs`), and
leaseq's extra action `LeaseqGetVisibilityAdvice` as a plain JSON 1.0 request.

Runs in the JSON venv, which has prometheus-client; skipped in the Query venv.
"""

import json
import urllib.request

import pytest

from conftest import endpoint

parser = pytest.importorskip("prometheus_client.parser")


def families():
    with urllib.request.urlopen(endpoint() + "/metrics", timeout=10) as response:
        assert response.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        text = response.read().decode("utf-8")
    return {family.name: family for family in parser.text_string_to_metric_families(text)}


def value(family, **labels):
    for sample in family.samples:
        if all(sample.labels.get(key) == want for key, want in labels.items()):
            return sample
    raise AssertionError(f"no sample with {labels} in {family.name}: {family.samples}")


def test_the_metrics_page_parses_and_counts_one_delivery(sqs, new_queue):
    url = new_queue("metrics")
    name = url.rsplit("/", 1)[1]
    for i in range(3):
        sqs.send_message(QueueUrl=url, MessageBody=f"job-{i}")
    message = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1)["Messages"][0]
    sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1)

    found = families()
    # The parser strips `_total` from counter family names.
    assert found["leaseq_queue_messages"].type == "gauge"
    assert value(found["leaseq_queue_messages"], queue=name, state="visible").value == 1
    assert value(found["leaseq_queue_messages"], queue=name, state="in_flight").value == 1
    assert found["leaseq_messages_sent"].type == "counter"
    assert value(found["leaseq_messages_sent"], queue=name).value == 3
    assert value(found["leaseq_messages_received"], queue=name).value == 2
    processing = found["leaseq_processing_time_seconds"]
    assert processing.type == "histogram"
    count = [s for s in processing.samples if s.name.endswith("_count") and s.labels["queue"] == name]
    assert [s.value for s in count] == [1]
    buckets = [
        s for s in processing.samples if s.name.endswith("_bucket") and s.labels["queue"] == name
    ]
    assert buckets[-1].labels["le"] == "+Inf" and buckets[-1].value == 1
    assert all(a.value <= b.value for a, b in zip(buckets, buckets[1:]))
    requests = found["leaseq_requests"]
    assert value(requests, action="SendMessage", outcome="success").value >= 3
    assert found["leaseq_request_duration_seconds"].type == "histogram"
    assert found["leaseq_log_fsync_duration_seconds"].type == "histogram"


def test_process_and_storage_families_parse(sqs, new_queue):
    sqs.send_message(QueueUrl=new_queue("storage"), MessageBody="x")
    found = families()
    # Prometheus' standard process metrics (the "Process metrics" of its client library
    # guidelines), present on Linux, where the test server runs.
    assert found["process_cpu_seconds"].type == "counter"
    assert found["process_resident_memory_bytes"].samples[0].value > 1 << 20
    assert 0 < found["process_open_fds"].samples[0].value <= found["process_max_fds"].samples[0].value
    assert found["process_start_time_seconds"].type == "gauge"
    # The test server keeps a file log: its storage gauges.
    assert found["leaseq_log_bytes"].samples[0].value > 0
    assert found["leaseq_log_segments"].samples[0].value >= 1
    assert found["leaseq_checkpoints"].type == "counter"


def test_visibility_advice_extra_action(sqs, new_queue):
    url = new_queue("advice", VisibilityTimeout=45)
    # boto3 has no method for an action SQS does not define: send it as SQS's JSON protocol would.
    request = urllib.request.Request(
        endpoint() + "/",
        data=('{"QueueUrl": "%s"}' % url).encode(),
        headers={
            "Content-Type": "application/x-amz-json-1.0",
            "X-Amz-Target": "AmazonSQS.LeaseqGetVisibilityAdvice",
        },
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        advice = json.load(response)
    assert advice["QueueUrl"].endswith("/" + url.rsplit("/", 1)[1])
    assert advice["VisibilityTimeout"] == "45"
    assert advice["Verdict"] == "insufficient-data"
    assert "need 20 deletes" in advice["Reason"]
