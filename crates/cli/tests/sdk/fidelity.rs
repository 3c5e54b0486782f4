//! SQS as AWS answers it, through the Rust SDK (AWS JSON 1.0) and raw Query requests: the twin of
//! `tests/clients/test_aws_fidelity.py` (boto3 on both protocols), whose header lists the sources.
//! Each expected value names its source: `[LS:test]` is a test of LocalStack's
//! `tests/aws/services/sqs/test_sqs.py` (or `test_sqs_move_task.py`) validated against AWS, its
//! answer recorded in the neighbouring `.snapshot.json`; `[API:X]` is the SQS API Reference page
//! of action or type X; `[GH:repo#n]` an AWS answer quoted in that GitHub issue.

use super::*;

use aws_sdk_sqs::types::MessageAttributeValue as Value;
use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;

/// The code and message of a failed call.
fn code_and_message<E: ProvideErrorMetadata>(error: &E) -> (String, String) {
    (
        error.code().unwrap_or_default().to_string(),
        error.message().unwrap_or_default().to_string(),
    )
}

/// The code and message of `result`, which must be an error.
fn failure<T: std::fmt::Debug, E: ProvideErrorMetadata>(result: Result<T, E>) -> (String, String) {
    match result {
        Ok(output) => panic!("expected an error, the call succeeded: {output:?}"),
        Err(error) => code_and_message(&error),
    }
}

fn pair(code: &str, message: &str) -> (String, String) {
    (code.to_string(), message.to_string())
}

/// A Query request (form-encoded POST to `path`): status and XML body.
async fn query(server: &Server, path: &str, form: &str) -> (u16, String) {
    let response = server
        .raw(
            "POST",
            path,
            &[("content-type", "application/x-www-form-urlencoded")],
            form.as_bytes(),
        )
        .await;
    (response.status, response.text())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_and_attributes_as_aws_answers_them() {
    let server = Server::start().await;
    let sqs = &server.client;
    let url = create_queue(
        sqs,
        &unique_name("fidelity-messages"),
        &[(QueueAttributeName::MaximumMessageSize, "1024")],
    )
    .await;

    // [LS:test_send_empty_message]
    let empty = sqs
        .send_message()
        .queue_url(&url)
        .message_body("")
        .send()
        .await;
    assert_eq!(
        failure(empty),
        pair(
            "MissingParameter",
            "The request must contain the parameter MessageBody."
        )
    );

    // [LS:test_send_batch_message_size]: the big entry fails alone.
    let batch = sqs
        .send_message_batch()
        .queue_url(&url)
        .entries(send_entry("big", &"a".repeat(1025)))
        .entries(send_entry("small", "a"))
        .send()
        .await
        .unwrap_or_else(|e| panic!("SendMessageBatch: {}", DisplayErrorContext(&e)));
    assert_eq!(batch.successful().len(), 1);
    assert_eq!(batch.successful()[0].id(), "small");
    let failed = &batch.failed()[0];
    assert_eq!(
        (failed.id(), failed.code(), failed.message(), failed.sender_fault()),
        (
            "big",
            "InvalidParameterValue",
            Some("One or more parameters cannot be validated. Reason: Message must be shorter than 1024 bytes."),
            true
        )
    );
    // [LS:test_send_oversized_message]
    let single = sqs
        .send_message()
        .queue_url(&url)
        .message_body("a".repeat(1025))
        .send()
        .await;
    assert_eq!(
        failure(single),
        pair(
            "InvalidParameterValue",
            "One or more parameters are invalid. Reason: Message must be shorter than 1024 bytes."
        )
    );

    // [LS:test_send_message_with_empty_string_attribute]
    let empty_value = sqs
        .send_message()
        .queue_url(&url)
        .message_body("test")
        .message_attributes("ErrorDetails", text_attribute("String", ""))
        .send()
        .await;
    assert_eq!(
        failure(empty_value),
        pair(
            "InvalidParameterValue",
            "Message (user) attribute 'ErrorDetails' must contain a non-empty value of type 'String'."
        )
    );
    // [LS:test_invalid_string_attributes_cause_invalid_parameter_value_error]
    let bad_characters = sqs
        .send_message()
        .queue_url(&url)
        .message_body("test")
        .message_attributes("attr1", text_attribute("String", "Invalid-\u{8},\u{b}"))
        .send()
        .await;
    assert_eq!(failure(bad_characters).0, "InvalidParameterValue");

    // [LS:test_send_message_with_invalid_string_attributes]: AWS takes "attr.1øßä" and refuses
    // "Invalid-§-attr" and a leading period; the sentences as LocalStack's SNS provider and
    // Eucalyptus's SQS word AWS's answers (AWS has not published them; see the Python twin).
    sqs.send_message()
        .queue_url(&url)
        .message_body("test")
        .message_attributes("attr.1øßä", text_attribute("String", "Valida"))
        .send()
        .await
        .unwrap_or_else(|e| panic!("SendMessage attr.1øßä: {}", DisplayErrorContext(&e)));
    for (name, message) in [
        (
            "Invalid-§-attr",
            "Invalid non-alphanumeric character '#xA7' was found in the message attribute name. Can only include alphanumeric characters, hyphens, underscores, or dots.",
        ),
        (
            ".-Invalid-attr",
            "Invalid message attribute name starting with character '.' was found.",
        ),
        (
            "aWs.-Invalid-attr",
            "Message attribute names starting with 'AWS.' or 'Amazon.' are reserved for use by Amazon.",
        ),
    ] {
        let refused = sqs
            .send_message()
            .queue_url(&url)
            .message_body("test")
            .message_attributes(name, text_attribute("String", "Valid"))
            .send()
            .await;
        assert_eq!(
            failure(refused),
            pair("InvalidParameterValue", message),
            "{name}"
        );
    }

    // [GH:ruby-shoryuken/shoryuken#769], [GH:lumigo-io/lumigo-CLI#94]
    let list = Value::builder()
        .data_type("String")
        .string_list_values("a")
        .build()
        .expect("a complete attribute");
    let listed = sqs
        .send_message()
        .queue_url(&url)
        .message_body("test")
        .message_attributes("L", list.clone())
        .send()
        .await;
    assert_eq!(
        failure(listed),
        pair(
            "AWS.SimpleQueueService.UnsupportedOperation",
            "Message attribute list values in SendMessage operation are not supported."
        )
    );
    let listed_in_batch = sqs
        .send_message_batch()
        .queue_url(&url)
        .entries(
            SendMessageBatchRequestEntry::builder()
                .id("a")
                .message_body("x")
                .message_attributes("L", list)
                .build()
                .expect("a complete entry"),
        )
        .send()
        .await;
    assert_eq!(
        failure(listed_in_batch),
        pair(
            "AWS.SimpleQueueService.UnsupportedOperation",
            "Message attribute list values in SendMessageBatch operation are not supported."
        )
    );

    // [LS:test_receive_message_message_attribute_names_filters]: prefix filters.
    let filtered = create_queue(
        sqs,
        &unique_name("fidelity-filters"),
        &[(QueueAttributeName::VisibilityTimeout, "0")],
    )
    .await;
    sqs.send_message()
        .queue_url(&filtered)
        .message_body("msg")
        .message_attributes("Help.Me", text_attribute("String", "Me"))
        .message_attributes("Hello", text_attribute("String", "There"))
        .message_attributes("General", text_attribute("String", "Kenobi"))
        .send()
        .await
        .unwrap_or_else(|e| panic!("SendMessage: {}", DisplayErrorContext(&e)));
    for (filter, expected) in [
        ("Hel.*", vec!["Hello", "Help.Me"]),
        ("*", vec!["General", "Hello", "Help.Me"]),
        ("AWS.", vec![]),
    ] {
        let messages = sqs
            .receive_message()
            .queue_url(&filtered)
            .message_attribute_names(filter)
            .send()
            .await
            .unwrap_or_else(|e| panic!("ReceiveMessage: {}", DisplayErrorContext(&e)))
            .messages
            .unwrap_or_default();
        let names: BTreeSet<&str> = messages[0]
            .message_attributes()
            .map(|attributes| attributes.keys().map(String::as_str).collect())
            .unwrap_or_default();
        assert_eq!(names, expected.into_iter().collect(), "filter {filter}");
    }

    // [LS:test_system_attributes_have_no_effect_on_attr_md5]: AWSTraceHeader round trip and its
    // own checksum.
    let header = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";
    let traced = sqs
        .send_message()
        .queue_url(&filtered)
        .message_body("test")
        .message_system_attributes(
            MessageSystemAttributeNameForSends::AwsTraceHeader,
            MessageSystemAttributeValue::builder()
                .data_type("String")
                .string_value(header)
                .build()
                .expect("a complete attribute"),
        )
        .send()
        .await
        .unwrap_or_else(|e| panic!("SendMessage: {}", DisplayErrorContext(&e)));
    assert_eq!(
        traced.md5_of_message_system_attributes(),
        Some("5ae4d5d7636402d80f4eb6d213245a88")
    );
    let messages = sqs
        .receive_message()
        .queue_url(&filtered)
        .max_number_of_messages(10)
        .message_system_attribute_names(MessageSystemAttributeName::AwsTraceHeader)
        .send()
        .await
        .unwrap_or_else(|e| panic!("ReceiveMessage: {}", DisplayErrorContext(&e)))
        .messages
        .unwrap_or_default();
    let received = messages
        .iter()
        .find(|message| message.message_id() == traced.message_id())
        .expect("the traced message");
    assert_eq!(
        system_attribute(received, MessageSystemAttributeName::AwsTraceHeader),
        Some(header)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queues_as_aws_answers_them() {
    let server = Server::start().await;
    let sqs = &server.client;

    // [API:CreateQueue] QueueDeletedRecently.
    let name = unique_name("fidelity-recreate");
    let url = create_queue(sqs, &name, &[]).await;
    sqs.delete_queue()
        .queue_url(&url)
        .send()
        .await
        .expect("DeleteQueue");
    let again = sqs.create_queue().queue_name(&name).send().await;
    match again {
        Err(error) => {
            assert!(
                error
                    .as_service_error()
                    .is_some_and(|e| e.is_queue_deleted_recently()),
                "{}",
                DisplayErrorContext(&error)
            );
            assert_eq!(
                code_and_message(&error),
                pair(
                    "AWS.SimpleQueueService.QueueDeletedRecently",
                    "You must wait 60 seconds after deleting a queue before you can create another with the same name."
                )
            );
        }
        Ok(output) => panic!("a recreate within 60 s succeeded: {output:?}"),
    }

    // [LS:test_successive_purge_calls_fail]
    let name = unique_name("fidelity-purge");
    let url = create_queue(sqs, &name, &[]).await;
    sqs.purge_queue()
        .queue_url(&url)
        .send()
        .await
        .expect("PurgeQueue");
    let twice = sqs.purge_queue().queue_url(&url).send().await;
    assert_eq!(
        failure(twice),
        pair(
            "AWS.SimpleQueueService.PurgeQueueInProgress",
            &format!("Only one PurgeQueue operation on {name} is allowed every 60 seconds.")
        )
    );

    // [LS:test_list_queues_pagination]
    let prefix = unique_name("fidelity-page");
    let mut urls = Vec::new();
    for i in 0..10 {
        urls.push(create_queue(sqs, &format!("{prefix}-{i}"), &[]).await);
    }
    let first = sqs
        .list_queues()
        .queue_name_prefix(&prefix)
        .max_results(2)
        .send()
        .await
        .expect("ListQueues");
    assert_eq!(first.queue_urls(), &urls[..2]);
    let rest = sqs
        .list_queues()
        .queue_name_prefix(&prefix)
        .max_results(10)
        .next_token(first.next_token().expect("a NextToken"))
        .send()
        .await
        .expect("ListQueues");
    assert_eq!(rest.queue_urls(), &urls[2..]);
    assert_eq!(rest.next_token(), None);

    // [LS:test_non_existent_queue], JSON wording; the Query wording over raw HTTP
    // ([LS:TestSqsQueryApi.test_get_on_deleted_queue_fails]).
    let missing = sqs
        .get_queue_url()
        .queue_name(unique_name("nope"))
        .send()
        .await;
    assert_eq!(
        failure(missing),
        pair(
            "AWS.SimpleQueueService.NonExistentQueue",
            "The specified queue does not exist."
        )
    );
    let (status, body) = query(
        &server,
        "/",
        "Action=GetQueueUrl&QueueName=nope-at-all&Version=2012-11-05",
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("<Code>AWS.SimpleQueueService.NonExistentQueue</Code>")
            && body.contains(
                "<Message>The specified queue does not exist for this wsdl version.</Message>"
            ),
        "{body}"
    );

    // [LS:TestSqsQueryApi.test_invalid_action_raises_exception] and
    // test_get_create_queue_fails: the wording, and CreateQueue at a queue's URL.
    let (status, body) = query(&server, "/", "Action=FooBar&Version=2012-11-05").await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("<Message>The action FooBar is not valid for this endpoint.</Message>"),
        "{body}"
    );
    let path = format!("/{ACCOUNT_ID}/{prefix}-0");
    let (status, body) = query(&server, &path, "Action=CreateQueue&QueueName=x").await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body.contains("<Code>InvalidAction</Code>")
            && body.contains("The action CreateQueue is not valid for this endpoint."),
        "{body}"
    );

    // [LS:test_sqs_permission_lifecycle]
    let url = &urls[0];
    sqs.add_permission()
        .queue_url(url)
        .label("crossaccountpermission")
        .aws_account_ids(ACCOUNT_ID)
        .actions("ReceiveMessage")
        .send()
        .await
        .expect("AddPermission");
    let policy: serde_json::Value =
        serde_json::from_str(&queue_attribute(sqs, url, QueueAttributeName::Policy).await)
            .expect("the policy is JSON");
    let arn = queue_arn(sqs, url).await;
    assert_eq!(
        policy,
        serde_json::json!({
            "Version": "2008-10-17",
            "Id": format!("{arn}/SQSDefaultPolicy"),
            "Statement": [{
                "Sid": "crossaccountpermission",
                "Effect": "Allow",
                "Principal": {"AWS": format!("arn:aws:iam::{ACCOUNT_ID}:root")},
                "Action": "SQS:ReceiveMessage",
                "Resource": arn,
            }],
        })
    );
    let unknown = sqs
        .remove_permission()
        .queue_url(url)
        .label("crossaccountpermission2")
        .send()
        .await;
    assert_eq!(
        failure(unknown),
        pair(
            "InvalidParameterValue",
            "Value crossaccountpermission2 for parameter Label is invalid. Reason: can't find label."
        )
    );
    for url in &urls {
        sqs.delete_queue()
            .queue_url(url)
            .send()
            .await
            .expect("DeleteQueue");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn move_tasks_as_aws_answers_them() {
    let server = Server::start().await;
    let sqs = &server.client;
    let dlq = create_queue(sqs, &unique_name("fidelity-dlq"), &[]).await;
    let dlq_arn = queue_arn(sqs, &dlq).await;
    let policy = format!(r#"{{"deadLetterTargetArn":"{dlq_arn}","maxReceiveCount":"1"}}"#);
    let source = create_queue(
        sqs,
        &unique_name("fidelity-src"),
        &[(QueueAttributeName::RedrivePolicy, policy.as_str())],
    )
    .await;
    for body in ["one", "two", "three"] {
        send(sqs, &source, body).await;
    }
    let mut received = 0;
    while received < 3 {
        received += receive(sqs, &source, 10, 0, Some(0)).await.len();
    }
    assert!(receive(sqs, &source, 10, 0, None).await.is_empty());

    // [LS:test_source_needs_redrive_policy]
    let not_a_dlq = sqs
        .start_message_move_task()
        .source_arn(queue_arn(sqs, &source).await);
    assert_eq!(
        failure(not_a_dlq.send().await),
        pair(
            "InvalidParameterValue",
            "Source queue must be configured as a Dead Letter Queue."
        )
    );
    // [LS:test_cancel_with_invalid_task_handle]
    let invalid = sqs
        .cancel_message_move_task()
        .task_handle("foobared")
        .send()
        .await;
    assert_eq!(
        failure(invalid),
        pair(
            "InvalidParameterValue",
            "Value for parameter TaskHandle is invalid."
        )
    );
    // [LS:test_cancel_with_invalid_task_id_in_task_handle]
    let unknown_task = STANDARD.encode(format!(
        r#"{{"taskId":"10f57157-fc38-4da9-a113-4de7e12d05aa","sourceArn":"{dlq_arn}"}}"#
    ));
    let unknown = sqs
        .cancel_message_move_task()
        .task_handle(unknown_task)
        .send()
        .await;
    assert_eq!(
        failure(unknown),
        pair("ResourceNotFoundException", "Task does not exist.")
    );

    // A running task: its handle is base64 JSON, listed while RUNNING only; a second start is
    // refused ([LS:test_start_multiple_move_tasks]).
    let destination_name = unique_name("fidelity-dest");
    let destination = create_queue(sqs, &destination_name, &[]).await;
    let destination_arn = queue_arn(sqs, &destination).await;
    let handle = sqs
        .start_message_move_task()
        .source_arn(&dlq_arn)
        .destination_arn(&destination_arn)
        .max_number_of_messages_per_second(1)
        .send()
        .await
        .expect("StartMessageMoveTask")
        .task_handle
        .expect("a TaskHandle");
    let document: serde_json::Value =
        serde_json::from_slice(&STANDARD.decode(&handle).expect("base64")).expect("JSON");
    assert_eq!(document["sourceArn"], dlq_arn.as_str());
    let second = sqs
        .start_message_move_task()
        .source_arn(&dlq_arn)
        .send()
        .await;
    assert_eq!(
        failure(second),
        pair(
            "InvalidParameterValue",
            "There is already a task running. Only one active task is allowed for a source queue arn at a given time."
        )
    );
    let running = sqs
        .list_message_move_tasks()
        .source_arn(&dlq_arn)
        .send()
        .await
        .expect("ListMessageMoveTasks")
        .results()
        .to_vec();
    assert_eq!(running[0].status(), Some("RUNNING"));
    assert_eq!(running[0].task_handle(), Some(handle.as_str()));

    // [LS:test_move_task_delete_destination_queue_while_running]
    sqs.delete_queue()
        .queue_url(&destination)
        .send()
        .await
        .expect("DeleteQueue");
    let failed = sqs
        .list_message_move_tasks()
        .source_arn(&dlq_arn)
        .send()
        .await
        .expect("ListMessageMoveTasks")
        .results()
        .to_vec();
    assert_eq!(failed[0].status(), Some("FAILED"));
    assert_eq!(
        failed[0].failure_reason(),
        Some("AWS.SimpleQueueService.NonExistentQueue")
    );
    assert_eq!(failed[0].destination_arn(), Some(destination_arn.as_str()));
    assert_eq!(failed[0].task_handle(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_delay_is_retroactive_as_aws_documents() {
    // [DG:sqs-delay-queues]: "For FIFO queues, the per-queue delay setting is retroactive—
    // changing the setting affects the delay of messages already in the queue." (and not for
    // standard queues). 900 s, the maximum, is long enough that only the change can make the
    // message ready, or delay a ready one: no waiting.
    let server = Server::start().await;
    let sqs = &server.client;
    let fifo = create_queue(
        sqs,
        &format!("{}.fifo", unique_name("fidelity-delay")),
        &[
            (QueueAttributeName::FifoQueue, "true"),
            (QueueAttributeName::DelaySeconds, "900"),
        ],
    )
    .await;
    let send_fifo = |body: &'static str, group: &'static str| {
        sqs.send_message()
            .queue_url(&fifo)
            .message_body(body)
            .message_group_id(group)
            .message_deduplication_id(body)
            .send()
    };
    send_fifo("a", "g").await.expect("SendMessage a");
    assert!(receive(sqs, &fifo, 10, 0, None).await.is_empty());
    let set_delay = |seconds: &'static str| {
        sqs.set_queue_attributes()
            .queue_url(&fifo)
            .attributes(QueueAttributeName::DelaySeconds, seconds)
            .send()
    };
    set_delay("0").await.expect("SetQueueAttributes");
    let bodies = |messages: Vec<Message>| -> Vec<String> {
        messages
            .iter()
            .map(|m| m.body().unwrap_or_default().to_string())
            .collect()
    };
    assert_eq!(bodies(receive(sqs, &fifo, 10, 0, Some(0)).await), ["a"]);
    // A message never received is delayed again; the received one is not.
    send_fifo("b", "h").await.expect("SendMessage b");
    set_delay("900").await.expect("SetQueueAttributes");
    assert_eq!(
        queue_attribute(
            sqs,
            &fifo,
            QueueAttributeName::ApproximateNumberOfMessagesDelayed
        )
        .await,
        "1"
    );
    assert_eq!(bodies(receive(sqs, &fifo, 10, 0, None).await), ["a"]);

    let standard = create_queue(
        sqs,
        &unique_name("fidelity-delay-std"),
        &[(QueueAttributeName::DelaySeconds, "900")],
    )
    .await;
    send(sqs, &standard, "s").await;
    sqs.set_queue_attributes()
        .queue_url(&standard)
        .attributes(QueueAttributeName::DelaySeconds, "0")
        .send()
        .await
        .expect("SetQueueAttributes");
    assert!(receive(sqs, &standard, 10, 0, None).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_receive_attempt_retry_resets_the_visibility_timeout() {
    // [API:ReceiveMessage] ReceiveRequestAttemptId: "If a retry occurs within the deduplication
    // interval, it resets the visibility timeout." A retry with VisibilityTimeout 0 makes the
    // message visible at once: no waiting.
    let server = Server::start().await;
    let sqs = &server.client;
    let fifo = create_queue(
        sqs,
        &format!("{}.fifo", unique_name("fidelity-retry")),
        &[(QueueAttributeName::FifoQueue, "true")],
    )
    .await;
    sqs.send_message()
        .queue_url(&fifo)
        .message_body("a")
        .message_group_id("g")
        .message_deduplication_id("a")
        .send()
        .await
        .expect("SendMessage");
    let attempt = |visibility: i32| {
        sqs.receive_message()
            .queue_url(&fifo)
            .visibility_timeout(visibility)
            .receive_request_attempt_id("try-1")
            .send()
    };
    let first = attempt(600)
        .await
        .expect("ReceiveMessage")
        .messages()
        .to_vec();
    assert!(receive(sqs, &fifo, 10, 0, None).await.is_empty());
    let retry = attempt(0)
        .await
        .expect("ReceiveMessage")
        .messages()
        .to_vec();
    assert_eq!(receipt(&retry[0]), receipt(&first[0]));
    let again = receive(sqs, &fifo, 10, 0, None).await;
    assert_eq!((again[0].body(), receive_count(&again[0])), (Some("a"), 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_batch_and_encryption_errors_as_aws_answers_them() {
    let server = Server::start().await;
    let sqs = &server.client;
    let fifo = create_queue(
        sqs,
        &format!("{}.fifo", unique_name("fidelity-batch")),
        &[(QueueAttributeName::FifoQueue, "true")],
    )
    .await;
    // [LS:test_send_batch_missing_message_group_id_for_fifo_queue]: the whole batch fails with
    // InvalidParameterValue (a single SendMessage says MissingParameter).
    let ok = SendMessageBatchRequestEntry::builder()
        .id("ok")
        .message_body("a")
        .message_group_id("g")
        .message_deduplication_id("a")
        .build()
        .expect("a complete entry");
    let no_group = SendMessageBatchRequestEntry::builder()
        .id("bad")
        .message_body("b")
        .message_deduplication_id("b")
        .build()
        .expect("a complete entry");
    let batch = sqs
        .send_message_batch()
        .queue_url(&fifo)
        .entries(ok)
        .entries(no_group)
        .send()
        .await;
    assert_eq!(
        failure(batch),
        pair(
            "InvalidParameterValue",
            "The request must contain the parameter MessageGroupId."
        )
    );
    assert!(receive(sqs, &fifo, 10, 0, None).await.is_empty());

    // [LS:test_sse_kms_and_sqs_are_mutually_exclusive]
    let both = sqs
        .set_queue_attributes()
        .queue_url(&fifo)
        .attributes(QueueAttributeName::KmsMasterKeyId, "testKeyId")
        .attributes(QueueAttributeName::SqsManagedSseEnabled, "true")
        .send()
        .await;
    assert_eq!(
        failure(both),
        pair(
            "InvalidAttributeName",
            "You can use one type of server-side encryption (SSE) at one time. You can either enable KMS SSE or SQS SSE."
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_groups_are_served_in_the_order_they_became_available() {
    // [LS:test_fifo_receive_message_with_zero_visibility_timeout]: after a receive of 3 with
    // VisibilityTimeout 0 took g1-m1, g1-m2, g2-m1, the next receive of 10 returns exactly
    // g3-m1, g1-m1, g1-m2, g2-m1, g2-m2.
    let server = Server::start().await;
    let sqs = &server.client;
    let fifo = create_queue(
        sqs,
        &format!("{}.fifo", unique_name("fidelity-order")),
        &[
            (QueueAttributeName::FifoQueue, "true"),
            (QueueAttributeName::ContentBasedDeduplication, "true"),
        ],
    )
    .await;
    for body in ["g1-m1", "g2-m1", "g2-m2", "g3-m1", "g1-m2"] {
        sqs.send_message()
            .queue_url(&fifo)
            .message_body(body)
            .message_group_id(&body[..2])
            .send()
            .await
            .expect("SendMessage");
    }
    let bodies = |messages: Vec<Message>| -> Vec<String> {
        messages
            .iter()
            .map(|m| m.body().unwrap_or_default().to_string())
            .collect()
    };
    assert_eq!(
        bodies(receive(sqs, &fifo, 3, 0, Some(0)).await),
        ["g1-m1", "g1-m2", "g2-m1"]
    );
    assert_eq!(
        bodies(receive(sqs, &fifo, 10, 0, Some(0)).await),
        ["g3-m1", "g1-m1", "g1-m2", "g2-m1", "g2-m2"]
    );
}
