"""Fair queues and redelivery backoff through boto3 (both wire protocols).

Fair queues follow the SQS developer guide, "Amazon SQS fair queues": on a standard queue a
MessageGroupId names a tenant; a tenant holding a large share of the in-flight messages is noisy,
and quiet tenants' messages are delivered first. The thresholds AWS leaves open are leaseq's queue
attributes (docs/design/fairness.md): LeaseqFairInFlightMin (the fewest in-flight messages that can
make a tenant noisy) and LeaseqFairQueue (false: plain oldest-first order).

LeaseqRedeliveryBackoff is leaseq's own extension (docs/design/fairness.md, "Redelivery backoff"):
after the k-th expired lease a message waits the k-th delay of the schedule before it is visible.
"""

import re
import time
import urllib.request

from conftest import endpoint, expect_error, queue_counts


def received(sqs, url, count, **extra):
    # AttributeNames: boto3 1.28 (the Query venv) predates MessageSystemAttributeNames; both
    # protocols still accept it (SQS API reference, ReceiveMessage, "AttributeNames").
    response = sqs.receive_message(
        QueueUrl=url,
        MaxNumberOfMessages=count,
        AttributeNames=["All"],
        **extra,
    )
    return response.get("Messages", [])


def metric(name, queue):
    """The sample of `name` labelled with `queue` on the server's /metrics page, or None."""
    with urllib.request.urlopen(endpoint() + "/metrics", timeout=10) as response:
        text = response.read().decode("utf-8")
    pattern = re.compile(rf'^{name}{{[^}}]*queue="{re.escape(queue)}"[^}}]*}} (\S+)$', re.M)
    found = pattern.search(text)
    return float(found.group(1)) if found else None


def tenants(messages):
    return [m.get("Attributes", {}).get("MessageGroupId") for m in messages]


def test_a_standard_queue_stores_returns_and_validates_group_ids(sqs, new_queue):
    url = new_queue("groups")
    sqs.send_message(QueueUrl=url, MessageBody="tenant", MessageGroupId="tenant-1")
    sqs.send_message(QueueUrl=url, MessageBody="none")
    by_body = {m["Body"]: m for m in received(sqs, url, 10)}
    assert set(by_body) == {"tenant", "none"}
    assert by_body["tenant"]["Attributes"]["MessageGroupId"] == "tenant-1"
    # A message sent without one has none, and a standard queue has no FIFO attributes.
    assert "MessageGroupId" not in by_body["none"]["Attributes"]
    for message in by_body.values():
        assert "SequenceNumber" not in message["Attributes"]
        assert "MessageDeduplicationId" not in message["Attributes"]

    # MessageGroupId: up to 128 characters, alphanumeric and punctuation (SQS API reference,
    # SendMessage, "MessageGroupId"), on standard queues too.
    with expect_error(sqs, "InvalidParameterValue"):
        sqs.send_message(QueueUrl=url, MessageBody="x", MessageGroupId="has space")
    with expect_error(sqs, "InvalidParameterValue"):
        sqs.send_message(QueueUrl=url, MessageBody="x", MessageGroupId="g" * 129)
    sqs.send_message(QueueUrl=url, MessageBody="x", MessageGroupId="g" * 128)

    # In a batch a bad group id fails its entry alone.
    batch = sqs.send_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "good", "MessageBody": "a", "MessageGroupId": "t"},
            {"Id": "bad", "MessageBody": "b", "MessageGroupId": "no spaces"},
        ],
    )
    assert [e["Id"] for e in batch["Successful"]] == ["good"]
    assert [(e["Id"], e["Code"]) for e in batch["Failed"]] == [("bad", "InvalidParameterValue")]


def test_quiet_tenants_go_first_once_a_tenant_is_noisy(sqs, new_queue):
    url = new_queue("fair", VisibilityTimeout=60, LeaseqFairInFlightMin=2)
    for body in ["b1", "b2", "b3"]:
        sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId="big")
    sqs.send_message(QueueUrl=url, MessageBody="s1", MessageGroupId="small")

    # Oldest first until "big" holds 2 of the 2 in-flight messages (over 10% and at least
    # LeaseqFairInFlightMin): then the quiet tenant's newer message is delivered before it.
    assert tenants(received(sqs, url, 2)) == ["big", "big"]
    assert metric("leaseq_queue_noisy_groups", url.rsplit("/", 1)[1]) == 1
    quiet = received(sqs, url, 1)
    assert [m["Body"] for m in quiet] == ["s1"]
    assert tenants(quiet) == ["small"]
    assert [m["Body"] for m in received(sqs, url, 1)] == ["b3"]


def test_fairness_switched_off_keeps_the_oldest_first_order(sqs, new_queue):
    url = new_queue(
        "unfair", VisibilityTimeout=60, LeaseqFairInFlightMin=2, LeaseqFairQueue="false"
    )
    attributes = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["LeaseqFairQueue", "LeaseqFairInFlightMin"]
    )["Attributes"]
    assert attributes == {"LeaseqFairQueue": "false", "LeaseqFairInFlightMin": "2"}
    for body in ["b1", "b2", "b3"]:
        sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId="big")
    sqs.send_message(QueueUrl=url, MessageBody="s1", MessageGroupId="small")
    bodies = [m["Body"] for m in received(sqs, url, 2)]
    bodies += [m["Body"] for m in received(sqs, url, 1)]
    assert bodies == ["b1", "b2", "b3"]


def test_an_expired_lease_waits_out_the_backoff_before_redelivery(sqs, new_queue):
    url = new_queue("backoff", LeaseqRedeliveryBackoff="3s")
    assert (
        sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["LeaseqRedeliveryBackoff"])[
            "Attributes"
        ]["LeaseqRedeliveryBackoff"]
        == "3s"
    )
    sqs.send_message(QueueUrl=url, MessageBody="crashy")
    first = received(sqs, url, 1, VisibilityTimeout=1)
    assert [m["Attributes"]["ApproximateReceiveCount"] for m in first] == ["1"]
    leased_at = time.monotonic()

    # The lease ends after 1 s; the message then waits 3 s more, counted as delayed.
    time.sleep(2)
    assert received(sqs, url, 1) == []
    assert queue_counts(sqs, url) == (0, 0, 1)

    again = received(sqs, url, 1, WaitTimeSeconds=10)
    waited = time.monotonic() - leased_at
    assert [m["Attributes"]["ApproximateReceiveCount"] for m in again] == ["2"]
    # 1 s lease + 3 s backoff, less a little for the clocks of client and server.
    assert waited >= 3.5, f"redelivered after {waited:.2f} s"


def test_a_release_is_not_delayed_unless_the_schedule_says_releases(sqs, new_queue):
    plain = new_queue("release", LeaseqRedeliveryBackoff="1m")
    counted = new_queue("releases", LeaseqRedeliveryBackoff="1m releases")
    for url in (plain, counted):
        sqs.send_message(QueueUrl=url, MessageBody="job")
        message = received(sqs, url, 1)[0]
        sqs.change_message_visibility(
            QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
        )
    # Without `releases` a release with visibility 0 makes it visible at once, as in SQS.
    assert [m["Body"] for m in received(sqs, plain, 1)] == ["job"]
    # With it the release counts like an expiry: the message waits the minute, as delayed.
    assert received(sqs, counted, 1) == []
    assert queue_counts(sqs, counted) == (0, 0, 1)


def test_a_bad_schedule_or_fair_setting_is_an_invalid_attribute_value(sqs, new_queue):
    url = new_queue("bad-settings")
    for name, value in [
        ("LeaseqRedeliveryBackoff", "soon"),
        ("LeaseqRedeliveryBackoff", "exponential(5m,1s)"),
        ("LeaseqFairQueue", "maybe"),
    ]:
        with expect_error(sqs, "InvalidAttributeValue"):
            sqs.set_queue_attributes(QueueUrl=url, Attributes={name: value})
