//! End-to-end tests of `leaseq serve` through the official Rust SDK (`aws-sdk-sqs`, AWS JSON 1.0),
//! plus raw HTTP for input no SDK would send.
//!
//! Expectations are SQS's, not leaseq's: error codes are the ones real SQS returns (the SDK maps
//! the legacy code in `x-amzn-query-error` to its typed errors), and the MD5s are recomputed here
//! from SQS's documented algorithm, because this SDK, unlike boto3 or the Java SDK, does not check
//! them itself. Lease scenarios use visibility timeouts of one or two seconds and long polls
//! instead of sleeps wherever the server can tell us when something happened.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use aws_sdk_sqs::error::{DisplayErrorContext, ProvideErrorMetadata};
use aws_sdk_sqs::primitives::Blob;
use aws_sdk_sqs::types::{
    ChangeMessageVisibilityBatchRequestEntry, DeleteMessageBatchRequestEntry, Message,
    MessageAttributeValue, MessageSystemAttributeName, MessageSystemAttributeNameForSends,
    MessageSystemAttributeValue, QueueAttributeName, SendMessageBatchRequestEntry,
};
use aws_sdk_sqs::Client;
use common::Server;
use leaseq_testkit::http;
use leaseq_testkit::names::unique_name;
use leaseq_testkit::sdk::{
    attributes_md5, create_queue, md5_hex, queue_attributes, receive, AttributeValue,
};

const ACCOUNT_ID: &str = "000000000000";

async fn queue_attribute(sqs: &Client, url: &str, name: QueueAttributeName) -> String {
    let attributes = queue_attributes(sqs, url).await;
    attributes
        .get(&name)
        .unwrap_or_else(|| panic!("attribute {name:?} missing from {attributes:?}"))
        .clone()
}

async fn queue_arn(sqs: &Client, url: &str) -> String {
    queue_attribute(sqs, url, QueueAttributeName::QueueArn).await
}

async fn send(sqs: &Client, url: &str, body: &str) -> String {
    let output = sqs
        .send_message()
        .queue_url(url)
        .message_body(body)
        .send()
        .await
        .unwrap_or_else(|e| panic!("SendMessage: {}", DisplayErrorContext(&e)));
    assert_eq!(
        output.md5_of_message_body(),
        Some(md5_hex(body.as_bytes()).as_str())
    );
    output
        .message_id()
        .expect("SendMessage returns a MessageId")
        .to_string()
}

/// Receives exactly one message, long-polling up to `wait_seconds` for it.
async fn receive_one(
    sqs: &Client,
    url: &str,
    wait_seconds: i32,
    visibility_seconds: Option<i32>,
) -> Message {
    let mut messages = receive(sqs, url, 1, wait_seconds, visibility_seconds).await;
    assert_eq!(messages.len(), 1, "expected one message, got {messages:?}");
    messages.remove(0)
}

fn system_attribute(message: &Message, name: MessageSystemAttributeName) -> Option<&str> {
    message
        .attributes()
        .and_then(|a| a.get(&name))
        .map(String::as_str)
}

fn receive_count(message: &Message) -> u32 {
    system_attribute(message, MessageSystemAttributeName::ApproximateReceiveCount)
        .unwrap_or_else(|| panic!("no ApproximateReceiveCount in {message:?}"))
        .parse()
        .expect("ApproximateReceiveCount is a number")
}

fn receipt(message: &Message) -> &str {
    message
        .receipt_handle()
        .expect("a received message has a ReceiptHandle")
}

fn text_attribute(data_type: &str, value: &str) -> MessageAttributeValue {
    MessageAttributeValue::builder()
        .data_type(data_type)
        .string_value(value)
        .build()
        .expect("a complete attribute")
}

fn binary_attribute(data_type: &str, value: &[u8]) -> MessageAttributeValue {
    MessageAttributeValue::builder()
        .data_type(data_type)
        .binary_value(Blob::new(value))
        .build()
        .expect("a complete attribute")
}

fn send_entry(id: &str, body: &str) -> SendMessageBatchRequestEntry {
    SendMessageBatchRequestEntry::builder()
        .id(id)
        .message_body(body)
        .build()
        .expect("a complete entry")
}

/// The error code of a failed call, for errors the SDK has no typed variant for.
fn error_code<E: ProvideErrorMetadata>(error: &E) -> String {
    error.code().unwrap_or("<no code>").to_string()
}

/// Asserts that `result` failed with a service error for which `check` holds.
macro_rules! assert_service_error {
    ($result:expr, $check:ident) => {{
        match $result {
            Ok(output) => panic!(
                "expected {} but the call succeeded: {output:?}",
                stringify!($check)
            ),
            Err(error) => {
                let matches = error.as_service_error().is_some_and(|e| e.$check());
                assert!(
                    matches,
                    "expected {}, got: {}",
                    stringify!($check),
                    DisplayErrorContext(&error)
                );
            }
        }
    }};
}

/// Asserts that `result` failed with error code `code` (from `x-amzn-query-error`).
macro_rules! assert_error_code {
    ($result:expr, $code:expr) => {{
        match $result {
            Ok(output) => panic!(
                "expected error {} but the call succeeded: {output:?}",
                $code
            ),
            Err(error) => assert_eq!(
                error_code(&error),
                $code,
                "unexpected error: {}",
                DisplayErrorContext(&error)
            ),
        }
    }};
}

/// A published vector (a `Number` attribute), so the helper is checked against someone else's
/// implementation, not only against the server's.
#[test]
fn attribute_md5_helper_matches_a_published_vector() {
    let md5 = attributes_md5(&[("timestamp", "Number", AttributeValue::Text("1493147359900"))]);
    assert_eq!(md5, "235c5c510d26fb653d073faed50ae77c");
}

// The tests, one file per area; one test binary, so the SDK is linked once.
#[path = "sdk/bad_input.rs"]
mod bad_input;
#[path = "sdk/fair.rs"]
mod fair;
#[path = "sdk/fidelity.rs"]
mod fidelity;
#[path = "sdk/fifo.rs"]
mod fifo;
#[path = "sdk/history.rs"]
mod history;
#[path = "sdk/leases.rs"]
mod leases;
#[path = "sdk/messages.rs"]
mod messages;
#[path = "sdk/moves.rs"]
mod moves;
#[path = "sdk/queues.rs"]
mod queues;
