//! A node of several buckets on the PostgreSQL log (`--postgres-buckets`), restarted: the
//! messages of every bucket, and a dead letter caught between two buckets (its source recorded
//! it in its outbox, its target has not answered yet), are there exactly once after the
//! restart, and the transfer completes exactly once after it; a queue placed in its dead-letter
//! queue's bucket stays there, and a node fenced out places nothing. On the machine's PostgreSQL
//! (`LEASEQ_TEST_POSTGRES`), in a schema of the test's own, dropped at the end.

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use leaseq_core::bucket_of;
use leaseq_postgres::{drop_schema, open_service, PgConfig};
use leaseq_server::{Api as _, Service};
use serde_json::{json, Value};

use common::{call, connection, service_config};

const BUCKETS: u32 = 7;
/// Messages sent to each queue.
const PER_QUEUE: usize = 3;
/// How long the transfer may take once the restarted node drives it.
const TRANSFER_MAX: Duration = Duration::from_secs(10);

/// The test's schema, dropped when the test ends (passed or failed).
struct TestSchema(PgConfig);

impl Drop for TestSchema {
    fn drop(&mut self) {
        let _ = drop_schema(&self.0.connection, &self.0.schema);
    }
}

fn url(queue: &str) -> String {
    format!("http://127.0.0.1:9324/000000000000/{queue}")
}

fn open(config: &PgConfig) -> Service {
    tokio::task::block_in_place(|| open_service(config, service_config(), 64 << 20)).unwrap()
}

/// The queue's visible and in-flight messages together.
async fn count(service: &Service, queue: &str) -> usize {
    let attributes = json!({"QueueUrl": url(queue), "AttributeNames": ["All"]});
    let answer = call(service, "GetQueueAttributes", attributes)
        .await
        .unwrap();
    let number = |name: &str| -> usize {
        answer["Attributes"][name]
            .as_str()
            .unwrap()
            .parse()
            .unwrap()
    };
    number("ApproximateNumberOfMessages") + number("ApproximateNumberOfMessagesNotVisible")
}

/// Every body in the queue with how often it came (long leases, until a receive is empty).
async fn drain(service: &Service, queue: &str) -> HashMap<String, usize> {
    let mut bodies = HashMap::new();
    loop {
        let receive =
            json!({"QueueUrl": url(queue), "MaxNumberOfMessages": 10, "VisibilityTimeout": 600});
        let answer = call(service, "ReceiveMessage", receive).await.unwrap();
        let Some(messages) = answer["Messages"].as_array().filter(|m| !m.is_empty()) else {
            return bodies;
        };
        for message in messages {
            let body = message["Body"].as_str().unwrap().to_string();
            *bodies.entry(body).or_default() += 1;
        }
    }
}

async fn receive_one(service: &Service, queue: &str) -> Option<Value> {
    // VisibilityTimeout 0: the message is visible again at once, so the next receive counts
    // as its next attempt without waiting.
    let receive = json!({"QueueUrl": url(queue), "MaxNumberOfMessages": 1, "VisibilityTimeout": 0});
    let answer = call(service, "ReceiveMessage", receive).await.unwrap();
    answer["Messages"]
        .as_array()
        .and_then(|m| m.first().cloned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_of_every_bucket_and_a_transfer_in_flight_survive_a_restart_once() {
    let mut config = PgConfig::new(connection("leaseq_buckets"));
    config.schema = format!("leaseq_buckets_restart_{}", std::process::id());
    config.buckets = BUCKETS;
    drop_schema(&config.connection, &config.schema).unwrap();
    let schema = TestSchema(config);
    let config = &schema.0;

    // Queues in every bucket, and `q`, whose dead letters go to `dlq` in another bucket.
    let queues: Vec<String> = (0..16).map(|i| format!("queue-{i}")).collect();
    let covered: std::collections::BTreeSet<u32> =
        queues.iter().map(|q| bucket_of(q, BUCKETS)).collect();
    assert_eq!(
        covered.len(),
        BUCKETS as usize,
        "the queues cover every bucket"
    );
    assert_ne!(bucket_of("q", BUCKETS), bucket_of("dlq", BUCKETS));

    // No move driver runs on this node, so a dead letter stays in its source's outbox.
    let service = open(config);
    assert_eq!(service.hosts().len(), BUCKETS as usize);
    for queue in &queues {
        call(&service, "CreateQueue", json!({"QueueName": queue}))
            .await
            .unwrap();
        for i in 0..PER_QUEUE {
            let send = json!({"QueueUrl": url(queue), "MessageBody": format!("{queue}/{i}")});
            call(&service, "SendMessage", send).await.unwrap();
        }
    }
    call(&service, "CreateQueue", json!({"QueueName": "dlq"}))
        .await
        .unwrap();
    let redrive = json!({"deadLetterTargetArn": "arn:aws:sqs:us-east-1:000000000000:dlq", "maxReceiveCount": "1"});
    // `q` exists before it names `dlq`, so it stays in its own bucket; `placed`, created
    // with the policy, lives in dlq's bucket (`leaseq_server::placements`).
    call(&service, "CreateQueue", json!({"QueueName": "q"}))
        .await
        .unwrap();
    let set = json!({"QueueUrl": url("q"), "Attributes": {"RedrivePolicy": redrive.to_string()}});
    call(&service, "SetQueueAttributes", set).await.unwrap();
    assert_ne!(bucket_of("placed", BUCKETS), bucket_of("dlq", BUCKETS));
    let create =
        json!({"QueueName": "placed", "Attributes": {"RedrivePolicy": redrive.to_string()}});
    call(&service, "CreateQueue", create).await.unwrap();
    assert_eq!(
        service.placements().get("placed"),
        Some(bucket_of("dlq", BUCKETS))
    );
    let send = json!({"QueueUrl": url("q"), "MessageBody": "spent"});
    call(&service, "SendMessage", send).await.unwrap();
    assert!(
        receive_one(&service, "q").await.is_some(),
        "the first attempt"
    );
    assert!(
        receive_one(&service, "q").await.is_none(),
        "past maxReceiveCount the message leaves q for dlq's bucket"
    );
    assert_eq!(
        (count(&service, "q").await, count(&service, "dlq").await),
        (0, 0),
        "in transfer, the message counts in neither queue"
    );

    // The node dies (everything above was acknowledged, so durable) and a new one recovers
    // every bucket, then drives the transfer.
    drop(service);
    let service = Arc::new(open(config));
    assert_eq!(
        service.placements().all(),
        vec![(Arc::from("placed"), bucket_of("dlq", BUCKETS))],
        "the placement is kept by the log"
    );
    let send = json!({"QueueUrl": url("placed"), "MessageBody": "placed and spent"});
    call(&service, "SendMessage", send).await.unwrap();
    assert!(receive_one(&service, "placed").await.is_some());
    assert!(receive_one(&service, "placed").await.is_none());
    assert_eq!(
        count(&service, "dlq").await,
        1,
        "a dead letter of a queue placed with its dead-letter queue moves at once"
    );
    let driver = tokio::spawn(service.clone().drive_moves());
    let started = Instant::now();
    while count(&service, "dlq").await == 0 {
        assert!(
            started.elapsed() < TRANSFER_MAX,
            "the transfer completes after the restart"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    for queue in &queues {
        let bodies = drain(&service, queue).await;
        let expected: HashMap<String, usize> = (0..PER_QUEUE)
            .map(|i| (format!("{queue}/{i}"), 1))
            .collect();
        assert_eq!(bodies, expected, "{queue}: every message, once");
    }
    assert_eq!(
        drain(&service, "dlq").await,
        HashMap::from([
            ("spent".to_string(), 1),
            ("placed and spent".to_string(), 1)
        ])
    );
    assert_eq!(count(&service, "q").await, 0);
    service.shut_down();
    driver.await.unwrap();
    drop(service);

    // Once more: the transfer's answer was recorded at both ends, so it is not handed over
    // again, and the leased messages are all still there.
    let service = Arc::new(open(config));
    let driver = tokio::spawn(service.clone().drive_moves());
    // Let a driver that wrongly found the transfer pending run it.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        (count(&service, "q").await, count(&service, "dlq").await),
        (0, 2)
    );
    for queue in &queues {
        assert_eq!(count(&service, queue).await, PER_QUEUE, "{queue}");
    }

    // A node that was fenced out (another opened the log since) places nothing.
    let newer = open(config);
    let create = json!({"QueueName": "late", "Attributes": {"RedrivePolicy": redrive.to_string()}});
    assert_ne!(bucket_of("late", BUCKETS), bucket_of("dlq", BUCKETS));
    let refused = call(&service, "CreateQueue", create).await;
    assert!(refused.is_err(), "{refused:?}");
    drop(newer);
    let service_again = open(config);
    assert_eq!(service_again.placements().get("late"), None);
    drop(service_again);
    service.shut_down();
    driver.await.unwrap();
}
