"""aiobotocore (the asyncio botocore, version pinned in scripts/client-venvs.sh) against leaseq:
send/receive/delete, batches with partial failure, errors as modelled exception types, a long
poll woken by a send, and README's snippet (tests/snippets/aiobotocore_client.py)."""

import asyncio
import hashlib
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import urlparse

import pytest
from aiobotocore.config import AioConfig
from aiobotocore.session import get_session

SNIPPETS = Path(__file__).resolve().parent.parent / "snippets"


def endpoint():
    value = os.environ.get("LEASEQ_ENDPOINT")
    if not value:
        pytest.exit("LEASEQ_ENDPOINT is not set (run scripts/test-clients.sh)", returncode=2)
    return value.rstrip("/")


def client():
    return get_session().create_client(
        "sqs",
        endpoint_url=endpoint(),
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
        config=AioConfig(retries={"max_attempts": 1, "mode": "standard"}, read_timeout=40),
    )


def name(tag):
    return f"aio-{tag}-{uuid.uuid4().hex[:8]}"


def run(coroutine):
    return asyncio.run(coroutine)


def test_send_receive_delete():
    async def scenario():
        async with client() as sqs:
            url = (await sqs.create_queue(QueueName=name("basic")))["QueueUrl"]
            sent = await sqs.send_message(QueueUrl=url, MessageBody="héllo 🦀")
            assert sent["MD5OfMessageBody"] == hashlib.md5("héllo 🦀".encode()).hexdigest()
            received = await sqs.receive_message(
                QueueUrl=url, WaitTimeSeconds=2, MessageSystemAttributeNames=["All"]
            )
            [message] = received["Messages"]
            assert message["MessageId"] == sent["MessageId"]
            assert message["Body"] == "héllo 🦀"
            assert message["Attributes"]["ApproximateReceiveCount"] == "1"
            await sqs.delete_message(QueueUrl=url, ReceiptHandle=message["ReceiptHandle"])
            attributes = await sqs.get_queue_attributes(
                QueueUrl=url,
                AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
            )
            assert attributes["Attributes"] == {
                "ApproximateNumberOfMessages": "0",
                "ApproximateNumberOfMessagesNotVisible": "0",
            }

    run(scenario())


def test_batches_report_each_entry():
    async def scenario():
        async with client() as sqs:
            url = (await sqs.create_queue(QueueName=name("batch")))["QueueUrl"]
            sent = await sqs.send_message_batch(
                QueueUrl=url,
                Entries=[
                    {"Id": "a", "MessageBody": "one"},
                    {"Id": "b", "MessageBody": "two", "DelaySeconds": 901},  # over SQS's 900
                    {"Id": "c", "MessageBody": "three"},
                ],
            )
            assert sorted(entry["Id"] for entry in sent["Successful"]) == ["a", "c"]
            [failed] = sent["Failed"]
            assert (failed["Id"], failed["Code"], failed["SenderFault"]) == (
                "b", "InvalidParameterValue", True,
            )
            messages = []
            for _ in range(5):
                response = await sqs.receive_message(
                    QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1
                )
                messages += response.get("Messages", [])
                if len(messages) == 2:
                    break
            assert sorted(message["Body"] for message in messages) == ["one", "three"]
            deleted = await sqs.delete_message_batch(
                QueueUrl=url,
                Entries=[{"Id": f"d{i}", "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)]
                + [{"Id": "stale", "ReceiptHandle": "not-a-receipt"}],
            )
            assert sorted(entry["Id"] for entry in deleted["Successful"]) == ["d0", "d1"]
            assert [(e["Id"], e["Code"]) for e in deleted["Failed"]] == [("stale", "ReceiptHandleIsInvalid")]

    run(scenario())


def test_errors_are_the_modelled_exception_types():
    async def scenario():
        async with client() as sqs:
            missing = f"{endpoint()}/000000000000/{name('missing')}"
            with pytest.raises(sqs.exceptions.QueueDoesNotExist) as caught:
                await sqs.send_message(QueueUrl=missing, MessageBody="x")
            assert caught.value.response["Error"]["Code"] == "AWS.SimpleQueueService.NonExistentQueue"
            assert caught.value.response["ResponseMetadata"]["HTTPStatusCode"] == 400
            url = (await sqs.create_queue(QueueName=name("errors")))["QueueUrl"]
            with pytest.raises(sqs.exceptions.ReceiptHandleIsInvalid):
                await sqs.delete_message(QueueUrl=url, ReceiptHandle="garbage")
            with pytest.raises(sqs.exceptions.EmptyBatchRequest):
                await sqs.send_message_batch(QueueUrl=url, Entries=[])
            with pytest.raises(sqs.exceptions.BatchEntryIdsNotDistinct):
                await sqs.send_message_batch(
                    QueueUrl=url, Entries=[{"Id": "x", "MessageBody": "1"}, {"Id": "x", "MessageBody": "2"}]
                )
            with pytest.raises(sqs.exceptions.QueueNameExists):
                await sqs.create_queue(QueueName=url.rsplit("/", 1)[1], Attributes={"DelaySeconds": "5"})

    run(scenario())


def test_a_long_poll_is_woken_by_a_send():
    async def scenario():
        async with client() as receiver, client() as sender:
            url = (await receiver.create_queue(QueueName=name("long-poll")))["QueueUrl"]
            started = time.monotonic()
            waiting = asyncio.create_task(receiver.receive_message(QueueUrl=url, WaitTimeSeconds=10))
            await asyncio.sleep(0.5)
            assert not waiting.done(), "the long poll returned before anything was sent"
            await sender.send_message(QueueUrl=url, MessageBody="wake up")
            response = await asyncio.wait_for(waiting, timeout=5)
            elapsed_s = time.monotonic() - started
            assert [m["Body"] for m in response["Messages"]] == ["wake up"]
            assert 0.4 <= elapsed_s < 5, f"woken after {elapsed_s:.2f} s"

    run(scenario())


def test_readme_snippet_runs():
    source = (SNIPPETS / "aiobotocore_client.py").read_text()
    source = source.replace("127.0.0.1:9324", urlparse(endpoint()).netloc)
    done = subprocess.run(
        [sys.executable, "-"], input=source, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == "hello\n"
