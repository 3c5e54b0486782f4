//! The accept loop `leaseq serve` runs (`http::serve`), through real sockets: SQS requests on
//! any path but the routed ones, `/health` and the dashboard's routes through the router (with
//! its 405 for a wrong method), keep-alive, the request body bound, and a graceful shutdown that
//! closes idle connections and returns.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

mod common;

/// A server on a free port with the dashboard's routes and a 1 KiB body bound; dropping (or
/// sending on) the returned sender shuts it down, and the handle ends when it has stopped.
async fn start() -> (SocketAddr, oneshot::Sender<()>, JoinHandle<()>) {
    let backend = common::in_memory_backend();
    let (stop, stopped) = oneshot::channel::<()>();
    let routes = leaseq_server::dashboard::routes(backend.clone());
    let (address, server) = common::serve(backend, 1024, routes, async move {
        let _ = stopped.await;
    })
    .await;
    (address, stop, server)
}

/// Writes one request on `stream` (kept alive) and reads its response: status and body.
async fn exchange(
    stream: &mut TcpStream,
    method: &str,
    path: &str,
    target: &str,
    body: &str,
) -> (u16, String) {
    let target = if target.is_empty() {
        String::new()
    } else {
        format!("X-Amz-Target: AmazonSQS.{target}\r\nContent-Type: application/x-amz-json-1.0\r\n")
    };
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: localhost\r\n{target}Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    // The head, then exactly Content-Length bytes: the connection stays open.
    let mut received = Vec::new();
    let head_end = loop {
        if let Some(end) = received.windows(4).position(|w| w == b"\r\n\r\n") {
            break end + 4;
        }
        let mut chunk = [0; 4096];
        let read = stream.read(&mut chunk).await.unwrap();
        assert!(read > 0, "connection closed mid-response");
        received.extend_from_slice(&chunk[..read]);
    };
    let head = String::from_utf8(received[..head_end].to_vec()).unwrap();
    let status = head[9..12].parse().unwrap();
    let length: usize = head
        .lines()
        .find_map(|line| {
            line.to_ascii_lowercase()
                .strip_prefix("content-length: ")
                .map(str::to_owned)
        })
        .expect("a content-length")
        .trim()
        .parse()
        .unwrap();
    while received.len() < head_end + length {
        let mut chunk = [0; 4096];
        let read = stream.read(&mut chunk).await.unwrap();
        assert!(read > 0, "connection closed mid-body");
        received.extend_from_slice(&chunk[..read]);
    }
    (
        status,
        String::from_utf8(received[head_end..].to_vec()).unwrap(),
    )
}

#[tokio::test]
async fn sqs_requests_and_routes_share_one_keep_alive_connection() {
    let (address, _stop, _server) = start().await;
    let mut stream = TcpStream::connect(address).await.unwrap();
    let (status, body) = exchange(&mut stream, "GET", "/health", "", "").await;
    assert_eq!((status, body.as_str()), (200, "ok\n"));
    // A routed path with the wrong method gets the router's answer, not an SQS error.
    let (status, _) = exchange(&mut stream, "POST", "/health", "", "").await;
    assert_eq!(status, 405);
    let (status, body) = exchange(
        &mut stream,
        "POST",
        "/",
        "CreateQueue",
        r#"{"QueueName":"q"}"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("http://localhost/000000000000/q"), "{body}");
    let send = r#"{"QueueUrl":"http://localhost/000000000000/q","MessageBody":"hello"}"#;
    let (status, body) =
        exchange(&mut stream, "POST", "/000000000000/q", "SendMessage", send).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = exchange(&mut stream, "GET", "/api/queues", "", "").await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("\"q\""), "{body}");
    // A path under a routed prefix that no route serves is the router's fallback: SQS.
    let (status, body) = exchange(&mut stream, "POST", "/api/nothing", "ListQueues", "{}").await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("QueueUrls"), "{body}");
    // A plain `GET /` is the dashboard page.
    let (status, body) = exchange(&mut stream, "GET", "/", "", "").await;
    assert_eq!(status, 200);
    assert!(
        body.contains("<html"),
        "the page: {}",
        &body[..100.min(body.len())]
    );
}

#[tokio::test]
async fn a_body_over_the_bound_is_refused() {
    let (address, _stop, _server) = start().await;
    let mut stream = TcpStream::connect(address).await.unwrap();
    let body = format!(r#"{{"QueueName":"{}"}}"#, "q".repeat(2000));
    let (status, body) = exchange(&mut stream, "POST", "/", "CreateQueue", &body).await;
    assert_eq!(status, 413, "{body}");
    assert!(body.contains("at most 1024 bytes"), "{body}");
}

#[tokio::test]
async fn shutdown_closes_idle_connections_and_returns() {
    let (address, stop, server) = start().await;
    let mut stream = TcpStream::connect(address).await.unwrap();
    let (status, _) = exchange(&mut stream, "GET", "/health", "", "").await;
    assert_eq!(status, 200);
    stop.send(()).unwrap();
    tokio::time::timeout(Duration::from_secs(5), server)
        .await
        .expect("the server stops with an idle connection open")
        .unwrap();
    let mut rest = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut rest)).await;
    assert!(
        matches!(read, Ok(Ok(0)) | Ok(Err(_))),
        "the connection is closed"
    );
    assert!(
        TcpStream::connect(address).await.is_err(),
        "no longer listening"
    );
}
