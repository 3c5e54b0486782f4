"""Lease scenarios over the wire: expiry and redelivery, stale receipts, extension, release,
dead-letter moves, delays and long polling.

These run against the server's real clock, so they wait; visibility timeouts of 1-3 s keep the
file to a few seconds per test. Waits are long polls wherever possible, so a test also checks
that the server wakes a waiting receive when a lease expires or a delay ends, instead of sleeping.
"""

import json
import threading
import time

from conftest import expect_error, queue_arn, queue_counts


def receive(sqs, url, wait_seconds=0, **kwargs):
    """One ReceiveMessage call; returns (messages, seconds it took)."""
    started = time.monotonic()
    response = sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=wait_seconds, **kwargs
    )
    return response.get("Messages", []), time.monotonic() - started


def receive_one(sqs, url, wait_seconds=2, **kwargs):
    messages, _ = receive(sqs, url, wait_seconds, AttributeNames=["All"], **kwargs)
    assert len(messages) == 1, f"expected one message, got {messages}"
    return messages[0]


def test_lease_expiry_redelivers_with_a_new_receipt(sqs, new_queue):
    url = new_queue(VisibilityTimeout=1)
    sent = sqs.send_message(QueueUrl=url, MessageBody="job-42")
    first = receive_one(sqs, url)
    assert first["Attributes"]["ApproximateReceiveCount"] == "1"
    messages, _ = receive(sqs, url)
    assert messages == [], "a leased message must stay hidden until its lease expires"

    # The long poll must end when the lease expires (~1 s), not after its full 5 s.
    messages, elapsed = receive(sqs, url, wait_seconds=5, AttributeNames=["All"])
    assert len(messages) == 1, messages
    assert elapsed < 3.0, f"redelivery after lease expiry took {elapsed:.2f}s of a 5s long poll"
    second = messages[0]
    assert second["MessageId"] == sent["MessageId"] == first["MessageId"]
    assert second["ReceiptHandle"] != first["ReceiptHandle"]
    assert second["Attributes"]["ApproximateReceiveCount"] == "2"
    assert second["Attributes"]["ApproximateFirstReceiveTimestamp"] == (
        first["Attributes"]["ApproximateFirstReceiveTimestamp"]
    )


def test_stale_receipt_never_touches_the_newer_attempt(sqs, new_queue):
    url = new_queue(VisibilityTimeout=1)
    sqs.send_message(QueueUrl=url, MessageBody="job-42")
    first = receive_one(sqs, url)
    messages, _ = receive(sqs, url, wait_seconds=5, AttributeNames=["All"], VisibilityTimeout=2)
    assert len(messages) == 1, "the message should come back after the first lease expired"
    second = messages[0]
    assert second["Attributes"]["ApproximateReceiveCount"] == "2"

    # SQS answers a delete with a superseded receipt with success, but it must not end the
    # attempt the newer receipt holds: the message stays in flight and comes back.
    sqs.delete_message(QueueUrl=url, ReceiptHandle=first["ReceiptHandle"])
    assert queue_counts(sqs, url) == (0, 1, 0), "the stale delete removed the newer attempt"

    # Real SQS refuses to change the visibility of a message through a receipt whose lease has
    # ended: InvalidParameterValue ("Value ... for parameter ReceiptHandle is invalid. Reason:
    # Message does not exist or is not available for visibility timeout change.").
    with expect_error(sqs, "InvalidParameterValue", status=400):
        sqs.change_message_visibility(
            QueueUrl=url, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=30
        )

    messages, elapsed = receive(sqs, url, wait_seconds=5, AttributeNames=["All"])
    assert len(messages) == 1, "the second attempt's lease should expire and redeliver"
    assert messages[0]["Attributes"]["ApproximateReceiveCount"] == "3"
    sqs.delete_message(QueueUrl=url, ReceiptHandle=messages[0]["ReceiptHandle"])
    assert queue_counts(sqs, url) == (0, 0, 0)


def test_extension_keeps_the_message_hidden_past_the_original_deadline(sqs, new_queue):
    url = new_queue()
    sqs.send_message(QueueUrl=url, MessageBody="slow job")
    started = time.monotonic()
    message = receive_one(sqs, url, VisibilityTimeout=1)
    sqs.change_message_visibility(
        QueueUrl=url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=3
    )
    # The original lease would have ended at ~1 s; a 2 s long poll must stay empty.
    messages, _ = receive(sqs, url, wait_seconds=2)
    assert messages == [], "the extended lease ended at the original deadline"
    messages, _ = receive(sqs, url, wait_seconds=5, AttributeNames=["All"])
    arrived = time.monotonic() - started
    assert len(messages) == 1, "the message should return once the extended lease ends"
    assert messages[0]["Attributes"]["ApproximateReceiveCount"] == "2"
    assert 2.5 <= arrived < 5.0, f"extended lease of 3s ended after {arrived:.2f}s"


def test_extension_through_the_batch_form(sqs, new_queue):
    url = new_queue()
    sqs.send_message(QueueUrl=url, MessageBody="slow job")
    message = receive_one(sqs, url, VisibilityTimeout=1)
    result = sqs.change_message_visibility_batch(
        QueueUrl=url,
        Entries=[{"Id": "m", "ReceiptHandle": message["ReceiptHandle"], "VisibilityTimeout": 4}],
    )
    assert [e["Id"] for e in result["Successful"]] == ["m"]
    messages, _ = receive(sqs, url, wait_seconds=2)
    assert messages == [], "the batch extension did not hold past the original deadline"
    assert queue_counts(sqs, url) == (0, 1, 0)


def test_release_with_visibility_zero(sqs, new_queue):
    url = new_queue()
    sqs.send_message(QueueUrl=url, MessageBody="nack me")
    first = receive_one(sqs, url, VisibilityTimeout=30)
    sqs.change_message_visibility(
        QueueUrl=url, ReceiptHandle=first["ReceiptHandle"], VisibilityTimeout=0
    )
    messages, elapsed = receive(sqs, url, AttributeNames=["All"])
    assert len(messages) == 1, "a released message must be receivable at once"
    assert messages[0]["Attributes"]["ApproximateReceiveCount"] == "2"
    assert messages[0]["ReceiptHandle"] != first["ReceiptHandle"]


def test_dead_letter_move_after_max_receive_count(sqs, protocol, new_queue):
    dead_letter_url = new_queue("dlq")
    source_url = new_queue(
        "src",
        RedrivePolicy=json.dumps(
            {"deadLetterTargetArn": queue_arn(sqs, dead_letter_url), "maxReceiveCount": 2}
        ),
    )
    source_arn = queue_arn(sqs, source_url)
    sent = sqs.send_message(
        QueueUrl=source_url,
        MessageBody="poison <&> 🦀",
        MessageAttributes={"kind": {"DataType": "String", "StringValue": "poison"}},
    )
    for attempt in (1, 2):
        message = receive_one(sqs, source_url)
        assert message["Attributes"]["ApproximateReceiveCount"] == str(attempt)
        sqs.change_message_visibility(
            QueueUrl=source_url, ReceiptHandle=message["ReceiptHandle"], VisibilityTimeout=0
        )
    # The third receive finds the message past maxReceiveCount and moves it instead.
    messages, _ = receive(sqs, source_url, wait_seconds=1)
    assert messages == [], "the message was delivered a third time instead of dead-lettered"
    assert queue_counts(sqs, source_url) == (0, 0, 0)

    kwargs = {"MessageAttributeNames": ["All"]}
    if protocol == "json":
        kwargs["MessageSystemAttributeNames"] = ["All"]
    else:
        kwargs["AttributeNames"] = ["All"]
    messages, _ = receive(sqs, dead_letter_url, wait_seconds=2, **kwargs)
    assert len(messages) == 1, "the message did not arrive in the dead-letter queue"
    dead = messages[0]
    assert dead["Body"] == "poison <&> 🦀"
    # Real SQS keeps the MessageId and the message attributes when it moves a message.
    assert dead["MessageId"] == sent["MessageId"]
    assert dead["MessageAttributes"]["kind"]["StringValue"] == "poison"
    assert dead["Attributes"].get("DeadLetterQueueSourceArn") == source_arn, dead["Attributes"]


def test_delay_hides_a_message_until_it_ends(sqs, new_queue):
    url = new_queue()
    started = time.monotonic()
    sqs.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=2)
    messages, _ = receive(sqs, url)
    assert messages == [], "a delayed message was receivable at once"
    assert queue_counts(sqs, url) == (0, 0, 1)
    messages, _ = receive(sqs, url, wait_seconds=5)
    arrived = time.monotonic() - started
    assert len(messages) == 1, "the delayed message never became receivable"
    assert 1.5 <= arrived < 3.5, f"a 2s delay ended after {arrived:.2f}s"


def test_queue_delay_applies_to_messages_without_their_own(sqs, new_queue):
    url = new_queue(DelaySeconds=1)
    sqs.send_message(QueueUrl=url, MessageBody="queue delay")
    sqs.send_message(QueueUrl=url, MessageBody="explicit zero", DelaySeconds=0)
    messages, _ = receive(sqs, url)
    assert [m["Body"] for m in messages] == ["explicit zero"]
    messages, elapsed = receive(sqs, url, wait_seconds=3)
    assert [m["Body"] for m in messages] == ["queue delay"]
    assert elapsed < 2.0


def test_long_poll_wakes_up_on_send(sqs, new_queue):
    url = new_queue()
    outcome = {}

    def long_poll():
        outcome["messages"], outcome["elapsed"] = receive(sqs, url, wait_seconds=10)

    # botocore clients are thread-safe for concurrent calls.
    waiter = threading.Thread(target=long_poll)
    waiter.start()
    time.sleep(0.5)  # let the receive reach the server and start waiting
    sqs.send_message(QueueUrl=url, MessageBody="wake up")
    waiter.join(timeout=15)
    assert not waiter.is_alive(), "the long poll did not return within 15 s"
    assert [m["Body"] for m in outcome["messages"]] == ["wake up"]
    assert outcome["elapsed"] < 3.0, f"the long poll took {outcome['elapsed']:.2f}s after a send"


def test_empty_long_poll_lasts_its_full_wait(sqs, new_queue):
    url = new_queue()
    messages, elapsed = receive(sqs, url, wait_seconds=2)
    assert messages == []
    assert 1.9 <= elapsed < 3.0, f"an empty 2s long poll took {elapsed:.2f}s"


def test_queue_receive_wait_time_is_the_default_long_poll(sqs, new_queue):
    url = new_queue(ReceiveMessageWaitTimeSeconds=1)
    started = time.monotonic()
    response = sqs.receive_message(QueueUrl=url)
    elapsed = time.monotonic() - started
    assert response.get("Messages", []) == []
    assert 0.9 <= elapsed < 2.0, f"ReceiveMessageWaitTimeSeconds=1 long poll took {elapsed:.2f}s"
    # An explicit WaitTimeSeconds=0 overrides the queue's default (short poll).
    messages, elapsed = receive(sqs, url, wait_seconds=0)
    assert elapsed < 0.5, f"a short poll took {elapsed:.2f}s"
