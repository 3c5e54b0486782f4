//! The official Rust SDK (`aws-sdk-sqs`) pointed at a server under test, and the MD5s an SQS
//! client checks, computed from SQS's documented algorithm rather than taken from the server's
//! code, so that the two can disagree.

use std::collections::HashMap;

use aws_sdk_sqs::config::retry::RetryConfig;
use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_sqs::error::DisplayErrorContext;
use aws_sdk_sqs::types::{Message, MessageSystemAttributeName, QueueAttributeName};
use aws_sdk_sqs::Client;
use md5::{Digest as _, Md5};

/// An SDK client that speaks plain HTTP to `endpoint`, without aws-config, TLS or retries, so
/// every error surfaces as the server sent it.
///
/// A client's connection pool belongs to the tokio runtime that created it, and every
/// `#[tokio::test]` has a runtime of its own: make one client per test.
pub fn sdk_client(endpoint: &str) -> Client {
    sdk_client_signing(endpoint, "test", "test")
}

/// [`sdk_client`] signing with this access key id and secret (for servers with `auth = "sigv4"`).
pub fn sdk_client_signing(endpoint: &str, access_key_id: &str, secret: &str) -> Client {
    let http_client = aws_smithy_http_client::Builder::new().build_http();
    let config = aws_sdk_sqs::Config::builder()
        .endpoint_url(endpoint)
        .region(Region::new("us-east-1"))
        .credentials_provider(Credentials::new(
            access_key_id,
            secret,
            None,
            None,
            "static",
        ))
        .behavior_version(BehaviorVersion::latest())
        .retry_config(RetryConfig::disabled())
        .http_client(http_client)
        .build();
    Client::from_conf(config)
}

/// Creates queue `name` with `attributes`; its URL. Panics, with the SDK's whole error, if
/// the server refuses.
pub async fn create_queue(
    client: &Client,
    name: &str,
    attributes: &[(QueueAttributeName, &str)],
) -> String {
    let mut request = client.create_queue().queue_name(name);
    for (key, value) in attributes {
        request = request.attributes(key.clone(), *value);
    }
    let output = request
        .send()
        .await
        .unwrap_or_else(|error| panic!("CreateQueue {name}: {}", DisplayErrorContext(&error)));
    output
        .queue_url()
        .expect("CreateQueue returns a QueueUrl")
        .to_string()
}

/// Every attribute of queue `url` (`AttributeNames: All`).
pub async fn queue_attributes(client: &Client, url: &str) -> HashMap<QueueAttributeName, String> {
    let output = client
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::All)
        .send()
        .await
        .unwrap_or_else(|error| panic!("GetQueueAttributes: {}", DisplayErrorContext(&error)));
    output.attributes().cloned().unwrap_or_default()
}

/// Receives up to `max` messages with all system and message attributes, waiting up to
/// `wait_seconds`, leased for `visibility_seconds` (the queue's default if `None`). Checks
/// each message's MD5OfBody, which this SDK, unlike boto3 or the Java SDK, does not check
/// itself.
pub async fn receive(
    client: &Client,
    url: &str,
    max: i32,
    wait_seconds: i32,
    visibility_seconds: Option<i32>,
) -> Vec<Message> {
    let output = client
        .receive_message()
        .queue_url(url)
        .max_number_of_messages(max)
        .wait_time_seconds(wait_seconds)
        .set_visibility_timeout(visibility_seconds)
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .message_attribute_names("All")
        .send()
        .await
        .unwrap_or_else(|error| panic!("ReceiveMessage: {}", DisplayErrorContext(&error)));
    let messages = output.messages().to_vec();
    for message in &messages {
        let body = message.body().expect("a received message has a Body");
        assert_eq!(
            message.md5_of_body(),
            Some(md5_hex(body.as_bytes()).as_str()),
            "MD5OfBody of a received message"
        );
    }
    messages
}

/// Lower-case hex MD5 of `bytes`.
pub fn md5_hex(bytes: &[u8]) -> String {
    Md5::digest(bytes)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// One message attribute as SQS hashes it.
pub enum AttributeValue<'a> {
    /// `String`, `Number` and their custom sub-types (transport type 1).
    Text(&'a str),
    /// `Binary` and its custom sub-types (transport type 2).
    Binary(&'a [u8]),
}

/// MD5OfMessageAttributes (and MD5OfMessageSystemAttributes) of `(name, data type, value)`
/// triples: for each attribute in name order, the 4-byte big-endian length and bytes of the
/// name, likewise the data type, one transport byte (1 text, 2 binary), then the length and
/// bytes of the value.
pub fn attributes_md5(attributes: &[(&str, &str, AttributeValue<'_>)]) -> String {
    fn put(buffer: &mut Vec<u8>, bytes: &[u8]) {
        buffer.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
        buffer.extend_from_slice(bytes);
    }
    let mut sorted: Vec<_> = attributes.iter().collect();
    sorted.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    let mut buffer = Vec::new();
    for (name, data_type, value) in sorted {
        put(&mut buffer, name.as_bytes());
        put(&mut buffer, data_type.as_bytes());
        match value {
            AttributeValue::Text(text) => {
                buffer.push(1);
                put(&mut buffer, text.as_bytes());
            }
            AttributeValue::Binary(bytes) => {
                buffer.push(2);
                put(&mut buffer, bytes);
            }
        }
    }
    md5_hex(&buffer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn md5s_match_sqs_documented_values() {
        // The MD5 of "hello", and of one String attribute as SQS documents the encoding.
        assert_eq!(md5_hex(b"hello"), "5d41402abc4b2a76b9719d911017c592");
        let mut expected = Vec::new();
        for part in [&b"a"[..], b"String"] {
            expected.extend_from_slice(&(part.len() as u32).to_be_bytes());
            expected.extend_from_slice(part);
        }
        expected.push(1);
        expected.extend_from_slice(&1u32.to_be_bytes());
        expected.extend_from_slice(b"x");
        assert_eq!(
            attributes_md5(&[("a", "String", AttributeValue::Text("x"))]),
            md5_hex(&expected)
        );
    }
}
