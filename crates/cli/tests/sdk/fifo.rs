//! FIFO queues over the wire: queue attributes, the send rules, deduplication, group order under
//! concurrent consumers, receive-attempt retries, expired receipts, FIFO dead letters, and the
//! FIFO state surviving a kill -9 and restart.

use std::sync::{Arc, Mutex};

use super::*;

fn fifo_attributes() -> Vec<(QueueAttributeName, &'static str)> {
    vec![(QueueAttributeName::FifoQueue, "true")]
}

/// Sends one FIFO message; returns (MessageId, SequenceNumber).
async fn send_fifo(
    sqs: &Client,
    url: &str,
    body: &str,
    group: &str,
    deduplication_id: Option<&str>,
) -> (String, String) {
    let output = sqs
        .send_message()
        .queue_url(url)
        .message_body(body)
        .message_group_id(group)
        .set_message_deduplication_id(deduplication_id.map(str::to_string))
        .send()
        .await
        .unwrap_or_else(|e| panic!("SendMessage: {}", DisplayErrorContext(&e)));
    assert_eq!(
        output.md5_of_message_body(),
        Some(md5_hex(body.as_bytes()).as_str())
    );
    (
        output.message_id().expect("a MessageId").to_string(),
        output
            .sequence_number()
            .expect("a FIFO send returns a SequenceNumber")
            .to_string(),
    )
}

fn sequence(text: &str) -> u128 {
    assert!(text.len() >= 20, "a large sequence number: {text}");
    text.parse().expect("SequenceNumber is a number")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_queue_attributes_and_send_rules() {
    let server = Server::start().await;
    let sqs = &server.client;
    let name = unique_name("rules") + ".fifo";

    // A .fifo name needs FifoQueue=true and the other way round.
    let result = sqs.create_queue().queue_name(&name).send().await;
    assert_error_code!(result, "InvalidParameterValue");
    let result = sqs
        .create_queue()
        .queue_name(unique_name("plain"))
        .attributes(QueueAttributeName::FifoQueue, "true")
        .send()
        .await;
    assert_error_code!(result, "InvalidParameterValue");
    // FIFO settings are FIFO-only.
    let result = sqs
        .create_queue()
        .queue_name(unique_name("plain"))
        .attributes(QueueAttributeName::ContentBasedDeduplication, "true")
        .send()
        .await;
    assert_error_code!(result, "InvalidAttributeName");

    let url = create_queue(sqs, &name, &fifo_attributes()).await;
    let attributes = queue_attributes(sqs, &url).await;
    assert_eq!(attributes[&QueueAttributeName::FifoQueue], "true");
    assert_eq!(
        attributes[&QueueAttributeName::ContentBasedDeduplication],
        "false"
    );
    assert_eq!(attributes[&QueueAttributeName::DeduplicationScope], "queue");
    assert_eq!(
        attributes[&QueueAttributeName::FifoThroughputLimit],
        "perQueue"
    );

    // MessageGroupId is required; so is a deduplication id without content-based dedup.
    let result = sqs
        .send_message()
        .queue_url(&url)
        .message_body("x")
        .message_deduplication_id("d")
        .send()
        .await;
    assert_error_code!(result, "MissingParameter");
    let result = sqs
        .send_message()
        .queue_url(&url)
        .message_body("x")
        .message_group_id("g")
        .send()
        .await;
    assert_error_code!(result, "InvalidParameterValue");
    let result = sqs
        .send_message()
        .queue_url(&url)
        .message_body("x")
        .message_group_id("g")
        .message_deduplication_id("d")
        .delay_seconds(5)
        .send()
        .await;
    assert_error_code!(result, "InvalidParameterValue");
    let result = sqs
        .send_message()
        .queue_url(&url)
        .message_body("x")
        .message_group_id("a group")
        .message_deduplication_id("d")
        .send()
        .await;
    assert_error_code!(result, "InvalidParameterValue");

    // A duplicate is accepted with the first message's id and sequence number.
    let (first_id, first_sequence) = send_fifo(sqs, &url, "one", "g", Some("d-1")).await;
    let (again_id, again_sequence) = send_fifo(sqs, &url, "one", "g", Some("d-1")).await;
    assert_eq!((&again_id, &again_sequence), (&first_id, &first_sequence));
    let (_, second_sequence) = send_fifo(sqs, &url, "two", "g", Some("d-2")).await;
    assert!(sequence(&second_sequence) > sequence(&first_sequence));

    // Content-based deduplication, switched on later.
    sqs.set_queue_attributes()
        .queue_url(&url)
        .attributes(QueueAttributeName::ContentBasedDeduplication, "true")
        .send()
        .await
        .unwrap();
    let (body_id, _) = send_fifo(sqs, &url, "same body", "h", None).await;
    let (body_again, _) = send_fifo(sqs, &url, "same body", "other", None).await;
    assert_eq!(body_id, body_again);

    // A batch keeps its order within a group and reports sequence numbers.
    let entries: Vec<SendMessageBatchRequestEntry> = (0..5)
        .map(|i| {
            SendMessageBatchRequestEntry::builder()
                .id(format!("e{i}"))
                .message_body(format!("batch-{i}"))
                .message_group_id("b")
                .message_deduplication_id(format!("b-{i}"))
                .build()
                .unwrap()
        })
        .collect();
    let output = sqs
        .send_message_batch()
        .queue_url(&url)
        .set_entries(Some(entries))
        .send()
        .await
        .unwrap();
    assert!(output.failed().is_empty());
    let mut numbers: Vec<(String, u128)> = output
        .successful()
        .iter()
        .map(|entry| {
            (
                entry.id().to_string(),
                sequence(entry.sequence_number().expect("a SequenceNumber")),
            )
        })
        .collect();
    numbers.sort_by_key(|(id, _)| id.clone());
    assert!(numbers.windows(2).all(|w| w[0].1 < w[1].1), "{numbers:?}");

    let messages = receive(sqs, &url, 10, 0, None).await;
    let first = &messages[0];
    assert_eq!(first.body(), Some("one"));
    assert_eq!(
        system_attribute(first, MessageSystemAttributeName::MessageGroupId),
        Some("g")
    );
    assert_eq!(
        system_attribute(first, MessageSystemAttributeName::MessageDeduplicationId),
        Some("d-1")
    );
    assert_eq!(
        system_attribute(first, MessageSystemAttributeName::SequenceNumber),
        Some(first_sequence.as_str())
    );
    // The batch arrives in order, after g's messages, in one receive or more.
    let groups: Vec<&str> = messages
        .iter()
        .map(|m| system_attribute(m, MessageSystemAttributeName::MessageGroupId).unwrap())
        .collect();
    assert_eq!(&groups[..2], ["g", "g"], "{groups:?}");
}

/// Several consumers receive concurrently from many groups: per group, messages are processed
/// strictly in send order and no two consumers ever hold messages of one group at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_consumers_keep_group_order_and_never_share_a_group() {
    const GROUPS: usize = 6;
    const PER_GROUP: usize = 30;
    const CONSUMERS: usize = 5;
    let server = Server::start().await;
    let sqs = &server.client;
    let name = unique_name("concurrent") + ".fifo";
    let url = create_queue(sqs, &name, &fifo_attributes()).await;
    for i in 0..PER_GROUP {
        let entries: Vec<SendMessageBatchRequestEntry> = (0..GROUPS)
            .map(|g| {
                SendMessageBatchRequestEntry::builder()
                    .id(format!("g{g}"))
                    .message_body(format!("{g}:{i}"))
                    .message_group_id(format!("group-{g}"))
                    .message_deduplication_id(format!("{g}-{i}"))
                    .build()
                    .unwrap()
            })
            .collect();
        let output = sqs
            .send_message_batch()
            .queue_url(&url)
            .set_entries(Some(entries))
            .send()
            .await
            .unwrap();
        assert!(output.failed().is_empty());
    }

    // holders[g] = the consumer holding group g right now; processed[g] = indices done, in order.
    let holders = Arc::new(Mutex::new(vec![None::<usize>; GROUPS]));
    let processed = Arc::new(Mutex::new(vec![Vec::<usize>::new(); GROUPS]));
    let mut tasks = Vec::new();
    for consumer in 0..CONSUMERS {
        let (sqs, url) = (sqs.clone(), url.clone());
        let (holders, processed) = (holders.clone(), processed.clone());
        tasks.push(tokio::spawn(async move {
            let mut empty_in_a_row = 0;
            while empty_in_a_row < 3 {
                let messages = receive(&sqs, &url, 10, 1, Some(60)).await;
                if messages.is_empty() {
                    empty_in_a_row += 1;
                    continue;
                }
                empty_in_a_row = 0;
                let mut mine: Vec<(usize, usize, String)> = Vec::new();
                for message in &messages {
                    let (g, i) = message.body().unwrap().split_once(':').unwrap();
                    mine.push((
                        g.parse().unwrap(),
                        i.parse().unwrap(),
                        receipt(message).into(),
                    ));
                }
                {
                    let mut holders = holders.lock().unwrap();
                    for &(g, _, _) in &mine {
                        match holders[g] {
                            Some(other) if other != consumer => {
                                panic!("group {g} delivered to {consumer} while {other} holds it")
                            }
                            _ => holders[g] = Some(consumer),
                        }
                    }
                }
                for (index, (g, i, receipt)) in mine.iter().enumerate() {
                    processed.lock().unwrap()[*g].push(*i);
                    // Give up the group before deleting its last message here: once the delete
                    // is done the server may hand the group to another consumer.
                    let last_of_group = !mine[index + 1..].iter().any(|(h, _, _)| h == g);
                    if last_of_group {
                        holders.lock().unwrap()[*g] = None;
                    }
                    sqs.delete_message()
                        .queue_url(&url)
                        .receipt_handle(receipt)
                        .send()
                        .await
                        .unwrap_or_else(|e| panic!("DeleteMessage: {}", DisplayErrorContext(&e)));
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("a consumer panicked");
    }
    let processed = processed.lock().unwrap().clone();
    for (g, indices) in processed.iter().enumerate() {
        let expected: Vec<usize> = (0..PER_GROUP).collect();
        assert_eq!(indices, &expected, "group {g} out of order or incomplete");
    }
    assert_eq!(
        queue_attribute(sqs, &url, QueueAttributeName::ApproximateNumberOfMessages).await,
        "0"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receive_attempt_ids_expired_receipts_and_dead_letters() {
    let server = Server::start().await;
    let sqs = &server.client;
    let dlq_name = unique_name("dlq") + ".fifo";
    let dlq = create_queue(sqs, &dlq_name, &fifo_attributes()).await;
    let dlq_arn = queue_arn(sqs, &dlq).await;
    let policy = format!(r#"{{"deadLetterTargetArn":"{dlq_arn}","maxReceiveCount":"1"}}"#);
    // A standard queue cannot use a FIFO dead-letter queue.
    let result = sqs
        .create_queue()
        .queue_name(unique_name("std"))
        .attributes(QueueAttributeName::RedrivePolicy, &policy)
        .send()
        .await;
    assert_error_code!(result, "InvalidParameterValue");
    let name = unique_name("source") + ".fifo";
    let url = create_queue(
        sqs,
        &name,
        &[
            (QueueAttributeName::FifoQueue, "true"),
            (QueueAttributeName::VisibilityTimeout, "1"),
            (QueueAttributeName::RedrivePolicy, &policy),
        ],
    )
    .await;
    let (poison_id, _) = send_fifo(sqs, &url, "poison", "g", Some("p")).await;
    send_fifo(sqs, &url, "next", "g", Some("n")).await;

    // A retry with the same attempt id returns the same message and receipt.
    let attempt = |id: &str| {
        sqs.receive_message()
            .queue_url(&url)
            .max_number_of_messages(1)
            .receive_request_attempt_id(id)
            .send()
    };
    let first = attempt("try-1").await.unwrap();
    let again = attempt("try-1").await.unwrap();
    assert_eq!(first.messages().len(), 1);
    assert_eq!(first.messages()[0].message_id(), Some(poison_id.as_str()));
    assert_eq!(
        first.messages()[0].receipt_handle(),
        again.messages()[0].receipt_handle()
    );
    let other = attempt("try-2").await.unwrap();
    assert!(other.messages().is_empty(), "the group is blocked");

    // After the 1 s lease the receipt is expired: deleting with it is an error.
    let expired_receipt = receipt(&first.messages()[0]).to_string();
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    let result = sqs
        .delete_message()
        .queue_url(&url)
        .receipt_handle(&expired_receipt)
        .send()
        .await;
    assert_error_code!(result, "InvalidParameterValue");

    // The next receive moves the head to the dead-letter queue and delivers the next message.
    let messages = receive(sqs, &url, 10, 0, Some(30)).await;
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].body(), Some("next"));
    let moved = receive(sqs, &dlq, 10, 0, None).await;
    assert_eq!(moved.len(), 1);
    assert_eq!(moved[0].message_id(), Some(poison_id.as_str()));
    assert_eq!(
        system_attribute(&moved[0], MessageSystemAttributeName::MessageGroupId),
        Some("g")
    );
    assert_eq!(
        system_attribute(
            &moved[0],
            MessageSystemAttributeName::MessageDeduplicationId
        ),
        Some(poison_id.as_str())
    );
}

/// The deduplication window, sequence numbers and group order survive a kill -9 and restart
/// (recovery replays the log).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_state_survives_a_restart() {
    fifo_state_survives(false).await;
}

/// The same after a graceful stop (recovery loads the checkpoint written at the stop).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_state_survives_a_checkpoint_and_restart() {
    fifo_state_survives(true).await;
}

async fn fifo_state_survives(gracefully: bool) {
    let mut server = Server::start().await;
    let name = unique_name("durable") + ".fifo";
    let url = create_queue(&server.client, &name, &fifo_attributes()).await;
    let (first_id, _) = send_fifo(&server.client, &url, "a-0", "a", Some("a-0")).await;
    send_fifo(&server.client, &url, "a-1", "a", Some("a-1")).await;
    let (_, last_sequence) = send_fifo(&server.client, &url, "b-0", "b", Some("b-0")).await;
    // a's head is in flight when the server dies.
    let held = receive(&server.client, &url, 1, 0, Some(60)).await;
    assert_eq!(held[0].body(), Some("a-0"));

    if gracefully {
        server.restart_gracefully().await;
        let restored = snapshot_records_recovered(&server.log());
        assert!(
            restored > 0,
            "recovered without a snapshot: {}",
            server.log()
        );
    } else {
        server.restart().await;
    }
    let sqs = &server.client;
    let url = sqs
        .get_queue_url()
        .queue_name(&name)
        .send()
        .await
        .unwrap()
        .queue_url()
        .unwrap()
        .to_string();
    // Still a duplicate after the restart.
    let (again_id, _) = send_fifo(sqs, &url, "a-0", "a", Some("a-0")).await;
    assert_eq!(again_id, first_id);
    // Sequence numbers go on increasing.
    let (_, next_sequence) = send_fifo(sqs, &url, "b-1", "b", Some("b-1")).await;
    assert!(sequence(&next_sequence) > sequence(&last_sequence));
    // a is still blocked by its in-flight head; b comes in order.
    let messages = receive(sqs, &url, 10, 0, Some(60)).await;
    let bodies: Vec<&str> = messages.iter().map(|m| m.body().unwrap()).collect();
    assert_eq!(bodies, ["b-0", "b-1"]);
    // The receipt from before the restart still deletes a's head, which unblocks a.
    sqs.delete_message()
        .queue_url(&url)
        .receipt_handle(receipt(&held[0]))
        .send()
        .await
        .unwrap();
    let messages = receive(sqs, &url, 10, 0, None).await;
    let bodies: Vec<&str> = messages.iter().map(|m| m.body().unwrap()).collect();
    assert_eq!(bodies, ["a-1"]);
}

/// A long poll waiting on a blocked group returns as soon as the group is unblocked by a
/// delete, not when its wait or the lease ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_wakes_a_long_poll_waiting_on_a_blocked_group() {
    let server = Server::start().await;
    let sqs = &server.client;
    let name = unique_name("wake") + ".fifo";
    let url = create_queue(sqs, &name, &fifo_attributes()).await;
    send_fifo(sqs, &url, "first", "g", Some("1")).await;
    send_fifo(sqs, &url, "second", "g", Some("2")).await;
    let held = receive(sqs, &url, 1, 0, Some(60)).await;
    assert_eq!(held[0].body(), Some("first"));

    let waiter = {
        let (sqs, url) = (sqs.clone(), url.clone());
        tokio::spawn(async move {
            let started = Instant::now();
            let messages = receive(&sqs, &url, 10, 10, None).await;
            (messages, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    sqs.delete_message()
        .queue_url(&url)
        .receipt_handle(receipt(&held[0]))
        .send()
        .await
        .unwrap();
    let (messages, waited) = waiter.await.unwrap();
    assert_eq!(messages.len(), 1, "{messages:?}");
    assert_eq!(messages[0].body(), Some("second"));
    assert!(
        waited < Duration::from_secs(3),
        "the long poll took {waited:?} after the group was unblocked at ~0.3 s"
    );
}

/// The most `snapshot_records` any start of the server recovered (its log may be colored; the
/// first start of a test recovers none).
pub(super) fn snapshot_records_recovered(log: &str) -> u64 {
    let mut plain = String::with_capacity(log.len());
    let mut chars = log.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            // Skip an ANSI escape sequence: ESC [ ... letter.
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    plain
        .match_indices("snapshot_records=")
        .map(|(at, key)| {
            plain[at + key.len()..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect::<String>()
                .parse::<u64>()
                .expect("a record count")
        })
        .max()
        .expect("a recovery line in the log")
}
