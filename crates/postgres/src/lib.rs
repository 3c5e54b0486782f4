//! The PostgreSQL log store: a leaseq node whose durable state lives in PostgreSQL.
//!
//! PostgreSQL is a fenced, append-only log under the unchanged engine, not a table of mutable
//! message rows: every group commit of the node's records is one `frame` row written by one
//! INSERT, fenced by the bucket's epoch in the same statement; snapshots go to PostgreSQL too,
//! and recovery is the newest snapshot plus the frames after it, through the same
//! `Engine::apply` as live traffic. The hot path only inserts, so it leaves no dead tuples
//! behind, however long another session holds back the xmin horizon.
//!
//! - [`PgLogOpening`]: connects, migrates the schema ([`SCHEMA_VERSION`]), reads the receipt
//!   key and the log's bucket count, takes over a bucket (raising its epoch) and recovers it
//!   (`Recoverable`); [`PgLogOpening::open_buckets`] takes over every bucket of the log.
//! - [`PgLog`]: the `LogStore` (group commit, the fence, poisoning, cached body reads).
//! - [`open_service`]: all of it, as `leaseq serve --postgres` runs it: one engine host per
//!   bucket ([`PgConfig::buckets`]), each on a `PgLog` of its own.
//!
//! `docs/design/postgres.md` has the schema, the fence and why it is correct under READ
//! COMMITTED, frames and locations, recovery, poisoning, and what a failover keeps.

pub mod cluster;
mod flusher;
mod frames;
mod log;
mod opening;
mod runtime;
mod schema;
mod snapshot;

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use leaseq_core::{EngineConfig, Placement};
use leaseq_server::host::{EngineHost, Hosts};
use leaseq_server::log_store::{LogError, LogStore};
use leaseq_server::recovery::{self, RecoverError};
use leaseq_server::{Service, ServiceConfig};

pub use log::{PgLog, Sizes, FLUSHES_IN_FLIGHT_DEFAULT};
pub use opening::{PgLogOpening, SINGLE_NODE_BUCKET};
pub use schema::SCHEMA_VERSION;

/// Buckets of a log at most. Each bucket has a flusher with a PostgreSQL session of its own
/// (`--postgres-flushes` of them at most), so a node of `N` buckets holds at least `N + 1`
/// sessions, and PostgreSQL's default `max_connections` is 100; 256 also leaves a cluster
/// (when it serves several buckets) room to spread buckets over many nodes. Queue ids could
/// name 65 536 buckets (`leaseq_core::Placement`).
pub const BUCKETS_MAX: u32 = 256;

/// How long connecting may take before the node reports PostgreSQL unreachable.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long PostgreSQL may run one statement (set as `statement_timeout`).
pub const STATEMENT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a flush may take before its outcome counts as unknown and the store poisons itself
/// (a little past the statement timeout, for a server that no longer answers at all).
pub const FLUSH_TIMEOUT: Duration = Duration::from_secs(12);

/// Where the log lives.
#[derive(Clone, Debug)]
pub struct PgConfig {
    /// A libpq-style connection string (`host=… user=… dbname=…`).
    pub connection: String,
    /// The schema holding the log's tables (created if missing).
    pub schema: String,
    /// Sizes of segments.
    pub sizes: Sizes,
    /// Flushes in flight at once, per bucket, each on a PostgreSQL session of its own (at
    /// least 1).
    pub flushes_in_flight: usize,
    /// Buckets of the log (1 to [`BUCKETS_MAX`]): the count a new log records, and the one an
    /// existing log must have recorded (it is fixed for the life of a log).
    pub buckets: u32,
    /// The cluster node opening the log, recorded as the bucket's owner when it takes the
    /// bucket over (`None`: a single node).
    pub node: Option<NodeIdentity>,
}

/// A cluster node, as the others find it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeIdentity {
    /// The node's id, unique in the cluster (`--node-id`).
    pub node_id: String,
    /// `host:port` where the other nodes reach its SQS listener (`--advertise`).
    pub advertise: String,
}

impl PgConfig {
    /// The log in schema `leaseq` of the database `connection` names.
    pub fn new(connection: impl Into<String>) -> PgConfig {
        PgConfig {
            connection: connection.into(),
            schema: "leaseq".into(),
            sizes: Sizes::default(),
            flushes_in_flight: FLUSHES_IN_FLIGHT_DEFAULT,
            buckets: 1,
            node: None,
        }
    }
}

/// Why a PostgreSQL log could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum PostgresError {
    /// The configuration is not usable (the connection string, the schema name).
    #[error("{0}")]
    Config(String),
    /// PostgreSQL could not be reached.
    #[error("connecting to PostgreSQL: {0}")]
    Connect(String),
    /// A statement failed.
    #[error("PostgreSQL: {}", describe(.0))]
    Database(#[from] tokio_postgres::Error),
    /// The schema was migrated by a newer leaseq; this one refuses to write into it.
    #[error("the PostgreSQL schema is at version {found}, newer than this leaseq knows ({known}); upgrade leaseq")]
    SchemaTooNew {
        /// The version found.
        found: i32,
        /// The newest version this build knows.
        known: i32,
    },
    /// The node was configured with another bucket count than the log records.
    #[error(
        "the PostgreSQL log in schema {schema:?} has {recorded} bucket(s), fixed when it was \
         created, but this node was started with {configured} (--postgres-buckets, \
         LEASEQ_POSTGRES_BUCKETS, postgres_buckets): start it with --postgres-buckets \
         {recorded}, or use another --postgres-schema for a log of {configured}"
    )]
    BucketCount {
        /// The schema of the log.
        schema: String,
        /// The count the log records.
        recorded: u32,
        /// The count the node was started with.
        configured: u32,
    },
    /// The store's runtime could not be started.
    #[error("starting the PostgreSQL store's runtime: {0}")]
    Runtime(std::io::Error),
    /// Recovery failed.
    #[error(transparent)]
    Recover(#[from] RecoverError),
}

/// A PostgreSQL error with its causes, as an operator needs it: tokio-postgres's own `Display`
/// says only what kind of error it was ("db error", "error connecting to server"), and the
/// server's message ("database \"x\" does not exist", "sorry, too many clients already") or the
/// socket's is in its source.
pub(crate) fn describe(error: &tokio_postgres::Error) -> String {
    let mut text = leaseq_server::http::forward::describe(error);
    if let Some(db) = error.as_db_error() {
        text.push_str(&format!(" (SQLSTATE {})", db.code().code()));
    }
    text
}

impl From<LogError> for PostgresError {
    fn from(error: LogError) -> PostgresError {
        PostgresError::Recover(RecoverError::Log(error))
    }
}

/// Opens the log `config` names and recovers the service from it, one engine host per bucket
/// of the log, checkpointing after at least `checkpoint_log_bytes_min` logged bytes. The
/// receipt key comes from PostgreSQL, so a node started anywhere with the same configuration
/// serves the same queues and receipts.
pub fn open_service(
    config: &PgConfig,
    service: ServiceConfig,
    checkpoint_log_bytes_min: u64,
) -> Result<Service, PostgresError> {
    let openings = PgLogOpening::open_buckets(config)?;
    let buckets = openings.len() as u32;
    let mut hosts = Vec::with_capacity(openings.len());
    // One bucket after the other: their replays share the readers' session (see
    // `PgLogOpening::open_buckets`).
    for opening in openings {
        let mut engine = service.engine.clone();
        engine.placement = Placement {
            bucket: opening.bucket(),
            buckets,
        };
        hosts.push(recover_host(opening, engine, checkpoint_log_bytes_min)?);
    }
    Ok(Service::with_hosts(service, Hosts::buckets(hosts)))
}

/// The engine host of one bucket, recovered from its opening.
fn recover_host(
    opening: PgLogOpening,
    engine: EngineConfig,
    checkpoint_log_bytes_min: u64,
) -> Result<EngineHost, PostgresError> {
    let key = opening.receipt_key();
    let recovered = recovery::recover(opening, engine, key, checkpoint_log_bytes_min)?;
    let store: Arc<dyn LogStore> = recovered.store;
    Ok(EngineHost::new(
        recovered.engine,
        store,
        recovered.checkpoints,
    ))
}

/// [`open_service`] for a cluster node, which takes `bucket` of the log over (the others are
/// its peers' or its own other services'), with the epoch it took the bucket over with and
/// whether the epoch it replaced was released (`PgLogOpening::previous_released`).
pub(crate) fn open_service_with_epoch(
    config: &PgConfig,
    service: ServiceConfig,
    checkpoint_log_bytes_min: u64,
    bucket: u32,
) -> Result<(Service, (i64, bool)), PostgresError> {
    let opening = PgLogOpening::open_some_buckets(config, &[bucket])?
        .pop()
        .expect("one bucket opened");
    let epoch = (opening.epoch(), opening.previous_released());
    let mut engine = service.engine.clone();
    engine.placement = Placement {
        bucket,
        buckets: config.buckets,
    };
    let host = recover_host(opening, engine, checkpoint_log_bytes_min)?;
    let service = Service::with_hosts(service, Hosts::some(config.buckets, vec![host]));
    Ok((service, epoch))
}

/// Drops `schema` and everything in it (for tests that each run in a schema of their own).
/// Blocks the calling thread, whatever runtime it may be in.
pub fn drop_schema(connection: &str, schema: &str) -> Result<(), PostgresError> {
    let schema = schema::Schema::new(schema)?;
    let runtime = runtime::StoreRuntime::new().map_err(PostgresError::Runtime)?;
    let connection = connection.to_string();
    runtime.block(async move {
        let client = schema::connect(&connection).await?;
        client
            .batch_execute(&schema.sql("DROP SCHEMA IF EXISTS {schema} CASCADE"))
            .await?;
        Ok::<(), PostgresError>(())
    })
}
