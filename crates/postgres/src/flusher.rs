//! The flusher: the task that writes the pending frames to PostgreSQL, one flush or (with
//! `--postgres-flushes N`) several in flight.
//!
//! A flush takes every pending frame (up to `FLUSH_BYTES_MAX`) and writes them in one fenced
//! INSERT, one round trip, on a connection of its own. While it is in flight the next frames
//! fill, and up to `flushes_in_flight` flushes run at once (the default is one; another starts
//! once the oldest has run `ANOTHER_FLUSH_AFTER`), each on its own session, so a node
//! is not bounded by one commit's latency: PostgreSQL commits concurrent sessions together
//! (one WAL flush for all of them). PostgreSQL may commit them in any order, but the durable LSN
//! is published in LSN order: it covers a flush only once it and every earlier one committed,
//! so no reply ever depends on a frame that has a gap before it. What a crash leaves after a gap
//! (flushes that committed while an earlier one did not) was never acknowledged, and the next
//! owner removes it before it writes (`opening.rs`).
//!
//! A flush whose outcome is unknown (a cut connection, a timeout) makes the store unavailable
//! and stops new flushes; every flush not known to have committed, the failed one and those
//! still in flight, is then resolved at once on a new connection: their sessions are ended
//! (so none can still commit after the check) and their frames written again with `ON CONFLICT
//! DO NOTHING`, counting those already there. A flush fenced out (zero rows) poisons the store.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use leaseq_server::log_store::LogError;
use tokio::task::JoinSet;
use tokio_postgres::{Client, Statement};

use crate::frames::Frame;
use crate::log::{database, Shared};
use crate::schema::{self, Schema};

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

/// A PostgreSQL session, as `pg_stat_activity` tells one from a later one with the same pid.
#[derive(Clone, Debug, Default)]
pub(crate) struct Backend {
    pub(crate) pid: i32,
    started: String,
}

/// A connection of the flusher's: a flush runs alone on it (nothing else does, so a flush
/// never queues behind a read or another flush), with its statements.
pub(crate) struct FlushConnection {
    client: Client,
    insert: Statement,
    resolve: Statement,
    backend: Backend,
}

impl FlushConnection {
    pub(crate) async fn new(client: Client, schema: &Schema) -> Result<FlushConnection, LogError> {
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
pub(crate) enum FlushFailure {
    /// Its outcome is unknown: resolve it.
    Unknown(String),
    /// It can never complete (fenced out): poison.
    Fatal(String),
}

/// How long after a failed attempt to open another flush connection the flusher tries again.
const CONNECT_RETRY: Duration = Duration::from_secs(1);

/// How long the oldest flush in flight must have been running before another one starts.
/// A PostgreSQL that commits faster than this gets one commit at a time: the fewest commits,
/// the least CPU per message (measured: on this machine's local PostgreSQL, four flushes started
/// at once cost 1.6-2x the PostgreSQL CPU per message and lost a quarter of the throughput).
/// A slower one (a remote server, a synchronous standby, a loaded machine) gets up to
/// `flushes_in_flight` at once, each carrying what arrived while the others wait.
pub(crate) const ANOTHER_FLUSH_AFTER: Duration = Duration::from_millis(1);

impl Shared {
    pub(crate) fn fenced_out(&self) -> FlushFailure {
        FlushFailure::Fatal(format!(
            "fenced out: the bucket's epoch is no longer {} (another node took it over)",
            self.epoch
        ))
    }

    /// Creates the partitions of the segments `frames` start (once per segment: one more round
    /// trip every 64 MiB). A node that was fenced out may create an empty one; the owner's
    /// `IF NOT EXISTS` then finds it, and nothing of the old node's is in it.
    pub(crate) async fn ensure_partitions(
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
            created.map_err(|error| {
                FlushFailure::Unknown(format!("creating a partition: {}", crate::describe(&error)))
            })?;
            self.partitions.lock().insert(segment);
        }
        Ok(())
    }

    /// Writes `frames` in one fenced INSERT on `connection`; their partitions exist already
    /// (the flusher creates them before the flush starts).
    pub(crate) async fn write(
        &self,
        connection: &FlushConnection,
        frames: &[Arc<Frame>],
    ) -> Result<(), FlushFailure> {
        let columns = FrameColumns::of(frames);
        let params = columns.params(self);
        let insert = connection.client.execute(&connection.insert, &params);
        match tokio::time::timeout(crate::FLUSH_TIMEOUT, insert).await {
            Err(_) => Err(FlushFailure::Unknown(format!(
                "a flush did not answer within {:?}",
                crate::FLUSH_TIMEOUT
            ))),
            Ok(Err(error)) => Err(FlushFailure::Unknown(format!(
                "a flush failed: {}",
                crate::describe(&error)
            ))),
            Ok(Ok(0)) => Err(self.fenced_out()),
            Ok(Ok(rows)) if rows == frames.len() as u64 => Ok(()),
            Ok(Ok(rows)) => Err(FlushFailure::Fatal(format!(
                "a flush of {} frames wrote {rows}",
                frames.len()
            ))),
        }
    }

    /// Resolves flushes of `frames` whose outcome is unknown, run by the sessions `unknown`,
    /// on a new connection, retrying until PostgreSQL answers; the new connection, or why the
    /// store must be poisoned.
    pub(crate) async fn resolve(
        &self,
        frames: &[Arc<Frame>],
        unknown: &[Backend],
    ) -> Result<FlushConnection, String> {
        let mut delay = RECONNECT_DELAY_MIN;
        loop {
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(RECONNECT_DELAY_MAX);
            match self.try_resolve(frames, unknown).await {
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
        unknown: &[Backend],
    ) -> Result<FlushConnection, FlushFailure> {
        let retry = |error: LogError| FlushFailure::Unknown(error.message);
        let client = schema::connect(&self.connection).await;
        let client = client.map_err(|error| FlushFailure::Unknown(error.to_string()))?;
        let connection = FlushConnection::new(client, &self.schema)
            .await
            .map_err(retry)?;
        // The sessions that ran the flushes must be gone, or one could still commit its frames
        // after the check below found them missing.
        for session in unknown {
            let ended = connection
                .client
                .query_opt(END_BACKEND, &[&session.pid, &session.started])
                .await
                .map_err(|error| retry(database(error)))?;
            if ended.is_some_and(|row| !row.get::<_, bool>(0)) {
                return Err(FlushFailure::Unknown(format!(
                    "the session of an unresolved flush (pid {}) is still running",
                    session.pid
                )));
            }
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
            "resolved the flushes of unknown outcome; the PostgreSQL log is available again"
        );
        Ok(connection)
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

/// One flush: its frames and the session running it, and whether PostgreSQL acknowledged it.
struct Flight {
    frames: Vec<Arc<Frame>>,
    backend: Backend,
    committed: bool,
    started: Instant,
}

/// What a flush task hands back: its place in the queue, its connection, how it ended.
type Flown = (u64, FlushConnection, Result<(), FlushFailure>);

/// The flusher's state (see the module docs); runs as one task on the store's runtime.
pub(crate) struct Flusher {
    shared: Arc<Shared>,
    /// Connections with no flush on them.
    idle: Vec<FlushConnection>,
    /// Connections open: idle, running a flush, or being opened.
    open: usize,
    /// The flushes not yet published, oldest first; `flights[0]` is number `first_flight`.
    flights: VecDeque<Flight>,
    first_flight: u64,
    running: JoinSet<Flown>,
    connecting: JoinSet<Result<FlushConnection, LogError>>,
    connect_failed: Option<Instant>,
}

impl Flusher {
    pub(crate) fn new(shared: Arc<Shared>, connection: FlushConnection) -> Flusher {
        *shared.flush_backends.lock() = vec![connection.backend.pid];
        Flusher {
            shared,
            idle: vec![connection],
            open: 1,
            flights: VecDeque::new(),
            first_flight: 0,
            running: JoinSet::new(),
            connecting: JoinSet::new(),
            connect_failed: None,
        }
    }

    /// Flushes until the store is poisoned (or dropped with its runtime).
    pub(crate) async fn run(mut self) {
        if let Err(reason) = self.flush().await {
            self.shared.poison(reason);
        }
    }

    async fn flush(&mut self) -> Result<(), String> {
        loop {
            self.dispatch().await?;
            // While a flush runs, appends do not wake the flusher (their wake-up is kept as a
            // permit): the next flush starts when one ends, or once the oldest has run for
            // ANOTHER_FLUSH_AFTER; from then on, appends wake it again.
            let now = Instant::now();
            let another_at = self.another_flush_at();
            let woken_by_appends =
                self.running.is_empty() || another_at.is_some_and(|at| at <= now);
            let timer = another_at.filter(|&at| at > now);
            tokio::select! {
                Some(flown) = self.running.join_next() => {
                    let (number, connection, result) = flown.expect("a flush task never panics");
                    match result {
                        Ok(()) => {
                            self.idle.push(connection);
                            self.flights[(number - self.first_flight) as usize].committed = true;
                            self.publish();
                        }
                        Err(FlushFailure::Fatal(reason)) => return Err(reason),
                        Err(FlushFailure::Unknown(reason)) => self.resolve(reason).await?,
                    }
                }
                Some(opened) = self.connecting.join_next() => {
                    match opened.expect("opening a connection never panics") {
                        Ok(connection) => {
                            self.shared.flush_backends.lock().push(connection.backend.pid);
                            self.idle.push(connection);
                        }
                        Err(error) => {
                            tracing::warn!(%error, "opening another flush connection failed");
                            self.open -= 1;
                            self.connect_failed = Some(Instant::now());
                        }
                    }
                }
                () = self.shared.wake.notified(), if woken_by_appends => {}
                () = tokio::time::sleep_until(timer.unwrap_or(now).into()), if timer.is_some() => {}
            }
        }
    }

    /// When another flush may start beside those running: once the oldest has run for
    /// [`ANOTHER_FLUSH_AFTER`], if there is room; `None` with nothing running (a flush may
    /// start at once) or no room.
    fn another_flush_at(&self) -> Option<Instant> {
        if self.running.len() >= self.shared.flushes_in_flight {
            return None;
        }
        let oldest = self.flights.iter().find(|flight| !flight.committed)?;
        Some(oldest.started + ANOTHER_FLUSH_AFTER)
    }

    /// Starts flushes while frames are pending, fewer than `flushes_in_flight` run, the oldest
    /// running one (if any) has run for [`ANOTHER_FLUSH_AFTER`], and a connection is idle;
    /// opens another connection if none is.
    async fn dispatch(&mut self) -> Result<(), String> {
        while self.shared.has_pending()
            && (self.running.is_empty()
                || self
                    .another_flush_at()
                    .is_some_and(|at| at <= Instant::now()))
        {
            let Some(connection) = self.idle.pop() else {
                self.open_another();
                return Ok(());
            };
            let frames = self.shared.take();
            let number = self.first_flight + self.flights.len() as u64;
            self.flights.push_back(Flight {
                frames: frames.clone(),
                backend: connection.backend.clone(),
                committed: false,
                started: Instant::now(),
            });
            // A segment's partition exists before any flush into it starts.
            if let Err(failure) = self.shared.ensure_partitions(&connection, &frames).await {
                match failure {
                    FlushFailure::Fatal(reason) => return Err(reason),
                    FlushFailure::Unknown(reason) => {
                        drop(connection);
                        self.resolve(reason).await?;
                        continue;
                    }
                }
            }
            let shared = self.shared.clone();
            self.running.spawn(async move {
                let started = Instant::now();
                let result = shared.write(&connection, &frames).await;
                if result.is_ok() {
                    shared.observe(&frames, started.elapsed());
                }
                (number, connection, result)
            });
        }
        Ok(())
    }

    fn open_another(&mut self) {
        let recently_failed = self
            .connect_failed
            .is_some_and(|at| at.elapsed() < CONNECT_RETRY);
        if self.open >= self.shared.flushes_in_flight || recently_failed {
            return;
        }
        self.open += 1;
        let shared = self.shared.clone();
        self.connecting.spawn(async move {
            let client = schema::connect(&shared.connection).await;
            let client = client.map_err(|error| LogError::other(error.to_string()))?;
            FlushConnection::new(client, &shared.schema).await
        });
    }

    /// Publishes the durable LSN up to the last of the oldest flushes that all committed.
    fn publish(&mut self) {
        let mut lsn = None;
        while self.flights.front().is_some_and(|flight| flight.committed) {
            let flight = self.flights.pop_front().expect("a flight");
            lsn = flight.frames.last().map(|frame| frame.last_lsn);
            self.first_flight += 1;
        }
        if let Some(lsn) = lsn {
            self.shared.publish_durable(lsn);
        }
    }

    /// Resolves every flush not known to have committed (the one that failed and every one
    /// still in flight, whose sessions the resolution ends), then publishes them all.
    async fn resolve(&mut self, reason: String) -> Result<(), String> {
        tracing::error!(%reason, "a flush's outcome is unknown; the node refuses requests until it is resolved");
        self.shared.set_unavailable(reason);
        // The flushes still running are abandoned (a report of one that committed meanwhile is
        // dropped too: the resolution counts its frames as there). Their sessions may still
        // commit, which is why the resolution ends them first. Their connections go with them,
        // and the idle ones too: after a cut, they are likely cut as well.
        self.running.abort_all();
        self.connecting.abort_all();
        while self.running.join_next().await.is_some() {}
        while self.connecting.join_next().await.is_some() {}
        self.idle.clear();
        let unknown: Vec<&Flight> = self.flights.iter().filter(|f| !f.committed).collect();
        let frames: Vec<Arc<Frame>> = unknown.iter().flat_map(|f| f.frames.clone()).collect();
        let sessions: Vec<Backend> = unknown.iter().map(|f| f.backend.clone()).collect();
        let connection = self.shared.resolve(&frames, &sessions).await?;
        for flight in &mut self.flights {
            flight.committed = true;
        }
        self.publish();
        *self.shared.flush_backends.lock() = vec![connection.backend.pid];
        self.idle = vec![connection];
        self.open = 1;
        self.connect_failed = None;
        self.shared.set_available();
        Ok(())
    }
}
