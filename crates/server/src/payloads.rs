//! Message payloads in the log: how the server appends records so that the engine keeps only
//! where a payload is, and how it reads payloads back for deliveries and compaction.
//!
//! A `Send` (or `Relocate`) record carries the message's body and attributes. Once the record is
//! appended, its log position is all the engine needs to keep ([`Engine::spill`]): memory then
//! holds message metadata only, and a backlog can be far larger than RAM. A receive answers
//! with payload references; the server reads them after releasing the engine lock, from the
//! log's append buffer or the segment file (the page cache, for messages sent recently).
//!
//! A read from the page cache takes microseconds, one from the disk may take milliseconds, and
//! a request thread that waits for the disk holds up every other task queued on it. So the
//! payloads of an answer are read from memory first ([`Wal::read_cached`]), and those that
//! would wait for the disk (a backlog larger than memory, read long after it was sent) are then
//! read together inside `tokio::task::block_in_place`, which moves the thread's other tasks to
//! another thread meanwhile ([`payloads`]).
//!
//! Invariant: a log segment holding a payload that a message still refers to is never removed
//! (see [`crate::checkpoint`]), so every reference the engine hands out can be read.

use std::sync::Arc;

use leaseq_core::{codec, Delivery, Engine, Journal, Location, MessageId, Payload, PayloadRef};
use leaseq_sqs::error::SqsError;
use leaseq_wal::{off_the_executor, Lsn, Position, Wal, WalError};

use crate::checkpoint::Checkpoints;

/// The engine's location for a log position, if it fits the engine's compact form (it always
/// does short of four billion segments; a payload that does not fit simply stays in memory).
pub(crate) fn location(position: Position) -> Option<Location> {
    Some(Location {
        segment: u32::try_from(position.segment).ok()?,
        offset: u32::try_from(position.offset).ok()?,
        len_bytes: position.len_bytes,
    })
}

/// The log position of an engine location.
pub(crate) fn position(location: Location) -> Position {
    Position {
        segment: u64::from(location.segment),
        offset: u64::from(location.offset),
        len_bytes: location.len_bytes,
    }
}

/// Room for a record's encoding before it needs to grow: a message of a few hundred bytes with
/// its metadata and attributes.
const ENCODED_RECORD_CAPACITY_BYTES: usize = 1024;

/// Appends the journal's records, spilling the payloads they carry to the log; returns the log's
/// tail LSN after them. Called with the engine locked, so the log's order is the order in which
/// the records were applied.
pub(crate) fn append(
    log: &Wal,
    engine: &mut Engine,
    journal: &Journal,
    checkpoints: &Checkpoints,
) -> Result<Lsn, WalError> {
    // One buffer for the journal's records, sized for the usual one before the first: grown
    // from empty, it would be reallocated half a dozen times for a small message. (Reserved in
    // the loop, so an empty journal, as of a read, allocates nothing.)
    let mut bytes = Vec::new();
    for record in journal {
        bytes.clear();
        bytes.reserve(ENCODED_RECORD_CAPACITY_BYTES);
        codec::encode(record, &mut bytes);
        let appended = log.append(&bytes)?;
        checkpoints.logged(bytes.len() as u64);
        if record.carried_payload().is_some() {
            if let Some(location) = location(appended.position) {
                engine.spill(record, location);
            }
        }
    }
    Ok(log.next_lsn() - 1)
}

/// Reads the payload stored at `location`: the `Send` or `Relocate` record there.
pub(crate) fn read(log: &Wal, location: Location) -> Result<Arc<Payload>, ReadError> {
    decode_payload(&log.read(position(location))?, location)
}

/// [`read`] if the record is in memory; `Ok(None)` if the read would wait for the disk.
fn read_cached(log: &Wal, location: Location) -> Result<Option<Arc<Payload>>, ReadError> {
    log.read_cached(position(location))?
        .map(|bytes| decode_payload(&bytes, location))
        .transpose()
}

fn decode_payload(bytes: &[u8], location: Location) -> Result<Arc<Payload>, ReadError> {
    let record = codec::decode(bytes).map_err(|error| ReadError::Decode(error.to_string()))?;
    match record.carried_payload() {
        Some((_, _, payload)) => Ok(payload.clone()),
        None => Err(ReadError::Decode(format!(
            "the record at {location:?} carries no payload"
        ))),
    }
}

/// Why a stored payload could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The log could not read the record.
    #[error(transparent)]
    Log(#[from] WalError),
    /// The record did not decode into one that carries a payload.
    #[error("{0}")]
    Decode(String),
}

impl ReadError {
    /// Whether the log was poisoned and the record was not yet in its files.
    pub fn is_poisoned(&self) -> bool {
        matches!(self, ReadError::Log(error) if error.is_poisoned())
    }
}

/// The payload a reference refers to, read from the log if it is not in memory. May wait for
/// the disk on the calling thread; an answer to a request uses [`payloads`].
pub(crate) fn payload(log: Option<&Wal>, payload: &PayloadRef) -> Result<Arc<Payload>, ReadError> {
    match (payload, log) {
        (PayloadRef::Inline(payload), _) => Ok(payload.clone()),
        (PayloadRef::Stored(location), Some(log)) => read(log, *location),
        (PayloadRef::Stored(location), None) => Err(no_log(*location)),
    }
}

fn no_log(location: Location) -> ReadError {
    ReadError::Decode(format!("a payload at {location:?} but no log"))
}

/// The payloads of `references`, in order, for an answer to a client (see the module docs):
/// those in memory or the page cache at once, then those that need the disk, together, inside
/// `tokio::task::block_in_place` when called on a multi-threaded runtime's worker. A failed
/// read is the client's `InternalError`, naming the message (each reference comes with its
/// message's id).
pub(crate) fn payloads<'a>(
    log: Option<&Wal>,
    references: impl IntoIterator<Item = (&'a PayloadRef, MessageId)>,
) -> Result<Vec<Arc<Payload>>, SqsError> {
    let mut payloads = Vec::new();
    let mut from_disk = Vec::new();
    for (index, (reference, message_id)) in references.into_iter().enumerate() {
        let payload = match (reference, log) {
            (PayloadRef::Inline(payload), _) => Some(payload.clone()),
            (PayloadRef::Stored(location), Some(log)) => {
                let cached =
                    read_cached(log, *location).map_err(|error| client_error(error, message_id))?;
                if cached.is_none() {
                    from_disk.push((index, *location, message_id));
                }
                cached
            }
            (PayloadRef::Stored(location), None) => {
                return Err(client_error(no_log(*location), message_id))
            }
        };
        payloads.push(payload);
    }
    if let Some(log) = log.filter(|_| !from_disk.is_empty()) {
        off_the_executor(|| {
            for (index, location, message_id) in from_disk {
                let payload =
                    read(log, location).map_err(|error| client_error(error, message_id))?;
                payloads[index] = Some(payload);
            }
            Ok::<_, SqsError>(())
        })?;
    }
    Ok(payloads
        .into_iter()
        .map(|payload| payload.expect("read from memory or from the disk"))
        .collect())
}

fn client_error(error: ReadError, message_id: MessageId) -> SqsError {
    tracing::error!(%error, %message_id, "could not read a message body from the log");
    SqsError::internal(format!(
        "The server could not read the body of message {message_id} from its log: {error}"
    ))
}

/// The deliveries with their payloads read from the log where they are not in memory (see
/// [`payloads`]).
pub(crate) fn resolve(
    log: Option<&Wal>,
    deliveries: Vec<Delivery<PayloadRef>>,
) -> Result<Vec<Delivery>, SqsError> {
    let payloads = payloads(
        log,
        deliveries
            .iter()
            .map(|delivery| (&delivery.payload, delivery.message_id)),
    )?;
    Ok(deliveries
        .into_iter()
        .zip(payloads)
        .map(|(delivery, payload)| delivery.with_payload(payload))
        .collect())
}
