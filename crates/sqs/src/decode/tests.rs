//! Every action decoded from the JSON body and from the Query form that SDKs send (botocore's
//! JSON model for the first, its Query model (1.31) for the second), and the errors of bad input.

use std::collections::BTreeMap;

use leaseq_core::{AttributeValue, MessageAttribute, QueueConfigPatch, ReceiveRequest, SendInput};
use serde_json::{json, Value};

use super::*;

mod fast_path;
mod paths;

fn json_request(action: &str, body: &[u8]) -> Result<Action, SqsError> {
    json_shaped(action, body).map(|(action, _)| action)
}

/// A JSON request's action and the shape of its response.
fn json_shaped(action: &str, body: &[u8]) -> Result<(Action, Shape), SqsError> {
    let target = format!("AmazonSQS.{action}");
    let raw = RawRequest {
        method: "POST",
        path: "/",
        query: None,
        target: Some(&target),
        content_type: Some("application/x-amz-json-1.0"),
        body,
    };
    match decode(&raw) {
        Ok((protocol, action, shape)) => {
            assert_eq!(protocol, Protocol::Json);
            Ok((action, shape))
        }
        Err((protocol, error)) => {
            assert_eq!(protocol, Protocol::Json);
            Err(error)
        }
    }
}

fn json(action: &str, body: Value) -> Result<Action, SqsError> {
    json_request(action, body.to_string().as_bytes())
}

fn form(pairs: &[(&str, &str)]) -> String {
    form_urlencoded::Serializer::new(String::new())
        .extend_pairs(pairs)
        .finish()
}

fn query_at(path: &str, pairs: &[(&str, &str)]) -> Result<Action, SqsError> {
    query_shaped(path, pairs).map(|(action, _)| action)
}

/// A Query request's action and the shape of its response.
fn query_shaped(path: &str, pairs: &[(&str, &str)]) -> Result<(Action, Shape), SqsError> {
    let body = form(pairs);
    let raw = RawRequest {
        method: "POST",
        path,
        query: None,
        target: None,
        content_type: Some("application/x-www-form-urlencoded; charset=utf-8"),
        body: body.as_bytes(),
    };
    match decode(&raw) {
        Ok((protocol, action, shape)) => {
            assert_eq!(protocol, Protocol::Query);
            Ok((action, shape))
        }
        Err((protocol, error)) => {
            assert_eq!(protocol, Protocol::Query);
            Err(error)
        }
    }
}

/// A Query request as botocore sends it: `Action`, `Version`, then the parameters.
fn query(action: &str, pairs: &[(&str, &str)]) -> Result<Action, SqsError> {
    let mut all = vec![("Action", action), ("Version", "2012-11-05")];
    all.extend_from_slice(pairs);
    query_at("/", &all)
}

const URL: &str = "http://localhost:9324/000000000000/jobs";

fn jobs() -> QueueRef {
    QueueRef {
        name: "jobs".into(),
        owner_account_id: Some("000000000000".into()),
    }
}

fn both(action: &str, body: Value, pairs: &[(&str, &str)], expected: Action) {
    assert_eq!(json(action, body).unwrap(), expected, "JSON {action}");
    assert_eq!(query(action, pairs).unwrap(), expected, "Query {action}");
    assert_eq!(expected.name(), action);
}

/// [`both`] for the actions whose requests also shape their responses.
fn both_shaped(action: &str, body: Value, pairs: &[(&str, &str)], expected: (Action, Shape)) {
    let json = json_shaped(action, body.to_string().as_bytes());
    assert_eq!(json.unwrap(), expected, "JSON {action}");
    let mut all = vec![("Action", action), ("Version", "2012-11-05")];
    all.extend_from_slice(pairs);
    assert_eq!(query_shaped("/", &all).unwrap(), expected, "Query {action}");
    assert_eq!(expected.0.name(), action);
}

fn code_of(result: Result<Action, SqsError>) -> ErrorCode {
    result.unwrap_err().code
}

fn strings(values: &[&str]) -> Vec<String> {
    values.iter().map(|v| v.to_string()).collect()
}

fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

// ----- every action ------------------------------------------------------------------------

#[test]
fn create_queue() {
    both(
        "CreateQueue",
        json!({"QueueName": "jobs", "Attributes": {"VisibilityTimeout": "60", "DelaySeconds": "5"}, "tags": {"team": "a"}}),
        &[
            ("QueueName", "jobs"),
            ("Attribute.1.Name", "VisibilityTimeout"),
            ("Attribute.1.Value", "60"),
            ("Attribute.2.Name", "DelaySeconds"),
            ("Attribute.2.Value", "5"),
            ("Tag.1.Key", "team"),
            ("Tag.1.Value", "a"),
        ],
        Action::CreateQueue {
            name: "jobs".into(),
            attributes: QueueConfigPatch {
                visibility_timeout_seconds: Some(60),
                delay_seconds: Some(5),
                ..QueueConfigPatch::default()
            },
            tags: map(&[("team", "a")]),
        },
    );
}

#[test]
fn get_queue_url_and_list_queues() {
    both(
        "GetQueueUrl",
        json!({"QueueName": "jobs", "QueueOwnerAWSAccountId": "000000000000"}),
        &[
            ("QueueName", "jobs"),
            ("QueueOwnerAWSAccountId", "000000000000"),
        ],
        Action::GetQueueUrl {
            name: "jobs".into(),
            owner_account_id: Some("000000000000".into()),
        },
    );
    both(
        "ListQueues",
        json!({"QueueNamePrefix": "jo", "MaxResults": 5, "NextToken": "t"}),
        &[
            ("QueueNamePrefix", "jo"),
            ("MaxResults", "5"),
            ("NextToken", "t"),
        ],
        Action::ListQueues {
            prefix: "jo".into(),
            max_results: Some(5),
            next_token: Some("t".into()),
        },
    );
    both(
        "ListQueues",
        json!({}),
        &[],
        Action::ListQueues {
            prefix: String::new(),
            max_results: None,
            next_token: None,
        },
    );
}

#[test]
fn queue_actions_without_parameters() {
    for (action, expected) in [
        ("DeleteQueue", Action::DeleteQueue { queue: jobs() }),
        ("PurgeQueue", Action::PurgeQueue { queue: jobs() }),
        ("ListQueueTags", Action::ListQueueTags { queue: jobs() }),
    ] {
        both(
            action,
            json!({"QueueUrl": URL}),
            &[("QueueUrl", URL)],
            expected,
        );
    }
}

#[test]
fn queue_attributes() {
    both_shaped(
        "GetQueueAttributes",
        json!({"QueueUrl": URL, "AttributeNames": ["All", "QueueArn"]}),
        &[
            ("QueueUrl", URL),
            ("AttributeName.1", "All"),
            ("AttributeName.2", "QueueArn"),
        ],
        (
            Action::GetQueueAttributes { queue: jobs() },
            Shape::QueueAttributes {
                names: strings(&["All", "QueueArn"]),
            },
        ),
    );
    both(
        "SetQueueAttributes",
        json!({"QueueUrl": URL, "Attributes": {"MessageRetentionPeriod": "120", "Policy": ""}}),
        &[
            ("QueueUrl", URL),
            ("Attribute.1.Name", "MessageRetentionPeriod"),
            ("Attribute.1.Value", "120"),
            ("Attribute.2.Name", "Policy"),
            ("Attribute.2.Value", ""),
        ],
        Action::SetQueueAttributes {
            queue: jobs(),
            attributes: QueueConfigPatch {
                retention_seconds: Some(120),
                policy: Some(None),
                ..QueueConfigPatch::default()
            },
        },
    );
}

fn attribute(data_type: &str, value: AttributeValue) -> MessageAttribute {
    MessageAttribute {
        data_type: data_type.into(),
        value,
    }
}

#[test]
fn send_message() {
    let mut message = SendInput::body("hello\r\n<&>");
    message.delay_seconds = Some(3);
    message.trace_header = Some("Root=1-abc".into());
    message.attributes = BTreeMap::from([
        (
            "n".to_string(),
            attribute("Number.int", AttributeValue::Text("42".into())),
        ),
        (
            "b".to_string(),
            attribute("Binary", AttributeValue::Binary(vec![0, 1, 255])),
        ),
        (
            "s".to_string(),
            attribute("String", AttributeValue::Text("text".into())),
        ),
    ]);
    both(
        "SendMessage",
        json!({
            "QueueUrl": URL,
            "MessageBody": "hello\r\n<&>",
            "DelaySeconds": 3,
            "MessageAttributes": {
                "n": {"DataType": "Number.int", "StringValue": "42"},
                "b": {"DataType": "Binary", "BinaryValue": "AAH/"},
                "s": {"DataType": "String", "StringValue": "text"},
            },
            "MessageSystemAttributes": {
                "AWSTraceHeader": {"DataType": "String", "StringValue": "Root=1-abc"},
            },
        }),
        &[
            ("QueueUrl", URL),
            ("MessageBody", "hello\r\n<&>"),
            ("DelaySeconds", "3"),
            ("MessageAttribute.1.Name", "n"),
            ("MessageAttribute.1.Value.DataType", "Number.int"),
            ("MessageAttribute.1.Value.StringValue", "42"),
            ("MessageAttribute.2.Name", "b"),
            ("MessageAttribute.2.Value.DataType", "Binary"),
            ("MessageAttribute.2.Value.BinaryValue", "AAH/"),
            ("MessageAttribute.3.Name", "s"),
            ("MessageAttribute.3.Value.DataType", "String"),
            ("MessageAttribute.3.Value.StringValue", "text"),
            ("MessageSystemAttribute.1.Name", "AWSTraceHeader"),
            ("MessageSystemAttribute.1.Value.DataType", "String"),
            ("MessageSystemAttribute.1.Value.StringValue", "Root=1-abc"),
        ],
        Action::SendMessage {
            queue: jobs(),
            message,
        },
    );
}

#[test]
fn send_message_batch() {
    let first = SendInput::body("one");
    let mut second = SendInput::body("two");
    second.delay_seconds = Some(1);
    second.attributes = BTreeMap::from([(
        "k".to_string(),
        attribute("String", AttributeValue::Text("v".into())),
    )]);
    both(
        "SendMessageBatch",
        json!({"QueueUrl": URL, "Entries": [
            {"Id": "a", "MessageBody": "one"},
            {"Id": "b-2_", "MessageBody": "two", "DelaySeconds": 1,
             "MessageAttributes": {"k": {"DataType": "String", "StringValue": "v"}}},
        ]}),
        &[
            ("QueueUrl", URL),
            ("SendMessageBatchRequestEntry.1.Id", "a"),
            ("SendMessageBatchRequestEntry.1.MessageBody", "one"),
            ("SendMessageBatchRequestEntry.2.Id", "b-2_"),
            ("SendMessageBatchRequestEntry.2.MessageBody", "two"),
            ("SendMessageBatchRequestEntry.2.DelaySeconds", "1"),
            (
                "SendMessageBatchRequestEntry.2.MessageAttribute.1.Name",
                "k",
            ),
            (
                "SendMessageBatchRequestEntry.2.MessageAttribute.1.Value.DataType",
                "String",
            ),
            (
                "SendMessageBatchRequestEntry.2.MessageAttribute.1.Value.StringValue",
                "v",
            ),
        ],
        Action::SendMessageBatch {
            queue: jobs(),
            entries: vec![
                BatchEntry {
                    id: "a".into(),
                    value: first,
                },
                BatchEntry {
                    id: "b-2_".into(),
                    value: second,
                },
            ],
        },
    );
}

#[test]
fn receive_message() {
    both_shaped(
        "ReceiveMessage",
        json!({
            "QueueUrl": URL,
            "MaxNumberOfMessages": 10,
            "VisibilityTimeout": 45,
            "WaitTimeSeconds": 20,
            "AttributeNames": ["SentTimestamp"],
            "MessageSystemAttributeNames": ["All"],
            "MessageAttributeNames": ["All", "foo.*"],
            "ReceiveRequestAttemptId": "x",
        }),
        &[
            ("QueueUrl", URL),
            ("MaxNumberOfMessages", "10"),
            ("VisibilityTimeout", "45"),
            ("WaitTimeSeconds", "20"),
            ("AttributeName.1", "SentTimestamp"),
            ("MessageSystemAttributeName.1", "All"),
            ("MessageAttributeName.1", "All"),
            ("MessageAttributeName.2", "foo.*"),
            ("ReceiveRequestAttemptId", "x"),
        ],
        (
            Action::ReceiveMessage {
                queue: jobs(),
                request: ReceiveRequest {
                    max_messages: 10,
                    visibility_timeout_seconds: Some(45),
                    client: None,
                },
                wait_time_seconds: Some(20),
                receive_request_attempt_id: Some("x".into()),
            },
            Shape::Received {
                attribute_names: strings(&["SentTimestamp", "All"]),
                message_attribute_names: strings(&["All", "foo.*"]),
            },
        ),
    );
    both_shaped(
        "ReceiveMessage",
        json!({"QueueUrl": URL}),
        &[("QueueUrl", URL)],
        (
            Action::ReceiveMessage {
                queue: jobs(),
                request: ReceiveRequest {
                    max_messages: 1,
                    visibility_timeout_seconds: None,
                    client: None,
                },
                wait_time_seconds: None,
                receive_request_attempt_id: None,
            },
            Shape::Received {
                attribute_names: vec![],
                message_attribute_names: vec![],
            },
        ),
    );
}

#[test]
fn delete_and_change_visibility() {
    both(
        "DeleteMessage",
        json!({"QueueUrl": URL, "ReceiptHandle": "r1"}),
        &[("QueueUrl", URL), ("ReceiptHandle", "r1")],
        Action::DeleteMessage {
            queue: jobs(),
            receipt: "r1".into(),
        },
    );
    both(
        "DeleteMessageBatch",
        json!({"QueueUrl": URL, "Entries": [{"Id": "a", "ReceiptHandle": "r1"}, {"Id": "b", "ReceiptHandle": "r2"}]}),
        &[
            ("QueueUrl", URL),
            ("DeleteMessageBatchRequestEntry.1.Id", "a"),
            ("DeleteMessageBatchRequestEntry.1.ReceiptHandle", "r1"),
            ("DeleteMessageBatchRequestEntry.2.Id", "b"),
            ("DeleteMessageBatchRequestEntry.2.ReceiptHandle", "r2"),
        ],
        Action::DeleteMessageBatch {
            queue: jobs(),
            entries: vec![
                BatchEntry {
                    id: "a".into(),
                    value: "r1".into(),
                },
                BatchEntry {
                    id: "b".into(),
                    value: "r2".into(),
                },
            ],
        },
    );
    both(
        "ChangeMessageVisibility",
        json!({"QueueUrl": URL, "ReceiptHandle": "r1", "VisibilityTimeout": 0}),
        &[
            ("QueueUrl", URL),
            ("ReceiptHandle", "r1"),
            ("VisibilityTimeout", "0"),
        ],
        Action::ChangeMessageVisibility {
            queue: jobs(),
            receipt: "r1".into(),
            visibility_timeout_seconds: 0,
        },
    );
    both(
        "ChangeMessageVisibilityBatch",
        json!({"QueueUrl": URL, "Entries": [{"Id": "a", "ReceiptHandle": "r1", "VisibilityTimeout": 30}]}),
        &[
            ("QueueUrl", URL),
            ("ChangeMessageVisibilityBatchRequestEntry.1.Id", "a"),
            (
                "ChangeMessageVisibilityBatchRequestEntry.1.ReceiptHandle",
                "r1",
            ),
            (
                "ChangeMessageVisibilityBatchRequestEntry.1.VisibilityTimeout",
                "30",
            ),
        ],
        Action::ChangeMessageVisibilityBatch {
            queue: jobs(),
            entries: vec![BatchEntry {
                id: "a".into(),
                value: ("r1".into(), 30),
            }],
        },
    );
}

#[test]
fn tags() {
    both(
        "TagQueue",
        json!({"QueueUrl": URL, "Tags": {"a": "1", "b": ""}}),
        &[
            ("QueueUrl", URL),
            ("Tag.1.Key", "a"),
            ("Tag.1.Value", "1"),
            ("Tag.2.Key", "b"),
            ("Tag.2.Value", ""),
        ],
        Action::TagQueue {
            queue: jobs(),
            tags: map(&[("a", "1"), ("b", "")]),
        },
    );
    both(
        "UntagQueue",
        json!({"QueueUrl": URL, "TagKeys": ["a", "b"]}),
        &[("QueueUrl", URL), ("TagKey.1", "a"), ("TagKey.2", "b")],
        Action::UntagQueue {
            queue: jobs(),
            keys: strings(&["a", "b"]),
        },
    );
}

#[test]
fn dead_letter_sources_and_permissions() {
    both(
        "ListDeadLetterSourceQueues",
        json!({"QueueUrl": URL, "MaxResults": 2}),
        &[("QueueUrl", URL), ("MaxResults", "2")],
        Action::ListDeadLetterSourceQueues {
            queue: jobs(),
            max_results: Some(2),
            next_token: None,
        },
    );
    both(
        "AddPermission",
        json!({"QueueUrl": URL, "Label": "l", "AWSAccountIds": ["1", "2"], "Actions": ["SendMessage"]}),
        &[
            ("QueueUrl", URL),
            ("Label", "l"),
            ("AWSAccountId.1", "1"),
            ("AWSAccountId.2", "2"),
            ("ActionName.1", "SendMessage"),
        ],
        Action::AddPermission {
            queue: jobs(),
            label: "l".into(),
            account_ids: strings(&["1", "2"]),
            actions: strings(&["SendMessage"]),
        },
    );
    both(
        "RemovePermission",
        json!({"QueueUrl": URL, "Label": "l"}),
        &[("QueueUrl", URL), ("Label", "l")],
        Action::RemovePermission {
            queue: jobs(),
            label: "l".into(),
        },
    );
}

// ----- where the queue comes from ----------------------------------------------------------

#[test]
fn queue_url_forms_and_request_path() {
    for url in [
        "http://localhost:9324/000000000000/jobs",
        "https://sqs.us-east-1.amazonaws.com/123456789012/jobs",
        "http://localhost:9324/queue/jobs",
        "/000000000000/jobs",
        "HTTP://host/1/jobs?x=y",
        "hTtPs://host/1/jobs#fragment",
        "/1//jobs/",
        "http://é/1/jobs",
        // Just the name: SQS takes it as the caller's queue of that name (AWS-recorded
        // behaviour listed in issue 19, "Addressing").
        "jobs",
    ] {
        assert_eq!(&*queue_name_of_url(url).unwrap().name, "jobs", "{url}");
    }
    // The account of the path, when it is one (12 digits), names the queue's owner.
    for (url, owner) in [
        (
            "http://localhost:9324/000000000000/jobs",
            Some("000000000000"),
        ),
        (
            "https://sqs.us-east-1.amazonaws.com/123456789012/jobs",
            Some("123456789012"),
        ),
        ("/123456789012/jobs", Some("123456789012")),
        ("http://localhost:9324/queue/jobs", None),
        ("HTTP://host/1/jobs?x=y", None),
        ("/12345678901x/jobs", None),
        ("jobs", None),
    ] {
        let queue = queue_name_of_url(url).unwrap();
        assert_eq!(queue.owner_account_id.as_deref(), owner, "{url}");
    }
    for bad in [
        "/jobs",
        "http://host",
        "http://host/a/b/c",
        "",
        "/",
        "http://",
        "httpé://a/b",
    ] {
        assert_eq!(
            queue_name_of_url(bad).unwrap_err().code,
            ErrorCode::InvalidAddress,
            "{bad}"
        );
    }
    // Old SDKs post to the queue's URL and leave QueueUrl out.
    let action = query_at(
        "/000000000000/jobs",
        &[("Action", "PurgeQueue"), ("Version", "2012-11-05")],
    );
    assert_eq!(action.unwrap(), Action::PurgeQueue { queue: jobs() });
    assert_eq!(
        code_of(query("PurgeQueue", &[])),
        ErrorCode::MissingParameter
    );
}

#[test]
fn query_string_of_a_get() {
    let query_string = form(&[("Action", "GetQueueUrl"), ("QueueName", "a b+c")]);
    let raw = RawRequest {
        method: "GET",
        path: "/",
        query: Some(&query_string),
        target: None,
        content_type: None,
        body: b"",
    };
    let (protocol, action, shape) = decode(&raw).unwrap();
    assert_eq!(shape, Shape::Whole);
    assert_eq!(protocol, Protocol::Query);
    assert_eq!(
        action,
        Action::GetQueueUrl {
            name: "a b+c".into(),
            owner_account_id: None,
        }
    );
}

// ----- bad input ---------------------------------------------------------------------------

#[test]
fn unknown_and_missing_actions() {
    let error = query("Frobnicate", &[]).unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidAction);
    let error = json("Frobnicate", json!({})).unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidAction);
    assert_eq!(
        error.code.json_type(),
        "com.amazon.coral.service#UnknownOperationException"
    );
    assert_eq!(
        code_of(query_at("/", &[("QueueName", "x")])),
        ErrorCode::MissingAction
    );
    assert_eq!(
        code_of(query("StartMessageMoveTask", &[])),
        ErrorCode::MissingParameter
    );
    let raw = RawRequest {
        method: "POST",
        path: "/",
        query: None,
        target: Some("DynamoDB_20120810.GetItem"),
        content_type: None,
        body: b"{}",
    };
    assert_eq!(decode(&raw).unwrap_err().1.code, ErrorCode::InvalidAction);
}

/// As AWS answers them (LocalStack's AWS-validated TestSqsQueryApi tests): a parameterless GET
/// of a queue's URL is no operation (404 `UnknownOperationException`); `CreateQueue` and
/// `ListQueues` at a queue's URL are `InvalidAction`, `GetQueueUrl` is fine there; a POST
/// without `Action` is still `MissingAction`.
#[test]
fn queue_urls_as_endpoints() {
    let raw = |method, path, query| RawRequest {
        method,
        path,
        query,
        target: None,
        content_type: None,
        body: b"",
    };
    let code = |request: RawRequest| decode(&request).map(|_| ()).unwrap_err().1.code;
    assert_eq!(
        code(raw("GET", "/000000000000/q", None)),
        ErrorCode::UnknownOperation
    );
    assert_eq!(
        code(raw("POST", "/000000000000/q", None)),
        ErrorCode::MissingAction
    );
    for action in ["Action=CreateQueue&QueueName=x", "Action=ListQueues"] {
        let error = decode(&raw("GET", "/000000000000/q", Some(action)))
            .unwrap_err()
            .1;
        assert_eq!(error.code, ErrorCode::InvalidAction, "{action}");
        assert!(error.message.ends_with("is not valid for this endpoint."));
    }
    assert!(decode(&raw("GET", "/", Some("Action=ListQueues"))).is_ok());
    assert!(decode(&raw(
        "GET",
        "/000000000000/q",
        Some("Action=GetQueueUrl&QueueName=q")
    ))
    .is_ok());
}

#[test]
fn malformed_bodies() {
    for body in [
        &b"{"[..],
        b"[1]",
        b"\xff\xfe",
        b"{\"QueueName\": \"\\ud800\"}",
    ] {
        assert_eq!(
            code_of(json_request("GetQueueUrl", body)),
            ErrorCode::SerializationException,
            "{body:?}"
        );
    }
    // A member of the wrong type.
    assert_eq!(
        code_of(json("GetQueueUrl", json!({"QueueName": 5}))),
        ErrorCode::SerializationException
    );
    assert_eq!(
        code_of(json(
            "ReceiveMessage",
            json!({"QueueUrl": URL, "MaxNumberOfMessages": "5"})
        )),
        ErrorCode::SerializationException
    );
    // An empty JSON body reads as `{}`.
    assert_eq!(
        code_of(json_request("GetQueueUrl", b"")),
        ErrorCode::MissingParameter
    );
    for body in [
        &b"Action=GetQueueUrl&QueueName=%zz"[..],
        b"Action=GetQueueUrl&QueueName=%ff",
    ] {
        let raw = RawRequest {
            method: "POST",
            path: "/",
            query: None,
            target: None,
            content_type: Some("application/x-www-form-urlencoded"),
            body,
        };
        assert_eq!(
            decode(&raw).unwrap_err().1.code,
            ErrorCode::MalformedQueryString
        );
    }
    assert_eq!(
        code_of(query(
            "ReceiveMessage",
            &[("QueueUrl", URL), ("WaitTimeSeconds", "soon")]
        )),
        ErrorCode::InvalidParameterValue
    );
}

#[test]
fn missing_parameters() {
    let cases: Vec<(Result<Action, SqsError>, &str)> = vec![
        (query("CreateQueue", &[]), "QueueName"),
        (json("SendMessage", json!({"QueueUrl": URL})), "MessageBody"),
        (
            query("DeleteMessage", &[("QueueUrl", URL)]),
            "ReceiptHandle",
        ),
        (
            query(
                "ChangeMessageVisibility",
                &[("QueueUrl", URL), ("ReceiptHandle", "r")],
            ),
            "VisibilityTimeout",
        ),
        (
            query("SetQueueAttributes", &[("QueueUrl", URL)]),
            "Attribute.1.Name",
        ),
        (json("TagQueue", json!({"QueueUrl": URL})), "Tags"),
        (json("UntagQueue", json!({"QueueUrl": URL})), "TagKeys"),
        (
            query(
                "AddPermission",
                &[("QueueUrl", URL), ("Label", "l"), ("ActionName.1", "*")],
            ),
            "AWSAccountId.1",
        ),
        (
            query(
                "DeleteMessageBatch",
                &[
                    ("QueueUrl", URL),
                    ("DeleteMessageBatchRequestEntry.1.Id", "a"),
                ],
            ),
            "DeleteMessageBatchRequestEntry.1.ReceiptHandle",
        ),
    ];
    for (result, parameter) in cases {
        let error = result.unwrap_err();
        assert_eq!(error.code, ErrorCode::MissingParameter, "{parameter}");
        assert_eq!(
            error.message,
            format!("The request must contain the parameter {parameter}.")
        );
    }
}

#[test]
fn attribute_names() {
    let create = |name: &str, value: &str| {
        json(
            "CreateQueue",
            json!({"QueueName": "q", "Attributes": {name: value}}),
        )
    };
    assert_eq!(
        code_of(create("Colour", "red")),
        ErrorCode::InvalidAttributeName
    );
    assert_eq!(
        code_of(create("FifoQueue", "maybe")),
        ErrorCode::InvalidAttributeValue
    );
    assert_eq!(
        code_of(create("DelaySeconds", "soon")),
        ErrorCode::InvalidAttributeValue
    );
    assert_eq!(
        code_of(json(
            "GetQueueAttributes",
            json!({"QueueUrl": URL, "AttributeNames": ["Nope"]})
        )),
        ErrorCode::InvalidAttributeName
    );
    assert!(query(
        "GetQueueAttributes",
        &[("QueueUrl", URL), ("AttributeName.1", "FifoQueue")]
    )
    .is_ok());
}

#[test]
fn receive_ranges() {
    let receive =
        |member: &str, value: i64| json("ReceiveMessage", json!({"QueueUrl": URL, member: value}));
    for (member, value) in [
        ("MaxNumberOfMessages", 0),
        ("MaxNumberOfMessages", 11),
        ("WaitTimeSeconds", 21),
        ("WaitTimeSeconds", -1),
        ("VisibilityTimeout", -1),
    ] {
        let error = receive(member, value).unwrap_err();
        assert_eq!(
            error.code,
            ErrorCode::InvalidParameterValue,
            "{member}={value}"
        );
        assert!(error
            .message
            .starts_with(&format!("Value {value} for parameter {member} is invalid.")));
    }
    assert!(receive("MaxNumberOfMessages", 10).is_ok());
    assert!(receive("WaitTimeSeconds", 0).is_ok());
    assert_eq!(
        code_of(json("ListQueues", json!({"MaxResults": 1001}))),
        ErrorCode::InvalidParameterValue
    );
}

fn send_batch(entries: Vec<Value>) -> Result<Action, SqsError> {
    json(
        "SendMessageBatch",
        json!({"QueueUrl": URL, "Entries": entries}),
    )
}

#[test]
fn batch_rules() {
    let entry = |id: &str| json!({"Id": id, "MessageBody": "x"});
    assert_eq!(code_of(send_batch(vec![])), ErrorCode::EmptyBatchRequest);
    assert_eq!(
        code_of(query("DeleteMessageBatch", &[("QueueUrl", URL)])),
        ErrorCode::EmptyBatchRequest
    );
    let eleven = (0..11).map(|i| entry(&format!("e{i}"))).collect();
    let error = send_batch(eleven).unwrap_err();
    assert_eq!(error.code, ErrorCode::TooManyEntriesInBatchRequest);
    assert!(error.message.contains("You have sent 11"));
    assert_eq!(
        code_of(send_batch(vec![entry("a"), entry("a")])),
        ErrorCode::BatchEntryIdsNotDistinct
    );
    for bad in ["", "a.b", "a b", &"x".repeat(81)] {
        assert_eq!(
            code_of(send_batch(vec![entry(bad)])),
            ErrorCode::InvalidBatchEntryId,
            "{bad:?}"
        );
    }
    assert!(send_batch(vec![entry(&"x".repeat(80))]).is_ok());
    let big = "x".repeat(600_000);
    let error = send_batch(vec![
        json!({"Id": "a", "MessageBody": big}),
        json!({"Id": "b", "MessageBody": big}),
    ])
    .unwrap_err();
    assert_eq!(error.code, ErrorCode::BatchRequestTooLong);
    assert_eq!(
        code_of(json(
            "ChangeMessageVisibilityBatch",
            json!({"QueueUrl": URL, "Entries": [{"Id": "a", "ReceiptHandle": "r"}]})
        )),
        ErrorCode::MissingParameter
    );
}

#[test]
fn message_attribute_values() {
    let send = |attributes: Value| {
        json(
            "SendMessage",
            json!({"QueueUrl": URL, "MessageBody": "x", "MessageAttributes": attributes}),
        )
    };
    // Invalid base64 is a request error in both protocols.
    assert_eq!(
        code_of(send(
            json!({"b": {"DataType": "Binary", "BinaryValue": "!!"}})
        )),
        ErrorCode::SerializationException
    );
    assert_eq!(
        code_of(query(
            "SendMessage",
            &[
                ("QueueUrl", URL),
                ("MessageBody", "x"),
                ("MessageAttribute.1.Name", "b"),
                ("MessageAttribute.1.Value.DataType", "Binary"),
                ("MessageAttribute.1.Value.BinaryValue", "!!"),
            ]
        )),
        ErrorCode::InvalidParameterValue
    );
    // A value of the wrong kind reads as empty; the engine rejects it (per entry in a batch).
    let Action::SendMessage { message, .. } =
        send(json!({"s": {"DataType": "String", "BinaryValue": "AA=="}})).unwrap()
    else {
        panic!("not a send");
    };
    assert_eq!(
        message.attributes["s"].value,
        AttributeValue::Text(String::new())
    );
    assert_eq!(
        code_of(send(
            json!({"l": {"DataType": "String", "StringListValues": ["a"]}})
        )),
        ErrorCode::UnsupportedOperation
    );
    // System attributes: only AWSTraceHeader, as a String.
    let system = |attributes: Value| {
        json(
            "SendMessage",
            json!({"QueueUrl": URL, "MessageBody": "x", "MessageSystemAttributes": attributes}),
        )
    };
    assert_eq!(
        code_of(system(
            json!({"Other": {"DataType": "String", "StringValue": "v"}})
        )),
        ErrorCode::InvalidParameterValue
    );
    assert_eq!(
        code_of(system(
            json!({"AWSTraceHeader": {"DataType": "Number", "StringValue": "1"}})
        )),
        ErrorCode::InvalidParameterValue
    );
    // Group and deduplication ids are decoded for the engine, which knows the queue's kind.
    let Action::SendMessage { message, .. } = json(
        "SendMessage",
        json!({"QueueUrl": URL, "MessageBody": "x", "MessageGroupId": "g", "MessageDeduplicationId": "d"}),
    )
    .unwrap() else {
        panic!("not a send");
    };
    assert_eq!(message.group_id.as_deref(), Some("g"));
    assert_eq!(message.deduplication_id.as_deref(), Some("d"));
    let Action::SendMessageBatch { entries, .. } = query(
        "SendMessageBatch",
        &[
            ("QueueUrl", URL),
            ("SendMessageBatchRequestEntry.1.Id", "a"),
            ("SendMessageBatchRequestEntry.1.MessageBody", "x"),
            ("SendMessageBatchRequestEntry.1.MessageGroupId", "g1"),
            (
                "SendMessageBatchRequestEntry.1.MessageDeduplicationId",
                "d1",
            ),
            ("SendMessageBatchRequestEntry.2.Id", "b"),
            ("SendMessageBatchRequestEntry.2.MessageBody", "y"),
            ("SendMessageBatchRequestEntry.2.MessageGroupId", "g1"),
        ],
    )
    .unwrap() else {
        panic!("not a batch");
    };
    assert_eq!(entries[0].value.group_id.as_deref(), Some("g1"));
    assert_eq!(entries[0].value.deduplication_id.as_deref(), Some("d1"));
    assert_eq!(entries[1].value.group_id.as_deref(), Some("g1"));
    assert_eq!(entries[1].value.deduplication_id, None);
    assert_eq!(
        code_of(json(
            "SendMessage",
            json!({"QueueUrl": URL, "MessageBody": "x", "DelaySeconds": -1})
        )),
        ErrorCode::InvalidParameterValue
    );
}

#[test]
fn leaseq_extra_action_in_both_protocols() {
    let url = "http://localhost:9324/000000000000/jobs";
    for action in [
        json("LeaseqGetVisibilityAdvice", json!({ "QueueUrl": url })).unwrap(),
        query_at(
            "/",
            &[("Action", "LeaseqGetVisibilityAdvice"), ("QueueUrl", url)],
        )
        .unwrap(),
    ] {
        assert_eq!(action.name(), "LeaseqGetVisibilityAdvice");
        let Action::GetVisibilityAdvice { queue } = action else {
            panic!("decoded {action:?}");
        };
        assert_eq!(&*queue.name, "jobs");
    }
    let error = json("LeaseqGetVisibilityAdvice", json!({})).unwrap_err();
    assert_eq!(error.code, ErrorCode::MissingParameter);
}

#[test]
fn message_move_actions() {
    let arn = "arn:aws:sqs:us-east-1:000000000000:dlq";
    assert_eq!(
        json(
            "StartMessageMoveTask",
            json!({"SourceArn": arn, "DestinationArn": "arn:aws:sqs:us-east-1:000000000000:home",
                   "MaxNumberOfMessagesPerSecond": 7, "LeaseqMessageLimit": 3}),
        )
        .unwrap(),
        Action::StartMessageMoveTask {
            source: "dlq".into(),
            destination: Some("home".into()),
            rate_per_second: Some(7),
            limit: Some(3),
        }
    );
    for rate in [0, 501, -1] {
        let error = json(
            "StartMessageMoveTask",
            json!({"SourceArn": arn, "MaxNumberOfMessagesPerSecond": rate}),
        )
        .unwrap_err();
        assert_eq!(error.code, ErrorCode::InvalidParameterValue, "rate {rate}");
    }
    let error = json("StartMessageMoveTask", json!({"SourceArn": "dlq"})).unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidParameterValue);
    assert_eq!(
        json("ListMessageMoveTasks", json!({"SourceArn": arn})).unwrap(),
        Action::ListMessageMoveTasks {
            source: "dlq".into(),
            max_results: 1
        }
    );
    let error = json(
        "ListMessageMoveTasks",
        json!({"SourceArn": arn, "MaxResults": 11}),
    )
    .unwrap_err();
    assert_eq!(error.code, ErrorCode::InvalidParameterValue);
    let ctx = crate::Context {
        base_url: "".into(),
        region: "us-east-1".into(),
        account_id: "000000000000".into(),
        request_id: "".into(),
    };
    let handle = crate::moves::encode_task_handle(&ctx, 5, "dlq");
    let task = crate::TaskHandle {
        task_id: Some(5),
        source: "dlq".into(),
    };
    assert_eq!(
        query("CancelMessageMoveTask", &[("TaskHandle", &handle)]).unwrap(),
        Action::CancelMessageMoveTask { task: task.clone() }
    );
    assert_eq!(
        json(
            "LeaseqUpdateMessageMoveTask",
            json!({"TaskHandle": handle, "MaxNumberOfMessagesPerSecond": 0, "LeaseqMessageLimit": 9}),
        )
        .unwrap(),
        Action::LeaseqChangeMessageMoveTask {
            action: "LeaseqUpdateMessageMoveTask",
            task: task.clone(),
            changes: vec![
                leaseq_core::MoveTaskChange::Rate(None),
                leaseq_core::MoveTaskChange::Limit(Some(9)),
            ],
        }
    );
    let error = json("LeaseqUpdateMessageMoveTask", json!({"TaskHandle": handle})).unwrap_err();
    assert_eq!(error.code, ErrorCode::MissingParameter);
    assert_eq!(
        json(
            "LeaseqPeekMessages",
            json!({"QueueUrl": "http://h/000000000000/dlq", "NextToken": "12", "MaxNumberOfMessages": 100}),
        )
        .unwrap(),
        Action::LeaseqPeekMessages {
            queue: crate::QueueRef {
                name: "dlq".into(),
                owner_account_id: Some("000000000000".into()),
            },
            after_seq: 12,
            max_messages: 100,
        }
    );
}

/// The `str`-based `queue_name_of_url` that the byte scan replaced, kept as its reference.
fn queue_name_of_url_reference(url: &str) -> Result<QueueRef, SqsError> {
    let scheme = ["http://", "https://"].into_iter().find(|scheme| {
        url.get(..scheme.len())
            .is_some_and(|start| start.eq_ignore_ascii_case(scheme))
    });
    let path = match scheme {
        Some(scheme) => {
            let after_scheme = &url[scheme.len()..];
            after_scheme.find('/').map_or("", |at| &after_scheme[at..])
        }
        None => url,
    };
    let end = path
        .bytes()
        .position(|byte| byte == b'?' || byte == b'#')
        .unwrap_or(path.len());
    let path = &path[..end];
    if scheme.is_none() && !path.is_empty() && !path.contains('/') {
        return Ok(QueueRef::new(path));
    }
    let mut segments = path.split('/').filter(|s| !s.is_empty());
    match (segments.next(), segments.next(), segments.next()) {
        (Some(account_or_queue), Some(name), None) => Ok(QueueRef {
            name: name.into(),
            owner_account_id: (account_or_queue.len() == 12
                && account_or_queue.bytes().all(|b| b.is_ascii_digit()))
            .then(|| account_or_queue.into()),
        }),
        _ => Err(SqsError::new(
            ErrorCode::InvalidAddress,
            format!("The address {url} is not valid for this endpoint."),
        )),
    }
}

proptest::proptest! {
    /// The byte scan answers every URL as the reference does, errors included, over strings
    /// built from the characters the parser gives a meaning to (and some it does not).
    #[test]
    fn queue_name_of_url_agrees_with_its_reference(
        parts in proptest::collection::vec(
            proptest::prop_oneof![
                proptest::strategy::Just("http://".to_string()),
                proptest::strategy::Just("HTTPS://".to_string()),
                proptest::strategy::Just("/".to_string()),
                proptest::strategy::Just("//".to_string()),
                proptest::strategy::Just("?".to_string()),
                proptest::strategy::Just("#".to_string()),
                proptest::strategy::Just("000000000000".to_string()),
                proptest::strategy::Just("queue".to_string()),
                "[a-zA-Z0-9:é._-]{0,6}",
            ],
            0..8,
        )
    ) {
        let url: String = parts.concat();
        let (fast, reference) = (queue_name_of_url(&url), queue_name_of_url_reference(&url));
        match (fast, reference) {
            (Ok(fast), Ok(reference)) => proptest::prop_assert_eq!(fast, reference, "{}", url),
            (Err(fast), Err(reference)) => {
                proptest::prop_assert_eq!(fast.code, reference.code, "{}", url);
                proptest::prop_assert_eq!(fast.message, reference.message, "{}", url);
            }
            (fast, reference) => proptest::prop_assert!(false, "{url}: {fast:?} against {reference:?}"),
        }
    }
}

proptest::proptest! {
    /// A remembered queue is what reading its URL gives, whatever URLs came before on the
    /// thread (the same one, another one, one that names no queue, a long one).
    #[test]
    fn a_remembered_queue_is_its_urls(
        urls in proptest::collection::vec(
            proptest::sample::select(vec![
                "http://localhost:9324/000000000000/jobs".to_string(),
                "http://localhost:9324/000000000000/other".to_string(),
                "http://localhost:9324/123456789012/jobs".to_string(),
                "/queue/jobs".to_string(),
                "jobs".to_string(),
                "http://localhost:9324/".to_string(),
                format!("http://{}/000000000000/long", "h".repeat(600)),
            ]),
            1..12,
        )
    ) {
        for url in &urls {
            let remembered = remembered_queue(url).map_err(|error| error.message);
            proptest::prop_assert_eq!(remembered, queue_name_of_url(url).map_err(|error| error.message), "{}", url);
        }
    }
}

proptest::proptest! {
    /// The word-at-a-time search finds what a byte-by-byte one finds, from any start, in any
    /// bytes: mostly the delimiters and their neighbours in value (`.` and `0` around `/`, `>`
    /// and `@` around `?`), where a borrow across bytes would show, and bytes from 0x80 up.
    #[test]
    fn next_delimiter_finds_the_first(
        bytes in proptest::collection::vec(
            proptest::prop_oneof![
                proptest::sample::select(b"/?#.0>@\"$\x00\x01\x7f\x80\xaf\xbf\xff".to_vec()),
                proptest::num::u8::ANY,
            ],
            0..40,
        ),
        from in 0usize..40,
        in_path in proptest::bool::ANY,
    ) {
        let from = from.min(bytes.len());
        let is_delimiter = |byte: u8| byte == b'/' || in_path && (byte == b'?' || byte == b'#');
        let expected = bytes[from..]
            .iter()
            .position(|&byte| is_delimiter(byte))
            .map_or(bytes.len(), |offset| from + offset);
        proptest::prop_assert_eq!(next_delimiter(&bytes, from, in_path), expected);
    }
}
