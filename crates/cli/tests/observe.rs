//! Lease pressure made visible, through the real binary: `GET /metrics`, `GET /api/queues`, the
//! dashboard page, `LeaseqGetVisibilityAdvice`, `leaseq queues` and `leaseq stats`, and
//! `--metrics false`.

mod common;

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::Server;
use leaseq_testkit::http;
use leaseq_testkit::launch::ChildServer;
use leaseq_testkit::names::unique_name as queue_name;
use leaseq_testkit::names::ScratchDir;
use serde_json::{json, Value};

async fn call(server: &Server, action: &str, body: Value) -> Value {
    let response = server.json(action, body.to_string().as_bytes()).await;
    assert_eq!(response.status, 200, "{action}: {}", response.text());
    response.json()
}

async fn get(addr: SocketAddr, path: &str) -> String {
    let response = http::request(addr, "GET", path, &[], b"").await;
    assert_eq!(response.status, 200, "GET {path}: {}", response.text());
    response.text()
}

/// The value of the sample `series` (exact name and labels) on a metrics page.
fn sample(page: &str, series: &str) -> f64 {
    page.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no sample {series} in\n{page}"))
}

fn leaseq(args: &[&str]) -> String {
    let output = common::leaseq_command()
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("running leaseq");
    assert!(
        output.status.success(),
        "leaseq {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// A queue with three messages: one deleted in time, one in flight, one visible; and a delete
/// with a forged receipt.
async fn queue_with_traffic(server: &Server, name: &str) -> String {
    let url = call(server, "CreateQueue", json!({ "QueueName": name })).await["QueueUrl"]
        .as_str()
        .unwrap()
        .to_string();
    for body in ["job-1", "job-2", "job-3"] {
        call(
            server,
            "SendMessage",
            json!({ "QueueUrl": url, "MessageBody": body }),
        )
        .await;
    }
    let received = call(
        server,
        "ReceiveMessage",
        json!({ "QueueUrl": url, "MaxNumberOfMessages": 2 }),
    )
    .await;
    let receipt = received["Messages"][0]["ReceiptHandle"].as_str().unwrap();
    call(
        server,
        "DeleteMessage",
        json!({ "QueueUrl": url, "ReceiptHandle": receipt }),
    )
    .await;
    let forged = server
        .json(
            "DeleteMessage",
            json!({ "QueueUrl": url, "ReceiptHandle": "forged" })
                .to_string()
                .as_bytes(),
        )
        .await;
    assert!(
        forged.text().contains("ReceiptHandleIsInvalid"),
        "{}",
        forged.text()
    );
    url
}

#[tokio::test]
async fn metrics_page_shows_counts_lease_histograms_requests_and_the_log() {
    let server = Server::start().await;
    let name = queue_name("metrics");
    queue_with_traffic(&server, &name).await;
    let page = get(server.addr, "/metrics").await;
    // What is running, as Prometheus' build_info convention has it.
    assert_eq!(
        sample(
            &page,
            &format!(
                "leaseq_build_info{{version=\"{}\"}}",
                env!("CARGO_PKG_VERSION")
            )
        ),
        1.0
    );
    let q = format!("queue=\"{name}\"");
    assert_eq!(
        sample(
            &page,
            &format!("leaseq_queue_messages{{{q},state=\"visible\"}}")
        ),
        1.0
    );
    assert_eq!(
        sample(
            &page,
            &format!("leaseq_queue_messages{{{q},state=\"in_flight\"}}")
        ),
        1.0
    );
    assert_eq!(
        sample(
            &page,
            &format!("leaseq_queue_messages{{{q},state=\"delayed\"}}")
        ),
        0.0
    );
    assert_eq!(
        sample(&page, &format!("leaseq_messages_sent_total{{{q}}}")),
        3.0
    );
    assert_eq!(
        sample(&page, &format!("leaseq_messages_received_total{{{q}}}")),
        2.0
    );
    assert_eq!(
        sample(&page, &format!("leaseq_messages_deleted_total{{{q}}}")),
        1.0
    );
    assert_eq!(
        sample(
            &page,
            &format!("leaseq_ack_failures_total{{{q},reason=\"invalid\"}}")
        ),
        1.0
    );
    assert_eq!(
        sample(
            &page,
            &format!("leaseq_processing_time_seconds_count{{{q}}}")
        ),
        1.0
    );
    assert_eq!(
        sample(
            &page,
            &format!("leaseq_receive_count_at_delete_bucket{{{q},le=\"1\"}}")
        ),
        1.0
    );
    // The delete came well within the 30 s lease.
    assert!(
        sample(
            &page,
            &format!("leaseq_lease_remaining_at_delete_seconds_sum{{{q}}}")
        ) > 20.0
    );
    assert!(
        sample(
            &page,
            "leaseq_requests_total{action=\"SendMessage\",outcome=\"success\"}"
        ) >= 3.0
    );
    assert!(
        sample(
            &page,
            "leaseq_requests_total{action=\"DeleteMessage\",outcome=\"client_error\"}"
        ) >= 1.0
    );
    // The test server is durable with fsync always: every acknowledged write was fsynced.
    assert!(sample(&page, "leaseq_log_fsync_duration_seconds_count") >= 1.0);
    assert!(sample(&page, "leaseq_log_fsync_batch_records_sum") >= 5.0);

    // A FIFO queue with two groups, one message of each leased: both groups are blocked.
    let fifo = format!("{name}.fifo");
    let fifo_url = call(
        &server,
        "CreateQueue",
        json!({ "QueueName": fifo, "Attributes": { "FifoQueue": "true" } }),
    )
    .await["QueueUrl"]
        .as_str()
        .unwrap()
        .to_string();
    for (i, group) in ["a", "a", "b"].iter().enumerate() {
        let message = json!({
            "QueueUrl": fifo_url, "MessageBody": format!("job-{i}"),
            "MessageGroupId": group, "MessageDeduplicationId": format!("d{i}"),
        });
        call(&server, "SendMessage", message).await;
    }
    for _ in 0..2 {
        let receive = json!({ "QueueUrl": fifo_url, "MaxNumberOfMessages": 1 });
        call(&server, "ReceiveMessage", receive).await;
    }
    let page = get(server.addr, "/metrics").await;
    let fq = format!("queue=\"{fifo}\"");
    assert_eq!(
        sample(&page, &format!("leaseq_fifo_groups_in_flight{{{fq}}}")),
        2.0
    );
    assert_eq!(
        sample(
            &page,
            &format!("leaseq_fifo_groups_blocked{{{fq},over_seconds=\"60\"}}")
        ),
        0.0
    );
    assert!(
        !page.contains(&format!("leaseq_fifo_groups_in_flight{{{q}}}")),
        "standard queue"
    );

    let api: Value = serde_json::from_str(&get(server.addr, "/api/queues").await).unwrap();
    let queue = api["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|queue| queue["name"] == name.as_str())
        .unwrap_or_else(|| panic!("{name} missing from {api}"));
    assert_eq!(
        (queue["visible"].as_u64(), queue["in_flight"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(queue["counters"]["ack_failures_invalid"], 1);
    assert_eq!(queue["advice"]["verdict"], "insufficient-data");
    let leases = queue["leases_ending_first"].as_array().unwrap();
    assert_eq!(leases.len(), 1, "{queue}");
    assert_eq!(leases[0]["attempt"], 1);
    let expires_in = leases[0]["expires_in_seconds"].as_f64().unwrap();
    assert!(expires_in > 0.0 && expires_in <= 30.0, "{queue}");

    let html = get(server.addr, "/").await;
    assert!(html.contains("<title>leaseq</title>") && html.contains("/api/queues"));
    // A GET / with a query is still the SQS Query protocol.
    let listed = get(
        server.addr,
        &format!("/?Action=ListQueues&QueueNamePrefix={name}"),
    )
    .await;
    assert!(listed.contains("<ListQueuesResponse"), "{listed}");
}

#[tokio::test]
async fn late_deletes_make_the_advisor_recommend_a_longer_timeout() {
    let server = Server::start().await;
    let name = queue_name("advisor");
    let url = call(
        &server,
        "CreateQueue",
        json!({ "QueueName": name, "Attributes": { "VisibilityTimeout": "1" } }),
    )
    .await["QueueUrl"]
        .as_str()
        .unwrap()
        .to_string();
    let mut receipts = Vec::new();
    for batch in 0..2 {
        let entries: Vec<Value> = (0..10)
            .map(|i| json!({ "Id": format!("m{i}"), "MessageBody": format!("job-{batch}-{i}") }))
            .collect();
        call(
            &server,
            "SendMessageBatch",
            json!({ "QueueUrl": url, "Entries": entries }),
        )
        .await;
    }
    while receipts.len() < 20 {
        let received = call(
            &server,
            "ReceiveMessage",
            json!({ "QueueUrl": url, "MaxNumberOfMessages": 10 }),
        )
        .await;
        for message in received["Messages"].as_array().into_iter().flatten() {
            receipts.push(message["ReceiptHandle"].as_str().unwrap().to_string());
        }
    }
    // Processing takes longer than the 1 s lease: every delete is late.
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    for receipt in &receipts {
        call(
            &server,
            "DeleteMessage",
            json!({ "QueueUrl": url, "ReceiptHandle": receipt }),
        )
        .await;
    }
    let advice = call(
        &server,
        "LeaseqGetVisibilityAdvice",
        json!({ "QueueUrl": url }),
    )
    .await;
    assert_eq!(advice["Verdict"], "raise", "{advice}");
    assert_eq!(advice["DeletedLate"], "20", "{advice}");
    let recommended: u32 = advice["RecommendedVisibilityTimeout"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(recommended >= 2, "{advice}");
    assert!(
        advice["Reason"]
            .as_str()
            .unwrap()
            .contains("100% of deletes are late"),
        "{advice}"
    );

    let page = get(server.addr, "/metrics").await;
    let gauge = format!("leaseq_queue_visibility_recommended_seconds{{queue=\"{name}\"}}");
    assert_eq!(sample(&page, &gauge), f64::from(recommended));

    let endpoint = server.endpoint.as_str();
    let queues = leaseq(&["queues", "--endpoint", endpoint, "--prefix", &name]);
    assert_eq!(queues.trim(), name);
    let stats = leaseq(&["stats", "--endpoint", endpoint, "--queue", &name]);
    let line = stats
        .lines()
        .find(|line| line.starts_with(&name))
        .unwrap_or_else(|| panic!("no row for {name}:\n{stats}"));
    let cells: Vec<&str> = line.split_whitespace().collect();
    // QUEUE VISIBLE IN_FLIGHT DELAYED DELIVERIES DELIV/S EXPIRED LATE EXTENDED P99 VISIBILITY ADVICE
    assert_eq!(&cells[..5], [name.as_str(), "0", "0", "0", "20"], "{stats}");
    assert_eq!(cells[7], "20", "{stats}");
    assert_eq!(cells[10], "1s", "{stats}");
    assert_eq!(cells[11], "raise", "{stats}");
    assert!(stats.contains("100% of deletes are late"), "{stats}");
}

/// A scratch directory for one test's server logs and outputs.
fn scratch(name: &str) -> ScratchDir {
    ScratchDir::new(
        env!("CARGO_TARGET_TMPDIR"),
        &format!("observe-{name}-{}", std::process::id()),
    )
}

/// A server started with `args` (in memory, without colours in its log), its logs in `dir`;
/// killed on drop.
async fn spawn(args: &[&str], dir: &ScratchDir) -> ChildServer {
    let command = common::serve_command()
        .args(["--in-memory", "true"])
        .args(args)
        .env("NO_COLOR", "1");
    ChildServer::start(command, dir.path()).await
}

async fn json_call(addr: SocketAddr, action: &str, body: Value) -> Value {
    let response = http::sqs_json(addr, action, &body).await;
    assert_eq!(response.status, 200, "{action}: {}", response.text());
    response.json()
}

#[tokio::test]
async fn metrics_off_keeps_the_engine_counts_only() {
    let dir = scratch("metrics-off");
    let server = spawn(&["--metrics", "false"], &dir).await;
    json_call(
        server.addr(),
        "CreateQueue",
        json!({ "QueueName": "quiet" }),
    )
    .await;
    let page = get(server.addr(), "/metrics").await;
    assert_eq!(
        sample(
            &page,
            "leaseq_queue_messages{queue=\"quiet\",state=\"visible\"}"
        ),
        0.0
    );
    assert!(!page.contains("leaseq_requests_total{"), "{page}");
    assert!(
        !page.contains("leaseq_processing_time_seconds_count{"),
        "{page}"
    );
    assert!(
        !page.contains("leaseq_log_fsync"),
        "in memory there is no log:\n{page}"
    );
}

/// "job-42 ran under attempt 1, expired, completed under attempt 2", read from the log.
#[tokio::test]
async fn the_log_names_the_message_and_each_attempt() {
    let dir = scratch("attempts");
    let mut server = spawn(&["--log", "leaseq_server=debug"], &dir).await;
    let addr = server.addr();
    let url = json_call(addr, "CreateQueue", json!({ "QueueName": "jobs" })).await["QueueUrl"]
        .as_str()
        .unwrap()
        .to_string();
    let sent = json_call(
        addr,
        "SendMessage",
        json!({ "QueueUrl": url, "MessageBody": "job-42" }),
    )
    .await;
    let id = sent["MessageId"].as_str().unwrap().to_string();
    json_call(
        addr,
        "ReceiveMessage",
        json!({ "QueueUrl": url, "VisibilityTimeout": 1 }),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let second = json_call(addr, "ReceiveMessage", json!({ "QueueUrl": url })).await;
    let receipt = second["Messages"][0]["ReceiptHandle"].as_str().unwrap();
    json_call(
        addr,
        "DeleteMessage",
        json!({ "QueueUrl": url, "ReceiptHandle": receipt }),
    )
    .await;
    server.kill();
    let text = server.log();
    let events: Vec<(&str, &str)> = text
        .lines()
        .filter(|line| line.contains(&format!("message_id={id}")))
        .filter_map(|line| {
            let event = ["received", "attempt ended", "deleted"]
                .into_iter()
                .find(|e| line.contains(&format!(": {e} ")))?;
            let attempt = line.split("attempt=").nth(1)?.split(' ').next()?;
            Some((event, attempt))
        })
        .collect();
    assert_eq!(
        events,
        [
            ("received", "1"),
            ("attempt ended", "1"),
            ("received", "2"),
            ("deleted", "2")
        ],
        "{text}"
    );
    assert!(
        text.lines()
            .any(|line| line.contains(": attempt ended ") && line.contains("expired")),
        "attempt 1 expired: {text}"
    );
}

#[tokio::test]
async fn stats_watch_redraws_with_rates() {
    let dir = scratch("watch");
    let server = spawn(&[], &dir).await;
    let addr = server.addr();
    let url = json_call(addr, "CreateQueue", json!({ "QueueName": "watched" })).await["QueueUrl"]
        .as_str()
        .unwrap()
        .to_string();
    json_call(
        addr,
        "SendMessage",
        json!({ "QueueUrl": url, "MessageBody": "job" }),
    )
    .await;
    let out_path = dir.path().join("watch-output.txt");
    let mut watch = common::leaseq_command()
        .args(["stats", "--watch", "--interval", "0.2", "--endpoint"])
        .arg(format!("http://{addr}"))
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut frames = 0;
    while frames < 3 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        frames = std::fs::read_to_string(&out_path)
            .unwrap()
            .matches("\x1b[2J")
            .count();
    }
    let _ = watch.kill();
    let _ = watch.wait();
    let output = std::fs::read_to_string(&out_path).unwrap();
    assert!(frames >= 3, "expected 3 redraws:\n{output}");
    let last = output.rsplit("\x1b[2J").next().unwrap();
    let row: Vec<&str> = last
        .lines()
        .find(|line| line.starts_with("watched"))
        .unwrap_or_else(|| panic!("no row in\n{last}"))
        .split_whitespace()
        .collect();
    // VISIBLE 1, and after the first frame a rate instead of "-".
    assert_eq!((row[1], row[5]), ("1", "0.0"), "{last}");
}

/// The value of the sample `series` on a metrics page, if it is there.
fn sample_if_any(page: &str, series: &str) -> Option<f64> {
    page.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// The process metrics (Prometheus' standard names) and the log's storage gauges of a file-log
/// server that checkpoints every few KiB: plausible values that move with the work done.
#[tokio::test]
async fn process_and_storage_gauges_move_with_the_work() {
    let dir = scratch("storage-gauges");
    let command = common::serve_command()
        .data_dir(&dir.path().join("data"))
        .args(["--checkpoint-bytes", "8192"])
        .env("NO_COLOR", "1");
    let server = ChildServer::start(command, dir.path()).await;
    let before = get(server.addr(), "/metrics").await;
    // The process: its memory, its descriptors (the listener, the log's files), its start a
    // moment ago by this machine's clock.
    #[cfg(target_os = "linux")]
    {
        assert!(sample(&before, "process_resident_memory_bytes") > f64::from(1 << 20));
        let open_fds = sample(&before, "process_open_fds");
        assert!(open_fds >= 4.0, "{before}");
        assert!(sample(&before, "process_max_fds") >= open_fds);
        let started = sample(&before, "process_start_time_seconds");
        let now_seconds = leaseq_server::clock::now_ms() as f64 / 1e3;
        assert!(
            started <= now_seconds + 1.0 && started > now_seconds - 600.0,
            "{started} vs {now_seconds}"
        );
        assert!(sample(&before, "process_cpu_seconds_total") >= 0.0);
    }
    // A fresh log: no record yet (the first append opens its first segment), nothing
    // checkpointed.
    assert_eq!(sample(&before, "leaseq_log_bytes"), 0.0, "{before}");
    assert_eq!(sample(&before, "leaseq_log_segments"), 0.0);
    assert_eq!(sample(&before, "leaseq_checkpoints_total"), 0.0);
    assert_eq!(
        sample_if_any(&before, "leaseq_checkpoint_duration_seconds"),
        None
    );
    // The snapshot's age is there from the start: before the first checkpoint it counts
    // from the process's start (a data directory's recovered snapshot, none here, has no
    // recorded time).
    let boot_age = sample(&before, "leaseq_snapshot_age_seconds");
    assert!((0.0..20.0).contains(&boot_age), "{boot_age}\n{before}");

    // Well over 8 KiB of log: a checkpoint starts in the background.
    let url = json_call(
        server.addr(),
        "CreateQueue",
        json!({ "QueueName": "filled" }),
    )
    .await["QueueUrl"]
        .as_str()
        .unwrap()
        .to_string();
    let body = "x".repeat(1024);
    for _ in 0..24 {
        json_call(
            server.addr(),
            "SendMessage",
            json!({ "QueueUrl": url, "MessageBody": body }),
        )
        .await;
    }
    // The checkpoint runs on its own thread: poll for it (bounded), the only wait here.
    let deadline = Instant::now() + Duration::from_secs(20);
    let after = loop {
        let page = get(server.addr(), "/metrics").await;
        if sample(&page, "leaseq_checkpoints_total") >= 1.0 {
            break page;
        }
        assert!(Instant::now() < deadline, "no checkpoint:\n{page}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let duration = sample(&after, "leaseq_checkpoint_duration_seconds");
    assert!(duration > 0.0 && duration < 20.0, "{duration}");
    let pause = sample(&after, "leaseq_checkpoint_pause_seconds");
    assert!(pause >= 0.0 && pause <= duration, "{pause} {duration}");
    // The snapshot holds the 24 messages' state (their bodies stay in the log).
    assert!(sample(&after, "leaseq_snapshot_bytes") > 0.0, "{after}");
    let age = sample(&after, "leaseq_snapshot_age_seconds");
    assert!((0.0..20.0).contains(&age), "{age}");
    // The log holds the bodies (24 KiB at least) and grew with them.
    let log_bytes = sample(&after, "leaseq_log_bytes");
    assert!(log_bytes >= 24.0 * 1024.0, "{log_bytes}");
    assert!(sample(&after, "leaseq_log_segments") >= 1.0);
    #[cfg(target_os = "linux")]
    assert!(
        sample(&after, "process_cpu_seconds_total") >= sample(&before, "process_cpu_seconds_total")
    );
    // The snapshot ages as time passes.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let later = get(server.addr(), "/metrics").await;
    if sample(&later, "leaseq_checkpoints_total") == sample(&after, "leaseq_checkpoints_total") {
        assert!(sample(&later, "leaseq_snapshot_age_seconds") >= age + 0.05);
    }
}
