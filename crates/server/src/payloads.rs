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
//! payloads of an answer are read from memory first ([`LogStore::read_cached_many`]), and those that
//! would wait for the disk (a backlog larger than memory, read long after it was sent) are then
//! read together inside `tokio::task::block_in_place`, which moves the thread's other tasks to
//! another thread meanwhile ([`payloads`]).
//!
//! Most messages are received soon after they were sent: a pipeline that keeps up has a short
//! backlog. The payloads appended last, up to [`RECENT_BYTES_MAX`] a node, stay in memory
//! ([`Recent`]) beside their locations, so that such a receive finds them without reading,
//! checking and decoding their records again. The engine holds locations only either way.
//!
//! Invariant: a log segment holding a payload that a message still refers to is never removed
//! (see [`crate::checkpoint`]), so every reference the engine hands out can be read.

use std::collections::VecDeque;
use std::sync::Arc;

use leaseq_core::{codec, Delivery, Engine, Journal, Location, MessageId, Payload, PayloadRef};
use leaseq_sqs::error::SqsError;
use parking_lot::Mutex;

use crate::log_store::{Appended, LogError, LogStore};

/// The bytes of the payloads a node keeps in memory after appending them, shared by its
/// buckets' hosts ([`Recent`]): 8 MiB, some 25 000 messages of 256 B, is seconds of backlog
/// at the rates one node sustains.
pub const RECENT_BYTES_MAX: usize = 8 << 20;

/// What a kept payload counts against the budget besides its record's bytes: the `Arc`'s
/// allocation, the body's and the entry's.
const RECENT_ENTRY_OVERHEAD_BYTES: usize = 128;

/// The payloads one host appended last, by the location of their records, oldest first, up to a
/// budget of bytes. A location names one record for the life of its store (segments and
/// offsets only grow; a poisoned store is reopened with a new host), so a payload found here is
/// the one the log holds there.
pub(crate) struct Recent {
    bytes_max: usize,
    kept: Mutex<Kept>,
}

#[derive(Default)]
struct Kept {
    /// Sorted by location: appends place records in order.
    entries: VecDeque<(Location, Arc<Payload>)>,
    bytes: usize,
    /// How many entries have left from the front, ever: an entry's number is this plus its
    /// index.
    gone: u64,
    /// The number of the entry after the last one found: receives take messages in the order
    /// they were sent, so it is most often the next one asked for.
    next: u64,
}

impl Recent {
    /// Keeps at most `bytes_max` bytes of payloads (none with 0).
    pub(crate) fn new(bytes_max: usize) -> Recent {
        Recent {
            bytes_max,
            kept: Mutex::new(Kept::default()),
        }
    }

    /// Keeps `payload`, just appended at `location`, evicting the oldest kept beyond the budget.
    fn keep(&self, location: Location, payload: &Arc<Payload>) {
        let cost = location.len_bytes as usize + RECENT_ENTRY_OVERHEAD_BYTES;
        if cost > self.bytes_max {
            return;
        }
        let mut kept = self.kept.lock();
        if kept
            .entries
            .back()
            .is_some_and(|(last, _)| *last >= location)
        {
            // Not after the last (no store does this): start over rather than unsort.
            kept.gone += kept.entries.len() as u64;
            kept.entries.clear();
            kept.bytes = 0;
        }
        kept.entries.push_back((location, payload.clone()));
        kept.bytes += cost;
        while kept.bytes > self.bytes_max {
            let Some((oldest, _)) = kept.entries.pop_front() else {
                break;
            };
            kept.gone += 1;
            kept.bytes -= oldest.len_bytes as usize + RECENT_ENTRY_OVERHEAD_BYTES;
        }
    }

    /// The payload appended at `location`, if it is still kept: the entry after the last one
    /// found if it is that one, else by binary search.
    fn find(kept: &mut Kept, location: Location) -> Option<Arc<Payload>> {
        // Past the end (or gone, wrapping far past it) when the guess is not kept.
        let guess = kept.next.wrapping_sub(kept.gone) as usize;
        let at = match kept.entries.get(guess) {
            Some((there, _)) if *there == location => guess,
            _ => kept
                .entries
                .binary_search_by(|(kept, _)| kept.cmp(&location))
                .ok()?,
        };
        kept.next = kept.gone + at as u64 + 1;
        Some(kept.entries[at].1.clone())
    }

    /// How many payloads are kept, and their bytes as counted (for tests).
    #[cfg(test)]
    fn held(&self) -> (usize, usize) {
        let kept = self.kept.lock();
        (kept.entries.len(), kept.bytes)
    }
}

/// Appends the journal's records to `store`, spilling the payloads they carry: the engine keeps
/// only where each is, and `recent` (if given) the payload itself for a while. Called with the
/// engine locked, so the log's order is the order in which the records were applied.
pub(crate) fn append(
    store: &dyn LogStore,
    recent: Option<&Recent>,
    engine: &mut Engine,
    journal: &Journal,
) -> Result<Appended, LogError> {
    store.append(journal, &mut |record, location| {
        engine.spill(record, location);
        if let (Some(recent), Some((_, _, payload))) = (recent, record.carried_payload()) {
            recent.keep(location, payload);
        }
    })
}

/// Reads the payload stored at `location`: the `Send` or `Relocate` record there.
pub(crate) fn read(store: &dyn LogStore, location: Location) -> Result<Arc<Payload>, ReadError> {
    decode_payload(&store.read(location)?, location)
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
    recent: &Recent,
    payload: &PayloadRef,
) -> Result<Arc<Payload>, ReadError> {
    match payload {
        PayloadRef::Inline(payload) => Ok(payload.clone()),
        PayloadRef::Stored(location) => match Recent::find(&mut recent.kept.lock(), *location) {
            Some(payload) => Ok(payload),
            None => read(store, *location),
        },
    }
}

/// The payloads of `references`, in order, for an answer to a client (see the module docs):
/// those in memory or the page cache at once, then those that need the disk, together, inside
/// `tokio::task::block_in_place` when called on a multi-threaded runtime's worker. A failed
/// read is the client's `InternalError`, naming the message (each reference comes with its
/// message's id).
pub(crate) fn payloads<'a>(
    store: &dyn LogStore,
    recent: &Recent,
    references: impl IntoIterator<Item = (&'a PayloadRef, MessageId)>,
) -> Result<Vec<Arc<Payload>>, SqsError> {
    let mut payloads: Vec<Option<Arc<Payload>>> = Vec::new();
    // The stored ones not kept in memory, where they are in the log, and for each where it goes
    // in `payloads` and whose it is.
    let mut locations: Vec<Location> = Vec::new();
    let mut stored: Vec<(usize, MessageId)> = Vec::new();
    {
        let mut kept = recent.kept.lock();
        for (index, (reference, message_id)) in references.into_iter().enumerate() {
            payloads.push(match reference {
                PayloadRef::Inline(payload) => Some(payload.clone()),
                PayloadRef::Stored(location) => {
                    let found = Recent::find(&mut kept, *location);
                    if found.is_none() {
                        locations.push(*location);
                        stored.push((index, message_id));
                    }
                    found
                }
            });
        }
    }
    if locations.is_empty() {
        return Ok(payloads.into_iter().flatten().collect());
    }
    let mut from_disk = Vec::new();
    let mut failed = None;
    store.read_cached_many(&locations, &mut |at, record| {
        let ((index, message_id), location) = (stored[at], locations[at]);
        let payload = record.map_err(ReadError::from).and_then(|record| {
            record
                .map(|bytes| decode_payload(bytes, location))
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
    recent: &Recent,
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
            body.into(),
            Default::default(),
            None,
            "sender".into(),
        ))
    }

    fn at(offset: u32) -> Location {
        Location {
            segment: 1,
            offset,
            len_bytes: 72,
        }
    }

    /// What each kept payload counts: its record and the overhead.
    const COST: usize = 72 + RECENT_ENTRY_OVERHEAD_BYTES;

    #[test]
    fn finds_what_it_keeps_and_forgets_the_oldest_beyond_its_budget() {
        let recent = Recent::new(3 * COST);
        let kept: Vec<_> = (0..5).map(|n| payload(&format!("body {n}"))).collect();
        for (offset, payload) in (0u32..).map(|n| n * 100).zip(&kept) {
            recent.keep(at(offset), payload);
        }
        assert_eq!(recent.held(), (3, 3 * COST));
        let find = |offset| Recent::find(&mut recent.kept.lock(), at(offset));
        assert!(find(0).is_none() && find(100).is_none(), "the oldest went");
        for (offset, payload) in [(200, &kept[2]), (300, &kept[3]), (400, &kept[4])] {
            assert!(Arc::ptr_eq(&find(offset).unwrap(), payload));
        }
        assert!(find(250).is_none(), "no record there");
        let other_segment = Location {
            segment: 2,
            ..at(200)
        };
        assert!(Recent::find(&mut recent.kept.lock(), other_segment).is_none());
    }

    #[test]
    fn a_location_not_after_the_last_starts_over() {
        let recent = Recent::new(10 * COST);
        recent.keep(at(100), &payload("a"));
        recent.keep(at(200), &payload("b"));
        let again = payload("c");
        recent.keep(at(200), &again);
        assert_eq!(recent.held(), (1, COST));
        assert!(Arc::ptr_eq(
            &Recent::find(&mut recent.kept.lock(), at(200)).unwrap(),
            &again
        ));
    }

    proptest::proptest! {
        /// Whatever the order of keeps and finds, a find answers what a plain map of the last
        /// payloads kept within the budget answers (the guess only spares the search).
        #[test]
        fn finds_as_a_map_of_the_last_kept_would(
            steps in proptest::collection::vec((proptest::bool::ANY, 0u32..40), 1..200),
            budget_entries in 1usize..12,
        ) {
            let recent = Recent::new(budget_entries * COST);
            let mut model: VecDeque<(Location, Arc<Payload>)> = VecDeque::new();
            let mut next_offset = 0;
            let mut in_order = 0;
            for (keep, pick) in steps {
                if keep {
                    // Mostly forward, sometimes back to the start (a reset).
                    next_offset = if pick == 0 { 0 } else { next_offset + pick };
                    let payload = payload(&format!("at {next_offset}"));
                    recent.keep(at(next_offset), &payload);
                    if model.back().is_some_and(|(last, _)| *last >= at(next_offset)) {
                        model.clear();
                    }
                    model.push_back((at(next_offset), payload));
                    while model.len() > budget_entries {
                        model.pop_front();
                    }
                } else {
                    // The kept entries in order (as receives ask), any kept one, or anywhere.
                    let offset = match (pick % 3, model.len()) {
                        (0, len) if len > 0 => {
                            in_order += 1;
                            model[in_order % len].0.offset
                        }
                        (1, len) if len > 0 => model[pick as usize % len].0.offset,
                        _ => next_offset.saturating_sub(pick),
                    };
                    let found = Recent::find(&mut recent.kept.lock(), at(offset));
                    let expected = model.iter().find(|(l, _)| *l == at(offset)).map(|(_, p)| p);
                    proptest::prop_assert_eq!(found.is_some(), expected.is_some());
                    if let (Some(found), Some(expected)) = (found, expected) {
                        proptest::prop_assert!(Arc::ptr_eq(&found, expected));
                    }
                }
            }
        }
    }

    #[test]
    fn keeps_nothing_larger_than_its_budget() {
        let recent = Recent::new(COST - 1);
        recent.keep(at(0), &payload("a"));
        assert_eq!(recent.held(), (0, 0));
        let none = Recent::new(0);
        none.keep(at(0), &payload("a"));
        assert_eq!(none.held(), (0, 0));
    }
}
