//! A cluster with `auth = "sigv4"`: a standby forwards a signed request unchanged and the owner
//! verifies it, so the official Rust SDK works through any node, and a wrong signature sent to a
//! standby gets the owner's refusal (AWS's code and status, as on one node: the SQS API
//! reference's "Common Errors", SignatureDoesNotMatch 403). Two real nodes on the machine's
//! PostgreSQL (`LEASEQ_TEST_POSTGRES`), in a schema of their own, dropped afterwards.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use aws_sdk_sqs::error::ProvideErrorMetadata;
use leaseq_testkit::http::request;
use leaseq_testkit::launch::{free_loopback_addr, ChildServer};
use leaseq_testkit::names::ScratchDir;
use leaseq_testkit::sdk::sdk_client_signing;
use serde_json::Value;

const KEY_ID: &str = "AKIACLUSTER1";
const SECRET: &str = "cluster-secret";

struct Schema {
    connection: String,
    name: String,
}

impl Drop for Schema {
    fn drop(&mut self) {
        let _ = leaseq_postgres::drop_schema(&self.connection, &self.name);
    }
}

/// A node's view, from its admin listener's `GET /api/cluster`.
async fn cluster_view(admin: SocketAddr) -> Value {
    request(admin, "GET", "/api/cluster", &[], b"").await.json()
}

async fn node(schema: &Schema, name: &str, scratch: &std::path::Path) -> (ChildServer, SocketAddr) {
    let (listen, admin) = (free_loopback_addr(), free_loopback_addr());
    let command = common::serve_command()
        .listening_on(listen)
        .args(["--listen", &listen.to_string()])
        .args(["--admin-listen", &admin.to_string()])
        .args([
            "--postgres",
            &schema.connection,
            "--postgres-schema",
            &schema.name,
        ])
        .args(["--cluster", "true", "--node-id", name])
        .args([
            "--auth",
            "sigv4",
            "--credentials",
            &format!("{KEY_ID}:{SECRET}"),
        ]);
    (ChildServer::start(command, scratch).await, admin)
}

/// Waits until the node behind `admin` reports `role` with `owner` as the owner.
async fn until_role(admin: SocketAddr, role: &str, owner: &str) {
    let started = Instant::now();
    loop {
        let view = cluster_view(admin).await;
        if view["role"] == role && view["owner"]["node_id"] == owner {
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "{view}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_requests_work_through_a_standby_and_bad_signatures_are_refused() {
    let connection = std::env::var("LEASEQ_TEST_POSTGRES")
        .unwrap_or_else(|_| "host=127.0.0.1 user=postgres dbname=test".into());
    let schema = Schema {
        name: format!("leaseq_cluster_sigv4_{}", std::process::id()),
        connection,
    };
    leaseq_postgres::drop_schema(&schema.connection, &schema.name)
        .expect("PostgreSQL is reachable");
    let scratch = ScratchDir::new(
        env!("CARGO_TARGET_TMPDIR"),
        &format!("cluster-sigv4-{}", std::process::id()),
    );
    let (a, a_admin) = node(&schema, "a", scratch.path()).await;
    until_role(a_admin, "owner", "a").await;
    let (b, b_admin) = node(&schema, "b", scratch.path()).await;
    until_role(b_admin, "standby", "a").await;

    // The SDK signs for b's host; b forwards the request as it came, a verifies and executes.
    let sqs = sdk_client_signing(&b.endpoint(), KEY_ID, SECRET);
    let url = sqs
        .create_queue()
        .queue_name("signed")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    assert!(url.starts_with(&b.endpoint()), "{url}");
    sqs.send_message()
        .queue_url(&url)
        .message_body("through b")
        .send()
        .await
        .unwrap();
    let received = sqs.receive_message().queue_url(&url).send().await.unwrap();
    assert_eq!(received.messages()[0].body(), Some("through b"));

    let forged = sdk_client_signing(&b.endpoint(), KEY_ID, "not-the-secret");
    let refused = forged
        .list_queues()
        .send()
        .await
        .expect_err("a wrong secret is refused");
    let refused = refused.into_service_error();
    assert_eq!(refused.code(), Some("SignatureDoesNotMatch"), "{refused:?}");
    assert_eq!(cluster_view(b_admin).await["role"], "standby");
    drop((a, b));
}
