//! The service: every SQS action (and leaseq's extensions) executed against the engine host,
//! independent of where the log lives.
//!
//! `http` decodes a request into an [`Action`] and calls [`Api::execute`]; [`Service`] is the
//! one implementation today. A router that forwards actions for queues another node owns (the
//! issue "leaseq cluster") implements [`Api`] too and sits in front of it. The dashboard, the
//! metrics page and `leaseq serve` use [`Service`] for what only a node can tell (its
//! observations, its move driver, its checkpoints).
//!
//! One file per action group, so an action is found in one hop from [`Service::execute`]:
//! `queues.rs` (queue lifecycle, attributes, tags, listings with pagination), `policy.rs`
//! (Add/RemovePermission), `messages.rs` (send, delete, visibility, fail), `receive.rs` (receive
//! and the one long-poll loop), `moves.rs` (move tasks and the one move driver), `history.rs`
//! (peek and attempt history) and `observe.rs` (what the service tells metrics and the
//! dashboard).
//!
//! After each operation, the records it journaled tell which queues got a message that is ready
//! now; their long-poll waiters are woken. Messages that become ready later (a delay or a lease
//! ends) are found by waiters themselves: they sleep on the service's clock no longer than the
//! queue's next deadline, and a changed lease wakes one of them to recompute it.

mod buckets;
mod history;
mod messages;
mod moves;
mod observe;
mod policy;
mod queues;
mod receive;
pub mod route;
mod transfers;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;

use axum::http::HeaderValue;
use leaseq_core::{Client, Engine, EngineConfig, Error, Journal, ReceiptKey, Record};
use leaseq_sqs::error::SqsError;
use leaseq_sqs::namespace::Namespace;
use leaseq_sqs::{Action, Context, Outcome};
use tokio::sync::watch;

use crate::checkpoint::Checkpoints;
use crate::clock::{SharedClock, SystemClock};
use crate::host::{EngineHost, Hosts, CHECKPOINT_LOG_BYTES_MIN};
use crate::log_store::{LogStore, Lsn, MemoryLog};
use crate::metrics::{ConnectionStats, Metrics};
use crate::placements::Placements;
use crate::waiters::Waiters;

pub use buckets::{wire as bucket_wire, BucketAnswer, BucketCall, RemoteAnswer, RemoteBuckets};
pub use moves::AUTOMATIC_RATE_PER_SECOND;
pub use route::{is_not_served_here, not_served_here, ForwardStats, Peer, Route};

/// Settings of the service.
#[derive(Clone, Debug)]
pub struct ServiceConfig {
    /// The engine's limits and options.
    pub engine: EngineConfig,
    /// Region for ARNs.
    pub region: String,
    /// Account id for ARNs.
    pub account_id: String,
}

/// Who is asking, as far as the service needs to know.
#[derive(Clone, Debug, Default)]
pub struct Caller {
    /// The sender id stamped on messages this caller sends (`SenderId`).
    /// Shared by every message of the request (a batch of ten allocates it once).
    pub sender_id: Arc<str>,
    /// The address of the client's connection, if the server knows it.
    pub address: Option<SocketAddr>,
    /// The request's `User-Agent` header, if any (kept as the header: most requests never
    /// look at it).
    pub user_agent: Option<HeaderValue>,
    /// The account and region whose queues the request addresses (its SigV4 key's account,
    /// the region its endpoint's host names); `None` is the home namespace (the service's
    /// `account_id` and `region`). See `leaseq_sqs::namespace`.
    pub namespace: Option<Namespace>,
    /// The account whose key signed the request (`auth = "sigv4"`), home account or not;
    /// `None` when requests are not authenticated (`auth = "none"`): then a queue URL's account
    /// is ignored and queue policies are not enforced. See `policy.rs`.
    pub account_id: Option<Arc<str>>,
}

impl Caller {
    /// The client as an attempt history records it.
    ///
    /// Each thread keeps the last client it made and hands it out again while the address and
    /// user agent match: a connection's receives come from the same client, and formatting the
    /// address alone cost ~1,600 instructions per receive. (The engine interns clients anyway,
    /// so a shared one is what it keeps; the cache holds a copy of the user agent, not the
    /// header, which would hold the connection's read buffer.)
    pub fn client(&self) -> Arc<Client> {
        type Last = Option<(Option<SocketAddr>, Option<Box<[u8]>>, Arc<Client>)>;
        thread_local! {
            static LAST: std::cell::RefCell<Last> = const { std::cell::RefCell::new(None) };
        }
        let user_agent = self.user_agent.as_ref().map(HeaderValue::as_bytes);
        LAST.with(|last| {
            let mut last = last.borrow_mut();
            if let Some((address, last_user_agent, client)) = last.as_ref() {
                if *address == self.address && last_user_agent.as_deref() == user_agent {
                    return client.clone();
                }
            }
            let client = Arc::new(self.new_client());
            *last = Some((self.address, user_agent.map(Box::from), client.clone()));
            client
        })
    }

    fn new_client(&self) -> Client {
        let address = self.address.map(|a| a.to_string()).unwrap_or_default();
        let user_agent = self
            .user_agent
            .as_ref()
            .map(|ua| String::from_utf8_lossy(ua.as_bytes()))
            .unwrap_or_default();
        Client::new(address, &user_agent)
    }
}

/// Executes SQS actions: what the HTTP layer calls.
pub trait Api: Send + Sync + 'static {
    /// Executes one action. A receive may wait (long polling) up to its wait time, and returns
    /// early, empty, when the service shuts down.
    fn execute(
        &self,
        action: Action,
        caller: &Caller,
    ) -> impl Future<Output = Result<Outcome, SqsError>> + Send;

    /// Releases every waiting receive (they answer empty) and refuses new waits.
    fn shut_down(&self);

    /// Whether the service should get traffic (`GET /readyz`): `Err` with the reason while it
    /// drains (shutting down) or after its log failed.
    fn readiness(&self) -> Result<(), String> {
        Ok(())
    }

    /// Where `action` of `caller` is served (see [`route`]): here, unless this node is a
    /// cluster's node that does not own the bucket of the action's queue. Asked once per
    /// request, after it was authenticated and decoded and before it executes, so it must be
    /// cheap.
    fn route(&self, action: &Action, caller: &Caller) -> Route {
        let _ = (action, caller);
        Route::Here
    }

    /// Told that `peer` did not take a forwarded request (it could not be reached, or said it
    /// no longer serves), so that the next [`Api::route`] looks again rather than repeating
    /// the same answer.
    fn peer_refused(&self, peer: &Peer) {
        let _ = peer;
    }

    /// Whether `action`'s queue, which this node does not serve, lives outside its name's
    /// bucket, and this node owns that bucket (`crate::placements`): a node that forwarded it
    /// here by the name's hash has not learned the placement yet.
    fn placed_elsewhere(&self, action: &Action, caller: &Caller) -> bool {
        let _ = (action, caller);
        false
    }

    /// Told that a peer refused a request as placed elsewhere ([`Api::placed_elsewhere`]): the
    /// placements this node knows are behind, so it reads them again.
    fn placements_changed(&self) {}

    /// Where the HTTP layer counts the requests it forwarded for this node, if anywhere.
    fn forward_stats(&self) -> Option<&ForwardStats> {
        None
    }
}

/// The service of one node.
pub struct Service {
    /// The engine hosts, one per bucket this node serves (one unless `--postgres-buckets`
    /// says more).
    hosts: Hosts,
    waiters: Waiters,
    shutdown: watch::Sender<bool>,
    /// Receives waiting right now (long polls), for observation and tests.
    waiting: AtomicUsize,
    /// Where the time comes from: the real clock, or a test's.
    clock: SharedClock,
    config: ServiceConfig,
    /// Where observations go; `None` when metrics are off (see `observe`).
    metrics: Option<Arc<Metrics>>,
    /// Queue policies parsed for other accounts' requests (see `policy.rs`).
    policies: policy::PolicyCache,
    /// What the accept loop of the SQS listener counts of its connections, for `/metrics`
    /// (handed to it in [`crate::http::Connections`]).
    connection_stats: Arc<ConnectionStats>,
    /// Told when a message left for another bucket's outbox (see `transfers.rs`).
    transfers_waiting: tokio::sync::Notify,
    /// The buckets this node does not serve (a cluster's), see `buckets.rs`.
    remote: Option<Arc<dyn RemoteBuckets>>,
    /// Held by a `CreateQueue` on a node of several buckets, where a name's placement is
    /// decided (see `queues.rs`): creates of one name are decided one at a time.
    placing: tokio::sync::Mutex<()>,
}

impl Service {
    /// A service over `host`, on the real clock, without metrics.
    pub fn new(config: ServiceConfig, host: EngineHost) -> Service {
        Service::with_hosts(config, Hosts::one(host))
    }

    /// A service over one host per bucket (see [`Hosts`]), on the real clock, without metrics.
    pub fn with_hosts(config: ServiceConfig, hosts: Hosts) -> Service {
        Service {
            hosts,
            waiters: Waiters::default(),
            shutdown: watch::channel(false).0,
            waiting: AtomicUsize::new(0),
            clock: Arc::new(SystemClock),
            config,
            metrics: None,
            policies: policy::PolicyCache::default(),
            connection_stats: Arc::default(),
            transfers_waiting: tokio::sync::Notify::new(),
            remote: None,
            placing: tokio::sync::Mutex::new(()),
        }
    }

    /// Reads and records placements in `shared` from now on (a cluster node's map, which its
    /// other services and its router read too), with those this service's logs keep.
    pub fn with_placements(mut self, shared: Arc<Placements>) -> Service {
        self.hosts.share_placements(shared);
        self
    }

    /// The queues placed outside their name's bucket, as this service knows them.
    pub fn placements(&self) -> &Arc<Placements> {
        self.hosts.placements()
    }

    /// Reaches the buckets this service does not serve through `remote` (a cluster node's
    /// service, which serves the buckets the node owns).
    pub fn with_remote_buckets(mut self, remote: Arc<dyn RemoteBuckets>) -> Service {
        self.remote = Some(remote);
        self
    }

    /// A service that keeps everything in memory ([`MemoryLog`]), with no queues. `key` seals
    /// receipts.
    pub fn in_memory(config: ServiceConfig, key: ReceiptKey) -> Service {
        let engine = Engine::new(config.engine.clone(), key);
        let store: Arc<dyn LogStore> = Arc::new(MemoryLog::new());
        let checkpoints = Checkpoints::new(CHECKPOINT_LOG_BYTES_MIN, 0);
        Service::new(config, EngineHost::new(engine, store, checkpoints))
    }

    /// A service that keeps everything in memory, with one engine per bucket (`buckets` of
    /// them, see `leaseq_core::transfer`): the shape of a node of several buckets, for tests.
    pub fn in_memory_buckets(config: ServiceConfig, key: ReceiptKey, buckets: u32) -> Service {
        let all: Vec<u32> = (0..buckets).collect();
        Service::in_memory_some_buckets(config, key, buckets, &all)
    }

    /// A service that keeps everything in memory and serves the `served` buckets of `buckets`,
    /// each with its own engine; the others it reaches through
    /// [`Service::with_remote_buckets`]: the shape of a cluster's node, for tests.
    pub fn in_memory_some_buckets(
        config: ServiceConfig,
        key: ReceiptKey,
        buckets: u32,
        served: &[u32],
    ) -> Service {
        let hosts = served
            .iter()
            .map(|&bucket| {
                let mut engine_config = config.engine.clone();
                engine_config.placement = leaseq_core::Placement { bucket, buckets };
                let engine = Engine::new(engine_config, key.clone());
                let store: Arc<dyn LogStore> = Arc::new(MemoryLog::new());
                let checkpoints = Checkpoints::new(CHECKPOINT_LOG_BYTES_MIN, 0);
                EngineHost::new(engine, store, checkpoints)
            })
            .collect();
        Service::with_hosts(config, Hosts::some(buckets, hosts))
    }

    /// Replaces the real clock, so tests can jump time instead of sleeping. The engine ignores a
    /// reading earlier than one it has seen, so the clock may start anywhere.
    pub fn with_clock(mut self, clock: SharedClock) -> Service {
        self.hosts.set_clock(&clock);
        self.clock = clock;
        self
    }

    /// The engine hosts (each an engine, its log store, checkpoints), one per bucket.
    pub fn hosts(&self) -> &Hosts {
        &self.hosts
    }

    /// The host of the named queue (the engine's name), if this node serves its bucket (a
    /// cluster routes each request to the node that does).
    fn host_for(&self, queue: &str) -> Result<&EngineHost, SqsError> {
        self.hosts
            .for_queue(queue)
            .ok_or_else(route::not_served_here)
    }

    /// The time now, by this service's clock.
    fn now_ms(&self) -> u64 {
        self.clock.now_ms()
    }

    /// Runs `operation` on the engine of the named queue's bucket, logs the records it
    /// journaled, wakes the long polls they concern, and returns once the log is durable up to
    /// them (see [`EngineHost::apply`]).
    async fn run<T, E>(
        &self,
        queue: &str,
        operation: impl FnOnce(&mut Engine, &mut Journal) -> Result<T, E>,
    ) -> Result<T, SqsError>
    where
        SqsError: From<E>,
    {
        self.run_on(self.host_for(queue)?, operation).await
    }

    /// [`Service::run`] on `host`.
    async fn run_on<T, E>(
        &self,
        host: &EngineHost,
        operation: impl FnOnce(&mut Engine, &mut Journal) -> Result<T, E>,
    ) -> Result<T, SqsError>
    where
        SqsError: From<E>,
    {
        let (result, tail_lsn) = self.apply_on(host, operation)?;
        host.durable(tail_lsn).await?;
        Ok(result?)
    }

    /// The first half of [`Service::run`]: the operation applied, its records appended and
    /// their long polls woken, with the log tail the reply must wait for.
    fn apply_now<T, E>(
        &self,
        queue: &str,
        operation: impl FnOnce(&mut Engine, &mut Journal) -> Result<T, E>,
    ) -> Result<(Result<T, E>, Lsn), SqsError> {
        self.apply_on(self.host_for(queue)?, operation)
    }

    /// [`Service::apply_now`] on `host`.
    fn apply_on<T, E>(
        &self,
        host: &EngineHost,
        operation: impl FnOnce(&mut Engine, &mut Journal) -> Result<T, E>,
    ) -> Result<(Result<T, E>, Lsn), SqsError> {
        let (result, journal, tail_lsn) = host.apply(operation, observe::log_dead_letters)?;
        self.wake_for(&journal);
        Ok((result, tail_lsn))
    }

    fn wake_for(&self, journal: &Journal) {
        for record in journal {
            match record {
                Record::Send {
                    now_ms,
                    queue_id,
                    visible_at_ms,
                    ..
                }
                | Record::ChangeVisibility {
                    now_ms,
                    queue_id,
                    visible_at_ms,
                    ..
                } if visible_at_ms <= now_ms => self.waiters.wake(*queue_id, 1),
                // A lease that now ends at another time may end before the deadline a waiting
                // receive computed when it last looked: wake one to look again (it sleeps until
                // the new deadline if nothing is ready yet).
                Record::ChangeVisibility { queue_id, .. } => self.waiters.wake(*queue_id, 1),
                Record::DeadLetter {
                    dead_letter_queue_id,
                    ..
                }
                | Record::FailMessage {
                    dead_letter_queue_id,
                    ..
                } => self.waiters.wake(*dead_letter_queue_id, 1),
                // On a FIFO queue a delete may unblock the message's group. (On a standard queue
                // the woken receive finds nothing new and waits again: one wasted look.)
                Record::Delete { queue_id, .. } => self.waiters.wake(*queue_id, 1),
                Record::DeleteQueue { queue_id, .. } => self.waiters.close(*queue_id),
                Record::MoveMessages { moves, .. } => {
                    for moved in moves {
                        self.waiters.wake(moved.destination_queue_id, 1);
                    }
                }
                Record::TransferIn {
                    taken: Some(taken), ..
                } => self.waiters.wake(taken.queue_id, 1),
                // A message left for another bucket: the driver hands it over.
                Record::TransferOut { .. } => self.transfers_waiting.notify_one(),
                _ => {}
            }
        }
    }

    /// The wire context of this node's queues (for ARNs in policies).
    fn context(&self) -> Context {
        Context {
            base_url: "".into(),
            region: self.config.region.as_str().into(),
            account_id: self.config.account_id.as_str().into(),
            request_id: "".into(),
        }
    }

    /// A change of the named queue with nothing to answer but success.
    async fn simple(
        &self,
        queue: &str,
        operation: impl FnOnce(&mut Engine, u64, &mut Journal) -> Result<(), Error>,
    ) -> Result<Outcome, SqsError> {
        self.run(queue, |engine, journal| {
            operation(engine, self.now_ms(), journal)
        })
        .await?;
        Ok(Outcome::Empty)
    }

    /// A read of the named queue that must not answer before the log is durable up to what it
    /// saw.
    async fn read<T>(
        &self,
        queue: &str,
        read: impl FnOnce(&mut Engine) -> Result<T, Error>,
    ) -> Result<T, SqsError> {
        self.run(queue, |engine, _| read(engine)).await
    }
}

/// The prefix of the engine's names of the caller's queues: empty for the home namespace.
fn namespace_prefix(config: &ServiceConfig, caller: &Caller) -> String {
    caller
        .namespace
        .as_ref()
        .map_or_else(String::new, |namespace| {
            prefix_of(config, &namespace.account_id, &namespace.region)
        })
}

/// The prefix of the engine's names of the queues of `account_id` in `region`: empty for the
/// home namespace (the node's `account_id` and `region`), whose queues keep their plain names.
/// The one place that decides it, for the caller's own queues and for another account's queue
/// alike (see `policy.rs`).
fn prefix_of(config: &ServiceConfig, account_id: &str, region: &str) -> String {
    if account_id == config.account_id && region == config.region {
        String::new()
    } else {
        leaseq_sqs::namespace::prefix(account_id, region)
    }
}

/// The bucket (of `buckets`) whose engine executes `action` for `caller` on a node configured
/// by `config`: its queue's, by the engine name [`Service::execute`] gives it, where
/// `placements` (or else the name's hash) puts it. `None` for an action that any node's service
/// runs (`ListQueues` gathers every bucket), and for one that names its queue so badly that any
/// service refuses it alike.
pub fn bucket_of_action(
    config: &ServiceConfig,
    buckets: u32,
    placements: &Placements,
    action: &Action,
    caller: &Caller,
) -> Option<u32> {
    let name = leaseq_sqs::namespace::executing_queue(action)?;
    if buckets == 1 {
        return Some(0);
    }
    let target = policy::target_of(config, action, caller).ok()?;
    let mut engine_name = target.prefix;
    engine_name.push_str(name);
    Some(placements.bucket_of(&engine_name, buckets))
}

impl Api for Service {
    /// One arm per message action, each a call into the file of its group; the others are in
    /// [`Service::execute_queue_action`].
    async fn execute(&self, mut action: Action, caller: &Caller) -> Result<Outcome, SqsError> {
        let target = self.target(&action, caller)?;
        leaseq_sqs::namespace::qualify(&mut action, &target.prefix)?;
        if let Some(grant) = &target.grant {
            self.authorize(grant)?;
        }
        match action {
            Action::SendMessage { queue, message } => {
                self.send_message(&queue.name, message, caller).await
            }
            Action::SendMessageBatch { queue, entries } => {
                self.send_batch(&queue.name, entries, caller).await
            }
            Action::ReceiveMessage {
                queue,
                request,
                wait_time_seconds,
                receive_request_attempt_id,
            } => {
                let receive = receive::Receive {
                    request,
                    wait_time_seconds,
                    attempt_id: receive_request_attempt_id,
                };
                let deliveries = self.receive_message(&queue.name, receive, caller).await?;
                Ok(Outcome::Received {
                    deliveries,
                    queue_name: queue.name,
                })
            }
            Action::DeleteMessage { queue, receipt } => {
                self.delete_message(&queue.name, &receipt).await
            }
            Action::DeleteMessageBatch { queue, entries } => {
                self.delete_batch(&queue.name, entries).await
            }
            Action::ChangeMessageVisibility {
                queue,
                receipt,
                visibility_timeout_seconds,
            } => {
                self.change_visibility(&queue.name, &receipt, visibility_timeout_seconds)
                    .await
            }
            Action::ChangeMessageVisibilityBatch { queue, entries } => {
                self.change_visibility_batch(&queue.name, entries).await
            }
            Action::LeaseqFailMessage {
                queue,
                receipt,
                reason,
            } => self.fail_message(&queue.name, &receipt, &reason).await,
            action => self.execute_queue_action(action).await,
        }
    }

    fn shut_down(&self) {
        self.shutdown.send_replace(true);
    }

    fn readiness(&self) -> Result<(), String> {
        if let Some(reason) = self.hosts.stopped_reason() {
            return Err(format!("the log failed: {reason}"));
        }
        // A store that is poisoned, or reconnecting (PostgreSQL away), takes no requests.
        for host in self.hosts.iter() {
            if let Err(error) = host.store().writable() {
                return Err(format!("the log is unavailable: {error}"));
            }
        }
        if *self.shutdown.borrow() {
            return Err("shutting down".to_string());
        }
        Ok(())
    }
}

impl Service {
    /// One arm per queue, policy, move-task and inspection action, each a call into the file of
    /// its group.
    async fn execute_queue_action(&self, action: Action) -> Result<Outcome, SqsError> {
        match action {
            Action::CreateQueue {
                name,
                attributes,
                tags,
            } => self.create_queue(name, attributes, tags).await,
            Action::GetQueueUrl { name, .. } => self.get_queue_url(&name).await,
            Action::ListQueues {
                prefix,
                max_results,
                next_token,
            } => self.list_queues(&prefix, max_results, next_token).await,
            Action::ListDeadLetterSourceQueues {
                queue,
                max_results,
                next_token,
            } => {
                self.list_dead_letter_sources(&queue.name, max_results, next_token)
                    .await
            }
            Action::DeleteQueue { queue } => self.delete_queue(&queue.name).await,
            Action::GetQueueAttributes { queue } => self.get_queue_attributes(&queue.name).await,
            Action::SetQueueAttributes { queue, attributes } => {
                self.set_queue_attributes(&queue.name, &attributes).await
            }
            Action::PurgeQueue { queue } => self.purge_queue(&queue.name).await,
            Action::TagQueue { queue, tags } => self.tag_queue(&queue.name, &tags).await,
            Action::UntagQueue { queue, keys } => self.untag_queue(&queue.name, &keys).await,
            Action::ListQueueTags { queue } => self.list_queue_tags(&queue.name).await,
            Action::AddPermission {
                queue,
                label,
                account_ids,
                actions,
            } => {
                self.add_permission(&queue.name, &label, &account_ids, &actions)
                    .await
            }
            Action::RemovePermission { queue, label } => {
                self.remove_permission(&queue.name, &label).await
            }
            Action::GetVisibilityAdvice { queue } => {
                let advice = self.visibility_advice(&queue.name).await?;
                Ok(Outcome::VisibilityAdvice(Box::new(advice)))
            }
            Action::StartMessageMoveTask {
                source,
                destination,
                rate_per_second,
                limit,
            } => {
                self.start_move_task(source, destination, rate_per_second, limit)
                    .await
            }
            Action::ListMessageMoveTasks {
                source,
                max_results,
            } => self.list_move_tasks(source, max_results).await,
            Action::CancelMessageMoveTask { task } => self.cancel_move_task(task).await,
            Action::LeaseqChangeMessageMoveTask { task, changes, .. } => {
                let info = self.change_move_task(task, changes).await?;
                Ok(Outcome::MoveTask(Box::new(info)))
            }
            Action::LeaseqPeekMessages {
                queue,
                after_seq,
                max_messages,
            } => {
                self.peek(queue.name.to_string(), after_seq, max_messages)
                    .await
            }
            Action::LeaseqGetMessageHistory { queue, message_id } => {
                self.message_history(&queue.name, message_id).await
            }
            Action::SendMessage { .. }
            | Action::SendMessageBatch { .. }
            | Action::ReceiveMessage { .. }
            | Action::DeleteMessage { .. }
            | Action::DeleteMessageBatch { .. }
            | Action::ChangeMessageVisibility { .. }
            | Action::ChangeMessageVisibilityBatch { .. }
            | Action::LeaseqFailMessage { .. } => {
                unreachable!("message actions are executed by Service::execute")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A caller's client is its address and user agent, whatever client the thread made last.
    #[test]
    fn clients_are_made_of_their_callers() {
        let caller = |address: Option<&str>, user_agent: Option<&'static str>| Caller {
            address: address.map(|a| a.parse().unwrap()),
            user_agent: user_agent.map(HeaderValue::from_static),
            ..Caller::default()
        };
        let callers = [
            caller(Some("127.0.0.1:1000"), Some("aws-sdk-rust/1")),
            caller(Some("127.0.0.1:1000"), Some("aws-sdk-rust/1")),
            caller(Some("127.0.0.1:1001"), Some("aws-sdk-rust/1")),
            caller(Some("127.0.0.1:1001"), Some("boto3/1")),
            caller(Some("127.0.0.1:1001"), None),
            caller(None, None),
            caller(None, Some("")),
            caller(Some("[::1]:9324"), Some("boto3/1")),
            caller(Some("127.0.0.1:1000"), Some("aws-sdk-rust/1")),
        ];
        let mut previous: Option<Arc<Client>> = None;
        for (i, caller) in callers.iter().enumerate() {
            let client = caller.client();
            assert_eq!(*client, caller.new_client(), "caller {i}");
            if i == 1 {
                // Asked again for the same client: the same one.
                assert!(Arc::ptr_eq(previous.as_ref().unwrap(), &client));
            }
            previous = Some(client);
        }
        assert_eq!(
            *callers[3].client(),
            Client::new("127.0.0.1:1001", "boto3/1")
        );
        assert_eq!(*callers[5].client(), Client::new("", ""));
    }
}
