//! The accept loop `leaseq serve` runs (`http::serve`), through real sockets: SQS requests on
//! any path but the routed ones, `/health` and the dashboard's routes through the router (with
//! its 405 for a wrong method), keep-alive, the request body bound, and a graceful shutdown that
//! closes idle connections and returns.

use std::time::Duration;

use leaseq_testkit::http::{self, Connection};
use leaseq_testkit::launch::{InProcessServer, Options};
use tokio::net::TcpStream;

/// A server on a free port as `leaseq serve` runs it, with a 1 KiB body bound.
async fn start() -> InProcessServer {
    InProcessServer::start_with(Options {
        request_body_max_bytes: 1024,
        ..Options::default()
    })
    .await
}

/// Sends one request on `connection` (kept alive) and reads its response: status and body.
/// `action` names an SQS action (sent as `X-Amz-Target`, with the JSON content type), if not
/// empty.
async fn exchange(
    connection: &mut Connection,
    method: &str,
    path: &str,
    action: &str,
    body: &str,
) -> (u16, String) {
    let target = (!action.is_empty()).then(|| http::target(action));
    let mut headers = vec![("Host", "localhost")];
    if let Some(target) = &target {
        headers.extend(http::json_headers(target));
    }
    let response = connection
        .send(method, path, &headers, body.as_bytes())
        .await
        .unwrap_or_else(|error| panic!("{method} {path}: {error}"));
    (response.status, response.text())
}

async fn connect(server: &InProcessServer) -> Connection {
    Connection::connect(server.addr())
        .await
        .unwrap_or_else(|error| panic!("connecting: {error}"))
}

#[tokio::test]
async fn sqs_requests_and_routes_share_one_keep_alive_connection() {
    let server = start().await;
    let mut stream = connect(&server).await;
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
    let server = start().await;
    let mut stream = connect(&server).await;
    let body = format!(r#"{{"QueueName":"{}"}}"#, "q".repeat(2000));
    let (status, body) = exchange(&mut stream, "POST", "/", "CreateQueue", &body).await;
    assert_eq!(status, 413, "{body}");
    assert!(body.contains("at most 1024 bytes"), "{body}");
}

#[tokio::test]
async fn shutdown_closes_idle_connections_and_returns() {
    let server = start().await;
    let address = server.addr();
    let mut stream = connect(&server).await;
    let (status, _) = exchange(&mut stream, "GET", "/health", "", "").await;
    assert_eq!(status, 200);
    tokio::time::timeout(Duration::from_secs(5), server.stop())
        .await
        .expect("the server stops with an idle connection open");
    tokio::time::timeout(Duration::from_secs(5), stream.closed())
        .await
        .expect("the connection is closed");
    assert!(
        TcpStream::connect(address).await.is_err(),
        "no longer listening"
    );
}

#[tokio::test]
async fn livez_and_readyz_until_the_server_drains() {
    let server = start().await;
    let mut connection = Connection::connect(server.addr()).await.unwrap();
    assert_eq!(
        exchange(&mut connection, "GET", "/livez", "", "").await,
        (200, "ok\n".to_string())
    );
    assert_eq!(
        exchange(&mut connection, "GET", "/readyz", "", "").await,
        (200, "ok\n".to_string())
    );
    // The first step of a graceful stop: not ready any more (a load balancer stops sending),
    // still alive and answering.
    server.release_long_polls();
    let (status, text) = exchange(&mut connection, "GET", "/readyz", "", "").await;
    assert_eq!((status, text.as_str()), (503, "not ready: shutting down\n"));
    assert_eq!(
        exchange(&mut connection, "GET", "/livez", "", "").await.0,
        200
    );
    server.stop().await;
}
