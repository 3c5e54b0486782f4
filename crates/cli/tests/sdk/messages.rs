//! Message actions: SendMessage(Batch) with every attribute type and SQS's MD5s, ReceiveMessage
//! filters, DeleteMessage(Batch), ChangeMessageVisibility(Batch), and batch validation.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_message_with_every_attribute_type_returns_sqs_md5s() {
    let server = Server::start().await;
    let sqs = &server.client;
    let url = create_queue(sqs, &unique_name("send-attrs"), &[]).await;
    let body = "Hello, 世界 🌍 tab\tnewline\ncr\r end";
    let png = [0x89, b'P', b'N', b'G', 0, 0xff, 0x10];
    let raw_bytes = [0u8, 1, 2, 254, 255];
    let trace = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";
    let output = sqs
        .send_message()
        .queue_url(&url)
        .message_body(body)
        .message_attributes("greeting", text_attribute("String", "héllo wörld ✓"))
        .message_attributes("count", text_attribute("Number", "42"))
        .message_attributes("price", text_attribute("Number.float", "-3.14e2"))
        .message_attributes("note", text_attribute("String.custom", "x"))
        .message_attributes("blob", binary_attribute("Binary", &raw_bytes))
        .message_attributes("image", binary_attribute("Binary.png", &png))
        .message_system_attributes(
            MessageSystemAttributeNameForSends::AwsTraceHeader,
            MessageSystemAttributeValue::builder()
                .data_type("String")
                .string_value(trace)
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap_or_else(|e| panic!("SendMessage: {}", DisplayErrorContext(&e)));

    let expected_attributes_md5 = attributes_md5(&[
        ("greeting", "String", AttributeValue::Text("héllo wörld ✓")),
        ("count", "Number", AttributeValue::Text("42")),
        ("price", "Number.float", AttributeValue::Text("-3.14e2")),
        ("note", "String.custom", AttributeValue::Text("x")),
        ("blob", "Binary", AttributeValue::Binary(&raw_bytes)),
        ("image", "Binary.png", AttributeValue::Binary(&png)),
    ]);
    let expected_system_md5 =
        attributes_md5(&[("AWSTraceHeader", "String", AttributeValue::Text(trace))]);
    assert_eq!(
        output.md5_of_message_body(),
        Some(md5_hex(body.as_bytes()).as_str())
    );
    assert_eq!(
        output.md5_of_message_attributes(),
        Some(expected_attributes_md5.as_str())
    );
    assert_eq!(
        output.md5_of_message_system_attributes(),
        Some(expected_system_md5.as_str())
    );
    let message_id = output.message_id().expect("MessageId").to_string();

    let message = receive_one(sqs, &url, 2, None).await;
    assert_eq!(message.message_id(), Some(message_id.as_str()));
    assert_eq!(message.body(), Some(body));
    assert_eq!(
        message.md5_of_message_attributes(),
        Some(expected_attributes_md5.as_str())
    );
    let attributes = message.message_attributes().cloned().unwrap_or_default();
    assert_eq!(attributes.len(), 6, "{attributes:?}");
    assert_eq!(attributes["greeting"].string_value(), Some("héllo wörld ✓"));
    assert_eq!(attributes["price"].data_type(), "Number.float");
    assert_eq!(attributes["price"].string_value(), Some("-3.14e2"));
    assert_eq!(
        attributes["blob"].binary_value().map(Blob::as_ref),
        Some(&raw_bytes[..])
    );
    assert_eq!(attributes["image"].data_type(), "Binary.png");
    assert_eq!(
        attributes["image"].binary_value().map(Blob::as_ref),
        Some(&png[..])
    );
    assert_eq!(
        system_attribute(&message, MessageSystemAttributeName::AwsTraceHeader),
        Some(trace)
    );
    assert_eq!(receive_count(&message), 1);
    for name in [
        MessageSystemAttributeName::SentTimestamp,
        MessageSystemAttributeName::ApproximateFirstReceiveTimestamp,
    ] {
        let value =
            system_attribute(&message, name.clone()).unwrap_or_else(|| panic!("{name:?} missing"));
        let millis: u64 = value.parse().unwrap_or_else(|_| panic!("{name:?}={value}"));
        assert!(
            millis > 1_600_000_000_000,
            "{name:?}={value} is not epoch milliseconds"
        );
    }
    assert!(
        system_attribute(&message, MessageSystemAttributeName::SenderId)
            .is_some_and(|s| !s.is_empty())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_message_rejects_invalid_input() {
    let server = Server::start().await;
    let sqs = &server.client;
    let url = create_queue(sqs, &unique_name("send-invalid"), &[]).await;
    let control_character = sqs
        .send_message()
        .queue_url(&url)
        .message_body("bad \u{1} body")
        .send()
        .await;
    assert_service_error!(control_character, is_invalid_message_contents);
    let too_big = sqs
        .send_message()
        .queue_url(&url)
        .message_body("x".repeat(1024 * 1024 + 1))
        .send()
        .await;
    assert_error_code!(too_big, "InvalidParameterValue");
    let delay = sqs
        .send_message()
        .queue_url(&url)
        .message_body("x")
        .delay_seconds(901)
        .send()
        .await;
    assert_error_code!(delay, "InvalidParameterValue");
    let no_value = sqs
        .send_message()
        .queue_url(&url)
        .message_body("x")
        .message_attributes(
            "empty",
            MessageAttributeValue::builder()
                .data_type("String")
                .build()
                .unwrap(),
        )
        .send()
        .await;
    assert_error_code!(no_value, "InvalidParameterValue");
    let bad_type = sqs
        .send_message()
        .queue_url(&url)
        .message_body("x")
        .message_attributes("a", text_attribute("Float", "1"))
        .send()
        .await;
    assert_error_code!(bad_type, "InvalidParameterValue");
    assert!(
        receive(sqs, &url, 10, 0, None).await.is_empty(),
        "nothing was enqueued"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn receive_filters_message_attributes_and_system_attributes() {
    let server = Server::start().await;
    let sqs = &server.client;
    let url = create_queue(sqs, &unique_name("receive-filter"), &[]).await;
    sqs.send_message()
        .queue_url(&url)
        .message_body("filtered")
        .message_attributes("a.one", text_attribute("String", "1"))
        .message_attributes("a.two", text_attribute("Number", "2"))
        .message_attributes("b.one", binary_attribute("Binary", b"3"))
        .send()
        .await
        .unwrap();

    // Each receive releases the message at once (VisibilityTimeout 0) for the next one.
    let cases: [(&[&str], &[&str]); 5] = [
        (&["b.one"], &["b.one"]),
        (&["a.*"], &["a.one", "a.two"]),
        (&["All"], &["a.one", "a.two", "b.one"]),
        (&[".*"], &["a.one", "a.two", "b.one"]),
        (&[], &[]),
    ];
    for (asked, expected) in cases {
        let output = sqs
            .receive_message()
            .queue_url(&url)
            .visibility_timeout(0)
            .wait_time_seconds(2)
            .set_message_attribute_names(Some(asked.iter().map(|s| s.to_string()).collect()))
            .send()
            .await
            .unwrap();
        let message = output
            .messages()
            .first()
            .unwrap_or_else(|| panic!("no message for {asked:?}"));
        let attributes = message.message_attributes().cloned().unwrap_or_default();
        let names: BTreeSet<&str> = attributes.keys().map(String::as_str).collect();
        assert_eq!(
            names,
            expected.iter().copied().collect(),
            "MessageAttributeNames {asked:?}"
        );
        // The MD5 covers the attributes returned, which is what SDKs that check it recompute.
        if !attributes.is_empty() {
            let returned: Vec<_> = attributes
                .iter()
                .map(|(name, attribute)| {
                    let value = match attribute.binary_value() {
                        Some(blob) => AttributeValue::Binary(blob.as_ref()),
                        None => AttributeValue::Text(attribute.string_value().unwrap_or_default()),
                    };
                    (name.as_str(), attribute.data_type(), value)
                })
                .collect();
            assert_eq!(
                message.md5_of_message_attributes(),
                Some(attributes_md5(&returned).as_str()),
                "MD5OfMessageAttributes for {asked:?}"
            );
        }
        assert!(
            message.attributes().is_none_or(|a| a.is_empty()),
            "no system attributes asked for"
        );
    }

    let only_count = sqs
        .receive_message()
        .queue_url(&url)
        .visibility_timeout(0)
        .wait_time_seconds(2)
        .message_system_attribute_names(MessageSystemAttributeName::ApproximateReceiveCount)
        .send()
        .await
        .unwrap();
    let message = &only_count.messages()[0];
    let names: Vec<_> = message
        .attributes()
        .map(|a| a.keys().cloned().collect())
        .unwrap_or_default();
    assert_eq!(names, [MessageSystemAttributeName::ApproximateReceiveCount]);
    assert_eq!(receive_count(message), 6);

    // The deprecated AttributeNames parameter still works, as older SDKs send only it.
    #[allow(deprecated)]
    let legacy = sqs
        .receive_message()
        .queue_url(&url)
        .visibility_timeout(0)
        .wait_time_seconds(2)
        .attribute_names(QueueAttributeName::All)
        .send()
        .await
        .unwrap();
    let message = &legacy.messages()[0];
    assert!(
        system_attribute(message, MessageSystemAttributeName::SentTimestamp).is_some(),
        "{message:?}"
    );
    assert_eq!(receive_count(message), 7);

    let too_many = sqs
        .receive_message()
        .queue_url(&url)
        .max_number_of_messages(11)
        .send()
        .await;
    assert_error_code!(too_many, "InvalidParameterValue");
    let too_long = sqs
        .receive_message()
        .queue_url(&url)
        .wait_time_seconds(21)
        .send()
        .await;
    assert_error_code!(too_long, "InvalidParameterValue");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_message_batch_reports_per_entry_results() {
    let server = Server::start().await;
    let sqs = &server.client;
    let url = create_queue(sqs, &unique_name("batch-send"), &[]).await;
    let output = sqs
        .send_message_batch()
        .queue_url(&url)
        .entries(send_entry("ok-1", "first"))
        .entries(send_entry("ok-2", "second"))
        .entries(send_entry("bad", "control \u{1} character"))
        .send()
        .await
        .unwrap_or_else(|e| panic!("SendMessageBatch: {}", DisplayErrorContext(&e)));

    let successful: BTreeMap<&str, &str> = output
        .successful()
        .iter()
        .map(|entry| (entry.id(), entry.md5_of_message_body()))
        .collect();
    let first_md5 = md5_hex(b"first");
    let second_md5 = md5_hex(b"second");
    assert_eq!(
        successful,
        BTreeMap::from([("ok-1", first_md5.as_str()), ("ok-2", second_md5.as_str())])
    );
    let failed = output.failed();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].id(), "bad");
    assert!(failed[0].sender_fault());
    assert!(
        ["InvalidMessageContents", "InvalidParameterValue"].contains(&failed[0].code()),
        "code {:?}",
        failed[0].code()
    );

    let bodies: BTreeSet<String> = receive(sqs, &url, 10, 1, None)
        .await
        .iter()
        .map(|m| m.body().unwrap().to_string())
        .collect();
    assert_eq!(
        bodies,
        BTreeSet::from(["first".to_string(), "second".to_string()])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batch_requests_are_validated_as_a_whole() {
    let server = Server::start().await;
    let sqs = &server.client;
    let url = create_queue(sqs, &unique_name("batch-errors"), &[]).await;

    let empty = sqs
        .send_message_batch()
        .queue_url(&url)
        .set_entries(Some(vec![]))
        .send()
        .await;
    assert_service_error!(empty, is_empty_batch_request);
    let eleven = (0..11).map(|i| send_entry(&format!("e{i}"), "x")).collect();
    let too_many = sqs
        .send_message_batch()
        .queue_url(&url)
        .set_entries(Some(eleven))
        .send()
        .await;
    assert_service_error!(too_many, is_too_many_entries_in_batch_request);
    let duplicate = sqs
        .send_message_batch()
        .queue_url(&url)
        .entries(send_entry("same", "a"))
        .entries(send_entry("same", "b"))
        .send()
        .await;
    assert_service_error!(duplicate, is_batch_entry_ids_not_distinct);
    let bad_id = sqs
        .send_message_batch()
        .queue_url(&url)
        .entries(send_entry("not ok!", "a"))
        .send()
        .await;
    assert_service_error!(bad_id, is_invalid_batch_entry_id);
    let big = "y".repeat(600 * 1024);
    let too_long = sqs
        .send_message_batch()
        .queue_url(&url)
        .entries(send_entry("a", &big))
        .entries(send_entry("b", &big))
        .send()
        .await;
    assert_service_error!(too_long, is_batch_request_too_long);

    let empty_delete = sqs
        .delete_message_batch()
        .queue_url(&url)
        .set_entries(Some(vec![]))
        .send()
        .await;
    assert_service_error!(empty_delete, is_empty_batch_request);
    let entry = |id: &str| {
        ChangeMessageVisibilityBatchRequestEntry::builder()
            .id(id)
            .receipt_handle("whatever")
            .visibility_timeout(0)
            .build()
            .unwrap()
    };
    let duplicate_change = sqs
        .change_message_visibility_batch()
        .queue_url(&url)
        .entries(entry("x"))
        .entries(entry("x"))
        .send()
        .await;
    assert_service_error!(duplicate_change, is_batch_entry_ids_not_distinct);

    assert!(
        receive(sqs, &url, 10, 0, None).await.is_empty(),
        "no refused batch enqueued anything"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_message_and_delete_message_batch() {
    let server = Server::start().await;
    let sqs = &server.client;
    let url = create_queue(sqs, &unique_name("delete"), &[]).await;
    for i in 0..3 {
        send(sqs, &url, &format!("m{i}")).await;
    }
    let mut messages = Vec::new();
    for _ in 0..10 {
        messages.extend(receive(sqs, &url, 10, 1, Some(30)).await);
        if messages.len() == 3 {
            break;
        }
    }
    assert_eq!(messages.len(), 3);

    sqs.delete_message()
        .queue_url(&url)
        .receipt_handle(receipt(&messages[0]))
        .send()
        .await
        .unwrap();
    let garbage = sqs
        .delete_message()
        .queue_url(&url)
        .receipt_handle("garbage")
        .send()
        .await;
    assert_service_error!(garbage, is_receipt_handle_is_invalid);

    let entry = |id: &str, handle: &str| {
        DeleteMessageBatchRequestEntry::builder()
            .id(id)
            .receipt_handle(handle)
            .build()
            .unwrap()
    };
    let output = sqs
        .delete_message_batch()
        .queue_url(&url)
        .entries(entry("one", receipt(&messages[1])))
        .entries(entry("two", receipt(&messages[2])))
        .entries(entry("junk", "garbage"))
        .send()
        .await
        .unwrap();
    let ok: BTreeSet<&str> = output.successful().iter().map(|e| e.id()).collect();
    assert_eq!(ok, BTreeSet::from(["one", "two"]));
    let failed = output.failed();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].id(), "junk");
    assert_eq!(failed[0].code(), "ReceiptHandleIsInvalid");
    assert!(failed[0].sender_fault());

    let attributes = queue_attributes(sqs, &url).await;
    assert_eq!(
        attributes[&QueueAttributeName::ApproximateNumberOfMessages],
        "0"
    );
    assert_eq!(
        attributes[&QueueAttributeName::ApproximateNumberOfMessagesNotVisible],
        "0"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn change_message_visibility_and_batch() {
    let server = Server::start().await;
    let sqs = &server.client;
    let url = create_queue(sqs, &unique_name("visibility"), &[]).await;
    let first_id = send(sqs, &url, "first").await;
    let first = receive_one(sqs, &url, 2, Some(30)).await;
    assert_eq!(first.message_id(), Some(first_id.as_str()));
    let second_id = send(sqs, &url, "second").await;
    let second = receive_one(sqs, &url, 2, Some(30)).await;
    assert_eq!(second.message_id(), Some(second_id.as_str()));

    let out_of_range = sqs
        .change_message_visibility()
        .queue_url(&url)
        .receipt_handle(receipt(&first))
        .visibility_timeout(43_201)
        .send()
        .await;
    assert_error_code!(out_of_range, "InvalidParameterValue");
    let garbage = sqs
        .change_message_visibility()
        .queue_url(&url)
        .receipt_handle("garbage")
        .visibility_timeout(0)
        .send()
        .await;
    assert_service_error!(garbage, is_receipt_handle_is_invalid);

    // Release the first with 0: it is ready again at once, under a new receipt.
    sqs.change_message_visibility()
        .queue_url(&url)
        .receipt_handle(receipt(&first))
        .visibility_timeout(0)
        .send()
        .await
        .unwrap();
    let again = receive_one(sqs, &url, 0, Some(30)).await;
    assert_eq!(again.message_id(), Some(first_id.as_str()));
    assert_eq!(receive_count(&again), 2);
    assert_ne!(receipt(&again), receipt(&first));

    let entry = |id: &str, handle: &str| {
        ChangeMessageVisibilityBatchRequestEntry::builder()
            .id(id)
            .receipt_handle(handle)
            .visibility_timeout(0)
            .build()
            .unwrap()
    };
    let output = sqs
        .change_message_visibility_batch()
        .queue_url(&url)
        .entries(entry("second", receipt(&second)))
        .entries(entry("junk", "garbage"))
        .send()
        .await
        .unwrap();
    let ok: Vec<&str> = output.successful().iter().map(|e| e.id()).collect();
    assert_eq!(ok, ["second"]);
    let failed = output.failed();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].id(), "junk");
    assert_eq!(failed[0].code(), "ReceiptHandleIsInvalid");
    let released = receive_one(sqs, &url, 0, Some(30)).await;
    assert_eq!(released.message_id(), Some(second_id.as_str()));
    assert_eq!(receive_count(&released), 2);
}
