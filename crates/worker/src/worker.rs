//! The worker runtime: a receive loop that asks for at most as many messages as there are free
//! handler slots, one task per message that runs the handler and settles its outcome, the lease
//! keeper, and graceful shutdown.
//!
//! Shutdown, in order: stop receiving; wait up to `shutdown_deadline` for active handlers; then
//! cancel the rest (their contexts report [`LeaseLoss::Shutdown`]) and give them a second to
//! return (an outcome they return is still acted on: the receipt is still current); stop those
//! that did not at their next await point and release their leases with visibility 0, so the
//! messages are redelivered at once instead of when the lease would have ended.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_sqs::types::MessageSystemAttributeName;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{error, info_span, warn, Instrument};

use crate::lease::LeaseKeeper;
use crate::metrics::Metrics;
use crate::settle::Settler;
use crate::{
    ConfigError, LeaseContext, LeaseLoss, Message, MetricsSnapshot, Outcome, WorkerConfig,
};

/// How long the receive loop pauses after a failed receive, so an unreachable queue is not
/// hammered.
const RECEIVE_ERROR_PAUSE: Duration = Duration::from_secs(1);

/// How long handlers cancelled at the shutdown deadline have to return before they are stopped.
const HANDLER_STOP_GRACE: Duration = Duration::from_secs(1);

/// How long shutdown waits for released leases and stopped handlers after the deadline.
const RELEASE_TIMEOUT: Duration = Duration::from_secs(10);

/// The application's code for one message. Implemented for every
/// `Fn(Message, LeaseContext) -> impl Future<Output = Outcome>`.
pub trait Handler: Send + Sync + 'static {
    /// Handles one delivery attempt. Return [`Outcome::Ack`] only once the effect is durable.
    fn handle(&self, message: Message, lease: LeaseContext)
        -> impl Future<Output = Outcome> + Send;
}

impl<F, Fut> Handler for F
where
    F: Fn(Message, LeaseContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send,
{
    fn handle(
        &self,
        message: Message,
        lease: LeaseContext,
    ) -> impl Future<Output = Outcome> + Send {
        self(message, lease)
    }
}

/// A shared handler, for several workers (one per queue, say) running the same code.
impl<H: Handler> Handler for Arc<H> {
    fn handle(
        &self,
        message: Message,
        lease: LeaseContext,
    ) -> impl Future<Output = Outcome> + Send {
        self.as_ref().handle(message, lease)
    }
}

/// A configured worker, ready to start.
pub struct Worker {
    client: aws_sdk_sqs::Client,
    config: WorkerConfig,
}

impl Worker {
    /// A worker that consumes `config.queue_url` through `client` (leaseq or Amazon SQS).
    pub fn new(client: aws_sdk_sqs::Client, config: WorkerConfig) -> Result<Worker, ConfigError> {
        config.validate()?;
        Ok(Worker { client, config })
    }

    /// Starts receiving and handling messages on the current tokio runtime.
    pub fn start<H: Handler>(self, handler: H) -> RunningWorker {
        let metrics = Arc::new(Metrics::default());
        let queue_url: Arc<str> = Arc::from(self.config.queue_url.as_str());
        let keeper = Arc::new(LeaseKeeper::new(
            self.client.clone(),
            self.config.queue_url.clone(),
            self.config.lease.clone(),
            metrics.clone(),
        ));
        let shared = Arc::new(Shared {
            settler: Settler {
                client: self.client.clone(),
                queue_url: queue_url.clone(),
                failure: self.config.failure.clone(),
                backoff: self.config.backoff,
                metrics: metrics.clone(),
                fail_now: Default::default(),
            },
            handler,
            keeper: keeper.clone(),
            metrics: metrics.clone(),
            slots: Arc::new(Semaphore::new(self.config.concurrency)),
            stop_handlers: CancellationToken::new(),
            queue_url,
        });
        let stop_receiving = CancellationToken::new();
        let stop_keeper = CancellationToken::new();
        let keeper_task = tokio::spawn(keeper.run(stop_keeper.clone()));
        let receiver = tokio::spawn(receive_loop(
            self.client,
            self.config.clone(),
            shared.clone(),
            stop_receiving.clone(),
        ));
        RunningWorker {
            metrics,
            concurrency: self.config.concurrency,
            shutdown_deadline: self.config.shutdown_deadline,
            stop_receiving,
            stop_keeper,
            receiver,
            keeper_task,
            slots: shared.slots.clone(),
            shutdown: Box::new(ShutdownHooks { shared }),
        }
    }
}

/// What a graceful shutdown did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShutdownReport {
    /// Whether every active handler finished before the deadline.
    pub drained: bool,
    /// How many messages were still in hand at the deadline: their contexts were cancelled, and
    /// the leases of those whose handlers did not return within a second were released.
    pub handlers_stopped: usize,
    /// The worker's counters at the end.
    pub metrics: MetricsSnapshot,
}

/// A worker that is running; shut it down with [`RunningWorker::shutdown`]. Dropping it instead
/// detaches the worker, which then runs until its tokio runtime shuts down.
pub struct RunningWorker {
    metrics: Arc<Metrics>,
    concurrency: usize,
    shutdown_deadline: Duration,
    stop_receiving: CancellationToken,
    stop_keeper: CancellationToken,
    receiver: JoinHandle<()>,
    keeper_task: JoinHandle<()>,
    slots: Arc<Semaphore>,
    shutdown: Box<dyn StopHandlers>,
}

impl RunningWorker {
    /// The counters so far.
    pub fn metrics(&self) -> MetricsSnapshot {
        self.metrics.snapshot()
    }

    /// Stops gracefully: no new receives; active handlers get until the shutdown deadline; the
    /// rest are cancelled and their leases released with visibility 0.
    pub async fn shutdown(self) -> ShutdownReport {
        self.stop_receiving.cancel();
        let _ = self.receiver.await;
        let all = u32::try_from(self.concurrency).unwrap_or(u32::MAX);
        let drained = tokio::time::timeout(self.shutdown_deadline, self.slots.acquire_many(all))
            .await
            .is_ok();
        let mut handlers_stopped = 0;
        if !drained {
            // First tell the remaining handlers to stop; those that return within the grace
            // have their outcomes acted on, the rest are stopped and their leases released.
            handlers_stopped = self.shutdown.cancel_contexts();
            let returned =
                tokio::time::timeout(HANDLER_STOP_GRACE, self.slots.acquire_many(all)).await;
            if returned.is_err() {
                self.shutdown.abort_handlers();
                // Each stopped handler's task releases its lease and then frees its slot.
                let released =
                    tokio::time::timeout(RELEASE_TIMEOUT, self.slots.acquire_many(all)).await;
                if released.is_err() {
                    error!("released leases not confirmed within {RELEASE_TIMEOUT:?}");
                }
            }
        }
        self.stop_keeper.cancel();
        let _ = self.keeper_task.await;
        ShutdownReport {
            drained,
            handlers_stopped,
            metrics: self.metrics.snapshot(),
        }
    }
}

/// Type erasure for the handler type, so `RunningWorker` needs no type parameter.
trait StopHandlers: Send + Sync {
    /// Cancels every context still in hand; returns how many there were.
    fn cancel_contexts(&self) -> usize;
    /// Stops every handler task at its next await point.
    fn abort_handlers(&self);
}

struct ShutdownHooks<H> {
    shared: Arc<Shared<H>>,
}

impl<H: Handler> StopHandlers for ShutdownHooks<H> {
    fn cancel_contexts(&self) -> usize {
        self.shared.keeper.lose_all(&LeaseLoss::Shutdown)
    }

    fn abort_handlers(&self) {
        self.shared.stop_handlers.cancel();
    }
}

/// What every message task shares.
struct Shared<H> {
    settler: Settler,
    handler: H,
    keeper: Arc<LeaseKeeper>,
    metrics: Arc<Metrics>,
    slots: Arc<Semaphore>,
    stop_handlers: CancellationToken,
    queue_url: Arc<str>,
}

async fn receive_loop<H: Handler>(
    client: aws_sdk_sqs::Client,
    config: WorkerConfig,
    shared: Arc<Shared<H>>,
    stop: CancellationToken,
) {
    loop {
        let permits = tokio::select! {
            permits = free_slots(&shared.slots, config.receive_batch_max) => permits,
            () = stop.cancelled() => return,
        };
        let sent_at = Instant::now();
        // A receive cut short by shutdown may have leased messages that never arrive here; the
        // server makes them visible again when that lease ends.
        let received = tokio::select! {
            received = receive(&client, &config, permits.len()) => received,
            () = stop.cancelled() => return,
        };
        match received {
            Ok(messages) => {
                let lease_started_at = lease_start(sent_at, Instant::now(), &config);
                Metrics::add(&shared.metrics.received, messages.len() as u64);
                let held: Vec<_> = messages.into_iter().zip(permits).collect();
                for sequence in sequences(held, config.queue_url.ends_with(".fifo")) {
                    tokio::spawn(handle_sequence(shared.clone(), sequence, lease_started_at));
                }
            }
            Err(error) => {
                Metrics::add(&shared.metrics.receive_errors, 1);
                let error = aws_sdk_sqs::error::DisplayErrorContext(&error);
                warn!(queue = %config.queue_url, %error, "receive failed");
                tokio::select! {
                    () = tokio::time::sleep(RECEIVE_ERROR_PAUSE) => {}
                    () = stop.cancelled() => return,
                }
            }
        }
    }
}

/// When the leases of a receive sent at `sent_at` and answered at `answered_at` began, as far as
/// the worker can tell. The server starts them when it hands the messages out, somewhere in
/// between; after a long poll that is near the answer, not the request (taking the request time
/// would make a 20 s poll eat 20 s of every lease). The answer time less the slack reserved for
/// network delay, but never before the request, is the estimate.
fn lease_start(sent_at: Instant, answered_at: Instant, config: &WorkerConfig) -> Instant {
    answered_at
        .checked_sub(config.lease.slack)
        .map_or(sent_at, |at| at.max(sent_at))
}

/// Waits for one free handler slot, then takes every other free one up to `count_max`.
async fn free_slots(slots: &Arc<Semaphore>, count_max: u32) -> Vec<OwnedSemaphorePermit> {
    let first = slots
        .clone()
        .acquire_owned()
        .await
        .expect("the slot semaphore is never closed");
    let mut permits = vec![first];
    while permits.len() < count_max as usize {
        match slots.clone().try_acquire_owned() {
            Ok(permit) => permits.push(permit),
            Err(_) => break,
        }
    }
    permits
}

type ReceiveError =
    aws_sdk_sqs::error::SdkError<aws_sdk_sqs::operation::receive_message::ReceiveMessageError>;

async fn receive(
    client: &aws_sdk_sqs::Client,
    config: &WorkerConfig,
    count: usize,
) -> Result<Vec<Message>, ReceiveError> {
    let output = client
        .receive_message()
        .queue_url(&config.queue_url)
        .max_number_of_messages(count as i32)
        .wait_time_seconds(config.wait_time.as_secs() as i32)
        .visibility_timeout(config.lease.visibility_seconds())
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .message_attribute_names("All")
        .send()
        .await?;
    let messages = output.messages.unwrap_or_default();
    Ok(messages.into_iter().filter_map(Message::from_sqs).collect())
}

/// A received message and the handler slot it occupies until it is settled, so messages in
/// hand never exceed `concurrency`.
type Held = (Message, OwnedSemaphorePermit);

/// Splits a receive's messages into the sequences handled one message after another: on a FIFO
/// queue the messages of each message group, in the order received (so the group's order
/// holds); otherwise every message on its own, all handled at once.
fn sequences(held: Vec<Held>, fifo: bool) -> Vec<Vec<Held>> {
    let mut sequences: Vec<Vec<Held>> = Vec::new();
    let mut group_index: HashMap<String, usize> = HashMap::new();
    for (message, permit) in held {
        let group = message
            .system_attribute(MessageSystemAttributeName::MessageGroupId)
            .filter(|_| fifo);
        let index = match group {
            Some(group) => *group_index.entry(group.to_string()).or_insert_with(|| {
                sequences.push(Vec::new());
                sequences.len() - 1
            }),
            None => {
                sequences.push(Vec::new());
                sequences.len() - 1
            }
        };
        sequences[index].push((message, permit));
    }
    sequences
}

/// Handles a sequence in order. Every lease of the sequence is kept from the start, so later
/// messages do not lose theirs while waiting. Once one message is not acknowledged, the rest are
/// released unhandled: on a FIFO queue they must not overtake it.
async fn handle_sequence<H: Handler>(
    shared: Arc<Shared<H>>,
    sequence: Vec<Held>,
    lease_started_at: Instant,
) {
    let registered: Vec<_> = sequence
        .into_iter()
        .map(|(message, permit)| {
            let context =
                LeaseContext::new(message.attempt(), message.id(), shared.queue_url.clone());
            let lease_id =
                shared
                    .keeper
                    .register(message.receipt_handle(), context.clone(), lease_started_at);
            (message, context, lease_id, permit)
        })
        .collect();
    let mut blocked = false;
    for (message, context, lease_id, _permit) in registered {
        let span = info_span!("attempt", queue = %shared.queue_url, message_id = message.id(), attempt = message.attempt());
        if blocked || context.is_lost() {
            shared.keeper.unregister(lease_id).await;
            settle(&shared, &message, &context, None, true)
                .instrument(span)
                .await;
            blocked = true;
            continue;
        }
        let outcome = run_handler(&shared, message.clone(), context.clone())
            .instrument(span.clone())
            .await;
        // Stop extending before settling, so an extension cannot undo a retry's visibility.
        shared.keeper.unregister(lease_id).await;
        let acked = settle(&shared, &message, &context, outcome, false)
            .instrument(span)
            .await;
        blocked = !acked;
    }
}

/// The handler's outcome; `None` when it was stopped at shutdown. A panic is a retry.
async fn run_handler<H: Handler>(
    shared: &Arc<Shared<H>>,
    message: Message,
    context: LeaseContext,
) -> Option<Outcome> {
    let task_shared = shared.clone();
    let mut task = tokio::spawn(
        async move { task_shared.handler.handle(message, context).await }.in_current_span(),
    );
    tokio::select! {
        joined = &mut task => match joined {
            Ok(outcome) => Some(outcome),
            Err(error) if error.is_panic() => {
                error!("handler panicked; retrying the message");
                Metrics::add(&shared.metrics.panics, 1);
                Some(Outcome::retry())
            }
            Err(_) => None,
        },
        () = shared.stop_handlers.cancelled() => {
            task.abort();
            None
        }
    }
}

/// Acts on `outcome` (`None`: the handler did not run or was stopped); true if the message was
/// deleted after an `Ack`. `release` asks for a release even without a shutdown (a message held
/// back behind a failed one of its FIFO group).
async fn settle<H: Handler>(
    shared: &Shared<H>,
    message: &Message,
    context: &LeaseContext,
    outcome: Option<Outcome>,
    release: bool,
) -> bool {
    // A shutdown only tells the handler to stop: the receipt is still the current one, so an
    // outcome returned anyway is acted on, and a stopped handler's lease is released so the
    // message is visible at once. Any other loss means the lease may belong to someone else.
    let shutdown = context.loss() == Some(&LeaseLoss::Shutdown);
    let usable = !context.is_lost() || shutdown;
    let ack = outcome == Some(Outcome::Ack);
    let result = match outcome {
        Some(outcome) if usable => shared.settler.settle(message, outcome).await,
        Some(outcome) => {
            warn!(?outcome, loss = ?context.loss(), "lease lost; outcome dropped");
            Metrics::add(&shared.metrics.outcomes_dropped_lease_lost, 1);
            return false;
        }
        None if usable && (shutdown || release) => shared.settler.release(message).await,
        None => return false,
    };
    match result {
        Ok(()) => ack,
        Err(error) => {
            Metrics::add(&shared.metrics.settle_errors, 1);
            error!(error = %ErrorChain(&error), "settling the message failed; it returns when its lease ends");
            false
        }
    }
}

/// Displays an error with its sources, for logs.
struct ErrorChain<'a>(&'a (dyn std::error::Error + 'static));

impl std::fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(error) = source {
            write!(f, ": {error}")?;
            source = error.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held(id: &str, group: Option<&str>, slots: &Arc<Semaphore>) -> Held {
        let mut message = aws_sdk_sqs::types::Message::builder()
            .message_id(id)
            .receipt_handle(format!("receipt-{id}"));
        if let Some(group) = group {
            message = message.attributes(MessageSystemAttributeName::MessageGroupId, group);
        }
        let message = Message::from_sqs(message.build()).expect("id and receipt are set");
        (message, slots.clone().try_acquire_owned().unwrap())
    }

    fn ids(sequences: &[Vec<Held>]) -> Vec<Vec<&str>> {
        sequences
            .iter()
            .map(|sequence| sequence.iter().map(|(m, _)| m.id()).collect())
            .collect()
    }

    #[test]
    fn a_fifo_batch_is_split_into_its_groups_in_order() {
        let slots = Arc::new(Semaphore::new(10));
        let batch = || {
            vec![
                held("a1", Some("a"), &slots),
                held("b1", Some("b"), &slots),
                held("a2", Some("a"), &slots),
                held("x", None, &slots),
                held("a3", Some("a"), &slots),
            ]
        };
        let fifo = sequences(batch(), true);
        assert_eq!(
            ids(&fifo),
            vec![vec!["a1", "a2", "a3"], vec!["b1"], vec!["x"]]
        );
        drop(fifo);
        // A standard queue (fair queues carry group ids too) handles every message at once.
        let standard = sequences(batch(), false);
        assert_eq!(
            ids(&standard),
            vec![vec!["a1"], vec!["b1"], vec!["a2"], vec!["x"], vec!["a3"]]
        );
    }
}
