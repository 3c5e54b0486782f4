//! The stores the suite runs on, and the one file that names the server's constructors.
//!
//! Everything else in this crate talks to a service through [`crate::Service`] and opens one
//! through [`crate::Store`]; this file is where those meet the server's API (`Service`,
//! `data_dir::recover_with` on a `FaultStorage`, the `Api` trait). A new log store adds its
//! `Store` beside these (in its own crate) and calls [`crate::run_all`].
//!
//! - [`MemoryStore`]: the service on the in-memory log. It keeps nothing, so it cannot reboot.
//!   [`MemoryStore::buckets`] runs one engine per bucket behind one service;
//!   [`MemoryStore::split`] runs the buckets on several services (a cluster's shape: each node
//!   serves some buckets, executes the requests for their queues and answers the others' bucket
//!   calls), with a router in front that sends each request to the service of its queue's
//!   bucket.
//! - [`FileStore`]: the service on the file log, on a [`FaultStorage`] under `--fsync always`.
//!   A reboot is a power loss that keeps only what was synced, then recovery with the same
//!   receipt key, as a restarted server does. [`FileStore::checkpointing`] checkpoints after a
//!   few hundred logged bytes and rolls tiny segments, so a script crosses many snapshots,
//!   segment removals and relocations.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use leaseq_core::{EngineConfig, ReceiptKey};
use leaseq_server::clock::SharedClock;
use leaseq_server::data_dir::recover_with;
use leaseq_server::host::CHECKPOINT_LOG_BYTES_MIN;
use leaseq_server::placements::Placements;
use leaseq_server::service::{is_not_served_here, BucketCall, RemoteAnswer, RemoteBuckets};
use leaseq_server::{bucket_of_action, Api, Caller, Service as ServerService, ServiceConfig};
use leaseq_sqs::{Action, Outcome, SqsError};
use leaseq_wal::fault::{CrashMode, FaultStorage};
use leaseq_wal::FsyncPolicy;
use tokio::task::JoinHandle;

use crate::{Node, Service, Store, ACCOUNT_ID, REGION};

/// The receipt key of every store in the suite (a reboot keeps it, as a data directory does).
const RECEIPT_KEY: [u8; 16] = *b"conformance-key!";

/// The caller of every request: a fixed sender id, and the user agent a script names.
pub fn caller(user_agent: Option<&str>) -> Caller {
    Caller {
        sender_id: Arc::from("AIDACONFORMANCE"),
        address: None,
        namespace: None,
        account_id: None,
        user_agent: user_agent.and_then(|agent| agent.parse().ok()),
    }
}

/// The settings of every service in the suite (its region and account appear in URLs and ARNs).
pub fn config() -> ServiceConfig {
    ServiceConfig {
        engine: EngineConfig::default(),
        region: REGION.into(),
        account_id: ACCOUNT_ID.into(),
    }
}

/// The server's service: an `Api`, shared with the tasks that run its requests.
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

/// A running service and its move driver (the one background task that paces move tasks on
/// the clock, as `leaseq serve` starts it after recovery). Every store's node runs one; a store
/// in another crate (the PostgreSQL log) uses it too.
pub struct Running {
    service: Arc<ServerService>,
    driver: JoinHandle<()>,
}

impl Running {
    /// Runs `service` on `clock`, with its move driver.
    pub fn start(service: ServerService, clock: &SharedClock) -> Running {
        let service = Arc::new(service.with_clock(clock.clone()));
        let driver = tokio::spawn(service.clone().drive_moves());
        Running { service, driver }
    }

    /// The service as the suite drives it.
    pub fn service(&self) -> Arc<dyn Service> {
        Arc::new(Shared(self.service.clone()))
    }

    /// Releases the service's long polls (they answer empty) and refuses new waits.
    pub fn shut_down(&self) {
        self.service.shut_down();
    }

    /// The process dies: long polls are released and the move driver stops.
    pub fn stop(&self) {
        self.service.shut_down();
        self.driver.abort();
    }

    /// Tasks of the node that sleep on the clock when idle: the move driver while it runs.
    pub fn background_sleepers(&self) -> usize {
        usize::from(!self.driver.is_finished())
    }

    /// Messages in the service's outboxes, on their way to another bucket.
    pub fn transfers_waiting(&self) -> u64 {
        self.service.transfers_waiting()
    }
}

/// The service on the in-memory log: one engine, or one per bucket
/// ([`MemoryStore::buckets`]), perhaps on several services ([`MemoryStore::split`]).
#[derive(Clone, Copy, Debug)]
pub struct MemoryStore {
    buckets: u32,
    /// Services the buckets are spread over (bucket `b` on service `b % nodes`).
    nodes: u32,
}

impl Default for MemoryStore {
    fn default() -> MemoryStore {
        MemoryStore {
            buckets: 1,
            nodes: 1,
        }
    }
}

impl MemoryStore {
    /// The service with one engine per bucket, `buckets` of them, each with its own log: the
    /// router in front of them, and transfers between them (a script's dead-letter queue
    /// mostly hashes into another bucket than its source).
    pub fn buckets(buckets: u32) -> MemoryStore {
        MemoryStore { buckets, nodes: 1 }
    }

    /// `buckets` buckets spread over `nodes` services, as a cluster spreads them over its
    /// nodes: a request goes to the service of its queue's bucket (`bucket_of_action`), and
    /// whatever crosses buckets (listings, `RedrivePolicy` checks, transfers, move tasks)
    /// goes between services as bucket calls (`RemoteBuckets`).
    pub fn split(buckets: u32, nodes: u32) -> MemoryStore {
        assert!(nodes >= 1 && nodes <= buckets, "every node serves a bucket");
        MemoryStore { buckets, nodes }
    }
}

impl Store for MemoryStore {
    fn name(&self) -> String {
        match (self.buckets, self.nodes) {
            (1, _) => "memory".into(),
            (n, 1) => format!("memory-{n}-buckets"),
            (n, nodes) => format!("memory-{n}-buckets-on-{nodes}-nodes"),
        }
    }

    fn persistent(&self) -> bool {
        false
    }

    fn open(&self, clock: SharedClock) -> Result<Box<dyn Node>, String> {
        let key = ReceiptKey::new(RECEIPT_KEY);
        if self.nodes > 1 {
            return Ok(Box::new(SplitNode::start(
                self.buckets,
                self.nodes,
                key,
                &clock,
            )));
        }
        let service = match self.buckets {
            1 => ServerService::in_memory(config(), key),
            n => ServerService::in_memory_buckets(config(), key, n),
        };
        Ok(Box::new(MemoryNode(Running::start(service, &clock))))
    }
}

struct MemoryNode(Running);

impl Node for MemoryNode {
    fn service(&self) -> Arc<dyn Service> {
        self.0.service()
    }

    fn shut_down(&self) {
        self.0.shut_down();
    }

    fn reboot(&mut self) -> Result<(), String> {
        Err("the in-memory store keeps nothing, so it cannot reboot".into())
    }

    fn background_sleepers(&self) -> usize {
        self.0.background_sleepers()
    }

    fn transfers_waiting(&self) -> u64 {
        self.0.transfers_waiting()
    }
}

/// The services of [`MemoryStore::split`], each serving bucket `b` when `b % nodes` is its
/// index.
struct SplitNode {
    buckets: u32,
    running: Vec<Running>,
}

/// How one split service reaches the buckets of the others: a call to the service that serves
/// the bucket, as a cluster's node forwards it to the bucket's owner.
struct SplitPeers(std::sync::OnceLock<Vec<std::sync::Weak<ServerService>>>);

impl RemoteBuckets for SplitPeers {
    fn call(&self, bucket: u32, call: BucketCall) -> RemoteAnswer<'_> {
        Box::pin(async move {
            let services = self.0.get().expect("set when the node starts");
            let service = services[bucket as usize % services.len()]
                .upgrade()
                .ok_or_else(|| SqsError::service_unavailable("the node stopped"))?;
            service.answer_bucket_call(bucket, call).await
        })
    }
}

impl SplitNode {
    fn start(buckets: u32, nodes: u32, key: ReceiptKey, clock: &SharedClock) -> SplitNode {
        let peers = Arc::new(SplitPeers(std::sync::OnceLock::new()));
        // One map, as if every node learned each placement at once (a cluster's nodes learn
        // them by their watch, and the placing node tells the bucket's owner first).
        let placements = Arc::new(Placements::default());
        let running: Vec<Running> = (0..nodes)
            .map(|node| {
                let served: Vec<u32> = (0..buckets).filter(|b| b % nodes == node).collect();
                let service =
                    ServerService::in_memory_some_buckets(config(), key.clone(), buckets, &served)
                        .with_remote_buckets(peers.clone())
                        .with_placements(placements.clone());
                Running::start(service, clock)
            })
            .collect();
        let services = running
            .iter()
            .map(|running| Arc::downgrade(&running.service))
            .collect();
        let _ = peers.0.set(services);
        SplitNode { buckets, running }
    }
}

/// The router in front of the split services.
struct SplitRouter {
    buckets: u32,
    services: Vec<Arc<ServerService>>,
}

impl Service for SplitRouter {
    fn execute(
        &self,
        action: Action,
        caller: Caller,
    ) -> Pin<Box<dyn Future<Output = Result<Outcome, SqsError>> + Send>> {
        let (buckets, services) = (self.buckets, self.services.clone());
        Box::pin(async move {
            // As the HTTP layer routes: a create placed in another service's bucket (its
            // dead-letter queue's) goes there.
            let placements = services[0].placements().clone();
            let service_of = |action: &Action| {
                let bucket = bucket_of_action(&config(), buckets, &placements, action, &caller);
                services[bucket.unwrap_or(0) as usize % services.len()].clone()
            };
            let again = matches!(action, Action::CreateQueue { .. }).then(|| action.clone());
            match (service_of(&action).execute(action, &caller).await, again) {
                (Err(error), Some(again)) if is_not_served_here(&error) => {
                    service_of(&again).execute(again, &caller).await
                }
                (result, _) => result,
            }
        })
    }
}

impl Node for SplitNode {
    fn service(&self) -> Arc<dyn Service> {
        Arc::new(SplitRouter {
            buckets: self.buckets,
            services: self
                .running
                .iter()
                .map(|running| running.service.clone())
                .collect(),
        })
    }

    fn shut_down(&self) {
        self.running.iter().for_each(Running::shut_down);
    }

    fn reboot(&mut self) -> Result<(), String> {
        Err("the in-memory store keeps nothing, so it cannot reboot".into())
    }

    fn background_sleepers(&self) -> usize {
        self.running.iter().map(Running::background_sleepers).sum()
    }

    fn transfers_waiting(&self) -> u64 {
        self.running.iter().map(Running::transfers_waiting).sum()
    }
}

/// The service on the file log, on a fault-injecting in-memory file system.
#[derive(Clone, Debug)]
pub struct FileStore {
    name: &'static str,
    options: leaseq_wal::Options,
    checkpoint_log_bytes_min: u64,
}

impl FileStore {
    /// The file log as `leaseq serve --fsync always` runs it: default segments and checkpoints.
    pub fn new() -> FileStore {
        FileStore {
            name: "file",
            options: leaseq_wal::Options {
                fsync: FsyncPolicy::Always,
                ..leaseq_wal::Options::default()
            },
            checkpoint_log_bytes_min: CHECKPOINT_LOG_BYTES_MIN,
        }
    }

    /// The file log checkpointing (in the background, as in production) after every few
    /// records, on segments of 1 KiB, so that snapshots, segment removal and relocated bodies
    /// are under every step of every script.
    pub fn checkpointing() -> FileStore {
        FileStore {
            name: "file-checkpointing",
            options: leaseq_wal::Options {
                segment_size_max_bytes: 1 << 10,
                zero_ahead_bytes: 0,
                ..FileStore::new().options
            },
            checkpoint_log_bytes_min: 256,
        }
    }

    fn recover(&self, storage: &FaultStorage, clock: &SharedClock) -> Result<Running, String> {
        let (service, _recovery) = recover_with(
            Arc::new(storage.clone()),
            config(),
            ReceiptKey::new(RECEIPT_KEY),
            self.options.clone(),
            self.checkpoint_log_bytes_min,
        )
        .map_err(|error| format!("recovery failed: {error}"))?;
        Ok(Running::start(service, clock))
    }
}

impl Default for FileStore {
    fn default() -> Self {
        FileStore::new()
    }
}

impl Store for FileStore {
    fn name(&self) -> String {
        self.name.into()
    }

    fn persistent(&self) -> bool {
        true
    }

    fn open(&self, clock: SharedClock) -> Result<Box<dyn Node>, String> {
        let storage = FaultStorage::new();
        let running = self.recover(&storage, &clock)?;
        Ok(Box::new(FileNode {
            store: self.clone(),
            storage,
            clock,
            running,
        }))
    }
}

struct FileNode {
    store: FileStore,
    storage: FaultStorage,
    clock: SharedClock,
    running: Running,
}

impl Node for FileNode {
    fn service(&self) -> Arc<dyn Service> {
        self.running.service()
    }

    fn shut_down(&self) {
        self.running.shut_down();
    }

    /// A power loss: the old process stops (its handles to the storage fail from now on), only
    /// synced bytes survive, and a new process recovers from them.
    fn reboot(&mut self) -> Result<(), String> {
        self.running.stop();
        self.storage = self.storage.crash(CrashMode::DropUnsynced);
        self.running = self.store.recover(&self.storage, &self.clock)?;
        Ok(())
    }

    fn background_sleepers(&self) -> usize {
        self.running.background_sleepers()
    }

    fn transfers_waiting(&self) -> u64 {
        self.running.transfers_waiting()
    }
}
