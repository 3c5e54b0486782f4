//! [`PgLog`]: the engine's records group-committed to PostgreSQL as fenced frames.
//!
//! Appends (under the engine lock) only encode records into the pending frame and wake the
//! flusher. The flusher, one task, takes everything pending and writes it in one INSERT, one
//! round trip, fenced by the bucket's epoch in the same statement; then it publishes the durable
//! LSN and every waiter it covers returns. Only one flush is ever in flight, so frames are
//! written in LSN order with no gaps: if one fails, none after it is attempted.
//!
//! A flush whose outcome is unknown (a cut connection, a timeout, PostgreSQL restarting) makes
//! the store *unavailable*: every waiter not yet durable gets an error at once, and the service
//! refuses new requests ([`LogStore::writable`]) instead of letting them queue. The flusher then
//! resolves the outcome before it flushes anything later: it reconnects (with backoff, for as
//! long as PostgreSQL stays away), makes sure the session that ran the flush is gone (so it
//! cannot still commit it after the check), and writes the frames again with `ON CONFLICT DO
//! NOTHING`, in one fenced statement that also counts which of them were already there. Either
//! way every frame the engine applied is then in PostgreSQL exactly once, in order, and the
//! store is available again: the node recovers by itself, without a restart and without a
//! reload, because its engine holds exactly what the log now holds.
//!
//! Poisoning is for what cannot be resolved: a flush fenced out (zero rows: another node took
//! the bucket over) or frames found under the same keys that are not ours. Every later append
//! and wait then fails with `poisoned: true`, and the node serves nothing until it is reopened.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
use crate::schema::{self, Schema};
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

/// A flush of unknown outcome written again: inserts the frames that are missing (fenced like a
/// flush) and answers (fenced in, frames inserted, frames already there as this epoch wrote
/// them). The last count reads the table as it was before the statement, so inserted + already
/// there = all frames exactly when every frame is now in PostgreSQL once.
const RESOLVE_FRAMES: &str = "
WITH f AS (SELECT 1 FROM {schema}.bucket WHERE bucket = $1 AND epoch = $2 FOR SHARE),
     t AS (SELECT * FROM unnest($3::bigint[], $4::bigint[], $5::bigint[], $6::bigint[], $7::bytea[])
           AS t(segment, start_offset, first_lsn, last_lsn, body)),
     i AS (INSERT INTO {schema}.frame (bucket, segment, start_offset, first_lsn, last_lsn, epoch, body)
           SELECT $1, t.segment, t.start_offset, t.first_lsn, t.last_lsn, $2, t.body FROM f, t
           ON CONFLICT (bucket, segment, start_offset) DO NOTHING RETURNING 1)
SELECT (SELECT count(*) FROM f), (SELECT count(*) FROM i),
       (SELECT count(*) FROM {schema}.frame x JOIN t
          ON x.segment = t.segment AND x.start_offset = t.start_offset
        WHERE x.bucket = $1 AND x.epoch = $2
          AND x.first_lsn = t.first_lsn AND x.last_lsn = t.last_lsn)";

/// The session running this statement, as `pg_stat_activity` names it.
const THIS_BACKEND: &str =
    "SELECT pid, backend_start::text FROM pg_stat_activity WHERE pid = pg_backend_pid()";

/// Ends a session if it still exists, waiting up to 5 s for it to be gone: no row if it was
/// gone already, `true` once it is, `false` if it outlived the wait.
const END_BACKEND: &str = "
SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity
WHERE pid = $1 AND backend_start::text = $2";

/// The first wait before reconnecting after a flush of unknown outcome; it doubles up to
/// [`RECONNECT_DELAY_MAX`].
const RECONNECT_DELAY_MIN: Duration = Duration::from_millis(50);
const RECONNECT_DELAY_MAX: Duration = Duration::from_secs(1);

/// The frame holding a location.
const SELECT_FRAME: &str = "
SELECT start_offset, first_lsn, last_lsn, body FROM {schema}.frame
WHERE bucket = $1 AND segment = $2 AND start_offset <= $3
ORDER BY start_offset DESC LIMIT 1";

/// The fence of a segment removal: the bucket's row locked as a flush locks it, in the
/// transaction that then drops the segments' partitions.
const FENCE: &str = "SELECT 1 FROM {schema}.bucket WHERE bucket = $1 AND epoch = $2 FOR SHARE";

/// What the flusher has published: the durable LSN, and why the store is unavailable (a flush
/// of unknown outcome being resolved) or poisoned, if it is.
#[derive(Clone, Debug, Default)]
struct Durable {
    lsn: Lsn,
    unavailable: Option<Arc<str>>,
    poisoned: Option<Arc<str>>,
}

/// A PostgreSQL session, as `pg_stat_activity` tells one from a later one with the same pid.
#[derive(Clone, Debug, Default)]
struct Backend {
    pid: i32,
    started: String,
}

/// The flusher's own connection (nothing else runs on it, so a flush never queues behind a
/// read) and its statements.
struct FlushConnection {
    client: Client,
    insert: Statement,
    resolve: Statement,
    backend: Backend,
}

impl FlushConnection {
    async fn new(client: Client, schema: &Schema) -> Result<FlushConnection, LogError> {
        let (insert, resolve) = (schema.sql(INSERT_FRAMES), schema.sql(RESOLVE_FRAMES));
        let insert = client.prepare(&insert).await.map_err(database)?;
        let resolve = client.prepare(&resolve).await.map_err(database)?;
        let row = client
            .query_one(THIS_BACKEND, &[])
            .await
            .map_err(database)?;
        let backend = Backend {
            pid: row.get(0),
            started: row.get(1),
        };
        Ok(FlushConnection {
            client,
            insert,
            resolve,
            backend,
        })
    }
}

/// Why a flush did not complete.
enum FlushFailure {
    /// Its outcome is unknown: resolve it.
    Unknown(String),
    /// It can never complete (fenced out): poison.
    Fatal(String),
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
    connection: String,
    /// The flusher's session (tests end it with `pg_terminate_backend`).
    flush_backend: Mutex<Backend>,
    /// Reads, snapshots and removals: reconnected when found closed (see [`Shared::other`]).
    other_client: tokio::sync::Mutex<Arc<Client>>,
    /// Segments whose partition of `frame` exists (created by this store or found at start).
    partitions: Mutex<std::collections::BTreeSet<u64>>,
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
    pub(crate) connection: String,
    pub(crate) flush_client: Client,
    pub(crate) other_client: Arc<Client>,
    pub(crate) sizes: Sizes,
    pub(crate) tail: Tail,
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
            flush_backend: Mutex::new(flush.backend.clone()),
            other_client: tokio::sync::Mutex::new(resumed.other_client),
            partitions: Mutex::new(resumed.tail.segments.keys().copied().collect()),
            sizes: resumed.sizes,
            tail: Mutex::new(resumed.tail),
            cache: Mutex::new(FrameCache::default()),
            durable: watch::Sender::new(Durable {
                lsn: durable_lsn,
                ..Durable::default()
            }),
            wake: Notify::new(),
            flush_micros: Histogram::new(FLUSH_MICROS_BOUNDS),
            batch_records: Histogram::new(BATCH_RECORDS_BOUNDS),
            uncached_reads: AtomicU64::new(0),
        });
        runtime.handle().spawn(flush_loop(shared.clone(), flush));
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
    pub fn flush_backend_pid(&self) -> i32 {
        self.shared.flush_backend.lock().pid
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

    /// Waits until `lsn` is durable; fails at once while the store is unavailable or poisoned
    /// (a flush of unknown outcome may be resolved long after, and a client must not hang).
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
                if let Some(reason) = &durable.unavailable {
                    return Err(Shared::unavailable_error(reason));
                }
            }
            receiver
                .changed()
                .await
                .map_err(|_| LogError::other("the PostgreSQL log was closed"))?;
        }
    }

    fn fenced_out(&self) -> FlushFailure {
        FlushFailure::Fatal(format!(
            "fenced out: the bucket's epoch is no longer {} (another node took it over)",
            self.epoch
        ))
    }

    /// Creates the partitions of the segments `frames` start (once per segment: one more round
    /// trip every 64 MiB). A node that was fenced out may create an empty one; the owner's
    /// `IF NOT EXISTS` then finds it, and nothing of the old node's is in it.
    async fn ensure_partitions(
        &self,
        connection: &FlushConnection,
        frames: &[Arc<Frame>],
    ) -> Result<(), FlushFailure> {
        let mut missing: Vec<u64> = frames.iter().map(|f| u64::from(f.segment)).collect();
        missing.dedup();
        missing.retain(|segment| !self.partitions.lock().contains(segment));
        for segment in missing {
            let create = self.schema.create_partition(self.bucket, segment);
            let created = connection.client.batch_execute(&create).await;
            created
                .map_err(|error| FlushFailure::Unknown(format!("creating a partition: {error}")))?;
            self.partitions.lock().insert(segment);
        }
        Ok(())
    }

    /// Writes `frames` in one fenced INSERT on the flusher's connection.
    async fn write(
        &self,
        connection: &FlushConnection,
        frames: &[Arc<Frame>],
    ) -> Result<(), FlushFailure> {
        self.ensure_partitions(connection, frames).await?;
        let columns = FrameColumns::of(frames);
        let params = columns.params(self);
        let insert = connection.client.execute(&connection.insert, &params);
        match tokio::time::timeout(crate::FLUSH_TIMEOUT, insert).await {
            Err(_) => Err(FlushFailure::Unknown(format!(
                "a flush did not answer within {:?}",
                crate::FLUSH_TIMEOUT
            ))),
            Ok(Err(error)) => Err(FlushFailure::Unknown(format!("a flush failed: {error}"))),
            Ok(Ok(0)) => Err(self.fenced_out()),
            Ok(Ok(rows)) if rows == frames.len() as u64 => Ok(()),
            Ok(Ok(rows)) => Err(FlushFailure::Fatal(format!(
                "a flush of {} frames wrote {rows}",
                frames.len()
            ))),
        }
    }

    /// Resolves a flush of `frames` whose outcome is unknown, on a new connection, retrying
    /// until PostgreSQL answers; the new connection, or why the store must be poisoned.
    async fn resolve(
        &self,
        frames: &[Arc<Frame>],
        unknown: Backend,
    ) -> Result<FlushConnection, String> {
        let mut delay = RECONNECT_DELAY_MIN;
        loop {
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(RECONNECT_DELAY_MAX);
            match self.try_resolve(frames, &unknown).await {
                Ok(connection) => return Ok(connection),
                Err(FlushFailure::Fatal(reason)) => return Err(reason),
                Err(FlushFailure::Unknown(reason)) => {
                    tracing::warn!(%reason, "the PostgreSQL log is still unreachable; retrying");
                }
            }
        }
    }

    async fn try_resolve(
        &self,
        frames: &[Arc<Frame>],
        unknown: &Backend,
    ) -> Result<FlushConnection, FlushFailure> {
        let retry = |error: LogError| FlushFailure::Unknown(error.message);
        let client = schema::connect(&self.connection).await;
        let client = client.map_err(|error| FlushFailure::Unknown(error.to_string()))?;
        let connection = FlushConnection::new(client, &self.schema)
            .await
            .map_err(retry)?;
        // The session that ran the flush must be gone, or it could still commit the frames
        // after the check below found them missing.
        let ended = connection
            .client
            .query_opt(END_BACKEND, &[&unknown.pid, &unknown.started])
            .await
            .map_err(|error| retry(database(error)))?;
        if ended.is_some_and(|row| !row.get::<_, bool>(0)) {
            return Err(FlushFailure::Unknown(format!(
                "the session of the unresolved flush (pid {}) is still running",
                unknown.pid
            )));
        }
        self.ensure_partitions(&connection, frames).await?;
        let columns = FrameColumns::of(frames);
        let params = columns.params(self);
        let resolve = connection.client.query_one(&connection.resolve, &params);
        let row = tokio::time::timeout(crate::FLUSH_TIMEOUT, resolve)
            .await
            .map_err(|_| FlushFailure::Unknown("resolving a flush timed out".into()))?
            .map_err(|error| retry(database(error)))?;
        let (fenced_in, inserted, present) = (
            row.get::<_, i64>(0),
            row.get::<_, i64>(1),
            row.get::<_, i64>(2),
        );
        if fenced_in == 0 {
            return Err(self.fenced_out());
        }
        if inserted + present != frames.len() as i64 {
            return Err(FlushFailure::Fatal(format!(
                "resolving a flush of {} frames: {inserted} written, {present} found, \
                 the rest held by other frames under the same keys",
                frames.len()
            )));
        }
        tracing::info!(
            inserted,
            present,
            "resolved the flush of unknown outcome; the PostgreSQL log is available again"
        );
        *self.flush_backend.lock() = connection.backend.clone();
        Ok(connection)
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
        let durable_lsn = self.durable.borrow().lsn;
        let mut cache = self.cache.lock();
        cache.insert(frame);
        cache.evict(durable_lsn, CACHE_BYTES_MAX);
        Ok(bytes)
    }
}

/// A flush's frames as the columns its statements take.
struct FrameColumns<'a> {
    segments: Vec<i64>,
    offsets: Vec<i64>,
    first: Vec<i64>,
    last: Vec<i64>,
    bodies: Vec<&'a [u8]>,
}

impl<'a> FrameColumns<'a> {
    fn of(frames: &'a [Arc<Frame>]) -> FrameColumns<'a> {
        let column = |get: fn(&Frame) -> i64| frames.iter().map(|f| get(f)).collect::<Vec<i64>>();
        FrameColumns {
            segments: column(|f| i64::from(f.segment)),
            offsets: column(|f| f.start_offset as i64),
            first: column(|f| f.first_lsn as i64),
            last: column(|f| f.last_lsn as i64),
            bodies: frames.iter().map(|f| f.body.as_slice()).collect(),
        }
    }

    fn params<'s>(
        &'s self,
        shared: &'s Shared,
    ) -> [&'s (dyn tokio_postgres::types::ToSql + Sync); 7] {
        [
            &shared.bucket,
            &shared.epoch,
            &self.segments,
            &self.offsets,
            &self.first,
            &self.last,
            &self.bodies,
        ]
    }
}

/// The flusher: one flush in flight at a time, each taking everything pending; a flush of
/// unknown outcome is resolved before anything later is flushed.
async fn flush_loop(shared: Arc<Shared>, mut connection: FlushConnection) {
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
        match shared.write(&connection, &frames).await {
            Ok(()) => {}
            Err(FlushFailure::Fatal(reason)) => {
                shared.poison(reason);
                return;
            }
            Err(FlushFailure::Unknown(reason)) => {
                tracing::error!(%reason, "a flush's outcome is unknown; the node refuses requests until it is resolved");
                shared.durable.send_modify(|durable| {
                    durable.unavailable = Some(Arc::from(reason));
                });
                let unknown = connection.backend.clone();
                connection = match shared.resolve(&frames, unknown).await {
                    Ok(connection) => connection,
                    Err(reason) => {
                        shared.poison(reason);
                        return;
                    }
                };
            }
        }
        shared
            .flush_micros
            .observe(started.elapsed().as_micros() as u64);
        let records: u64 = frames.iter().map(|f| f.last_lsn + 1 - f.first_lsn).sum();
        shared.batch_records.observe(records);
        let lsn = frames.last().expect("a flush writes a frame").last_lsn;
        shared.durable.send_modify(|durable| {
            durable.lsn = lsn;
            durable.unavailable = None;
        });
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

    fn writable(&self) -> Result<(), LogError> {
        let durable = self.shared.durable.borrow();
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
        let drop_partitions = format!(
            "DROP TABLE IF EXISTS {}",
            removable
                .iter()
                .map(|&segment| shared.schema.partition(shared.bucket, segment))
                .collect::<Vec<_>>()
                .join(", ")
        );
        self.runtime.block(async move {
            // One transaction: the fence's row lock is held until the partitions are gone.
            let client = shared.other().await?;
            client.batch_execute("BEGIN").await.map_err(database)?;
            let fence = shared.schema.sql(FENCE);
            let fenced_in = client
                .query_opt(&fence, &[&shared.bucket, &shared.epoch])
                .await
                .map_err(database);
            let fenced_in = match fenced_in {
                Ok(row) => row.is_some(),
                Err(error) => {
                    let _ = client.batch_execute("ROLLBACK").await;
                    return Err(error);
                }
            };
            let dropped = match fenced_in {
                true => client.batch_execute(&drop_partitions).await,
                false => Ok(()),
            };
            let ended = match dropped {
                Ok(()) => client.batch_execute("COMMIT").await,
                Err(error) => {
                    let _ = client.batch_execute("ROLLBACK").await;
                    return Err(database(error));
                }
            };
            ended.map_err(database)?;
            if !fenced_in {
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

    fn stats(&self) -> Option<LogStats> {
        Some(LogStats {
            fsync_micros: self.shared.flush_micros.snapshot(),
            batch_records: self.shared.batch_records.snapshot(),
            uncached_reads: self.shared.uncached_reads.load(Ordering::Relaxed),
        })
    }
}
