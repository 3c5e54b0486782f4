//! The history checker (`leaseq_testkit::history`) against one real node: concurrent clients
//! send, receive with short visibility timeouts, delete, change visibility (also with stale
//! receipts on purpose) on a standard queue and a FIFO queue, each with a dead-letter queue
//! after 3 receives, through the in-process server on the production accept loop. Every
//! operation is recorded with its invocation and completion; at the end every queue is listed
//! (`LeaseqPeekMessages`, which leases nothing, and its counts) and the history is checked.
//!
//! `LEASEQ_HISTORY_SECONDS=N` runs the clients for N seconds (default 3);
//! `LEASEQ_HISTORY_SEED=x` fixes the clients' choices (default: from the clock, printed).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use leaseq_testkit::history::{
    check, check_events, Config, Counts, Delivery, History, Observation, Observed, Op, Outcome,
    QueueSpec, Reply, ViolationKind,
};
use leaseq_testkit::http::{CallError, Connection};
use leaseq_testkit::launch::{InProcessServer, ACCOUNT_ID, REGION};
use leaseq_testkit::sim;
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

fn config() -> Config {
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
struct Tally {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_clients_leave_a_history_that_checks() {
    let seconds = sim::env_number("LEASEQ_HISTORY_SECONDS").unwrap_or(3);
    let seed = sim::seed_or_clock("LEASEQ_HISTORY_SEED");
    println!("LEASEQ_HISTORY_SEED={seed} LEASEQ_HISTORY_SECONDS={seconds}");
    let server = InProcessServer::start().await;
    let address = server.addr();
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
    server.stop().await;

    let started = Instant::now();
    let config = config();
    let summary = match check(&history, &config) {
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

    // The run exercised what the checks look at.
    assert_eq!(
        summary.indefinite, 0,
        "one node in process answers everything"
    );
    assert_eq!(summary.sends_checked, summary.sends_acknowledged);
    // Exact counts: every acknowledged send is deleted or listed (the listings' lengths are
    // the server's own counts, checked), and nothing else is listed.
    assert_eq!(
        summary.sends_acknowledged,
        summary.sends_deleted + summary.remaining,
        "{summary}"
    );
    assert!(summary.sends_acknowledged > 100, "{summary}");
    assert!(summary.redeliveries > 0, "{summary}");
    assert!(summary.dead_lettered > 0, "{summary}");
    assert!(summary.remaining > 0, "{summary}");
    assert!(
        summary.group_pairs > 0 && summary.lease_pairs > 0,
        "{summary}"
    );
    assert!(
        summary.stale_deletes + summary.stale_visibility_changes_refused > 0,
        "{summary}"
    );

    // And the checks have teeth on this very history: a listed message taken out of its
    // listing is a lost send; a redelivery reported as a first delivery is a count gone back.
    let events = history.events();
    let mut lost = events.clone();
    let (observe_at, tag) = lost
        .iter()
        .enumerate()
        .rev()
        .find_map(|(at, event)| match &event.outcome {
            Outcome::Ok(Reply::Observed(observation)) if !observation.messages.is_empty() => {
                Some((at, observation.messages[0].tag.clone()))
            }
            _ => None,
        })
        .expect("a queue with messages left");
    if let Outcome::Ok(Reply::Observed(observation)) = &mut lost[observe_at].outcome {
        observation.messages.retain(|message| message.tag != tag);
    }
    let kinds = kinds_of(check_events(&lost, &config));
    assert!(
        kinds.contains(&ViolationKind::LostSend)
            || kinds.contains(&ViolationKind::StaleReceiptActed),
        "{kinds:?}"
    );
    assert!(kinds.contains(&ViolationKind::CountMismatch), "{kinds:?}");

    let mut recounted = events;
    let redelivery = recounted
        .iter_mut()
        .find_map(|event| match &mut event.outcome {
            Outcome::Ok(Reply::Received(messages)) => messages
                .iter_mut()
                .find(|message| message.receive_count > 1),
            _ => None,
        });
    redelivery.expect("a redelivery").receive_count = 1;
    let kinds = kinds_of(check_events(&recounted, &config));
    assert!(
        kinds.contains(&ViolationKind::ReceiveCountWentBack),
        "{kinds:?}"
    );
}

fn kinds_of(
    result: Result<leaseq_testkit::history::Summary, Vec<leaseq_testkit::history::Violation>>,
) -> Vec<ViolationKind> {
    match result {
        Ok(summary) => panic!("a mutated history passed: {summary}"),
        Err(violations) => violations.iter().map(|violation| violation.kind).collect(),
    }
}
