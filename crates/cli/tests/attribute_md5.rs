//! `MD5OfMessageAttributes` as the strictest SDKs check it, on both wire protocols.
//!
//! boto3, the Rust SDK and the JavaScript SDK v3 check no attribute MD5 at all; four SDKs do, and
//! an application on any of them fails on a wrong one. None of them can be installed here, so
//! their algorithm is written out below from their public source:
//!
//! - Java v2: `services/sqs/src/main/java/software/amazon/awssdk/services/sqs/internal/
//!   MessageMD5ChecksumInterceptor.java` (aws/aws-sdk-java-v2): checks SendMessage,
//!   SendMessageBatch and ReceiveMessage whenever the request (or the received message) has
//!   attributes; names sorted with `Collections.sort` (UTF-16 order, which for the ASCII that
//!   SQS allows in names is byte order); per attribute `updateLengthAndBytes(name)`,
//!   `updateLengthAndBytes(dataType)`, then 1 and the string value or 2 and the binary value,
//!   every length a 4-byte big-endian int.
//! - .NET: `sdk/src/Services/SQS/Custom/Internal/ValidationResponseHandler.cs`
//!   (aws/aws-sdk-net): the same bytes (`SQSWriter`, big-endian lengths), names in
//!   `StringComparer.Ordinal` order, the same three checks.
//! - PHP: `src/Sqs/SqsClient.php` (aws/aws-sdk-php), `calculateMessageAttributesMd5` and
//!   `validateMd5`: ReceiveMessage only, names `ksort`ed, the transport byte chosen by the data
//!   type (`substr($details['DataType'], 0, 6) === 'Binary'` → 2, else 1), and two rules of its
//!   own: an `MD5OfMessageAttributes` on a message that came without attributes is a mismatch
//!   ("Expected …, found No Attributes"), and attributes without an MD5 are an error too ("No
//!   Attribute MD5 found").
//! - Ruby: `gems/aws-sdk-sqs/lib/aws-sdk-sqs/plugins/md5s.rb` (aws/aws-sdk-ruby): SendMessage
//!   and SendMessageBatch, the transport byte from the data type's base
//!   (`/\A(String|Binary|Number)(\..+)?\z/`, String and Number 1, Binary 2), `L>` lengths.
//!
//! So the digest below picks the transport byte by data type as PHP and Ruby do, which for a
//! valid attribute is also what Java and .NET pick by value. The golden vectors were computed
//! once with an independent implementation (Python's hashlib, outside this repository) and the
//! test checks that this digest reproduces them before it compares leaseq's answers with them.
//! Nothing here calls leaseq's own MD5 code (`leaseq_sqs::md5`).

mod common;

use base64::Engine as _;
use common::Server;
use md5::{Digest as _, Md5};
use serde_json::{json, Map, Value};

/// One attribute: name, data type, value (text for String/Number types, bytes for Binary).
#[derive(Clone)]
struct Attribute {
    name: &'static str,
    data_type: &'static str,
    value: AttributeValue,
}

#[derive(Clone)]
enum AttributeValue {
    Text(&'static str),
    Bytes(Vec<u8>),
}

fn text(name: &'static str, data_type: &'static str, value: &'static str) -> Attribute {
    let value = AttributeValue::Text(value);
    Attribute {
        name,
        data_type,
        value,
    }
}

fn bytes(name: &'static str, data_type: &'static str, value: Vec<u8>) -> Attribute {
    let value = AttributeValue::Bytes(value);
    Attribute {
        name,
        data_type,
        value,
    }
}

/// The strict SDKs' MD5OfMessageAttributes (see the module comment for the sources).
fn sdk_attributes_md5(attributes: &[Attribute]) -> String {
    fn length_and_bytes(digest: &mut Md5, bytes: &[u8]) {
        digest.update(u32::try_from(bytes.len()).unwrap().to_be_bytes());
        digest.update(bytes);
    }
    let mut sorted: Vec<&Attribute> = attributes.iter().collect();
    sorted.sort_by(|a, b| a.name.as_bytes().cmp(b.name.as_bytes()));
    let mut digest = Md5::new();
    for attribute in sorted {
        length_and_bytes(&mut digest, attribute.name.as_bytes());
        length_and_bytes(&mut digest, attribute.data_type.as_bytes());
        let binary = attribute.data_type.starts_with("Binary");
        digest.update([if binary { 2u8 } else { 1u8 }]);
        match &attribute.value {
            AttributeValue::Text(value) => length_and_bytes(&mut digest, value.as_bytes()),
            AttributeValue::Bytes(value) => length_and_bytes(&mut digest, value),
        }
    }
    digest
        .finalize()
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

/// Every data type SQS has (String, Number, Binary) and a custom type of each.
fn every_type() -> Vec<Attribute> {
    vec![
        text("str", "String", "héllo <&> 🦀"),
        text("num", "Number", "-12.5e3"),
        bytes("bin", "Binary", (0..=255).collect()),
        text("price", "Number.float", "3.25"),
        bytes(
            "photo",
            "Binary.jpg",
            vec![0xff, 0xd8, 0xff, 0xe0, 0x00, 0x10],
        ),
        text("note", "String.x", "custom"),
    ]
}
const EVERY_TYPE_MD5: &str = "7fe4d7712c5c4e4a77644bb09177c61a";

/// Names whose order differs between byte order and a case-insensitive or natural sort.
fn sort_order() -> Vec<Attribute> {
    vec![
        text("b", "String", "lower b"),
        text("B", "String", "upper B"),
        text("_x", "Number", "1"),
        text("a.b", "String", "dot"),
    ]
}
const SORT_ORDER_MD5: &str = "a395938bb7a8a8445e47d32e0108cf0d";

/// `str` and `price` of [`every_type`]: what a receive filtered to them returns.
const FILTERED_MD5: &str = "bf97a4c911b6e8d5b5fafe1e6f24a4f5";

#[test]
fn the_sdk_digest_reproduces_the_golden_vectors() {
    assert_eq!(sdk_attributes_md5(&every_type()), EVERY_TYPE_MD5);
    assert_eq!(sdk_attributes_md5(&sort_order()), SORT_ORDER_MD5);
    let filtered: Vec<Attribute> = every_type()
        .into_iter()
        .filter(|attribute| ["str", "price"].contains(&attribute.name))
        .collect();
    assert_eq!(sdk_attributes_md5(&filtered), FILTERED_MD5);
    assert_eq!(
        sdk_attributes_md5(&[text("a", "String", "x")]),
        "a512aac9938034acb0b3c3d965944bf1"
    );
}

/// What one message looks like in a send or receive answer, whichever the protocol.
#[derive(Debug, Default)]
struct Seen {
    md5_of_message_attributes: Option<String>,
    attribute_names: Vec<String>,
}

/// The two protocols behind one interface: each call returns what the answer said.
#[derive(Clone, Copy, Debug)]
enum Protocol {
    Json,
    Query,
}

fn base64(value: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(value)
}

/// RFC 3986 percent-encoding of a form value (everything but the unreserved characters).
fn form_encode(value: &str) -> String {
    value
        .bytes()
        .map(|byte| match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (byte as char).to_string()
            }
            _ => format!("%{byte:02X}"),
        })
        .collect()
}

/// The text of every `<tag>…</tag>` in `xml`, in order (entities as sent: MD5s, names and ids
/// have none).
fn xml_elements(xml: &str, tag: &str) -> Vec<String> {
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    let mut found = Vec::new();
    let mut rest = xml;
    while let Some(start) = rest.find(&open) {
        let after = &rest[start + open.len()..];
        let end = after.find(&close).expect("unclosed element");
        found.push(after[..end].to_string());
        rest = &after[end + close.len()..];
    }
    found
}

impl Protocol {
    async fn call(
        self,
        server: &Server,
        action: &str,
        json: Value,
        form: Vec<(String, String)>,
    ) -> String {
        let response = match self {
            Protocol::Json => server.json(action, json.to_string().as_bytes()).await,
            Protocol::Query => {
                let mut body = format!("Action={action}&Version=2012-11-05");
                for (name, value) in form {
                    body.push_str(&format!("&{name}={}", form_encode(&value)));
                }
                let headers = [("Content-Type", "application/x-www-form-urlencoded")];
                server.raw("POST", "/", &headers, body.as_bytes()).await
            }
        };
        assert_eq!(
            response.status,
            200,
            "{action} ({self:?}): {}",
            response.text()
        );
        response.text()
    }

    async fn create_queue(self, server: &Server, name: &str) -> String {
        let answer = self
            .call(
                server,
                "CreateQueue",
                json!({ "QueueName": name }),
                vec![("QueueName".into(), name.into())],
            )
            .await;
        match self {
            Protocol::Json => serde_json::from_str::<Value>(&answer).unwrap()["QueueUrl"]
                .as_str()
                .unwrap()
                .to_string(),
            Protocol::Query => xml_elements(&answer, "QueueUrl").remove(0),
        }
    }

    fn json_attributes(attributes: &[Attribute]) -> Value {
        let mut map = Map::new();
        for attribute in attributes {
            let value = match &attribute.value {
                AttributeValue::Text(value) => {
                    json!({ "DataType": attribute.data_type, "StringValue": value })
                }
                AttributeValue::Bytes(value) => {
                    json!({ "DataType": attribute.data_type, "BinaryValue": base64(value) })
                }
            };
            map.insert(attribute.name.to_string(), value);
        }
        Value::Object(map)
    }

    fn form_attributes(prefix: &str, attributes: &[Attribute]) -> Vec<(String, String)> {
        let mut form = Vec::new();
        for (index, attribute) in attributes.iter().enumerate() {
            let key = format!("{prefix}MessageAttribute.{}", index + 1);
            form.push((format!("{key}.Name"), attribute.name.to_string()));
            form.push((
                format!("{key}.Value.DataType"),
                attribute.data_type.to_string(),
            ));
            match &attribute.value {
                AttributeValue::Text(value) => {
                    form.push((format!("{key}.Value.StringValue"), value.to_string()))
                }
                AttributeValue::Bytes(value) => {
                    form.push((format!("{key}.Value.BinaryValue"), base64(value)))
                }
            }
        }
        form
    }

    /// SendMessage: the answer's MD5OfMessageAttributes.
    async fn send(self, server: &Server, url: &str, attributes: &[Attribute]) -> Option<String> {
        let mut json = json!({ "QueueUrl": url, "MessageBody": "body" });
        if !attributes.is_empty() {
            json["MessageAttributes"] = Self::json_attributes(attributes);
        }
        let mut form = vec![
            ("QueueUrl".into(), url.into()),
            ("MessageBody".into(), "body".into()),
        ];
        form.extend(Self::form_attributes("", attributes));
        let answer = self.call(server, "SendMessage", json, form).await;
        self.md5s(&answer).pop().flatten()
    }

    /// SendMessageBatch of one entry: its MD5OfMessageAttributes.
    async fn send_batch(
        self,
        server: &Server,
        url: &str,
        attributes: &[Attribute],
    ) -> Option<String> {
        let mut entry = json!({ "Id": "e1", "MessageBody": "batched" });
        if !attributes.is_empty() {
            entry["MessageAttributes"] = Self::json_attributes(attributes);
        }
        let json = json!({ "QueueUrl": url, "Entries": [entry] });
        let prefix = "SendMessageBatchRequestEntry.1.";
        let mut form = vec![
            ("QueueUrl".into(), url.into()),
            (format!("{prefix}Id"), "e1".into()),
            (format!("{prefix}MessageBody"), "batched".into()),
        ];
        form.extend(Self::form_attributes(prefix, attributes));
        let answer = self.call(server, "SendMessageBatch", json, form).await;
        if let Protocol::Json = self {
            let answer: Value = serde_json::from_str(&answer).unwrap();
            assert_eq!(
                answer["Successful"].as_array().map(Vec::len),
                Some(1),
                "{answer}"
            );
            return answer["Successful"][0]["MD5OfMessageAttributes"]
                .as_str()
                .map(str::to_string);
        }
        assert_eq!(xml_elements(&answer, "Id"), ["e1"], "{answer}");
        self.md5s(&answer).pop().flatten()
    }

    /// ReceiveMessage of one message (visibility 0, so the next receive sees it again) with
    /// `MessageAttributeNames` = `names` (none: the parameter is left out).
    async fn receive(self, server: &Server, url: &str, names: &[&str]) -> Seen {
        let mut json = json!({ "QueueUrl": url, "VisibilityTimeout": 0, "WaitTimeSeconds": 1 });
        if !names.is_empty() {
            json["MessageAttributeNames"] = json!(names);
        }
        let mut form = vec![
            ("QueueUrl".into(), url.to_string()),
            ("VisibilityTimeout".into(), "0".into()),
            ("WaitTimeSeconds".into(), "1".into()),
        ];
        for (index, name) in names.iter().enumerate() {
            form.push((
                format!("MessageAttributeName.{}", index + 1),
                name.to_string(),
            ));
        }
        let answer = self.call(server, "ReceiveMessage", json, form).await;
        match self {
            Protocol::Json => {
                let answer: Value = serde_json::from_str(&answer).unwrap();
                let messages = answer["Messages"].as_array().expect("one message");
                assert_eq!(messages.len(), 1, "{answer}");
                let message = &messages[0];
                let mut attribute_names: Vec<String> = message["MessageAttributes"]
                    .as_object()
                    .map(|map| map.keys().cloned().collect())
                    .unwrap_or_default();
                attribute_names.sort();
                Seen {
                    md5_of_message_attributes: message["MD5OfMessageAttributes"]
                        .as_str()
                        .map(str::to_string),
                    attribute_names,
                }
            }
            Protocol::Query => {
                assert_eq!(xml_elements(&answer, "MessageId").len(), 1, "{answer}");
                let attribute_block = xml_elements(&answer, "MessageAttribute");
                let mut attribute_names: Vec<String> = attribute_block
                    .iter()
                    .map(|block| xml_elements(block, "Name").remove(0))
                    .collect();
                attribute_names.sort();
                Seen {
                    md5_of_message_attributes: self.md5s(&answer).pop().flatten(),
                    attribute_names,
                }
            }
        }
    }

    /// Every MD5OfMessageAttributes of a JSON object or a Query answer (JSON: the top level).
    fn md5s(self, answer: &str) -> Vec<Option<String>> {
        match self {
            Protocol::Json => {
                let answer: Value = serde_json::from_str(answer).unwrap();
                vec![answer["MD5OfMessageAttributes"]
                    .as_str()
                    .map(str::to_string)]
            }
            Protocol::Query => {
                let found = xml_elements(answer, "MD5OfMessageAttributes");
                assert!(found.len() <= 1, "{answer}");
                vec![found.into_iter().next()]
            }
        }
    }
}

async fn check_protocol(protocol: Protocol) {
    let server = Server::start().await;
    let url = protocol
        .create_queue(&server, &format!("md5-{protocol:?}"))
        .await;

    // Send and batch send answer with the digest of what was sent.
    let every = every_type();
    assert_eq!(
        protocol.send(&server, &url, &every).await.as_deref(),
        Some(EVERY_TYPE_MD5)
    );
    assert_eq!(
        protocol.send_batch(&server, &url, &every).await.as_deref(),
        Some(EVERY_TYPE_MD5)
    );

    // Received with every attribute: the same digest, over what came back.
    let seen = protocol.receive(&server, &url, &["All"]).await;
    assert_eq!(
        seen.md5_of_message_attributes.as_deref(),
        Some(EVERY_TYPE_MD5),
        "{protocol:?}"
    );
    assert_eq!(
        seen.attribute_names,
        ["bin", "note", "num", "photo", "price", "str"]
    );
    // Filtered: the digest of the attributes returned (Java and .NET recompute it over those).
    let seen = protocol.receive(&server, &url, &["str", "price"]).await;
    assert_eq!(seen.attribute_names, ["price", "str"]);
    assert_eq!(
        seen.md5_of_message_attributes.as_deref(),
        Some(FILTERED_MD5),
        "{protocol:?}"
    );
    // PHP: no attributes returned (none asked for, or none matching) means no attribute MD5.
    for names in [&[][..], &["nothing-matches"][..]] {
        let seen = protocol.receive(&server, &url, names).await;
        assert!(
            seen.attribute_names.is_empty(),
            "{protocol:?} {names:?}: {seen:?}"
        );
        assert_eq!(
            seen.md5_of_message_attributes, None,
            "{protocol:?} {names:?}: PHP rejects it"
        );
    }

    // Byte order of names, not a case-insensitive one.
    let ordered = protocol
        .create_queue(&server, &format!("md5-order-{protocol:?}"))
        .await;
    assert_eq!(
        protocol
            .send(&server, &ordered, &sort_order())
            .await
            .as_deref(),
        Some(SORT_ORDER_MD5)
    );
    let seen = protocol.receive(&server, &ordered, &["All"]).await;
    assert_eq!(
        seen.md5_of_message_attributes.as_deref(),
        Some(SORT_ORDER_MD5),
        "{protocol:?}"
    );

    // A message without attributes has no attribute MD5, sent or received.
    let plain = protocol
        .create_queue(&server, &format!("md5-plain-{protocol:?}"))
        .await;
    assert_eq!(protocol.send(&server, &plain, &[]).await, None);
    assert_eq!(protocol.send_batch(&server, &plain, &[]).await, None);
    let seen = protocol.receive(&server, &plain, &["All"]).await;
    assert_eq!(
        seen.md5_of_message_attributes, None,
        "{protocol:?}: {seen:?}"
    );
}

#[tokio::test]
async fn attribute_md5s_are_the_sdks_on_the_json_protocol() {
    check_protocol(Protocol::Json).await;
}

#[tokio::test]
async fn attribute_md5s_are_the_sdks_on_the_query_protocol() {
    check_protocol(Protocol::Query).await;
}
