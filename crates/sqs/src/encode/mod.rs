//! Responses: an [`Outcome`] or an [`SqsError`] out, as JSON 1.0 or Query XML.
//!
//! Each outcome is first built as a [`Node`] tree that mirrors the Smithy output shape; one
//! walker writes it as JSON, another as XML. The XML walker applies the Query protocol's rules:
//! lists and maps are flattened (`<Message>` repeated, `<Attribute><Name/><Value/></Attribute>`)
//! under their member names, and the result sits in `<ActionResult>` inside `<ActionResponse>`.
//! Text in the tree borrows from the outcome where it can (bodies, receipts, ids), so a message
//! body is copied once, into the response. The commonest JSON results skip the tree: a
//! `SendMessage`'s, a `SendMessageBatch`'s, a `ReceiveMessage`'s and a delete or visibility batch's
//! are written straight into their buffers (`write_sent_json`, `write_sent_batch_json`,
//! `write_received_json`, `write_batch_json`, each held to the tree's bytes by a test).

use std::borrow::Cow;
use std::sync::Arc;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use leaseq_core::{AttributeValue, Delivery, MessageAttribute, MoveStatus, Sent};

use crate::action::Shape;
use crate::error::SqsError;
use crate::md5::{md5_of_message_attributes, md5_of_payload_body, md5_of_system_attributes};
use crate::outcome::{Context, Outcome, VisibilityAdvice};
use crate::push_all;

/// The namespace of SQS's Query responses.
pub const XML_NAMESPACE: &str = "http://queue.amazonaws.com/doc/2012-11-05/";
/// The content type of every JSON response.
pub const JSON_CONTENT_TYPE: &str = "application/x-amz-json-1.0";
/// The content type of every XML response.
pub const XML_CONTENT_TYPE: &str = "text/xml";

/// An HTTP response, ready to send. Every response has the same headers (see
/// [`Response::headers`]), so they are fields rather than a list: building one allocates nothing
/// but its body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Response {
    /// HTTP status.
    pub status: u16,
    /// `content-type`: [`JSON_CONTENT_TYPE`] or [`XML_CONTENT_TYPE`].
    pub content_type: &'static str,
    /// `x-amzn-requestid`: the request's id ([`Context::request_id`]).
    pub request_id: Arc<str>,
    /// `x-amzn-query-error` (`Code;Sender` or `Code;Receiver`), on a JSON error: the Query
    /// protocol's error code, which the SDKs of the AWS Query compatibility read.
    pub query_error: Option<String>,
    /// A header of the server's own, by name and value (a cluster node's refusal of a request
    /// forwarded to it), after the others.
    pub server_header: Option<(&'static str, &'static str)>,
    /// Body.
    pub body: Vec<u8>,
}

impl Response {
    /// The headers, by name: lowercase (HTTP/2-safe, and what `http::HeaderName::from_static`
    /// accepts), the content type first.
    pub fn headers(&self) -> impl Iterator<Item = (&'static str, &str)> {
        [
            ("content-type", self.content_type),
            ("x-amzn-requestid", &*self.request_id),
        ]
        .into_iter()
        .chain(
            self.query_error
                .as_deref()
                .map(|query_error| ("x-amzn-query-error", query_error)),
        )
        .chain(self.server_header)
    }
}

/// A value of an output shape.
#[derive(Clone, Debug)]
enum Node<'a> {
    Text(Cow<'a, str>),
    Bool(bool),
    /// A number (a JSON number; text in XML).
    Number(u64),
    /// Members in order.
    Struct(Vec<(&'static str, Node<'a>)>),
    /// A flattened list; in XML each item is a `<member>` element.
    List {
        member: &'static str,
        items: Vec<Node<'a>>,
    },
    /// A flattened map; in XML each entry is `<entry><key/><value/></entry>`.
    Map {
        entry: &'static str,
        key: &'static str,
        value: &'static str,
        entries: Vec<(Cow<'a, str>, Node<'a>)>,
    },
}

fn text<'a>(value: impl Into<Cow<'a, str>>) -> Node<'a> {
    Node::Text(value.into())
}

// ----- outcome to node ----------------------------------------------------------------------

/// The members of the action's result, or `None` for actions whose result is empty.
fn result<'a>(
    action: &'static str,
    outcome: &'a Outcome,
    shape: &Shape,
    ctx: &Context,
) -> Option<Vec<(&'static str, Node<'a>)>> {
    let url_list = |names: &[std::sync::Arc<str>]| Node::List {
        member: "QueueUrl",
        items: names
            .iter()
            .map(|name| text(crate::queue_url(ctx, name)))
            .collect(),
    };
    let mut members = Vec::new();
    match outcome {
        Outcome::Empty => return None,
        Outcome::QueueUrl(name) => members.push(("QueueUrl", text(crate::queue_url(ctx, name)))),
        Outcome::QueueUrls { names, next_token } => {
            if !names.is_empty() {
                members.push(("QueueUrls", url_list(names)));
            }
            if let Some(token) = next_token {
                members.push(("NextToken", text(token)));
            }
        }
        Outcome::DeadLetterSourceQueues { names, next_token } => {
            // `queueUrls` (lowercase) is required in this output, so it is present even when empty.
            members.push(("queueUrls", url_list(names)));
            if let Some(token) = next_token {
                members.push(("NextToken", text(token)));
            }
        }
        Outcome::QueueAttributes { info } => {
            let attributes = crate::attributes::render(info, shape.queue_attribute_names(), ctx);
            if !attributes.is_empty() {
                members.push((
                    "Attributes",
                    string_map("Attribute", "Name", attributes.into_iter()),
                ));
            }
        }
        Outcome::QueueTags(tags) => {
            if !tags.is_empty() {
                members.push(("Tags", string_map("Tag", "Key", tags.iter())));
            }
        }
        Outcome::Sent(sent) => members.extend(sent_members(sent)),
        Outcome::MoveTaskStarted { task_id, source } => members.push((
            "TaskHandle",
            text(crate::moves::encode_task_handle(ctx, *task_id, source)),
        )),
        Outcome::MoveTasks(tasks) => members.push((
            "Results",
            Node::List {
                member: "ListMessageMoveTasksResultEntry",
                items: tasks.iter().map(|info| move_task(info, ctx)).collect(),
            },
        )),
        Outcome::MoveTaskCancelled { moved } => {
            members.push(("ApproximateNumberOfMessagesMoved", Node::Number(*moved)))
        }
        Outcome::MoveTask(info) => {
            if let Node::Struct(task) = move_task(info, ctx) {
                members.extend(task);
            }
        }
        Outcome::MessageHistory(history) => members.extend(message_history(history, ctx)),
        Outcome::Peeked {
            messages,
            next_token,
        } => {
            members.push((
                "Messages",
                Node::List {
                    member: "Message",
                    items: messages.iter().map(|entry| peeked(entry, ctx)).collect(),
                },
            ));
            if let Some(token) = next_token {
                members.push(("NextToken", text(token)));
            }
        }
        Outcome::SentBatch(entries) => {
            let successful = entries.iter().filter_map(|(id, result)| {
                let sent = result.as_ref().ok()?;
                let mut entry = vec![("Id", text(id))];
                entry.extend(sent_members(sent));
                Some(Node::Struct(entry))
            });
            members.extend(batch_members(
                "SendMessageBatchResultEntry",
                successful.collect(),
                entries,
            ));
        }
        Outcome::Batch(entries) => {
            let entry_name = if action == "DeleteMessageBatch" {
                "DeleteMessageBatchResultEntry"
            } else {
                "ChangeMessageVisibilityBatchResultEntry"
            };
            let successful = entries
                .iter()
                .filter(|(_, result)| result.is_ok())
                .map(|(id, _)| Node::Struct(vec![("Id", text(id))]));
            members.extend(batch_members(entry_name, successful.collect(), entries));
        }
        Outcome::Received {
            deliveries,
            queue_name: _,
        } => {
            if !deliveries.is_empty() {
                let (attribute_names, message_attribute_names) = shape.message_attribute_names();
                let items = deliveries
                    .iter()
                    .map(|delivery| {
                        message(delivery, attribute_names, message_attribute_names, ctx)
                    })
                    .collect();
                members.push((
                    "Messages",
                    Node::List {
                        member: "Message",
                        items,
                    },
                ));
            }
        }
        Outcome::VisibilityAdvice(advice) => members.extend(advice_members(advice, ctx)),
    }
    Some(members)
}

/// `LeaseqGetVisibilityAdvice`'s result. Numbers are strings, as in SQS's attribute maps.
fn advice_members<'a>(
    advice: &'a VisibilityAdvice,
    ctx: &Context,
) -> Vec<(&'static str, Node<'a>)> {
    let number = |value: u64| text(value.to_string());
    let mut members = vec![
        ("QueueUrl", text(crate::queue_url(ctx, &advice.queue_name))),
        (
            "VisibilityTimeout",
            number(advice.visibility_timeout_seconds.into()),
        ),
        (
            "RecommendedVisibilityTimeout",
            number(advice.recommended_visibility_timeout_seconds.into()),
        ),
        ("Verdict", text(advice.verdict)),
        ("Reason", text(advice.reason.as_str())),
        ("Deliveries", number(advice.deliveries)),
        ("LeasesExpired", number(advice.leases_expired)),
        ("DeletedLate", number(advice.deleted_late)),
        ("LeasesExtended", number(advice.leases_extended)),
    ];
    if let Some(p) = advice.processing_ms {
        members.push((
            "ProcessingTimeMs",
            Node::Struct(vec![
                ("P50", number(p.p50)),
                ("P95", number(p.p95)),
                ("P99", number(p.p99)),
                ("Max", number(p.max)),
            ]),
        ));
    }
    members
}

/// A `ListMessageMoveTasksResultEntry` (plus `LeaseqMessageLimit` when the task has one).
fn move_task<'a>(info: &'a leaseq_core::engine::MoveTaskInfo, ctx: &Context) -> Node<'a> {
    let task = &info.task;
    let source = info.source.as_deref().unwrap_or("(deleted)");
    // Only an active task has a handle in the list ("only populated for tasks that are in
    // RUNNING status", `ListMessageMoveTasksResultEntry.TaskHandle` in the API reference;
    // leaseq's PAUSED is active too); a finished one cannot be cancelled.
    let mut members = Vec::new();
    if matches!(task.status, MoveStatus::Running | MoveStatus::Paused) {
        members.push((
            "TaskHandle",
            text(crate::moves::encode_task_handle(ctx, task.task_id, source)),
        ));
    }
    members.push(("Status", text(crate::moves::status_name(task.status))));
    members.push(("SourceArn", text(crate::queue_arn(ctx, source))));
    if task.has_destination() {
        // A task whose destination was deleted still names it, as SQS lists it (LocalStack's
        // test_move_task_delete_destination_queue_while_running, recorded from AWS).
        let destination = info
            .destination
            .as_deref()
            .or_else(|| {
                task.failure_reason
                    .as_deref()
                    .and_then(leaseq_core::engine::deleted_destination)
            })
            .unwrap_or("(deleted)");
        members.push(("DestinationArn", text(crate::queue_arn(ctx, destination))));
    }
    if let Some(rate) = task.rate_per_second {
        members.push(("MaxNumberOfMessagesPerSecond", Node::Number(rate.into())));
    }
    members.push(("ApproximateNumberOfMessagesMoved", Node::Number(task.moved)));
    members.push((
        "ApproximateNumberOfMessagesToMove",
        Node::Number(task.to_move),
    ));
    if let Some(reason) = &task.failure_reason {
        // A deleted destination fails the task with the error code AWS's move hit (recorded
        // from AWS: LocalStack's test_move_task_delete_destination_queue_while_running).
        let reason = if leaseq_core::engine::deleted_destination(reason).is_some() {
            crate::ErrorCode::QueueDoesNotExist.query_code()
        } else {
            reason
        };
        members.push(("FailureReason", text(reason)));
    }
    members.push(("StartedTimestamp", Node::Number(task.started_at_ms)));
    if let Some(limit) = task.limit {
        members.push(("LeaseqMessageLimit", Node::Number(limit)));
    }
    if task.held_back > 0 {
        members.push(("LeaseqMessagesHeldBack", Node::Number(task.held_back)));
    }
    Node::Struct(members)
}

/// `LeaseqGetMessageHistory`: the message, then its attempts, oldest first. Times are
/// milliseconds since the Unix epoch, as SQS's timestamp attributes are.
fn message_history<'a>(
    history: &'a leaseq_core::engine::MessageHistory,
    ctx: &Context,
) -> Vec<(&'static str, Node<'a>)> {
    let state = match history.state {
        Some(state) => state_name(state),
        None => "DELETED",
    };
    let mut members = vec![
        ("MessageId", text(history.message_id.to_string())),
        ("State", text(state)),
        ("SentTimestamp", Node::Number(history.sent_at_ms)),
        (
            "ApproximateReceiveCount",
            Node::Number(history.receive_count.into()),
        ),
    ];
    let optional = [
        (
            "ApproximateFirstReceiveTimestamp",
            history.first_received_at_ms,
        ),
        ("DeadLetteredTimestamp", history.dead_lettered_at_ms),
        ("DeletedTimestamp", history.deleted_at_ms),
        ("VisibleTimestamp", history.visible_at_ms),
    ];
    for (name, value) in optional {
        if let Some(value) = value {
            members.push((name, Node::Number(value)));
        }
    }
    if let Some(source) = &history.dead_letter_source {
        members.push((
            "DeadLetterQueueSourceArn",
            text(crate::queue_arn(ctx, source)),
        ));
    }
    if let Some(reason) = &history.failure_reason {
        members.push(("FailureReason", text(reason.to_string())));
    }
    let attempts = history.attempts.iter().map(|(number, attempt)| {
        let mut entry = vec![
            ("Attempt", Node::Number((*number).into())),
            ("ReceivedTimestamp", Node::Number(attempt.received_at_ms)),
            (
                "FirstLeaseDeadline",
                Node::Number(attempt.first_deadline_ms),
            ),
            ("LeaseDeadline", Node::Number(attempt.deadline_ms)),
            ("Extensions", Node::Number(attempt.extensions.into())),
            ("Outcome", text(attempt.outcome.as_str())),
        ];
        if attempt.ended_at_ms > 0 {
            entry.push(("EndedTimestamp", Node::Number(attempt.ended_at_ms)));
        }
        if let Some(client) = &attempt.client {
            entry.push(("ClientAddress", text(&client.address)));
            entry.push(("UserAgent", text(&client.user_agent)));
        }
        Node::Struct(entry)
    });
    members.push((
        "Attempts",
        Node::List {
            member: "Attempt",
            items: attempts.collect(),
        },
    ));
    members
}

fn state_name(state: leaseq_core::MessageState) -> &'static str {
    match state {
        leaseq_core::MessageState::Ready => "READY",
        leaseq_core::MessageState::InFlight => "IN_FLIGHT",
        leaseq_core::MessageState::Delayed => "DELAYED",
    }
}

/// A message seen by `LeaseqPeekMessages`: no receipt (nothing was leased), and its state.
fn peeked<'a>(entry: &'a crate::outcome::PeekedEntry, ctx: &Context) -> Node<'a> {
    let message = &entry.message;
    let payload = &entry.payload;
    let mut system = vec![
        (
            "ApproximateReceiveCount".to_string(),
            message.receive_count.to_string(),
        ),
        ("SentTimestamp".to_string(), message.sent_at_ms.to_string()),
    ];
    if let Some(at_ms) = message.first_received_at_ms() {
        system.push((
            "ApproximateFirstReceiveTimestamp".to_string(),
            at_ms.to_string(),
        ));
    }
    if let Some(source) = &message.dead_letter_source {
        system.push((
            "DeadLetterQueueSourceArn".to_string(),
            crate::queue_arn(ctx, source),
        ));
    }
    if let Some(fifo) = &message.fifo {
        system.push(("MessageGroupId".to_string(), fifo.group_id.to_string()));
    }
    let state = state_name(message.state);
    let mut members = vec![
        ("MessageId", text(message.id.to_string())),
        ("MD5OfBody", text(md5_of_payload_body(payload))),
        ("Body", text(&payload.body)),
        (
            "Attributes",
            string_map("Attribute", "Name", system.into_iter()),
        ),
        ("LeaseqState", text(state)),
        ("LeaseqSequence", Node::Number(entry.seq)),
        (
            "LeaseqRedriveGeneration",
            Node::Number(message.redrive_generation.into()),
        ),
    ];
    if message.state != leaseq_core::MessageState::Ready {
        // When a delayed message (a delay, or a redelivery backoff) or a lease ends.
        members.push(("LeaseqVisibleAt", Node::Number(message.visible_at_ms)));
    }
    if let Some(reason) = &entry.failure_reason {
        members.push(("LeaseqFailureReason", text(reason.as_ref())));
    }
    if !payload.attributes.is_empty() {
        members.push((
            "MessageAttributes",
            message_attributes(payload.attributes.iter()),
        ));
    }
    Node::Struct(members)
}

fn string_map<'a, K, V>(
    entry: &'static str,
    key: &'static str,
    pairs: impl Iterator<Item = (K, V)>,
) -> Node<'a>
where
    K: Into<Cow<'a, str>>,
    V: Into<Cow<'a, str>>,
{
    Node::Map {
        entry,
        key,
        value: "Value",
        entries: pairs.map(|(k, v)| (k.into(), text(v))).collect(),
    }
}

fn sent_members(sent: &Sent) -> Vec<(&'static str, Node<'_>)> {
    let payload = &sent.payload;
    let mut members = vec![
        ("MessageId", text(sent.message_id.to_string())),
        ("MD5OfMessageBody", text(md5_of_payload_body(payload))),
    ];
    if let Some(md5) = md5_of_message_attributes(&payload.attributes) {
        members.push(("MD5OfMessageAttributes", text(md5)));
    }
    if let Some(md5) = md5_of_system_attributes(payload.trace_header.as_deref()) {
        members.push(("MD5OfMessageSystemAttributes", text(md5)));
    }
    if let Some(sequence_number) = &sent.sequence_number {
        members.push(("SequenceNumber", text(sequence_number)));
    }
    members
}

/// Room for a send's JSON result with every member (the members' names and quotes, two
/// 32-digit checksums and a third, a 36-character id and a 20-digit sequence number).
const SENT_JSON_CAPACITY_BYTES: usize = 256;

/// A send's result as JSON, written directly: what `write_json` writes of the members
/// `sent_members` builds (in byte order of their names, as it sorts them: `MD5OfMessageAttributes`,
/// `MD5OfMessageBody`, `MD5OfMessageSystemAttributes`, `MessageId`, `SequenceNumber`), without
/// the tree, its sort, and a `String` per member. The checksums and the id are hex digits and
/// hyphens, which JSON needs no escape for.
fn write_sent_json(sent: &Sent, out: &mut Vec<u8>) {
    out.push(b'{');
    write_sent_members(sent, out);
    out.push(b'}');
}

/// The members of [`write_sent_json`], without the braces.
fn write_sent_members(sent: &Sent, out: &mut Vec<u8>) {
    let payload = &sent.payload;
    if let Some(md5) = md5_of_message_attributes(&payload.attributes) {
        out.extend_from_slice(b"\"MD5OfMessageAttributes\":");
        json_string(&md5, out);
        out.push(b',');
    }
    out.extend_from_slice(b"\"MD5OfMessageBody\":\"");
    out.extend_from_slice(&crate::md5::hex_digits(payload.body_md5()));
    out.push(b'"');
    if let Some(md5) = md5_of_system_attributes(payload.trace_header.as_deref()) {
        out.extend_from_slice(b",\"MD5OfMessageSystemAttributes\":");
        json_string(&md5, out);
    }
    out.extend_from_slice(b",\"MessageId\":\"");
    out.extend_from_slice(&crate::hex::hyphenated(&sent.message_id.0));
    out.push(b'"');
    if let Some(sequence_number) = &sent.sequence_number {
        out.extend_from_slice(b",\"SequenceNumber\":");
        json_string(sequence_number, out);
    }
}

fn batch_members<'a, T>(
    entry_name: &'static str,
    successful: Vec<Node<'a>>,
    entries: &'a [(String, Result<T, SqsError>)],
) -> Vec<(&'static str, Node<'a>)> {
    let failed = entries
        .iter()
        .filter_map(|(id, result)| {
            let error = result.as_ref().err()?;
            Some(Node::Struct(vec![
                ("Id", text(id)),
                ("SenderFault", Node::Bool(error.is_sender_fault())),
                ("Code", text(error.code.query_code())),
                ("Message", text(&error.message)),
            ]))
        })
        .collect();
    vec![
        (
            "Successful",
            Node::List {
                member: entry_name,
                items: successful,
            },
        ),
        (
            "Failed",
            Node::List {
                member: "BatchResultErrorEntry",
                items: failed,
            },
        ),
    ]
}

/// The system attributes SQS can return, in the order we return them (the last three only for
/// messages of FIFO queues).
const SYSTEM_ATTRIBUTES: [&str; 9] = [
    "SenderId",
    "SentTimestamp",
    "ApproximateReceiveCount",
    "ApproximateFirstReceiveTimestamp",
    "AWSTraceHeader",
    "DeadLetterQueueSourceArn",
    "MessageGroupId",
    "MessageDeduplicationId",
    "SequenceNumber",
];

fn system_attribute<'a>(name: &str, delivery: &'a Delivery, ctx: &Context) -> Option<Cow<'a, str>> {
    Some(match system_value(name, delivery, ctx)? {
        SystemValue::Text(text) => text,
        SystemValue::Number(number) => number.to_string().into(),
    })
}

/// A system attribute's value, numbers unformatted (the direct writer writes them without a
/// `String`).
enum SystemValue<'a> {
    Text(Cow<'a, str>),
    Number(u64),
}

/// A message's system attribute `name`, if it has one.
fn system_value<'a>(name: &str, delivery: &'a Delivery, ctx: &Context) -> Option<SystemValue<'a>> {
    match name {
        "SentTimestamp" => Some(SystemValue::Number(delivery.sent_at_ms)),
        "ApproximateReceiveCount" => Some(SystemValue::Number(delivery.receive_count.into())),
        "ApproximateFirstReceiveTimestamp" => {
            Some(SystemValue::Number(delivery.first_received_at_ms))
        }
        _ => Some(SystemValue::Text(system_text(name, delivery, ctx)?)),
    }
}

/// The system attributes whose values are text.
fn system_text<'a>(name: &str, delivery: &'a Delivery, ctx: &Context) -> Option<Cow<'a, str>> {
    Some(match name {
        "SenderId" => Cow::Borrowed(&*delivery.payload.sender_id),
        "AWSTraceHeader" => delivery.payload.trace_header.as_deref()?.into(),
        "DeadLetterQueueSourceArn" => {
            crate::queue_arn(ctx, delivery.dead_letter_source.as_deref()?).into()
        }
        "MessageGroupId" => delivery.fifo.as_ref()?.group_id.to_string().into(),
        // A standard queue's message may have a group id (fair queues) but never a
        // deduplication id.
        "MessageDeduplicationId" => {
            let fifo = delivery.fifo.as_ref()?;
            (!fifo.deduplication_id.is_empty())
                .then(|| fifo.deduplication_id.to_string())?
                .into()
        }
        "SequenceNumber" => delivery.sequence_number.as_deref()?.into(),
        _ => return None,
    })
}

/// Whether a message attribute name matches the requested names: `All`, `*` and `.*` match
/// every name, `prefix.*` every name that starts with `prefix` (`Hel.*` matches `Hello` and
/// `Help.Me`), anything else only itself (recorded from AWS: LocalStack's
/// `test_receive_message_message_attribute_names_filters`).
pub fn message_attribute_wanted(name: &str, wanted: &[String]) -> bool {
    wanted.iter().any(|pattern| {
        pattern == "All"
            || pattern == "*"
            || pattern == name
            || pattern
                .strip_suffix(".*")
                .is_some_and(|prefix| name.starts_with(prefix))
    })
}

/// A message's `MessageAttributes`, by name.
fn message_attributes<'a>(
    attributes: impl Iterator<Item = (&'a String, &'a MessageAttribute)>,
) -> Node<'a> {
    Node::Map {
        entry: "MessageAttribute",
        key: "Name",
        value: "Value",
        entries: attributes
            .map(|(name, attribute)| (Cow::Borrowed(name.as_str()), attribute_node(attribute)))
            .collect(),
    }
}

fn attribute_node(attribute: &MessageAttribute) -> Node<'_> {
    let value = match &attribute.value {
        AttributeValue::Text(value) => ("StringValue", text(value)),
        AttributeValue::Binary(bytes) => ("BinaryValue", text(STANDARD.encode(bytes))),
    };
    Node::Struct(vec![value, ("DataType", text(&attribute.data_type))])
}

fn message<'a>(
    delivery: &'a Delivery,
    attribute_names: &[String],
    message_attribute_names: &[String],
    ctx: &Context,
) -> Node<'a> {
    let payload = &delivery.payload;
    let all = attribute_names.iter().any(|name| name == "All");
    let system = SYSTEM_ATTRIBUTES
        .iter()
        .filter(|&&name| all || attribute_names.iter().any(|wanted| wanted == name))
        .filter_map(|&name| system_attribute(name, delivery, ctx).map(|value| (name, value)));
    let system = string_map("Attribute", "Name", system);
    let returned: Vec<(&String, &MessageAttribute)> = payload
        .attributes
        .iter()
        .filter(|(name, _)| message_attribute_wanted(name, message_attribute_names))
        .collect();
    let mut members = vec![
        ("MessageId", text(delivery.message_id.to_string())),
        ("ReceiptHandle", text(&delivery.receipt)),
        ("MD5OfBody", text(md5_of_payload_body(payload))),
        ("Body", text(&payload.body)),
    ];
    if matches!(&system, Node::Map { entries, .. } if !entries.is_empty()) {
        members.push(("Attributes", system));
    }
    if let Some(md5) = md5_of_message_attributes(returned.iter().copied()) {
        members.push(("MD5OfMessageAttributes", text(md5)));
        members.push((
            "MessageAttributes",
            message_attributes(returned.iter().copied()),
        ));
    }
    Node::Struct(members)
}

/// A receive's JSON result, written directly: what `write_json` writes of the `Messages` list
/// that `result` builds from `message` (the members of each message in byte order of their
/// names: `Attributes`, `Body`, `MD5OfBody`, `MD5OfMessageAttributes`, `MessageAttributes`,
/// `MessageId`, `ReceiptHandle`; the entries of both maps in byte order of their names), without
/// the tree, its sorts, and a `String` per member and per number. The test
/// `received_json_is_the_trees` holds it to the tree's bytes.
fn write_received_json(
    deliveries: &[Delivery],
    attribute_names: &[String],
    message_attribute_names: &[String],
    ctx: &Context,
    out: &mut Vec<u8>,
) {
    if deliveries.is_empty() {
        out.extend_from_slice(b"{}");
        return;
    }
    out.extend_from_slice(b"{\"Messages\":[");
    for (at, delivery) in deliveries.iter().enumerate() {
        if at > 0 {
            out.push(b',');
        }
        write_message_json(delivery, attribute_names, message_attribute_names, ctx, out);
    }
    out.extend_from_slice(b"]}");
}

/// One message of a receive's JSON result (see [`write_received_json`]).
fn write_message_json(
    delivery: &Delivery,
    attribute_names: &[String],
    message_attribute_names: &[String],
    ctx: &Context,
    out: &mut Vec<u8>,
) {
    let payload = &delivery.payload;
    out.push(b'{');
    if !attribute_names.is_empty() {
        let all = attribute_names.iter().any(|name| name == "All");
        let mut system: Vec<(&str, SystemValue)> = SYSTEM_ATTRIBUTES
            .iter()
            .filter(|&&name| all || attribute_names.iter().any(|wanted| wanted == name))
            .filter_map(|&name| system_value(name, delivery, ctx).map(|value| (name, value)))
            .collect();
        if !system.is_empty() {
            system.sort_unstable_by(|a, b| a.0.cmp(b.0));
            out.extend_from_slice(b"\"Attributes\":{");
            for (at, (name, value)) in system.iter().enumerate() {
                if at > 0 {
                    out.push(b',');
                }
                json_string(name, out);
                out.push(b':');
                match value {
                    SystemValue::Text(text) => json_string(text, out),
                    SystemValue::Number(number) => {
                        out.push(b'"');
                        out.extend_from_slice(itoa::Buffer::new().format(*number).as_bytes());
                        out.push(b'"');
                    }
                }
            }
            out.extend_from_slice(b"},");
        }
    }
    out.extend_from_slice(b"\"Body\":");
    json_string(&payload.body, out);
    out.extend_from_slice(b",\"MD5OfBody\":\"");
    out.extend_from_slice(&crate::md5::hex_digits(payload.body_md5()));
    out.push(b'"');
    let returned = || {
        payload
            .attributes
            .iter()
            .filter(|(name, _)| message_attribute_wanted(name, message_attribute_names))
    };
    if !message_attribute_names.is_empty() {
        if let Some(md5) = md5_of_message_attributes(returned()) {
            out.extend_from_slice(b",\"MD5OfMessageAttributes\":");
            json_string(&md5, out);
            // A `BTreeMap`'s names come in byte order already.
            out.extend_from_slice(b",\"MessageAttributes\":{");
            for (at, (name, attribute)) in returned().enumerate() {
                if at > 0 {
                    out.push(b',');
                }
                json_string(name, out);
                out.push(b':');
                match &attribute.value {
                    AttributeValue::Binary(bytes) => {
                        out.extend_from_slice(b"{\"BinaryValue\":");
                        json_string(&STANDARD.encode(bytes), out);
                        out.extend_from_slice(b",\"DataType\":");
                        json_string(&attribute.data_type, out);
                    }
                    AttributeValue::Text(value) => {
                        out.extend_from_slice(b"{\"DataType\":");
                        json_string(&attribute.data_type, out);
                        out.extend_from_slice(b",\"StringValue\":");
                        json_string(value, out);
                    }
                }
                out.push(b'}');
            }
            out.push(b'}');
        }
    }
    out.extend_from_slice(b",\"MessageId\":\"");
    out.extend_from_slice(&crate::hex::hyphenated(&delivery.message_id.0));
    out.extend_from_slice(b"\",\"ReceiptHandle\":");
    json_string(&delivery.receipt, out);
    out.push(b'}');
}

/// A receive's Query result, written directly: what `xml_content` writes of the `Messages` list
/// that `result` builds from `message` (its members in the tree's order: `MessageId`,
/// `ReceiptHandle`, `MD5OfBody`, `Body`, the `Attribute` entries in [`SYSTEM_ATTRIBUTES`]'s order,
/// `MD5OfMessageAttributes`, the `MessageAttribute` entries in byte order of their names),
/// without the tree and a `String` per member and per number. The test
/// `received_xml_is_the_trees` holds it to the tree's bytes.
fn write_received_xml(
    deliveries: &[Delivery],
    attribute_names: &[String],
    message_attribute_names: &[String],
    ctx: &Context,
    out: &mut String,
) {
    for delivery in deliveries {
        out.push_str("<Message>");
        write_message_xml(delivery, attribute_names, message_attribute_names, ctx, out);
        out.push_str("</Message>");
    }
}

/// One message of a receive's Query result (see [`write_received_xml`]).
fn write_message_xml(
    delivery: &Delivery,
    attribute_names: &[String],
    message_attribute_names: &[String],
    ctx: &Context,
    out: &mut String,
) {
    let ascii = |bytes: &[u8], out: &mut String| {
        out.push_str(std::str::from_utf8(bytes).expect("hex digits and hyphens are ASCII"))
    };
    let payload = &delivery.payload;
    out.push_str("<MessageId>");
    ascii(&crate::hex::hyphenated(&delivery.message_id.0), out);
    out.push_str("</MessageId><ReceiptHandle>");
    xml_escape(&delivery.receipt, out);
    out.push_str("</ReceiptHandle><MD5OfBody>");
    ascii(&crate::md5::hex_digits(payload.body_md5()), out);
    out.push_str("</MD5OfBody><Body>");
    xml_escape(&payload.body, out);
    out.push_str("</Body>");
    if !attribute_names.is_empty() {
        let all = attribute_names.iter().any(|name| name == "All");
        let wanted = SYSTEM_ATTRIBUTES
            .iter()
            .filter(|&&name| all || attribute_names.iter().any(|wanted| wanted == name));
        for &name in wanted {
            let Some(value) = system_value(name, delivery, ctx) else {
                continue;
            };
            out.push_str("<Attribute><Name>");
            xml_escape(name, out);
            out.push_str("</Name><Value>");
            match value {
                SystemValue::Text(text) => xml_escape(&text, out),
                SystemValue::Number(number) => out.push_str(itoa::Buffer::new().format(number)),
            }
            out.push_str("</Value></Attribute>");
        }
    }
    if !message_attribute_names.is_empty() {
        let returned = || {
            payload
                .attributes
                .iter()
                .filter(|(name, _)| message_attribute_wanted(name, message_attribute_names))
        };
        if let Some(md5) = md5_of_message_attributes(returned()) {
            out.push_str("<MD5OfMessageAttributes>");
            xml_escape(&md5, out);
            out.push_str("</MD5OfMessageAttributes>");
            for (name, attribute) in returned() {
                out.push_str("<MessageAttribute><Name>");
                xml_escape(name, out);
                out.push_str("</Name><Value>");
                match &attribute.value {
                    AttributeValue::Text(value) => {
                        out.push_str("<StringValue>");
                        xml_escape(value, out);
                        out.push_str("</StringValue>");
                    }
                    AttributeValue::Binary(bytes) => {
                        out.push_str("<BinaryValue>");
                        xml_escape(&STANDARD.encode(bytes), out);
                        out.push_str("</BinaryValue>");
                    }
                }
                out.push_str("<DataType>");
                xml_escape(&attribute.data_type, out);
                out.push_str("</DataType></Value></MessageAttribute>");
            }
        }
    }
}

/// A `DeleteMessageBatch` or `ChangeMessageVisibilityBatch` JSON result, written directly: what
/// `write_json` writes of `batch_members` (`Failed`, then `Successful`; a failed entry's members
/// `Code`, `Id`, `Message`, `SenderFault`), without the tree, its sorts and a `Vec` per entry.
/// The test `batch_json_is_the_trees` holds it to the tree's bytes.
fn write_batch_json(entries: &[(String, Result<(), SqsError>)], out: &mut Vec<u8>) {
    write_failed_json(entries, out);
    out.extend_from_slice(b",\"Successful\":");
    let successful = entries.iter().filter(|(_, result)| result.is_ok());
    write_json_list(successful, out, |(id, _), out| {
        out.extend_from_slice(b"{\"Id\":");
        json_string(id, out);
        out.push(b'}');
    });
    out.push(b'}');
}

/// A `SendMessageBatch` JSON result, written directly: what `write_json` writes of
/// `batch_members` with each successful entry's `Id` and `sent_members` (`Id` sorts before
/// them all), without the tree, its sorts, and a `Vec` and a `String` per member of each entry.
/// The test `sent_batch_json_is_the_trees` holds it to the tree's bytes.
fn write_sent_batch_json(entries: &[(String, Result<Sent, SqsError>)], out: &mut Vec<u8>) {
    write_failed_json(entries, out);
    out.extend_from_slice(b",\"Successful\":");
    let successful = entries
        .iter()
        .filter_map(|(id, result)| Some((id, result.as_ref().ok()?)));
    write_json_list(successful, out, |(id, sent), out| {
        out.extend_from_slice(b"{\"Id\":");
        json_string(id, out);
        out.push(b',');
        write_sent_members(sent, out);
        out.push(b'}');
    });
    out.push(b'}');
}

/// A batch result's opening and its `Failed` list (a failed entry's members `Code`, `Id`,
/// `Message`, `SenderFault`, as `write_json` sorts them).
fn write_failed_json<T>(entries: &[(String, Result<T, SqsError>)], out: &mut Vec<u8>) {
    out.extend_from_slice(b"{\"Failed\":");
    let failed = entries
        .iter()
        .filter_map(|(id, result)| Some((id, result.as_ref().err()?)));
    write_json_list(failed, out, |(id, error), out| {
        out.extend_from_slice(b"{\"Code\":");
        json_string(error.code.query_code(), out);
        out.extend_from_slice(b",\"Id\":");
        json_string(id, out);
        out.extend_from_slice(b",\"Message\":");
        json_string(&error.message, out);
        out.extend_from_slice(if error.is_sender_fault() {
            b",\"SenderFault\":true}"
        } else {
            b",\"SenderFault\":false}"
        });
    });
}

/// Writes `items` as a JSON list, each written by `write`.
fn write_json_list<T>(
    items: impl Iterator<Item = T>,
    out: &mut Vec<u8>,
    mut write: impl FnMut(T, &mut Vec<u8>),
) {
    out.push(b'[');
    for (at, item) in items.enumerate() {
        if at > 0 {
            out.push(b',');
        }
        write(item, out);
    }
    out.push(b']');
}

// ----- JSON ---------------------------------------------------------------------------------
//
// The JSON walker writes bytes straight from the tree, with no `serde_json::Value` in between,
// and writes exactly what `Value::to_string` wrote before it: compact; the members of every
// object in byte order of their names (a `serde_json::Map` is a `BTreeMap` unless serde_json's
// `preserve_order` feature is on, and nothing in the workspace turns it on), the last of equal
// names winning; strings escaped as serde_json escapes them. The tests check the two agree.

/// Writes `text` as a JSON string, escaped as serde_json does: `"` and `\` with a backslash,
/// the control characters below U+0020 as `\b`, `\t`, `\n`, `\f`, `\r` or `\u00xx`, and every
/// other character as it is (RFC 8259 asks no more; U+007F, U+2028 and U+2029 are valid in
/// JSON strings). Every byte of a multi-byte UTF-8 sequence is 0x80 or above, so scanning bytes
/// never splits a character. Public for the load generator (`leaseq bench`), which writes its
/// send requests with it.
pub fn json_string(text: &str, out: &mut Vec<u8>) {
    let bytes = text.as_bytes();
    out.push(b'"');
    // Most text needs no escape, and is copied whole; otherwise the runs between the bytes that
    // need one are.
    if !crate::scan::any_special(bytes) {
        out.extend_from_slice(bytes);
        out.push(b'"');
        return;
    }
    let mut start = 0;
    loop {
        let at = crate::scan::special_byte(bytes, start, false);
        out.extend_from_slice(&bytes[start..at]);
        let Some(&byte) = bytes.get(at) else {
            break;
        };
        let unicode;
        let escape: &[u8] = match byte {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            0x08 => b"\\b",
            b'\t' => b"\\t",
            b'\n' => b"\\n",
            0x0c => b"\\f",
            b'\r' => b"\\r",
            _ => {
                let digit = |nibble: u8| crate::HEX_DIGITS[usize::from(nibble)];
                unicode = [
                    b'\\',
                    b'u',
                    b'0',
                    b'0',
                    digit(byte >> 4),
                    digit(byte & 0x0f),
                ];
                &unicode
            }
        };
        out.extend_from_slice(escape);
        start = at + 1;
    }
    out.push(b'"');
}

/// Writes `node` as JSON (see above). Takes the tree by value so that members can be sorted in
/// place.
fn write_json(node: Node<'_>, out: &mut Vec<u8>) {
    match node {
        Node::Text(text) => json_string(&text, out),
        Node::Bool(value) => out.extend_from_slice(if value { b"true" } else { b"false" }),
        Node::Number(value) => out.extend_from_slice(value.to_string().as_bytes()),
        Node::Struct(mut members) => {
            members.sort_by(|a, b| a.0.cmp(b.0));
            write_json_object(members, out);
        }
        Node::List { items, .. } => write_json_list(items.into_iter(), out, write_json),
        Node::Map { mut entries, .. } => {
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            write_json_object(entries, out);
        }
    }
}

/// Writes an object whose members are sorted by name with a stable sort. Of members with equal
/// names only the last is written, as a `serde_json::Map` keeps the last value inserted under a
/// name. (The encoder never repeats a name; this keeps the output what it was regardless.)
fn write_json_object<'a, K: AsRef<str>>(members: Vec<(K, Node<'a>)>, out: &mut Vec<u8>) {
    out.push(b'{');
    let mut members = members.into_iter().peekable();
    let mut first = true;
    while let Some((name, node)) = members.next() {
        if members
            .peek()
            .is_some_and(|(next, _)| next.as_ref() == name.as_ref())
        {
            continue;
        }
        if !first {
            out.push(b',');
        }
        first = false;
        json_string(name.as_ref(), out);
        out.push(b':');
        write_json(node, out);
    }
    out.push(b'}');
}

/// Room for one received message's JSON members besides its body, unescaped: the member names
/// and quotes, the id (36 characters), the receipt (50) and the body's MD5 (32), about 160
/// bytes; attributes, when asked for, and escapes take more, and grow the buffer.
const MESSAGE_JSON_MEMBERS_BYTES: usize = 192;

/// The same for a message of a Query receive's answer, whose element names are written twice.
const MESSAGE_XML_MEMBERS_BYTES: usize = 320;

/// The starting size of a receive's answer: room for the bodies and each message's usual
/// members (`members_bytes`). Grown from the usual capacity, the buffer of ten 256 B messages
/// was reallocated (and copied) three times.
fn received_capacity_bytes(deliveries: &[Delivery], members_bytes: usize) -> usize {
    deliveries
        .iter()
        .map(|delivery| delivery.payload.body.len() + members_bytes)
        .sum::<usize>()
        .max(RESPONSE_CAPACITY_BYTES)
}

/// How many bytes a response's buffer starts with: most responses fit (a JSON receive's is
/// sized for its messages, see [`MESSAGE_JSON_MEMBERS_BYTES`]). Sizing a tree's output exactly
/// with a walk of the tree first measured slower than the few reallocations it spares.
const RESPONSE_CAPACITY_BYTES: usize = 1024;

/// `node` as a JSON document.
fn json_document(node: Node<'_>) -> Vec<u8> {
    let mut out = Vec::with_capacity(RESPONSE_CAPACITY_BYTES);
    write_json(node, &mut out);
    out
}

fn json_response(
    status: u16,
    body: Vec<u8>,
    ctx: &Context,
    query_error: Option<String>,
) -> Response {
    Response {
        status,
        content_type: JSON_CONTENT_TYPE,
        request_id: ctx.request_id.clone(),
        query_error,
        server_header: None,
        body,
    }
}

// ----- XML ----------------------------------------------------------------------------------

/// Characters XML 1.0 allows in a document.
fn xml_allowed(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}')
        || c >= '\u{10000}'
}

/// Escapes text content as SQS does: markup characters and quotes as entities, and `\r` as
/// `&#xD;` so that XML parsers' line-end normalisation does not turn it into `\n`.
pub fn xml_escape(text: &str, out: &mut String) {
    // Most text needs no escape: find that out with a scan of bytes that does not stop early
    // (which the compiler turns into wide compares), then copy it whole. The scan flags every
    // byte that may start a character to escape or replace: markup, controls, and 0xEF, the
    // first byte of U+FFFE and U+FFFF (the only characters XML refuses that a `str` can hold
    // above U+007F). Otherwise copy the runs between escapes.
    let may_need_escape =
        |byte: u8| byte < 0x20 || matches!(byte, b'&' | b'<' | b'>' | b'"' | 0xef);
    if !text
        .bytes()
        .fold(false, |any, byte| any | may_need_escape(byte))
    {
        out.push_str(text);
        return;
    }
    let mut start = 0;
    for (at, c) in text.char_indices() {
        let escape = match c {
            '&' => "&amp;",
            '<' => "&lt;",
            '>' => "&gt;",
            '"' => "&quot;",
            '\r' => "&#xD;",
            // Message bodies cannot hold these (the engine refuses them), but error messages
            // may quote arbitrary input; XML cannot carry them even as references.
            c if !xml_allowed(c) => "\u{FFFD}",
            _ => continue,
        };
        out.push_str(&text[start..at]);
        out.push_str(escape);
        start = at + c.len_utf8();
    }
    out.push_str(&text[start..]);
}

fn element(out: &mut String, name: &str, content: impl FnOnce(&mut String)) {
    out.push('<');
    out.push_str(name);
    out.push('>');
    content(out);
    out.push_str("</");
    out.push_str(name);
    out.push('>');
}

/// Writes the content of `node` (without its own element).
fn xml_content(node: &Node, out: &mut String) {
    match node {
        Node::Text(text) => xml_escape(text, out),
        Node::Bool(value) => out.push_str(if *value { "true" } else { "false" }),
        Node::Number(value) => out.push_str(&value.to_string()),
        Node::Struct(members) => {
            for (name, member) in members {
                xml_member(name, member, out);
            }
        }
        // Lists and maps are always members of a structure; see `xml_member`.
        Node::List { .. } | Node::Map { .. } => {}
    }
}

fn xml_member(name: &str, node: &Node, out: &mut String) {
    match node {
        Node::List { member, items } => {
            for item in items {
                element(out, member, |out| xml_content(item, out));
            }
        }
        Node::Map {
            entry,
            key,
            value,
            entries,
        } => {
            for (k, v) in entries {
                element(out, entry, |out| {
                    element(out, key, |out| xml_escape(k, out));
                    element(out, value, |out| xml_content(v, out));
                });
            }
        }
        other => element(out, name, |out| xml_content(other, out)),
    }
}

fn xml_response(status: u16, body: String, ctx: &Context) -> Response {
    Response {
        status,
        content_type: XML_CONTENT_TYPE,
        request_id: ctx.request_id.clone(),
        query_error: None,
        server_header: None,
        body: body.into_bytes(),
    }
}

// ----- entry points -------------------------------------------------------------------------

/// The response to a successful action, shaped as its request asked (`shape`, from `decode`).
pub fn encode(
    protocol: crate::Protocol,
    action: &'static str,
    outcome: &Outcome,
    shape: &Shape,
    ctx: &Context,
) -> Response {
    // The commonest JSON results (a send's, a send batch's, a receive's, a delete batch's) are
    // written straight into the buffer; the tests `*_json_is_the_trees` hold each to the tree's
    // output.
    let direct = |capacity_bytes: usize, write: &dyn Fn(&mut Vec<u8>)| {
        let mut body = Vec::with_capacity(capacity_bytes);
        write(&mut body);
        json_response(200, body, ctx, None)
    };
    match (protocol, outcome) {
        (crate::Protocol::Json, Outcome::Sent(sent)) => {
            direct(SENT_JSON_CAPACITY_BYTES, &|out| write_sent_json(sent, out))
        }
        (crate::Protocol::Json, Outcome::Received { deliveries, .. }) => {
            let (attribute_names, message_attribute_names) = shape.message_attribute_names();
            let capacity_bytes = received_capacity_bytes(deliveries, MESSAGE_JSON_MEMBERS_BYTES);
            direct(capacity_bytes, &|out| {
                write_received_json(
                    deliveries,
                    attribute_names,
                    message_attribute_names,
                    ctx,
                    out,
                )
            })
        }
        (crate::Protocol::Json, Outcome::SentBatch(entries)) => {
            direct(SENT_JSON_CAPACITY_BYTES * (entries.len() + 1), &|out| {
                write_sent_batch_json(entries, out)
            })
        }
        (crate::Protocol::Json, Outcome::Batch(entries)) => {
            direct(RESPONSE_CAPACITY_BYTES, &|out| {
                write_batch_json(entries, out)
            })
        }
        (crate::Protocol::Json, _) => {
            let members = result(action, outcome, shape, ctx);
            let body = json_document(Node::Struct(members.unwrap_or_default()));
            json_response(200, body, ctx, None)
        }
        (crate::Protocol::Query, Outcome::Received { deliveries, .. })
            if !deliveries.is_empty() =>
        {
            // Written directly, as in JSON; `received_xml_is_the_trees` holds it to the tree's
            // output.
            let (attribute_names, message_attribute_names) = shape.message_attribute_names();
            let capacity_bytes = received_capacity_bytes(deliveries, MESSAGE_XML_MEMBERS_BYTES);
            let mut out = String::with_capacity(capacity_bytes);
            xml_response_start(action, &mut out);
            result_element(action, &mut out, |out| {
                write_received_xml(
                    deliveries,
                    attribute_names,
                    message_attribute_names,
                    ctx,
                    out,
                )
            });
            xml_response_end(action, ctx, &mut out);
            xml_response(200, out, ctx)
        }
        (crate::Protocol::Query, _) => {
            let members = result(action, outcome, shape, ctx);
            xml_response(
                200,
                xml_document(action, members.map(Node::Struct), ctx),
                ctx,
            )
        }
    }
}

/// A Query answer to `action` whose result is `result` (`None`: no result element).
fn xml_document(action: &str, result: Option<Node<'_>>, ctx: &Context) -> String {
    let mut out = String::with_capacity(RESPONSE_CAPACITY_BYTES);
    xml_response_start(action, &mut out);
    match result {
        // An empty result (a receive that found nothing, a listing of no queues) is one
        // empty element, as SQS writes it: `<ReceiveMessageResult/>` (AWS-validated in
        // LocalStack's TestSqsQueryApi.test_get_send_and_receive_messages).
        Some(Node::Struct(members)) if members.is_empty() => {
            push_all(&mut out, &["<", action, "Result/>"]);
        }
        Some(result) => result_element(action, &mut out, |out| xml_content(&result, out)),
        None => {}
    }
    xml_response_end(action, ctx, &mut out);
    out
}

/// The start of a Query answer to `action`, up to its result. Pushed piece by piece, not
/// `format!`ted: the formatting machinery cost about 1,700 instructions of a Query
/// SendMessage's answer (callgrind).
fn xml_response_start(action: &str, out: &mut String) {
    push_all(
        out,
        &[
            "<?xml version=\"1.0\"?><",
            action,
            "Response xmlns=\"",
            XML_NAMESPACE,
            "\">",
        ],
    );
}

/// The `<{action}Result>` element around what `content` writes.
fn result_element(action: &str, out: &mut String, content: impl FnOnce(&mut String)) {
    push_all(out, &["<", action, "Result>"]);
    content(out);
    push_all(out, &["</", action, "Result>"]);
}

/// The end of a Query answer to `action`, after its result: the request's metadata.
fn xml_response_end(action: &str, ctx: &Context, out: &mut String) {
    element(out, "ResponseMetadata", |out| {
        element(out, "RequestId", |out| xml_escape(&ctx.request_id, out))
    });
    push_all(out, &["</", action, "Response>"]);
}

/// The response to a failed request.
pub fn encode_error(protocol: crate::Protocol, error: &SqsError, ctx: &Context) -> Response {
    match protocol {
        crate::Protocol::Json => {
            let body = json_document(Node::Struct(vec![
                ("__type", text(error.code.json_type())),
                ("message", text(error.message_in(protocol, &ctx.base_url))),
            ]));
            let query_error = format!("{};{}", error.code.query_code(), error.fault());
            json_response(error.status(), body, ctx, Some(query_error))
        }
        // SQS's answer to a parameterless GET of a queue's URL is a bare document, not an
        // ErrorResponse (LocalStack's AWS-validated test_get_without_query_returns_unknown_operation).
        crate::Protocol::Query if error.code == crate::ErrorCode::UnknownOperation => {
            let out = String::from("<?xml version=\"1.0\"?><UnknownOperationException/>");
            xml_response(error.status(), out, ctx)
        }
        crate::Protocol::Query => {
            let mut out = String::from("<?xml version=\"1.0\"?>");
            out.push_str(&format!("<ErrorResponse xmlns=\"{XML_NAMESPACE}\">"));
            element(&mut out, "Error", |out| {
                element(out, "Type", |out| out.push_str(error.fault()));
                element(out, "Code", |out| xml_escape(error.code.query_code(), out));
                element(out, "Message", |out| {
                    xml_escape(
                        &error.message_in(crate::Protocol::Query, &ctx.base_url),
                        out,
                    )
                });
                out.push_str("<Detail/>");
            });
            element(&mut out, "RequestId", |out| {
                xml_escape(&ctx.request_id, out)
            });
            out.push_str("</ErrorResponse>");
            xml_response(error.status(), out, ctx)
        }
    }
}

#[cfg(test)]
mod tests;
