//! PostgreSQL restarted under load (`pg_ctlcluster … restart`, as an operator or a package
//! upgrade does): producers and consumers keep going through two restarts; the node refuses
//! while PostgreSQL is away and serves again by itself. At the end no acknowledged send is lost
//! and no acknowledged delete is back, on the node that lived through it and on a new one.
//!
//! The machine's PostgreSQL is shared with other tests, so this one restarts a cluster of its
//! own, made with `pg_createcluster` on a free port and dropped at the end. Where the Debian
//! cluster tools are missing, or it does not run as root, the test says so and passes without
//! running (CI machines have both).
//!
//! `LEASEQ_PG_RESTARTS=<n>` restarts more often.

mod common;
#[path = "common/pg_cluster.rs"]
mod pg_cluster;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leaseq_postgres::{open_service, PgConfig};
use leaseq_server::Service;
use leaseq_sqs::error::ErrorCode;
use parking_lot::Mutex;
use serde_json::json;

use common::{call, message_counts, service_config, QUEUE_URL};
use pg_cluster::Cluster;

const RESTARTS_DEFAULT: u64 = 2;
const PRODUCERS: usize = 4;
const CONSUMERS: usize = 2;
/// Load between restarts, so each restart meets flushes in flight.
const LOAD_BETWEEN: Duration = Duration::from_millis(700);
/// How long the node may take to serve again after PostgreSQL is back.
const RECOVERY_MAX: Duration = Duration::from_secs(20);
/// How long one answer may take, however PostgreSQL is doing.
const ANSWER_MAX: Duration = Duration::from_secs(15);

/// What the clients were told.
#[derive(Default)]
struct Told {
    sent: Mutex<HashSet<String>>,
    deleted: Mutex<HashSet<String>>,
    /// In a delete that was refused: its outcome unknown, so it may have been deleted.
    maybe_deleted: Mutex<HashSet<String>>,
    refusals: Mutex<u64>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_acknowledged_is_lost_across_postgres_restarts_under_load() {
    let Some(cluster) = tokio::task::block_in_place(|| Cluster::create("restart")) else {
        return;
    };
    let restarts =
        leaseq_testkit::sim::env_number("LEASEQ_PG_RESTARTS").unwrap_or(RESTARTS_DEFAULT);
    let config = PgConfig::new(cluster.connection());
    let service =
        tokio::task::block_in_place(|| open_service(&config, service_config(), 64 << 20)).unwrap();
    let service = Arc::new(service);
    call(&service, "CreateQueue", json!({"QueueName": "jobs"}))
        .await
        .unwrap();

    let told = Arc::new(Told::default());
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for producer in 0..PRODUCERS {
        let (service, told, stop) = (service.clone(), told.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            produce(&service, producer, &told, &stop).await
        }));
    }
    for _ in 0..CONSUMERS {
        let (service, told, stop) = (service.clone(), told.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            consume(&service, &told, &stop).await
        }));
    }
    for restart in 0..restarts {
        tokio::time::sleep(LOAD_BETWEEN).await;
        tokio::task::block_in_place(|| cluster.ctl("restart"));
        let before = told.sent.lock().len();
        // Served again by itself: sends are acknowledged again.
        let back = Instant::now();
        while told.sent.lock().len() < before + 20 {
            assert!(
                back.elapsed() < RECOVERY_MAX,
                "restart {restart}: the node did not serve again by itself"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        println!(
            "restart {restart}: serving again {:?} after PostgreSQL came back",
            back.elapsed()
        );
    }
    tokio::time::sleep(LOAD_BETWEEN).await;
    stop.store(true, Ordering::SeqCst);
    for task in tasks {
        task.await.unwrap();
    }
    let sent = told.sent.lock().clone();
    let deleted = told.deleted.lock().clone();
    let maybe_deleted = told.maybe_deleted.lock().clone();
    println!(
        "{restarts} restarts: {} sends and {} deletes acknowledged, {} in refused deletes, {} refusals",
        sent.len(),
        deleted.len(),
        maybe_deleted.len(),
        told.refusals.lock()
    );
    assert!(*told.refusals.lock() > 0, "the restarts were never noticed");

    let remaining = drain(&service).await;
    check(&remaining, &sent, &deleted, &maybe_deleted);
    drop(service);
    // A new node holds the same: the drain's leases too, so all of it, none visible.
    let service =
        tokio::task::block_in_place(|| open_service(&config, service_config(), 64 << 20)).unwrap();
    assert_eq!(
        message_counts(&service).await,
        (0, remaining.len()),
        "a new node holds the same messages and leases"
    );
    drop(service);
    drop(cluster);
}

/// Every acknowledged send is deleted (or in a refused delete, whose outcome is unknown) or
/// still there; no acknowledged delete is there.
fn check(
    remaining: &HashMap<String, usize>,
    sent: &HashSet<String>,
    deleted: &HashSet<String>,
    maybe_deleted: &HashSet<String>,
) {
    for body in sent {
        assert!(
            deleted.contains(body) || maybe_deleted.contains(body) || remaining.contains_key(body),
            "acknowledged send lost: {body}"
        );
    }
    for (body, count) in remaining {
        assert!(!deleted.contains(body), "acknowledged delete back: {body}");
        assert!(body.starts_with('p'), "never sent: {body}");
        assert_eq!(*count, 1, "{body} came {count} times in one drain");
    }
}

async fn produce(service: &Service, producer: usize, told: &Told, stop: &AtomicBool) {
    for n in 0.. {
        if stop.load(Ordering::SeqCst) {
            return;
        }
        let body = format!("p{producer}-{n}");
        let send = json!({"QueueUrl": QUEUE_URL, "MessageBody": body});
        if answered(told, call(service, "SendMessage", send))
            .await
            .is_some()
        {
            told.sent.lock().insert(body);
        }
    }
}

async fn consume(service: &Service, told: &Told, stop: &AtomicBool) {
    while !stop.load(Ordering::SeqCst) {
        let receive = json!({"QueueUrl": QUEUE_URL, "MaxNumberOfMessages": 10,
                             "WaitTimeSeconds": 1, "VisibilityTimeout": 5});
        let Some(answer) = answered(told, call(service, "ReceiveMessage", receive)).await else {
            continue;
        };
        let messages = answer["Messages"].as_array().cloned().unwrap_or_default();
        if messages.is_empty() {
            continue;
        }
        let entries: Vec<_> = messages
            .iter()
            .enumerate()
            .map(|(i, m)| json!({"Id": i.to_string(), "ReceiptHandle": m["ReceiptHandle"]}))
            .collect();
        let delete = json!({"QueueUrl": QUEUE_URL, "Entries": entries});
        let Some(answer) = answered(told, call(service, "DeleteMessageBatch", delete)).await else {
            let bodies = messages
                .iter()
                .map(|m| m["Body"].as_str().unwrap().to_string());
            told.maybe_deleted.lock().extend(bodies);
            continue;
        };
        let mut deleted = told.deleted.lock();
        for entry in answer["Successful"].as_array().into_iter().flatten() {
            let index: usize = entry["Id"].as_str().unwrap().parse().unwrap();
            deleted.insert(messages[index]["Body"].as_str().unwrap().to_string());
        }
    }
}

/// The answer, or `None` after a refusal (which must be `ServiceUnavailable`); every answer
/// comes within [`ANSWER_MAX`].
async fn answered(
    told: &Told,
    request: impl std::future::Future<Output = Result<serde_json::Value, leaseq_sqs::SqsError>>,
) -> Option<serde_json::Value> {
    let started = Instant::now();
    let outcome = request.await;
    assert!(
        started.elapsed() < ANSWER_MAX,
        "an answer took {:?}",
        started.elapsed()
    );
    match outcome {
        Ok(answer) => Some(answer),
        Err(error) => {
            assert_eq!(error.code, ErrorCode::ServiceUnavailable, "{error:?}");
            *told.refusals.lock() += 1;
            tokio::time::sleep(Duration::from_millis(10)).await;
            None
        }
    }
}

/// Every body in the queue once the consumers' leases (5 s) have ended.
async fn drain(service: &Service) -> HashMap<String, usize> {
    tokio::time::sleep(Duration::from_secs(6)).await;
    common::drain(service).await
}
