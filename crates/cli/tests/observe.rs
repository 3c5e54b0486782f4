//! Lease pressure made visible, through the real binary: `GET /metrics`, `GET /api/queues`, the
//! dashboard page, `LeaseqGetVisibilityAdvice`, `leaseq queues` and `leaseq stats`, and
//! `--metrics false`.

mod common;

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{queue_name, raw_request, Server};
use serde_json::{json, Value};

async fn call(server: &Server, action: &str, body: Value) -> Value {
    let response = server.json(action, body.to_string().as_bytes()).await;
    assert_eq!(response.status, 200, "{action}: {}", response.text());
    response.json()
}

async fn get(addr: SocketAddr, path: &str) -> String {
    let response = raw_request(addr, "GET", path, &[], b"").await;
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
    let output = Command::new(env!("CARGO_BIN_EXE_leaseq"))
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

#[tokio::test]
async fn metrics_off_keeps_the_engine_counts_only() {
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_leaseq"))
        .args([
            "serve",
            "--in-memory",
            "true",
            "--metrics",
            "false",
            "--listen",
        ])
        .arg(addr.to_string())
        .env_remove("LEASEQ_METRICS")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(addr).await.is_err() {
        assert!(Instant::now() < deadline, "server did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let body = json!({ "QueueName": "quiet" }).to_string();
    let created = raw_request(
        addr,
        "POST",
        "/",
        &[
            ("Content-Type", "application/x-amz-json-1.0"),
            ("X-Amz-Target", "AmazonSQS.CreateQueue"),
        ],
        body.as_bytes(),
    )
    .await;
    assert_eq!(created.status, 200);
    let page = get(addr, "/metrics").await;
    let _ = child.kill();
    let _ = child.wait();
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
