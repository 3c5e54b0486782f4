//! The workload of the history checks: concurrent clients on a standard queue and a FIFO queue,
//! each with a dead-letter queue, and the final listing of every queue (shared by the test on
//! the in-process node and the one on the PostgreSQL log, `crates/postgres/tests/history.rs`).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use leaseq_testkit::history::{
    check, Config, Counts, Delivery, History, Observation, Observed, Op, QueueSpec, Reply, Summary,
};
use leaseq_testkit::http::{CallError, Connection};
use leaseq_testkit::launch::{ACCOUNT_ID, REGION};
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

const STANDARD: &str = "history";
const STANDARD_DLQ: &str = "history-dlq";
const FIFO: &str = "history.fifo";
const FIFO_DLQ: &str = "history-dlq.fifo";
const MAX_RECEIVE_COUNT: u32 = 3;
const CLIENTS: u32 = 6;
const GROUPS: usize = 4;
/// A receipt is used within this long of its receive, or kept as an old one.
const HOLD_MAX: Duration = Duration::from_millis(2_500);

fn url(queue: &str) -> String {
    format!("http://localhost/{ACCOUNT_ID}/{queue}")
}

pub fn config() -> Config {
    Config::default()
        .queue(
            STANDARD,
            QueueSpec::standard(1_000).with_redrive(STANDARD_DLQ, MAX_RECEIVE_COUNT),
        )
        .queue(STANDARD_DLQ, QueueSpec::standard(30_000))
        .queue(
            FIFO,
            QueueSpec::fifo(1_000).with_redrive(FIFO_DLQ, MAX_RECEIVE_COUNT),
        )
        .queue(FIFO_DLQ, QueueSpec::fifo(30_000))
}

async fn setup(address: SocketAddr) {
    let mut connection = Connection::connect(address).await.expect("connecting");
    for (queue, dlq) in [(STANDARD, STANDARD_DLQ), (FIFO, FIFO_DLQ)] {
        let fifo = queue.ends_with(".fifo");
        let mut attributes = json!({});
        if fifo {
            attributes["FifoQueue"] = json!("true");
        }
        let request = json!({"QueueName": dlq, "Attributes": attributes});
        connection
            .call("CreateQueue", &request)
            .await
            .expect("creating a dead-letter queue");
        let policy = json!({
            "deadLetterTargetArn": format!("arn:aws:sqs:{REGION}:{ACCOUNT_ID}:{dlq}"),
            "maxReceiveCount": MAX_RECEIVE_COUNT,
        });
        attributes["RedrivePolicy"] = json!(policy.to_string());
        attributes["VisibilityTimeout"] = json!("1");
        let request = json!({"QueueName": queue, "Attributes": attributes});
        connection
            .call("CreateQueue", &request)
            .await
            .expect("creating a queue");
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
    queue: &'static str,
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
}

async fn client(
    address: SocketAddr,
    history: History,
    process: u32,
    seed: u64,
    until: Instant,
) -> Tally {
    let mut rng =
        StdRng::seed_from_u64(seed ^ u64::from(process).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut connection = Connection::connect(address).await.expect("connecting");
    let mut held: Vec<Held> = Vec::new();
    let mut old: Vec<Held> = Vec::new();
    let mut tally = Tally::default();
    let mut sent = 0u64;
    while Instant::now() < until {
        // Receipts held too long become old ones: likely superseded by now.
        let (keep, expired): (Vec<Held>, Vec<Held>) = held
            .drain(..)
            .partition(|h| h.received.elapsed() < HOLD_MAX);
        held = keep;
        old.extend(expired);
        if old.len() > 64 {
            old.drain(..old.len() - 64);
        }
        let roll = rng.random_range(0..100);
        if roll < 30 {
            tally.sends += 1;
            let fifo = rng.random_bool(0.5);
            let queue = if fifo { FIFO } else { STANDARD };
            let tag = format!("p{process}-m{sent}");
            sent += 1;
            let group = fifo.then(|| format!("g{}", rng.random_range(0..GROUPS)));
            let mut request = json!({"QueueUrl": url(queue), "MessageBody": tag});
            if let Some(group) = &group {
                request["MessageGroupId"] = json!(group);
                request["MessageDeduplicationId"] = json!(tag);
            }
            let op = Op::Send {
                queue: queue.into(),
                tag: tag.clone(),
                group,
                deduplication: fifo.then(|| tag.clone()),
            };
            let id = history.invoke(process, op);
            let answer = connection.call("SendMessage", &request).await;
            record(&history, id, &answer, |_| Reply::Done);
        } else if roll < 65 || held.is_empty() {
            tally.receives += 1;
            let queue = *[
                STANDARD,
                STANDARD,
                STANDARD,
                FIFO,
                FIFO,
                FIFO,
                STANDARD_DLQ,
                FIFO_DLQ,
            ]
            .choose(&mut rng)
            .unwrap();
            let visibility_s: u64 = *[0, 1, 1, 1, 2].choose(&mut rng).unwrap();
            let request = json!({
                "QueueUrl": url(queue),
                "MaxNumberOfMessages": rng.random_range(1..=5),
                "VisibilityTimeout": visibility_s,
                "AttributeNames": ["ApproximateReceiveCount", "MessageGroupId"],
            });
            let op = Op::Receive {
                queue: queue.into(),
                visibility_timeout_ms: Some(visibility_s * 1_000),
            };
            let id = history.invoke(process, op);
            let answer = connection.call("ReceiveMessage", &request).await;
            if let Ok(value) = &answer {
                let received = Instant::now();
                for delivery in deliveries(value) {
                    // Most deliveries are acted on; a fifth are abandoned (their lease runs
                    // out, they come back, and after 3 receives they are dead-lettered).
                    let target = if rng.random_bool(0.2) {
                        &mut old
                    } else {
                        &mut held
                    };
                    target.push(Held {
                        queue,
                        receipt: delivery.receipt,
                        received,
                    });
                }
            }
            record(&history, id, &answer, |value| {
                Reply::Received(deliveries(value))
            });
        } else {
            // Act on a held receipt, or now and then on an old one (likely stale).
            let use_old = !old.is_empty() && rng.random_bool(0.15);
            let chosen = if use_old {
                tally.old_receipts_used += 1;
                let at = rng.random_range(0..old.len());
                old.swap_remove(at)
            } else {
                let at = rng.random_range(0..held.len());
                held.swap_remove(at)
            };
            let receipt = chosen.receipt.clone();
            if rng.random_bool(0.7) {
                tally.deletes += 1;
                let request = json!({"QueueUrl": url(chosen.queue), "ReceiptHandle": receipt});
                let op = Op::Delete {
                    queue: chosen.queue.into(),
                    receipt: receipt.clone(),
                };
                let id = history.invoke(process, op);
                let answer = connection.call("DeleteMessage", &request).await;
                record(&history, id, &answer, |_| Reply::Done);
            } else {
                tally.changes += 1;
                let timeout_s: u64 = *[0, 0, 1, 2].choose(&mut rng).unwrap();
                let request = json!({
                    "QueueUrl": url(chosen.queue),
                    "ReceiptHandle": receipt,
                    "VisibilityTimeout": timeout_s,
                });
                let op = Op::ChangeVisibility {
                    queue: chosen.queue.into(),
                    receipt: receipt.clone(),
                    timeout_ms: timeout_s * 1_000,
                };
                let id = history.invoke(process, op);
                let answer = connection.call("ChangeMessageVisibility", &request).await;
                record(&history, id, &answer, |_| Reply::Done);
                // An extended receipt is still held; a released one may come back to anyone.
                if timeout_s > 0 && answer.is_ok() {
                    held.push(chosen);
                } else {
                    old.push(chosen);
                }
            }
        }
        // A little pacing, so leases of 1-2 s run out during the run at a history size the
        // checker reads in well under a second.
        tokio::time::sleep(Duration::from_millis(rng.random_range(0..3))).await;
    }
    tally
}

/// Lists `queue` whole (every state, nothing leased) with its counts, as one observation.
async fn observe(address: SocketAddr, history: &History, queue: &str) {
    let mut connection = Connection::connect(address).await.expect("connecting");
    let id = history.invoke(
        100,
        Op::Observe {
            queue: queue.into(),
        },
    );
    let request = json!({
        "QueueUrl": url(queue),
        "AttributeNames": [
            "ApproximateNumberOfMessages",
            "ApproximateNumberOfMessagesNotVisible",
            "ApproximateNumberOfMessagesDelayed",
        ],
    });
    let attributes = connection
        .call("GetQueueAttributes", &request)
        .await
        .expect("the queue's counts");
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
        let page = connection
            .call("LeaseqPeekMessages", &request)
            .await
            .expect("a page of the queue");
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
    history.ok(
        id,
        Reply::Observed(Observation {
            messages,
            counts: Some(counts),
        }),
    );
}

/// Sets the queues up at `address`, runs the clients for `seconds` with `seed`, and lists
/// every queue at the end: the history, and each client's tally.
pub async fn run(address: SocketAddr, seconds: u64, seed: u64) -> (History, Vec<Tally>) {
    setup(address).await;
    let history = History::new();
    let until = Instant::now() + Duration::from_secs(seconds);
    let clients: Vec<_> = (0..CLIENTS)
        .map(|process| tokio::spawn(client(address, history.clone(), process, seed, until)))
        .collect();
    let mut tallies = Vec::new();
    for client in clients {
        tallies.push(client.await.expect("a client ends without a panic"));
    }
    for queue in [STANDARD, STANDARD_DLQ, FIFO, FIFO_DLQ] {
        observe(address, &history, queue).await;
    }
    (history, tallies)
}

/// Checks `history`, panicking with the first violations (and `seed`) if there are any.
pub fn check_or_panic(history: &History, config: &Config, seed: u64, tallies: &[Tally]) -> Summary {
    let started = Instant::now();
    let summary = match check(history, config) {
        Ok(summary) => summary,
        Err(violations) => {
            let texts: Vec<String> = violations
                .iter()
                .take(20)
                .map(ToString::to_string)
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
