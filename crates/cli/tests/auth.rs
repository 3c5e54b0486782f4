//! SigV4 authentication (`auth = "sigv4"`) through the official Rust SDK and raw HTTP: the right
//! key works and is the sender, every wrong one is refused with AWS's code and status.
//!
//! Expected codes and statuses: the SQS API reference's "Common Errors" page
//! (https://docs.aws.amazon.com/AWSSimpleQueueService/latest/APIReference/CommonErrors.html):
//! IncompleteSignature 400, InvalidClientTokenId 403, MissingAuthenticationToken 403,
//! RequestExpired 400 ("more than 15 minutes after the date stamp on the request ... or the
//! date stamp on the request is more than 15 minutes in the future"); SignatureDoesNotMatch 403
//! with AWS's sentence as SQS sends it (e.g. aws/aws-cli#5341, boto/boto#1573).

#[path = "auth/policy.rs"]
mod policy;

use std::sync::Arc;

use aws_sdk_sqs::error::ProvideErrorMetadata;
use aws_sdk_sqs::types::MessageSystemAttributeName;
use leaseq_server::auth::{Credential, Secret};
use leaseq_server::clock::{now_ms, ManualClock};
use leaseq_testkit::http::{self, Connection};
use leaseq_testkit::launch::{InProcessServer, Options};
use leaseq_testkit::sdk::{create_queue, sdk_client_signing};

const KEY_ID: &str = "AKIAEXAMPLE1";
const SECRET: &str = "secret-one/with+symbols";

/// A second account's key.
const KEY_ID_B: &str = "AKIAEXAMPLE2";
const SECRET_B: &str = "secret-two";
/// A key of the server's home account (the in-process server's 000000000000).
const KEY_ID_HOME: &str = "AKIAHOME";

async fn server(clock: ManualClock) -> InProcessServer {
    let key = |id: &str, secret: &str, account: &str| Credential {
        access_key_id: id.into(),
        secret: Secret::new(secret),
        account_id: account.into(),
    };
    InProcessServer::start_with(Options {
        clock: Arc::new(clock),
        credentials: Some(vec![
            key(KEY_ID, SECRET, "111111111111"),
            key(KEY_ID_B, SECRET_B, "222222222222"),
            key(KEY_ID_HOME, "home-secret", "000000000000"),
        ]),
        ..Options::default()
    })
    .await
}

/// Creates queue `name` (no attributes) with `client`'s key; its URL.
async fn create(client: &aws_sdk_sqs::Client, name: &str) -> String {
    create_queue(client, name, &[]).await
}

/// The code of an SDK error (from `x-amzn-query-error`, as the SDK reads it).
fn code<E: ProvideErrorMetadata>(error: &E) -> String {
    error.code().unwrap_or("<none>").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_right_key_works_and_is_the_sender() {
    let server = server(ManualClock::new(now_ms())).await;
    let sqs = sdk_client_signing(server.endpoint(), KEY_ID, SECRET);
    let url = create(&sqs, "jobs").await;
    sqs.send_message()
        .queue_url(&url)
        .message_body("hello")
        .send()
        .await
        .unwrap();
    let received = sqs
        .receive_message()
        .queue_url(&url)
        .message_system_attribute_names(MessageSystemAttributeName::SenderId)
        .send()
        .await
        .unwrap();
    let message = &received.messages()[0];
    assert_eq!(message.body(), Some("hello"));
    // SQS's SenderId of a request signed with an access key is that key's id.
    let sender = message.attributes().unwrap()[&MessageSystemAttributeName::SenderId].clone();
    assert_eq!(sender, KEY_ID);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_keys_are_refused_with_awss_codes() {
    let server = server(ManualClock::new(now_ms())).await;
    let wrong_secret = sdk_client_signing(server.endpoint(), KEY_ID, "not-the-secret");
    let error = wrong_secret.list_queues().send().await.unwrap_err();
    let error = error.into_service_error();
    assert_eq!(code(&error), "SignatureDoesNotMatch");
    assert!(error.message().unwrap().starts_with(
        "The request signature we calculated does not match the signature you provided."
    ));
    let unknown = sdk_client_signing(server.endpoint(), "AKIAUNKNOWN", SECRET);
    let error = unknown
        .list_queues()
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert_eq!(code(&error), "InvalidClientTokenId");
    assert_eq!(
        error.message(),
        Some("The security token included in the request is invalid.")
    );
    // Nothing was created or listed by the refused requests; the right key still works.
    let right = sdk_client_signing(server.endpoint(), KEY_ID, SECRET);
    assert!(right
        .list_queues()
        .send()
        .await
        .unwrap()
        .queue_urls()
        .is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signature_older_than_15_minutes_by_the_servers_clock_has_expired() {
    let clock = ManualClock::new(now_ms());
    let server = server(clock.clone()).await;
    let sqs = sdk_client_signing(server.endpoint(), KEY_ID, SECRET);
    sqs.list_queues().send().await.unwrap();
    // The SDK signs with the host's time; the server's clock is 16 minutes ahead of it.
    clock.advance(16 * 60 * 1000);
    let error = sqs
        .list_queues()
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert_eq!(code(&error), "RequestExpired");
    assert!(
        error.message().unwrap().starts_with("Signature expired: "),
        "{error:?}"
    );
    // And 16 minutes behind it: not yet current.
    clock.set(now_ms() - 16 * 60 * 1000);
    let error = sqs
        .list_queues()
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert_eq!(code(&error), "RequestExpired");
    assert!(error
        .message()
        .unwrap()
        .starts_with("Signature not yet current: "));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unsigned_and_malformed_requests_on_both_protocols() {
    let server = server(ManualClock::new(now_ms())).await;
    let mut connection = Connection::connect(server.addr()).await.unwrap();
    // JSON 1.0, no signature: 403 MissingAuthenticationToken, named in x-amzn-query-error.
    let target = http::target("ListQueues");
    let response = connection
        .send("POST", "/", &http::json_headers(&target), b"{}")
        .await
        .unwrap();
    assert_eq!(response.status, 403);
    assert_eq!(
        response.header("x-amzn-query-error"),
        Some("MissingAuthenticationToken;Sender")
    );
    assert_eq!(
        response.json()["__type"],
        "com.amazon.coral.service#MissingAuthenticationTokenException"
    );
    // Query, no signature: the same code in the XML error.
    let form = [("Content-Type", "application/x-www-form-urlencoded")];
    let response = connection
        .send("POST", "/", &form, b"Action=ListQueues&Version=2012-11-05")
        .await
        .unwrap();
    assert_eq!(response.status, 403);
    assert!(response
        .text()
        .contains("<Code>MissingAuthenticationToken</Code>"));
    // A signature without its parts: 400 IncompleteSignature.
    let headers = [
        ("Content-Type", "application/x-www-form-urlencoded"),
        (
            "Authorization",
            "AWS4-HMAC-SHA256 Credential=AKIAEXAMPLE1/20261201/us-east-1/sqs/aws4_request",
        ),
    ];
    let response = connection
        .send("POST", "/", &headers, b"Action=ListQueues")
        .await
        .unwrap();
    assert_eq!(response.status, 400);
    assert!(response.text().contains("<Code>IncompleteSignature</Code>"));
    assert!(response.text().contains("'SignedHeaders'"));
    // A presigned URL that is not complete: IncompleteSignature too.
    let response = connection
        .send(
            "GET",
            "/?Action=ListQueues&X-Amz-Signature=00&X-Amz-Algorithm=AWS4-HMAC-SHA256",
            &[],
            b"",
        )
        .await
        .unwrap();
    assert_eq!(response.status, 400);
    assert!(response.text().contains("<Code>IncompleteSignature</Code>"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_accounts_each_have_a_queue_jobs() {
    let server = server(ManualClock::new(now_ms())).await;
    let a = sdk_client_signing(server.endpoint(), KEY_ID, SECRET);
    let b = sdk_client_signing(server.endpoint(), KEY_ID_B, SECRET_B);
    let home = sdk_client_signing(server.endpoint(), KEY_ID_HOME, "home-secret");
    let url_a = create(&a, "jobs").await;
    let url_b = create(&b, "jobs").await;
    let url_home = create(&home, "jobs").await;
    // SQS's queue URL is https://sqs.REGION.amazonaws.com/ACCOUNT/NAME (the developer guide's
    // "Amazon SQS queue and message identifiers"): the account is the owner's.
    let endpoint = server.endpoint();
    assert_eq!(url_a, format!("{endpoint}/111111111111/jobs"));
    assert_eq!(url_b, format!("{endpoint}/222222222222/jobs"));
    assert_eq!(url_home, format!("{endpoint}/000000000000/jobs"));
    let arn = |client: &aws_sdk_sqs::Client, url: &str| {
        let (client, url) = (client.clone(), url.to_string());
        async move {
            client
                .get_queue_attributes()
                .queue_url(url)
                .attribute_names(aws_sdk_sqs::types::QueueAttributeName::QueueArn)
                .send()
                .await
                .unwrap()
                .attributes()
                .unwrap()[&aws_sdk_sqs::types::QueueAttributeName::QueueArn]
                .clone()
        }
    };
    assert_eq!(
        arn(&a, &url_a).await,
        "arn:aws:sqs:us-east-1:111111111111:jobs"
    );
    assert_eq!(
        arn(&b, &url_b).await,
        "arn:aws:sqs:us-east-1:222222222222:jobs"
    );
    // A message sent to A's queue is not in B's or the home account's.
    a.send_message()
        .queue_url(&url_a)
        .message_body("for a")
        .send()
        .await
        .unwrap();
    for (client, url) in [(&b, &url_b), (&home, &url_home)] {
        let received = client
            .receive_message()
            .queue_url(url)
            .send()
            .await
            .unwrap();
        assert!(received.messages().is_empty());
    }
    let received = a.receive_message().queue_url(&url_a).send().await.unwrap();
    assert_eq!(received.messages()[0].body(), Some("for a"));
    // Each account lists its own queues only.
    for client in [&a, &b, &home] {
        let listed = client.list_queues().send().await.unwrap();
        assert_eq!(listed.queue_urls().len(), 1, "{listed:?}");
    }
    // A dead-letter queue in account B, named by its ARN, takes B's dead letters.
    let dlq = create(&b, "jobs-dlq").await;
    b.set_queue_attributes()
        .queue_url(&url_b)
        .attributes(
            aws_sdk_sqs::types::QueueAttributeName::RedrivePolicy,
            r#"{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:222222222222:jobs-dlq","maxReceiveCount":"1"}"#,
        )
        .send()
        .await
        .unwrap();
    let sources = b
        .list_dead_letter_source_queues()
        .queue_url(&dlq)
        .send()
        .await
        .unwrap();
    assert_eq!(sources.queue_urls(), std::slice::from_ref(&url_b));
    // A key cannot reach another namespace by spelling the engine's name of its queue.
    let error = a
        .get_queue_url()
        .queue_name("222222222222:us-east-1:jobs")
        .send()
        .await
        .unwrap_err()
        .into_service_error();
    assert_eq!(code(&error), "AWS.SimpleQueueService.NonExistentQueue");
}

/// A JSON 1.0 call with this `Host` header; its JSON answer, which must be a 200.
async fn call(
    connection: &mut Connection,
    host: String,
    action: &str,
    body: serde_json::Value,
) -> serde_json::Value {
    let target = http::target(action);
    let [content_type, target_header] = http::json_headers(&target);
    let response = connection
        .send(
            "POST",
            "/",
            &[content_type, target_header, ("host", &host)],
            body.to_string().as_bytes(),
        )
        .await
        .unwrap();
    assert_eq!(response.status, 200, "{}", response.text());
    response.json()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_regional_host_selects_the_region() {
    // Without authentication: the home account, the region the Host names.
    let server = InProcessServer::start().await;
    let mut connection = Connection::connect(server.addr()).await.unwrap();
    let port = server.addr().port();
    let regional = format!("sqs.eu-west-1.localhost:{port}");
    let legacy = format!("eu-west-1.queue.localhost:{port}");
    let plain = server.addr().to_string();
    let created = call(
        &mut connection,
        regional.clone(),
        "CreateQueue",
        serde_json::json!({"QueueName": "jobs"}),
    )
    .await;
    // The URL keeps the host form the client used.
    assert_eq!(
        created["QueueUrl"],
        format!("http://{regional}/000000000000/jobs")
    );
    let home = call(
        &mut connection,
        plain.clone(),
        "CreateQueue",
        serde_json::json!({"QueueName": "jobs"}),
    )
    .await;
    assert_eq!(
        home["QueueUrl"],
        format!("http://{plain}/000000000000/jobs")
    );
    let attributes = call(
        &mut connection,
        legacy.clone(),
        "GetQueueAttributes",
        serde_json::json!({"QueueUrl": "jobs", "AttributeNames": ["QueueArn"]}),
    )
    .await;
    assert_eq!(
        attributes["Attributes"]["QueueArn"],
        "arn:aws:sqs:eu-west-1:000000000000:jobs"
    );
    let attributes = call(
        &mut connection,
        plain.clone(),
        "GetQueueAttributes",
        serde_json::json!({"QueueUrl": "jobs", "AttributeNames": ["QueueArn"]}),
    )
    .await;
    assert_eq!(
        attributes["Attributes"]["QueueArn"],
        "arn:aws:sqs:us-east-1:000000000000:jobs"
    );
    // One name in two regions is two queues.
    call(
        &mut connection,
        regional.clone(),
        "SendMessage",
        serde_json::json!({"QueueUrl": created["QueueUrl"], "MessageBody": "eu"}),
    )
    .await;
    let received = call(
        &mut connection,
        plain.clone(),
        "ReceiveMessage",
        serde_json::json!({"QueueUrl": home["QueueUrl"]}),
    )
    .await;
    assert!(
        received
            .get("Messages")
            .is_none_or(|m| m.as_array().unwrap().is_empty()),
        "{received}"
    );
    let received = call(
        &mut connection,
        legacy,
        "ReceiveMessage",
        serde_json::json!({"QueueUrl": "jobs"}),
    )
    .await;
    assert_eq!(received["Messages"][0]["Body"], "eu");
    let listed = call(&mut connection, plain, "ListQueues", serde_json::json!({})).await;
    assert_eq!(listed["QueueUrls"].as_array().unwrap().len(), 1, "{listed}");
}
