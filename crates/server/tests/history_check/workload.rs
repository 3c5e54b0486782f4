//! The workload of the history checks: concurrent clients on a standard queue and a FIFO queue,
//! each with a dead-letter queue, and the final listing of every queue. Shared by the test on
//! the in-process node (`crates/server/tests/history_check.rs`), the one on the PostgreSQL log
//! (`crates/postgres/tests/history.rs`) and the cluster's fault test
//! (`crates/cli/tests/cluster.rs`).
//!
//! Each client sends each request to a node drawn at random from [`Nodes`] (one address for
//! the one-node tests; a cluster's nodes, which a test may change while the clients run). A
//! request whose connection breaks, that gets no whole answer within [`Nodes`]'s bound, or
//! that is answered with a 5xx, has an unknown outcome (it may have taken effect, at any time
//! from its invocation on); a 4xx was refused with no effect. A request never sent (no
//! connection could be opened) is not recorded at all.

#![allow(dead_code)] // Each test binary uses its own subset (the one-node tests add no node).

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leaseq_testkit::history::{
    check, check_events, Config, Counts, Delivery, History, Observation, Observed, Op, OpId,
    Outcome, QueueSpec, Reply, Summary, Violation, ViolationKind,
};
use leaseq_testkit::http::{json_answer, json_headers, target, CallError, Connection};
use leaseq_testkit::launch::{ACCOUNT_ID, REGION};
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

/// The base name of the one-node tests' queues.
const BASE: &str = "history";
const MAX_RECEIVE_COUNT: u32 = 3;
const CLIENTS: u32 = 6;
const GROUPS: usize = 4;
/// A receipt is used within this long of its receive, or kept as an old one.
const HOLD_MAX: Duration = Duration::from_millis(2_500);
/// The process number of the final listings in the history (the clients are `0..CLIENTS`).
const LISTING_PROCESS: u32 = 100;
/// How long opening a connection may take: a node that is paused still accepts (the kernel
/// does), and a dead one refuses at once, so this bounds only the unusual.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// How long the setup and the final listings keep retrying until a node answers them: a
/// takeover in progress makes nodes answer 503 for a few seconds.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(60);
/// The pause between two tries of the setup or of a listing.
const SETTLE_RETRY_PAUSE: Duration = Duration::from_millis(200);
/// The header naming the node that executed a request (a cluster's nodes send it).
const NODE_HEADER: &str = "x-leaseq-node";

/// The nodes the clients send to, and how long each request may wait for its answer. Clones
/// share the list, so a test can add a node that joins a cluster and remove one that left
/// while the clients run.
#[derive(Clone)]
pub struct Nodes {
    addresses: Arc<Mutex<Vec<SocketAddr>>>,
    answer_within: Duration,
}

impl Nodes {
    /// `addresses`, each request bounded by `answer_within`.
    pub fn new(addresses: Vec<SocketAddr>, answer_within: Duration) -> Nodes {
        assert!(!addresses.is_empty(), "no node to send to");
        Nodes {
            addresses: Arc::new(Mutex::new(addresses)),
            answer_within,
        }
    }

    /// Clients send to `address` too from now on.
    pub fn add(&self, address: SocketAddr) {
        self.lock().push(address);
    }

    /// Clients no longer send to `address` (requests in flight to it finish as they do).
    pub fn remove(&self, address: SocketAddr) {
        self.lock().retain(|known| *known != address);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<SocketAddr>> {
        // A panicking client leaves the list whole (every change is one push or retain).
        self.addresses
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn pick(&self, rng: &mut StdRng) -> SocketAddr {
        *self.lock().choose(rng).expect("a node to send to")
    }

    fn all(&self) -> Vec<SocketAddr> {
        self.lock().clone()
    }
}

/// The four queues of one run: a standard queue and a FIFO queue, each with a dead-letter
/// queue after [`MAX_RECEIVE_COUNT`] receives. A test that checks several histories in turn
/// names each run's queues apart, so no history sees another's messages.
#[derive(Clone, Debug)]
pub struct Queues {
    standard: String,
    standard_dlq: String,
    fifo: String,
    fifo_dlq: String,
}

impl Queues {
    /// `{base}`, `{base}-dlq`, `{base}.fifo` and `{base}-dlq.fifo`.
    pub fn named(base: &str) -> Queues {
        Queues {
            standard: base.to_string(),
            standard_dlq: format!("{base}-dlq"),
            fifo: format!("{base}.fifo"),
            fifo_dlq: format!("{base}-dlq.fifo"),
        }
    }

    /// What the checker must know of them.
    pub fn config(&self) -> Config {
        Config::default()
            .queue(
                &self.standard,
                QueueSpec::standard(1_000).with_redrive(&self.standard_dlq, MAX_RECEIVE_COUNT),
            )
            .queue(&self.standard_dlq, QueueSpec::standard(30_000))
            .queue(
                &self.fifo,
                QueueSpec::fifo(1_000).with_redrive(&self.fifo_dlq, MAX_RECEIVE_COUNT),
            )
            .queue(&self.fifo_dlq, QueueSpec::fifo(30_000))
    }

    fn all(&self) -> [&str; 4] {
        [
            &self.standard,
            &self.standard_dlq,
            &self.fifo,
            &self.fifo_dlq,
        ]
    }
}

/// The checker's configuration of the one-node tests' queues.
pub fn config() -> Config {
    Queues::named(BASE).config()
}

fn url(queue: &str) -> String {
    format!("http://localhost/{ACCOUNT_ID}/{queue}")
}

/// Where an operation went: the node it was sent to, and the node that says it executed it
/// (the [`NODE_HEADER`] of its answer, a success or an error; none without an answer, or from
/// a node that does not send one).
#[derive(Clone, Debug)]
pub struct Route {
    /// The address the client sent the request to.
    pub sent_to: SocketAddr,
    /// The node id that executed it, as its answer said.
    pub executed_by: Option<String>,
}

/// A history and where each of its operations went, for the violations' explanations and the
/// summary of a run on several nodes.
#[derive(Clone, Default)]
pub struct Recording {
    /// The operations.
    pub history: History,
    routes: Arc<Mutex<HashMap<OpId, Route>>>,
}

impl Recording {
    fn route(&self, id: OpId, route: Route) {
        self.routes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .insert(id, route);
    }

    /// Where operation `id` went, if it was sent.
    pub fn route_of(&self, id: OpId) -> Option<Route> {
        self.routes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .get(&id)
            .cloned()
    }

    /// How many operations each node answered, successes and errors (by the ids the answers
    /// named).
    pub fn executed_by_node(&self) -> BTreeMap<String, usize> {
        let routes = self
            .routes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut counts = BTreeMap::new();
        for node in routes
            .values()
            .filter_map(|route| route.executed_by.clone())
        {
            *counts.entry(node).or_default() += 1;
        }
        counts
    }

    /// How many operations were answered by another node than the one they were sent to
    /// (forwarded by a standby), given which node id listens on each address.
    pub fn forwarded(&self, node_at: &HashMap<SocketAddr, String>) -> usize {
        let routes = self
            .routes
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        routes
            .values()
            .filter(
                |route| match (&route.executed_by, node_at.get(&route.sent_to)) {
                    (Some(executed_by), Some(sent_to)) => executed_by != sent_to,
                    _ => false,
                },
            )
            .count()
    }
}

/// Creates the queues, through any node, retrying while none can answer (CreateQueue with the
/// same attributes is idempotent, so a retry of an unknown outcome is harmless). The FIFO
/// queue is created with its dead-letter queue, so on a log of several buckets it lives in that
/// queue's bucket and its dead letters move in one record; the standard queue is given its
/// policy after it was created, so it stays in its own bucket and its dead letters go between
/// buckets as transfers (`leaseq_server::placements`): the faults strike both paths.
pub async fn setup(nodes: &Nodes, queues: &Queues) {
    for (queue, dlq) in [
        (&queues.standard, &queues.standard_dlq),
        (&queues.fifo, &queues.fifo_dlq),
    ] {
        let fifo = queue.ends_with(".fifo");
        let mut attributes = json!({});
        if fifo {
            attributes["FifoQueue"] = json!("true");
        }
        let request = json!({"QueueName": dlq, "Attributes": attributes});
        call_until_answered(nodes, "CreateQueue", &request).await;
        let policy = json!({
            "deadLetterTargetArn": format!("arn:aws:sqs:{REGION}:{ACCOUNT_ID}:{dlq}"),
            "maxReceiveCount": MAX_RECEIVE_COUNT,
        });
        attributes["VisibilityTimeout"] = json!("1");
        let redrive = json!(policy.to_string());
        if fifo {
            attributes["RedrivePolicy"] = redrive;
            let request = json!({"QueueName": queue, "Attributes": attributes});
            call_until_answered(nodes, "CreateQueue", &request).await;
        } else {
            let request = json!({"QueueName": queue, "Attributes": attributes});
            call_until_answered(nodes, "CreateQueue", &request).await;
            let set = json!({"QueueUrl": url(queue), "Attributes": {"RedrivePolicy": redrive}});
            call_until_answered(nodes, "SetQueueAttributes", &set).await;
        }
    }
}

/// Calls `action` on the nodes in turn until one answers it with a 200; panics on a 4xx (the
/// request is wrong) or after [`SETTLE_TIMEOUT`].
async fn call_until_answered(nodes: &Nodes, action: &str, request: &Value) -> Value {
    let started = Instant::now();
    let mut last_error = String::new();
    for address in nodes.all().into_iter().cycle() {
        assert!(
            started.elapsed() < SETTLE_TIMEOUT,
            "{action}: no node answered within {SETTLE_TIMEOUT:?}; the last error: {last_error}"
        );
        match call_once(address, nodes.answer_within, action, request).await {
            Ok(value) => return value,
            Err(CallError::Status { status, code, .. }) if status < 500 => {
                panic!("{action}: {status} {code}: {request}")
            }
            Err(error) => last_error = format!("{address}: {error}"),
        }
        tokio::time::sleep(SETTLE_RETRY_PAUSE).await;
    }
    unreachable!("the nodes cycle forever")
}

/// One call on a connection of its own.
async fn call_once(
    address: SocketAddr,
    answer_within: Duration,
    action: &str,
    request: &Value,
) -> Result<Value, CallError> {
    let mut connection = connect(address).await?;
    call(&mut connection, answer_within, action, request)
        .await
        .0
}

async fn connect(address: SocketAddr) -> Result<Connection, CallError> {
    tokio::time::timeout(CONNECT_TIMEOUT, Connection::connect(address))
        .await
        .unwrap_or(Err(CallError::NoAnswer(CONNECT_TIMEOUT)))
}

/// Sends `action` on `connection`, waiting at most `answer_within`: its JSON answer (or error),
/// and the node the answer (a success or an error) says executed it.
async fn call(
    connection: &mut Connection,
    answer_within: Duration,
    action: &str,
    request: &Value,
) -> (Result<Value, CallError>, Option<String>) {
    let target = target(action);
    let headers = json_headers(&target);
    let body = request.to_string();
    let sent = connection.send_within(answer_within, "POST", "/", &headers, body.as_bytes());
    match sent.await {
        Ok(response) => {
            let node = response.header(NODE_HEADER).map(str::to_string);
            (json_answer(action, &response), node)
        }
        Err(error) => (Err(error), None),
    }
}

/// Records the outcome of one call: 4xx is refused with no effect, anything else unknown.
fn record(
    history: &History,
    id: usize,
    answer: &Result<Value, CallError>,
    reply: impl FnOnce(&Value) -> Reply,
) {
    match answer {
        Ok(value) => history.ok(id, reply(value)),
        Err(CallError::Status { status, code, .. }) if *status < 500 => {
            history.failed(id, format!("{status} {code}"))
        }
        Err(error) => history.unknown(id, error.to_string()),
    }
}

fn deliveries(answer: &Value) -> Vec<Delivery> {
    let messages = answer["Messages"].as_array().cloned().unwrap_or_default();
    messages
        .iter()
        .map(|message| Delivery {
            tag: message["Body"].as_str().expect("a body").to_string(),
            receipt: message["ReceiptHandle"]
                .as_str()
                .expect("a receipt")
                .to_string(),
            receive_count: message["Attributes"]["ApproximateReceiveCount"]
                .as_str()
                .and_then(|count| count.parse().ok())
                .expect("a receive count"),
            group: message["Attributes"]["MessageGroupId"]
                .as_str()
                .map(str::to_string),
        })
        .collect()
}

/// A receipt the client holds: its queue, and when it was received.
struct Held {
    queue: String,
    receipt: String,
    received: Instant,
}

/// What counts the clients kept, to show the workload did what it means to.
#[derive(Default, Debug)]
pub struct Tally {
    sends: u64,
    receives: u64,
    deletes: u64,
    changes: u64,
    old_receipts_used: u64,
    /// Requests whose outcome is unknown: a broken connection, no answer in time, a 5xx.
    pub unknown: u64,
    /// Of those, requests with no whole answer within the bound.
    pub no_answer: u64,
    /// Requests not sent because no connection to the chosen node could be opened.
    pub not_sent: u64,
}

/// One client: its choices, its connections (one per node, opened when first needed and
/// dropped when broken), and the receipts it holds.
struct Client {
    process: u32,
    rng: StdRng,
    nodes: Nodes,
    queues: Queues,
    recording: Recording,
    connections: HashMap<SocketAddr, Connection>,
    held: Vec<Held>,
    old: Vec<Held>,
    tally: Tally,
    sent: u64,
}

impl Client {
    /// Runs `op` as `action` with `request` on a node drawn at random: the answer, recorded
    /// with `reply` if it succeeded; `None` if no connection could be opened (nothing sent,
    /// nothing recorded).
    async fn run(
        &mut self,
        op: Op,
        action: &str,
        request: &Value,
        reply: impl FnOnce(&Value) -> Reply,
    ) -> Option<Result<Value, CallError>> {
        let address = self.nodes.pick(&mut self.rng);
        // A kept-alive connection the node closed (it stopped or was killed) would fail the
        // request before sending it, which the history could only record as unknown.
        if self
            .connections
            .get(&address)
            .is_some_and(Connection::is_closed)
        {
            self.connections.remove(&address);
        }
        let connection = match self.connections.entry(address) {
            Entry::Occupied(entry) => entry.into_mut(),
            Entry::Vacant(entry) => match connect(address).await {
                Ok(connection) => entry.insert(connection),
                Err(_) => {
                    self.tally.not_sent += 1;
                    // The node is down (killed, restarting, gone): another draw, a moment later.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    return None;
                }
            },
        };
        let history = &self.recording.history;
        let id = history.invoke(self.process, op);
        let (answer, executed_by) =
            call(connection, self.nodes.answer_within, action, request).await;
        self.recording.route(
            id,
            Route {
                sent_to: address,
                executed_by,
            },
        );
        record(history, id, &answer, reply);
        match &answer {
            Ok(_) => {}
            Err(CallError::Status { status, .. }) if *status < 500 => {}
            Err(error) => {
                self.tally.unknown += 1;
                if matches!(error, CallError::NoAnswer(_) | CallError::Connection(_)) {
                    // The connection broke, or its answer may still come on it: a fresh one next.
                    self.connections.remove(&address);
                }
                if matches!(error, CallError::NoAnswer(_)) {
                    self.tally.no_answer += 1;
                }
            }
        }
        Some(answer)
    }

    async fn send(&mut self) {
        self.tally.sends += 1;
        let fifo = self.rng.random_bool(0.5);
        let queue = if fifo {
            self.queues.fifo.clone()
        } else {
            self.queues.standard.clone()
        };
        let tag = format!("p{}-m{}", self.process, self.sent);
        self.sent += 1;
        let group = fifo.then(|| format!("g{}", self.rng.random_range(0..GROUPS)));
        let mut request = json!({"QueueUrl": url(&queue), "MessageBody": tag});
        if let Some(group) = &group {
            request["MessageGroupId"] = json!(group);
            request["MessageDeduplicationId"] = json!(tag);
        }
        let op = Op::Send {
            queue,
            tag: tag.clone(),
            group,
            deduplication: fifo.then(|| tag.clone()),
        };
        self.run(op, "SendMessage", &request, |_| Reply::Done).await;
    }

    async fn receive(&mut self) {
        self.tally.receives += 1;
        let queues = &self.queues;
        let queue = [
            &queues.standard,
            &queues.standard,
            &queues.standard,
            &queues.fifo,
            &queues.fifo,
            &queues.fifo,
            &queues.standard_dlq,
            &queues.fifo_dlq,
        ]
        .choose(&mut self.rng)
        .map(|queue| queue.to_string())
        .unwrap();
        let visibility_s: u64 = *[0, 1, 1, 1, 2].choose(&mut self.rng).unwrap();
        let request = json!({
            "QueueUrl": url(&queue),
            "MaxNumberOfMessages": self.rng.random_range(1..=5),
            "VisibilityTimeout": visibility_s,
            "AttributeNames": ["ApproximateReceiveCount", "MessageGroupId"],
        });
        let op = Op::Receive {
            queue: queue.clone(),
            visibility_timeout_ms: Some(visibility_s * 1_000),
        };
        let answer = self
            .run(op, "ReceiveMessage", &request, |value| {
                Reply::Received(deliveries(value))
            })
            .await;
        if let Some(Ok(value)) = answer {
            let received = Instant::now();
            for delivery in deliveries(&value) {
                // Most deliveries are acted on; a fifth are abandoned (their lease runs out,
                // they come back, and after 3 receives they are dead-lettered).
                let target = if self.rng.random_bool(0.2) {
                    &mut self.old
                } else {
                    &mut self.held
                };
                target.push(Held {
                    queue: queue.clone(),
                    receipt: delivery.receipt,
                    received,
                });
            }
        }
    }

    /// Acts on a held receipt, or now and then on an old one (likely stale).
    async fn act(&mut self) {
        let use_old = !self.old.is_empty() && self.rng.random_bool(0.15);
        let chosen = if use_old {
            self.tally.old_receipts_used += 1;
            let at = self.rng.random_range(0..self.old.len());
            self.old.swap_remove(at)
        } else {
            let at = self.rng.random_range(0..self.held.len());
            self.held.swap_remove(at)
        };
        let receipt = chosen.receipt.clone();
        if self.rng.random_bool(0.7) {
            self.tally.deletes += 1;
            let request = json!({"QueueUrl": url(&chosen.queue), "ReceiptHandle": receipt});
            let op = Op::Delete {
                queue: chosen.queue.clone(),
                receipt,
            };
            self.run(op, "DeleteMessage", &request, |_| Reply::Done)
                .await;
        } else {
            self.tally.changes += 1;
            let timeout_s: u64 = *[0, 0, 1, 2].choose(&mut self.rng).unwrap();
            let request = json!({
                "QueueUrl": url(&chosen.queue),
                "ReceiptHandle": receipt,
                "VisibilityTimeout": timeout_s,
            });
            let op = Op::ChangeVisibility {
                queue: chosen.queue.clone(),
                receipt,
                timeout_ms: timeout_s * 1_000,
            };
            let answer = self
                .run(op, "ChangeMessageVisibility", &request, |_| Reply::Done)
                .await;
            // An extended receipt is still held; a released one may come back to anyone.
            if timeout_s > 0 && matches!(answer, Some(Ok(_))) {
                self.held.push(chosen);
            } else {
                self.old.push(chosen);
            }
        }
    }

    async fn run_until(mut self, stop: Arc<AtomicBool>) -> Tally {
        while !stop.load(Ordering::SeqCst) {
            // Receipts held too long become old ones: likely superseded by now.
            let (keep, expired): (Vec<Held>, Vec<Held>) = self
                .held
                .drain(..)
                .partition(|h| h.received.elapsed() < HOLD_MAX);
            self.held = keep;
            self.old.extend(expired);
            if self.old.len() > 64 {
                self.old.drain(..self.old.len() - 64);
            }
            let roll = self.rng.random_range(0..100);
            if roll < 30 {
                self.send().await;
            } else if roll < 65 || self.held.is_empty() {
                self.receive().await;
            } else {
                self.act().await;
            }
            // A little pacing, so leases of 1-2 s run out during the run at a history size the
            // checker reads in well under a second.
            let pause_ms = self.rng.random_range(0..3);
            tokio::time::sleep(Duration::from_millis(pause_ms)).await;
        }
        self.tally
    }
}

/// Clients running until their stop flag is set: [`Running::stop`] sets it and collects what
/// each did.
pub struct Running {
    stop: Arc<AtomicBool>,
    clients: Vec<tokio::task::JoinHandle<Tally>>,
}

impl Running {
    /// Stops the clients and waits for each to finish its request in flight (bounded by the
    /// nodes' answer bound): each client's tally.
    pub async fn stop(self) -> Vec<Tally> {
        self.stop.store(true, Ordering::SeqCst);
        let mut tallies = Vec::new();
        for client in self.clients {
            tallies.push(client.await.expect("a client ends without a panic"));
        }
        tallies
    }
}

/// Starts the clients on `queues` (set up already) at `nodes`, recording into `recording`,
/// their choices drawn from `seed`.
pub fn start(nodes: &Nodes, queues: &Queues, recording: &Recording, seed: u64) -> Running {
    let stop = Arc::new(AtomicBool::new(false));
    let clients = (0..CLIENTS)
        .map(|process| {
            let client = Client {
                process,
                rng: StdRng::seed_from_u64(
                    seed ^ u64::from(process).wrapping_mul(0x9e37_79b9_7f4a_7c15),
                ),
                nodes: nodes.clone(),
                queues: queues.clone(),
                recording: recording.clone(),
                connections: HashMap::new(),
                held: Vec::new(),
                old: Vec::new(),
                tally: Tally::default(),
                sent: 0,
            };
            tokio::spawn(client.run_until(stop.clone()))
        })
        .collect();
    Running { stop, clients }
}

/// One listing of `queue` at `address`: its counts and every message, each page answered by
/// the same node (`None` if the answer names none); any error ends it.
async fn list_once(
    address: SocketAddr,
    answer_within: Duration,
    queue: &str,
) -> Result<(Observation, Option<String>), String> {
    let mut connection = connect(address).await.map_err(|error| error.to_string())?;
    let request = json!({
        "QueueUrl": url(queue),
        "AttributeNames": [
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        ],
    });
    let (attributes, node) = call(
        &mut connection,
        answer_within,
        "GetQueueAttributes",
        &request,
    )
    .await;
    let attributes = attributes.map_err(|error| format!("the counts: {error}"))?;
    let count = |name: &str| -> u64 {
        attributes["Attributes"][name]
            .as_str()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("{name} in {attributes}"))
    };
    let counts = Counts {
        visible: count("ApproximateNumberOfMessages"),
        in_flight: count("ApproximateNumberOfMessagesNotVisible"),
        delayed: count("ApproximateNumberOfMessagesDelayed"),
    };
    let mut messages = Vec::new();
    let mut token: Option<String> = None;
    loop {
        let mut request = json!({"QueueUrl": url(queue), "MaxNumberOfMessages": 100});
        if let Some(token) = &token {
            request["NextToken"] = json!(token);
        }
        let (page, page_node) = call(
            &mut connection,
            answer_within,
            "LeaseqPeekMessages",
            &request,
        )
        .await;
        let page = page.map_err(|error| format!("a page: {error}"))?;
        if page_node != node {
            return Err(format!(
                "a page from {page_node:?}, the counts from {node:?}"
            ));
        }
        for message in page["Messages"].as_array().expect("messages") {
            messages.push(Observed {
                tag: message["Body"].as_str().expect("a body").to_string(),
                receive_count: message["Attributes"]["ApproximateReceiveCount"]
                    .as_str()
                    .and_then(|n| n.parse().ok())
                    .expect("a receive count"),
                group: message["Attributes"]["MessageGroupId"]
                    .as_str()
                    .map(str::to_string),
            });
        }
        match page["NextToken"].as_str() {
            Some(next) => token = Some(next.to_string()),
            None => break,
        }
    }
    let observation = Observation {
        messages,
        counts: Some(counts),
    };
    Ok((observation, node))
}

/// Lists every queue whole (every state, nothing leased) with its counts, one observation
/// each, once the clients have stopped. A listing is tried again, on the next node, until one
/// is answered whole by one node: a takeover may still be ending.
pub async fn observe(nodes: &Nodes, queues: &Queues, recording: &Recording) {
    let history = &recording.history;
    for queue in queues.all() {
        let op = Op::Observe {
            queue: queue.into(),
        };
        // One invocation for all the tries: the listing's span then covers the one that
        // answered, which is all the checker needs of it.
        let id = history.invoke(LISTING_PROCESS, op);
        let started = Instant::now();
        let mut errors = Vec::new();
        for address in nodes.all().into_iter().cycle() {
            assert!(
                started.elapsed() < SETTLE_TIMEOUT,
                "no node listed {queue} within {SETTLE_TIMEOUT:?}: {errors:?}"
            );
            match list_once(address, nodes.answer_within, queue).await {
                Ok((observation, executed_by)) => {
                    recording.route(
                        id,
                        Route {
                            sent_to: address,
                            executed_by,
                        },
                    );
                    history.ok(id, Reply::Observed(observation));
                    break;
                }
                Err(error) => errors.push(format!("{address}: {error}")),
            }
            tokio::time::sleep(SETTLE_RETRY_PAUSE).await;
        }
    }
}

/// The one-node tests' run: sets the queues up at `address`, runs the clients for `seconds`
/// with `seed`, and lists every queue at the end: the recording, and each client's tally.
/// Every request must be answered within [`leaseq_testkit::http::REQUEST_TIMEOUT`], as one
/// node that is never paused answers.
pub async fn run(address: SocketAddr, seconds: u64, seed: u64) -> (Recording, Vec<Tally>) {
    let nodes = Nodes::new(vec![address], leaseq_testkit::http::REQUEST_TIMEOUT);
    let queues = Queues::named(BASE);
    setup(&nodes, &queues).await;
    let recording = Recording::default();
    let running = start(&nodes, &queues, &recording, seed);
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let tallies = running.stop().await;
    let no_answer: u64 = tallies.iter().map(|tally| tally.no_answer).sum();
    assert_eq!(
        no_answer, 0,
        "requests the node did not answer: {tallies:?}"
    );
    observe(&nodes, &queues, &recording).await;
    (recording, tallies)
}

/// Checks the recorded history, panicking with the first violations (each with where its
/// operations went) and `seed` if there are any.
pub fn check_or_panic(
    recording: &Recording,
    config: &Config,
    seed: u64,
    tallies: &[Tally],
) -> Summary {
    let started = Instant::now();
    let summary = match check(&recording.history, config) {
        Ok(summary) => summary,
        Err(violations) => {
            let texts: Vec<String> = violations
                .iter()
                .take(20)
                .map(|violation| explain(recording, violation))
                .collect();
            panic!(
                "{} violations (seed {seed}), the first:\n{}",
                violations.len(),
                texts.join("\n")
            );
        }
    };
    println!("clients: {tallies:?}");
    println!("checked in {:?}: {summary}", started.elapsed());
    summary
}

/// A violation's text, then where each of its operations went.
fn explain(recording: &Recording, violation: &Violation) -> String {
    let mut text = violation.to_string();
    for id in &violation.ops {
        let route = match recording.route_of(*id) {
            Some(route) => format!(
                "sent to {}, executed by {}",
                route.sent_to,
                route.executed_by.as_deref().unwrap_or("?")
            ),
            None => "not sent".to_string(),
        };
        text.push_str(&format!("\n    op #{id}: {route}"));
    }
    text
}

/// Asserts that the checker notices a lost send in this very history: a listed message whose
/// send was acknowledged and which no delete ever named (so nothing can excuse its absence),
/// taken out of its listing, must be reported as a lost send and a count mismatch.
pub fn assert_a_lost_send_is_noticed(recording: &Recording, config: &Config) {
    let mut lost = recording.history.events();
    let mut acknowledged = HashSet::new();
    let mut tag_of_receipt = HashMap::new();
    let mut deleted = HashSet::new();
    for event in &lost {
        match (&event.op, &event.outcome) {
            (Op::Send { tag, .. }, Outcome::Ok(_)) => {
                acknowledged.insert(tag.clone());
            }
            (Op::Receive { .. }, Outcome::Ok(Reply::Received(deliveries))) => {
                for delivery in deliveries {
                    tag_of_receipt.insert(delivery.receipt.clone(), delivery.tag.clone());
                }
            }
            _ => {}
        }
    }
    for event in &lost {
        if let Op::Delete { receipt, .. } = &event.op {
            deleted.extend(tag_of_receipt.get(receipt).cloned());
        }
    }
    let (observe_at, tag) = lost
        .iter()
        .enumerate()
        .rev()
        .find_map(|(at, event)| match &event.outcome {
            Outcome::Ok(Reply::Observed(observation)) => observation
                .messages
                .iter()
                .find(|message| {
                    acknowledged.contains(&message.tag) && !deleted.contains(&message.tag)
                })
                .map(|message| (at, message.tag.clone())),
            _ => None,
        })
        .expect("a listed message that was sent and never deleted");
    if let Outcome::Ok(Reply::Observed(observation)) = &mut lost[observe_at].outcome {
        observation.messages.retain(|message| message.tag != tag);
    }
    let kinds: Vec<ViolationKind> = match check_events(&lost, config) {
        Ok(summary) => panic!("a history with {tag} taken out of its listing passed: {summary}"),
        Err(violations) => violations.iter().map(|violation| violation.kind).collect(),
    };
    assert!(
        kinds.contains(&ViolationKind::LostSend) && kinds.contains(&ViolationKind::CountMismatch),
        "{tag} taken out of its listing: {kinds:?}"
    );
}
