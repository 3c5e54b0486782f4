//! The JSON fast path (`decode::fast`) against the reference path it must agree with: for
//! bodies of the hot actions, valid ones and near-valid mutations of them (wrong types, missing,
//! extra and repeated members, structures written as arrays, escapes, unicode, big numbers,
//! null, malformed JSON inside a member), the fast path either declines or yields exactly the
//! reference path's action and shape, and `decode` (fast path, then the reference path) always
//! answers what the reference path alone answers, errors included. A valid request that was not
//! mutated must take the fast path, so that the property cannot hold by the fast path declining
//! everything.

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use proptest::prelude::*;

use super::*;

/// A JSON text as a tree that can hold what `serde_json::Value` cannot: repeated keys, and raw
/// fragments (malformed strings, numbers as written).
#[derive(Clone, Debug)]
enum Json {
    Null,
    Bool(bool),
    /// A number as written (`5`, `-0`, `1e400`, `9223372036854775808`).
    Number(String),
    Text(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
    /// Bytes written as they are (a string with invalid UTF-8 or a lone surrogate escape).
    Raw(Vec<u8>),
}

/// How a tree is written: which characters of strings (and keys) are escaped, and whether
/// blanks surround the punctuation.
#[derive(Clone, Copy, Debug)]
struct Style {
    /// Every `escape_every`-th character is written as `\uXXXX` (0: none but the required).
    escape_every: usize,
    spaced: bool,
}

fn write_text(out: &mut Vec<u8>, text: &str, style: Style) {
    out.push(b'"');
    for (at, c) in text.chars().enumerate() {
        let forced = style.escape_every != 0 && at % style.escape_every == 0;
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\n' if !forced => out.extend_from_slice(b"\\n"),
            c if forced || (c as u32) < 0x20 => {
                let mut units = [0u16; 2];
                for unit in c.encode_utf16(&mut units) {
                    out.extend_from_slice(format!("\\u{unit:04x}").as_bytes());
                }
            }
            c => out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes()),
        }
    }
    out.push(b'"');
}

fn write(out: &mut Vec<u8>, json: &Json, style: Style) {
    let blank = |out: &mut Vec<u8>| {
        if style.spaced {
            out.extend_from_slice(b" \n\t");
        }
    };
    match json {
        Json::Null => out.extend_from_slice(b"null"),
        Json::Bool(value) => out.extend_from_slice(if *value { b"true" } else { b"false" }),
        Json::Number(number) => out.extend_from_slice(number.as_bytes()),
        Json::Text(text) => write_text(out, text, style),
        Json::Raw(bytes) => out.extend_from_slice(bytes),
        Json::Array(items) => {
            out.push(b'[');
            for (at, item) in items.iter().enumerate() {
                if at > 0 {
                    out.push(b',');
                }
                blank(out);
                write(out, item, style);
            }
            out.push(b']');
        }
        Json::Object(members) => {
            out.push(b'{');
            for (at, (key, value)) in members.iter().enumerate() {
                if at > 0 {
                    out.push(b',');
                }
                blank(out);
                write_text(out, key, style);
                blank(out);
                out.push(b':');
                write(out, value, style);
            }
            blank(out);
            out.push(b'}');
        }
    }
}

fn object(members: Vec<(&str, Option<Json>)>) -> Json {
    Json::Object(
        members
            .into_iter()
            .filter_map(|(key, value)| Some((key.to_string(), value?)))
            .collect(),
    )
}

fn text(value: impl Into<String>) -> Json {
    Json::Text(value.into())
}

// ----- valid requests -------------------------------------------------------------------------

/// Any text, with unicode, control characters and JSON's special characters.
fn any_text() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z0-9 ]{0,24}",
        "\\PC{0,16}",
        "[\"\\\\/\\n\\t\\u{0}-\\u{1f}\\u{7f}\\u{2028}\\u{10348}é]{0,12}",
    ]
}

fn queue_url() -> impl Strategy<Value = Option<Json>> {
    prop_oneof![
        Just(Some(text("http://localhost:9324/000000000000/jobs"))),
        Just(Some(text(
            "https://sqs.us-east-1.amazonaws.com/123456789012/jobs.fifo"
        ))),
        Just(Some(text("/000000000000/jobs"))),
        Just(Some(text("jobs"))),
        Just(Some(text("http://h/1/jobs?x=1#y"))),
        // Blank or absent: the request path names the queue.
        Just(Some(text(" "))),
        Just(Some(Json::Null)),
        Just(None),
    ]
}

fn number(range: std::ops::RangeInclusive<i64>) -> impl Strategy<Value = Json> {
    range.prop_map(|n| Json::Number(n.to_string()))
}

fn optional(value: impl Strategy<Value = Json>) -> impl Strategy<Value = Option<Json>> {
    prop::option::of(value)
}

fn attribute_value() -> impl Strategy<Value = Json> {
    let string_typed = (
        prop_oneof![
            Just("String"),
            Just("Number"),
            Just("String.custom"),
            Just("Number.int")
        ],
        any_text(),
    )
        .prop_map(|(data_type, value)| {
            object(vec![
                ("DataType", Some(text(data_type))),
                ("StringValue", Some(text(value))),
            ])
        });
    let binary = (
        prop_oneof![Just("Binary"), Just("Binary.png")],
        prop::collection::vec(any::<u8>(), 0..24),
        any::<bool>(),
    )
        .prop_map(|(data_type, bytes, padded)| {
            let encoded = STANDARD.encode(bytes);
            let encoded = if padded {
                format!(" {encoded}\n")
            } else {
                encoded
            };
            object(vec![
                ("DataType", Some(text(data_type))),
                ("BinaryValue", Some(text(encoded))),
                ("StringListValues", Some(Json::Array(vec![]))),
            ])
        });
    prop_oneof![string_typed, binary]
}

fn attributes() -> impl Strategy<Value = Option<Json>> {
    optional(
        prop::collection::btree_map("[a-zA-Z0-9_.\\-]{1,12}", attribute_value(), 0..4)
            .prop_map(|map| Json::Object(map.into_iter().collect())),
    )
}

fn system_attributes() -> impl Strategy<Value = Option<Json>> {
    optional(prop_oneof![
        Just(Json::Object(vec![])),
        "[a-zA-Z0-9=;\\-]{1,40}".prop_map(|header| {
            object(vec![(
                "AWSTraceHeader",
                Some(object(vec![
                    ("DataType", Some(text("String"))),
                    ("StringValue", Some(text(header))),
                ])),
            )])
        }),
    ])
}

/// The members of a message (`SendMessage`, or an entry of `SendMessageBatch`).
fn message_members() -> impl Strategy<Value = Vec<(&'static str, Option<Json>)>> {
    (
        any_text(),
        optional(number(0..=900)),
        attributes(),
        system_attributes(),
        optional(any_text().prop_map(Json::Text)),
        optional(any_text().prop_map(Json::Text)),
    )
        .prop_map(|(body, delay, attributes, system, group, deduplication)| {
            vec![
                ("MessageBody", Some(Json::Text(body))),
                ("DelaySeconds", delay),
                ("MessageAttributes", attributes),
                ("MessageSystemAttributes", system),
                ("MessageGroupId", group),
                ("MessageDeduplicationId", deduplication),
            ]
        })
}

/// 1 to 10 entries with distinct valid ids, each built by `entry` from its id.
fn entries(
    entry: impl Strategy<Value = Vec<(&'static str, Option<Json>)>>,
) -> impl Strategy<Value = Json> {
    prop::collection::vec(entry, 1..=10).prop_map(|entries| {
        Json::Array(
            entries
                .into_iter()
                .enumerate()
                .map(|(at, mut members)| {
                    members.insert(0, ("Id", Some(text(format!("m-{at}_x")))));
                    object(members)
                })
                .collect(),
        )
    })
}

fn receipt() -> impl Strategy<Value = Json> {
    "[A-Za-z0-9+/=]{1,40}".prop_map(Json::Text)
}

fn names() -> impl Strategy<Value = Option<Json>> {
    optional(
        prop::collection::vec(
            prop_oneof![
                Just("All".to_string()),
                Just("ApproximateReceiveCount".to_string()),
                Just("SentTimestamp".to_string()),
                Just(".*".to_string()),
                "[a-z.*]{1,8}",
            ],
            0..4,
        )
        .prop_map(|names| Json::Array(names.into_iter().map(Json::Text).collect())),
    )
}

/// A valid request of one of the hot actions: the action, and the request's body.
fn valid_request() -> impl Strategy<Value = (&'static str, Json)> {
    let send = (queue_url(), message_members()).prop_map(|(url, mut members)| {
        members.insert(0, ("QueueUrl", url));
        ("SendMessage", object(members))
    });
    let send_batch = (queue_url(), entries(message_members())).prop_map(|(url, entries)| {
        (
            "SendMessageBatch",
            object(vec![("QueueUrl", url), ("Entries", Some(entries))]),
        )
    });
    let receive = (
        queue_url(),
        optional(number(1..=10)),
        optional(number(0..=43_200)),
        optional(number(0..=20)),
        (names(), names(), names()),
        optional(any_text().prop_map(Json::Text)),
    )
        .prop_map(
            |(url, max, visibility, wait, (attributes, system, message), attempt)| {
                (
                    "ReceiveMessage",
                    object(vec![
                        ("QueueUrl", url),
                        ("MaxNumberOfMessages", max),
                        ("VisibilityTimeout", visibility),
                        ("WaitTimeSeconds", wait),
                        ("AttributeNames", attributes),
                        ("MessageSystemAttributeNames", system),
                        ("MessageAttributeNames", message),
                        ("ReceiveRequestAttemptId", attempt),
                    ]),
                )
            },
        );
    let delete = (queue_url(), receipt()).prop_map(|(url, receipt)| {
        (
            "DeleteMessage",
            object(vec![("QueueUrl", url), ("ReceiptHandle", Some(receipt))]),
        )
    });
    let delete_batch = (
        queue_url(),
        entries(receipt().prop_map(|receipt| vec![("ReceiptHandle", Some(receipt))])),
    )
        .prop_map(|(url, entries)| {
            (
                "DeleteMessageBatch",
                object(vec![("QueueUrl", url), ("Entries", Some(entries))]),
            )
        });
    let change =
        (queue_url(), receipt(), number(0..=43_200)).prop_map(|(url, receipt, timeout)| {
            (
                "ChangeMessageVisibility",
                object(vec![
                    ("QueueUrl", url),
                    ("ReceiptHandle", Some(receipt)),
                    ("VisibilityTimeout", Some(timeout)),
                ]),
            )
        });
    let change_batch = (
        queue_url(),
        entries(
            (receipt(), number(0..=43_200)).prop_map(|(receipt, timeout)| {
                vec![
                    ("ReceiptHandle", Some(receipt)),
                    ("VisibilityTimeout", Some(timeout)),
                ]
            }),
        ),
    )
        .prop_map(|(url, entries)| {
            (
                "ChangeMessageVisibilityBatch",
                object(vec![("QueueUrl", url), ("Entries", Some(entries))]),
            )
        });
    prop_oneof![
        send,
        send_batch,
        receive,
        delete,
        delete_batch,
        change,
        change_batch
    ]
}

// ----- mutations ------------------------------------------------------------------------------

/// A value of any type, near the ones requests hold.
fn any_value() -> impl Strategy<Value = Json> {
    let leaf = prop_oneof![
        Just(Json::Null),
        any::<bool>().prop_map(Json::Bool),
        prop_oneof![
            Just("0"),
            Just("-0"),
            Just("5"),
            Just("-1"),
            Just("1.0"),
            Just("1e2"),
            Just("1e400"),
            Just("4294967296"),
            Just("9223372036854775807"),
            Just("9223372036854775808"),
            Just("18446744073709551616"),
            Just("43201"),
            Just("901"),
            Just("11"),
        ]
        .prop_map(|n| Json::Number(n.to_string())),
        prop_oneof![
            Just("5"),
            Just(""),
            Just("x y"),
            Just("AQID"),
            Just("not base64!"),
            Just("AWSTraceHeader"),
            Just("bad id"),
            Just("http://h/a/b/c"),
        ]
        .prop_map(text),
        any_text().prop_map(Json::Text),
        prop_oneof![
            Just(&b"\"\\ud800\""[..]),
            Just(&b"\"\\udc00x\""[..]),
            Just(&b"\"\xff\xfe\""[..]),
            Just(&b"\"\\x\""[..]),
            Just(&b"01"[..]),
            Just(&b"[1,]"[..]),
            Just(&b"\"a\x01b\""[..]),
        ]
        .prop_map(|raw| Json::Raw(raw.to_vec())),
    ];
    leaf.prop_recursive(3, 12, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Json::Array),
            prop::collection::vec(
                (
                    prop_oneof![
                        Just("DataType".to_string()),
                        Just("StringValue".to_string()),
                        "[A-Za-z]{1,6}"
                    ],
                    inner
                ),
                0..4
            )
            .prop_map(Json::Object),
        ]
    })
}

/// The member names of the hot actions, for extra and repeated members.
fn member_name() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("QueueUrl"),
        Just("Id"),
        Just("MessageBody"),
        Just("DelaySeconds"),
        Just("MessageAttributes"),
        Just("MessageSystemAttributes"),
        Just("Entries"),
        Just("ReceiptHandle"),
        Just("VisibilityTimeout"),
        Just("MaxNumberOfMessages"),
        Just("AttributeNames"),
        Just("StringListValues"),
        Just("BinaryValue"),
        Just("Unknown"),
        Just("queueUrl"),
    ]
    .prop_map(str::to_string)
}

#[derive(Clone, Debug)]
enum Mutation {
    /// Drop a member of an object (or an item of an array).
    Remove,
    /// Replace a value by another.
    Replace(Json),
    /// Add a member to an object (a known name at a wrong place, an unknown one, a repeat).
    Add(String, Json),
    /// Repeat a member of an object, with its own value.
    Repeat,
    /// Write an object as the array of its values, as derived structures would also read it.
    AsArray,
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        Just(Mutation::Remove),
        any_value().prop_map(Mutation::Replace),
        (member_name(), any_value()).prop_map(|(name, value)| Mutation::Add(name, value)),
        Just(Mutation::Repeat),
        Just(Mutation::AsArray),
    ]
}

/// The number of values in the tree (pre-order), the places a mutation can apply to.
fn size(json: &Json) -> usize {
    1 + match json {
        Json::Array(items) => items.iter().map(size).sum(),
        Json::Object(members) => members.iter().map(|(_, value)| size(value)).sum(),
        _ => 0,
    }
}

/// Applies `mutation` to the `target`-th value of the tree (pre-order), `seed` choosing a member
/// where the mutation needs one. Returns whether it applied.
fn mutate(json: &mut Json, target: &mut usize, mutation: &Mutation, seed: usize) -> bool {
    if *target == 0 {
        return match (mutation, &mut *json) {
            (Mutation::Replace(value), _) => {
                *json = value.clone();
                true
            }
            (Mutation::Remove, Json::Object(members)) if !members.is_empty() => {
                members.remove(seed % members.len());
                true
            }
            (Mutation::Remove, Json::Array(items)) if !items.is_empty() => {
                items.remove(seed % items.len());
                true
            }
            (Mutation::Add(name, value), Json::Object(members)) => {
                members.insert(seed % (members.len() + 1), (name.clone(), value.clone()));
                true
            }
            (Mutation::Repeat, Json::Object(members)) if !members.is_empty() => {
                let member = members[seed % members.len()].clone();
                members.push(member);
                true
            }
            (Mutation::AsArray, Json::Object(members)) => {
                let values = members.drain(..).map(|(_, value)| value).collect();
                *json = Json::Array(values);
                true
            }
            _ => false,
        };
    }
    *target -= 1;
    match json {
        Json::Array(items) => items
            .iter_mut()
            .any(|item| mutate(item, target, mutation, seed)),
        Json::Object(members) => members
            .iter_mut()
            .any(|(_, value)| mutate(value, target, mutation, seed)),
        _ => false,
    }
}

/// A request of a hot action, valid or mutated: the action, the body, the request path, and
/// whether any mutation applied.
fn request() -> impl Strategy<Value = (&'static str, Vec<u8>, &'static str, bool)> {
    (
        valid_request(),
        prop::collection::vec((any::<usize>(), any::<usize>(), mutation()), 0..3),
        (0usize..4, any::<bool>()),
        prop_oneof![1 => Just("/"), 3 => Just("/000000000000/jobs")],
    )
        .prop_map(
            |((action, mut json), mutations, (escape_every, spaced), path)| {
                let mut mutated = false;
                for (target, seed, mutation) in &mutations {
                    let mut target = target % size(&json);
                    mutated |= mutate(&mut json, &mut target, mutation, *seed);
                }
                let mut body = Vec::new();
                write(
                    &mut body,
                    &json,
                    Style {
                        escape_every,
                        spaced,
                    },
                );
                (action, body, path, mutated)
            },
        )
}

fn raw<'a>(target: &'a str, body: &'a [u8], path: &'a str) -> RawRequest<'a> {
    RawRequest {
        method: "POST",
        path,
        query: None,
        target: Some(target),
        content_type: Some("application/x-amz-json-1.0"),
        body,
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn fast_path_declines_or_agrees_with_the_reference_path(
        (action, body, path, mutated) in request()
    ) {
        let target = format!("AmazonSQS.{action}");
        let request = raw(&target, &body, path);
        let reference = decode_reference(&request);
        let fast = fast::decode(action, &body, path);
        if let Some((fast_action, fast_shape)) = &fast {
            let (protocol, action, shape) = reference.clone().expect("the reference accepts");
            prop_assert_eq!(protocol, Protocol::Json);
            prop_assert_eq!(fast_action, &action);
            prop_assert_eq!(fast_shape, &shape);
        }
        prop_assert_eq!(decode(&request), reference);
        // (A request the generator made valid may still lack its queue: no `QueueUrl` and the
        // path `/`.)
        if !mutated && decode(&request).is_ok() {
            prop_assert!(fast.is_some(), "a valid request declined: {}", String::from_utf8_lossy(&body));
        }
    }
}

/// What the fast path declines, by design, although the reference path accepts it: a member
/// the action does not read, a repeated key, an unknown member holding what the reference
/// path's parse refuses (then both refuse). Each still decodes through the reference path.
#[test]
fn declined_requests_decode_through_the_reference_path() {
    let cases: [(&str, &[u8]); 7] = [
        (
            "SendMessage",
            br#"{"QueueUrl":"/1/jobs","MessageBody":"x","Extra":1}"#,
        ),
        (
            "SendMessage",
            br#"{"QueueUrl":"/1/jobs","MessageBody":"x","MessageBody":"y"}"#,
        ),
        (
            "SendMessage",
            br#"{"QueueUrl":"/1/jobs","MessageBody":"x","MessageAttributes":{"a":{"DataType":"String","StringValue":"1"},"a":{"DataType":"String","StringValue":"2"}}}"#,
        ),
        ("DeleteMessage", br#"["/1/jobs","r"]"#),
        (
            "SendMessage",
            b"{\"QueueUrl\":\"/1/jobs\",\"MessageBody\":\"x\",\"Extra\":\"\xff\"}",
        ),
        (
            "SendMessage",
            br#"{"QueueUrl":"/1/jobs","MessageBody":"x","Extra":"\ud800"}"#,
        ),
        // Not UTF-8 in a member the fast path reads (it checks the whole body once).
        (
            "SendMessage",
            b"{\"QueueUrl\":\"/1/jobs\",\"MessageBody\":\"\xc3\"}",
        ),
    ];
    for (action, body) in cases {
        assert!(
            fast::decode(action, body, "/").is_none(),
            "{}",
            String::from_utf8_lossy(body)
        );
        let target = format!("AmazonSQS.{action}");
        let request = raw(&target, body, "/");
        assert_eq!(decode(&request), decode_reference(&request));
    }
    // The last three are malformed JSON to the reference path (serde's skipping of an unknown
    // member would have let the first two through).
    let target = "AmazonSQS.SendMessage";
    for (_, body) in &cases[4..] {
        let (_, error) = decode(&raw(target, body, "/")).unwrap_err();
        assert_eq!(error.code, ErrorCode::SerializationException);
    }
}

/// The shapes SDKs send take the fast path, escapes and binary attributes included.
#[test]
fn sdk_shaped_requests_take_the_fast_path() {
    let cases: [(&str, &[u8]); 5] = [
        (
            "SendMessage",
            br#"{"QueueUrl":"http://localhost:9324/000000000000/jobs","MessageBody":"caf\u00e9 \"x\"\n","DelaySeconds":5,"MessageAttributes":{"b":{"DataType":"Binary","BinaryValue":"AQID"},"n":{"DataType":"Number","StringValue":"7"}},"MessageSystemAttributes":{"AWSTraceHeader":{"DataType":"String","StringValue":"Root=1-5"}}}"#,
        ),
        (
            "SendMessageBatch",
            br#"{"QueueUrl":"/000000000000/jobs","Entries":[{"Id":"a","MessageBody":"x"},{"Id":"b","MessageBody":"y","MessageGroupId":"g","MessageDeduplicationId":"d"}]}"#,
        ),
        (
            "ReceiveMessage",
            br#"{"QueueUrl":"/000000000000/jobs","MaxNumberOfMessages":10,"WaitTimeSeconds":20,"AttributeNames":["All"],"MessageSystemAttributeNames":["All","SentTimestamp"],"MessageAttributeNames":["All"]}"#,
        ),
        (
            "DeleteMessageBatch",
            br#"{"QueueUrl":"/000000000000/jobs","Entries":[{"Id":"a","ReceiptHandle":"r1"}]}"#,
        ),
        (
            "ChangeMessageVisibilityBatch",
            br#"{"QueueUrl":"/000000000000/jobs","Entries":[{"Id":"a","ReceiptHandle":"r1","VisibilityTimeout":0}]}"#,
        ),
    ];
    for (action, body) in cases {
        let fast = fast::decode(action, body, "/")
            .unwrap_or_else(|| panic!("declined: {}", String::from_utf8_lossy(body)));
        let target = format!("AmazonSQS.{action}");
        let (_, reference, shape) = decode_reference(&raw(&target, body, "/")).unwrap();
        assert_eq!(fast, (reference, shape));
    }
}
