//! Queue actions: CreateQueue, GetQueueUrl, ListQueues, DeleteQueue, Get/SetQueueAttributes,
//! PurgeQueue, tags, ListDeadLetterSourceQueues and Add/RemovePermission.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_queue_with_attributes_and_tags() {
    let server = Server::start().await;
    let sqs = &server.client;
    let name = unique_name("create-attrs");
    let output = sqs
        .create_queue()
        .queue_name(&name)
        .attributes(QueueAttributeName::VisibilityTimeout, "45")
        .attributes(QueueAttributeName::DelaySeconds, "3")
        .attributes(QueueAttributeName::MaximumMessageSize, "2048")
        .attributes(QueueAttributeName::MessageRetentionPeriod, "3600")
        .attributes(QueueAttributeName::ReceiveMessageWaitTimeSeconds, "2")
        .tags("team", "core")
        .tags("env", "test")
        .send()
        .await
        .unwrap_or_else(|e| panic!("CreateQueue: {}", DisplayErrorContext(&e)));
    let url = output.queue_url().unwrap();
    assert_eq!(
        url,
        format!("{}/{ACCOUNT_ID}/{name}", server.endpoint),
        "queue URL from Host"
    );

    let attributes = queue_attributes(sqs, url).await;
    let expect = [
        (QueueAttributeName::VisibilityTimeout, "45"),
        (QueueAttributeName::DelaySeconds, "3"),
        (QueueAttributeName::MaximumMessageSize, "2048"),
        (QueueAttributeName::MessageRetentionPeriod, "3600"),
        (QueueAttributeName::ReceiveMessageWaitTimeSeconds, "2"),
        (QueueAttributeName::ApproximateNumberOfMessages, "0"),
        (
            QueueAttributeName::ApproximateNumberOfMessagesNotVisible,
            "0",
        ),
        (QueueAttributeName::ApproximateNumberOfMessagesDelayed, "0"),
    ];
    for (key, value) in expect {
        assert_eq!(
            attributes.get(&key).map(String::as_str),
            Some(value),
            "{key:?} in {attributes:?}"
        );
    }
    assert_eq!(
        attributes
            .get(&QueueAttributeName::QueueArn)
            .map(String::as_str),
        Some(format!("arn:aws:sqs:us-east-1:{ACCOUNT_ID}:{name}").as_str())
    );
    for key in [
        QueueAttributeName::CreatedTimestamp,
        QueueAttributeName::LastModifiedTimestamp,
    ] {
        let value = attributes
            .get(&key)
            .unwrap_or_else(|| panic!("{key:?} missing"));
        let seconds: u64 = value
            .parse()
            .unwrap_or_else(|_| panic!("{key:?}={value} is not epoch seconds"));
        assert!(
            seconds > 1_600_000_000,
            "{key:?}={value} is not epoch seconds"
        );
    }

    let tags = sqs.list_queue_tags().queue_url(url).send().await.unwrap();
    let tags: BTreeMap<_, _> = tags
        .tags()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .collect();
    assert_eq!(
        tags,
        BTreeMap::from([
            ("env".to_string(), "test".to_string()),
            ("team".to_string(), "core".to_string())
        ])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_queue_is_idempotent_and_rejects_conflicts_and_bad_names() {
    let server = Server::start().await;
    let sqs = &server.client;
    let name = unique_name("create-idem");
    let first = create_queue(sqs, &name, &[(QueueAttributeName::VisibilityTimeout, "30")]).await;
    let again = create_queue(sqs, &name, &[(QueueAttributeName::VisibilityTimeout, "30")]).await;
    assert_eq!(first, again, "same name and attributes give the same queue");

    let conflicting = sqs
        .create_queue()
        .queue_name(&name)
        .attributes(QueueAttributeName::VisibilityTimeout, "60")
        .send()
        .await;
    assert_service_error!(conflicting, is_queue_name_exists);
    assert_eq!(
        queue_attribute(sqs, &first, QueueAttributeName::VisibilityTimeout).await,
        "30"
    );

    let bad_name = sqs
        .create_queue()
        .queue_name("not a valid name!")
        .send()
        .await;
    assert_error_code!(bad_name, "InvalidParameterValue");
    let too_long = sqs.create_queue().queue_name("q".repeat(81)).send().await;
    assert_error_code!(too_long, "InvalidParameterValue");
    let bad_value = sqs
        .create_queue()
        .queue_name(unique_name("create-bad-value"))
        .attributes(QueueAttributeName::DelaySeconds, "901")
        .send()
        .await;
    assert_service_error!(bad_value, is_invalid_attribute_value);

    let listed = sqs.list_queues().send().await.unwrap();
    assert_eq!(
        listed.queue_urls(),
        [first],
        "failed creates leave no queue behind"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_queue_url_finds_queues_and_reports_missing_ones() {
    let server = Server::start().await;
    let sqs = &server.client;
    let name = unique_name("get-url");
    let url = create_queue(sqs, &name, &[]).await;
    let found = sqs.get_queue_url().queue_name(&name).send().await.unwrap();
    assert_eq!(found.queue_url(), Some(url.as_str()));

    let missing = sqs.get_queue_url().queue_name("no-such-queue").send().await;
    assert_service_error!(missing, is_queue_does_not_exist);

    // The wire form the SDKs rely on: `__type` plus the legacy code in `x-amzn-query-error`.
    let raw = server
        .json("GetQueueUrl", br#"{"QueueName":"no-such-queue"}"#)
        .await;
    assert_eq!(raw.status, 400, "{}", raw.text());
    assert_eq!(
        raw.header("x-amzn-query-error"),
        Some("AWS.SimpleQueueService.NonExistentQueue;Sender")
    );
    let body = raw.json();
    let error_type = body["__type"].as_str().unwrap_or_default();
    assert!(
        error_type.ends_with("QueueDoesNotExist"),
        "__type {error_type:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_queues_filters_by_prefix_and_pages() {
    let server = Server::start().await;
    let sqs = &server.client;
    let base = unique_name("list");
    let mut alpha = BTreeSet::new();
    for i in 0..5 {
        alpha.insert(create_queue(sqs, &format!("{base}-alpha-{i}"), &[]).await);
    }
    let beta = create_queue(sqs, &format!("{base}-beta"), &[]).await;

    let all = sqs.list_queues().send().await.unwrap();
    let all: BTreeSet<_> = all.queue_urls().iter().cloned().collect();
    assert!(all.is_superset(&alpha) && all.contains(&beta), "{all:?}");

    let prefixed = sqs
        .list_queues()
        .queue_name_prefix(format!("{base}-alpha"))
        .send()
        .await
        .unwrap();
    let prefixed: BTreeSet<_> = prefixed.queue_urls().iter().cloned().collect();
    assert_eq!(prefixed, alpha);

    let mut paged = BTreeSet::new();
    let mut token = None;
    for _page in 0..10 {
        let page = sqs
            .list_queues()
            .queue_name_prefix(format!("{base}-alpha"))
            .max_results(2)
            .set_next_token(token.take())
            .send()
            .await
            .unwrap_or_else(|e| panic!("ListQueues page: {}", DisplayErrorContext(&e)));
        assert!(
            page.queue_urls().len() <= 2,
            "MaxResults 2 gave {:?}",
            page.queue_urls()
        );
        for url in page.queue_urls() {
            assert!(paged.insert(url.clone()), "{url} listed twice while paging");
        }
        token = page.next_token().map(str::to_string);
        if token.is_none() {
            break;
        }
    }
    assert!(token.is_none(), "paging did not finish in 10 pages");
    assert_eq!(paged, alpha);

    let none = sqs
        .list_queues()
        .queue_name_prefix("no-such-prefix")
        .send()
        .await
        .unwrap();
    assert!(none.queue_urls().is_empty(), "{:?}", none.queue_urls());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn delete_queue_removes_it() {
    let server = Server::start().await;
    let sqs = &server.client;
    let name = unique_name("delete-queue");
    let url = create_queue(sqs, &name, &[]).await;
    send(sqs, &url, "doomed").await;
    sqs.delete_queue().queue_url(&url).send().await.unwrap();

    assert_service_error!(
        sqs.get_queue_url().queue_name(&name).send().await,
        is_queue_does_not_exist
    );
    assert_service_error!(
        sqs.send_message()
            .queue_url(&url)
            .message_body("x")
            .send()
            .await,
        is_queue_does_not_exist
    );
    assert_service_error!(
        sqs.receive_message().queue_url(&url).send().await,
        is_queue_does_not_exist
    );
    assert_service_error!(
        sqs.delete_queue().queue_url(&url).send().await,
        is_queue_does_not_exist
    );
    let listed = sqs.list_queues().send().await.unwrap();
    assert!(listed.queue_urls().is_empty(), "{:?}", listed.queue_urls());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_attributes_are_set_read_and_validated() {
    let server = Server::start().await;
    let sqs = &server.client;
    let url = create_queue(sqs, &unique_name("attrs"), &[]).await;
    let dlq_url = create_queue(sqs, &unique_name("attrs-dlq"), &[]).await;
    let dlq_arn = queue_arn(sqs, &dlq_url).await;

    let defaults = queue_attributes(sqs, &url).await;
    for (key, value) in [
        (QueueAttributeName::VisibilityTimeout, "30"),
        (QueueAttributeName::DelaySeconds, "0"),
        (QueueAttributeName::MessageRetentionPeriod, "345600"),
        (QueueAttributeName::ReceiveMessageWaitTimeSeconds, "0"),
    ] {
        assert_eq!(
            defaults.get(&key).map(String::as_str),
            Some(value),
            "default {key:?}"
        );
    }

    let redrive = format!(r#"{{"deadLetterTargetArn":"{dlq_arn}","maxReceiveCount":3}}"#);
    sqs.set_queue_attributes()
        .queue_url(&url)
        .attributes(QueueAttributeName::VisibilityTimeout, "5")
        .attributes(QueueAttributeName::RedrivePolicy, &redrive)
        .send()
        .await
        .unwrap_or_else(|e| panic!("SetQueueAttributes: {}", DisplayErrorContext(&e)));

    let some = sqs
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::VisibilityTimeout)
        .attribute_names(QueueAttributeName::RedrivePolicy)
        .send()
        .await
        .unwrap();
    let some = some.attributes().cloned().unwrap_or_default();
    assert_eq!(
        some.keys().cloned().collect::<BTreeSet<_>>(),
        BTreeSet::from([
            QueueAttributeName::VisibilityTimeout,
            QueueAttributeName::RedrivePolicy
        ]),
        "only the attributes asked for"
    );
    assert_eq!(some[&QueueAttributeName::VisibilityTimeout], "5");
    let policy: serde_json::Value = serde_json::from_str(&some[&QueueAttributeName::RedrivePolicy])
        .expect("RedrivePolicy is JSON");
    assert_eq!(policy["deadLetterTargetArn"], dlq_arn.as_str());
    let max_receive_count = &policy["maxReceiveCount"];
    assert!(
        max_receive_count == 3 || max_receive_count == "3",
        "maxReceiveCount {max_receive_count}"
    );

    let out_of_range = sqs
        .set_queue_attributes()
        .queue_url(&url)
        .attributes(QueueAttributeName::VisibilityTimeout, "43201")
        .send()
        .await;
    assert_service_error!(out_of_range, is_invalid_attribute_value);
    let not_a_number = sqs
        .set_queue_attributes()
        .queue_url(&url)
        .attributes(QueueAttributeName::DelaySeconds, "soon")
        .send()
        .await;
    assert_service_error!(not_a_number, is_invalid_attribute_value);
    let unknown_name = sqs
        .set_queue_attributes()
        .queue_url(&url)
        .attributes(QueueAttributeName::from("NoSuchAttribute"), "1")
        .send()
        .await;
    assert_service_error!(unknown_name, is_invalid_attribute_name);
    let missing_dlq = sqs
        .set_queue_attributes()
        .queue_url(&url)
        .attributes(
            QueueAttributeName::RedrivePolicy,
            format!(r#"{{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:{ACCOUNT_ID}:nope","maxReceiveCount":3}}"#),
        )
        .send()
        .await;
    assert!(
        missing_dlq.is_err(),
        "a RedrivePolicy naming a missing queue is refused"
    );
    assert_eq!(
        queue_attribute(sqs, &url, QueueAttributeName::VisibilityTimeout).await,
        "5"
    );
    let kept = queue_attribute(sqs, &url, QueueAttributeName::RedrivePolicy).await;
    let kept: serde_json::Value = serde_json::from_str(&kept).expect("RedrivePolicy is JSON");
    assert_eq!(
        kept["deadLetterTargetArn"],
        dlq_arn.as_str(),
        "a refused RedrivePolicy changed nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn purge_empties_the_queue_and_a_second_purge_is_in_progress() {
    let server = Server::start().await;
    let sqs = &server.client;
    let url = create_queue(sqs, &unique_name("purge"), &[]).await;
    for i in 0..3 {
        send(sqs, &url, &format!("m{i}")).await;
    }
    let leased = receive(sqs, &url, 1, 0, Some(30)).await;
    assert_eq!(leased.len(), 1);
    sqs.purge_queue().queue_url(&url).send().await.unwrap();

    assert!(
        receive(sqs, &url, 10, 0, None).await.is_empty(),
        "purged messages are gone"
    );
    let attributes = queue_attributes(sqs, &url).await;
    assert_eq!(
        attributes[&QueueAttributeName::ApproximateNumberOfMessages],
        "0"
    );
    assert_eq!(
        attributes[&QueueAttributeName::ApproximateNumberOfMessagesNotVisible],
        "0"
    );
    let delete_purged = sqs
        .delete_message()
        .queue_url(&url)
        .receipt_handle(receipt(&leased[0]))
        .send()
        .await;
    assert!(
        delete_purged.is_ok(),
        "deleting a purged message's receipt succeeds as in SQS: {:?}",
        delete_purged
            .err()
            .map(|e| DisplayErrorContext(e).to_string())
    );

    assert_service_error!(
        sqs.purge_queue().queue_url(&url).send().await,
        is_purge_queue_in_progress
    );

    // Messages sent after the purge are kept.
    send(sqs, &url, "after").await;
    let after = receive(sqs, &url, 10, 1, None).await;
    assert_eq!(after.len(), 1);
    assert_eq!(after[0].body(), Some("after"));
}

// Tags, dead-letter sources, permissions

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tag_untag_and_list_queue_tags() {
    let server = Server::start().await;
    let sqs = &server.client;
    let url = create_queue(sqs, &unique_name("tags"), &[]).await;
    let tags_of = |url: String| async move {
        let output = sqs.list_queue_tags().queue_url(url).send().await.unwrap();
        output
            .tags()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .collect::<BTreeMap<_, _>>()
    };
    assert!(tags_of(url.clone()).await.is_empty());
    sqs.tag_queue()
        .queue_url(&url)
        .tags("a", "1")
        .tags("b", "2")
        .send()
        .await
        .unwrap();
    sqs.tag_queue()
        .queue_url(&url)
        .tags("b", "3")
        .send()
        .await
        .unwrap();
    assert_eq!(
        tags_of(url.clone()).await,
        BTreeMap::from([("a".into(), "1".into()), ("b".into(), "3".into())])
    );
    sqs.untag_queue()
        .queue_url(&url)
        .tag_keys("a")
        .tag_keys("absent")
        .send()
        .await
        .unwrap();
    assert_eq!(
        tags_of(url.clone()).await,
        BTreeMap::from([("b".into(), "3".into())])
    );

    sqs.delete_queue().queue_url(&url).send().await.unwrap();
    assert_service_error!(
        sqs.list_queue_tags().queue_url(&url).send().await,
        is_queue_does_not_exist
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_dead_letter_source_queues_pages() {
    let server = Server::start().await;
    let sqs = &server.client;
    let dlq = create_queue(sqs, &unique_name("dlsources-dlq"), &[]).await;
    let redrive = format!(
        r#"{{"deadLetterTargetArn":"{}","maxReceiveCount":"5"}}"#,
        queue_arn(sqs, &dlq).await
    );
    let mut sources = BTreeSet::new();
    for i in 0..3 {
        let name = unique_name(&format!("dlsources-src{i}"));
        sources.insert(
            create_queue(sqs, &name, &[(QueueAttributeName::RedrivePolicy, &redrive)]).await,
        );
    }
    create_queue(sqs, &unique_name("dlsources-other"), &[]).await;

    let all = sqs
        .list_dead_letter_source_queues()
        .queue_url(&dlq)
        .send()
        .await
        .unwrap();
    assert_eq!(
        all.queue_urls().iter().cloned().collect::<BTreeSet<_>>(),
        sources
    );

    let mut paged = BTreeSet::new();
    let mut token = None;
    for _ in 0..10 {
        let page = sqs
            .list_dead_letter_source_queues()
            .queue_url(&dlq)
            .max_results(2)
            .set_next_token(token.take())
            .send()
            .await
            .unwrap();
        assert!(page.queue_urls().len() <= 2);
        paged.extend(page.queue_urls().iter().cloned());
        token = page.next_token().map(str::to_string);
        if token.is_none() {
            break;
        }
    }
    assert_eq!(paged, sources);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_and_remove_permission_show_in_policy() {
    let server = Server::start().await;
    let sqs = &server.client;
    let url = create_queue(sqs, &unique_name("permissions"), &[]).await;
    let arn = queue_arn(sqs, &url).await;
    sqs.add_permission()
        .queue_url(&url)
        .label("producers")
        .aws_account_ids("111122223333")
        .actions("SendMessage")
        .send()
        .await
        .unwrap_or_else(|e| panic!("AddPermission: {}", DisplayErrorContext(&e)));
    sqs.add_permission()
        .queue_url(&url)
        .label("consumers")
        .aws_account_ids("444455556666")
        .actions("ReceiveMessage")
        .actions("DeleteMessage")
        .send()
        .await
        .unwrap();
    let duplicate = sqs
        .add_permission()
        .queue_url(&url)
        .label("producers")
        .aws_account_ids("111122223333")
        .actions("SendMessage")
        .send()
        .await;
    assert_error_code!(duplicate, "InvalidParameterValue");

    let policy = policy_statements(sqs, &url).await;
    assert_eq!(
        policy.keys().map(String::as_str).collect::<Vec<_>>(),
        ["consumers", "producers"]
    );
    let producers = &policy["producers"];
    assert_eq!(producers["Effect"], "Allow");
    assert_eq!(producers["Resource"], arn.as_str());
    let principal = producers["Principal"]["AWS"].to_string();
    assert!(principal.contains("111122223333"), "Principal {principal}");
    let actions = producers["Action"].to_string();
    assert!(actions.contains("SQS:SendMessage"), "Action {actions}");
    assert!(policy["consumers"]["Action"]
        .to_string()
        .contains("SQS:DeleteMessage"));

    sqs.remove_permission()
        .queue_url(&url)
        .label("producers")
        .send()
        .await
        .unwrap();
    let policy = policy_statements(sqs, &url).await;
    assert_eq!(
        policy.keys().map(String::as_str).collect::<Vec<_>>(),
        ["consumers"]
    );
    let unknown = sqs
        .remove_permission()
        .queue_url(&url)
        .label("producers")
        .send()
        .await;
    assert_error_code!(unknown, "InvalidParameterValue");
    sqs.remove_permission()
        .queue_url(&url)
        .label("consumers")
        .send()
        .await
        .unwrap();
    assert!(policy_statements(sqs, &url).await.is_empty());
}

/// The queue's Policy statements by Sid (empty when there is no Policy).
async fn policy_statements(sqs: &Client, url: &str) -> BTreeMap<String, serde_json::Value> {
    let attributes = queue_attributes(sqs, url).await;
    let Some(policy) = attributes.get(&QueueAttributeName::Policy) else {
        return BTreeMap::new();
    };
    let policy: serde_json::Value = serde_json::from_str(policy).expect("Policy is JSON");
    let statements = policy["Statement"].as_array().cloned().unwrap_or_default();
    statements
        .into_iter()
        .map(|s| (s["Sid"].as_str().expect("Sid").to_string(), s))
        .collect()
}
