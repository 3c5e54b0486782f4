//! Checkpoints keep the disk bounded and restarts short: under a steady send/receive/delete load
//! the log directory stays small however much was logged, and a restart from snapshot + log tail
//! gives back exactly the state that was acknowledged.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use leaseq_core::{EngineConfig, QueueConfigPatch, ReceiptKey, ReceiveRequest, SendInput};
use leaseq_server::data_dir::recover_with;
use leaseq_server::{Api, Caller, Service, ServiceConfig};
use leaseq_sqs::{Action, BatchEntry, Outcome, QueueRef};
use leaseq_wal::DirStorage;

fn config() -> ServiceConfig {
    ServiceConfig {
        engine: EngineConfig::default(),
        region: "us-east-1".into(),
        account_id: "000000000000".into(),
    }
}

fn open(dir: &Path) -> Service {
    let options = leaseq_wal::Options {
        segment_size_max_bytes: 64 << 10,
        ..leaseq_wal::Options::default()
    };
    let storage = Arc::new(DirStorage::new(dir).unwrap());
    recover_with(
        storage,
        config(),
        ReceiptKey::new([9; 16]),
        options,
        32 << 10,
    )
    .unwrap()
    .0
}

fn fresh_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn dir_size_bytes(dir: &Path) -> u64 {
    // A background checkpoint may remove a file between the listing and its metadata.
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|entry| entry.ok()?.metadata().ok())
        .map(|metadata| metadata.len())
        .sum()
}

fn queue() -> QueueRef {
    QueueRef::new("q")
}

async fn execute(backend: &Service, action: Action) -> Outcome {
    backend.execute(action, &Caller::default()).await.unwrap()
}

async fn receive_and_delete(backend: &Service, max_messages: usize) -> usize {
    let action = Action::ReceiveMessage {
        queue: queue(),
        request: ReceiveRequest {
            max_messages,
            visibility_timeout_seconds: None,
            client: None,
        },
        wait_time_seconds: Some(0),
        receive_request_attempt_id: None,
    };
    let Outcome::Received { deliveries, .. } = execute(backend, action).await else {
        panic!("not a receive outcome")
    };
    let entries = deliveries
        .iter()
        .enumerate()
        .map(|(i, d)| BatchEntry {
            id: i.to_string(),
            value: d.receipt.clone(),
        })
        .collect::<Vec<_>>();
    if !entries.is_empty() {
        let action = Action::DeleteMessageBatch {
            queue: queue(),
            entries,
        };
        execute(backend, action).await;
    }
    deliveries.len()
}

async fn ready_count(backend: &Service) -> usize {
    backend
        .hosts()
        .only()
        .engine()
        .queue_info(leaseq_server::clock::now_ms(), "q")
        .unwrap()
        .ready
}

async fn create(backend: &Service, name: &str) {
    let create = Action::CreateQueue {
        name: name.into(),
        attributes: QueueConfigPatch::default(),
        tags: Default::default(),
    };
    execute(backend, create).await;
}

/// 600 rounds of a batch of ten 1 KB messages sent and (after the first ten rounds) ten
/// received and deleted: about 6 MiB of sends go through the log while 100 messages stay live.
/// Every `straggler_every` rounds one more message goes to queue `kept`, which nobody reads, so
/// long-lived payloads end up spread over every segment. Returns the largest size the log
/// directory reached.
async fn steady_load(dir: &Path, backend: &Service, straggler_every: Option<u32>) -> u64 {
    create(backend, "q").await;
    create(backend, "kept").await;
    let body = "x".repeat(1_000);
    let mut largest_bytes = 0;
    for round in 0..600 {
        let entries = (0..10)
            .map(|i| BatchEntry {
                id: i.to_string(),
                value: SendInput::body(format!("{round}-{i}-{body}")),
            })
            .collect();
        let send = Action::SendMessageBatch {
            queue: queue(),
            entries,
        };
        execute(backend, send).await;
        if straggler_every.is_some_and(|every| round % every == 0) {
            let send = Action::SendMessage {
                queue: QueueRef::new("kept"),
                message: SendInput::body(format!("kept {round}-{body}")),
            };
            execute(backend, send).await;
        }
        if round >= 10 {
            assert_eq!(receive_and_delete(backend, 10).await, 10);
        }
        largest_bytes = largest_bytes.max(dir_size_bytes(dir));
    }
    largest_bytes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_stays_bounded_under_steady_load() {
    let dir = fresh_dir("checkpoints-bounded");
    let backend = open(&dir);
    let largest_bytes = steady_load(&dir, &backend, None).await;
    // Bounded by a few segments and snapshots, not by the 6 MiB that went through.
    assert!(
        largest_bytes < 1_500_000,
        "the log directory grew to {largest_bytes} bytes"
    );
    assert_eq!(ready_count(&backend).await, 100);
    drop(backend);

    let reopened = open(&dir);
    assert_eq!(ready_count(&reopened).await, 100);
    assert_eq!(receive_and_delete(&reopened, 10).await, 10);
    assert_eq!(ready_count(&reopened).await, 90);
}

/// Long-lived messages in every segment would pin every segment; compaction moves them to the
/// log's tail so the segments can go, and their bodies survive the moves and a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compaction_keeps_the_log_bounded_when_long_lived_messages_pin_every_segment() {
    let dir = fresh_dir("checkpoints-compaction");
    let backend = open(&dir);
    // One kept message per 60 KB sent: one or two in every 64 KiB segment.
    let largest_bytes = steady_load(&dir, &backend, Some(6)).await;
    assert!(
        largest_bytes < 1_500_000,
        "the log directory grew to {largest_bytes} bytes"
    );
    drop(backend);

    let reopened = open(&dir);
    let info = reopened
        .hosts()
        .only()
        .engine()
        .queue_info(leaseq_server::clock::now_ms(), "kept")
        .unwrap();
    assert_eq!(info.ready, 100);
    let engine = reopened.hosts().only().engine();
    let kept = engine.queue("kept").unwrap();
    let mut bodies: Vec<String> = kept
        .messages()
        .map(|(_, message)| {
            reopened
                .hosts()
                .only()
                .payload(&message.payload)
                .unwrap()
                .body
                .clone()
        })
        .collect();
    drop(engine);
    bodies.sort_by_key(|body| {
        body.split(['-', ' '])
            .nth(1)
            .unwrap()
            .parse::<u32>()
            .unwrap()
    });
    let expected: Vec<String> = (0..600)
        .step_by(6)
        .map(|round| format!("kept {round}-{}", "x".repeat(1_000)))
        .collect();
    assert_eq!(bodies, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_after_a_checkpoint_keeps_leases_and_receipts() {
    let dir = fresh_dir("checkpoints-leases");
    let backend = open(&dir);
    let create = Action::CreateQueue {
        name: "q".into(),
        attributes: QueueConfigPatch::default(),
        tags: Default::default(),
    };
    execute(&backend, create).await;
    for i in 0..3 {
        let send = Action::SendMessage {
            queue: queue(),
            message: SendInput::body(format!("m{i}")),
        };
        execute(&backend, send).await;
    }
    let action = Action::ReceiveMessage {
        queue: queue(),
        request: ReceiveRequest {
            max_messages: 1,
            visibility_timeout_seconds: Some(600),
            client: None,
        },
        wait_time_seconds: Some(0),
        receive_request_attempt_id: None,
    };
    let Outcome::Received { deliveries, .. } = execute(&backend, action).await else {
        panic!("not a receive outcome")
    };
    backend.hosts().checkpoint().unwrap();
    // One more change after the checkpoint: it must come back from the log tail.
    let send = Action::SendMessage {
        queue: queue(),
        message: SendInput::body("after"),
    };
    execute(&backend, send).await;
    drop(backend);

    let reopened = open(&dir);
    let info = reopened.hosts().only().engine().queue_info(0, "q").unwrap();
    assert_eq!((info.ready, info.in_flight), (3, 1));
    let delete = Action::DeleteMessage {
        queue: queue(),
        receipt: deliveries[0].receipt.clone(),
    };
    execute(&reopened, delete).await;
    let info = reopened.hosts().only().engine().queue_info(0, "q").unwrap();
    assert_eq!((info.ready, info.in_flight), (3, 0));
    assert_eq!(info.counters.deleted, 1);
}

/// The metrics page's storage gauges follow the checkpoints: the snapshot's age is on the
/// service's clock (a jump of 90 s ages it by 90 s; before the first checkpoint it counts
/// from the start), its size and the checkpoint's duration appear with the first checkpoint,
/// the log's bytes are the segments'.
#[tokio::test]
async fn storage_gauges_follow_checkpoints_on_the_services_clock() {
    let dir = fresh_dir("storage-gauges");
    let clock = leaseq_server::clock::ManualClock::new(1_700_000_000_000);
    let backend = open(&dir).with_clock(Arc::new(clock.clone()));
    execute(
        &backend,
        Action::CreateQueue {
            name: "q".into(),
            attributes: QueueConfigPatch::default(),
            tags: Default::default(),
        },
    )
    .await;
    let stats = backend.storage_stats().unwrap();
    assert_eq!(stats.checkpoints.completed, 0);
    assert_eq!(stats.checkpoints.snapshot_written_at_ms, None);
    assert_eq!(stats.checkpoints.last_duration_micros, None);
    assert!(stats.log_bytes > 0 && stats.log_segments == 1, "{stats:?}");
    assert!(stats.checkpoints.log_bytes_since > 0, "{stats:?}");
    // Before the first checkpoint the snapshot's age counts from the start (the clock's time
    // when the service was set up).
    assert_eq!(stats.checkpoints.started_at_ms, 1_700_000_000_000);
    let metrics = leaseq_server::metrics::Metrics::default();
    // The metrics page of these storage figures at `now_ms`.
    let render = |now_ms, stats| {
        leaseq_server::metrics::render(&leaseq_server::metrics::Scrape {
            now_ms,
            queues: &[],
            metrics: &metrics,
            log: None,
            fifo_groups: &Default::default(),
            process: None,
            storage: Some(stats),
            connections: None,
            buckets: None,
        })
    };
    let page = render(1_700_000_003_000, stats);
    assert!(
        page.lines()
            .any(|line| line == "leaseq_snapshot_age_seconds 3"),
        "{page}"
    );

    clock.advance(5_000);
    backend.hosts().checkpoint().unwrap();
    let stats = backend.storage_stats().unwrap();
    assert_eq!(stats.checkpoints.completed, 1);
    assert_eq!(
        stats.checkpoints.snapshot_written_at_ms,
        Some(1_700_000_005_000)
    );
    assert!(stats.checkpoints.snapshot_bytes > 0);
    assert_eq!(stats.checkpoints.log_bytes_since, 0);
    let duration = stats.checkpoints.last_duration_micros.unwrap();
    assert!(stats.checkpoints.last_paused_micros.unwrap() <= duration);

    clock.advance(90_000);
    let page = render(1_700_000_095_000, stats);
    assert!(
        page.lines()
            .any(|line| line == "leaseq_snapshot_age_seconds 90"),
        "{page}"
    );
    assert!(page
        .lines()
        .any(|line| line == "leaseq_checkpoints_total 1"));
}
