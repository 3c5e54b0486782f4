from celery import Celery

app = Celery("tasks", broker="sqs://test:test@127.0.0.1:9324")
app.conf.broker_transport_options = {
    "region": "us-east-1",
    "is_secure": False,  # the endpoint is http://
    "predefined_queues": {  # queues that exist already: kombu does not list or create them
        "celery": {
            "url": "http://127.0.0.1:9324/000000000000/celery",
            "access_key_id": "test",
            "secret_access_key": "test",
        },
    },
}
app.conf.task_acks_late = True  # the message is deleted after the task ran, not before


@app.task
def add(x, y):
    return x + y
