//! kill -9 of the real server under load, then restart and drain: the log's promise, end to end.
//!
//! Each cycle runs producers (`SendMessage`, `SendMessageBatch`) and consumers (`ReceiveMessage`
//! with a 2 s visibility timeout, then `DeleteMessage`, `DeleteMessageBatch`, or nothing, leaving
//! the lease to expire) against `leaseq serve --fsync always` (and `never` or `interval`: all
//! promise that a kill -9 loses nothing acknowledged), for a random time, and then
//! SIGKILLs the server. Every request is recorded as *acknowledged* (a 200 read to the end) or
//! not; a request in flight at the kill has an unknown outcome. On some cycles a torn record is
//! then appended to the log, as a crash in the middle of a write could leave it.
//!
//! The server is restarted on the same data directory and must come up (a torn tail is cut, not
//! an error). Receipts of leases taken before the kill must still be accepted (the receipt key
//! persists). Then the queue is drained, waiting out the leases from before the kill, and:
//!
//! - every acknowledged send is there, unless a delete of it was acknowledged (or was in flight);
//! - no message whose delete was acknowledged comes back;
//! - no message appears that was never sent, none appears twice, none from an earlier cycle.
//!
//! The seed (printed) fixes the load's choices and the time of each kill; the interleaving is the
//! machine's. `LEASEQ_CRASH_SEED=<n>` repeats a seed, `LEASEQ_CRASH_CYCLES=<n>` runs longer.

mod common;

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::os::unix::fs::FileExt as _;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{json, Value};

use leaseq_testkit::http::{CallError, Connection as Client};
use leaseq_testkit::launch::ChildServer as Server;
use leaseq_testkit::names::ScratchDir;
use leaseq_testkit::sim;

/// Cycles in the normal suite; `LEASEQ_CRASH_CYCLES` overrides.
const CYCLES_DEFAULT: u64 = 3;
const PRODUCERS: u64 = 3;
const CONSUMERS: u64 = 3;
/// The lease of a receive under load: short, so leases from before a kill run out during the
/// drain and messages are redelivered during the load.
const VISIBILITY_TIMEOUT_SECONDS: u32 = 2;
/// How long each cycle's load runs before the kill (chosen by the seed within these bounds).
const LOAD_MS_MIN: u64 = 300;
const LOAD_MS_MAX: u64 = 4000;
/// A producer pauses up to this long between requests, so the backlog at the kill (and so the
/// drain) stays a few thousand messages on a slow machine.
const PRODUCER_PAUSE_MS_MAX: u64 = 4;
/// Receipts from before the kill that are tried after the restart, per cycle, at most.
const HELD_RECEIPTS_CHECKED_MAX: usize = 60;
const DRAINERS: u64 = 3;
/// The drain's lease: longer than the drain, so no message is delivered to it twice.
const DRAIN_VISIBILITY_TIMEOUT_SECONDS: u32 = 300;
const DRAIN_TIMEOUT: Duration = Duration::from_secs(60);
const QUEUE: &str = "crash";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_work_survives_kill_9() {
    crash_cycles(Backend::File).await;
}

/// The same on the file log at `--fsync never` or `interval=50` (by the seed), which promise as
/// much against a kill -9 (not against a power loss): an answer waits until its records are
/// written to the operating system, by the sync thread or, for a lone request, by the request's
/// own thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_work_survives_kill_9_without_fsync() {
    crash_cycles(Backend::FileUnsynced).await;
}

/// The same with the log in PostgreSQL (`LEASEQ_TEST_POSTGRES`, default
/// `host=127.0.0.1 user=postgres dbname=test`; a schema of its own, dropped afterwards): the
/// restarted node takes the schema over and recovers from it alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_work_survives_kill_9_on_postgres() {
    crash_cycles(Backend::Postgres).await;
}

/// Where the server under test keeps its log.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Backend {
    /// The data directory (`--fsync always`); some restarts find a torn record at the tail.
    File,
    /// The data directory at `--fsync never` or `interval=50`, torn records likewise.
    FileUnsynced,
    /// PostgreSQL (`--postgres`).
    Postgres,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::File => "file",
            Backend::FileUnsynced => "file-unsynced",
            Backend::Postgres => "postgres",
        }
    }
}

async fn crash_cycles(backend: Backend) {
    let seed = sim::seed_or_clock("LEASEQ_CRASH_SEED");
    let cycles = sim::env_number("LEASEQ_CRASH_CYCLES").unwrap_or(CYCLES_DEFAULT);
    println!("crash test: seed {seed}, {cycles} cycles (rerun with LEASEQ_CRASH_SEED={seed})");
    // Kept if the test fails, for a look at the data and the logs.
    let scratch_dir = ScratchDir::new(
        env!("CARGO_TARGET_TMPDIR"),
        &format!("crash-{}-{}-{seed}", backend.name(), std::process::id()),
    );
    let scratch = scratch_dir.path();
    let data_dir = scratch.join("data");
    let started = Instant::now();

    let schema = format!("leaseq_crash_{}_{seed}", std::process::id());
    let postgres = (backend == Backend::Postgres).then(|| common::PostgresSchema::new(&schema));
    let command = match &postgres {
        None if backend == Backend::FileUnsynced => {
            // The seed picks the policy; both acknowledge once the records are written.
            let fsync = if seed.is_multiple_of(2) {
                "never"
            } else {
                "interval=50"
            };
            println!("crash test: --fsync {fsync}");
            common::durable_serve_with(&data_dir, fsync)
        }
        None => common::durable_serve(&data_dir),
        Some(postgres) => common::durable_serve(&data_dir).args([
            "--postgres",
            &postgres.connection,
            "--postgres-schema",
            &postgres.schema,
        ]),
    };
    let mut server = Server::start(command, scratch).await;
    let mut client = Client::connect(server.addr()).await.unwrap();
    let attributes = json!({"VisibilityTimeout": VISIBILITY_TIMEOUT_SECONDS.to_string()});
    client
        .call(
            "CreateQueue",
            &json!({"QueueName": QUEUE, "Attributes": attributes}),
        )
        .await
        .expect("CreateQueue");

    let mut ledger = Ledger::default();
    for cycle in 0..cycles {
        let mut rng = StdRng::seed_from_u64(seed ^ cycle.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let load_ms = rng.random_range(LOAD_MS_MIN..=LOAD_MS_MAX);
        let logs = run_load(&mut server, cycle, seed, Duration::from_millis(load_ms)).await;
        let mut report = ledger.record(logs);
        report.load_ms = load_ms;
        report.checkpoints = server.log().matches("checkpoint written").count();

        // A torn record at the tail, as a crash in the middle of a write may leave one.
        let torn = backend != Backend::Postgres && (cycle % 2 == 1 || rng.random_bool(0.5));
        if torn {
            append_torn_record(&data_dir.join("wal"), &mut rng);
        }
        let restart_started = Instant::now();
        server.start_again().await;
        report.restart_ms = restart_started.elapsed().as_millis() as u64;
        check_restart_log(&server.log(), torn, scratch, seed);

        let mut client = Client::connect(server.addr()).await.unwrap();
        let url = queue_url(&mut client).await;
        report.held = ledger.check_held_receipts(&mut client, &url).await;
        let drain_started = Instant::now();
        let drained = drain(server.addr(), &url).await;
        report.drain_ms = drain_started.elapsed().as_millis() as u64;
        report.drained = drained.len();
        let violations = ledger.check_drain(cycle, &drained);
        println!("cycle {cycle}: {report}");
        assert!(
            violations.is_empty(),
            "seed {seed}, cycle {cycle}: {} violations (data kept in {}):\n{}",
            violations.len(),
            scratch.display(),
            violations[..violations.len().min(30)].join("\n")
        );
        assert!(report.sends_acknowledged > 0, "no load reached the server");
    }
    assert!(
        ledger.held_deleted > 0,
        "no receipt from before a kill was accepted after the restart; raise the cycles"
    );
    drop(server);
    drop(postgres);
    println!(
        "crash test: {cycles} cycles in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// What one producer or consumer did.
#[derive(Default)]
struct TaskLog {
    /// Every body a send carried, and whether the send was acknowledged.
    sends: Vec<(String, bool)>,
    /// Every body a delete named, and whether the delete was acknowledged.
    deletes: Vec<(String, bool)>,
    /// Deletes refused because the receipt was superseded (the lease had run out and the
    /// message was received again): they deleted nothing.
    deletes_refused: u64,
    /// Receipts of acknowledged receives that were left to expire: (body, receipt).
    held: Vec<(String, String)>,
    receives_acknowledged: u64,
    /// Errors that no kill explains.
    unexpected: Vec<String>,
}

impl TaskLog {
    /// Notes a failed call; true if the connection is gone and the task must stop.
    fn failed(&mut self, action: &str, error: CallError, killed: &AtomicBool) -> bool {
        match error {
            CallError::Connection(reason) => {
                if !killed.load(Ordering::SeqCst) {
                    self.unexpected.push(format!(
                        "{action}: connection broke before the kill: {reason}"
                    ));
                }
                true
            }
            error => {
                self.unexpected.push(format!("{action}: {error}"));
                false
            }
        }
    }
}

/// Runs producers and consumers for `load`, then kills the server; what each task did.
async fn run_load(server: &mut Server, cycle: u64, seed: u64, load: Duration) -> Vec<TaskLog> {
    let killed = Arc::new(AtomicBool::new(false));
    let mut client = Client::connect(server.addr()).await.unwrap();
    let url = queue_url(&mut client).await;
    let mut tasks = Vec::new();
    for task in 0..PRODUCERS + CONSUMERS {
        let rng = StdRng::seed_from_u64(seed ^ (cycle << 32) ^ (task << 8) ^ 0xC0FF_EE00);
        let (addr, url, killed) = (server.addr(), url.clone(), killed.clone());
        tasks.push(tokio::spawn(async move {
            if task < PRODUCERS {
                produce(addr, &url, cycle, task, rng, &killed).await
            } else {
                consume(addr, &url, rng, &killed).await
            }
        }));
    }
    tokio::time::sleep(load).await;
    // The flag first: every error after it may be the kill's doing.
    killed.store(true, Ordering::SeqCst);
    server.kill();
    let mut logs = Vec::new();
    for task in tasks {
        logs.push(task.await.expect("a load task panicked"));
    }
    logs
}

async fn produce(
    addr: SocketAddr,
    url: &str,
    cycle: u64,
    producer: u64,
    mut rng: StdRng,
    killed: &AtomicBool,
) -> TaskLog {
    let mut log = TaskLog::default();
    let mut client = match Client::connect(addr).await {
        Ok(client) => client,
        Err(error) => {
            log.failed("connect", error, killed);
            return log;
        }
    };
    let mut next = 0u64;
    while !killed.load(Ordering::SeqCst) {
        let count = if rng.random_bool(0.4) {
            1
        } else {
            rng.random_range(2..=10)
        };
        let first = log.sends.len();
        for _ in 0..count {
            // Unique, and of varied length so the kill and the torn records fall at varied
            // offsets within records.
            let padding = "x".repeat(rng.random_range(0..400));
            log.sends
                .push((format!("c{cycle}-p{producer}-{next}-{padding}"), false));
            next += 1;
        }
        let bodies: Vec<&str> = log.sends[first..].iter().map(|(b, _)| b.as_str()).collect();
        let (action, request) = if count == 1 {
            let request = json!({"QueueUrl": url, "MessageBody": bodies[0]});
            ("SendMessage", request)
        } else {
            let entries: Vec<Value> = (bodies.iter().enumerate())
                .map(|(i, body)| json!({"Id": i.to_string(), "MessageBody": body}))
                .collect();
            let request = json!({"QueueUrl": url, "Entries": entries});
            ("SendMessageBatch", request)
        };
        match client.call(action, &request).await {
            Ok(answer) => {
                for index in acknowledged_entries(action, &answer, count, &mut log.unexpected) {
                    log.sends[first + index].1 = true;
                }
            }
            Err(error) => {
                if log.failed(action, error, killed) {
                    break;
                }
            }
        }
        let pause_ms = rng.random_range(0..=PRODUCER_PAUSE_MS_MAX);
        tokio::time::sleep(Duration::from_millis(pause_ms)).await;
    }
    log
}

/// The entries of a 200 answer that succeeded: all of a single request, the `Successful` ids of a
/// batch (a failed entry of a valid batch is unexpected, and noted).
fn acknowledged_entries(
    action: &str,
    answer: &Value,
    count: usize,
    unexpected: &mut Vec<String>,
) -> Vec<usize> {
    if !action.ends_with("Batch") {
        return vec![0];
    }
    if let Some(failed) = answer["Failed"].as_array().filter(|f| !f.is_empty()) {
        unexpected.push(format!("{action}: entries failed: {failed:?}"));
    }
    let successful = answer["Successful"].as_array().cloned().unwrap_or_default();
    let indexes: Vec<usize> = successful
        .iter()
        .filter_map(|entry| entry["Id"].as_str()?.parse().ok())
        .collect();
    assert!(indexes.iter().all(|&i| i < count), "{answer}");
    indexes
}

async fn consume(addr: SocketAddr, url: &str, mut rng: StdRng, killed: &AtomicBool) -> TaskLog {
    let mut log = TaskLog::default();
    let mut client = match Client::connect(addr).await {
        Ok(client) => client,
        Err(error) => {
            log.failed("connect", error, killed);
            return log;
        }
    };
    while !killed.load(Ordering::SeqCst) {
        let request = json!({
            "QueueUrl": url,
            "MaxNumberOfMessages": rng.random_range(1..=10),
            "VisibilityTimeout": VISIBILITY_TIMEOUT_SECONDS,
            "WaitTimeSeconds": rng.random_range(0..=1),
        });
        let messages = match client.call("ReceiveMessage", &request).await {
            Ok(answer) => messages(&answer),
            Err(error) => {
                if log.failed("ReceiveMessage", error, killed) {
                    break;
                }
                continue;
            }
        };
        log.receives_acknowledged += 1;
        let mut batch = Vec::new();
        for (body, receipt) in messages {
            match rng.random_range(0..20) {
                // Left to expire: redelivered later, and its receipt is tried after the kill.
                0..=2 => log.held.push((body, receipt)),
                3..=9 => {
                    if !delete_one(&mut client, url, body, &receipt, &mut log, killed).await {
                        return log;
                    }
                }
                _ => batch.push((body, receipt)),
            }
        }
        if !batch.is_empty() && !delete_batch(&mut client, url, batch, &mut log, killed).await {
            break;
        }
    }
    log
}

/// `DeleteMessage`; false if the connection is gone.
async fn delete_one(
    client: &mut Client,
    url: &str,
    body: String,
    receipt: &str,
    log: &mut TaskLog,
    killed: &AtomicBool,
) -> bool {
    log.deletes.push((body, false));
    let request = json!({"QueueUrl": url, "ReceiptHandle": receipt});
    match client.call("DeleteMessage", &request).await {
        Ok(_) => {
            log.deletes.last_mut().unwrap().1 = true;
            true
        }
        Err(error) if is_superseded(&error) => {
            log.deletes_refused += 1;
            true
        }
        Err(error) => !log.failed("DeleteMessage", error, killed),
    }
}

/// `DeleteMessageBatch`; false if the connection is gone.
async fn delete_batch(
    client: &mut Client,
    url: &str,
    batch: Vec<(String, String)>,
    log: &mut TaskLog,
    killed: &AtomicBool,
) -> bool {
    let first = log.deletes.len();
    let entries: Vec<Value> = (batch.iter().enumerate())
        .map(|(i, (_, receipt))| json!({"Id": i.to_string(), "ReceiptHandle": receipt}))
        .collect();
    log.deletes
        .extend(batch.into_iter().map(|(body, _)| (body, false)));
    let request = json!({"QueueUrl": url, "Entries": entries});
    let answer = match client.call("DeleteMessageBatch", &request).await {
        Ok(answer) => answer,
        Err(error) => return !log.failed("DeleteMessageBatch", error, killed),
    };
    for entry in answer["Failed"].as_array().into_iter().flatten() {
        if entry["Message"]
            .as_str()
            .is_some_and(|m| m.contains("expired"))
        {
            log.deletes_refused += 1;
        } else {
            log.unexpected
                .push(format!("DeleteMessageBatch: entry failed: {entry}"));
        }
    }
    for entry in answer["Successful"].as_array().into_iter().flatten() {
        let index: usize = entry["Id"].as_str().unwrap().parse().unwrap();
        log.deletes[first + index].1 = true;
    }
    true
}

/// Whether a delete was refused because its receipt was superseded by a newer receive.
fn is_superseded(error: &CallError) -> bool {
    matches!(error, CallError::Status { message, .. } if message.contains("receipt handle has expired"))
}

/// (body, receipt) of each message of a `ReceiveMessage` answer.
fn messages(answer: &Value) -> Vec<(String, String)> {
    let messages = answer["Messages"].as_array().cloned().unwrap_or_default();
    messages
        .iter()
        .map(|m| {
            let body = m["Body"].as_str().expect("Body").to_owned();
            (
                body,
                m["ReceiptHandle"]
                    .as_str()
                    .expect("ReceiptHandle")
                    .to_owned(),
            )
        })
        .collect()
}

async fn queue_url(client: &mut Client) -> String {
    let answer = client
        .call("GetQueueUrl", &json!({"QueueName": QUEUE}))
        .await
        .expect("the queue survives every restart");
    answer["QueueUrl"].as_str().unwrap().to_owned()
}

/// What the test knows about every message, across cycles.
#[derive(Default)]
struct Ledger {
    /// Every body ever sent, and whether a send of it was acknowledged.
    sent: HashMap<String, bool>,
    /// Bodies whose delete was acknowledged (by a consumer, a held receipt or a drain).
    deleted: HashSet<String>,
    /// Bodies with a delete whose outcome is unknown or that was refused.
    delete_tried: HashSet<String>,
    /// Receipts from before the kill, to try after the restart.
    held: Vec<(String, String)>,
    /// Receipts from before a kill that deleted after the restart, over all cycles.
    held_deleted: u64,
    unexpected: Vec<String>,
}

impl Ledger {
    /// Takes in what the tasks of a cycle did.
    fn record(&mut self, logs: Vec<TaskLog>) -> CycleReport {
        let mut report = CycleReport::default();
        self.held.clear();
        for log in logs {
            for (body, acknowledged) in log.sends {
                report.sends_acknowledged += u64::from(acknowledged);
                report.sends_unknown += u64::from(!acknowledged);
                self.sent.insert(body, acknowledged);
            }
            for (body, acknowledged) in log.deletes {
                report.deletes_acknowledged += u64::from(acknowledged);
                report.deletes_unknown += u64::from(!acknowledged);
                if acknowledged {
                    self.deleted.insert(body);
                } else {
                    self.delete_tried.insert(body);
                }
            }
            report.deletes_unknown -= log.deletes_refused;
            report.deletes_refused += log.deletes_refused;
            report.receives_acknowledged += log.receives_acknowledged;
            let keep = log.held.len().saturating_sub(HELD_RECEIPTS_CHECKED_MAX / 3);
            self.held.extend(log.held.into_iter().skip(keep));
            self.unexpected.extend(log.unexpected);
        }
        assert!(
            self.unexpected.is_empty(),
            "errors during the load that no kill explains:\n{}",
            self.unexpected.join("\n")
        );
        report
    }

    /// Deletes with receipts of leases taken before the kill. The receipt key persists, so each
    /// must be accepted, or refused only because a later receive superseded it; never invalid.
    async fn check_held_receipts(&mut self, client: &mut Client, url: &str) -> HeldReport {
        let mut report = HeldReport::default();
        for (body, receipt) in std::mem::take(&mut self.held) {
            let request = json!({"QueueUrl": url, "ReceiptHandle": receipt});
            match client.call("DeleteMessage", &request).await {
                Ok(_) => {
                    report.deleted += 1;
                    self.deleted.insert(body);
                }
                Err(error) if is_superseded(&error) => {
                    report.superseded += 1;
                    self.delete_tried.insert(body);
                }
                Err(error) => panic!(
                    "a receipt from before the kill fails after the restart ({body:.30}…): {error}"
                ),
            }
        }
        self.held_deleted += report.deleted;
        report
    }

    /// Checks a cycle's drain against what was acknowledged; the violations found. The drain
    /// deleted what it found, so those count as deleted from now on.
    fn check_drain(&mut self, cycle: u64, drained: &[String]) -> Vec<String> {
        let mut violations = Vec::new();
        let mut seen = HashSet::new();
        let prefix = format!("c{cycle}-");
        for body in drained {
            let short = &body[..body.len().min(24)];
            if !seen.insert(body.as_str()) {
                violations.push(format!("drained twice: {short}"));
            }
            if !self.sent.contains_key(body) {
                violations.push(format!("never sent: {short}"));
            } else if !body.starts_with(&prefix) {
                violations.push(format!("from an earlier cycle, after its drain: {short}"));
            }
            if self.deleted.contains(body) {
                violations.push(format!("acknowledged delete came back: {short}"));
            }
        }
        for (body, &acknowledged) in &self.sent {
            let settled = self.deleted.contains(body) || self.delete_tried.contains(body);
            if acknowledged
                && body.starts_with(&prefix)
                && !settled
                && !seen.contains(body.as_str())
            {
                let short = &body[..body.len().min(24)];
                violations.push(format!("acknowledged send lost: {short}"));
            }
        }
        self.deleted.extend(drained.iter().cloned());
        violations
    }
}

/// Receives and deletes until the queue is empty, in flight included (the leases from before
/// the kill run out meanwhile); every body received.
async fn drain(addr: SocketAddr, url: &str) -> Vec<String> {
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..DRAINERS {
        let url = url.to_owned();
        tasks.push(tokio::spawn(async move {
            let mut client = Client::connect(addr).await.unwrap();
            let mut bodies = Vec::new();
            loop {
                assert!(
                    started.elapsed() < DRAIN_TIMEOUT,
                    "the queue did not drain in {DRAIN_TIMEOUT:?}"
                );
                let request = json!({
                    "QueueUrl": url,
                    "MaxNumberOfMessages": 10,
                    "VisibilityTimeout": DRAIN_VISIBILITY_TIMEOUT_SECONDS,
                    "WaitTimeSeconds": 1,
                });
                let batch = messages(&client.call("ReceiveMessage", &request).await.unwrap());
                if batch.is_empty() {
                    if queue_is_empty(&mut client, &url).await {
                        return bodies;
                    }
                    continue;
                }
                let entries: Vec<Value> = (batch.iter().enumerate())
                    .map(|(i, (_, receipt))| json!({"Id": i.to_string(), "ReceiptHandle": receipt}))
                    .collect();
                let request = json!({"QueueUrl": url, "Entries": entries});
                let answer = client.call("DeleteMessageBatch", &request).await.unwrap();
                let failed = answer["Failed"].as_array().map_or(0, Vec::len);
                assert_eq!(failed, 0, "a drain delete failed: {answer}");
                bodies.extend(batch.into_iter().map(|(body, _)| body));
            }
        }));
    }
    let mut bodies = Vec::new();
    for task in tasks {
        bodies.extend(task.await.expect("a drain task panicked"));
    }
    bodies
}

/// Whether the queue holds nothing: nothing visible, in flight or delayed.
async fn queue_is_empty(client: &mut Client, url: &str) -> bool {
    let request = json!({"QueueUrl": url, "AttributeNames": ["All"]});
    let answer = client.call("GetQueueAttributes", &request).await.unwrap();
    let attributes = &answer["Attributes"];
    [
        "ApproximateNumberOfMessages",
        "ApproximateNumberOfMessagesNotVisible",
        "ApproximateNumberOfMessagesDelayed",
    ]
    .iter()
    .all(|name| attributes[*name].as_str() == Some("0"))
}

/// Writes the beginning of a record frame after the last record of the newest segment: a
/// length, a checksum and part of a payload, as a crash in the middle of a write can leave on
/// disk. The frame is not whole, so it can hold no acknowledged record and recovery must cut it.
fn append_torn_record(wal_dir: &Path, rng: &mut StdRng) {
    let newest = std::fs::read_dir(wal_dir)
        .expect("the log directory")
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == "wal"))
        .max()
        .expect("a segment");
    let len_bytes: u32 = rng.random_range(100..1000);
    let mut frame = len_bytes.to_le_bytes().to_vec();
    frame.extend((0..4 + rng.random_range(0..len_bytes)).map(|_| rng.random::<u8>()));
    let file = std::fs::OpenOptions::new()
        .write(true)
        .open(&newest)
        .unwrap();
    let records_end = records_end(&std::fs::read(&newest).unwrap());
    file.write_all_at(&frame, records_end).unwrap();
}

/// Where the records of a segment end: frames (a 4-byte length, a 4-byte checksum, the
/// payload) follow its 32-byte header until the file ends or zeros begin (the log keeps the
/// space ahead of its records zero-filled; a frame's checksum is never zero with its length).
fn records_end(segment: &[u8]) -> u64 {
    let mut offset = 32;
    while offset + 8 <= segment.len() && segment[offset..offset + 8] != [0; 8] {
        let len = u32::from_le_bytes(segment[offset..offset + 4].try_into().unwrap());
        offset += 8 + len as usize;
    }
    offset.min(segment.len()) as u64
}

/// The restarted server recovered, cut the torn record if there was one, and logged no error.
fn check_restart_log(log: &str, torn: bool, scratch: &Path, seed: u64) {
    let context = || {
        format!(
            "seed {seed}, logs in {}; the log:\n{log}",
            scratch.display()
        )
    };
    assert!(log.contains("recovered state from"), "{}", context());
    if torn {
        assert!(
            log.contains("cutting torn tail off the log"),
            "the torn record was not reported as cut; {}",
            context()
        );
    }
    assert!(
        !log.contains("ERROR"),
        "the restart logged an error; {}",
        context()
    );
}

#[derive(Default)]
struct HeldReport {
    deleted: u64,
    superseded: u64,
}

#[derive(Default)]
struct CycleReport {
    load_ms: u64,
    sends_acknowledged: u64,
    sends_unknown: u64,
    receives_acknowledged: u64,
    deletes_acknowledged: u64,
    deletes_unknown: u64,
    deletes_refused: u64,
    held: HeldReport,
    checkpoints: usize,
    restart_ms: u64,
    drained: usize,
    drain_ms: u64,
}

impl std::fmt::Display for CycleReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "load {} ms: sends {} acknowledged / {} unknown, {} receives, deletes {} acknowledged \
             / {} unknown / {} superseded; {} checkpoints; restart {} ms; held receipts {} \
             deleted / {} superseded; drained {} in {} ms",
            self.load_ms,
            self.sends_acknowledged,
            self.sends_unknown,
            self.receives_acknowledged,
            self.deletes_acknowledged,
            self.deletes_unknown,
            self.deletes_refused,
            self.checkpoints,
            self.restart_ms,
            self.held.deleted,
            self.held.superseded,
            self.drained,
            self.drain_ms,
        )
    }
}
