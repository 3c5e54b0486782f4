//! Decoded requests: one variant per SQS action, in the engine's vocabulary.

use std::collections::BTreeMap;
use std::sync::Arc;

use leaseq_core::{MessageId, MoveTaskChange, QueueConfigPatch, ReceiveRequest, SendInput};

/// The wire protocol a request used; its response uses the same one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// AWS JSON 1.0: `X-Amz-Target: AmazonSQS.<Action>`, JSON bodies.
    Json,
    /// Query: form-encoded `Action=<Action>&…`, XML responses.
    Query,
}

/// A queue named by a request (from `QueueUrl`, or from the request path).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueRef {
    /// The queue's name.
    pub name: Arc<str>,
    /// The account of the queue's URL (`/ACCOUNT/NAME`), if it names one: with `auth =
    /// "sigv4"` the queue of another account is that account's, reached if its policy allows.
    pub owner_account_id: Option<Arc<str>>,
}

impl QueueRef {
    /// The queue `name`, of no particular account (the caller's).
    pub fn new(name: impl Into<Arc<str>>) -> QueueRef {
        QueueRef {
            name: name.into(),
            owner_account_id: None,
        }
    }
}

/// One entry of a batch request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchEntry<T> {
    /// The client's id for the entry (unique in the batch).
    pub id: String,
    /// The entry's content.
    pub value: T,
}

/// A move task as a `TaskHandle` names it: the task's id and its source queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TaskHandle {
    /// The engine's task id; `None` when the handle's `taskId` is not one leaseq issues (an
    /// AWS task id), so the handle names no task.
    pub task_id: Option<u64>,
    /// The source queue's name.
    pub source: String,
}

/// A decoded SQS request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// `CreateQueue`.
    CreateQueue {
        /// The queue's name.
        name: String,
        /// Settings from `Attributes`.
        attributes: QueueConfigPatch,
        /// Tags from `tags`.
        tags: BTreeMap<String, String>,
    },
    /// `GetQueueUrl`.
    GetQueueUrl {
        /// The queue's name.
        name: String,
        /// `QueueOwnerAWSAccountId`: the account whose queue it is, if not the caller's.
        owner_account_id: Option<String>,
    },
    /// `ListQueues`.
    ListQueues {
        /// `QueueNamePrefix` (empty when absent).
        prefix: String,
        /// `MaxResults` (1–1000).
        max_results: Option<usize>,
        /// `NextToken` from an earlier page.
        next_token: Option<String>,
    },
    /// `DeleteQueue`.
    DeleteQueue {
        /// The queue.
        queue: QueueRef,
    },
    /// `GetQueueAttributes` (the names requested are in its [`Shape`]).
    GetQueueAttributes {
        /// The queue.
        queue: QueueRef,
    },
    /// `SetQueueAttributes`.
    SetQueueAttributes {
        /// The queue.
        queue: QueueRef,
        /// The settings to change.
        attributes: QueueConfigPatch,
    },
    /// `PurgeQueue`.
    PurgeQueue {
        /// The queue.
        queue: QueueRef,
    },
    /// `SendMessage`. `message.sender_id` is left empty; the server fills it.
    SendMessage {
        /// The queue.
        queue: QueueRef,
        /// The message.
        message: SendInput,
    },
    /// `SendMessageBatch`.
    SendMessageBatch {
        /// The queue.
        queue: QueueRef,
        /// The messages (1–10, distinct valid ids, total size checked).
        entries: Vec<BatchEntry<SendInput>>,
    },
    /// `ReceiveMessage` (the attributes each message shows are in its [`Shape`]).
    ReceiveMessage {
        /// The queue.
        queue: QueueRef,
        /// How many and for how long.
        request: ReceiveRequest,
        /// `WaitTimeSeconds` (0–20); the queue's `ReceiveMessageWaitTimeSeconds` when `None`.
        wait_time_seconds: Option<u32>,
        /// `ReceiveRequestAttemptId` (FIFO only; accepted and ignored on standard queues).
        receive_request_attempt_id: Option<String>,
    },
    /// `DeleteMessage`.
    DeleteMessage {
        /// The queue.
        queue: QueueRef,
        /// `ReceiptHandle`.
        receipt: String,
    },
    /// `DeleteMessageBatch`.
    DeleteMessageBatch {
        /// The queue.
        queue: QueueRef,
        /// Receipts by entry id.
        entries: Vec<BatchEntry<String>>,
    },
    /// `ChangeMessageVisibility`.
    ChangeMessageVisibility {
        /// The queue.
        queue: QueueRef,
        /// `ReceiptHandle`.
        receipt: String,
        /// `VisibilityTimeout`.
        visibility_timeout_seconds: u32,
    },
    /// `ChangeMessageVisibilityBatch`.
    ChangeMessageVisibilityBatch {
        /// The queue.
        queue: QueueRef,
        /// (receipt, visibility timeout) by entry id.
        entries: Vec<BatchEntry<(String, u32)>>,
    },
    /// `TagQueue`.
    TagQueue {
        /// The queue.
        queue: QueueRef,
        /// Tags to add or overwrite.
        tags: BTreeMap<String, String>,
    },
    /// `UntagQueue`.
    UntagQueue {
        /// The queue.
        queue: QueueRef,
        /// Tag keys to remove.
        keys: Vec<String>,
    },
    /// `ListQueueTags`.
    ListQueueTags {
        /// The queue.
        queue: QueueRef,
    },
    /// `ListDeadLetterSourceQueues`.
    ListDeadLetterSourceQueues {
        /// The dead-letter queue.
        queue: QueueRef,
        /// `MaxResults` (1–1000).
        max_results: Option<usize>,
        /// `NextToken` from an earlier page.
        next_token: Option<String>,
    },
    /// `AddPermission`.
    AddPermission {
        /// The queue.
        queue: QueueRef,
        /// `Label`.
        label: String,
        /// `AWSAccountIds`.
        account_ids: Vec<String>,
        /// `Actions`.
        actions: Vec<String>,
    },
    /// `RemovePermission`.
    RemovePermission {
        /// The queue.
        queue: QueueRef,
        /// `Label`.
        label: String,
    },
    /// `LeaseqGetVisibilityAdvice`, an extra action of leaseq (not SQS): the visibility
    /// advisor's finding for a queue.
    GetVisibilityAdvice {
        /// The queue.
        queue: QueueRef,
    },
    /// `StartMessageMoveTask` (and leaseq's `LeaseqMessageLimit` parameter for a canary).
    StartMessageMoveTask {
        /// The source queue (a dead-letter queue), from `SourceArn`.
        source: String,
        /// The destination queue, from `DestinationArn`.
        destination: Option<String>,
        /// `MaxNumberOfMessagesPerSecond` (1–500), automatic when `None`.
        rate_per_second: Option<u32>,
        /// `LeaseqMessageLimit`: pause after this many messages (leaseq's extension).
        limit: Option<u64>,
    },
    /// `ListMessageMoveTasks`.
    ListMessageMoveTasks {
        /// The source queue, from `SourceArn`.
        source: String,
        /// `MaxResults` (1–10, default 1).
        max_results: usize,
    },
    /// `CancelMessageMoveTask`.
    CancelMessageMoveTask {
        /// `TaskHandle`.
        task: TaskHandle,
    },
    /// leaseq's `LeaseqPauseMessageMoveTask`, `LeaseqResumeMessageMoveTask` and
    /// `LeaseqUpdateMessageMoveTask`: changes to a move task, applied in order.
    LeaseqChangeMessageMoveTask {
        /// Which of the three actions.
        action: &'static str,
        /// `TaskHandle`.
        task: TaskHandle,
        /// What to change.
        changes: Vec<MoveTaskChange>,
    },
    /// leaseq's `LeaseqFailMessage`: the current attempt's receipt sends its message to the
    /// dead-letter queue now, with a reason (a permanent failure).
    LeaseqFailMessage {
        /// The queue.
        queue: QueueRef,
        /// `ReceiptHandle`.
        receipt: String,
        /// `Reason`.
        reason: String,
    },
    /// leaseq's `LeaseqGetMessageHistory`: a message's delivery attempts.
    LeaseqGetMessageHistory {
        /// The queue.
        queue: QueueRef,
        /// `MessageId`.
        message_id: MessageId,
    },
    /// leaseq's `LeaseqPeekMessages`: messages of a queue without leasing them.
    LeaseqPeekMessages {
        /// The queue.
        queue: QueueRef,
        /// `NextToken`: the sequence number the previous page ended at (0: from the start).
        after_seq: u64,
        /// `MaxNumberOfMessages` (1–100, default 10).
        max_messages: usize,
    },
}

/// The part of a request that shapes its response and nothing else: which attributes to show.
/// `decode` returns it beside the [`Action`] and `encode` takes it beside the `Outcome`, so a
/// backend never sees (nor copies) these selections.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Shape {
    /// The response shows what the outcome holds.
    #[default]
    Whole,
    /// `GetQueueAttributes`: the `AttributeNames` requested, validated (may contain `All`).
    QueueAttributes {
        /// The names.
        names: Vec<String>,
    },
    /// `ReceiveMessage`: the attributes each message shows.
    Received {
        /// System attributes wanted (`AttributeNames` and `MessageSystemAttributeNames`).
        attribute_names: Vec<String>,
        /// Message attributes wanted (`All`, `.*`, `prefix.*` or exact names).
        message_attribute_names: Vec<String>,
    },
}

impl Shape {
    /// The queue attributes requested (none but for `GetQueueAttributes`).
    pub fn queue_attribute_names(&self) -> &[String] {
        match self {
            Shape::QueueAttributes { names } => names,
            _ => &[],
        }
    }

    /// The system and message attributes a received message shows (none but for
    /// `ReceiveMessage`).
    pub fn message_attribute_names(&self) -> (&[String], &[String]) {
        match self {
            Shape::Received {
                attribute_names,
                message_attribute_names,
            } => (attribute_names, message_attribute_names),
            _ => (&[], &[]),
        }
    }
}
