"""Fixtures for the client-compatibility tests: boto3 clients pointed at a running leaseq server.

The server's address comes from LEASEQ_ENDPOINT (e.g. http://127.0.0.1:9324); scripts/test-clients.sh
starts a server and sets it. The same test files run in two virtualenvs: current boto3, which speaks
the AWS JSON 1.0 protocol to SQS, and boto3 1.28.70 / botocore 1.31.70, the last releases that speak
the Query protocol (form-encoded requests, XML responses). `protocol` tells the tests which one is
in use; LEASEQ_EXPECT_PROTOCOL makes the suite fail if the venv is not the one the caller meant.

Every test creates its own queues with a unique name (prefix from LEASEQ_QUEUE_PREFIX, then the
test's tag, then a random suffix), so the two runs and the tests within a run never share state.
"""

import hashlib
import os
import struct
import uuid
from contextlib import contextmanager

import boto3
import botocore
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

ACCOUNT_ID = os.environ.get("LEASEQ_ACCOUNT_ID", "000000000000")
REGION = "us-east-1"


def endpoint():
    value = os.environ.get("LEASEQ_ENDPOINT")
    if not value:
        pytest.exit("LEASEQ_ENDPOINT is not set (run scripts/test-clients.sh)", returncode=2)
    return value.rstrip("/")


def make_client(**config_overrides):
    # One attempt only: a retried request would hide the server's first answer (and a retried
    # send would duplicate a message). The read timeout must exceed the longest long poll (20 s).
    config = Config(
        region_name=REGION,
        retries={"max_attempts": 1, "mode": "standard"},
        connect_timeout=5,
        read_timeout=40,
        **config_overrides,
    )
    return boto3.session.Session().client(
        "sqs",
        endpoint_url=endpoint(),
        aws_access_key_id="test",
        aws_secret_access_key="test",
        config=config,
    )


class Wire:
    """The last request the client sent and the last response it got, captured by event hooks."""

    def __init__(self, client):
        self.request_headers = {}
        self.request_body = b""
        self.response_headers = {}
        client.meta.events.register("before-send.sqs.*", self._before_send)
        client.meta.events.register("after-call.sqs.*", self._after_call)

    def _before_send(self, request, **_):
        # Keys lower-cased: HTTP header names are case-insensitive, a plain dict is not.
        self.request_headers = {
            name.lower(): value.decode() if isinstance(value, bytes) else value
            for name, value in request.headers.items()
        }
        body = request.body
        self.request_body = body.encode() if isinstance(body, str) else (body or b"")

    def _after_call(self, http_response, **_):
        self.response_headers = {
            name.lower(): value for name, value in http_response.headers.items()
        }


@pytest.fixture(scope="session")
def sqs():
    return make_client()


@pytest.fixture(scope="session")
def sqs_unvalidated():
    """A client that skips botocore's own parameter checks, so the server sees bad input."""
    return make_client(parameter_validation=False)


@pytest.fixture(scope="session")
def protocol(sqs):
    return sqs.meta.service_model.protocol


@pytest.fixture
def wire(sqs):
    captured = Wire(sqs)
    yield captured
    sqs.meta.events.unregister("before-send.sqs.*", captured._before_send)
    sqs.meta.events.unregister("after-call.sqs.*", captured._after_call)


@pytest.fixture
def queue_name(request):
    """Returns a factory of unique queue names for this test."""
    prefix = os.environ.get("LEASEQ_QUEUE_PREFIX", "py")
    test_tag = request.node.name.replace("test_", "", 1)
    test_tag = "".join(c if c.isalnum() else "-" for c in test_tag)[:30].strip("-")

    def make(tag=""):
        parts = [prefix, test_tag, tag, uuid.uuid4().hex[:8]]
        return "-".join(p for p in parts if p)[:80]

    return make


@pytest.fixture
def new_queue(sqs, queue_name):
    """Returns a factory that creates a queue (with optional attributes) and returns its URL.

    The queues are deleted after the test, best effort.
    """
    created = []

    def make(tag="", **attributes):
        response = sqs.create_queue(
            QueueName=queue_name(tag),
            Attributes={k: str(v) for k, v in attributes.items()},
        )
        created.append(response["QueueUrl"])
        return response["QueueUrl"]

    yield make
    for url in created:
        try:
            sqs.delete_queue(QueueUrl=url)
        except ClientError:
            pass


def queue_arn(sqs, url):
    return sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
        "QueueArn"
    ]


def queue_counts(sqs, url):
    """(visible, in flight, delayed) as the queue reports them."""
    attributes = sqs.get_queue_attributes(
        QueueUrl=url,
        AttributeNames=[
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        ],
    )["Attributes"]
    return (
        int(attributes["ApproximateNumberOfMessages"]),
        int(attributes["ApproximateNumberOfMessagesNotVisible"]),
        int(attributes["ApproximateNumberOfMessagesDelayed"]),
    )


# --- MD5s exactly as SQS computes them ---------------------------------------------------------
#
# botocore does NOT check these (unlike the Java, .NET and Go SDKs, which raise on a mismatch), so
# the tests compute them here and compare.


def md5_of_body(body):
    return hashlib.md5(body.encode("utf-8")).hexdigest()


def md5_of_attributes(attributes):
    """MD5OfMessageAttributes / MD5OfMessageSystemAttributes: over the attributes sorted by name,
    each as length-prefixed name, length-prefixed data type, a transport byte (1 string, 2
    binary) and the length-prefixed value; lengths are 4-byte big-endian."""

    def prefixed(data):
        return struct.pack(">I", len(data)) + data

    digest = hashlib.md5()
    for name in sorted(attributes):
        value = attributes[name]
        digest.update(prefixed(name.encode("utf-8")))
        digest.update(prefixed(value["DataType"].encode("utf-8")))
        if "StringValue" in value:
            digest.update(b"\x01" + prefixed(value["StringValue"].encode("utf-8")))
        else:
            digest.update(b"\x02" + prefixed(value["BinaryValue"]))
    return digest.hexdigest()


# --- errors --------------------------------------------------------------------------------------


@contextmanager
def expect_error(client, code, *, status=None, shape=None, fault="Sender"):
    """Asserts that the block raises the SQS error `code` as botocore surfaces it.

    `code` is the legacy (Query) error code, e.g. AWS.SimpleQueueService.NonExistentQueue. In the
    Query protocol it is the XML <Code>. In the JSON protocol SQS sends the modern shape name in
    `__type` and the legacy code in the `x-amzn-query-error: <code>;<fault>` header; botocore then
    reports Error.Code = the legacy code, Error.QueryErrorCode = the `__type` name and Error.Type =
    the fault. `shape` is the modelled exception (client.exceptions.<shape>) that must catch it.
    """
    with pytest.raises(ClientError) as caught:
        yield caught
    error = caught.value.response.get("Error", {})
    metadata = caught.value.response.get("ResponseMetadata", {})
    details = f"response Error={error} HTTPStatusCode={metadata.get('HTTPStatusCode')}"
    assert error.get("Code") == code, f"expected error code {code}; {details}"
    if status is not None:
        assert metadata.get("HTTPStatusCode") == status, f"expected HTTP {status}; {details}"
    assert error.get("Type") == fault, f"expected fault {fault}; {details}"
    assert metadata.get("RequestId"), f"error response has no RequestId; {details}"
    protocol = client.meta.service_model.protocol
    if shape is not None:
        if protocol == "json":
            assert error.get("QueryErrorCode") == shape, f"expected __type {shape}; {details}"
        exception_class = getattr(client.exceptions, shape)
        assert isinstance(caught.value, exception_class), (
            f"botocore raised {type(caught.value).__name__}, not {shape}; {details}"
        )


@pytest.fixture(scope="session", autouse=True)
def _print_client_versions(sqs):
    print(
        f"\nclients: boto3 {boto3.__version__}, botocore {botocore.__version__}, "
        f"protocol {sqs.meta.service_model.protocol}, endpoint {endpoint()}"
    )
