//! The direct JSON writer against the `serde_json::Value` path it replaced: the same bytes for
//! representative outcomes and for arbitrary trees, including strings that need escapes
//! (quotes, backslashes, control characters) and ones that do not (non-ASCII, U+007F, U+2028).

use std::borrow::Cow;

use proptest::prelude::*;
use serde_json::{Map, Value};

use super::*;

/// The tree as a `serde_json::Value`, as the encoder built it before it wrote JSON itself.
fn value_of(node: &Node) -> Value {
    match node {
        Node::Text(text) => Value::String(text.to_string()),
        Node::Bool(value) => Value::Bool(*value),
        Node::Number(value) => Value::from(*value),
        Node::Struct(members) => Value::Object(
            members
                .iter()
                .map(|(name, node)| (name.to_string(), value_of(node)))
                .collect(),
        ),
        Node::List { items, .. } => Value::Array(items.iter().map(value_of).collect()),
        Node::Map { entries, .. } => Value::Object(
            entries
                .iter()
                .map(|(key, node)| (key.to_string(), value_of(node)))
                .collect::<Map<String, Value>>(),
        ),
    }
}

/// What `Value::to_string` printed for `node`.
fn printed_by_serde_json(node: &Node) -> String {
    value_of(node).to_string()
}

fn written(node: Node) -> String {
    String::from_utf8(json_document(node)).expect("the writer writes UTF-8")
}

/// Strings with every kind of character the escaper treats differently.
const AWKWARD_STRINGS: &[&str] = &[
    "",
    "plain",
    "\"quoted\"",
    "back\\slash\\",
    "\u{0}\u{1}\u{7}\u{8}\t\n\u{b}\u{c}\r\u{e}\u{1b}\u{1f} ",
    "\u{7f} ü 😀 \u{2028}\u{2029} \u{fffd} \u{10ffff}",
    "</script> & <b> 'single'",
    "/ solidus",
    AWKWARD_BODY,
];

#[test]
fn strings_are_escaped_as_serde_json_escapes_them() {
    for text in AWKWARD_STRINGS {
        let mut out = Vec::new();
        json_string(text, &mut out);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            Value::String(text.to_string()).to_string(),
            "{text:?}"
        );
    }
}

#[test]
fn members_are_sorted_by_name_and_the_last_of_equal_names_wins() {
    let node = Node::Struct(vec![
        ("b", text("1")),
        ("a", text("2")),
        ("B", Node::Number(3)),
        ("_", Node::Bool(false)),
        ("a", text("4")),
    ]);
    assert_eq!(written(node.clone()), printed_by_serde_json(&node));
    assert_eq!(written(node), r#"{"B":3,"_":false,"a":"4","b":"1"}"#);
    let map = string_map(
        "Tag",
        "Key",
        [("z", "1"), ("é", "2"), ("Z", "3"), ("z", "4")].into_iter(),
    );
    assert_eq!(written(map.clone()), printed_by_serde_json(&map));
    assert_eq!(written(map), r#"{"Z":"3","z":"4","é":"2"}"#);
}

/// `encode` of `outcome` in JSON against the old path over the same tree.
fn assert_json_as_before(action: &'static str, outcome: &impl Shaped) {
    let ctx = ctx();
    let response = encode(Protocol::Json, action, outcome, &ctx);
    let (shape, outcome) = (outcome.shape(), outcome.outcome());
    let tree = Node::Struct(result(action, outcome, shape, &ctx).unwrap_or_default());
    assert_eq!(
        String::from_utf8(response.body).unwrap(),
        printed_by_serde_json(&tree),
        "{action}"
    );
}

#[test]
fn outcomes_encode_as_before() {
    let sent = Sent {
        message_id: MessageId([1; 16]),
        seq: 1,
        payload: payload(AWKWARD_BODY),
        sequence_number: Some("18000000000000000001".into()),
        duplicate: false,
    };
    assert_json_as_before("SendMessage", &Outcome::Sent(sent.clone()));
    let failure = SqsError::invalid_parameter_value("bad \"entry\" <\u{1}>");
    let batch = Outcome::SentBatch(vec![
        ("a".into(), Ok(sent)),
        ("b".into(), Err(failure.clone())),
    ]);
    assert_json_as_before("SendMessageBatch", &batch);
    let deletes = Outcome::Batch(vec![("x".into(), Ok(())), ("y".into(), Err(failure))]);
    assert_json_as_before("DeleteMessageBatch", &deletes);
    assert_json_as_before(
        "ReceiveMessage",
        &received(AWKWARD_BODY, &["All"], &["All"]),
    );
    assert_json_as_before(
        "ReceiveMessage",
        &received("x", &["SentTimestamp"], &["foo.*"]),
    );
    assert_json_as_before("ReceiveMessage", &received("x", &[], &[]));
    assert_json_as_before(
        "GetQueueAttributes",
        &(
            Outcome::QueueAttributes {
                info: Box::new(info()),
            },
            Shape::QueueAttributes {
                names: vec!["All".into()],
            },
        ),
    );
    assert_json_as_before(
        "ListQueueTags",
        &Outcome::QueueTags(BTreeMap::from([
            ("team".into(), "a&b".into()),
            ("quote".into(), "\"".into()),
        ])),
    );
    assert_json_as_before(
        "ListQueues",
        &Outcome::QueueUrls {
            names: vec![Arc::from("a"), Arc::from("b")],
            next_token: Some("tok".into()),
        },
    );
    assert_json_as_before("PurgeQueue", &Outcome::Empty);
}

#[test]
fn errors_encode_as_before() {
    let error = SqsError::invalid_parameter_value("a \"quoted\" \\ value\n");
    let response = encode_error(Protocol::Json, &error, &ctx());
    let before = serde_json::json!({
        "__type": error.code.json_type(),
        "message": error.message,
    });
    assert_eq!(
        String::from_utf8(response.body).unwrap(),
        before.to_string()
    );
}

/// Strings drawn mostly from the characters the escaper treats differently.
fn awkward_string() -> impl Strategy<Value = String> {
    let chars = prop::sample::select(vec![
        'a', 'Z', ' ', '"', '\\', '/', '\u{0}', '\u{8}', '\t', '\n', '\u{c}', '\r', '\u{1f}',
        '\u{7f}', 'ü', '\u{2028}', '\u{2029}', '😀',
    ]);
    prop_oneof![
        any::<String>(),
        prop::collection::vec(chars, 0..12).prop_map(|chars| chars.into_iter().collect()),
    ]
}

/// Trees of every node kind, with repeated member names and map keys.
fn tree() -> impl Strategy<Value = Node<'static>> {
    let leaf = prop_oneof![
        awkward_string().prop_map(|text| Node::Text(Cow::Owned(text))),
        any::<bool>().prop_map(Node::Bool),
        any::<u64>().prop_map(Node::Number),
    ];
    let name = prop::sample::select(vec!["a", "b", "B", "_x", "ab", "MD5OfBody", "MessageId"]);
    let key = prop_oneof![
        awkward_string(),
        prop::sample::select(vec!["k".to_string(), "K".to_string()]),
    ];
    leaf.prop_recursive(4, 64, 6, move |inner| {
        prop_oneof![
            prop::collection::vec((name.clone(), inner.clone()), 0..6).prop_map(Node::Struct),
            prop::collection::vec(inner.clone(), 0..4).prop_map(|items| Node::List {
                member: "member",
                items,
            }),
            prop::collection::vec((key.clone(), inner), 0..4).prop_map(|entries| Node::Map {
                entry: "entry",
                key: "Key",
                value: "Value",
                entries: entries
                    .into_iter()
                    .map(|(key, node)| (Cow::Owned(key), node))
                    .collect(),
            }),
        ]
    })
}

proptest! {
    #[test]
    fn arbitrary_trees_write_as_serde_json_printed_them(node in tree()) {
        prop_assert_eq!(written(node.clone()), printed_by_serde_json(&node));
    }
}
