//! The JSON fast path of the hot actions: `SendMessage`, `SendMessageBatch`, `ReceiveMessage`,
//! `DeleteMessage`, `DeleteMessageBatch`, `ChangeMessageVisibility` and
//! `ChangeMessageVisibilityBatch`, deserialized straight from the body into typed requests that
//! borrow from it (serde derive), without the `serde_json::Value` tree the reference path reads.
//!
//! The fast path only ever *accepts or declines*: it produces no error of its own. It declines
//! anything but the plain shape SDKs send — a member of a wrong type, a member the action does
//! not read, a repeated key, a structure written as an array, a list value of a message attribute
//! — and any request that one of the reference path's checks (which it calls, from `super`)
//! refuses. A declined request is decoded again by the reference path, which produces every error
//! response, so those stay byte for byte what they were. What it accepts, it decodes to exactly
//! the `Action` and `Shape` of the reference path (checked by a property test and the decoder's
//! fuzz target against [`super::decode_reference`]).
//!
//! Why declining an unknown member, which the reference path ignores: serde's way of skipping a
//! value (`IgnoredAny`) does not validate it as strictly as parsing it into a `Value` does (an
//! invalid UTF-8 byte or a lone surrogate escape in a skipped string passes), so a body the
//! reference path refuses as malformed JSON could be accepted. Every value the fast path accepts
//! is read into a typed field, which validates it exactly as the reference path's parse does.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;

use leaseq_core::{MessageAttribute, ReceiveRequest, SendInput};
use serde::de::{self, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use super::input::decode_blob;
use super::{
    check_batch_count, check_batch_id, check_batch_size, delay_seconds, max_number_of_messages,
    message_attribute, queue_of, receive_visibility_timeout, received_attribute_names,
    trace_header_of, visibility_timeout_of, wait_time_seconds,
};
use crate::action::{Action, BatchEntry, Shape};

/// The action and shape of a JSON request of `operation` (the name after `AmazonSQS.`), or
/// `None` when the fast path declines it and the reference path must decode it.
pub(super) fn decode(operation: &str, body: &[u8], path: &str) -> Option<(Action, Shape)> {
    let action = match operation {
        "SendMessage" => send_message(parse(body)?, path)?,
        "SendMessageBatch" => send_message_batch(parse(body)?, path)?,
        "ReceiveMessage" => return receive_message(parse(body)?, path),
        "DeleteMessage" => delete_message(parse(body)?, path)?,
        "DeleteMessageBatch" => delete_message_batch(parse(body)?, path)?,
        "ChangeMessageVisibility" => change_message_visibility(parse(body)?, path)?,
        "ChangeMessageVisibilityBatch" => change_message_visibility_batch(parse(body)?, path)?,
        _ => return None,
    };
    Some((action, Shape::Whole))
}

/// The body as a request structure `T` (a JSON object and nothing after it), if it is one.
///
/// The body is checked to be UTF-8 once, whole, and then parsed as text: parsed from bytes,
/// serde_json checks every key and string value on its own, a call each. One check saved
/// (callgrind) about 350 instructions of a durable SendMessage and 450 per message consumed
/// (a receive of 10 and a delete batch). A body that is not UTF-8 is declined, as one with a
/// string that is not would have been.
fn parse<'a, T: Deserialize<'a>>(body: &'a [u8]) -> Option<T> {
    let text = std::str::from_utf8(body).ok()?;
    serde_json::from_str::<Structure<T>>(text)
        .ok()
        .map(|structure| structure.0)
}

// ----- the requests ---------------------------------------------------------------------------

/// `SendMessage`, or an entry of `SendMessageBatch`: the request has a `QueueUrl` and no `Id`,
/// an entry an `Id` and no `QueueUrl` (the other is declined).
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "PascalCase")]
struct Send<'a> {
    #[serde(borrow)]
    queue_url: Option<Text<'a>>,
    id: Option<String>,
    message_body: Option<String>,
    delay_seconds: Option<i64>,
    #[serde(borrow)]
    message_attributes: Option<Members<Structure<Attribute<'a>>>>,
    #[serde(borrow)]
    message_system_attributes: Option<Members<Structure<Attribute<'a>>>>,
    message_group_id: Option<String>,
    message_deduplication_id: Option<String>,
}

/// A `MessageAttributeValue`. List values, which SQS does not support (the reference path
/// refuses them with its error), are declined unless empty.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "PascalCase")]
struct Attribute<'a> {
    data_type: Option<String>,
    string_value: Option<String>,
    #[serde(borrow)]
    binary_value: Option<Text<'a>>,
    // Present only to be checked empty.
    #[serde(rename = "StringListValues")]
    _string_list_values: Option<EmptyList>,
    #[serde(rename = "BinaryListValues")]
    _binary_list_values: Option<EmptyList>,
}

/// A batch request: its queue and its entries.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "PascalCase")]
struct Batch<'a, T> {
    #[serde(borrow)]
    queue_url: Option<Text<'a>>,
    entries: Option<Entries<T>>,
}

/// `ReceiveMessage`.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "PascalCase")]
struct Receive<'a> {
    #[serde(borrow)]
    queue_url: Option<Text<'a>>,
    max_number_of_messages: Option<i64>,
    visibility_timeout: Option<i64>,
    wait_time_seconds: Option<i64>,
    attribute_names: Option<Vec<String>>,
    message_system_attribute_names: Option<Vec<String>>,
    message_attribute_names: Option<Vec<String>>,
    receive_request_attempt_id: Option<String>,
}

/// `DeleteMessage`, `ChangeMessageVisibility`, or an entry of their batches. Each reads some of
/// these members; one it does not read is declined.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "PascalCase")]
struct Receipt<'a> {
    #[serde(borrow)]
    queue_url: Option<Text<'a>>,
    id: Option<String>,
    receipt_handle: Option<String>,
    visibility_timeout: Option<i64>,
}

// ----- the actions ----------------------------------------------------------------------------

fn send_message(request: Send, path: &str) -> Option<Action> {
    if request.id.is_some() {
        return None;
    }
    let queue = queue_of(request.queue_url.as_ref().map(Text::as_str), path).ok()?;
    Some(Action::SendMessage {
        queue,
        message: message(request)?,
    })
}

fn send_message_batch(request: Batch<Send>, path: &str) -> Option<Action> {
    let queue = queue_of(request.queue_url.as_ref().map(Text::as_str), path).ok()?;
    let entries = entries(
        request.entries,
        "SendMessageBatchRequestEntry",
        |mut entry| {
            if entry.queue_url.is_some() {
                return None;
            }
            let id = entry.id.take()?;
            Some((id, message(entry)?))
        },
    )?;
    check_batch_size(&entries).ok()?;
    Some(Action::SendMessageBatch { queue, entries })
}

/// The message of a `SendMessage` or of an entry of `SendMessageBatch`.
fn message(request: Send) -> Option<SendInput> {
    let attributes = message_attributes(request.message_attributes)?;
    let system = message_attributes(request.message_system_attributes)?;
    Some(SendInput {
        body: request.message_body?,
        attributes,
        trace_header: trace_header_of(system).ok()?,
        delay_seconds: delay_seconds(request.delay_seconds).ok()?,
        sender_id: "".into(),
        group_id: request.message_group_id,
        deduplication_id: request.message_deduplication_id,
    })
}

/// Message attributes (or message system attributes) by name.
fn message_attributes(
    members: Option<Members<Structure<Attribute>>>,
) -> Option<BTreeMap<String, MessageAttribute>> {
    let Some(Members(members)) = members else {
        return Some(BTreeMap::new());
    };
    members
        .into_iter()
        .map(|(name, Structure(attribute))| {
            let binary_value = attribute.binary_value;
            let string_value = attribute.string_value;
            let attribute = message_attribute(
                attribute.data_type.unwrap_or_default(),
                || Ok(string_value),
                || match binary_value {
                    None => Ok(None),
                    Some(text) => decode_blob(text.as_str()).map(Some).ok_or(()),
                },
            )
            .ok()?;
            Some((name, attribute))
        })
        .collect()
}

fn receive_message(request: Receive, path: &str) -> Option<(Action, Shape)> {
    let queue = queue_of(request.queue_url.as_ref().map(Text::as_str), path).ok()?;
    let shape = Shape::Received {
        attribute_names: received_attribute_names(
            request.attribute_names.unwrap_or_default(),
            request.message_system_attribute_names.unwrap_or_default(),
        ),
        message_attribute_names: request.message_attribute_names.unwrap_or_default(),
    };
    let action = Action::ReceiveMessage {
        queue,
        request: ReceiveRequest {
            max_messages: max_number_of_messages(request.max_number_of_messages).ok()?,
            visibility_timeout_seconds: receive_visibility_timeout(request.visibility_timeout)
                .ok()?,
            client: None,
        },
        wait_time_seconds: wait_time_seconds(request.wait_time_seconds).ok()?,
        receive_request_attempt_id: request.receive_request_attempt_id,
    };
    Some((action, shape))
}

fn delete_message(request: Receipt, path: &str) -> Option<Action> {
    if request.id.is_some() || request.visibility_timeout.is_some() {
        return None;
    }
    Some(Action::DeleteMessage {
        queue: queue_of(request.queue_url.as_ref().map(Text::as_str), path).ok()?,
        receipt: request.receipt_handle?,
    })
}

fn delete_message_batch(request: Batch<Receipt>, path: &str) -> Option<Action> {
    let queue = queue_of(request.queue_url.as_ref().map(Text::as_str), path).ok()?;
    let entries = entries(request.entries, "DeleteMessageBatchRequestEntry", |entry| {
        if entry.queue_url.is_some() || entry.visibility_timeout.is_some() {
            return None;
        }
        Some((entry.id?, entry.receipt_handle?))
    })?;
    Some(Action::DeleteMessageBatch { queue, entries })
}

fn change_message_visibility(request: Receipt, path: &str) -> Option<Action> {
    if request.id.is_some() {
        return None;
    }
    Some(Action::ChangeMessageVisibility {
        queue: queue_of(request.queue_url.as_ref().map(Text::as_str), path).ok()?,
        receipt: request.receipt_handle?,
        visibility_timeout_seconds: visibility_timeout_of(request.visibility_timeout?).ok()?,
    })
}

fn change_message_visibility_batch(request: Batch<Receipt>, path: &str) -> Option<Action> {
    let queue = queue_of(request.queue_url.as_ref().map(Text::as_str), path).ok()?;
    let entries = entries(
        request.entries,
        "ChangeMessageVisibilityBatchRequestEntry",
        |entry| {
            if entry.queue_url.is_some() {
                return None;
            }
            let timeout = visibility_timeout_of(entry.visibility_timeout?).ok()?;
            Some((entry.id?, (entry.receipt_handle?, timeout)))
        },
    )?;
    Some(Action::ChangeMessageVisibilityBatch { queue, entries })
}

/// A batch's entries, each read by `read` into its id and value, with SQS's batch rules checked
/// by the reference path's own checks.
fn entries<T, V>(
    entries: Option<Entries<T>>,
    entry_name: &str,
    read: impl Fn(T) -> Option<(String, V)>,
) -> Option<Vec<BatchEntry<V>>> {
    let entries = entries.map(|Entries(entries)| entries).unwrap_or_default();
    check_batch_count(entries.len(), entry_name).ok()?;
    let mut decoded: Vec<BatchEntry<V>> = Vec::with_capacity(entries.len());
    for Structure(entry) in entries {
        let (id, value) = read(entry)?;
        check_batch_id(&id, decoded.iter().map(|earlier| earlier.id.as_str())).ok()?;
        decoded.push(BatchEntry { id, value });
    }
    Some(decoded)
}

// ----- JSON building blocks -------------------------------------------------------------------

/// A JSON string, borrowed from the body unless it holds escapes.
struct Text<'a>(Cow<'a, str>);

impl Text<'_> {
    fn as_str(&self) -> &str {
        &self.0
    }
}

impl<'de: 'a, 'a> Deserialize<'de> for Text<'a> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct TextVisitor;
        impl<'de> Visitor<'de> for TextVisitor {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a string")
            }
            fn visit_borrowed_str<E: de::Error>(self, text: &'de str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Borrowed(text)))
            }
            fn visit_str<E: de::Error>(self, text: &str) -> Result<Text<'de>, E> {
                Ok(Text(Cow::Owned(text.to_owned())))
            }
        }
        deserializer.deserialize_str(TextVisitor)
    }
}

/// A JSON structure: an object, never an array. (serde's derived structures also take an array
/// of their members in order, which the reference path refuses.)
struct Structure<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Structure<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        T::deserialize(ObjectOnly(deserializer)).map(Structure)
    }
}

/// A deserializer that reads a derived structure from a JSON object only: it hands the
/// structure's visitor to `deserialize_map`, which takes nothing else.
struct ObjectOnly<D>(D);

impl<'de, D: Deserializer<'de>> Deserializer<'de> for ObjectOnly<D> {
    type Error = D::Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, D::Error> {
        self.0.deserialize_any(visitor)
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_map(visitor)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        option unit unit_struct newtype_struct seq tuple tuple_struct map enum identifier
        ignored_any
    }
}

/// A batch's entries: a JSON list of structures, read into a vector with room for a full batch
/// from the start (serde's own list grows 1, 2, 4, 8, 16 for ten entries, moving every entry
/// read so far each time). More entries than a batch may have are read too, and declined by the
/// batch's checks.
struct Entries<T>(Vec<Structure<T>>);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Entries<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EntriesVisitor<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for EntriesVisitor<T> {
            type Value = Entries<T>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a list")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Entries<T>, A::Error> {
                let mut entries = Vec::with_capacity(super::SQS.batch_size_max);
                while let Some(entry) = seq.next_element()? {
                    entries.push(entry);
                }
                Ok(Entries(entries))
            }
        }
        deserializer.deserialize_seq(EntriesVisitor(PhantomData))
    }
}

/// A JSON map (an object) by key. A repeated key is declined: the reference path keeps the last
/// value, and the fast path does not have to reason about which.
struct Members<V>(BTreeMap<String, V>);

impl<'de, V: Deserialize<'de>> Deserialize<'de> for Members<V> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct MembersVisitor<V>(PhantomData<V>);
        impl<'de, V: Deserialize<'de>> Visitor<'de> for MembersVisitor<V> {
            type Value = Members<V>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("a map")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members<V>, A::Error> {
                let mut members = BTreeMap::new();
                while let Some((key, value)) = map.next_entry::<String, V>()? {
                    if members.insert(key, value).is_some() {
                        return Err(de::Error::custom("a repeated key"));
                    }
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(MembersVisitor(PhantomData))
    }
}

/// A JSON list that must be empty (a message attribute's list values, which SQS does not
/// support: a non-empty one is declined, and the reference path refuses it).
struct EmptyList;

impl<'de> Deserialize<'de> for EmptyList {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct EmptyListVisitor;
        impl<'de> Visitor<'de> for EmptyListVisitor {
            type Value = EmptyList;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an empty list")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<EmptyList, A::Error> {
                match seq.next_element::<IgnoredAny>()? {
                    None => Ok(EmptyList),
                    Some(_) => Err(de::Error::custom("a list value")),
                }
            }
        }
        deserializer.deserialize_seq(EmptyListVisitor)
    }
}
