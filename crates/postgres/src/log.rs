//! [`PgLog`]: the engine's records group-committed to PostgreSQL as fenced frames.
//!
//! Appends (under the engine lock) only encode records into the pending frame and wake the
//! flusher (`flusher.rs`). It takes everything pending and writes it in one INSERT, one round
//! trip, fenced by the bucket's epoch in the same statement: one flush in flight, or with
//! `--postgres-flushes N` several, on sessions of their own. It publishes the durable LSN in
//! LSN order (a flush counts once it and every earlier one committed), and every waiter it
//! covers returns.
//!
//! A flush whose outcome is unknown (a cut connection, a timeout, PostgreSQL restarting) makes
//! the store *unavailable*: every waiter not yet durable gets an error at once, and the service
//! refuses new requests ([`LogStore::writable`]) instead of letting them queue. The flusher then
//! resolves the outcome before it flushes anything later: it reconnects (with backoff, for as
//! long as PostgreSQL stays away), makes sure the sessions that ran the unresolved flushes are
//! gone (so none can still commit after the check), and writes their frames again with `ON
//! CONFLICT DO NOTHING`, in one fenced statement that also counts which of them were already
//! there. Either way every frame the engine applied is then in PostgreSQL exactly once, in order,
//! and the store is available again: the node recovers by itself, without a restart and without
//! a reload, because its engine holds exactly what the log now holds.
//!
//! Poisoning is for what cannot be resolved: a flush fenced out (zero rows: another node took
//! the bucket over) or frames found under the same keys that are not ours. Every later append
//! and wait then fails with `poisoned: true`, and the node serves nothing until it is reopened.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use leaseq_core::histogram::Histogram;
use leaseq_core::{codec, Journal, Location, Record};
use leaseq_server::log_store::{
    Appended, LogError, LogFuture, LogStore, Lsn, Segment, SnapshotSink,
};
use leaseq_server::metrics::LogStats;
use parking_lot::Mutex;
use tokio::sync::{oneshot, Notify};
use tokio_postgres::Client;

use crate::flusher::{FlushConnection, Flusher};
use crate::frames::{Frame, FrameCache, Tail, LENGTH_PREFIX_BYTES};
use crate::opening::Readers;
use crate::runtime::StoreRuntime;
use crate::schema::{self, Schema};
use crate::snapshot::SnapshotWriter;

/// Flushes in flight at once by default: one. Measured on this project's machine against a
/// local PostgreSQL, several in flight did not pay (docs/design/postgres.md, "Several flushes
/// in flight"): commits there take about a millisecond, and more, smaller commits only cost
/// PostgreSQL more CPU per message. `--postgres-flushes N` is for a PostgreSQL whose commits are slow.
pub const FLUSHES_IN_FLIGHT_DEFAULT: usize = 1;

/// Bytes of frames one flush writes at most (a burst of relocations goes in several).
const FLUSH_BYTES_MAX: usize = 16 << 20;
/// Bytes of one frame at most, so that reading one body back never fetches much more.
const FRAME_BYTES_MAX: usize = 1 << 20;
/// Bytes of durable frames kept in the cache.
const CACHE_BYTES_MAX: usize = 64 << 20;

const FLUSH_MICROS_BOUNDS: &[u64] = &[
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 5_000_000,
];
const BATCH_RECORDS_BOUNDS: &[u64] = &[1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096];

/// The frame holding a location.
const SELECT_FRAME: &str = "
SELECT start_offset, first_lsn, last_lsn, body FROM {schema}.frame
WHERE bucket = $1 AND segment = $2 AND start_offset <= $3
ORDER BY start_offset DESC LIMIT 1";

/// The SQLSTATE a removal raises when the bucket's epoch is no longer the store's.
const FENCED_OUT_SQLSTATE: &str = "LQF01";

/// The statement removing `segments` of `bucket`, fenced: it locks the bucket's row as a flush
/// locks it (`FOR SHARE`), raises [`FENCED_OUT_SQLSTATE`] if the epoch moved on, and drops the
/// segments' partitions, all in one statement, so the row lock is held until they are gone.
/// One statement rather than `BEGIN … COMMIT`: it runs on the readers' session, which every
/// bucket's store shares, and a transaction there would take in the other stores' statements
/// (commit or roll back their snapshot chunks with it). The bucket, the epoch and the segments
/// are numbers and the schema a checked identifier, so pasting them in is safe.
fn removal(schema: &Schema, bucket: i32, epoch: i64, segments: &[u64]) -> String {
    let partitions: Vec<String> = segments
        .iter()
        .map(|&segment| schema.partition(bucket, segment))
        .collect();
    schema.sql(&format!(
        "DO $$ BEGIN
            PERFORM 1 FROM {{schema}}.bucket WHERE bucket = {bucket} AND epoch = {epoch} FOR SHARE;
            IF NOT FOUND THEN
                RAISE EXCEPTION 'fenced out' USING ERRCODE = '{FENCED_OUT_SQLSTATE}';
            END IF;
            DROP TABLE IF EXISTS {};
        END $$",
        partitions.join(", ")
    ))
}

/// What the flusher has published: the durable LSN, and why the store is unavailable (a flush
/// of unknown outcome being resolved) or poisoned, if it is; and who waits for a later LSN.
///
/// Waiters are kept by LSN, as the file log keeps them, so that a flush wakes exactly those it
/// covers. (A `watch` channel woke every waiter on every flush: with one flush in flight, the
/// requests that arrived during it, half of those waiting, were woken for nothing, re-polled
/// and queued again on the channel's one waiter list.)
#[derive(Debug, Default)]
struct Durable {
    lsn: Lsn,
    unavailable: Option<Arc<str>>,
    poisoned: Option<Arc<str>>,
    /// By (LSN awaited, arrival): told (or dropped) once the LSN is durable, or the store is
    /// unavailable or poisoned; the waiter then reads the state again.
    waiters: Waiters,
    next_waiter: u64,
}

/// Waiters by (LSN awaited, arrival).
type Waiters = BTreeMap<(Lsn, u64), oneshot::Sender<()>>;

impl Durable {
    /// Every waiter, to be told after the lock is released.
    fn take_all(&mut self) -> Waiters {
        std::mem::take(&mut self.waiters)
    }

    /// The waiters of LSNs up to `lsn`, to be told after the lock is released.
    fn take_through(&mut self, lsn: Lsn) -> Waiters {
        let later = self.waiters.split_off(&(lsn.saturating_add(1), 0));
        std::mem::replace(&mut self.waiters, later)
    }
}

/// Tells `waiters` to look at the state again (a waiter that gave up is gone: nothing to tell).
fn tell(waiters: Waiters) {
    for (_, waiter) in waiters {
        let _ = waiter.send(());
    }
}

/// Sizes of the log's units; tests use tiny ones so a script crosses many segments.
#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    /// A segment is closed once it holds this many bytes of records.
    pub segment_bytes_max: u64,
}

impl Default for Sizes {
    fn default() -> Sizes {
        Sizes {
            segment_bytes_max: 64 << 20,
        }
    }
}

/// The state the store's handle, its flusher and its blocking calls share.
pub(crate) struct Shared {
    pub(crate) schema: Schema,
    pub(crate) bucket: i32,
    pub(crate) epoch: i64,
    /// The connection string, for reconnecting.
    pub(crate) connection: String,
    /// Flushes in flight at most.
    pub(crate) flushes_in_flight: usize,
    /// The process ids of the flusher's sessions (tests end them with `pg_terminate_backend`).
    pub(crate) flush_backends: Mutex<Vec<i32>>,
    /// Reads, snapshots and removals, on the node's one readers' session (shared by every
    /// bucket's store): reconnected when found closed (see [`Shared::other`]).
    other_client: Readers,
    /// Segments whose partition of `frame` exists (created by this store or found at start).
    pub(crate) partitions: Mutex<std::collections::BTreeSet<u64>>,
    sizes: Sizes,
    pub(crate) tail: Mutex<Tail>,
    cache: Mutex<FrameCache>,
    durable: Mutex<Durable>,
    pub(crate) wake: Notify,
    flush_micros: Histogram,
    batch_records: Histogram,
    uncached_reads: AtomicU64,
}

/// The PostgreSQL log store (see the module docs).
pub struct PgLog {
    pub(crate) shared: Arc<Shared>,
    /// The placements of the bucket's names, as the store found them when it opened.
    placements: Vec<(Arc<str>, u32)>,
    // Declared last: dropped after `shared`'s handle, stopping the flusher and the connections.
    pub(crate) runtime: Arc<StoreRuntime>,
}

/// What recovery hands over to a new store.
pub(crate) struct Resumed {
    pub(crate) schema: Schema,
    pub(crate) bucket: i32,
    pub(crate) epoch: i64,
    pub(crate) connection: String,
    pub(crate) flush_client: Client,
    pub(crate) readers: Readers,
    pub(crate) sizes: Sizes,
    pub(crate) flushes_in_flight: usize,
    pub(crate) tail: Tail,
    pub(crate) placements: Vec<(Arc<str>, u32)>,
}

impl PgLog {
    /// A store continuing at `resumed`'s tail; starts the flusher on `runtime`.
    pub(crate) fn start(runtime: Arc<StoreRuntime>, resumed: Resumed) -> Result<PgLog, LogError> {
        let (client, schema) = (resumed.flush_client, resumed.schema.clone());
        let flush = runtime.block(async move { FlushConnection::new(client, &schema).await })?;
        let durable_lsn = resumed.tail.tail_lsn;
        let shared = Arc::new(Shared {
            schema: resumed.schema,
            bucket: resumed.bucket,
            epoch: resumed.epoch,
            connection: resumed.connection,
            flushes_in_flight: resumed.flushes_in_flight.max(1),
            flush_backends: Mutex::new(Vec::new()),
            other_client: resumed.readers,
            partitions: Mutex::new(resumed.tail.segments.keys().copied().collect()),
            sizes: resumed.sizes,
            tail: Mutex::new(resumed.tail),
            cache: Mutex::new(FrameCache::default()),
            durable: Mutex::new(Durable {
                lsn: durable_lsn,
                ..Durable::default()
            }),
            wake: Notify::new(),
            flush_micros: Histogram::new(FLUSH_MICROS_BOUNDS),
            batch_records: Histogram::new(BATCH_RECORDS_BOUNDS),
            uncached_reads: AtomicU64::new(0),
        });
        runtime
            .handle()
            .spawn(Flusher::new(shared.clone(), flush).run());
        Ok(PgLog {
            shared,
            placements: resumed.placements,
            runtime,
        })
    }

    /// The epoch this store writes under.
    pub fn epoch(&self) -> i64 {
        self.shared.epoch
    }

    /// The LSN up to which PostgreSQL has acknowledged every record.
    pub fn durable_lsn(&self) -> Lsn {
        self.shared.durable.lock().lsn
    }

    /// Why the store is poisoned, if it is.
    pub fn poisoned(&self) -> Option<String> {
        self.shared
            .durable
            .lock()
            .poisoned
            .as_deref()
            .map(str::to_string)
    }

    /// The process ids of the flusher's PostgreSQL sessions (tests cut them with
    /// `pg_terminate_backend`).
    pub fn flush_backend_pids(&self) -> Vec<i32> {
        self.shared.flush_backends.lock().clone()
    }
}

impl Shared {
    fn poisoned_error(reason: &str) -> LogError {
        LogError {
            message: format!("the PostgreSQL log is poisoned: {reason}"),
            poisoned: true,
            storage_full: false,
        }
    }

    /// Poisons the store: pending frames are dropped and every waiter learns why.
    pub(crate) fn poison(&self, reason: String) {
        tracing::error!(%reason, "the PostgreSQL log is poisoned; the node serves nothing until it is reopened");
        // Published before the pending frames are dropped, and appends look under the tail's
        // lock: an append either sees the poison or adds frames that are dropped here.
        let waiters = {
            let mut durable = self.durable.lock();
            durable.poisoned.get_or_insert_with(|| Arc::from(reason));
            durable.take_all()
        };
        tell(waiters);
        self.tail.lock().pending.clear();
    }

    fn unavailable_error(reason: &str) -> LogError {
        LogError::other(format!(
            "PostgreSQL is unreachable ({reason}); the node reconnects by itself"
        ))
    }

    /// The readers' connection, reconnected first if PostgreSQL closed it.
    pub(crate) async fn other(&self) -> Result<Arc<Client>, LogError> {
        let mut slot = self.other_client.lock().await;
        if slot.is_closed() {
            let client = schema::connect(&self.connection).await;
            let client = client.map_err(|error| LogError::other(error.to_string()))?;
            *slot = Arc::new(client);
        }
        Ok(slot.clone())
    }

    /// Records that `name`, whose name hashes into this store's bucket, lives in `bucket`,
    /// fenced by the bucket's epoch (as a frame is), once for good (see
    /// `LogStore::place`).
    async fn place(&self, name: &str, bucket: u32) -> Result<(), LogError> {
        let client = self.other().await?;
        let sql = self.schema.sql(
            "WITH fence AS (SELECT 1 FROM {schema}.bucket WHERE bucket = $1 AND epoch = $2 FOR SHARE) \
             INSERT INTO {schema}.placement (name, home, bucket) SELECT $3, $1, $4 FROM fence \
             ON CONFLICT (name) DO NOTHING",
        );
        let placed = bucket as i32;
        let inserted = client
            .execute(&sql, &[&self.bucket, &self.epoch, &name, &placed])
            .await
            .map_err(database)?;
        if inserted == 1 {
            return Ok(());
        }
        // Placed before (this very placement repeated), or fenced out.
        let sql = self
            .schema
            .sql("SELECT bucket FROM {schema}.placement WHERE name = $1");
        let found = client.query_opt(&sql, &[&name]).await.map_err(database)?;
        match found.map(|row| row.get::<_, i32>(0)) {
            Some(found) if found == placed => Ok(()),
            Some(found) => Err(LogError::other(format!(
                "the queue {name} was placed in bucket {found} already"
            ))),
            None => Err(LogError::other(format!(
                "this node no longer owns bucket {} (its epoch {} was fenced out)",
                self.bucket, self.epoch
            ))),
        }
    }

    /// Waits until `lsn` is durable; fails at once while the store is unavailable or poisoned
    /// (a flush of unknown outcome may be resolved long after, and a client must not hang).
    async fn wait(&self, lsn: Lsn) -> Result<(), LogError> {
        loop {
            let told = {
                let mut durable = self.durable.lock();
                if durable.lsn >= lsn {
                    return Ok(());
                }
                if let Some(reason) = &durable.poisoned {
                    return Err(Shared::poisoned_error(reason));
                }
                if let Some(reason) = &durable.unavailable {
                    return Err(Shared::unavailable_error(reason));
                }
                let (sender, receiver) = oneshot::channel();
                let arrival = durable.next_waiter;
                durable.next_waiter += 1;
                durable.waiters.insert((lsn, arrival), sender);
                receiver
            };
            // Told, or dropped with the store: either way the state says what happened.
            let _ = told.await;
        }
    }

    /// Whether frames wait for a flush.
    pub(crate) fn has_pending(&self) -> bool {
        !self.tail.lock().pending.is_empty()
    }

    /// Publishes `lsn` as durable: every waiter up to it returns.
    pub(crate) fn publish_durable(&self, lsn: Lsn) {
        let waiters = {
            let mut durable = self.durable.lock();
            durable.lsn = durable.lsn.max(lsn);
            durable.take_through(lsn)
        };
        tell(waiters);
        self.cache.lock().evict(lsn, CACHE_BYTES_MAX);
    }

    /// Makes the store unavailable: waiters not yet durable fail, new work is turned away.
    pub(crate) fn set_unavailable(&self, reason: String) {
        let waiters = {
            let mut durable = self.durable.lock();
            durable.unavailable = Some(Arc::from(reason));
            durable.take_all()
        };
        tell(waiters);
    }

    pub(crate) fn set_available(&self) {
        self.durable.lock().unavailable = None;
    }

    /// Records a flush's round trip and records in the store's histograms.
    pub(crate) fn observe(&self, frames: &[Arc<Frame>], took: Duration) {
        self.flush_micros.observe(took.as_micros() as u64);
        let records: u64 = frames.iter().map(|f| f.last_lsn + 1 - f.first_lsn).sum();
        self.batch_records.observe(records);
    }

    /// Takes what is pending for the next flush; the frames stay readable from the cache from
    /// the moment they leave the pending list (both locks held across the move).
    pub(crate) fn take(&self) -> Vec<Arc<Frame>> {
        let mut tail = self.tail.lock();
        let taken: Vec<Arc<Frame>> = tail
            .take(FLUSH_BYTES_MAX)
            .into_iter()
            .map(Arc::new)
            .collect();
        let mut cache = self.cache.lock();
        for frame in &taken {
            cache.insert(frame.clone());
        }
        taken
    }

    /// The record at `location` from the pending frames or the cache.
    fn cached(&self, location: Location) -> Option<Vec<u8>> {
        // Pending first, then the cache: a frame moves from one to the other under both locks,
        // so looking in this order never misses it.
        let tail = self.tail.lock();
        for frame in tail.pending.iter().rev() {
            if let Some(bytes) = frame.record(location) {
                return Some(bytes.to_vec());
            }
        }
        drop(tail);
        let frame = self.cache.lock().find(location)?;
        frame.record(location).map(<[u8]>::to_vec)
    }

    /// Reads the frame holding `location` from PostgreSQL and caches it.
    async fn fetch(self: Arc<Self>, location: Location) -> Result<Vec<u8>, LogError> {
        let sql = self.schema.sql(SELECT_FRAME);
        let segment = i64::from(location.segment);
        let offset = i64::from(location.offset);
        let rows = self
            .other()
            .await?
            .query(&sql, &[&self.bucket, &segment, &offset])
            .await
            .map_err(database)?;
        let not_found = || LogError::other(format!("no frame holds the record at {location:?}"));
        let row = rows.first().ok_or_else(not_found)?;
        let frame = Arc::new(Frame {
            segment: location.segment,
            start_offset: row.get::<_, i64>(0) as u64,
            first_lsn: row.get::<_, i64>(1) as u64,
            last_lsn: row.get::<_, i64>(2) as u64,
            body: row.get::<_, Vec<u8>>(3),
        });
        let bytes = frame.record(location).ok_or_else(not_found)?.to_vec();
        let durable_lsn = self.durable.lock().lsn;
        let mut cache = self.cache.lock();
        cache.insert(frame);
        cache.evict(durable_lsn, CACHE_BYTES_MAX);
        Ok(bytes)
    }
}

/// A database error as a log error that does not poison (reads, snapshots, removals: their
/// failure loses nothing acknowledged).
pub(crate) fn database(error: tokio_postgres::Error) -> LogError {
    LogError::other(format!("PostgreSQL: {}", crate::describe(&error)))
}

impl LogStore for PgLog {
    fn append(
        &self,
        journal: &Journal,
        placed: &mut dyn FnMut(&Record, Location),
    ) -> Result<Appended, LogError> {
        let sizes = self.shared.sizes;
        let mut tail = self.shared.tail.lock();
        if let Some(reason) = &self.shared.durable.lock().poisoned {
            return Err(Shared::poisoned_error(reason));
        }
        let mut encoded = std::mem::take(&mut tail.scratch);
        let mut bytes = 0;
        for record in journal {
            encoded.clear();
            codec::encode(record, &mut encoded);
            // (A failed push leaves the scratch empty: the next append allocates one again.)
            let location = tail.push(&encoded, sizes.segment_bytes_max, FRAME_BYTES_MAX)?;
            bytes += LENGTH_PREFIX_BYTES + encoded.len() as u64;
            if record.carried_payload().is_some() {
                placed(record, location);
            }
        }
        tail.scratch = encoded;
        let tail_lsn = tail.tail_lsn;
        drop(tail);
        if !journal.is_empty() {
            self.shared.wake.notify_one();
        }
        Ok(Appended { tail_lsn, bytes })
    }

    fn tail_lsn(&self) -> Lsn {
        self.shared.tail.lock().tail_lsn
    }

    fn writable(&self) -> Result<(), LogError> {
        let durable = self.shared.durable.lock();
        if let Some(reason) = &durable.poisoned {
            return Err(Shared::poisoned_error(reason));
        }
        match &durable.unavailable {
            Some(reason) => Err(Shared::unavailable_error(reason)),
            None => Ok(()),
        }
    }

    fn wait_durable(&self, lsn: Lsn) -> LogFuture<'_, ()> {
        Box::pin(self.shared.wait(lsn))
    }

    fn sync(&self) -> Result<(), LogError> {
        let lsn = self.tail_lsn();
        self.shared.wake.notify_one();
        let shared = self.shared.clone();
        self.runtime.block(async move { shared.wait(lsn).await })
    }

    fn read_cached(&self, location: Location) -> Result<Option<Vec<u8>>, LogError> {
        Ok(self.shared.cached(location))
    }

    fn read(&self, location: Location) -> Result<Vec<u8>, LogError> {
        if let Some(bytes) = self.shared.cached(location) {
            return Ok(bytes);
        }
        self.shared.uncached_reads.fetch_add(1, Ordering::Relaxed);
        self.runtime.block(self.shared.clone().fetch(location))
    }

    fn stored_bytes(&self, location: Location) -> u64 {
        LENGTH_PREFIX_BYTES + u64::from(location.len_bytes)
    }

    fn snapshot_writer(&self, lsn: Lsn) -> Result<Box<dyn SnapshotSink + '_>, LogError> {
        let from_segment = self.shared.tail.lock().segment_of(lsn);
        Ok(Box::new(SnapshotWriter::new(self, lsn, from_segment)))
    }

    fn segments(&self) -> Vec<Segment> {
        let tail = self.shared.tail.lock();
        tail.segments
            .iter()
            .map(|(&segment, extent)| Segment {
                segment,
                end_lsn: extent.end_lsn,
                size_bytes: extent.size_bytes,
                active: segment == u64::from(tail.segment),
            })
            .collect()
    }

    fn remove_segments(&self, lsn: Lsn, keep: &dyn Fn(u64) -> bool) -> Result<Vec<u64>, LogError> {
        let removable: Vec<u64> = self
            .segments()
            .into_iter()
            .filter(|s| !s.active && s.end_lsn <= lsn && !keep(s.segment))
            .map(|s| s.segment)
            .collect();
        if removable.is_empty() {
            return Ok(removable);
        }
        let shared = self.shared.clone();
        let remove = removal(&shared.schema, shared.bucket, shared.epoch, &removable);
        self.runtime.block(async move {
            let removed = shared.other().await?.batch_execute(&remove).await;
            match removed {
                Ok(()) => Ok(()),
                Err(error) if error.code().map(|c| c.code()) == Some(FENCED_OUT_SQLSTATE) => {
                    let reason = format!(
                        "fenced out while removing segments (epoch {})",
                        shared.epoch
                    );
                    shared.poison(reason.clone());
                    Err(Shared::poisoned_error(&reason))
                }
                Err(error) => Err(database(error)),
            }
        })?;
        let mut tail = self.shared.tail.lock();
        for segment in &removable {
            tail.segments.remove(segment);
        }
        drop(tail);
        let mut partitions = self.shared.partitions.lock();
        for segment in &removable {
            partitions.remove(segment);
        }
        drop(partitions);
        self.shared.cache.lock().forget(&removable);
        Ok(removable)
    }

    fn keeps_records(&self) -> bool {
        true
    }

    fn place<'a>(&'a self, name: &'a str, bucket: u32) -> LogFuture<'a, ()> {
        let shared = self.shared.clone();
        let name = name.to_string();
        // On the store's runtime, whose sessions these are.
        let task = self
            .runtime
            .handle()
            .spawn(async move { shared.place(&name, bucket).await });
        Box::pin(async move {
            task.await
                .map_err(|error| LogError::other(format!("placing a queue: {error}")))?
        })
    }

    fn placements(&self) -> Vec<(Arc<str>, u32)> {
        self.placements.clone()
    }

    fn stats(&self) -> Option<LogStats> {
        Some(LogStats {
            fsync_micros: self.shared.flush_micros.snapshot(),
            batch_records: self.shared.batch_records.snapshot(),
            uncached_reads: self.shared.uncached_reads.load(Ordering::Relaxed),
            // The engine's, added by the service.
            payload_cache: (0, 0),
        })
    }
}

#[cfg(test)]
mod waiters {
    use super::*;

    /// A flush tells exactly the waiters whose LSN it covers; the later ones stay asleep (a
    /// `watch` woke them all, and half of them for nothing).
    #[test]
    fn a_flush_tells_exactly_the_waiters_it_covers() {
        let mut durable = Durable::default();
        let mut receivers = Vec::new();
        for (arrival, lsn) in [7, 5, 9, 7, 8].into_iter().enumerate() {
            let (sender, receiver) = oneshot::channel();
            durable.waiters.insert((lsn, arrival as u64), sender);
            receivers.push((lsn, receiver));
        }
        tell(durable.take_through(7));
        for (lsn, receiver) in &mut receivers {
            assert_eq!(
                receiver.try_recv().is_ok(),
                *lsn <= 7,
                "the waiter of LSN {lsn}"
            );
        }
        tell(durable.take_through(Lsn::MAX));
        for (lsn, receiver) in &mut receivers {
            if *lsn > 7 {
                assert!(receiver.try_recv().is_ok(), "the waiter of LSN {lsn}");
            }
        }
        assert!(durable.waiters.is_empty());
    }
}
