//! What a cluster node faces at its edge, through the official Rust SDK and two real nodes on
//! the machine's PostgreSQL (`LEASEQ_TEST_POSTGRES`, a schema per test, dropped afterwards):
//!
//! - `auth = "sigv4"`: a standby forwards a signed request unchanged and the owner verifies it,
//!   so the SDK works through any node, and a wrong signature sent to a standby gets the
//!   owner's refusal (AWS's code and status, as on one node: the SQS API reference's "Common
//!   Errors", SignatureDoesNotMatch 403);
//! - TLS: clients speak HTTPS to any node, the nodes forward to each other's plain
//!   `--cluster-listen`, and queue URLs keep the client's `https://`.

mod common;
#[path = "common/pki.rs"]
mod pki;

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use aws_sdk_sqs::error::ProvideErrorMetadata;
use leaseq_testkit::http::request;
use leaseq_testkit::launch::{free_loopback_addr, ChildServer};
use leaseq_testkit::names::ScratchDir;
use leaseq_testkit::sdk::sdk_client_signing;
use serde_json::Value;

const KEY_ID: &str = "AKIACLUSTER1";
const SECRET: &str = "cluster-secret";

/// A schema of the machine's PostgreSQL for one test, dropped when it ends.
struct Schema {
    connection: String,
    name: String,
}

impl Schema {
    fn new(test: &str) -> Schema {
        let connection = std::env::var("LEASEQ_TEST_POSTGRES")
            .unwrap_or_else(|_| "host=127.0.0.1 user=postgres dbname=test".into());
        let name = format!("leaseq_cluster_{test}_{}", std::process::id());
        leaseq_postgres::drop_schema(&connection, &name).expect("PostgreSQL is reachable");
        Schema { connection, name }
    }
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

/// A cluster node with `args` on top of the cluster's flags, and its admin listener's address.
async fn node(
    schema: &Schema,
    name: &str,
    args: &[String],
    scratch: &Path,
) -> (ChildServer, SocketAddr) {
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
        .args(args);
    (ChildServer::start(command, scratch).await, admin)
}

/// Starts `a` and waits until it owns the log, then `b` and waits until it stands by for `a`;
/// `args` gives each its own flags.
async fn owner_and_standby(
    schema: &Schema,
    args: impl Fn() -> Vec<String>,
    scratch: &Path,
) -> [(ChildServer, SocketAddr); 2] {
    let a = node(schema, "a", &args(), scratch).await;
    until_role(a.1, "owner", "a").await;
    let b = node(schema, "b", &args(), scratch).await;
    until_role(b.1, "standby", "a").await;
    [a, b]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signed_requests_work_through_a_standby_and_bad_signatures_are_refused() {
    let schema = Schema::new("sigv4");
    let scratch = ScratchDir::new(
        env!("CARGO_TARGET_TMPDIR"),
        &format!("cluster-sigv4-{}", std::process::id()),
    );
    let credentials = format!("{KEY_ID}:{SECRET}");
    let sigv4 = || {
        vec![
            "--auth".into(),
            "sigv4".into(),
            "--credentials".into(),
            credentials.clone(),
        ]
    };
    let [a, (b, b_admin)] = owner_and_standby(&schema, sigv4, scratch.path()).await;

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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tls_cluster_serves_https_on_every_node_and_forwards_on_its_peer_listeners() {
    let schema = Schema::new("tls");
    let scratch = ScratchDir::new(
        env!("CARGO_TARGET_TMPDIR"),
        &format!("cluster-tls-{}", std::process::id()),
    );
    let ca = pki::Ca::new("leaseq cluster test CA");
    let (certificate, key) = ca.server_pair("node").write(scratch.path());
    let tls = || -> Vec<String> {
        vec![
            "--tls-cert".into(),
            certificate.display().to_string(),
            "--tls-key".into(),
            key.display().to_string(),
            "--cluster-listen".into(),
            free_loopback_addr().to_string(),
        ]
    };
    let [a, (b, b_admin)] = owner_and_standby(&schema, tls, scratch.path()).await;
    assert!(b.endpoint().starts_with("https://"), "{}", b.endpoint());

    // HTTPS to the standby; it forwards over the owner's plain peer listener, and the owner
    // builds the queue URL with the scheme and host the client used.
    let sqs = pki::sdk_client_trusting(&b.endpoint(), &ca.pem());
    let url = sqs
        .create_queue()
        .queue_name("secured")
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    assert_eq!(url, format!("{}/000000000000/secured", b.endpoint()));
    sqs.send_message()
        .queue_url(&url)
        .message_body("over TLS")
        .send()
        .await
        .unwrap();
    let received = sqs.receive_message().queue_url(&url).send().await.unwrap();
    assert_eq!(received.messages()[0].body(), Some("over TLS"));
    assert_eq!(cluster_view(b_admin).await["role"], "standby");
    drop((a, b));
}

/// The queues a node's dashboard lists (`GET /api/queues` on its admin listener), by name.
async fn dashboard_queues(admin: SocketAddr) -> Vec<String> {
    let queues = request(admin, "GET", "/api/queues", &[], b"").await.json();
    queues["queues"]
        .as_array()
        .unwrap()
        .iter()
        .map(|queue| queue["name"].as_str().unwrap().to_string())
        .collect()
}

/// The queues whose visible messages a node's `GET /metrics` counts, by name.
async fn metrics_queues(admin: SocketAddr) -> Vec<String> {
    let page = request(admin, "GET", "/metrics", &[], b"").await;
    let mut queues: Vec<String> = page
        .text()
        .lines()
        .filter(|line| {
            line.starts_with("leaseq_queue_messages{") && line.contains("state=\"visible\"")
        })
        .filter_map(|line| {
            Some(
                line.split("queue=\"")
                    .nth(1)?
                    .split('"')
                    .next()?
                    .to_string(),
            )
        })
        .collect();
    queues.sort();
    queues
}

/// A cluster node's dashboard and `/metrics` show the queues of every bucket it owns (before,
/// only its first bucket's), and a queue of a bucket another node owns is that node's to show.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodes_dashboard_and_metrics_show_every_bucket_it_owns() {
    const BUCKETS: u32 = 4;
    let schema = Schema::new("dashboard");
    let scratch = ScratchDir::new(
        env!("CARGO_TARGET_TMPDIR"),
        &format!("cluster-dashboard-{}", std::process::id()),
    );
    let args = || -> Vec<String> { vec!["--postgres-buckets".into(), BUCKETS.to_string()] };
    let (a, a_admin) = node(&schema, "a", &args(), scratch.path()).await;
    let started = Instant::now();
    while cluster_view(a_admin).await["buckets_owned"]
        .as_array()
        .unwrap()
        .len()
        < BUCKETS as usize
    {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "a never owned every bucket"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Eight queues over the four buckets, a message in each.
    let sqs = leaseq_testkit::sdk::sdk_client(&a.endpoint());
    let mut names: Vec<String> = (0..8).map(|i| format!("dash-{i}")).collect();
    names.sort();
    let buckets: std::collections::BTreeSet<u32> = names
        .iter()
        .map(|name| leaseq_core::transfer::bucket_of(name, BUCKETS))
        .collect();
    assert!(
        buckets.len() > 1,
        "the queues must lie in several buckets: {buckets:?}"
    );
    for name in &names {
        let url = sqs
            .create_queue()
            .queue_name(name)
            .send()
            .await
            .unwrap()
            .queue_url
            .unwrap();
        sqs.send_message()
            .queue_url(&url)
            .message_body(name)
            .send()
            .await
            .unwrap();
    }
    assert_eq!(dashboard_queues(a_admin).await, names);
    assert_eq!(metrics_queues(a_admin).await, names);
    let page = request(a_admin, "GET", "/metrics", &[], b"").await.text();
    assert!(
        page.contains(&format!("\nleaseq_buckets {BUCKETS}\n")),
        "{page}"
    );
    assert!(
        page.contains("\nleaseq_cluster_buckets_owned 4\n"),
        "{page}"
    );
    // The log's histograms count every bucket's flushes: at least the 16 records of the eight
    // creates and eight sends, of which the first bucket holds only a few.
    let records: f64 = page
        .lines()
        .find_map(|line| line.strip_prefix("leaseq_log_fsync_batch_records_sum "))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no records sum: {page}"));
    assert!(records >= 16.0, "{records} records flushed: {page}");
    // The node's own requests and connections, whichever bucket served them.
    let sends = "leaseq_requests_total{action=\"SendMessage\",outcome=\"success\"} 8";
    assert!(page.contains(sends), "{page}");
    let accepted: u64 = page
        .lines()
        .find_map(|line| line.strip_prefix("leaseq_http_connections_accepted_total "))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or_else(|| panic!("no connections: {page}"));
    assert!(accepted > 0, "{page}");

    // b joins and placement hands it its share; each node then shows its own buckets' queues,
    // together every queue once.
    let (b, b_admin) = node(&schema, "b", &args(), scratch.path()).await;
    let owners = shared_out(a_admin, b_admin, BUCKETS).await;
    let owner_of =
        |name: &str| owners[leaseq_core::transfer::bucket_of(name, BUCKETS) as usize].clone();
    for (node, admin) in [("a", a_admin), ("b", b_admin)] {
        let theirs: Vec<String> = names
            .iter()
            .filter(|name| owner_of(name) == node)
            .cloned()
            .collect();
        assert_eq!(dashboard_queues(admin).await, theirs, "{node}'s dashboard");
        assert_eq!(metrics_queues(admin).await, theirs, "{node}'s /metrics");
    }
    // A queue's own route: served where its bucket lives, 503 (ServiceUnavailable) elsewhere.
    let name = &names[0];
    let (here, elsewhere) = match owner_of(name).as_str() {
        "a" => (a_admin, b_admin),
        _ => (b_admin, a_admin),
    };
    let path = format!("/api/queues/{name}/peek");
    let peeked = request(here, "GET", &path, &[], b"").await;
    assert_eq!(peeked.status, 200, "{}", peeked.text());
    assert_eq!(peeked.json()["messages"][0]["body"], name.as_str());
    let refused = request(elsewhere, "GET", &path, &[], b"").await;
    assert_eq!(refused.status, 503, "{}", refused.text());
    assert_eq!(
        refused.json()["error"]["code"],
        "ServiceUnavailableException"
    );
    let owner = format!("node {} owns it", owner_of(name));
    assert!(refused.text().contains(&owner), "{}", refused.text());
    drop((a, b));
}

/// Waits until two nodes own every one of `buckets` buckets between them, each some, and agree
/// on who owns which; returns each bucket's owner.
async fn shared_out(a_admin: SocketAddr, b_admin: SocketAddr, buckets: u32) -> Vec<String> {
    let started = Instant::now();
    loop {
        let (a_view, b_view) = (cluster_view(a_admin).await, cluster_view(b_admin).await);
        let owned = |view: &Value| view["buckets_owned"].as_array().unwrap().len();
        let owners = |view: &Value| -> Vec<Value> {
            let buckets = view["buckets"].as_array().unwrap();
            buckets
                .iter()
                .map(|bucket| bucket["owner"].clone())
                .collect()
        };
        let settled = owned(&a_view) > 0
            && owned(&b_view) > 0
            && owned(&a_view) + owned(&b_view) == buckets as usize
            && owners(&a_view) == owners(&b_view);
        if settled {
            return owners(&a_view)
                .iter()
                .map(|owner| owner.as_str().unwrap().to_string())
                .collect();
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "{a_view} {b_view}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A queue created with a dead-letter queue of another bucket lives in that bucket
/// (`leaseq_server::placements`), through HTTP between real nodes: created through the node
/// that does not own its name's bucket, the create is forwarded to the owner of that bucket,
/// which places it and refuses the forward as placed elsewhere; the first node learns the
/// placement and routes the create to the dead-letter queue's bucket. Every node then serves
/// the queue, and its dead letter moves at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_created_with_a_remote_dead_letter_queue_is_placed_with_it_through_any_node() {
    const BUCKETS: u32 = 4;
    let schema = Schema::new("placement");
    let scratch = ScratchDir::new(
        env!("CARGO_TARGET_TMPDIR"),
        &format!("cluster-placement-{}", std::process::id()),
    );
    let args = || -> Vec<String> { vec!["--postgres-buckets".into(), BUCKETS.to_string()] };
    let (a, a_admin) = node(&schema, "a", &args(), scratch.path()).await;
    let (b, b_admin) = node(&schema, "b", &args(), scratch.path()).await;
    let owners = shared_out(a_admin, b_admin, BUCKETS).await;
    let bucket = |name: &str| leaseq_core::transfer::bucket_of(name, BUCKETS);
    let owner_of = |name: &str| owners[bucket(name) as usize].clone();
    // A dead-letter queue, and a source whose name's bucket another node owns.
    let dlq = "placement-dlq";
    let source = (0..1000)
        .map(|i| format!("placement-{i}"))
        .find(|name| owner_of(name) != owner_of(dlq))
        .unwrap();
    // `entry` does not own the bucket of the source's name (`home` does): it owns the dead-letter
    // queue's.
    let (home, entry) = match owner_of(&source).as_str() {
        "a" => (&a, &b),
        _ => (&b, &a),
    };
    let sqs = leaseq_testkit::sdk::sdk_client(&entry.endpoint());
    let dlq_url = sqs
        .create_queue()
        .queue_name(dlq)
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    let redrive = format!(
        r#"{{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:{dlq}","maxReceiveCount":"1"}}"#
    );
    let home_sqs = leaseq_testkit::sdk::sdk_client(&home.endpoint());
    let url = sqs
        .create_queue()
        .queue_name(&source)
        .attributes(
            aws_sdk_sqs::types::QueueAttributeName::RedrivePolicy,
            &redrive,
        )
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    // The dead-letter queue's owner shows it on its dashboard: the queue lives there.
    let dlq_admin = if owner_of(dlq) == "a" {
        a_admin
    } else {
        b_admin
    };
    let listed = dashboard_queues(dlq_admin).await;
    assert!(listed.contains(&source), "{listed:?}");
    for client in [&sqs, &home_sqs] {
        client
            .send_message()
            .queue_url(&url)
            .message_body("spent")
            .send()
            .await
            .unwrap();
    }
    for client in [&sqs, &home_sqs, &sqs] {
        let received = client
            .receive_message()
            .queue_url(&url)
            .max_number_of_messages(10)
            .visibility_timeout(0)
            .send()
            .await
            .unwrap();
        let _ = received.messages;
    }
    // Both messages were received once, and the next receive made them dead letters, which
    // are in the dead-letter queue at once (one record in one log, no transfer to wait for).
    let attributes = home_sqs
        .get_queue_attributes()
        .queue_url(&dlq_url)
        .attribute_names(aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages)
        .send()
        .await
        .unwrap();
    let count = attributes.attributes.unwrap()
        [&aws_sdk_sqs::types::QueueAttributeName::ApproximateNumberOfMessages]
        .clone();
    assert_eq!(count, "2");
    drop((a, b));
}

/// Cluster settings that cannot work are refused before the node starts, saying why.
#[test]
fn impossible_cluster_settings_are_refused_at_start() {
    let postgres = ["--postgres", "host=127.0.0.1 user=postgres dbname=test"];
    let without_postgres = common::refused_serve(["--cluster", "true"]);
    assert!(
        without_postgres.contains("--cluster needs --postgres"),
        "{without_postgres}"
    );
    let stray = common::refused_serve(["--node-id", "a"]);
    assert!(stray.contains("add --cluster true"), "{stray}");
    let wildcard = common::refused_serve(
        [
            &postgres[..],
            &[
                "--cluster",
                "true",
                "--listen",
                "0.0.0.0:9324",
                "--allow-anonymous",
                "true",
            ],
        ]
        .concat(),
    );
    assert!(wildcard.contains("set --advertise"), "{wildcard}");
    let scratch = ScratchDir::new(
        env!("CARGO_TARGET_TMPDIR"),
        &format!("cluster-refused-{}", std::process::id()),
    );
    let ca = pki::Ca::new("leaseq cluster test CA");
    let (certificate, key) = ca.server_pair("node").write(scratch.path());
    let (certificate, key) = (certificate.display().to_string(), key.display().to_string());
    let tls_alone = common::refused_serve(
        [
            &postgres[..],
            &[
                "--cluster",
                "true",
                "--tls-cert",
                &certificate,
                "--tls-key",
                &key,
            ],
        ]
        .concat(),
    );
    assert!(tls_alone.contains("also set cluster_listen"), "{tls_alone}");
}
