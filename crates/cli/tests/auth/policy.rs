//! Queue policies between accounts (`auth = "sigv4"`) through the official Rust SDK: the owner
//! may do everything, another account what the queue's `Policy` allows (written by
//! AddPermission or set as a document), an explicit Deny wins, nothing is allowed by default,
//! and the queue-management actions stay the owner's whatever the policy says.
//!
//! Expected values and their sources:
//! - The refusal: `AccessDenied`, HTTP 403, "Access to the resource https://sqs.REGION.
//!   amazonaws.com/ is denied." (the endpoint the request went to), as SQS answers (reported by
//!   SDK users with the status and the code, e.g. aws/aws-sdk-php#188 "Status Code: 403; Error
//!   Code: AccessDenied", bbc/sqs-consumer#225).
//! - A queue URL names its owner's account (`https://sqs.REGION.amazonaws.com/ACCOUNT/NAME`,
//!   SQS Developer Guide, "Amazon SQS queue and message identifiers"); GetQueueUrl's
//!   `QueueOwnerAWSAccountId` names "the AWS account ID of the account that created the queue"
//!   (GetQueueUrl, SQS API reference).
//! - AddPermission grants the named accounts the named actions, and `SendMessage`,
//!   `DeleteMessage`, `ChangeMessageVisibility` also their batch versions (AddPermission, SQS API
//!   reference); "Cross-account permissions don't apply to this action" for AddPermission,
//!   RemovePermission, DeleteQueue, SetQueueAttributes, TagQueue, UntagQueue, ListQueueTags (their
//!   pages in the SQS API reference).
//! - Wildcards in actions and resources, case-insensitive action names, explicit deny over
//!   allow, default deny: IAM User Guide, "IAM JSON policy elements: Action" and "Policy
//!   evaluation logic".

use aws_sdk_sqs::config::http::HttpResponse;
use aws_sdk_sqs::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_sqs::types::{QueueAttributeName, SendMessageBatchRequestEntry};
use aws_sdk_sqs::Client;
use leaseq_server::clock::{now_ms, ManualClock};
use leaseq_testkit::launch::InProcessServer;
use leaseq_testkit::sdk::{sdk_client, sdk_client_signing};

use super::{create, server, KEY_ID, KEY_ID_B, KEY_ID_HOME, SECRET, SECRET_B};

const OWNER: &str = "111111111111";
const GRANTED: &str = "222222222222";
/// The third account: the server's home account.
const OTHER: &str = "000000000000";

struct Accounts {
    server: InProcessServer,
    owner: Client,
    granted: Client,
    other: Client,
}

async fn accounts() -> Accounts {
    let server = server(ManualClock::new(now_ms())).await;
    Accounts {
        owner: sdk_client_signing(server.endpoint(), KEY_ID, SECRET),
        granted: sdk_client_signing(server.endpoint(), KEY_ID_B, SECRET_B),
        other: sdk_client_signing(server.endpoint(), KEY_ID_HOME, "home-secret"),
        server,
    }
}

/// Asserts that a call was refused as SQS refuses it: `AccessDenied`, 403, AWS's sentence.
#[track_caller]
fn assert_denied<T: std::fmt::Debug, E: ProvideErrorMetadata + std::fmt::Debug>(
    result: Result<T, SdkError<E, HttpResponse>>,
    endpoint: &str,
    what: &str,
) {
    let error = result.expect_err(what);
    let status = error
        .raw_response()
        .map(|response| response.status().as_u16());
    assert_eq!(status, Some(403), "{what}: {error:?}");
    // The code as the SDK reads it (from `x-amzn-query-error`).
    assert_eq!(error.code(), Some("AccessDenied"), "{what}: {error:?}");
    assert_eq!(
        error.message(),
        Some(format!("Access to the resource {endpoint}/ is denied.").as_str()),
        "{what}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_permission_grants_the_named_actions_to_the_named_account_only() {
    let Accounts {
        server,
        owner,
        granted,
        other,
    } = accounts().await;
    let endpoint = server.endpoint();
    let url = create(&owner, "shared").await;
    assert_eq!(url, format!("{endpoint}/{OWNER}/shared"));
    // The granted account has a queue of the same name: the URL's account decides which.
    let granted_own = create(&granted, "shared").await;
    assert_eq!(granted_own, format!("{endpoint}/{GRANTED}/shared"));
    let send = |client: &Client, body: &str| {
        client
            .send_message()
            .queue_url(&url)
            .message_body(body)
            .send()
    };
    // Before any permission another account may do nothing with the queue.
    assert_denied(
        send(&granted, "early").await,
        endpoint,
        "send before the grant",
    );
    assert_denied(
        granted
            .get_queue_url()
            .queue_name("shared")
            .queue_owner_aws_account_id(OWNER)
            .send()
            .await,
        endpoint,
        "GetQueueUrl before the grant",
    );

    owner
        .add_permission()
        .queue_url(&url)
        .label("granted-sends")
        .aws_account_ids(GRANTED)
        .actions("SendMessage")
        .actions("GetQueueUrl")
        .send()
        .await
        .unwrap();
    // GetQueueUrl with the owner's account finds the owner's queue, not the caller's own.
    let found = granted
        .get_queue_url()
        .queue_name("shared")
        .queue_owner_aws_account_id(OWNER)
        .send()
        .await
        .unwrap();
    assert_eq!(found.queue_url(), Some(url.as_str()));
    send(&granted, "one").await.unwrap();
    // SendMessage grants SendMessageBatch.
    granted
        .send_message_batch()
        .queue_url(&url)
        .entries(
            SendMessageBatchRequestEntry::builder()
                .id("a")
                .message_body("two")
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    // What was not granted stays refused, to the granted account and to everyone else.
    assert_denied(
        granted.receive_message().queue_url(&url).send().await,
        endpoint,
        "receive, not granted",
    );
    assert_denied(
        granted.purge_queue().queue_url(&url).send().await,
        endpoint,
        "purge, not granted",
    );
    assert_denied(
        send(&other, "three").await,
        endpoint,
        "send of another account",
    );
    assert_denied(
        other
            .get_queue_url()
            .queue_name("shared")
            .queue_owner_aws_account_id(OWNER)
            .send()
            .await,
        endpoint,
        "GetQueueUrl of another account",
    );
    // An owner that is not an account id names no account's queue.
    for owner in [
        format!("{OWNER}:us-east-1"),
        String::new() + ":",
        "1".into(),
    ] {
        assert_denied(
            granted
                .get_queue_url()
                .queue_name("shared")
                .queue_owner_aws_account_id(&owner)
                .send()
                .await,
            endpoint,
            "GetQueueUrl of a malformed owner",
        );
    }
    // A queue of the owner that does not exist is refused the same way: nothing leaks.
    assert_denied(
        granted
            .send_message()
            .queue_url(format!("{endpoint}/{OWNER}/missing"))
            .message_body("x")
            .send()
            .await,
        endpoint,
        "send to a missing queue of another account",
    );
    // The messages are in the owner's queue, none in the granted account's own `shared`.
    let received = owner
        .receive_message()
        .queue_url(&url)
        .max_number_of_messages(10)
        .send()
        .await
        .unwrap();
    let mut bodies: Vec<_> = received
        .messages()
        .iter()
        .filter_map(|m| m.body())
        .collect();
    bodies.sort();
    assert_eq!(bodies, ["one", "two"]);
    let own = granted
        .receive_message()
        .queue_url(&granted_own)
        .send()
        .await
        .unwrap();
    assert!(own.messages().is_empty());

    // The owner's actions stay the owner's.
    assert_denied(
        granted
            .add_permission()
            .queue_url(&url)
            .label("me-too")
            .aws_account_ids(GRANTED)
            .actions("*")
            .send()
            .await,
        endpoint,
        "AddPermission by another account",
    );
    assert_denied(
        granted
            .remove_permission()
            .queue_url(&url)
            .label("granted-sends")
            .send()
            .await,
        endpoint,
        "RemovePermission by another account",
    );
    // Removing the permission takes the grant back.
    owner
        .remove_permission()
        .queue_url(&url)
        .label("granted-sends")
        .send()
        .await
        .unwrap();
    assert_denied(
        send(&granted, "late").await,
        endpoint,
        "send after the removal",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_document_with_wildcards_and_an_explicit_deny() {
    let Accounts {
        server,
        owner,
        granted,
        other,
    } = accounts().await;
    let endpoint = server.endpoint();
    // Everyone may send, receive, delete and read attributes of the owner's `work*` queues
    // (action names in any case, wildcards), except the third account, denied everything.
    let policy = serde_json::json!({
        "Version": "2012-10-17",
        "Statement": [
            {"Sid": "all", "Effect": "Allow", "Principal": "*",
             "Action": ["sqs:send*", "SQS:Receive*", "sqs:DeleteMessage", "sqs:GetQueue*"],
             "Resource": format!("arn:aws:sqs:*:{OWNER}:work*")},
            {"Sid": "not-them", "Effect": "Deny", "Principal": {"AWS": format!("arn:aws:iam::{OTHER}:root")},
             "Action": "sqs:*", "Resource": "*"},
        ],
    })
    .to_string();
    // Set at creation, through CreateQueue's attributes.
    let url = owner
        .create_queue()
        .queue_name("work")
        .attributes(QueueAttributeName::Policy, &policy)
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    granted
        .send_message()
        .queue_url(&url)
        .message_body("job")
        .send()
        .await
        .unwrap();
    let received = granted
        .receive_message()
        .queue_url(&url)
        .send()
        .await
        .unwrap();
    let message = &received.messages()[0];
    assert_eq!(message.body(), Some("job"));
    let receipt = message.receipt_handle().unwrap();
    // Not granted: sqs:ChangeMessageVisibility matches none of the patterns.
    assert_denied(
        granted
            .change_message_visibility()
            .queue_url(&url)
            .receipt_handle(receipt)
            .visibility_timeout(0)
            .send()
            .await,
        endpoint,
        "ChangeMessageVisibility, not granted",
    );
    granted
        .delete_message()
        .queue_url(&url)
        .receipt_handle(receipt)
        .send()
        .await
        .unwrap();
    let attributes = granted
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .send()
        .await
        .unwrap();
    assert_eq!(
        attributes.attributes().unwrap()[&QueueAttributeName::ApproximateNumberOfMessages],
        "0"
    );
    // The explicit Deny wins over the Allow of "*".
    assert_denied(
        other
            .send_message()
            .queue_url(&url)
            .message_body("x")
            .send()
            .await,
        endpoint,
        "send of the denied account",
    );
    // The resource pattern: a queue of the owner not named `work*` grants nothing.
    let elsewhere = owner
        .create_queue()
        .queue_name("private")
        .attributes(QueueAttributeName::Policy, &policy)
        .send()
        .await
        .unwrap()
        .queue_url
        .unwrap();
    assert_denied(
        granted
            .send_message()
            .queue_url(&elsewhere)
            .message_body("x")
            .send()
            .await,
        endpoint,
        "send to a queue the Resource does not match",
    );
    // The owner is never refused by its own policy.
    owner
        .send_message()
        .queue_url(&url)
        .message_body("mine")
        .send()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queue_management_stays_the_owners_and_conditions_never_grant() {
    let Accounts {
        server,
        owner,
        granted,
        other: _,
    } = accounts().await;
    let endpoint = server.endpoint();
    let url = create(&owner, "open").await;
    // Every SQS action to the granted account, set through SetQueueAttributes.
    let everything = serde_json::json!({"Statement": [{"Effect": "Allow",
        "Principal": {"AWS": GRANTED}, "Action": "sqs:*", "Resource": "*"}]});
    owner
        .set_queue_attributes()
        .queue_url(&url)
        .attributes(QueueAttributeName::Policy, everything.to_string())
        .send()
        .await
        .unwrap();
    // PurgeQueue is one AddPermission can grant: allowed.
    granted.purge_queue().queue_url(&url).send().await.unwrap();
    assert_denied(
        granted
            .set_queue_attributes()
            .queue_url(&url)
            .attributes(QueueAttributeName::Policy, "")
            .send()
            .await,
        endpoint,
        "SetQueueAttributes by another account",
    );
    assert_denied(
        granted
            .tag_queue()
            .queue_url(&url)
            .tags("k", "v")
            .send()
            .await,
        endpoint,
        "TagQueue by another account",
    );
    assert_denied(
        granted.list_queue_tags().queue_url(&url).send().await,
        endpoint,
        "ListQueueTags by another account",
    );
    assert_denied(
        granted.delete_queue().queue_url(&url).send().await,
        endpoint,
        "DeleteQueue by another account",
    );
    // The queue is still there, its policy unchanged.
    let attributes = owner
        .get_queue_attributes()
        .queue_url(&url)
        .attribute_names(QueueAttributeName::Policy)
        .send()
        .await
        .unwrap();
    assert!(attributes
        .attributes()
        .unwrap()
        .contains_key(&QueueAttributeName::Policy));
    // An Allow with a condition leaseq does not evaluate grants nothing.
    let conditional = serde_json::json!({"Statement": [{"Effect": "Allow",
        "Principal": {"AWS": GRANTED}, "Action": "sqs:*", "Resource": "*",
        "Condition": {"ArnEquals": {"aws:SourceArn": format!("arn:aws:sns:us-east-1:{GRANTED}:topic")}}}]});
    owner
        .set_queue_attributes()
        .queue_url(&url)
        .attributes(QueueAttributeName::Policy, conditional.to_string())
        .send()
        .await
        .unwrap();
    assert_denied(
        granted
            .send_message()
            .queue_url(&url)
            .message_body("x")
            .send()
            .await,
        endpoint,
        "send under an unevaluated condition",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_authentication_a_urls_account_is_ignored_as_before() {
    // auth = "none": every request is the home account's, whatever account its URL names.
    let server = InProcessServer::start().await;
    let sqs = sdk_client(server.endpoint());
    let url = create(&sqs, "jobs").await;
    let foreign_url = format!("{}/{OWNER}/jobs", server.endpoint());
    sqs.send_message()
        .queue_url(&foreign_url)
        .message_body("hello")
        .send()
        .await
        .unwrap();
    let received = sqs.receive_message().queue_url(&url).send().await.unwrap();
    assert_eq!(received.messages()[0].body(), Some("hello"));
}
