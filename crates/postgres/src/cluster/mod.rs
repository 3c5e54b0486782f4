//! leaseq cluster: several nodes share one PostgreSQL log, and any node answers any request.
//!
//! In this version the log is one bucket, owned by one node at a time: the **owner** runs the
//! engine (an ordinary [`Service`] over [`crate::PgLog`]); every other node is a **standby**
//! that forwards each SQS request, unchanged, to the owner ([`Route::Peer`]; the HTTP layer's
//! `http::forward` does the forwarding) and waits for the ownership lock. When the owner dies or
//! stops answering, PostgreSQL releases its lock, one standby gets it, raises the bucket's epoch
//! (which fences out the old owner's every later flush) and recovers the engine from the log,
//! exactly as a restarted single node would. See `docs/design/cluster.md`.
//!
//! [`BucketNode::run`] is the node's one control loop: standby (watch the owner, wait for the
//! lock), take over, serve as owner (heartbeat on the lock's session), step down when the
//! session or the epoch is lost, hand off on shutdown. `owner.rs` is the owner's half,
//! `ownership.rs` the lock's session and the statements of ownership, `status.rs` what
//! operators read.
//!
//! Reads need the epoch too: a paused owner whose lock already passed on could answer counts or
//! an empty receive from a stale engine. So every request an owner executes is bracketed by
//! [`BucketNode::confirm`]: the epoch must have been read back as this node's within the
//! confirmation window (shorter than the node timeout, so within it no other node can have
//! taken over through the lock), before the request starts and again before its answer leaves;
//! otherwise it is checked on the spot, and a failed check answers `ServiceUnavailable`.

mod node;
mod owner;
pub(crate) mod ownership;
pub mod placement;
pub mod status;

pub use node::{ClusterNode, PeerTransport};

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leaseq_server::clock::{OffsetClock, SharedClock};
use leaseq_server::placements::Placements;
use leaseq_server::service::{Peer, RemoteBuckets, Route};
use leaseq_server::{Api, Caller, Metrics, Service, ServiceConfig};
use leaseq_sqs::error::SqsError;
use leaseq_sqs::{Action, Outcome};
use parking_lot::{Mutex, RwLock};
use tokio::sync::{watch, Notify};

use crate::schema::Schema;
use crate::{NodeIdentity, PgConfig};
use owner::Owned;
use ownership::{Confirmed, LockSession, OwnerRow};

/// `--node-timeout-ms`' default: how long an owner may stop answering PostgreSQL before it
/// loses the log to a standby.
pub const NODE_TIMEOUT_DEFAULT: Duration = Duration::from_secs(5);
/// The shortest node timeout accepted (PostgreSQL's `idle_session_timeout` counts milliseconds,
/// but heartbeats need a few of them in each timeout).
pub const NODE_TIMEOUT_MIN: Duration = Duration::from_millis(400);
/// How often a node reads every bucket's owner (one statement; with several buckets, also the
/// live nodes and held locks placement needs) when nothing tells it to look sooner.
pub const OWNER_POLL: Duration = Duration::from_millis(250);
/// How long a standby avoids an owner that refused a forward, under the epoch it refused in.
pub const REFUSAL_HOLD: Duration = Duration::from_secs(1);
/// How often a node refreshes its row in the node table (for `leaseq cluster status`), and an
/// owner measures its clock's offset from PostgreSQL's again.
pub const ANNOUNCE_EVERY: Duration = Duration::from_secs(5);
/// Waits after a failed connect or takeover, doubling up to the maximum.
pub const RETRY_MIN: Duration = Duration::from_millis(50);
/// The longest wait after a failed connect or takeover.
pub const RETRY_MAX: Duration = Duration::from_secs(2);

// The protocol's decisions as pure functions of durations, which the control loop, the lock's
// heartbeat and the request path call, and which the seeded model of the protocol
// (`tests/ownership_simulation.rs`) calls too: a change here is a change the model checks.

/// How recently the epoch must have been confirmed for a request to be answered without a
/// check of its own: at most a second, and half a node timeout, so that no other node can have
/// taken the lock over through the idle timeout since (it would have had to wait a whole node
/// timeout). A session that PostgreSQL ended at once (a restart) is covered by
/// [`serving_delay`].
pub fn confirm_window(node_timeout: Duration) -> Duration {
    (node_timeout / 2).min(Duration::from_secs(1))
}

/// How long after it was granted the lock a new owner waits before it marks itself serving (and
/// answers anything). PostgreSQL may have ended the old owner's lock session at once (a restart,
/// `pg_terminate_backend`, a failover) while the old owner was paused or cut off, unaware; it
/// still answers reads on a confirmation taken before its session ended, so before this grant,
/// for at most a confirmation window. Waiting the window out means no answer of the old owner's
/// can come after one of the new owner's. The wait overlaps recovery, and costs a takeover at
/// most a second.
///
/// None when the old owner released the bucket at the end of a hand-off (`previous_released`,
/// read by the claim that replaced its epoch): it writes the release only after it retired its
/// confirmation, so once the release is written it lets no further answer leave, and the claim
/// comes after the release.
pub fn serving_delay(node_timeout: Duration, previous_released: bool) -> Duration {
    if previous_released {
        Duration::ZERO
    } else {
        confirm_window(node_timeout)
    }
}

/// How long an owner serves a bucket at least before it hands it to the node placement prefers
/// (`placement.rs`).
pub const REBALANCE_AFTER: Duration = Duration::from_secs(2);

/// How long a hand-off waits for the requests executing on the old owner to finish before it
/// retires its confirmation (those still executing then fail their second confirmation).
pub const HAND_OFF_DRAIN_MAX: Duration = Duration::from_secs(5);

/// How often the owner's lock session reads the epoch: four times to a node timeout, and at
/// least twice to a confirmation window.
pub fn heartbeat_interval(node_timeout: Duration) -> Duration {
    (node_timeout / 4).min(confirm_window(node_timeout) / 2)
}

/// How long a heartbeat's read may go unanswered before the session counts as lost.
pub fn heartbeat_answer_max(heartbeat: Duration) -> Duration {
    heartbeat.max(Duration::from_millis(500)) * 4
}

/// Whether a confirmation `since` ago (`None`: none since the node last lost one) lets a
/// request be answered without a check of its own.
pub fn confirmed_within(since: Option<Duration>, window: Duration) -> bool {
    since.is_some_and(|since| since <= window)
}

/// Why an owner must step down now, if it must: checked after every heartbeat interval (and
/// whenever the lock session is found gone).
pub fn step_down_reason(
    lock_alive: bool,
    log_failed: bool,
    confirmed_since: Option<Duration>,
    node_timeout: Duration,
) -> Option<&'static str> {
    if !lock_alive {
        Some("the ownership session ended")
    } else if log_failed {
        Some("the log failed")
    } else if !confirmed_within(confirmed_since, node_timeout) {
        Some("the epoch was not confirmed within the node timeout")
    } else {
        None
    }
}

/// One reading of PostgreSQL's clock: the host's time (ms) when the statement was sent and
/// when its answer arrived, and PostgreSQL's `clock_timestamp()` in between.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClockReading {
    /// The host's clock when the statement was sent.
    pub host_sent_ms: i64,
    /// PostgreSQL's `clock_timestamp()`, in milliseconds since the Unix epoch.
    pub postgres_ms: i64,
    /// The host's clock when the answer arrived.
    pub host_received_ms: i64,
}

/// The offset of PostgreSQL's clock from the host's, taken so that the host's clock plus the
/// offset is never ahead of PostgreSQL's: the reading is compared with the host's time *after*
/// the answer arrived, so the round trip makes the offset smaller, never larger. A lease
/// deadline written by an earlier owner is then never reached early; the leases this owner
/// grants are short by as long as the answer took, which `choose_clock_reading` bounds.
pub fn clock_offset_ms(reading: ClockReading) -> i64 {
    reading.postgres_ms - reading.host_received_ms
}

/// The longest round trip of a reading of PostgreSQL's clock that a node takes as it is: the
/// clock it sets is behind PostgreSQL's by up to the round trip, and the leases it grants are
/// short by as much on PostgreSQL's clock once a later owner ends them. A slower answer (a pause,
/// a stalled link) is read again.
pub const CLOCK_READING_ROUND_TRIP_MAX_MS: i64 = 2;
/// Readings taken at most, one after the other, looking for one within
/// [`CLOCK_READING_ROUND_TRIP_MAX_MS`]; after that the shortest is kept (a link slower than that
/// bound all the time: the leases' shortfall is then its round trip).
pub const CLOCK_READINGS_MAX: usize = 10;

impl ClockReading {
    /// How long the answer took, by the host's clock.
    pub fn round_trip_ms(&self) -> i64 {
        self.host_received_ms - self.host_sent_ms
    }
}

/// Given the `taken`-th reading of a measurement (counting from 1) and the best one before it
/// (kept in `best`, which this updates), the reading to set the clock by, or `None` to read
/// again.
pub fn choose_clock_reading(
    best: &mut Option<ClockReading>,
    reading: ClockReading,
    taken: usize,
) -> Option<ClockReading> {
    if best.is_none_or(|best| reading.round_trip_ms() < best.round_trip_ms()) {
        *best = Some(reading);
    }
    if reading.round_trip_ms() <= CLOCK_READING_ROUND_TRIP_MAX_MS {
        return Some(reading);
    }
    (taken >= CLOCK_READINGS_MAX).then(|| best.expect("set above"))
}

/// Whether a standby still avoids an owner whose forward it saw refused `since` ago (under the
/// epoch the owner still has).
pub fn refusal_holds(since: Duration) -> bool {
    since < REFUSAL_HOLD
}

/// What a cluster node needs to know.
#[derive(Clone)]
pub struct ClusterConfig {
    /// Where the log is; its `node` is this node.
    pub log: PgConfig,
    /// The service each takeover starts.
    pub service: ServiceConfig,
    /// Checkpoint after this many logged bytes (as `leaseq serve --checkpoint-bytes`).
    pub checkpoint_log_bytes_min: u64,
    /// How long an owner may stop answering PostgreSQL before a standby takes over.
    pub node_timeout: Duration,
    /// Where every service of this node observes requests (`None`: metrics off).
    pub metrics: Option<Arc<Metrics>>,
    /// The clock engines run on: `None` (`leaseq serve`) is PostgreSQL's time, measured at
    /// each takeover; a test passes its own to jump time (every node the same one).
    pub clock: Option<SharedClock>,
}

impl ClusterConfig {
    /// Heartbeats on the lock's session ([`heartbeat_interval`]).
    fn heartbeat(&self) -> Duration {
        heartbeat_interval(self.node_timeout)
    }

    /// The confirmation window ([`confirm_window`]).
    fn confirm_window(&self) -> Duration {
        confirm_window(self.node_timeout)
    }
}

/// A node's part in the cluster right now.
enum Role {
    /// Forwards requests to the owner, if one is known, and waits for the lock.
    Standby { owner: Option<(OwnerRow, Peer)> },
    /// Runs the engine.
    Owner(Arc<Owned>),
}

/// One bucket of the log as one node sees it: owned here (this node runs its engine) or by a
/// peer it forwards to, with the control loop that takes it over, serves it, steps down and
/// hands it off. [`ClusterNode`] holds one per bucket of the log.
pub(crate) struct BucketNode {
    config: ClusterConfig,
    identity: NodeIdentity,
    schema: Schema,
    /// Which bucket of the log.
    bucket: u32,
    /// How the bucket's service reaches the other buckets (set once the node is made).
    remote: std::sync::OnceLock<Arc<dyn RemoteBuckets>>,
    /// Which node should own which bucket (the node's, shared by its buckets).
    placement: Arc<placement::Placement>,
    /// The queues living outside their name's bucket (the node's, shared by its buckets'
    /// services and its router; `leaseq_server::placements`).
    queues_placed: Arc<Placements>,
    role: RwLock<Role>,
    /// The owner a forward failed to reach, with the epoch it owned and when: not routed to
    /// again under that epoch for [`REFUSAL_HOLD`] (it is dead or leaving, and a standby takes
    /// over; if it is not, the refusal expires and the owner is tried again).
    refused: Mutex<Option<(String, i64, Instant)>>,
    /// Wakes the control loop to look again: a forward was refused, or a request's check of
    /// the epoch failed.
    look_again: Notify,
    /// Wakes the node's watch of the buckets' owners (`ClusterNode::watch_cluster`), shared by
    /// every bucket of the node.
    look_owners: Arc<Notify>,
    confirmed: Arc<Confirmed>,
    /// The epoch this node owns the bucket under (0: none), for the lock's heartbeat.
    epoch: watch::Sender<i64>,
    /// Set once a hand-off after shutdown is done (or there was nothing to hand off).
    handed_off: watch::Sender<bool>,
    /// Engines run on PostgreSQL's clock.
    clock: Arc<OffsetClock>,
    shutdown: watch::Sender<bool>,
    takeovers: AtomicU64,
    /// Takeovers of a log its previous owner had released (served without a serving delay).
    takeovers_after_release: AtomicU64,
    step_downs: AtomicU64,
}

/// What [`BucketNode::status`] tells.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeStatus {
    pub node_id: String,
    /// `"owner"` or `"standby"`.
    pub role: &'static str,
    /// The epoch this node owns the log under, if it is the owner.
    pub epoch: Option<i64>,
    /// The owner this node knows of (itself, when it is the owner).
    pub owner: Option<NodeIdentity>,
    pub takeovers: u64,
    /// The buckets this node owns (with one bucket: `[0]` on the owner, empty on a standby).
    pub buckets_owned: Vec<u32>,
    /// Takeovers of a log whose previous owner released it at the end of a hand-off, which
    /// served without waiting a confirmation window.
    pub takeovers_after_release: u64,
    pub step_downs: u64,
}

/// What every bucket of a node shares with the node.
#[derive(Clone)]
struct NodeShared {
    /// PostgreSQL's clock, as the node measures it.
    clock: Arc<OffsetClock>,
    /// Which node should own which bucket.
    placement: Arc<placement::Placement>,
    /// The queues living outside their name's bucket.
    queues_placed: Arc<Placements>,
    /// Wakes the node's watch of the buckets' owners.
    look_owners: Arc<Notify>,
}

impl BucketNode {
    /// Bucket `bucket` of a node that has not joined yet, with what the node's buckets share.
    fn new(
        config: ClusterConfig,
        identity: NodeIdentity,
        schema: Schema,
        bucket: u32,
        shared: NodeShared,
    ) -> BucketNode {
        let NodeShared {
            clock,
            placement,
            queues_placed,
            look_owners,
        } = shared;
        BucketNode {
            schema,
            identity,
            config,
            bucket,
            remote: std::sync::OnceLock::new(),
            placement,
            queues_placed,
            role: RwLock::new(Role::Standby { owner: None }),
            refused: Mutex::new(None),
            look_again: Notify::new(),
            look_owners,
            confirmed: Arc::default(),
            epoch: watch::channel(0).0,
            handed_off: watch::channel(false).0,
            clock,
            shutdown: watch::channel(false).0,
            takeovers: AtomicU64::new(0),
            takeovers_after_release: AtomicU64::new(0),
            step_downs: AtomicU64::new(0),
        }
    }

    /// The bucket as PostgreSQL's statements name it.
    fn bucket_id(&self) -> i32 {
        self.bucket as i32
    }

    /// What this node holds of the bucket, while it owns it.
    fn owned(&self) -> Option<Arc<Owned>> {
        match &*self.role.read() {
            Role::Owner(owned) => Some(owned.clone()),
            Role::Standby { .. } => None,
        }
    }

    /// The service, while this node owns the bucket.
    pub(crate) fn owned_service(&self) -> Option<Arc<Service>> {
        match &*self.role.read() {
            Role::Owner(owned) => Some(owned.service.clone()),
            Role::Standby { .. } => None,
        }
    }

    /// This node's view of the bucket.
    pub(crate) fn status(&self) -> NodeStatus {
        let (role, epoch, owner) = match &*self.role.read() {
            Role::Owner(owned) => ("owner", Some(owned.epoch), Some(self.identity.clone())),
            Role::Standby { owner } => (
                "standby",
                None,
                owner.as_ref().map(|(owner, _)| NodeIdentity {
                    node_id: owner.node_id.clone(),
                    advertise: owner.advertise.clone(),
                }),
            ),
        };
        NodeStatus {
            node_id: self.identity.node_id.clone(),
            role,
            epoch,
            owner,
            takeovers: self.takeovers.load(Ordering::Relaxed),
            buckets_owned: match role {
                "owner" => vec![self.bucket],
                _ => Vec::new(),
            },
            takeovers_after_release: self.takeovers_after_release.load(Ordering::Relaxed),
            step_downs: self.step_downs.load(Ordering::Relaxed),
        }
    }

    /// The bucket's control loop, until the node shuts down and hands the bucket off: waits as
    /// a standby, takes over, serves, steps down, and again. `on_owner` is called with each new
    /// service (to start its move driver, create configured queues of the bucket).
    async fn run(self: Arc<Self>, on_owner: Arc<dyn Fn(Arc<Service>) + Send + Sync>) {
        let mut retry = RETRY_MIN;
        while !*self.shutdown.borrow() {
            let Some(lock) = self.wait_for_lock().await else {
                break;
            };
            match self.take_over(lock).await {
                Ok(owned) => {
                    retry = RETRY_MIN;
                    on_owner(owned.0.service.clone());
                    self.serve_as_owner(owned).await;
                    // A standby again: find the new owner at once.
                    self.look_owners.notify_one();
                }
                Err(error) => {
                    tracing::error!(bucket = self.bucket, %error, "taking the bucket over failed; trying again");
                    tokio::time::sleep(retry).await;
                    retry = (retry * 2).min(RETRY_MAX);
                }
            }
        }
        // Standing by after a hand-off: requests still arriving while the HTTP layer drains are
        // forwarded to the new owner, which the node's watch keeps finding. Only now, whatever
        // the loop was doing when the node shut down (waiting, taking over, serving), is
        // nothing of this bucket left to hand off.
        self.handed_off.send_replace(true);
    }

    /// Connects the lock's session and waits until it holds the lock, reconnecting after
    /// failures; `None` on shutdown. With several buckets, waits for the lock only while
    /// placement says this node may (`placement.rs`), and gives the wait up when it no longer
    /// may.
    async fn wait_for_lock(&self) -> Option<LockSession> {
        let mut shutdown = self.shutdown.subscribe();
        let mut retry = RETRY_MIN;
        let placed = self.config.log.buckets > 1;
        loop {
            if placed && !self.may_wait() {
                let changed = self.placement.changed.notified();
                if self.may_wait() {
                    continue;
                }
                tokio::select! {
                    () = changed => continue,
                    () = stopped(&mut shutdown) => return None,
                }
            }
            let acquire = LockSession::acquire(
                &self.config.log.connection,
                &self.schema,
                self.bucket_id(),
                self.config.node_timeout,
                self.config.heartbeat(),
                self.epoch_watch(),
                self.confirmed.clone(),
            );
            tokio::select! {
                acquired = acquire => match acquired {
                    Ok(lock) => return Some(lock),
                    Err(error) => {
                        tracing::warn!(bucket = self.bucket, %error, "waiting for a bucket's ownership lock failed; trying again");
                        tokio::time::sleep(retry).await;
                        retry = (retry * 2).min(RETRY_MAX);
                    }
                },
                // Dropping the wait closes its session, which leaves the lock's queue.
                () = self.no_longer_placed(placed) => {}
                () = stopped(&mut shutdown) => return None,
            }
        }
    }

    /// Whether placement lets this node wait for the bucket's lock.
    fn may_wait(&self) -> bool {
        self.placement.may_wait(&self.identity.node_id, self.bucket)
    }

    /// Completes once placement no longer lets this node wait for the lock (never with one
    /// bucket).
    async fn no_longer_placed(&self, placed: bool) {
        if !placed {
            return std::future::pending().await;
        }
        loop {
            let changed = self.placement.changed.notified();
            if !self.may_wait() {
                return;
            }
            changed.await;
        }
    }

    /// The epoch the lock's heartbeat compares with (0 until a claim).
    fn epoch_watch(&self) -> watch::Receiver<i64> {
        self.epoch.subscribe()
    }
}

/// The standby's watch task, aborted with the control loop that started it (a dropped
/// `JoinHandle` would leave it running).
struct Watcher(tokio::task::JoinHandle<()>);

impl Drop for Watcher {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Completes once `shutdown` says stop (the watch's guard is not held across an await).
async fn stopped(shutdown: &mut watch::Receiver<bool>) {
    let _ = shutdown.wait_for(|stop| *stop).await;
}

impl BucketNode {
    /// Takes in the owner as PostgreSQL records it: not this node (a row left by its own earlier
    /// ownership), and not one a forward just failed to reach under the same epoch.
    pub(super) fn see_owner(&self, row: Option<OwnerRow>) {
        let row = row.filter(|row| row.node_id != self.identity.node_id);
        let row = {
            let mut refused = self.refused.lock();
            match (&row, &*refused) {
                (Some(row), Some((node_id, epoch, at)))
                    if row.node_id == *node_id
                        && row.epoch == *epoch
                        && refusal_holds(at.elapsed()) =>
                {
                    None
                }
                _ => {
                    *refused = None;
                    row
                }
            }
        };
        let mut role = self.role.write();
        if let Role::Standby { owner } = &mut *role {
            let unchanged = owner.as_ref().map(|(known, _)| known) == row.as_ref();
            if !unchanged {
                if let Some(row) = &row {
                    tracing::info!(bucket = self.bucket, owner = %row.node_id, epoch = row.epoch, "the log's owner");
                }
                *owner = row.map(|row| {
                    let peer = Peer {
                        node_id: row.node_id.as_str().into(),
                        address: row.advertise.as_str().into(),
                    };
                    (row, peer)
                });
            }
        }
    }

    /// Whether `owned`'s epoch is confirmed recently enough to answer; checks it on the spot if
    /// not.
    async fn confirm(&self, owned: &Owned) -> Result<(), SqsError> {
        let window = self.config.confirm_window();
        if self.confirmed.within(window, owned.epoch) {
            return Ok(());
        }
        let sent = Instant::now();
        let checked = match owned.lock_client.upgrade() {
            Some(client) => {
                let check =
                    ownership::check_epoch(&client, &self.schema, self.bucket_id(), owned.epoch);
                tokio::time::timeout(window, check).await.ok()
            }
            None => None,
        };
        match checked {
            // Not once the ownership retired its confirmations (a hand-off about to release):
            // the check may have been sent before.
            Some(Ok(true)) if self.confirmed.mark(sent, owned.epoch) => Ok(()),
            _ => {
                self.look_again.notify_one();
                self.look_owners.notify_one();
                Err(SqsError::service_unavailable(
                    "this node could not confirm that it still owns the log; the request may or \
                     may not have taken effect",
                ))
            }
        }
    }
}

impl BucketNode {
    /// Executes `action` on the bucket's engine, if this node owns the bucket, between two
    /// confirmations of its epoch.
    async fn execute(&self, action: Action, caller: &Caller) -> Result<Outcome, SqsError> {
        let owned = match &*self.role.read() {
            Role::Owner(owned) => owned.clone(),
            Role::Standby { .. } => {
                let owner = match self.route() {
                    Route::Peer(peer) => format!("; node {} owns it", peer.node_id),
                    _ => String::new(),
                };
                return Err(SqsError::service_unavailable(format!(
                    "this node does not own bucket {} of the log right now{owner}; try again",
                    self.bucket
                )));
            }
        };
        let _in_flight = owned.enter();
        self.confirm(&owned).await?;
        let result = owned.service.execute(action, caller).await;
        // An answer that left only after the epoch was confirmed again: a node paused past its
        // node timeout answers nothing from its stale engine.
        self.confirm(&owned).await?;
        result
    }

    /// Stops the control loop: hands the bucket off if this node owns it, or once it does (a
    /// takeover under way completes, then hands off). The loop says when it is over
    /// ([`BucketNode::handed_off`]).
    fn shut_down(&self) {
        self.shutdown.send_replace(true);
        self.look_again.notify_one();
    }

    /// Says that no control loop runs for this bucket (the node never joined), so there is
    /// nothing to hand off.
    fn nothing_to_hand_off(&self) {
        self.handed_off.send_replace(true);
    }

    /// Whether the bucket is served, here or by a known owner.
    fn readiness(&self) -> Result<(), String> {
        match &*self.role.read() {
            Role::Owner(owned) => owned.service.readiness(),
            Role::Standby { owner: Some(_) } => Ok(()),
            Role::Standby { owner: None } => {
                Err(format!("no owner of bucket {} is known", self.bucket))
            }
        }
    }

    /// Where the bucket's requests go now.
    fn route(&self) -> Route {
        match &*self.role.read() {
            Role::Owner(_) => Route::Here,
            Role::Standby {
                owner: Some((_, peer)),
            } => Route::Peer(peer.clone()),
            Role::Standby { owner: None } => Route::Unknown,
        }
    }

    /// A forward to `peer` was refused: look for the bucket's owner again.
    fn peer_refused(&self, peer: &Peer) {
        let mut role = self.role.write();
        if let Role::Standby { owner } = &mut *role {
            if let Some((row, _)) = owner
                .as_ref()
                .filter(|(row, _)| *row.node_id == *peer.node_id)
            {
                *self.refused.lock() = Some((row.node_id.clone(), row.epoch, Instant::now()));
                *owner = None;
            }
        }
        drop(role);
        self.look_owners.notify_one();
    }
}
