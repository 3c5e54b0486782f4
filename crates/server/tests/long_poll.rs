//! Long polling through the real HTTP stack, in process: wake-ups on send, on lease expiry and
//! on delay end; waiters freed when their client disconnects; long polls released on shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use leaseq_server::clock::ManualClock;
use leaseq_testkit::http;
use leaseq_testkit::launch::{InProcessServer, Options};
use serde_json::{json, Value};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

/// A server as `leaseq serve` runs it.
struct Server {
    address: SocketAddr,
    server: InProcessServer,
    /// The service's clock: time passes only when a test advances it, so a wait that must last
    /// its full time is checked without waiting for it.
    clock: ManualClock,
}

async fn start() -> Server {
    let clock = ManualClock::new(1_000_000);
    let options = Options {
        clock: Arc::new(clock.clone()),
        ..Options::default()
    };
    let server = InProcessServer::start_with(options).await;
    Server {
        address: server.addr(),
        server,
        clock,
    }
}

/// Checks that a waiting receive has not answered: it is still counted as waiting after its
/// woken tasks, if any, had time to run.
async fn still_waiting(server: &Server, waiting: &tokio::task::JoinHandle<Value>) {
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiting.is_finished(), "answered before its time");
    assert_eq!(server.server.waiting_receives(), 1);
}

/// The bytes of one request, for a connection a test writes itself and then drops.
fn request(action: &str, body: &Value) -> Vec<u8> {
    let target = http::target(action);
    let body = body.to_string();
    http::request_bytes("POST", "/", &http::json_headers(&target), body.as_bytes())
}

/// One request on its own connection; the parsed JSON body of the answer.
async fn call(address: SocketAddr, action: &str, body: Value) -> Value {
    let target = http::target(action);
    let headers = [&[("Host", "localhost")][..], &http::json_headers(&target)].concat();
    let body = body.to_string();
    let response = http::request(address, "POST", "/", &headers, body.as_bytes()).await;
    assert_eq!(response.status, 200, "{action} failed: {response:?}");
    response.json()
}

const URL: &str = "http://localhost/000000000000/q";

async fn create_queue(server: &Server) {
    call(server.address, "CreateQueue", json!({"QueueName": "q"})).await;
}

async fn send(server: &Server, body: &str, delay_seconds: u32) {
    let request = json!({"QueueUrl": URL, "MessageBody": body, "DelaySeconds": delay_seconds});
    call(server.address, "SendMessage", request).await;
}

fn receive(server: &Server, wait_seconds: u32, visibility: u32) -> tokio::task::JoinHandle<Value> {
    let address = server.address;
    let request = json!({
        "QueueUrl": URL,
        "WaitTimeSeconds": wait_seconds,
        "VisibilityTimeout": visibility,
    });
    tokio::spawn(async move { call(address, "ReceiveMessage", request).await })
}

fn bodies(answer: &Value) -> Vec<String> {
    answer["Messages"]
        .as_array()
        .map(|messages| {
            messages
                .iter()
                .map(|m| m["Body"].as_str().unwrap().to_string())
                .collect()
        })
        .unwrap_or_default()
}

/// Waits (bounded) until `count` receives are waiting on the server.
async fn until_waiting(server: &Server, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.server.waiting_receives() != count {
        assert!(
            Instant::now() < deadline,
            "{} receives waiting, expected {count}",
            server.server.waiting_receives()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// No time passes on the service's clock: only the send can have woken the receive.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_wakes_a_waiting_receive() {
    let server = start().await;
    create_queue(&server).await;
    let waiting = receive(&server, 10, 30);
    until_waiting(&server, 1).await;
    send(&server, "wake up", 0).await;
    let answer = waiting.await.unwrap();
    assert_eq!(bodies(&answer), ["wake up"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_running_out_wakes_a_waiting_receive() {
    let server = start().await;
    create_queue(&server).await;
    send(&server, "retry me", 0).await;
    assert_eq!(bodies(&receive(&server, 0, 1).await.unwrap()), ["retry me"]);
    let waiting = receive(&server, 10, 30);
    until_waiting(&server, 1).await;
    server.clock.advance(999);
    still_waiting(&server, &waiting).await;
    server.clock.advance(1);
    let answer = waiting.await.unwrap();
    assert_eq!(bodies(&answer), ["retry me"]);
}

/// A waiting receive sleeps until the queue's next deadline as it was when it looked; a lease
/// shortened after that must wake it to look again, or the message would wait for the poll's
/// whole wait time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shortened_lease_wakes_a_waiting_receive_in_time() {
    let server = start().await;
    create_queue(&server).await;
    send(&server, "sooner", 0).await;
    let answer = receive(&server, 0, 30).await.unwrap();
    assert_eq!(bodies(&answer), ["sooner"]);
    let receipt = answer["Messages"][0]["ReceiptHandle"].clone();
    let waiting = receive(&server, 10, 30);
    until_waiting(&server, 1).await;
    let change = json!({"QueueUrl": URL, "ReceiptHandle": receipt, "VisibilityTimeout": 1});
    call(server.address, "ChangeMessageVisibility", change).await;
    still_waiting(&server, &waiting).await;
    server.clock.advance(1_000);
    let answer = waiting.await.unwrap();
    assert_eq!(bodies(&answer), ["sooner"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delay_ending_wakes_a_waiting_receive() {
    let server = start().await;
    create_queue(&server).await;
    send(&server, "later", 1).await;
    let waiting = receive(&server, 10, 30);
    until_waiting(&server, 1).await;
    server.clock.advance(999);
    still_waiting(&server, &waiting).await;
    server.clock.advance(1);
    let answer = waiting.await.unwrap();
    assert_eq!(bodies(&answer), ["later"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_wait_lasts_its_full_time() {
    let server = start().await;
    create_queue(&server).await;
    let waiting = receive(&server, 1, 30);
    until_waiting(&server, 1).await;
    server.clock.advance(999);
    still_waiting(&server, &waiting).await;
    server.clock.advance(1);
    let answer = waiting.await.unwrap();
    assert!(bodies(&answer).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_disconnects_frees_its_waiter() {
    let server = start().await;
    create_queue(&server).await;
    let mut streams = Vec::new();
    for _ in 0..50 {
        let mut stream = TcpStream::connect(server.address).await.unwrap();
        let body = json!({"QueueUrl": URL, "WaitTimeSeconds": 20});
        stream
            .write_all(&request("ReceiveMessage", &body))
            .await
            .unwrap();
        streams.push(stream);
    }
    until_waiting(&server, 50).await;
    drop(streams);
    until_waiting(&server, 0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutting_down_releases_long_polls() {
    let server = start().await;
    create_queue(&server).await;
    let waiting = receive(&server, 20, 30);
    until_waiting(&server, 1).await;
    // No time passes on the service's clock: only the release can end the wait.
    server.server.release_long_polls();
    let answer = waiting.await.unwrap();
    assert!(bodies(&answer).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_waiting_receives_each_get_one_of_many_sends() {
    let server = start().await;
    create_queue(&server).await;
    let waiting: Vec<_> = (0..100).map(|_| receive(&server, 20, 30)).collect();
    until_waiting(&server, 100).await;
    for i in 0..100 {
        send(&server, &format!("m{i}"), 0).await;
    }
    let mut received = Vec::new();
    for handle in waiting {
        received.extend(bodies(&handle.await.unwrap()));
    }
    received.sort();
    let mut expected: Vec<_> = (0..100).map(|i| format!("m{i}")).collect();
    expected.sort();
    assert_eq!(received, expected);
}
