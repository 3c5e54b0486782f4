"""FIFO queues through boto3 (both wire protocols): queue attributes, the send rules,
deduplication, sequence numbers, group order under concurrent consumers, receive-attempt
retries, expired receipts and FIFO dead letters.
"""

import json
import threading
import time

import pytest

from conftest import expect_error, queue_arn, queue_counts


@pytest.fixture
def new_fifo_queue(sqs, queue_name):
    """Returns a factory that creates a FIFO queue and returns its URL (deleted afterwards)."""
    created = []

    def make(tag="", **attributes):
        name = queue_name(tag)[:75] + ".fifo"
        attributes = {"FifoQueue": "true", **{k: str(v) for k, v in attributes.items()}}
        url = sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"]
        created.append(url)
        return url

    yield make
    for url in created:
        try:
            sqs.delete_queue(QueueUrl=url)
        except Exception:
            pass


def test_fifo_attributes_and_send_rules(sqs, new_fifo_queue, queue_name):
    with expect_error(sqs, "InvalidParameterValue"):
        sqs.create_queue(QueueName=queue_name()[:70] + ".fifo")
    url = new_fifo_queue()
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert attributes["FifoQueue"] == "true"
    assert attributes["ContentBasedDeduplication"] == "false"
    assert attributes["DeduplicationScope"] == "queue"
    assert attributes["FifoThroughputLimit"] == "perQueue"

    with expect_error(sqs, "MissingParameter"):
        sqs.send_message(QueueUrl=url, MessageBody="x", MessageDeduplicationId="d")
    with expect_error(sqs, "InvalidParameterValue") as caught:
        sqs.send_message(QueueUrl=url, MessageBody="x", MessageGroupId="g")
    assert "ContentBasedDeduplication" in caught.value.response["Error"]["Message"]
    with expect_error(sqs, "InvalidParameterValue"):
        sqs.send_message(
            QueueUrl=url, MessageBody="x", MessageGroupId="g", MessageDeduplicationId="d",
            DelaySeconds=5,
        )

    first = sqs.send_message(
        QueueUrl=url, MessageBody="one", MessageGroupId="g", MessageDeduplicationId="d-1"
    )
    again = sqs.send_message(
        QueueUrl=url, MessageBody="one", MessageGroupId="g", MessageDeduplicationId="d-1"
    )
    assert again["MessageId"] == first["MessageId"]
    assert again["SequenceNumber"] == first["SequenceNumber"]
    assert len(first["SequenceNumber"]) >= 20

    batch = sqs.send_message_batch(
        QueueUrl=url,
        Entries=[
            {
                "Id": f"e{i}",
                "MessageBody": f"batch-{i}",
                "MessageGroupId": "b",
                "MessageDeduplicationId": f"b-{i}",
            }
            for i in range(5)
        ],
    )
    assert not batch.get("Failed")
    numbers = sorted(batch["Successful"], key=lambda entry: entry["Id"])
    sequence = [int(entry["SequenceNumber"]) for entry in numbers]
    assert sequence == sorted(sequence) and len(set(sequence)) == 5
    assert sequence[0] > int(first["SequenceNumber"])

    # AttributeNames: boto3 1.28 predates MessageSystemAttributeNames.
    messages = sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"]
    )["Messages"]
    head = messages[0]
    assert head["Body"] == "one"
    assert head["Attributes"]["MessageGroupId"] == "g"
    assert head["Attributes"]["MessageDeduplicationId"] == "d-1"
    assert head["Attributes"]["SequenceNumber"] == first["SequenceNumber"]


def test_fifo_content_based_deduplication_survives_a_delete(sqs, new_fifo_queue):
    url = new_fifo_queue(ContentBasedDeduplication="true")
    first = sqs.send_message(QueueUrl=url, MessageBody="same", MessageGroupId="g")
    message = sqs.receive_message(QueueUrl=url)["Messages"][0]
    sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
    again = sqs.send_message(QueueUrl=url, MessageBody="same", MessageGroupId="other")
    assert again["MessageId"] == first["MessageId"]
    assert queue_counts(sqs, url) == (0, 0, 0)


def test_fifo_concurrent_consumers_keep_group_order(sqs, new_fifo_queue):
    groups, per_group, consumers = 5, 20, 4
    url = new_fifo_queue()
    for i in range(per_group):
        sqs.send_message_batch(
            QueueUrl=url,
            Entries=[
                {
                    "Id": f"g{g}",
                    "MessageBody": f"{g}:{i}",
                    "MessageGroupId": f"group-{g}",
                    "MessageDeduplicationId": f"{g}-{i}",
                }
                for g in range(groups)
            ],
        )
    lock = threading.Lock()
    holders = [None] * groups
    processed = [[] for _ in range(groups)]
    failures = []

    def consume(me):
        try:
            empty = 0
            while empty < 3:
                messages = sqs.receive_message(
                    QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1, VisibilityTimeout=60
                ).get("Messages", [])
                if not messages:
                    empty += 1
                    continue
                empty = 0
                mine = [
                    (int(m["Body"].split(":")[0]), int(m["Body"].split(":")[1]), m["ReceiptHandle"])
                    for m in messages
                ]
                with lock:
                    for g, _, _ in mine:
                        assert holders[g] in (None, me), f"group {g} held by {holders[g]} and {me}"
                        holders[g] = me
                for index, (g, i, receipt) in enumerate(mine):
                    with lock:
                        processed[g].append(i)
                        # Give the group up before deleting its last message here: after the
                        # delete the server may hand it to another consumer.
                        if not any(h == g for h, _, _ in mine[index + 1 :]):
                            holders[g] = None
                    sqs.delete_message(QueueUrl=url, ReceiptHandle=receipt)
        except Exception as error:  # surfaced in the main thread
            failures.append(error)

    threads = [threading.Thread(target=consume, args=(me,)) for me in range(consumers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures, failures
    for g in range(groups):
        assert processed[g] == list(range(per_group)), f"group {g}: {processed[g]}"


def test_fifo_attempt_ids_expired_receipts_and_dead_letters(sqs, new_fifo_queue):
    dlq = new_fifo_queue("dlq")
    policy = json.dumps({"deadLetterTargetArn": queue_arn(sqs, dlq), "maxReceiveCount": "1"})
    url = new_fifo_queue("src", VisibilityTimeout=1, RedrivePolicy=policy)
    poison = sqs.send_message(
        QueueUrl=url, MessageBody="poison", MessageGroupId="g", MessageDeduplicationId="p"
    )
    sqs.send_message(
        QueueUrl=url, MessageBody="next", MessageGroupId="g", MessageDeduplicationId="n"
    )

    first = sqs.receive_message(QueueUrl=url, ReceiveRequestAttemptId="try-1")["Messages"]
    again = sqs.receive_message(QueueUrl=url, ReceiveRequestAttemptId="try-1")["Messages"]
    assert [m["ReceiptHandle"] for m in again] == [m["ReceiptHandle"] for m in first]
    assert sqs.receive_message(QueueUrl=url, ReceiveRequestAttemptId="try-2").get(
        "Messages", []
    ) == []

    time.sleep(1.1)
    with expect_error(sqs, "InvalidParameterValue") as caught:
        sqs.delete_message(QueueUrl=url, ReceiptHandle=first[0]["ReceiptHandle"])
    assert "expired" in caught.value.response["Error"]["Message"]

    messages = sqs.receive_message(
        QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=30
    )["Messages"]
    assert [m["Body"] for m in messages] == ["next"]
    moved = sqs.receive_message(QueueUrl=dlq, AttributeNames=["All"])["Messages"]
    assert moved[0]["MessageId"] == poison["MessageId"]
    assert moved[0]["Attributes"]["MessageGroupId"] == "g"
    assert moved[0]["Attributes"]["MessageDeduplicationId"] == poison["MessageId"]
