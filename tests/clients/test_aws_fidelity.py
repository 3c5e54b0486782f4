"""SQS as AWS answers it: one test per behaviour, each expected value taken from what AWS itself
answers, with its source beside it.

The same file runs in both venvs (scripts/test-clients.sh), so every test runs through the AWS
JSON 1.0 protocol (current boto3) and the Query protocol (boto3 1.28.70); the tests that speak
raw HTTP (the Query protocol over GET) run in both too. The Rust SDK's twin of this module is
crates/cli/tests/sdk/fidelity.rs.

Sources, abbreviated in the tests:
- [LS:name] LocalStack's tests/aws/services/sqs/test_sqs.py::name (or test_sqs_move_task.py),
  marked `@markers.aws.validated`: run against real AWS, the responses recorded in the
  neighbouring *.snapshot.json (github.com/localstack/localstack). Where the snapshot shows both
  protocols, "sqs" is JSON and "sqs_query" is Query.
- [API:X] the Amazon SQS API Reference page of X
  (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/API_X.html).
- [DG:page] the Amazon SQS Developer Guide page
  (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/page.html).
- [GH:repo#n] an AWS answer quoted by an SDK user in that GitHub issue.
"""

import base64
import json
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest
from botocore.exceptions import ClientError

from conftest import ACCOUNT_ID, expect_error, queue_arn


def error_of(call):
    """The ClientError's Error member and HTTP status of `call()`."""
    with pytest.raises(ClientError) as caught:
        call()
    response = caught.value.response
    return response["Error"], response["ResponseMetadata"]["HTTPStatusCode"]


def raw_get(url, params):
    """A plain, unsigned HTTP GET of `url?params` (the Query protocol over GET): (status, body)."""
    full = url + "?" + urllib.parse.urlencode(params)
    try:
        with urllib.request.urlopen(full, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


# --- FIFO delivery -------------------------------------------------------------------------------


def test_fifo_queue_delay_is_retroactive(sqs, new_queue, queue_name):
    # [DG:sqs-delay-queues]: "For FIFO queues, the per-queue delay setting is retroactive—changing
    # the setting affects the delay of messages already in the queue." and "For standard queues,
    # the per-queue delay setting is not retroactive". No waiting: 900 s (the maximum) is long
    # enough that only the change can make a message ready, or delay a ready one.
    fifo = sqs.create_queue(
        QueueName=queue_name() + ".fifo",
        Attributes={"FifoQueue": "true", "DelaySeconds": "900"},
    )["QueueUrl"]
    try:
        sqs.send_message(
            QueueUrl=fifo, MessageBody="a", MessageGroupId="g", MessageDeduplicationId="a"
        )
        assert "Messages" not in sqs.receive_message(QueueUrl=fifo)
        sqs.set_queue_attributes(QueueUrl=fifo, Attributes={"DelaySeconds": "0"})
        received = sqs.receive_message(QueueUrl=fifo, VisibilityTimeout=0)["Messages"]
        assert [message["Body"] for message in received] == ["a"]
        # Received once: its delay is over for good. A message never received is delayed again.
        sqs.send_message(
            QueueUrl=fifo, MessageBody="b", MessageGroupId="h", MessageDeduplicationId="b"
        )
        sqs.set_queue_attributes(QueueUrl=fifo, Attributes={"DelaySeconds": "900"})
        counts = sqs.get_queue_attributes(
            QueueUrl=fifo,
            AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesDelayed"],
        )["Attributes"]
        assert counts == {
            "ApproximateNumberOfMessages": "1",
            "ApproximateNumberOfMessagesDelayed": "1",
        }
        received = sqs.receive_message(QueueUrl=fifo, MaxNumberOfMessages=10)["Messages"]
        assert [message["Body"] for message in received] == ["a"]
    finally:
        sqs.delete_queue(QueueUrl=fifo)
    standard = new_queue(DelaySeconds=900)
    sqs.send_message(QueueUrl=standard, MessageBody="s")
    sqs.set_queue_attributes(QueueUrl=standard, Attributes={"DelaySeconds": "0"})
    assert "Messages" not in sqs.receive_message(QueueUrl=standard)


def test_fifo_groups_are_served_in_the_order_they_became_available(sqs, queue_name):
    # [LS:test_fifo_receive_message_with_zero_visibility_timeout]: g1-m1, g2-m1, g2-m2, g3-m1,
    # g1-m2 sent; a receive of 3 with VisibilityTimeout 0 returns g1-m1, g1-m2, g2-m1, and the
    # next receive of 10 exactly g3-m1, g1-m1, g1-m2, g2-m1, g2-m2 (the groups just received
    # queue behind g3). [LS:test_fifo_message_group_visibility_after_terminate_visibility_timeout]:
    # with g1-m1 and g1-m2 received and g1-m1 released, a receive of 3 returns g2-m1, g1-m1.
    def fifo(tag, **attributes):
        return sqs.create_queue(
            QueueName=queue_name(tag) + ".fifo",
            Attributes={"FifoQueue": "true", "ContentBasedDeduplication": "true", **attributes},
        )["QueueUrl"]

    def send(url, *bodies):
        for body in bodies:
            sqs.send_message(QueueUrl=url, MessageBody=body, MessageGroupId=body.split("-")[0])

    def bodies(response):
        return [message["Body"] for message in response.get("Messages", [])]

    first, second = fifo("zero"), fifo("release", VisibilityTimeout="30")
    try:
        send(first, "g1-m1", "g2-m1", "g2-m2", "g3-m1", "g1-m2")
        received = sqs.receive_message(QueueUrl=first, MaxNumberOfMessages=3, VisibilityTimeout=0)
        assert bodies(received) == ["g1-m1", "g1-m2", "g2-m1"]
        again = sqs.receive_message(QueueUrl=first, MaxNumberOfMessages=10, VisibilityTimeout=0)
        assert bodies(again) == ["g3-m1", "g1-m1", "g1-m2", "g2-m1", "g2-m2"]

        send(second, "g1-m1", "g1-m2", "g2-m1")
        held = sqs.receive_message(QueueUrl=second, MaxNumberOfMessages=2)["Messages"]
        assert [m["Body"] for m in held] == ["g1-m1", "g1-m2"]
        sqs.change_message_visibility(
            QueueUrl=second, ReceiptHandle=held[0]["ReceiptHandle"], VisibilityTimeout=0
        )
        after = sqs.receive_message(QueueUrl=second, MaxNumberOfMessages=3)
        assert bodies(after) == ["g2-m1", "g1-m1"]
    finally:
        sqs.delete_queue(QueueUrl=first)
        sqs.delete_queue(QueueUrl=second)


def test_fifo_receive_attempt_retry_resets_the_visibility_timeout(sqs, queue_name):
    # [API:ReceiveMessage] ReceiveRequestAttemptId: "During a visibility timeout, subsequent calls
    # with the same ReceiveRequestAttemptId return the same messages and receipt handles. If a
    # retry occurs within the deduplication interval, it resets the visibility timeout." A
    # retry with VisibilityTimeout 0 therefore makes the message visible at once (no waiting).
    fifo = sqs.create_queue(
        QueueName=queue_name() + ".fifo", Attributes={"FifoQueue": "true"}
    )["QueueUrl"]
    try:
        sqs.send_message(
            QueueUrl=fifo, MessageBody="a", MessageGroupId="g", MessageDeduplicationId="a"
        )
        first = sqs.receive_message(
            QueueUrl=fifo, VisibilityTimeout=600, ReceiveRequestAttemptId="try-1"
        )["Messages"]
        assert "Messages" not in sqs.receive_message(QueueUrl=fifo)
        retry = sqs.receive_message(
            QueueUrl=fifo, VisibilityTimeout=0, ReceiveRequestAttemptId="try-1"
        )["Messages"]
        assert [m["ReceiptHandle"] for m in retry] == [m["ReceiptHandle"] for m in first]
        again = sqs.receive_message(QueueUrl=fifo, AttributeNames=["ApproximateReceiveCount"])
        assert [(m["Body"], m["Attributes"]["ApproximateReceiveCount"]) for m in again["Messages"]] == [
            ("a", "2")
        ]
    finally:
        sqs.delete_queue(QueueUrl=fifo)


def test_fifo_batch_entry_without_group_fails_the_whole_request(sqs, queue_name):
    # [LS:test_send_batch_missing_message_group_id_for_fifo_queue]: InvalidParameterValue, 400,
    # "The request must contain the parameter MessageGroupId." (a single SendMessage says
    # MissingParameter, test_fifo.py); [LS:test_send_batch_missing_deduplication_id_for_fifo_queue]
    # likewise for a missing deduplication id. Nothing of the batch is sent.
    fifo = sqs.create_queue(
        QueueName=queue_name() + ".fifo", Attributes={"FifoQueue": "true"}
    )["QueueUrl"]
    try:
        cases = [
            ({"MessageDeduplicationId": "d"}, "The request must contain the parameter MessageGroupId."),
            (
                {"MessageGroupId": "g"},
                "The queue should either have ContentBasedDeduplication enabled or "
                "MessageDeduplicationId provided explicitly",
            ),
        ]
        for fields, message in cases:
            entries = [
                {"Id": "ok", "MessageBody": "a", "MessageGroupId": "g", "MessageDeduplicationId": "a"},
                {"Id": "bad", "MessageBody": "b", **fields},
            ]
            error, status = error_of(
                lambda: sqs.send_message_batch(QueueUrl=fifo, Entries=entries)
            )
            assert (error["Code"], error["Message"], status) == (
                "InvalidParameterValue",
                message,
                400,
            )
        assert "Messages" not in sqs.receive_message(QueueUrl=fifo)
    finally:
        sqs.delete_queue(QueueUrl=fifo)


# --- messages and attributes ---------------------------------------------------------------------


def test_empty_body_is_a_missing_parameter(sqs_unvalidated, new_queue):
    # [LS:test_send_empty_message]: MissingParameter, 400, both protocols.
    url = new_queue()
    error, status = error_of(lambda: sqs_unvalidated.send_message(QueueUrl=url, MessageBody=""))
    assert (error["Code"], error["Message"], status) == (
        "MissingParameter",
        "The request must contain the parameter MessageBody.",
        400,
    )


def test_batch_entry_over_the_maximum_size_fails_alone(sqs, new_queue):
    # [LS:test_send_batch_message_size]: with MaximumMessageSize 1024, the big entry fails with
    # InvalidParameterValue ("cannot be validated", sender fault) and the other is sent.
    url = new_queue(MaximumMessageSize=1024)
    answer = sqs.send_message_batch(
        QueueUrl=url,
        Entries=[
            {"Id": "big", "MessageBody": "a" * 1025},
            {"Id": "small", "MessageBody": "a" * 10},
        ],
    )
    assert [entry["Id"] for entry in answer["Successful"]] == ["small"]
    assert answer["Failed"] == [
        {
            "Id": "big",
            "Code": "InvalidParameterValue",
            "Message": "One or more parameters cannot be validated. Reason: Message must be "
            "shorter than 1024 bytes.",
            "SenderFault": True,
        }
    ]


def test_single_send_over_the_maximum_size(sqs, new_queue):
    # [LS:test_send_oversized_message]: SendMessage says "are invalid" where the batch says
    # "cannot be validated".
    url = new_queue(MaximumMessageSize=1024)
    error, status = error_of(lambda: sqs.send_message(QueueUrl=url, MessageBody="a" * 1025))
    assert (error["Code"], error["Message"], status) == (
        "InvalidParameterValue",
        "One or more parameters are invalid. Reason: Message must be shorter than 1024 bytes.",
        400,
    )


def test_batch_longer_than_the_limit_fails_whole(sqs, new_queue):
    # [LS:test_send_message_batch_with_oversized_contents]: bodies of 1048577 bytes in all fail
    # the whole request (400, BatchRequestTooLong), both protocols.
    url = new_queue()
    entries = [
        {"Id": "a", "MessageBody": "a" * 1048576},
        {"Id": "b", "MessageBody": "b"},
    ]
    with expect_error(
        sqs,
        "AWS.SimpleQueueService.BatchRequestTooLong",
        status=400,
        shape="BatchRequestTooLong",
    ) as caught:
        sqs.send_message_batch(QueueUrl=url, Entries=entries)
    assert caught.value.response["Error"]["Message"] == (
        "Batch requests cannot be longer than 1048576 bytes. You have sent 1048577 bytes."
    )


def test_empty_string_attribute_value(sqs_unvalidated, new_queue):
    # [LS:test_send_message_with_empty_string_attribute]: both protocols.
    url = new_queue()
    error, status = error_of(
        lambda: sqs_unvalidated.send_message(
            QueueUrl=url,
            MessageBody="test",
            MessageAttributes={"ErrorDetails": {"StringValue": "", "DataType": "String"}},
        )
    )
    assert (error["Code"], error["Message"], status) == (
        "InvalidParameterValue",
        "Message (user) attribute 'ErrorDetails' must contain a non-empty value of type 'String'.",
        400,
    )


def test_empty_string_attribute_value_in_a_batch_entry(sqs_unvalidated, new_queue):
    # The same check per batch entry: the entry fails alone with the same code and sentence
    # ([LS:test_send_message_with_empty_string_attribute] for the sentence; [API:SendMessageBatch]
    # "the result of each message is reported individually in the response").
    url = new_queue()
    answer = sqs_unvalidated.send_message_batch(
        QueueUrl=url,
        Entries=[
            {
                "Id": "empty",
                "MessageBody": "test",
                "MessageAttributes": {"E": {"StringValue": "", "DataType": "String"}},
            },
            {"Id": "fine", "MessageBody": "test"},
        ],
    )
    assert [entry["Id"] for entry in answer["Successful"]] == ["fine"]
    assert [(f["Id"], f["Code"], f["Message"]) for f in answer["Failed"]] == [
        (
            "empty",
            "InvalidParameterValue",
            "Message (user) attribute 'E' must contain a non-empty value of type 'String'.",
        )
    ]


def test_string_attribute_with_characters_outside_the_allowed_set(sqs, new_queue):
    # [LS:test_invalid_string_attributes_cause_invalid_parameter_value_error]: a String value
    # holding chr(8) and chr(11) is InvalidParameterValue ([API:SendMessage]: the allowed set is
    # #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF).
    url = new_queue()
    error, status = error_of(
        lambda: sqs.send_message(
            QueueUrl=url,
            MessageBody="test",
            MessageAttributes={
                "attr1": {"StringValue": f"Invalid-{chr(8)},{chr(11)}", "DataType": "String"}
            },
        )
    )
    assert (error["Code"], status) == ("InvalidParameterValue", 400)
    assert "Invalid" in error["Message"]
    assert "#x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF" in (
        error["Message"]
    )


def test_attribute_name_rules(sqs, new_queue):
    # [LS:test_send_message_with_invalid_string_attributes]: AWS takes "attr.1øßä" (Unicode
    # letters, though [DG:sqs-message-metadata] lists only A-Z, a-z and 0-9) and refuses names
    # starting "aWs.", "AMAZON." or ".", holding "!", '"', "§", "(" or "?", ending in "." or
    # longer than 256 characters, each InvalidParameterValue, 400. The sentences: AWS has not
    # published them; these are AWS's answers as LocalStack's SNS provider and Eucalyptus's SQS
    # service both word them (SNS message attributes follow the same rules).
    url = new_queue()

    def send(name):
        return sqs.send_message(
            QueueUrl=url,
            MessageBody="test",
            MessageAttributes={name: {"StringValue": "Valid", "DataType": "String"}},
        )

    assert send("attr.1øßä")["MD5OfMessageAttributes"]
    reserved = "Message attribute names starting with 'AWS.' or 'Amazon.' are reserved for use by Amazon."

    def character(c):
        return (
            f"Invalid non-alphanumeric character '#x{ord(c):X}' was found in the message "
            "attribute name. Can only include alphanumeric characters, hyphens, underscores, "
            "or dots."
        )

    cases = {
        "aWs.-Invalid-attr": reserved,
        "AMAZON.-Invalid-attr": reserved,
        ".-Invalid-attr": "Invalid message attribute name starting with character '.' was found.",
        "Invalid.": "Invalid message attribute name ending with character '.' was found.",
        "Invalid..Name": "Message attribute name can not have successive '.' character.",
        **{f"Invalid-{c}-attr": character(c) for c in ["!", '"', "§", "(", "?"]},
    }
    for name, message in cases.items():
        error, status = error_of(lambda: send(name))
        assert (error["Code"], error["Message"], status) == (
            "InvalidParameterValue",
            message,
            400,
        ), name
    error, status = error_of(lambda: send("L" * 257))
    assert (error["Code"], status) == ("InvalidParameterValue", 400)


def test_unknown_attribute_type(sqs_unvalidated, new_queue):
    # AWS's current sentence, as quoted in [GH:grafana/k6-jslib-aws#65] (2023).
    url = new_queue()
    error, _ = error_of(
        lambda: sqs_unvalidated.send_message(
            QueueUrl=url,
            MessageBody="test",
            MessageAttributes={"my-attribute": {"StringValue": "v", "DataType": "Text"}},
        )
    )
    assert (error["Code"], error["Message"]) == (
        "InvalidParameterValue",
        "The type of message (user) attribute 'my-attribute' is invalid. You must use only the "
        "following supported type prefixes: Binary, Number, String.",
    )


def test_more_than_ten_attributes(sqs, new_queue):
    # [DG:sqs-message-metadata] / [API:SendMessage]: "each message can have up to 10 attributes";
    # the wording as AWS answered it [GH:aws/aws-sdk-js#2876] ("message attributes [11] exceeds
    # the allowed maximum"; the SDK does not count attributes, the service does).
    url = new_queue()
    attributes = {f"a{i}": {"StringValue": "v", "DataType": "String"} for i in range(11)}
    error, _ = error_of(
        lambda: sqs.send_message(QueueUrl=url, MessageBody="test", MessageAttributes=attributes)
    )
    assert error["Code"] == "InvalidParameterValue"
    assert "Number of message attributes [11] exceeds the allowed maximum [10]." in (
        error["Message"]
    )


@pytest.mark.parametrize("member", ["StringListValues", "BinaryListValues"])
def test_list_valued_attributes_are_unsupported(sqs_unvalidated, new_queue, member):
    # [GH:ruby-shoryuken/shoryuken#769], [GH:lumigo-io/lumigo-CLI#94]: AWS answers
    # "AWS.SimpleQueueService.UnsupportedOperation: Message attribute list values in
    # SendMessageBatch operation are not supported." ([API:MessageAttributeValue]: the list
    # members are "Not implemented. Reserved for future use.").
    url = new_queue()
    value = {"DataType": "String", member: ["a"] if member == "StringListValues" else [b"a"]}
    with expect_error(
        sqs_unvalidated,
        "AWS.SimpleQueueService.UnsupportedOperation",
        status=400,
        shape="UnsupportedOperation",
    ) as caught:
        sqs_unvalidated.send_message_batch(
            QueueUrl=url,
            Entries=[{"Id": "a", "MessageBody": "x", "MessageAttributes": {"L": value}}],
        )
    assert caught.value.response["Error"]["Message"] == (
        "Message attribute list values in SendMessageBatch operation are not supported."
    )
    with pytest.raises(ClientError) as single:
        sqs_unvalidated.send_message(
            QueueUrl=url, MessageBody="x", MessageAttributes={"L": value}
        )
    assert single.value.response["Error"]["Message"] == (
        "Message attribute list values in SendMessage operation are not supported."
    )


def test_message_attribute_names_filters(sqs, new_queue):
    # [LS:test_receive_message_message_attribute_names_filters]: with attributes General, Hello
    # and Help.Me, "All", "*" and ".*" select all, names select themselves, "Hel.*" selects
    # Hello and Help.Me by prefix, unknown names select nothing (no MessageAttributes member),
    # and names SQS would never accept ("AWS.", "..foo") are not errors on receive.
    url = new_queue(VisibilityTimeout=0)
    attributes = {
        "Help.Me": {"DataType": "String", "StringValue": "Me"},
        "Hello": {"DataType": "String", "StringValue": "There"},
        "General": {"DataType": "String", "StringValue": "Kenobi"},
    }
    sqs.send_message(QueueUrl=url, MessageBody="msg", MessageAttributes=attributes)

    def names(filters):
        message = sqs.receive_message(QueueUrl=url, MessageAttributeNames=filters)["Messages"][0]
        return sorted(message.get("MessageAttributes", {}))

    assert names([]) == []
    assert names(["All"]) == ["General", "Hello", "Help.Me"]
    assert names([".*"]) == ["General", "Hello", "Help.Me"]
    assert names(["Foo", "Help"]) == []
    assert names(["General", "Hello"]) == ["General", "Hello"]
    assert names(["Hello", "Foo"]) == ["Hello"]
    assert names(["*"]) == ["General", "Hello", "Help.Me"]
    assert names(["Hel.*"]) == ["Hello", "Help.Me"]
    assert names(["Help.*"]) == ["Help.Me"]
    assert names(["AWS."]) == []
    assert names(["..foo"]) == []


def test_aws_trace_header_round_trip(sqs, new_queue):
    # [LS:test_system_attributes_have_no_effect_on_attr_md5]: the AWSTraceHeader system attribute
    # leaves MD5OfMessageAttributes alone and has its own MD5OfMessageSystemAttributes
    # (5ae4d5d7636402d80f4eb6d213245a88 for this header); [API:ReceiveMessage]: AWSTraceHeader
    # is returned when asked for.
    url = new_queue()
    header = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
    user = {"timestamp": {"StringValue": "1493147359900", "DataType": "Number"}}
    plain = sqs.send_message(QueueUrl=url, MessageBody="test", MessageAttributes=user)
    traced = sqs.send_message(
        QueueUrl=url,
        MessageBody="test",
        MessageAttributes=user,
        MessageSystemAttributes={"AWSTraceHeader": {"StringValue": header, "DataType": "String"}},
    )
    assert plain["MD5OfMessageAttributes"] == traced["MD5OfMessageAttributes"]
    assert "MD5OfMessageSystemAttributes" not in plain
    assert traced["MD5OfMessageSystemAttributes"] == "5ae4d5d7636402d80f4eb6d213245a88"
    received = sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["AWSTraceHeader"]
    )["Messages"]
    by_id = {message["MessageId"]: message for message in received}
    assert by_id[traced["MessageId"]]["Attributes"] == {"AWSTraceHeader": header}
    assert "Attributes" not in by_id[plain["MessageId"]]


def test_trace_header_from_the_http_header(sqs, new_queue):
    # [LS:test_aws_trace_header_propagation]: a SendMessage that carries X-Amzn-Trace-Id (and no
    # AWSTraceHeader attribute) is received with the header's value as AWSTraceHeader.
    url = new_queue()
    header = "Root=1-3152b799-8954dae64eda91bc9a23a7e8;Parent=7fa8c0f79203be72;Sampled=1"

    def add_header(request, **_):
        request.headers["X-Amzn-Trace-Id"] = header

    sqs.meta.events.register("before-send.sqs.SendMessage", add_header)
    try:
        sqs.send_message(QueueUrl=url, MessageBody="test")
    finally:
        sqs.meta.events.unregister("before-send.sqs.SendMessage", add_header)
    message = sqs.receive_message(
        QueueUrl=url, AttributeNames=["SentTimestamp", "AWSTraceHeader"]
    )["Messages"][0]
    assert message["Attributes"]["AWSTraceHeader"] == header
    assert set(message["Attributes"]) == {"AWSTraceHeader", "SentTimestamp"}


# --- queues --------------------------------------------------------------------------------------


def test_create_queue_deleted_recently(sqs, queue_name):
    # [API:CreateQueue] Errors: QueueDeletedRecently ("You must wait 60 seconds after deleting a
    # queue before you can create another with the same name."), HTTP 400; [API:DeleteQueue]:
    # "When you delete a queue, you must wait at least 60 seconds before creating a queue with
    # the same name." (The wait's end is checked with a jumped clock in the conformance script
    # crates/conformance/scripts/fidelity.txt.)
    name = queue_name()
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    sqs.delete_queue(QueueUrl=url)
    with expect_error(
        sqs,
        "AWS.SimpleQueueService.QueueDeletedRecently",
        status=400,
        shape="QueueDeletedRecently",
    ) as caught:
        sqs.create_queue(QueueName=name)
    assert caught.value.response["Error"]["Message"] == (
        "You must wait 60 seconds after deleting a queue before you can create another with the "
        "same name."
    )


def test_purge_twice_names_the_queue(sqs, queue_name):
    # [LS:test_successive_purge_calls_fail]: 403, the message names the queue.
    name = queue_name()
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    sqs.purge_queue(QueueUrl=url)
    with expect_error(
        sqs,
        "AWS.SimpleQueueService.PurgeQueueInProgress",
        status=403,
        shape="PurgeQueueInProgress",
    ) as caught:
        sqs.purge_queue(QueueUrl=url)
    assert caught.value.response["Error"]["Message"] == (
        f"Only one PurgeQueue operation on {name} is allowed every 60 seconds."
    )
    sqs.delete_queue(QueueUrl=url)


def test_queue_attributes_set_to_defaults(sqs, new_queue):
    # [LS:test_set_queue_attributes_default_values]: a new queue has SSE-SQS on; a KMS key turns
    # it off; setting KmsMasterKeyId "" and KmsDataKeyReusePeriodSeconds "300" (the defaults)
    # removes both from the answer and SSE-SQS stays off.
    url = new_queue()

    def attributes():
        found = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
        for name in ["CreatedTimestamp", "LastModifiedTimestamp", "QueueArn"]:
            assert found.pop(name)
        return found

    defaults = {
        "ApproximateNumberOfMessages": "0",
        "ApproximateNumberOfMessagesDelayed": "0",
        "ApproximateNumberOfMessagesNotVisible": "0",
        "DelaySeconds": "0",
        "MaximumMessageSize": "1048576",
        "MessageRetentionPeriod": "345600",
        "ReceiveMessageWaitTimeSeconds": "0",
        "VisibilityTimeout": "30",
    }
    assert attributes() == {**defaults, "SqsManagedSseEnabled": "true"}
    sqs.set_queue_attributes(
        QueueUrl=url,
        Attributes={"KmsMasterKeyId": "testKeyId", "KmsDataKeyReusePeriodSeconds": "6000"},
    )
    assert attributes() == {
        **defaults,
        "KmsDataKeyReusePeriodSeconds": "6000",
        "KmsMasterKeyId": "testKeyId",
        "SqsManagedSseEnabled": "false",
    }
    sqs.set_queue_attributes(
        QueueUrl=url,
        Attributes={"KmsMasterKeyId": "", "KmsDataKeyReusePeriodSeconds": "300"},
    )
    assert attributes() == {**defaults, "SqsManagedSseEnabled": "false"}


def test_kms_and_sqs_encryption_are_exclusive(sqs, new_queue):
    # [LS:test_sse_kms_and_sqs_are_mutually_exclusive]: SetQueueAttributes with a KmsMasterKeyId
    # and SqsManagedSseEnabled=true is InvalidAttributeName, in AWS's words.
    url = new_queue()
    error, status = error_of(
        lambda: sqs.set_queue_attributes(
            QueueUrl=url,
            Attributes={"KmsMasterKeyId": "testKeyId", "SqsManagedSseEnabled": "true"},
        )
    )
    assert (error["Code"], error["Message"], status) == (
        "InvalidAttributeName",
        "You can use one type of server-side encryption (SSE) at one time. You can either "
        "enable KMS SSE or SQS SSE.",
        400,
    )


def test_fifo_queue_true_on_a_fifo_queue_is_accepted(sqs, new_queue, queue_name):
    # [LS:test_set_unsupported_attribute_fifo]: SetQueueAttributes FifoQueue=true on a FIFO queue
    # succeeds; false is InvalidAttributeValue; on a standard queue either is an unknown attribute.
    fifo = sqs.create_queue(
        QueueName=queue_name() + ".fifo", Attributes={"FifoQueue": "true"}
    )["QueueUrl"]
    try:
        sqs.set_queue_attributes(QueueUrl=fifo, Attributes={"FifoQueue": "true"})
        error, status = error_of(
            lambda: sqs.set_queue_attributes(QueueUrl=fifo, Attributes={"FifoQueue": "false"})
        )
        assert (error["Code"], error["Message"], status) == (
            "InvalidAttributeValue",
            "Invalid value for the parameter FifoQueue. Reason: Modifying queue type is not "
            "supported.",
            400,
        )
    finally:
        sqs.delete_queue(QueueUrl=fifo)
    standard = new_queue()
    error, _ = error_of(
        lambda: sqs.set_queue_attributes(QueueUrl=standard, Attributes={"FifoQueue": "true"})
    )
    assert (error["Code"], error["Message"]) == (
        "InvalidAttributeName",
        "Unknown Attribute FifoQueue.",
    )


def test_list_queues_pagination(sqs, queue_name):
    # [LS:test_list_queues_pagination]: 10 queues; MaxResults 2 gives two URLs and a NextToken;
    # that token with MaxResults 10 gives the other eight and no NextToken. [API:ListQueues]:
    # without MaxResults there is no NextToken ("you must set MaxResults to receive a value for
    # NextToken"); MaxResults is 1 to 1000.
    prefix = queue_name("page")
    urls = [sqs.create_queue(QueueName=f"{prefix}-{i}")["QueueUrl"] for i in range(10)]
    try:
        everything = sqs.list_queues(QueueNamePrefix=prefix)
        assert everything["QueueUrls"] == urls
        assert "NextToken" not in everything
        first = sqs.list_queues(QueueNamePrefix=prefix, MaxResults=2)
        assert first["QueueUrls"] == urls[:2]
        rest = sqs.list_queues(
            QueueNamePrefix=prefix, MaxResults=10, NextToken=first["NextToken"]
        )
        assert rest["QueueUrls"] == urls[2:]
        assert "NextToken" not in rest
        exact = sqs.list_queues(QueueNamePrefix=prefix, MaxResults=10)
        assert exact["QueueUrls"] == urls and "NextToken" not in exact
    finally:
        for url in urls:
            sqs.delete_queue(QueueUrl=url)


def test_empty_results(sqs, new_queue, queue_name):
    # [LS:test_receive_empty_queue]: an empty receive has no Messages member (short and long
    # poll); [API:ListQueues]: no queue, no QueueUrls member.
    url = new_queue()
    assert "Messages" not in sqs.receive_message(QueueUrl=url)
    assert "Messages" not in sqs.receive_message(QueueUrl=url, WaitTimeSeconds=1)
    assert "QueueUrls" not in sqs.list_queues(QueueNamePrefix=queue_name("none"))


def test_permission_policy_document(sqs, new_queue):
    # [LS:test_sqs_permission_lifecycle]: the Policy AddPermission writes, the errors of a second
    # label and of an unknown one, and no Policy once the last statement is removed.
    url = new_queue()
    arn = queue_arn(sqs, url)
    sqs.add_permission(
        QueueUrl=url,
        AWSAccountIds=[ACCOUNT_ID, "668614515564"],
        Actions=["ReceiveMessage"],
        Label="crossaccountpermission",
    )
    policy = json.loads(
        sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"])["Attributes"]["Policy"]
    )
    assert policy == {
        "Version": "2008-10-17",
        "Id": f"{arn}/SQSDefaultPolicy",
        "Statement": [
            {
                "Sid": "crossaccountpermission",
                "Effect": "Allow",
                "Principal": {
                    "AWS": [
                        f"arn:aws:iam::{ACCOUNT_ID}:root",
                        "arn:aws:iam::668614515564:root",
                    ]
                },
                "Action": "SQS:ReceiveMessage",
                "Resource": arn,
            }
        ],
    }
    error, status = error_of(
        lambda: sqs.add_permission(
            QueueUrl=url,
            AWSAccountIds=[ACCOUNT_ID],
            Actions=["ReceiveMessage"],
            Label="crossaccountpermission",
        )
    )
    assert (error["Code"], error["Message"], status) == (
        "InvalidParameterValue",
        "Value crossaccountpermission for parameter Label is invalid. Reason: Already exists.",
        400,
    )
    sqs.remove_permission(QueueUrl=url, Label="crossaccountpermission")
    after = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["Policy"])
    assert "Attributes" not in after
    error, status = error_of(
        lambda: sqs.remove_permission(QueueUrl=url, Label="crossaccountpermission2")
    )
    assert (error["Code"], error["Message"], status) == (
        "InvalidParameterValue",
        "Value crossaccountpermission2 for parameter Label is invalid. Reason: can't find label.",
        400,
    )


def test_missing_queue_on_each_protocol(sqs, protocol, queue_name):
    # [LS:test_non_existent_queue]: 400 NonExistentQueue; JSON says "The specified queue does
    # not exist.", Query "The specified queue does not exist for this wsdl version."
    error, status = error_of(lambda: sqs.get_queue_url(QueueName=queue_name("missing")))
    message = {
        "json": "The specified queue does not exist.",
        "query": "The specified queue does not exist for this wsdl version.",
    }[protocol]
    assert (error["Code"], error["Message"], status) == (
        "AWS.SimpleQueueService.NonExistentQueue",
        message,
        400,
    )
    if protocol == "json":
        assert error["QueryErrorCode"] == "QueueDoesNotExist"


def test_deleted_queue_on_each_protocol(sqs, protocol, queue_name):
    # [LS:TestSqsQueryApi.test_get_on_deleted_queue_fails] (Query) and [LS:test_non_existent_queue]
    # (JSON, "queue-does-not-exist-url"): a request naming a deleted queue's URL.
    url = sqs.create_queue(QueueName=queue_name())["QueueUrl"]
    sqs.delete_queue(QueueUrl=url)
    error, status = error_of(lambda: sqs.send_message(QueueUrl=url, MessageBody="x"))
    assert (error["Code"], status) == ("AWS.SimpleQueueService.NonExistentQueue", 400)
    assert error["Message"].startswith("The specified queue does not exist")
    assert error["Message"].endswith(
        "for this wsdl version." if protocol == "query" else "does not exist."
    )


# --- the Query protocol over HTTP GET ----------------------------------------------------------


def test_query_over_get(sqs, new_queue):
    # [LS:TestSqsQueryApi.test_get_send_and_receive_messages] and
    # [LS:TestSqsQueryApi.test_get_queue_attributes_with_query_args]: GET on a queue's URL sends,
    # receives and reads attributes; an empty receive is an empty <ReceiveMessageResult/>.
    url = new_queue()
    empty = new_queue("empty")
    status, body = raw_get(url, {"Action": "SendMessage", "MessageBody": "foobar"})
    assert status == 200 and "<SendMessageResponse" in body
    status, body = raw_get(empty, {"Action": "ReceiveMessage"})
    assert status == 200 and "<ReceiveMessageResult/>" in body.replace(" />", "/>")
    status, body = raw_get(url, {"Action": "ReceiveMessage"})
    assert status == 200 and "<Body>foobar</Body>" in body and "<MD5OfBody>" in body
    status, body = raw_get(url, {"Action": "GetQueueAttributes", "AttributeName.1": "QueueArn"})
    assert status == 200
    assert "<Attribute><Name>QueueArn</Name><Value>arn:aws:sqs:" in body
    assert "<Name>VisibilityTimeout</Name>" not in body


def test_query_get_errors(sqs, new_queue):
    # [LS:TestSqsQueryApi]: test_invalid_action_raises_exception,
    # test_valid_action_with_missing_parameter_raises_exception, test_get_create_queue_fails,
    # test_get_list_queues_fails, test_get_queue_attributes_with_invalid_arg_returns_error.
    url = new_queue()
    status, body = raw_get(url, {"Action": "FooBar", "Version": "2012-11-05"})
    assert status == 400
    assert "<Code>InvalidAction</Code>" in body and "<Type>Sender</Type>" in body
    assert "<Message>The action FooBar is not valid for this endpoint.</Message>" in body
    status, body = raw_get(url, {"Action": "SendMessage"})
    assert status == 400 and "<Code>MissingParameter</Code>" in body
    assert "<Message>The request must contain the parameter MessageBody.</Message>" in body
    for action in ["CreateQueue", "ListQueues"]:
        status, body = raw_get(url, {"Action": action, "QueueName": "x"})
        assert status == 400 and "<Code>InvalidAction</Code>" in body, action
        assert f"<Message>The action {action} is not valid for this endpoint" in body, action
    status, body = raw_get(url, {"Action": "GetQueueAttributes", "AttributeName.1": "Foobar"})
    assert status == 400 and "<Code>InvalidAttributeName</Code>" in body
    assert "<Message>Unknown Attribute Foobar.</Message>" in body


def test_get_of_a_queue_url_without_parameters(new_queue):
    # [LS:TestSqsQueryApi.test_get_without_query_returns_unknown_operation] and
    # test_get_without_query_json_format_returns_returns_xml: 404, an UnknownOperationException
    # document, XML even when JSON is asked for.
    url = new_queue()
    for headers in [{}, {"Accept": "application/json"}]:
        request = urllib.request.Request(url, headers=headers)
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(request, timeout=10)
        assert caught.value.code == 404
        assert "<UnknownOperationException" in caught.value.read().decode()


def test_unknown_action_on_each_protocol(sqs, protocol):
    # [LS:TestSqsQueryApi.test_invalid_action_raises_exception]: InvalidAction, 400, "The action
    # FooBar is not valid for this endpoint."; over JSON the same as UnknownOperationException.
    endpoint = sqs.meta.endpoint_url
    if protocol == "query":
        status, body = raw_get(endpoint + "/", {"Action": "FooBar"})
        assert status == 400 and "<Code>InvalidAction</Code>" in body
        assert "The action FooBar is not valid for this endpoint." in body
    else:
        request = urllib.request.Request(
            endpoint + "/",
            data=b"{}",
            headers={
                "X-Amz-Target": "AmazonSQS.FooBar",
                "Content-Type": "application/x-amz-json-1.0",
            },
        )
        with pytest.raises(urllib.error.HTTPError) as caught:
            urllib.request.urlopen(request, timeout=10)
        assert caught.value.code == 400
        assert caught.value.headers["x-amzn-query-error"] == "InvalidAction;Sender"
        document = json.loads(caught.value.read())
        assert document["__type"] == "com.amazon.coral.service#UnknownOperationException"


# --- message move tasks --------------------------------------------------------------------------


def dead_letter_queue(sqs, new_queue, count):
    dlq = new_queue("dlq")
    dlq_arn = queue_arn(sqs, dlq)
    source = new_queue(
        "src",
        RedrivePolicy=json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "1"}),
    )
    for i in range(count):
        sqs.send_message(QueueUrl=source, MessageBody=f"m{i}")
    moved = 0
    while moved < count:
        answer = sqs.receive_message(QueueUrl=source, MaxNumberOfMessages=10, VisibilityTimeout=0)
        moved += len(answer.get("Messages", []))
    sqs.receive_message(QueueUrl=source, MaxNumberOfMessages=10)
    return source, dlq, dlq_arn


def test_task_handle_format(sqs, new_queue):
    # AWS publishes no format for a TaskHandle ([API:StartMessageMoveTask]: "An identifier
    # associated with a message movement task"). Ours is base64 of the JSON document
    # {"taskId": …, "sourceArn": …}, LocalStack's encode_move_task_handle, because AWS parses
    # that form: [LS:test_sqs_move_task.py::test_cancel_with_invalid_task_id_in_task_handle]
    # sends such a handle with a made-up task id and AWS answers "Task does not exist." (and
    # [LS:test_cancel_with_invalid_source_arn_in_task_handle]: an unknown sourceArn in it is a
    # missing SourceArn), where a handle of any other form is "Value for parameter TaskHandle is
    # invalid." (test_move_task_errors).
    _, _, dlq_arn = dead_letter_queue(sqs, new_queue, 5)
    handle = sqs.start_message_move_task(SourceArn=dlq_arn, MaxNumberOfMessagesPerSecond=1)[
        "TaskHandle"
    ]
    document = json.loads(base64.b64decode(handle, validate=True))
    assert list(document) == ["taskId", "sourceArn"]
    assert document["sourceArn"] == dlq_arn
    sqs.cancel_message_move_task(TaskHandle=handle)


def test_move_task_errors(sqs, new_queue):
    # [LS:test_sqs_move_task.py]: test_cancel_with_invalid_task_handle,
    # test_cancel_with_invalid_source_arn_in_task_handle,
    # test_cancel_with_invalid_task_id_in_task_handle, test_source_needs_redrive_policy,
    # test_start_multiple_move_tasks, test_destination_needs_to_exist (codes, statuses, messages).
    _, _, dlq_arn = dead_letter_queue(sqs, new_queue, 2)
    error, status = error_of(lambda: sqs.cancel_message_move_task(TaskHandle="foobared"))
    assert (error["Code"], error["Message"], status) == (
        "InvalidParameterValue",
        "Value for parameter TaskHandle is invalid.",
        400,
    )

    def handle(task_id, source_arn):
        text = json.dumps({"taskId": task_id, "sourceArn": source_arn}, separators=(",", ":"))
        return base64.b64encode(text.encode()).decode()

    missing_source = dlq_arn + "-gone"
    error, status = error_of(
        lambda: sqs.cancel_message_move_task(
            TaskHandle=handle("10f57157-fc38-4da9-a113-4de7e12d05dd", missing_source)
        )
    )
    assert (error["Code"], error["Message"], status) == (
        "ResourceNotFoundException",
        "The resource that you specified for the SourceArn parameter doesn't exist.",
        404,
    )
    error, status = error_of(
        lambda: sqs.cancel_message_move_task(
            TaskHandle=handle("10f57157-fc38-4da9-a113-4de7e12d05aa", dlq_arn)
        )
    )
    assert (error["Code"], error["Message"], status) == (
        "ResourceNotFoundException",
        "Task does not exist.",
        404,
    )
    not_a_dlq = queue_arn(sqs, new_queue("plain"))
    error, status = error_of(lambda: sqs.start_message_move_task(SourceArn=not_a_dlq))
    assert (error["Code"], error["Message"], status) == (
        "InvalidParameterValue",
        "Source queue must be configured as a Dead Letter Queue.",
        400,
    )
    error, status = error_of(
        lambda: sqs.start_message_move_task(SourceArn=dlq_arn, DestinationArn=dlq_arn + "-gone")
    )
    assert (error["Code"], error["Message"], status) == (
        "ResourceNotFoundException",
        "The resource that you specified for the DestinationArn parameter doesn't exist.",
        404,
    )
    first = sqs.start_message_move_task(SourceArn=dlq_arn, MaxNumberOfMessagesPerSecond=1)
    error, status = error_of(lambda: sqs.start_message_move_task(SourceArn=dlq_arn))
    assert (error["Code"], error["Message"], status) == (
        "InvalidParameterValue",
        "There is already a task running. Only one active task is allowed for a source queue "
        "arn at a given time.",
        400,
    )
    sqs.cancel_message_move_task(TaskHandle=first["TaskHandle"])


def test_list_move_tasks_fields_per_status(sqs, new_queue):
    # [LS:test_sqs_move_task.py::test_move_task_cancel]: a RUNNING task lists its TaskHandle and
    # MaxNumberOfMessagesPerSecond (given at start); once CANCELLED, no TaskHandle.
    # [LS:test_basic_move_task_workflow]: COMPLETED without rate or handle; DestinationArn only
    # when one was given ([API:ListMessageMoveTasksResultEntry]: TaskHandle "is only populated
    # for tasks that are in RUNNING status"; FailureReason "only included if the task status
    # is FAILED").
    _, _, dlq_arn = dead_letter_queue(sqs, new_queue, 3)
    handle = sqs.start_message_move_task(SourceArn=dlq_arn, MaxNumberOfMessagesPerSecond=1)[
        "TaskHandle"
    ]
    running = sqs.list_message_move_tasks(SourceArn=dlq_arn)["Results"][0]
    assert set(running) == {
        "ApproximateNumberOfMessagesMoved",
        "ApproximateNumberOfMessagesToMove",
        "MaxNumberOfMessagesPerSecond",
        "SourceArn",
        "StartedTimestamp",
        "Status",
        "TaskHandle",
    }
    assert (running["Status"], running["TaskHandle"]) == ("RUNNING", handle)
    sqs.cancel_message_move_task(TaskHandle=handle)
    cancelled = sqs.list_message_move_tasks(SourceArn=dlq_arn)["Results"][0]
    assert cancelled["Status"] == "CANCELLED"
    assert set(cancelled) == set(running) - {"TaskHandle"}
    sqs.start_message_move_task(SourceArn=dlq_arn)
    deadline = time.time() + 10
    while True:
        completed = sqs.list_message_move_tasks(SourceArn=dlq_arn)["Results"][0]
        if completed["Status"] == "COMPLETED" or time.time() > deadline:
            break
        time.sleep(0.05)
    assert set(completed) == {
        "ApproximateNumberOfMessagesMoved",
        "ApproximateNumberOfMessagesToMove",
        "SourceArn",
        "StartedTimestamp",
        "Status",
    }
    assert completed["Status"] == "COMPLETED"


def test_move_task_fails_when_its_destination_is_deleted(sqs, new_queue, queue_name):
    # [LS:test_sqs_move_task.py::test_move_task_delete_destination_queue_while_running]: FAILED,
    # FailureReason AWS.SimpleQueueService.NonExistentQueue, DestinationArn still listed.
    _, _, dlq_arn = dead_letter_queue(sqs, new_queue, 5)
    destination = sqs.create_queue(QueueName=queue_name("dest"))["QueueUrl"]
    destination_arn = queue_arn(sqs, destination)
    sqs.start_message_move_task(
        SourceArn=dlq_arn, DestinationArn=destination_arn, MaxNumberOfMessagesPerSecond=1
    )
    sqs.delete_queue(QueueUrl=destination)
    task = sqs.list_message_move_tasks(SourceArn=dlq_arn)["Results"][0]
    assert task["Status"] == "FAILED"
    assert task["FailureReason"] == "AWS.SimpleQueueService.NonExistentQueue"
    assert task["DestinationArn"] == destination_arn
    assert "TaskHandle" not in task
