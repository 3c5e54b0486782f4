//! A cluster node in the test's process, behind the accept loop `leaseq serve` runs, on its own
//! loopback port (`tests/cluster.rs`, `tests/failover.rs`).

#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use leaseq_postgres::cluster::{ClusterConfig, ClusterNode, NodeStatus};
use leaseq_postgres::{NodeIdentity, PgConfig};
use leaseq_server::http::Connections;
use leaseq_server::HttpConfig;
use leaseq_testkit::http::{json_headers, request, RawResponse};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::common::service_config;

/// Short, so a test waits little for a takeover after a lost session.
pub const NODE_TIMEOUT: Duration = Duration::from_millis(1_000);
/// Longer than any takeover here takes.
pub const WAIT_MAX: Duration = Duration::from_secs(20);

/// A node served on its own loopback port until dropped.
pub struct Node {
    pub node: Arc<ClusterNode>,
    pub addr: SocketAddr,
    /// The name of every PostgreSQL session the node opens.
    pub application_name: String,
    tasks: Vec<JoinHandle<()>>,
}

impl Node {
    /// Node `name` on the log in `schema` of the database `connection` names (whose sessions
    /// carry an `application_name`, the node's).
    pub async fn start(connection: &str, schema: &str, name: &str) -> Node {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let application_name = connection
            .split_whitespace()
            .find_map(|part| part.strip_prefix("application_name="))
            .unwrap_or_default()
            .to_string();
        let config = ClusterConfig {
            log: PgConfig {
                schema: schema.to_string(),
                node: Some(NodeIdentity {
                    node_id: name.to_string(),
                    advertise: addr.to_string(),
                }),
                ..PgConfig::new(connection)
            },
            service: service_config(),
            checkpoint_log_bytes_min: 1 << 20,
            node_timeout: NODE_TIMEOUT,
            metrics: None,
            clock: None,
        };
        let node = ClusterNode::new(config).unwrap();
        let running = node.clone().run(|service| {
            tokio::spawn(service.drive_moves());
        });
        let control = tokio::spawn(async move {
            running.await.expect("the node joins");
        });
        let http = HttpConfig {
            external_url: None,
            region: "us-east-1".into(),
            account_id: "000000000000".into(),
            request_body_max_bytes: 4 << 20,
            dashboard_page: false,
            auth: None,
            node_id: Some(name.to_string()),
        };
        let stopping = node.clone();
        let serving = tokio::spawn(leaseq_server::http::serve(
            listener,
            node.clone(),
            http,
            None,
            Default::default(),
            Connections::default(),
            async move {
                std::future::pending::<()>().await;
                drop(stopping);
            },
        ));
        Node {
            node,
            addr,
            application_name,
            tasks: vec![control, serving],
        }
    }

    pub fn status(&self) -> NodeStatus {
        self.node.status()
    }

    /// Waits until this node's status satisfies `condition`.
    pub async fn until(&self, what: &str, condition: impl Fn(&NodeStatus) -> bool) -> NodeStatus {
        let started = Instant::now();
        loop {
            let status = self.status();
            if condition(&status) {
                return status;
            }
            assert!(started.elapsed() < WAIT_MAX, "{what}: {status:?}");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub async fn call(&self, action: &str, body: Value) -> RawResponse {
        call_at(self.addr, action, body).await
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

pub async fn call_at(addr: SocketAddr, action: &str, body: Value) -> RawResponse {
    let target = format!("AmazonSQS.{action}");
    request(
        addr,
        "POST",
        "/",
        &json_headers(&target),
        body.to_string().as_bytes(),
    )
    .await
}
