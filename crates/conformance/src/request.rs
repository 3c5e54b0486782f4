//! Script commands as SQS requests: the action's name and its JSON 1.0 body, built from the
//! command's words. The service sees them only after `leaseq_sqs::decode`, as it sees a
//! client's request.

use serde_json::{json, Map, Value};

use crate::render::{Names, Spec, BASE_URL};
use crate::script::{Args, Problem};
use crate::{ACCOUNT_ID, REGION};

/// A request to send: what to render its answer as, its body, and who sends it.
pub struct Request {
    /// The action and how to render its answer.
    pub spec: Spec,
    /// The JSON body.
    pub body: Value,
    /// The `User-Agent` of the caller (`client=`), for message histories.
    pub user_agent: Option<String>,
}

fn url(queue: &str) -> String {
    format!("{BASE_URL}/{ACCOUNT_ID}/{queue}")
}

fn arn(queue: &str) -> String {
    format!("arn:aws:sqs:{REGION}:{ACCOUNT_ID}:{queue}")
}

/// A receipt argument: a name, `raw:TEXT`, or `tampered:NAME` (one character changed).
fn receipt(text: &str, names: &mut Names) -> Result<String, Problem> {
    if let Some(raw) = text.strip_prefix("raw:") {
        return Ok(raw.to_string());
    }
    if let Some(name) = text.strip_prefix("tampered:") {
        let mut raw: Vec<char> = names
            .raw(name)
            .ok_or(format!("no {name}"))?
            .chars()
            .collect();
        let middle = raw.len() / 2;
        raw[middle] = if raw[middle] == 'A' { 'B' } else { 'A' };
        let raw: String = raw.into_iter().collect();
        // Error messages quote the receipt: name it as the script did.
        names.alias(text, &raw);
        return Ok(raw);
    }
    names
        .raw(text)
        .map(str::to_string)
        .ok_or(format!("{text} names nothing yet"))
}

/// A named value (`mN`, `tN`, `kN`) or a literal one.
fn named(text: &str, names: &Names) -> String {
    let literal = text.strip_prefix("raw:");
    literal.or(names.raw(text)).unwrap_or(text).to_string()
}

/// Queue attributes from `Name=Value` words, with the short forms of the redrive policies.
fn queue_attributes(pairs: Vec<(String, String)>) -> (Map<String, Value>, Map<String, Value>) {
    let mut attributes = Map::new();
    let mut tags = Map::new();
    for (name, value) in pairs {
        if let Some(key) = name.strip_prefix("tag.") {
            tags.insert(key.to_string(), value.into());
            continue;
        }
        let value = match (name.as_str(), value.split_once(':')) {
            ("RedrivePolicy", Some((queue, count))) => json!({
                "deadLetterTargetArn": arn(queue),
                "maxReceiveCount": count,
            })
            .to_string(),
            ("RedriveAllowPolicy", Some(("byQueue", queues))) => json!({
                "redrivePermission": "byQueue",
                "sourceQueueArns": queues.split(',').map(arn).collect::<Vec<_>>(),
            })
            .to_string(),
            ("RedriveAllowPolicy", None) if value != "none" => {
                json!({ "redrivePermission": value }).to_string()
            }
            (_, _) if value == "none" => String::new(),
            _ => value,
        };
        attributes.insert(name, value.into());
    }
    (attributes, tags)
}

/// One message to send, from its fields (`body`, `delay`, `group`, `dedup`, `attr.NAME`,
/// `trace`).
fn message(fields: Vec<(String, String)>) -> Result<Map<String, Value>, Problem> {
    let mut message = Map::new();
    let mut attributes = Map::new();
    for (key, value) in fields {
        let (member, value): (&str, Value) = match key.as_str() {
            "body" => ("MessageBody", value.into()),
            "delay" => {
                let seconds: i64 = value
                    .trim_end_matches('s')
                    .parse()
                    .map_err(|_| "bad delay")?;
                ("DelaySeconds", seconds.into())
            }
            "group" => ("MessageGroupId", value.into()),
            "dedup" => ("MessageDeduplicationId", value.into()),
            "trace" => (
                "MessageSystemAttributes",
                json!({"AWSTraceHeader": {"DataType": "String", "StringValue": value}}),
            ),
            other => {
                let name = other
                    .strip_prefix("attr.")
                    .ok_or(format!("unknown {other}="))?;
                let (data_type, text) = value.split_once(':').ok_or("attr.NAME=TYPE:VALUE")?;
                let kind = if data_type.starts_with("Binary") {
                    "BinaryValue"
                } else {
                    "StringValue"
                };
                attributes.insert(name.into(), json!({"DataType": data_type, kind: text}));
                continue;
            }
        };
        message.insert(member.into(), value);
    }
    if !attributes.is_empty() {
        message.insert("MessageAttributes".into(), attributes.into());
    }
    Ok(message)
}

/// `key=value` words, in order.
type Fields = Vec<(String, String)>;

/// Batch entries from `ID.field=value` words, in the order their ids first appear.
fn entries(pairs: Fields) -> Result<Vec<(String, Fields)>, Problem> {
    let mut entries: Vec<(String, Fields)> = Vec::new();
    for (key, value) in pairs {
        let (id, field) = key
            .split_once('.')
            .ok_or(format!("expected ID.field=, got {key}="))?;
        match entries.iter_mut().find(|(known, _)| known == id) {
            Some((_, fields)) => fields.push((field.to_string(), value)),
            None => entries.push((id.to_string(), vec![(field.to_string(), value)])),
        }
    }
    Ok(entries)
}

/// Puts `value` at `member` if the argument was given.
fn optional(body: &mut Map<String, Value>, member: &str, value: Option<impl Into<Value>>) {
    if let Some(value) = value {
        body.insert(member.to_string(), value.into());
    }
}

/// The request of a command. `verb` is its first word (`move` commands have two).
pub fn build(verb: &str, args: &mut Args, names: &mut Names) -> Result<Request, Problem> {
    let user_agent = args.take("client");
    let verbose = args.flag("verbose");
    let (action, body) = if verb.starts_with("move ") {
        move_request(verb, args, names)?
    } else if let Some(request) = queue_request(verb, args, names)? {
        request
    } else {
        message_request(verb, args, names)?
    };
    Ok(Request {
        spec: Spec { action, verbose },
        body: Value::Object(body),
        user_agent,
    })
}

type Built = (&'static str, Map<String, Value>);

fn queue_request(verb: &str, args: &mut Args, names: &Names) -> Result<Option<Built>, Problem> {
    let mut body = Map::new();
    let action = match verb {
        "list" => {
            optional(&mut body, "QueueNamePrefix", args.take("prefix"));
            optional(&mut body, "MaxResults", args.number("max")?);
            optional(
                &mut body,
                "NextToken",
                args.take("token").map(|t| named(&t, names)),
            );
            return Ok(Some(("ListQueues", body)));
        }
        "create" | "url" => {
            body.insert("QueueName".into(), args.positional("a queue name")?.into());
            if verb == "url" {
                return Ok(Some(("GetQueueUrl", body)));
            }
            let (attributes, tags) = queue_attributes(args.take_named());
            optional(
                &mut body,
                "Attributes",
                (!attributes.is_empty()).then_some(attributes),
            );
            optional(&mut body, "tags", (!tags.is_empty()).then_some(tags));
            return Ok(Some(("CreateQueue", body)));
        }
        "sources" => "ListDeadLetterSourceQueues",
        "attributes" => "GetQueueAttributes",
        "set" => "SetQueueAttributes",
        "tag" => "TagQueue",
        "untag" => "UntagQueue",
        "tags" => "ListQueueTags",
        "purge" => "PurgeQueue",
        "delete-queue" => "DeleteQueue",
        _ => return Ok(None),
    };
    body.insert(
        "QueueUrl".into(),
        url(&args.positional("a queue name")?).into(),
    );
    match verb {
        "sources" => {
            optional(&mut body, "MaxResults", args.number("max")?);
            optional(
                &mut body,
                "NextToken",
                args.take("token").map(|t| named(&t, names)),
            );
        }
        "attributes" => {
            let mut wanted = args.rest();
            if wanted.is_empty() {
                wanted.push("All".into());
            }
            body.insert("AttributeNames".into(), wanted.into());
        }
        "set" => {
            body.insert(
                "Attributes".into(),
                queue_attributes(args.take_named()).0.into(),
            );
        }
        "tag" => {
            let tags: Map<String, Value> = args
                .take_named()
                .into_iter()
                .map(|(k, v)| (k, v.into()))
                .collect();
            body.insert("Tags".into(), tags.into());
        }
        "untag" => {
            body.insert("TagKeys".into(), args.rest().into());
        }
        _ => {}
    }
    Ok(Some((action, body)))
}

fn message_request(verb: &str, args: &mut Args, names: &mut Names) -> Result<Built, Problem> {
    let queue = args.positional("a queue name")?;
    let mut body = Map::new();
    body.insert("QueueUrl".into(), url(&queue).into());
    let action = match verb {
        "send" => {
            body.extend(message(args.take_named())?);
            "SendMessage"
        }
        "send-batch" => {
            let entries = entries(args.take_named())?
                .into_iter()
                .map(|(id, fields)| {
                    let mut entry = message(fields)?;
                    entry.insert("Id".into(), id.into());
                    Ok(Value::Object(entry))
                })
                .collect::<Result<Vec<Value>, Problem>>()?;
            body.insert("Entries".into(), entries.into());
            "SendMessageBatch"
        }
        "receive" => {
            receive(&mut body, args)?;
            "ReceiveMessage"
        }
        "delete" | "visibility" | "fail" => {
            let receipt = receipt(&args.positional("a receipt")?, names)?;
            body.insert("ReceiptHandle".into(), receipt.into());
            match verb {
                "delete" => "DeleteMessage",
                "visibility" => {
                    let seconds = args.positional("a visibility timeout")?;
                    let seconds: i64 = seconds
                        .trim_end_matches('s')
                        .parse()
                        .map_err(|_| "bad timeout")?;
                    body.insert("VisibilityTimeout".into(), seconds.into());
                    "ChangeMessageVisibility"
                }
                _ => {
                    optional(&mut body, "Reason", args.take("reason"));
                    "LeaseqFailMessage"
                }
            }
        }
        "delete-batch" | "visibility-batch" => {
            body.insert("Entries".into(), receipt_entries(verb, args, names)?.into());
            if verb == "delete-batch" {
                "DeleteMessageBatch"
            } else {
                "ChangeMessageVisibilityBatch"
            }
        }
        "peek" => {
            optional(&mut body, "MaxNumberOfMessages", args.number("max")?);
            optional(&mut body, "NextToken", args.take("after"));
            "LeaseqPeekMessages"
        }
        "history" => {
            body.insert(
                "MessageId".into(),
                named(&args.positional("a message")?, names).into(),
            );
            "LeaseqGetMessageHistory"
        }
        other => return Err(format!("unknown command {other:?}")),
    };
    Ok((action, body))
}

/// The entries of a delete or visibility batch: `ID=RECEIPT` or `ID=RECEIPT:SECONDS`.
fn receipt_entries(verb: &str, args: &mut Args, names: &mut Names) -> Result<Vec<Value>, Problem> {
    let mut entries = Vec::new();
    for (id, value) in args.take_named() {
        // `RECEIPT:SECONDS` in visibility batches (a raw receipt may hold colons).
        let split = value
            .rsplit_once(':')
            .filter(|_| verb == "visibility-batch");
        let (handle, seconds) = match split {
            Some((handle, seconds)) => (handle.to_string(), seconds.parse::<i64>().ok()),
            None => (value, None),
        };
        let mut entry = json!({"Id": id, "ReceiptHandle": receipt(&handle, names)?});
        if let Some(seconds) = seconds {
            entry["VisibilityTimeout"] = seconds.into();
        }
        entries.push(entry);
    }
    Ok(entries)
}

fn receive(body: &mut Map<String, Value>, args: &mut Args) -> Result<(), Problem> {
    optional(body, "MaxNumberOfMessages", args.number("max")?);
    optional(body, "VisibilityTimeout", args.number("visibility")?);
    match args.take("wait").as_deref() {
        // The queue's ReceiveMessageWaitTimeSeconds decides.
        Some("queue") => {}
        Some(seconds) => {
            let seconds: i64 = seconds
                .trim_end_matches('s')
                .parse()
                .map_err(|_| "bad wait")?;
            body.insert("WaitTimeSeconds".into(), seconds.into());
        }
        None => {
            body.insert("WaitTimeSeconds".into(), 0.into());
        }
    }
    optional(body, "ReceiveRequestAttemptId", args.take("attempt"));
    body.insert("MessageSystemAttributeNames".into(), json!(["All"]));
    body.insert("MessageAttributeNames".into(), json!(["All"]));
    Ok(())
}

fn move_request(verb: &str, args: &mut Args, names: &Names) -> Result<Built, Problem> {
    let mut body = Map::new();
    let action = match verb {
        "move start" | "move list" => {
            body.insert(
                "SourceArn".into(),
                arn(&args.positional("a source queue")?).into(),
            );
            if verb == "move list" {
                optional(&mut body, "MaxResults", args.number("max")?);
                return Ok(("ListMessageMoveTasks", body));
            }
            optional(
                &mut body,
                "DestinationArn",
                args.take("to").map(|queue| arn(&queue)),
            );
            "StartMessageMoveTask"
        }
        "move cancel" => "CancelMessageMoveTask",
        "move pause" => "LeaseqPauseMessageMoveTask",
        "move resume" => "LeaseqResumeMessageMoveTask",
        "move update" => "LeaseqUpdateMessageMoveTask",
        other => return Err(format!("unknown command {other:?}")),
    };
    if action != "StartMessageMoveTask" {
        let task = named(&args.positional("a task")?, names);
        body.insert("TaskHandle".into(), task.into());
    }
    if action != "CancelMessageMoveTask" {
        optional(
            &mut body,
            "MaxNumberOfMessagesPerSecond",
            args.number("rate")?,
        );
        optional(&mut body, "LeaseqMessageLimit", args.number("limit")?);
    }
    Ok((action, body))
}
