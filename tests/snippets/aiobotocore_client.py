import asyncio

from aiobotocore.session import get_session


async def main():
    session = get_session()
    async with session.create_client(
        "sqs",
        endpoint_url="http://127.0.0.1:9324",
        region_name="us-east-1",
        aws_access_key_id="test",
        aws_secret_access_key="test",
    ) as sqs:
        url = (await sqs.create_queue(QueueName="hello-aio"))["QueueUrl"]
        await sqs.send_message(QueueUrl=url, MessageBody="hello")
        received = await sqs.receive_message(QueueUrl=url, WaitTimeSeconds=5)
        print(received["Messages"][0]["Body"])  # hello


asyncio.run(main())
