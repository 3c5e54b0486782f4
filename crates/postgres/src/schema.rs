//! The schema: its tables, the versioned runner that creates and migrates them at start-up, and
//! the few statements a node runs once (the receipt key, the claim of a bucket's epoch).
//!
//! ```text
//! schema_version (version)                          one row per migration applied
//! receipt_key    (id = 1, key bytea[16])            seals receipts; shared by every node
//! bucket         (bucket, epoch, owner,             the fence: the owner's epoch; the owning
//!                 owner_advertise, owned_since,      cluster node and where it listens (NULL on
//!                 released_epoch)                    a single node); the last epoch whose owner
//!                                                    released the bucket after a hand-off
//! node           (node_id, advertise, started_at,   the cluster's nodes, as they last said
//!                 seen_at)                           (`leaseq cluster status`)
//! frame          (bucket, segment, start_offset,    one row per flush: the records of a group
//!                 first_lsn, last_lsn, epoch, body)  commit, each as u32 LE length + codec bytes;
//!                                                    one partition per (bucket, segment),
//!                                                    `frame_b<bucket>_s<segment>`
//! snapshot       (bucket, lsn, len_bytes, chunks,   a complete snapshot (its header row is
//!                 from_segment, epoch)               written last, fenced)
//! snapshot_chunk (bucket, lsn, chunk, bytes)        the snapshot's bytes, in 1 MiB chunks
//! settings       (id = 1, buckets)                  the bucket count, fixed for the log's life
//! placement      (name, home, bucket, placed_at)    queues living outside their name's bucket
//!                                                    (`home`): written once, fenced by home's
//!                                                    epoch, never changed
//! ```
//! Migrations run in one transaction under an advisory lock (two nodes starting at once
//! serialize), and a node refuses a schema whose version is newer than the newest it knows: an
//! older binary must not write into tables whose meaning it does not know.

use tokio_postgres::{Client, NoTls};

use crate::PostgresError;

/// The migrations, in order; `{schema}` stands for the quoted schema name. Migration `n` (from 1)
/// brings the schema to version `n`. Never edit one that has shipped: add the next.
const MIGRATIONS: &[&str] = &[
    r#"
CREATE TABLE {schema}.receipt_key (
    id int PRIMARY KEY CHECK (id = 1),
    key bytea NOT NULL CHECK (octet_length(key) = 16)
);
CREATE TABLE {schema}.bucket (
    bucket int PRIMARY KEY,
    epoch bigint NOT NULL
);
CREATE TABLE {schema}.frame (
    bucket int NOT NULL,
    segment bigint NOT NULL,
    start_offset bigint NOT NULL,
    first_lsn bigint NOT NULL,
    last_lsn bigint NOT NULL,
    epoch bigint NOT NULL,
    body bytea NOT NULL,
    PRIMARY KEY (bucket, segment, start_offset)
);
CREATE TABLE {schema}.snapshot (
    bucket int NOT NULL,
    lsn bigint NOT NULL,
    len_bytes bigint NOT NULL,
    chunks int NOT NULL,
    from_segment bigint NOT NULL,
    epoch bigint NOT NULL,
    PRIMARY KEY (bucket, lsn)
);
CREATE TABLE {schema}.snapshot_chunk (
    bucket int NOT NULL,
    lsn bigint NOT NULL,
    chunk int NOT NULL,
    bytes bytea NOT NULL,
    PRIMARY KEY (bucket, lsn, chunk)
);
"#,
    // 2: `frame` partitioned by (bucket, segment), one partition per segment, so that removing a
    // segment is a DROP TABLE that leaves no dead tuples. Existing frames move into partitions.
    r#"
ALTER TABLE {schema}.frame RENAME TO frame_v1;
ALTER INDEX {schema}.frame_pkey RENAME TO frame_v1_pkey;
CREATE TABLE {schema}.frame (
    bucket int NOT NULL,
    segment bigint NOT NULL,
    start_offset bigint NOT NULL,
    first_lsn bigint NOT NULL,
    last_lsn bigint NOT NULL,
    epoch bigint NOT NULL,
    body bytea NOT NULL,
    PRIMARY KEY (bucket, segment, start_offset)
) PARTITION BY RANGE (bucket, segment);
DO $$
DECLARE r record;
BEGIN
    FOR r IN SELECT DISTINCT bucket, segment FROM {schema}.frame_v1 LOOP
        EXECUTE format('CREATE TABLE {schema}.%I PARTITION OF {schema}.frame '
                       'FOR VALUES FROM (%s, %s) TO (%s, %s)',
                       'frame_b' || r.bucket || '_s' || r.segment,
                       r.bucket, r.segment, r.bucket, r.segment + 1);
    END LOOP;
END
$$;
INSERT INTO {schema}.frame SELECT * FROM {schema}.frame_v1;
DROP TABLE {schema}.frame_v1;
"#,
    // 3: the cluster. Which node owns a bucket (written by its claim, in the same statement that
    // raises the epoch) and where the node listens, so that standbys forward to it; and the
    // nodes, for operators. Liveness is a session advisory lock, not a row (see
    // `docs/design/cluster.md`), so nothing here is updated on the hot path.
    r#"
ALTER TABLE {schema}.bucket
    ADD COLUMN owner text,
    ADD COLUMN owner_advertise text,
    ADD COLUMN owned_since timestamptz;
CREATE TABLE {schema}.node (
    node_id text PRIMARY KEY,
    advertise text NOT NULL,
    started_at timestamptz NOT NULL,
    seen_at timestamptz NOT NULL
);
"#,
    // 4: the release of a hand-off. An owner that handed off, once it can let no answer leave,
    // writes its epoch here (on its lock session, fenced by that epoch) before it lets the lock
    // go; a claim that finds the epoch it replaces released serves without waiting out the old
    // owner's confirmation window (`docs/design/cluster.md`, "The fencing protocol"). Only ever
    // compared with the epoch a claim replaces, so an earlier release never counts.
    r#"
ALTER TABLE {schema}.bucket ADD COLUMN released_epoch bigint;
"#,
    // 5: frames and snapshot chunks compressed with lz4 instead of pglz, PostgreSQL's default
    // for a value TOAST compresses (a frame of a flush is one, from 2 KiB). Measured side by
    // side, batches of 10 x 1 KiB: 13-29% more msg/s, 18-31% less PostgreSQL CPU per message
    // (`docs/design/postgres.md`, "Compression"). Existing values stay as they are; the
    // setting does not recurse into partitions, so those of `frame` that exist get it here,
    // and those created later inherit it. A server built without lz4 (or older than
    // PostgreSQL 14, which has no `SET COMPRESSION`) keeps pglz: the statements run through
    // EXECUTE so that either refusal is caught here.
    r#"
DO $$
DECLARE r record;
BEGIN
    EXECUTE 'ALTER TABLE {schema}.frame ALTER COLUMN body SET COMPRESSION lz4';
    FOR r IN SELECT inhrelid::regclass::text AS partition FROM pg_inherits
             WHERE inhparent = '{schema}.frame'::regclass LOOP
        EXECUTE 'ALTER TABLE ' || r.partition || ' ALTER COLUMN body SET COMPRESSION lz4';
    END LOOP;
    EXECUTE 'ALTER TABLE {schema}.snapshot_chunk ALTER COLUMN bytes SET COMPRESSION lz4';
EXCEPTION WHEN feature_not_supported OR syntax_error OR undefined_object THEN
    RAISE NOTICE 'lz4 compression is not available on this server: the log keeps pglz';
END
$$;
"#,
    // 6: the bucket count, fixed for the life of the log (a queue's bucket is its name's hash
    // modulo the count, so another count would look for queues where they are not). A log that
    // already holds anything (a bucket taken over, a frame, a snapshot) was written by a node
    // of one bucket, the only kind there was; a new log gets its count from the first node
    // that opens it (`bucket_count`). Its own table, of one row, rather than a column of
    // `bucket`: the count is the log's, not a bucket's, and it must exist before any bucket row.
    r#"
CREATE TABLE {schema}.settings (
    id int PRIMARY KEY CHECK (id = 1),
    buckets int NOT NULL CHECK (buckets BETWEEN 1 AND 65536)
);
INSERT INTO {schema}.settings (id, buckets)
SELECT 1, 1 WHERE EXISTS (SELECT 1 FROM {schema}.bucket)
    OR EXISTS (SELECT 1 FROM {schema}.frame)
    OR EXISTS (SELECT 1 FROM {schema}.snapshot);
"#,
    // 7: placements. A queue created with a dead-letter queue of another bucket lives in that
    // bucket rather than its name's (`leaseq_server::placements`). Written once per such
    // queue by the owner of the name's bucket (`home`), fenced by that bucket's epoch, never
    // updated or deleted: a placement is for good. Every node reads the table to route
    // requests; the owner of `home` reads its rows when it takes the bucket over.
    r#"
CREATE TABLE {schema}.placement (
    name text PRIMARY KEY,
    home int NOT NULL,
    bucket int NOT NULL,
    placed_at timestamptz NOT NULL DEFAULT clock_timestamp()
);
"#,
];

/// The placements (`name`, `bucket`) that rows of the `placement` table hold.
pub(crate) fn placements(rows: &[tokio_postgres::Row]) -> Vec<(std::sync::Arc<str>, u32)> {
    rows.iter()
        .map(|row| {
            let name: &str = row.get("name");
            (
                std::sync::Arc::from(name),
                row.get::<_, i32>("bucket") as u32,
            )
        })
        .collect()
}

/// The newest schema version this build knows.
pub const SCHEMA_VERSION: i32 = MIGRATIONS.len() as i32;

/// A schema name, checked and quoted, for pasting into statements.
#[derive(Clone, Debug)]
pub(crate) struct Schema {
    name: String,
}

impl Schema {
    /// `name` if it is a plain identifier (letters, digits, underscores; not starting with a
    /// digit; at most 63 bytes, PostgreSQL's limit).
    pub(crate) fn new(name: &str) -> Result<Schema, PostgresError> {
        let plain = !name.is_empty()
            && name.len() <= 63
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !plain {
            return Err(PostgresError::Config(format!(
                "invalid schema name {name:?}: use letters, digits and underscores"
            )));
        }
        Ok(Schema {
            name: name.to_string(),
        })
    }

    /// The name, unquoted.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// `sql` with `{schema}` replaced by the quoted name.
    pub(crate) fn sql(&self, sql: &str) -> String {
        sql.replace("{schema}", &format!("\"{}\"", self.name))
    }

    /// The partition of `frame` holding `segment` of `bucket`, quoted.
    pub(crate) fn partition(&self, bucket: i32, segment: u64) -> String {
        format!("\"{}\".\"frame_b{bucket}_s{segment}\"", self.name)
    }

    /// The statement creating that partition if it does not exist.
    pub(crate) fn create_partition(&self, bucket: i32, segment: u64) -> String {
        format!(
            "CREATE TABLE IF NOT EXISTS {} PARTITION OF {} FOR VALUES FROM ({bucket}, {segment}) TO ({bucket}, {})",
            self.partition(bucket, segment),
            self.sql("{schema}.frame"),
            segment + 1
        )
    }

    /// The advisory lock key of migrations on this schema (FNV-1a of its name, so two schemas
    /// migrate independently).
    fn lock_key(&self) -> i64 {
        fnv1a(self.name.bytes())
    }

    /// The advisory lock key of `bucket`'s ownership: held, on a session of its own, by the one
    /// node that owns the bucket (FNV-1a of the schema's name and the bucket, so it meets
    /// neither the migrations' key nor another schema's).
    pub(crate) fn ownership_key(&self, bucket: i32) -> i64 {
        let text = format!("{}\0bucket\0{bucket}", self.name);
        fnv1a(text.bytes())
    }
}

/// FNV-1a, 64 bits, as a PostgreSQL `bigint`.
fn fnv1a(bytes: impl Iterator<Item = u8>) -> i64 {
    let hash = bytes.fold(0xcbf2_9ce4_8422_2325u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    });
    hash as i64
}

/// Connects with `config` (a libpq-style string) and spawns the connection onto the current
/// runtime. The connect attempt is bounded, so a PostgreSQL that is down fails the start promptly.
pub(crate) async fn connect(config: &str) -> Result<Client, PostgresError> {
    connect_watched(config)
        .await
        .map(|(client, _closed)| client)
}

/// [`connect`], and a receiver that completes the moment the connection ends (PostgreSQL ended
/// the session, the socket broke): sooner than the next statement on it would fail.
pub(crate) async fn connect_watched(
    config: &str,
) -> Result<(Client, tokio::sync::oneshot::Receiver<()>), PostgresError> {
    let mut parsed: tokio_postgres::Config = config.parse().map_err(|error| {
        PostgresError::Config(format!(
            "the connection string: {}",
            crate::describe(&error)
        ))
    })?;
    if parsed.get_connect_timeout().is_none() {
        parsed.connect_timeout(crate::CONNECT_TIMEOUT);
    }
    // Operators find the node's sessions in pg_stat_activity by name.
    if parsed.get_application_name().is_none() {
        parsed.application_name("leaseq");
    }
    // Keepalives find a peer that vanished without a word (a pulled cable, a dead host).
    parsed.keepalives(true);
    parsed.keepalives_idle(std::time::Duration::from_secs(10));
    let connecting = parsed.connect(NoTls);
    let (client, connection) = tokio::time::timeout(crate::CONNECT_TIMEOUT, connecting)
        .await
        .map_err(|_| PostgresError::Connect("timed out".into()))?
        .map_err(|error| PostgresError::Connect(crate::describe(&error)))?;
    let (closed_tx, closed) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        if let Err(error) = connection.await {
            tracing::warn!(error = %crate::describe(&error), "a PostgreSQL connection of the log ended");
        }
        let _ = closed_tx.send(());
    });
    // A server that stops answering fails the statement rather than holding a flush forever.
    let timeout_ms = crate::STATEMENT_TIMEOUT.as_millis();
    client
        .batch_execute(&format!("SET statement_timeout = {timeout_ms}"))
        .await?;
    Ok((client, closed))
}

/// Creates or migrates the schema to [`SCHEMA_VERSION`]; refuses a newer one. Returns the
/// version found before migrating.
pub(crate) async fn migrate(client: &mut Client, schema: &Schema) -> Result<i32, PostgresError> {
    migrate_to(client, schema, MIGRATIONS).await
}

async fn migrate_to(
    client: &mut Client,
    schema: &Schema,
    migrations: &[&str],
) -> Result<i32, PostgresError> {
    let transaction = client.transaction().await?;
    transaction
        .execute("SELECT pg_advisory_xact_lock($1)", &[&schema.lock_key()])
        .await?;
    transaction
        .batch_execute(&schema.sql(
            "CREATE SCHEMA IF NOT EXISTS {schema};
             CREATE TABLE IF NOT EXISTS {schema}.schema_version (
                 version int PRIMARY KEY,
                 applied_at timestamptz NOT NULL DEFAULT now()
             );",
        ))
        .await?;
    let found: i32 = transaction
        .query_one(
            &schema.sql("SELECT coalesce(max(version), 0) FROM {schema}.schema_version"),
            &[],
        )
        .await?
        .get(0);
    let known = migrations.len() as i32;
    if found > known {
        return Err(PostgresError::SchemaTooNew { found, known });
    }
    for (index, migration) in migrations.iter().enumerate().skip(found as usize) {
        transaction.batch_execute(&schema.sql(migration)).await?;
        let version = index as i32 + 1;
        transaction
            .execute(
                &schema.sql("INSERT INTO {schema}.schema_version (version) VALUES ($1)"),
                &[&version],
            )
            .await?;
        tracing::info!(version, "applied PostgreSQL schema migration");
    }
    transaction.commit().await?;
    Ok(found)
}

/// The receipt key: drawn by whichever node creates the schema first, read by every other.
pub(crate) async fn receipt_key(
    client: &Client,
    schema: &Schema,
) -> Result<[u8; 16], PostgresError> {
    let drawn: [u8; 16] = rand::random();
    client
        .execute(
            &schema.sql(
                "INSERT INTO {schema}.receipt_key (id, key) VALUES (1, $1) ON CONFLICT (id) DO NOTHING",
            ),
            &[&drawn.as_slice()],
        )
        .await?;
    let row = client
        .query_one(
            &schema.sql("SELECT key FROM {schema}.receipt_key WHERE id = 1"),
            &[],
        )
        .await?;
    let key: &[u8] = row.get(0);
    key.try_into()
        .map_err(|_| PostgresError::Config("the stored receipt key is not 16 bytes".into()))
}

/// The log's bucket count: the one recorded, or `configured` if the log has none yet (a new
/// log: this node is its first, and its count is recorded for good). Two nodes creating a log
/// at once record one count, whichever inserts first; the other reads it back and is refused
/// by its caller if it differs.
pub(crate) async fn bucket_count(
    client: &Client,
    schema: &Schema,
    configured: u32,
) -> Result<u32, PostgresError> {
    let configured = i32::try_from(configured)
        .map_err(|_| PostgresError::Config(format!("{configured} buckets is too many")))?;
    client
        .execute(
            &schema.sql(
                "INSERT INTO {schema}.settings (id, buckets) VALUES (1, $1) ON CONFLICT (id) DO NOTHING",
            ),
            &[&configured],
        )
        .await?;
    let row = client
        .query_one(
            &schema.sql("SELECT buckets FROM {schema}.settings WHERE id = 1"),
            &[],
        )
        .await?;
    let recorded: i32 = row.get(0);
    u32::try_from(recorded)
        .map_err(|_| PostgresError::Config(format!("the log records {recorded} buckets")))
}

/// The condition, in SQL over `pg_locks` as `l`, that `l` is the granted ownership lock whose
/// key is `$1` in this database (an advisory lock's 64-bit key is split into `classid`, the high
/// half, and `objid`).
pub(crate) const OWNERSHIP_LOCK_HELD: &str = "l.locktype = 'advisory' AND l.granted
    AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
    AND ((l.classid::bigint << 32) | l.objid::bigint) = $1";

/// The cluster node that owns `bucket` and holds its ownership lock right now, if one does.
pub(crate) async fn live_cluster_owner(
    client: &Client,
    schema: &Schema,
    bucket: i32,
) -> Result<Option<String>, PostgresError> {
    let sql = schema.sql(&format!(
        "SELECT b.owner FROM {{schema}}.bucket b WHERE b.bucket = $2 AND b.owner IS NOT NULL
         AND EXISTS (SELECT 1 FROM pg_locks l WHERE {OWNERSHIP_LOCK_HELD})"
    ));
    let row = client
        .query_opt(&sql, &[&schema.ownership_key(bucket), &bucket])
        .await?;
    Ok(row.map(|row| row.get(0)))
}

/// What a claim found and did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Claimed {
    /// The epoch the claim raised the bucket to.
    pub epoch: i64,
    /// Whether the owner of the epoch this claim replaced released the bucket after its
    /// hand-off (`cluster::ownership::release`): it can answer nothing any more, so the new
    /// owner need not wait out its confirmation window.
    pub previous_released: bool,
}

/// Takes over `bucket`: raises its epoch (creating it at 1), records the new owner (`None` on a
/// single node) and returns the new epoch, and whether the epoch it replaced was released. A
/// cluster node's claim leaves `owned_since` empty until it serves
/// (`cluster::ownership::serving`): standbys forward only to a serving owner, not to one still
/// replaying the log. The UPDATE waits for every flush of the previous owner that holds its
/// `FOR SHARE` lock, and every later flush of that owner finds the new epoch and writes nothing
/// (see `docs/design/postgres.md`). The release is read in the same statement that raises the
/// epoch, from the row as it replaces it: a release written later is fenced out (its epoch is
/// no longer the bucket's), and one written by an earlier epoch does not match.
pub(crate) async fn claim(
    client: &Client,
    schema: &Schema,
    bucket: i32,
    owner: Option<&crate::NodeIdentity>,
) -> Result<Claimed, PostgresError> {
    let (node_id, advertise) = match owner {
        Some(owner) => (Some(owner.node_id.as_str()), Some(owner.advertise.as_str())),
        None => (None, None),
    };
    // `RETURNING` sees the row as updated: the new epoch, and `released_epoch` as it was.
    let row = client
        .query_one(
            &schema.sql(
                "INSERT INTO {schema}.bucket AS b (bucket, epoch, owner, owner_advertise, owned_since)
                 VALUES ($1, 1, $2, $3, CASE WHEN $2::text IS NULL THEN clock_timestamp() END)
                 ON CONFLICT (bucket) DO UPDATE SET epoch = b.epoch + 1, owner = $2,
                     owner_advertise = $3,
                     owned_since = CASE WHEN $2::text IS NULL THEN clock_timestamp() END
                 RETURNING epoch, coalesce(released_epoch = epoch - 1, false)",
            ),
            &[&bucket, &node_id, &advertise],
        )
        .await?;
    Ok(Claimed {
        epoch: row.get(0),
        previous_released: row.get(1),
    })
}

#[cfg(test)]
pub(crate) async fn migrate_with(
    client: &mut Client,
    schema: &Schema,
    migrations: &[&str],
) -> Result<i32, PostgresError> {
    migrate_to(client, schema, migrations).await
}

#[cfg(test)]
pub(crate) const KNOWN_MIGRATIONS: &[&str] = MIGRATIONS;
