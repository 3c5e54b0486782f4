//! Input no SDK sends, over raw HTTP: the server must answer each with the error an SQS client
//! expects, stay up, and change nothing.

use super::*;

/// Asserts a 400-class AWS JSON error with a `__type`, and returns the `__type`.
fn assert_json_error(response: &http::RawResponse, what: &str) -> String {
    assert!(
        (400..500).contains(&response.status),
        "{what}: status {} body {}",
        response.status,
        response.text()
    );
    let body = response.json();
    let error_type = body["__type"].as_str().unwrap_or_default().to_string();
    assert!(!error_type.is_empty(), "{what}: no __type in {body}");
    error_type
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_gets_sqs_errors_and_changes_nothing() {
    let mut server = Server::start().await;
    // The oversized request targets a real queue, so only the size bound can refuse it.
    let target = create_queue(&server.client, &unique_name("oversized"), &[]).await;

    let malformed = server.json("CreateQueue", br#"{"QueueName": "#).await;
    assert_json_error(&malformed, "malformed JSON");
    let wrong_type = server.json("CreateQueue", br#"{"QueueName": 5}"#).await;
    assert_json_error(&wrong_type, "QueueName as a number");
    let not_an_object = server.json("CreateQueue", b"[]").await;
    assert_json_error(&not_an_object, "JSON array body");
    let invalid_utf8 = server
        .json("CreateQueue", b"{\"QueueName\": \"bad-\xff\xfe\"}")
        .await;
    assert_json_error(&invalid_utf8, "invalid UTF-8");
    let missing_name = server.json("CreateQueue", b"{}").await;
    assert_json_error(&missing_name, "missing QueueName");

    let unknown = server.json("FlushEverything", b"{}").await;
    let unknown_type = assert_json_error(&unknown, "unknown action");
    eprintln!("unknown action: {} {unknown_type}", unknown.status);
    assert!(
        unknown_type.ends_with("UnknownOperationException")
            || unknown_type.ends_with("InvalidAction"),
        "unknown action __type {unknown_type:?}"
    );

    let mut oversized = format!(r#"{{"QueueUrl":"{target}","MessageBody":""#).into_bytes();
    oversized.resize(oversized.len() + 5 * 1024 * 1024, b'z');
    oversized.extend_from_slice(b"\"}");
    let started = Instant::now();
    // As raw bytes: the server answers before the body is all sent and then closes, which a
    // client that writes before it reads (hyper's) may report as a broken connection.
    let send_target = http::target("SendMessage");
    let request = http::request_bytes("POST", "/", &http::json_headers(&send_target), &oversized);
    let too_large = http::send_bytes(server.addr, request).await;
    let too_large_type = assert_json_error(&too_large, "5 MiB body");
    eprintln!("5 MiB body: {} {too_large_type}", too_large.status);
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "oversized request took {:?}",
        started.elapsed()
    );

    let query = server
        .raw(
            "POST",
            "/",
            &[("Content-Type", "application/x-www-form-urlencoded")],
            b"QueueName=no-action&Version=2012-11-05",
        )
        .await;
    assert_eq!(query.status, 400, "Query without Action: {}", query.text());
    let xml = query.text();
    eprintln!("Query without Action: {xml}");
    assert!(
        xml.contains("<ErrorResponse") && xml.contains("<RequestId>"),
        "{xml}"
    );
    assert!(
        xml.contains("<Code>MissingAction</Code>") || xml.contains("<Code>InvalidAction</Code>"),
        "Query without Action: {xml}"
    );
    let bad_form = server
        .raw(
            "POST",
            "/",
            &[("Content-Type", "application/x-www-form-urlencoded")],
            b"Action=CreateQueue&QueueName=%ZZ%&\xff",
        )
        .await;
    assert!(
        (400..500).contains(&bad_form.status),
        "bad form body: {} {}",
        bad_form.status,
        bad_form.text()
    );

    // Still alive, still serving, and none of the above created anything.
    assert!(
        server.is_running(),
        "the server died; log:\n{}",
        server.log()
    );
    let health = server.raw("GET", "/health", &[], b"").await;
    assert_eq!(health.status, 200);
    let sqs = &server.client;
    let listed = sqs.list_queues().send().await.unwrap();
    assert_eq!(
        listed.queue_urls(),
        std::slice::from_ref(&target),
        "bad requests created queues"
    );
    assert!(
        receive(sqs, &target, 10, 0, None).await.is_empty(),
        "the oversized message was kept"
    );
    let url = create_queue(sqs, &unique_name("after-bad-input"), &[]).await;
    send(sqs, &url, "still here").await;
    let message = receive_one(sqs, &url, 2, None).await;
    assert_eq!(message.body(), Some("still here"));
}
