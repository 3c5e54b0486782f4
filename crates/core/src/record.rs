//! Records: the state changes of the engine, one value each.
//!
//! Invariant: the engine's state changes only through [`crate::Engine::apply`], which takes a
//! record. Live traffic decides what should happen, writes it down as a record and applies it;
//! recovery applies the same records read back from the log. The two paths share one function,
//! so they cannot drift.
//!
//! Each record carries the time it happened (`now_ms`). Changes that follow from time alone
//! (a lease running out, a delay ending, retention expiring) are not records: `apply` first
//! brings the touched queues forward to the record's time, and bringing a queue forward to `t1`
//! and then to `t2` is the same as bringing it to `t2` directly, so replay reaches the same state
//! with fewer steps.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::config::QueueConfig;
use crate::fair::ProcessingWindow;
use crate::fifo::{AttemptLease, FifoMessage};
use crate::history::Client;
use crate::message::{MessageId, Payload, PayloadRef};
use crate::moves::{MoveTask, MovedMessage};
use crate::queue::{Message, QueueCounters};
use crate::transfer::TransferKind;

/// Every record a message's path moves (commit, journal, decode) is copied at this size, so the
/// fields of the rare large records are boxed (a `QueueConfig` inline made every record 360
/// bytes: about seven `memcpy` calls of 46-64 instructions per consumed message, callgrind).
const _: () = assert!(std::mem::size_of::<Record>() <= 192);

/// One state change of the engine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    /// A queue was created.
    CreateQueue {
        /// When.
        now_ms: u64,
        /// Its unique id (never reused, not even for the same name).
        queue_id: u64,
        /// Its name.
        name: String,
        /// Its settings.
        config: Box<QueueConfig>,
        /// Its tags.
        tags: BTreeMap<String, String>,
    },
    /// A queue and all its messages were deleted.
    DeleteQueue {
        /// When.
        now_ms: u64,
        /// Which queue.
        queue_id: u64,
    },
    /// A queue's settings were replaced.
    SetConfig {
        /// When.
        now_ms: u64,
        /// Which queue.
        queue_id: u64,
        /// The new settings, complete.
        config: Box<QueueConfig>,
    },
    /// A queue's tags were replaced.
    SetTags {
        /// When.
        now_ms: u64,
        /// Which queue.
        queue_id: u64,
        /// The new tags, complete.
        tags: BTreeMap<String, String>,
    },
    /// Every message of a queue was deleted.
    Purge {
        /// When.
        now_ms: u64,
        /// Which queue.
        queue_id: u64,
    },
    /// A message was enqueued.
    Send {
        /// When (its `SentTimestamp`, and the start of its retention).
        now_ms: u64,
        /// Into which queue.
        queue_id: u64,
        /// Its sequence number in that queue.
        seq: u64,
        /// Its stable id.
        message_id: MessageId,
        /// When its delay ends (`now_ms` if it has none).
        visible_at_ms: u64,
        /// Body and attributes.
        payload: Arc<Payload>,
        /// Group and deduplication id, for a FIFO queue (its deduplication window remembers
        /// the id from this record on); on a standard queue, the group id (a fair queue's
        /// tenant) with an empty deduplication id.
        fifo: Option<Box<FifoMessage>>,
    },
    /// A ready message was received: a new attempt with its own lease began.
    Lease {
        /// When (the start of the attempt).
        now_ms: u64,
        /// Which queue.
        queue_id: u64,
        /// Which message.
        seq: u64,
        /// The attempt number this lease begins (the new receive count).
        attempt: u32,
        /// When the lease runs out.
        visible_at_ms: u64,
        /// Who received it (for the attempt history), if the server knew.
        client: Option<Arc<Client>>,
    },
    /// The current attempt's lease was changed (extended, shortened or released).
    ChangeVisibility {
        /// When.
        now_ms: u64,
        /// Which queue.
        queue_id: u64,
        /// Which message.
        seq: u64,
        /// When the lease now runs out (`now_ms` releases it at once).
        visible_at_ms: u64,
    },
    /// A message was deleted by the receipt of its current attempt.
    Delete {
        /// When.
        now_ms: u64,
        /// Which queue.
        queue_id: u64,
        /// Which message.
        seq: u64,
    },
    /// A message that had used up its receives moved to the dead-letter queue.
    DeadLetter {
        /// When.
        now_ms: u64,
        /// The source queue.
        queue_id: u64,
        /// The message in the source queue.
        seq: u64,
        /// The dead-letter queue.
        dead_letter_queue_id: u64,
        /// The message's sequence number in the dead-letter queue.
        dead_letter_seq: u64,
    },
    /// A consumer declared a permanent failure with the receipt of the current attempt: the
    /// message moved to the dead-letter queue at once, with the reason (fail-now).
    FailMessage {
        /// When.
        now_ms: u64,
        /// The source queue.
        queue_id: u64,
        /// The message in the source queue.
        seq: u64,
        /// The dead-letter queue.
        dead_letter_queue_id: u64,
        /// The message's sequence number in the dead-letter queue.
        dead_letter_seq: u64,
        /// Why, in the consumer's words.
        reason: String,
    },
    /// Snapshot: the failure reason of a message that a consumer failed (see `FailMessage`).
    RestoreFailureReason {
        /// The engine's clock when the snapshot was taken.
        now_ms: u64,
        /// Its queue.
        queue_id: u64,
        /// The message.
        seq: u64,
        /// The reason.
        reason: String,
    },
    /// A FIFO receive with a `ReceiveRequestAttemptId` granted these leases (written after
    /// their `Lease` records); a retry with the same id within five minutes of
    /// `received_at_ms` returns them again while they last. Snapshots repeat it.
    ReceiveAttempt {
        /// When (in a snapshot: the snapshot's time).
        now_ms: u64,
        /// Which queue.
        queue_id: u64,
        /// The `ReceiveRequestAttemptId`.
        attempt_id: String,
        /// When the receive happened.
        received_at_ms: u64,
        /// The leases, in delivery order.
        leases: Vec<AttemptLease>,
    },
    /// Snapshot: an entry of a FIFO queue's deduplication window (its message may be gone).
    RestoreDeduplication {
        /// The engine's clock when the snapshot was taken.
        now_ms: u64,
        /// Which queue.
        queue_id: u64,
        /// The group id under `messageGroup` scope, "" under `queue` scope.
        scope: String,
        /// The deduplication id.
        deduplication_id: String,
        /// The message the id first enqueued.
        message_id: MessageId,
        /// Its sequence number.
        seq: u64,
        /// When the entry leaves the window.
        expires_at_ms: u64,
    },
    /// Snapshot: a FIFO group that has messages in flight but is not held, because one of its
    /// in-flight messages became visible after the group's latest lease (a group rebuilt from
    /// its messages is held while any of them is in flight). Format version 5.
    RestoreGroupRelease {
        /// The engine's clock when the snapshot was taken.
        now_ms: u64,
        /// Which queue.
        queue_id: u64,
        /// The group id.
        group_id: String,
    },
    /// Snapshot: what a fair queue's tenant holds besides its messages (after them): its last
    /// send, recent processing time and whether it is noisy. Format version 6.
    RestoreTenant {
        /// The engine's clock when the snapshot was taken.
        now_ms: u64,
        /// Which queue.
        queue_id: u64,
        /// The group id (`""`: the messages without one).
        group_id: String,
        /// When the tenant last sent.
        last_sent_at_ms: u64,
        /// Its recent processing time.
        processing: ProcessingWindow,
        /// Whether it is noisy.
        noisy: bool,
    },
    /// Snapshot: a fair queue's recent processing time, all tenants together. Format version 6.
    RestoreFairTotal {
        /// The engine's clock when the snapshot was taken.
        now_ms: u64,
        /// Which queue.
        queue_id: u64,
        /// Its recent processing time.
        processing: ProcessingWindow,
    },
    /// A message's payload was written again, at the log's tail, so that the log segment that
    /// held it can go (compaction). Nothing else about the message changes.
    Relocate {
        /// When.
        now_ms: u64,
        /// Which queue.
        queue_id: u64,
        /// Which message.
        seq: u64,
        /// Its body and attributes, unchanged.
        payload: Arc<Payload>,
    },
    /// A move task started or changed (paused, resumed, rate or limit changed, cancelled,
    /// completed, failed): its whole new state. Snapshots repeat it for every task kept.
    SetMoveTask {
        /// When.
        now_ms: u64,
        /// The task, complete.
        task: Box<MoveTask>,
    },
    /// A batch of a move task, moved atomically: each message left its source and entered its
    /// destination as a new message (a new id, no receives, retention from `now_ms`).
    MoveMessages {
        /// When.
        now_ms: u64,
        /// Which task.
        task_id: u64,
        /// The source queue.
        source_queue_id: u64,
        /// The messages, in the order they moved.
        moves: Vec<MovedMessage>,
    },
    /// Snapshot: a queue deleted less than `Limits::queue_name_reuse_delay_ms` before the
    /// snapshot, whose name cannot be used yet (see `DeleteQueue`). Format version 7.
    RestoreDeletedQueue {
        /// The engine's clock when the snapshot was taken.
        now_ms: u64,
        /// The deleted queue's name.
        name: String,
        /// When it was deleted.
        deleted_at_ms: u64,
    },
    /// Snapshot: the engine-wide state that no queue holds.
    RestoreEngine {
        /// The engine's clock when the snapshot was taken.
        now_ms: u64,
        /// The id the next created queue gets (ids are never reused).
        next_queue_id: u64,
    },
    /// Snapshot: a queue as it was, without its messages (they follow as `RestoreMessage`).
    RestoreQueue {
        /// The engine's clock when the snapshot was taken.
        now_ms: u64,
        /// The queue's id.
        queue_id: u64,
        /// Its name.
        name: String,
        /// Its settings.
        config: Box<QueueConfig>,
        /// Its tags.
        tags: BTreeMap<String, String>,
        /// When it was created.
        created_at_ms: u64,
        /// When its settings last changed.
        last_modified_at_ms: u64,
        /// When it was last purged.
        last_purge_at_ms: Option<u64>,
        /// The sequence number its next message gets.
        next_seq: u64,
        /// What happened on it so far.
        counters: QueueCounters,
    },
    /// A message left its queue for a queue of another bucket (its dead-letter queue, or the
    /// destination of a move task): it waits in the outbox until the target answers (see
    /// [`crate::transfer`]).
    TransferOut {
        /// When.
        now_ms: u64,
        /// The source queue.
        queue_id: u64,
        /// The message in the source queue.
        seq: u64,
        /// The transfer's id (the source bucket's next).
        transfer_id: u64,
        /// The destination queue's name (the engine's name).
        destination: String,
        /// A dead letter or a redrive (format version 10; older records are dead letters).
        kind: TransferKind,
        /// A fail-now's reason, if the move was one.
        reason: Option<String>,
    },
    /// A transfer from another bucket was answered: taken into a queue of this bucket, or
    /// refused (see [`crate::transfer`]).
    TransferIn {
        /// When.
        now_ms: u64,
        /// The source's bucket.
        source_bucket: u32,
        /// The transfer's id in the source bucket.
        transfer_id: u64,
        /// Where the message went, if taken (`None`: refused).
        taken: Option<Box<TakenTransfer>>,
    },
    /// The target's answer to a transfer of the outbox arrived: the message leaves the outbox,
    /// and if the target refused it, it goes back to its queue as `return_seq`.
    TransferDone {
        /// When.
        now_ms: u64,
        /// Which transfer.
        transfer_id: u64,
        /// Whether the target took it.
        taken: bool,
        /// The message's new sequence number in its queue, if it comes back (refused).
        return_seq: u64,
    },
    /// Snapshot: a transfer waiting in the outbox.
    RestoreTransfer {
        /// The engine's clock when the snapshot was taken.
        now_ms: u64,
        /// Its id.
        transfer_id: u64,
        /// The source queue.
        queue_id: u64,
        /// The message's sequence number in the source queue.
        seq: u64,
        /// The source queue's name.
        source_name: String,
        /// Whether the source queue is a FIFO queue.
        from_fifo: bool,
        /// The destination queue's name.
        destination: String,
        /// A dead letter or a redrive (format version 10; older records are dead letters).
        kind: TransferKind,
        /// A fail-now's reason, if the move was one.
        reason: Option<String>,
        /// The message as it left its queue.
        message: Box<Message>,
    },
    /// Snapshot: the engine-wide state of transfers.
    RestoreTransfers {
        /// The engine's clock when the snapshot was taken.
        now_ms: u64,
        /// The id the next transfer out gets.
        next_transfer_id: u64,
        /// Per source bucket, the last transfer answered: (source bucket, transfer id, taken).
        inbox: Vec<(u32, u64, bool)>,
        /// Destinations that refused a transfer, and until when they count as missing.
        refused: Vec<(String, u64)>,
    },
    /// Snapshot: a message as it was, lease and all.
    RestoreMessage {
        /// The engine's clock when the snapshot was taken.
        now_ms: u64,
        /// Its queue.
        queue_id: u64,
        /// Its sequence number.
        seq: u64,
        /// Everything about it (inline: `RestoreQueue` makes the enum larger than a message
        /// anyway, and a snapshot holds millions of these).
        message: Box<Message>,
    },
}

/// Where a transfer's message went in the target (see [`Record::TransferIn`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TakenTransfer {
    /// The destination queue.
    pub queue_id: u64,
    /// The message's sequence number there.
    pub seq: u64,
    /// The message as it arrives (its payload inline in the record; the log keeps it): for a
    /// redrive already the new message the move makes of it.
    pub message: Message,
    /// A dead letter or a redrive (format version 10; older records are dead letters): a
    /// redriven message counts as sent in its destination, as a local move's does.
    pub kind: TransferKind,
    /// A fail-now's reason, if the move was one.
    pub reason: Option<String>,
}

impl Record {
    /// The message whose payload this record carries, as (queue id, seq): a `Send`, a
    /// `Relocate` or a taken `TransferIn`. The log location of such a record is where the message's payload is kept
    /// from then on (see [`crate::Engine::spill`]).
    pub fn carried_payload(&self) -> Option<(u64, u64, &Arc<Payload>)> {
        match self {
            Record::Send {
                queue_id,
                seq,
                payload,
                ..
            }
            | Record::Relocate {
                queue_id,
                seq,
                payload,
                ..
            } => Some((*queue_id, *seq, payload)),
            Record::TransferIn {
                taken: Some(taken), ..
            } => match &taken.message.payload {
                PayloadRef::Inline(payload) => Some((taken.queue_id, taken.seq, payload)),
                PayloadRef::Stored(_) | PayloadRef::Cached(_) => None,
            },
            _ => None,
        }
    }

    /// When the change happened.
    pub fn now_ms(&self) -> u64 {
        match self {
            Record::CreateQueue { now_ms, .. }
            | Record::DeleteQueue { now_ms, .. }
            | Record::SetConfig { now_ms, .. }
            | Record::SetTags { now_ms, .. }
            | Record::Purge { now_ms, .. }
            | Record::Send { now_ms, .. }
            | Record::Lease { now_ms, .. }
            | Record::ChangeVisibility { now_ms, .. }
            | Record::Delete { now_ms, .. }
            | Record::DeadLetter { now_ms, .. }
            | Record::FailMessage { now_ms, .. }
            | Record::RestoreFailureReason { now_ms, .. }
            | Record::ReceiveAttempt { now_ms, .. }
            | Record::RestoreDeduplication { now_ms, .. }
            | Record::RestoreGroupRelease { now_ms, .. }
            | Record::RestoreTenant { now_ms, .. }
            | Record::RestoreFairTotal { now_ms, .. }
            | Record::Relocate { now_ms, .. }
            | Record::SetMoveTask { now_ms, .. }
            | Record::MoveMessages { now_ms, .. }
            | Record::RestoreDeletedQueue { now_ms, .. }
            | Record::RestoreEngine { now_ms, .. }
            | Record::RestoreQueue { now_ms, .. }
            | Record::RestoreMessage { now_ms, .. }
            | Record::TransferOut { now_ms, .. }
            | Record::TransferIn { now_ms, .. }
            | Record::TransferDone { now_ms, .. }
            | Record::RestoreTransfer { now_ms, .. }
            | Record::RestoreTransfers { now_ms, .. } => *now_ms,
        }
    }
}
