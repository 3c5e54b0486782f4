//! Snapshots in PostgreSQL: the checkpoint's stream of records cut into chunks of 1 MiB, each
//! one row, and a header row written last. Every write is fenced by the bucket's epoch, like a
//! flush, so an old owner can neither complete a snapshot nor overwrite the chunks of the new
//! owner's. The header row is what makes a snapshot exist: chunks without one (a checkpoint that
//! crashed) are never read and are removed by the next snapshot. The two newest are kept, so a
//! snapshot found damaged leaves an older one to recover from, as with the file log.

use std::io::Read;
use std::sync::Arc;

use leaseq_server::log_store::{LogError, Lsn, SnapshotSink, SnapshotSource};
use tokio_postgres::Client;

use crate::log::{database, PgLog, Shared};
use crate::runtime::StoreRuntime;
use crate::schema::Schema;

/// Bytes per chunk row.
const CHUNK_BYTES: usize = 1 << 20;

const INSERT_CHUNK: &str = "
WITH f AS (SELECT 1 FROM {schema}.bucket WHERE bucket = $1 AND epoch = $2 FOR SHARE)
INSERT INTO {schema}.snapshot_chunk (bucket, lsn, chunk, bytes)
SELECT $1, $3, $4, $5 FROM f
ON CONFLICT (bucket, lsn, chunk) DO UPDATE SET bytes = EXCLUDED.bytes";

const INSERT_HEADER: &str = "
WITH f AS (SELECT 1 FROM {schema}.bucket WHERE bucket = $1 AND epoch = $2 FOR SHARE)
INSERT INTO {schema}.snapshot (bucket, lsn, len_bytes, chunks, from_segment, epoch)
SELECT $1, $3, $4, $5, $6, $2 FROM f
ON CONFLICT (bucket, lsn) DO UPDATE SET len_bytes = EXCLUDED.len_bytes,
    chunks = EXCLUDED.chunks, from_segment = EXCLUDED.from_segment, epoch = EXCLUDED.epoch";

/// Removes all but the two newest snapshots, and chunks that belong to no snapshot. Off the hot
/// path: a few rows per checkpoint.
const PRUNE: &str = "
WITH keep AS (SELECT lsn FROM {schema}.snapshot WHERE bucket = $1 ORDER BY lsn DESC LIMIT 2),
     s AS (DELETE FROM {schema}.snapshot WHERE bucket = $1 AND lsn NOT IN (SELECT lsn FROM keep))
DELETE FROM {schema}.snapshot_chunk WHERE bucket = $1 AND lsn NOT IN (SELECT lsn FROM keep)";

/// A snapshot being written to PostgreSQL.
pub(crate) struct SnapshotWriter<'a> {
    log: &'a PgLog,
    lsn: Lsn,
    from_segment: u64,
    buffer: Vec<u8>,
    chunks: i32,
    len_bytes: u64,
}

impl<'a> SnapshotWriter<'a> {
    pub(crate) fn new(log: &'a PgLog, lsn: Lsn, from_segment: u64) -> SnapshotWriter<'a> {
        SnapshotWriter {
            log,
            lsn,
            from_segment,
            buffer: Vec::with_capacity(CHUNK_BYTES + (64 << 10)),
            chunks: 0,
            len_bytes: 0,
        }
    }

    fn write_chunk(&mut self) -> Result<(), LogError> {
        let shared = self.log.shared.clone();
        let bytes = std::mem::replace(&mut self.buffer, Vec::with_capacity(CHUNK_BYTES));
        let (lsn, chunk) = (self.lsn as i64, self.chunks);
        self.len_bytes += bytes.len() as u64;
        self.chunks += 1;
        self.log.runtime.block(async move {
            let sql = shared.schema.sql(INSERT_CHUNK);
            let rows = shared
                .other()
                .await?
                .execute(&sql, &[&shared.bucket, &shared.epoch, &lsn, &chunk, &bytes])
                .await
                .map_err(database)?;
            fenced(&shared, rows, "writing a snapshot")
        })
    }
}

/// Zero rows from a fenced write: another node owns the bucket, and this store must stop.
fn fenced(shared: &Shared, rows: u64, doing: &str) -> Result<(), LogError> {
    if rows > 0 {
        return Ok(());
    }
    let reason = format!("fenced out while {doing} (epoch {})", shared.epoch);
    shared.poison(reason.clone());
    Err(LogError {
        message: reason,
        poisoned: true,
        storage_full: false,
    })
}

impl SnapshotSink for SnapshotWriter<'_> {
    fn append_with(&mut self, fill: &mut dyn FnMut(&mut Vec<u8>)) -> Result<(), LogError> {
        fill(&mut self.buffer);
        if self.buffer.len() >= CHUNK_BYTES {
            self.write_chunk()?;
        }
        Ok(())
    }

    fn finish(mut self: Box<Self>) -> Result<u64, LogError> {
        if !self.buffer.is_empty() {
            self.write_chunk()?;
        }
        let shared = self.log.shared.clone();
        let (lsn, len_bytes) = (self.lsn as i64, self.len_bytes as i64);
        let (chunks, from_segment) = (self.chunks, self.from_segment as i64);
        self.log.runtime.block(async move {
            let sql = shared.schema.sql(INSERT_HEADER);
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 6] = [
                &shared.bucket,
                &shared.epoch,
                &lsn,
                &len_bytes,
                &chunks,
                &from_segment,
            ];
            let client = shared.other().await?;
            let rows = client.execute(&sql, &params).await.map_err(database)?;
            fenced(&shared, rows, "completing a snapshot")?;
            let prune = shared.schema.sql(PRUNE);
            client
                .execute(&prune, &[&shared.bucket])
                .await
                .map_err(database)?;
            Ok::<(), LogError>(())
        })?;
        Ok(self.len_bytes)
    }
}

/// The newest snapshot's header: its LSN, size, chunks and the segment replay starts from.
pub(crate) struct Header {
    pub(crate) lsn: Lsn,
    pub(crate) len_bytes: u64,
    pub(crate) chunks: i32,
    pub(crate) from_segment: u64,
    /// The epoch of the owner that wrote it.
    pub(crate) epoch: i64,
}

/// The newest complete snapshot of `bucket`, if any.
pub(crate) async fn newest(
    client: &Client,
    schema: &Schema,
    bucket: i32,
) -> Result<Option<Header>, LogError> {
    let sql = schema.sql(
        "SELECT lsn, len_bytes, chunks, from_segment, epoch FROM {schema}.snapshot
         WHERE bucket = $1 ORDER BY lsn DESC LIMIT 1",
    );
    let row = client.query_opt(&sql, &[&bucket]).await.map_err(database)?;
    Ok(row.map(|row| Header {
        lsn: row.get::<_, i64>(0) as u64,
        len_bytes: row.get::<_, i64>(1) as u64,
        chunks: row.get(2),
        from_segment: row.get::<_, i64>(3) as u64,
        epoch: row.get(4),
    }))
}

/// A snapshot read chunk by chunk (one round trip per MiB), as a stream.
struct ChunkReader {
    runtime: Arc<StoreRuntime>,
    client: Arc<Client>,
    schema: Schema,
    bucket: i32,
    header: Header,
    next_chunk: i32,
    chunk: std::io::Cursor<Vec<u8>>,
}

impl Read for ChunkReader {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        loop {
            let read = self.chunk.read(out)?;
            if read > 0 || out.is_empty() || self.next_chunk == self.header.chunks {
                return Ok(read);
            }
            let (client, bucket) = (self.client.clone(), self.bucket);
            let (lsn, chunk) = (self.header.lsn as i64, self.next_chunk);
            let sql = self.schema.sql(
                "SELECT bytes FROM {schema}.snapshot_chunk WHERE bucket = $1 AND lsn = $2 AND chunk = $3",
            );
            let bytes = self
                .runtime
                .block(async move {
                    let row = client
                        .query_opt(&sql, &[&bucket, &lsn, &chunk])
                        .await
                        .map_err(database)?;
                    row.map(|row| row.get::<_, Vec<u8>>(0)).ok_or_else(|| {
                        LogError::other(format!("snapshot {lsn} lacks chunk {chunk}"))
                    })
                })
                .map_err(std::io::Error::other)?;
            self.chunk = std::io::Cursor::new(bytes);
            self.next_chunk += 1;
        }
    }
}

/// The snapshot of `header` as a [`SnapshotSource`].
pub(crate) fn source(
    runtime: Arc<StoreRuntime>,
    client: Arc<Client>,
    schema: Schema,
    bucket: i32,
    header: Header,
) -> SnapshotSource {
    SnapshotSource {
        lsn: header.lsn,
        len_bytes: header.len_bytes,
        reader: Box::new(ChunkReader {
            runtime,
            client,
            schema,
            bucket,
            header,
            next_chunk: 0,
            chunk: std::io::Cursor::new(Vec::new()),
        }),
    }
}
