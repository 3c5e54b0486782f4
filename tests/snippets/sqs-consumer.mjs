import { SQSClient, CreateQueueCommand } from "@aws-sdk/client-sqs";
import { Producer } from "sqs-producer";
import { Consumer } from "sqs-consumer";

const sqs = new SQSClient({
  endpoint: "http://127.0.0.1:9324",
  region: "us-east-1",
  credentials: { accessKeyId: "test", secretAccessKey: "test" },
});
const { QueueUrl: queueUrl } = await sqs.send(new CreateQueueCommand({ QueueName: "hello-consumer" }));
await Producer.create({ queueUrl, sqs }).send(["hello"]);
const consumer = Consumer.create({
  queueUrl,
  sqs,
  handleMessage: async (message) => {
    console.log(message.Body); // hello
    consumer.stop();
    return message; // returning the message deletes it
  },
});
consumer.start();
