//! kill -9 of the real server in the middle of a redrive (a move task), then restart: the task
//! resumes and finishes, and every message is exactly once in the source or the destination,
//! never lost, never duplicated.
//!
//! A dead-letter queue is filled with `MESSAGES` distinct bodies, a move task back to their
//! source queue is started at `RATE` messages per second, and the server is SIGKILLed twice
//! while the task runs (each time after it moved more). After each restart the task must be
//! `RUNNING` again (resumed, not lost) with at least as many messages moved as a listing
//! acknowledged before the kill. When it completes, draining both queues must give every body
//! exactly once.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use leaseq_testkit::http::Connection;
use leaseq_testkit::launch::ChildServer as Server;
use leaseq_testkit::names::ScratchDir;
use serde_json::{json, Value};

const MESSAGES: usize = 240;
const RATE: u64 = 60;
const KILLS: usize = 2;
const ARN_PREFIX: &str = "arn:aws:sqs:us-east-1:000000000000:";

async fn call(server: &Server, action: &str, body: Value) -> Value {
    let mut client = Connection::connect(server.addr()).await.expect("connect");
    client
        .call(action, &body)
        .await
        .unwrap_or_else(|error| panic!("{action}: {error}"))
}

async fn url(server: &Server, name: &str) -> String {
    call(server, "GetQueueUrl", json!({"QueueName": name})).await["QueueUrl"]
        .as_str()
        .unwrap()
        .to_string()
}

async fn count(server: &Server, name: &str) -> (u64, u64) {
    let answer = call(
        server,
        "GetQueueAttributes",
        json!({"QueueUrl": url(server, name).await, "AttributeNames": ["All"]}),
    )
    .await;
    let number = |key: &str| answer["Attributes"][key].as_str().unwrap().parse().unwrap();
    (
        number("ApproximateNumberOfMessages"),
        number("ApproximateNumberOfMessagesNotVisible"),
    )
}

async fn task(server: &Server) -> Value {
    let answer = call(
        server,
        "ListMessageMoveTasks",
        json!({"SourceArn": format!("{ARN_PREFIX}dlq"), "MaxResults": 10}),
    )
    .await;
    let results = answer["Results"].as_array().expect("Results").clone();
    assert_eq!(
        results.len(),
        1,
        "one task, never lost nor doubled: {results:?}"
    );
    results[0].clone()
}

/// Receives every message of `name` under a long lease; its bodies with their counts.
async fn drain(server: &Server, name: &str, bodies: &mut BTreeMap<String, usize>) {
    let queue_url = url(server, name).await;
    loop {
        let answer = call(
            server,
            "ReceiveMessage",
            json!({"QueueUrl": queue_url, "MaxNumberOfMessages": 10, "VisibilityTimeout": 600}),
        )
        .await;
        let messages = answer["Messages"].as_array().cloned().unwrap_or_default();
        if messages.is_empty() {
            return;
        }
        for message in messages {
            *bodies
                .entry(message["Body"].as_str().unwrap().to_string())
                .or_default() += 1;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_task_survives_kill_9_without_losing_or_duplicating() {
    // Kept if the test fails, for a look at the data and the logs.
    let scratch = ScratchDir::new(
        env!("CARGO_TARGET_TMPDIR"),
        &format!("crash-redrive-{}", std::process::id()),
    );
    let data_dir = scratch.path().join("data");
    let command = common::durable_serve(&data_dir);
    let mut server = Server::start(command, scratch.path()).await;

    call(&server, "CreateQueue", json!({"QueueName": "dlq"})).await;
    let policy = format!(r#"{{"deadLetterTargetArn":"{ARN_PREFIX}dlq","maxReceiveCount":"1"}}"#);
    call(
        &server,
        "CreateQueue",
        json!({"QueueName": "src", "Attributes": {"RedrivePolicy": policy}}),
    )
    .await;
    let src = url(&server, "src").await;
    for batch in 0..MESSAGES / 10 {
        let entries: Vec<Value> = (0..10)
            .map(|i| json!({"Id": format!("e{i}"), "MessageBody": format!("m-{}", batch * 10 + i)}))
            .collect();
        call(
            &server,
            "SendMessageBatch",
            json!({"QueueUrl": src, "Entries": entries}),
        )
        .await;
    }
    // Receive each once and release it; the next receive moves it to the dead-letter queue.
    while count(&server, "dlq").await.0 < MESSAGES as u64 {
        call(
            &server,
            "ReceiveMessage",
            json!({"QueueUrl": src, "MaxNumberOfMessages": 10, "VisibilityTimeout": 0}),
        )
        .await;
    }
    assert_eq!(count(&server, "src").await, (0, 0));

    // Peek pages through the dead-letter queue without leasing or counting anything.
    let dlq = url(&server, "dlq").await;
    let mut peeked = 0;
    let mut token: Option<String> = None;
    loop {
        let mut request = json!({"QueueUrl": dlq, "MaxNumberOfMessages": 100});
        if let Some(token) = &token {
            request["NextToken"] = json!(token);
        }
        let page = call(&server, "LeaseqPeekMessages", request).await;
        for message in page["Messages"].as_array().unwrap() {
            assert_eq!(message["Attributes"]["ApproximateReceiveCount"], "1");
            assert_eq!(
                message["Attributes"]["DeadLetterQueueSourceArn"],
                format!("{ARN_PREFIX}src")
            );
            assert_eq!(message["LeaseqState"], "READY");
            peeked += 1;
        }
        match page["NextToken"].as_str() {
            Some(next) => token = Some(next.to_string()),
            None => break,
        }
    }
    assert_eq!(peeked, MESSAGES);
    assert_eq!(count(&server, "dlq").await, (MESSAGES as u64, 0));

    call(
        &server,
        "StartMessageMoveTask",
        json!({"SourceArn": format!("{ARN_PREFIX}dlq"), "MaxNumberOfMessagesPerSecond": RATE}),
    )
    .await;
    let mut acknowledged_moved = 0;
    for kill in 0..KILLS {
        // Let it move some more, then kill it mid-task.
        let target = acknowledged_moved + 40;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let listed = task(&server).await;
            let moved = listed["ApproximateNumberOfMessagesMoved"].as_u64().unwrap();
            assert_eq!(listed["Status"], "RUNNING", "kill {kill}: {listed}");
            acknowledged_moved = moved;
            if moved >= target {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the task does not progress: {listed}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(
            acknowledged_moved < MESSAGES as u64,
            "killed too late to test anything"
        );
        server.restart().await;
        let listed = task(&server).await;
        assert_eq!(
            listed["Status"], "RUNNING",
            "resumed after kill {kill}: {listed}"
        );
        // Paused while the counts are read: a task moving meanwhile would move a message
        // between two of the reads below (each a request of its own) and make the sum short.
        let handle = json!({"TaskHandle": listed["TaskHandle"]});
        call(&server, "LeaseqPauseMessageMoveTask", handle.clone()).await;
        let listed = task(&server).await;
        let moved = listed["ApproximateNumberOfMessagesMoved"].as_u64().unwrap();
        assert!(
            moved >= acknowledged_moved,
            "the restart lost moves: {moved} < {acknowledged_moved}"
        );
        let (src_count, _) = count(&server, "src").await;
        let (dlq_count, _) = count(&server, "dlq").await;
        assert_eq!(src_count, moved, "moved messages are in the source");
        assert_eq!(
            src_count + dlq_count,
            MESSAGES as u64,
            "after kill {kill}: every message in exactly one queue"
        );
        call(&server, "LeaseqResumeMessageMoveTask", handle).await;
    }

    let deadline = Instant::now() + Duration::from_secs(60);
    let done = loop {
        let listed = task(&server).await;
        if listed["Status"] == "COMPLETED" {
            break listed;
        }
        assert_eq!(listed["Status"], "RUNNING", "{listed}");
        assert!(
            Instant::now() < deadline,
            "the task did not finish: {listed}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(done["ApproximateNumberOfMessagesMoved"], MESSAGES as u64);
    assert_eq!(done["ApproximateNumberOfMessagesToMove"], MESSAGES as u64);

    let mut bodies = BTreeMap::new();
    drain(&server, "src", &mut bodies).await;
    drain(&server, "dlq", &mut bodies).await;
    let expected: BTreeMap<String, usize> = (0..MESSAGES).map(|i| (format!("m-{i}"), 1)).collect();
    assert_eq!(bodies, expected, "every message exactly once");
}
