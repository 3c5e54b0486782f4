//! Requests: bytes and headers in, a validated [`Action`] out.
//!
//! The protocol is chosen per request: a request with `X-Amz-Target: AmazonSQS.<Action>` is AWS
//! JSON 1.0; any other is Query (`Action=<Action>&…`, form-encoded in a POST body or in the
//! query string). Every check that needs no queue state happens here, so a request the engine
//! sees is well formed; ranges that depend on the configured `Limits` are the engine's (the
//! decoder checks SQS's own, `Limits::SQS`). Beside the action comes its response's [`Shape`]:
//! what the request asked the response to show, which the backend has no use for.
//!
//! Each action is decoded once for both protocols, through one view of the request's
//! parameters (`input::Input`, over a `serde_json::Value` object or the Query form): this is the
//! reference path, and it produces every error a client reads. The JSON requests of the hot
//! actions (sending, receiving, deleting and changing visibility, one or a batch) first try a
//! fast path (`fast`), which reads the body straight into typed requests that borrow from it
//! (with a strict JSON reader of its own, `json`), without building the `Value` tree, and
//! builds the action with the reference path's own checks (the small functions below that both
//! call). It only accepts or declines: anything
//! unusual (a wrong type, a member the action does not read, a repeated key) or refused by a
//! check is declined and decoded again by the reference path, so errors stay byte for byte the
//! same, and what it accepts is exactly the reference path's action ([`decode_reference`] is that
//! path alone, which a property test and the fuzz target compare [`decode`] with).

mod fast;
mod input;
mod json;
mod moves;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use leaseq_core::{AttributeValue, Limits, MessageAttribute, ReceiveRequest, SendInput};
use serde_json::Value;

use crate::action::{Action, BatchEntry, Protocol, QueueRef, Shape};
use crate::attributes;
use crate::error::{ErrorCode, SqsError};
use input::{parse_form, Input, Params};
pub use moves::{LIST_MOVE_TASKS_MAX, PEEK_MESSAGES_MAX};

/// An HTTP request as the server received it.
#[derive(Clone, Copy, Debug)]
pub struct RawRequest<'a> {
    /// `GET`, `POST`, ….
    pub method: &'a str,
    /// The URL path (`/` or a queue's path such as `/000000000000/jobs`).
    pub path: &'a str,
    /// The URL query string, without `?`.
    pub query: Option<&'a str>,
    /// The `X-Amz-Target` header.
    pub target: Option<&'a str>,
    /// The `Content-Type` header.
    pub content_type: Option<&'a str>,
    /// The body.
    pub body: &'a [u8],
}

/// The bounds the decoder checks: SQS's own, which hold whatever limits the engine is
/// configured with (a relaxed engine still speaks SQS on the wire).
const SQS: Limits = Limits::SQS;

/// leaseq's extra action (not part of SQS): the visibility advisor's finding for a queue. Extra
/// actions carry the `Leaseq` prefix so they can never collide with a future SQS action.
pub const GET_VISIBILITY_ADVICE: &str = "LeaseqGetVisibilityAdvice";

/// Decodes a request. The error carries the protocol its response must use.
/// Beside the action comes the [`Shape`] its response takes, for `encode`.
pub fn decode(request: &RawRequest) -> Result<(Protocol, Action, Shape), (Protocol, SqsError)> {
    decode_with(request, true)
}

/// Decodes a request through the reference path alone, without the JSON fast path: what
/// [`decode`] must always answer, errors included. For tests and the decoder's fuzz target.
pub fn decode_reference(
    request: &RawRequest,
) -> Result<(Protocol, Action, Shape), (Protocol, SqsError)> {
    decode_with(request, false)
}

fn decode_with(
    request: &RawRequest,
    fast: bool,
) -> Result<(Protocol, Action, Shape), (Protocol, SqsError)> {
    match request.target {
        Some(target) => decode_json(target, request, fast)
            .map(|(action, shape)| (Protocol::Json, action, shape))
            .map_err(|error| (Protocol::Json, error)),
        None => decode_query(request)
            .map(|(action, shape)| (Protocol::Query, action, shape))
            .map_err(|error| (Protocol::Query, error)),
    }
}

fn decode_json(
    target: &str,
    request: &RawRequest,
    fast: bool,
) -> Result<(Action, Shape), SqsError> {
    let operation = target.strip_prefix("AmazonSQS.").ok_or_else(|| {
        SqsError::new(
            ErrorCode::InvalidAction,
            format!("The target {target} is not an operation of AmazonSQS."),
        )
    })?;
    if fast {
        if let Some(decoded) = fast::decode(operation, request.body, request.path) {
            return Ok(decoded);
        }
    }
    let body = if request.body.iter().all(u8::is_ascii_whitespace) {
        Value::Object(serde_json::Map::new())
    } else {
        serde_json::from_slice::<Value>(request.body).map_err(|error| {
            SqsError::new(
                ErrorCode::SerializationException,
                format!("The request body is not valid JSON: {error}."),
            )
        })?
    };
    let Value::Object(object) = body else {
        return Err(SqsError::new(
            ErrorCode::SerializationException,
            "The request body must be a JSON object.",
        ));
    };
    decode_action(operation, &Input::json(&object), request.path)
}

fn decode_query(request: &RawRequest) -> Result<(Action, Shape), SqsError> {
    let mut params = Params::new();
    if let Some(query) = request.query {
        parse_form(query.as_bytes(), &mut params)?;
    }
    if request.method.eq_ignore_ascii_case("POST") {
        parse_form(request.body, &mut params)?;
    }
    let action = match params.get("Action") {
        Some(action) => String::from_utf8_lossy(action).into_owned(),
        // A plain GET of a queue's URL (a browser's) is no request at all (`GET /` is the
        // dashboard, which the server answers before decoding).
        None if request.method.eq_ignore_ascii_case("GET")
            && params.is_empty()
            && !request.path.trim_matches('/').is_empty() =>
        {
            return Err(SqsError::new(
                ErrorCode::UnknownOperation,
                "The request names no operation.",
            ))
        }
        None => {
            return Err(SqsError::new(
                ErrorCode::MissingAction,
                "The request must contain the parameter Action.",
            ))
        }
    };
    // A queue's URL is the endpoint of that queue's actions only: the actions about the account's
    // queues are not valid there (AWS-validated in LocalStack's TestSqsQueryApi:
    // test_get_create_queue_fails, test_get_list_queues_fails; GetQueueUrl works,
    // test_get_queue_url_works_for_same_queue).
    if matches!(action.as_str(), "CreateQueue" | "ListQueues")
        && !request.path.trim_matches('/').is_empty()
    {
        return Err(SqsError::invalid_action(&action));
    }
    decode_action(&action, &Input::query(&params), request.path)
}

/// The action, and the shape of its response: the two actions whose requests select what the
/// response shows are decoded here, the others by [`decode_plain`].
fn decode_action(name: &str, input: &Input, path: &str) -> Result<(Action, Shape), SqsError> {
    match name {
        "GetQueueAttributes" => {
            let queue = queue_ref(input, path)?;
            let names = input.string_list("AttributeNames", "AttributeName")?;
            attributes::check_readable(&names)?;
            Ok((
                Action::GetQueueAttributes { queue },
                Shape::QueueAttributes { names },
            ))
        }
        "ReceiveMessage" => receive_message(queue_ref(input, path)?, input),
        _ => Ok((decode_plain(name, input, path)?, Shape::Whole)),
    }
}

/// An action whose response shows all of its outcome.
fn decode_plain(name: &str, input: &Input, path: &str) -> Result<Action, SqsError> {
    let queue = || queue_ref(input, path);
    Ok(match name {
        "CreateQueue" => create_queue(input)?,
        "GetQueueUrl" => Action::GetQueueUrl {
            name: input.required_string("QueueName", "QueueName")?,
            owner_account_id: input
                .string("QueueOwnerAWSAccountId", "QueueOwnerAWSAccountId")?
                .filter(|account| !account.is_empty()),
        },
        "ListQueues" => Action::ListQueues {
            prefix: input
                .string("QueueNamePrefix", "QueueNamePrefix")?
                .unwrap_or_default(),
            max_results: max_results(input)?,
            next_token: input.string("NextToken", "NextToken")?,
        },
        "DeleteQueue" => Action::DeleteQueue { queue: queue()? },
        "SetQueueAttributes" => {
            let queue = queue()?;
            if !input.has_any("Attributes", "Attribute") {
                return Err(SqsError::missing_parameter(
                    &input.display_name("Attributes", "Attribute.1.Name"),
                ));
            }
            let map = input.string_map("Attributes", "Attribute", "Name", "Value")?;
            Action::SetQueueAttributes {
                queue,
                attributes: attributes::parse_settings(&map)?,
            }
        }
        "PurgeQueue" => Action::PurgeQueue { queue: queue()? },
        "SendMessage" => Action::SendMessage {
            queue: queue()?,
            message: send_input(input, "SendMessage")?,
        },
        "SendMessageBatch" => send_message_batch(queue()?, input)?,
        "DeleteMessage" => Action::DeleteMessage {
            queue: queue()?,
            receipt: input.required_string("ReceiptHandle", "ReceiptHandle")?,
        },
        "DeleteMessageBatch" => Action::DeleteMessageBatch {
            queue: queue()?,
            entries: batch(input, "DeleteMessageBatchRequestEntry", |entry| {
                entry.required_string("ReceiptHandle", "ReceiptHandle")
            })?,
        },
        "ChangeMessageVisibility" => Action::ChangeMessageVisibility {
            queue: queue()?,
            receipt: input.required_string("ReceiptHandle", "ReceiptHandle")?,
            visibility_timeout_seconds: visibility_timeout(input)?,
        },
        "ChangeMessageVisibilityBatch" => Action::ChangeMessageVisibilityBatch {
            queue: queue()?,
            entries: batch(input, "ChangeMessageVisibilityBatchRequestEntry", |entry| {
                let receipt = entry.required_string("ReceiptHandle", "ReceiptHandle")?;
                Ok((receipt, visibility_timeout(entry)?))
            })?,
        },
        "TagQueue" => {
            let queue = queue()?;
            let tags = input.string_map("Tags", "Tag", "Key", "Value")?;
            if tags.is_empty() {
                return Err(SqsError::missing_parameter(
                    &input.display_name("Tags", "Tag.1.Key"),
                ));
            }
            Action::TagQueue { queue, tags }
        }
        "UntagQueue" => {
            let queue = queue()?;
            let keys = input.string_list("TagKeys", "TagKey")?;
            if keys.is_empty() {
                return Err(SqsError::missing_parameter(
                    &input.display_name("TagKeys", "TagKey.1"),
                ));
            }
            Action::UntagQueue { queue, keys }
        }
        "ListQueueTags" => Action::ListQueueTags { queue: queue()? },
        "ListDeadLetterSourceQueues" => Action::ListDeadLetterSourceQueues {
            queue: queue()?,
            max_results: max_results(input)?,
            next_token: input.string("NextToken", "NextToken")?,
        },
        "AddPermission" => add_permission(queue()?, input)?,
        "RemovePermission" => Action::RemovePermission {
            queue: queue()?,
            label: input.required_string("Label", "Label")?,
        },
        GET_VISIBILITY_ADVICE => Action::GetVisibilityAdvice { queue: queue()? },
        "StartMessageMoveTask" => moves::start(input)?,
        "ListMessageMoveTasks" => moves::list(input)?,
        "CancelMessageMoveTask" => Action::CancelMessageMoveTask {
            task: moves::task_handle(input)?,
        },
        "LeaseqPauseMessageMoveTask"
        | "LeaseqResumeMessageMoveTask"
        | "LeaseqUpdateMessageMoveTask" => moves::change(name, input)?,
        "LeaseqPeekMessages" => moves::peek(queue()?, input)?,
        "LeaseqGetMessageHistory" => {
            let text = input.required_string("MessageId", "MessageId")?;
            let message_id = text.parse().map_err(|_| {
                SqsError::invalid_parameter("MessageId", &text, "It is not a message id (a UUID).")
            })?;
            Action::LeaseqGetMessageHistory {
                queue: queue()?,
                message_id,
            }
        }
        "LeaseqFailMessage" => Action::LeaseqFailMessage {
            queue: queue()?,
            receipt: input.required_string("ReceiptHandle", "ReceiptHandle")?,
            reason: input.string("Reason", "Reason")?.unwrap_or_default(),
        },
        other => return Err(SqsError::invalid_action(other)),
    })
}

/// The queue a request names: its `QueueUrl`, or else the request path.
fn queue_ref(input: &Input, path: &str) -> Result<QueueRef, SqsError> {
    queue_of(input.string("QueueUrl", "QueueUrl")?.as_deref(), path)
}

/// The queue of a request's `QueueUrl` member, if it has one that is not blank, or else of the
/// request path.
fn queue_of(url: Option<&str>, path: &str) -> Result<QueueRef, SqsError> {
    match url {
        Some(url) if !url.trim().is_empty() => remembered_queue(url),
        _ if path.trim_matches('/').is_empty() => Err(SqsError::missing_parameter("QueueUrl")),
        _ => remembered_queue(path),
    }
}

/// [`queue_name_of_url`] of `url`, remembered for the last URL this thread read: a client
/// sends request after request to one queue, and comparing the URL with the last one costs
/// about 20 instructions where reading it cost about 400 and two allocations (callgrind). The
/// queue's name and account are shared text, so the answer is two counted references. A URL
/// that names no queue, or a long one, is not remembered.
fn remembered_queue(url: &str) -> Result<QueueRef, SqsError> {
    const REMEMBERED_MAX: usize = 512;
    thread_local! {
        static LAST: std::cell::RefCell<Option<(Box<str>, QueueRef)>> =
            const { std::cell::RefCell::new(None) };
    }
    LAST.with(|last| {
        if let Some((last_url, queue)) = &*last.borrow() {
            if **last_url == *url {
                return Ok(queue.clone());
            }
        }
        let queue = queue_name_of_url(url)?;
        if url.len() <= REMEMBERED_MAX {
            *last.borrow_mut() = Some((url.into(), queue.clone()));
        }
        Ok(queue)
    })
}

/// The queue name of a URL or path: `http(s)://host/ACCOUNT/name`, `/ACCOUNT/name`, the
/// legacy `/queue/name`, or the bare `name`.
///
/// One pass over the bytes, eight at a time ([`next_delimiter`]): this runs on every request that
/// names a queue, and the `str` searchers and the `split` iterator it was first written with
/// cost about 1,000 instructions for a 50-byte URL, a loop over each byte about 500, and
/// `memchr`, whose set-up outweighs the search in so short a text, about 600. Every byte it
/// stops at is ASCII, so every cut is at a character boundary. The tests compare it with the
/// `str`-based reference it replaced.
pub fn queue_name_of_url(url: &str) -> Result<QueueRef, SqsError> {
    let bytes = url.as_bytes();
    let has_scheme = |scheme: &[u8]| {
        bytes
            .get(..scheme.len())
            .is_some_and(|start| start.eq_ignore_ascii_case(scheme))
    };
    let scheme_length = if has_scheme(b"http://") {
        Some(7)
    } else if has_scheme(b"https://") {
        Some(8)
    } else {
        None
    };
    // The path starts at the first `/` after the host (none: the path is empty).
    let path_start = match scheme_length {
        Some(length) => next_delimiter(bytes, length, false),
        None => 0,
    };
    // The non-empty segments between slashes up to a query or a fragment, by their ranges in
    // `url` (the first two, and how many there are).
    let mut segments = [(0, 0); 2];
    let mut count = 0usize;
    let mut slash = false;
    let mut segment_start = path_start;
    let mut at = path_start;
    loop {
        at = next_delimiter(bytes, at, true);
        if at > segment_start {
            if let Some(segment) = segments.get_mut(count) {
                *segment = (segment_start, at);
            }
            count += 1;
        }
        if bytes.get(at) != Some(&b'/') {
            break;
        }
        slash = true;
        at += 1;
        segment_start = at;
    }
    let path_end = at;
    // A bare queue name (no scheme, no slash) is a QueueUrl too, as SQS answers it.
    if scheme_length.is_none() && path_end > 0 && !slash {
        return Ok(QueueRef::new(&url[..path_end]));
    }
    if count != 2 {
        return Err(SqsError::new(
            ErrorCode::InvalidAddress,
            format!("The address {url} is not valid for this endpoint."),
        ));
    }
    let account_or_queue = &url[segments[0].0..segments[0].1];
    Ok(QueueRef {
        name: url[segments[1].0..segments[1].1].into(),
        // An account id is 12 digits; the legacy `/queue/NAME` names none.
        owner_account_id: crate::namespace::is_account_id(account_or_queue)
            .then(|| account_or_queue.into()),
    })
}

/// The position of the first `/` in `bytes` from `from` on (with `in_path`, also of the first
/// `?` or `#`, which end a path), or `bytes.len()`.
///
/// Eight bytes at a time: in `w ^ (byte · ONES)` the bytes equal to `byte` are zero, and
/// `(x - ONES) & !x & HIGH` sets the high bit of a zero byte of `x`, exactly for the lowest one
/// (a borrow can only mark bytes above a zero byte), so the lowest bit set in the three words'
/// union is the first delimiter's.
fn next_delimiter(bytes: &[u8], from: usize, in_path: bool) -> usize {
    const ONES: u64 = u64::from_le_bytes([1; 8]);
    const HIGH: u64 = ONES << 7;
    let zero_bytes = |x: u64| x.wrapping_sub(ONES) & !x & HIGH;
    let mut at = from;
    while let Some(chunk) = bytes.get(at..at + 8) {
        let word = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        let mut found = zero_bytes(word ^ (ONES * u64::from(b'/')));
        if in_path {
            found |= zero_bytes(word ^ (ONES * u64::from(b'?')))
                | zero_bytes(word ^ (ONES * u64::from(b'#')));
        }
        if found != 0 {
            return at + (found.trailing_zeros() / 8) as usize;
        }
        at += 8;
    }
    let is_delimiter = |byte: u8| byte == b'/' || in_path && (byte == b'?' || byte == b'#');
    bytes
        .get(at..)
        .and_then(|rest| rest.iter().position(|&byte| is_delimiter(byte)))
        .map_or(bytes.len(), |offset| at + offset)
}

fn max_results(input: &Input) -> Result<Option<usize>, SqsError> {
    match input.integer("MaxResults", "MaxResults")? {
        None => Ok(None),
        Some(n) if (1..=SQS.list_results_max as i64).contains(&n) => Ok(Some(n as usize)),
        Some(n) => Err(SqsError::invalid_parameter(
            "MaxResults",
            n,
            &format!(
                "MaxResults must be an integer between 1 and {}.",
                SQS.list_results_max
            ),
        )),
    }
}

/// `value` as a `u32`, or `InvalidParameterValue` with the reason `reason` words (built only on
/// failure: this runs on every receive).
fn non_negative(name: &str, value: i64, reason: impl FnOnce() -> String) -> Result<u32, SqsError> {
    u32::try_from(value).map_err(|_| SqsError::invalid_parameter(name, value, &reason()))
}

fn visibility_timeout(input: &Input) -> Result<u32, SqsError> {
    let value = input
        .integer("VisibilityTimeout", "VisibilityTimeout")?
        .ok_or_else(|| {
            SqsError::missing_parameter(
                &input.display_name("VisibilityTimeout", "VisibilityTimeout"),
            )
        })?;
    visibility_timeout_of(value)
}

/// A `ChangeMessageVisibility` request's (or entry's) `VisibilityTimeout`, checked.
fn visibility_timeout_of(value: i64) -> Result<u32, SqsError> {
    non_negative("VisibilityTimeout", value, || {
        format!(
            "VisibilityTimeout must be an integer between 0 and {}.",
            SQS.visibility_timeout_max_seconds
        )
    })
}

fn create_queue(input: &Input) -> Result<Action, SqsError> {
    let name = input.required_string("QueueName", "QueueName")?;
    let map = input.string_map("Attributes", "Attribute", "Name", "Value")?;
    let tags = input.string_map("tags", "Tag", "Key", "Value")?;
    Ok(Action::CreateQueue {
        name,
        attributes: attributes::parse_settings(&map)?,
        tags,
    })
}

fn add_permission(queue: QueueRef, input: &Input) -> Result<Action, SqsError> {
    let label = input.required_string("Label", "Label")?;
    let account_ids = input.string_list("AWSAccountIds", "AWSAccountId")?;
    if account_ids.is_empty() {
        return Err(SqsError::missing_parameter(
            &input.display_name("AWSAccountIds", "AWSAccountId.1"),
        ));
    }
    let actions = input.string_list("Actions", "ActionName")?;
    if actions.is_empty() {
        return Err(SqsError::missing_parameter(
            &input.display_name("Actions", "ActionName.1"),
        ));
    }
    Ok(Action::AddPermission {
        queue,
        label,
        account_ids,
        actions,
    })
}

// ----- messages -----------------------------------------------------------------------------

/// One message attribute value (`DataType`, `StringValue`, `BinaryValue`) of a request of
/// `operation` (`SendMessage` or `SendMessageBatch`, which SQS names when it refuses list
/// values). The engine checks the data type and that the value fits it; a value of the wrong
/// kind reads as empty so that the engine reports the entry (per entry, in a batch).
fn attribute_value(
    view: &Input,
    member: &str,
    operation: &str,
) -> Result<MessageAttribute, SqsError> {
    let value = view
        .child(member, member)?
        .ok_or_else(|| SqsError::missing_parameter(&view.display_name(member, member)))?;
    let data_type = value.string("DataType", "DataType")?.unwrap_or_default();
    if value.has_any("StringListValues", "StringListValue")
        || value.has_any("BinaryListValues", "BinaryListValue")
    {
        return Err(SqsError::list_values_unsupported(operation));
    }
    message_attribute(
        data_type,
        || value.string("StringValue", "StringValue"),
        || value.blob("BinaryValue", "BinaryValue"),
    )
}

/// A message attribute of type `data_type`: its value is the `BinaryValue` member, read by
/// `binary`, if the type is `Binary` or `Binary.*`, and otherwise the `StringValue` member, read
/// by `text`; the other member is not read at all. An absent value reads as empty. Both decoders
/// build attributes here (the fast path with its own error type, which only declines).
fn message_attribute<E>(
    data_type: String,
    text: impl FnOnce() -> Result<Option<String>, E>,
    binary: impl FnOnce() -> Result<Option<Vec<u8>>, E>,
) -> Result<MessageAttribute, E> {
    let is_binary = data_type == "Binary" || data_type.starts_with("Binary.");
    let value = if is_binary {
        AttributeValue::Binary(binary()?.unwrap_or_default())
    } else {
        AttributeValue::Text(text()?.unwrap_or_default())
    };
    Ok(MessageAttribute { data_type, value })
}

/// `AWSTraceHeader`, the one system attribute a producer may send.
fn trace_header(input: &Input, operation: &str) -> Result<Option<String>, SqsError> {
    let system = input.map(
        "MessageSystemAttributes",
        "MessageSystemAttribute",
        "Name",
        "Value",
        |view, member| attribute_value(view, member, operation),
    )?;
    trace_header_of(system)
}

/// The `AWSTraceHeader` of a message's system attributes, which may hold nothing else.
fn trace_header_of(system: BTreeMap<String, MessageAttribute>) -> Result<Option<String>, SqsError> {
    let mut header = None;
    for (name, attribute) in system {
        if name != "AWSTraceHeader" {
            return Err(SqsError::invalid_parameter_value(format!(
                "Message system attribute name '{name}' is invalid."
            )));
        }
        match attribute {
            MessageAttribute {
                data_type,
                value: AttributeValue::Text(text),
            } if data_type == "String" && !text.is_empty() => header = Some(text),
            _ => {
                return Err(SqsError::invalid_parameter_value(
                    "The message system attribute 'AWSTraceHeader' must be of type String with a non-empty value.",
                ))
            }
        }
    }
    Ok(header)
}

fn send_input(input: &Input, operation: &str) -> Result<SendInput, SqsError> {
    let body = input.required_string("MessageBody", "MessageBody")?;
    let delay_seconds = delay_seconds(input.integer("DelaySeconds", "DelaySeconds")?)?;
    // Whether these are required or allowed depends on the queue's kind, which only the engine
    // knows: a FIFO queue requires a group id, a standard queue refuses a deduplication id.
    let group_id = input.string("MessageGroupId", "MessageGroupId")?;
    let deduplication_id = input.string("MessageDeduplicationId", "MessageDeduplicationId")?;
    let attributes = input.map(
        "MessageAttributes",
        "MessageAttribute",
        "Name",
        "Value",
        |view, member| attribute_value(view, member, operation),
    )?;
    Ok(SendInput {
        body,
        attributes,
        trace_header: trace_header(input, operation)?,
        delay_seconds,
        sender_id: "".into(),
        group_id,
        deduplication_id,
    })
}

/// A message's `DelaySeconds`, checked.
fn delay_seconds(value: Option<i64>) -> Result<Option<u32>, SqsError> {
    value
        .map(|delay| {
            non_negative("DelaySeconds", delay, || {
                format!(
                    "DelaySeconds must be >= 0 and <= {}.",
                    SQS.delay_max_seconds
                )
            })
        })
        .transpose()
}

/// What SQS counts toward a batch's size: bodies plus attribute names, types and values.
fn message_size_bytes(message: &SendInput) -> usize {
    message.body.len()
        + message
            .attributes
            .iter()
            .map(|(name, attribute)| {
                name.len()
                    + attribute.data_type.len()
                    + match &attribute.value {
                        AttributeValue::Text(text) => text.len(),
                        AttributeValue::Binary(bytes) => bytes.len(),
                    }
            })
            .sum::<usize>()
}

fn send_message_batch(queue: QueueRef, input: &Input) -> Result<Action, SqsError> {
    let entries = batch(input, "SendMessageBatchRequestEntry", |entry| {
        send_input(entry, "SendMessageBatch")
    })?;
    check_batch_size(&entries)?;
    Ok(Action::SendMessageBatch { queue, entries })
}

/// SQS's bound on the total size of a `SendMessageBatch`'s messages.
fn check_batch_size(entries: &[BatchEntry<SendInput>]) -> Result<(), SqsError> {
    let total: usize = entries
        .iter()
        .map(|entry| message_size_bytes(&entry.value))
        .sum();
    if total > SQS.batch_size_max_bytes {
        return Err(SqsError::new(
            ErrorCode::BatchRequestTooLong,
            format!(
                "Batch requests cannot be longer than {} bytes. You have sent {total} bytes.",
                SQS.batch_size_max_bytes
            ),
        ));
    }
    Ok(())
}

fn valid_batch_entry_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= 80
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// The entries of a batch request (JSON `Entries`, Query `{entry_name}.N.…`), with SQS's batch
/// rules checked in SQS's order: count, then ids.
fn batch<T>(
    input: &Input,
    entry_name: &str,
    read: impl Fn(&Input) -> Result<T, SqsError>,
) -> Result<Vec<BatchEntry<T>>, SqsError> {
    let entries = input.entries("Entries", entry_name)?;
    check_batch_count(entries.len(), entry_name)?;
    let mut decoded: Vec<(String, &Input)> = Vec::with_capacity(entries.len());
    for entry in &entries {
        let id = entry.required_string("Id", "Id")?;
        check_batch_id(&id, decoded.iter().map(|(earlier, _)| earlier.as_str()))?;
        decoded.push((id, entry));
    }
    decoded
        .into_iter()
        .map(|(id, entry)| {
            Ok(BatchEntry {
                id,
                value: read(entry)?,
            })
        })
        .collect()
}

/// SQS's bounds on the number of a batch's entries (`entry_name`s, as SQS names them).
fn check_batch_count(count: usize, entry_name: &str) -> Result<(), SqsError> {
    if count == 0 {
        return Err(SqsError::new(
            ErrorCode::EmptyBatchRequest,
            format!("There should be at least one {entry_name} in the request."),
        ));
    }
    if count > SQS.batch_size_max {
        return Err(SqsError::new(
            ErrorCode::TooManyEntriesInBatchRequest,
            format!(
                "Maximum number of entries per request are {}. You have sent {count}.",
                SQS.batch_size_max,
            ),
        ));
    }
    Ok(())
}

/// SQS's rules for a batch entry's id: valid, and distinct from the `earlier` entries' ids.
fn check_batch_id<'e>(
    id: &str,
    mut earlier: impl Iterator<Item = &'e str>,
) -> Result<(), SqsError> {
    if !valid_batch_entry_id(id) {
        return Err(SqsError::new(
            ErrorCode::InvalidBatchEntryId,
            "A batch entry id can only contain alphanumeric characters, hyphens and underscores. It can be at most 80 letters long.",
        ));
    }
    // At most `batch_size_max` ids: a scan of the earlier ones is cheaper than a set.
    if earlier.any(|earlier| earlier == id) {
        return Err(SqsError::new(
            ErrorCode::BatchEntryIdsNotDistinct,
            format!("Id {id} repeated."),
        ));
    }
    Ok(())
}

fn receive_message(queue: QueueRef, input: &Input) -> Result<(Action, Shape), SqsError> {
    // Read in the order they always were, so the first bad parameter reported stays the same.
    let max_messages =
        max_number_of_messages(input.integer("MaxNumberOfMessages", "MaxNumberOfMessages")?)?;
    let visibility_timeout_seconds =
        receive_visibility_timeout(input.integer("VisibilityTimeout", "VisibilityTimeout")?)?;
    let wait_time_seconds =
        wait_time_seconds(input.integer("WaitTimeSeconds", "WaitTimeSeconds")?)?;
    let attribute_names = received_attribute_names(
        input.string_list("AttributeNames", "AttributeName")?,
        input.string_list("MessageSystemAttributeNames", "MessageSystemAttributeName")?,
    );
    let shape = Shape::Received {
        attribute_names,
        message_attribute_names: input
            .string_list("MessageAttributeNames", "MessageAttributeName")?,
    };
    let action = Action::ReceiveMessage {
        queue,
        request: ReceiveRequest {
            max_messages,
            visibility_timeout_seconds,
            client: None,
        },
        wait_time_seconds,
        receive_request_attempt_id: input
            .string("ReceiveRequestAttemptId", "ReceiveRequestAttemptId")?,
    };
    Ok((action, shape))
}

/// A receive's `MaxNumberOfMessages`, checked (1 when absent).
fn max_number_of_messages(value: Option<i64>) -> Result<usize, SqsError> {
    match value {
        None => Ok(1),
        Some(n) if (1..=SQS.batch_size_max as i64).contains(&n) => Ok(n as usize),
        Some(n) => Err(SqsError::invalid_parameter(
            "MaxNumberOfMessages",
            n,
            &format!("Must be between 1 and {}, if provided.", SQS.batch_size_max),
        )),
    }
}

/// A receive's `VisibilityTimeout`, checked.
fn receive_visibility_timeout(value: Option<i64>) -> Result<Option<u32>, SqsError> {
    value
        .map(|v| {
            non_negative("VisibilityTimeout", v, || {
                format!(
                    "Must be >= 0 and <= {}, if provided.",
                    SQS.visibility_timeout_max_seconds
                )
            })
        })
        .transpose()
}

/// A receive's `WaitTimeSeconds`, checked.
fn wait_time_seconds(value: Option<i64>) -> Result<Option<u32>, SqsError> {
    match value {
        None => Ok(None),
        Some(n) if (0..=i64::from(SQS.wait_time_max_seconds)).contains(&n) => Ok(Some(n as u32)),
        Some(n) => Err(SqsError::invalid_parameter(
            "WaitTimeSeconds",
            n,
            &format!(
                "Must be >= 0 and <= {}, if provided.",
                SQS.wait_time_max_seconds
            ),
        )),
    }
}

/// The system attributes a receive asks for: its `AttributeNames`, then those of its
/// `MessageSystemAttributeNames` not already named.
fn received_attribute_names(mut names: Vec<String>, system_names: Vec<String>) -> Vec<String> {
    for name in system_names {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

impl Action {
    /// The SQS action name (`SendMessage`).
    pub fn name(&self) -> &'static str {
        match self {
            Action::CreateQueue { .. } => "CreateQueue",
            Action::GetQueueUrl { .. } => "GetQueueUrl",
            Action::ListQueues { .. } => "ListQueues",
            Action::DeleteQueue { .. } => "DeleteQueue",
            Action::GetQueueAttributes { .. } => "GetQueueAttributes",
            Action::SetQueueAttributes { .. } => "SetQueueAttributes",
            Action::PurgeQueue { .. } => "PurgeQueue",
            Action::SendMessage { .. } => "SendMessage",
            Action::SendMessageBatch { .. } => "SendMessageBatch",
            Action::ReceiveMessage { .. } => "ReceiveMessage",
            Action::DeleteMessage { .. } => "DeleteMessage",
            Action::DeleteMessageBatch { .. } => "DeleteMessageBatch",
            Action::ChangeMessageVisibility { .. } => "ChangeMessageVisibility",
            Action::ChangeMessageVisibilityBatch { .. } => "ChangeMessageVisibilityBatch",
            Action::TagQueue { .. } => "TagQueue",
            Action::UntagQueue { .. } => "UntagQueue",
            Action::ListQueueTags { .. } => "ListQueueTags",
            Action::ListDeadLetterSourceQueues { .. } => "ListDeadLetterSourceQueues",
            Action::AddPermission { .. } => "AddPermission",
            Action::RemovePermission { .. } => "RemovePermission",
            Action::GetVisibilityAdvice { .. } => GET_VISIBILITY_ADVICE,
            Action::StartMessageMoveTask { .. } => "StartMessageMoveTask",
            Action::ListMessageMoveTasks { .. } => "ListMessageMoveTasks",
            Action::CancelMessageMoveTask { .. } => "CancelMessageMoveTask",
            Action::LeaseqChangeMessageMoveTask { action, .. } => action,
            Action::LeaseqPeekMessages { .. } => "LeaseqPeekMessages",
            Action::LeaseqGetMessageHistory { .. } => "LeaseqGetMessageHistory",
            Action::LeaseqFailMessage { .. } => "LeaseqFailMessage",
        }
    }
}
