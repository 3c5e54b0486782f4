//! The harness: an in-process leaseq server per test, SDK clients, queue helpers, a worker
//! configuration with short leases, and a wait for the worker's counters.

use std::future::Future;
use std::time::Duration;

use aws_sdk_sqs::error::DisplayErrorContext;
use aws_sdk_sqs::types::{Message, MessageSystemAttributeName, QueueAttributeName};
use aws_sdk_sqs::Client;
use leaseq_testkit::launch::InProcessServer;
use leaseq_worker::{LeaseConfig, WorkerConfig};
use tokio::net::TcpListener;

pub use leaseq_testkit::names::unique_name;
pub use leaseq_testkit::sdk::{create_queue, queue_attributes, receive, sdk_client};

/// How long any wait of a test may take before the test fails. Generous because CI runs on two
/// shared cores.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// A leaseq server in this process and a client for it; the server stops when this is dropped.
pub struct Server {
    pub endpoint: String,
    pub client: Client,
    _server: InProcessServer,
}

/// Starts an in-memory leaseq server on a free loopback port, on the accept loop `leaseq serve`
/// runs. Also sends the worker's logs to the test's output (shown for failing tests;
/// `RUST_LOG` filters them, default `info`).
pub async fn start_server() -> Server {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,leaseq_server=warn".into()),
        )
        .with_test_writer()
        .try_init();
    let server = InProcessServer::start().await;
    let endpoint = server.endpoint().to_string();
    let client = sdk_client(&endpoint);
    Server {
        endpoint,
        client,
        _server: server,
    }
}

/// Sends `body` and returns the message id.
pub async fn send(client: &Client, queue_url: &str, body: &str) -> String {
    let output = client
        .send_message()
        .queue_url(queue_url)
        .message_body(body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("SendMessage: {}", DisplayErrorContext(&e)));
    output.message_id().expect("a message id").to_string()
}

/// Receives at most one message, waiting up to `wait_seconds`, leasing it for
/// `visibility_seconds`.
pub async fn receive_one(
    client: &Client,
    queue_url: &str,
    wait_seconds: i32,
    visibility_seconds: i32,
) -> Option<Message> {
    receive(client, queue_url, 1, wait_seconds, Some(visibility_seconds))
        .await
        .into_iter()
        .next()
}

/// The receive count of a received message.
pub fn receive_count(message: &Message) -> u32 {
    message
        .attributes()
        .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
        .and_then(|count| count.parse().ok())
        .expect("ApproximateReceiveCount")
}

/// (visible, in flight) message counts of a queue.
pub async fn counts(client: &Client, queue_url: &str) -> (u64, u64) {
    let attributes = queue_attributes(client, queue_url).await;
    let count = |name| {
        attributes
            .get(&name)
            .and_then(|v| v.parse().ok())
            .unwrap_or(u64::MAX)
    };
    (
        count(QueueAttributeName::ApproximateNumberOfMessages),
        count(QueueAttributeName::ApproximateNumberOfMessagesNotVisible),
    )
}

/// A worker configuration with short leases, for tests: 2 s leases extended 1 s before their
/// deadline, counted lost 0.5 s before it, 1 s long polls.
pub fn worker_config(queue_url: &str) -> WorkerConfig {
    WorkerConfig {
        wait_time: Duration::from_secs(1),
        lease: LeaseConfig {
            visibility_timeout: Duration::from_secs(2),
            slack: Duration::from_secs(1),
            expiry_margin: Duration::from_millis(500),
            lease_total_max: Duration::from_secs(60),
            progress_window: None,
        },
        shutdown_deadline: Duration::from_secs(2),
        ..WorkerConfig::new(queue_url)
    }
}

/// Polls `condition` every 20 ms until it holds; panics after [`PATIENCE`] with `what`.
pub async fn wait_for<F, Fut>(what: &str, mut condition: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let give_up_at = tokio::time::Instant::now() + PATIENCE;
    while !condition().await {
        assert!(
            tokio::time::Instant::now() < give_up_at,
            "gave up waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A TCP proxy in front of a server, whose link can be cut: every connection through it is
/// dropped and new ones are refused, as when the network between worker and queue fails.
pub struct Proxy {
    pub endpoint: String,
    cut: tokio::sync::watch::Sender<bool>,
}

impl Proxy {
    /// Starts forwarding a free loopback port to `server`.
    pub async fn start(server: &Server) -> Proxy {
        let upstream: std::net::SocketAddr = server
            .endpoint
            .trim_start_matches("http://")
            .parse()
            .unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let (cut, cut_rx) = tokio::sync::watch::channel(false);
        let mut accept_cut = cut_rx.clone();
        tokio::spawn(async move {
            loop {
                let (mut downstream, _) = tokio::select! {
                    accepted = listener.accept() => accepted.unwrap(),
                    _ = accept_cut.wait_for(|cut| *cut) => return,
                };
                let mut link_cut = cut_rx.clone();
                tokio::spawn(async move {
                    let mut upstream = tokio::net::TcpStream::connect(upstream).await.unwrap();
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut downstream, &mut upstream) => {}
                        _ = link_cut.wait_for(|cut| *cut) => {}
                    }
                });
            }
        });
        Proxy { endpoint, cut }
    }

    /// Cuts the link for good.
    pub fn cut(&self) {
        self.cut.send_replace(true);
    }
}

/// An HTTP proxy in front of a server that answers one action as a server without it does
/// (Amazon SQS, for leaseq's own actions): the request is forwarded with its `X-Amz-Target`
/// renamed to an action nobody has, so the answer is the server's own unknown-action error.
/// Everything else passes through unchanged (the `Host` header too, so queue URLs in answers
/// point at the proxy).
pub struct RejectingProxy {
    pub endpoint: String,
    /// How many requests for the rejected action came through.
    pub rejected: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl RejectingProxy {
    pub async fn start(server: &Server, action: &str) -> RejectingProxy {
        use http_body_util::{BodyExt as _, Full};
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;

        let upstream: std::net::SocketAddr = server
            .endpoint
            .trim_start_matches("http://")
            .parse()
            .unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let rejected = Arc::new(AtomicUsize::new(0));
        let target = format!("AmazonSQS.{action}");
        let counter = rejected.clone();
        tokio::spawn(async move {
            loop {
                let (stream, _) = listener.accept().await.unwrap();
                let (counter, target) = (counter.clone(), target.clone());
                let service = hyper::service::service_fn(
                    move |request: hyper::Request<hyper::body::Incoming>| {
                        let (counter, target) = (counter.clone(), target.clone());
                        async move {
                            let (parts, body) = request.into_parts();
                            let body = body.collect().await?.to_bytes();
                            let mut headers: Vec<(String, String)> = Vec::new();
                            for (name, value) in &parts.headers {
                                let mut value = value.to_str().unwrap_or_default().to_string();
                                if name == "x-amz-target" && value == target {
                                    counter.fetch_add(1, Ordering::SeqCst);
                                    value = "AmazonSQS.NoSuchActionAnywhere".to_string();
                                }
                                if name != "content-length" {
                                    headers.push((name.to_string(), value));
                                }
                            }
                            let headers: Vec<(&str, &str)> = headers
                                .iter()
                                .map(|(n, v)| (n.as_str(), v.as_str()))
                                .collect();
                            let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
                            let answer = leaseq_testkit::http::request(
                                upstream,
                                parts.method.as_str(),
                                path,
                                &headers,
                                &body,
                            )
                            .await;
                            let mut response = hyper::Response::builder().status(answer.status);
                            for (name, value) in &answer.headers {
                                if !["content-length", "transfer-encoding", "connection"]
                                    .contains(&name.as_str())
                                {
                                    response = response.header(name, value);
                                }
                            }
                            Ok::<_, hyper::Error>(
                                response
                                    .body(Full::new(bytes::Bytes::from(answer.body)))
                                    .unwrap(),
                            )
                        }
                    },
                );
                tokio::spawn(async move {
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, service)
                        .await;
                });
            }
        });
        RejectingProxy { endpoint, rejected }
    }
}
