"""Celery with kombu's SQS transport (versions pinned in scripts/client-venvs.sh) against leaseq:
tasks sent by this process and executed by a `celery worker` child process, on queues kombu
creates itself and on `predefined_queues` (README's snippet), with acks_late, a FIFO queue,
countdown/ETA and retries."""

import time
from datetime import datetime, timedelta, timezone

RESULT_TIMEOUT_S = 30


def counts(sqs, url):
    attributes = sqs.get_queue_attributes(
        QueueUrl=url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]), int(
        attributes["ApproximateNumberOfMessagesNotVisible"]
    )


def eventually(condition, timeout_s=10, what="condition"):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"{what} not reached within {timeout_s} s")


def test_readme_app_runs_a_task_on_its_predefined_queue(predefined, sqs):
    app, urls, worker = predefined
    result = app.add.delay(2, 3)
    assert result.get(timeout=RESULT_TIMEOUT_S) == 5
    # The task went through the predefined queue's URL, and was deleted once it ran.
    assert f"Task celery_app.add[{result.id}] succeeded" in worker.output()
    eventually(lambda: counts(sqs, urls["celery"]) == (0, 0), what="the queue emptied")


def test_acks_late_keeps_the_message_leased_while_the_task_runs(predefined, sqs):
    app, urls, _ = predefined
    result = app.slow.delay(2)
    eventually(lambda: result.state == "STARTED", timeout_s=RESULT_TIMEOUT_S, what="task started")
    # task_acks_late: the SQS message is still there, in flight, while the task runs...
    assert counts(sqs, urls["celery"]) == (0, 1)
    assert result.get(timeout=RESULT_TIMEOUT_S) == "slept"
    # ...and deleted after it finished.
    eventually(lambda: counts(sqs, urls["celery"]) == (0, 0), what="the message deleted")


def test_fifo_queue_runs_a_group_in_order(predefined, sqs):
    app, urls, _ = predefined
    labels = [f"job-{i}" for i in range(6)]
    results = [
        app.ordered.apply_async((label,), queue="jobs.fifo", MessageGroupId="orders")
        for label in labels
    ]
    ran = [result.get(timeout=RESULT_TIMEOUT_S) for result in results]
    assert [label for label, _ in ran] == labels
    positions = [position for _, position in ran]
    assert positions == sorted(positions), f"FIFO group ran out of order: {ran}"
    # kombu sent them with a group id and deduplication ids, as a FIFO queue requires.
    eventually(lambda: counts(sqs, urls["jobs.fifo"]) == (0, 0), what="the FIFO queue emptied")


def test_kombu_creates_its_queue_with_the_configured_visibility(created, sqs):
    app, _ = created
    assert app.stamp.delay().get(timeout=RESULT_TIMEOUT_S) > 0
    prefix = app.app.conf.broker_transport_options["queue_name_prefix"]
    urls = sqs.list_queues(QueueNamePrefix=prefix).get("QueueUrls", [])
    assert [url.rsplit("/", 1)[1] for url in urls] == [f"{prefix}work"]
    attributes = sqs.get_queue_attributes(QueueUrl=urls[0], AttributeNames=["VisibilityTimeout"])
    assert attributes["Attributes"]["VisibilityTimeout"] == "60"


def test_countdown_and_eta_are_not_run_early(created):
    app, _ = created
    sent_at = time.time()
    by_countdown = app.stamp.apply_async(countdown=2)
    by_eta = app.stamp.apply_async(eta=datetime.now(timezone.utc) + timedelta(seconds=3))
    ran_countdown = by_countdown.get(timeout=RESULT_TIMEOUT_S)
    ran_eta = by_eta.get(timeout=RESULT_TIMEOUT_S)
    # 0.1 s of slack: the worker's and this process's clocks are the same clock, but Celery
    # rounds ETAs to milliseconds.
    assert ran_countdown - sent_at >= 1.9, f"countdown=2 ran after {ran_countdown - sent_at:.2f} s"
    assert ran_eta - sent_at >= 2.9, f"eta=+3 s ran after {ran_eta - sent_at:.2f} s"
    assert ran_countdown - sent_at < 15 and ran_eta - sent_at < 15


def test_retries_run_again_until_the_task_succeeds(created):
    app, worker = created
    started = time.monotonic()
    result = app.flaky.delay(2)
    assert result.get(timeout=RESULT_TIMEOUT_S) == 2
    assert time.monotonic() - started >= 1.9  # two retries, each after countdown=1
    output = worker.output()
    assert output.count(f"Task created_app.flaky[{result.id}] retry") == 2, output[-2000:]
