//! The embedded backend: the lease engine of one process behind a mutex.
//!
//! Concurrency: every operation takes the engine mutex for the few microseconds the engine needs
//! and releases it before anything slow (waiting for a long poll, and, with the durable log,
//! waiting for fsync). The engine is not `async` and never blocks, so a plain mutex is both the
//! simplest and the fastest choice on a small machine: there is no engine task to hop to.
//!
//! After each operation, the records it journaled tell which queues got a message that is ready
//! now; their long-poll waiters are woken. Messages that become ready later (a delay or a lease
//! ends) are found by waiters themselves: they sleep no longer than the queue's next deadline,
//! and a changed lease wakes one of them to recompute it.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use leaseq_core::{
    Delivery, Engine, EngineConfig, Error, Journal, MessageId, Payload, PayloadRef,
    QueueConfigPatch, ReceiptKey, ReceiveRequest, Record, SendInput,
};
use leaseq_sqs::error::SqsError;
use leaseq_sqs::{Action, BatchEntry, Context, Outcome};
use leaseq_wal::{Lsn, Wal, WalError};
use parking_lot::{Mutex, MutexGuard};
use tokio::sync::watch;

use crate::backend::{Backend, Caller};
use crate::checkpoint::Checkpoints;
use crate::clock::{now_ms, Clock};
use crate::metrics::Metrics;
use crate::payloads;
use crate::waiters::Waiters;

mod observe;
pub use observe::{GroupPressure, LeaseRow, FIFO_GROUP_BLOCKED_MS};

mod moves;

pub use moves::AUTOMATIC_RATE_PER_SECOND;

/// Settings of the embedded backend.
#[derive(Clone, Debug)]
pub struct EmbeddedConfig {
    /// The engine's limits and options.
    pub engine: EngineConfig,
    /// Region for ARNs.
    pub region: String,
    /// Account id for ARNs.
    pub account_id: String,
}

/// Log volume between checkpoints, at least (see [`crate::checkpoint`]).
pub const CHECKPOINT_LOG_BYTES_MIN: u64 = 64 << 20;

/// The backend of a single process.
pub struct Embedded {
    /// Shared with checkpoint threads.
    engine: Arc<Mutex<Engine>>,
    /// The durable log; `None` keeps everything in memory only.
    log: Option<Arc<Wal>>,
    /// When the next checkpoint is due (only with a log).
    checkpoints: Arc<Checkpoints>,
    waiters: Waiters,
    shutdown: watch::Sender<bool>,
    /// Receives waiting right now (long polls), for observation and tests.
    waiting: AtomicUsize,
    /// Set when an append failed after the engine applied the change: the reason every request
    /// is refused until a restart.
    stopped: OnceLock<String>,
    /// Where the time comes from: the real clock, or a test's.
    clock: Clock,
    config: EmbeddedConfig,
    /// Where observations go; `None` when metrics are off (see `observe`).
    metrics: Option<Arc<Metrics>>,
}

/// Counts a waiting receive for as long as it lives, however its future ends (answered, timed
/// out, or dropped because the client went away).
struct WaitingGuard<'a>(&'a AtomicUsize);

impl<'a> WaitingGuard<'a> {
    fn new(counter: &'a AtomicUsize) -> Self {
        counter.fetch_add(1, Ordering::Relaxed);
        WaitingGuard(counter)
    }
}

impl Drop for WaitingGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What a receive learned besides its deliveries: enough to wait well.
struct ReceiveProbe<P = Delivery> {
    deliveries: Vec<P>,
    queue_id: u64,
    queue_wait_seconds: u32,
    next_deadline_ms: Option<u64>,
}

impl Embedded {
    /// A backend that keeps everything in memory, with no queues. `key` seals receipts.
    pub fn in_memory(config: EmbeddedConfig, key: ReceiptKey) -> Embedded {
        let engine = Engine::new(config.engine.clone(), key);
        Embedded::with_engine(config, engine, None)
    }

    /// A backend around an engine already recovered from `log`, checkpointing by the defaults
    /// (see [`Embedded::with_checkpoints`]).
    pub fn with_engine(config: EmbeddedConfig, engine: Engine, log: Option<Wal>) -> Embedded {
        Embedded {
            engine: Arc::new(Mutex::new(engine)),
            log: log.map(Arc::new),
            checkpoints: Arc::new(Checkpoints::new(CHECKPOINT_LOG_BYTES_MIN, 0)),
            waiters: Waiters::default(),
            shutdown: watch::channel(false).0,
            waiting: AtomicUsize::new(0),
            stopped: OnceLock::new(),
            clock: Arc::new(now_ms),
            config,
            metrics: None,
        }
    }

    /// Replaces the real clock, so tests can jump time instead of sleeping. The engine ignores a
    /// reading earlier than one it has seen, so the clock may start anywhere.
    pub fn with_clock(mut self, clock: Clock) -> Embedded {
        self.clock = clock;
        self
    }

    /// The time now, by this backend's clock.
    fn now_ms(&self) -> u64 {
        (self.clock)()
    }

    /// Replaces the checkpoint policy (the newest snapshot's LSN and the log volume between
    /// checkpoints).
    pub fn with_checkpoints(mut self, checkpoints: Checkpoints) -> Embedded {
        self.checkpoints = Arc::new(checkpoints);
        self
    }

    /// Writes a checkpoint now (at shutdown, so the next start replays almost nothing). Does
    /// nothing without a log.
    pub fn checkpoint(&self) -> Result<(), WalError> {
        match &self.log {
            Some(log) => self.checkpoints.run(&self.engine, log),
            None => Ok(()),
        }
    }

    /// Starts a checkpoint in the background if enough has been logged since the last one.
    fn checkpoint_if_due(&self) {
        let Some(log) = &self.log else { return };
        if !self.checkpoints.claim_if_due() {
            return;
        }
        let (engine, log, checkpoints) =
            (self.engine.clone(), log.clone(), self.checkpoints.clone());
        let spawned = std::thread::Builder::new()
            .name("leaseq-checkpoint".into())
            .spawn(move || {
                if let Err(error) = checkpoints.run_claimed(&engine, &log) {
                    tracing::error!(%error, "checkpoint failed; the log keeps growing until one succeeds");
                }
            });
        if let Err(error) = spawned {
            tracing::error!(%error, "could not start a checkpoint thread");
        }
    }

    /// Receives waiting for messages right now.
    pub fn waiting_receives(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// A message's payload, read from the log if the engine keeps only its location there.
    pub fn payload(&self, payload: &PayloadRef) -> Result<Arc<Payload>, payloads::ReadError> {
        payloads::payload(self.log.as_deref(), payload)
    }

    /// The engine, locked (for inspection and administration).
    pub fn engine(&self) -> MutexGuard<'_, Engine> {
        self.engine.lock()
    }

    /// Runs `operation` on the engine, logs the records it journaled, wakes the long polls they
    /// concern, and returns once the log is durable up to them.
    ///
    /// A poisoned log fails every request from then on (appends and waits both report it): the
    /// engine may hold changes the log lost, so nothing it says can be trusted until a restart
    /// recovers from what is on disk.
    ///
    /// Records are appended while the engine lock is held, so the log's order is the order in
    /// which they were applied. The reply waits for the log's tail as it was when the operation
    /// ran, not just for its own records: an answer may depend on an earlier operation's records
    /// (a receive of a message whose send is still being synced, a delete that finds the message
    /// already deleted by a request not yet durable), and must not leave before them.
    async fn run<T, E>(
        &self,
        operation: impl FnOnce(&mut Engine, &mut Journal) -> Result<T, E>,
    ) -> Result<T, SqsError>
    where
        SqsError: From<E>,
    {
        let (result, tail_lsn) = self.apply_now(operation)?;
        self.durable(tail_lsn).await?;
        Ok(result?)
    }

    /// The first half of [`Embedded::run`]: the operation applied and its records appended,
    /// with the log tail the reply must wait for.
    fn apply_now<T, E>(
        &self,
        operation: impl FnOnce(&mut Engine, &mut Journal) -> Result<T, E>,
    ) -> Result<(Result<T, E>, Option<Lsn>), SqsError> {
        let mut journal = Journal::new();
        let (result, tail_lsn) = {
            let mut engine = self.engine.lock();
            if let Some(reason) = self.stopped.get() {
                return Err(SqsError::service_unavailable(reason.clone()));
            }
            let result = operation(&mut engine, &mut journal);
            observe::log_dead_letters(&engine, &journal);
            let tail_lsn = match &self.log {
                Some(log) => match payloads::append(log, &mut engine, &journal, &self.checkpoints)
                    .map_err(log_failed)
                {
                    Ok(lsn) => Some(lsn),
                    Err(error) => {
                        // The engine has applied records the log does not have: from here on
                        // its state is not what a restart would recover, so it must not answer
                        // anything. (Poisoned logs fail every call anyway; this also covers
                        // failures that do not poison the log, such as an oversized record.)
                        let _ = self.stopped.set(error.message.clone());
                        return Err(error);
                    }
                },
                None => None,
            };
            (result, tail_lsn)
        };
        self.wake_for(&journal);
        if !journal.is_empty() {
            self.checkpoint_if_due();
        }
        Ok((result, tail_lsn))
    }

    /// The second half of [`Embedded::run`]: waits until the log is durable up to `tail_lsn`.
    async fn durable(&self, tail_lsn: Option<Lsn>) -> Result<(), SqsError> {
        if let (Some(log), Some(lsn)) = (&self.log, tail_lsn) {
            log.wait_durable(lsn).await.map_err(log_failed)?;
        }
        Ok(())
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
                _ => {}
            }
        }
    }

    fn context(&self) -> Context {
        Context {
            base_url: String::new(),
            region: self.config.region.clone(),
            account_id: self.config.account_id.clone(),
            request_id: String::new(),
        }
    }

    fn send_input(mut message: SendInput, caller: &Caller) -> SendInput {
        message.sender_id = caller.sender_id.clone();
        message
    }

    /// One receive attempt. With long polling (`wait_time_seconds` not 0), a queue at its
    /// in-flight limit answers empty instead of `OverLimit` and the receive waits, as SQS does.
    ///
    /// The payloads of the leased messages are read from the log after the engine lock is
    /// released and before waiting for durability, under a read guard taken before the lease:
    /// a checkpoint removes segments only under the write guard, so no segment a delivery
    /// refers to can go between the lease and the read (even if the message is purged or
    /// relocated meanwhile).
    async fn try_receive(
        &self,
        name: &str,
        request: &ReceiveRequest,
        wait_time_seconds: Option<u32>,
        attempt_id: Option<&str>,
    ) -> Result<ReceiveProbe, SqsError> {
        let reads = self.checkpoints.payload_reads();
        let (probe, tail_lsn) = self.apply_now(|engine, journal| {
            let now_ms = self.now_ms();
            let received =
                engine.receive_with_attempt(now_ms, name, request.clone(), attempt_id, journal);
            let deliveries = match received {
                Err(Error::OverLimit { .. })
                    if wait_time_seconds.map_or_else(
                        || {
                            engine
                                .queue(name)
                                .is_some_and(|q| q.config.receive_wait_time_seconds > 0)
                        },
                        |wait| wait > 0,
                    ) =>
                {
                    Vec::new()
                }
                result => result?,
            };
            let queue = engine.queue(name).ok_or(Error::QueueDoesNotExist)?;
            Ok::<_, Error>(ReceiveProbe {
                deliveries,
                queue_id: queue.id,
                queue_wait_seconds: queue.config.receive_wait_time_seconds,
                next_deadline_ms: queue.next_deadline_ms(),
            })
        })?;
        let probe = probe.map_err(SqsError::from).and_then(|probe| {
            Ok(ReceiveProbe {
                deliveries: payloads::resolve(self.log.as_deref(), probe.deliveries)?,
                queue_id: probe.queue_id,
                queue_wait_seconds: probe.queue_wait_seconds,
                next_deadline_ms: probe.next_deadline_ms,
            })
        });
        drop(reads);
        self.durable(tail_lsn).await?;
        probe
    }

    /// A receive that waits up to its wait time for a message (long polling).
    async fn receive(
        &self,
        name: &str,
        request: &ReceiveRequest,
        wait_time_seconds: Option<u32>,
        attempt_id: Option<&str>,
    ) -> Result<Vec<Delivery>, SqsError> {
        let started = Instant::now();
        let mut probe = self
            .try_receive(name, request, wait_time_seconds, attempt_id)
            .await?;
        let wait_seconds = wait_time_seconds.unwrap_or(probe.queue_wait_seconds);
        if !probe.deliveries.is_empty() || wait_seconds == 0 {
            return Ok(probe.deliveries);
        }
        let deadline = started + Duration::from_secs(u64::from(wait_seconds));
        let _waiting = WaitingGuard::new(&self.waiting);
        let mut shutdown = self.shutdown.subscribe();
        loop {
            if *shutdown.borrow_and_update() {
                return Ok(Vec::new());
            }
            let channel = self.waiters.channel(probe.queue_id);
            let notified = channel.notified();
            tokio::pin!(notified);
            // Register before looking, so a message sent between the look and the sleep wakes us.
            notified.as_mut().enable();
            probe = self
                .try_receive(name, request, wait_time_seconds, attempt_id)
                .await?;
            if !probe.deliveries.is_empty() {
                return Ok(probe.deliveries);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(Vec::new());
            }
            let wake_at = match probe.next_deadline_ms {
                Some(at_ms) => {
                    deadline.min(now + Duration::from_millis(at_ms.saturating_sub(self.now_ms())))
                }
                None => deadline,
            };
            tokio::select! {
                _ = &mut notified => {}
                _ = tokio::time::sleep_until(wake_at.into()) => {}
                _ = shutdown.changed() => return Ok(Vec::new()),
            }
        }
    }

    async fn send_batch(
        &self,
        name: &str,
        entries: Vec<BatchEntry<SendInput>>,
        caller: &Caller,
    ) -> Result<Outcome, SqsError> {
        let results = self
            .per_entry(name, entries, |engine, now, message, journal| {
                let message = Self::send_input(message, caller);
                let id = MessageId::from_random(rand::random());
                Ok(engine.send(now, name, message, id, journal)?)
            })
            .await?;
        Ok(Outcome::SentBatch(results))
    }

    /// Runs `each` for every entry of a batch in one engine operation; a missing queue fails the
    /// whole request, anything else only its entry.
    async fn per_entry<T, R>(
        &self,
        name: &str,
        entries: Vec<BatchEntry<T>>,
        mut each: impl FnMut(&mut Engine, u64, T, &mut Journal) -> Result<R, SqsError>,
    ) -> Result<Vec<(String, Result<R, SqsError>)>, SqsError> {
        self.run(|engine, journal| {
            let now = self.now_ms();
            engine.queue(name).ok_or(Error::QueueDoesNotExist)?;
            Ok::<_, Error>(
                entries
                    .into_iter()
                    .map(|entry| (entry.id, each(engine, now, entry.value, journal)))
                    .collect(),
            )
        })
        .await
    }

    async fn batch<T>(
        &self,
        name: &str,
        entries: Vec<BatchEntry<T>>,
        each: impl FnMut(&mut Engine, u64, T, &mut Journal) -> Result<(), SqsError>,
    ) -> Result<Outcome, SqsError> {
        Ok(Outcome::Batch(self.per_entry(name, entries, each).await?))
    }

    async fn edit_policy(
        &self,
        name: &str,
        edit: impl FnOnce(Option<&str>, &str) -> Result<Option<String>, SqsError>,
    ) -> Result<Outcome, SqsError> {
        let arn = leaseq_sqs::queue_arn(&self.context(), name);
        self.run(|engine, journal| {
            let queue = engine.queue(name).ok_or(Error::QueueDoesNotExist)?;
            let policy = edit(queue.config.policy.as_deref(), &arn)?;
            let patch = QueueConfigPatch {
                policy: Some(policy),
                ..QueueConfigPatch::default()
            };
            engine.set_queue_config(self.now_ms(), name, &patch, journal)?;
            Ok::<_, SqsError>(Outcome::Empty)
        })
        .await
    }

    async fn simple(
        &self,
        operation: impl FnOnce(&mut Engine, u64, &mut Journal) -> Result<(), Error>,
    ) -> Result<Outcome, SqsError> {
        self.run(|engine, journal| operation(engine, self.now_ms(), journal))
            .await?;
        Ok(Outcome::Empty)
    }

    /// A read that must not answer before the log is durable up to what it saw.
    async fn read<T>(
        &self,
        read: impl FnOnce(&mut Engine) -> Result<T, Error>,
    ) -> Result<T, SqsError> {
        self.run(|engine, _| read(engine)).await
    }
}

impl Backend for Embedded {
    async fn execute(&self, action: Action, caller: &Caller) -> Result<Outcome, SqsError> {
        match action {
            Action::CreateQueue {
                name,
                attributes,
                tags,
            } => {
                self.run(|e, j| e.create_queue(self.now_ms(), &name, &attributes, tags, j))
                    .await?;
                Ok(Outcome::QueueUrl(Arc::from(name)))
            }
            Action::GetQueueUrl { name } => {
                let name = self
                    .read(|e| Ok(e.queue(&name).ok_or(Error::QueueDoesNotExist)?.name.clone()))
                    .await?;
                Ok(Outcome::QueueUrl(name))
            }
            Action::ListQueues {
                prefix,
                max_results,
                next_token,
            } => {
                let names = self.read(|e| Ok(e.list_queues(&prefix))).await?;
                let (names, next_token) =
                    leaseq_sqs::paginate(names, max_results, next_token.as_deref())?;
                Ok(Outcome::QueueUrls { names, next_token })
            }
            Action::ListDeadLetterSourceQueues {
                queue,
                max_results,
                next_token,
            } => {
                let names = self.read(|e| e.dead_letter_sources(&queue.name)).await?;
                let (names, next_token) =
                    leaseq_sqs::paginate(names, max_results, next_token.as_deref())?;
                Ok(Outcome::DeadLetterSourceQueues { names, next_token })
            }
            Action::DeleteQueue { queue } => {
                self.simple(|e, now, j| e.delete_queue(now, &queue.name, j))
                    .await
            }
            Action::GetQueueAttributes { queue } => {
                let info = self
                    .read(|e| e.queue_info(self.now_ms(), &queue.name))
                    .await?;
                Ok(Outcome::QueueAttributes {
                    info: Box::new(info),
                })
            }
            Action::SetQueueAttributes { queue, attributes } => {
                self.simple(|e, now, j| e.set_queue_config(now, &queue.name, &attributes, j))
                    .await
            }
            Action::PurgeQueue { queue } => {
                self.simple(|e, now, j| e.purge_queue(now, &queue.name, j))
                    .await
            }
            Action::TagQueue { queue, tags } => {
                self.simple(|e, now, j| e.tag_queue(now, &queue.name, &tags, j))
                    .await
            }
            Action::UntagQueue { queue, keys } => {
                self.simple(|e, now, j| e.untag_queue(now, &queue.name, &keys, j))
                    .await
            }
            Action::ListQueueTags { queue } => {
                let info = self
                    .read(|e| e.queue_info(self.now_ms(), &queue.name))
                    .await?;
                Ok(Outcome::QueueTags(info.tags))
            }
            Action::AddPermission {
                queue,
                label,
                account_ids,
                actions,
            } => {
                self.edit_policy(&queue.name, |policy, arn| {
                    leaseq_sqs::policy::add_permission(policy, arn, &label, &account_ids, &actions)
                        .map(Some)
                })
                .await
            }
            Action::RemovePermission { queue, label } => {
                self.edit_policy(&queue.name, |policy, _| {
                    leaseq_sqs::policy::remove_permission(policy, &label)
                })
                .await
            }
            Action::SendMessage { queue, message } => {
                let id = MessageId::from_random(rand::random());
                let message = Self::send_input(message, caller);
                let sent = self
                    .run(|e, j| e.send(self.now_ms(), &queue.name, message, id, j))
                    .await?;
                Ok(Outcome::Sent(sent))
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
                let attempt_id = receive_request_attempt_id.as_deref();
                let request = ReceiveRequest {
                    client: Some(caller.client()),
                    ..request
                };
                let deliveries = self
                    .receive(&queue.name, &request, wait_time_seconds, attempt_id)
                    .await?;
                if deliveries.is_empty() {
                    self.observe_empty_receive(&queue.name);
                }
                self.log_deliveries(&queue.name, &deliveries);
                Ok(Outcome::Received {
                    deliveries,
                    queue_name: Arc::from(queue.name),
                })
            }
            Action::DeleteMessage { queue, receipt } => {
                self.run(|e, j| self.delete_observed(e, self.now_ms(), &queue.name, &receipt, j))
                    .await?;
                Ok(Outcome::Empty)
            }
            Action::DeleteMessageBatch { queue, entries } => {
                let name = queue.name;
                self.batch(&name, entries, |e, now, receipt, j| {
                    self.delete_observed(e, now, &name, &receipt, j)
                })
                .await
            }
            Action::ChangeMessageVisibility {
                queue,
                receipt,
                visibility_timeout_seconds,
            } => {
                self.run(|e, j| {
                    e.change_visibility(
                        self.now_ms(),
                        &queue.name,
                        &receipt,
                        visibility_timeout_seconds,
                        j,
                    )
                    .map_err(|error| self.receipt_error(e, &queue.name, error, &receipt))
                })
                .await?;
                Ok(Outcome::Empty)
            }
            Action::ChangeMessageVisibilityBatch { queue, entries } => {
                let name = queue.name;
                self.batch(&name, entries, |e, now, (receipt, timeout), j| {
                    e.change_visibility(now, &name, &receipt, timeout, j)
                        .map(drop)
                        .map_err(|error| self.receipt_error(e, &name, error, &receipt))
                })
                .await
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
            } => self.peek(queue.name, after_seq, max_messages).await,
            Action::LeaseqGetMessageHistory { queue, message_id } => {
                self.message_history(&queue.name, message_id).await
            }
            Action::LeaseqFailMessage {
                queue,
                receipt,
                reason,
            } => {
                self.run(|e, j| {
                    e.fail_message(self.now_ms(), &queue.name, &receipt, &reason, j)
                        .map_err(|error| SqsError::for_receipt(error, &receipt))
                })
                .await?;
                Ok(Outcome::Empty)
            }
        }
    }

    fn shut_down(&self) {
        self.shutdown.send_replace(true);
    }
}

/// The error a client gets when the log fails. A poisoned log never recovers by itself (a retry
/// of a failed fsync could report success for data that is not on disk), so the message says
/// that a restart is needed instead of leaving clients to retry in vain.
fn log_failed(error: WalError) -> SqsError {
    tracing::error!(%error, "the log failed");
    let remedy = if error.is_storage_full() {
        " The disk is full: free space, then restart the server. It refuses every request until it is restarted."
    } else if error.is_poisoned() {
        " The server refuses every request until it is restarted."
    } else {
        ""
    };
    SqsError::service_unavailable(format!(
        "The server could not make the request durable: {error}.{remedy}"
    ))
}
