//! `leaseq bench` through the real binary: a short run against a leaseq server with tenants on
//! a standard (fair) queue, whose messages carry the tenants' group ids in the weights asked
//! for, one with paced producers and consumers that hold what they receive, and a short run against the machine's NATS JetStream (127.0.0.1:4222, or
//! `LEASEQ_NATS_URL`) with every driver call: publish with ack, asynchronous publishes, pull and
//! ack.

mod common;

use std::collections::HashMap;
use std::process::Stdio;

use common::Server;
use leaseq_testkit::names::unique_name;
use serde_json::{json, Value};

/// Runs `leaseq bench ARGS --json` and returns its report.
fn bench(args: &[&str]) -> Value {
    let output = common::leaseq_command()
        .arg("bench")
        .args(args)
        .arg("--json")
        .stdin(Stdio::null())
        .output()
        .expect("running leaseq bench");
    assert!(
        output.status.success(),
        "leaseq bench {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).expect("bench --json prints one JSON object")
}

/// Requests and errors of each action in a phase's report.
fn actions(phase: &Value) -> HashMap<String, (u64, u64)> {
    phase["actions"]
        .as_array()
        .expect("actions")
        .iter()
        .map(|a| {
            let count = |key: &str| a[key].as_u64().unwrap();
            (
                a["action"].as_str().unwrap().to_string(),
                (count("messages"), count("errors") + count("failed_entries")),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_send_group_ids_in_their_weights() {
    let server = Server::start().await;
    let queue = unique_name("bench-tenants");
    let report = bench(&[
        "--endpoint",
        &server.endpoint,
        "--producers",
        "2",
        "--consumers",
        "0",
        "--messages",
        "70",
        "--tenants",
        "3",
        "--noisy-weight",
        "5",
        "--queue",
        &queue,
        "--keep",
    ]);
    assert_eq!(report["run"]["messages_sent"], 70, "{report}");
    assert_eq!(actions(&report["run"])["SendMessage"], (70, 0));

    // Rounds of 3 - 1 + 5 = 7 sends: t0 five times, t1 and t2 once each.
    let url = format!("{}/000000000000/{queue}", server.endpoint);
    let mut tenants: HashMap<String, u64> = HashMap::new();
    loop {
        let response = server
            .json(
                "ReceiveMessage",
                json!({ "QueueUrl": url, "MaxNumberOfMessages": 10, "VisibilityTimeout": 300,
                        "MessageSystemAttributeNames": ["MessageGroupId"] })
                .to_string()
                .as_bytes(),
            )
            .await;
        assert_eq!(response.status, 200, "{}", response.text());
        let messages = response.json()["Messages"].as_array().cloned();
        let Some(messages) = messages.filter(|m| !m.is_empty()) else {
            break;
        };
        for message in messages {
            let tenant = message["Attributes"]["MessageGroupId"].as_str().unwrap();
            *tenants.entry(tenant.to_string()).or_default() += 1;
        }
    }
    let expected: HashMap<String, u64> = [("t0", 50), ("t1", 10), ("t2", 10)]
        .into_iter()
        .map(|(t, n)| (t.to_string(), n))
        .collect();
    assert_eq!(tenants, expected);
}

/// The fairness benchmark's flags at the server (`scripts/bench-fairness.sh dwell`): paced
/// producers, consumers that hold each message, a queue attribute for the queue the run creates,
/// and end-to-end latency split between `t0` and the other tenants.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paced_tenants_report_their_dwell_apart() {
    let server = Server::start().await;
    // 100 sends at 100 a second take about 1 s (Poisson: 0.4 s is four standard deviations
    // off), where unpaced they take a fraction of that.
    let paced = bench(&[
        "--endpoint",
        &server.endpoint,
        "--producers",
        "2",
        "--consumers",
        "0",
        "--messages",
        "100",
        "--rate",
        "100",
    ]);
    assert_eq!(paced["run"]["messages_sent"], 100, "{paced}");
    let elapsed_s = paced["run"]["elapsed_s"].as_f64().unwrap();
    assert!(
        elapsed_s > 0.6,
        "100 sends paced at 100/s took only {elapsed_s} s"
    );

    let queue = unique_name("bench-dwell");
    let report = bench(&[
        "--endpoint",
        &server.endpoint,
        "--producers",
        "2",
        "--consumers",
        "4",
        "--receive-max",
        "1",
        "--wait-time-seconds",
        "1",
        "--messages",
        "42",
        "--work-ms",
        "100",
        "--tenants",
        "3",
        "--noisy-weight",
        "5",
        "--queue-attribute",
        "LeaseqFairQueue=false",
        "--queue",
        &queue,
        "--keep",
    ]);
    let run = &report["run"];
    assert_eq!(run["messages_deleted"], 42, "{report}");
    // Each message held at least 50 ms, four at a time: at least 0.525 s.
    let elapsed_s = run["elapsed_s"].as_f64().unwrap();
    assert!(
        elapsed_s > 0.5,
        "42 messages held 100 ms each took only {elapsed_s} s"
    );
    // Rounds of 7 sends: t0 five, t1 and t2 one each; every message received once.
    assert_eq!(
        run["end_to_end_noisy_latency_us"]["samples"], 30,
        "{report}"
    );
    assert_eq!(
        run["end_to_end_quiet_latency_us"]["samples"], 12,
        "{report}"
    );
    assert_eq!(run["end_to_end_latency_us"]["samples"], 42, "{report}");

    let url = format!("{}/000000000000/{queue}", server.endpoint);
    let response = server
        .json(
            "GetQueueAttributes",
            json!({ "QueueUrl": url, "AttributeNames": ["LeaseqFairQueue"] })
                .to_string()
                .as_bytes(),
        )
        .await;
    assert_eq!(response.status, 200, "{}", response.text());
    assert_eq!(response.json()["Attributes"]["LeaseqFairQueue"], "false");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jetstream_is_driven_like_an_sqs_queue() {
    let url = std::env::var("LEASEQ_NATS_URL").unwrap_or("nats://127.0.0.1:4222".into());
    // Producers and consumers together: single publishes with their acks, pulls with a wait,
    // acks; every message sent is received and acknowledged.
    let mixed = bench(&[
        "--jetstream",
        &url,
        "--producers",
        "2",
        "--consumers",
        "2",
        "--wait-time-seconds",
        "1",
        "--messages",
        "300",
    ]);
    let run = &mixed["run"];
    assert_eq!(run["messages_sent"], 300, "{mixed}");
    assert_eq!(run["messages_deleted"], 300, "{mixed}");
    let counted = actions(run);
    assert_eq!(counted["SendMessage"], (300, 0));
    assert_eq!(counted["ReceiveMessage"], (300, 0));
    assert_eq!(counted["DeleteMessageBatch"], (300, 0));

    // Batches of asynchronous publishes fill a backlog; consumers drain it with pulls that do
    // not wait.
    let drained = bench(&[
        "--jetstream",
        &url,
        "--workload",
        "w3",
        "-c",
        "2",
        "--backlog",
        "500",
        "--wait-time-seconds",
        "0",
    ]);
    assert_eq!(drained["fill"]["messages_sent"], 500, "{drained}");
    assert_eq!(actions(&drained["fill"])["SendMessageBatch"], (500, 0));
    assert_eq!(drained["run"]["messages_deleted"], 500, "{drained}");
}
