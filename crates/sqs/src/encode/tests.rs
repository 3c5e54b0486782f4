//! Encodings of representative outcomes and errors in both protocols, checked member by member
//! (JSON through `serde_json`, XML through an XML parser, so escaping is checked as a client
//! would see it).

use std::collections::BTreeMap;
use std::sync::Arc;

use leaseq_core::{
    AttributeValue, Delivery, MessageAttribute, MessageId, Payload, QueueConfig, QueueInfo,
    RedriveAllowPolicy, RedrivePolicy, Sent,
};
use quick_xml::events::Event;
use serde_json::{json, Value};

use super::*;
use crate::error::ErrorCode;
use crate::Protocol;

mod json;
mod xml;

/// An outcome as the tests hand it to `encode`: alone (its request selected nothing), or with
/// the [`Shape`] its request decoded to.
trait Shaped {
    fn outcome(&self) -> &Outcome;
    fn shape(&self) -> &Shape;
}

impl Shaped for Outcome {
    fn outcome(&self) -> &Outcome {
        self
    }
    fn shape(&self) -> &Shape {
        &Shape::Whole
    }
}

impl Shaped for (Outcome, Shape) {
    fn outcome(&self) -> &Outcome {
        &self.0
    }
    fn shape(&self) -> &Shape {
        &self.1
    }
}

/// [`super::encode`] of an outcome and its shape.
fn encode(
    protocol: Protocol,
    action: &'static str,
    shaped: &impl Shaped,
    ctx: &Context,
) -> Response {
    super::encode(protocol, action, shaped.outcome(), shaped.shape(), ctx)
}

fn strings(names: &[&str]) -> Vec<String> {
    names.iter().map(|s| s.to_string()).collect()
}

fn ctx() -> Context {
    Context {
        base_url: "http://localhost:9324".into(),
        region: "us-east-1".into(),
        account_id: "000000000000".into(),
        request_id: "req-1".into(),
    }
}

/// Asserts that `action`'s JSON answer to `outcome` (written directly) is byte for byte what the
/// tree of `result` writes; `what` names the case.
fn assert_json_is_the_trees(action: &'static str, outcome: &Outcome, shape: &Shape, what: &str) {
    let ctx = ctx();
    let tree = json_document(Node::Struct(
        result(action, outcome, shape, &ctx).unwrap_or_default(),
    ));
    let response = super::encode(Protocol::Json, action, outcome, shape, &ctx);
    assert_eq!(
        String::from_utf8(response.body).unwrap(),
        String::from_utf8(tree).unwrap(),
        "{what}"
    );
}

fn header<'a>(response: &'a Response, name: &str) -> Option<&'a str> {
    response
        .headers()
        .find(|(key, _)| *key == name)
        .map(|(_, value)| value)
}

fn json_body(response: &Response) -> Value {
    assert_eq!(
        header(response, "content-type"),
        Some("application/x-amz-json-1.0")
    );
    assert_eq!(header(response, "x-amzn-requestid"), Some("req-1"));
    serde_json::from_slice(&response.body).unwrap()
}

/// `(path, text)` of every element with text, in document order, text unescaped.
fn xml_texts(response: &Response) -> Vec<(String, String)> {
    assert_eq!(header(response, "content-type"), Some("text/xml"));
    let body = std::str::from_utf8(&response.body).unwrap();
    let mut reader = quick_xml::Reader::from_str(body);
    let mut path: Vec<String> = Vec::new();
    let mut raw = String::new();
    let mut out = Vec::new();
    loop {
        match reader.read_event().unwrap() {
            Event::Start(element) => {
                path.push(String::from_utf8(element.name().as_ref().to_vec()).unwrap());
                raw.clear();
            }
            Event::Text(text) => raw.push_str(&text.decode().unwrap()),
            Event::GeneralRef(reference) => {
                raw.push('&');
                raw.push_str(&reference.decode().unwrap());
                raw.push(';');
            }
            Event::End(_) => {
                if !raw.is_empty() {
                    let text = quick_xml::escape::unescape(&raw).unwrap().into_owned();
                    out.push((path.join("/"), text));
                }
                raw.clear();
                path.pop();
            }
            Event::Eof => break,
            _ => {}
        }
    }
    out
}

fn xml_text<'a>(texts: &'a [(String, String)], suffix: &str) -> Vec<&'a str> {
    texts
        .iter()
        .filter(|(path, _)| path.ends_with(suffix))
        .map(|(_, text)| text.as_str())
        .collect()
}

fn string_attribute(value: &str) -> MessageAttribute {
    MessageAttribute {
        data_type: "String".into(),
        value: AttributeValue::Text(value.into()),
    }
}

fn payload(body: &str) -> Arc<Payload> {
    Arc::new(Payload::new(
        body.into(),
        BTreeMap::from([
            ("colour".to_string(), string_attribute("red")),
            ("foo.bar".to_string(), string_attribute("x")),
            (
                "raw".to_string(),
                MessageAttribute {
                    data_type: "Binary".into(),
                    value: AttributeValue::Binary(vec![0, 1, 255]),
                },
            ),
        ]),
        Some("Root=1-abc".into()),
        Arc::from("AIDAEXAMPLE"),
    ))
}

fn delivery(body: &str) -> Delivery {
    Delivery {
        message_id: MessageId([7; 16]),
        receipt: "receipt-1".into(),
        payload: payload(body),
        receive_count: 2,
        sent_at_ms: 1_700_000_000_123,
        first_received_at_ms: 1_700_000_001_000,
        visible_at_ms: 0,
        dead_letter_source: Some(Arc::from("source")),
        fifo: None,
        sequence_number: None,
        previous_attempt: None,
        tenant_noisy: None,
    }
}

fn received(
    body: &str,
    attribute_names: &[&str],
    message_attribute_names: &[&str],
) -> (Outcome, Shape) {
    let outcome = Outcome::Received {
        deliveries: vec![delivery(body)],
        queue_name: Arc::from("jobs"),
    };
    let shape = Shape::Received {
        attribute_names: strings(attribute_names),
        message_attribute_names: strings(message_attribute_names),
    };
    (outcome, shape)
}

const AWKWARD_BODY: &str = "a<b>&c \"q\" 'x'\r\nline\rend\ttab ü 😀";

#[test]
fn send_message_json_and_xml() {
    let sent = Sent {
        message_id: MessageId([1; 16]),
        seq: 1,
        payload: payload("hello"),
        sequence_number: None,
        duplicate: false,
    };
    let outcome = Outcome::Sent(sent.clone());
    let body = json_body(&encode(Protocol::Json, "SendMessage", &outcome, &ctx()));
    assert_eq!(body["MessageId"], sent.message_id.to_string());
    assert_eq!(body["MD5OfMessageBody"], "5d41402abc4b2a76b9719d911017c592");
    let attributes_md5 = crate::md5::md5_of_message_attributes(&sent.payload.attributes).unwrap();
    assert_eq!(body["MD5OfMessageAttributes"], attributes_md5);
    assert_eq!(
        body["MD5OfMessageSystemAttributes"],
        crate::md5::md5_of_system_attributes(Some("Root=1-abc")).unwrap()
    );

    let response = encode(Protocol::Query, "SendMessage", &outcome, &ctx());
    assert_eq!(response.status, 200);
    let text = std::str::from_utf8(&response.body).unwrap();
    assert!(text
        .contains(r#"<SendMessageResponse xmlns="http://queue.amazonaws.com/doc/2012-11-05/">"#));
    let texts = xml_texts(&response);
    assert_eq!(
        xml_text(
            &texts,
            "SendMessageResponse/SendMessageResult/MD5OfMessageBody"
        ),
        ["5d41402abc4b2a76b9719d911017c592"]
    );
    assert_eq!(
        xml_text(&texts, "SendMessageResult/MD5OfMessageAttributes"),
        [attributes_md5.as_str()]
    );
    assert_eq!(xml_text(&texts, "ResponseMetadata/RequestId"), ["req-1"]);

    // Without attributes the checksums of attributes are absent.
    let plain = Outcome::Sent(Sent {
        message_id: MessageId([1; 16]),
        seq: 1,
        payload: Arc::new(Payload::new(
            "x".into(),
            BTreeMap::new(),
            None,
            Arc::from(""),
        )),
        sequence_number: None,
        duplicate: false,
    });
    let body = json_body(&encode(Protocol::Json, "SendMessage", &plain, &ctx()));
    assert!(body.get("MD5OfMessageAttributes").is_none());
    assert!(body.get("MD5OfMessageSystemAttributes").is_none());
    assert!(body.get("SequenceNumber").is_none());
}

#[test]
fn fifo_send_results_carry_the_sequence_number() {
    let sent = Sent {
        message_id: MessageId([1; 16]),
        seq: 5,
        payload: payload("hello"),
        sequence_number: Some("18000000000000000005".into()),
        duplicate: false,
    };
    let outcome = Outcome::Sent(sent.clone());
    let body = json_body(&encode(Protocol::Json, "SendMessage", &outcome, &ctx()));
    assert_eq!(body["SequenceNumber"], "18000000000000000005");
    let response = encode(Protocol::Query, "SendMessage", &outcome, &ctx());
    let texts = xml_texts(&response);
    assert_eq!(
        xml_text(&texts, "SendMessageResult/SequenceNumber"),
        ["18000000000000000005"]
    );
    let batch = Outcome::SentBatch(vec![("a".into(), Ok(sent))]);
    let body = json_body(&encode(Protocol::Json, "SendMessageBatch", &batch, &ctx()));
    assert_eq!(
        body["Successful"][0]["SequenceNumber"],
        "18000000000000000005"
    );
    let response = encode(Protocol::Query, "SendMessageBatch", &batch, &ctx());
    let texts = xml_texts(&response);
    assert_eq!(
        xml_text(
            &texts,
            "SendMessageBatchResult/SendMessageBatchResultEntry/SequenceNumber"
        ),
        ["18000000000000000005"]
    );
}

#[test]
fn fifo_deliveries_carry_group_deduplication_id_and_sequence_number() {
    let mut fifo = delivery("x");
    fifo.fifo = Some(Box::new(leaseq_core::FifoMessage {
        group_id: Arc::from("g-1"),
        deduplication_id: Arc::from("d-1"),
    }));
    fifo.sequence_number = Some("18000000000000000009".into());
    let outcome = |names: &[&str], delivery: Delivery| {
        let outcome = Outcome::Received {
            deliveries: vec![delivery],
            queue_name: Arc::from("jobs.fifo"),
        };
        let shape = Shape::Received {
            attribute_names: strings(names),
            message_attribute_names: Vec::new(),
        };
        (outcome, shape)
    };
    let body = json_body(&encode(
        Protocol::Json,
        "ReceiveMessage",
        &outcome(&["All"], fifo.clone()),
        &ctx(),
    ));
    let attributes = &body["Messages"][0]["Attributes"];
    assert_eq!(attributes["MessageGroupId"], "g-1");
    assert_eq!(attributes["MessageDeduplicationId"], "d-1");
    assert_eq!(attributes["SequenceNumber"], "18000000000000000009");
    // Only what was asked for.
    let body = json_body(&encode(
        Protocol::Json,
        "ReceiveMessage",
        &outcome(&["MessageGroupId"], fifo.clone()),
        &ctx(),
    ));
    let attributes = body["Messages"][0]["Attributes"].as_object().unwrap();
    assert_eq!(attributes.len(), 1);
    assert_eq!(attributes["MessageGroupId"], "g-1");
    let response = encode(
        Protocol::Query,
        "ReceiveMessage",
        &outcome(&["SequenceNumber", "MessageDeduplicationId"], fifo),
        &ctx(),
    );
    let text = std::str::from_utf8(&response.body).unwrap();
    assert!(text.contains("<Name>SequenceNumber</Name><Value>18000000000000000009</Value>"));
    assert!(text.contains("<Name>MessageDeduplicationId</Name><Value>d-1</Value>"));
    // A standard queue's message has none of them.
    let body = json_body(&encode(
        Protocol::Json,
        "ReceiveMessage",
        &outcome(&["All"], delivery("x")),
        &ctx(),
    ));
    assert!(body["Messages"][0]["Attributes"]
        .get("MessageGroupId")
        .is_none());
}

#[test]
fn received_xml_escapes_and_keeps_carriage_returns() {
    let response = encode(
        Protocol::Query,
        "ReceiveMessage",
        &received(AWKWARD_BODY, &["All"], &["All"]),
        &ctx(),
    );
    let raw = std::str::from_utf8(&response.body).unwrap();
    assert!(
        !raw.contains('\r'),
        "a raw CR would be normalised away by XML parsers"
    );
    assert!(raw.contains("&#xD;"));
    assert!(raw.contains("a&lt;b&gt;&amp;c &quot;q&quot;"));
    let texts = xml_texts(&response);
    assert_eq!(
        xml_text(&texts, "ReceiveMessageResult/Message/Body"),
        [AWKWARD_BODY]
    );
    assert_eq!(
        xml_text(&texts, "Message/MD5OfBody"),
        [crate::md5::md5_of_body(AWKWARD_BODY).as_str()]
    );
    assert_eq!(xml_text(&texts, "Message/ReceiptHandle"), ["receipt-1"]);
    // Flattened system attributes: <Attribute><Name/><Value/></Attribute>.
    let names = xml_text(&texts, "Message/Attribute/Name");
    let values = xml_text(&texts, "Message/Attribute/Value");
    let attributes: BTreeMap<&str, &str> = names.into_iter().zip(values).collect();
    assert_eq!(attributes["SenderId"], "AIDAEXAMPLE");
    assert_eq!(attributes["SentTimestamp"], "1700000000123");
    assert_eq!(attributes["ApproximateReceiveCount"], "2");
    assert_eq!(
        attributes["ApproximateFirstReceiveTimestamp"],
        "1700000001000"
    );
    assert_eq!(attributes["AWSTraceHeader"], "Root=1-abc");
    assert_eq!(
        attributes["DeadLetterQueueSourceArn"],
        "arn:aws:sqs:us-east-1:000000000000:source"
    );
    // Message attributes: <MessageAttribute><Name/><Value><StringValue/><DataType/></Value>.
    assert_eq!(
        xml_text(&texts, "Message/MessageAttribute/Name"),
        ["colour", "foo.bar", "raw"]
    );
    assert_eq!(
        xml_text(&texts, "MessageAttribute/Value/BinaryValue"),
        ["AAH/"]
    );
    assert_eq!(
        xml_text(&texts, "MessageAttribute/Value/DataType"),
        ["String", "String", "Binary"]
    );
}

#[test]
fn received_json_filters_attributes() {
    let body = json_body(&encode(
        Protocol::Json,
        "ReceiveMessage",
        &received(
            AWKWARD_BODY,
            &["SentTimestamp", "ApproximateReceiveCount"],
            &["foo.*"],
        ),
        &ctx(),
    ));
    let message = &body["Messages"][0];
    assert_eq!(message["Body"], AWKWARD_BODY);
    assert_eq!(message["MessageId"], MessageId([7; 16]).to_string());
    assert_eq!(
        message["Attributes"],
        json!({"SentTimestamp": "1700000000123", "ApproximateReceiveCount": "2"})
    );
    assert_eq!(
        message["MessageAttributes"],
        json!({"foo.bar": {"StringValue": "x", "DataType": "String"}})
    );
    // The checksum covers the returned attributes only.
    let returned = BTreeMap::from([("foo.bar".to_string(), string_attribute("x"))]);
    assert_eq!(
        message["MD5OfMessageAttributes"],
        crate::md5::md5_of_message_attributes(&returned).unwrap()
    );

    let body = json_body(&encode(
        Protocol::Json,
        "ReceiveMessage",
        &received("b", &[], &[]),
        &ctx(),
    ));
    let message = &body["Messages"][0];
    assert!(message.get("Attributes").is_none());
    assert!(message.get("MessageAttributes").is_none());
    assert!(message.get("MD5OfMessageAttributes").is_none());

    let body = json_body(&encode(
        Protocol::Json,
        "ReceiveMessage",
        &received("b", &[], &["All"]),
        &ctx(),
    ));
    assert_eq!(
        body["Messages"][0]["MessageAttributes"]["raw"]["BinaryValue"],
        "AAH/"
    );

    let empty = Outcome::Received {
        deliveries: vec![],
        queue_name: Arc::from("jobs"),
    };
    assert_eq!(
        json_body(&encode(Protocol::Json, "ReceiveMessage", &empty, &ctx())),
        json!({})
    );
    let texts = xml_texts(&encode(Protocol::Query, "ReceiveMessage", &empty, &ctx()));
    assert!(xml_text(&texts, "Message/Body").is_empty());
}

#[test]
fn message_attribute_name_patterns() {
    let wanted = |patterns: &[&str], name: &str| {
        message_attribute_wanted(
            name,
            &patterns.iter().map(|p| p.to_string()).collect::<Vec<_>>(),
        )
    };
    // As AWS answers them (LocalStack's test_receive_message_message_attribute_names_filters,
    // recorded from AWS): "Hel.*" returns Hello and Help.Me, "*" everything.
    assert!(wanted(&["All"], "x"));
    assert!(wanted(&[".*"], "x"));
    assert!(wanted(&["*"], "x"));
    assert!(wanted(&["foo.*"], "foo.bar"));
    assert!(wanted(&["Hel.*"], "Hello"));
    assert!(wanted(&["Hel.*"], "Help.Me"));
    assert!(!wanted(&["Hel.*"], "General"));
    assert!(!wanted(&["AWS."], "AWS"));
    assert!(wanted(&["exact"], "exact"));
    assert!(!wanted(&["exact"], "Exact"));
    assert!(!wanted(&[], "x"));
}

fn info() -> QueueInfo {
    QueueInfo {
        queue_id: 1,
        name: Arc::from("jobs"),
        config: QueueConfig {
            redrive_policy: Some(RedrivePolicy {
                dead_letter_queue: "dlq".into(),
                max_receive_count: 5,
            }),
            redrive_allow_policy: Some(RedriveAllowPolicy::ByQueue(vec!["a".into()])),
            ..QueueConfig::default()
        },
        tags: BTreeMap::new(),
        created_at_ms: 1_700_000_000_999,
        last_modified_at_ms: 1_700_000_100_000,
        ready: 3,
        in_flight: 2,
        stale_receipts_seen: 0,
        delayed: 1,
        oldest_ready_sent_at_ms: None,
        counters: Default::default(),
        noisy_groups: None,
    }
}

#[test]
fn queue_attributes() {
    let all = (
        Outcome::QueueAttributes {
            info: Box::new(info()),
        },
        Shape::QueueAttributes {
            names: vec!["All".into()],
        },
    );
    let body = json_body(&encode(Protocol::Json, "GetQueueAttributes", &all, &ctx()));
    let attributes = &body["Attributes"];
    assert_eq!(attributes["ApproximateNumberOfMessages"], "3");
    assert_eq!(attributes["ApproximateNumberOfMessagesNotVisible"], "2");
    assert_eq!(attributes["ApproximateNumberOfMessagesDelayed"], "1");
    assert_eq!(attributes["CreatedTimestamp"], "1700000000");
    assert_eq!(attributes["LastModifiedTimestamp"], "1700000100");
    assert_eq!(attributes["VisibilityTimeout"], "30");
    assert_eq!(attributes["MessageRetentionPeriod"], "345600");
    assert_eq!(attributes["MaximumMessageSize"], "1048576");
    assert_eq!(attributes["DelaySeconds"], "0");
    assert_eq!(attributes["ReceiveMessageWaitTimeSeconds"], "0");
    assert_eq!(
        attributes["QueueArn"],
        "arn:aws:sqs:us-east-1:000000000000:jobs"
    );
    assert_eq!(attributes["SqsManagedSseEnabled"], "true");
    let redrive: Value =
        serde_json::from_str(attributes["RedrivePolicy"].as_str().unwrap()).unwrap();
    assert_eq!(
        redrive,
        json!({"deadLetterTargetArn": "arn:aws:sqs:us-east-1:000000000000:dlq", "maxReceiveCount": 5})
    );
    let allow: Value =
        serde_json::from_str(attributes["RedriveAllowPolicy"].as_str().unwrap()).unwrap();
    assert_eq!(
        allow,
        json!({"redrivePermission": "byQueue", "sourceQueueArns": ["arn:aws:sqs:us-east-1:000000000000:a"]})
    );
    assert!(
        attributes.get("Policy").is_none(),
        "absent settings are not listed"
    );
    assert!(attributes.get("KmsMasterKeyId").is_none());
    assert!(attributes.get("All").is_none());

    let some = (
        Outcome::QueueAttributes {
            info: Box::new(info()),
        },
        Shape::QueueAttributes {
            names: vec!["QueueArn".into(), "Policy".into()],
        },
    );
    let texts = xml_texts(&encode(
        Protocol::Query,
        "GetQueueAttributes",
        &some,
        &ctx(),
    ));
    assert_eq!(
        xml_text(&texts, "GetQueueAttributesResult/Attribute/Name"),
        ["QueueArn"]
    );
    assert_eq!(
        xml_text(&texts, "GetQueueAttributesResult/Attribute/Value"),
        ["arn:aws:sqs:us-east-1:000000000000:jobs"]
    );
    let none = (
        Outcome::QueueAttributes {
            info: Box::new(info()),
        },
        Shape::QueueAttributes { names: vec![] },
    );
    assert_eq!(
        json_body(&encode(Protocol::Json, "GetQueueAttributes", &none, &ctx())),
        json!({})
    );
}

#[test]
fn batches() {
    let sent = Sent {
        message_id: MessageId([1; 16]),
        seq: 1,
        payload: payload("hello"),
        sequence_number: None,
        duplicate: false,
    };
    let failure = SqsError::invalid_parameter_value("bad <entry>");
    let outcome = Outcome::SentBatch(vec![
        ("a".into(), Ok(sent.clone())),
        ("b".into(), Err(failure.clone())),
    ]);
    let body = json_body(&encode(
        Protocol::Json,
        "SendMessageBatch",
        &outcome,
        &ctx(),
    ));
    assert_eq!(body["Successful"][0]["Id"], "a");
    assert_eq!(
        body["Successful"][0]["MD5OfMessageBody"],
        "5d41402abc4b2a76b9719d911017c592"
    );
    assert_eq!(
        body["Failed"],
        json!([{"Id": "b", "SenderFault": true, "Code": "InvalidParameterValue", "Message": "bad <entry>"}])
    );
    let texts = xml_texts(&encode(
        Protocol::Query,
        "SendMessageBatch",
        &outcome,
        &ctx(),
    ));
    assert_eq!(
        xml_text(
            &texts,
            "SendMessageBatchResult/SendMessageBatchResultEntry/Id"
        ),
        ["a"]
    );
    assert_eq!(
        xml_text(&texts, "SendMessageBatchResult/BatchResultErrorEntry/Id"),
        ["b"]
    );
    assert_eq!(
        xml_text(&texts, "BatchResultErrorEntry/SenderFault"),
        ["true"]
    );
    assert_eq!(
        xml_text(&texts, "BatchResultErrorEntry/Message"),
        ["bad <entry>"]
    );

    let outcome = Outcome::Batch(vec![
        ("x".into(), Ok(())),
        (
            "y".into(),
            Err(SqsError::new(ErrorCode::ReceiptHandleIsInvalid, "no")),
        ),
    ]);
    for (action, entry) in [
        ("DeleteMessageBatch", "DeleteMessageBatchResultEntry"),
        (
            "ChangeMessageVisibilityBatch",
            "ChangeMessageVisibilityBatchResultEntry",
        ),
    ] {
        let texts = xml_texts(&encode(Protocol::Query, action, &outcome, &ctx()));
        assert_eq!(
            xml_text(&texts, &format!("{action}Result/{entry}/Id")),
            ["x"]
        );
        assert_eq!(
            xml_text(&texts, "BatchResultErrorEntry/Code"),
            ["ReceiptHandleIsInvalid"]
        );
        let body = json_body(&encode(Protocol::Json, action, &outcome, &ctx()));
        assert_eq!(body["Successful"], json!([{"Id": "x"}]));
        assert_eq!(body["Failed"][0]["Code"], "ReceiptHandleIsInvalid");
    }
    // Both lists are present in JSON even when empty.
    let all_ok = Outcome::Batch(vec![("x".into(), Ok(()))]);
    let body = json_body(&encode(
        Protocol::Json,
        "DeleteMessageBatch",
        &all_ok,
        &ctx(),
    ));
    assert_eq!(body["Failed"], json!([]));
}

#[test]
fn lists_and_tags() {
    let names = vec![Arc::from("a"), Arc::from("b")];
    let outcome = Outcome::QueueUrls {
        names: names.clone(),
        next_token: Some("tok".into()),
    };
    let body = json_body(&encode(Protocol::Json, "ListQueues", &outcome, &ctx()));
    assert_eq!(
        body,
        json!({"QueueUrls": ["http://localhost:9324/000000000000/a", "http://localhost:9324/000000000000/b"], "NextToken": "tok"})
    );
    let texts = xml_texts(&encode(Protocol::Query, "ListQueues", &outcome, &ctx()));
    assert_eq!(xml_text(&texts, "ListQueuesResult/QueueUrl").len(), 2);
    assert_eq!(xml_text(&texts, "ListQueuesResult/NextToken"), ["tok"]);
    let none = Outcome::QueueUrls {
        names: vec![],
        next_token: None,
    };
    assert_eq!(
        json_body(&encode(Protocol::Json, "ListQueues", &none, &ctx())),
        json!({})
    );

    let sources = Outcome::DeadLetterSourceQueues {
        names: vec![],
        next_token: None,
    };
    let body = json_body(&encode(
        Protocol::Json,
        "ListDeadLetterSourceQueues",
        &sources,
        &ctx(),
    ));
    assert_eq!(body, json!({"queueUrls": []}));
    let sources = Outcome::DeadLetterSourceQueues {
        names,
        next_token: None,
    };
    let texts = xml_texts(&encode(
        Protocol::Query,
        "ListDeadLetterSourceQueues",
        &sources,
        &ctx(),
    ));
    assert_eq!(
        xml_text(&texts, "ListDeadLetterSourceQueuesResult/QueueUrl"),
        [
            "http://localhost:9324/000000000000/a",
            "http://localhost:9324/000000000000/b"
        ]
    );

    let tags = Outcome::QueueTags(BTreeMap::from([("team".to_string(), "a&b".to_string())]));
    let body = json_body(&encode(Protocol::Json, "ListQueueTags", &tags, &ctx()));
    assert_eq!(body, json!({"Tags": {"team": "a&b"}}));
    let texts = xml_texts(&encode(Protocol::Query, "ListQueueTags", &tags, &ctx()));
    assert_eq!(xml_text(&texts, "ListQueueTagsResult/Tag/Key"), ["team"]);
    assert_eq!(xml_text(&texts, "ListQueueTagsResult/Tag/Value"), ["a&b"]);

    let url = Outcome::QueueUrl(Arc::from("jobs"));
    let body = json_body(&encode(Protocol::Json, "CreateQueue", &url, &ctx()));
    assert_eq!(
        body,
        json!({"QueueUrl": "http://localhost:9324/000000000000/jobs"})
    );
    let texts = xml_texts(&encode(Protocol::Query, "GetQueueUrl", &url, &ctx()));
    assert_eq!(
        xml_text(&texts, "GetQueueUrlResponse/GetQueueUrlResult/QueueUrl"),
        ["http://localhost:9324/000000000000/jobs"]
    );
}

#[test]
fn empty_results() {
    let response = encode(Protocol::Query, "DeleteMessage", &Outcome::Empty, &ctx());
    let body = std::str::from_utf8(&response.body).unwrap();
    assert!(!body.contains("DeleteMessageResult"));
    assert!(body.contains("<DeleteMessageResponse xmlns="));
    assert_eq!(
        xml_text(
            &xml_texts(&response),
            "DeleteMessageResponse/ResponseMetadata/RequestId"
        ),
        ["req-1"]
    );
    assert_eq!(
        json_body(&encode(
            Protocol::Json,
            "DeleteMessage",
            &Outcome::Empty,
            &ctx()
        )),
        json!({})
    );
}

#[test]
fn errors_in_both_protocols() {
    let error = SqsError::new(
        ErrorCode::QueueDoesNotExist,
        "The specified queue does not exist.",
    );
    let response = encode_error(Protocol::Json, &error, &ctx());
    assert_eq!(response.status, 400);
    assert_eq!(
        header(&response, "x-amzn-query-error"),
        Some("AWS.SimpleQueueService.NonExistentQueue;Sender")
    );
    assert_eq!(
        json_body(&response),
        json!({"__type": "com.amazonaws.sqs#QueueDoesNotExist", "message": "The specified queue does not exist."})
    );

    let response = encode_error(Protocol::Query, &error, &ctx());
    assert_eq!(response.status, 400);
    let texts = xml_texts(&response);
    assert_eq!(xml_text(&texts, "ErrorResponse/Error/Type"), ["Sender"]);
    assert_eq!(
        xml_text(&texts, "ErrorResponse/Error/Code"),
        ["AWS.SimpleQueueService.NonExistentQueue"]
    );
    assert_eq!(
        xml_text(&texts, "ErrorResponse/Error/Message"),
        // Query's wording of a missing queue (recorded from AWS: LocalStack's
        // test_non_existent_queue, "queue-does-not-exist-query").
        ["The specified queue does not exist for this wsdl version."]
    );
    assert_eq!(xml_text(&texts, "ErrorResponse/RequestId"), ["req-1"]);

    let internal = SqsError::internal("disk <full> & \u{1} gone");
    let response = encode_error(Protocol::Query, &internal, &ctx());
    assert_eq!(response.status, 500);
    let texts = xml_texts(&response);
    assert_eq!(xml_text(&texts, "Error/Type"), ["Receiver"]);
    assert_eq!(
        xml_text(&texts, "Error/Message"),
        ["disk <full> & \u{FFFD} gone"]
    );
    let response = encode_error(Protocol::Json, &internal, &ctx());
    assert_eq!(
        header(&response, "x-amzn-query-error"),
        Some("InternalError;Receiver")
    );

    // A parameterless GET of a queue's URL: SQS's bare document, 404 (LocalStack's
    // AWS-validated test_get_without_query_returns_unknown_operation).
    let unknown = SqsError::new(ErrorCode::UnknownOperation, "m");
    let response = encode_error(Protocol::Query, &unknown, &ctx());
    assert_eq!(response.status, 404);
    assert_eq!(
        String::from_utf8(response.body.clone()).unwrap(),
        "<?xml version=\"1.0\"?><UnknownOperationException/>"
    );

    for code in ErrorCode::ALL {
        let error = SqsError::new(code, "m");
        for protocol in [Protocol::Json, Protocol::Query] {
            let response = encode_error(protocol, &error, &ctx());
            assert_eq!(response.status, code.status());
            assert!(response
                .headers()
                .all(|(name, _)| name.chars().all(|c| !c.is_ascii_uppercase())));
        }
    }
}

#[test]
fn access_denied_in_both_protocols() {
    // SQS's refusal: 403, `AccessDenied` (Query's <Code>, JSON's x-amzn-query-error), `Sender`,
    // and the sentence naming the endpoint, as SDK users report it (aws/aws-sdk-php#188:
    // "Access to the resource https://sqs.us-west-2.amazonaws.com/ is denied. ... Status Code:
    // 403; Error Code: AccessDenied"; the Query document of DanielDaCosta/apiGateway-sqs-lambda#1:
    // <Type>Sender</Type><Code>AccessDenied</Code>). JSON's `__type` is the common errors
    // table's AccessDeniedException (SQS API reference, "Common Errors").
    let error = SqsError::access_denied();
    let sentence = "Access to the resource http://localhost:9324/ is denied.";
    let response = encode_error(Protocol::Json, &error, &ctx());
    assert_eq!(response.status, 403);
    assert_eq!(
        header(&response, "x-amzn-query-error"),
        Some("AccessDenied;Sender")
    );
    assert_eq!(
        json_body(&response),
        json!({"__type": "com.amazon.coral.service#AccessDeniedException", "message": sentence})
    );
    let response = encode_error(Protocol::Query, &error, &ctx());
    assert_eq!(response.status, 403);
    let texts = xml_texts(&response);
    assert_eq!(xml_text(&texts, "ErrorResponse/Error/Type"), ["Sender"]);
    assert_eq!(
        xml_text(&texts, "ErrorResponse/Error/Code"),
        ["AccessDenied"]
    );
    assert_eq!(xml_text(&texts, "ErrorResponse/Error/Message"), [sentence]);
}

#[test]
fn visibility_advice_in_both_protocols() {
    let advice = crate::VisibilityAdvice {
        queue_name: Arc::from("jobs"),
        visibility_timeout_seconds: 30,
        recommended_visibility_timeout_seconds: 60,
        verdict: "raise",
        reason: "p99 processing 48 s > visibility 30 s".into(),
        processing_ms: Some(crate::ProcessingPercentiles {
            p50: 1000,
            p95: 20_000,
            p99: 48_000,
            max: 50_000,
        }),
        deliveries: 100,
        leases_expired: 4,
        deleted_late: 1,
        leases_extended: 0,
    };
    let outcome = Outcome::VisibilityAdvice(Box::new(advice));
    let body = json_body(&encode(
        Protocol::Json,
        "LeaseqGetVisibilityAdvice",
        &outcome,
        &ctx(),
    ));
    assert_eq!(body["QueueUrl"], "http://localhost:9324/000000000000/jobs");
    assert_eq!(body["RecommendedVisibilityTimeout"], "60");
    assert_eq!(body["Verdict"], "raise");
    assert_eq!(body["ProcessingTimeMs"]["P99"], "48000");
    assert_eq!(body["LeasesExpired"], "4");
    let texts = xml_texts(&encode(
        Protocol::Query,
        "LeaseqGetVisibilityAdvice",
        &outcome,
        &ctx(),
    ));
    assert!(
        texts
            .iter()
            .any(|(path, text)| path.ends_with("RecommendedVisibilityTimeout") && text == "60"),
        "{texts:?}"
    );
}

/// A send's JSON result, written directly, is byte for byte what the tree of `sent_members`
/// writes, and the whole response what it was: with and without attributes, a trace header and
/// a sequence number, for ids whose every nibble differs.
#[test]
fn sent_json_is_the_trees() {
    let bare = Arc::new(Payload::new(
        AWKWARD_BODY.into(),
        BTreeMap::new(),
        None,
        Arc::from(""),
    ));
    let traced = Arc::new(Payload::new(
        AWKWARD_BODY.into(),
        BTreeMap::new(),
        Some("Root=1-\"quoted\"".into()),
        Arc::from(""),
    ));
    let ids = [
        [0; 16],
        [0xff; 16],
        core::array::from_fn(|at| (at as u8) * 0x11),
        core::array::from_fn(|at| 0xfe - (at as u8) * 0x0f),
    ];
    for payload in [bare, traced, payload("hello"), payload("")] {
        for sequence_number in [None, Some("18000000000000000005".to_string())] {
            for id in ids {
                let sent = Sent {
                    message_id: MessageId(id),
                    seq: 1,
                    payload: payload.clone(),
                    sequence_number: sequence_number.clone(),
                    duplicate: false,
                };
                let mut direct = Vec::new();
                write_sent_json(&sent, &mut direct);
                let tree = json_document(Node::Struct(sent_members(&sent)));
                assert_eq!(
                    String::from_utf8(direct).unwrap(),
                    String::from_utf8(tree.clone()).unwrap()
                );
                assert_eq!(
                    crate::hex::hyphenated(&id).as_slice(),
                    sent.message_id.to_string().as_bytes()
                );
                let response = encode(Protocol::Json, "SendMessage", &Outcome::Sent(sent), &ctx());
                assert_eq!(response.body, tree);
            }
        }
    }
}

/// A receive's JSON result, written directly, is byte for byte what the tree of `result` writes,
/// over [`receive_cases`].
#[test]
fn received_json_is_the_trees() {
    for (outcome, shape) in receive_cases() {
        assert_json_is_the_trees("ReceiveMessage", &outcome, &shape, &format!("{shape:?}"));
    }
}

/// A receive's Query result, written directly, is byte for byte what the tree of `result`
/// writes, over [`receive_cases`]: markup, quotes, `\r` and characters beyond the BMP in bodies,
/// receipts and attribute values; numbers at their limits.
#[test]
fn received_xml_is_the_trees() {
    let ctx = ctx();
    for (outcome, shape) in receive_cases() {
        let tree = xml_document(
            "ReceiveMessage",
            result("ReceiveMessage", &outcome, &shape, &ctx).map(Node::Struct),
            &ctx,
        );
        let what = format!("{shape:?}");
        let response = encode(Protocol::Query, "ReceiveMessage", &(outcome, shape), &ctx);
        assert_eq!(String::from_utf8(response.body).unwrap(), tree, "{what}");
    }
}

/// Receives for the direct writers' tests: no messages and several; bodies that need escapes;
/// every selection of system attributes (none, `All`, some, names that are not attributes) and
/// of message attributes (none, `All`, `.*` patterns, names that match nothing); messages of
/// standard and FIFO queues, with and without a trace header, a dead-letter source, a sequence
/// number, a deduplication id; ids whose every nibble differs.
fn receive_cases() -> Vec<(Outcome, Shape)> {
    let bare = Arc::new(Payload::new(
        AWKWARD_BODY.into(),
        BTreeMap::new(),
        None,
        Arc::from("AIDA\"quoted\""),
    ));
    let standard = delivery("hello");
    let fifo = Delivery {
        message_id: MessageId(core::array::from_fn(|at| (at as u8) * 0x11)),
        receipt: "r\\2/+=".into(),
        payload: bare.clone(),
        receive_count: u32::MAX,
        sent_at_ms: 0,
        first_received_at_ms: u64::MAX,
        dead_letter_source: None,
        fifo: Some(Box::new(leaseq_core::FifoMessage {
            group_id: Arc::from("group \"1\""),
            deduplication_id: Arc::from("dedup"),
        })),
        sequence_number: Some("18000000000000000005".into()),
        ..delivery("")
    };
    let grouped = Delivery {
        fifo: Some(Box::new(leaseq_core::FifoMessage {
            group_id: Arc::from("tenant-a"),
            deduplication_id: Arc::from(""),
        })),
        payload: payload(AWKWARD_BODY),
        ..delivery("x")
    };
    // Markup and quotes wherever a message attribute or a system attribute has text.
    let awkward = Delivery {
        payload: Arc::new(Payload::new(
            AWKWARD_BODY.into(),
            BTreeMap::from([(
                "q\"<&>'".to_string(),
                MessageAttribute {
                    data_type: "String.<&>\"".into(),
                    value: AttributeValue::Text(AWKWARD_BODY.into()),
                },
            )]),
            Some("Root=<&>\"".into()),
            Arc::from("AIDA<&>"),
        )),
        dead_letter_source: Some(Arc::from("dead<&>")),
        ..delivery("")
    };
    let batches = [
        vec![],
        vec![standard.clone()],
        vec![fifo.clone(), grouped.clone(), standard.clone(), awkward],
        vec![Delivery {
            payload: bare,
            ..standard
        }],
    ];
    let attribute_selections: [&[&str]; 5] = [
        &[],
        &["All"],
        &["SentTimestamp", "ApproximateReceiveCount", "SenderId"],
        &[
            "MessageGroupId",
            "AWSTraceHeader",
            "DeadLetterQueueSourceArn",
            "Nope",
        ],
        &[
            "SequenceNumber",
            "MessageDeduplicationId",
            "ApproximateFirstReceiveTimestamp",
        ],
    ];
    let message_attribute_selections: [&[&str]; 5] = [
        &[],
        &["All"],
        &["foo.*"],
        &["raw", "colour", "absent"],
        &["absent"],
    ];
    let mut cases = Vec::new();
    for deliveries in &batches {
        for attribute_names in attribute_selections {
            for message_attribute_names in message_attribute_selections {
                let outcome = Outcome::Received {
                    deliveries: deliveries.clone(),
                    queue_name: Arc::from("jobs"),
                };
                let shape = Shape::Received {
                    attribute_names: strings(attribute_names),
                    message_attribute_names: strings(message_attribute_names),
                };
                cases.push((outcome, shape));
            }
        }
    }
    cases
}

/// A delete or visibility batch's JSON result, written directly, is byte for byte what the tree
/// of `result` writes: all entries good, all failed, mixed; sender and server faults; ids and
/// messages that need escapes; no entries.
#[test]
fn sent_batch_json_is_the_trees() {
    let sent = |body: &str, trace: Option<&str>, sequence_number: Option<&str>, id: u8| Sent {
        message_id: MessageId([id; 16]),
        seq: 1,
        payload: Arc::new(Payload::new(
            body.into(),
            BTreeMap::new(),
            trace.map(Into::into),
            Arc::from(""),
        )),
        sequence_number: sequence_number.map(Into::into),
        duplicate: false,
    };
    let refused = SqsError::new(
        ErrorCode::InvalidMessageContents,
        "Invalid characters found. \"x\"",
    );
    let batches: [Vec<(String, Result<Sent, SqsError>)>; 4] = [
        vec![],
        vec![
            ("0".into(), Ok(sent("hello", None, None, 0))),
            (
                "a\"b".into(),
                Ok(sent(AWKWARD_BODY, Some("Root=1-\"q\""), None, 0xff)),
            ),
        ],
        vec![
            ("0".into(), Err(refused.clone())),
            ("1".into(), Err(SqsError::internal("disk\nfull"))),
        ],
        vec![
            (
                "x".into(),
                Ok(sent("", None, Some("18000000000000000005"), 0x11)),
            ),
            ("y\\".into(), Err(refused)),
            ("z".into(), Ok(sent("body", None, None, 0xfe))),
        ],
    ];
    for entries in batches {
        let outcome = Outcome::SentBatch(entries.clone());
        assert_json_is_the_trees(
            "SendMessageBatch",
            &outcome,
            &Shape::Whole,
            &format!("{entries:?}"),
        );
    }
}

#[test]
fn batch_json_is_the_trees() {
    let receipt_error = SqsError::new(
        ErrorCode::ReceiptHandleIsInvalid,
        "The input receipt handle \"x\" is not valid.",
    );
    let server_error = SqsError::internal("disk\nfull");
    let batches: [Vec<(String, Result<(), SqsError>)>; 4] = [
        vec![],
        vec![("0".into(), Ok(())), ("a\"b".into(), Ok(()))],
        vec![
            ("0".into(), Err(receipt_error.clone())),
            ("1".into(), Err(server_error.clone())),
        ],
        vec![
            ("x".into(), Ok(())),
            ("y\\".into(), Err(receipt_error)),
            ("z".into(), Ok(())),
            ("w".into(), Err(server_error)),
        ],
    ];
    for entries in batches {
        for action in ["DeleteMessageBatch", "ChangeMessageVisibilityBatch"] {
            let outcome = Outcome::Batch(entries.clone());
            assert_json_is_the_trees(action, &outcome, &Shape::Whole, &format!("{entries:?}"));
        }
    }
}
