"""Redrive through boto3 (both protocols): StartMessageMoveTask, ListMessageMoveTasks and
CancelMessageMoveTask, their errors, and what a moved message is."""

import json
import time

from conftest import ACCOUNT_ID, REGION, expect_error, queue_arn, queue_counts


def dead_letters(sqs, new_queue, bodies):
    """A dead-letter queue holding `bodies`, moved there from a source queue
    (maxReceiveCount 1). Returns (source url, dlq url, dlq arn)."""
    dlq = new_queue("dlq")
    dlq_arn = queue_arn(sqs, dlq)
    source = new_queue(
        "src",
        RedrivePolicy=json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": "1"}),
    )
    for body in bodies:
        sqs.send_message(QueueUrl=source, MessageBody=body)
    received = 0
    while received < len(bodies):
        answer = sqs.receive_message(QueueUrl=source, MaxNumberOfMessages=10, VisibilityTimeout=0)
        received += len(answer.get("Messages", []))
    assert "Messages" not in sqs.receive_message(QueueUrl=source, MaxNumberOfMessages=10)
    assert queue_counts(sqs, dlq) == (len(bodies), 0, 0)
    return source, dlq, dlq_arn


def wait_for(sqs, source_arn, status):
    deadline = time.time() + 10
    while True:
        results = sqs.list_message_move_tasks(SourceArn=source_arn, MaxResults=10)["Results"]
        if results[0]["Status"] == status:
            return results
        assert time.time() < deadline, f"task never reached {status}: {results}"
        time.sleep(0.05)


def test_move_task_back_to_the_source(sqs, new_queue):
    bodies = ["one", "two", "three"]
    source, dlq, dlq_arn = dead_letters(sqs, new_queue, bodies)
    handle = sqs.start_message_move_task(SourceArn=dlq_arn)["TaskHandle"]
    results = wait_for(sqs, dlq_arn, "COMPLETED")
    assert len(results) == 1
    task = results[0]
    # A finished task lists no handle (only RUNNING ones have one; see test_aws_fidelity.py).
    assert handle and "TaskHandle" not in task
    assert task["SourceArn"] == dlq_arn
    assert "DestinationArn" not in task
    assert task["ApproximateNumberOfMessagesMoved"] == 3
    assert task["ApproximateNumberOfMessagesToMove"] == 3
    assert task["StartedTimestamp"] > 0
    moved = sqs.receive_message(
        QueueUrl=source, MaxNumberOfMessages=10, AttributeNames=["All"]
    )["Messages"]
    assert [m["Body"] for m in moved] == bodies, "oldest first"
    for message in moved:
        assert message["Attributes"]["ApproximateReceiveCount"] == "1"
        assert "DeadLetterQueueSourceArn" not in message["Attributes"]
    assert queue_counts(sqs, dlq) == (0, 0, 0)


def test_move_task_cancel_rate_destination_and_errors(sqs, new_queue):
    source, dlq, dlq_arn = dead_letters(sqs, new_queue, ["a", "b", "c", "d", "e"])
    source_arn = queue_arn(sqs, source)
    # SQS's codes for these two are InvalidParameterValue (see test_aws_fidelity.py).
    with expect_error(sqs, "InvalidParameterValue", status=400):
        sqs.start_message_move_task(SourceArn=source_arn)
    with expect_error(sqs, "ResourceNotFoundException", status=404):
        sqs.start_message_move_task(
            SourceArn=f"arn:aws:sqs:{REGION}:{ACCOUNT_ID}:no-such-queue-redrive"
        )
    with expect_error(sqs, "InvalidParameterValue", status=400):
        sqs.start_message_move_task(SourceArn=dlq_arn, MaxNumberOfMessagesPerSecond=501)

    handle = sqs.start_message_move_task(SourceArn=dlq_arn, MaxNumberOfMessagesPerSecond=1)[
        "TaskHandle"
    ]
    with expect_error(sqs, "InvalidParameterValue", status=400):
        sqs.start_message_move_task(SourceArn=dlq_arn)
    running = sqs.list_message_move_tasks(SourceArn=dlq_arn)["Results"]
    assert running[0]["Status"] == "RUNNING"
    assert running[0]["MaxNumberOfMessagesPerSecond"] == 1
    moved = sqs.cancel_message_move_task(TaskHandle=handle)["ApproximateNumberOfMessagesMoved"]
    assert moved < 5
    cancelled = sqs.list_message_move_tasks(SourceArn=dlq_arn)["Results"]
    assert cancelled[0]["Status"] == "CANCELLED"
    assert cancelled[0]["ApproximateNumberOfMessagesMoved"] == moved
    with expect_error(sqs, "AWS.SimpleQueueService.UnsupportedOperation", status=400):
        sqs.cancel_message_move_task(TaskHandle=handle)

    other = new_queue("other")
    other_arn = queue_arn(sqs, other)
    sqs.start_message_move_task(SourceArn=dlq_arn, DestinationArn=other_arn)
    results = wait_for(sqs, dlq_arn, "COMPLETED")
    assert len(results) == 2
    assert results[0]["DestinationArn"] == other_arn
    assert results[0]["ApproximateNumberOfMessagesMoved"] == 5 - moved
    assert queue_counts(sqs, other) == (5 - moved, 0, 0)
    assert queue_counts(sqs, source) == (moved, 0, 0)
    assert queue_counts(sqs, dlq) == (0, 0, 0)
