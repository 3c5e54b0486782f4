"""boto3 against a server with auth = "sigv4" (scripts/test-clients.sh starts it with the keys
below): the right key works, every wrong one gets AWS's code, on the protocol of the venv
(current boto3: JSON 1.0; boto3 1.28: Query).

Expected codes and statuses: the SQS API reference's "Common Errors"
(https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/CommonErrors.html):
InvalidClientTokenId 403, MissingAuthenticationToken 403, RequestExpired 400; SignatureDoesNotMatch
403 with AWS's sentence (as SQS sends it, e.g. aws/aws-cli#5341).
"""

import os
import uuid

import boto3
import botocore
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

KEY_ID = "AKIACLIENTS1"
SECRET = "clients-secret-1"
ACCOUNT_ID = "111111111111"
KEY_ID_B = "AKIACLIENTS2"
SECRET_B = "clients-secret-2"
ACCOUNT_ID_B = "222222222222"


def endpoint():
    value = os.environ.get("LEASEQ_AUTH_ENDPOINT")
    if not value:
        pytest.exit("LEASEQ_AUTH_ENDPOINT is not set (run scripts/test-clients.sh)", returncode=2)
    return value.rstrip("/")


def client(key_id, secret, **config):
    return boto3.session.Session().client(
        "sqs",
        endpoint_url=endpoint(),
        aws_access_key_id=key_id,
        aws_secret_access_key=secret,
        config=Config(region_name="us-east-1", retries={"max_attempts": 1}, **config),
    )


def code_and_status(call):
    with pytest.raises(ClientError) as raised:
        call()
    error = raised.value.response
    return error["Error"]["Code"], error["ResponseMetadata"]["HTTPStatusCode"], error["Error"]["Message"]


def test_the_right_key_works_and_its_queues_are_its_accounts():
    sqs = client(KEY_ID, SECRET)
    name = f"auth-{uuid.uuid4().hex[:8]}"
    url = sqs.create_queue(QueueName=name)["QueueUrl"]
    assert url == f"{endpoint()}/{ACCOUNT_ID}/{name}"
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    assert arn == f"arn:aws:sqs:us-east-1:{ACCOUNT_ID}:{name}"
    sqs.send_message(QueueUrl=url, MessageBody="hello")
    received = sqs.receive_message(QueueUrl=url, AttributeNames=["SenderId"])["Messages"]
    assert received[0]["Body"] == "hello"
    assert received[0]["Attributes"]["SenderId"] == KEY_ID
    # The other account has a queue of the same name of its own, empty.
    other = client(KEY_ID_B, SECRET_B)
    other_url = other.create_queue(QueueName=name)["QueueUrl"]
    assert other_url == f"{endpoint()}/{ACCOUNT_ID_B}/{name}"
    assert not other.receive_message(QueueUrl=other_url).get("Messages")
    assert all(ACCOUNT_ID_B in u for u in other.list_queues().get("QueueUrls", []))


def test_a_wrong_secret_does_not_match():
    code, status, message = code_and_status(lambda: client(KEY_ID, "wrong").list_queues())
    assert (code, status) == ("SignatureDoesNotMatch", 403)
    assert message.startswith("The request signature we calculated does not match")


def test_an_unknown_key_is_an_invalid_client_token():
    code, status, message = code_and_status(lambda: client("AKIANOBODY", SECRET).list_queues())
    assert (code, status) == ("InvalidClientTokenId", 403)
    assert message == "The security token included in the request is invalid."


def test_an_unsigned_request_is_missing_authentication():
    unsigned = client(KEY_ID, SECRET, signature_version=botocore.UNSIGNED)
    code, status, _ = code_and_status(lambda: unsigned.list_queues())
    assert (code, status) == ("MissingAuthenticationToken", 403)
