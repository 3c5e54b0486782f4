"""The `aws` CLI (v1, from the venv the tests run in) against the server: a queue's life through
create-queue, send-message, receive-message, get-queue-attributes, delete-message, list-queues,
get-queue-url and delete-queue, checking the JSON each command prints.

Skipped when the venv has no `aws` (the Query-protocol venv has only boto3).
"""

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from conftest import endpoint, md5_of_body

AWS = Path(sys.executable).parent / "aws"

pytestmark = pytest.mark.skipif(not AWS.exists(), reason="no aws CLI in this venv")


def aws(*args, check=True):
    environment = dict(
        os.environ,
        AWS_ACCESS_KEY_ID="test",
        AWS_SECRET_ACCESS_KEY="test",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_PAGER="",
        AWS_CONFIG_FILE="/dev/null",
        AWS_SHARED_CREDENTIALS_FILE="/dev/null",
    )
    command = [str(AWS), "sqs", *args, "--endpoint-url", endpoint(), "--output", "json"]
    done = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=60)
    if check:
        assert done.returncode == 0, f"{' '.join(args[:1])} failed: {done.stderr}"
        return json.loads(done.stdout) if done.stdout.strip() else {}
    return done


def test_queue_life_through_the_aws_cli():
    prefix = os.environ.get("LEASEQ_QUEUE_PREFIX", "py")
    name = f"{prefix}-cli-{uuid.uuid4().hex[:8]}"
    body = "hello from the CLI <&> 🦀"

    url = aws("create-queue", "--queue-name", name, "--attributes", "VisibilityTimeout=5")[
        "QueueUrl"
    ]
    assert url.endswith(f"/{name}")
    try:
        sent = aws("send-message", "--queue-url", url, "--message-body", body)
        assert sent["MD5OfMessageBody"] == md5_of_body(body)
        assert sent["MessageId"]

        received = aws(
            "receive-message", "--queue-url", url, "--attribute-names", "All",
            "--message-attribute-names", "All", "--wait-time-seconds", "2",
        )["Messages"]
        assert len(received) == 1
        message = received[0]
        assert message["Body"] == body
        assert message["MessageId"] == sent["MessageId"]
        assert message["Attributes"]["ApproximateReceiveCount"] == "1"

        attributes = aws(
            "get-queue-attributes", "--queue-url", url, "--attribute-names", "All"
        )["Attributes"]
        assert attributes["VisibilityTimeout"] == "5"
        assert attributes["ApproximateNumberOfMessages"] == "0"
        assert attributes["ApproximateNumberOfMessagesNotVisible"] == "1"

        aws("delete-message", "--queue-url", url, "--receipt-handle", message["ReceiptHandle"])
        attributes = aws(
            "get-queue-attributes", "--queue-url", url, "--attribute-names",
            "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible",
        )["Attributes"]
        assert attributes == {
            "ApproximateNumberOfMessages": "0",
            "ApproximateNumberOfMessagesNotVisible": "0",
        }

        listed = aws("list-queues", "--queue-name-prefix", name)
        assert listed["QueueUrls"] == [url]
        assert aws("get-queue-url", "--queue-name", name)["QueueUrl"] == url
    finally:
        aws("delete-queue", "--queue-url", url)

    missing = aws("get-queue-url", "--queue-name", name, check=False)
    assert missing.returncode != 0
    assert "NonExistentQueue" in missing.stderr or "QueueDoesNotExist" in missing.stderr, (
        missing.stderr
    )


def test_fifo_queue_through_the_aws_cli():
    prefix = os.environ.get("LEASEQ_QUEUE_PREFIX", "py")
    name = f"{prefix}-cli-{uuid.uuid4().hex[:8]}.fifo"
    url = aws(
        "create-queue",
        "--queue-name",
        name,
        "--attributes",
        "FifoQueue=true,ContentBasedDeduplication=true",
    )["QueueUrl"]
    try:
        sent = [
            aws("send-message", "--queue-url", url, "--message-body", body,
                "--message-group-id", "g")
            for body in ("first", "second")
        ]
        duplicate = aws("send-message", "--queue-url", url, "--message-body", "first",
                        "--message-group-id", "g")
        assert duplicate["MessageId"] == sent[0]["MessageId"]
        assert int(sent[1]["SequenceNumber"]) > int(sent[0]["SequenceNumber"])
        received = aws("receive-message", "--queue-url", url, "--max-number-of-messages", "10",
                       "--attribute-names", "All")["Messages"]
        assert [m["Body"] for m in received] == ["first", "second"]
        assert received[0]["Attributes"]["MessageGroupId"] == "g"
        assert received[0]["Attributes"]["SequenceNumber"] == sent[0]["SequenceNumber"]
        attributes = aws("get-queue-attributes", "--queue-url", url, "--attribute-names",
                         "All")["Attributes"]
        assert attributes["FifoQueue"] == "true"
        assert attributes["ContentBasedDeduplication"] == "true"
    finally:
        aws("delete-queue", "--queue-url", url)
