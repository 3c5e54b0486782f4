//! CPU time of a queue policy's decision (`leaseq_sqs::policy::evaluate`), the cost `auth =
//! "sigv4"` adds to every request of another account than the queue's owner (the owner's own
//! requests never evaluate the policy): with the document parsed each time, and parsed once
//! (`_parsed`, as the service keeps it per queue until the policy changes).
//!
//! Workloads:
//! - `add_permission_1`: the policy one `AddPermission` writes (one statement), allowed;
//! - `document_10`: a document of ten statements with wildcards, the last one a Deny that
//!   applies (so every statement is looked at).

use std::hint::black_box;

use criterion::{Criterion, Throughput};
use leaseq_sqs::policy::evaluate::{evaluate, Decision, Policy, Request};

const QUEUE: &str = "arn:aws:sqs:us-east-1:111111111111:jobs";

fn main() {
    let add_permission = leaseq_sqs::policy::add_permission(
        None,
        QUEUE,
        "send",
        &["222222222222".to_string()],
        &["SendMessage".to_string(), "ReceiveMessage".to_string()],
    )
    .unwrap();
    let mut statements: Vec<serde_json::Value> = (0..9)
        .map(|i| {
            serde_json::json!({
                "Sid": format!("s{i}"), "Effect": "Allow",
                "Principal": {"AWS": [format!("arn:aws:iam::{:012}:root", 300 + i), "222222222222"]},
                "Action": ["sqs:Send*", "sqs:ReceiveMessage", "sqs:DeleteMessage"],
                "Resource": "arn:aws:sqs:*:111111111111:jo*",
            })
        })
        .collect();
    statements.push(serde_json::json!({"Sid": "no", "Effect": "Deny",
        "Principal": "*", "Action": "sqs:PurgeQueue", "NotResource": "arn:aws:sqs:*:*:other"}));
    let document =
        serde_json::json!({"Version": "2012-10-17", "Statement": statements}).to_string();
    let workloads = [
        (
            "add_permission_1",
            add_permission,
            "SendMessage",
            Decision::Allow,
        ),
        (
            "document_10",
            document,
            "PurgeQueue",
            Decision::ExplicitDeny,
        ),
    ];
    let mut criterion = Criterion::default().configure_from_args();
    let mut group = criterion.benchmark_group("policy_evaluate");
    group.throughput(Throughput::Elements(1));
    for (name, policy, action, expected) in &workloads {
        let request = Request {
            account_id: "222222222222",
            action,
            resource: QUEUE,
        };
        assert_eq!(evaluate(policy, &request), *expected, "{name}");
        group.bench_function(*name, |bench| {
            bench.iter(|| black_box(evaluate(black_box(policy), &request)))
        });
        // Parsed once, as the service keeps it per queue.
        let parsed = Policy::parse(policy);
        group.bench_function(format!("{name}_parsed"), |bench| {
            bench.iter(|| black_box(black_box(&parsed).evaluate(&request)))
        });
    }
    group.finish();
    criterion.final_summary();
}
