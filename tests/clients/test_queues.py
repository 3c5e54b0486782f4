"""Queue-level actions through boto3: create, look up, list, delete, attributes, purge, tags,
dead-letter sources and permissions, plus the wire protocol the client actually speaks."""

import json
import os
from urllib.parse import urlparse

import pytest
from conftest import ACCOUNT_ID, REGION, endpoint, expect_error, queue_arn, queue_counts


def test_client_speaks_the_expected_wire_protocol(sqs, protocol, wire, new_queue):
    expected = os.environ.get("LEASEQ_EXPECT_PROTOCOL")
    if expected:
        assert protocol == expected, f"venv's botocore speaks {protocol}, expected {expected}"
    url = new_queue()
    sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])
    request_type = wire.request_headers.get("content-type", "")
    response_type = wire.response_headers.get("content-type", "")
    if protocol == "json":
        assert request_type.startswith("application/x-amz-json-1.0"), wire.request_headers
        assert wire.request_headers.get("x-amz-target") == "AmazonSQS.GetQueueAttributes"
        assert json.loads(wire.request_body)["QueueUrl"] == url
        assert response_type.startswith("application/x-amz-json-1.0"), wire.response_headers
    else:
        assert request_type.startswith("application/x-www-form-urlencoded"), wire.request_headers
        assert "x-amz-target" not in wire.request_headers
        assert b"Action=GetQueueAttributes" in wire.request_body
        assert response_type.startswith("text/xml"), wire.response_headers


def test_create_queue_with_attributes_and_tags(sqs, queue_name):
    name = queue_name()
    url = sqs.create_queue(
        QueueName=name,
        Attributes={
            "VisibilityTimeout": "5",
            "DelaySeconds": "1",
            "MaximumMessageSize": "2048",
            "MessageRetentionPeriod": "3600",
            "ReceiveMessageWaitTimeSeconds": "2",
        },
        tags={"team": "core", "env": "test"},
    )["QueueUrl"]
    try:
        # The URL is built from the Host the client used, so a client can reach it as is.
        parsed, ours = urlparse(url), urlparse(endpoint())
        assert (parsed.scheme, parsed.netloc) == (ours.scheme, ours.netloc), url
        assert parsed.path == f"/{ACCOUNT_ID}/{name}", url

        attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        assert attributes["VisibilityTimeout"] == "5"
        assert attributes["DelaySeconds"] == "1"
        assert attributes["MaximumMessageSize"] == "2048"
        assert attributes["MessageRetentionPeriod"] == "3600"
        assert attributes["ReceiveMessageWaitTimeSeconds"] == "2"
        assert attributes["QueueArn"] == f"arn:aws:sqs:{REGION}:{ACCOUNT_ID}:{name}"
        for counter in (
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        ):
            assert attributes[counter] == "0", (counter, attributes)
        assert int(attributes["CreatedTimestamp"]) > 1_600_000_000
        assert int(attributes["LastModifiedTimestamp"]) >= int(attributes["CreatedTimestamp"])

        assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"team": "core", "env": "test"}
    finally:
        sqs.delete_queue(QueueUrl=url)


def test_default_attributes(sqs, new_queue):
    url = new_queue()
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attributes["VisibilityTimeout"] == "30"
    assert attributes["DelaySeconds"] == "0"
    assert attributes["MessageRetentionPeriod"] == "345600"
    assert attributes["ReceiveMessageWaitTimeSeconds"] == "0"
    # Real SQS documented 262144 as the default for years and raised the limit to 1 MiB in 2025;
    # either is a faithful default.
    assert attributes["MaximumMessageSize"] in ("262144", "1048576"), attributes


def test_create_queue_is_idempotent_with_the_same_attributes(sqs, queue_name):
    name = queue_name()
    first = sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "7"})["QueueUrl"]
    try:
        again = sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "7"})
        assert again["QueueUrl"] == first
    finally:
        sqs.delete_queue(QueueUrl=first)


def test_create_queue_with_different_attributes_fails(sqs, queue_name):
    name = queue_name()
    url = sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "7"})["QueueUrl"]
    try:
        # Real SQS: HTTP 400, Query code QueueAlreadyExists, JSON __type QueueNameExists.
        with expect_error(sqs, "QueueAlreadyExists", status=400, shape="QueueNameExists"):
            sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "8"})
        # The failed create changed nothing.
        attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["VisibilityTimeout"])
        assert attributes["Attributes"]["VisibilityTimeout"] == "7"
    finally:
        sqs.delete_queue(QueueUrl=url)


@pytest.mark.parametrize("bad_name", ["has space", "semi;colon", "x" * 81, "dot.name"])
def test_create_queue_with_invalid_name_fails(sqs, bad_name):
    # Real SQS: InvalidParameterValue ("Can only include alphanumeric characters, hyphens, or
    # underscores. 1 to 80 in length").
    with expect_error(sqs, "InvalidParameterValue", status=400):
        sqs.create_queue(QueueName=bad_name)


def test_create_queue_with_invalid_attribute_value_fails(sqs, queue_name):
    name = queue_name()
    with expect_error(sqs, "InvalidAttributeValue", status=400):
        sqs.create_queue(QueueName=name, Attributes={"VisibilityTimeout": "43201"})
    # Nothing was created.
    with expect_error(
        sqs, "AWS.SimpleQueueService.NonExistentQueue", status=400, shape="QueueDoesNotExist"
    ):
        sqs.get_queue_url(QueueName=name)


def test_get_queue_url(sqs, new_queue, queue_name):
    url = new_queue()
    name = url.rsplit("/", 1)[1]
    assert sqs.get_queue_url(QueueName=name)["QueueUrl"] == url
    assert sqs.get_queue_url(QueueName=name, QueueOwnerAWSAccountId=ACCOUNT_ID)["QueueUrl"] == url
    with expect_error(
        sqs, "AWS.SimpleQueueService.NonExistentQueue", status=400, shape="QueueDoesNotExist"
    ):
        sqs.get_queue_url(QueueName=queue_name("missing"))


def test_list_queues_with_prefix_and_paging(sqs, new_queue, queue_name):
    prefix = queue_name("page")
    urls = set()
    for index in range(5):
        urls.add(sqs.create_queue(QueueName=f"{prefix}-{index}")["QueueUrl"])
    try:
        listed = sqs.list_queues(QueueNamePrefix=prefix)
        assert set(listed["QueueUrls"]) == urls
        assert "NextToken" not in listed

        seen, token, pages = [], None, 0
        while True:
            kwargs = {"QueueNamePrefix": prefix, "MaxResults": 2}
            if token:
                kwargs["NextToken"] = token
            page = sqs.list_queues(**kwargs)
            pages += 1
            assert len(page.get("QueueUrls", [])) <= 2, page
            seen.extend(page.get("QueueUrls", []))
            token = page.get("NextToken")
            if not token or pages > 5:
                break
        assert pages == 3, f"5 queues with MaxResults=2 should take 3 pages, took {pages}"
        assert sorted(seen) == sorted(urls), "paging must return every queue exactly once"

        nothing = sqs.list_queues(QueueNamePrefix=queue_name("nothing-here"))
        assert nothing.get("QueueUrls", []) == []
    finally:
        for url in urls:
            sqs.delete_queue(QueueUrl=url)


def test_list_queues_max_results_out_of_range(sqs_unvalidated):
    # Real SQS: MaxResults must be 1..1000, InvalidParameterValue otherwise.
    with expect_error(sqs_unvalidated, "InvalidParameterValue", status=400):
        sqs_unvalidated.list_queues(MaxResults=1001)


def test_delete_queue(sqs, queue_name):
    name = queue_name()
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="doomed")
    sqs.delete_queue(QueueUrl=url)
    with expect_error(
        sqs, "AWS.SimpleQueueService.NonExistentQueue", status=400, shape="QueueDoesNotExist"
    ):
        sqs.get_queue_url(QueueName=name)
    with expect_error(
        sqs, "AWS.SimpleQueueService.NonExistentQueue", status=400, shape="QueueDoesNotExist"
    ):
        sqs.send_message(QueueUrl=url, MessageBody="too late")
    with expect_error(
        sqs, "AWS.SimpleQueueService.NonExistentQueue", status=400, shape="QueueDoesNotExist"
    ):
        sqs.delete_queue(QueueUrl=url)


def test_get_and_set_queue_attributes(sqs, new_queue):
    url = new_queue()
    sqs.set_queue_attributes(
        QueueUrl=url, Attributes={"VisibilityTimeout": "10", "DelaySeconds": "3"}
    )
    only = sqs.get_queue_attributes(
        QueueUrl=url, AttributeNames=["VisibilityTimeout", "DelaySeconds"]
    )["Attributes"]
    assert only == {"VisibilityTimeout": "10", "DelaySeconds": "3"}


def test_redrive_policy_round_trips(sqs, new_queue):
    dead_letter_url = new_queue("dlq")
    dead_letter_arn = queue_arn(sqs, dead_letter_url)
    policy = {"deadLetterTargetArn": dead_letter_arn, "maxReceiveCount": 3}
    url = new_queue("src")
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"RedrivePolicy": json.dumps(policy)})
    returned = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["RedrivePolicy"])[
        "Attributes"
    ]["RedrivePolicy"]
    decoded = json.loads(returned)
    # Real SQS echoes maxReceiveCount as a JSON number; accept a numeric string too.
    assert decoded["deadLetterTargetArn"] == dead_letter_arn
    assert int(decoded["maxReceiveCount"]) == 3
    # Removing it with an empty value (the documented way).
    sqs.set_queue_attributes(QueueUrl=url, Attributes={"RedrivePolicy": ""})
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert "RedrivePolicy" not in attributes, attributes


@pytest.mark.parametrize(
    "name,value",
    [
        ("VisibilityTimeout", "43201"),
        ("VisibilityTimeout", "abc"),
        ("VisibilityTimeout", "-1"),
        ("DelaySeconds", "901"),
        ("MaximumMessageSize", "1023"),
        ("MessageRetentionPeriod", "59"),
        ("ReceiveMessageWaitTimeSeconds", "21"),
    ],
)
def test_set_queue_attributes_invalid_value(sqs, new_queue, name, value):
    url = new_queue()
    with expect_error(sqs, "InvalidAttributeValue", status=400):
        sqs.set_queue_attributes(QueueUrl=url, Attributes={name: value})
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attributes["VisibilityTimeout"] == "30", "a rejected set must change nothing"


@pytest.mark.parametrize(
    "policy",
    ["{not json", '{"maxReceiveCount": 3}', '{"deadLetterTargetArn": "arn:aws:sqs:x", "maxReceiveCount": 0}'],
)
def test_set_invalid_redrive_policy(sqs, new_queue, policy):
    # Unlike the numeric attributes, real SQS answers a bad RedrivePolicy with
    # InvalidParameterValue ("Value {...} for parameter RedrivePolicy is invalid. Reason: Redrive
    # policy does not contain mandatory attribute: deadLetterTargetArn.").
    url = new_queue()
    with expect_error(sqs, "InvalidParameterValue", status=400):
        sqs.set_queue_attributes(QueueUrl=url, Attributes={"RedrivePolicy": policy})
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert "RedrivePolicy" not in attributes, "a rejected set must change nothing"


def test_unknown_attribute_names_fail(sqs, new_queue):
    url = new_queue()
    with expect_error(sqs, "InvalidAttributeName", status=400, shape="InvalidAttributeName"):
        sqs.set_queue_attributes(QueueUrl=url, Attributes={"NoSuchAttribute": "1"})
    with expect_error(sqs, "InvalidAttributeName", status=400, shape="InvalidAttributeName"):
        sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["NoSuchAttribute"])


def test_purge_queue(sqs, new_queue):
    url = new_queue()
    for index in range(3):
        sqs.send_message(QueueUrl=url, MessageBody=f"m{index}")
    sqs.purge_queue(QueueUrl=url)
    assert queue_counts(sqs, url) == (0, 0, 0)
    assert sqs.receive_message(QueueUrl=url, WaitTimeSeconds=0).get("Messages", []) == []
    # Real SQS allows one purge per 60 s: HTTP 403, AWS.SimpleQueueService.PurgeQueueInProgress.
    with expect_error(
        sqs,
        "AWS.SimpleQueueService.PurgeQueueInProgress",
        status=403,
        shape="PurgeQueueInProgress",
    ):
        sqs.purge_queue(QueueUrl=url)


def test_tags(sqs, new_queue):
    url = new_queue()
    assert sqs.list_queue_tags(QueueUrl=url).get("Tags", {}) == {}
    sqs.tag_queue(QueueUrl=url, Tags={"a": "1", "b": "2"})
    sqs.tag_queue(QueueUrl=url, Tags={"b": "3", "c": "<&>"})
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"a": "1", "b": "3", "c": "<&>"}
    sqs.untag_queue(QueueUrl=url, TagKeys=["a", "not-there"])
    assert sqs.list_queue_tags(QueueUrl=url)["Tags"] == {"b": "3", "c": "<&>"}


def test_list_dead_letter_source_queues(sqs, new_queue):
    dead_letter_url = new_queue("dlq")
    policy = json.dumps(
        {"deadLetterTargetArn": queue_arn(sqs, dead_letter_url), "maxReceiveCount": "5"}
    )
    first = new_queue("src1", RedrivePolicy=policy)
    second = new_queue("src2", RedrivePolicy=policy)
    new_queue("unrelated")
    sources = sqs.list_dead_letter_source_queues(QueueUrl=dead_letter_url)
    assert sorted(sources["queueUrls"]) == sorted([first, second])
    assert sqs.list_dead_letter_source_queues(QueueUrl=first).get("queueUrls", []) == []


def test_add_and_remove_permission(sqs, new_queue):
    url = new_queue()
    arn = queue_arn(sqs, url)
    sqs.add_permission(
        QueueUrl=url,
        Label="let-partner-send",
        AWSAccountIds=["111122223333"],
        Actions=["SendMessage", "GetQueueUrl"],
    )
    policy = json.loads(
        sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"])["Attributes"]["Policy"]
    )
    statements = {s["Sid"]: s for s in policy["Statement"]}
    statement = statements["let-partner-send"]
    actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
    # Real SQS writes {"Effect":"Allow","Principal":{"AWS":"arn:aws:iam::111122223333:root"},
    # "Action":["SQS:SendMessage","SQS:GetQueueUrl"],"Resource":<queue arn>}.
    assert statement["Effect"] == "Allow"
    assert sorted(actions) == ["SQS:GetQueueUrl", "SQS:SendMessage"]
    assert "111122223333" in json.dumps(statement["Principal"])
    assert statement["Resource"] == arn

    # A label must be unique per queue (real SQS: InvalidParameterValue, "Already exists").
    with expect_error(sqs, "InvalidParameterValue", status=400):
        sqs.add_permission(
            QueueUrl=url, Label="let-partner-send", AWSAccountIds=["1"], Actions=["SendMessage"]
        )

    sqs.remove_permission(QueueUrl=url, Label="let-partner-send")
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    if "Policy" in attributes:
        remaining = json.loads(attributes["Policy"]).get("Statement", [])
        assert all(s.get("Sid") != "let-partner-send" for s in remaining), attributes["Policy"]
    with expect_error(sqs, "InvalidParameterValue", status=400):
        sqs.remove_permission(QueueUrl=url, Label="let-partner-send")


def test_queue_url_forms_accepted(sqs, new_queue):
    # leaseq-specific (issue 3): besides the canonical http://<host>/<account>/<name>, a queue
    # URL with another host name, and ElasticMQ's legacy /queue/<name> form, reach the queue.
    url = new_queue()
    name = url.rsplit("/", 1)[1]
    port = urlparse(endpoint()).port
    for alias in (f"http://localhost:{port}/{ACCOUNT_ID}/{name}", f"{endpoint()}/queue/{name}"):
        sqs.send_message(QueueUrl=alias, MessageBody=alias)
    bodies = []
    for _ in range(5):
        response = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
        bodies.extend(m["Body"] for m in response.get("Messages", []))
        if len(bodies) >= 2:
            break
    assert len(bodies) == 2, bodies
