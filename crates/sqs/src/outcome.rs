//! Results the server hands back for encoding, in the engine's vocabulary.

use std::collections::BTreeMap;
use std::sync::Arc;

use leaseq_core::engine::MoveTaskInfo;
use leaseq_core::{Delivery, Message, Payload, QueueInfo, Sent};

use crate::error::SqsError;

/// What the encoder needs to know about the server and the request.
///
/// The server's parts are shared (`Arc<str>`) rather than owned: the server builds a context for
/// every request, and the same values for all of them, so a request clones pointers instead of
/// copying strings.
#[derive(Clone, Debug)]
pub struct Context {
    /// Base of queue URLs, e.g. `http://localhost:9324` (from the request's `Host` header or a
    /// configured external URL), without a trailing slash.
    pub base_url: Arc<str>,
    /// Region for ARNs (`us-east-1`).
    pub region: Arc<str>,
    /// Account id for URLs and ARNs (`000000000000`).
    pub account_id: Arc<str>,
    /// This request's id (`x-amzn-RequestId`, `RequestId` in XML), shared with the response's
    /// header.
    pub request_id: Arc<str>,
}

/// The result of executing an [`crate::Action`].
#[derive(Clone, Debug)]
pub enum Outcome {
    /// `CreateQueue`, `GetQueueUrl`: the queue's name (the encoder builds the URL).
    QueueUrl(Arc<str>),
    /// `ListQueues`: one page of names and the token of the next.
    QueueUrls {
        /// Queue names.
        names: Vec<Arc<str>>,
        /// Token for the next page.
        next_token: Option<String>,
    },
    /// `ListDeadLetterSourceQueues`: one page of names and the token of the next.
    DeadLetterSourceQueues {
        /// Queue names.
        names: Vec<Arc<str>>,
        /// Token for the next page.
        next_token: Option<String>,
    },
    /// Actions whose success carries no data.
    Empty,
    /// `GetQueueAttributes`: the queue's state (the names requested are in the [`crate::Shape`]).
    QueueAttributes {
        /// The queue.
        info: Box<QueueInfo>,
    },
    /// `ListQueueTags`.
    QueueTags(BTreeMap<String, String>),
    /// `SendMessage`.
    Sent(Sent),
    /// `SendMessageBatch`: per entry id, the result.
    SentBatch(Vec<(String, Result<Sent, SqsError>)>),
    /// `ReceiveMessage`.
    Received {
        /// The deliveries.
        deliveries: Vec<Delivery>,
        /// Name of the queue (for ARNs such as `DeadLetterQueueSourceArn`).
        queue_name: Arc<str>,
    },
    /// `DeleteMessageBatch`, `ChangeMessageVisibilityBatch`: per entry id, the result.
    Batch(Vec<(String, Result<(), SqsError>)>),
    /// `LeaseqGetVisibilityAdvice`.
    VisibilityAdvice(Box<VisibilityAdvice>),
    /// `StartMessageMoveTask`: the new task (the encoder builds its `TaskHandle`).
    MoveTaskStarted {
        /// The task's id.
        task_id: u64,
        /// Its source queue.
        source: Arc<str>,
    },
    /// `ListMessageMoveTasks`: the tasks, most recent first.
    MoveTasks(Vec<MoveTaskInfo>),
    /// `CancelMessageMoveTask`: messages moved before the cancel.
    MoveTaskCancelled {
        /// `ApproximateNumberOfMessagesMoved`.
        moved: u64,
    },
    /// leaseq's task changes: the task as it is now.
    MoveTask(Box<MoveTaskInfo>),
    /// `LeaseqGetMessageHistory`: the message and its attempts.
    MessageHistory(Box<leaseq_core::engine::MessageHistory>),
    /// `LeaseqPeekMessages`: one page of messages and the token of the next.
    Peeked {
        /// The messages, in sequence order.
        messages: Vec<PeekedEntry>,
        /// Where the next page starts (none when the page was not full).
        next_token: Option<String>,
    },
}

/// One message of a peek.
#[derive(Clone, Debug)]
pub struct PeekedEntry {
    /// Its sequence number in the queue.
    pub seq: u64,
    /// Its metadata.
    pub message: Message,
    /// Its body and attributes.
    pub payload: Arc<Payload>,
    /// Why a consumer failed it (`LeaseqFailMessage`), if one did.
    pub failure_reason: Option<Arc<str>>,
}

/// The visibility advisor's finding for one queue (leaseq's extra action).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct VisibilityAdvice {
    /// The queue.
    pub queue_name: Arc<str>,
    /// The queue's visibility timeout now.
    pub visibility_timeout_seconds: u32,
    /// What the advisor recommends.
    pub recommended_visibility_timeout_seconds: u32,
    /// One word: `ok`, `raise`, `lower`, `extend` or `insufficient-data`.
    pub verdict: &'static str,
    /// Why, in one sentence with the numbers it rests on.
    pub reason: String,
    /// Processing time (receive to delete) percentiles and maximum, in milliseconds, if any
    /// delete was observed.
    pub processing_ms: Option<ProcessingPercentiles>,
    /// Leases granted.
    pub deliveries: u64,
    /// Leases that ran out without a delete.
    pub leases_expired: u64,
    /// Deletes after the lease had run out.
    pub deleted_late: u64,
    /// Lease extensions.
    pub leases_extended: u64,
}

/// Percentiles of processing time, in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcessingPercentiles {
    /// Median.
    pub p50: u64,
    /// 95th percentile.
    pub p95: u64,
    /// 99th percentile.
    pub p99: u64,
    /// Largest observed.
    pub max: u64,
}
