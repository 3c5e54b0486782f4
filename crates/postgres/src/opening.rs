//! Opening a PostgreSQL log: connect, migrate the schema, read the receipt key, take over the
//! bucket (raise its epoch, which fences out any previous owner), then recovery reads the newest
//! snapshot and replays every later frame, in LSN order, checking that no record is missing.
//!
//! With several flushes in flight, a crash can leave a gap: a flush that never committed, and
//! after it flushes of the same owner that did. Those later frames were never acknowledged (the
//! durable LSN never passed the gap), so replay ends at the gap and the frames after it are
//! deleted, fenced, before the new owner writes anything. Only that shape is accepted: every
//! frame after the gap must come from one owner, no older than the last frame replayed or the
//! snapshot; any other gap is a log missing records, and recovery fails.

use std::collections::BTreeMap;
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;
use std::time::Duration;

use futures_util::{pin_mut, TryStreamExt};
use leaseq_core::ReceiptKey;
use leaseq_server::log_store::{LogError, Lsn, Recoverable, Replayed, SnapshotSource};
use tokio_postgres::Client;

use crate::frames::{Frame, SegmentExtent, Tail};
use crate::log::{database, PgLog, Resumed, Sizes};
use crate::runtime::StoreRuntime;
use crate::schema::{self, Schema};
use crate::{PgConfig, PostgresError};

/// The bucket of a log of one bucket (the default; a cluster node's log). A log of `N` buckets
/// has buckets `0..N` (see `docs/design/postgres.md`, "Buckets").
pub const SINGLE_NODE_BUCKET: i32 = 0;

/// Frames per batch handed from the runtime to the replaying thread.
const REPLAY_BATCH_FRAMES: usize = 256;

/// Frames after a snapshot, in LSN order (the primary key's order: segments and offsets only
/// grow), starting at the segment that holds the first record after it.
const SELECT_FRAMES_FROM: &str = "
SELECT segment, start_offset, first_lsn, last_lsn, body, epoch FROM {schema}.frame
WHERE bucket = $1 AND segment >= $2 ORDER BY segment, start_offset";

/// Deletes what a crash left after a gap (frames from a segment on past the replayed tail),
/// fenced like a flush: nothing if the bucket's epoch is no longer ours.
const DELETE_AFTER_GAP: &str = "
WITH f AS (SELECT 1 FROM {schema}.bucket WHERE bucket = $1 AND epoch = $2 FOR SHARE)
DELETE FROM {schema}.frame x USING f
WHERE x.bucket = $1 AND x.segment >= $3 AND x.first_lsn > $4";

/// Every segment's extent, for the checkpoints' bookkeeping.
const SELECT_SEGMENTS: &str = "
SELECT segment, min(first_lsn), max(last_lsn),
       sum(octet_length(body))::bigint
FROM {schema}.frame WHERE bucket = $1 GROUP BY segment ORDER BY segment";

/// The readers' session of a node: bodies read back, snapshots, segment removals and recovery,
/// shared by every bucket's store (statements of several buckets pipeline on it; none of them
/// opens a transaction, which would take in the others'). Reconnected by whichever store finds
/// it closed first (`log::Shared::other`).
pub(crate) type Readers = Arc<tokio::sync::Mutex<Arc<Client>>>;

/// A PostgreSQL log taken over and about to be recovered: one bucket of it.
pub struct PgLogOpening {
    runtime: Arc<StoreRuntime>,
    schema: Schema,
    bucket: i32,
    epoch: i64,
    /// Whether the epoch this opening replaced was released by its owner's hand-off.
    previous_released: bool,
    key: ReceiptKey,
    connection: String,
    flush_client: Client,
    /// The readers' session as the opening found it (recovery runs on it).
    other_client: Arc<Client>,
    /// The same session, shared with the other buckets' stores once they run.
    readers: Readers,
    sizes: Sizes,
    flushes_in_flight: usize,
}

impl PgLogOpening {
    /// Connects to `config`'s database, creates or migrates its schema, and takes over its one
    /// bucket. Fails promptly if PostgreSQL cannot be reached; refuses a `config` or a log of
    /// several buckets ([`PgLogOpening::open_buckets`] opens those).
    pub fn open(config: &PgConfig) -> Result<PgLogOpening, PostgresError> {
        if config.buckets != 1 {
            return Err(PostgresError::Config(format!(
                "a log of {} buckets opens with PgLogOpening::open_buckets",
                config.buckets
            )));
        }
        let mut openings = PgLogOpening::open_buckets(config)?;
        Ok(openings.pop().expect("a log of one bucket has one"))
    }

    /// Connects to `config`'s database, creates or migrates its schema, checks the log's
    /// bucket count against `config.buckets` (recording it if the log is new), and takes over
    /// every bucket, in order: one opening per bucket, each with its own epoch and flush
    /// session. They share the store's runtime and the readers' session, so a node of `N`
    /// buckets holds `N` flush sessions (up to `N * flushes_in_flight` under load) and one
    /// more. Recover them one after the other: their replays share that session and set its
    /// statement timeout.
    pub fn open_buckets(config: &PgConfig) -> Result<Vec<PgLogOpening>, PostgresError> {
        let all: Vec<u32> = (0..config.buckets).collect();
        PgLogOpening::open_some_buckets(config, &all)
    }

    /// [`PgLogOpening::open_buckets`] for the `served` buckets of the log only (a cluster node
    /// takes its buckets over one at a time), in the order given.
    pub fn open_some_buckets(
        config: &PgConfig,
        served: &[u32],
    ) -> Result<Vec<PgLogOpening>, PostgresError> {
        if !(1..=crate::BUCKETS_MAX).contains(&config.buckets) {
            return Err(PostgresError::Config(format!(
                "a log has 1 to {} buckets, not {}",
                crate::BUCKETS_MAX,
                config.buckets
            )));
        }
        let schema = Schema::new(&config.schema)?;
        let runtime = Arc::new(StoreRuntime::new().map_err(PostgresError::Runtime)?);
        let (connection, name) = (config.connection.clone(), schema.clone());
        let (owner, configured) = (config.node.clone(), config.buckets);
        if let Some(bucket) = served.iter().find(|bucket| **bucket >= configured) {
            return Err(PostgresError::Config(format!(
                "bucket {bucket} of a log of {configured}"
            )));
        }
        let buckets: Vec<i32> = served.iter().map(|bucket| *bucket as i32).collect();
        let opened = buckets.clone();
        let (flush_clients, other_client, key, claims) = runtime.block(async move {
            let mut other = schema::connect(&connection).await?;
            schema::migrate(&mut other, &name).await?;
            let key = schema::receipt_key(&other, &name).await?;
            let recorded = schema::bucket_count(&other, &name, configured).await?;
            if recorded != configured {
                return Err(PostgresError::BucketCount {
                    schema: name.name().to_string(),
                    recorded,
                    configured,
                });
            }
            if owner.is_none() {
                refuse_a_live_cluster(&other, &name, 0..configured as i32).await?;
            }
            let flushes = buckets.iter().map(|_| schema::connect(&connection));
            let flushes = futures_util::future::try_join_all(flushes).await?;
            let mut claims = Vec::with_capacity(flushes.len());
            for &bucket in &buckets {
                claims.push(schema::claim(&other, &name, bucket, owner.as_ref()).await?);
            }
            Ok::<_, PostgresError>((flushes, other, key, claims))
        })?;
        let epochs: Vec<i64> = claims.iter().map(|claimed| claimed.epoch).collect();
        tracing::info!(
            schema = config.schema,
            ?epochs,
            "took over the PostgreSQL log"
        );
        let other_client = Arc::new(other_client);
        let readers: Readers = Arc::new(tokio::sync::Mutex::new(other_client.clone()));
        let openings = opened
            .into_iter()
            .zip(flush_clients.into_iter().zip(claims))
            .map(|(bucket, (flush_client, claimed))| PgLogOpening {
                runtime: runtime.clone(),
                schema: schema.clone(),
                bucket,
                epoch: claimed.epoch,
                previous_released: claimed.previous_released,
                key: ReceiptKey::new(key),
                connection: config.connection.clone(),
                flush_client,
                other_client: other_client.clone(),
                readers: readers.clone(),
                sizes: config.sizes,
                flushes_in_flight: config.flushes_in_flight,
            })
            .collect();
        Ok(openings)
    }

    /// The bucket this opening took over.
    pub fn bucket(&self) -> u32 {
        self.bucket as u32
    }

    /// The receipt key kept in the schema.
    pub fn receipt_key(&self) -> ReceiptKey {
        self.key.clone()
    }

    /// The epoch this node took the bucket over with.
    pub fn epoch(&self) -> i64 {
        self.epoch
    }

    /// Whether the owner of the epoch this node replaced released the bucket at the end of a
    /// hand-off (a cluster node then serves without `cluster::serving_delay`'s wait).
    pub fn previous_released(&self) -> bool {
        self.previous_released
    }

    /// Streams the frames from `from_segment` on with their epochs, in batches, into a channel
    /// the calling thread reads (the replay callback need not be `Send`, so it runs there).
    fn stream_frames(&self, from_segment: u64) -> Receiver<Result<Vec<(Frame, i64)>, LogError>> {
        let (sender, receiver) = sync_channel(4);
        let (client, sql, bucket) = (
            self.other_client.clone(),
            self.schema.sql(SELECT_FRAMES_FROM),
            self.bucket,
        );
        self.runtime.handle().spawn(async move {
            let result: Result<(), LogError> = async {
                let from = from_segment as i64;
                let params: [&(dyn tokio_postgres::types::ToSql + Sync); 2] = [&bucket, &from];
                let rows = client.query_raw(&sql, params).await.map_err(database)?;
                pin_mut!(rows);
                let mut batch = Vec::with_capacity(REPLAY_BATCH_FRAMES);
                while let Some(row) = rows.try_next().await.map_err(database)? {
                    let frame = Frame {
                        segment: u32::try_from(row.get::<_, i64>(0))
                            .map_err(|_| LogError::other("a segment number past u32"))?,
                        start_offset: row.get::<_, i64>(1) as u64,
                        first_lsn: row.get::<_, i64>(2) as u64,
                        last_lsn: row.get::<_, i64>(3) as u64,
                        body: row.get(4),
                    };
                    batch.push((frame, row.get::<_, i64>(5)));
                    if batch.len() == REPLAY_BATCH_FRAMES {
                        let full =
                            std::mem::replace(&mut batch, Vec::with_capacity(REPLAY_BATCH_FRAMES));
                        if sender.send(Ok(full)).is_err() {
                            return Ok(());
                        }
                    }
                }
                let _ = sender.send(Ok(batch));
                Ok(())
            }
            .await;
            if let Err(error) = result {
                let _ = sender.send(Err(error));
            }
        });
        receiver
    }

    /// Every segment's extent, by number.
    fn segment_extents(&self) -> Result<BTreeMap<u64, SegmentExtent>, LogError> {
        let (client, sql, bucket) = (
            self.other_client.clone(),
            self.schema.sql(SELECT_SEGMENTS),
            self.bucket,
        );
        self.runtime.block(async move {
            let rows = client.query(&sql, &[&bucket]).await.map_err(database)?;
            Ok(rows
                .iter()
                .map(|row| {
                    let extent = SegmentExtent {
                        first_lsn: row.get::<_, i64>(1) as u64,
                        end_lsn: row.get::<_, i64>(2) as u64 + 1,
                        size_bytes: row.get::<_, i64>(3) as u64,
                    };
                    (row.get::<_, i64>(0) as u64, extent)
                })
                .collect())
        })
    }
}

/// Refuses to open a log whose cluster owner holds its lock: a single node would take the log
/// over from a running cluster (fencing its owner), and the cluster would take it back. Every
/// bucket is checked, not only bucket 0: a cluster serves one bucket today, so only bucket 0
/// can be owned (and a log a cluster ran on records one bucket), but once a cluster serves
/// several, any of them may be; a check per bucket costs one statement at start-up.
async fn refuse_a_live_cluster(
    client: &Client,
    schema: &Schema,
    buckets: std::ops::Range<i32>,
) -> Result<(), PostgresError> {
    for bucket in buckets {
        if let Some(node) = schema::live_cluster_owner(client, schema, bucket).await? {
            return Err(PostgresError::Config(format!(
                "cluster node {node:?} owns the log in this schema: start this node with \
                 --cluster true to join the cluster, or use another --postgres-schema"
            )));
        }
    }
    Ok(())
}

impl Recoverable for PgLogOpening {
    type Store = PgLog;

    fn latest_snapshot(&mut self) -> Result<Option<SnapshotSource>, LogError> {
        let (client, schema, bucket) =
            (self.other_client.clone(), self.schema.clone(), self.bucket);
        let header = self
            .runtime
            .block(async move { crate::snapshot::newest(&client, &schema, bucket).await })?;
        Ok(header.map(|header| {
            crate::snapshot::source(
                self.runtime.clone(),
                self.other_client.clone(),
                self.schema.clone(),
                self.bucket,
                header,
            )
        }))
    }

    fn replay(
        self,
        snapshot_lsn: Lsn,
        apply: &mut dyn FnMut(Replayed<'_>) -> Result<(), String>,
    ) -> Result<PgLog, LogError> {
        // Replay starts at the segment the snapshot names (or the first).
        let header = self.snapshot_header(snapshot_lsn)?;
        let from_segment = header.as_ref().map_or(0, |header| header.from_segment);
        // The scan of the frames since the snapshot (and of the segments, in `resume`) may take
        // longer than a flush may: no statement timeout until the store starts.
        self.statement_timeout(Duration::ZERO)?;
        let mut next_lsn = snapshot_lsn + 1;
        // The epoch of the last frame replayed (or of the snapshot), and where a gap began.
        let mut last_epoch = header.map_or(0, |header| header.epoch);
        let mut gap: Option<Gap> = None;
        for batch in self.stream_frames(from_segment) {
            for (frame, epoch) in batch? {
                if let Some(gap) = &mut gap {
                    gap.left_behind(&frame, epoch)?;
                    continue;
                }
                if frame.last_lsn < next_lsn {
                    continue; // Covered by the snapshot.
                }
                if frame.first_lsn > next_lsn {
                    let started = Gap::new(next_lsn, &frame, epoch, last_epoch)?;
                    gap = Some(started);
                    continue;
                }
                for (lsn, bytes, location) in frame.records()? {
                    if lsn < next_lsn {
                        continue;
                    }
                    apply(Replayed {
                        bytes,
                        location: Some(location),
                    })
                    .map_err(|error| LogError::other(format!("replaying record {lsn}: {error}")))?;
                    next_lsn = lsn + 1;
                }
                last_epoch = last_epoch.max(epoch);
            }
        }
        if let Some(gap) = gap {
            self.delete_after_gap(&gap)?;
        }
        self.resume(next_lsn - 1)
    }
}

/// Where replay found a gap, and what lies after it: flushes of one owner that committed
/// while an earlier one of its did not, when it crashed (see the module docs).
struct Gap {
    /// The first LSN missing.
    missing: Lsn,
    segment: u32,
    epoch: i64,
    frames: u64,
}

impl Gap {
    fn new(missing: Lsn, frame: &Frame, epoch: i64, last_epoch: i64) -> Result<Gap, LogError> {
        let gap = Gap {
            missing,
            segment: frame.segment,
            epoch,
            frames: 0,
        };
        if epoch < last_epoch {
            return Err(gap.missing_records(frame));
        }
        Ok(gap)
    }

    /// Accepts a frame after the gap if the same owner wrote it, later in the log.
    fn left_behind(&mut self, frame: &Frame, epoch: i64) -> Result<(), LogError> {
        if epoch != self.epoch || frame.first_lsn <= self.missing {
            return Err(self.missing_records(frame));
        }
        self.frames += 1;
        Ok(())
    }

    fn missing_records(&self, frame: &Frame) -> LogError {
        LogError::other(format!(
            "the PostgreSQL log is missing records from {} (before segment {} offset {}, written \
             under epoch {}), and what follows is not what a crash of one owner leaves",
            self.missing, frame.segment, frame.start_offset, self.epoch
        ))
    }
}

impl PgLogOpening {
    /// The header of the newest snapshot, if recovery loaded one (`lsn` > 0).
    fn snapshot_header(&self, lsn: Lsn) -> Result<Option<crate::snapshot::Header>, LogError> {
        if lsn == 0 {
            return Ok(None);
        }
        let (client, schema, bucket) =
            (self.other_client.clone(), self.schema.clone(), self.bucket);
        self.runtime
            .block(async move { crate::snapshot::newest(&client, &schema, bucket).await })
    }

    /// Deletes the frames a crash left after `gap`, fenced: fails if another node took the
    /// bucket over meanwhile.
    fn delete_after_gap(&self, gap: &Gap) -> Result<(), LogError> {
        let (client, sql) = (self.other_client.clone(), self.schema.sql(DELETE_AFTER_GAP));
        let (bucket, epoch) = (self.bucket, self.epoch);
        let (segment, missing) = (i64::from(gap.segment), gap.missing as i64);
        let deleted = self.runtime.block(async move {
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
                [&bucket, &epoch, &segment, &missing];
            client.execute(&sql, &params).await.map_err(database)
        })?;
        // One frame began the gap; `gap.frames` followed it.
        if deleted != gap.frames + 1 {
            return Err(LogError::other(format!(
                "deleting the {} frames left after a gap at record {} removed {deleted}: \
                 fenced out, or the log changed under recovery",
                gap.frames + 1,
                gap.missing
            )));
        }
        tracing::warn!(
            missing = gap.missing,
            frames = deleted,
            "removed frames of flushes never acknowledged, left after a gap by a crash"
        );
        Ok(())
    }

    /// The placements of the bucket's names and those of queues placed in it
    /// (`LogStore::placements`), read after the bucket was taken over: none of its names can
    /// be placed under an older epoch from now on.
    fn placements(&self) -> Result<Vec<(Arc<str>, u32)>, LogError> {
        let client = self.other_client.clone();
        let sql = self
            .schema
            .sql("SELECT name, bucket FROM {schema}.placement WHERE home = $1 OR bucket = $1");
        let bucket = self.bucket;
        self.runtime.block(async move {
            let rows = client.query(&sql, &[&bucket]).await.map_err(database)?;
            Ok(crate::schema::placements(&rows))
        })
    }

    /// Sets the readers' connection's `statement_timeout` (zero: none).
    fn statement_timeout(&self, timeout: Duration) -> Result<(), LogError> {
        let client = self.other_client.clone();
        self.runtime.block(async move {
            let sql = format!("SET statement_timeout = {}", timeout.as_millis());
            client.batch_execute(&sql).await.map_err(database)
        })
    }

    /// The store, appending after `tail_lsn` in a new segment: a node never appends to a segment
    /// an earlier owner wrote, so its frames' keys cannot collide with anything left behind.
    fn resume(self, tail_lsn: Lsn) -> Result<PgLog, LogError> {
        let segments = self.segment_extents()?;
        self.statement_timeout(crate::STATEMENT_TIMEOUT)?;
        let placements = self.placements()?;
        let stored_tail = segments.values().map(|e| e.end_lsn - 1).max().unwrap_or(0);
        if stored_tail > tail_lsn {
            return Err(LogError::other(format!(
                "the PostgreSQL log holds records up to {stored_tail}, but replay ended at {tail_lsn}"
            )));
        }
        let segment = segments.keys().next_back().map_or(Ok(1), |&last| {
            u32::try_from(last + 1).map_err(|_| LogError::other("segment numbers ran out"))
        })?;
        let tail = Tail {
            tail_lsn,
            segment,
            next_offset: 0,
            pending: Default::default(),
            segments,
            frame_capacity: 0,
            scratch: Vec::new(),
        };
        let resumed = Resumed {
            schema: self.schema,
            bucket: self.bucket,
            epoch: self.epoch,
            connection: self.connection,
            flush_client: self.flush_client,
            readers: self.readers,
            sizes: self.sizes,
            flushes_in_flight: self.flushes_in_flight,
            tail,
            placements,
        };
        PgLog::start(self.runtime, resumed)
    }
}
