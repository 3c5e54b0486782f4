//! The workers: producers send messages (singly or in batches), consumers receive with a long
//! poll and delete what they received in one batch. Each worker owns one connection and keeps
//! one request in flight, so N workers are N concurrent requests.
//!
//! A phase ends in one of three ways, all checked by the phase's driver: producers have handed
//! out their `send_limit` and finished, consumers have deleted their `consume_target`, or the
//! phase's time is up. Then the driver raises the stop signal and every worker abandons its
//! in-flight request (a long poll may otherwise hold it for seconds); abandoned requests are not
//! counted, so the counts match the measured time.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use tokio::sync::{watch, Notify};

use super::client::{
    decode, encode, Action, BatchResult, CallError, Connection, DeleteEntry, DeleteMessageBatch,
    Endpoint, FifoFields, ReceiveMessage, Received, SendEntry, SendMessage, SendMessageBatch,
    ENTRY_IDS,
};
use super::plan::{Phase, Plan};

/// FIFO messages this generator has sent, across phases: the source of unique deduplication ids
/// and of the round-robin group choice.
static FIFO_MESSAGES: AtomicU64 = AtomicU64::new(0);
use super::stats::{Progress, Recorder};

/// How long a worker waits before trying again after its connection could not be opened.
const RECONNECT_DELAY: Duration = Duration::from_millis(100);

/// What the workers of one phase share.
pub struct Shared {
    endpoint: Arc<Endpoint>,
    queue_url: String,
    pub progress: Progress,
    /// Woken when the last producer exits or consumers reach their target.
    pub finished: Notify,
    batch_size: usize,
    receive_max: usize,
    wait_time_seconds: u32,
    send_limit: Option<u64>,
    consume_target: Option<u64>,
    consumers: usize,
    record_end_to_end: bool,
    message_size_bytes: usize,
    /// FIFO groups to spread sends over (`None`: a standard queue).
    groups: Option<u64>,
    /// Messages handed out to producers so far (may pass `send_limit` by less than a batch).
    send_claimed: AtomicU64,
    producers_running: AtomicUsize,
}

impl Shared {
    pub fn new(plan: &Plan, phase: &Phase, endpoint: Arc<Endpoint>, queue_url: &str) -> Shared {
        Shared {
            endpoint,
            queue_url: queue_url.to_string(),
            progress: Progress::default(),
            finished: Notify::new(),
            batch_size: phase.batch_size,
            receive_max: plan.receive_max,
            wait_time_seconds: plan.wait_time_seconds,
            send_limit: phase.send_limit,
            consume_target: phase.consume_target,
            consumers: phase.consumers,
            record_end_to_end: phase.record_end_to_end,
            message_size_bytes: plan.message_size_bytes,
            groups: plan.groups,
            send_claimed: AtomicU64::new(0),
            producers_running: AtomicUsize::new(phase.producers),
        }
    }

    /// True once the phase has done all it was asked to (not counting the time limit).
    pub fn is_finished(&self) -> bool {
        let producers_done = self.producers_running.load(Relaxed) == 0;
        producers_done && (self.consumers == 0 || self.consumed_enough())
    }

    fn consumed_enough(&self) -> bool {
        self.consume_target
            .is_some_and(|target| self.progress.deleted.load(Relaxed) >= target)
    }

    /// Hands out up to one batch of messages to send, or None when the limit is reached.
    fn claim_sends(&self) -> Option<usize> {
        let batch = self.batch_size as u64;
        let Some(limit) = self.send_limit else {
            return Some(self.batch_size);
        };
        let before = self.send_claimed.fetch_add(batch, Relaxed);
        let left = limit.checked_sub(before).filter(|&left| left > 0)?;
        Some(left.min(batch) as usize)
    }

    fn producer_exited(&self) {
        if self.producers_running.fetch_sub(1, Relaxed) == 1 {
            self.finished.notify_one();
        }
    }

    fn add_deleted(&self, count: u64) {
        let before = self.progress.deleted.fetch_add(count, Relaxed);
        if let Some(target) = self.consume_target {
            if before < target && before + count >= target {
                self.finished.notify_one();
            }
        }
    }

    /// A body of `message_size_bytes` that starts with the send time, for end-to-end latency.
    fn message_body(&self) -> String {
        let digits = super::plan::Plan::timestamp_bytes();
        if self.message_size_bytes < digits {
            return "x".repeat(self.message_size_bytes);
        }
        let mut body = String::with_capacity(self.message_size_bytes);
        body.push_str(&format!("{:0digits$}", epoch_micros()));
        body.extend(std::iter::repeat_n('x', self.message_size_bytes - digits));
        body
    }

    /// The group and a unique deduplication id of the next FIFO message (round-robin over the
    /// groups), or `None` for a standard queue.
    fn fifo_fields(&self) -> Option<FifoFields> {
        let groups = self.groups?;
        let n = FIFO_MESSAGES.fetch_add(1, Relaxed);
        Some(FifoFields {
            message_group_id: format!("g{}", n % groups),
            message_deduplication_id: format!("{}-{n}", std::process::id()),
        })
    }

    fn send_request(&self, count: usize) -> (Action, Vec<u8>) {
        let queue_url = &self.queue_url;
        if self.batch_size == 1 {
            let body = self.message_body();
            return (
                Action::SendMessage,
                encode(&SendMessage {
                    queue_url,
                    message_body: &body,
                    fifo: self.fifo_fields(),
                }),
            );
        }
        let bodies: Vec<String> = (0..count).map(|_| self.message_body()).collect();
        let entries = ENTRY_IDS.into_iter().zip(&bodies);
        let entries = entries
            .map(|(id, body)| SendEntry {
                id,
                message_body: body,
                fifo: self.fifo_fields(),
            })
            .collect();
        (
            Action::SendMessageBatch,
            encode(&SendMessageBatch { queue_url, entries }),
        )
    }
}

/// A worker's connection and results.
struct Worker {
    shared: Arc<Shared>,
    connection: Option<Connection>,
    recorder: Recorder,
}

impl Worker {
    fn new(shared: Arc<Shared>) -> Worker {
        Worker {
            shared,
            connection: None,
            recorder: Recorder::default(),
        }
    }

    /// Makes one call and times it (not counting opening the connection), or returns None if
    /// the stop signal came first.
    async fn call(
        &mut self,
        action: Action,
        body: Vec<u8>,
        stop: &mut watch::Receiver<bool>,
    ) -> Option<(Result<Bytes, CallError>, Duration)> {
        let work = async {
            if let Some(connection) = &mut self.connection {
                if !connection.ready().await {
                    self.connection = None;
                }
            }
            let connection = match &mut self.connection {
                Some(connection) => connection,
                None => match Connection::open(self.shared.endpoint.clone()).await {
                    Ok(connection) => {
                        self.recorder.connections_opened += 1;
                        self.connection.insert(connection)
                    }
                    Err(error) => {
                        tokio::time::sleep(RECONNECT_DELAY).await;
                        return (Err(error), Duration::ZERO);
                    }
                },
            };
            let started = Instant::now();
            let outcome = connection.call(action, body).await;
            let latency = started.elapsed();
            if outcome.as_ref().is_err_and(CallError::breaks_connection) {
                self.connection = None;
            }
            (outcome, latency)
        };
        tokio::select! {
            biased;
            _ = stop.changed() => None,
            done = work => Some(done),
        }
    }

    fn failure(&mut self, action: Action, error: &dyn std::fmt::Display) {
        self.shared.progress.errors.fetch_add(1, Relaxed);
        self.recorder.failure(action, error);
    }

    /// Counts a batch answer; returns the number of entries that succeeded.
    fn batch_answer(&mut self, action: Action, answer: &[u8], latency: Duration) -> u64 {
        let result: BatchResult = match decode(answer) {
            Ok(result) => result,
            Err(error) => {
                self.failure(action, &error);
                return 0;
            }
        };
        let successful = result.successful.len() as u64;
        self.recorder
            .success(action, latency, successful, result.failed.len() as u64);
        if let Some(failed) = result.failed.first() {
            self.shared
                .progress
                .errors
                .fetch_add(result.failed.len() as u64, Relaxed);
            let stats = self.recorder.actions.entry(action).or_default();
            stats
                .first_error
                .get_or_insert_with(|| format!("{}: {}", failed.code, failed.message));
        }
        successful
    }
}

/// A producer: sends until the stop signal, the phase's send limit, or forever within the time.
pub async fn produce(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) -> Recorder {
    let mut worker = Worker::new(shared.clone());
    while !*stop.borrow_and_update() {
        let Some(count) = shared.claim_sends() else {
            break;
        };
        let (action, body) = shared.send_request(count);
        let Some((outcome, latency)) = worker.call(action, body, &mut stop).await else {
            break;
        };
        let sent = match (outcome, action) {
            (Err(error), _) => {
                worker.failure(action, &error);
                continue;
            }
            (Ok(_), Action::SendMessage) => {
                worker.recorder.success(action, latency, 1, 0);
                1
            }
            (Ok(answer), _) => worker.batch_answer(action, &answer, latency),
        };
        shared.progress.sent.fetch_add(sent, Relaxed);
    }
    shared.producer_exited();
    worker.recorder
}

/// A consumer: receives (long poll) and deletes what it got in one batch, until the stop signal
/// or the phase's consume target.
pub async fn consume(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) -> Recorder {
    let mut worker = Worker::new(shared.clone());
    let receive = encode(&ReceiveMessage {
        queue_url: &shared.queue_url,
        max_number_of_messages: shared.receive_max,
        wait_time_seconds: shared.wait_time_seconds,
    });
    while !*stop.borrow_and_update() && !shared.consumed_enough() {
        let action = Action::ReceiveMessage;
        let Some((outcome, latency)) = worker.call(action, receive.clone(), &mut stop).await else {
            break;
        };
        let received = match outcome.and_then(|answer| decode::<Received>(&answer)) {
            Ok(received) => received.messages,
            Err(error) => {
                worker.failure(action, &error);
                continue;
            }
        };
        if received.is_empty() {
            // An empty long poll's latency is the wait time, not the server's work: count it
            // without letting it into the histogram.
            worker.recorder.actions.entry(action).or_default().empty += 1;
            continue;
        }
        worker
            .recorder
            .success(action, latency, received.len() as u64, 0);
        shared
            .progress
            .received
            .fetch_add(received.len() as u64, Relaxed);
        if shared.record_end_to_end {
            let now_us = epoch_micros();
            for sent_at_us in received.iter().filter_map(|m| sent_at_us(&m.body)) {
                worker
                    .recorder
                    .end_to_end(now_us.saturating_sub(sent_at_us));
            }
        }
        let entries = ENTRY_IDS.into_iter().zip(&received);
        let entries = entries
            .map(|(id, m)| DeleteEntry {
                id,
                receipt_handle: &m.receipt_handle,
            })
            .collect();
        let body = encode(&DeleteMessageBatch {
            queue_url: &shared.queue_url,
            entries,
        });
        let action = Action::DeleteMessageBatch;
        let Some((outcome, latency)) = worker.call(action, body, &mut stop).await else {
            break;
        };
        match outcome {
            Ok(answer) => {
                let deleted = worker.batch_answer(action, &answer, latency);
                shared.add_deleted(deleted);
            }
            Err(error) => worker.failure(action, &error),
        }
    }
    worker.recorder
}

fn epoch_micros() -> u64 {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    u64::try_from(since_epoch.as_micros()).unwrap_or(u64::MAX)
}

/// The send time a producer wrote at the start of a body, if it is there.
fn sent_at_us(body: &str) -> Option<u64> {
    body.get(..super::plan::Plan::timestamp_bytes())?
        .parse()
        .ok()
}
