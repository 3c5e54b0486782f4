//! A node of the cluster: one [`BucketNode`] per bucket of the log, the router that sends each
//! request to its queue's bucket, and the bucket calls between buckets (answered here for a
//! bucket this node owns, posted to the owner otherwise).

use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use leaseq_core::ReceiptKey;
use leaseq_server::clock::OffsetClock;
use leaseq_server::http::forward::{PeerClient, Posted};
use leaseq_server::metrics::ConnectionStats;
use leaseq_server::placements::Placements;
use leaseq_server::service::{
    bucket_wire, BucketAnswer, BucketCall, ForwardStats, Peer, RemoteAnswer, RemoteBuckets, Route,
};
use leaseq_server::{bucket_of_action, Api, Caller, Service};
use leaseq_sqs::error::SqsError;
use leaseq_sqs::{Action, Outcome};
use tokio::sync::{watch, Notify};

use super::ownership;
use super::ownership::OwnerRow;
use super::placement::{Placement, ANNOUNCE_PLACEMENT_EVERY, LIVE_ROUNDS};
use super::{
    stopped, BucketNode, ClusterConfig, NodeShared, NodeStatus, ANNOUNCE_EVERY, OWNER_POLL,
    RETRY_MAX, RETRY_MIN,
};
use crate::schema::{self, Schema};
use crate::{NodeIdentity, PostgresError};

/// How long a bucket call waits for an owner of its bucket while none is known (a takeover
/// under way), as a forwarded request does.
const CALL_ROUTE_WAIT: Duration = Duration::from_secs(2);
/// How often the owner is looked up again meanwhile.
const CALL_ROUTE_POLL: Duration = Duration::from_millis(25);
/// Posts of one call that owners refused without acting, at most.
const CALL_ATTEMPTS_MAX: usize = 4;

/// How a node posts a bucket call to a peer: over HTTP to its `--advertise` address
/// ([`PeerClient`]), or, in tests of nodes in one process, straight to the peer's
/// [`ClusterNode::answer_posted_call`].
pub trait PeerTransport: Send + Sync + 'static {
    /// Posts the encoded call `body` to `peer`.
    fn post<'a>(
        &'a self,
        peer: &'a Peer,
        body: Vec<u8>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Posted> + Send + 'a>>;
}

impl PeerTransport for PeerClient {
    fn post<'a>(
        &'a self,
        peer: &'a Peer,
        body: Vec<u8>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Posted> + Send + 'a>> {
        Box::pin(PeerClient::post(
            self,
            &peer.address,
            bucket_wire::PATH,
            body,
        ))
    }
}

/// One node of a cluster: the [`Api`] the HTTP layer serves, and a control loop per bucket.
pub struct ClusterNode {
    config: ClusterConfig,
    identity: NodeIdentity,
    schema: Schema,
    buckets: Vec<Arc<BucketNode>>,
    forward_stats: ForwardStats,
    /// The log's receipt key, read when the node joins: it signs the bucket calls between
    /// nodes (see `leaseq_server::service::bucket_wire`).
    key: OnceLock<ReceiptKey>,
    peers: OnceLock<Arc<dyn PeerTransport>>,
    /// Engines run on PostgreSQL's clock (every bucket's the same).
    clock: Arc<OffsetClock>,
    /// Which node should own which bucket (read by the placement task).
    placement: Arc<Placement>,
    /// The queues living outside their name's bucket, which the router reads: those of the
    /// buckets this node owns as their logs keep them, the others as the watch last read them
    /// (`leaseq_server::placements`).
    queues_placed: Arc<Placements>,
    /// Wakes [`ClusterNode::watch_cluster`] (a bucket wants its owner read again).
    look_owners: Arc<Notify>,
    /// The node's SQS listener's connections, counted by the accept loop it is handed to.
    connection_stats: Arc<ConnectionStats>,
    shutdown: watch::Sender<bool>,
}

/// How a bucket's service reaches the other buckets: through the node (weakly, so that the
/// node's services do not keep it alive).
struct ThroughNode(Weak<ClusterNode>);

impl RemoteBuckets for ThroughNode {
    fn call(&self, bucket: u32, call: BucketCall) -> RemoteAnswer<'_> {
        Box::pin(async move {
            let node = self
                .0
                .upgrade()
                .ok_or_else(|| SqsError::service_unavailable("the node is stopping"))?;
            node.call_bucket(bucket, call).await
        })
    }
}

impl ClusterNode {
    /// A node that has not joined yet; [`ClusterNode::run`] joins.
    pub fn new(config: ClusterConfig) -> Result<Arc<ClusterNode>, PostgresError> {
        let identity = config.log.node.clone().ok_or_else(|| {
            PostgresError::Config("a cluster node needs a node id and an address".into())
        })?;
        if config.node_timeout < super::NODE_TIMEOUT_MIN {
            return Err(PostgresError::Config(format!(
                "the node timeout must be at least {} ms",
                super::NODE_TIMEOUT_MIN.as_millis()
            )));
        }
        if !(1..=crate::BUCKETS_MAX).contains(&config.log.buckets) {
            return Err(PostgresError::Config(format!(
                "a log has 1 to {} buckets, not {}",
                crate::BUCKETS_MAX,
                config.log.buckets
            )));
        }
        let schema = Schema::new(&config.log.schema)?;
        let clock = Arc::new(OffsetClock::default());
        let placement = Arc::new(Placement::default());
        let queues_placed = Arc::new(Placements::default());
        let look_owners = Arc::new(Notify::new());
        let shared = NodeShared {
            clock: clock.clone(),
            placement: placement.clone(),
            queues_placed: queues_placed.clone(),
            look_owners: look_owners.clone(),
        };
        let buckets = (0..config.log.buckets)
            .map(|bucket| {
                Arc::new(BucketNode::new(
                    config.clone(),
                    identity.clone(),
                    schema.clone(),
                    bucket,
                    shared.clone(),
                ))
            })
            .collect();
        let node = Arc::new(ClusterNode {
            config,
            identity,
            schema,
            buckets,
            forward_stats: ForwardStats::default(),
            key: OnceLock::new(),
            peers: OnceLock::new(),
            clock,
            placement,
            queues_placed,
            look_owners,
            connection_stats: Arc::default(),
            shutdown: watch::channel(false).0,
        });
        let remote: Arc<dyn RemoteBuckets> = Arc::new(ThroughNode(Arc::downgrade(&node)));
        for bucket in &node.buckets {
            let _ = bucket.remote.set(remote.clone());
        }
        Ok(node)
    }

    /// Posts bucket calls through `transport` instead of HTTP (tests of nodes in one process);
    /// before [`ClusterNode::run`].
    pub fn set_peer_transport(&self, transport: Arc<dyn PeerTransport>) {
        let _ = self.peers.set(transport);
    }

    /// Where the node's SQS listener counts its connections (pass it to the accept loop as
    /// `Connections::stats`); `/metrics` shows them.
    pub fn connection_stats(&self) -> &Arc<ConnectionStats> {
        &self.connection_stats
    }

    /// This node's id and address.
    pub fn identity(&self) -> &NodeIdentity {
        &self.identity
    }

    /// The log's bucket count.
    pub fn bucket_count(&self) -> u32 {
        self.buckets.len() as u32
    }

    /// The service of the first bucket this node owns, if any (with one bucket: the service,
    /// while this node owns the log).
    pub fn owned_service(&self) -> Option<Arc<Service>> {
        self.buckets
            .iter()
            .find_map(|bucket| bucket.owned_service())
    }

    /// The services of every bucket this node owns, in bucket order.
    pub fn owned_services(&self) -> Vec<(u32, Arc<Service>)> {
        self.buckets
            .iter()
            .filter_map(|bucket| Some((bucket.bucket, bucket.owned_service()?)))
            .collect()
    }

    /// Per bucket, the node this node knows to own it (itself included), if it knows one.
    pub fn bucket_owners(&self) -> Vec<Option<String>> {
        self.buckets
            .iter()
            .map(|bucket| match bucket.route() {
                Route::Here => Some(self.identity.node_id.clone()),
                Route::Peer(peer) => Some(peer.node_id.to_string()),
                Route::Unknown => None,
            })
            .collect()
    }

    /// Messages waiting in the outboxes of the buckets this node owns, on their way to another
    /// bucket (they count in neither queue meanwhile).
    pub fn transfers_waiting(&self) -> u64 {
        self.owned_services()
            .iter()
            .map(|(_, service)| service.transfers_waiting())
            .sum()
    }

    /// Per bucket, the epoch this node owns it under, if it owns it.
    pub fn bucket_epochs(&self) -> Vec<Option<i64>> {
        self.buckets
            .iter()
            .map(|bucket| bucket.owned().map(|owned| owned.epoch))
            .collect()
    }

    /// This node's view of the cluster: of its first owned bucket, or of bucket 0 when it owns
    /// none; the counters summed over every bucket.
    pub fn status(&self) -> NodeStatus {
        let statuses: Vec<NodeStatus> = self.buckets.iter().map(|b| b.status()).collect();
        let mut status = statuses
            .iter()
            .find(|status| status.role == "owner")
            .unwrap_or(&statuses[0])
            .clone();
        status.takeovers = statuses.iter().map(|s| s.takeovers).sum();
        status.takeovers_after_release = statuses.iter().map(|s| s.takeovers_after_release).sum();
        status.step_downs = statuses.iter().map(|s| s.step_downs).sum();
        status.buckets_owned = statuses
            .iter()
            .zip(0u32..)
            .filter(|(status, _)| status.role == "owner")
            .map(|(_, bucket)| bucket)
            .collect();
        status
    }

    /// The node's own lines for `GET /metrics` (Prometheus text).
    pub fn render_metrics(&self) -> String {
        let status = self.status();
        let [forwarded, refused, broken, unrouted] = self.forward_stats.read();
        format!(
            "# HELP leaseq_cluster_buckets_owned Buckets of the log this node owns.\n\
             # TYPE leaseq_cluster_buckets_owned gauge\n\
             leaseq_cluster_buckets_owned {}\n\
             # HELP leaseq_cluster_epoch The epoch this node owns its (first) bucket under (0: a standby).\n\
             # TYPE leaseq_cluster_epoch gauge\n\
             leaseq_cluster_epoch {}\n\
             # HELP leaseq_cluster_takeovers_total Times this node took a bucket over.\n\
             # TYPE leaseq_cluster_takeovers_total counter\n\
             leaseq_cluster_takeovers_total {}\n\
             # HELP leaseq_cluster_takeovers_after_release_total Takeovers of a bucket its previous owner had released after a hand-off (served without waiting a confirmation window).\n\
             # TYPE leaseq_cluster_takeovers_after_release_total counter\n\
             leaseq_cluster_takeovers_after_release_total {}\n\
             # HELP leaseq_cluster_step_downs_total Times this node stopped owning a bucket.\n\
             # TYPE leaseq_cluster_step_downs_total counter\n\
             leaseq_cluster_step_downs_total {}\n\
             # HELP leaseq_cluster_forwarded_requests_total Requests this node forwarded, by outcome: answered by the owner, refused by it (retried), broken (outcome unknown), unrouted (no owner known in time).\n\
             # TYPE leaseq_cluster_forwarded_requests_total counter\n\
             leaseq_cluster_forwarded_requests_total{{outcome=\"answered\"}} {forwarded}\n\
             leaseq_cluster_forwarded_requests_total{{outcome=\"refused\"}} {refused}\n\
             leaseq_cluster_forwarded_requests_total{{outcome=\"broken\"}} {broken}\n\
             leaseq_cluster_forwarded_requests_total{{outcome=\"unrouted\"}} {unrouted}\n",
            status.buckets_owned.len(),
            status.epoch.unwrap_or(0),
            status.takeovers,
            status.takeovers_after_release,
            status.step_downs,
        )
    }

    /// The node's control loops: joins (creating or migrating the schema), then runs every
    /// bucket's loop (standby, takeover, owner, step-down, and again) and the watch of the
    /// buckets' owners; after [`Api::shut_down`] and its hand-offs only the watch goes on (for
    /// the requests forwarded while the node drains), until the future is dropped. Returns only
    /// an error of joining (or `Ok` on a shutdown before it joined). `on_owner` is called with
    /// each new service, for the bucket it serves (to start its move driver, create configured
    /// queues).
    pub async fn run(
        self: Arc<Self>,
        on_owner: impl Fn(Arc<Service>) + Send + Sync + 'static,
    ) -> Result<(), PostgresError> {
        let joined = self.join().await;
        if !matches!(joined, Ok(true)) {
            for bucket in &self.buckets {
                bucket.shut_down();
                bucket.nothing_to_hand_off();
            }
            return joined.map(drop);
        }
        let on_owner: Arc<dyn Fn(Arc<Service>) + Send + Sync> = Arc::new(on_owner);
        let mut watch = super::Watcher(tokio::spawn(self.clone().watch_cluster()));
        let loops = self
            .buckets
            .iter()
            .map(|bucket| tokio::spawn(bucket.clone().run(on_owner.clone())));
        let loops: Vec<_> = loops.map(super::Watcher).collect();
        for mut watcher in loops {
            let _ = (&mut watcher.0).await;
        }
        // Every bucket handed off: the watch goes on finding owners for the requests forwarded
        // while the HTTP layer drains, until the caller drops this future.
        let _ = (&mut watch.0).await;
        Ok(())
    }

    /// Creates or migrates the schema (the lock's heartbeat and the standbys read its tables),
    /// checks the log's bucket count, reads the receipt key and records this node in the node
    /// table, retrying until PostgreSQL answers: `Ok(false)` on shutdown first, an error when
    /// the log has another bucket count than this node was started with.
    async fn join(&self) -> Result<bool, PostgresError> {
        let mut shutdown = self.shutdown.subscribe();
        let mut retry = RETRY_MIN;
        let configured = self.bucket_count();
        loop {
            let joined = async {
                let mut client = schema::connect(&self.config.log.connection).await?;
                schema::migrate(&mut client, &self.schema).await?;
                let recorded = schema::bucket_count(&client, &self.schema, configured).await?;
                if recorded != configured {
                    return Err(PostgresError::BucketCount {
                        schema: self.schema.name().to_string(),
                        recorded,
                        configured,
                    });
                }
                let key = schema::receipt_key(&client, &self.schema).await?;
                ownership::announce(&client, &self.schema, &self.identity, true).await?;
                Ok(key)
            };
            tokio::select! {
                joined = joined => match joined {
                    Ok(key) => {
                        let _ = self.key.set(ReceiptKey::new(key));
                        return Ok(true);
                    }
                    Err(error @ PostgresError::BucketCount { .. }) => return Err(error),
                    Err(error) => {
                        tracing::warn!(%error, "joining the cluster: PostgreSQL did not answer; trying again");
                        tokio::time::sleep(retry).await;
                        retry = (retry * 2).min(RETRY_MAX);
                    }
                },
                () = stopped(&mut shutdown) => return Ok(false),
            }
        }
    }

    /// The node's watch of the cluster, one task on one PostgreSQL session for every bucket:
    /// each round (every [`OWNER_POLL`], or at once when a bucket asks to look again) it reads
    /// every bucket's serving owner and tells each bucket (a standby forwards to it), and, with
    /// several buckets, refreshes this node's row of the node table and reads which nodes are
    /// live and which buckets' locks are held, for placement (`placement.rs`). On shutdown it
    /// marks the node gone first, so that the others stop preferring it and wait for the
    /// buckets it is about to hand off; it keeps finding owners while the node drains, for the
    /// requests still forwarded. Runs until aborted.
    async fn watch_cluster(self: Arc<Self>) {
        let mut shutdown = self.shutdown.subscribe();
        let mut client: Option<tokio_postgres::Client> = None;
        let mut announced: Option<std::time::Instant> = None;
        let mut left = false;
        let placed = self.bucket_count() > 1;
        let (announce_every, live_ms) = if placed {
            let live = ANNOUNCE_PLACEMENT_EVERY * LIVE_ROUNDS;
            (ANNOUNCE_PLACEMENT_EVERY, live.as_millis() as i64)
        } else {
            (ANNOUNCE_EVERY, 0)
        };
        let keys: Vec<i64> = (0..self.bucket_count() as i32)
            .map(|bucket| self.schema.ownership_key(bucket))
            .collect();
        loop {
            if client.is_none() {
                client = match schema::connect(&self.config.log.connection).await {
                    Ok(client) => Some(client),
                    Err(error) => {
                        tracing::warn!(%error, "a node could not reach PostgreSQL to watch the buckets' owners");
                        None
                    }
                };
            }
            if let Some(connected) = &client {
                let leaving = *shutdown.borrow();
                let read = async {
                    if leaving && placed && !left {
                        ownership::leave(connected, &self.schema, &self.identity).await?;
                        left = true;
                    } else if !leaving && announced.is_none_or(|at| at.elapsed() >= announce_every)
                    {
                        ownership::announce(connected, &self.schema, &self.identity, false).await?;
                        announced = Some(std::time::Instant::now());
                    }
                    let owners = ownership::read_owners(connected, &self.schema).await?;
                    let known = self.queues_placed.len();
                    for (name, bucket) in
                        read_queue_placements(connected, &self.schema, known).await?
                    {
                        self.queues_placed.insert(name, bucket);
                    }
                    let placement = if placed {
                        Some((
                            ownership::live_nodes(connected, &self.schema, live_ms).await?,
                            ownership::held_locks(connected).await?,
                        ))
                    } else {
                        None
                    };
                    Ok::<_, PostgresError>((owners, placement))
                };
                match read.await {
                    Ok((owners, placement)) => {
                        let mut rows: Vec<Option<OwnerRow>> = vec![None; self.buckets.len()];
                        for (bucket, owner) in owners {
                            if let Some(row) = rows.get_mut(bucket as usize) {
                                *row = Some(owner);
                            }
                        }
                        for (bucket, row) in self.buckets.iter().zip(rows) {
                            bucket.see_owner(row);
                        }
                        if let Some((live, held)) = placement {
                            let held: Vec<bool> =
                                keys.iter().map(|key| held.contains(key)).collect();
                            self.placement.refresh(live, &held);
                        }
                    }
                    Err(error) => {
                        tracing::debug!(%error, "reading the buckets' owners failed");
                        client = None;
                    }
                }
            }
            tokio::select! {
                () = tokio::time::sleep(OWNER_POLL) => {}
                () = self.look_owners.notified() => {}
                () = stopped(&mut shutdown), if !*shutdown.borrow() => {}
            }
        }
    }

    /// Waits until every bucket's hand-off after shutdown is done.
    pub async fn handed_off(&self) {
        for bucket in &self.buckets {
            bucket.handed_off().await;
        }
    }

    /// The bucket whose node executes `action`: its queue's; `None` for one any owner runs.
    fn bucket_of(&self, action: &Action, caller: &Caller) -> Option<&BucketNode> {
        let bucket = bucket_of_action(
            &self.config.service,
            self.bucket_count(),
            &self.queues_placed,
            action,
            caller,
        )?;
        self.buckets.get(bucket as usize).map(|bucket| &**bucket)
    }

    /// Has the owner of `bucket` answer `call`: this node, or the owner it posts the call to.
    async fn call_bucket(&self, bucket: u32, call: BucketCall) -> Result<BucketAnswer, SqsError> {
        let node = self
            .buckets
            .get(bucket as usize)
            .ok_or_else(|| SqsError::internal(format!("no bucket {bucket}")))?;
        let key = self
            .key
            .get()
            .ok_or_else(|| SqsError::service_unavailable("the node has not joined yet"))?;
        let started = tokio::time::Instant::now();
        let mut attempts = 0;
        loop {
            match node.route() {
                Route::Here => return node.answer_bucket_call(call).await,
                Route::Peer(peer) => {
                    attempts += 1;
                    let body = bucket_wire::encode_call(key, self.now_ms(), bucket, &call);
                    let transport = self.peers.get_or_init(|| Arc::new(PeerClient::default()));
                    match transport.post(&peer, body).await {
                        Posted::Answered(bytes) => {
                            return bucket_wire::decode_answer(&bytes).map_err(|error| {
                                SqsError::internal(format!(
                                    "node {} answered a bucket call with {error}",
                                    peer.node_id
                                ))
                            })?;
                        }
                        Posted::Refused(reason) => {
                            tracing::debug!(peer = %peer.node_id, bucket, reason, "a peer did not take a bucket call");
                            node.peer_refused(&peer);
                            if attempts >= CALL_ATTEMPTS_MAX {
                                return Err(SqsError::service_unavailable(format!(
                                    "no node took a call to bucket {bucket} after {attempts} tries"
                                )));
                            }
                        }
                        Posted::Broken(error) => {
                            return Err(SqsError::service_unavailable(format!(
                                "node {} did not answer a call to bucket {bucket}: {error}",
                                peer.node_id
                            )));
                        }
                    }
                }
                Route::Unknown => {
                    if started.elapsed() >= CALL_ROUTE_WAIT {
                        return Err(SqsError::service_unavailable(format!(
                            "no node serves bucket {bucket} right now (a takeover is under way); try again"
                        )));
                    }
                    tokio::time::sleep(CALL_ROUTE_POLL).await;
                }
            }
        }
    }

    /// Answers a bucket call another node posted (`bucket_wire::PATH`): the encoded answer, or
    /// `Err` with why it was not taken: `Ok(None)` when this node does not own the bucket
    /// (the caller looks for the owner again).
    pub async fn answer_posted_call(&self, body: &[u8]) -> Result<Option<Vec<u8>>, String> {
        let key = self.key.get().ok_or("the node has not joined yet")?;
        let (bucket, call) = bucket_wire::decode_call(key, self.now_ms(), body)?;
        let node = self
            .buckets
            .get(bucket as usize)
            .ok_or_else(|| format!("no bucket {bucket}"))?;
        if !matches!(node.route(), Route::Here) {
            return Ok(None);
        }
        let answer = node.answer_bucket_call(call).await;
        Ok(Some(bucket_wire::encode_answer(&answer)))
    }

    /// The time by the engines' clock (PostgreSQL's, or a test's).
    fn now_ms(&self) -> u64 {
        match &self.config.clock {
            Some(clock) => clock.now_ms(),
            None => leaseq_server::clock::Clock::now_ms(&*self.clock),
        }
    }
}

/// The placements of queues (`leaseq_server::placements`) that the watch has not read yet,
/// `known` of them read before: none while the table holds no more rows (placements are never
/// deleted, so a count that has not grown means nothing new), else every row.
async fn read_queue_placements(
    client: &tokio_postgres::Client,
    schema: &Schema,
    known: usize,
) -> Result<Vec<(Arc<str>, u32)>, PostgresError> {
    let count = schema.sql("SELECT count(*) FROM {schema}.placement");
    let rows: i64 = client.query_one(&count, &[]).await?.get(0);
    if rows as usize <= known {
        return Ok(Vec::new());
    }
    let all = schema.sql("SELECT name, bucket FROM {schema}.placement");
    Ok(schema::placements(&client.query(&all, &[]).await?))
}

/// The dashboard and `/metrics` of a cluster node show the buckets it owns (their queues,
/// storage and transfers) and its own cluster counters; a queue's routes run on its bucket's
/// service through [`Api::execute`], between two confirmations of the bucket's epoch.
impl leaseq_server::dashboard::Observed for ClusterNode {
    fn each_service(&self, each: &mut dyn FnMut(&Service)) {
        for (_, service) in self.owned_services() {
            each(&service);
        }
    }

    fn request_metrics(&self) -> Option<Arc<leaseq_server::Metrics>> {
        self.config.metrics.clone()
    }

    fn connection_counts(&self) -> Option<leaseq_server::metrics::ConnectionCounts> {
        Some(self.connection_stats.counts())
    }

    fn node_metrics(&self) -> String {
        self.render_metrics()
    }
}

impl Api for ClusterNode {
    async fn execute(&self, action: Action, caller: &Caller) -> Result<Outcome, SqsError> {
        match self.bucket_of(&action, caller) {
            Some(bucket) => bucket.execute(action, caller).await,
            // Any owned bucket's service gathers what spans every bucket.
            None => match self.buckets.iter().find(|b| b.owned_service().is_some()) {
                Some(bucket) => bucket.execute(action, caller).await,
                None => Err(SqsError::service_unavailable(
                    "this node owns no bucket of the log right now; try again",
                )),
            },
        }
    }

    fn shut_down(&self) {
        self.shutdown.send_replace(true);
        for bucket in &self.buckets {
            bucket.shut_down();
        }
    }

    fn readiness(&self) -> Result<(), String> {
        self.buckets
            .iter()
            .try_for_each(|bucket| bucket.readiness())
    }

    fn route(&self, action: &Action, caller: &Caller) -> Route {
        if let Some(bucket) = self.bucket_of(action, caller) {
            return bucket.route();
        }
        // Any owner runs it: this node if it owns a bucket, else the first owner it knows.
        let mut first_peer = None;
        for bucket in &self.buckets {
            match bucket.route() {
                Route::Here => return Route::Here,
                Route::Peer(peer) => {
                    first_peer.get_or_insert(peer);
                }
                Route::Unknown => {}
            }
        }
        first_peer.map_or(Route::Unknown, Route::Peer)
    }

    fn peer_refused(&self, peer: &Peer) {
        for bucket in &self.buckets {
            bucket.peer_refused(peer);
        }
    }

    fn placed_elsewhere(&self, action: &Action, caller: &Caller) -> bool {
        let buckets = self.bucket_count();
        let config = &self.config.service;
        let unplaced = Placements::default();
        let home = bucket_of_action(config, buckets, &unplaced, action, caller);
        let placed = bucket_of_action(config, buckets, &self.queues_placed, action, caller);
        home != placed
            && home.is_some_and(|home| matches!(self.buckets[home as usize].route(), Route::Here))
    }

    fn placements_changed(&self) {
        self.look_owners.notify_one();
    }

    fn forward_stats(&self) -> Option<&ForwardStats> {
        Some(&self.forward_stats)
    }
}

impl BucketNode {
    /// Answers a bucket call on this bucket's engine, if this node owns it, between two
    /// confirmations of its epoch (as a request is answered).
    pub(super) async fn answer_bucket_call(
        &self,
        call: BucketCall,
    ) -> Result<BucketAnswer, SqsError> {
        let owned = self.owned().ok_or_else(|| {
            SqsError::service_unavailable("this node does not own the bucket right now; try again")
        })?;
        let _in_flight = owned.enter();
        self.confirm(&owned).await?;
        let answer = owned.service.answer_bucket_call(self.bucket, call).await;
        self.confirm(&owned).await?;
        answer
    }
}
