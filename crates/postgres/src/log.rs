//! [`PgLog`]: the engine's records group-committed to PostgreSQL as fenced frames.
//!
//! Appends (under the engine lock) only encode records into the pending frame and wake the
//! flusher. The flusher, one task, takes everything pending and writes it in one INSERT, one
//! round trip, fenced by the bucket's epoch in the same statement; then it publishes the durable
//! LSN and every waiter it covers returns. Only one flush is ever in flight, so frames are
//! written in LSN order with no gaps: if one fails, none after it is attempted.
//!
//! Poisoning: a flush whose outcome is unknown (a cut connection, a timeout, a failed commit) or
//! that was fenced out (zero rows: another node took the bucket over) poisons the store. Every
//! later append and wait fails with `poisoned: true`, so the service refuses everything until
//! the node is reopened and recovers what PostgreSQL holds. Nothing is retried: a retry of a
//! frame whose first attempt did commit would write it twice.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use leaseq_core::histogram::Histogram;
use leaseq_core::{codec, Journal, Location, Record};
use leaseq_server::log_store::{
    Appended, LogError, LogFuture, LogStore, Lsn, Segment, SnapshotSink,
};
use leaseq_server::metrics::LogStats;
use parking_lot::Mutex;
use tokio::sync::{watch, Notify};
use tokio_postgres::{Client, Statement};

use crate::frames::{Frame, FrameCache, Tail, LENGTH_PREFIX_BYTES};
use crate::runtime::StoreRuntime;
use crate::schema::Schema;
use crate::snapshot::SnapshotWriter;

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

/// The fenced insert of a flush: zero rows when the bucket's epoch is no longer ours.
const INSERT_FRAMES: &str = "
WITH f AS (SELECT 1 FROM {schema}.bucket WHERE bucket = $1 AND epoch = $2 FOR SHARE)
INSERT INTO {schema}.frame (bucket, segment, start_offset, first_lsn, last_lsn, epoch, body)
SELECT $1, t.segment, t.start_offset, t.first_lsn, t.last_lsn, $2, t.body
FROM f, unnest($3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bytea[])
     AS t(segment, start_offset, first_lsn, last_lsn, body)";

/// The frame holding a location.
const SELECT_FRAME: &str = "
SELECT start_offset, first_lsn, last_lsn, body FROM {schema}.frame
WHERE bucket = $1 AND segment = $2 AND start_offset <= $3
ORDER BY start_offset DESC LIMIT 1";

/// The removal of whole segments, fenced like a flush; answers (fenced in, rows removed).
const DELETE_SEGMENTS: &str = "
WITH f AS (SELECT 1 FROM {schema}.bucket WHERE bucket = $1 AND epoch = $2 FOR SHARE),
     d AS (DELETE FROM {schema}.frame WHERE bucket = $1 AND segment = ANY($3)
           AND EXISTS (SELECT 1 FROM f) RETURNING 1)
SELECT (SELECT count(*) FROM f), (SELECT count(*) FROM d)";

/// What the flusher has published: the durable LSN, or the reason the store is poisoned.
#[derive(Clone, Debug, Default)]
struct Durable {
    lsn: Lsn,
    poisoned: Option<Arc<str>>,
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
    /// The flusher's connection (nothing else runs on it, so a flush never queues behind a read).
    flush_client: Client,
    insert_frames: Statement,
    /// Reads, snapshots and removals.
    pub(crate) other_client: Arc<Client>,
    sizes: Sizes,
    tail: Mutex<Tail>,
    cache: Mutex<FrameCache>,
    durable: watch::Sender<Durable>,
    wake: Notify,
    flush_micros: Histogram,
    batch_records: Histogram,
    uncached_reads: AtomicU64,
}

/// The PostgreSQL log store (see the module docs).
pub struct PgLog {
    pub(crate) shared: Arc<Shared>,
    // Declared last: dropped after `shared`'s handle, stopping the flusher and the connections.
    pub(crate) runtime: Arc<StoreRuntime>,
}

/// What recovery hands over to a new store.
pub(crate) struct Resumed {
    pub(crate) schema: Schema,
    pub(crate) bucket: i32,
    pub(crate) epoch: i64,
    pub(crate) flush_client: Client,
    pub(crate) other_client: Arc<Client>,
    pub(crate) sizes: Sizes,
    pub(crate) tail: Tail,
}

impl PgLog {
    /// A store continuing at `resumed`'s tail; starts the flusher on `runtime`.
    pub(crate) fn start(runtime: Arc<StoreRuntime>, resumed: Resumed) -> Result<PgLog, LogError> {
        let sql = resumed.schema.sql(INSERT_FRAMES);
        let client = resumed.flush_client;
        let (client, insert_frames) = runtime.block(async move {
            let statement = client.prepare(&sql).await.map_err(database)?;
            Ok::<_, LogError>((client, statement))
        })?;
        let durable_lsn = resumed.tail.tail_lsn;
        let shared = Arc::new(Shared {
            schema: resumed.schema,
            bucket: resumed.bucket,
            epoch: resumed.epoch,
            flush_client: client,
            insert_frames,
            other_client: resumed.other_client,
            sizes: resumed.sizes,
            tail: Mutex::new(resumed.tail),
            cache: Mutex::new(FrameCache::default()),
            durable: watch::Sender::new(Durable {
                lsn: durable_lsn,
                poisoned: None,
            }),
            wake: Notify::new(),
            flush_micros: Histogram::new(FLUSH_MICROS_BOUNDS),
            batch_records: Histogram::new(BATCH_RECORDS_BOUNDS),
            uncached_reads: AtomicU64::new(0),
        });
        runtime.handle().spawn(flush_loop(shared.clone()));
        Ok(PgLog { shared, runtime })
    }

    /// The epoch this store writes under.
    pub fn epoch(&self) -> i64 {
        self.shared.epoch
    }

    /// The LSN up to which PostgreSQL has acknowledged every record.
    pub fn durable_lsn(&self) -> Lsn {
        self.shared.durable.borrow().lsn
    }

    /// Why the store is poisoned, if it is.
    pub fn poisoned(&self) -> Option<String> {
        self.shared
            .durable
            .borrow()
            .poisoned
            .as_deref()
            .map(str::to_string)
    }

    /// The process id of the flusher's PostgreSQL backend (tests cut it with
    /// `pg_terminate_backend`).
    pub fn flush_backend_pid(&self) -> Result<i32, LogError> {
        let shared = self.shared.clone();
        self.runtime.block(async move {
            let row = shared
                .flush_client
                .query_one("SELECT pg_backend_pid()", &[])
                .await
                .map_err(database)?;
            Ok(row.get(0))
        })
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
        self.durable.send_modify(|durable| {
            durable.poisoned.get_or_insert_with(|| Arc::from(reason));
        });
        self.tail.lock().pending.clear();
    }

    /// Waits until `lsn` is durable, or the store is poisoned.
    async fn wait(&self, lsn: Lsn) -> Result<(), LogError> {
        let mut receiver = self.durable.subscribe();
        loop {
            {
                let durable = receiver.borrow_and_update();
                if durable.lsn >= lsn {
                    return Ok(());
                }
                if let Some(reason) = &durable.poisoned {
                    return Err(Shared::poisoned_error(reason));
                }
            }
            receiver
                .changed()
                .await
                .map_err(|_| LogError::other("the PostgreSQL log was closed"))?;
        }
    }

    /// Writes `frames` in one fenced INSERT; `Err` says why the store must be poisoned.
    async fn write(&self, frames: &[Arc<Frame>]) -> Result<(), String> {
        let column = |get: fn(&Frame) -> i64| frames.iter().map(|f| get(f)).collect::<Vec<i64>>();
        let segments = column(|f| i64::from(f.segment));
        let offsets = column(|f| f.start_offset as i64);
        let first = column(|f| f.first_lsn as i64);
        let last = column(|f| f.last_lsn as i64);
        let bodies: Vec<&[u8]> = frames.iter().map(|f| f.body.as_slice()).collect();
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 7] = [
            &self.bucket,
            &self.epoch,
            &segments,
            &offsets,
            &first,
            &last,
            &bodies,
        ];
        let insert = self.flush_client.execute(&self.insert_frames, &params);
        match tokio::time::timeout(crate::FLUSH_TIMEOUT, insert).await {
            Err(_) => Err(format!(
                "a flush did not answer within {:?}; its outcome is unknown",
                crate::FLUSH_TIMEOUT
            )),
            Ok(Err(error)) => Err(format!("a flush failed, its outcome unknown: {error}")),
            Ok(Ok(0)) => Err(format!(
                "fenced out: the bucket's epoch is no longer {} (another node took it over)",
                self.epoch
            )),
            Ok(Ok(rows)) if rows == frames.len() as u64 => Ok(()),
            Ok(Ok(rows)) => Err(format!("a flush of {} frames wrote {rows}", frames.len())),
        }
    }

    /// Takes what is pending for the next flush; the frames stay readable from the cache from
    /// the moment they leave the pending list (both locks held across the move).
    fn take(&self) -> Vec<Arc<Frame>> {
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
            .other_client
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
        let durable_lsn = self.durable.borrow().lsn;
        let mut cache = self.cache.lock();
        cache.insert(frame);
        cache.evict(durable_lsn, CACHE_BYTES_MAX);
        Ok(bytes)
    }
}

/// The flusher: one flush in flight at a time, each taking everything pending.
async fn flush_loop(shared: Arc<Shared>) {
    loop {
        let frames = loop {
            let frames = shared.take();
            if !frames.is_empty() {
                break frames;
            }
            // A wake-up between the take and this wait is kept as a permit, never lost.
            shared.wake.notified().await;
        };
        let started = Instant::now();
        if let Err(reason) = shared.write(&frames).await {
            shared.poison(reason);
            return;
        }
        shared
            .flush_micros
            .observe(started.elapsed().as_micros() as u64);
        let records: u64 = frames.iter().map(|f| f.last_lsn + 1 - f.first_lsn).sum();
        shared.batch_records.observe(records);
        let lsn = frames.last().expect("a flush writes a frame").last_lsn;
        shared.durable.send_modify(|durable| durable.lsn = lsn);
        shared.cache.lock().evict(lsn, CACHE_BYTES_MAX);
    }
}

/// A database error as a log error that does not poison (reads, snapshots, removals: their
/// failure loses nothing acknowledged).
pub(crate) fn database(error: tokio_postgres::Error) -> LogError {
    LogError::other(format!("PostgreSQL: {error}"))
}

impl LogStore for PgLog {
    fn append(
        &self,
        journal: &Journal,
        placed: &mut dyn FnMut(&Record, Location),
    ) -> Result<Appended, LogError> {
        let sizes = self.shared.sizes;
        let mut tail = self.shared.tail.lock();
        if let Some(reason) = &self.shared.durable.borrow().poisoned {
            return Err(Shared::poisoned_error(reason));
        }
        let mut encoded = Vec::with_capacity(1024);
        let mut bytes = 0;
        for record in journal {
            encoded.clear();
            codec::encode(record, &mut encoded);
            let location = tail.push(&encoded, sizes.segment_bytes_max, FRAME_BYTES_MAX)?;
            bytes += LENGTH_PREFIX_BYTES + encoded.len() as u64;
            if record.carried_payload().is_some() {
                placed(record, location);
            }
        }
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
        let numbers: Vec<i64> = removable.iter().map(|&s| s as i64).collect();
        self.runtime.block(async move {
            let sql = shared.schema.sql(DELETE_SEGMENTS);
            let row = shared
                .other_client
                .query_one(&sql, &[&shared.bucket, &shared.epoch, &numbers])
                .await
                .map_err(database)?;
            if row.get::<_, i64>(0) == 0 {
                let reason = format!(
                    "fenced out while removing segments (epoch {})",
                    shared.epoch
                );
                shared.poison(reason.clone());
                return Err(Shared::poisoned_error(&reason));
            }
            Ok::<(), LogError>(())
        })?;
        let mut tail = self.shared.tail.lock();
        for segment in &removable {
            tail.segments.remove(segment);
        }
        drop(tail);
        self.shared.cache.lock().forget(&removable);
        Ok(removable)
    }

    fn keeps_records(&self) -> bool {
        true
    }

    fn stats(&self) -> Option<LogStats> {
        Some(LogStats {
            fsync_micros: self.shared.flush_micros.snapshot(),
            batch_records: self.shared.batch_records.snapshot(),
            uncached_reads: self.shared.uncached_reads.load(Ordering::Relaxed),
        })
    }
}
