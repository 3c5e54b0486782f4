//! Opening a PostgreSQL log: connect, migrate the schema, read the receipt key, take over the
//! bucket (raise its epoch, which fences out any previous owner), then recovery reads the newest
//! snapshot and replays every later frame, in LSN order, checking that no record is missing.

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

/// The one bucket of a single node (see `docs/design/postgres.md`: buckets are the unit a
/// cluster will hand from node to node).
pub const SINGLE_NODE_BUCKET: i32 = 0;

/// Frames per batch handed from the runtime to the replaying thread.
const REPLAY_BATCH_FRAMES: usize = 256;

/// Frames after a snapshot, in LSN order (the primary key's order: segments and offsets only
/// grow), starting at the segment that holds the first record after it.
const SELECT_FRAMES_FROM: &str = "
SELECT segment, start_offset, first_lsn, last_lsn, body FROM {schema}.frame
WHERE bucket = $1 AND segment >= $2 ORDER BY segment, start_offset";

/// Every segment's extent, for the checkpoints' bookkeeping.
const SELECT_SEGMENTS: &str = "
SELECT segment, min(first_lsn), max(last_lsn),
       sum(octet_length(body))::bigint
FROM {schema}.frame WHERE bucket = $1 GROUP BY segment ORDER BY segment";

/// A PostgreSQL log taken over and about to be recovered.
pub struct PgLogOpening {
    runtime: Arc<StoreRuntime>,
    schema: Schema,
    bucket: i32,
    epoch: i64,
    key: ReceiptKey,
    connection: String,
    flush_client: Client,
    other_client: Arc<Client>,
    sizes: Sizes,
}

impl PgLogOpening {
    /// Connects to `config`'s database, creates or migrates its schema, and takes over the
    /// bucket. Fails promptly if PostgreSQL cannot be reached.
    pub fn open(config: &PgConfig) -> Result<PgLogOpening, PostgresError> {
        let schema = Schema::new(&config.schema)?;
        let runtime = Arc::new(StoreRuntime::new().map_err(PostgresError::Runtime)?);
        let (connection, name) = (config.connection.clone(), schema.clone());
        let (flush_client, other_client, key, epoch) = runtime.block(async move {
            let mut other = schema::connect(&connection).await?;
            schema::migrate(&mut other, &name).await?;
            let key = schema::receipt_key(&other, &name).await?;
            let flush = schema::connect(&connection).await?;
            let epoch = schema::claim(&other, &name, SINGLE_NODE_BUCKET).await?;
            Ok::<_, PostgresError>((flush, other, key, epoch))
        })?;
        tracing::info!(
            schema = config.schema,
            epoch,
            "took over the PostgreSQL log"
        );
        Ok(PgLogOpening {
            runtime,
            schema,
            bucket: SINGLE_NODE_BUCKET,
            epoch,
            key: ReceiptKey::new(key),
            connection: config.connection.clone(),
            flush_client,
            other_client: Arc::new(other_client),
            sizes: config.sizes,
        })
    }

    /// The receipt key kept in the schema.
    pub fn receipt_key(&self) -> ReceiptKey {
        self.key.clone()
    }

    /// The epoch this node took the bucket over with.
    pub fn epoch(&self) -> i64 {
        self.epoch
    }

    /// Streams the frames from `from_segment` on, in batches, into a channel the calling
    /// thread reads (the replay callback need not be `Send`, so it runs there).
    fn stream_frames(&self, from_segment: u64) -> Receiver<Result<Vec<Frame>, LogError>> {
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
                    batch.push(Frame {
                        segment: u32::try_from(row.get::<_, i64>(0))
                            .map_err(|_| LogError::other("a segment number past u32"))?,
                        start_offset: row.get::<_, i64>(1) as u64,
                        first_lsn: row.get::<_, i64>(2) as u64,
                        last_lsn: row.get::<_, i64>(3) as u64,
                        body: row.get(4),
                    });
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
        let from_segment = self.replay_from(snapshot_lsn)?;
        // The scan of the frames since the snapshot (and of the segments, in `resume`) may take
        // longer than a flush may: no statement timeout until the store starts.
        self.statement_timeout(Duration::ZERO)?;
        let mut next_lsn = snapshot_lsn + 1;
        for batch in self.stream_frames(from_segment) {
            for frame in batch? {
                if frame.last_lsn < next_lsn {
                    continue; // Covered by the snapshot.
                }
                if frame.first_lsn > next_lsn {
                    return Err(LogError::other(format!(
                        "the PostgreSQL log is missing records {next_lsn}..{} (before segment {} offset {})",
                        frame.first_lsn, frame.segment, frame.start_offset
                    )));
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
            }
        }
        self.resume(next_lsn - 1)
    }
}

impl PgLogOpening {
    /// Sets the readers' connection's `statement_timeout` (zero: none).
    fn statement_timeout(&self, timeout: Duration) -> Result<(), LogError> {
        let client = self.other_client.clone();
        self.runtime.block(async move {
            let sql = format!("SET statement_timeout = {}", timeout.as_millis());
            client.batch_execute(&sql).await.map_err(database)
        })
    }

    /// The segment replay starts from: the one the newest snapshot names, or the first.
    fn replay_from(&self, snapshot_lsn: Lsn) -> Result<u64, LogError> {
        if snapshot_lsn == 0 {
            return Ok(0);
        }
        let (client, schema, bucket) =
            (self.other_client.clone(), self.schema.clone(), self.bucket);
        let header = self
            .runtime
            .block(async move { crate::snapshot::newest(&client, &schema, bucket).await })?;
        Ok(header.map_or(0, |header| header.from_segment))
    }

    /// The store, appending after `tail_lsn` in a new segment: a node never appends to a segment
    /// an earlier owner wrote, so its frames' keys cannot collide with anything left behind.
    fn resume(self, tail_lsn: Lsn) -> Result<PgLog, LogError> {
        let segments = self.segment_extents()?;
        self.statement_timeout(crate::STATEMENT_TIMEOUT)?;
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
        };
        let resumed = Resumed {
            schema: self.schema,
            bucket: self.bucket,
            epoch: self.epoch,
            connection: self.connection,
            flush_client: self.flush_client,
            other_client: self.other_client,
            sizes: self.sizes,
            tail,
        };
        PgLog::start(self.runtime, resumed)
    }
}
