//! Redrive through the SDK: StartMessageMoveTask, ListMessageMoveTasks, CancelMessageMoveTask,
//! their errors, and what a moved message is (a new message, oldest first, fresh receive count).

use super::*;

/// A dead-letter queue holding `bodies` (dead-lettered from a source queue with
/// `maxReceiveCount` 1), with (source url, dlq url, dlq arn).
async fn dead_letters(sqs: &Client, test: &str, bodies: &[&str]) -> (String, String, String) {
    let dlq = create_queue(sqs, &unique_name(&format!("{test}-dlq")), &[]).await;
    let dlq_arn = queue_arn(sqs, &dlq).await;
    let policy = format!(r#"{{"deadLetterTargetArn":"{dlq_arn}","maxReceiveCount":"1"}}"#);
    let source = create_queue(
        sqs,
        &unique_name(&format!("{test}-src")),
        &[(QueueAttributeName::RedrivePolicy, policy.as_str())],
    )
    .await;
    for body in bodies {
        send(sqs, &source, body).await;
    }
    // One receive each, released at once; the next receive moves them to the dead-letter queue.
    let mut received = 0;
    while received < bodies.len() {
        received += receive(sqs, &source, 10, 0, Some(0)).await.len();
    }
    assert!(receive(sqs, &source, 10, 0, None).await.is_empty());
    assert_eq!(
        queue_attribute(sqs, &dlq, QueueAttributeName::ApproximateNumberOfMessages).await,
        bodies.len().to_string()
    );
    (source, dlq, dlq_arn)
}

async fn tasks(
    sqs: &Client,
    source_arn: &str,
) -> Vec<aws_sdk_sqs::types::ListMessageMoveTasksResultEntry> {
    sqs.list_message_move_tasks()
        .source_arn(source_arn)
        .max_results(10)
        .send()
        .await
        .unwrap_or_else(|e| panic!("ListMessageMoveTasks: {}", DisplayErrorContext(&e)))
        .results()
        .to_vec()
}

/// Lists until the newest task has `status` (the driver moves in the background).
async fn wait_for_status(
    sqs: &Client,
    source_arn: &str,
    status: &str,
) -> aws_sdk_sqs::types::ListMessageMoveTasksResultEntry {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let newest = tasks(sqs, source_arn)
            .await
            .into_iter()
            .next()
            .expect("a task");
        if newest.status() == Some(status) {
            return newest;
        }
        assert!(
            Instant::now() < deadline,
            "task never reached {status}: {newest:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn move_task_redrives_to_the_source_as_new_messages_oldest_first() {
    let server = Server::start().await;
    let sqs = &server.client;
    let bodies = ["one", "two", "three", "four"];
    let (source, dlq, dlq_arn) = dead_letters(sqs, "redrive", &bodies).await;
    let originals: BTreeSet<String> = sqs
        .receive_message()
        .queue_url(&dlq)
        .max_number_of_messages(10)
        .visibility_timeout(0)
        .send()
        .await
        .unwrap()
        .messages()
        .iter()
        .map(|m| m.message_id().unwrap().to_string())
        .collect();
    assert_eq!(originals.len(), 4);

    let started = sqs
        .start_message_move_task()
        .source_arn(&dlq_arn)
        .send()
        .await
        .unwrap_or_else(|e| panic!("StartMessageMoveTask: {}", DisplayErrorContext(&e)));
    let handle = started.task_handle().expect("a TaskHandle").to_string();
    let done = wait_for_status(sqs, &dlq_arn, "COMPLETED").await;
    // Only a running task is listed with its handle (see fidelity.rs).
    assert!(!handle.is_empty());
    assert_eq!(done.task_handle(), None);
    assert_eq!(done.source_arn(), Some(dlq_arn.as_str()));
    assert_eq!(done.destination_arn(), None, "no DestinationArn was given");
    assert_eq!(done.approximate_number_of_messages_moved(), 4);
    assert_eq!(done.approximate_number_of_messages_to_move(), Some(4));
    assert_eq!(done.max_number_of_messages_per_second(), None);
    assert!(done.started_timestamp() > 0);

    let moved = receive(sqs, &source, 10, 1, None).await;
    let moved_bodies: Vec<&str> = moved.iter().map(|m| m.body().unwrap()).collect();
    assert_eq!(moved_bodies, bodies, "oldest first");
    for message in &moved {
        assert!(
            !originals.contains(message.message_id().unwrap()),
            "a new id"
        );
        assert_eq!(receive_count(message), 1, "a fresh receive count");
        assert_eq!(
            system_attribute(
                message,
                MessageSystemAttributeName::DeadLetterQueueSourceArn
            ),
            None
        );
    }
    assert_eq!(
        queue_attribute(sqs, &dlq, QueueAttributeName::ApproximateNumberOfMessages).await,
        "0"
    );
    // A finished task cannot be cancelled.
    let error = sqs
        .cancel_message_move_task()
        .task_handle(&handle)
        .send()
        .await
        .expect_err("cancel of a completed task");
    assert_eq!(
        error_code(&error),
        "AWS.SimpleQueueService.UnsupportedOperation"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn move_task_rate_cancel_destination_and_errors() {
    let server = Server::start().await;
    let sqs = &server.client;
    let (source, dlq, dlq_arn) = dead_letters(sqs, "cancel", &["a", "b", "c", "d", "e", "f"]).await;
    let source_arn = queue_arn(sqs, &source).await;

    // Errors, as SQS words them.
    let not_dlq = sqs
        .start_message_move_task()
        .source_arn(&source_arn)
        .send()
        .await
        .expect_err("the source is no dead-letter queue");
    // SQS's code for it (see fidelity.rs).
    assert_eq!(error_code(&not_dlq), "InvalidParameterValue");
    let missing = sqs
        .start_message_move_task()
        .source_arn(format!("arn:aws:sqs:us-east-1:{ACCOUNT_ID}:no-such-queue"))
        .send()
        .await
        .expect_err("no such source");
    assert_eq!(error_code(&missing), "ResourceNotFoundException");
    for rate in [0, 501] {
        let error = sqs
            .start_message_move_task()
            .source_arn(&dlq_arn)
            .max_number_of_messages_per_second(rate)
            .send()
            .await
            .expect_err("rate out of range");
        assert_eq!(error_code(&error), "InvalidParameterValue", "rate {rate}");
    }

    // One message per second: cancel it while it runs.
    let handle = sqs
        .start_message_move_task()
        .source_arn(&dlq_arn)
        .max_number_of_messages_per_second(1)
        .send()
        .await
        .unwrap_or_else(|e| panic!("StartMessageMoveTask: {}", DisplayErrorContext(&e)))
        .task_handle()
        .unwrap()
        .to_string();
    let second = sqs
        .start_message_move_task()
        .source_arn(&dlq_arn)
        .send()
        .await
        .expect_err("one active task per source");
    assert_eq!(error_code(&second), "InvalidParameterValue");
    let running = tasks(sqs, &dlq_arn).await;
    assert_eq!(running.len(), 1);
    assert_eq!(running[0].status(), Some("RUNNING"));
    assert_eq!(running[0].max_number_of_messages_per_second(), Some(1));
    let cancelled = sqs
        .cancel_message_move_task()
        .task_handle(&handle)
        .send()
        .await
        .unwrap_or_else(|e| panic!("CancelMessageMoveTask: {}", DisplayErrorContext(&e)));
    let moved_before_cancel = cancelled.approximate_number_of_messages_moved();
    assert!(
        moved_before_cancel < 6,
        "a 1/s task moved {moved_before_cancel} of 6 at once"
    );
    let listed = tasks(sqs, &dlq_arn).await;
    assert_eq!(listed[0].status(), Some("CANCELLED"));
    assert_eq!(
        listed[0].approximate_number_of_messages_moved(),
        moved_before_cancel
    );
    let bad_handle = sqs
        .cancel_message_move_task()
        .task_handle("not-a-handle")
        .send()
        .await
        .expect_err("a garbage handle");
    assert_eq!(error_code(&bad_handle), "InvalidParameterValue");

    // The rest go to another queue named by DestinationArn.
    let other = create_queue(sqs, &unique_name("cancel-other"), &[]).await;
    let other_arn = queue_arn(sqs, &other).await;
    sqs.start_message_move_task()
        .source_arn(&dlq_arn)
        .destination_arn(&other_arn)
        .send()
        .await
        .unwrap_or_else(|e| panic!("StartMessageMoveTask: {}", DisplayErrorContext(&e)));
    let done = wait_for_status(sqs, &dlq_arn, "COMPLETED").await;
    assert_eq!(done.destination_arn(), Some(other_arn.as_str()));
    let rest = 6 - moved_before_cancel;
    assert_eq!(done.approximate_number_of_messages_moved(), rest);
    assert_eq!(
        queue_attribute(sqs, &other, QueueAttributeName::ApproximateNumberOfMessages).await,
        rest.to_string()
    );
    assert_eq!(
        queue_attribute(
            sqs,
            &source,
            QueueAttributeName::ApproximateNumberOfMessages
        )
        .await,
        moved_before_cancel.to_string()
    );
    assert_eq!(
        queue_attribute(sqs, &dlq, QueueAttributeName::ApproximateNumberOfMessages).await,
        "0"
    );
    assert_eq!(tasks(sqs, &dlq_arn).await.len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_now_sends_a_message_to_the_dead_letter_queue_with_its_reason() {
    let server = Server::start().await;
    let sqs = &server.client;
    let dlq = create_queue(sqs, &unique_name("fail-dlq"), &[]).await;
    let dlq_arn = queue_arn(sqs, &dlq).await;
    let policy = format!(r#"{{"deadLetterTargetArn":"{dlq_arn}","maxReceiveCount":"5"}}"#);
    let source = create_queue(
        sqs,
        &unique_name("fail-src"),
        &[(QueueAttributeName::RedrivePolicy, policy.as_str())],
    )
    .await;
    send(sqs, &source, "poison").await;
    let received = receive_one(sqs, &source, 1, None).await;
    let request = serde_json::json!({
        "QueueUrl": source,
        "ReceiptHandle": receipt(&received),
        "Reason": "schema v1 is not supported",
    });
    let answer = server
        .json("LeaseqFailMessage", request.to_string().as_bytes())
        .await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    assert_eq!(
        queue_attribute(sqs, &dlq, QueueAttributeName::ApproximateNumberOfMessages).await,
        "1"
    );
    assert_eq!(
        queue_attribute(
            sqs,
            &source,
            QueueAttributeName::ApproximateNumberOfMessagesNotVisible
        )
        .await,
        "0"
    );
    // The receipt is spent.
    let again = server
        .json("LeaseqFailMessage", request.to_string().as_bytes())
        .await;
    assert_eq!(again.status, 400, "{}", again.text());
    let peeked = server
        .json(
            "LeaseqPeekMessages",
            serde_json::json!({"QueueUrl": dlq}).to_string().as_bytes(),
        )
        .await
        .json();
    let message = &peeked["Messages"][0];
    assert_eq!(message["Body"], "poison");
    assert_eq!(message["LeaseqFailureReason"], "schema v1 is not supported");
    assert_eq!(message["Attributes"]["ApproximateReceiveCount"], "1");
    // Peeking leased nothing.
    assert_eq!(
        queue_attribute(sqs, &dlq, QueueAttributeName::ApproximateNumberOfMessages).await,
        "1"
    );
}

/// A graceful restart writes a checkpoint: the task comes back from the snapshot (not from
/// the log) and goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_task_resumes_after_a_graceful_restart() {
    let mut server = Server::start().await;
    let (source, _dlq, dlq_arn) =
        dead_letters(&server.client, "restart", &["1", "2", "3", "4"]).await;
    server
        .client
        .start_message_move_task()
        .source_arn(&dlq_arn)
        .max_number_of_messages_per_second(1)
        .send()
        .await
        .unwrap_or_else(|e| panic!("StartMessageMoveTask: {}", DisplayErrorContext(&e)));
    let before = tasks(&server.client, &dlq_arn).await[0].clone();
    assert_eq!(before.status(), Some("RUNNING"));
    server.restart_gracefully().await;
    assert!(
        super::fifo::snapshot_records_recovered(&server.log()) > 0,
        "the restart recovered from a snapshot: {}",
        server.log()
    );
    let after = tasks(&server.client, &dlq_arn).await;
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].task_handle(), before.task_handle());
    assert!(
        after[0].approximate_number_of_messages_moved()
            >= before.approximate_number_of_messages_moved()
    );
    let done = wait_for_status(&server.client, &dlq_arn, "COMPLETED").await;
    assert_eq!(done.approximate_number_of_messages_moved(), 4);
    assert_eq!(
        queue_attribute(
            &server.client,
            &source,
            QueueAttributeName::ApproximateNumberOfMessages
        )
        .await,
        "4"
    );
}
