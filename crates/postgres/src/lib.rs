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
//!   key, takes over the bucket (raising its epoch) and recovers (`Recoverable`).
//! - [`PgLog`]: the `LogStore` (group commit, the fence, poisoning, cached body reads).
//! - [`open_service`]: all of it, as `leaseq serve --postgres` runs it.
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

use leaseq_server::host::EngineHost;
use leaseq_server::log_store::{LogError, LogStore};
use leaseq_server::recovery::{self, RecoverError};
use leaseq_server::{Service, ServiceConfig};

pub use log::{PgLog, Sizes, FLUSHES_IN_FLIGHT_DEFAULT};
pub use opening::{PgLogOpening, SINGLE_NODE_BUCKET};
pub use schema::SCHEMA_VERSION;

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
    /// Flushes in flight at once, each on a PostgreSQL session of its own (at least 1).
    pub flushes_in_flight: usize,
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

/// Opens the log `config` names and recovers the service from it, checkpointing after at
/// least `checkpoint_log_bytes_min` logged bytes. The receipt key comes from PostgreSQL, so a
/// node started anywhere with the same configuration serves the same queues and receipts.
pub fn open_service(
    config: &PgConfig,
    service: ServiceConfig,
    checkpoint_log_bytes_min: u64,
) -> Result<Service, PostgresError> {
    open_service_with_epoch(config, service, checkpoint_log_bytes_min).map(|(service, _)| service)
}

/// [`open_service`], and the epoch the node took the bucket over with and whether the epoch it
/// replaced was released (`PgLogOpening::previous_released`).
pub(crate) fn open_service_with_epoch(
    config: &PgConfig,
    service: ServiceConfig,
    checkpoint_log_bytes_min: u64,
) -> Result<(Service, (i64, bool)), PostgresError> {
    let opening = PgLogOpening::open(config)?;
    let epoch = (opening.epoch(), opening.previous_released());
    let key = opening.receipt_key();
    let recovered = recovery::recover(
        opening,
        service.engine.clone(),
        key,
        checkpoint_log_bytes_min,
    )?;
    let store: Arc<dyn LogStore> = recovered.store;
    let host = EngineHost::new(recovered.engine, store, recovered.checkpoints);
    Ok((Service::new(service, host), epoch))
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
