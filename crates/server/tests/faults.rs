//! The embedded backend on a faulty disk: a failed fsync, a full disk (ENOSPC), crashes that
//! tear the log's tail and a page cache that holds none of the log, through
//! `leaseq_wal::fault::FaultStorage`.
//!
//! Requests go through the real decoder (`leaseq_sqs::decode` of AWS JSON 1.0 bodies) and
//! `Api::execute`, so what these tests see is what a client sees, short of the HTTP framing;
//! the error a client would get is encoded with `leaseq_sqs::encode_error` and checked too.
//!
//! The promise under test: a request that was answered with success survives any crash; a
//! request that failed, or was never answered, may or may not have happened; a failed write or
//! fsync stops every later request (the log is poisoned) until a restart recovers from the disk.
//!
//! The tests run on a multi-threaded runtime, as the server does, so the requests lead the log's
//! group commit themselves (the wal crate's tests cover the other runtimes' path).

use std::collections::BTreeSet;
use std::sync::Arc;

use leaseq_core::{EngineConfig, ReceiptKey};
use leaseq_server::data_dir::{recover, recover_with};
use leaseq_server::{Api, Caller, Service, ServiceConfig};
use leaseq_sqs::{Action, Context, ErrorCode, Outcome, Protocol, RawRequest, SqsError};
use leaseq_wal::fault::{CrashMode, FaultStorage};
use leaseq_wal::{FsyncPolicy, Options, Recovery};
use serde_json::{json, Value};

const QUEUE_URL: &str = "http://localhost/000000000000/q";

/// What a process crash (not a power loss) leaves: every write that reached the OS.
const PROCESS_CRASH: CrashMode = CrashMode::KeepTornPrefix { bytes: u64::MAX };

fn config() -> ServiceConfig {
    ServiceConfig {
        engine: EngineConfig::default(),
        region: "us-east-1".into(),
        account_id: "000000000000".into(),
    }
}

/// [`config`] with a payload cache of 1 MiB.
fn cached_config() -> ServiceConfig {
    let mut config = config();
    config.engine.payload_cache_bytes = 1 << 20;
    config
}

fn options(fsync: FsyncPolicy) -> Options {
    Options {
        fsync,
        // Small segments, so the tests also cross segment rolls.
        segment_size_max_bytes: 4096,
        ..Options::default()
    }
}

/// Opens the backend on `storage` as a (re)started server would, with the same receipt key
/// every time (a real server keeps it in `receipt.key`).
fn open(storage: &FaultStorage, fsync: FsyncPolicy) -> (Service, Recovery) {
    open_with(storage, fsync, config())
}

/// [`open`] with `config`.
fn open_with(
    storage: &FaultStorage,
    fsync: FsyncPolicy,
    config: ServiceConfig,
) -> (Service, Recovery) {
    recover(
        Arc::new(storage.clone()),
        config,
        ReceiptKey::new([7; 16]),
        options(fsync),
    )
    .unwrap_or_else(|error| panic!("the server must start after a crash: {error}"))
}

fn action(name: &str, body: &Value) -> Action {
    let body = body.to_string();
    let target = format!("AmazonSQS.{name}");
    let request = RawRequest {
        method: "POST",
        path: "/",
        query: None,
        target: Some(&target),
        content_type: Some("application/x-amz-json-1.0"),
        body: body.as_bytes(),
    };
    match leaseq_sqs::decode(&request) {
        Ok((_, action, _)) => action,
        Err((_, error)) => panic!("{name} {body}: {error}"),
    }
}

async fn call(backend: &Service, name: &str, body: Value) -> Result<Outcome, SqsError> {
    backend
        .execute(action(name, &body), &Caller::default())
        .await
}

async fn create_queue(backend: &Service) {
    call(backend, "CreateQueue", json!({"QueueName": "q"}))
        .await
        .expect("CreateQueue");
}

async fn send(backend: &Service, body: &str) -> Result<Outcome, SqsError> {
    let request = json!({"QueueUrl": QUEUE_URL, "MessageBody": body});
    call(backend, "SendMessage", request).await
}

/// Sends `bodies` one by one; every send must succeed.
async fn send_all(backend: &Service, bodies: &[String]) {
    for body in bodies {
        send(backend, body).await.expect("SendMessage");
    }
}

async fn receive(
    backend: &Service,
    visibility_seconds: u32,
) -> Result<Vec<(String, String)>, SqsError> {
    let request = json!({
        "QueueUrl": QUEUE_URL,
        "MaxNumberOfMessages": 10,
        "VisibilityTimeout": visibility_seconds,
        "WaitTimeSeconds": 0,
    });
    match call(backend, "ReceiveMessage", request).await? {
        Outcome::Received { deliveries, .. } => Ok(deliveries
            .into_iter()
            .map(|d| (d.payload.body.clone(), d.receipt))
            .collect()),
        other => panic!("ReceiveMessage answered {other:?}"),
    }
}

async fn delete(backend: &Service, receipt: &str) -> Result<Outcome, SqsError> {
    let request = json!({"QueueUrl": QUEUE_URL, "ReceiptHandle": receipt});
    call(backend, "DeleteMessage", request).await
}

async fn attributes(backend: &Service) -> Result<Outcome, SqsError> {
    let request = json!({"QueueUrl": QUEUE_URL, "AttributeNames": ["All"]});
    call(backend, "GetQueueAttributes", request).await
}

/// `(visible, in flight)` message counts of the queue.
async fn counts(backend: &Service) -> (u64, u64) {
    match attributes(backend).await.expect("GetQueueAttributes") {
        Outcome::QueueAttributes { info, .. } => (info.ready as u64, info.in_flight as u64),
        other => panic!("GetQueueAttributes answered {other:?}"),
    }
}

/// Receives every visible message once (with a long lease, so none comes twice); the bodies.
async fn drain(backend: &Service) -> Vec<String> {
    let mut bodies = Vec::new();
    for _ in 0..1000 {
        let batch = receive(backend, 600).await.expect("ReceiveMessage");
        if batch.is_empty() {
            return bodies;
        }
        bodies.extend(batch.into_iter().map(|(body, _)| body));
    }
    panic!("the queue did not run dry");
}

fn bodies(prefix: &str, count: usize) -> Vec<String> {
    (0..count).map(|i| format!("{prefix}-{i}")).collect()
}

/// Checks the error a client gets once the log has failed: 503 ServiceUnavailable, saying that
/// the log failed and why, in both the SDK-visible code and the encoded response.
fn assert_log_failed(error: &SqsError, cause: &str) {
    assert_eq!(error.code, ErrorCode::ServiceUnavailable, "{error}");
    assert!(
        error.message.contains("the log is poisoned")
            && error.message.contains(cause)
            && error.message.contains("until it is restarted"),
        "the message must say the log failed, why, and that a restart is needed: {error}"
    );
    let context = Context {
        base_url: "http://localhost".into(),
        region: "us-east-1".into(),
        account_id: "000000000000".into(),
        request_id: "test".into(),
    };
    let response = leaseq_sqs::encode_error(Protocol::Json, &error.clone(), &context);
    assert_eq!(response.status, 503);
    let body: Value = serde_json::from_slice(&response.body).unwrap();
    assert!(
        body["__type"]
            .as_str()
            .unwrap()
            .contains("ServiceUnavailable"),
        "{body}"
    );
    println!("a client sees: HTTP {} {body}", response.status);
}

/// Every kind of request fails once the log is poisoned, reads included: the engine may hold
/// changes the log lost, so nothing it says can be trusted.
async fn assert_everything_fails(backend: &Service, receipt: &str, cause: &str) {
    let errors = [
        send(backend, "after-the-failure").await.unwrap_err(),
        receive(backend, 30).await.unwrap_err(),
        delete(backend, receipt).await.unwrap_err(),
        attributes(backend).await.unwrap_err(),
        call(backend, "CreateQueue", json!({"QueueName": "other"}))
            .await
            .unwrap_err(),
    ];
    for error in &errors {
        assert_log_failed(error, cause);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_fsync_fails_every_request_and_loses_nothing_acknowledged() {
    // A power loss drops what the failed fsync did not cover; a crash of the process alone keeps
    // it. Either way the doomed message was never acknowledged, so either outcome is allowed.
    for crash in [CrashMode::DropUnsynced, PROCESS_CRASH] {
        let storage = FaultStorage::new();
        let (backend, _) = open(&storage, FsyncPolicy::Always);
        create_queue(&backend).await;
        let acknowledged = bodies("acknowledged", 30);
        send_all(&backend, &acknowledged).await;
        // A lease taken before the failure: its receipt must still work after the restart.
        let leased = receive(&backend, 300).await.unwrap();
        assert!(!leased.is_empty());

        storage.fail_next_sync();
        let error = send(&backend, "doomed").await.unwrap_err();
        assert_log_failed(&error, "fdatasync");
        assert!(error.message.contains("Input/output error"), "{error}");
        assert_everything_fails(&backend, &leased[0].1, "fdatasync").await;
        drop(backend);

        let storage = storage.crash(crash);
        let (backend, _) = open(&storage, FsyncPolicy::Always);
        assert_eq!(
            counts(&backend).await.1,
            leased.len() as u64,
            "the leases taken before the failure are still in force"
        );
        for (_, receipt) in &leased {
            delete(&backend, receipt)
                .await
                .expect("a receipt from before the failure deletes after the restart");
        }
        let mut survivors = drain(&backend).await;
        survivors.extend(leased.iter().map(|(body, _)| body.clone()));
        let survivors: BTreeSet<String> = survivors.into_iter().collect();
        let mut expected: BTreeSet<String> = acknowledged.iter().cloned().collect();
        if crash == PROCESS_CRASH {
            // Written to the OS before the fsync failed, so a process crash keeps it.
            expected.insert("doomed".into());
        }
        assert_eq!(survivors, expected, "after {crash:?}");
        // The restarted server accepts writes again.
        send(&backend, "after-the-restart").await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_fails_cleanly_and_recovers_when_space_returns() {
    // The disk fills at different points: records go into space the log zeroed ahead, so the
    // disk fills when the log next needs more (more zeros, a new segment, a checkpoint's
    // snapshot), at a point that depends on how far the first sends got and on the room left.
    for (sends, room_bytes) in [(10, 100), (10, 0), (40, 20), (25, 3000)] {
        full_disk(sends, room_bytes).await;
    }
}

/// Sends `sends` messages, then leaves `room_bytes` of free space and sends until a send fails.
async fn full_disk(sends: usize, room_bytes: u64) {
    let storage = FaultStorage::new();
    let (backend, _) = open(&storage, FsyncPolicy::Always);
    create_queue(&backend).await;
    let mut acknowledged = bodies("acknowledged", sends);
    send_all(&backend, &acknowledged).await;
    let leased = receive(&backend, 300).await.unwrap();

    let used_bytes: u64 = storage
        .file_names()
        .iter()
        .map(|name| storage.contents(name).unwrap().len() as u64)
        .sum();
    storage.set_space_limit_bytes(Some(used_bytes + room_bytes));
    let mut error = None;
    for i in 0..1000 {
        let body = format!("filler-{i}-{}", "x".repeat(200));
        match send(&backend, &body).await {
            Ok(_) => acknowledged.push(body),
            Err(failed) => {
                error = Some(failed);
                break;
            }
        }
    }
    let error = error.expect("the disk filled up");
    assert_log_failed(&error, "No space left on device");
    assert_everything_fails(&backend, &leased[0].1, "No space left on device").await;
    drop(backend);

    // Restart with the disk still full: the start succeeds (a partial write is cut), nothing
    // acknowledged is lost, and a send fails again with the same clear error.
    let storage = storage.crash(PROCESS_CRASH);
    let (backend, recovery) = open(&storage, FsyncPolicy::Always);
    println!("{sends} sends, {room_bytes} bytes free: {recovery:?}");
    let waiting = (acknowledged.len() - leased.len()) as u64;
    assert_eq!(counts(&backend).await, (waiting, leased.len() as u64));
    let error = send(&backend, &"y".repeat(200)).await.unwrap_err();
    assert_log_failed(&error, "No space left on device");
    drop(backend);

    // Space returns; after a restart the server accepts sends, and everything acknowledged is
    // there, leases and receipts included.
    storage.set_space_limit_bytes(None);
    let storage = storage.crash(PROCESS_CRASH);
    let (backend, _) = open(&storage, FsyncPolicy::Always);
    let later = bodies("later", 10);
    send_all(&backend, &later).await;
    for (_, receipt) in &leased {
        delete(&backend, receipt).await.unwrap();
    }
    drop(backend);

    let storage = storage.crash(CrashMode::DropUnsynced);
    let (backend, _) = open(&storage, FsyncPolicy::Always);
    let survivors: BTreeSet<String> = drain(&backend).await.into_iter().collect();
    let deleted: BTreeSet<String> = leased.into_iter().map(|(body, _)| body).collect();
    let expected: BTreeSet<String> = acknowledged
        .into_iter()
        .chain(later)
        .filter(|body| !deleted.contains(body))
        .collect();
    assert_eq!(survivors, expected);
}

/// Crashes that keep every possible prefix of the unsynced tail: each restart succeeds, cuts the
/// tail at the last whole record, keeps the messages sent before it in order, and appends after
/// the cut.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_torn_tail_recovers_to_the_last_whole_record() {
    const SENDS: usize = 6;
    let sent = bodies("torn", SENDS);
    // The queue is durable; the sends after it are written to the OS but not fsynced, so a
    // crash may keep any prefix of their bytes.
    let base = FaultStorage::new();
    {
        let (backend, _) = open(&base, FsyncPolicy::Always);
        create_queue(&backend).await;
    }
    let unsynced_bytes = {
        let storage = base.fork();
        let (backend, _) = open(&storage, FsyncPolicy::Never);
        send_all(&backend, &sent).await;
        unsynced_len_bytes(&storage)
    };
    assert!(unsynced_bytes > 0);

    let mut last_kept = 0;
    let mut torn = 0;
    for kept_bytes in 0..=unsynced_bytes {
        let storage = base.fork();
        let (backend, _) = open(&storage, FsyncPolicy::Never);
        send_all(&backend, &sent).await;
        let storage = storage.crash(CrashMode::KeepTornPrefix { bytes: kept_bytes });
        // The crashed process's log cannot touch the rebooted storage: its handles fail, so
        // dropping it only ends its sync thread.
        drop(backend);

        let (backend, recovery) = open(&storage, FsyncPolicy::Always);
        torn += usize::from(recovery.torn_tail.is_some());
        let survivors = drain(&backend).await;
        assert_eq!(
            survivors,
            sent[..survivors.len()],
            "keeping {kept_bytes} torn bytes must keep a prefix of the sends, in order"
        );
        assert!(
            survivors.len() >= last_kept,
            "more bytes never keep fewer records"
        );
        last_kept = survivors.len();

        // The log continues after the cut: a send now is acknowledged and survives a power loss.
        send(&backend, "after-the-cut").await.unwrap();
        let storage = storage.crash(CrashMode::DropUnsynced);
        drop(backend);
        let (backend, _) = open(&storage, FsyncPolicy::Always);
        let (visible, in_flight) = counts(&backend).await;
        assert_eq!((visible, in_flight), (1, survivors.len() as u64));
    }
    assert_eq!(last_kept, SENDS, "keeping every byte keeps every send");
    assert!(torn > 0, "some crashes tore a record");
}

/// Bodies the page cache does not hold (a backlog larger than memory, read long after it was
/// sent) are read from the disk off the request's worker thread (in `block_in_place` on a
/// multi-threaded runtime, directly on a current-thread one): receives answer them whole, and
/// the log counts each such read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_not_in_the_page_cache_are_read_from_the_disk() {
    bodies_read_from_the_disk().await;
}

#[tokio::test(flavor = "current_thread")]
async fn bodies_not_in_the_page_cache_are_read_on_a_current_thread_runtime_too() {
    bodies_read_from_the_disk().await;
}

/// The payload cache answers recent bodies from memory: a receive reads nothing back from the
/// log, not even from a disk that the page cache would not spare.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recent_bodies_are_answered_from_the_payload_cache() {
    let storage = FaultStorage::new();
    let (backend, _) = open_with(&storage, FsyncPolicy::Always, cached_config());
    create_queue(&backend).await;
    let stats = || backend.log_stats().expect("a log");
    let recent = bodies("recent", 25);
    send_all(&backend, &recent).await;
    assert_eq!(stats().payload_cache.1, 25, "every body is kept");
    storage.set_reads_uncached(true);
    assert_eq!(drain_sorted(&backend).await, sorted(recent));
    assert_eq!(stats().uncached_reads, 0, "nothing was read from the disk");
}

async fn bodies_read_from_the_disk() {
    let storage = FaultStorage::new();
    let (backend, _) = open(&storage, FsyncPolicy::Always);
    create_queue(&backend).await;
    let uncached_reads = || backend.log_stats().expect("a log").uncached_reads;

    let warm = bodies("warm", 5);
    send_all(&backend, &warm).await;
    assert_eq!(drain_sorted(&backend).await, warm);
    assert_eq!(uncached_reads(), 0, "the page cache held every body");

    let cold = bodies("cold", 25);
    send_all(&backend, &cold).await;
    storage.set_reads_uncached(true);
    assert_eq!(drain_sorted(&backend).await, sorted(cold));
    assert_eq!(uncached_reads(), 25, "one read from the disk per cold body");
}

/// Every body `drain` receives, sorted.
async fn drain_sorted(backend: &Service) -> Vec<String> {
    sorted(drain(backend).await)
}

fn sorted(mut bodies: Vec<String>) -> Vec<String> {
    bodies.sort();
    bodies
}

/// How many bytes of unsynced writes the storage holds (records overwrite the zeros the log
/// keeps ahead of them, so file sizes do not tell).
fn unsynced_len_bytes(storage: &FaultStorage) -> u64 {
    storage
        .file_names()
        .iter()
        .map(|name| storage.unsynced_bytes(name))
        .sum()
}

/// A checkpoint whose snapshot cannot be made durable (a failed fsync, a full disk) fails on
/// its own: the log is not poisoned, the server goes on, and a crash loses nothing acknowledged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_checkpoint_loses_nothing_and_the_server_goes_on() {
    for full_disk in [false, true] {
        let storage = FaultStorage::new();
        let (backend, _) = open(&storage, FsyncPolicy::Always);
        create_queue(&backend).await;
        let acknowledged = bodies("acknowledged", 30);
        send_all(&backend, &acknowledged).await;
        let leased = receive(&backend, 300).await.unwrap();

        if full_disk {
            let used_bytes: u64 = storage
                .file_names()
                .iter()
                .map(|name| storage.contents(name).unwrap().len() as u64)
                .sum();
            storage.set_space_limit_bytes(Some(used_bytes + 100));
        } else {
            storage.fail_next_sync();
        }
        let error = backend.hosts().checkpoint().unwrap_err();
        println!("failed checkpoint (full disk: {full_disk}): {error}");
        assert!(!error.is_poisoned(), "{error}");
        storage.set_space_limit_bytes(None);
        let later = bodies("later", 5);
        send_all(&backend, &later).await;

        let storage = storage.crash(CrashMode::DropUnsynced);
        drop(backend);
        let (backend, _) = open(&storage, FsyncPolicy::Always);
        for (_, receipt) in &leased {
            delete(&backend, receipt).await.unwrap();
        }
        let survivors: BTreeSet<String> = drain(&backend).await.into_iter().collect();
        let deleted: BTreeSet<String> = leased.into_iter().map(|(body, _)| body).collect();
        let expected: BTreeSet<String> = acknowledged
            .into_iter()
            .chain(later)
            .filter(|body| !deleted.contains(body))
            .collect();
        assert_eq!(survivors, expected, "full disk: {full_disk}");
    }
}

/// Power losses while checkpoints run in the background (one every few hundred logged bytes,
/// old segments removed): after each, exactly the acknowledged state comes back, leases and
/// receipts included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashes_between_checkpoints_lose_nothing_acknowledged() {
    let mut storage = FaultStorage::new();
    let mut expected = BTreeSet::new();
    let mut next = 0;
    for round in 0..8 {
        let (backend, _) = recover_with(
            Arc::new(storage.clone()),
            config(),
            ReceiptKey::new([7; 16]),
            options(FsyncPolicy::Always),
            512,
        )
        .unwrap_or_else(|error| panic!("round {round}: the server must start: {error}"));
        if round == 0 {
            create_queue(&backend).await;
        }
        let mut leased = Vec::new();
        for _ in 0..30 {
            let body = format!("m{next}");
            next += 1;
            send(&backend, &body).await.unwrap();
            expected.insert(body);
        }
        for (body, receipt) in receive(&backend, 600).await.unwrap() {
            if body.len() % 2 == 0 {
                delete(&backend, &receipt).await.unwrap();
                expected.remove(&body);
            } else {
                leased.push((body, receipt));
            }
        }
        let (visible, in_flight) = counts(&backend).await;
        assert_eq!(visible + in_flight, expected.len() as u64);
        // The crash may land in the middle of a background checkpoint.
        storage = storage.crash(CrashMode::DropUnsynced);
        drop(backend);

        let (backend, _) = recover_with(
            Arc::new(storage.clone()),
            config(),
            ReceiptKey::new([7; 16]),
            options(FsyncPolicy::Always),
            512,
        )
        .unwrap_or_else(|error| panic!("round {round}: the server must restart: {error}"));
        assert_eq!(
            counts(&backend).await,
            (visible, in_flight),
            "round {round}: the state after the crash"
        );
        // The leases from before the crash hold, and their receipts release them.
        for (_, receipt) in &leased {
            let request =
                json!({"QueueUrl": QUEUE_URL, "ReceiptHandle": receipt, "VisibilityTimeout": 0});
            call(&backend, "ChangeMessageVisibility", request)
                .await
                .unwrap_or_else(|error| panic!("round {round}: {error}"));
        }
        let snapshots = storage
            .file_names()
            .iter()
            .filter(|name| name.starts_with("snapshot-"))
            .count();
        println!(
            "round {round}: {} files, {snapshots} snapshots",
            storage.file_names().len()
        );
        storage = storage.crash(CrashMode::DropUnsynced);
        drop(backend);
    }
    let (backend, _) = open(&storage, FsyncPolicy::Always);
    let survivors: BTreeSet<String> = drain(&backend).await.into_iter().collect();
    assert_eq!(survivors, expected);
}
