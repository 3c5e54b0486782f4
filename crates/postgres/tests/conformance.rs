//! The conformance suite on the PostgreSQL log (every script, reboots included), with tiny
//! segments, frequent checkpoints (snapshots, segment removal and relocation under every
//! step) and four flushes in flight, on a log of several buckets (dead letters and redrives
//! between buckets, through transfers, across reboots), and mirrors (file log and PostgreSQL log, each plain and checkpointing) that must
//! answer alike. Each script runs in a schema of its own on the machine's PostgreSQL
//! (`LEASEQ_TEST_POSTGRES`, default `host=127.0.0.1 user=postgres dbname=test`), dropped when
//! the script ends.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use leaseq_conformance::stores::MemoryStore;
use leaseq_conformance::stores::{self, FileStore, Running};
use leaseq_conformance::{run_all, run_mirror, Node, Service, Store};
use leaseq_postgres::{drop_schema, open_service, PgConfig, Sizes};
use leaseq_server::clock::SharedClock;
use leaseq_server::host::CHECKPOINT_LOG_BYTES_MIN;

fn connection() -> String {
    std::env::var("LEASEQ_TEST_POSTGRES")
        .unwrap_or_else(|_| "host=127.0.0.1 user=postgres dbname=test".into())
}

/// The service on a PostgreSQL log, one new schema per opened store.
struct PostgresStore {
    name: &'static str,
    sizes: Sizes,
    checkpoint_log_bytes_min: u64,
    flushes_in_flight: usize,
    buckets: u32,
}

/// Buckets of the multi-bucket stores: the fewest where every pair of queues the scripts move
/// messages between lies in two buckets (FNV-1a modulo 7: `q` 4, `dlq` 3, `q.fifo` 5,
/// `dlq.fifo` 1, `dest` 2, `src` 0; modulo 4, 5 or 6 some pair shares one), so dead letters
/// and redrives go through transfers, also across the reboot scripts. Not a power of two, so
/// that a route that masked instead of taking the modulo would show.
const BUCKETS: u32 = 7;

impl PostgresStore {
    /// As `leaseq serve --postgres` runs it.
    fn new() -> PostgresStore {
        PostgresStore {
            name: "postgres",
            sizes: Sizes::default(),
            checkpoint_log_bytes_min: CHECKPOINT_LOG_BYTES_MIN,
            flushes_in_flight: leaseq_postgres::FLUSHES_IN_FLIGHT_DEFAULT,
            buckets: 1,
        }
    }

    /// As `leaseq serve --postgres … --postgres-buckets 7` runs it.
    fn buckets() -> PostgresStore {
        PostgresStore {
            name: "postgres-buckets",
            buckets: BUCKETS,
            ..PostgresStore::new()
        }
    }

    /// [`PostgresStore::checkpointing`] on a log of several buckets: each bucket's snapshots,
    /// removals and relocations, with transfers in its outbox.
    fn buckets_checkpointing() -> PostgresStore {
        PostgresStore {
            name: "postgres-buckets-checkpointing",
            buckets: BUCKETS,
            ..PostgresStore::checkpointing()
        }
    }

    /// Segments of 4 KiB (a partition each) and a checkpoint after every few records.
    fn checkpointing() -> PostgresStore {
        PostgresStore {
            name: "postgres-checkpointing",
            sizes: Sizes {
                segment_bytes_max: 4 << 10,
            },
            checkpoint_log_bytes_min: 256,
            // Several flushes in flight (`--postgres-flushes 4`).
            flushes_in_flight: 4,
            buckets: 1,
        }
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
            schema: format!(
                "leaseq_conformance_{}_{}_{serial}",
                self.name.replace('-', "_"),
                std::process::id()
            ),
            sizes: self.sizes,
            flushes_in_flight: self.flushes_in_flight,
            buckets: self.buckets,
            ..PgConfig::new(connection())
        };
        drop_schema(&config.connection, &config.schema).map_err(|error| error.to_string())?;
        let running = open_node(&config, self.checkpoint_log_bytes_min, &clock)?;
        Ok(Box::new(PostgresNode {
            config,
            checkpoint_log_bytes_min: self.checkpoint_log_bytes_min,
            clock,
            running: Some(running),
        }))
    }
}

/// A node on `config`'s schema: it raises the epoch (fencing out any earlier node) and recovers
/// from what PostgreSQL holds.
fn open_node(
    config: &PgConfig,
    checkpoint_bytes: u64,
    clock: &SharedClock,
) -> Result<Running, String> {
    let service = open_service(config, stores::config(), checkpoint_bytes)
        .map_err(|error| format!("recovery failed: {error}"))?;
    Ok(Running::start(service, clock))
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
        self.running().service()
    }

    fn shut_down(&self) {
        self.running().shut_down();
    }

    /// The node dies and a new one takes the schema over: it raises the epoch (fencing the old
    /// one out, should any of it still run) and recovers from what PostgreSQL holds.
    fn reboot(&mut self) -> Result<(), String> {
        if let Some(old) = self.running.take() {
            old.stop();
        }
        self.running = Some(open_node(
            &self.config,
            self.checkpoint_log_bytes_min,
            &self.clock,
        )?);
        Ok(())
    }

    fn background_sleepers(&self) -> usize {
        self.running().background_sleepers()
    }

    fn transfers_waiting(&self) -> u64 {
        self.running().transfers_waiting()
    }
}

impl Drop for PostgresNode {
    fn drop(&mut self) {
        if let Some(running) = self.running.take() {
            running.stop();
        }
        if let Err(error) = drop_schema(&self.config.connection, &self.config.schema) {
            eprintln!("could not drop schema {}: {error}", self.config.schema);
        }
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
fn postgres_buckets() {
    run_all(&PostgresStore::buckets());
}

#[test]
fn postgres_buckets_checkpointing() {
    run_all(&PostgresStore::buckets_checkpointing());
}

/// Every script but those that reboot, answered alike by the in-memory node and the
/// PostgreSQL log of as many buckets.
#[test]
fn mirror_memory_buckets_and_postgres_buckets_checkpointing() {
    run_mirror(
        &MemoryStore::buckets(BUCKETS),
        &PostgresStore::buckets_checkpointing(),
    );
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
