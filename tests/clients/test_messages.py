"""Message-level actions through boto3: send (single and batch) with attributes and MD5s, receive
with its options and filters, delete, change visibility, and the bad-input errors."""

import base64

import pytest
from conftest import (
    expect_error,
    md5_of_attributes,
    md5_of_body,
    queue_counts,
)

ATTRIBUTES = {
    "str": {"DataType": "String", "StringValue": "plain <&> \r\n text 🦀"},
    "num": {"DataType": "Number", "StringValue": "-12.5e3"},
    "bin": {"DataType": "Binary", "BinaryValue": bytes(range(256))},
    "custom.str": {"DataType": "String.order-id", "StringValue": "A-17"},
    "custom.num": {"DataType": "Number.int", "StringValue": "42"},
    "custom.bin": {"DataType": "Binary.gif", "BinaryValue": b"GIF89a\x00\x01"},
}

BODIES = {
    "carriage-return": "line one\rline two\r\nline three\n",
    "xml-special": "<a href=\"x\">&amp; & < > ' \" ]]> <![CDATA[x]]></a>",
    "json": '{"k": ["v", 1, null], "esc": "\\u0000 \\n"}',
    "emoji-and-scripts": "🦀🚀 héllo wörld — 日本語 한국어 O'zbek \U0001f9ea",
    "edge-of-allowed-set": "\t\n\r \ud7ff\ue000\ufffd\U00010000\U0010ffff",
    "whitespace-only": "   \n\t  ",
    "long": ("lorem ipsum <&> \r\n 🦀 ✓ " * 8000)[:200_000],
}


def receive_one(sqs, url, **kwargs):
    kwargs.setdefault("WaitTimeSeconds", 2)
    messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1, **kwargs).get(
        "Messages", []
    )
    assert len(messages) == 1, f"expected one message, got {messages}"
    return messages[0]


def receive_all(sqs, url, count, **kwargs):
    """Receives until `count` messages arrived (a standard queue may return fewer per call)."""
    messages = []
    for _ in range(10):
        batch = sqs.receive_message(
            QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1, **kwargs
        ).get("Messages", [])
        messages.extend(batch)
        if len(messages) >= count:
            break
    assert len(messages) == count, f"expected {count} messages, got {len(messages)}"
    return messages


@pytest.mark.parametrize("label", list(BODIES))
def test_body_round_trips_exactly(sqs, new_queue, label):
    body = BODIES[label]
    url = new_queue()
    sent = sqs.send_message(QueueUrl=url, MessageBody=body)
    assert sent["MD5OfMessageBody"] == md5_of_body(body)
    message = receive_one(sqs, url)
    assert message["Body"] == body, f"body changed in transit ({label})"
    assert message["MD5OfBody"] == md5_of_body(body)
    assert message["MessageId"] == sent["MessageId"]


def test_bodies_round_trip_through_a_batch(sqs, new_queue):
    url = new_queue()
    entries = [
        {"Id": label.replace("-", "_"), "MessageBody": body}
        for label, body in BODIES.items()
        if label != "long"
    ]
    result = sqs.send_message_batch(QueueUrl=url, Entries=entries)
    assert result.get("Failed", []) == []
    by_id = {entry["Id"]: entry for entry in result["Successful"]}
    for entry in entries:
        assert by_id[entry["Id"]]["MD5OfMessageBody"] == md5_of_body(entry["MessageBody"])
    received = receive_all(sqs, url, len(entries))
    assert sorted(m["Body"] for m in received) == sorted(e["MessageBody"] for e in entries)


def test_message_of_the_maximum_size(sqs, new_queue):
    # Real SQS raised its limit to 1 MiB (1,048,576 bytes) in 2025.
    url = new_queue(MaximumMessageSize=1_048_576)
    body = "x" * 1_048_576
    sqs.send_message(QueueUrl=url, MessageBody=body)
    assert receive_one(sqs, url)["Body"] == body


def test_message_attributes_and_their_md5(sqs, new_queue):
    url = new_queue()
    sent = sqs.send_message(QueueUrl=url, MessageBody="with attributes", MessageAttributes=ATTRIBUTES)
    assert sent["MD5OfMessageBody"] == md5_of_body("with attributes")
    assert sent["MD5OfMessageAttributes"] == md5_of_attributes(ATTRIBUTES)
    message = receive_one(sqs, url, MessageAttributeNames=["All"])
    assert message["MessageAttributes"] == ATTRIBUTES
    assert message["MD5OfMessageAttributes"] == md5_of_attributes(ATTRIBUTES)


def test_message_attribute_name_filters(sqs, new_queue):
    attributes = {
        "order.id": {"DataType": "String", "StringValue": "1"},
        "order.total": {"DataType": "Number", "StringValue": "9.5"},
        "trace": {"DataType": "String", "StringValue": "t"},
    }
    url = new_queue()
    sqs.send_message(QueueUrl=url, MessageBody="filtered", MessageAttributes=attributes)

    def received_names(names):
        # VisibilityTimeout 0 leaves the message receivable for the next filter.
        kwargs = {"VisibilityTimeout": 0}
        if names is not None:
            kwargs["MessageAttributeNames"] = names
        message = receive_one(sqs, url, **kwargs)
        returned = message.get("MessageAttributes", {})
        if returned:
            # SQS computes the returned MD5 over the attributes it returns (the Java SDK checks
            # it against the filtered set, and that check passes against real SQS).
            assert message["MD5OfMessageAttributes"] == md5_of_attributes(returned)
        return sorted(returned)

    assert received_names(None) == []
    assert received_names(["All"]) == ["order.id", "order.total", "trace"]
    assert received_names([".*"]) == ["order.id", "order.total", "trace"]
    assert received_names(["order.*"]) == ["order.id", "order.total"]
    assert received_names(["trace", "missing"]) == ["trace"]


def test_aws_trace_header_system_attribute(sqs, protocol, new_queue):
    trace = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
    system = {"AWSTraceHeader": {"DataType": "String", "StringValue": trace}}
    url = new_queue()
    sent = sqs.send_message(QueueUrl=url, MessageBody="traced", MessageSystemAttributes=system)
    assert sent["MD5OfMessageSystemAttributes"] == md5_of_attributes(system)
    if protocol == "json":
        message = receive_one(sqs, url, MessageSystemAttributeNames=["AWSTraceHeader"])
    else:
        message = receive_one(sqs, url, AttributeNames=["AWSTraceHeader"])
    assert message["Attributes"] == {"AWSTraceHeader": trace}


def test_delay_seconds_per_message(sqs, new_queue):
    url = new_queue()
    sqs.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=2)
    sqs.send_message(QueueUrl=url, MessageBody="now")
    assert queue_counts(sqs, url) == (1, 0, 1)
    first = receive_all(sqs, url, 1)
    assert first[0]["Body"] == "now"


def test_receive_max_number_of_messages(sqs, new_queue):
    url = new_queue()
    sqs.send_message_batch(
        QueueUrl=url, Entries=[{"Id": str(i), "MessageBody": f"m{i}"} for i in range(5)]
    )
    two = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=2, WaitTimeSeconds=1)
    assert 1 <= len(two["Messages"]) <= 2
    rest = receive_all(sqs, url, 5 - len(two["Messages"]))
    bodies = sorted(m["Body"] for m in two["Messages"] + rest)
    assert bodies == [f"m{i}" for i in range(5)]
    assert queue_counts(sqs, url) == (0, 5, 0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"MaxNumberOfMessages": 11},
        {"MaxNumberOfMessages": 0},
        {"WaitTimeSeconds": 21},
        {"VisibilityTimeout": 43201},
    ],
)
def test_receive_out_of_range_parameters(sqs_unvalidated, new_queue, kwargs):
    url = new_queue()
    # Real SQS: InvalidParameterValue, e.g. "Value 11 for parameter MaxNumberOfMessages is
    # invalid. Reason: Must be between 1 and 10, if provided."
    with expect_error(sqs_unvalidated, "InvalidParameterValue", status=400):
        sqs_unvalidated.receive_message(QueueUrl=url, **kwargs)


def test_receive_attribute_names(sqs, protocol, new_queue):
    url = new_queue()
    sqs.send_message(QueueUrl=url, MessageBody="attrs")
    message = receive_one(sqs, url, AttributeNames=["All"], VisibilityTimeout=0)
    attributes = message["Attributes"]
    for name in ("SenderId", "SentTimestamp", "ApproximateReceiveCount",
                 "ApproximateFirstReceiveTimestamp"):
        assert name in attributes, (name, attributes)
    assert attributes["ApproximateReceiveCount"] == "1"
    assert int(attributes["ApproximateFirstReceiveTimestamp"]) >= int(attributes["SentTimestamp"])

    message = receive_one(sqs, url, AttributeNames=["ApproximateReceiveCount"], VisibilityTimeout=0)
    assert message["Attributes"] == {"ApproximateReceiveCount": "2"}

    if protocol == "json":
        message = receive_one(
            sqs, url, MessageSystemAttributeNames=["ApproximateReceiveCount", "SentTimestamp"]
        )
        assert sorted(message["Attributes"]) == ["ApproximateReceiveCount", "SentTimestamp"]
        assert message["Attributes"]["ApproximateReceiveCount"] == "3"


def test_delete_message(sqs, new_queue):
    url = new_queue()
    sqs.send_message(QueueUrl=url, MessageBody="bye")
    message = receive_one(sqs, url)
    sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    assert queue_counts(sqs, url) == (0, 0, 0)
    # Deleting again with the same receipt succeeds in real SQS (deletes are idempotent).
    sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])


def test_delete_message_batch_with_an_invalid_receipt(sqs, new_queue):
    url = new_queue()
    sqs.send_message_batch(
        QueueUrl=url, Entries=[{"Id": "a", "MessageBody": "1"}, {"Id": "b", "MessageBody": "2"}]
    )
    messages = receive_all(sqs, url, 2)
    result = sqs.delete_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "first", "ReceiptHandle": messages[0]["ReceiptHandle"]},
            {"Id": "second", "ReceiptHandle": messages[1]["ReceiptHandle"]},
            {"Id": "bogus", "ReceiptHandle": "not-a-receipt-handle"},
        ],
    )
    assert sorted(e["Id"] for e in result["Successful"]) == ["first", "second"]
    assert len(result["Failed"]) == 1, result
    failed = result["Failed"][0]
    assert failed["Id"] == "bogus"
    assert failed["Code"] == "ReceiptHandleIsInvalid", failed
    assert failed["SenderFault"] is True
    assert queue_counts(sqs, url) == (0, 0, 0)


def test_change_message_visibility_batch(sqs, new_queue):
    url = new_queue(VisibilityTimeout=30)
    sqs.send_message_batch(
        QueueUrl=url, Entries=[{"Id": "a", "MessageBody": "keep"}, {"Id": "b", "MessageBody": "free"}]
    )
    by_body = {m["Body"]: m for m in receive_all(sqs, url, 2)}
    result = sqs.change_message_visibility_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "keep", "ReceiptHandle": by_body["keep"]["ReceiptHandle"], "VisibilityTimeout": 60},
            {"Id": "free", "ReceiptHandle": by_body["free"]["ReceiptHandle"], "VisibilityTimeout": 0},
            {"Id": "bogus", "ReceiptHandle": "not-a-receipt-handle", "VisibilityTimeout": 5},
        ],
    )
    assert sorted(e["Id"] for e in result["Successful"]) == ["free", "keep"]
    assert [(e["Id"], e["Code"], e["SenderFault"]) for e in result["Failed"]] == [
        ("bogus", "ReceiptHandleIsInvalid", True)
    ]
    again = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
    assert [m["Body"] for m in again.get("Messages", [])] == ["free"]


@pytest.mark.parametrize("operation", ["delete", "change_visibility"])
def test_invalid_receipt_handle(sqs, new_queue, operation):
    url = new_queue()
    # Real SQS: ReceiptHandleIsInvalid ("The input receipt handle is invalid"), HTTP 404 in the
    # Query protocol; the status is not asserted here.
    with expect_error(sqs, "ReceiptHandleIsInvalid", shape="ReceiptHandleIsInvalid"):
        if operation == "delete":
            sqs.delete_message(QueueUrl=url, ReceiptHandle="not-a-receipt-handle")
        else:
            sqs.change_message_visibility(
                QueueUrl=url, ReceiptHandle="not-a-receipt-handle", VisibilityTimeout=5
            )


def test_send_message_batch_md5s_and_attributes(sqs, new_queue):
    url = new_queue()
    entries = [
        {"Id": "plain", "MessageBody": "p"},
        {"Id": "attributed", "MessageBody": "a", "MessageAttributes": ATTRIBUTES},
        {"Id": "delayed", "MessageBody": "d", "DelaySeconds": 1},
    ]
    result = sqs.send_message_batch(QueueUrl=url, Entries=entries)
    assert result.get("Failed", []) == []
    by_id = {entry["Id"]: entry for entry in result["Successful"]}
    assert sorted(by_id) == ["attributed", "delayed", "plain"]
    assert by_id["plain"]["MD5OfMessageBody"] == md5_of_body("p")
    assert "MD5OfMessageAttributes" not in by_id["plain"]
    assert by_id["attributed"]["MD5OfMessageAttributes"] == md5_of_attributes(ATTRIBUTES)
    assert len({entry["MessageId"] for entry in result["Successful"]}) == 3


def test_send_message_batch_partial_failure(sqs_unvalidated, new_queue):
    sqs = sqs_unvalidated
    url = new_queue(MaximumMessageSize=1024)
    result = sqs.send_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "ok1", "MessageBody": "fine"},
            {"Id": "control", "MessageBody": "\x00\x01"},
            {"Id": "ok2", "MessageBody": "also fine"},
            {"Id": "toolong", "MessageBody": "x" * 1025},
        ],
    )
    assert sorted(e["Id"] for e in result["Successful"]) == ["ok1", "ok2"]
    failed = {e["Id"]: e for e in result["Failed"]}
    assert sorted(failed) == ["control", "toolong"], result
    assert all(e["SenderFault"] is True for e in failed.values()), failed
    # Real SQS: a body with no allowed character is InvalidMessageContents; an entry over the
    # queue's MaximumMessageSize fails alone with InvalidParameterValue (the real-AWS output in
    # localstack/localstack#8570 shows the per-entry failure; localstack#9981 the code).
    assert failed["control"]["Code"] == "InvalidMessageContents", failed
    assert failed["toolong"]["Code"] == "InvalidParameterValue", failed
    assert queue_counts(sqs, url) == (2, 0, 0)


def batch_call(sqs, url, operation, entries):
    if operation == "send":
        return sqs.send_message_batch(QueueUrl=url, Entries=entries)
    if operation == "delete":
        return sqs.delete_message_batch(QueueUrl=url, Entries=entries)
    return sqs.change_message_visibility_batch(QueueUrl=url, Entries=entries)


def batch_entry(operation, entry_id):
    if operation == "send":
        return {"Id": entry_id, "MessageBody": "b"}
    if operation == "delete":
        return {"Id": entry_id, "ReceiptHandle": f"receipt-{entry_id}"}
    return {"Id": entry_id, "ReceiptHandle": f"receipt-{entry_id}", "VisibilityTimeout": 1}


@pytest.mark.parametrize("operation", ["send", "delete", "change_visibility"])
def test_batch_request_errors(sqs_unvalidated, new_queue, operation):
    sqs = sqs_unvalidated
    url = new_queue()
    with expect_error(
        sqs, "AWS.SimpleQueueService.BatchEntryIdsNotDistinct", status=400,
        shape="BatchEntryIdsNotDistinct",
    ):
        batch_call(sqs, url, operation, [batch_entry(operation, "x"), batch_entry(operation, "x")])
    with expect_error(
        sqs, "AWS.SimpleQueueService.TooManyEntriesInBatchRequest", status=400,
        shape="TooManyEntriesInBatchRequest",
    ):
        batch_call(sqs, url, operation, [batch_entry(operation, f"e{i}") for i in range(11)])
    with expect_error(
        sqs, "AWS.SimpleQueueService.EmptyBatchRequest", status=400, shape="EmptyBatchRequest"
    ):
        batch_call(sqs, url, operation, [])
    for bad_id in ["has space", "dot.id", "x" * 81]:
        with expect_error(
            sqs, "AWS.SimpleQueueService.InvalidBatchEntryId", status=400,
            shape="InvalidBatchEntryId",
        ):
            batch_call(sqs, url, operation, [batch_entry(operation, bad_id)])
    assert queue_counts(sqs, url) == (0, 0, 0), "a rejected batch must change nothing"


def test_send_message_batch_too_long(sqs, new_queue):
    url = new_queue(MaximumMessageSize=1_048_576)
    # Each entry is within the limit but together they exceed the 1 MiB batch payload limit.
    entries = [{"Id": f"e{i}", "MessageBody": "x" * 300_000} for i in range(4)]
    with expect_error(
        sqs, "AWS.SimpleQueueService.BatchRequestTooLong", status=400, shape="BatchRequestTooLong"
    ):
        sqs.send_message_batch(QueueUrl=url, Entries=entries)
    assert queue_counts(sqs, url) == (0, 0, 0)


@pytest.mark.parametrize("body", ["\x00", "\x01\x02", "\x1f", "\ufffe", "\uffff"])
def test_body_of_only_forbidden_characters_is_rejected(sqs, new_queue, body):
    url = new_queue()
    with expect_error(sqs, "InvalidMessageContents", status=400, shape="InvalidMessageContents"):
        sqs.send_message(QueueUrl=url, MessageBody=body)
    assert queue_counts(sqs, url) == (0, 0, 0)


def test_body_with_a_forbidden_character_is_never_stored_raw(sqs, new_queue):
    # SQS rejected such bodies with InvalidMessageContents for years; since 2025 AWS documents
    # that it "replaces those invalid characters with U+FFFD before storing the message ... as
    # long as the message body contains at least one valid character". Either behaviour is SQS's;
    # storing the raw control character (which the Query protocol cannot even express in XML 1.0)
    # is not.
    url = new_queue()
    try:
        sqs.send_message(QueueUrl=url, MessageBody="before\x00after\x01")
    except sqs.exceptions.ClientError as error:
        assert error.response["Error"]["Code"] == "InvalidMessageContents", error.response
        assert queue_counts(sqs, url) == (0, 0, 0)
        return
    assert receive_one(sqs, url)["Body"] == "before\ufffdafter\ufffd"


def test_message_over_maximum_size_is_rejected(sqs, new_queue):
    url = new_queue(MaximumMessageSize=1024)
    sqs.send_message(QueueUrl=url, MessageBody="x" * 1024)
    # Real SQS: InvalidParameterValue, "One or more parameters are invalid. Reason: Message must
    # be shorter than 1024 bytes."
    with expect_error(sqs, "InvalidParameterValue", status=400):
        sqs.send_message(QueueUrl=url, MessageBody="x" * 1025)
    # Attributes count toward the size as well (name + type + value bytes).
    with expect_error(sqs, "InvalidParameterValue", status=400):
        sqs.send_message(
            QueueUrl=url,
            MessageBody="x" * 1000,
            MessageAttributes={"pad": {"DataType": "String", "StringValue": "y" * 100}},
        )
    assert queue_counts(sqs, url) == (1, 0, 0)


def test_send_to_unknown_queue(sqs, new_queue):
    url = new_queue()
    missing = url + "-missing"
    with expect_error(
        sqs, "AWS.SimpleQueueService.NonExistentQueue", status=400, shape="QueueDoesNotExist"
    ):
        sqs.send_message(QueueUrl=missing, MessageBody="lost")
    with expect_error(
        sqs, "AWS.SimpleQueueService.NonExistentQueue", status=400, shape="QueueDoesNotExist"
    ):
        sqs.receive_message(QueueUrl=missing)


def test_binary_attribute_is_base64_on_the_wire_and_bytes_in_boto3(sqs, new_queue):
    payload = base64.b64decode("AAECAwQFBgcICQ==")
    url = new_queue()
    attributes = {"blob": {"DataType": "Binary", "BinaryValue": payload}}
    sqs.send_message(QueueUrl=url, MessageBody="b", MessageAttributes=attributes)
    message = receive_one(sqs, url, MessageAttributeNames=["blob"])
    assert message["MessageAttributes"]["blob"]["BinaryValue"] == payload

