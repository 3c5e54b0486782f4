"""Terraform with the AWS provider against leaseq: queues with redrive and redrive-allow
policies, a FIFO queue, tags and a queue policy; `plan` shows no changes after `apply`; an update
in place after a restart of the server; `destroy`.

scripts/test-clients.sh runs this (in the `json` venv, for boto3) only where it found the AWS
provider in a local mirror: LEASEQ_TF_MIRROR is that mirror's directory, LEASEQ_BIN the server
binary; this module starts its own server so that it can restart it on the same data directory.
Terraform never reaches the network: the CLI configuration installs the provider from the mirror
only (`direct` excludes it).
"""

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import boto3
import pytest

HERE = Path(__file__).resolve().parent
SNIPPETS = HERE.parent / "snippets"

pytestmark = pytest.mark.skipif(
    not os.environ.get("LEASEQ_TF_MIRROR"), reason="no AWS provider mirror (LEASEQ_TF_MIRROR)"
)


class Server:
    """`leaseq serve` on a fixed port and data directory, restartable."""

    def __init__(self, binary, data_dir):
        self.binary, self.data_dir = binary, data_dir
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.log = open(data_dir.parent / f"{data_dir.name}.log", "a")
        self.process = None

    def start(self):
        self.process = subprocess.Popen(
            [self.binary, "serve", "--listen", f"127.0.0.1:{self.port}", "--data-dir", str(self.data_dir)],
            stdout=self.log, stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            assert self.process.poll() is None, "leaseq exited at start-up"
            try:
                with urllib.request.urlopen(self.endpoint + "/health", timeout=1) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.1)
        raise AssertionError("leaseq did not answer /health")

    def stop(self):
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)


@pytest.fixture(scope="module")
def server():
    root = Path(tempfile.mkdtemp(prefix="leaseq-terraform."))
    instance = Server(os.environ["LEASEQ_BIN"], root / "data")
    instance.start()
    yield instance
    instance.stop()
    instance.log.close()
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def workdir(server, tmp_path_factory):
    directory = tmp_path_factory.mktemp("terraform")
    provider = (SNIPPETS / "terraform_provider.tf").read_text()
    (directory / "provider.tf").write_text(provider.replace("127.0.0.1:9324", f"127.0.0.1:{server.port}"))
    shutil.copy(HERE / "queues.tf", directory / "queues.tf")
    mirror = os.environ["LEASEQ_TF_MIRROR"]
    (directory / "cli.tfrc").write_text(
        "provider_installation {\n"
        f'  filesystem_mirror {{\n    path    = "{mirror}"\n'
        '    include = ["registry.terraform.io/hashicorp/aws"]\n  }\n'
        '  direct {\n    exclude = ["registry.terraform.io/hashicorp/aws"]\n  }\n}\n'
    )
    return directory


def terraform(workdir, *args, variables=None, check=True):
    environment = dict(
        os.environ,
        TF_CLI_CONFIG_FILE=str(workdir / "cli.tfrc"),
        TF_IN_AUTOMATION="1",
        CHECKPOINT_DISABLE="1",  # no version check against checkpoint-api.hashicorp.com
    )
    command = ["terraform", *args, "-no-color"]
    if args[0] != "output":
        command.append("-input=false")
    for name, value in (variables or {}).items():
        command.append(f"-var={name}={value}")
    started = time.monotonic()
    done = subprocess.run(command, cwd=workdir, env=environment, capture_output=True, text=True, timeout=300)
    print(f"terraform {args[0]}: {time.monotonic() - started:.1f} s")  # with -s or on failure
    if check:
        assert done.returncode == 0, f"terraform {args[0]} failed:\n{done.stdout}\n{done.stderr}"
    return done


def sqs_client(server):
    return boto3.client(
        "sqs", endpoint_url=server.endpoint, region_name="us-east-1",
        aws_access_key_id="test", aws_secret_access_key="test",
    )


def test_apply_plan_restart_update_destroy(server, workdir):
    prefix = f"tf-{uuid.uuid4().hex[:6]}"
    variables = {"prefix": prefix, "visibility_timeout_seconds": 45}
    terraform(workdir, "init")
    terraform(workdir, "apply", "-auto-approve", variables=variables)

    sqs = sqs_client(server)
    outputs = json.loads(terraform(workdir, "output", "-json").stdout)
    jobs_url = outputs["jobs_url"]["value"]
    assert jobs_url == f"{server.endpoint}/000000000000/{prefix}-jobs"
    attributes = sqs.get_queue_attributes(QueueUrl=jobs_url, AttributeNames=["All"])["Attributes"]
    assert attributes["VisibilityTimeout"] == "45"
    assert attributes["MessageRetentionPeriod"] == "86400"
    assert attributes["ReceiveMessageWaitTimeSeconds"] == "5"
    assert json.loads(attributes["RedrivePolicy"]) == {
        "deadLetterTargetArn": outputs["dlq_arn"]["value"], "maxReceiveCount": 4,
    }
    assert sqs.list_queue_tags(QueueUrl=jobs_url)["Tags"] == {"team": "payments", "env": "test"}
    dlq_url = f"{server.endpoint}/000000000000/{prefix}-dlq"
    dlq = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["All"])["Attributes"]
    assert json.loads(dlq["RedriveAllowPolicy"]) == {
        "redrivePermission": "byQueue",
        "sourceQueueArns": [f"arn:aws:sqs:us-east-1:000000000000:{prefix}-jobs"],
    }
    statement = json.loads(dlq["Policy"])["Statement"][0]
    assert (statement["Sid"], statement["Action"]) == ("operators", ["sqs:ReceiveMessage", "sqs:DeleteMessage"])
    fifo = sqs.get_queue_attributes(QueueUrl=outputs["events_url"]["value"], AttributeNames=["All"])["Attributes"]
    assert (fifo["FifoQueue"], fifo["ContentBasedDeduplication"]) == ("true", "true")
    assert (fifo["DeduplicationScope"], fifo["FifoThroughputLimit"]) == ("messageGroup", "perMessageGroupId")

    # What Terraform reads back is what it wrote: no drift.
    plan = terraform(workdir, "plan", "-detailed-exitcode", variables=variables, check=False)
    assert plan.returncode == 0, f"plan after apply is not empty:\n{plan.stdout}\n{plan.stderr}"

    # A restart keeps everything; a changed attribute is an update in place, not a replacement.
    server.stop()
    server.start()
    # (`apply` prints its plan: no separate `plan` here, each terraform command starts the
    # 700 MB provider three times, several seconds each on a busy machine.)
    variables["visibility_timeout_seconds"] = 120
    applied = terraform(workdir, "apply", "-auto-approve", variables=variables).stdout
    assert "aws_sqs_queue.jobs will be updated in-place" in applied, applied
    assert "Resources: 0 added, 1 changed, 0 destroyed." in applied, applied
    attributes = sqs.get_queue_attributes(QueueUrl=jobs_url, AttributeNames=["VisibilityTimeout"])
    assert attributes["Attributes"]["VisibilityTimeout"] == "120"

    destroyed = terraform(workdir, "destroy", "-auto-approve", variables=variables).stdout
    assert "Resources: 3 destroyed." in destroyed, destroyed
    assert sqs.list_queues(QueueNamePrefix=prefix).get("QueueUrls", []) == []
