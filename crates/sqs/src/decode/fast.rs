//! The JSON fast path of the hot actions: `SendMessage`, `SendMessageBatch`, `ReceiveMessage`,
//! `DeleteMessage`, `DeleteMessageBatch`, `ChangeMessageVisibility` and
//! `ChangeMessageVisibilityBatch`, read straight from the body into typed requests that borrow
//! from it (`super::json`), without the `serde_json::Value` tree the reference path reads.
//!
//! The fast path only ever *accepts or declines*: it produces no error of its own. It declines
//! anything but the plain shape SDKs send — a member of a wrong type, a member the action does
//! not read, a key repeated after a value other than `null` (a `null` reads as an absent
//! member), a list value of a message attribute — and any request that one of the reference
//! path's checks (which it calls, from `super`) refuses. A declined request is decoded again by
//! the reference path, which produces every error response, so those stay byte for byte what
//! they were. What it accepts, it decodes to exactly the `Action` and `Shape`
//! of the reference path (checked by a property test and the decoder's fuzz target against
//! [`super::decode_reference`]).
//!
//! Why declining an unknown member, which the reference path ignores: the reader would have to
//! skip its value, and a skipped value must be validated exactly as the reference path's parse
//! into a `Value` does (an invalid UTF-8 byte or a lone surrogate escape in a skipped string
//! makes the body malformed). Every value the fast path accepts is read into a typed field, which
//! validates it exactly as the reference path's parse does.

use std::borrow::Cow;
use std::collections::BTreeMap;

use leaseq_core::{MessageAttribute, ReceiveRequest, SendInput};

use super::input::decode_blob;
use super::json::Json;
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
        "SendMessage" => send_message(Json::whole(body, Send::read)?, path)?,
        "SendMessageBatch" => send_message_batch(Json::whole(body, Batch::read)?, path)?,
        "ReceiveMessage" => return receive_message(Json::whole(body, Receive::read)?, path),
        "DeleteMessage" => delete_message(Json::whole(body, Receipt::read)?, path)?,
        "DeleteMessageBatch" => delete_message_batch(Json::whole(body, Batch::read)?, path)?,
        "ChangeMessageVisibility" => {
            change_message_visibility(Json::whole(body, Receipt::read)?, path)?
        }
        "ChangeMessageVisibilityBatch" => {
            change_message_visibility_batch(Json::whole(body, Batch::read)?, path)?
        }
        _ => return None,
    };
    Some((action, Shape::Whole))
}

// ----- the requests ---------------------------------------------------------------------------

/// `SendMessage`, or an entry of `SendMessageBatch`: the request has a `QueueUrl` and no `Id`,
/// an entry an `Id` and no `QueueUrl` (the other is declined).
#[derive(Default)]
struct Send<'a> {
    queue_url: Option<Cow<'a, str>>,
    id: Option<String>,
    message_body: Option<String>,
    delay_seconds: Option<i64>,
    message_attributes: Option<BTreeMap<String, Attribute<'a>>>,
    message_system_attributes: Option<BTreeMap<String, Attribute<'a>>>,
    message_group_id: Option<String>,
    message_deduplication_id: Option<String>,
}

impl<'a> Send<'a> {
    fn read(json: &mut Json<'a>) -> Option<Self> {
        let mut send = Send::default();
        json.object(|json, key| match key {
            "QueueUrl" => set(&mut send.queue_url, json, Json::text),
            "Id" => set(&mut send.id, json, Json::string),
            "MessageBody" => set(&mut send.message_body, json, Json::string),
            "DelaySeconds" => set(&mut send.delay_seconds, json, Json::integer),
            "MessageAttributes" => set(&mut send.message_attributes, json, attributes),
            "MessageSystemAttributes" => set(&mut send.message_system_attributes, json, attributes),
            "MessageGroupId" => set(&mut send.message_group_id, json, Json::string),
            "MessageDeduplicationId" => set(&mut send.message_deduplication_id, json, Json::string),
            _ => None,
        })?;
        Some(send)
    }
}

/// A `MessageAttributeValue`. List values, which SQS does not support (the reference path
/// refuses them with its error), are declined unless empty.
#[derive(Default)]
struct Attribute<'a> {
    data_type: Option<String>,
    string_value: Option<String>,
    binary_value: Option<Cow<'a, str>>,
    string_list_values: Option<()>,
    binary_list_values: Option<()>,
}

impl<'a> Attribute<'a> {
    fn read(json: &mut Json<'a>) -> Option<Self> {
        let mut attribute = Attribute::default();
        json.object(|json, key| match key {
            "DataType" => set(&mut attribute.data_type, json, Json::string),
            "StringValue" => set(&mut attribute.string_value, json, Json::string),
            "BinaryValue" => set(&mut attribute.binary_value, json, Json::text),
            "StringListValues" => set(&mut attribute.string_list_values, json, empty_list),
            "BinaryListValues" => set(&mut attribute.binary_list_values, json, empty_list),
            _ => None,
        })?;
        Some(attribute)
    }
}

/// A batch request: its queue and its entries.
struct Batch<'a, T> {
    queue_url: Option<Cow<'a, str>>,
    entries: Option<Vec<T>>,
}

impl<'a, T: Entry<'a>> Batch<'a, T> {
    fn read(json: &mut Json<'a>) -> Option<Self> {
        let mut batch = Batch {
            queue_url: None,
            entries: None,
        };
        json.object(|json, key| match key {
            "QueueUrl" => set(&mut batch.queue_url, json, Json::text),
            "Entries" => set(&mut batch.entries, json, |json| {
                // Room for a full batch from the start; more entries than a batch may have are
                // read too, and declined by the batch's checks.
                let mut entries = Vec::with_capacity(super::SQS.batch_size_max);
                json.array(|json| T::read(json).map(|entry| entries.push(entry)))?;
                Some(entries)
            }),
            _ => None,
        })?;
        Some(batch)
    }
}

/// What a batch's entries are.
trait Entry<'a>: Sized {
    fn read(json: &mut Json<'a>) -> Option<Self>;
}

impl<'a> Entry<'a> for Send<'a> {
    fn read(json: &mut Json<'a>) -> Option<Self> {
        Send::read(json)
    }
}

impl<'a> Entry<'a> for Receipt<'a> {
    fn read(json: &mut Json<'a>) -> Option<Self> {
        Receipt::read(json)
    }
}

/// `ReceiveMessage`.
#[derive(Default)]
struct Receive<'a> {
    queue_url: Option<Cow<'a, str>>,
    max_number_of_messages: Option<i64>,
    visibility_timeout: Option<i64>,
    wait_time_seconds: Option<i64>,
    attribute_names: Option<Vec<String>>,
    message_system_attribute_names: Option<Vec<String>>,
    message_attribute_names: Option<Vec<String>>,
    receive_request_attempt_id: Option<String>,
}

impl<'a> Receive<'a> {
    fn read(json: &mut Json<'a>) -> Option<Self> {
        let mut receive = Receive::default();
        json.object(|json, key| match key {
            "QueueUrl" => set(&mut receive.queue_url, json, Json::text),
            "MaxNumberOfMessages" => set(&mut receive.max_number_of_messages, json, Json::integer),
            "VisibilityTimeout" => set(&mut receive.visibility_timeout, json, Json::integer),
            "WaitTimeSeconds" => set(&mut receive.wait_time_seconds, json, Json::integer),
            "AttributeNames" => set(&mut receive.attribute_names, json, strings),
            "MessageSystemAttributeNames" => {
                set(&mut receive.message_system_attribute_names, json, strings)
            }
            "MessageAttributeNames" => set(&mut receive.message_attribute_names, json, strings),
            "ReceiveRequestAttemptId" => {
                set(&mut receive.receive_request_attempt_id, json, Json::string)
            }
            _ => None,
        })?;
        Some(receive)
    }
}

/// `DeleteMessage`, `ChangeMessageVisibility`, or an entry of their batches. Each reads some of
/// these members; one it does not read is declined.
#[derive(Default)]
struct Receipt<'a> {
    queue_url: Option<Cow<'a, str>>,
    id: Option<String>,
    receipt_handle: Option<String>,
    visibility_timeout: Option<i64>,
}

impl<'a> Receipt<'a> {
    fn read(json: &mut Json<'a>) -> Option<Self> {
        let mut receipt = Receipt::default();
        json.object(|json, key| match key {
            "QueueUrl" => set(&mut receipt.queue_url, json, Json::text),
            "Id" => set(&mut receipt.id, json, Json::string),
            "ReceiptHandle" => set(&mut receipt.receipt_handle, json, Json::string),
            "VisibilityTimeout" => set(&mut receipt.visibility_timeout, json, Json::integer),
            _ => None,
        })?;
        Some(receipt)
    }
}

/// Fills an empty `slot` with the value `read` reads, or declines: a member read twice (a
/// repeated key, whose last value the reference path keeps) or a value not read. A `null` value
/// leaves the slot empty, as the reference path reads it: the member is absent.
fn set<'a, T>(
    slot: &mut Option<T>,
    json: &mut Json<'a>,
    read: impl FnOnce(&mut Json<'a>) -> Option<T>,
) -> Option<()> {
    if slot.is_some() {
        return None;
    }
    if !json.null() {
        *slot = Some(read(json)?);
    }
    Some(())
}

/// A JSON list of strings.
fn strings(json: &mut Json) -> Option<Vec<String>> {
    let mut strings = Vec::new();
    json.array(|json| json.string().map(|string| strings.push(string)))?;
    Some(strings)
}

/// Message attributes (or message system attributes) by name; a repeated name is declined.
fn attributes<'a>(json: &mut Json<'a>) -> Option<BTreeMap<String, Attribute<'a>>> {
    let mut attributes = BTreeMap::new();
    json.object(|json, name| {
        let attribute = Attribute::read(json)?;
        attributes
            .insert(name.to_owned(), attribute)
            .is_none()
            .then_some(())
    })?;
    Some(attributes)
}

/// A JSON list that must be empty (a message attribute's list values, which SQS does not
/// support: a non-empty one is declined, and the reference path refuses it).
fn empty_list(json: &mut Json) -> Option<()> {
    json.array(|_| None)
}

// ----- the actions ----------------------------------------------------------------------------

fn send_message(request: Send, path: &str) -> Option<Action> {
    if request.id.is_some() {
        return None;
    }
    let queue = queue_of(request.queue_url.as_deref(), path).ok()?;
    Some(Action::SendMessage {
        queue,
        message: message(request)?,
    })
}

fn send_message_batch(request: Batch<Send>, path: &str) -> Option<Action> {
    let queue = queue_of(request.queue_url.as_deref(), path).ok()?;
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
    members: Option<BTreeMap<String, Attribute>>,
) -> Option<BTreeMap<String, MessageAttribute>> {
    let Some(members) = members else {
        return Some(BTreeMap::new());
    };
    members
        .into_iter()
        .map(|(name, attribute)| {
            let binary_value = attribute.binary_value;
            let string_value = attribute.string_value;
            let attribute = message_attribute(
                attribute.data_type.unwrap_or_default(),
                || Ok(string_value),
                || match binary_value {
                    None => Ok(None),
                    Some(text) => decode_blob(&text).map(Some).ok_or(()),
                },
            )
            .ok()?;
            Some((name, attribute))
        })
        .collect()
}

fn receive_message(request: Receive, path: &str) -> Option<(Action, Shape)> {
    let queue = queue_of(request.queue_url.as_deref(), path).ok()?;
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
        queue: queue_of(request.queue_url.as_deref(), path).ok()?,
        receipt: request.receipt_handle?,
    })
}

fn delete_message_batch(request: Batch<Receipt>, path: &str) -> Option<Action> {
    let queue = queue_of(request.queue_url.as_deref(), path).ok()?;
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
        queue: queue_of(request.queue_url.as_deref(), path).ok()?,
        receipt: request.receipt_handle?,
        visibility_timeout_seconds: visibility_timeout_of(request.visibility_timeout?).ok()?,
    })
}

fn change_message_visibility_batch(request: Batch<Receipt>, path: &str) -> Option<Action> {
    let queue = queue_of(request.queue_url.as_deref(), path).ok()?;
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
    entries: Option<Vec<T>>,
    entry_name: &str,
    read: impl Fn(T) -> Option<(String, V)>,
) -> Option<Vec<BatchEntry<V>>> {
    let entries = entries.unwrap_or_default();
    check_batch_count(entries.len(), entry_name).ok()?;
    let mut decoded: Vec<BatchEntry<V>> = Vec::with_capacity(entries.len());
    for entry in entries {
        let (id, value) = read(entry)?;
        check_batch_id(&id, decoded.iter().map(|earlier| earlier.id.as_str())).ok()?;
        decoded.push(BatchEntry { id, value });
    }
    Some(decoded)
}
