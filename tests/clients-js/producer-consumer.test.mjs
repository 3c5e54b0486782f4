// bbc's sqs-producer and sqs-consumer (pinned in package.json: the newest releases whose
// `engines` accept Node 20) against a running leaseq: a round trip, a failing handler whose
// message comes back after its visibility timeout, FIFO order per group, and a graceful stop that
// waits for the handler in progress.
import { test } from "node:test";
import assert from "node:assert/strict";
import { SQSClient, CreateQueueCommand, GetQueueAttributesCommand } from "@aws-sdk/client-sqs";
import { Producer } from "sqs-producer";
import { Consumer } from "sqs-consumer";
import { endpoint, queueName, sleep } from "./common.mjs";

const sqs = new SQSClient({
  endpoint: endpoint(),
  region: "us-east-1",
  credentials: { accessKeyId: "test", secretAccessKey: "test" },
  maxAttempts: 1,
});

async function newQueue(name, Attributes = {}) {
  return (await sqs.send(new CreateQueueCommand({ QueueName: name, Attributes }))).QueueUrl;
}

async function counts(QueueUrl) {
  const { Attributes } = await sqs.send(new GetQueueAttributesCommand({
    QueueUrl, AttributeNames: ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
  }));
  return [Number(Attributes.ApproximateNumberOfMessages), Number(Attributes.ApproximateNumberOfMessagesNotVisible)];
}

/** Runs a consumer until `done()` resolves or `timeoutMs` passes, then stops it. */
async function consume(options, until, timeoutMs = 15_000) {
  const errors = [];
  const consumer = Consumer.create({ sqs, waitTimeSeconds: 1, pollingWaitTimeMs: 0, ...options });
  consumer.on("error", (error) => errors.push(error));
  const stopped = new Promise((resolve) => consumer.once("stopped", resolve));
  consumer.start();
  const timer = sleep(timeoutMs).then(() => "timeout");
  const outcome = await Promise.race([until, timer]);
  consumer.stop();
  await stopped;
  assert.notEqual(outcome, "timeout", "the consumer did not finish in time");
  assert.deepEqual(errors.map((error) => error.message), [], "the consumer reported errors");
  return consumer;
}

test("round trip: the producer's batch is consumed once and deleted", async () => {
  const queueUrl = await newQueue(queueName("round-trip"));
  const producer = Producer.create({ queueUrl, sqs });
  const bodies = Array.from({ length: 15 }, (_, i) => `job-${i}`); // > 10: two batches
  const result = await producer.send(bodies.map((body, i) => ({
    id: `m${i}`, body, messageAttributes: { n: { DataType: "Number", StringValue: String(i) } },
  })));
  assert.equal(result.length, 15);
  assert.equal(await producer.queueSize(), 15);

  const seen = [];
  let finish;
  const done = new Promise((resolve) => { finish = resolve; });
  await consume({
    queueUrl,
    batchSize: 10,
    messageAttributeNames: ["All"],
    handleMessage: async (message) => {
      seen.push(`${message.Body}/${message.MessageAttributes.n.StringValue}`);
      if (seen.length === 15) finish();
      return message;
    },
  }, done);
  assert.deepEqual([...seen].sort(), bodies.map((body, i) => `${body}/${i}`).sort());
  await sleep(200); // the last delete is sent after the handler returns
  assert.deepEqual(await counts(queueUrl), [0, 0], "every handled message was deleted");
});

test("a failing handler's message comes back after its visibility timeout", async () => {
  const queueUrl = await newQueue(queueName("redeliver"), { VisibilityTimeout: "1" });
  await Producer.create({ queueUrl, sqs }).send([{ id: "flaky", body: "flaky job" }]);
  const attempts = [];
  let finish;
  const done = new Promise((resolve) => { finish = resolve; });
  const processingErrors = [];
  const consumer = Consumer.create({
    sqs, queueUrl, waitTimeSeconds: 1, pollingWaitTimeMs: 0,
    attributeNames: ["ApproximateReceiveCount"],
    handleMessage: async (message) => {
      attempts.push({ count: message.Attributes.ApproximateReceiveCount, at: Date.now() });
      if (attempts.length === 1) throw new Error("transient failure");
      finish();
      return message;
    },
  });
  consumer.on("processing_error", (error) => processingErrors.push(error.message));
  const stopped = new Promise((resolve) => consumer.once("stopped", resolve));
  consumer.start();
  const outcome = await Promise.race([done, sleep(15_000).then(() => "timeout")]);
  consumer.stop();
  await stopped;
  assert.notEqual(outcome, "timeout");
  assert.deepEqual(attempts.map((attempt) => attempt.count), ["1", "2"]);
  // Not before the 1 s lease ran out (a few ms of slack for the two clocks' rounding).
  assert.ok(attempts[1].at - attempts[0].at >= 900, `redelivered after ${attempts[1].at - attempts[0].at} ms`);
  assert.equal(processingErrors.length, 1);
  assert.match(processingErrors[0], /transient failure/);
});

test("FIFO: handleMessageBatch sees each group's messages in order", async () => {
  const queueUrl = await newQueue(`${queueName("fifo")}.fifo`, { FifoQueue: "true", ContentBasedDeduplication: "true" });
  const producer = Producer.create({ queueUrl, sqs });
  const sent = [];
  for (let i = 0; i < 6; i++) {
    for (const group of ["g1", "g2", "g3"]) sent.push({ id: `${group}-${i}`, body: `${group}:${i}`, groupId: group });
  }
  await producer.send(sent);
  const seen = { g1: [], g2: [], g3: [] };
  let total = 0;
  let finish;
  const done = new Promise((resolve) => { finish = resolve; });
  await consume({
    queueUrl,
    batchSize: 4,
    suppressFifoWarning: true,
    messageSystemAttributeNames: ["MessageGroupId"],
    handleMessageBatch: async (messages) => {
      for (const message of messages) {
        seen[message.Attributes.MessageGroupId].push(Number(message.Body.split(":")[1]));
      }
      total += messages.length;
      if (total >= 18) finish();
      return messages;
    },
  }, done);
  for (const group of Object.keys(seen)) {
    assert.deepEqual(seen[group], [0, 1, 2, 3, 4, 5], `group ${group} out of order`);
  }
});

test("graceful stop: the handler in progress finishes and its message is deleted", async () => {
  const queueUrl = await newQueue(queueName("graceful"), { VisibilityTimeout: "30" });
  // sqs-producer uses a string body as the batch entry id, which allows no spaces: give an id.
  await Producer.create({ queueUrl, sqs }).send([{ id: "slow", body: "slow job" }]);
  let started;
  const handlerStarted = new Promise((resolve) => { started = resolve; });
  let finished = false;
  const consumer = Consumer.create({
    sqs, queueUrl, waitTimeSeconds: 1, pollingWaitTimeMs: 0,
    pollingCompleteWaitTimeMs: 5_000,
    handleMessage: async (message) => {
      started();
      await sleep(1_000);
      finished = true;
      return message;
    },
  });
  const stopped = new Promise((resolve) => consumer.once("stopped", resolve));
  consumer.start();
  await Promise.race([handlerStarted, sleep(10_000)]);
  assert.deepEqual(await counts(queueUrl), [0, 1], "the message is in flight while handled");
  consumer.stop();
  await stopped;
  assert.equal(finished, true, "stop() returned before the handler finished");
  assert.deepEqual(await counts(queueUrl), [0, 0], "the finished message was deleted before the stop");
});
