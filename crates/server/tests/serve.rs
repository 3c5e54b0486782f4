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

/// The bound is the SQS API's: a routed path's request over it still reaches the router (as a
/// cluster's bucket calls must), here to be told its method is wrong.
#[tokio::test]
async fn a_routed_request_over_the_sqs_bound_reaches_the_router() {
    let server = start().await;
    let mut stream = connect(&server).await;
    let (status, body) = exchange(&mut stream, "POST", "/health", "", &"x".repeat(2000)).await;
    assert_eq!(status, 405, "{body}");
    let (status, body) = exchange(&mut stream, "GET", "/health", "", "").await;
    assert_eq!((status, body.as_str()), (200, "ok\n"));
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

// The HTTP/1.1 fast path (`http::h1`) and its hand-off to hyper, on raw sockets: what a client
// writes byte for byte, and what it reads back.

/// The bytes of one request on a kept-alive connection: `Host`, the headers given, and a
/// `Content-Length` for the body.
fn request(method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Vec<u8> {
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: localhost\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    head.into_bytes()
}

/// A JSON SQS request for `action` with `body`, its header names cased as `case` makes them.
fn sqs(action: &str, body: &str, case: fn(&str) -> String) -> Vec<u8> {
    let target = http::target(action);
    request(
        "POST",
        "/",
        &[
            (&case("X-Amz-Target"), &target),
            (&case("Content-Type"), "application/x-amz-json-1.0"),
        ],
        body,
    )
}

/// One response read off `stream` (buffered in `pending`): status, headers (names lowercased)
/// and body, framed by its `Content-Length`. `None` when the connection closed first.
async fn response(
    stream: &mut TcpStream,
    pending: &mut Vec<u8>,
) -> Option<(u16, Vec<(String, String)>, String)> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let head_end = loop {
        if let Some(at) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        if fill(stream, pending, deadline).await == 0 {
            return None;
        }
    };
    let head = String::from_utf8(pending[..head_end].to_vec()).unwrap();
    let mut lines = head.split("\r\n");
    let status = lines.next().unwrap();
    assert!(status.starts_with("HTTP/1.1 "), "{status}");
    let status: u16 = status[9..12].parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .filter(|line| !line.is_empty())
        .map(|line| {
            let (name, value) = line.split_once(':').unwrap();
            (name.to_ascii_lowercase(), value.trim().to_string())
        })
        .collect();
    let length: usize = headers
        .iter()
        .find(|(name, _)| name == "content-length")
        .map_or(0, |(_, value)| value.parse().unwrap());
    while pending.len() < head_end + length {
        assert!(
            fill(stream, pending, deadline).await > 0,
            "the connection closed mid-body"
        );
    }
    let body = String::from_utf8(pending[head_end..head_end + length].to_vec()).unwrap();
    pending.drain(..head_end + length);
    Some((status, headers, body))
}

/// Reads what comes next into `pending`: how much (0 when the connection closed).
async fn fill(
    stream: &mut TcpStream,
    pending: &mut Vec<u8>,
    deadline: tokio::time::Instant,
) -> usize {
    use tokio::io::AsyncReadExt as _;
    let mut chunk = [0u8; 4096];
    let n = tokio::time::timeout_at(deadline, stream.read(&mut chunk))
        .await
        .expect("an answer within 10 s")
        .unwrap_or(0);
    pending.extend_from_slice(&chunk[..n]);
    n
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(found, _)| found == name)
        .map(|(_, value)| value.as_str())
}

async fn raw_connect(server: &InProcessServer) -> TcpStream {
    let stream = TcpStream::connect(server.addr()).await.unwrap();
    // Each write goes out as written: the tests decide how a request is split.
    stream.set_nodelay(true).unwrap();
    stream
}

const SEND: &str = r#"{"QueueUrl":"http://localhost/000000000000/q","MessageBody":"hello"}"#;

/// A GetQueueAttributes of queue `q`'s message count.
fn count_request() -> Vec<u8> {
    sqs(
        "GetQueueAttributes",
        r#"{"QueueUrl":"http://localhost/000000000000/q","AttributeNames":["ApproximateNumberOfMessages"]}"#,
        str::to_string,
    )
}

/// Reads the next response off `stream`: a 200 whose body contains `expected`.
async fn answered(stream: &mut TcpStream, pending: &mut Vec<u8>, expected: &str) {
    let (status, _, body) = response(stream, pending).await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(expected), "{body}");
}

/// Requests written together are answered in order on the connection, each whole, whatever
/// the case of their header names; answers carry their length, a date and a request id.
#[tokio::test]
async fn pipelined_requests_are_answered_in_order() {
    use tokio::io::AsyncWriteExt as _;
    let server = start().await;
    let mut stream = raw_connect(&server).await;
    let mut all = sqs("CreateQueue", r#"{"QueueName":"q"}"#, str::to_string);
    all.extend(sqs("SendMessage", SEND, |name| name.to_ascii_uppercase()));
    all.extend(request("GET", "/health", &[], ""));
    all.extend(sqs("SendMessage", SEND, |name| name.to_ascii_lowercase()));
    all.extend(count_request());
    stream.write_all(&all).await.unwrap();
    let mut pending = Vec::new();
    let (status, headers, body) = response(&mut stream, &mut pending).await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("/000000000000/q"), "{body}");
    assert_eq!(
        header(&headers, "content-type"),
        Some("application/x-amz-json-1.0")
    );
    assert!(header(&headers, "date").is_some_and(|date| date.ends_with(" GMT")));
    assert_eq!(header(&headers, "x-amzn-requestid").map(str::len), Some(36));
    for expected in [
        "MD5OfMessageBody",
        "ok\n",
        "MD5OfMessageBody",
        r#""ApproximateNumberOfMessages":"2""#,
    ] {
        answered(&mut stream, &mut pending, expected).await;
    }
    assert!(pending.is_empty());
    server.stop().await;
}

/// A request that trickles in, a byte at a time, head and body, is one request.
#[tokio::test]
async fn a_request_written_a_byte_at_a_time_is_answered() {
    use tokio::io::AsyncWriteExt as _;
    let server = start().await;
    let mut stream = raw_connect(&server).await;
    let mut pending = Vec::new();
    for bytes in [
        sqs("CreateQueue", r#"{"QueueName":"q"}"#, str::to_string),
        sqs("SendMessage", SEND, str::to_string),
    ] {
        for byte in bytes {
            stream.write_all(&[byte]).await.unwrap();
        }
        let (status, _, body) = response(&mut stream, &mut pending).await.unwrap();
        assert_eq!(status, 200, "{body}");
    }
    server.stop().await;
}

/// A body that comes apart from its head (as Python's http.client writes it), and with the
/// next request behind it in the same write, is one request, and the next is answered after it.
#[tokio::test]
async fn a_body_apart_from_its_head_with_the_next_request_behind_it_is_answered() {
    use tokio::io::AsyncWriteExt as _;
    let server = start().await;
    let mut stream = raw_connect(&server).await;
    let mut pending = Vec::new();
    stream
        .write_all(&sqs("CreateQueue", r#"{"QueueName":"q"}"#, str::to_string))
        .await
        .unwrap();
    answered(&mut stream, &mut pending, "/000000000000/q").await;
    let send = sqs("SendMessage", SEND, str::to_string);
    let body_start = send.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    // The head and a few bytes of the body; then, once the server has had time to read them,
    // the rest of the body with the next request.
    stream.write_all(&send[..body_start + 5]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut rest = send[body_start + 5..].to_vec();
    rest.extend(count_request());
    stream.write_all(&rest).await.unwrap();
    answered(&mut stream, &mut pending, "MD5OfMessageBody").await;
    answered(
        &mut stream,
        &mut pending,
        r#""ApproximateNumberOfMessages":"1""#,
    )
    .await;
    assert!(pending.is_empty());
    server.stop().await;
}

/// Requests that the fast path leaves to hyper (a chunked body, `Expect: 100-continue`,
/// HTTP/1.0, a head beyond its size or line count) are answered by hyper on the same
/// connection, which then goes on answering; `Connection: close` is answered and closes.
#[tokio::test]
async fn requests_the_fast_path_leaves_are_answered_on_the_same_connection() {
    use tokio::io::AsyncWriteExt as _;
    let server = start().await;
    let create = sqs("CreateQueue", r#"{"QueueName":"q"}"#, str::to_string);
    let target = http::target("SendMessage");
    let json = ("Content-Type", "application/x-amz-json-1.0");
    let chunked = format!(
        "POST / HTTP/1.1\r\nHost: localhost\r\nX-Amz-Target: {target}\r\nContent-Type: {}\r\n\
         Transfer-Encoding: chunked\r\n\r\n{:x}\r\n{SEND}\r\n0\r\n\r\n",
        json.1,
        SEND.len()
    );
    let long_value = "v".repeat(20 * 1024);
    let many: Vec<(String, String)> = (0..60)
        .map(|i| (format!("x-extra-{i}"), i.to_string()))
        .collect();
    let mut many_headers: Vec<(&str, &str)> = vec![("X-Amz-Target", &target), json];
    many_headers.extend(many.iter().map(|(n, v)| (n.as_str(), v.as_str())));
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("chunked", chunked.into_bytes()),
        (
            "a long head",
            request(
                "POST",
                "/",
                &[("X-Amz-Target", &target), json, ("X-Long", &long_value)],
                SEND,
            ),
        ),
        (
            "many header lines",
            request("POST", "/", &many_headers, SEND),
        ),
    ];
    for (what, bytes) in cases {
        let mut stream = raw_connect(&server).await;
        let mut pending = Vec::new();
        stream.write_all(&create).await.unwrap();
        let (status, _, body) = response(&mut stream, &mut pending).await.unwrap();
        assert_eq!(status, 200, "{what}: {body}");
        // The request hyper answers, and one after it on the same connection.
        stream.write_all(&bytes).await.unwrap();
        let (status, _, body) = response(&mut stream, &mut pending).await.unwrap();
        assert_eq!(status, 200, "{what}: {body}");
        assert!(body.contains("MD5OfMessageBody"), "{what}: {body}");
        stream
            .write_all(&sqs("SendMessage", SEND, str::to_string))
            .await
            .unwrap();
        let (status, _, body) = response(&mut stream, &mut pending).await.unwrap();
        assert_eq!(status, 200, "{what}, after: {body}");
    }

    // `Expect: 100-continue`: hyper says continue once the body is wanted.
    let mut stream = raw_connect(&server).await;
    let head = format!(
        "POST / HTTP/1.1\r\nHost: localhost\r\nX-Amz-Target: {target}\r\nContent-Type: {}\r\n\
         Expect: 100-continue\r\nContent-Length: {}\r\n\r\n",
        json.1,
        SEND.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut pending = Vec::new();
    let (status, _, _) = response(&mut stream, &mut pending).await.unwrap();
    assert_eq!(status, 100);
    stream.write_all(SEND.as_bytes()).await.unwrap();
    let (status, _, body) = response(&mut stream, &mut pending).await.unwrap();
    assert_eq!(status, 200, "{body}");

    // HTTP/1.0 and an invalid head: hyper's answers.
    let mut stream = raw_connect(&server).await;
    let mut old = sqs("SendMessage", SEND, str::to_string);
    old[b"POST / HTTP/1.1".len() - 1] = b'0';
    stream.write_all(&old).await.unwrap();
    let mut pending = Vec::new();
    let mut read = Vec::new();
    tokio::io::AsyncReadExt::read_to_end(&mut stream, &mut read)
        .await
        .unwrap();
    let text = String::from_utf8_lossy(&read);
    assert!(text.starts_with("HTTP/1.0 200 OK\r\n"), "{text}");
    let mut stream = raw_connect(&server).await;
    stream
        .write_all(b"POST / HTTP/1.1\r\nBad Header\r\n\r\n")
        .await
        .unwrap();
    let (status, _, _) = response(&mut stream, &mut pending).await.unwrap();
    assert_eq!(status, 400);

    // `Connection: close`: answered, then closed.
    let mut stream = raw_connect(&server).await;
    let close = request("GET", "/health", &[("Connection", "close")], "");
    stream.write_all(&close).await.unwrap();
    let mut pending = Vec::new();
    let (status, headers, _) = response(&mut stream, &mut pending).await.unwrap();
    assert_eq!(
        (status, header(&headers, "connection")),
        (200, Some("close"))
    );
    assert!(response(&mut stream, &mut pending).await.is_none());
    server.stop().await;
}

/// The header read timeout runs from each answer's end, not from the connection's start: a
/// connection that keeps asking within it stays open, and one that stops is closed after it.
#[tokio::test]
async fn the_header_read_timeout_runs_from_each_answer() {
    use tokio::io::AsyncWriteExt as _;
    let timeout = Duration::from_millis(600);
    let server = InProcessServer::start_with(Options {
        header_read_timeout: timeout,
        ..Options::default()
    })
    .await;
    let mut stream = raw_connect(&server).await;
    let mut pending = Vec::new();
    let health = request("GET", "/health", &[], "");
    // Four requests 400 ms apart: the last comes well after the first timeout would have
    // ended, each within the timeout of the answer before.
    for _ in 0..4 {
        stream.write_all(&health).await.unwrap();
        let (status, _, _) = response(&mut stream, &mut pending).await.unwrap();
        assert_eq!(status, 200);
        tokio::time::sleep(Duration::from_millis(400)).await;
    }
    let answered = tokio::time::Instant::now() - Duration::from_millis(400);
    assert!(
        response(&mut stream, &mut pending).await.is_none(),
        "closed"
    );
    let idle = answered.elapsed();
    assert!(idle >= timeout - Duration::from_millis(50), "{idle:?}");
    server.stop().await;
}
