//! The dashboard's JSON routes under `/api/queues/{name}/` through the real HTTP stack, in
//! process: peek (`GET .../peek`) leases nothing; a redrive (`POST .../redrives`) moves messages
//! back to their source and can be listed and cancelled; a message's history
//! (`GET .../messages/{id}/history`) shows each attempt with the client that made it, for live,
//! dead-lettered and deleted messages; bad input gets a JSON error with a clear status, and a
//! POST that is not JSON (what a cross-site form sends) is refused; a fair queue lists its noisy
//! tenants, and a message waiting out its redelivery backoff shows when it is visible again.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use leaseq_testkit::http;
use leaseq_testkit::launch::{InProcessServer, ACCOUNT_ID as ACCOUNT};
use serde_json::{json, Value};

/// A server as `leaseq serve` runs it (dashboard routes, move driver), with the connection's
/// address: attempts record their client. It stops when the returned server is dropped.
async fn start() -> (SocketAddr, InProcessServer) {
    let server = InProcessServer::start().await;
    (server.addr(), server)
}

/// One request on its own connection: the status and the body (JSON, or `Null` if it is not).
async fn request(
    address: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, Value) {
    let headers = [&[("Host", "localhost")][..], headers].concat();
    let response = http::request(address, method, path, &headers, body.as_bytes()).await;
    let answer = serde_json::from_slice(&response.body).unwrap_or(Value::Null);
    (response.status, answer)
}

async fn get(address: SocketAddr, path: &str) -> (u16, Value) {
    request(address, "GET", path, &[], "").await
}

async fn post_json(address: SocketAddr, path: &str, body: Value) -> (u16, Value) {
    let headers = [("Content-Type", "application/json")];
    request(address, "POST", path, &headers, &body.to_string()).await
}

/// An SQS JSON action; panics unless it succeeds.
async fn sqs(address: SocketAddr, action: &str, body: Value) -> Value {
    sqs_as(address, "dashboard-test", action, body).await
}

/// An SQS JSON action sent with `User-Agent: user_agent`; panics unless it succeeds.
async fn sqs_as(address: SocketAddr, user_agent: &str, action: &str, body: Value) -> Value {
    let target = format!("AmazonSQS.{action}");
    let headers = [
        ("X-Amz-Target", target.as_str()),
        ("Content-Type", "application/x-amz-json-1.0"),
        ("User-Agent", user_agent),
    ];
    let (status, answer) = request(address, "POST", "/", &headers, &body.to_string()).await;
    assert_eq!(status, 200, "{action} failed: {answer}");
    answer
}

fn url(queue: &str) -> String {
    format!("http://localhost/{ACCOUNT}/{queue}")
}

/// Creates `dlq` and `source` (whose messages go to `dlq` after one receive).
async fn create_pair(address: SocketAddr, source: &str, dlq: &str) {
    sqs(address, "CreateQueue", json!({"QueueName": dlq})).await;
    let policy = json!({
        "deadLetterTargetArn": format!("arn:aws:sqs:us-east-1:{ACCOUNT}:{dlq}"),
        "maxReceiveCount": 1,
    });
    let attributes = json!({"RedrivePolicy": policy.to_string()});
    let request = json!({"QueueName": source, "Attributes": attributes});
    sqs(address, "CreateQueue", request).await;
}

/// Sends `body` to `source` and fails it at once with `reason`: it lands in the dead-letter
/// queue. Returns its message id.
async fn send_and_fail(address: SocketAddr, source: &str, body: &str, reason: &str) -> String {
    let request = json!({"QueueUrl": url(source), "MessageBody": body});
    let id = sqs(address, "SendMessage", request).await["MessageId"]
        .as_str()
        .unwrap()
        .to_string();
    let received = sqs(address, "ReceiveMessage", json!({"QueueUrl": url(source)})).await;
    let message = &received["Messages"][0];
    assert_eq!(message["MessageId"], id.as_str());
    let fail = json!({
        "QueueUrl": url(source),
        "ReceiptHandle": message["ReceiptHandle"],
        "Reason": reason,
    });
    sqs(address, "LeaseqFailMessage", fail).await;
    id
}

/// `(visible, in_flight)` of a queue, from the dashboard's `/api/queues`.
async fn counts(address: SocketAddr, queue: &str) -> (u64, u64) {
    let (status, api) = get(address, "/api/queues").await;
    assert_eq!(status, 200);
    let entry = api["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|entry| entry["name"] == queue)
        .unwrap_or_else(|| panic!("{queue} missing from {api}"));
    (
        entry["visible"].as_u64().unwrap(),
        entry["in_flight"].as_u64().unwrap(),
    )
}

fn error_code(answer: &Value) -> &str {
    answer["error"]["code"].as_str().unwrap_or("(none)")
}

fn error_message(answer: &Value) -> &str {
    answer["error"]["message"].as_str().unwrap_or("(none)")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peek_shows_dead_letters_without_leasing_them() {
    let (address, _server) = start().await;
    create_pair(address, "jobs", "jobs-dlq").await;
    // One message dead-lettered by its receive count: received once, then the next receive
    // moves it instead of delivering it again.
    let request = json!({"QueueUrl": url("jobs"), "MessageBody": "job-1"});
    let counted = sqs(address, "SendMessage", request).await["MessageId"]
        .as_str()
        .unwrap()
        .to_string();
    let release = json!({"QueueUrl": url("jobs"), "VisibilityTimeout": 0});
    let first = sqs(address, "ReceiveMessage", release.clone()).await;
    assert_eq!(first["Messages"][0]["MessageId"], counted.as_str());
    let second = sqs(address, "ReceiveMessage", release).await;
    assert!(second["Messages"].as_array().is_none_or(Vec::is_empty));
    // One failed at once with a reason, with a body longer than a peek shows (two bytes a
    // character, so the cut must fall on a character boundary).
    let long_body = "é".repeat(700);
    let failed = send_and_fail(address, "jobs", &long_body, "cannot parse").await;

    let (status, peek) = get(address, "/api/queues/jobs-dlq/peek?max=10").await;
    assert_eq!(status, 200, "{peek}");
    assert_eq!(peek["queue"], "jobs-dlq");
    let messages = peek["messages"].as_array().unwrap();
    assert_eq!(messages.len(), 2, "{peek}");
    assert_eq!(messages[0]["message_id"], counted.as_str());
    assert_eq!(messages[0]["body"], "job-1");
    assert_eq!(messages[0]["body_truncated"], false);
    assert_eq!(messages[0]["failure_reason"], Value::Null);
    assert_eq!(messages[0]["source_queue"], "jobs");
    assert_eq!(messages[0]["receive_count"], 1);
    assert_eq!(messages[0]["state"], "ready");
    assert!(messages[0]["sent_at_ms"].as_u64().unwrap() > 0);
    assert_eq!(messages[1]["message_id"], failed.as_str());
    assert_eq!(messages[1]["failure_reason"], "cannot parse");
    assert_eq!(messages[1]["source_queue"], "jobs");
    assert_eq!(messages[1]["body"], "é".repeat(512));
    assert_eq!(messages[1]["body_bytes"], 1400);
    assert_eq!(messages[1]["body_truncated"], true);
    assert_eq!(peek["next_after"], Value::Null, "the page was not full");

    // Nothing was leased: both are still visible, and a second peek sees the same.
    assert_eq!(counts(address, "jobs-dlq").await, (2, 0));
    let (_, again) = get(address, "/api/queues/jobs-dlq/peek").await;
    assert_eq!(again["messages"], peek["messages"]);

    // Pages: `max` messages, then from `after` on.
    let (_, page) = get(address, "/api/queues/jobs-dlq/peek?max=1").await;
    assert_eq!(page["messages"].as_array().unwrap().len(), 1);
    assert_eq!(page["messages"][0]["message_id"], counted.as_str());
    let after = page["next_after"].as_u64().expect("a full page has a next");
    let path = format!("/api/queues/jobs-dlq/peek?max=1&after={after}");
    let (_, page) = get(address, &path).await;
    assert_eq!(page["messages"][0]["message_id"], failed.as_str());
}

/// Polls the queue's tasks (bounded) until the newest is no longer active; returns it.
async fn until_stopped(address: SocketAddr, queue: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, list) = get(address, &format!("/api/queues/{queue}/redrives")).await;
        assert_eq!(status, 200, "{list}");
        let newest = list["tasks"][0].clone();
        if newest["active"] == false {
            return newest;
        }
        assert!(Instant::now() < deadline, "still active: {list}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redrive_moves_messages_back_and_can_be_cancelled() {
    let (address, _server) = start().await;
    create_pair(address, "orders", "orders-dlq").await;
    for i in 0..3 {
        send_and_fail(address, "orders", &format!("order-{i}"), "flaky").await;
    }
    assert_eq!(counts(address, "orders").await, (0, 0));
    assert_eq!(counts(address, "orders-dlq").await, (3, 0));
    let (status, list) = get(address, "/api/queues/orders-dlq/redrives").await;
    assert_eq!((status, list["tasks"].clone()), (200, json!([])));

    // A slow redrive (one message a second), cancelled while it runs.
    let (status, started) = post_json(
        address,
        "/api/queues/orders-dlq/redrives",
        json!({"rate_per_second": 1}),
    )
    .await;
    assert_eq!(status, 200, "{started}");
    let task = &started["task"];
    assert_eq!(task["rate_per_second"], 1);
    assert_eq!(task["destination"], Value::Null, "back to the sources");
    assert_eq!(task["to_move"], 3);
    assert_eq!(task["active"], true);
    let task_id = task["task_id"].as_u64().unwrap();
    let (_, list) = get(address, "/api/queues/orders-dlq/redrives").await;
    assert_eq!(list["tasks"][0]["task_id"], task_id);
    // Only one active task per source.
    let (status, second) = post_json(address, "/api/queues/orders-dlq/redrives", json!({})).await;
    assert_eq!(status, 400, "{second}");
    assert!(
        error_message(&second).contains("already a task running"),
        "{second}"
    );

    let cancel = format!("/api/queues/orders-dlq/redrives/{task_id}/cancel");
    let (status, cancelled) = post_json(address, &cancel, json!({})).await;
    assert_eq!(status, 200, "{cancelled}");
    assert_eq!(cancelled["task"]["status"], "CANCELLED");
    assert_eq!(cancelled["task"]["active"], false);
    let moved = cancelled["task"]["moved"].as_u64().unwrap();
    assert!(moved < 3, "{cancelled}");
    // A stopped task cannot be cancelled again.
    let (status, again) = post_json(address, &cancel, json!({})).await;
    assert_eq!(status, 400, "{again}");

    // The rest, at the automatic rate (an empty body is `{}`).
    let headers = [("Content-Type", "application/json")];
    let path = "/api/queues/orders-dlq/redrives";
    let (status, started) = request(address, "POST", path, &headers, "").await;
    assert_eq!(status, 200, "{started}");
    assert_eq!(started["task"]["rate_per_second"], Value::Null);
    let done = until_stopped(address, "orders-dlq").await;
    assert_eq!(done["status"], "COMPLETED", "{done}");
    assert_eq!(done["moved"].as_u64().unwrap() + moved, 3, "{done}");
    assert_eq!(counts(address, "orders").await, (3, 0));
    assert_eq!(counts(address, "orders-dlq").await, (0, 0));
    let (_, list) = get(address, "/api/queues/orders-dlq/redrives").await;
    assert_eq!(list["tasks"].as_array().unwrap().len(), 2, "{list}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_a_json_error() {
    let (address, _server) = start().await;
    create_pair(address, "mail", "mail-dlq").await;

    for path in [
        "/api/queues/nope/peek",
        "/api/queues/nope/redrives",
        "/api/queues/mail-dlq/redrives/99/cancel",
    ] {
        let (status, answer) = if path.ends_with("cancel") {
            post_json(address, path, json!({})).await
        } else {
            get(address, path).await
        };
        // A missing queue has SQS's code; the missing task of an existing queue is a
        // missing resource, as ListMessageMoveTasks and CancelMessageMoveTask call it.
        let code = if path.contains("nope") {
            "QueueDoesNotExist"
        } else {
            "ResourceNotFoundException"
        };
        assert_eq!((status, error_code(&answer)), (404, code), "{path}");
    }
    let (_, answer) = get(address, "/api/queues/nope/peek").await;
    assert_eq!(error_message(&answer), "There is no queue named nope.");
    let (status, answer) = post_json(address, "/api/queues/nope/redrives", json!({})).await;
    assert_eq!(
        (status, error_message(&answer)),
        (404, "There is no queue named nope.")
    );

    for max in ["0", "101", "ten", "-1", ""] {
        let (status, answer) = get(address, &format!("/api/queues/mail-dlq/peek?max={max}")).await;
        assert_eq!(status, 400, "max={max}: {answer}");
        assert!(
            error_message(&answer).contains("max must be a whole number from 1 to 100"),
            "{answer}"
        );
    }
    let (status, answer) = get(address, "/api/queues/mail-dlq/peek?after=x").await;
    assert_eq!(status, 400, "{answer}");

    let start = "/api/queues/mail-dlq/redrives";
    for rate in [json!(0), json!(501), json!("fast"), json!(1.5)] {
        let (status, answer) = post_json(address, start, json!({"rate_per_second": rate})).await;
        assert_eq!(status, 400, "rate {rate}: {answer}");
        assert!(
            error_message(&answer).contains("rate_per_second"),
            "{answer}"
        );
    }
    let (status, answer) = post_json(address, start, json!({"destination": "mail"})).await;
    assert_eq!(status, 400, "{answer}");
    let (status, answer) = post_json(address, start, json!([1])).await;
    assert_eq!(status, 400, "{answer}");
    let headers = [("Content-Type", "application/json")];
    let (status, answer) = request(address, "POST", start, &headers, "{rate").await;
    assert_eq!(status, 400, "{answer}");
    assert!(
        error_message(&answer).contains("not valid JSON"),
        "{answer}"
    );

    // A queue that is no queue's dead-letter queue cannot be redriven.
    let (status, answer) = post_json(address, "/api/queues/mail/redrives", json!({})).await;
    assert_eq!(status, 400, "{answer}");
    assert!(
        error_message(&answer).contains("Dead Letter Queue"),
        "{answer}"
    );

    let cancel = "/api/queues/mail-dlq/redrives/first/cancel";
    let (status, answer) = post_json(address, cancel, json!({})).await;
    assert_eq!(status, 400, "{answer}");
    assert!(error_message(&answer).contains("not a task id"), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_that_a_cross_site_form_could_send_is_refused() {
    let (address, _server) = start().await;
    create_pair(address, "web", "web-dlq").await;
    send_and_fail(address, "web", "page-1", "404").await;
    let start = "/api/queues/web-dlq/redrives";
    // What an HTML form can send without a preflight: none of it starts a redrive.
    for content_type in [
        Some("application/x-www-form-urlencoded"),
        Some("text/plain"),
        Some("multipart/form-data; boundary=x"),
        None,
    ] {
        let headers: Vec<(&str, &str)> = content_type
            .map(|value| vec![("Content-Type", value)])
            .unwrap_or_default();
        let (status, answer) = request(address, "POST", start, &headers, "{}").await;
        assert_eq!(status, 415, "{content_type:?}: {answer}");
        assert_eq!(error_code(&answer), "UnsupportedOperation");
    }
    let (_, list) = get(address, start).await;
    assert_eq!(list["tasks"], json!([]), "no task was started");
    let headers = [("Content-Type", "text/plain")];
    let cancel = "/api/queues/web-dlq/redrives/1/cancel";
    let (status, _) = request(address, "POST", cancel, &headers, "{}").await;
    assert_eq!(status, 415);
    // The JSON type with parameters is JSON.
    let headers = [("Content-Type", "application/json; charset=utf-8")];
    let (status, answer) = request(address, "POST", start, &headers, "{}").await;
    assert_eq!(status, 200, "{answer}");
}

/// `GET /api/queues/{queue}/messages/{id}/history`; panics unless it answers 200.
async fn history(address: SocketAddr, queue: &str, id: &str) -> Value {
    let path = format!("/api/queues/{queue}/messages/{id}/history");
    let (status, answer) = get(address, &path).await;
    assert_eq!(status, 200, "{path}: {answer}");
    answer
}

/// Receives one message of `queue` as `user_agent`; returns its receipt handle.
async fn receive_as(address: SocketAddr, user_agent: &str, queue: &str, lease_s: u32) -> String {
    let request = json!({"QueueUrl": url(queue), "VisibilityTimeout": lease_s});
    let received = sqs_as(address, user_agent, "ReceiveMessage", request).await;
    received["Messages"][0]["ReceiptHandle"]
        .as_str()
        .unwrap_or_else(|| panic!("nothing received: {received}"))
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_shows_each_attempt_and_its_client() {
    let (address, _server) = start().await;
    sqs(address, "CreateQueue", json!({"QueueName": "tasks"})).await;
    let request = json!({"QueueUrl": url("tasks"), "MessageBody": "task-1"});
    let id = sqs(address, "SendMessage", request).await["MessageId"]
        .as_str()
        .unwrap()
        .to_string();
    let sent = history(address, "tasks", &id).await;
    assert_eq!(sent["state"], "ready", "{sent}");
    assert_eq!(sent["receive_count"], 0);
    assert_eq!(sent["first_received_at_ms"], Value::Null);
    assert_eq!(sent["attempts"], json!([]));

    // Attempt 1 runs out at once; attempt 2 is handed back (visibility 0); attempt 3 holds its
    // lease and extends it once.
    receive_as(address, "worker-a/1.0", "tasks", 0).await;
    let receipt = receive_as(address, "worker-b/2.0", "tasks", 30).await;
    let change = |receipt: &str, seconds: u32| json!({"QueueUrl": url("tasks"), "ReceiptHandle": receipt, "VisibilityTimeout": seconds});
    sqs(address, "ChangeMessageVisibility", change(&receipt, 0)).await;
    let receipt = receive_as(address, "worker-c/3.0", "tasks", 30).await;
    sqs(address, "ChangeMessageVisibility", change(&receipt, 600)).await;

    let live = history(address, "tasks", &id).await;
    assert_eq!(live["queue"], "tasks");
    assert_eq!(live["message_id"], id.as_str());
    assert_eq!(live["state"], "in-flight", "{live}");
    assert_eq!(live["receive_count"], 3);
    assert_eq!(live["source_queue"], Value::Null);
    assert_eq!(live["deleted_at_ms"], Value::Null);
    let sent_at_ms = live["sent_at_ms"].as_u64().unwrap();
    let attempts = live["attempts"].as_array().unwrap();
    let summary: Vec<(u64, &str, &str)> = attempts
        .iter()
        .map(|a| {
            (
                a["attempt"].as_u64().unwrap(),
                a["outcome"].as_str().unwrap(),
                a["user_agent"].as_str().unwrap_or("(none)"),
            )
        })
        .collect();
    assert_eq!(
        summary,
        [
            (1, "expired", "worker-a/1.0"),
            (2, "released", "worker-b/2.0"),
            (3, "leased", "worker-c/3.0"),
        ],
        "{live}"
    );
    assert_eq!(live["first_received_at_ms"], attempts[0]["received_at_ms"]);
    for attempt in attempts {
        assert!(attempt["received_at_ms"].as_u64().unwrap() >= sent_at_ms);
        let client = attempt["client_address"].as_str().unwrap();
        assert!(client.starts_with("127.0.0.1:"), "{attempt}");
    }
    assert!(attempts[0]["ended_at_ms"].as_u64().is_some(), "ended");
    assert_eq!(attempts[1]["extensions"], 0);
    let current = &attempts[2];
    assert_eq!(current["ended_at_ms"], Value::Null, "the lease is current");
    assert_eq!(current["extensions"], 1);
    let first_deadline_ms = current["first_deadline_ms"].as_u64().unwrap();
    let deadline_ms = current["deadline_ms"].as_u64().unwrap();
    let received_at_ms = current["received_at_ms"].as_u64().unwrap();
    assert!(first_deadline_ms >= received_at_ms + 30_000, "{current}");
    assert!(deadline_ms >= first_deadline_ms + 500_000, "{current}");

    // Once deleted, the message is still found (among the recently deleted), as such.
    let delete = json!({"QueueUrl": url("tasks"), "ReceiptHandle": receipt});
    sqs(address, "DeleteMessage", delete).await;
    let deleted = history(address, "tasks", &id).await;
    assert_eq!(deleted["state"], "deleted", "{deleted}");
    assert!(deleted["deleted_at_ms"].as_u64().unwrap() >= received_at_ms);
    assert_eq!(deleted["receive_count"], 3);
    assert_eq!(deleted["attempts"][2]["outcome"], "deleted", "{deleted}");
    assert_eq!(deleted["attempts"][2]["user_agent"], "worker-c/3.0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_of_a_dead_letter_names_its_source_and_failure() {
    let (address, _server) = start().await;
    create_pair(address, "jobs", "jobs-dlq").await;
    let id = send_and_fail(address, "jobs", "job-1", "cannot parse").await;

    let dead = history(address, "jobs-dlq", &id).await;
    assert_eq!(dead["state"], "ready", "{dead}");
    assert_eq!(dead["source_queue"], "jobs", "a name, not an ARN");
    assert_eq!(dead["failure_reason"], "cannot parse");
    assert_eq!(dead["receive_count"], 1);
    let dead_lettered_at_ms = dead["dead_lettered_at_ms"].as_u64().unwrap();
    let attempts = dead["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 1, "{dead}");
    assert_eq!(attempts[0]["outcome"], "failed");
    assert_eq!(attempts[0]["ended_at_ms"], dead_lettered_at_ms);
    assert_eq!(attempts[0]["user_agent"], "dashboard-test");
    // It left its source queue.
    let path = format!("/api/queues/jobs/messages/{id}/history");
    let (status, answer) = get(address, &path).await;
    assert_eq!(
        (status, error_code(&answer)),
        (404, "ResourceNotFoundException"),
        "{answer}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_of_a_missing_message_or_queue_is_a_json_error() {
    let (address, _server) = start().await;
    sqs(address, "CreateQueue", json!({"QueueName": "mail"})).await;
    let unknown = "6f1c2a9e-0000-4000-8000-000000000001";

    let path = format!("/api/queues/mail/messages/{unknown}/history");
    let (status, answer) = get(address, &path).await;
    assert_eq!(
        (status, error_code(&answer)),
        (404, "ResourceNotFoundException"),
        "{answer}"
    );
    let message = error_message(&answer);
    assert!(
        message.contains(unknown) && message.contains("has no message"),
        "the answer names the message, not the queue: {message}"
    );

    let path = format!("/api/queues/nope/messages/{unknown}/history");
    let (status, answer) = get(address, &path).await;
    assert_eq!(
        (status, error_message(&answer)),
        (404, "There is no queue named nope.")
    );

    for bad in ["not-a-uuid", "123", "6f1c2a9e-0000-4000-8000"] {
        let path = format!("/api/queues/mail/messages/{bad}/history");
        let (status, answer) = get(address, &path).await;
        assert_eq!(status, 400, "{bad}: {answer}");
        assert_eq!(error_code(&answer), "InvalidParameterValueException");
        assert!(
            error_message(&answer).contains("is not a message id"),
            "{answer}"
        );
    }
}

/// A fair queue's noisy tenants are in `GET /api/queues` (the dashboard's per-queue panel), and
/// a message waiting out its redelivery backoff shows as delayed with the time it is visible
/// again, in its history and in a peek.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn noisy_tenants_and_backoff_waits_are_shown() {
    let (address, _server) = start().await;
    let attributes = json!({
        "LeaseqFairInFlightMin": "2",
        "LeaseqRedeliveryBackoff": "1h releases",
    });
    let create = json!({"QueueName": "tenants", "Attributes": attributes});
    sqs(address, "CreateQueue", create).await;
    sqs(address, "CreateQueue", json!({"QueueName": "plain"})).await;
    let mut ids = Vec::new();
    for (body, group) in [("b1", "big"), ("b2", "big"), ("b3", "big"), ("s1", "small")] {
        let request =
            json!({"QueueUrl": url("tenants"), "MessageBody": body, "MessageGroupId": group});
        let sent = sqs(address, "SendMessage", request).await;
        ids.push(sent["MessageId"].as_str().unwrap().to_string());
    }
    let receipt = receive_as(address, "dashboard-test", "tenants", 600).await;
    receive_as(address, "dashboard-test", "tenants", 600).await;
    let (status, answer) = get(address, "/api/queues").await;
    assert_eq!(status, 200, "{answer}");
    let queue = |name: &str| {
        answer["queues"]
            .as_array()
            .unwrap()
            .iter()
            .find(|queue| queue["name"] == name)
            .unwrap_or_else(|| panic!("{name} listed: {answer}"))
            .clone()
    };
    assert_eq!(
        queue("tenants")["noisy_tenants"],
        json!([{"group_id": "big", "in_flight": 2, "ready": 1, "delayed": 0}]),
        "{answer}"
    );
    assert_eq!(queue("plain")["noisy_tenants"], Value::Null, "{answer}");

    // A release waits out the first delay (an hour) with "releases".
    let before_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let release =
        json!({"QueueUrl": url("tenants"), "ReceiptHandle": receipt, "VisibilityTimeout": 0});
    sqs(address, "ChangeMessageVisibility", release).await;
    let waiting = history(address, "tenants", &ids[0]).await;
    assert_eq!(waiting["state"], "delayed", "{waiting}");
    let visible_at_ms = waiting["visible_at_ms"].as_u64().expect("a visible time");
    assert!(
        (before_ms + 3_600_000..before_ms + 3_660_000).contains(&visible_at_ms),
        "{visible_at_ms} is about an hour after {before_ms}"
    );
    let (status, peeked) = get(address, "/api/queues/tenants/peek?max=10").await;
    assert_eq!(status, 200, "{peeked}");
    let entry = &peeked["messages"][0];
    assert_eq!(entry["message_id"], ids[0].as_str(), "{peeked}");
    assert_eq!(entry["state"], "delayed", "{peeked}");
    assert_eq!(entry["visible_at_ms"], visible_at_ms, "{peeked}");
}
