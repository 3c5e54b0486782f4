//! Lease scenarios over the wire (expiry, stale receipts, extension, release, dead letters,
//! delay) and event-driven long polling.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_lease_redelivers_and_stale_receipt_never_touches_the_new_attempt() {
    let server = Server::start().await;
    let sqs = &server.client;
    let url = create_queue(
        sqs,
        &unique_name("lease-expiry"),
        &[(QueueAttributeName::VisibilityTimeout, "1")],
    )
    .await;
    let id = send(sqs, &url, "job-42").await;
    let first = receive_one(sqs, &url, 0, None).await;
    assert_eq!(receive_count(&first), 1);
    let first_receive_at = system_attribute(
        &first,
        MessageSystemAttributeName::ApproximateFirstReceiveTimestamp,
    )
    .unwrap()
    .to_string();

    // Nothing is ready while the lease runs; the long poll returns when it expires.
    let started = Instant::now();
    let second = receive_one(sqs, &url, 5, Some(30)).await;
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_secs(3),
        "redelivered {waited:?} after a 1 s lease"
    );
    assert_eq!(second.message_id(), Some(id.as_str()));
    assert_eq!(receive_count(&second), 2);
    assert_ne!(
        receipt(&second),
        receipt(&first),
        "each attempt has its own receipt"
    );
    assert_eq!(
        system_attribute(
            &second,
            MessageSystemAttributeName::ApproximateFirstReceiveTimestamp
        ),
        Some(first_receive_at.as_str())
    );

    // The superseded receipt: delete answers OK as SQS does, but deletes nothing...
    let stale_delete = sqs
        .delete_message()
        .queue_url(&url)
        .receipt_handle(receipt(&first))
        .send()
        .await;
    assert!(
        stale_delete.is_ok(),
        "stale delete: {:?}",
        stale_delete
            .err()
            .map(|e| DisplayErrorContext(e).to_string())
    );
    // ...and cannot move the new attempt's visibility.
    let stale_change = sqs
        .change_message_visibility()
        .queue_url(&url)
        .receipt_handle(receipt(&first))
        .visibility_timeout(0)
        .send()
        .await;
    assert_error_code!(stale_change, "InvalidParameterValue");
    let attributes = queue_attributes(sqs, &url).await;
    assert_eq!(
        attributes[&QueueAttributeName::ApproximateNumberOfMessagesNotVisible],
        "1",
        "{attributes:?}"
    );
    assert_eq!(
        attributes[&QueueAttributeName::ApproximateNumberOfMessages],
        "0",
        "{attributes:?}"
    );

    sqs.delete_message()
        .queue_url(&url)
        .receipt_handle(receipt(&second))
        .send()
        .await
        .unwrap();
    let attributes = queue_attributes(sqs, &url).await;
    assert_eq!(
        attributes[&QueueAttributeName::ApproximateNumberOfMessagesNotVisible],
        "0"
    );
    assert_eq!(
        attributes[&QueueAttributeName::ApproximateNumberOfMessages],
        "0"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extension_holds_the_message_past_its_original_deadline() {
    let server = Server::start().await;
    let sqs = &server.client;
    let url = create_queue(
        sqs,
        &unique_name("lease-extend"),
        &[(QueueAttributeName::VisibilityTimeout, "2")],
    )
    .await;
    send(sqs, &url, "slow job").await;
    let leased = receive_one(sqs, &url, 0, None).await;
    let received_at = Instant::now();

    tokio::time::sleep(Duration::from_millis(1000)).await;
    // Counted from now, not from the receive: the deadline moves to about 4 s after it.
    sqs.change_message_visibility()
        .queue_url(&url)
        .receipt_handle(receipt(&leased))
        .visibility_timeout(3)
        .send()
        .await
        .unwrap();
    tokio::time::sleep_until((received_at + Duration::from_millis(2600)).into()).await;
    assert!(
        receive(sqs, &url, 1, 0, None).await.is_empty(),
        "the message reappeared at its original deadline despite the extension"
    );
    let again = receive_one(sqs, &url, 5, None).await;
    let reappeared = received_at.elapsed();
    assert!(
        reappeared >= Duration::from_millis(3500) && reappeared < Duration::from_millis(6000),
        "reappeared {reappeared:?} after the receive; expected about 4 s"
    );
    assert_eq!(receive_count(&again), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letter_move_after_max_receive_count() {
    let server = Server::start().await;
    let sqs = &server.client;
    let dlq = create_queue(sqs, &unique_name("dlq"), &[]).await;
    let redrive = format!(
        r#"{{"deadLetterTargetArn":"{}","maxReceiveCount":2}}"#,
        queue_arn(sqs, &dlq).await
    );
    let source = create_queue(
        sqs,
        &unique_name("dlq-source"),
        &[(QueueAttributeName::RedrivePolicy, &redrive)],
    )
    .await;
    let source_arn = queue_arn(sqs, &source).await;
    let id = send(sqs, &source, "poison").await;

    for attempt in 1..=2 {
        let message = receive_one(sqs, &source, 2, Some(30)).await;
        assert_eq!(receive_count(&message), attempt);
        // Give up on it at once, as a failing consumer would.
        sqs.change_message_visibility()
            .queue_url(&source)
            .receipt_handle(receipt(&message))
            .visibility_timeout(0)
            .send()
            .await
            .unwrap();
    }
    assert!(
        receive(sqs, &source, 10, 1, None).await.is_empty(),
        "a third delivery from the source"
    );

    let dead = receive_one(sqs, &dlq, 2, None).await;
    assert_eq!(dead.message_id(), Some(id.as_str()));
    assert_eq!(dead.body(), Some("poison"));
    assert_eq!(
        system_attribute(&dead, MessageSystemAttributeName::DeadLetterQueueSourceArn),
        Some(source_arn.as_str())
    );
    let sources = sqs
        .list_dead_letter_source_queues()
        .queue_url(&dlq)
        .send()
        .await
        .unwrap();
    assert_eq!(sources.queue_urls(), [source]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delayed_messages_appear_when_their_delay_ends() {
    let server = Server::start().await;
    let sqs = &server.client;
    let per_message = create_queue(sqs, &unique_name("delay-message"), &[]).await;
    let per_queue = create_queue(
        sqs,
        &unique_name("delay-queue"),
        &[(QueueAttributeName::DelaySeconds, "1")],
    )
    .await;

    let sent_at = Instant::now();
    sqs.send_message()
        .queue_url(&per_message)
        .message_body("later")
        .delay_seconds(2)
        .send()
        .await
        .unwrap();
    send(sqs, &per_queue, "queue default").await;
    assert!(
        receive(sqs, &per_message, 1, 0, None).await.is_empty(),
        "delayed message delivered early"
    );
    assert!(
        receive(sqs, &per_queue, 1, 0, None).await.is_empty(),
        "queue delay ignored"
    );
    assert_eq!(
        queue_attribute(
            sqs,
            &per_message,
            QueueAttributeName::ApproximateNumberOfMessagesDelayed
        )
        .await,
        "1"
    );

    let (message_delayed, queue_delayed) = tokio::join!(
        async {
            let m = receive_one(sqs, &per_message, 5, None).await;
            (m, sent_at.elapsed())
        },
        async {
            let m = receive_one(sqs, &per_queue, 5, None).await;
            (m, sent_at.elapsed())
        }
    );
    assert_eq!(message_delayed.0.body(), Some("later"));
    assert!(
        message_delayed.1 >= Duration::from_millis(1800)
            && message_delayed.1 < Duration::from_millis(3500),
        "DelaySeconds 2 message arrived after {:?}",
        message_delayed.1
    );
    assert_eq!(queue_delayed.0.body(), Some("queue default"));
    assert!(
        queue_delayed.1 >= Duration::from_millis(800)
            && queue_delayed.1 < Duration::from_millis(2500),
        "queue DelaySeconds 1 message arrived after {:?}",
        queue_delayed.1
    );
}

// Long polling

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn long_poll_wakes_on_send_and_empty_polls_last_their_time() {
    let server = Server::start().await;
    let sqs = &server.client;
    let url = create_queue(sqs, &unique_name("long-poll"), &[]).await;
    let default_wait = create_queue(
        sqs,
        &unique_name("long-poll-default"),
        &[(QueueAttributeName::ReceiveMessageWaitTimeSeconds, "1")],
    )
    .await;

    let started = Instant::now();
    let (woken, empty, queue_default, ()) = tokio::join!(
        async {
            let m = receive(sqs, &url, 1, 10, None).await;
            (m, started.elapsed())
        },
        async {
            let other = create_queue(sqs, &unique_name("long-poll-empty"), &[]).await;
            let m = receive(sqs, &other, 1, 1, None).await;
            (m, started.elapsed())
        },
        async {
            let output = sqs
                .receive_message()
                .queue_url(&default_wait)
                .send()
                .await
                .unwrap();
            (output.messages().len(), started.elapsed())
        },
        async {
            tokio::time::sleep(Duration::from_millis(500)).await;
            send(sqs, &url, "wake up").await;
        }
    );
    assert_eq!(woken.0.len(), 1);
    assert!(
        woken.1 >= Duration::from_millis(450) && woken.1 < Duration::from_millis(2000),
        "a 10 s long poll returned {:?} after start, the send was at 0.5 s",
        woken.1
    );
    assert!(empty.0.is_empty());
    assert!(
        empty.1 >= Duration::from_millis(950),
        "an empty 1 s poll returned after {:?}",
        empty.1
    );
    assert_eq!(queue_default.0, 0);
    assert!(
        queue_default.1 >= Duration::from_millis(950),
        "ReceiveMessageWaitTimeSeconds 1 was not used: returned after {:?}",
        queue_default.1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_long_polls_are_all_woken_by_fifty_sends() {
    const POLLERS: usize = 50;
    let server = Server::start().await;
    let sqs = server.client.clone();
    let url = create_queue(&sqs, &unique_name("many-polls"), &[]).await;

    let started = Instant::now();
    let pollers: Vec<_> = (0..POLLERS)
        .map(|_| {
            let sqs = sqs.clone();
            let url = url.clone();
            tokio::spawn(async move { receive(&sqs, &url, 1, 10, Some(30)).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(700)).await;
    for batch in 0..POLLERS / 10 {
        let entries = (0..10)
            .map(|i| send_entry(&format!("m{i}"), &format!("message {}", batch * 10 + i)))
            .collect();
        let output = sqs
            .send_message_batch()
            .queue_url(&url)
            .set_entries(Some(entries))
            .send()
            .await
            .unwrap();
        assert!(output.failed().is_empty(), "{:?}", output.failed());
    }
    let mut bodies = BTreeSet::new();
    for poller in pollers {
        let messages = poller.await.expect("poller task");
        assert_eq!(messages.len(), 1, "a woken poller returned {messages:?}");
        assert!(
            bodies.insert(messages[0].body().unwrap().to_string()),
            "delivered twice"
        );
    }
    let elapsed = started.elapsed();
    assert_eq!(bodies.len(), POLLERS);
    assert!(
        elapsed < Duration::from_secs(5),
        "50 pollers took {elapsed:?} to be served"
    );
}
