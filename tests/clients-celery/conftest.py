"""Fixtures for the Celery tests: a Celery worker (a child process) per app, against the leaseq
server at LEASEQ_ENDPOINT (scripts/test-clients.sh starts it and runs these tests in the
`celery` venv of scripts/client-venvs.sh).

Two apps, each written into a temporary directory and run by its own worker:
  * `predefined_app`: README's snippet (tests/snippets/celery_app.py, with the README's endpoint
    127.0.0.1:9324 replaced by the test server's), whose queues are `predefined_queues`, plus a
    FIFO queue and a few tasks;
  * `created_app`: no predefined queues, so kombu lists and creates its queue itself (under a
    unique `queue_name_prefix`), with retries and countdown/ETA tasks.
Both use Celery's file-system result backend, so a test can wait for a task's result.
"""

import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from urllib.parse import urlparse

import boto3
import pytest

SNIPPETS = Path(__file__).resolve().parent.parent / "snippets"
README_ENDPOINT = "127.0.0.1:9324"


def endpoint():
    value = os.environ.get("LEASEQ_ENDPOINT")
    if not value:
        pytest.exit("LEASEQ_ENDPOINT is not set (run scripts/test-clients.sh)", returncode=2)
    return value.rstrip("/")


def snippet(name):
    """A README snippet with its endpoint pointed at the test server."""
    return (SNIPPETS / name).read_text().replace(README_ENDPOINT, urlparse(endpoint()).netloc)


@pytest.fixture(scope="session")
def sqs():
    return boto3.client(
        "sqs",
        endpoint_url=endpoint(),
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    )


PREDEFINED_APP = '''
import itertools
import os
import time

from celery_app import add, app  # README's snippet

app.conf.result_backend = "file://" + os.environ["CELERY_RESULTS_DIR"]
app.conf.task_track_started = True
options = app.conf.broker_transport_options
options["wait_time_seconds"] = 1
options["polling_interval"] = 0.1
options["predefined_queues"]["jobs.fifo"] = {
    "url": os.environ["LEASEQ_ENDPOINT"] + "/000000000000/" + os.environ["CELERY_FIFO_QUEUE"],
    "access_key_id": "test",
    "secret_access_key": "test",
}
order = itertools.count()


@app.task
def ordered(label):
    """Returns the label and the order in which this worker (solo pool) ran it."""
    return [label, next(order)]


@app.task
def slow(seconds):
    time.sleep(seconds)
    return "slept"
'''

CREATED_APP = '''
import os
import time

from celery import Celery

host = os.environ["LEASEQ_ENDPOINT"].split("://", 1)[1]
app = Celery("created", broker=f"sqs://test:test@{host}")
app.conf.broker_transport_options = {
    "region": "us-east-1",
    "is_secure": False,
    "queue_name_prefix": os.environ["CELERY_QUEUE_PREFIX"],
    "visibility_timeout": 60,
    "wait_time_seconds": 1,
    "polling_interval": 0.1,
}
app.conf.task_default_queue = "work"
app.conf.result_backend = "file://" + os.environ["CELERY_RESULTS_DIR"]
app.conf.worker_enable_remote_control = False


@app.task
def stamp():
    """When the worker ran it (the wall clock: the test compares it with its own)."""
    return time.time()


@app.task(bind=True, max_retries=5)
def flaky(self, failures):
    """Fails `failures` times, each time retried after 1 s, then returns its retry count."""
    if self.request.retries < failures:
        raise self.retry(countdown=1, exc=RuntimeError(f"failure {self.request.retries + 1}"))
    return self.request.retries
'''


class Worker:
    """A `celery worker` child process for one app module in `directory`."""

    def __init__(self, directory, module, queues, environment):
        self.log_path = directory / f"{module}.worker.log"
        self.log = open(self.log_path, "w")
        command = [
            sys.executable, "-m", "celery", "-A", module, "worker",
            "--pool=solo", "--concurrency=1", "--without-gossip", "--without-mingle",
            "--without-heartbeat", "--loglevel=INFO", "-Q", ",".join(queues),
            "--hostname", f"{module}@%h",
        ]
        self.process = subprocess.Popen(
            command, cwd=directory, env=environment, stdout=self.log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + 30
        while "ready." not in self.log_path.read_text():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.stop()
                pytest.fail(f"celery worker {module} did not start:\n{self.log_path.read_text()}")
            time.sleep(0.1)

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()  # warm shutdown: finish the task in hand
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()

    def output(self):
        return self.log_path.read_text()


@pytest.fixture(scope="session")
def app_dir(tmp_path_factory):
    """The directory of both app modules and their results; importable by this process too."""
    directory = tmp_path_factory.mktemp("celery-apps")
    (directory / "results").mkdir()
    (directory / "celery_app.py").write_text(snippet("celery_app.py"))
    (directory / "predefined_app.py").write_text(PREDEFINED_APP)
    (directory / "created_app.py").write_text(CREATED_APP)
    os.environ.update(
        CELERY_RESULTS_DIR=str(directory / "results"),
        CELERY_FIFO_QUEUE=f"celery-jobs-{uuid.uuid4().hex[:8]}.fifo",
        CELERY_QUEUE_PREFIX=f"celery-{uuid.uuid4().hex[:8]}-",
    )
    sys.path.insert(0, str(directory))
    return directory


@pytest.fixture(scope="session")
def predefined(app_dir, sqs):
    """(app module, queue URLs, worker) for README's predefined-queues app."""
    # Predefined queues must exist: kombu neither lists nor creates them.
    urls = {
        "celery": sqs.create_queue(QueueName="celery")["QueueUrl"],
        "jobs.fifo": sqs.create_queue(
            QueueName=os.environ["CELERY_FIFO_QUEUE"], Attributes={"FifoQueue": "true"}
        )["QueueUrl"],
    }
    worker = Worker(app_dir, "predefined_app", ["celery", "jobs.fifo"], dict(os.environ, PYTHONPATH=str(app_dir)))
    import predefined_app

    yield predefined_app, urls, worker
    worker.stop()


@pytest.fixture(scope="session")
def created(app_dir):
    """(app module, worker) for the app whose queue kombu creates."""
    worker = Worker(app_dir, "created_app", ["work"], dict(os.environ, PYTHONPATH=str(app_dir)))
    import created_app

    yield created_app, worker
    worker.stop()
