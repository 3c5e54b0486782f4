//! What `leaseq cluster status` shows: read from PostgreSQL alone, so it works whichever nodes
//! are up (and when none is).

use crate::runtime::StoreRuntime;
use crate::schema::{self, Schema};
use crate::PostgresError;

/// A bucket of the log and its owner.
#[derive(Clone, Debug)]
pub struct BucketStatus {
    pub bucket: i32,
    pub epoch: i64,
    /// The node that claimed it last (`None`: a single node, not a cluster, claimed it).
    pub owner: Option<String>,
    pub owner_advertise: Option<String>,
    /// Seconds since that claim.
    pub owned_for_seconds: Option<f64>,
    /// Whether a session holds the bucket's ownership lock now: `false` means no node serves
    /// it (the owner died and no standby has taken over yet, or no cluster node runs).
    pub lock_held: bool,
    /// Frames written to the log since the last snapshot: what a takeover would replay.
    pub frames_since_snapshot: i64,
}

/// A node as it last announced itself.
#[derive(Clone, Debug)]
pub struct NodeRow {
    pub node_id: String,
    pub advertise: String,
    pub started_seconds_ago: f64,
    /// Seconds since the node last refreshed its row (every few seconds while it runs).
    pub seen_seconds_ago: f64,
}

/// The cluster as PostgreSQL has it.
#[derive(Clone, Debug)]
pub struct ClusterStatus {
    pub buckets: Vec<BucketStatus>,
    pub nodes: Vec<NodeRow>,
}

/// Reads the cluster's state from the log in `schema` of the database `connection` names.
/// Blocks the calling thread.
pub fn read(connection: &str, schema: &str) -> Result<ClusterStatus, PostgresError> {
    let schema = Schema::new(schema)?;
    let runtime = StoreRuntime::new().map_err(PostgresError::Runtime)?;
    let connection = connection.to_string();
    runtime.block(async move {
        let mut client = schema::connect(&connection).await?;
        schema::migrate(&mut client, &schema).await?;
        // Each bucket's ownership key, by bucket (the log has at most `BUCKETS_MAX`).
        let keys: Vec<i64> = (0..crate::BUCKETS_MAX as i32)
            .map(|bucket| schema.ownership_key(bucket))
            .collect();
        let buckets = client
            .query(
                &schema.sql(&format!(
                    "SELECT b.bucket, b.epoch, b.owner, b.owner_advertise,
                        extract(epoch FROM clock_timestamp() - b.owned_since)::float8,
                        EXISTS (SELECT 1 FROM pg_locks l WHERE {held}),
                        (SELECT count(*) FROM {{schema}}.frame f WHERE f.bucket = b.bucket
                           AND f.last_lsn > coalesce((SELECT max(s.lsn) FROM {{schema}}.snapshot s
                                                      WHERE s.bucket = b.bucket), 0))
                     FROM {{schema}}.bucket b ORDER BY b.bucket",
                    held =
                        schema::OWNERSHIP_LOCK_HELD.replace("$1", "($1::bigint[])[b.bucket + 1]")
                )),
                &[&keys],
            )
            .await?
            .iter()
            .map(|row| BucketStatus {
                bucket: row.get(0),
                epoch: row.get(1),
                owner: row.get(2),
                owner_advertise: row.get(3),
                owned_for_seconds: row.get(4),
                lock_held: row.get(5),
                frames_since_snapshot: row.get(6),
            })
            .collect();
        let nodes = client
            .query(
                &schema.sql(
                    "SELECT node_id, advertise,
                        extract(epoch FROM clock_timestamp() - started_at)::float8,
                        extract(epoch FROM clock_timestamp() - seen_at)::float8
                     FROM {schema}.node ORDER BY node_id",
                ),
                &[],
            )
            .await?
            .iter()
            .map(|row| NodeRow {
                node_id: row.get(0),
                advertise: row.get(1),
                started_seconds_ago: row.get(2),
                seen_seconds_ago: row.get(3),
            })
            .collect();
        Ok(ClusterStatus { buckets, nodes })
    })
}
