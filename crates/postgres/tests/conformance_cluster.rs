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
//!
//! With several buckets ([`ClusterStore::buckets`]) the nodes share them out by placement, each
//! request goes to the owner of its queue's bucket, and what crosses buckets (listings,
//! dead-letter queues, transfers, move tasks) goes between owners as bucket calls. A reboot
//! crashes the owner of bucket 0; the others take its buckets over, and once it is back
//! placement hands them back to it. Each reboot waits until every bucket is served by the node
//! placement prefers, so that no hand-off cuts a script's long poll.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leaseq_conformance::stores::{self, FileStore};
use leaseq_conformance::{run_all, run_mirror, Node, Service, Store};
use leaseq_postgres::cluster::{placement, ClusterConfig, ClusterNode, PeerTransport};
use leaseq_postgres::{drop_schema, NodeIdentity, PgConfig};
use leaseq_server::clock::SharedClock;
use leaseq_server::host::CHECKPOINT_LOG_BYTES_MIN;
use leaseq_server::http::forward::Posted;
use leaseq_server::service::{is_not_served_here, Peer, Route};
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

/// Three cluster nodes on one new schema per opened store, on a log of `buckets` buckets.
struct ClusterStore {
    buckets: u32,
}

impl ClusterStore {
    const ONE: ClusterStore = ClusterStore { buckets: 1 };

    fn buckets(buckets: u32) -> ClusterStore {
        ClusterStore { buckets }
    }
}

impl Store for ClusterStore {
    fn name(&self) -> String {
        match self.buckets {
            1 => "cluster".into(),
            n => format!("cluster-of-{n}-buckets"),
        }
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
            buckets: self.buckets,
            clock,
            nodes: Mutex::new(HashMap::new()),
            drivers: Arc::new(Mutex::new(HashMap::new())),
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
    control: JoinHandle<Result<(), leaseq_postgres::PostgresError>>,
}

/// What the service and the store's node share.
struct Cluster {
    schema: String,
    buckets: u32,
    clock: SharedClock,
    nodes: Mutex<HashMap<&'static str, Running>>,
    /// The move driver of each bucket's owner's service, by bucket.
    drivers: Arc<Mutex<HashMap<u32, JoinHandle<()>>>>,
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

    /// The owner of bucket 0.
    fn owner(&self) -> Option<Arc<ClusterNode>> {
        let nodes = self.nodes.lock();
        nodes
            .values()
            .find(|running| running.node.status().buckets_owned.contains(&0))
            .map(|running| running.node.clone())
    }
}

/// Bucket calls between the nodes, straight to the peer's node (no HTTP here).
struct InProcess(std::sync::Weak<Cluster>);

impl PeerTransport for InProcess {
    fn post<'a>(
        &'a self,
        peer: &'a Peer,
        body: Vec<u8>,
    ) -> Pin<Box<dyn Future<Output = Posted> + Send + 'a>> {
        Box::pin(async move {
            let Some(node) = self
                .0
                .upgrade()
                .and_then(|cluster| cluster.node(&peer.node_id))
            else {
                return Posted::Refused("the node is down".into());
            };
            match node.answer_posted_call(&body).await {
                Ok(Some(answer)) => Posted::Answered(answer.into()),
                Ok(None) => Posted::Refused("it does not own the bucket".into()),
                Err(error) => Posted::Broken(error),
            }
        })
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
            // A create placed in a bucket its node does not serve is routed once more.
            let mut again = matches!(action, Action::CreateQueue { .. }).then(|| action.clone());
            let mut action = action;
            loop {
                let executor = match node.route(&action, &caller) {
                    Route::Here => Some(node.clone()),
                    Route::Peer(peer) => match cluster.node(&peer.node_id) {
                        // One hop, as a forward: the peer serves it or says it does not, and
                        // why (it owns the bucket of a name placed elsewhere, or not that).
                        Some(owner) if matches!(owner.route(&action, &caller), Route::Here) => {
                            Some(owner)
                        }
                        Some(owner) if owner.placed_elsewhere(&action, &caller) => {
                            node.placements_changed();
                            None
                        }
                        _ => {
                            node.peer_refused(&peer);
                            None
                        }
                    },
                    Route::Unknown => None,
                };
                if let Some(executor) = executor {
                    match (executor.execute(action, &caller).await, again.take()) {
                        (Err(error), Some(retry)) if is_not_served_here(&error) => {
                            action = retry;
                            continue;
                        }
                        (result, _) => return result,
                    }
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
                buckets: self.cluster.buckets,
                ..PgConfig::new(connection(&self.application_name(name)))
            },
            service: stores::config(),
            checkpoint_log_bytes_min: CHECKPOINT_LOG_BYTES_MIN,
            node_timeout: Duration::from_secs(2),
            metrics: None,
            clock: Some(self.cluster.clock.clone()),
        };
        let node = ClusterNode::new(config).expect("a valid node");
        node.set_peer_transport(Arc::new(InProcess(Arc::downgrade(&self.cluster))));
        let drivers = self.cluster.drivers.clone();
        let control = self.runtime().spawn(node.clone().run(move |service| {
            let (bucket, _) = service.hosts().iter_buckets().next().expect("one bucket");
            let started = tokio::spawn(service.drive_moves());
            if let Some(old) = drivers.lock().insert(bucket, started) {
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

    /// Waits until every bucket has an owner that every node knows, whose move driver runs:
    /// with one bucket, a node other than `not`; with several, the node placement prefers.
    fn wait_for_owner(&self, not: Option<&str>) -> Result<(), String> {
        let started = Instant::now();
        loop {
            let nodes = self.cluster.nodes.lock();
            let views: Vec<(String, Vec<Option<String>>)> = nodes
                .values()
                .map(|running| {
                    let node = &running.node;
                    (node.identity().node_id.clone(), node.bucket_owners())
                })
                .collect();
            drop(nodes);
            let drivers = self.cluster.drivers.lock();
            let settled = (0..self.cluster.buckets).all(|bucket| {
                let owner = &views[0].1[bucket as usize];
                let Some(owner) = owner else { return false };
                let wanted = match self.cluster.buckets {
                    1 => Some(owner.as_str()) != not,
                    _ => placement::preferred(bucket, NODES) == Some(owner.as_str()),
                };
                let driving = drivers
                    .get(&bucket)
                    .is_some_and(|driver| !driver.is_finished());
                wanted
                    && driving
                    && views
                        .iter()
                        .all(|(_, owners)| owners[bucket as usize].as_ref() == Some(owner))
            });
            drop(drivers);
            if settled {
                return Ok(());
            }
            if started.elapsed() > WAIT_MAX {
                return Err(format!("the buckets' owners did not settle: {views:?}"));
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
        for running in self.cluster.nodes.lock().values() {
            for (_, service) in running.node.owned_services() {
                service.shut_down();
            }
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
        for (bucket, service) in owner.owned_services() {
            service.shut_down();
            if let Some(driver) = self.cluster.drivers.lock().remove(&bucket) {
                driver.abort();
            }
        }
        let running = self.cluster.nodes.lock().remove(name).expect("it runs");
        running.control.abort();
        self.end_sessions(name);
        drop((owner, running));
        self.start(name);
        self.wait_for_owner(Some(name))
    }

    fn background_sleepers(&self) -> usize {
        let drivers = self.cluster.drivers.lock();
        drivers
            .values()
            .filter(|driver| !driver.is_finished())
            .count()
    }

    fn transfers_waiting(&self) -> u64 {
        let nodes = self.cluster.nodes.lock();
        nodes
            .values()
            .map(|running| running.node.transfers_waiting())
            .sum()
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
    run_all(&ClusterStore::ONE);
}

#[test]
fn mirror_file_and_cluster_of_three() {
    run_mirror(&FileStore::new(), &ClusterStore::ONE);
}

/// Six buckets shared out over the three nodes by placement: requests go to their queue's
/// bucket's owner, and what crosses buckets goes between owners as bucket calls.
#[test]
fn cluster_of_three_with_six_buckets() {
    run_all(&ClusterStore::buckets(6));
}
