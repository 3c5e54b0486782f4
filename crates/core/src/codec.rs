//! The byte encoding of [`Record`]s, as the write-ahead log stores them.
//!
//! Hand-written and versioned: every record starts with the format version and a tag, then its
//! fields in a fixed order. Integers are little-endian and fixed-width (records are small and
//! decoding must be fast at recovery); strings and byte strings are a `u32` length and the bytes.
//! Decoding checks every length against the remaining input and never panics, whatever the bytes.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use crate::backoff::RedeliveryBackoff;
use crate::config::{QueueConfig, RedriveAllowPolicy, RedrivePolicy};
use crate::fair::{FairConfig, ProcessingWindow};
use crate::fifo::{AttemptLease, DeduplicationScope, FifoConfig, FifoMessage, FifoThroughputLimit};
use crate::history::{Attempt, AttemptHistory, AttemptOutcome, Client};
use crate::message::{AttributeValue, Location, MessageAttribute, MessageId, Payload, PayloadRef};
use crate::moves::{MoveStatus, MoveTask, MovedMessage};
use crate::queue::{Message, MessageState, QueueCounters};
use crate::record::{Record, TakenTransfer};
use crate::transfer::TransferKind;

const COUNTER_FIELDS: usize = 10;

/// The counters in their encoding order (decoding destructures the same order).
fn counter_fields(c: &QueueCounters) -> [u64; COUNTER_FIELDS] {
    [
        c.sent,
        c.received,
        c.deleted,
        c.deleted_late,
        c.leases_expired,
        c.leases_changed,
        c.leases_released,
        c.dead_lettered,
        c.retention_expired,
        c.purged,
    ]
}

/// Version of the record encoding. Bump it (and keep a decoder for the old one) on any change.
///
/// Version 2 added the `Relocate` record and a message's payload reference in `RestoreMessage`
/// (a tag, then the payload inline or its log location); version 1 records (payload always
/// inline) still decode.
///
/// Version 4 added the client to `Lease` and a message's attempt history to `RestoreMessage`;
/// older records decode with no client and a history without attempts.
///
/// Version 5 added `RestoreGroupRelease` (snapshots of FIFO groups released while messages of
/// theirs are in flight); no older record changed.
///
/// Version 6 added fair queues: a standard queue's message with a group id (`Send` and
/// `RestoreMessage` under their grouped tags 15 and 16, the group id at the end), the fair-queue
/// settings at the end of a queue's config, and the snapshot records `RestoreTenant` and
/// `RestoreFairTotal`, and the redelivery backoff at the very end of a config (its attribute
/// text, optional). Older records decode with the default fair settings and no backoff.
///
/// Version 7 added `RestoreDeletedQueue` (snapshots of the names of queues deleted within the
/// reuse delay); no older record changed.
///
/// Version 8 added the body's MD5 (16 bytes) after the body of every payload, so that a receive
/// reads it instead of computing it; older payloads decode with it computed from the body.
///
/// Version 9 added transfers between buckets (`TransferOut`, `TransferIn`, `TransferDone` and
/// the snapshot records `RestoreTransfer` and `RestoreTransfers`); no older record changed.
///
/// Version 10 added move tasks across buckets: a transfer's kind (a dead letter, or a message
/// of a move task with its new id) at the end of `TransferOut`, of a taken `TransferIn` and of
/// `RestoreTransfer`, and a task's remote destination (a queue name, optional) at the end of
/// `SetMoveTask`. Older transfers decode as dead letters, older tasks without a remote
/// destination.
pub const FORMAT_VERSION: u8 = 10;

/// The oldest version this build still decodes.
const FORMAT_VERSION_MIN: u8 = 1;

/// Why bytes did not decode into a record.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// The input ended inside a field.
    #[error("record truncated at byte {0}")]
    Truncated(usize),
    /// A version this build does not know.
    #[error("unknown record format version {0}")]
    UnknownVersion(u8),
    /// A tag or enum value that does not exist.
    #[error("invalid {what} {value} at byte {at}")]
    Invalid {
        /// What was being decoded.
        what: &'static str,
        /// The value found.
        value: u64,
        /// Where.
        at: usize,
    },
    /// Text that is not UTF-8.
    #[error("invalid UTF-8 at byte {0}")]
    Utf8(usize),
    /// Bytes left over after the record.
    #[error("{0} trailing bytes after the record")]
    Trailing(usize),
}

const TAG_CREATE_QUEUE: u8 = 1;
const TAG_DELETE_QUEUE: u8 = 2;
const TAG_SET_CONFIG: u8 = 3;
const TAG_SET_TAGS: u8 = 4;
const TAG_PURGE: u8 = 5;
const TAG_SEND: u8 = 6;
const TAG_LEASE: u8 = 7;
const TAG_CHANGE_VISIBILITY: u8 = 8;
const TAG_DELETE: u8 = 9;
const TAG_DEAD_LETTER: u8 = 10;
const TAG_RESTORE_ENGINE: u8 = 11;
const TAG_RESTORE_QUEUE: u8 = 12;
const TAG_RESTORE_MESSAGE: u8 = 13;
const TAG_RELOCATE: u8 = 14;
// Fair queues, format version 6: a standard queue's message with a group id (the group id at
// the end, as FIFO twins do; no deduplication id), and the tenants' snapshot records.
const TAG_SEND_GROUPED: u8 = 15;
const TAG_RESTORE_GROUPED_MESSAGE: u8 = 16;
const TAG_RESTORE_TENANT: u8 = 17;
const TAG_RESTORE_FAIR_TOTAL: u8 = 18;
// Format version 7: a recently deleted queue's name (the delete's time in the id field).
const TAG_RESTORE_DELETED_QUEUE: u8 = 19;
// FIFO queues. A record about a FIFO queue or message uses the FIFO twin of its tag: the same
// fields, then the FIFO ones at the end. Standard queues' records keep their encoding, so logs
// written before FIFO queues existed decode unchanged. The FIFO tags start at 32 to leave the
// tags below free for other records.
const TAG_CREATE_FIFO_QUEUE: u8 = 32;
const TAG_SET_FIFO_CONFIG: u8 = 33;
const TAG_SEND_FIFO: u8 = 34;
const TAG_RESTORE_FIFO_QUEUE: u8 = 35;
const TAG_RESTORE_FIFO_MESSAGE: u8 = 36;
const TAG_RECEIVE_ATTEMPT: u8 = 37;
const TAG_RESTORE_DEDUPLICATION: u8 = 38;
// Format version 5.
const TAG_RESTORE_GROUP_RELEASE: u8 = 39;
// Move tasks (redrive), format version 3.
const TAG_SET_MOVE_TASK: u8 = 48;
const TAG_MOVE_MESSAGES: u8 = 49;
// Fail-now, format version 3.
const TAG_FAIL_MESSAGE: u8 = 50;
const TAG_RESTORE_FAILURE_REASON: u8 = 51;
// Transfers between buckets, format version 9. A message in them carries its group under
// `Writer::any_fifo` (a kind byte, then the ids) instead of its own tag.
const TAG_TRANSFER_OUT: u8 = 52;
const TAG_TRANSFER_IN: u8 = 53;
const TAG_TRANSFER_DONE: u8 = 54;
const TAG_RESTORE_TRANSFER: u8 = 55;
const TAG_RESTORE_TRANSFERS: u8 = 56;

/// The tag of a record about a queue with `config`: the standard one or its FIFO twin.
fn config_tag(config: &QueueConfig, standard: u8, fifo: u8) -> u8 {
    if config.fifo.is_some() {
        fifo
    } else {
        standard
    }
}

/// The tag of a record that carries a message: standard, FIFO (a deduplication id) or grouped
/// (a standard queue's message with a group id and no deduplication id).
fn message_tag(fifo: Option<&FifoMessage>, standard: u8, fifo_tag: u8, grouped: u8) -> u8 {
    match fifo {
        None => standard,
        Some(fifo) if fifo.deduplication_id.is_empty() => grouped,
        Some(_) => fifo_tag,
    }
}

/// Appends the encoding of `record` to `out`.
pub fn encode(record: &Record, out: &mut Vec<u8>) {
    let mut w = Writer(out);
    w.u8(FORMAT_VERSION);
    match record {
        Record::CreateQueue {
            now_ms,
            queue_id,
            name,
            config,
            tags,
        } => {
            let tag = config_tag(config, TAG_CREATE_QUEUE, TAG_CREATE_FIFO_QUEUE);
            w.head(tag, *now_ms, *queue_id);
            w.str(name);
            w.config(config);
            w.map(tags);
            w.fifo_config(config);
        }
        Record::DeleteQueue { now_ms, queue_id } => w.head(TAG_DELETE_QUEUE, *now_ms, *queue_id),
        Record::SetConfig {
            now_ms,
            queue_id,
            config,
        } => {
            let tag = config_tag(config, TAG_SET_CONFIG, TAG_SET_FIFO_CONFIG);
            w.head(tag, *now_ms, *queue_id);
            w.config(config);
            w.fifo_config(config);
        }
        Record::SetTags {
            now_ms,
            queue_id,
            tags,
        } => {
            w.head(TAG_SET_TAGS, *now_ms, *queue_id);
            w.map(tags);
        }
        Record::Purge { now_ms, queue_id } => w.head(TAG_PURGE, *now_ms, *queue_id),
        Record::Send {
            now_ms,
            queue_id,
            seq,
            message_id,
            visible_at_ms,
            payload,
            fifo,
        } => {
            let tag = message_tag(fifo.as_deref(), TAG_SEND, TAG_SEND_FIFO, TAG_SEND_GROUPED);
            w.head(tag, *now_ms, *queue_id);
            w.u64(*seq);
            w.0.extend_from_slice(&message_id.0);
            w.u64(*visible_at_ms);
            w.payload(payload);
            w.fifo_message(fifo.as_deref());
        }
        Record::Lease {
            now_ms,
            queue_id,
            seq,
            attempt,
            visible_at_ms,
            client,
        } => {
            w.head(TAG_LEASE, *now_ms, *queue_id);
            w.u64(*seq);
            w.u32(*attempt);
            w.u64(*visible_at_ms);
            // Format version 4 on.
            w.client(client.as_deref());
        }
        Record::ChangeVisibility {
            now_ms,
            queue_id,
            seq,
            visible_at_ms,
        } => {
            w.head(TAG_CHANGE_VISIBILITY, *now_ms, *queue_id);
            w.u64(*seq);
            w.u64(*visible_at_ms);
        }
        Record::Delete {
            now_ms,
            queue_id,
            seq,
        } => {
            w.head(TAG_DELETE, *now_ms, *queue_id);
            w.u64(*seq);
        }
        Record::DeadLetter {
            now_ms,
            queue_id,
            seq,
            dead_letter_queue_id,
            dead_letter_seq,
        } => {
            w.head(TAG_DEAD_LETTER, *now_ms, *queue_id);
            w.u64(*seq);
            w.u64(*dead_letter_queue_id);
            w.u64(*dead_letter_seq);
        }
        Record::RestoreEngine {
            now_ms,
            next_queue_id,
        } => w.head(TAG_RESTORE_ENGINE, *now_ms, *next_queue_id),
        Record::RestoreDeletedQueue {
            now_ms,
            name,
            deleted_at_ms,
        } => {
            w.head(TAG_RESTORE_DELETED_QUEUE, *now_ms, *deleted_at_ms);
            w.str(name);
        }
        Record::RestoreQueue {
            now_ms,
            queue_id,
            name,
            config,
            tags,
            created_at_ms,
            last_modified_at_ms,
            last_purge_at_ms,
            next_seq,
            counters,
        } => {
            let tag = config_tag(config, TAG_RESTORE_QUEUE, TAG_RESTORE_FIFO_QUEUE);
            w.head(tag, *now_ms, *queue_id);
            w.str(name);
            w.config(config);
            w.map(tags);
            w.u64(*created_at_ms);
            w.u64(*last_modified_at_ms);
            w.opt_u64(*last_purge_at_ms);
            w.u64(*next_seq);
            w.counters(counters);
            w.fifo_config(config);
        }
        Record::Relocate {
            now_ms,
            queue_id,
            seq,
            payload,
        } => {
            w.head(TAG_RELOCATE, *now_ms, *queue_id);
            w.u64(*seq);
            w.payload(payload);
        }
        Record::RestoreMessage {
            now_ms,
            queue_id,
            seq,
            message,
        } => {
            let tag = message_tag(
                message.fifo.as_deref(),
                TAG_RESTORE_MESSAGE,
                TAG_RESTORE_FIFO_MESSAGE,
                TAG_RESTORE_GROUPED_MESSAGE,
            );
            w.head(tag, *now_ms, *queue_id);
            w.u64(*seq);
            w.message(message);
            w.fifo_message(message.fifo.as_deref());
        }
        Record::ReceiveAttempt {
            now_ms,
            queue_id,
            attempt_id,
            received_at_ms,
            leases,
        } => {
            w.head(TAG_RECEIVE_ATTEMPT, *now_ms, *queue_id);
            w.str(attempt_id);
            w.u64(*received_at_ms);
            w.u32(leases.len() as u32);
            for lease in leases {
                w.u64(lease.seq);
                w.u32(lease.attempt);
                w.u64(lease.visible_at_ms);
            }
        }
        Record::RestoreDeduplication {
            now_ms,
            queue_id,
            scope,
            deduplication_id,
            message_id,
            seq,
            expires_at_ms,
        } => {
            w.head(TAG_RESTORE_DEDUPLICATION, *now_ms, *queue_id);
            w.str(scope);
            w.str(deduplication_id);
            w.0.extend_from_slice(&message_id.0);
            w.u64(*seq);
            w.u64(*expires_at_ms);
        }
        Record::RestoreGroupRelease {
            now_ms,
            queue_id,
            group_id,
        } => {
            w.head(TAG_RESTORE_GROUP_RELEASE, *now_ms, *queue_id);
            w.str(group_id);
        }
        Record::RestoreTenant {
            now_ms,
            queue_id,
            group_id,
            last_sent_at_ms,
            processing,
            noisy,
        } => {
            w.head(TAG_RESTORE_TENANT, *now_ms, *queue_id);
            w.str(group_id);
            w.u64(*last_sent_at_ms);
            w.processing(processing);
            w.u8(u8::from(*noisy));
        }
        Record::RestoreFairTotal {
            now_ms,
            queue_id,
            processing,
        } => {
            w.head(TAG_RESTORE_FAIR_TOTAL, *now_ms, *queue_id);
            w.processing(processing);
        }
        Record::SetMoveTask { now_ms, task } => {
            w.head(TAG_SET_MOVE_TASK, *now_ms, task.source_queue_id);
            w.u64(task.task_id);
            w.opt_u64(task.destination_queue_id);
            w.opt_u64(task.rate_per_second.map(u64::from));
            w.opt_u64(task.limit);
            w.u64(task.cutoff_seq);
            w.u64(task.to_move);
            w.u64(task.moved);
            w.u64(task.held_back);
            w.u64(task.started_at_ms);
            w.u8(task.status.code());
            w.opt_str(task.failure_reason.as_deref());
            // Format version 10 on.
            w.opt_str(task.remote_destination.as_deref());
        }
        Record::FailMessage {
            now_ms,
            queue_id,
            seq,
            dead_letter_queue_id,
            dead_letter_seq,
            reason,
        } => {
            w.head(TAG_FAIL_MESSAGE, *now_ms, *queue_id);
            w.u64(*seq);
            w.u64(*dead_letter_queue_id);
            w.u64(*dead_letter_seq);
            w.str(reason);
        }
        Record::RestoreFailureReason {
            now_ms,
            queue_id,
            seq,
            reason,
        } => {
            w.head(TAG_RESTORE_FAILURE_REASON, *now_ms, *queue_id);
            w.u64(*seq);
            w.str(reason);
        }
        Record::MoveMessages {
            now_ms,
            task_id,
            source_queue_id,
            moves,
        } => {
            w.head(TAG_MOVE_MESSAGES, *now_ms, *source_queue_id);
            w.u64(*task_id);
            w.u32(moves.len() as u32);
            for moved in moves {
                w.u64(moved.seq);
                w.u64(moved.destination_queue_id);
                w.u64(moved.destination_seq);
                w.0.extend_from_slice(&moved.message_id.0);
            }
        }
        Record::TransferOut {
            now_ms,
            queue_id,
            seq,
            transfer_id,
            destination,
            kind,
            reason,
        } => {
            w.head(TAG_TRANSFER_OUT, *now_ms, *queue_id);
            w.u64(*seq);
            w.u64(*transfer_id);
            w.str(destination);
            w.opt_str(reason.as_deref());
            w.transfer_kind(kind);
        }
        Record::TransferIn {
            now_ms,
            source_bucket,
            transfer_id,
            taken,
        } => {
            w.head(TAG_TRANSFER_IN, *now_ms, *transfer_id);
            w.u32(*source_bucket);
            match taken {
                None => w.u8(0),
                Some(taken) => {
                    w.u8(1);
                    w.u64(taken.queue_id);
                    w.u64(taken.seq);
                    w.message(&taken.message);
                    w.any_fifo(taken.message.fifo.as_deref());
                    w.opt_str(taken.reason.as_deref());
                    w.transfer_kind(&taken.kind);
                }
            }
        }
        Record::TransferDone {
            now_ms,
            transfer_id,
            taken,
            return_seq,
        } => {
            w.head(TAG_TRANSFER_DONE, *now_ms, *transfer_id);
            w.u8(u8::from(*taken));
            w.u64(*return_seq);
        }
        Record::RestoreTransfer {
            now_ms,
            transfer_id,
            queue_id,
            seq,
            source_name,
            from_fifo,
            destination,
            kind,
            reason,
            message,
        } => {
            w.head(TAG_RESTORE_TRANSFER, *now_ms, *queue_id);
            w.u64(*transfer_id);
            w.u64(*seq);
            w.str(source_name);
            w.u8(u8::from(*from_fifo));
            w.str(destination);
            w.opt_str(reason.as_deref());
            w.message(message);
            w.any_fifo(message.fifo.as_deref());
            w.transfer_kind(kind);
        }
        Record::RestoreTransfers {
            now_ms,
            next_transfer_id,
            inbox,
            refused,
        } => {
            w.head(TAG_RESTORE_TRANSFERS, *now_ms, *next_transfer_id);
            w.u32(inbox.len() as u32);
            for &(bucket, transfer_id, taken) in inbox {
                w.u32(bucket);
                w.u64(transfer_id);
                w.u8(u8::from(taken));
            }
            w.u32(refused.len() as u32);
            for (destination, until_ms) in refused {
                w.str(destination);
                w.u64(*until_ms);
            }
        }
    }
}

/// Decodes one record that fills `bytes` exactly.
pub fn decode(bytes: &[u8]) -> Result<Record, DecodeError> {
    Decoder::default().decode(bytes)
}

/// Decodes a sequence of records (a snapshot, the log at recovery), sharing the strings that
/// repeat from record to record: the messages of one sender share one `SenderId`, those of one
/// dead-letter source one queue name. That saves an allocation per message while decoding and
/// the memory of a copy per message in the state it rebuilds. The records are the same as
/// [`decode`]'s.
#[derive(Debug, Default)]
pub struct Decoder {
    sender_id: Option<Arc<str>>,
    dead_letter_source: Option<Arc<str>>,
    group_id: Option<Arc<str>>,
    client: Option<Arc<Client>>,
}

impl Decoder {
    /// Decodes one record that fills `bytes` exactly.
    pub fn decode(&mut self, bytes: &[u8]) -> Result<Record, DecodeError> {
        decode_with(bytes, self)
    }
}

fn decode_with(bytes: &[u8], shared: &mut Decoder) -> Result<Record, DecodeError> {
    let mut r = Reader {
        bytes,
        at: 0,
        version: FORMAT_VERSION,
        shared,
    };
    let version = r.u8()?;
    if !(FORMAT_VERSION_MIN..=FORMAT_VERSION).contains(&version) {
        return Err(DecodeError::UnknownVersion(version));
    }
    r.version = version;
    let tag_at = r.at;
    let tag = r.u8()?;
    let now_ms = r.u64()?;
    let queue_id = r.u64()?;
    if version < 2 && tag >= TAG_CREATE_FIFO_QUEUE {
        // FIFO records came with version 2.
        return Err(r.invalid_at("record tag", tag.into(), tag_at));
    }
    let record = match tag {
        TAG_CREATE_QUEUE | TAG_CREATE_FIFO_QUEUE => {
            let name = r.string()?;
            let mut config = r.config()?;
            let tags = r.map()?;
            r.fifo_config(tag == TAG_CREATE_FIFO_QUEUE, &mut config)?;
            Record::CreateQueue {
                now_ms,
                queue_id,
                name,
                config: Box::new(config),
                tags,
            }
        }
        TAG_DELETE_QUEUE => Record::DeleteQueue { now_ms, queue_id },
        TAG_SET_CONFIG | TAG_SET_FIFO_CONFIG => {
            let mut config = r.config()?;
            r.fifo_config(tag == TAG_SET_FIFO_CONFIG, &mut config)?;
            Record::SetConfig {
                now_ms,
                queue_id,
                config: Box::new(config),
            }
        }
        TAG_SET_TAGS => Record::SetTags {
            now_ms,
            queue_id,
            tags: r.map()?,
        },
        TAG_PURGE => Record::Purge { now_ms, queue_id },
        TAG_SEND | TAG_SEND_FIFO => Record::Send {
            now_ms,
            queue_id,
            seq: r.u64()?,
            message_id: MessageId(r.array()?),
            visible_at_ms: r.u64()?,
            payload: Arc::new(r.payload()?),
            fifo: r.fifo_message(tag == TAG_SEND_FIFO)?,
        },
        TAG_SEND_GROUPED if version >= 6 => Record::Send {
            now_ms,
            queue_id,
            seq: r.u64()?,
            message_id: MessageId(r.array()?),
            visible_at_ms: r.u64()?,
            payload: Arc::new(r.payload()?),
            fifo: Some(r.group()?),
        },
        TAG_RESTORE_GROUPED_MESSAGE if version >= 6 => {
            let seq = r.u64()?;
            let mut message = r.message()?;
            message.fifo = Some(r.group()?);
            Record::RestoreMessage {
                now_ms,
                queue_id,
                seq,
                message: Box::new(message),
            }
        }
        TAG_RESTORE_TENANT if version >= 6 => Record::RestoreTenant {
            now_ms,
            queue_id,
            group_id: r.string()?,
            last_sent_at_ms: r.u64()?,
            processing: r.processing()?,
            noisy: r.flag("noisy flag")?,
        },
        TAG_RESTORE_FAIR_TOTAL if version >= 6 => Record::RestoreFairTotal {
            now_ms,
            queue_id,
            processing: r.processing()?,
        },
        TAG_LEASE => Record::Lease {
            now_ms,
            queue_id,
            seq: r.u64()?,
            attempt: r.u32()?,
            visible_at_ms: r.u64()?,
            client: if version >= 4 { r.client()? } else { None },
        },
        TAG_CHANGE_VISIBILITY => Record::ChangeVisibility {
            now_ms,
            queue_id,
            seq: r.u64()?,
            visible_at_ms: r.u64()?,
        },
        TAG_DELETE => Record::Delete {
            now_ms,
            queue_id,
            seq: r.u64()?,
        },
        TAG_DEAD_LETTER => Record::DeadLetter {
            now_ms,
            queue_id,
            seq: r.u64()?,
            dead_letter_queue_id: r.u64()?,
            dead_letter_seq: r.u64()?,
        },
        TAG_RESTORE_ENGINE => Record::RestoreEngine {
            now_ms,
            next_queue_id: queue_id,
        },
        TAG_RESTORE_DELETED_QUEUE if version >= 7 => Record::RestoreDeletedQueue {
            now_ms,
            deleted_at_ms: queue_id,
            name: r.string()?,
        },
        TAG_RESTORE_QUEUE | TAG_RESTORE_FIFO_QUEUE => {
            let name = r.string()?;
            let mut config = r.config()?;
            let tags = r.map()?;
            let created_at_ms = r.u64()?;
            let last_modified_at_ms = r.u64()?;
            let last_purge_at_ms = r.opt_u64("purge time flag")?;
            let next_seq = r.u64()?;
            let counters = r.counters()?;
            r.fifo_config(tag == TAG_RESTORE_FIFO_QUEUE, &mut config)?;
            Record::RestoreQueue {
                now_ms,
                queue_id,
                name,
                config: Box::new(config),
                tags,
                created_at_ms,
                last_modified_at_ms,
                last_purge_at_ms,
                next_seq,
                counters,
            }
        }
        TAG_RESTORE_MESSAGE | TAG_RESTORE_FIFO_MESSAGE => {
            let seq = r.u64()?;
            let mut message = r.message()?;
            message.fifo = r.fifo_message(tag == TAG_RESTORE_FIFO_MESSAGE)?;
            Record::RestoreMessage {
                now_ms,
                queue_id,
                seq,
                message: Box::new(message),
            }
        }
        TAG_RECEIVE_ATTEMPT => {
            let attempt_id = r.string()?;
            let received_at_ms = r.u64()?;
            let count = r.count(20)?;
            let mut leases = Vec::with_capacity(count);
            for _ in 0..count {
                leases.push(AttemptLease {
                    seq: r.u64()?,
                    attempt: r.u32()?,
                    visible_at_ms: r.u64()?,
                });
            }
            Record::ReceiveAttempt {
                now_ms,
                queue_id,
                attempt_id,
                received_at_ms,
                leases,
            }
        }
        TAG_RESTORE_GROUP_RELEASE if version >= 5 => Record::RestoreGroupRelease {
            now_ms,
            queue_id,
            group_id: r.string()?,
        },
        TAG_RELOCATE if version >= 2 => Record::Relocate {
            now_ms,
            queue_id,
            seq: r.u64()?,
            payload: Arc::new(r.payload()?),
        },
        TAG_RESTORE_DEDUPLICATION => Record::RestoreDeduplication {
            now_ms,
            queue_id,
            scope: r.string()?,
            deduplication_id: r.string()?,
            message_id: MessageId(r.array()?),
            seq: r.u64()?,
            expires_at_ms: r.u64()?,
        },
        TAG_SET_MOVE_TASK if version >= 3 => {
            let task_id = r.u64()?;
            let destination_queue_id = r.opt_u64("destination flag")?;
            let rate_at = r.at;
            let rate_per_second = match r.opt_u64("rate flag")? {
                Some(rate) => Some(
                    u32::try_from(rate).map_err(|_| r.invalid_at("move rate", rate, rate_at))?,
                ),
                None => None,
            };
            let limit = r.opt_u64("limit flag")?;
            let cutoff_seq = r.u64()?;
            let to_move = r.u64()?;
            let moved = r.u64()?;
            let held_back = r.u64()?;
            let started_at_ms = r.u64()?;
            let status_at = r.at;
            let code = r.u8()?;
            let status = MoveStatus::from_code(code)
                .ok_or_else(|| r.invalid_at("move status", code.into(), status_at))?;
            let failure_reason = r.opt_string("failure reason flag")?;
            let remote_destination = if version >= 10 {
                r.opt_string("remote destination flag")?
            } else {
                None
            };
            Record::SetMoveTask {
                now_ms,
                task: Box::new(MoveTask {
                    task_id,
                    source_queue_id: queue_id,
                    destination_queue_id,
                    rate_per_second,
                    limit,
                    cutoff_seq,
                    to_move,
                    moved,
                    held_back,
                    started_at_ms,
                    status,
                    failure_reason,
                    remote_destination,
                }),
            }
        }
        TAG_FAIL_MESSAGE if version >= 3 => Record::FailMessage {
            now_ms,
            queue_id,
            seq: r.u64()?,
            dead_letter_queue_id: r.u64()?,
            dead_letter_seq: r.u64()?,
            reason: r.string()?,
        },
        TAG_RESTORE_FAILURE_REASON if version >= 3 => Record::RestoreFailureReason {
            now_ms,
            queue_id,
            seq: r.u64()?,
            reason: r.string()?,
        },
        TAG_MOVE_MESSAGES if version >= 3 => {
            let task_id = r.u64()?;
            let count = r.count(8 + 8 + 8 + 16)?;
            let mut moves = Vec::with_capacity(count);
            for _ in 0..count {
                moves.push(MovedMessage {
                    seq: r.u64()?,
                    destination_queue_id: r.u64()?,
                    destination_seq: r.u64()?,
                    message_id: MessageId(r.array()?),
                });
            }
            Record::MoveMessages {
                now_ms,
                task_id,
                source_queue_id: queue_id,
                moves,
            }
        }
        TAG_TRANSFER_OUT if version >= 9 => Record::TransferOut {
            now_ms,
            queue_id,
            seq: r.u64()?,
            transfer_id: r.u64()?,
            destination: r.string()?,
            reason: r.opt_string("reason flag")?,
            kind: r.transfer_kind()?,
        },
        TAG_TRANSFER_IN if version >= 9 => {
            let source_bucket = r.u32()?;
            let taken = if r.flag("taken flag")? {
                let queue_id = r.u64()?;
                let seq = r.u64()?;
                let mut message = r.message()?;
                message.fifo = r.any_fifo()?;
                let reason = r.opt_string("reason flag")?;
                Some(Box::new(TakenTransfer {
                    queue_id,
                    seq,
                    message,
                    kind: r.transfer_kind()?,
                    reason,
                }))
            } else {
                None
            };
            Record::TransferIn {
                now_ms,
                source_bucket,
                transfer_id: queue_id,
                taken,
            }
        }
        TAG_TRANSFER_DONE if version >= 9 => Record::TransferDone {
            now_ms,
            transfer_id: queue_id,
            taken: r.flag("taken flag")?,
            return_seq: r.u64()?,
        },
        TAG_RESTORE_TRANSFER if version >= 9 => {
            let transfer_id = r.u64()?;
            let seq = r.u64()?;
            let source_name = r.string()?;
            let from_fifo = r.flag("FIFO flag")?;
            let destination = r.string()?;
            let reason = r.opt_string("reason flag")?;
            let mut message = r.message()?;
            message.fifo = r.any_fifo()?;
            Record::RestoreTransfer {
                now_ms,
                transfer_id,
                queue_id,
                seq,
                source_name,
                from_fifo,
                destination,
                kind: r.transfer_kind()?,
                reason,
                message: Box::new(message),
            }
        }
        TAG_RESTORE_TRANSFERS if version >= 9 => {
            let count = r.count(4 + 8 + 1)?;
            let mut inbox = Vec::with_capacity(count);
            for _ in 0..count {
                inbox.push((r.u32()?, r.u64()?, r.flag("taken flag")?));
            }
            let count = r.count(4 + 8)?;
            let mut refused = Vec::with_capacity(count);
            for _ in 0..count {
                refused.push((r.string()?, r.u64()?));
            }
            Record::RestoreTransfers {
                now_ms,
                next_transfer_id: queue_id,
                inbox,
                refused,
            }
        }
        other => return Err(r.invalid_at("record tag", other.into(), tag_at)),
    };
    match bytes.len() - r.at {
        0 => Ok(record),
        n => Err(DecodeError::Trailing(n)),
    }
}

struct Writer<'a>(&'a mut Vec<u8>);

impl Writer<'_> {
    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn head(&mut self, tag: u8, now_ms: u64, queue_id: u64) {
        self.u8(tag);
        self.u64(now_ms);
        self.u64(queue_id);
    }
    fn bytes(&mut self, v: &[u8]) {
        let len = u32::try_from(v.len()).expect("field shorter than 4 GiB");
        self.u32(len);
        self.0.extend_from_slice(v);
    }
    fn str(&mut self, v: &str) {
        self.bytes(v.as_bytes());
    }
    fn opt_str(&mut self, v: Option<&str>) {
        match v {
            Some(v) => {
                self.u8(1);
                self.str(v);
            }
            None => self.u8(0),
        }
    }
    fn opt_u64(&mut self, v: Option<u64>) {
        match v {
            Some(v) => {
                self.u8(1);
                self.u64(v);
            }
            None => self.u8(0),
        }
    }
    fn counters(&mut self, c: &QueueCounters) {
        for v in counter_fields(c) {
            self.u64(v);
        }
    }
    fn message(&mut self, m: &Message) {
        self.0.extend_from_slice(&m.id.0);
        match &m.payload {
            PayloadRef::Inline(payload) => {
                self.u8(0);
                self.payload(payload);
            }
            // A cached payload is written as what it is durably: a location in the log.
            PayloadRef::Stored(_) | PayloadRef::Cached(_) => {
                let location = m.payload.stored().expect("in the log");
                self.u8(1);
                self.u32(location.segment);
                self.u32(location.offset);
                self.u32(location.len_bytes);
            }
        }
        self.u64(m.sent_at_ms);
        self.u64(m.visible_at_ms);
        self.u64(m.leased_at_ms);
        self.opt_u64(m.first_received_at_ms());
        self.u32(m.receive_count);
        self.u8(match m.state {
            MessageState::Delayed => 0,
            MessageState::Ready => 1,
            MessageState::InFlight => 2,
        });
        self.opt_str(m.dead_letter_source.as_deref());
        // Format version 3 on.
        self.u32(m.redrive_generation.into());
        // Format version 4 on: the attempts, when it has a history (a first receive).
        if let Some(history) = &m.history {
            self.u32(history.first_attempt);
            self.opt_u64(history.dead_lettered_at_ms);
            self.u32(history.attempts.len() as u32);
            for attempt in &history.attempts {
                self.u64(attempt.received_at_ms);
                self.u64(attempt.first_deadline_ms);
                self.u64(attempt.deadline_ms);
                self.u32(attempt.extensions);
                self.u8(attempt.outcome.code());
                self.u64(attempt.ended_at_ms);
                self.client(attempt.client.as_deref());
            }
        }
    }
    fn client(&mut self, client: Option<&Client>) {
        match client {
            Some(client) => {
                self.u8(1);
                self.str(&client.address);
                self.str(&client.user_agent);
            }
            None => self.u8(0),
        }
    }
    fn map(&mut self, map: &BTreeMap<String, String>) {
        self.u32(map.len() as u32);
        for (k, v) in map {
            self.str(k);
            self.str(v);
        }
    }
    fn config(&mut self, c: &QueueConfig) {
        self.u32(c.visibility_timeout_seconds);
        self.u32(c.retention_seconds);
        self.u32(c.delay_seconds);
        self.u32(c.maximum_message_size_bytes);
        self.u32(c.receive_wait_time_seconds);
        match &c.redrive_policy {
            Some(p) => {
                self.u8(1);
                self.str(&p.dead_letter_queue);
                self.u32(p.max_receive_count);
            }
            None => self.u8(0),
        }
        match &c.redrive_allow_policy {
            None => self.u8(0),
            Some(RedriveAllowPolicy::AllowAll) => self.u8(1),
            Some(RedriveAllowPolicy::DenyAll) => self.u8(2),
            Some(RedriveAllowPolicy::ByQueue(names)) => {
                self.u8(3);
                self.u32(names.len() as u32);
                for name in names {
                    self.str(name);
                }
            }
        }
        self.opt_str(c.policy.as_deref());
        self.map(&c.passthrough);
        self.u8(u8::from(c.fairness.enabled));
        self.u32(c.fairness.in_flight_min);
        self.u32(c.fairness.processing_window_seconds);
        self.u32(c.fairness.comparable_factor);
        let backoff = c.redelivery_backoff.as_ref().map(ToString::to_string);
        self.opt_str(backoff.as_deref());
    }
    fn processing(&mut self, p: &ProcessingWindow) {
        self.u64(p.start_ms);
        self.u64(p.current_ms);
        self.u64(p.previous_ms);
    }
    /// The FIFO settings, written only for a FIFO queue (its record has the FIFO tag).
    fn fifo_config(&mut self, c: &QueueConfig) {
        let Some(fifo) = &c.fifo else { return };
        self.u8(u8::from(fifo.content_based_deduplication));
        self.u8(match fifo.deduplication_scope {
            DeduplicationScope::Queue => 0,
            DeduplicationScope::MessageGroup => 1,
        });
        self.u8(match fifo.throughput_limit {
            FifoThroughputLimit::PerQueue => 0,
            FifoThroughputLimit::PerMessageGroupId => 1,
        });
    }
    /// Group and deduplication id, written only for a FIFO message (FIFO tag); the group id
    /// alone for a standard queue's message with one (grouped tag).
    fn fifo_message(&mut self, fifo: Option<&FifoMessage>) {
        let Some(fifo) = fifo else { return };
        self.str(&fifo.group_id);
        if !fifo.deduplication_id.is_empty() {
            self.str(&fifo.deduplication_id);
        }
    }
    /// A message's group and deduplication id in a record without FIFO twins: 0 (none), 1
    /// and the group id (a standard queue's group), or 2 and both ids (FIFO).
    fn any_fifo(&mut self, fifo: Option<&FifoMessage>) {
        match fifo {
            None => self.u8(0),
            Some(fifo) if fifo.deduplication_id.is_empty() => {
                self.u8(1);
                self.str(&fifo.group_id);
            }
            Some(fifo) => {
                self.u8(2);
                self.str(&fifo.group_id);
                self.str(&fifo.deduplication_id);
            }
        }
    }
    /// A transfer's kind (format version 10): 0 (a dead letter), or 1, the move task's id and
    /// the message's new id.
    fn transfer_kind(&mut self, kind: &TransferKind) {
        match kind {
            TransferKind::DeadLetter => self.u8(0),
            TransferKind::Move {
                task_id,
                message_id,
            } => {
                self.u8(1);
                self.u64(*task_id);
                self.0.extend_from_slice(&message_id.0);
            }
        }
    }
    fn payload(&mut self, p: &Payload) {
        self.str(&p.body);
        self.0.extend_from_slice(p.body_md5());
        self.u32(p.attributes.len() as u32);
        for (name, attribute) in &p.attributes {
            self.str(name);
            self.str(&attribute.data_type);
            match &attribute.value {
                AttributeValue::Text(text) => {
                    self.u8(1);
                    self.str(text);
                }
                AttributeValue::Binary(bytes) => {
                    self.u8(2);
                    self.bytes(bytes);
                }
            }
        }
        self.opt_str(p.trace_header.as_deref());
        self.str(&p.sender_id);
    }
}

struct Reader<'a, 's> {
    bytes: &'a [u8],
    at: usize,
    /// The format version of the record being read.
    version: u8,
    shared: &'s mut Decoder,
}

/// `bytes` as a shared string: `last` itself when it holds the same text, else a new one that
/// replaces it.
fn shared_str(last: &mut Option<Arc<str>>, text: &str) -> Arc<str> {
    match last {
        Some(arc) if **arc == *text => arc.clone(),
        _ => last.insert(Arc::from(text)).clone(),
    }
}

impl<'a> Reader<'a, '_> {
    fn take(&mut self, len: usize) -> Result<&'a [u8], DecodeError> {
        let end = self
            .at
            .checked_add(len)
            .filter(|&end| end <= self.bytes.len())
            .ok_or(DecodeError::Truncated(self.at))?;
        let slice = &self.bytes[self.at..end];
        self.at = end;
        Ok(slice)
    }
    fn array<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        Ok(self.take(N)?.try_into().expect("took N bytes"))
    }
    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    fn invalid_at(&self, what: &'static str, value: u64, at: usize) -> DecodeError {
        DecodeError::Invalid { what, value, at }
    }
    fn bytes(&mut self) -> Result<&'a [u8], DecodeError> {
        let len = self.u32()? as usize;
        self.take(len)
    }
    fn str(&mut self) -> Result<&'a str, DecodeError> {
        let at = self.at;
        let bytes = self.bytes()?;
        crate::bytes::utf8(bytes).map_err(|_| DecodeError::Utf8(at))
    }
    fn string(&mut self) -> Result<String, DecodeError> {
        Ok(self.str()?.to_owned())
    }
    fn flag(&mut self, what: &'static str) -> Result<bool, DecodeError> {
        let at = self.at;
        match self.u8()? {
            0 => Ok(false),
            1 => Ok(true),
            other => Err(self.invalid_at(what, other.into(), at)),
        }
    }
    fn opt_string(&mut self, what: &'static str) -> Result<Option<String>, DecodeError> {
        if self.flag(what)? {
            Ok(Some(self.string()?))
        } else {
            Ok(None)
        }
    }
    /// A count of items that each take at least `item_min_bytes`, checked against what is left
    /// so a corrupt count cannot make us allocate without bound.
    fn count(&mut self, item_min_bytes: usize) -> Result<usize, DecodeError> {
        let at = self.at;
        let count = self.u32()? as usize;
        if count.saturating_mul(item_min_bytes) > self.bytes.len() - self.at {
            return Err(DecodeError::Truncated(at));
        }
        Ok(count)
    }
    fn opt_u64(&mut self, what: &'static str) -> Result<Option<u64>, DecodeError> {
        if self.flag(what)? {
            Ok(Some(self.u64()?))
        } else {
            Ok(None)
        }
    }
    fn counters(&mut self) -> Result<QueueCounters, DecodeError> {
        let mut values = [0u64; COUNTER_FIELDS];
        for v in &mut values {
            *v = self.u64()?;
        }
        let [sent, received, deleted, deleted_late, leases_expired, leases_changed, leases_released, dead_lettered, retention_expired, purged] =
            values;
        Ok(QueueCounters {
            sent,
            received,
            deleted,
            deleted_late,
            leases_expired,
            leases_changed,
            leases_released,
            dead_lettered,
            retention_expired,
            purged,
        })
    }
    fn message(&mut self) -> Result<Message, DecodeError> {
        let id = MessageId(self.array()?);
        let at = self.at;
        let kind = if self.version >= 2 { self.u8()? } else { 0 };
        let payload = match kind {
            0 => PayloadRef::Inline(Arc::new(self.payload()?)),
            1 => PayloadRef::Stored(Location {
                segment: self.u32()?,
                offset: self.u32()?,
                len_bytes: self.u32()?,
            }),
            other => return Err(self.invalid_at("payload reference", other.into(), at)),
        };
        let sent_at_ms = self.u64()?;
        let visible_at_ms = self.u64()?;
        let leased_at_ms = self.u64()?;
        let first_received_at_ms = self.opt_u64("first receive flag")?;
        let receive_count = self.u32()?;
        let at = self.at;
        let state = match self.u8()? {
            0 => MessageState::Delayed,
            1 => MessageState::Ready,
            2 => MessageState::InFlight,
            other => return Err(self.invalid_at("message state", other.into(), at)),
        };
        let dead_letter_source = match self.flag("dead letter source flag")? {
            true => {
                let text = self.str()?;
                Some(shared_str(&mut self.shared.dead_letter_source, text))
            }
            false => None,
        };
        let redrive_generation = if self.version >= 3 {
            let at = self.at;
            let generation = self.u32()?;
            u16::try_from(generation)
                .map_err(|_| self.invalid_at("redrive generation", generation.into(), at))?
        } else {
            0
        };
        let history = match first_received_at_ms {
            Some(first_received_at_ms) if self.version >= 4 => {
                Some(Box::new(self.history(first_received_at_ms)?))
            }
            Some(first_received_at_ms) => Some(Box::new(AttemptHistory::empty(
                first_received_at_ms,
                receive_count.saturating_add(1),
            ))),
            None => None,
        };
        Ok(Message {
            id,
            payload,
            sent_at_ms,
            visible_at_ms,
            leased_at_ms,
            history,
            receive_count,
            state,
            dead_letter_source,
            redrive_generation,
            fifo: None,
        })
    }
    fn history(&mut self, first_received_at_ms: u64) -> Result<AttemptHistory, DecodeError> {
        let first_attempt = self.u32()?;
        let dead_lettered_at_ms = self.opt_u64("dead-lettered flag")?;
        // Four times, extensions, outcome, client flag.
        let count = self.count(8 * 4 + 4 + 1 + 1)?;
        let mut attempts = VecDeque::with_capacity(count);
        for _ in 0..count {
            let received_at_ms = self.u64()?;
            let first_deadline_ms = self.u64()?;
            let deadline_ms = self.u64()?;
            let extensions = self.u32()?;
            let at = self.at;
            let code = self.u8()?;
            let outcome = AttemptOutcome::from_code(code)
                .ok_or_else(|| self.invalid_at("attempt outcome", code.into(), at))?;
            attempts.push_back(Attempt {
                received_at_ms,
                first_deadline_ms,
                deadline_ms,
                extensions,
                outcome,
                ended_at_ms: self.u64()?,
                client: self.client()?,
            });
        }
        Ok(AttemptHistory {
            first_received_at_ms,
            first_attempt,
            dead_lettered_at_ms,
            attempts,
        })
    }
    fn client(&mut self) -> Result<Option<Arc<Client>>, DecodeError> {
        if !self.flag("client flag")? {
            return Ok(None);
        }
        let address = self.str()?;
        let user_agent = self.str()?;
        let last = &mut self.shared.client;
        if let Some(client) = last {
            if client.address == address && client.user_agent == user_agent {
                return Ok(Some(client.clone()));
            }
        }
        let client = Arc::new(Client {
            address: address.to_owned(),
            user_agent: user_agent.to_owned(),
        });
        *last = Some(client.clone());
        Ok(Some(client))
    }
    fn map(&mut self) -> Result<BTreeMap<String, String>, DecodeError> {
        let count = self.count(8)?;
        let mut map = BTreeMap::new();
        for _ in 0..count {
            let at = self.at;
            let key = self.string()?;
            self.check_ascending(map.last_key_value().map(|(k, _)| k), &key, at)?;
            map.insert(key, self.string()?);
        }
        Ok(map)
    }
    /// Map keys are written sorted and once each; anything else is not an encoding of ours, so
    /// every record has exactly one encoding.
    fn check_ascending(
        &self,
        previous: Option<&String>,
        key: &str,
        at: usize,
    ) -> Result<(), DecodeError> {
        match previous {
            Some(previous) if previous.as_str() >= key => {
                Err(self.invalid_at("map key order", 0, at))
            }
            _ => Ok(()),
        }
    }
    fn config(&mut self) -> Result<QueueConfig, DecodeError> {
        let mut c = QueueConfig {
            visibility_timeout_seconds: self.u32()?,
            retention_seconds: self.u32()?,
            delay_seconds: self.u32()?,
            maximum_message_size_bytes: self.u32()?,
            receive_wait_time_seconds: self.u32()?,
            ..QueueConfig::default()
        };
        if self.flag("redrive policy flag")? {
            c.redrive_policy = Some(RedrivePolicy {
                dead_letter_queue: self.string()?,
                max_receive_count: self.u32()?,
            });
        }
        let at = self.at;
        c.redrive_allow_policy = match self.u8()? {
            0 => None,
            1 => Some(RedriveAllowPolicy::AllowAll),
            2 => Some(RedriveAllowPolicy::DenyAll),
            3 => {
                let count = self.count(4)?;
                let names = (0..count)
                    .map(|_| self.string())
                    .collect::<Result<_, _>>()?;
                Some(RedriveAllowPolicy::ByQueue(names))
            }
            other => return Err(self.invalid_at("redrive allow policy", other.into(), at)),
        };
        c.policy = self.opt_string("policy flag")?;
        c.passthrough = self.map()?;
        // Version 6: the fair settings and the redelivery backoff (as its attribute text).
        if self.version >= 6 {
            c.fairness = FairConfig {
                enabled: self.flag("fair queue flag")?,
                in_flight_min: self.u32()?,
                processing_window_seconds: self.u32()?,
                comparable_factor: self.u32()?,
            };
            let at = self.at;
            if let Some(text) = self.opt_string("redelivery backoff flag")? {
                // The text is the schedule's one spelling (`Display`, as `encode` writes it):
                // another spelling of the same schedule (`60s` for `1m`) would be a second
                // encoding of the record.
                c.redelivery_backoff = RedeliveryBackoff::parse(&text)
                    .ok()
                    .flatten()
                    .filter(|backoff| backoff.to_string() == text)
                    .map(Some)
                    .ok_or(DecodeError::Invalid {
                        what: "redelivery backoff",
                        value: text.len() as u64,
                        at,
                    })?;
            }
        }
        Ok(c)
    }
    fn processing(&mut self) -> Result<ProcessingWindow, DecodeError> {
        Ok(ProcessingWindow {
            start_ms: self.u64()?,
            current_ms: self.u64()?,
            previous_ms: self.u64()?,
        })
    }
    /// A standard queue's group id (grouped tags, version 6): no deduplication id.
    fn group(&mut self) -> Result<Box<FifoMessage>, DecodeError> {
        let text = self.str()?;
        let group_id = shared_str(&mut self.shared.group_id, text);
        Ok(Box::new(FifoMessage {
            group_id,
            deduplication_id: Arc::default(),
        }))
    }
    fn fifo_config(&mut self, present: bool, config: &mut QueueConfig) -> Result<(), DecodeError> {
        if !present {
            return Ok(());
        }
        let content_based_deduplication = self.flag("content-based deduplication flag")?;
        let at = self.at;
        let deduplication_scope = match self.u8()? {
            0 => DeduplicationScope::Queue,
            1 => DeduplicationScope::MessageGroup,
            other => return Err(self.invalid_at("deduplication scope", other.into(), at)),
        };
        let at = self.at;
        let throughput_limit = match self.u8()? {
            0 => FifoThroughputLimit::PerQueue,
            1 => FifoThroughputLimit::PerMessageGroupId,
            other => return Err(self.invalid_at("FIFO throughput limit", other.into(), at)),
        };
        config.fifo = Some(FifoConfig {
            content_based_deduplication,
            deduplication_scope,
            throughput_limit,
        });
        Ok(())
    }
    fn fifo_message(&mut self, present: bool) -> Result<Option<Box<FifoMessage>>, DecodeError> {
        if !present {
            return Ok(None);
        }
        let group_id = {
            let text = self.str()?;
            shared_str(&mut self.shared.group_id, text)
        };
        let at = self.at;
        let deduplication_id = self.str()?;
        // Since version 6 a message with a group id and no deduplication id has its own tags
        // (grouped); under a FIFO tag an empty one would be a second encoding of it.
        if deduplication_id.is_empty() && self.version >= 6 {
            return Err(self.invalid_at("FIFO deduplication id length", 0, at));
        }
        Ok(Some(Box::new(FifoMessage {
            group_id,
            deduplication_id: Arc::from(deduplication_id),
        })))
    }
    /// See `Writer::any_fifo`.
    fn any_fifo(&mut self) -> Result<Option<Box<FifoMessage>>, DecodeError> {
        let at = self.at;
        match self.u8()? {
            0 => Ok(None),
            1 => Ok(Some(self.group()?)),
            2 => self.fifo_message(true),
            other => Err(self.invalid_at("group kind", other.into(), at)),
        }
    }
    /// See `Writer::transfer_kind`; a transfer of a version before 10 is a dead letter (the
    /// only kind there was).
    fn transfer_kind(&mut self) -> Result<TransferKind, DecodeError> {
        if self.version < 10 {
            return Ok(TransferKind::DeadLetter);
        }
        let at = self.at;
        match self.u8()? {
            0 => Ok(TransferKind::DeadLetter),
            1 => Ok(TransferKind::Move {
                task_id: self.u64()?,
                message_id: MessageId(self.array()?),
            }),
            other => Err(self.invalid_at("transfer kind", other.into(), at)),
        }
    }
    fn payload(&mut self) -> Result<Payload, DecodeError> {
        let body = self.string()?;
        let body_md5 = if self.version >= 8 {
            self.array()?
        } else {
            crate::message::body_md5(&body)
        };
        let count = self.count(13)?;
        let mut attributes = BTreeMap::new();
        for _ in 0..count {
            let name_at = self.at;
            let name = self.string()?;
            self.check_ascending(attributes.last_key_value().map(|(k, _)| k), &name, name_at)?;
            let data_type = self.string()?;
            let at = self.at;
            let value = match self.u8()? {
                1 => AttributeValue::Text(self.string()?),
                2 => AttributeValue::Binary(self.bytes()?.to_vec()),
                other => return Err(self.invalid_at("attribute value kind", other.into(), at)),
            };
            attributes.insert(name, MessageAttribute { data_type, value });
        }
        let trace_header = self.opt_string("trace header flag")?;
        let sender_id = {
            let text = self.str()?;
            shared_str(&mut self.shared.sender_id, text)
        };
        Ok(Payload::with_body_md5(
            body,
            attributes,
            trace_header,
            sender_id,
            body_md5,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn samples() -> Vec<Record> {
        let mut attributes = BTreeMap::new();
        attributes.insert(
            "n".to_string(),
            MessageAttribute {
                data_type: "Number.int".into(),
                value: AttributeValue::Text("42".into()),
            },
        );
        attributes.insert(
            "b".to_string(),
            MessageAttribute {
                data_type: "Binary".into(),
                value: AttributeValue::Binary(vec![0, 1, 255]),
            },
        );
        let config = QueueConfig {
            redrive_policy: Some(RedrivePolicy {
                dead_letter_queue: "dlq".into(),
                max_receive_count: 3,
            }),
            redrive_allow_policy: Some(RedriveAllowPolicy::ByQueue(vec!["a".into()])),
            policy: Some("{}".into()),
            ..QueueConfig::default()
        };
        let mut records = vec![
            Record::CreateQueue {
                now_ms: 1,
                queue_id: 2,
                name: "q".into(),
                config: Box::new(config.clone()),
                tags: [("k".to_string(), "v".to_string())].into(),
            },
            Record::SetConfig {
                now_ms: 3,
                queue_id: 2,
                config: Box::new(config),
            },
            Record::Send {
                now_ms: 4,
                queue_id: 2,
                seq: 7,
                message_id: MessageId([9; 16]),
                visible_at_ms: 1004,
                payload: Arc::new(Payload::new(
                    "héllo <&>\r".into(),
                    attributes,
                    Some("Root=1".into()),
                    Arc::from("AKID"),
                )),
                fifo: None,
            },
            Record::Lease {
                now_ms: 5,
                queue_id: 2,
                seq: 7,
                attempt: 1,
                visible_at_ms: 30_005,
                client: Some(Arc::new(Client::new("10.1.2.3:5555", "aws-sdk-rust/1.3 é"))),
            },
            Record::Lease {
                now_ms: 5,
                queue_id: 2,
                seq: 8,
                attempt: 3,
                visible_at_ms: 30_005,
                client: None,
            },
            Record::ChangeVisibility {
                now_ms: 6,
                queue_id: 2,
                seq: 7,
                visible_at_ms: 6,
            },
            Record::DeadLetter {
                now_ms: 7,
                queue_id: 2,
                seq: 7,
                dead_letter_queue_id: 3,
                dead_letter_seq: 1,
            },
            Record::Delete {
                now_ms: 8,
                queue_id: 3,
                seq: 1,
            },
            Record::SetTags {
                now_ms: 9,
                queue_id: 2,
                tags: BTreeMap::new(),
            },
            Record::Purge {
                now_ms: 10,
                queue_id: 2,
            },
            Record::DeleteQueue {
                now_ms: 11,
                queue_id: 2,
            },
            Record::RestoreEngine {
                now_ms: 12,
                next_queue_id: 5,
            },
            Record::RestoreQueue {
                now_ms: 12,
                queue_id: 4,
                name: "r".into(),
                config: Box::new(QueueConfig::default()),
                tags: BTreeMap::new(),
                created_at_ms: 1,
                last_modified_at_ms: 2,
                last_purge_at_ms: Some(3),
                next_seq: 99,
                counters: QueueCounters {
                    sent: 1,
                    purged: 11,
                    ..QueueCounters::default()
                },
            },
            Record::RestoreMessage {
                now_ms: 12,
                queue_id: 4,
                seq: 98,
                message: Box::new(Message {
                    id: MessageId([3; 16]),
                    payload: PayloadRef::Inline(Arc::new(Payload::new(
                        "b".into(),
                        BTreeMap::new(),
                        None,
                        Arc::from(""),
                    ))),
                    sent_at_ms: 1,
                    visible_at_ms: 30_001,
                    leased_at_ms: 1,
                    history: Some(Box::new(AttemptHistory {
                        first_received_at_ms: 1,
                        first_attempt: 1,
                        dead_lettered_at_ms: Some(9),
                        attempts: [
                            Attempt {
                                received_at_ms: 1,
                                first_deadline_ms: 31,
                                deadline_ms: 61,
                                extensions: 1,
                                outcome: AttemptOutcome::Expired,
                                ended_at_ms: 61,
                                client: Some(Arc::new(Client::new("[::1]:80", "boto3"))),
                            },
                            Attempt {
                                received_at_ms: 70,
                                first_deadline_ms: 30_001,
                                deadline_ms: 30_001,
                                extensions: 0,
                                outcome: AttemptOutcome::Leased,
                                ended_at_ms: 0,
                                client: None,
                            },
                        ]
                        .into(),
                    })),
                    receive_count: 2,
                    state: MessageState::InFlight,
                    dead_letter_source: Some(Arc::from("src")),
                    redrive_generation: 0,
                    fifo: None,
                }),
            },
            Record::RestoreMessage {
                now_ms: 12,
                queue_id: 4,
                seq: 97,
                message: Box::new(Message {
                    id: MessageId([4; 16]),
                    payload: PayloadRef::Stored(Location {
                        segment: 7,
                        offset: 4096,
                        len_bytes: 1200,
                    }),
                    sent_at_ms: 1,
                    visible_at_ms: 1,
                    leased_at_ms: 0,
                    history: None,
                    receive_count: 0,
                    state: MessageState::Ready,
                    dead_letter_source: None,
                    redrive_generation: 2,
                    fifo: None,
                }),
            },
            Record::Relocate {
                now_ms: 13,
                queue_id: 4,
                seq: 97,
                payload: Arc::new(Payload::new(
                    "moved".into(),
                    BTreeMap::new(),
                    Some("Root=1".into()),
                    Arc::from("me"),
                )),
            },
        ];
        records.extend(fifo_samples());
        records.extend(move_samples());
        records.extend(fair_samples());
        records
    }

    fn move_samples() -> Vec<Record> {
        let task = MoveTask {
            task_id: 4,
            source_queue_id: 1,
            destination_queue_id: None,
            rate_per_second: None,
            limit: None,
            cutoff_seq: 9,
            to_move: 8,
            moved: 0,
            held_back: 0,
            started_at_ms: 5,
            status: MoveStatus::Running,
            failure_reason: None,
            remote_destination: None,
        };
        vec![
            Record::SetMoveTask {
                now_ms: 5,
                task: Box::new(task.clone()),
            },
            Record::SetMoveTask {
                now_ms: 6,
                task: Box::new(MoveTask {
                    remote_destination: Some("123456789012:eu-west-1:jobs".into()),
                    ..task.clone()
                }),
            },
            Record::SetMoveTask {
                now_ms: 6,
                task: Box::new(MoveTask {
                    destination_queue_id: Some(2),
                    rate_per_second: Some(500),
                    limit: Some(3),
                    moved: 3,
                    held_back: 2,
                    status: MoveStatus::Failed,
                    failure_reason: Some("gone".into()),
                    ..task
                }),
            },
            Record::FailMessage {
                now_ms: 8,
                queue_id: 2,
                seq: 3,
                dead_letter_queue_id: 1,
                dead_letter_seq: 9,
                reason: "bad input".into(),
            },
            Record::RestoreFailureReason {
                now_ms: 9,
                queue_id: 1,
                seq: 9,
                reason: "bad input".into(),
            },
            Record::MoveMessages {
                now_ms: 7,
                task_id: 4,
                source_queue_id: 1,
                moves: vec![
                    MovedMessage {
                        seq: 1,
                        destination_queue_id: 2,
                        destination_seq: 10,
                        message_id: MessageId([7; 16]),
                    },
                    MovedMessage {
                        seq: 3,
                        destination_queue_id: 3,
                        destination_seq: 1,
                        message_id: MessageId([8; 16]),
                    },
                ],
            },
        ]
    }

    #[test]
    fn move_records_need_version_3() {
        for record in move_samples() {
            let mut bytes = Vec::new();
            encode(&record, &mut bytes);
            assert_eq!(decode(&bytes), Ok(record.clone()));
            bytes[0] = 2;
            assert!(decode(&bytes).is_err(), "{record:?} as version 2");
        }
    }

    fn fifo_samples() -> Vec<Record> {
        let config = QueueConfig {
            fifo: Some(FifoConfig {
                content_based_deduplication: true,
                deduplication_scope: DeduplicationScope::MessageGroup,
                throughput_limit: FifoThroughputLimit::PerMessageGroupId,
            }),
            ..QueueConfig::default()
        };
        let fifo = Some(Box::new(FifoMessage {
            group_id: Arc::from("g"),
            deduplication_id: Arc::from("d-1"),
        }));
        let payload = Arc::new(Payload::new(
            "b".into(),
            BTreeMap::new(),
            None,
            Arc::from(""),
        ));
        vec![
            Record::CreateQueue {
                now_ms: 1,
                queue_id: 5,
                name: "q.fifo".into(),
                config: Box::new(config.clone()),
                tags: BTreeMap::new(),
            },
            Record::SetConfig {
                now_ms: 2,
                queue_id: 5,
                config: Box::new(QueueConfig {
                    fifo: Some(FifoConfig::default()),
                    ..QueueConfig::default()
                }),
            },
            Record::Send {
                now_ms: 3,
                queue_id: 5,
                seq: 1,
                message_id: MessageId([1; 16]),
                visible_at_ms: 3,
                payload: payload.clone(),
                fifo: fifo.clone(),
            },
            Record::ReceiveAttempt {
                now_ms: 4,
                queue_id: 5,
                attempt_id: "try-1".into(),
                received_at_ms: 4,
                leases: vec![
                    AttemptLease {
                        seq: 1,
                        attempt: 1,
                        visible_at_ms: 30_004,
                    },
                    AttemptLease {
                        seq: 2,
                        attempt: 3,
                        visible_at_ms: 30_004,
                    },
                ],
            },
            Record::RestoreQueue {
                now_ms: 5,
                queue_id: 5,
                name: "q.fifo".into(),
                config: Box::new(config),
                tags: BTreeMap::new(),
                created_at_ms: 1,
                last_modified_at_ms: 2,
                last_purge_at_ms: None,
                next_seq: 3,
                counters: QueueCounters::default(),
            },
            Record::RestoreMessage {
                now_ms: 5,
                queue_id: 5,
                seq: 1,
                message: Box::new(Message {
                    id: MessageId([1; 16]),
                    payload: PayloadRef::Inline(payload),
                    sent_at_ms: 3,
                    visible_at_ms: 3,
                    leased_at_ms: 0,
                    history: None,
                    receive_count: 0,
                    state: MessageState::Ready,
                    dead_letter_source: None,
                    redrive_generation: 0,
                    fifo,
                }),
            },
            Record::RestoreDeduplication {
                now_ms: 5,
                queue_id: 5,
                scope: "g".into(),
                deduplication_id: "d-1".into(),
                message_id: MessageId([1; 16]),
                seq: 1,
                expires_at_ms: 300_003,
            },
            Record::RestoreGroupRelease {
                now_ms: 5,
                queue_id: 5,
                group_id: "g".into(),
            },
        ]
    }

    fn fair_samples() -> Vec<Record> {
        let payload = Arc::new(Payload::new(
            "b".into(),
            BTreeMap::new(),
            None,
            Arc::from(""),
        ));
        let group = Some(Box::new(FifoMessage {
            group_id: Arc::from("tenant-1"),
            deduplication_id: Arc::default(),
        }));
        let processing = ProcessingWindow {
            start_ms: 60_000,
            current_ms: 1_500,
            previous_ms: 9_000,
        };
        vec![
            Record::Send {
                now_ms: 3,
                queue_id: 2,
                seq: 1,
                message_id: MessageId([7; 16]),
                visible_at_ms: 3,
                payload: payload.clone(),
                fifo: group.clone(),
            },
            Record::RestoreMessage {
                now_ms: 4,
                queue_id: 2,
                seq: 1,
                message: Box::new(Message {
                    id: MessageId([7; 16]),
                    payload: PayloadRef::Inline(payload),
                    sent_at_ms: 3,
                    visible_at_ms: 3,
                    leased_at_ms: 0,
                    history: None,
                    receive_count: 0,
                    state: MessageState::Ready,
                    dead_letter_source: None,
                    redrive_generation: 0,
                    fifo: group,
                }),
            },
            Record::RestoreTenant {
                now_ms: 4,
                queue_id: 2,
                group_id: "tenant-1".into(),
                last_sent_at_ms: 3,
                processing,
                noisy: true,
            },
            Record::RestoreFairTotal {
                now_ms: 4,
                queue_id: 2,
                processing,
            },
        ]
    }

    #[test]
    fn fair_records_round_trip_and_need_version_6() {
        for record in fair_samples() {
            let mut bytes = Vec::new();
            encode(&record, &mut bytes);
            assert_eq!(decode(&bytes), Ok(record.clone()));
            bytes[0] = 5;
            assert!(decode(&bytes).is_err(), "{record:?} as version 5");
        }
    }

    #[test]
    fn deleted_queue_names_round_trip_and_need_version_7() {
        let record = Record::RestoreDeletedQueue {
            now_ms: 70_000,
            name: "123456789012:eu-west-1:gone".into(),
            deleted_at_ms: 20_000,
        };
        let mut bytes = Vec::new();
        encode(&record, &mut bytes);
        assert_eq!(decode(&bytes), Ok(record));
        bytes[0] = 6;
        assert!(
            decode(&bytes).is_err(),
            "a deleted queue's name as version 6"
        );
    }

    #[test]
    fn version_5_configs_decode_with_the_default_fair_settings() {
        let config = QueueConfig {
            fairness: FairConfig {
                enabled: false,
                in_flight_min: 3,
                processing_window_seconds: 10,
                comparable_factor: 3,
            },
            ..QueueConfig::default()
        };
        let with_backoff = Record::SetConfig {
            now_ms: 1,
            queue_id: 2,
            config: Box::new(QueueConfig {
                redelivery_backoff: RedeliveryBackoff::parse("exponential(1s,5m) jitter=20%")
                    .unwrap(),
                ..config.clone()
            }),
        };
        let mut bytes = Vec::new();
        encode(&with_backoff, &mut bytes);
        assert_eq!(decode(&bytes), Ok(with_backoff));
        // Another spelling of a schedule is refused, not decoded into a record that re-encodes
        // to other bytes (found by the `decode_record` fuzz target).
        let one_minute = Record::SetConfig {
            now_ms: 1,
            queue_id: 2,
            config: Box::new(QueueConfig {
                redelivery_backoff: RedeliveryBackoff::parse("1m").unwrap(),
                ..config.clone()
            }),
        };
        assert_eq!(
            RedeliveryBackoff::parse("60s").unwrap(),
            RedeliveryBackoff::parse("1m").unwrap()
        );
        let mut bytes = Vec::new();
        encode(&one_minute, &mut bytes);
        assert_eq!(decode(&bytes), Ok(one_minute));
        // The text is last: its length (4 bytes), then "1m".
        assert!(bytes.ends_with(&[2, 0, 0, 0, b'1', b'm']));
        bytes.truncate(bytes.len() - 6);
        bytes.extend_from_slice(&[3, 0, 0, 0, b'6', b'0', b's']);
        assert!(matches!(
            decode(&bytes),
            Err(DecodeError::Invalid {
                what: "redelivery backoff",
                ..
            })
        ));
        let record = Record::SetConfig {
            now_ms: 1,
            queue_id: 2,
            config: Box::new(config),
        };
        let mut bytes = Vec::new();
        encode(&record, &mut bytes);
        assert_eq!(decode(&bytes), Ok(record));
        // Version 6 added the fair settings and the redelivery backoff (none: a 0 flag), the
        // config's last 1 + 4 + 4 + 4 + 1 bytes.
        bytes.truncate(bytes.len() - 14);
        bytes[0] = 5;
        let expected = Record::SetConfig {
            now_ms: 1,
            queue_id: 2,
            config: Box::new(QueueConfig::default()),
        };
        assert_eq!(decode(&bytes), Ok(expected));
    }

    #[test]
    fn group_releases_need_version_5() {
        let record = Record::RestoreGroupRelease {
            now_ms: 5,
            queue_id: 5,
            group_id: "g".into(),
        };
        let mut bytes = Vec::new();
        encode(&record, &mut bytes);
        assert_eq!(decode(&bytes), Ok(record.clone()));
        bytes[0] = 4;
        assert!(decode(&bytes).is_err(), "{record:?} as version 4");
    }

    #[test]
    fn version_1_records_still_decode() {
        // Version 1 had no payload reference tag: the payload followed the id directly.
        let mut record = samples()
            .into_iter()
            .find(|r| matches!(r, Record::RestoreMessage { message, .. } if message.payload.inline().is_some()))
            .expect("an inline RestoreMessage sample");
        // Nor attempts (version 4): a received message decodes with a history of none, numbered
        // from its next attempt on.
        let Record::RestoreMessage { message, .. } = &mut record else {
            unreachable!()
        };
        message.history = Some(Box::new(AttemptHistory::empty(
            1,
            message.receive_count + 1,
        )));
        let mut bytes = Vec::new();
        encode(&record, &mut bytes);
        let tag_at = 1 + 1 + 8 + 8 + 8 + 16;
        assert_eq!(bytes[tag_at], 0, "inline payload tag");
        bytes.remove(tag_at);
        // Nor the body's MD5 (version 8), right after the body.
        let body_len = u32::from_le_bytes(bytes[tag_at..tag_at + 4].try_into().unwrap()) as usize;
        let md5_at = tag_at + 4 + body_len;
        bytes.drain(md5_at..md5_at + 16);
        // The attempts (first number, no dead-letter time, a count of 0), then a redrive
        // generation (version 3): the message's last 9 + 4 bytes.
        bytes.truncate(bytes.len() - 9 - 4);
        bytes[0] = 1;
        assert_eq!(decode(&bytes), Ok(record));
        // A Relocate did not exist in version 1, nor did the FIFO records.
        for record in samples().iter().filter(|r| {
            matches!(r, Record::Relocate { .. }) || encoded_tag(r) >= TAG_CREATE_FIFO_QUEUE
        }) {
            let mut bytes = Vec::new();
            encode(record, &mut bytes);
            bytes[0] = 1;
            assert!(decode(&bytes).is_err(), "{record:?} as version 1");
        }
    }

    /// Where the body's MD5 is in an encoded record: right after the body (its length, then its
    /// bytes), which must occur once.
    fn body_md5_at(bytes: &[u8], body: &str) -> usize {
        let mut encoded = (body.len() as u32).to_le_bytes().to_vec();
        encoded.extend_from_slice(body.as_bytes());
        let mut at = bytes
            .windows(encoded.len())
            .enumerate()
            .filter(|(_, window)| *window == encoded.as_slice())
            .map(|(at, _)| at);
        let body_at = at.next().expect("the body is in the record");
        assert!(at.next().is_none(), "the body occurs once");
        body_at + encoded.len()
    }

    /// Version 8 keeps the body's MD5 after the body; a payload of an older record decodes with
    /// it computed from the body, and the two agree.
    #[test]
    fn payloads_keep_their_body_md5_and_older_ones_compute_it() {
        let carrying: Vec<Record> = samples()
            .into_iter()
            .filter(|r| r.carried_payload().is_some())
            .collect();
        assert!(carrying.len() >= 2, "Send and Relocate samples");
        for record in carrying {
            let (_, _, payload) = record.carried_payload().unwrap();
            assert_eq!(*payload.body_md5(), crate::message::body_md5(&payload.body));
            let mut bytes = Vec::new();
            encode(&record, &mut bytes);
            let md5_at = body_md5_at(&bytes, &payload.body);
            assert_eq!(&bytes[md5_at..md5_at + 16], payload.body_md5());
            // A wrong digest is what the record says: it is not recomputed.
            let mut wrong = bytes.clone();
            wrong[md5_at] ^= 0xff;
            let decoded = decode(&wrong).unwrap();
            let (_, _, decoded) = decoded.carried_payload().unwrap();
            assert_ne!(decoded.body_md5(), payload.body_md5());
            // Version 7, without the digest: computed.
            bytes.drain(md5_at..md5_at + 16);
            bytes[0] = 7;
            assert_eq!(decode(&bytes), Ok(record.clone()));
        }
    }

    #[test]
    fn version_3_leases_decode_without_a_client() {
        let record = Record::Lease {
            now_ms: 5,
            queue_id: 2,
            seq: 7,
            attempt: 2,
            visible_at_ms: 30_005,
            client: None,
        };
        let mut bytes = Vec::new();
        encode(&record, &mut bytes);
        // Version 4 added the client flag, the last byte.
        assert_eq!(bytes.pop(), Some(0));
        bytes[0] = 3;
        assert_eq!(decode(&bytes), Ok(record));
    }

    fn encoded_tag(record: &Record) -> u8 {
        let mut bytes = Vec::new();
        encode(record, &mut bytes);
        bytes[1]
    }

    fn move_kind(task_id: u64) -> TransferKind {
        TransferKind::Move {
            task_id,
            message_id: MessageId([task_id as u8; 16]),
        }
    }

    /// The transfer records (version 9, their kinds version 10), with the sample messages in
    /// every group kind and of both kinds: they round-trip, no strict prefix decodes, and none
    /// decodes as version 8.
    #[test]
    fn transfer_records_round_trip_and_need_version_9() {
        let messages: Vec<Message> = samples()
            .into_iter()
            .chain(fair_samples())
            .filter_map(|record| match record {
                Record::RestoreMessage { message, .. } => Some(*message),
                _ => None,
            })
            .collect();
        assert!(messages.iter().any(|m| m.fifo.is_none()));
        assert!(messages.iter().any(|m| m
            .fifo
            .as_ref()
            .is_some_and(|f| f.deduplication_id.is_empty())));
        assert!(messages.iter().any(|m| m
            .fifo
            .as_ref()
            .is_some_and(|f| !f.deduplication_id.is_empty())));
        let mut records = vec![
            Record::TransferOut {
                now_ms: 5,
                queue_id: (3 << 48) | 2,
                seq: 9,
                transfer_id: 4,
                destination: "dlq".into(),
                kind: TransferKind::DeadLetter,
                reason: None,
            },
            Record::TransferOut {
                now_ms: 5,
                queue_id: 2,
                seq: 9,
                transfer_id: 5,
                destination: "123456789012:eu-west-1:dlq.fifo".into(),
                kind: TransferKind::DeadLetter,
                reason: Some("bad input".into()),
            },
            Record::TransferOut {
                now_ms: 5,
                queue_id: 2,
                seq: 10,
                transfer_id: 6,
                destination: "jobs".into(),
                kind: move_kind(3),
                reason: None,
            },
            Record::TransferIn {
                now_ms: 6,
                source_bucket: 3,
                transfer_id: 4,
                taken: None,
            },
            Record::TransferDone {
                now_ms: 7,
                transfer_id: 4,
                taken: false,
                return_seq: 10,
            },
            Record::TransferDone {
                now_ms: 7,
                transfer_id: 5,
                taken: true,
                return_seq: 0,
            },
            Record::RestoreTransfers {
                now_ms: 8,
                next_transfer_id: 6,
                inbox: vec![(0, 3, true), (7, 12, false)],
                refused: vec![("dlq".into(), 60_007)],
            },
            Record::RestoreTransfers {
                now_ms: 8,
                next_transfer_id: 1,
                inbox: Vec::new(),
                refused: Vec::new(),
            },
        ];
        let kinds = [TransferKind::DeadLetter, move_kind(7)];
        for (i, message) in messages.into_iter().enumerate() {
            records.push(Record::TransferIn {
                now_ms: 6,
                source_bucket: 1,
                transfer_id: i as u64 + 1,
                taken: Some(Box::new(TakenTransfer {
                    queue_id: 4,
                    seq: 11,
                    message: message.clone(),
                    kind: kinds[i % 2],
                    reason: (i % 2 == 0).then(|| "failed".to_string()),
                })),
            });
            records.push(Record::RestoreTransfer {
                now_ms: 8,
                transfer_id: i as u64 + 1,
                queue_id: 2,
                seq: 9,
                source_name: "source".into(),
                from_fifo: message.fifo.is_some(),
                destination: "dlq".into(),
                kind: kinds[(i + 1) % 2],
                reason: (i % 2 == 1).then(|| "failed".to_string()),
                message: Box::new(message),
            });
        }
        for record in records {
            let mut bytes = Vec::new();
            encode(&record, &mut bytes);
            assert_eq!(decode(&bytes), Ok(record.clone()));
            for len in 0..bytes.len() {
                assert!(decode(&bytes[..len]).is_err(), "{record:?} prefix {len}");
            }
            bytes[0] = 8;
            assert!(decode(&bytes).is_err(), "{record:?} as version 8");
        }
    }

    /// Version 9 transfers (no kind: dead letters, the only kind there was) and move tasks (no
    /// remote destination) still decode; a redrive's transfer or a task with a remote
    /// destination does not decode as version 9.
    #[test]
    fn version_9_transfers_and_tasks_decode_without_what_version_10_added() {
        let message = samples()
            .into_iter()
            .find_map(|record| match record {
                Record::RestoreMessage { message, .. } => Some(message),
                _ => None,
            })
            .unwrap();
        let kinds = |kind: TransferKind| {
            vec![
                Record::TransferOut {
                    now_ms: 5,
                    queue_id: 2,
                    seq: 9,
                    transfer_id: 4,
                    destination: "dlq".into(),
                    kind,
                    reason: Some("bad input".into()),
                },
                Record::TransferIn {
                    now_ms: 6,
                    source_bucket: 1,
                    transfer_id: 4,
                    taken: Some(Box::new(TakenTransfer {
                        queue_id: 4,
                        seq: 11,
                        message: *message.clone(),
                        kind,
                        reason: None,
                    })),
                },
                Record::RestoreTransfer {
                    now_ms: 8,
                    transfer_id: 4,
                    queue_id: 2,
                    seq: 9,
                    source_name: "source".into(),
                    from_fifo: false,
                    destination: "dlq".into(),
                    kind,
                    reason: None,
                    message: message.clone(),
                },
            ]
        };
        let tasks: Vec<Record> = move_samples()
            .into_iter()
            .filter(|r| matches!(r, Record::SetMoveTask { .. }))
            .collect();
        for record in kinds(TransferKind::DeadLetter).into_iter().chain(tasks) {
            let mut bytes = Vec::new();
            encode(&record, &mut bytes);
            let Record::SetMoveTask { task, .. } = &record else {
                // The kind, a dead letter's last byte.
                assert_eq!(bytes.pop(), Some(0));
                bytes[0] = 9;
                assert_eq!(decode(&bytes), Ok(record.clone()));
                continue;
            };
            if task.remote_destination.is_some() {
                bytes[0] = 9;
                assert!(decode(&bytes).is_err(), "{record:?} as version 9");
                continue;
            }
            // No remote destination: the flag, the last byte.
            assert_eq!(bytes.pop(), Some(0));
            bytes[0] = 9;
            assert_eq!(decode(&bytes), Ok(record.clone()));
        }
        for record in kinds(move_kind(3)) {
            let mut bytes = Vec::new();
            encode(&record, &mut bytes);
            bytes[0] = 9;
            assert!(decode(&bytes).is_err(), "{record:?} as version 9");
        }
    }

    #[test]
    fn every_record_round_trips() {
        for record in samples() {
            let mut bytes = Vec::new();
            encode(&record, &mut bytes);
            assert_eq!(decode(&bytes), Ok(record.clone()));
            // Every strict prefix is rejected, never mis-decoded.
            for len in 0..bytes.len() {
                assert!(decode(&bytes[..len]).is_err(), "{record:?} prefix {len}");
            }
        }
    }

    #[test]
    fn a_decoder_shares_repeated_strings_and_decodes_the_same() {
        let mut decoder = Decoder::default();
        let mut senders = Vec::new();
        let mut sources = Vec::new();
        for record in samples().iter().chain(&samples()) {
            let mut bytes = Vec::new();
            encode(record, &mut bytes);
            let decoded = decoder.decode(&bytes).unwrap();
            assert_eq!(&decoded, record);
            match decoded {
                Record::Send { payload, .. } => senders.push(payload.sender_id.clone()),
                Record::RestoreMessage { message, .. } => {
                    sources.extend(message.dead_letter_source.clone());
                    senders.extend(message.payload.inline().map(|p| p.sender_id.clone()));
                }
                _ => {}
            }
        }
        assert_eq!(senders.len(), 12);
        assert_eq!(sources.len(), 2);
        assert!(Arc::ptr_eq(&sources[0], &sources[1]));
        let mut bytes = Vec::new();
        let send = &samples()[2];
        encode(send, &mut bytes);
        let (Record::Send { payload: a, .. }, Record::Send { payload: b, .. }) = (
            decoder.decode(&bytes).unwrap(),
            decoder.decode(&bytes).unwrap(),
        ) else {
            panic!("not a send");
        };
        assert!(Arc::ptr_eq(&a.sender_id, &b.sender_id));
    }

    #[test]
    fn map_keys_must_be_sorted_and_unique() {
        let record = Record::SetTags {
            now_ms: 1,
            queue_id: 2,
            tags: [
                ("a".to_string(), "1".to_string()),
                ("b".to_string(), "2".to_string()),
            ]
            .into(),
        };
        let mut bytes = Vec::new();
        encode(&record, &mut bytes);
        assert_eq!(decode(&bytes), Ok(record));
        // Swap the two entries (each is 4+1 bytes of key and 4+1 of value): same map, other order.
        let entries = bytes.len() - 20;
        let (first, second) = bytes[entries..].split_at(10);
        let swapped = [&bytes[..entries], second, first].concat();
        assert!(matches!(
            decode(&swapped),
            Err(DecodeError::Invalid {
                what: "map key order",
                ..
            })
        ));
        // The same entry twice.
        let doubled = [
            &bytes[..entries],
            &bytes[entries..entries + 10],
            &bytes[entries..entries + 10],
        ]
        .concat();
        assert!(decode(&doubled).is_err());
    }

    /// A grouped message (a group id, no deduplication id) has one encoding, under the grouped
    /// tags; the same message under a FIFO tag with an empty deduplication id is refused, else it
    /// would decode and re-encode to other bytes (found by the `decode_record` fuzz target).
    #[test]
    fn a_fifo_tag_with_an_empty_deduplication_id_is_not_a_second_encoding() {
        for record in fair_samples() {
            let fifo_tag = match &record {
                Record::Send { .. } => TAG_SEND_FIFO,
                Record::RestoreMessage { .. } => TAG_RESTORE_FIFO_MESSAGE,
                _ => continue,
            };
            let mut bytes = Vec::new();
            encode(&record, &mut bytes);
            assert_eq!(decode(&bytes), Ok(record.clone()));
            // The grouped encodings end with the group id; a FIFO one adds the deduplication id.
            bytes[1] = fifo_tag;
            bytes.extend_from_slice(&0u32.to_le_bytes());
            assert!(
                matches!(
                    decode(&bytes),
                    Err(DecodeError::Invalid {
                        what: "FIFO deduplication id length",
                        ..
                    })
                ),
                "{record:?}: {:?}",
                decode(&bytes)
            );
            // Records of versions before grouped tags existed still decode (without the body's
            // MD5 of version 8).
            let body = match &record {
                Record::Send { payload, .. } => payload.body.clone(),
                Record::RestoreMessage { message, .. } => message
                    .payload
                    .inline()
                    .expect("inline sample")
                    .body
                    .clone(),
                _ => unreachable!("matched above"),
            };
            let md5_at = body_md5_at(&bytes, &body);
            bytes.drain(md5_at..md5_at + 16);
            bytes[0] = 5;
            assert!(decode(&bytes).is_ok(), "{record:?}: {:?}", decode(&bytes));
        }
    }

    proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            let _ = decode(&bytes);
        }

        #[test]
        fn corrupted_records_never_panic(index in 0usize..22, flip in any::<usize>(), bit in 0u8..8) {
            let record = &samples()[index];
            let mut bytes = Vec::new();
            encode(record, &mut bytes);
            let at = flip % bytes.len();
            bytes[at] ^= 1 << bit;
            let _ = decode(&bytes);
        }
    }
}
