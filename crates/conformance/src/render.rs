//! Responses as script output: the JSON a client would get, rendered in a line or a few, with
//! symbolic names for what is random (message ids) or sealed (receipts, task handles, tokens).
//!
//! Rendering reads the wire response, not the service's types, so the suite holds every store to
//! what clients see, and does not move when the types behind the wire are reshaped.

use std::collections::HashMap;

use serde_json::{Map, Value};

use crate::script::format_time_ms;
use crate::{ACCOUNT_ID, REGION};

/// The base of queue URLs in requests and responses.
pub const BASE_URL: &str = "http://localhost:9324";

/// The time the scripts' clock starts at (a whole second, so relative times stay whole).
pub const START_MS: u64 = 1_700_000_000_000;

/// Bodies longer than this render as their length.
const BODY_SHOWN_MAX: usize = 48;

/// What a name stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// A message id: `m1`.
    Message,
    /// A receipt handle: `r1`.
    Receipt,
    /// A move task handle: `t1`.
    Task,
    /// A pagination token: `k1`.
    Token,
}

impl Kind {
    fn prefix(self) -> &'static str {
        match self {
            Kind::Message => "m",
            Kind::Receipt => "r",
            Kind::Task => "t",
            Kind::Token => "k",
        }
    }
}

/// Names by first appearance, per session (each store draws its own ids).
#[derive(Default)]
pub struct Names {
    by_raw: HashMap<(Kind, String), String>,
    by_name: HashMap<String, String>,
    counts: HashMap<Kind, usize>,
}

impl Names {
    /// The name of `raw`, given now if it has none.
    pub fn name(&mut self, kind: Kind, raw: &str) -> String {
        if let Some(name) = self.by_raw.get(&(kind, raw.to_string())) {
            return name.clone();
        }
        let count = self.counts.entry(kind).or_default();
        *count += 1;
        let name = format!("{}{count}", kind.prefix());
        self.by_raw.insert((kind, raw.to_string()), name.clone());
        self.by_name.insert(name.clone(), raw.to_string());
        name
    }

    /// Names `raw` as `name` (a value the harness made up, such as a tampered receipt).
    pub fn alias(&mut self, name: &str, raw: &str) {
        self.by_name.insert(name.to_string(), raw.to_string());
    }

    /// What a name stands for.
    pub fn raw(&self, name: &str) -> Option<&str> {
        self.by_name.get(name).map(String::as_str)
    }

    /// `text` with every raw value that has a name replaced by the name (error messages quote
    /// receipts and ids).
    fn scrub(&self, text: &str) -> String {
        let mut text = text.to_string();
        let mut known: Vec<(&String, &String)> = self.by_name.iter().map(|(n, r)| (r, n)).collect();
        known.sort_by_key(|(raw, _)| std::cmp::Reverse(raw.len()));
        for (raw, name) in known {
            if !raw.is_empty() && text.contains(raw.as_str()) {
                text = text.replace(raw.as_str(), name);
            }
        }
        text
    }
}

/// How to render a response: which action it answers, and with how much detail.
#[derive(Clone, Copy, Debug)]
pub struct Spec {
    /// The SQS action name.
    pub action: &'static str,
    /// Timestamps too (`receive … verbose`).
    pub verbose: bool,
}

/// The output lines of a response.
pub fn response(spec: Spec, status: u16, body: &[u8], names: &mut Names) -> Vec<String> {
    let value: Value = match serde_json::from_slice(body) {
        Ok(value) => value,
        Err(error) => return vec![format!("unreadable response ({error}): {body:?}")],
    };
    let object = value.as_object().cloned().unwrap_or_default();
    if status != 200 {
        let code = text(&object, "__type");
        let code = code.rsplit('#').next().unwrap_or_default();
        let message = names.scrub(&text(&object, "message"));
        return vec![format!("error {code}: {message}")];
    }
    let lines = match spec.action {
        "CreateQueue" | "GetQueueUrl" => vec![queue_of_url(&text(&object, "QueueUrl"))],
        "ListQueues" => queue_list(&object, "QueueUrls", names),
        "ListDeadLetterSourceQueues" => queue_list(&object, "queueUrls", names),
        "GetQueueAttributes" => queue_attributes(&object),
        "ListQueueTags" => pairs(object.get("Tags")),
        "SendMessage" => vec![sent(&object, names)],
        "SendMessageBatch" => batch(&object, names, sent),
        "DeleteMessageBatch" | "ChangeMessageVisibilityBatch" => {
            batch(&object, names, |_, _| "ok".to_string())
        }
        "ReceiveMessage" => messages(&object, spec.verbose, names, received),
        "LeaseqPeekMessages" => {
            let mut lines = messages(&object, spec.verbose, names, peeked);
            if let Some(token) = object.get("NextToken").and_then(Value::as_str) {
                lines.push(format!("next={token}"));
            }
            lines
        }
        "LeaseqGetMessageHistory" => history(&object, names),
        "StartMessageMoveTask" => vec![names.name(Kind::Task, &text(&object, "TaskHandle"))],
        "ListMessageMoveTasks" => match object.get("Results").and_then(Value::as_array) {
            Some(tasks) if !tasks.is_empty() => tasks
                .iter()
                .map(|task| move_task(task.as_object().unwrap_or(&Map::new()), names))
                .collect(),
            _ => vec!["(none)".to_string()],
        },
        "CancelMessageMoveTask" => vec![format!(
            "moved={}",
            number(&object, "ApproximateNumberOfMessagesMoved")
        )],
        action if action.starts_with("Leaseq") && action.ends_with("MessageMoveTask") => {
            vec![move_task(&object, names)]
        }
        _ if object.is_empty() => vec!["ok".to_string()],
        _ => vec![Value::Object(object).to_string()],
    };
    if lines.is_empty() {
        vec!["(none)".to_string()]
    } else {
        lines
    }
}

fn text(object: &Map<String, Value>, key: &str) -> String {
    match object.get(key) {
        Some(Value::String(text)) => text.clone(),
        Some(other) => other.to_string(),
        None => String::new(),
    }
}

fn number(object: &Map<String, Value>, key: &str) -> String {
    object
        .get(key)
        .map(|value| value.to_string())
        .unwrap_or_default()
}

/// A queue's name from its URL (the whole URL if it is not one of ours).
fn queue_of_url(url: &str) -> String {
    let prefix = format!("{BASE_URL}/{ACCOUNT_ID}/");
    url.strip_prefix(&prefix).unwrap_or(url).to_string()
}

/// A queue's name from its ARN (the whole ARN if it is not one of ours).
fn queue_of_arn(arn: &str) -> String {
    let prefix = format!("arn:aws:sqs:{REGION}:{ACCOUNT_ID}:");
    arn.strip_prefix(&prefix).unwrap_or(arn).to_string()
}

/// An epoch time in milliseconds as a time since the start of the script.
fn relative_ms(value: &Value) -> String {
    let ms = match value {
        Value::String(text) => text.parse::<i128>().unwrap_or_default(),
        other => other.as_i64().unwrap_or_default().into(),
    };
    format_time_ms(ms - i128::from(START_MS))
}

/// The epoch time at `key` as a time since the start of the script (`-` if absent).
fn time_of(object: &Map<String, Value>, key: &str) -> String {
    object.get(key).map_or_else(|| "-".to_string(), relative_ms)
}

/// A value as a script writes it: bare if it has no spaces or quotes, else quoted.
pub fn quote(value: &str) -> String {
    if value.len() > BODY_SHOWN_MAX {
        return format!("<{} bytes>", value.len());
    }
    if !value.is_empty() && !value.contains(|c: char| c.is_whitespace() || c == '"' || c == '\\') {
        return value.to_string();
    }
    let escaped = value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
        .replace('\t', "\\t");
    format!("\"{escaped}\"")
}

fn queue_list(object: &Map<String, Value>, key: &str, names: &mut Names) -> Vec<String> {
    let urls: Vec<String> = object
        .get(key)
        .and_then(Value::as_array)
        .map(|urls| {
            urls.iter()
                .map(|url| queue_of_url(url.as_str().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default();
    let mut line = if urls.is_empty() {
        "(none)".to_string()
    } else {
        urls.join(" ")
    };
    if let Some(token) = object.get("NextToken").and_then(Value::as_str) {
        line.push_str(&format!(" next={}", names.name(Kind::Token, token)));
    }
    vec![line]
}

fn queue_attributes(object: &Map<String, Value>) -> Vec<String> {
    let Some(Value::Object(attributes)) = object.get("Attributes") else {
        return Vec::new();
    };
    attributes
        .iter()
        .map(|(name, value)| {
            let value = value.as_str().unwrap_or_default();
            match name.as_str() {
                // Epoch seconds.
                "CreatedTimestamp" | "LastModifiedTimestamp" => {
                    let seconds: i128 = value.parse().unwrap_or_default();
                    let relative = seconds * 1_000 - i128::from(START_MS);
                    format!("{name}={}", format_time_ms(relative))
                }
                _ => format!("{name}={value}"),
            }
        })
        .collect()
}

fn pairs(map: Option<&Value>) -> Vec<String> {
    let Some(Value::Object(map)) = map else {
        return Vec::new();
    };
    let pairs: Vec<String> = map
        .iter()
        .map(|(key, value)| format!("{key}={}", quote(value.as_str().unwrap_or_default())))
        .collect();
    vec![pairs.join(" ")]
}

/// A send's answer: the message's name, and its sequence number on FIFO queues.
fn sent(object: &Map<String, Value>, names: &mut Names) -> String {
    let mut line = names.name(Kind::Message, &text(object, "MessageId"));
    if let Some(sequence) = object.get("SequenceNumber").and_then(Value::as_str) {
        line.push_str(&format!(" seq={sequence}"));
    }
    line
}

fn batch(
    object: &Map<String, Value>,
    names: &mut Names,
    success: impl Fn(&Map<String, Value>, &mut Names) -> String,
) -> Vec<String> {
    let entries = |key: &str| {
        object
            .get(key)
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
    };
    let mut lines = Vec::new();
    for entry in entries("Successful") {
        let entry = entry.as_object().cloned().unwrap_or_default();
        lines.push(format!("{} {}", text(&entry, "Id"), success(&entry, names)));
    }
    for entry in entries("Failed") {
        let entry = entry.as_object().cloned().unwrap_or_default();
        let message = names.scrub(&text(&entry, "Message"));
        let fault = if entry.get("SenderFault") == Some(&Value::Bool(true)) {
            ""
        } else {
            " (receiver fault)"
        };
        let (id, code) = (text(&entry, "Id"), text(&entry, "Code"));
        lines.push(format!("{id} error {code}: {message}{fault}"));
    }
    lines
}

type MessageLine = fn(&Map<String, Value>, bool, &mut Names) -> String;

fn messages(
    object: &Map<String, Value>,
    verbose: bool,
    names: &mut Names,
    line: MessageLine,
) -> Vec<String> {
    let Some(Value::Array(messages)) = object.get("Messages") else {
        return Vec::new();
    };
    messages
        .iter()
        .map(|message| line(message.as_object().unwrap_or(&Map::new()), verbose, names))
        .collect()
}

/// The body, its MD5 checked, and the message attributes.
fn body_and_attributes(message: &Map<String, Value>, md5_key: &str) -> String {
    let body = text(message, "Body");
    let mut line = format!("body={}", quote(&body));
    if text(message, md5_key) != leaseq_sqs::md5::md5_of_body(&body) {
        line.push_str(" md5=WRONG");
    }
    if let Some(Value::Object(attributes)) = message.get("MessageAttributes") {
        for (name, attribute) in attributes {
            let attribute = attribute.as_object().cloned().unwrap_or_default();
            let value = match attribute.get("StringValue") {
                Some(value) => value.as_str().unwrap_or_default().to_string(),
                None => text(&attribute, "BinaryValue"),
            };
            let data_type = text(&attribute, "DataType");
            line.push_str(&format!(" attr.{name}={data_type}:{}", quote(&value)));
        }
    }
    line
}

/// The system attributes a script shows: counts, FIFO ids, the dead-letter source, and with
/// `verbose` the timestamps.
fn system_attributes(attributes: &Map<String, Value>, verbose: bool) -> String {
    let mut line = String::new();
    let mut show = |label: &str, value: String| line.push_str(&format!(" {label}={value}"));
    let get = |name: &str| attributes.get(name);
    if let Some(count) = get("ApproximateReceiveCount") {
        show("receives", count.as_str().unwrap_or_default().to_string());
    }
    for (name, label) in [
        ("MessageGroupId", "group"),
        ("MessageDeduplicationId", "dedup"),
        ("SequenceNumber", "seq"),
    ] {
        if let Some(value) = get(name) {
            show(label, quote(value.as_str().unwrap_or_default()));
        }
    }
    if let Some(source) = get("DeadLetterQueueSourceArn") {
        show("source", queue_of_arn(source.as_str().unwrap_or_default()));
    }
    if verbose {
        if let Some(value) = get("SentTimestamp") {
            show("sent", relative_ms(value));
        }
        if let Some(value) = get("ApproximateFirstReceiveTimestamp") {
            show("first_received", relative_ms(value));
        }
        if let Some(value) = get("SenderId") {
            show("sender", value.as_str().unwrap_or_default().to_string());
        }
        if let Some(value) = get("AWSTraceHeader") {
            show("trace", quote(value.as_str().unwrap_or_default()));
        }
    }
    line
}

fn received(message: &Map<String, Value>, verbose: bool, names: &mut Names) -> String {
    let id = names.name(Kind::Message, &text(message, "MessageId"));
    let receipt = names.name(Kind::Receipt, &text(message, "ReceiptHandle"));
    let attributes = message.get("Attributes").and_then(Value::as_object);
    format!(
        "{id} receipt={receipt} {}{}",
        body_and_attributes(message, "MD5OfBody"),
        attributes.map_or_else(String::new, |a| system_attributes(a, verbose)),
    )
}

fn peeked(message: &Map<String, Value>, verbose: bool, names: &mut Names) -> String {
    let id = names.name(Kind::Message, &text(message, "MessageId"));
    let attributes = message.get("Attributes").and_then(Value::as_object);
    let mut line = format!(
        "{id} seq={} {} {}{}",
        number(message, "LeaseqSequence"),
        text(message, "LeaseqState"),
        body_and_attributes(message, "MD5OfBody"),
        attributes.map_or_else(String::new, |a| system_attributes(a, verbose)),
    );
    let generation = number(message, "LeaseqRedriveGeneration");
    if generation != "0" {
        line.push_str(&format!(" generation={generation}"));
    }
    if let Some(reason) = message.get("LeaseqFailureReason").and_then(Value::as_str) {
        line.push_str(&format!(" failure={}", quote(reason)));
    }
    line
}

fn history(object: &Map<String, Value>, names: &mut Names) -> Vec<String> {
    let id = names.name(Kind::Message, &text(object, "MessageId"));
    let mut head = format!(
        "{id} {} receives={} sent={}",
        text(object, "State"),
        number(object, "ApproximateReceiveCount"),
        time_of(object, "SentTimestamp"),
    );
    for (key, label) in [
        ("ApproximateFirstReceiveTimestamp", "first_received"),
        ("DeadLetteredTimestamp", "dead_lettered"),
        ("DeletedTimestamp", "deleted"),
    ] {
        if let Some(value) = object.get(key) {
            head.push_str(&format!(" {label}={}", relative_ms(value)));
        }
    }
    if let Some(source) = object
        .get("DeadLetterQueueSourceArn")
        .and_then(Value::as_str)
    {
        head.push_str(&format!(" source={}", queue_of_arn(source)));
    }
    if let Some(reason) = object.get("FailureReason").and_then(Value::as_str) {
        head.push_str(&format!(" failure={}", quote(reason)));
    }
    let mut lines = vec![head];
    for attempt in object
        .get("Attempts")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let attempt = attempt.as_object().cloned().unwrap_or_default();
        let mut line = format!(
            "attempt={} received={} lease={} deadline={} extensions={} {}",
            number(&attempt, "Attempt"),
            time_of(&attempt, "ReceivedTimestamp"),
            time_of(&attempt, "FirstLeaseDeadline"),
            time_of(&attempt, "LeaseDeadline"),
            number(&attempt, "Extensions"),
            text(&attempt, "Outcome"),
        );
        if let Some(ended) = attempt.get("EndedTimestamp") {
            line.push_str(&format!(" at={}", relative_ms(ended)));
        }
        if let Some(agent) = attempt.get("UserAgent").and_then(Value::as_str) {
            line.push_str(&format!(" client={}", quote(agent)));
        }
        lines.push(line);
    }
    lines
}

fn move_task(task: &Map<String, Value>, names: &mut Names) -> String {
    // As in SQS, only an active task is listed with its handle; a finished one shows `-`.
    let handle = match task.get("TaskHandle").and_then(Value::as_str) {
        Some(handle) => names.name(Kind::Task, handle),
        None => "-".to_string(),
    };
    let mut line = format!(
        "{handle} {} source={}",
        text(task, "Status"),
        queue_of_arn(&text(task, "SourceArn"))
    );
    if let Some(destination) = task.get("DestinationArn").and_then(Value::as_str) {
        line.push_str(&format!(" to={}", queue_of_arn(destination)));
    }
    if let Some(rate) = task.get("MaxNumberOfMessagesPerSecond") {
        line.push_str(&format!(" rate={rate}"));
    }
    line.push_str(&format!(
        " moved={} to_move={} started={}",
        number(task, "ApproximateNumberOfMessagesMoved"),
        number(task, "ApproximateNumberOfMessagesToMove"),
        task.get("StartedTimestamp")
            .map_or_else(String::new, relative_ms),
    ));
    for (key, label) in [
        ("LeaseqMessageLimit", "limit"),
        ("LeaseqMessagesHeldBack", "held_back"),
    ] {
        if let Some(value) = task.get(key) {
            line.push_str(&format!(" {label}={value}"));
        }
    }
    if let Some(reason) = task.get("FailureReason").and_then(Value::as_str) {
        line.push_str(&format!(" failure={}", quote(reason)));
    }
    line
}
