//! The log seam: where the engine's records go to become durable, and where message bodies are
//! read back from.
//!
//! The engine changes only by applying [`Record`]s; a node that appends every record to a
//! [`LogStore`] before it answers, and on restart applies the newest snapshot and the records
//! after it, loses nothing it acknowledged. Everything above this trait (the engine host, payload
//! reads, checkpoints, recovery) is written once against it; below it are [`FileLog`] (today's
//! embedded write-ahead log, `leaseq-wal`) and [`MemoryLog`] (`--in-memory`: nothing is kept).
//!
//! The trait is shaped for a store that lives elsewhere as well (the PostgreSQL log of the
//! issue "PostgreSQL as the log"): an append is cheap and only buffers; durability is a separate
//! wait for an LSN, so one flush (a round trip) covers every waiting request; a read of a body
//! may miss a cache and go to the store; and a failed flush whose outcome is unknown poisons the
//! store, which then answers nothing until it is reopened ("a poisoned log serves nothing").
//!
//! Invariant: `append` is called with the engine lock held, so the log's order is the order in
//! which records were applied; a reply waits for the tail LSN its operation saw.

mod file;
mod memory;

use std::future::Future;
use std::io::Read;
use std::pin::Pin;

use leaseq_core::{Journal, Location, Record};

pub use file::{FileLog, FileLogOpening};
pub use memory::MemoryLog;

/// A log sequence number: the n-th record ever appended has LSN n; 0 means none.
pub type Lsn = u64;

/// What [`LogStore::read_cached_many`] answers for a record: its bytes, `None` if reading them
/// would wait for slow storage, or why they cannot be read.
pub type RecordRead<'a> = Result<Option<&'a [u8]>, LogError>;

/// A future of a [`LogStore`]'s.
pub type LogFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, LogError>> + Send + 'a>>;

/// What an append did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Appended {
    /// The LSN of the last record appended (the tail a reply must wait for). An empty journal
    /// reports the tail as it was.
    pub tail_lsn: Lsn,
    /// The bytes the records took in the log, for the checkpoint policy.
    pub bytes: u64,
}

/// A unit of the log that is removed as a whole (a file of the file log, a partition of a
/// remote one): a snapshot makes the records in it unnecessary, and a body still referred to
/// keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// The segment's number (the `segment` of the [`Location`]s in it).
    pub segment: u64,
    /// One past the LSN of its last record.
    pub end_lsn: Lsn,
    /// Its size.
    pub size_bytes: u64,
    /// Whether records are still appended to it (never removed).
    pub active: bool,
}

/// A snapshot being written: records framed into it one by one, then made durable at once.
pub trait SnapshotSink {
    /// Appends bytes that `fill` writes into the buffer.
    fn append_with(&mut self, fill: &mut dyn FnMut(&mut Vec<u8>)) -> Result<(), LogError>;

    /// Makes the snapshot durable and the newest; returns its size.
    fn finish(self: Box<Self>) -> Result<u64, LogError>;
}

/// The newest snapshot a store holds, for recovery.
pub struct SnapshotSource {
    /// The LSN of the last record the snapshot contains.
    pub lsn: Lsn,
    /// Its size.
    pub len_bytes: u64,
    /// Its contents, as a stream.
    pub reader: Box<dyn Read + Send>,
}

/// One record found by recovery.
pub struct Replayed<'a> {
    /// The record's bytes (as [`leaseq_core::codec`] encoded them).
    pub bytes: &'a [u8],
    /// Where the record's bytes can be read again, if the store can read them by location.
    pub location: Option<Location>,
}

/// A store as recovery finds it: first its newest snapshot, then the records after it. Opening
/// a store and replaying it are one step for stores that scan as they open (the file log).
pub trait Recoverable {
    /// The store this becomes.
    type Store: LogStore;

    /// The newest readable snapshot, if any.
    fn latest_snapshot(&mut self) -> Result<Option<SnapshotSource>, LogError>;

    /// Replays every record after `snapshot_lsn` through `apply`, in order, and returns the
    /// store, ready for appends. A failure of `apply` stops the replay and fails the open.
    fn replay(
        self,
        snapshot_lsn: Lsn,
        apply: &mut dyn FnMut(Replayed<'_>) -> Result<(), String>,
    ) -> Result<Self::Store, LogError>;
}

/// The durable log the engine's records go to.
pub trait LogStore: Send + Sync + 'static {
    /// Appends the journal's records in order. For every record that carries a message body
    /// (`Record::carried_payload`), `placed` learns the location the body can be read from, so
    /// the engine can keep just that (`Engine::spill`). Cheap: buffers, does not wait for
    /// durability.
    fn append(
        &self,
        journal: &Journal,
        placed: &mut dyn FnMut(&Record, Location),
    ) -> Result<Appended, LogError>;

    /// The LSN of the last record appended.
    fn tail_lsn(&self) -> Lsn;

    /// Whether the store takes new work now; the engine host asks before every operation, so
    /// a store that is poisoned, or reconnecting after a flush of unknown outcome, turns
    /// requests away before they change the engine (and answers readiness probes). Appends made
    /// after a positive answer must still be accepted while the store is merely unavailable.
    fn writable(&self) -> Result<(), LogError> {
        Ok(())
    }

    /// Completes once every record up to `lsn` is durable (as the store's durability setting
    /// defines it), or fails if the store was poisoned first.
    fn wait_durable(&self, lsn: Lsn) -> LogFuture<'_, ()>;

    /// Makes everything appended durable, blocking the calling thread.
    fn sync(&self) -> Result<(), LogError>;

    /// The record at `location`; `Ok(None)` if reading it would wait for slow storage (a disk,
    /// a round trip), which [`LogStore::read`] then does where waiting holds up no other task.
    fn read_cached(&self, location: Location) -> Result<Option<Vec<u8>>, LogError>;

    /// [`LogStore::read_cached`] of several records: `each(i, answer)` for the record at
    /// `locations[i]`, in no particular order. A store that can read neighbouring records
    /// together (the file log: one system call for the bodies of a receive that were appended
    /// one after another) does.
    fn read_cached_many(
        &self,
        locations: &[Location],
        each: &mut dyn FnMut(usize, RecordRead<'_>),
    ) {
        for (index, &location) in locations.iter().enumerate() {
            match self.read_cached(location) {
                Ok(record) => each(index, Ok(record.as_deref())),
                Err(error) => each(index, Err(error)),
            }
        }
    }

    /// The record at `location`, waiting for storage if need be (blocking).
    fn read(&self, location: Location) -> Result<Vec<u8>, LogError>;

    /// The bytes a record of `len_bytes` at a location takes in its segment (with framing).
    fn stored_bytes(&self, location: Location) -> u64;

    /// Starts a snapshot of the state as of `lsn`.
    fn snapshot_writer(&self, lsn: Lsn) -> Result<Box<dyn SnapshotSink + '_>, LogError>;

    /// The segments, oldest first.
    fn segments(&self) -> Vec<Segment>;

    /// Removes every segment whose records all have LSNs below `lsn` unless `keep(segment)`;
    /// returns the numbers removed.
    fn remove_segments(&self, lsn: Lsn, keep: &dyn Fn(u64) -> bool) -> Result<Vec<u64>, LogError>;

    /// Whether the store keeps records at all (a [`MemoryLog`] does not: nothing to checkpoint,
    /// bodies stay in the engine).
    fn keeps_records(&self) -> bool;

    /// The store's own measurements, for the metrics page.
    fn stats(&self) -> Option<crate::metrics::LogStats>;

    /// Keeps, durably, that the queue named `name` (the engine's name), whose name hashes into
    /// this log's bucket, lives in bucket `bucket` (`crate::placements`), and only while this
    /// log's owner owns the bucket (a fenced-out owner gets an error). Placements are never
    /// taken back, so repeating one is harmless. A store of one bucket places nothing.
    fn place<'a>(&'a self, name: &'a str, bucket: u32) -> LogFuture<'a, ()> {
        let _ = (name, bucket);
        Box::pin(async {
            Err(LogError::other(
                "this log has one bucket and places no queue",
            ))
        })
    }

    /// The placements [`LogStore::place`] kept of this log's bucket's names, and of the queues
    /// placed in it, as of when the store was opened (the service remembers later ones).
    fn placements(&self) -> Vec<(std::sync::Arc<str>, u32)> {
        Vec::new()
    }
}

/// Why a log store failed.
#[derive(Clone, Debug, thiserror::Error)]
#[error("{message}")]
pub struct LogError {
    /// What happened, for operators.
    pub message: String,
    /// The store is poisoned: a write or flush failed, so what it holds may differ from what
    /// was appended. It answers nothing until reopened.
    pub poisoned: bool,
    /// The store ran out of space (a failed snapshot write need not poison it).
    pub storage_full: bool,
}

impl LogError {
    /// A failure that neither poisons the store nor comes from a full disk (a read of a bad
    /// location, damage found on open).
    pub fn other(message: impl Into<String>) -> LogError {
        LogError {
            message: message.into(),
            poisoned: false,
            storage_full: false,
        }
    }

    /// Whether the store is poisoned.
    pub fn is_poisoned(&self) -> bool {
        self.poisoned
    }

    /// Whether the store ran out of space.
    pub fn is_storage_full(&self) -> bool {
        self.storage_full
    }
}
