//! Move tasks: redrive of a dead-letter queue's messages to where they came from (or to another
//! queue), a batch at a time, at a bounded rate.
//!
//! "Redrive is replay, not undo": a moved message is a new message in its destination (a new
//! id, a fresh receive count, retention counted from the move), not the old one restored. A task
//! is state of the engine, changed only by records: [`crate::Record::SetMoveTask`] (start,
//! pause, resume, rate, cancel, complete, fail: the task's whole new state) and
//! [`crate::Record::MoveMessages`] (one batch, moved atomically). A crash therefore replays
//! exactly the batches that were durable: each message is in its source or in its destination,
//! never in both and never in neither.
//!
//! Which messages a task moves: those in the source queue when it started (sequence numbers
//! below [`MoveTask::cutoff_seq`]), in the order they arrived there (oldest first). A message
//! that is leased (or delayed) when a batch is taken is skipped and picked up by a later batch
//! once it is ready again; on a FIFO queue its whole group waits, so the group keeps its order.
//! The task completes when none of those messages remains in the source (moved, deleted or
//! expired) nor is on its way to another bucket.
//!
//! A destination in another bucket (the task's, or the queue a message was dead-lettered from)
//! is reached through a transfer ([`crate::transfer`]) instead of `MoveMessages`: each such
//! message leaves in a `TransferOut` record of its own and counts as moved from then on; if the
//! destination refuses it, it comes back to the source as it was, no longer counts, and the task
//! fails.

/// Where a move task is in its life. SQS names: `RUNNING`, `COMPLETED`, `CANCELLED`, `FAILED`;
/// `Paused` is leaseq's own (a canary that reached its limit, or an operator's pause), reported
/// to SQS clients as `RUNNING` (the task still holds its source).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MoveStatus {
    /// Moving messages.
    Running,
    /// Stopped until resumed (leaseq's extension: canary limit reached, or paused).
    Paused,
    /// Every message it was started for left the source.
    Completed,
    /// Cancelled by an operator; the messages moved so far stay moved.
    Cancelled,
    /// Stopped by a problem it cannot get past (see [`MoveTask::failure_reason`]).
    Failed,
}

impl MoveStatus {
    /// Whether the task still holds its source (only one active task per source).
    pub fn is_active(self) -> bool {
        matches!(self, MoveStatus::Running | MoveStatus::Paused)
    }

    /// The status as one byte (codec).
    pub fn code(self) -> u8 {
        match self {
            MoveStatus::Running => 0,
            MoveStatus::Paused => 1,
            MoveStatus::Completed => 2,
            MoveStatus::Cancelled => 3,
            MoveStatus::Failed => 4,
        }
    }

    /// The status of a byte from [`MoveStatus::code`].
    pub fn from_code(code: u8) -> Option<MoveStatus> {
        Some(match code {
            0 => MoveStatus::Running,
            1 => MoveStatus::Paused,
            2 => MoveStatus::Completed,
            3 => MoveStatus::Cancelled,
            4 => MoveStatus::Failed,
            _ => return None,
        })
    }
}

/// One move task, complete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MoveTask {
    /// Unique id, never reused.
    pub task_id: u64,
    /// The queue messages move out of (a dead-letter queue).
    pub source_queue_id: u64,
    /// Where every message goes, if that queue is in this engine; `None` and no
    /// `remote_destination`: each back to the queue it was dead-lettered from.
    pub destination_queue_id: Option<u64>,
    /// Where every message goes, by name, if that queue lives in another bucket (then
    /// `destination_queue_id` is `None`): its engine, not this one, knows whether it exists,
    /// and refuses the messages if it does not (see [`crate::transfer`]). Format version 10.
    pub remote_destination: Option<String>,
    /// Messages per second; `None`: the server picks the rate.
    pub rate_per_second: Option<u32>,
    /// Pause once this many messages moved in total (a canary); `None`: no limit.
    pub limit: Option<u64>,
    /// The source's next sequence number at the start: the task moves only messages below it.
    pub cutoff_seq: u64,
    /// Messages in the source at the start (`ApproximateNumberOfMessagesToMove`).
    pub to_move: u64,
    /// Messages moved so far.
    pub moved: u64,
    /// Messages left in the source because they were redriven too often already (see
    /// [`crate::Limits::redrive_generations_max`]), as of the task's last batch.
    pub held_back: u64,
    /// When it started.
    pub started_at_ms: u64,
    /// Where it is.
    pub status: MoveStatus,
    /// Why it failed (for `Failed`).
    pub failure_reason: Option<String>,
}

impl MoveTask {
    /// Whether every message goes to one destination of the task's own (in this engine or in
    /// another bucket) rather than back to the queue it was dead-lettered from.
    pub fn has_destination(&self) -> bool {
        self.destination_queue_id.is_some() || self.remote_destination.is_some()
    }
}

/// One message of a [`crate::Record::MoveMessages`] batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MovedMessage {
    /// Its sequence number in the source.
    pub seq: u64,
    /// Its destination queue.
    pub destination_queue_id: u64,
    /// Its sequence number there.
    pub destination_seq: u64,
    /// Its new id.
    pub message_id: crate::MessageId,
}

/// A change an operator asks of a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MoveTaskChange {
    /// Stop moving until resumed.
    Pause,
    /// Move again (clears a reached limit only if a new one is given with `Limit`).
    Resume,
    /// Stop for good.
    Cancel,
    /// A new rate (`None`: automatic).
    Rate(Option<u32>),
    /// A new total limit (`None`: none).
    Limit(Option<u64>),
}
