//! `Outcome::Fail` with a quarantine queue: one `LeaseqFailMessage` where the server has it and
//! the quarantine queue is the dead-letter queue (the message moves, keeps its id and
//! attributes, and the server records the reason); a copy plus a delete against a server that
//! answers the action as unknown (as Amazon SQS does), with the failure details in one
//! attribute when the original leaves no room for four, and none (only the log) when it has all
//! ten.

use aws_sdk_sqs::types::{Message as SqsMessage, MessageAttributeValue, QueueAttributeName};
use aws_sdk_sqs::Client;
use leaseq_worker::{FailurePolicy, LeaseContext, Message, Outcome, Worker};
use serde_json::{json, Value};
use std::sync::atomic::Ordering;

use crate::common::{
    counts, create_queue, receive, sdk_client, start_server, wait_for, worker_config,
    RejectingProxy, Server,
};

/// A source queue `name` whose dead-letter queue is `name-dlq`: (source URL, DLQ URL).
async fn queues_with_dead_letter_queue(client: &Client, name: &str) -> (String, String) {
    let dlq = create_queue(client, &format!("{name}-dlq"), &[]).await;
    let redrive = format!(
        r#"{{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:{name}-dlq","maxReceiveCount":"5"}}"#
    );
    let queue = create_queue(
        client,
        name,
        &[(QueueAttributeName::RedrivePolicy, &redrive)],
    )
    .await;
    (queue, dlq)
}

/// Sends `body` with `count` String attributes `a0`, `a1`… and returns the message id.
async fn send_with_attributes(
    client: &Client,
    queue_url: &str,
    body: &str,
    count: usize,
) -> String {
    let mut request = client
        .send_message()
        .queue_url(queue_url)
        .message_body(body);
    for index in 0..count {
        let value = MessageAttributeValue::builder()
            .data_type("String")
            .string_value(format!("value {index}"))
            .build()
            .unwrap();
        request = request.message_attributes(format!("a{index}"), value);
    }
    request
        .send()
        .await
        .unwrap()
        .message_id()
        .unwrap()
        .to_string()
}

/// Every message of `queue_url` (receives until `count` arrived), with all attributes.
async fn receive_all(client: &Client, queue_url: &str, count: usize) -> Vec<SqsMessage> {
    let mut messages = Vec::new();
    for _ in 0..10 {
        messages.extend(receive(client, queue_url, 10, 1, Some(30)).await);
        if messages.len() >= count {
            break;
        }
    }
    assert_eq!(messages.len(), count, "{messages:?}");
    messages
}

fn attribute<'m>(message: &'m SqsMessage, name: &str) -> Option<&'m str> {
    message.message_attributes()?.get(name)?.string_value()
}

fn failing(
    reason: &'static str,
) -> impl Fn(Message, LeaseContext) -> std::future::Ready<Outcome> + Clone {
    move |_message, _lease| std::future::ready(Outcome::fail(reason))
}

async fn history(server: &Server, queue_url: &str, message_id: &str) -> Value {
    let addr = server
        .endpoint
        .trim_start_matches("http://")
        .parse()
        .unwrap();
    let request = json!({ "QueueUrl": queue_url, "MessageId": message_id });
    let answer = leaseq_testkit::http::sqs_json(addr, "LeaseqGetMessageHistory", &request).await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    answer.json()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_moves_the_message_with_leaseq_fail_message_where_the_server_has_it() {
    let server = start_server().await;
    let (queue, dlq) = queues_with_dead_letter_queue(&server.client, "invoices").await;
    // Seven attributes: more than a copy could add four failure attributes to.
    let sent = send_with_attributes(&server.client, &queue, "invoice 17", 7).await;
    let mut config = worker_config(&queue);
    config.failure = FailurePolicy::Quarantine {
        queue_url: dlq.clone(),
    };
    let worker = Worker::new(server.client.clone(), config)
        .unwrap()
        .start(failing("currency XYZ is not supported"));
    wait_for("the failure", || async { worker.metrics().failures == 1 }).await;
    let report = worker.shutdown().await;
    assert_eq!(report.metrics.settle_errors, 0);

    // Moved, not copied: the same message id, its attributes untouched, nothing added.
    let [moved] = <[SqsMessage; 1]>::try_from(receive_all(&server.client, &dlq, 1).await).unwrap();
    assert_eq!(moved.message_id(), Some(sent.as_str()));
    assert_eq!(moved.body(), Some("invoice 17"));
    let mut names: Vec<&String> = moved.message_attributes().unwrap().keys().collect();
    names.sort();
    assert_eq!(names, ["a0", "a1", "a2", "a3", "a4", "a5", "a6"]);
    assert_eq!(counts(&server.client, &queue).await, (0, 0));
    // The server recorded the reason with the message.
    let history = history(&server, &dlq, &sent).await;
    assert_eq!(
        history["FailureReason"], "currency XYZ is not supported",
        "{history}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_copies_the_message_where_the_server_answers_the_action_as_unknown() {
    let server = start_server().await;
    let (queue, dlq) = queues_with_dead_letter_queue(&server.client, "refunds").await;
    let proxy = RejectingProxy::start(&server, "LeaseqFailMessage").await;
    let client = sdk_client(&proxy.endpoint);
    let queue = queue.replace(&server.endpoint, &proxy.endpoint);
    let dlq = dlq.replace(&server.endpoint, &proxy.endpoint);
    // Room for the four failure attributes, for one, and for none.
    let roomy = send_with_attributes(&client, &queue, "roomy", 2).await;
    let mut config = worker_config(&queue);
    config.failure = FailurePolicy::Quarantine {
        queue_url: dlq.clone(),
    };
    let worker = Worker::new(client.clone(), config)
        .unwrap()
        .start(failing("refund \"R-9\" was already paid"));
    wait_for("the first failure", || async {
        worker.metrics().failures == 1
    })
    .await;
    assert_eq!(proxy.rejected.load(Ordering::SeqCst), 1);
    let tight = send_with_attributes(&client, &queue, "tight", 7).await;
    let full = send_with_attributes(&client, &queue, "full", 10).await;
    wait_for("three failures", || async {
        worker.metrics().failures == 3
    })
    .await;
    let report = worker.shutdown().await;
    assert_eq!(report.metrics.settle_errors, 0);
    // Asked once, then remembered: the later failures went straight to the copy. (Failures in
    // flight together before the first answer may each ask; these came after it.)
    assert_eq!(proxy.rejected.load(Ordering::SeqCst), 1);

    let copies = receive_all(&client, &dlq, 3).await;
    let copy = |body: &str| copies.iter().find(|m| m.body() == Some(body)).unwrap();
    for (body, original) in [("roomy", &roomy), ("tight", &tight), ("full", &full)] {
        assert_ne!(
            copy(body).message_id(),
            Some(original.as_str()),
            "{body}: a copy has a new id"
        );
    }
    let roomy_copy = copy("roomy");
    assert_eq!(
        attribute(roomy_copy, "leaseq.FailureReason"),
        Some("refund \"R-9\" was already paid")
    );
    assert_eq!(
        attribute(roomy_copy, "leaseq.SourceMessageId"),
        Some(roomy.as_str())
    );
    assert_eq!(
        attribute(roomy_copy, "leaseq.SourceQueueUrl"),
        Some(queue.as_str())
    );
    assert_eq!(attribute(roomy_copy, "leaseq.ReceiveCount"), Some("1"));
    assert_eq!(attribute(roomy_copy, "a1"), Some("value 1"));

    // Seven attributes: the failure in one, as JSON, beside all seven.
    let tight_copy = copy("tight");
    assert_eq!(tight_copy.message_attributes().unwrap().len(), 8);
    let summary: Value =
        serde_json::from_str(attribute(tight_copy, "leaseq.Failure").unwrap()).unwrap();
    assert_eq!(
        summary,
        json!({
            "FailureReason": "refund \"R-9\" was already paid",
            "SourceMessageId": tight,
            "SourceQueueUrl": queue,
            "ReceiveCount": 1,
        })
    );
    // Ten: the copy keeps them all and the failure is only logged, but the copy is sent.
    let full_copy = copy("full");
    assert_eq!(full_copy.message_attributes().unwrap().len(), 10);
    assert_eq!(attribute(full_copy, "a9"), Some("value 9"));
    assert_eq!(counts(&client, &queue).await, (0, 0));
}
