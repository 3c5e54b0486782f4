//! Buckets, and transfers of messages between the engines of two buckets.
//!
//! Queues hash into a fixed number of buckets ([`Placement`], [`bucket_of`]); each bucket is
//! served by an engine of its own, with a log of its own (see `docs/design/cluster.md`). Queue
//! ids carry their bucket in their top 16 bits, so a receipt names its bucket and stays valid
//! wherever the bucket is served.
//!
//! Most of what a queue does stays in its bucket. Two kinds of moves may cross buckets
//! ([`TransferKind`]): a dead-letter move (a receive past `maxReceiveCount`, or a consumer's
//! fail-now) whose dead-letter queue hashes into another bucket, and a message of a move task
//! (redrive) whose destination does (the task's own, or the queue the message was
//! dead-lettered from). Such a move cannot be one record: it becomes a **transfer**, exactly
//! once, in three steps, each a record in one engine's log:
//!
//! 1. The source engine takes the message out of its queue into its *outbox*
//!    (`Record::TransferOut`, with its kind; a redrive's also with the message's new id),
//!    under the next transfer id of the source bucket. From here on the message counts nowhere
//!    in the source queue, as after a local move, and a move task counts it as moved.
//! 2. Whoever serves the two buckets hands the outbox's first transfer to the target engine
//!    ([`crate::Engine::next_transfer`], then [`crate::Engine::ingest_transfer`]), body and
//!    all. The target takes it into the destination queue, or refuses it (no such queue, or a
//!    queue of the other kind), and in both cases remembers, per source bucket, the last
//!    transfer id it answered and its answer (`Record::TransferIn`). A dead letter arrives as
//!    it left, with its source queue's name; a redriven message arrives as the new message a
//!    local move makes of it (the same function makes both), counted as sent.
//! 3. Once the target's record is durable, the source records the answer
//!    (`Record::TransferDone`): a taken message leaves the outbox; a refused one goes back to
//!    its queue as it was. A refused dead letter's destination then counts as missing for
//!    [`REFUSED_FOR_MS`], as a missing local dead-letter queue does (the message is delivered
//!    past its limit instead of bouncing). A refused redrive no longer counts as moved and
//!    fails its task if still active, with a reason naming the destination; its destination
//!    is not marked (the task stops at the first refusal, so nothing bounces, and a task
//!    started right after the destination is created again must not fail on an older answer).
//!    All of it follows from the outbox entry, so replaying `TransferDone` derives it.
//!
//! A move task completes only once none of its messages is in the outbox, so a refusal always
//! finds it active (running or paused) unless an operator cancelled it. The engine of a
//! dead-letter queue does not know the sources in other buckets, nor whether a destination in
//! another bucket exists or is of the right kind: as for a `RedrivePolicy` naming a remote
//! dead-letter queue, the caller checks those on the engines that know, then starts the task
//! ([`crate::Engine::start_move_task_with_remote_sources`]); the task keeps a remote
//! destination by name (`MoveTask::remote_destination`).
//!
//! Exactly once: the source hands out a transfer only once its `TransferOut` is durable (a
//! source that lost it would give the same id to another message, which the target would
//! answer from memory as taken), one at a time, in id order, and the next only after the
//! previous one's answer is durable in its own log. So the only transfer a target can
//! be handed twice is the last one it answered (the source crashed between steps 2 and 3, or
//! its answer was lost on the way), and the target answers that one again from memory without
//! taking it again. A transfer id below the last one answered cannot arrive; the target refuses
//! to guess ([`TransferAnswer::OutOfOrder`]).

use std::sync::Arc;

use crate::message::{MessageId, Payload};
use crate::queue::Message;

/// How long a destination that refused a transfer counts as missing.
pub const REFUSED_FOR_MS: u64 = 60_000;

/// Where queues live: `buckets` buckets, of which this engine serves `bucket`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    /// This engine's bucket.
    pub bucket: u32,
    /// How many buckets there are (fixed for the life of a log).
    pub buckets: u32,
}

impl Default for Placement {
    /// One bucket, served by this engine: every queue is local.
    fn default() -> Placement {
        Placement {
            bucket: 0,
            buckets: 1,
        }
    }
}

impl Placement {
    /// The first queue id of this bucket: the bucket in the top 16 bits.
    pub fn first_queue_id(&self) -> u64 {
        (u64::from(self.bucket) << 48) | 1
    }

    /// Whether the queue named `name` (the engine's name, namespace and all) lives in another
    /// bucket.
    pub fn is_remote(&self, name: &str) -> bool {
        self.buckets > 1 && bucket_of(name, self.buckets) != self.bucket
    }
}

/// The bucket of the queue named `name` (the engine's name): FNV-1a of the name, modulo
/// `buckets`. Fixed for the life of a log, as the bucket count is.
pub fn bucket_of(name: &str, buckets: u32) -> u32 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in name.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    (hash % u64::from(buckets.max(1))) as u32
}

/// The bucket a queue id belongs to (its top 16 bits).
pub fn bucket_of_queue_id(queue_id: u64) -> u32 {
    (queue_id >> 48) as u32
}

/// What a transfer moves a message for, which decides how the target takes it in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransferKind {
    /// A dead-letter move (a receive past `maxReceiveCount`, or a fail-now): the message
    /// arrives as it left, its id, receive count and history kept, its source queue's name as
    /// its `dead_letter_source`.
    DeadLetter,
    /// A message of move task `task_id` (redrive): it arrives as a new message with id
    /// `message_id`, as a local move makes it (see [`crate::moves`]).
    Move {
        /// The task, in the source engine (the target does not know it).
        task_id: u64,
        /// The message's new id, drawn by the source's caller when the message left.
        message_id: MessageId,
    },
}

/// The first transfer of a source engine's outbox, as [`crate::Engine::next_transfer`] hands
/// it out: what the target needs but the body, which the caller reads from the source's log.
#[derive(Clone, Debug)]
pub struct OutgoingTransfer {
    /// The source's bucket.
    pub source_bucket: u32,
    /// Its id, unique and increasing in the source bucket.
    pub transfer_id: u64,
    /// The destination queue's name (the engine's name).
    pub destination: Arc<str>,
    /// Whether the source queue is a FIFO queue (only a queue of the same kind takes it).
    pub from_fifo: bool,
    /// A dead letter or a redrive.
    pub kind: TransferKind,
    /// A fail-now's reason, if the move was one (never for a redrive, which replays the
    /// message without it).
    pub reason: Option<Arc<str>>,
    /// The message as it left its queue (its payload perhaps only a location in the source's
    /// log).
    pub message: Message,
}

impl OutgoingTransfer {
    /// The transfer as the target takes it, with the body read.
    pub fn with_payload(self, payload: Arc<Payload>) -> IncomingTransfer {
        let mut message = self.message;
        message.payload = crate::PayloadRef::Inline(payload);
        IncomingTransfer {
            source_bucket: self.source_bucket,
            transfer_id: self.transfer_id,
            destination: self.destination,
            from_fifo: self.from_fifo,
            kind: self.kind,
            reason: self.reason,
            message,
        }
    }
}

/// A transfer handed to the target engine ([`crate::Engine::ingest_transfer`]).
#[derive(Clone, Debug)]
pub struct IncomingTransfer {
    /// The source's bucket.
    pub source_bucket: u32,
    /// Its id in the source bucket.
    pub transfer_id: u64,
    /// The destination queue's name (the engine's name).
    pub destination: Arc<str>,
    /// Whether the source queue is a FIFO queue.
    pub from_fifo: bool,
    /// A dead letter or a redrive.
    pub kind: TransferKind,
    /// A fail-now's reason, if the move was one.
    pub reason: Option<Arc<str>>,
    /// The message as it left its queue, its payload inline.
    pub message: Message,
}

/// The target's answer to a transfer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransferAnswer {
    /// The message is in the destination queue (now, or from an earlier hand-over of the same
    /// transfer).
    Taken,
    /// The destination does not exist, or is of the other kind (FIFO or standard): the message
    /// goes back to its source.
    Refused,
    /// The transfer is older than the last one this target answered for its source bucket:
    /// the protocol was broken, and no answer would be safe.
    OutOfOrder,
}

impl IncomingTransfer {
    /// The transfer as bytes, for a hand-over between nodes: its source bucket, then the
    /// record codec's encoding of a `RestoreTransfer` that carries the rest (its queue, sequence
    /// and source name unused: the target does not need them).
    pub fn encode(&self) -> Vec<u8> {
        let record = crate::Record::RestoreTransfer {
            now_ms: 0,
            transfer_id: self.transfer_id,
            queue_id: 0,
            seq: 0,
            source_name: String::new(),
            from_fifo: self.from_fifo,
            destination: self.destination.to_string(),
            kind: self.kind,
            reason: self.reason.as_deref().map(str::to_string),
            message: Box::new(self.message.clone()),
        };
        let mut out = self.source_bucket.to_be_bytes().to_vec();
        crate::codec::encode(&record, &mut out);
        out
    }

    /// The transfer [`IncomingTransfer::encode`] made these bytes of.
    pub fn decode(bytes: &[u8]) -> Result<IncomingTransfer, crate::codec::DecodeError> {
        let (bucket, record) = bytes
            .split_first_chunk::<4>()
            .ok_or(crate::codec::DecodeError::Truncated(bytes.len()))?;
        let crate::Record::RestoreTransfer {
            transfer_id,
            from_fifo,
            destination,
            kind,
            reason,
            message,
            ..
        } = crate::codec::decode(record)?
        else {
            return Err(crate::codec::DecodeError::Invalid {
                what: "transfer record",
                value: 0,
                at: 4,
            });
        };
        if !matches!(message.payload, crate::PayloadRef::Inline(_)) {
            return Err(crate::codec::DecodeError::Invalid {
                what: "transfer payload",
                value: 0,
                at: 4,
            });
        }
        Ok(IncomingTransfer {
            source_bucket: u32::from_be_bytes(*bucket),
            transfer_id,
            destination: destination.into(),
            from_fifo,
            kind,
            reason: reason.map(Arc::from),
            message: *message,
        })
    }
}
