"""The `aws` CLI and boto3 against a server with TLS (`--tls-cert`/`--tls-key`), trusting the
test's own CA through `--ca-bundle`, `AWS_CA_BUNDLE` and boto3's `verify=`; without the CA the
same commands fail certificate verification. scripts/test-clients.sh makes the CA and the
server's certificate (for localhost and 127.0.0.1) with openssl and starts the server.

Skipped when the venv has no `aws` (the Query-protocol venv has only boto3).
"""

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import boto3
import pytest
from botocore.config import Config

AWS = Path(sys.executable).parent / "aws"

pytestmark = pytest.mark.skipif(not AWS.exists(), reason="no aws CLI in this venv")


def setting(name):
    value = os.environ.get(name)
    if not value:
        pytest.exit(f"{name} is not set (run scripts/test-clients.sh)", returncode=2)
    return value


def endpoint():
    return setting("LEASEQ_TLS_ENDPOINT").rstrip("/")


def ca_bundle():
    return setting("LEASEQ_TLS_CA")


def aws(*args, extra_env=None, check=True):
    environment = dict(
        os.environ,
        AWS_ACCESS_KEY_ID="test",
        AWS_SECRET_ACCESS_KEY="test",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_PAGER="",
        AWS_CONFIG_FILE="/dev/null",
        AWS_SHARED_CREDENTIALS_FILE="/dev/null",
    )
    environment.pop("AWS_CA_BUNDLE", None)
    environment.update(extra_env or {})
    command = [str(AWS), "sqs", *args, "--endpoint-url", endpoint(), "--output", "json"]
    done = subprocess.run(command, capture_output=True, text=True, env=environment, timeout=60)
    if check:
        assert done.returncode == 0, f"{' '.join(args[:1])} failed: {done.stderr}"
        return json.loads(done.stdout) if done.stdout.strip() else {}
    return done


def test_a_queue_life_through_the_aws_cli_with_a_ca_bundle():
    name = f"tls-cli-{uuid.uuid4().hex[:8]}"
    bundle = ("--ca-bundle", ca_bundle())
    url = aws("create-queue", "--queue-name", name, *bundle)["QueueUrl"]
    # Queue URLs are https:// on a TLS listener, with the host the client used.
    assert url == f"{endpoint()}/000000000000/{name}"
    aws("send-message", "--queue-url", url, "--message-body", "over TLS", *bundle)
    received = aws("receive-message", "--queue-url", url, *bundle)["Messages"]
    assert [m["Body"] for m in received] == ["over TLS"]
    aws("delete-message", "--queue-url", url, "--receipt-handle", received[0]["ReceiptHandle"], *bundle)
    # AWS_CA_BUNDLE does what --ca-bundle does.
    listed = aws("list-queues", "--queue-name-prefix", name, extra_env={"AWS_CA_BUNDLE": ca_bundle()})
    assert listed["QueueUrls"] == [url]
    aws("delete-queue", "--queue-url", url, *bundle)


def test_without_the_ca_the_aws_cli_refuses_the_certificate():
    done = aws("list-queues", check=False)
    assert done.returncode != 0
    assert "SSL validation failed" in done.stderr or "CERTIFICATE_VERIFY_FAILED" in done.stderr, done.stderr


def test_boto3_verifying_with_the_ca():
    sqs = boto3.session.Session().client(
        "sqs",
        endpoint_url=endpoint(),
        aws_access_key_id="test",
        aws_secret_access_key="test",
        verify=ca_bundle(),
        config=Config(region_name="us-east-1", retries={"max_attempts": 1}),
    )
    name = f"tls-boto3-{uuid.uuid4().hex[:8]}"
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    assert url.startswith("https://")
    sqs.send_message(QueueUrl=url, MessageBody="hello")
    messages = sqs.receive_message(QueueUrl=url)["Messages"]
    assert messages[0]["Body"] == "hello"
    sqs.delete_message(QueueUrl=url, ReceiptHandle=messages[0]["ReceiptHandle"])
    sqs.delete_queue(QueueUrl=url)
