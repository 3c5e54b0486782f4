//! Message payloads in the log: how the server appends records so that the engine keeps only
//! where a payload is, and how it reads payloads back for deliveries and compaction.
//!
//! A `Send` (or `Relocate`) record carries the message's body and attributes. Once the record is
//! appended, its log position is all the engine needs to keep ([`Engine::spill`]): memory then
//! holds message metadata only, and a backlog can be far larger than RAM. A receive answers
//! with payload references; the server reads them after releasing the engine lock, from the
//! log's append buffer or its storage (the page cache, for messages sent recently).
//!
//! A read from the page cache takes microseconds, one from the disk may take milliseconds, and
//! a request thread that waits for the disk holds up every other task queued on it. So the
//! payloads of an answer are read from memory first ([`LogStore::read_cached`]), and those that
//! would wait for the disk (a backlog larger than memory, read long after it was sent) are then
//! read together inside `tokio::task::block_in_place`, which moves the thread's other tasks to
//! another thread meanwhile ([`payloads`]).
//!
//! Most messages are received soon after they were sent, so each engine host also keeps the
//! payloads it appended most recently, up to [`RECENT_PAYLOADS_BYTES`] ([`RecentPayloads`]): a
//! receive of one of those is a reference count, not a read from the log (a system call, a
//! checksum and decoding the whole record).
//!
//! Invariant: a log segment holding a payload that a message still refers to is never removed
//! (see [`crate::checkpoint`]), so every reference the engine hands out can be read.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use leaseq_core::{codec, Delivery, Engine, Journal, Location, MessageId, Payload, PayloadRef};
use leaseq_sqs::error::SqsError;
use parking_lot::Mutex;

use crate::log_store::{Appended, LogError, LogStore};

/// Appends the journal's records to `store`, spilling the payloads they carry: the engine keeps
/// only where each is, and `recent` (if given) the payload itself for a while. Called with the
/// engine locked, so the log's order is the order in which the records were applied.
pub(crate) fn append(
    store: &dyn LogStore,
    recent: Option<&RecentPayloads>,
    engine: &mut Engine,
    journal: &Journal,
) -> Result<Appended, LogError> {
    let mut recent = recent.map(|recent| recent.state.lock());
    store.append(journal, &mut |record, location| {
        if let (Some(recent), Some((_, _, payload))) = (&mut recent, record.carried_payload()) {
            recent.insert(location, payload);
        }
        engine.spill(record, location)
    })
}

/// How many bytes of records the payloads an engine host keeps in memory came from, at most
/// (see [`RecentPayloads`]).
pub const RECENT_PAYLOADS_BYTES: usize = 32 << 20;

/// The payloads appended to one log most recently, by their location, while the records they
/// came from add up to at most a byte budget; the oldest go first.
///
/// A location names one record for the life of its log (segments are numbered afresh, never
/// reused, and a record is never written twice), and a host's log lives as long as the host, so
/// an entry is always the payload its location holds. Entries are not removed when their
/// message is deleted: they age out with the others, which keeps the cache out of every path
/// but the append and the receive.
pub(crate) struct RecentPayloads {
    state: Mutex<Recent>,
}

struct Recent {
    by_location: HashMap<Location, Arc<Payload>, BuildHasherDefault<LocationHasher>>,
    /// Locations in the order they were appended (the order they leave in).
    order: VecDeque<Location>,
    /// The record bytes of the entries in `order`.
    bytes: usize,
    budget_bytes: usize,
}

impl RecentPayloads {
    /// A cache of payloads from records of at most `budget_bytes` in all.
    pub(crate) fn new(budget_bytes: usize) -> RecentPayloads {
        RecentPayloads {
            state: Mutex::new(Recent {
                by_location: HashMap::default(),
                order: VecDeque::new(),
                bytes: 0,
                budget_bytes,
            }),
        }
    }

    /// The payload stored at `location`, if it is still here.
    #[cfg(test)]
    fn get(&self, location: Location) -> Option<Arc<Payload>> {
        self.state.lock().by_location.get(&location).cloned()
    }
}

impl Recent {
    fn insert(&mut self, location: Location, payload: &Arc<Payload>) {
        let bytes = location.len_bytes as usize;
        if bytes > self.budget_bytes {
            return;
        }
        self.by_location.insert(location, payload.clone());
        self.order.push_back(location);
        self.bytes += bytes;
        while self.bytes > self.budget_bytes {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            self.by_location.remove(&oldest);
            self.bytes -= oldest.len_bytes as usize;
        }
    }
}

/// Hashes a [`Location`] (three `u32`s, of which the segment and the offset already tell
/// locations apart) with a multiply and a rotate per field: the default hasher's SipHash costs
/// ~100 instructions a key, and nothing here needs protection from chosen keys (locations are
/// the log's, not a client's).
#[derive(Default)]
struct LocationHasher(u64);

impl Hasher for LocationHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.write_u32(u32::from(byte));
        }
    }

    fn write_u32(&mut self, value: u32) {
        // FxHash's step.
        self.0 = (self.0.rotate_left(5) ^ u64::from(value)).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

/// Reads the payload stored at `location`: the `Send` or `Relocate` record there.
pub(crate) fn read(store: &dyn LogStore, location: Location) -> Result<Arc<Payload>, ReadError> {
    decode_payload(&store.read(location)?, location)
}

/// [`read`] if the record is in memory; `Ok(None)` if the read would wait for the disk.
fn read_cached(
    store: &dyn LogStore,
    location: Location,
) -> Result<Option<Arc<Payload>>, ReadError> {
    store
        .read_cached(location)?
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
        PayloadRef::Stored(location) => read(store, *location),
    }
}

/// The payloads of `references`, in order, for an answer to a client (see the module docs):
/// those `recent` holds, in the log's memory or in the page cache at once, then those that need the disk, together, inside
/// `tokio::task::block_in_place` when called on a multi-threaded runtime's worker. A failed
/// read is the client's `InternalError`, naming the message (each reference comes with its
/// message's id).
pub(crate) fn payloads<'a>(
    store: &dyn LogStore,
    recent: &RecentPayloads,
    references: impl IntoIterator<Item = (&'a PayloadRef, MessageId)>,
) -> Result<Vec<Arc<Payload>>, SqsError> {
    let references = references.into_iter();
    let mut payloads = Vec::with_capacity(references.size_hint().0);
    let mut from_log = Vec::new();
    {
        let recent = recent.state.lock();
        for (index, (reference, message_id)) in references.enumerate() {
            payloads.push(match reference {
                PayloadRef::Inline(payload) => Some(payload.clone()),
                PayloadRef::Stored(location) => {
                    let held = recent.by_location.get(location).cloned();
                    if held.is_none() {
                        from_log.push((index, *location, message_id));
                    }
                    held
                }
            });
        }
    }
    let mut from_disk = Vec::new();
    for (index, location, message_id) in from_log {
        let cached =
            read_cached(store, location).map_err(|error| client_error(error, message_id))?;
        if cached.is_none() {
            from_disk.push((index, location, message_id));
        }
        payloads[index] = cached;
    }
    if !from_disk.is_empty() {
        off_the_executor(|| {
            for (index, location, message_id) in from_disk {
                let payload =
                    read(store, location).map_err(|error| client_error(error, message_id))?;
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
    recent: &RecentPayloads,
    deliveries: Vec<Delivery<PayloadRef>>,
) -> Result<Vec<Delivery>, SqsError> {
    let payloads = payloads(
        store,
        recent,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(body: &str) -> Arc<Payload> {
        Arc::new(Payload::new(
            body.to_owned(),
            Default::default(),
            None,
            Arc::from("sender"),
        ))
    }

    fn at(offset: u32, len_bytes: u32) -> Location {
        Location {
            segment: 3,
            offset,
            len_bytes,
        }
    }

    #[test]
    fn recent_payloads_keep_the_newest_within_the_budget() {
        let recent = RecentPayloads::new(250);
        let (a, b, c) = (payload("a"), payload("b"), payload("c"));
        recent.state.lock().insert(at(0, 100), &a);
        recent.state.lock().insert(at(100, 100), &b);
        assert!(Arc::ptr_eq(&recent.get(at(0, 100)).unwrap(), &a));
        // A third record would pass the budget: the oldest goes.
        recent.state.lock().insert(at(200, 100), &c);
        assert_eq!(recent.get(at(0, 100)), None);
        assert!(Arc::ptr_eq(&recent.get(at(100, 100)).unwrap(), &b));
        assert!(Arc::ptr_eq(&recent.get(at(200, 100)).unwrap(), &c));
        assert_eq!(recent.state.lock().bytes, 200);
        // Another segment's record at the same offset is another location.
        let other = Location {
            segment: 4,
            ..at(100, 100)
        };
        assert_eq!(recent.get(other), None);
    }

    #[test]
    fn a_record_larger_than_the_budget_is_not_kept_and_evicts_nothing() {
        let recent = RecentPayloads::new(250);
        let small = payload("small");
        recent.state.lock().insert(at(0, 100), &small);
        recent.state.lock().insert(at(100, 251), &payload("large"));
        assert_eq!(recent.get(at(100, 251)), None);
        assert!(recent.get(at(0, 100)).is_some());
    }
}
