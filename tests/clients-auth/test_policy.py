"""Queue policies between accounts through boto3 (scripts/test-clients.sh starts the server with
three accounts' keys), on the protocol of the venv (current boto3: JSON 1.0; boto3 1.28: Query):
the owner grants one account with AddPermission, another stays refused, an explicit Deny in a
policy document wins, and queue management stays the owner's.

Expected values: a refusal is `AccessDenied`, HTTP 403, "Access to the resource <endpoint>/ is
denied." as SQS answers (SDK users' reports, e.g. aws/aws-sdk-php#188 "Status Code: 403; Error
Code: AccessDenied"); a queue URL names its owner's account and GetQueueUrl's
QueueOwnerAWSAccountId finds another account's queue (SQS API reference, GetQueueUrl);
"Cross-account permissions don't apply to this action" for SetQueueAttributes and DeleteQueue
(their pages in the SQS API reference); explicit deny over allow (IAM User Guide, "Policy
evaluation logic").
"""

import json
import uuid

import pytest

from test_auth import ACCOUNT_ID, ACCOUNT_ID_B, KEY_ID, KEY_ID_B, SECRET, SECRET_B, client, code_and_status, endpoint

KEY_ID_C = "AKIACLIENTS3"
SECRET_C = "clients-secret-3"
ACCOUNT_ID_C = "333333333333"


def assert_denied(call):
    code, status, message = code_and_status(call)
    assert (code, status) == ("AccessDenied", 403)
    assert message == f"Access to the resource {endpoint()}/ is denied."


@pytest.fixture
def accounts():
    return client(KEY_ID, SECRET), client(KEY_ID_B, SECRET_B), client(KEY_ID_C, SECRET_C)


def test_add_permission_grants_one_account(accounts):
    owner, granted, other = accounts
    name = f"shared-{uuid.uuid4().hex[:8]}"
    url = owner.create_queue(QueueName=name)["QueueUrl"]
    assert_denied(lambda: granted.send_message(QueueUrl=url, MessageBody="early"))
    owner.add_permission(QueueUrl=url, Label="b", AWSAccountIds=[ACCOUNT_ID_B], Actions=["SendMessage", "GetQueueUrl"])
    found = granted.get_queue_url(QueueName=name, QueueOwnerAWSAccountId=ACCOUNT_ID)["QueueUrl"]
    assert found == url
    granted.send_message(QueueUrl=url, MessageBody="from b")
    assert_denied(lambda: granted.receive_message(QueueUrl=url))
    assert_denied(lambda: other.send_message(QueueUrl=url, MessageBody="from c"))
    assert_denied(lambda: granted.set_queue_attributes(QueueUrl=url, Attributes={"DelaySeconds": "1"}))
    assert_denied(lambda: granted.delete_queue(QueueUrl=url))
    received = owner.receive_message(QueueUrl=url, AttributeNames=["SenderId"])["Messages"]
    assert received[0]["Body"] == "from b"
    assert received[0]["Attributes"]["SenderId"] == KEY_ID_B


def test_a_policy_document_with_wildcards_and_an_explicit_deny(accounts):
    owner, granted, other = accounts
    name = f"work-{uuid.uuid4().hex[:8]}"
    policy = {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": "*", "Action": ["sqs:Send*", "sqs:receivemessage"],
             "Resource": f"arn:aws:sqs:*:{ACCOUNT_ID}:work-*"},
            {"Effect": "Deny", "Principal": {"AWS": [ACCOUNT_ID_C]}, "Action": "sqs:*", "Resource": "*"},
        ],
    }
    url = owner.create_queue(QueueName=name, Attributes={"Policy": json.dumps(policy)})["QueueUrl"]
    granted.send_message(QueueUrl=url, MessageBody="job")
    assert granted.receive_message(QueueUrl=url)["Messages"][0]["Body"] == "job"
    assert_denied(lambda: granted.purge_queue(QueueUrl=url))
    assert_denied(lambda: other.send_message(QueueUrl=url, MessageBody="denied"))
