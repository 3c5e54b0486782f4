//! The conformance suite on the PostgreSQL log (every script, reboots included), with tiny
//! segments and frequent checkpoints (snapshots, segment removal and relocation under every
//! step), and mirrors (file log and PostgreSQL log, each plain and checkpointing) that must
//! answer alike. Each script runs in a schema of its own on the machine's PostgreSQL
//! (`LEASEQ_TEST_POSTGRES`, default `host=127.0.0.1 user=postgres dbname=test`), dropped when
//! the script ends.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use leaseq_conformance::stores::FileStore;
use leaseq_conformance::{run_all, run_mirror, Node, Service, Store, ACCOUNT_ID, REGION};
use leaseq_core::EngineConfig;
use leaseq_postgres::{drop_schema, open_service, PgConfig, Sizes};
use leaseq_server::clock::SharedClock;
use leaseq_server::host::CHECKPOINT_LOG_BYTES_MIN;
use leaseq_server::{Api, Caller, Service as ServerService, ServiceConfig};
use leaseq_sqs::{Action, Outcome, SqsError};
use tokio::task::JoinHandle;

fn connection() -> String {
    std::env::var("LEASEQ_TEST_POSTGRES")
        .unwrap_or_else(|_| "host=127.0.0.1 user=postgres dbname=test".into())
}

/// The service on a PostgreSQL log, one new schema per opened store.
struct PostgresStore {
    name: &'static str,
    sizes: Sizes,
    checkpoint_log_bytes_min: u64,
}

impl PostgresStore {
    /// As `leaseq serve --postgres` runs it.
    fn new() -> PostgresStore {
        PostgresStore {
            name: "postgres",
            sizes: Sizes::default(),
            checkpoint_log_bytes_min: CHECKPOINT_LOG_BYTES_MIN,
        }
    }

    /// Segments of 1 KiB and a checkpoint after every few records.
    fn checkpointing() -> PostgresStore {
        PostgresStore {
            name: "postgres-checkpointing",
            sizes: Sizes {
                segment_bytes_max: 1 << 10,
            },
            checkpoint_log_bytes_min: 256,
        }
    }
}

fn service_config() -> ServiceConfig {
    ServiceConfig {
        engine: EngineConfig::default(),
        region: REGION.into(),
        account_id: ACCOUNT_ID.into(),
    }
}

impl Store for PostgresStore {
    fn name(&self) -> String {
        self.name.into()
    }

    fn persistent(&self) -> bool {
        true
    }

    fn open(&self, clock: SharedClock) -> Result<Box<dyn Node>, String> {
        static SERIAL: AtomicU64 = AtomicU64::new(0);
        let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
        let config = PgConfig {
            connection: connection(),
            schema: format!(
                "leaseq_conformance_{}_{}_{serial}",
                self.name.replace('-', "_"),
                std::process::id()
            ),
            sizes: self.sizes,
        };
        drop_schema(&config.connection, &config.schema).map_err(|error| error.to_string())?;
        let running = Running::open(&config, self.checkpoint_log_bytes_min, &clock)?;
        Ok(Box::new(PostgresNode {
            config,
            checkpoint_log_bytes_min: self.checkpoint_log_bytes_min,
            clock,
            running: Some(running),
        }))
    }
}

/// A service and its move driver.
struct Running {
    service: Arc<ServerService>,
    driver: JoinHandle<()>,
}

impl Running {
    fn open(
        config: &PgConfig,
        checkpoint_bytes: u64,
        clock: &SharedClock,
    ) -> Result<Running, String> {
        let service = open_service(config, service_config(), checkpoint_bytes)
            .map_err(|error| format!("recovery failed: {error}"))?;
        let service = Arc::new(service.with_clock(clock.clone()));
        let driver = tokio::spawn(service.clone().drive_moves());
        Ok(Running { service, driver })
    }
}

struct PostgresNode {
    config: PgConfig,
    checkpoint_log_bytes_min: u64,
    clock: SharedClock,
    running: Option<Running>,
}

impl PostgresNode {
    fn running(&self) -> &Running {
        self.running.as_ref().expect("a node runs between reboots")
    }
}

impl Node for PostgresNode {
    fn service(&self) -> Arc<dyn Service> {
        Arc::new(Shared(self.running().service.clone()))
    }

    fn shut_down(&self) {
        self.running().service.shut_down();
    }

    /// The node dies and a new one takes the schema over: it raises the epoch (fencing the old
    /// one out, should any of it still run) and recovers from what PostgreSQL holds.
    fn reboot(&mut self) -> Result<(), String> {
        if let Some(old) = self.running.take() {
            old.service.shut_down();
            old.driver.abort();
        }
        self.running = Some(Running::open(
            &self.config,
            self.checkpoint_log_bytes_min,
            &self.clock,
        )?);
        Ok(())
    }

    fn background_sleepers(&self) -> usize {
        usize::from(!self.running().driver.is_finished())
    }
}

impl Drop for PostgresNode {
    fn drop(&mut self) {
        if let Some(running) = self.running.take() {
            running.service.shut_down();
            running.driver.abort();
        }
        if let Err(error) = drop_schema(&self.config.connection, &self.config.schema) {
            eprintln!("could not drop schema {}: {error}", self.config.schema);
        }
    }
}

/// The server's service as the suite's `Service`.
struct Shared(Arc<ServerService>);

impl Service for Shared {
    fn execute(
        &self,
        action: Action,
        caller: Caller,
    ) -> Pin<Box<dyn Future<Output = Result<Outcome, SqsError>> + Send>> {
        let service = self.0.clone();
        Box::pin(async move { service.execute(action, &caller).await })
    }
}

#[test]
fn postgres() {
    run_all(&PostgresStore::new());
}

#[test]
fn postgres_checkpointing() {
    run_all(&PostgresStore::checkpointing());
}

#[test]
fn mirror_file_and_postgres() {
    run_mirror(&FileStore::new(), &PostgresStore::new());
}

#[test]
fn mirror_postgres_and_postgres_checkpointing() {
    run_mirror(&PostgresStore::new(), &PostgresStore::checkpointing());
}

#[test]
fn mirror_file_checkpointing_and_postgres_checkpointing() {
    run_mirror(&FileStore::checkpointing(), &PostgresStore::checkpointing());
}
