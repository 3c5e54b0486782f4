//! The conformance suite through a three-node cluster (issue "leaseq cluster"): every script,
//! reboots included, each request sent to a node chosen at random, and a mirror with the file
//! log that must answer alike.
//!
//! The nodes are [`ClusterNode`]s of one process on the machine's PostgreSQL (a schema per
//! script, dropped afterwards), on the script's clock. A request to a standby takes the route
//! the HTTP layer takes (`Api::route`: here, the owner, or wait for one) without the HTTP hop,
//! which `tests/cluster.rs` and the cli's cluster tests cover: so every answer comes from the
//! owner's `ClusterNode::execute`, bracketed by its epoch confirmations. A script's `reboot`
//! crashes the owner (PostgreSQL ends its sessions, its tasks stop) and starts it again as a
//! standby; another node takes the log over and recovers it, and the script goes on there.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leaseq_conformance::stores::{self, FileStore};
use leaseq_conformance::{run_all, run_mirror, Node, Service, Store};
use leaseq_postgres::cluster::{ClusterConfig, ClusterNode};
use leaseq_postgres::{drop_schema, NodeIdentity, PgConfig};
use leaseq_server::clock::SharedClock;
use leaseq_server::host::CHECKPOINT_LOG_BYTES_MIN;
use leaseq_server::service::Route;
use leaseq_server::{Api, Caller};
use leaseq_sqs::{Action, Outcome, SqsError};
use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use tokio::runtime::Runtime;
use tokio::task::JoinHandle;

const NODES: [&str; 3] = ["n1", "n2", "n3"];
/// Longer than any takeover here takes.
const WAIT_MAX: Duration = Duration::from_secs(30);

fn connection(application_name: &str) -> String {
    let base = std::env::var("LEASEQ_TEST_POSTGRES")
        .unwrap_or_else(|_| "host=127.0.0.1 user=postgres dbname=test".into());
    format!("{base} application_name={application_name}")
}

/// Three cluster nodes on one new schema per opened store.
struct ClusterStore;

impl Store for ClusterStore {
    fn name(&self) -> String {
        "cluster".into()
    }

    fn persistent(&self) -> bool {
        true
    }

    fn open(&self, clock: SharedClock) -> Result<Box<dyn Node>, String> {
        static SERIAL: AtomicU64 = AtomicU64::new(0);
        let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
        let schema = format!("leaseq_conformance_cluster_{}_{serial}", std::process::id());
        drop_schema(&connection("leaseq_conformance"), &schema).map_err(|e| e.to_string())?;
        // The nodes run on a runtime of their own, so that a reboot (a plain function called
        // from the script's runtime) can wait for a takeover while they go on.
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        let cluster = Arc::new(Cluster {
            schema,
            clock,
            nodes: Mutex::new(HashMap::new()),
            driver: Arc::new(Mutex::new(None)),
            seed: AtomicU64::new(serial),
        });
        let mut node = ClusterGroup {
            cluster: cluster.clone(),
            runtime: Some(runtime),
        };
        for name in NODES {
            node.start(name);
        }
        node.wait_for_owner(None)?;
        Ok(Box::new(node))
    }
}

/// A running node: the node and its control loop.
struct Running {
    node: Arc<ClusterNode>,
    control: JoinHandle<()>,
}

/// What the service and the store's node share.
struct Cluster {
    schema: String,
    clock: SharedClock,
    nodes: Mutex<HashMap<&'static str, Running>>,
    /// The move driver of the owner's service.
    driver: Arc<Mutex<Option<JoinHandle<()>>>>,
    /// Picks the node each request goes to.
    seed: AtomicU64,
}

impl Cluster {
    fn node(&self, name: &str) -> Option<Arc<ClusterNode>> {
        self.nodes
            .lock()
            .get(name)
            .map(|running| running.node.clone())
    }

    fn random_node(&self) -> Arc<ClusterNode> {
        let seed = self.seed.fetch_add(1, Ordering::Relaxed);
        let index = rand::rngs::StdRng::seed_from_u64(seed).random_range(0..NODES.len());
        self.node(NODES[index]).expect("every node runs")
    }

    fn owner(&self) -> Option<Arc<ClusterNode>> {
        let nodes = self.nodes.lock();
        nodes
            .values()
            .find(|running| running.node.status().role == "owner")
            .map(|running| running.node.clone())
    }
}

/// The service: each request to a random node, routed as the HTTP layer routes it.
struct ClusterService(Arc<Cluster>);

impl Service for ClusterService {
    fn execute(
        &self,
        action: Action,
        caller: Caller,
    ) -> Pin<Box<dyn Future<Output = Result<Outcome, SqsError>> + Send>> {
        let cluster = self.0.clone();
        Box::pin(async move {
            let started = Instant::now();
            let mut node = cluster.random_node();
            loop {
                match node.route(&action, &caller) {
                    Route::Here => return node.execute(action, &caller).await,
                    Route::Peer(peer) => match cluster.node(&peer.node_id) {
                        // One hop, as a forward: the peer serves it or says it does not.
                        Some(owner) if matches!(owner.route(&action, &caller), Route::Here) => {
                            return owner.execute(action, &caller).await
                        }
                        _ => node.peer_refused(&peer),
                    },
                    Route::Unknown => {}
                }
                if started.elapsed() > WAIT_MAX {
                    return Err(SqsError::service_unavailable("no owner in time"));
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
                node = cluster.random_node();
            }
        })
    }
}

/// The store's node: the three cluster nodes together.
struct ClusterGroup {
    cluster: Arc<Cluster>,
    runtime: Option<Runtime>,
}

impl ClusterGroup {
    fn runtime(&self) -> &Runtime {
        self.runtime.as_ref().expect("the runtime lives until drop")
    }

    fn start(&mut self, name: &'static str) {
        let config = ClusterConfig {
            log: PgConfig {
                schema: self.cluster.schema.clone(),
                node: Some(NodeIdentity {
                    node_id: name.into(),
                    advertise: format!("{name}.invalid:9324"),
                }),
                ..PgConfig::new(connection(&self.application_name(name)))
            },
            service: stores::config(),
            checkpoint_log_bytes_min: CHECKPOINT_LOG_BYTES_MIN,
            node_timeout: Duration::from_secs(2),
            metrics: None,
            clock: Some(self.cluster.clock.clone()),
        };
        let node = Arc::new(ClusterNode::new(config).expect("a valid node"));
        let driver = self.cluster.driver.clone();
        let control = self.runtime().spawn(node.clone().run(move |service| {
            let started = tokio::spawn(service.drive_moves());
            if let Some(old) = driver.lock().replace(started) {
                old.abort();
            }
        }));
        self.cluster
            .nodes
            .lock()
            .insert(name, Running { node, control });
    }

    fn application_name(&self, node: &str) -> String {
        format!("{}_{node}", self.cluster.schema)
    }

    /// Waits until a node other than `not` owns the log and every node knows it.
    fn wait_for_owner(&self, not: Option<&str>) -> Result<(), String> {
        let started = Instant::now();
        loop {
            let nodes = self.cluster.nodes.lock();
            let statuses: Vec<_> = nodes
                .values()
                .map(|running| running.node.status())
                .collect();
            drop(nodes);
            let owner = statuses.iter().find(|status| status.role == "owner");
            if let Some(owner) = owner.filter(|owner| Some(owner.node_id.as_str()) != not) {
                let known = statuses.iter().all(|status| {
                    status.owner.as_ref().map(|o| &o.node_id) == Some(&owner.node_id)
                });
                let driving = self.cluster.driver.lock().is_some();
                if known && driving {
                    return Ok(());
                }
            }
            if started.elapsed() > WAIT_MAX {
                return Err(format!("no owner that every node knows: {statuses:?}"));
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Ends every PostgreSQL session named after `node` (as its death would), waiting on the
    /// nodes' runtime.
    fn end_sessions(&self, node: &str) {
        let name = self.application_name(node);
        let (sender, receiver) = std::sync::mpsc::sync_channel(1);
        self.runtime().spawn(async move {
            let ended = async {
                let (client, driver) = connection("leaseq_conformance_killer")
                    .parse::<tokio_postgres::Config>()?
                    .connect(tokio_postgres::NoTls)
                    .await?;
                tokio::spawn(driver);
                let sql = "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
                           WHERE application_name = $1";
                client
                    .query_one(sql, &[&name])
                    .await
                    .map(|row| row.get::<_, i64>(0))
            };
            let _ = sender.send(ended.await);
        });
        receiver
            .recv()
            .expect("the killer answers")
            .expect("PostgreSQL ends the sessions");
    }
}

impl Node for ClusterGroup {
    fn service(&self) -> Arc<dyn Service> {
        Arc::new(ClusterService(self.cluster.clone()))
    }

    fn shut_down(&self) {
        if let Some(service) = self.cluster.owner().and_then(|owner| owner.owned_service()) {
            service.shut_down();
        }
    }

    /// The owner dies (its tasks stop, PostgreSQL ends its sessions, its long polls are
    /// released) and starts again as a standby; another node takes over.
    fn reboot(&mut self) -> Result<(), String> {
        let owner = self.cluster.owner().ok_or("no owner to reboot")?;
        let name = NODES
            .into_iter()
            .find(|name| *name == owner.identity().node_id)
            .expect("a node of the store");
        if let Some(service) = owner.owned_service() {
            service.shut_down();
        }
        if let Some(driver) = self.cluster.driver.lock().take() {
            driver.abort();
        }
        let running = self.cluster.nodes.lock().remove(name).expect("it runs");
        running.control.abort();
        self.end_sessions(name);
        drop((owner, running));
        self.start(name);
        self.wait_for_owner(Some(name))
    }

    fn background_sleepers(&self) -> usize {
        let driver = self.cluster.driver.lock();
        usize::from(driver.as_ref().is_some_and(|driver| !driver.is_finished()))
    }
}

impl Drop for ClusterGroup {
    fn drop(&mut self) {
        for (_, running) in self.cluster.nodes.lock().drain() {
            running.control.abort();
        }
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
        let schema = &self.cluster.schema;
        if let Err(error) = drop_schema(&connection("leaseq_conformance"), schema) {
            eprintln!("could not drop schema {schema}: {error}");
        }
    }
}

#[test]
fn cluster_of_three() {
    run_all(&ClusterStore);
}

#[test]
fn mirror_file_and_cluster_of_three() {
    run_mirror(&FileStore::new(), &ClusterStore);
}
