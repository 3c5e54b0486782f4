//! Fair queues and redelivery backoff through `aws-sdk-sqs`: a standard queue's MessageGroupId is
//! validated, stored and returned on receive, a noisy tenant's messages wait while a quiet one's
//! are ready, and leaseq's own attributes (`LeaseqFair*`, `LeaseqRedeliveryBackoff`) are set and
//! read like SQS's.

use super::*;

fn group(message: &Message) -> Option<&str> {
    system_attribute(message, MessageSystemAttributeName::MessageGroupId)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_standard_queue_keeps_group_ids_and_serves_quiet_tenants_first() {
    let server = Server::start().await;
    let sqs = &server.client;
    let url = create_queue(
        sqs,
        &unique_name("tenants"),
        &[
            (QueueAttributeName::VisibilityTimeout, "60"),
            (QueueAttributeName::from("LeaseqFairInFlightMin"), "2"),
            (QueueAttributeName::from("LeaseqRedeliveryBackoff"), "5s,1m"),
        ],
    )
    .await;
    let attributes = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::from("LeaseqFairInFlightMin"))
        .attribute_names(QueueAttributeName::from("LeaseqRedeliveryBackoff"))
        .send()
        .await
        .unwrap_or_else(|e| panic!("GetQueueAttributes: {}", DisplayErrorContext(&e)));
    let attributes = attributes.attributes().expect("attributes");
    assert_eq!(
        attributes[&QueueAttributeName::from("LeaseqFairInFlightMin")],
        "2"
    );
    assert_eq!(
        attributes[&QueueAttributeName::from("LeaseqRedeliveryBackoff")],
        "5s,1m"
    );

    // The group id follows SQS's rule for every MessageGroupId (1 to 128 alphanumeric or
    // punctuation characters, SQS developer guide, "Amazon SQS message quotas").
    let bad = sqs
        .send_message()
        .queue_url(&url)
        .message_body("x")
        .message_group_id("has space")
        .send()
        .await;
    assert_error_code!(bad, "InvalidParameterValue");

    for body in ["b1", "b2", "b3"] {
        sqs.send_message()
            .queue_url(&url)
            .message_body(body)
            .message_group_id("big")
            .send()
            .await
            .unwrap_or_else(|e| panic!("SendMessage: {}", DisplayErrorContext(&e)));
    }
    let batch = sqs
        .send_message_batch()
        .queue_url(&url)
        .entries(
            SendMessageBatchRequestEntry::builder()
                .id("small")
                .message_body("s1")
                .message_group_id("small")
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap_or_else(|e| panic!("SendMessageBatch: {}", DisplayErrorContext(&e)));
    assert_eq!(batch.successful().len(), 1, "{batch:?}");

    // Oldest first until "big" holds 2 of 2 in flight and is noisy; then the quiet tenant's
    // newer message goes first.
    let first = receive(sqs, &url, 2, 0, None).await;
    let groups: Vec<Option<&str>> = first.iter().map(group).collect();
    assert_eq!(groups, [Some("big"), Some("big")]);
    let next = receive_one(sqs, &url, 0, None).await;
    assert_eq!(next.body(), Some("s1"));
    assert_eq!(group(&next), Some("small"));
    // A standard queue's message has no deduplication id or sequence number.
    assert_eq!(
        system_attribute(&next, MessageSystemAttributeName::MessageDeduplicationId),
        None
    );
    assert_eq!(
        system_attribute(&next, MessageSystemAttributeName::SequenceNumber),
        None
    );
    let last = receive_one(sqs, &url, 0, None).await;
    assert_eq!(last.body(), Some("b3"));

    // A bad backoff schedule is InvalidAttributeValue.
    let bad = sqs
        .set_queue_attributes()
        .queue_url(&url)
        .attributes(QueueAttributeName::from("LeaseqRedeliveryBackoff"), "soon")
        .send()
        .await;
    assert_error_code!(bad, "InvalidAttributeValue");
}
