import boto3

sqs = boto3.client(
    "sqs",
    endpoint_url="http://127.0.0.1:9324",
    region_name="us-east-1",
    aws_access_key_id="test",
    aws_secret_access_key="test",
)
url = sqs.create_queue(QueueName="hello-boto3")["QueueUrl"]
sqs.send_message(QueueUrl=url, MessageBody="hello")
print(sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5)["Messages"][0]["Body"])  # hello
