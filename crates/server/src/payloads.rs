//! Message payloads in the log: how the server appends records so that the engine keeps only
//! where a payload is, and how it reads payloads back for deliveries and compaction.
//!
//! A `Send` (or `Relocate`) record carries the message's body and attributes. Once the record is
//! appended, its log position is all the engine needs to keep ([`Engine::spill`]): memory then
//! holds message metadata only (and, within a budget, the most recent payloads too), and a
//! backlog can be far larger than RAM. A receive answers
//! with payload references; the server reads them after releasing the engine lock, from the
//! log's append buffer or its storage (the page cache, for messages sent recently).
//!
//! A read from the page cache takes microseconds, one from the disk may take milliseconds, and
//! a request thread that waits for the disk holds up every other task queued on it. So the
//! payloads of an answer are read from memory first ([`LogStore::read_cached_many`]), and those that
//! would wait for the disk (a backlog larger than memory, read long after it was sent) are then
//! read together inside `tokio::task::block_in_place`, which moves the thread's other tasks to
//! another thread meanwhile ([`payloads`]).
//!
//! Invariant: a log segment holding a payload that a message still refers to is never removed
//! (see [`crate::checkpoint`]), so every reference the engine hands out can be read.

use std::sync::Arc;

use leaseq_core::{codec, Delivery, Engine, Journal, Location, MessageId, Payload, PayloadRef};
use leaseq_sqs::error::SqsError;

use crate::log_store::{Appended, LogError, LogStore};

/// Appends the journal's records to `store`, spilling the payloads they carry: the engine keeps
/// only where each is. Called with the engine locked, so the log's order is the order in which
/// the records were applied.
pub(crate) fn append(
    store: &dyn LogStore,
    engine: &mut Engine,
    journal: &Journal,
) -> Result<Appended, LogError> {
    store.append(journal, &mut |record, location| {
        engine.spill(record, location)
    })
}

/// Reads the payload stored at `location`: the `Send` or `Relocate` record there.
pub(crate) fn read(store: &dyn LogStore, location: Location) -> Result<Arc<Payload>, ReadError> {
    decode_payload(
        &mut codec::Decoder::default(),
        &store.read(location)?,
        location,
    )
}

/// The payload of the record `bytes`, read with `decoder`: the payloads of one answer share
/// one, so that those of one sender share its `SenderId` rather than each allocating a copy.
fn decode_payload(
    decoder: &mut codec::Decoder,
    bytes: &[u8],
    location: Location,
) -> Result<Arc<Payload>, ReadError> {
    let record = decoder
        .decode(bytes)
        .map_err(|error| ReadError::Decode(error.to_string()))?;
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
    Log(#[from] LogError),
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
pub(crate) fn payload(
    store: &dyn LogStore,
    payload: &PayloadRef,
) -> Result<Arc<Payload>, ReadError> {
    match payload {
        PayloadRef::Inline(payload) => Ok(payload.clone()),
        PayloadRef::Cached(cached) => Ok(cached.payload.clone()),
        PayloadRef::Stored(location) => read(store, *location),
    }
}

/// The payloads of `references`, in order, for an answer to a client (see the module docs):
/// those in memory or the page cache at once, then those that need the disk, together, inside
/// `tokio::task::block_in_place` when called on a multi-threaded runtime's worker. A failed
/// read is the client's `InternalError`, naming the message (each reference comes with its
/// message's id).
pub(crate) fn payloads<'a>(
    store: &dyn LogStore,
    references: impl ExactSizeIterator<Item = (&'a PayloadRef, MessageId)>,
) -> Result<Vec<Arc<Payload>>, SqsError> {
    // Each list sized at once: grown from empty, they took about 150 instructions a message.
    let count = references.len();
    let mut payloads: Vec<Option<Arc<Payload>>> = Vec::with_capacity(count);
    // The stored ones, where they are in the log, and for each where it goes in `payloads` and
    // whose it is.
    let mut locations: Vec<Location> = Vec::with_capacity(count);
    let mut stored: Vec<(usize, MessageId)> = Vec::with_capacity(count);
    for (index, (reference, message_id)) in references.enumerate() {
        payloads.push(match reference {
            PayloadRef::Inline(payload) => Some(payload.clone()),
            PayloadRef::Cached(cached) => Some(cached.payload.clone()),
            PayloadRef::Stored(location) => {
                locations.push(*location);
                stored.push((index, message_id));
                None
            }
        });
    }
    let mut from_disk = Vec::new();
    let mut failed = None;
    let mut decoder = codec::Decoder::default();
    store.read_cached_many(&locations, &mut |at, record| {
        let ((index, message_id), location) = (stored[at], locations[at]);
        let payload = record.map_err(ReadError::from).and_then(|record| {
            record
                .map(|bytes| decode_payload(&mut decoder, bytes, location))
                .transpose()
        });
        match payload {
            Ok(Some(payload)) => payloads[index] = Some(payload),
            Ok(None) => from_disk.push((index, location, message_id)),
            Err(error) => {
                failed.get_or_insert_with(|| client_error(error, message_id));
            }
        }
    });
    if let Some(error) = failed {
        return Err(error);
    }
    if !from_disk.is_empty() {
        off_the_executor(|| {
            for (index, location, message_id) in from_disk {
                let payload = store
                    .read(location)
                    .map_err(ReadError::from)
                    .and_then(|bytes| decode_payload(&mut decoder, &bytes, location))
                    .map_err(|error| client_error(error, message_id))?;
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

/// Runs `work`, which may wait for slow storage, where waiting holds up no other task: inside
/// `tokio::task::block_in_place` on a worker of a multi-threaded runtime (the worker's other
/// tasks move to another thread meanwhile), directly anywhere else.
fn off_the_executor<T>(work: impl FnOnce() -> T) -> T {
    let multi_threaded = tokio::runtime::Handle::try_current()
        .is_ok_and(|handle| handle.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if multi_threaded {
        tokio::task::block_in_place(work)
    } else {
        work()
    }
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
    store: &dyn LogStore,
    deliveries: Vec<Delivery<PayloadRef>>,
) -> Result<Vec<Delivery>, SqsError> {
    let payloads = payloads(
        store,
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
