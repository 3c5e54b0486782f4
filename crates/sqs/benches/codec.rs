//! CPU time of the SQS wire codec per request: a request decoded into an `Action`, then the
//! response to it encoded, as the server does for every request (the engine's part is left out;
//! the outcome is built from the decoded action, or given).
//!
//! Workloads (bodies are 256 bytes, as in the project's performance bar):
//! - `json_send`: a JSON `SendMessage`;
//! - `json_send_batch10`: a JSON `SendMessageBatch` of 10 entries (reported per request; divide
//!   by 10 for the cost per message);
//! - `json_receive10`: a JSON `ReceiveMessage` asking for all attributes, answered with 10
//!   messages;
//! - `query_send`: a Query (form-encoded) `SendMessage`, answered in XML.
//!
//! Wall-clock timings are noisy on a busy machine. For a deterministic count, run one workload
//! a fixed number of times under callgrind and divide the instructions of `run_workload` by the
//! count, e.g.
//! `LEASEQ_CODEC_WORKLOAD=json_send LEASEQ_CODEC_ITERATIONS=1000 valgrind --tool=callgrind
//! --toggle-collect='codec::run_workload' target/release/deps/codec-… --bench`.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::Arc;

use criterion::{Criterion, Throughput};
use leaseq_core::{Delivery, MessageId, Payload, SendInput, Sent};
use leaseq_sqs::{decode, encode, Action, Context, Outcome, RawRequest};

/// The allocator the server ships with (see crates/cli/src/main.rs), so the benchmark measures
/// what runs.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const BODY_BYTES: usize = 256;
const BATCH: usize = 10;
const QUEUE_URL: &str = "http://localhost:9324/000000000000/bench";

/// The names of the workloads, in the order they run.
const WORKLOADS: [&str; 4] = [
    "json_send",
    "json_send_batch10",
    "json_receive10",
    "query_send",
];

/// A 256-byte body of printable ASCII (with spaces, which a form encodes as `+`).
fn body(seed: usize) -> String {
    let pattern = "The quick brown fox jumps over the lazy dog 0123456789. ";
    let mut body = format!("message {seed}: ");
    while body.len() < BODY_BYTES {
        body.push_str(pattern);
    }
    body.truncate(BODY_BYTES);
    body
}

fn ctx() -> Context {
    Context {
        base_url: "http://localhost:9324".into(),
        region: "us-east-1".into(),
        account_id: "000000000000".into(),
        request_id: "5f0a6a4e-33a1-4a8e-9e0b-3c1f4a0e7d21".into(),
    }
}

/// A request and what the workload needs to answer it.
struct Workload {
    target: Option<String>,
    body: Vec<u8>,
    /// The outcome of a receive (a send's outcome is built from the decoded action).
    received: Option<Outcome>,
}

fn json_request(action: &str, body: serde_json::Value) -> Workload {
    Workload {
        target: Some(format!("AmazonSQS.{action}")),
        body: body.to_string().into_bytes(),
        received: None,
    }
}

fn delivery(index: usize) -> Delivery {
    Delivery {
        message_id: MessageId([index as u8; 16]),
        // About the length of a leaseq receipt handle.
        receipt: "AQEB".repeat(30),
        payload: Arc::new(Payload::new(
            body(index),
            BTreeMap::new(),
            None,
            Arc::from("AIDAEXAMPLE"),
        )),
        receive_count: 1,
        sent_at_ms: 1_700_000_000_123,
        first_received_at_ms: 1_700_000_001_000,
        visible_at_ms: 1_700_000_031_000,
        dead_letter_source: None,
        fifo: None,
        sequence_number: None,
        previous_attempt: None,
        tenant_noisy: None,
    }
}

fn workload(name: &str) -> Workload {
    match name {
        "json_send" => json_request(
            "SendMessage",
            serde_json::json!({"QueueUrl": QUEUE_URL, "MessageBody": body(0)}),
        ),
        "json_send_batch10" => {
            let entries: Vec<serde_json::Value> = (0..BATCH)
                .map(|i| serde_json::json!({"Id": format!("m{i}"), "MessageBody": body(i)}))
                .collect();
            json_request(
                "SendMessageBatch",
                serde_json::json!({"QueueUrl": QUEUE_URL, "Entries": entries}),
            )
        }
        "json_receive10" => {
            let mut workload = json_request(
                "ReceiveMessage",
                serde_json::json!({
                    "QueueUrl": QUEUE_URL,
                    "MaxNumberOfMessages": 10,
                    "WaitTimeSeconds": 0,
                    "AttributeNames": ["All"],
                    "MessageAttributeNames": ["All"],
                }),
            );
            workload.received = Some(Outcome::Received {
                deliveries: (0..BATCH).map(delivery).collect(),
                queue_name: Arc::from("bench"),
            });
            workload
        }
        "query_send" => {
            let form = form_urlencoded::Serializer::new(String::new())
                .append_pair("Action", "SendMessage")
                .append_pair("Version", "2012-11-05")
                .append_pair("QueueUrl", QUEUE_URL)
                .append_pair("MessageBody", &body(0))
                .finish();
            Workload {
                target: None,
                body: form.into_bytes(),
                received: None,
            }
        }
        other => panic!("no workload {other}"),
    }
}

/// What the engine would answer to a send (without the engine).
fn sent(message: SendInput, index: usize) -> Sent {
    Sent {
        message_id: MessageId([index as u8; 16]),
        seq: index as u64,
        payload: Arc::new(Payload::new(
            message.body,
            message.attributes,
            message.trace_header,
            Arc::from(""),
        )),
        sequence_number: None,
        duplicate: false,
    }
}

/// One request through the codec: decode, build the outcome, encode. Returns the response's
/// length so that nothing is optimised away.
#[inline(never)]
fn run_workload(workload: &Workload, ctx: &Context) -> usize {
    let request = RawRequest {
        method: "POST",
        path: "/",
        query: None,
        target: workload.target.as_deref(),
        content_type: Some(if workload.target.is_some() {
            "application/x-amz-json-1.0"
        } else {
            "application/x-www-form-urlencoded"
        }),
        body: &workload.body,
    };
    let (protocol, action, shape) = decode(&request).expect("the workload's request is valid");
    let name = action.name();
    let built;
    let outcome = match action {
        Action::SendMessage { message, .. } => {
            built = Outcome::Sent(sent(message, 0));
            &built
        }
        Action::SendMessageBatch { entries, .. } => {
            built = Outcome::SentBatch(
                entries
                    .into_iter()
                    .enumerate()
                    .map(|(index, entry)| (entry.id, Ok(sent(entry.value, index))))
                    .collect(),
            );
            &built
        }
        Action::ReceiveMessage { .. } => workload.received.as_ref().expect("a receive outcome"),
        other => panic!("unexpected action {}", other.name()),
    };
    let response = encode(protocol, name, outcome, &shape, ctx);
    assert_eq!(response.status, 200);
    response.body.len()
}

fn bench(c: &mut Criterion) {
    let ctx = ctx();
    let mut group = c.benchmark_group("codec");
    for name in WORKLOADS {
        let workload = workload(name);
        group.throughput(Throughput::Elements(1));
        group.bench_function(name, |b| {
            b.iter(|| run_workload(black_box(&workload), &ctx))
        });
    }
    group.finish();
}

fn main() {
    // A fixed number of runs of one workload, for instruction counts (see the module comment).
    if let Ok(name) = std::env::var("LEASEQ_CODEC_WORKLOAD") {
        let iterations: usize = std::env::var("LEASEQ_CODEC_ITERATIONS")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(1000);
        let workload = workload(&name);
        let ctx = ctx();
        let mut bytes = 0;
        for _ in 0..iterations {
            bytes += run_workload(black_box(&workload), &ctx);
        }
        println!("{name}: {iterations} runs, {bytes} response bytes");
        return;
    }
    let mut criterion = Criterion::default().configure_from_args();
    bench(&mut criterion);
    criterion.final_summary();
}
