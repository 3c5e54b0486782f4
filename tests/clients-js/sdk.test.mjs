// The AWS SDK for JavaScript v3 (@aws-sdk/client-sqs, pinned in package.json) against a running
// leaseq: every SQS action, batches with partial failure, every message-attribute type, 1 MiB
// bodies, FIFO, long polling and the error classes applications catch. The SDK itself checks the
// MD5 of every body it sends and receives (@aws-sdk/middleware-sdk-sqs throws on a mismatch);
// the tests check the attribute MD5s, which it does not.
import { test } from "node:test";
import assert from "node:assert/strict";
import * as sqsModule from "@aws-sdk/client-sqs";
import {
  SQSClient,
  CreateQueueCommand,
  GetQueueUrlCommand,
  ListQueuesCommand,
  DeleteQueueCommand,
  GetQueueAttributesCommand,
  SetQueueAttributesCommand,
  PurgeQueueCommand,
  SendMessageCommand,
  SendMessageBatchCommand,
  ReceiveMessageCommand,
  DeleteMessageCommand,
  DeleteMessageBatchCommand,
  ChangeMessageVisibilityCommand,
  ChangeMessageVisibilityBatchCommand,
  TagQueueCommand,
  UntagQueueCommand,
  ListQueueTagsCommand,
  ListDeadLetterSourceQueuesCommand,
  AddPermissionCommand,
  RemovePermissionCommand,
  StartMessageMoveTaskCommand,
  ListMessageMoveTasksCommand,
  CancelMessageMoveTaskCommand,
  QueueDoesNotExist,
  ReceiptHandleIsInvalid,
  BatchEntryIdsNotDistinct,
  TooManyEntriesInBatchRequest,
  EmptyBatchRequest,
  InvalidAttributeName,
  PurgeQueueInProgress,
  ResourceNotFoundException,
  SQSServiceException,
} from "@aws-sdk/client-sqs";
import { endpoint, md5Hex, md5OfAttributes, queueName, sleep } from "./common.mjs";

const sqs = new SQSClient({
  endpoint: endpoint(),
  region: "us-east-1",
  credentials: { accessKeyId: "test", secretAccessKey: "test" },
  maxAttempts: 1, // a retry would hide the server's first answer
});

async function newQueue(tag, Attributes = {}) {
  const { QueueUrl } = await sqs.send(new CreateQueueCommand({ QueueName: queueName(tag), Attributes }));
  return QueueUrl;
}

async function arnOf(QueueUrl) {
  const { Attributes } = await sqs.send(
    new GetQueueAttributesCommand({ QueueUrl, AttributeNames: ["QueueArn"] }),
  );
  return Attributes.QueueArn;
}

async function receive(QueueUrl, extra = {}) {
  const { Messages = [] } = await sqs.send(
    new ReceiveMessageCommand({ QueueUrl, MaxNumberOfMessages: 10, WaitTimeSeconds: 1, ...extra }),
  );
  return Messages;
}

/** Asserts that `promise` rejects with the modelled exception `Class` (or the SQS `name`). */
async function rejectsWith(promise, { Class, name, code, status }) {
  const error = await promise.then(
    () => assert.fail(`expected ${name}, the call succeeded`),
    (caught) => caught,
  );
  assert.ok(error instanceof SQSServiceException, `not an SQS error: ${error}`);
  if (Class) assert.ok(error instanceof Class, `${error.name} is not a ${Class.name}`);
  assert.equal(error.name, name);
  // The legacy (Query) code, which SQS sends in x-amzn-query-error: the SDK is
  // awsQueryCompatible and exposes it as `Code`.
  if (code) assert.equal(error.Code, code);
  if (status) assert.equal(error.$metadata.httpStatusCode, status);
  assert.ok(error.$metadata.requestId, "no request id");
  return error;
}

test("queue actions: create, get URL, list, attributes, tags, purge, delete", async () => {
  const name = queueName("queue-life");
  const { QueueUrl } = await sqs.send(
    new CreateQueueCommand({ QueueName: name, Attributes: { VisibilityTimeout: "45" }, tags: { team: "js" } }),
  );
  assert.equal(QueueUrl, `${endpoint()}/000000000000/${name}`);
  // Creating it again with the same attributes is idempotent; different ones are an error.
  assert.equal((await sqs.send(new CreateQueueCommand({ QueueName: name, Attributes: { VisibilityTimeout: "45" } }))).QueueUrl, QueueUrl);
  await rejectsWith(
    sqs.send(new CreateQueueCommand({ QueueName: name, Attributes: { VisibilityTimeout: "46" } })),
    { Class: sqsModule.QueueNameExists, name: "QueueNameExists", code: "QueueAlreadyExists", status: 400 },
  );
  assert.equal((await sqs.send(new GetQueueUrlCommand({ QueueName: name }))).QueueUrl, QueueUrl);
  const listed = await sqs.send(new ListQueuesCommand({ QueueNamePrefix: name }));
  assert.deepEqual(listed.QueueUrls, [QueueUrl]);

  const { Attributes } = await sqs.send(new GetQueueAttributesCommand({ QueueUrl, AttributeNames: ["All"] }));
  assert.equal(Attributes.VisibilityTimeout, "45");
  assert.equal(Attributes.MaximumMessageSize, "1048576"); // SQS's default since 2025
  assert.equal(Attributes.QueueArn, `arn:aws:sqs:us-east-1:000000000000:${name}`);
  await sqs.send(new SetQueueAttributesCommand({ QueueUrl, Attributes: { DelaySeconds: "3" } }));
  const after = await sqs.send(new GetQueueAttributesCommand({ QueueUrl, AttributeNames: ["DelaySeconds"] }));
  assert.deepEqual(after.Attributes, { DelaySeconds: "3" });

  await sqs.send(new TagQueueCommand({ QueueUrl, Tags: { env: "test" } }));
  await sqs.send(new UntagQueueCommand({ QueueUrl, TagKeys: ["team"] }));
  assert.deepEqual((await sqs.send(new ListQueueTagsCommand({ QueueUrl }))).Tags, { env: "test" });

  await sqs.send(new AddPermissionCommand({ QueueUrl, Label: "p1", AWSAccountIds: ["111122223333"], Actions: ["SendMessage"] }));
  const policy = JSON.parse((await sqs.send(new GetQueueAttributesCommand({ QueueUrl, AttributeNames: ["Policy"] }))).Attributes.Policy);
  assert.equal(policy.Statement[0].Sid, "p1");
  await sqs.send(new RemovePermissionCommand({ QueueUrl, Label: "p1" }));

  await sqs.send(new SendMessageCommand({ QueueUrl, MessageBody: "x", DelaySeconds: 0 }));
  await sqs.send(new PurgeQueueCommand({ QueueUrl }));
  // SQS allows one purge per queue every 60 seconds.
  await rejectsWith(sqs.send(new PurgeQueueCommand({ QueueUrl })), {
    Class: PurgeQueueInProgress, name: "PurgeQueueInProgress", code: "AWS.SimpleQueueService.PurgeQueueInProgress", status: 403,
  });
  const counts = await sqs.send(new GetQueueAttributesCommand({ QueueUrl, AttributeNames: ["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesDelayed"] }));
  assert.deepEqual(counts.Attributes, { ApproximateNumberOfMessages: "0", ApproximateNumberOfMessagesDelayed: "0" });

  await sqs.send(new DeleteQueueCommand({ QueueUrl }));
  await rejectsWith(sqs.send(new GetQueueUrlCommand({ QueueName: name })), {
    Class: QueueDoesNotExist, name: "QueueDoesNotExist", code: "AWS.SimpleQueueService.NonExistentQueue", status: 400,
  });
});

test("every attribute type round-trips with SQS's MD5s, on send, batch send and receive", async () => {
  const QueueUrl = await newQueue("attributes");
  const MessageAttributes = {
    str: { DataType: "String", StringValue: "plain <&> \r\n text 🦀" },
    num: { DataType: "Number", StringValue: "-12.5e3" },
    bin: { DataType: "Binary", BinaryValue: Uint8Array.from({ length: 256 }, (_, i) => i) },
    "custom.str": { DataType: "String.order-id", StringValue: "A-17" },
    "custom.num": { DataType: "Number.float", StringValue: "3.25" },
    "custom.bin": { DataType: "Binary.jpg", BinaryValue: Uint8Array.from([0xff, 0xd8, 0xff, 0x00]) },
  };
  const expected = md5OfAttributes(MessageAttributes);
  const sent = await sqs.send(new SendMessageCommand({ QueueUrl, MessageBody: "with attributes", MessageAttributes }));
  assert.equal(sent.MD5OfMessageBody, md5Hex("with attributes"));
  assert.equal(sent.MD5OfMessageAttributes, expected);
  const batch = await sqs.send(new SendMessageBatchCommand({
    QueueUrl,
    Entries: [{ Id: "a", MessageBody: "batched", MessageAttributes }, { Id: "b", MessageBody: "plain" }],
  }));
  assert.equal(batch.Failed?.length ?? 0, 0);
  const byId = Object.fromEntries(batch.Successful.map((entry) => [entry.Id, entry]));
  assert.equal(byId.a.MD5OfMessageAttributes, expected);
  // A message without attributes has no attribute MD5 (the PHP SDK rejects one that has it).
  assert.equal(byId.b.MD5OfMessageAttributes, undefined);

  const messages = [];
  for (let round = 0; round < 5 && messages.length < 3; round++) {
    messages.push(...(await receive(QueueUrl, { MessageAttributeNames: ["All"], MessageSystemAttributeNames: ["All"] })));
  }
  assert.equal(messages.length, 3);
  for (const message of messages) {
    if (message.Body === "plain") {
      assert.equal(message.MessageAttributes, undefined);
      assert.equal(message.MD5OfMessageAttributes, undefined);
      continue;
    }
    assert.equal(message.MD5OfMessageAttributes, expected);
    assert.equal(md5OfAttributes(message.MessageAttributes), expected);
    assert.deepEqual(Buffer.from(message.MessageAttributes.bin.BinaryValue), Buffer.from(MessageAttributes.bin.BinaryValue));
    assert.equal(message.MessageAttributes["custom.num"].DataType, "Number.float");
    assert.equal(message.Attributes.ApproximateReceiveCount, "1");
    assert.match(message.Attributes.SentTimestamp, /^\d{13}$/);
  }
  // A filter by name and by prefix (`custom.*`).
  await sqs.send(new SendMessageCommand({ QueueUrl, MessageBody: "filtered", MessageAttributes }));
  const [filtered] = await receive(QueueUrl, { MessageAttributeNames: ["str", "custom.*"], MaxNumberOfMessages: 1 });
  assert.deepEqual(Object.keys(filtered.MessageAttributes).sort(), ["custom.bin", "custom.num", "custom.str", "str"]);
  assert.equal(filtered.MD5OfMessageAttributes, md5OfAttributes(filtered.MessageAttributes));
});

test("1 MiB bodies: the largest allowed goes through whole, one byte more is refused", async () => {
  const QueueUrl = await newQueue("large");
  // 1 048 576 bytes of UTF-8 with multi-byte characters in it (SQS counts bytes, not characters).
  const unit = "leaseq ✓ 🦀 ";
  let body = unit.repeat(Math.floor(1_048_576 / Buffer.byteLength(unit)));
  body += "x".repeat(1_048_576 - Buffer.byteLength(body));
  assert.equal(Buffer.byteLength(body), 1_048_576);
  // The SDK throws if the MD5 it gets back is not that of what it sent.
  await sqs.send(new SendMessageCommand({ QueueUrl, MessageBody: body }));
  const [message] = await receive(QueueUrl, { MaxNumberOfMessages: 1 });
  assert.equal(message.Body.length, body.length);
  assert.ok(message.Body === body, "the 1 MiB body changed in transit");
  await rejectsWith(sqs.send(new SendMessageCommand({ QueueUrl, MessageBody: body + "x" })), {
    name: "InvalidParameterValue", code: "InvalidParameterValue", status: 400,
  });
});

test("batches: partial failure per entry, delete and change-visibility batches", async () => {
  const QueueUrl = await newQueue("batches");
  const sent = await sqs.send(new SendMessageBatchCommand({
    QueueUrl,
    Entries: [
      { Id: "ok1", MessageBody: "one" },
      { Id: "bad", MessageBody: "two", DelaySeconds: 901 }, // above SQS's 900 s maximum
      { Id: "ok2", MessageBody: "three" },
    ],
  }));
  assert.deepEqual(sent.Successful.map((entry) => entry.Id).sort(), ["ok1", "ok2"]);
  assert.equal(sent.Failed.length, 1);
  assert.equal(sent.Failed[0].Id, "bad");
  assert.equal(sent.Failed[0].SenderFault, true);
  assert.equal(sent.Failed[0].Code, "InvalidParameterValue");

  const messages = [];
  for (let round = 0; round < 5 && messages.length < 2; round++) messages.push(...(await receive(QueueUrl)));
  assert.equal(messages.length, 2);
  const changed = await sqs.send(new ChangeMessageVisibilityBatchCommand({
    QueueUrl,
    Entries: [
      { Id: "m0", ReceiptHandle: messages[0].ReceiptHandle, VisibilityTimeout: 0 },
      { Id: "junk", ReceiptHandle: "not-a-receipt", VisibilityTimeout: 10 },
    ],
  }));
  assert.deepEqual(changed.Successful.map((entry) => entry.Id), ["m0"]);
  assert.equal(changed.Failed[0].Id, "junk");
  assert.equal(changed.Failed[0].Code, "ReceiptHandleIsInvalid");
  // m0 was released (visibility 0): it comes back at once, with a new receipt.
  const [again] = await receive(QueueUrl, { MaxNumberOfMessages: 1 });
  assert.equal(again.MessageId, messages[0].MessageId);
  assert.notEqual(again.ReceiptHandle, messages[0].ReceiptHandle);
  const deleted = await sqs.send(new DeleteMessageBatchCommand({
    QueueUrl,
    Entries: [
      { Id: "d0", ReceiptHandle: again.ReceiptHandle },
      { Id: "d1", ReceiptHandle: messages[1].ReceiptHandle },
    ],
  }));
  assert.deepEqual(deleted.Successful.map((entry) => entry.Id).sort(), ["d0", "d1"]);
  assert.equal(deleted.Failed?.length ?? 0, 0);

  await rejectsWith(sqs.send(new SendMessageBatchCommand({ QueueUrl, Entries: [] })), {
    Class: EmptyBatchRequest, name: "EmptyBatchRequest", code: "AWS.SimpleQueueService.EmptyBatchRequest",
  });
  await rejectsWith(sqs.send(new SendMessageBatchCommand({
    QueueUrl, Entries: [{ Id: "x", MessageBody: "a" }, { Id: "x", MessageBody: "b" }],
  })), { Class: BatchEntryIdsNotDistinct, name: "BatchEntryIdsNotDistinct", code: "AWS.SimpleQueueService.BatchEntryIdsNotDistinct" });
  await rejectsWith(sqs.send(new DeleteMessageBatchCommand({
    QueueUrl, Entries: Array.from({ length: 11 }, (_, i) => ({ Id: `e${i}`, ReceiptHandle: "r" })),
  })), { Class: TooManyEntriesInBatchRequest, name: "TooManyEntriesInBatchRequest", code: "AWS.SimpleQueueService.TooManyEntriesInBatchRequest" });
});

test("leases: a receipt extends and deletes; an invalid one is ReceiptHandleIsInvalid", async () => {
  const QueueUrl = await newQueue("leases", { VisibilityTimeout: "1" });
  await sqs.send(new SendMessageCommand({ QueueUrl, MessageBody: "lease me" }));
  const [first] = await receive(QueueUrl, { MaxNumberOfMessages: 1 });
  await sqs.send(new ChangeMessageVisibilityCommand({ QueueUrl, ReceiptHandle: first.ReceiptHandle, VisibilityTimeout: 30 }));
  await sleep(1500); // past the queue's 1 s visibility: the extension holds it
  assert.deepEqual(await receive(QueueUrl, { WaitTimeSeconds: 0 }), []);
  await sqs.send(new DeleteMessageCommand({ QueueUrl, ReceiptHandle: first.ReceiptHandle }));
  await rejectsWith(sqs.send(new DeleteMessageCommand({ QueueUrl, ReceiptHandle: "garbage" })), {
    Class: ReceiptHandleIsInvalid, name: "ReceiptHandleIsInvalid", code: "ReceiptHandleIsInvalid", status: 404,
  });
  await rejectsWith(sqs.send(new GetQueueAttributesCommand({ QueueUrl, AttributeNames: ["NoSuchAttribute"] })), {
    Class: InvalidAttributeName, name: "InvalidAttributeName", code: "InvalidAttributeName",
  });
  await rejectsWith(sqs.send(new SendMessageCommand({ QueueUrl: `${endpoint()}/000000000000/no-such-queue-js`, MessageBody: "x" })), {
    Class: QueueDoesNotExist, name: "QueueDoesNotExist", code: "AWS.SimpleQueueService.NonExistentQueue",
  });
});

test("long polling: a waiting receive returns as soon as a message is sent", async () => {
  const QueueUrl = await newQueue("long-poll");
  const started = Date.now();
  const waiting = sqs.send(new ReceiveMessageCommand({ QueueUrl, WaitTimeSeconds: 10 }));
  await sleep(500);
  await sqs.send(new SendMessageCommand({ QueueUrl, MessageBody: "wake up" }));
  const { Messages } = await waiting;
  const elapsedMs = Date.now() - started;
  assert.equal(Messages[0].Body, "wake up");
  assert.ok(elapsedMs >= 400 && elapsedMs < 5000, `long poll returned after ${elapsedMs} ms`);
  // An empty long poll waits its whole time (here 1 s) and returns no messages.
  const emptyStarted = Date.now();
  const empty = await sqs.send(new ReceiveMessageCommand({ QueueUrl, WaitTimeSeconds: 1 }));
  assert.equal(empty.Messages, undefined);
  assert.ok(Date.now() - emptyStarted >= 900);
});

test("FIFO: order per group, deduplication, sequence numbers, attempt ids", async () => {
  const name = `${queueName("fifo")}.fifo`;
  const { QueueUrl: fifo } = await sqs.send(new CreateQueueCommand({
    QueueName: name, Attributes: { FifoQueue: "true", ContentBasedDeduplication: "true" },
  }));
  const sequences = [];
  for (const [group, body] of [["a", "a1"], ["b", "b1"], ["a", "a2"], ["a", "a3"], ["b", "b2"]]) {
    const sent = await sqs.send(new SendMessageCommand({ QueueUrl: fifo, MessageBody: body, MessageGroupId: group }));
    sequences.push(BigInt(sent.SequenceNumber));
  }
  assert.deepEqual([...sequences].sort((x, y) => (x < y ? -1 : 1)), sequences, "sequence numbers increase");
  // Content-based deduplication: the same body in the window is accepted but not enqueued again.
  const duplicate = await sqs.send(new SendMessageCommand({ QueueUrl: fifo, MessageBody: "a1", MessageGroupId: "a" }));
  assert.equal(BigInt(duplicate.SequenceNumber), sequences[0]);
  // An explicit deduplication id in a batch.
  const batch = await sqs.send(new SendMessageBatchCommand({
    QueueUrl: fifo,
    Entries: [{ Id: "c", MessageBody: "c1", MessageGroupId: "c", MessageDeduplicationId: "dedup-c1" }],
  }));
  assert.match(batch.Successful[0].SequenceNumber, /^\d+$/);

  const first = await receive(fifo, { ReceiveRequestAttemptId: "attempt-1", MessageSystemAttributeNames: ["All"] });
  // A retry with the same attempt id returns the same messages and receipts.
  const retried = await receive(fifo, { ReceiveRequestAttemptId: "attempt-1" });
  assert.deepEqual(retried.map((m) => m.ReceiptHandle), first.map((m) => m.ReceiptHandle));
  const bodies = first.map((m) => m.Body);
  assert.equal(new Set(bodies).size, 6, `got ${bodies}`);
  for (const group of ["a", "b"]) {
    const inGroup = first.filter((m) => m.Attributes.MessageGroupId === group).map((m) => m.Body);
    assert.deepEqual(inGroup, [...inGroup].sort(), `group ${group} out of order: ${inGroup}`);
  }
  assert.equal(first.find((m) => m.Body === "c1").Attributes.MessageDeduplicationId, "dedup-c1");
  // Every group is in flight now: nothing more until they are deleted.
  assert.deepEqual(await receive(fifo, { WaitTimeSeconds: 0 }), []);
  // A FIFO queue requires a group id (an unmodelled error: the SDK names it by the legacy code).
  await rejectsWith(sqs.send(new SendMessageCommand({ QueueUrl: fifo, MessageBody: "no group" })), {
    name: "MissingParameter", code: "MissingParameter", status: 400,
  });
});

test("dead-letter queues and redrive: source queues, move task start, list, cancel", async () => {
  const dlq = await newQueue("dlq");
  const dlqArn = await arnOf(dlq);
  const source = await newQueue("source", {
    RedrivePolicy: JSON.stringify({ deadLetterTargetArn: dlqArn, maxReceiveCount: 1 }),
    VisibilityTimeout: "0",
  });
  assert.deepEqual((await sqs.send(new ListDeadLetterSourceQueuesCommand({ QueueUrl: dlq }))).queueUrls, [source]);
  await sqs.send(new SendMessageCommand({ QueueUrl: source, MessageBody: "poison" }));
  await receive(source, { MaxNumberOfMessages: 1 }); // receive 1 of maxReceiveCount 1
  assert.deepEqual(await receive(source, { WaitTimeSeconds: 0 }), []); // the 2nd moves it
  const [dead] = await receive(dlq, { MaxNumberOfMessages: 1, VisibilityTimeout: 0 });
  assert.equal(dead.Body, "poison");

  // Three more in the dead-letter queue and a move at 1 message/s: it cannot finish in the
  // fraction of a second before the cancel.
  for (const body of ["p2", "p3", "p4"]) await sqs.send(new SendMessageCommand({ QueueUrl: dlq, MessageBody: body }));
  const { TaskHandle } = await sqs.send(new StartMessageMoveTaskCommand({ SourceArn: dlqArn, MaxNumberOfMessagesPerSecond: 1 }));
  assert.ok(TaskHandle);
  const running = (await sqs.send(new ListMessageMoveTasksCommand({ SourceArn: dlqArn }))).Results[0];
  assert.equal(running.SourceArn, dlqArn);
  assert.equal(running.Status, "RUNNING");
  assert.equal(running.ApproximateNumberOfMessagesToMove, 4);
  const cancelled = await sqs.send(new CancelMessageMoveTaskCommand({ TaskHandle }));
  assert.ok(cancelled.ApproximateNumberOfMessagesMoved < 4, `moved ${cancelled.ApproximateNumberOfMessagesMoved}`);
  const after = (await sqs.send(new ListMessageMoveTasksCommand({ SourceArn: dlqArn }))).Results[0];
  assert.ok(["CANCELLING", "CANCELLED"].includes(after.Status), after.Status);
  // A handle that is not AWS's base64 JSON is invalid; a well-formed one naming a source queue
  // that does not exist is ResourceNotFoundException (as tests/clients/test_aws_fidelity.py
  // pins from AWS's recorded answers).
  await rejectsWith(sqs.send(new CancelMessageMoveTaskCommand({ TaskHandle: "no-such-task" })), {
    name: "InvalidParameterValue", code: "InvalidParameterValue", status: 400,
  });
  const unknownSource = dlqArn.replace(/:[^:]+$/, ":no-such-queue");
  const wellFormed = Buffer.from(JSON.stringify({ taskId: "0d4f3b9e-1c8a-4c43-9f7e-2b1f6d0a9c11", sourceArn: unknownSource })).toString("base64");
  await rejectsWith(sqs.send(new CancelMessageMoveTaskCommand({ TaskHandle: wellFormed })), {
    Class: ResourceNotFoundException, name: "ResourceNotFoundException",
  });
});

test("fair queues and redelivery backoff: group ids on a standard queue, quiet tenants first, a delayed redelivery", async () => {
  // Fair queues: SQS developer guide, "Amazon SQS fair queues" (a MessageGroupId on a standard
  // queue names a tenant; quiet tenants' messages go first). LeaseqFairInFlightMin and
  // LeaseqRedeliveryBackoff are leaseq's settings (docs/design/fairness.md).
  const QueueUrl = await newQueue("fair", {
    VisibilityTimeout: "60",
    LeaseqFairInFlightMin: "2",
  });
  for (const MessageBody of ["b1", "b2", "b3"]) {
    await sqs.send(new SendMessageCommand({ QueueUrl, MessageBody, MessageGroupId: "big" }));
  }
  await sqs.send(new SendMessageCommand({ QueueUrl, MessageBody: "s1", MessageGroupId: "small" }));
  const take = async (MaxNumberOfMessages) =>
    receive(QueueUrl, { MaxNumberOfMessages, WaitTimeSeconds: 0, MessageSystemAttributeNames: ["MessageGroupId"] });
  const first = await take(2);
  assert.deepEqual(first.map((m) => m.Attributes.MessageGroupId), ["big", "big"]);
  // "big" holds every in-flight message: noisy, so the newer quiet message goes first.
  const [quiet] = await take(1);
  assert.equal(quiet.Body, "s1");
  assert.equal(quiet.Attributes.MessageGroupId, "small");
  assert.deepEqual((await take(1)).map((m) => m.Body), ["b3"]);

  const crashy = await newQueue("backoff", { LeaseqRedeliveryBackoff: "2s" });
  const { Attributes } = await sqs.send(
    new GetQueueAttributesCommand({ QueueUrl: crashy, AttributeNames: ["LeaseqRedeliveryBackoff"] }),
  );
  assert.equal(Attributes.LeaseqRedeliveryBackoff, "2s");
  await sqs.send(new SendMessageCommand({ QueueUrl: crashy, MessageBody: "job" }));
  const [leased] = await receive(crashy, { MaxNumberOfMessages: 1, VisibilityTimeout: 1 });
  const leasedAt = Date.now();
  // The 1 s lease ends; the message then waits 2 s more before it is redelivered.
  await sleep(1500);
  assert.deepEqual(await receive(crashy, { WaitTimeSeconds: 0 }), []);
  const [again] = await receive(crashy, { WaitTimeSeconds: 10, MessageSystemAttributeNames: ["ApproximateReceiveCount"] });
  assert.equal(again.MessageId, leased.MessageId);
  assert.equal(again.Attributes.ApproximateReceiveCount, "2");
  assert.ok(Date.now() - leasedAt >= 2500, `redelivered after ${Date.now() - leasedAt} ms`);
});
