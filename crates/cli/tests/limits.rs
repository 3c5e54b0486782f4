//! The limits that protect the server from its clients, on the production accept loop: the
//! header read timeout closes a stalled connection (plain, and a stalled TLS handshake) and an
//! idle HTTP/2 connection (but not a busy one), the connection limit makes connections beyond
//! it wait until one closes (and `/metrics` counts them), and a crowd of slow clients
//! (slowloris: a byte a second) does not stop normal clients.
//!
//! The slow-client test runs briefly in `cargo test`; `LEASEQ_SLOW_CLIENT_SECONDS=120` (and
//! `LEASEQ_SLOW_CLIENTS=N`, default 1000) runs it longer, past the default header read timeout,
//! so the slow clients are also cut off and reconnect.

mod common;
#[path = "common/pki.rs"]
mod pki;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use leaseq_testkit::http;
use leaseq_testkit::launch::{InProcessServer, Options};
use leaseq_testkit::names::ScratchDir;
use leaseq_testkit::sdk::sdk_client;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// Reads from `stream` until the server closes it (or resets it); how long that took, or
/// `None` if it is still open after `patience`.
async fn closed_within(stream: &mut TcpStream, patience: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut buffer = [0u8; 4096];
    let closed = tokio::time::timeout(patience, async {
        loop {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                // hyper may answer a timed-out header with 408 before it closes.
                Ok(_) => continue,
            }
        }
    })
    .await;
    closed.ok().map(|()| started.elapsed())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_header_read_timeout_closes_a_stalled_connection() {
    let timeout = Duration::from_millis(500);
    let server = InProcessServer::start_with(Options {
        header_read_timeout: timeout,
        ..Options::default()
    })
    .await;
    // Half a header, then nothing.
    let mut stalled = TcpStream::connect(server.addr()).await.unwrap();
    stalled
        .write_all(b"POST / HTTP/1.1\r\nHost: localhost\r\n")
        .await
        .unwrap();
    let took = closed_within(&mut stalled, Duration::from_secs(10)).await;
    let took = took.expect("the stalled connection is closed");
    assert!(took >= timeout - Duration::from_millis(100), "{took:?}");
    // Connected and silent: closed too.
    let mut silent = TcpStream::connect(server.addr()).await.unwrap();
    assert!(closed_within(&mut silent, Duration::from_secs(10))
        .await
        .is_some());
    // A whole request in time is answered as ever.
    assert!(http::healthy(server.addr()).await);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_header_read_timeout_bounds_a_stalled_tls_handshake() {
    let dir = ScratchDir::new(env!("CARGO_TARGET_TMPDIR"), "limits-tls");
    let ca = pki::Ca::new("leaseq test CA");
    let server = InProcessServer::start_with(Options {
        tls: Some(ca.server_pair("leaseq").write(dir.path())),
        header_read_timeout: Duration::from_millis(500),
        ..Options::default()
    })
    .await;
    // The first bytes of a TLS record header (a ClientHello), then nothing.
    let mut stalled = TcpStream::connect(server.addr()).await.unwrap();
    stalled.write_all(&[0x16, 0x03, 0x01]).await.unwrap();
    assert!(closed_within(&mut stalled, Duration::from_secs(10))
        .await
        .is_some());
    // A handshake in time works; HTTP/2 negotiated, then silence (no connection preface):
    // closed too (hyper's HTTP/2 server alone would wait for the preface forever).
    let config = pki::client_config(&ca.pem(), &[b"h2"]);
    let mut silent = pki::connect(server.addr(), config).await.unwrap();
    assert_eq!(silent.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let mut buffer = [0u8; 1024];
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match silent.read(&mut buffer).await {
                Ok(0) | Err(_) => return,
                Ok(_) => continue,
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "a silent HTTP/2 connection stays open");
    server.stop().await;
}

/// An AWS JSON 1.0 request of `action` with `body`.
fn json_request(action: &str, body: &serde_json::Value) -> hyper::Request<Full<Bytes>> {
    hyper::Request::post("/")
        .header("host", "localhost")
        .header("content-type", "application/x-amz-json-1.0")
        .header("x-amz-target", format!("AmazonSQS.{action}"))
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap()
}

/// Sends `request` on an HTTP/2 connection and reads the whole answer: its status and body.
async fn exchange2(
    sender: &mut hyper::client::conn::http2::SendRequest<Full<Bytes>>,
    request: hyper::Request<Full<Bytes>>,
) -> (u16, Bytes) {
    sender.ready().await.expect("an open HTTP/2 connection");
    let response = sender.send_request(request).await.expect("an answer");
    let status = response.status().as_u16();
    (
        status,
        response.into_body().collect().await.unwrap().to_bytes(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_http2_connection_is_closed_and_a_busy_one_is_not() {
    let dir = ScratchDir::new(env!("CARGO_TARGET_TMPDIR"), "limits-h2-idle");
    let ca = pki::Ca::new("leaseq test CA");
    // Long enough that a busy machine's pause between two of the busy connection's requests
    // (a twentieth of a second apart) does not make it idle.
    let timeout = Duration::from_millis(800);
    let server = InProcessServer::start_with(Options {
        tls: Some(ca.server_pair("leaseq").write(dir.path())),
        header_read_timeout: timeout,
        ..Options::default()
    })
    .await;
    let h2 = || async {
        let config = pki::client_config(&ca.pem(), &[b"h2"]);
        let stream = pki::connect(server.addr(), config).await.unwrap();
        assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
        pki::http2(stream).await
    };
    let health = || {
        hyper::Request::get("/health")
            .body(Full::default())
            .unwrap()
    };

    // Idle from its start: the preface and settings, then no request. hyper's client answers
    // the server's pings, so only an idle timeout closes it.
    let started = Instant::now();
    let (_idle, idle_connection) = h2().await;
    // Quiet after one request.
    let (mut quiet, quiet_connection) = h2().await;
    assert_eq!(exchange2(&mut quiet, health()).await.0, 200);
    let patience = Duration::from_secs(10);
    let ended = tokio::time::timeout(patience, idle_connection).await;
    let ended = ended
        .expect("the idle HTTP/2 connection is closed")
        .unwrap();
    assert!(ended.is_ok(), "closed gracefully (GOAWAY): {ended:?}");
    let took = started.elapsed();
    assert!(took >= timeout - Duration::from_millis(50), "{took:?}");
    let ended = tokio::time::timeout(patience, quiet_connection).await;
    assert!(ended.is_ok(), "the quiet HTTP/2 connection is closed");
    assert!(
        quiet.ready().await.is_err(),
        "a closed connection takes no request"
    );

    // A busy connection stays open: a request every twentieth of a second for three
    // timeouts...
    let (mut busy, busy_connection) = h2().await;
    let busy_until = Instant::now() + 3 * timeout;
    while Instant::now() < busy_until {
        assert_eq!(exchange2(&mut busy, health()).await.0, 200);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // ...and while a long poll longer than the timeout waits, the connection is not idle: the
    // poll is answered (empty) on the same connection.
    let create = serde_json::json!({ "QueueName": "h2-idle" });
    let (status, body) = exchange2(&mut busy, json_request("CreateQueue", &create)).await;
    assert_eq!(status, 200, "{body:?}");
    let created: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let receive = serde_json::json!({
        "QueueUrl": created["QueueUrl"],
        "WaitTimeSeconds": 2,
    });
    let polled_at = Instant::now();
    let (status, body) = exchange2(&mut busy, json_request("ReceiveMessage", &receive)).await;
    assert_eq!(status, 200, "{body:?}");
    assert!(polled_at.elapsed() >= Duration::from_millis(1900));
    assert!(
        !busy_connection.is_finished(),
        "the busy connection was closed"
    );
    assert_eq!(exchange2(&mut busy, health()).await.0, 200);
    // Then, quiet, it is closed too.
    let ended = tokio::time::timeout(patience, busy_connection).await;
    assert!(ended.is_ok(), "the busy connection, once idle, is closed");
    server.stop().await;
}

/// An HTTP/2 connection whose client sends the preface and its SETTINGS and then never writes
/// again: it acknowledges neither the server's SETTINGS nor its pings, as a client that is
/// gone would not.
async fn mute_http2(addr: SocketAddr, ca: &pki::Ca) -> tokio_rustls::client::TlsStream<TcpStream> {
    let config = pki::client_config(&ca.pem(), &[b"h2"]);
    let mut stream = pki::connect(addr, config).await.unwrap();
    stream
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await
        .unwrap();
    // An empty SETTINGS frame: length 0, type 4, no flags, stream 0.
    stream
        .write_all(&[0, 0, 0, 4, 0, 0, 0, 0, 0])
        .await
        .unwrap();
    stream.flush().await.unwrap();
    stream
}

/// Reads `stream` until the server closes it; whether it did within `patience`.
async fn read_until_closed<S: tokio::io::AsyncRead + Unpin>(
    stream: &mut S,
    patience: Duration,
) -> bool {
    let mut buffer = [0u8; 4096];
    let closed = tokio::time::timeout(patience, async {
        loop {
            match stream.read(&mut buffer).await {
                // A TLS stream dropped without close_notify ends in an error.
                Ok(0) | Err(_) => return,
                Ok(_) => continue,
            }
        }
    });
    closed.await.is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_client_that_never_acknowledges_goaway_is_dropped() {
    let dir = ScratchDir::new(env!("CARGO_TARGET_TMPDIR"), "limits-h2-mute");
    let ca = pki::Ca::new("leaseq test CA");
    let (certificate, key) = ca.server_pair("leaseq").write(dir.path());
    let timeout = Duration::from_millis(500);
    let server = InProcessServer::start_with(Options {
        tls: Some((certificate.clone(), key.clone())),
        header_read_timeout: timeout,
        ..Options::default()
    })
    .await;
    // Idle: GOAWAY and a ping after the timeout, never acknowledged; dropped after the grace
    // (here the timeout again).
    let started = Instant::now();
    let mut mute = mute_http2(server.addr(), &ca).await;
    assert!(
        read_until_closed(&mut mute, Duration::from_secs(10)).await,
        "an idle HTTP/2 connection whose client does not acknowledge GOAWAY stays open"
    );
    assert!(started.elapsed() >= 2 * timeout - Duration::from_millis(50));
    server.stop().await;

    // A server stopping with such a connection open stops all the same (within the grace).
    let server = InProcessServer::start_with(Options {
        tls: Some((certificate, key)),
        ..Options::default()
    })
    .await;
    let mut mute = mute_http2(server.addr(), &ca).await;
    // The server has taken the connection (its SETTINGS come back) before it is told to stop.
    let mut buffer = [0u8; 64];
    assert!(mute.read(&mut buffer).await.unwrap() > 0);
    let stopped = tokio::time::timeout(Duration::from_secs(15), server.stop()).await;
    assert!(
        stopped.is_ok(),
        "the server waits for the mute client for ever"
    );
    assert!(read_until_closed(&mut mute, Duration::from_secs(10)).await);
}

/// Sends `GET /health` on `stream` (kept alive) and reads the answer's head; whether it came
/// within `patience`.
async fn health_on(stream: &mut TcpStream, patience: Duration) -> bool {
    stream
        .write_all(b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .await
        .unwrap();
    let mut buffer = [0u8; 1024];
    let mut got = Vec::new();
    let read = tokio::time::timeout(patience, async {
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            match stream.read(&mut buffer).await {
                Ok(0) | Err(_) => return false,
                Ok(n) => got.extend_from_slice(&buffer[..n]),
            }
        }
        true
    })
    .await;
    matches!(read, Ok(true)) && got.starts_with(b"HTTP/1.1 200")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connections_beyond_max_connections_wait_until_one_closes() {
    let server = InProcessServer::start_with(Options {
        max_connections: 2,
        ..Options::default()
    })
    .await;
    let addr = server.addr();
    let mut first = TcpStream::connect(addr).await.unwrap();
    let mut second = TcpStream::connect(addr).await.unwrap();
    assert!(health_on(&mut first, Duration::from_secs(10)).await);
    assert!(health_on(&mut second, Duration::from_secs(10)).await);
    // The kernel completes the third's TCP handshake (it waits in the listen backlog), but the
    // server does not accept it, so its request goes unanswered...
    let mut third = TcpStream::connect(addr).await.unwrap();
    assert!(!health_on(&mut third, Duration::from_millis(700)).await);
    // ...while the two served connections go on.
    assert!(health_on(&mut first, Duration::from_secs(10)).await);
    // Once one closes, the waiting one is accepted and its request (already sent) answered.
    drop(second);
    let mut buffer = [0u8; 1024];
    let answered = tokio::time::timeout(Duration::from_secs(10), third.read(&mut buffer)).await;
    let n = answered
        .expect("an answer once a connection closed")
        .unwrap();
    assert!(
        buffer[..n].starts_with(b"HTTP/1.1 200"),
        "{:?}",
        &buffer[..n]
    );
    server.stop().await;
}

/// The value of the sample `series` (no labels) on a Prometheus page.
fn sample(page: &str, series: &str) -> u64 {
    page.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("no sample {series} in\n{page}"))
}

/// `GET /metrics` on `connection`: the page.
async fn scrape(connection: &mut http::Connection) -> String {
    let answer = connection.send("GET", "/metrics", &[], b"").await.unwrap();
    assert_eq!(answer.status, 200, "{answer:?}");
    answer.text()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_open_connections_and_the_limit_reached() {
    let server = InProcessServer::start_with(Options {
        max_connections: 3,
        ..Options::default()
    })
    .await;
    let addr = server.addr();
    let mut first = TcpStream::connect(addr).await.unwrap();
    assert!(health_on(&mut first, Duration::from_secs(10)).await);
    // The scrape's own connection is open too.
    let mut scraper = http::Connection::connect(addr).await.unwrap();
    let page = scrape(&mut scraper).await;
    assert_eq!(sample(&page, "leaseq_http_connections_open"), 2, "{page}");
    assert_eq!(sample(&page, "leaseq_http_connections_max"), 3);
    assert_eq!(sample(&page, "leaseq_http_connections_accepted_total"), 2);
    assert_eq!(
        sample(&page, "leaseq_http_connection_limit_reached_total"),
        0
    );

    // Three open: the limit. A fourth connection waits in the backlog; once one closes, it
    // is accepted, and its scrape shows the limit was reached.
    let mut third = TcpStream::connect(addr).await.unwrap();
    assert!(health_on(&mut third, Duration::from_secs(10)).await);
    let waiting = tokio::spawn(async move {
        let mut waiting = http::Connection::connect(addr).await.unwrap();
        scrape(&mut waiting).await
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "the fourth connection was accepted");
    drop(third);
    let page = waiting.await.unwrap();
    assert_eq!(sample(&page, "leaseq_http_connections_open"), 3, "{page}");
    assert_eq!(sample(&page, "leaseq_http_connections_accepted_total"), 4);
    assert_eq!(
        sample(&page, "leaseq_http_connection_limit_reached_total"),
        1
    );

    // Closed connections are no longer counted (the server notices a close asynchronously).
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let page = scrape(&mut scraper).await;
        if sample(&page, "leaseq_http_connections_open") == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "{page}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    server.stop().await;
}

/// The open file limit of this process (each in-process connection costs two descriptors).
fn open_files_max() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we pass and reads nothing else.
    let status = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) };
    assert_eq!(status, 0, "getrlimit");
    limit.rlim_cur
}

fn env_number(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .map(|text| text.parse().unwrap_or_else(|_| panic!("{name}={text:?}")))
        .unwrap_or(default)
}

/// One slowloris client: a connection sending its request header a byte a second, never
/// finishing it; when the server closes it (the header read timeout), it reconnects.
async fn slow_client(addr: SocketAddr, until: Instant, closes: Arc<AtomicU64>) {
    let header = b"POST / HTTP/1.1\r\nHost: localhost\r\nX-Slow: ".repeat(8);
    'connect: while Instant::now() < until {
        let Ok(mut stream) = TcpStream::connect(addr).await else {
            tokio::time::sleep(Duration::from_secs(1)).await;
            continue;
        };
        for byte in header.iter().cycle() {
            if Instant::now() >= until {
                return;
            }
            if stream.write_all(&[*byte]).await.is_err() {
                closes.fetch_add(1, Ordering::Relaxed);
                continue 'connect;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crowd_of_slow_clients_does_not_stop_normal_clients() {
    // A thousand by default, fewer if the file limit says so (two descriptors each, in
    // process, plus room for the rest).
    let wanted = env_number("LEASEQ_SLOW_CLIENTS", 1000);
    let room = open_files_max().saturating_sub(256) / 2;
    let count = wanted.min(room);
    assert!(
        count >= 100,
        "ulimit -n is too low for this test: {}",
        open_files_max()
    );
    let seconds = env_number("LEASEQ_SLOW_CLIENT_SECONDS", 4);
    let server = InProcessServer::start().await;
    let addr = server.addr();
    let until = Instant::now() + Duration::from_secs(seconds);
    let closes = Arc::new(AtomicU64::new(0));
    let crowd: Vec<_> = (0..count)
        .map(|_| tokio::spawn(slow_client(addr, until, closes.clone())))
        .collect();

    // A normal client, meanwhile: send, receive and delete in a loop.
    let sdk = sdk_client(server.endpoint());
    let url = leaseq_testkit::sdk::create_queue(&sdk, "beside-the-crowd", &[]).await;
    let (mut rounds, mut slowest) = (0u64, Duration::ZERO);
    while Instant::now() < until {
        let started = Instant::now();
        sdk.send_message()
            .queue_url(&url)
            .message_body("normal")
            .send()
            .await
            .expect("SendMessage beside the slow clients");
        let received = sdk.receive_message().queue_url(&url).send().await.unwrap();
        let message = &received.messages.unwrap_or_default()[0];
        sdk.delete_message()
            .queue_url(&url)
            .receipt_handle(message.receipt_handle.clone().unwrap())
            .send()
            .await
            .unwrap();
        slowest = slowest.max(started.elapsed());
        rounds += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for client in crowd {
        client.await.unwrap();
    }
    eprintln!(
        "{count} slow clients for {seconds} s: {rounds} normal rounds, the slowest {slowest:?}, \
         {} slow connections closed by the server",
        closes.load(Ordering::Relaxed)
    );
    // A round is three requests of microseconds each; a second leaves room for two busy
    // shared cores, not for waiting behind the crowd.
    assert!(slowest < Duration::from_secs(1), "{slowest:?}");
    assert!(rounds >= seconds, "{rounds} rounds in {seconds} s");
    server.stop().await;
}
