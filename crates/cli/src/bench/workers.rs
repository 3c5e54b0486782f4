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

use tokio::sync::{watch, Notify};

use super::client::{
    decode, encode, Action, BatchResult, CallError, Connection, DeleteEntry, DeleteMessageBatch,
    Endpoint, FifoFields, ReceiveMessage, Received, ReceivedMessage, SendEntry, SendMessage,
    SendMessageBatch, ENTRY_IDS,
};
use super::jetstream::JetStreamConnection;
use super::plan::{Phase, Plan};
use super::postgres::PgmqConnection;

/// FIFO messages this generator has sent, across phases: the source of unique deduplication ids
/// and of the round-robin group choice.
static FIFO_MESSAGES: AtomicU64 = AtomicU64::new(0);
use super::stats::{Progress, Recorder};

/// How long a worker waits before trying again after its connection could not be opened.
const RECONNECT_DELAY: Duration = Duration::from_millis(100);

/// What the workers drive.
pub enum Target {
    /// An SQS endpoint.
    Sqs(Arc<Endpoint>),
    /// pgmq in the PostgreSQL this connection string names.
    Pgmq(Arc<str>),
    /// NATS JetStream at this URL.
    JetStream(Arc<str>),
}

/// What the workers of one phase share.
pub struct Shared {
    target: Arc<Target>,
    /// The queue URL (SQS) or the pgmq queue's name.
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
    /// Tenants of a standard queue and tenant `t0`'s weight.
    tenants: Option<(u64, u64)>,
    /// Mean time between two sends of one producer (`None`: no pacing).
    send_interval: Option<Duration>,
    /// How long a consumer holds each received message before deleting it.
    work: Duration,
    /// Messages handed out to producers so far (may pass `send_limit` by less than a batch).
    send_claimed: AtomicU64,
    producers_running: AtomicUsize,
}

impl Shared {
    pub fn new(plan: &Plan, phase: &Phase, target: Arc<Target>, queue_url: &str) -> Shared {
        Shared {
            target,
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
            tenants: plan.tenants,
            send_interval: phase
                .rate_per_s
                .map(|rate| Duration::from_secs_f64(phase.producers as f64 / rate)),
            work: Duration::from_millis(plan.work_ms),
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

    /// A body of `message_size_bytes` that starts with the send time (see [`message_body`]).
    fn message_body(&self, tenant: Option<u64>) -> String {
        message_body(self.message_size_bytes, tenant, epoch_micros())
    }

    /// The next message's body and, for a FIFO queue, its group and a unique deduplication id
    /// (round-robin over the groups); for a standard queue with tenants, its tenant (round-robin,
    /// `t0` `weight` times in each round); for a plain standard queue, no fields.
    fn next_message(&self) -> (String, Option<FifoFields>) {
        if let Some((tenants, weight)) = self.tenants {
            let n = FIFO_MESSAGES.fetch_add(1, Relaxed);
            let tenant = tenant_of(n, tenants, weight);
            let fields = FifoFields {
                message_group_id: format!("t{tenant}"),
                message_deduplication_id: None,
            };
            return (self.message_body(Some(tenant)), Some(fields));
        }
        let Some(groups) = self.groups else {
            return (self.message_body(None), None);
        };
        let n = FIFO_MESSAGES.fetch_add(1, Relaxed);
        let fields = FifoFields {
            message_group_id: format!("g{}", n % groups),
            message_deduplication_id: Some(format!("{}-{n}", std::process::id())),
        };
        (self.message_body(None), Some(fields))
    }

    fn send_request(&self, count: usize) -> (Action, Vec<u8>) {
        let queue_url = &self.queue_url;
        if self.batch_size == 1 {
            let (body, fifo) = self.next_message();
            return (
                Action::SendMessage,
                SendMessage {
                    queue_url,
                    message_body: &body,
                    fifo,
                }
                .json(),
            );
        }
        let (bodies, fields): (Vec<String>, Vec<Option<FifoFields>>) =
            (0..count).map(|_| self.next_message()).unzip();
        let entries = ENTRY_IDS.into_iter().zip(bodies.iter().zip(fields));
        let entries = entries
            .map(|(id, (body, fifo))| SendEntry {
                id,
                message_body: body,
                fifo,
            })
            .collect();
        (
            Action::SendMessageBatch,
            SendMessageBatch { queue_url, entries }.json(),
        )
    }
}

/// A body of `size_bytes` that starts with the send time `sent_at_micros`, for end-to-end
/// latency, then, with tenants, the tenant's mark (`NOISY_MARK` for `t0`, `QUIET_MARK` for the
/// others), then `x`s. The `x`s are copied, not pushed a character at a time, which took about
/// 2,400 instructions for a 256-byte body (callgrind of the generator).
fn message_body(size_bytes: usize, tenant: Option<u64>, sent_at_micros: u64) -> String {
    const PADDING: &str = "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx";
    let digits = super::plan::Plan::timestamp_bytes();
    let mut body = String::with_capacity(size_bytes);
    if size_bytes >= digits {
        body.push_str(&format!("{sent_at_micros:0digits$}"));
        if let Some(tenant) = tenant.filter(|_| body.len() < size_bytes) {
            body.push(if tenant == 0 { NOISY_MARK } else { QUIET_MARK });
        }
    }
    while body.len() < size_bytes {
        body.push_str(&PADDING[..(size_bytes - body.len()).min(PADDING.len())]);
    }
    body
}

/// The mark after a body's send time of a message of tenant `t0`, the noisy one.
const NOISY_MARK: char = 'N';
/// The mark of every other tenant's message.
const QUIET_MARK: char = 'Q';

/// The tenant of the `n`-th message: rounds of `tenants - 1 + weight` sends, of which tenant 0
/// gets the first `weight` and every other tenant one.
fn tenant_of(n: u64, tenants: u64, weight: u64) -> u64 {
    let slot = n % (tenants - 1 + weight);
    slot.saturating_sub(weight - 1)
}

/// One request of a worker, whatever it drives.
enum Op<'a> {
    /// Send this many messages (one: a single send; more: a batch).
    Send(usize),
    Receive,
    Delete(&'a [ReceivedMessage]),
}

/// What a request answered.
enum Answer {
    /// Entries that succeeded, entries that failed and the first failure's reason.
    Done(u64, u64, Option<String>),
    Received(Vec<ReceivedMessage>),
}

/// A worker's connection: to an SQS endpoint, a PostgreSQL session for pgmq or a NATS server.
enum Link {
    Sqs(Connection),
    Pgmq(PgmqConnection),
    // Boxed: the pull consumer's handle is large, and a Link lives in every worker's future.
    JetStream(Box<JetStreamConnection>),
}

impl Link {
    async fn open(shared: &Shared) -> Result<Link, CallError> {
        Ok(match shared.target.as_ref() {
            Target::Sqs(endpoint) => Link::Sqs(Connection::open(endpoint.clone()).await?),
            Target::Pgmq(connection) => {
                Link::Pgmq(PgmqConnection::open(connection, &shared.queue_url).await?)
            }
            Target::JetStream(url) => Link::JetStream(Box::new(
                JetStreamConnection::open(url, &shared.queue_url).await?,
            )),
        })
    }

    async fn ready(&mut self) -> bool {
        match self {
            Link::Sqs(connection) => connection.ready().await,
            Link::Pgmq(_) | Link::JetStream(_) => true,
        }
    }

    /// The action the report counts `op` under.
    fn action(shared: &Shared, op: &Op<'_>) -> Action {
        match op {
            Op::Send(_) if shared.batch_size == 1 => Action::SendMessage,
            Op::Send(_) => Action::SendMessageBatch,
            Op::Receive => Action::ReceiveMessage,
            Op::Delete(_) => Action::DeleteMessageBatch,
        }
    }

    async fn run(&mut self, shared: &Shared, op: Op<'_>) -> Result<Answer, CallError> {
        match self {
            Link::Sqs(connection) => Link::run_sqs(connection, shared, op).await,
            Link::Pgmq(connection) => match op {
                Op::Send(count) => {
                    let bodies: Vec<String> =
                        (0..count).map(|_| shared.message_body(None)).collect();
                    let sent = connection.send(&bodies).await?;
                    Ok(Answer::Done(
                        sent,
                        count as u64 - sent.min(count as u64),
                        None,
                    ))
                }
                Op::Receive => {
                    let visibility = 30;
                    let (max, wait) = (shared.receive_max as i32, shared.wait_time_seconds as i32);
                    Ok(Answer::Received(
                        connection.read(visibility, max, wait).await?,
                    ))
                }
                Op::Delete(messages) => {
                    let receipts: Vec<&str> =
                        messages.iter().map(|m| m.receipt_handle.as_str()).collect();
                    let deleted = connection.delete(&receipts).await?;
                    let missing = messages.len() as u64 - deleted.min(messages.len() as u64);
                    let reason = (missing > 0).then(|| "pgmq.delete: not found".to_string());
                    Ok(Answer::Done(deleted, missing, reason))
                }
            },
            Link::JetStream(connection) => match op {
                Op::Send(count) => {
                    let bodies: Vec<String> =
                        (0..count).map(|_| shared.message_body(None)).collect();
                    let stored = connection.send(bodies).await?;
                    Ok(Answer::Done(stored, count as u64 - stored, None))
                }
                Op::Receive => Ok(Answer::Received(
                    connection
                        .read(shared.receive_max, shared.wait_time_seconds)
                        .await?,
                )),
                Op::Delete(messages) => {
                    let receipts: Vec<&str> =
                        messages.iter().map(|m| m.receipt_handle.as_str()).collect();
                    Ok(Answer::Done(connection.ack(&receipts).await?, 0, None))
                }
            },
        }
    }

    async fn run_sqs(
        connection: &mut Connection,
        shared: &Shared,
        op: Op<'_>,
    ) -> Result<Answer, CallError> {
        let action = Link::action(shared, &op);
        match op {
            Op::Send(count) => {
                let (action, body) = shared.send_request(count);
                let answer = connection.call(action, body).await?;
                if action == Action::SendMessage {
                    return Ok(Answer::Done(1, 0, None));
                }
                batch_answer(&answer)
            }
            Op::Receive => {
                let body = encode(&ReceiveMessage {
                    queue_url: &shared.queue_url,
                    max_number_of_messages: shared.receive_max,
                    wait_time_seconds: shared.wait_time_seconds,
                });
                let answer = connection.call(action, body).await?;
                Ok(Answer::Received(decode::<Received>(&answer)?.messages))
            }
            Op::Delete(messages) => {
                let entries = ENTRY_IDS.into_iter().zip(messages);
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
                batch_answer(&connection.call(action, body).await?)
            }
        }
    }
}

/// A batch answer's counts.
fn batch_answer(answer: &[u8]) -> Result<Answer, CallError> {
    let result: BatchResult = decode(answer)?;
    let first = result
        .failed
        .first()
        .map(|failed| format!("{}: {}", failed.code, failed.message));
    Ok(Answer::Done(
        result.successful.len() as u64,
        result.failed.len() as u64,
        first,
    ))
}

/// A worker's connection and results.
struct Worker {
    shared: Arc<Shared>,
    link: Option<Link>,
    recorder: Recorder,
}

impl Worker {
    fn new(shared: Arc<Shared>) -> Worker {
        Worker {
            shared,
            link: None,
            recorder: Recorder::default(),
        }
    }

    /// Makes one request and times it (not counting opening the connection), or returns None
    /// if the stop signal came first.
    async fn call(
        &mut self,
        op: Op<'_>,
        stop: &mut watch::Receiver<bool>,
    ) -> Option<(Result<Answer, CallError>, Duration)> {
        let work = async {
            if let Some(link) = &mut self.link {
                if !link.ready().await {
                    self.link = None;
                }
            }
            let link = match &mut self.link {
                Some(link) => link,
                None => match Link::open(&self.shared).await {
                    Ok(link) => {
                        self.recorder.connections_opened += 1;
                        self.link.insert(link)
                    }
                    Err(error) => {
                        tokio::time::sleep(RECONNECT_DELAY).await;
                        return (Err(error), Duration::ZERO);
                    }
                },
            };
            let started = Instant::now();
            let outcome = link.run(&self.shared, op).await;
            let latency = started.elapsed();
            if outcome.as_ref().is_err_and(CallError::breaks_connection) {
                self.link = None;
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

    /// Counts a request's answer; returns the number of entries that succeeded.
    fn done(&mut self, action: Action, latency: Duration, done: (u64, u64, Option<String>)) -> u64 {
        let (successful, failed, first) = done;
        self.recorder.success(action, latency, successful, failed);
        if failed > 0 {
            self.shared.progress.errors.fetch_add(failed, Relaxed);
            let stats = self.recorder.actions.entry(action).or_default();
            if let Some(first) = first {
                stats.first_error.get_or_insert(first);
            }
        }
        successful
    }
}

/// A producer: sends until the stop signal, the phase's send limit, or forever within the time.
pub async fn produce(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) -> Recorder {
    let mut worker = Worker::new(shared.clone());
    let mut next_send = Instant::now();
    while !*stop.borrow_and_update() {
        let Some(count) = shared.claim_sends() else {
            break;
        };
        if let Some(interval) = shared.send_interval {
            // Open loop: the send times are drawn ahead (a Poisson process), whatever the last
            // answer took; a producer that fell behind catches up at once.
            next_send += poisson_gap(interval * count as u32);
            tokio::select! {
                biased;
                _ = stop.changed() => break,
                () = tokio::time::sleep_until(next_send.into()) => {}
            }
        }
        let op = Op::Send(count);
        let action = Link::action(&shared, &op);
        let Some((outcome, latency)) = worker.call(op, &mut stop).await else {
            break;
        };
        let sent = match outcome {
            Ok(Answer::Done(successful, failed, first)) => {
                worker.done(action, latency, (successful, failed, first))
            }
            Ok(Answer::Received(_)) => unreachable!("a send answers counts"),
            Err(error) => {
                worker.failure(action, &error);
                continue;
            }
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
    while !*stop.borrow_and_update() && !shared.consumed_enough() {
        let action = Action::ReceiveMessage;
        let Some((outcome, latency)) = worker.call(Op::Receive, &mut stop).await else {
            break;
        };
        let received = match outcome {
            Ok(Answer::Received(messages)) => messages,
            Ok(Answer::Done(..)) => unreachable!("a receive answers messages"),
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
            for message in &received {
                if let Some(sent_at_us) = sent_at_us(&message.body) {
                    let noisy = tenant_mark(&message.body).map(|mark| mark == NOISY_MARK);
                    worker
                        .recorder
                        .end_to_end(now_us.saturating_sub(sent_at_us), noisy);
                }
            }
        }
        if !shared.work.is_zero() {
            // The handler's work, one message after another, each 50% to 150% of the mean (at
            // one fixed length the consumers would stay in the phases they started in and come
            // back in waves); the stop signal cuts it short.
            let work: Duration = (0..received.len())
                .map(|_| shared.work.mul_f64(0.5 + rand::random::<f64>()))
                .sum();
            tokio::select! {
                biased;
                _ = stop.changed() => break,
                () = tokio::time::sleep(work) => {}
            }
        }
        let action = Action::DeleteMessageBatch;
        let Some((outcome, latency)) = worker.call(Op::Delete(&received), &mut stop).await else {
            break;
        };
        match outcome {
            Ok(Answer::Done(successful, failed, first)) => {
                let deleted = worker.done(action, latency, (successful, failed, first));
                shared.add_deleted(deleted);
            }
            Ok(Answer::Received(_)) => unreachable!("a delete answers counts"),
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

/// A gap of a Poisson process whose gaps average `mean`: exponentially distributed.
fn poisson_gap(mean: Duration) -> Duration {
    let uniform: f64 = rand::random(); // in [0, 1)
    mean.mul_f64(-(1.0 - uniform).ln())
}

/// The tenant's mark a producer wrote after the send time, if there is one.
fn tenant_mark(body: &str) -> Option<char> {
    let mark = body
        .get(super::plan::Plan::timestamp_bytes()..)?
        .chars()
        .next()?;
    [NOISY_MARK, QUIET_MARK].contains(&mark).then_some(mark)
}

/// The send time a producer wrote at the start of a body, if it is there.
fn sent_at_us(body: &str) -> Option<u64> {
    body.get(..super::plan::Plan::timestamp_bytes())?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::{message_body, tenant_of, NOISY_MARK, QUIET_MARK};

    /// Bodies have their size, start with the send time when they have room for it, and carry
    /// the tenant's mark after it when they have room for that too; the rest is `x`s.
    #[test]
    fn bodies_have_their_size_the_send_time_and_the_mark() {
        let digits = super::super::plan::Plan::timestamp_bytes();
        let micros = 1_733_580_000_123_456u64;
        let time = format!("{micros:0digits$}");
        for size in [
            0,
            1,
            digits - 1,
            digits,
            digits + 1,
            digits + 2,
            64,
            100,
            256,
            1000,
        ] {
            for (tenant, mark) in [
                (None, None),
                (Some(0), Some(NOISY_MARK)),
                (Some(3), Some(QUIET_MARK)),
            ] {
                let body = message_body(size, tenant, micros);
                let mut expected = String::new();
                if size >= digits {
                    expected.push_str(&time);
                    if let Some(mark) = mark.filter(|_| size > digits) {
                        expected.push(mark);
                    }
                }
                expected.extend(std::iter::repeat_n('x', size - expected.len()));
                assert_eq!(body, expected, "size {size}, tenant {tenant:?}");
            }
        }
    }

    #[test]
    fn the_noisy_tenant_gets_its_weight_in_every_round() {
        let round: Vec<u64> = (0..24).map(|n| tenant_of(n, 5, 20)).collect();
        let mut counts = [0; 5];
        for tenant in &round {
            counts[*tenant as usize] += 1;
        }
        assert_eq!(counts, [20, 1, 1, 1, 1]);
        assert_eq!(tenant_of(24, 5, 20), 0, "the next round starts again");
        let even: Vec<u64> = (0..6).map(|n| tenant_of(n, 3, 1)).collect();
        assert_eq!(even, [0, 1, 2, 0, 1, 2]);
    }
}
