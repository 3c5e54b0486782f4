//! The script language's words: tokens, `key=value` arguments, times, queue attributes and
//! message attributes.

use std::fmt::Write as _;

use leaseq_core::{
    AttributeValue, DeduplicationScope, FifoThroughputLimit, Limits, MessageAttribute,
    QueueConfigPatch, RedriveAllowPolicy, RedrivePolicy,
};

/// What a harness error is: a script that does not parse. Engine errors are output, not this.
pub type Problem = String;

/// Settings the engine stores without interpreting; any other unknown attribute is a typo.
const PASSTHROUGH_ATTRIBUTES: [&str; 3] = [
    "SqsManagedSseEnabled",
    "KmsMasterKeyId",
    "KmsDataKeyReusePeriodSeconds",
];

/// A command's words: positional ones in order, and `key=value` ones.
pub struct Args {
    positional: Vec<String>,
    named: Vec<(String, String)>,
}

impl Args {
    pub fn parse(command: &str) -> Result<Args, Problem> {
        let mut args = Args {
            positional: Vec::new(),
            named: Vec::new(),
        };
        for token in tokenize(command)? {
            match token.split_once('=') {
                Some((key, value)) if !key.is_empty() => {
                    if args.named.iter().any(|(k, _)| k == key) {
                        return Err(format!("{key}= given twice"));
                    }
                    args.named.push((key.to_string(), value.to_string()));
                }
                _ => args.positional.push(token),
            }
        }
        args.positional.reverse(); // Taken from the end, in order.
        Ok(args)
    }

    pub fn positional(&mut self, what: &str) -> Result<String, Problem> {
        self.positional
            .pop()
            .ok_or_else(|| format!("expected {what}"))
    }

    pub fn optional_positional(&mut self) -> Option<String> {
        self.positional.pop()
    }

    pub fn take_all_positional(&mut self) -> Vec<String> {
        let mut all = std::mem::take(&mut self.positional);
        all.reverse();
        all
    }

    pub fn flag(&mut self, word: &str) -> bool {
        let before = self.positional.len();
        self.positional.retain(|p| p != word);
        self.positional.len() != before
    }

    pub fn named(&mut self, key: &str) -> Option<String> {
        let index = self.named.iter().position(|(k, _)| k == key)?;
        Some(self.named.remove(index).1)
    }

    pub fn take_prefixed(&mut self, prefix: &str) -> Vec<(String, String)> {
        let (taken, kept) = std::mem::take(&mut self.named)
            .into_iter()
            .partition(|(k, _)| k.starts_with(prefix));
        self.named = kept;
        taken
            .into_iter()
            .map(|(k, v): (String, String)| (k[prefix.len()..].to_string(), v))
            .collect()
    }

    pub fn take_all_named(&mut self) -> Vec<(String, String)> {
        std::mem::take(&mut self.named)
    }

    pub fn finish(self) -> Result<(), Problem> {
        if let Some(word) = self.positional.last() {
            return Err(format!("unexpected argument {word:?}"));
        }
        if let Some((key, _)) = self.named.first() {
            return Err(format!("unexpected argument {key}="));
        }
        Ok(())
    }
}

/// Splits a command into words; double quotes group and expand escapes.
pub fn tokenize(command: &str) -> Result<Vec<String>, Problem> {
    let mut tokens = Vec::new();
    let mut current: Option<String> = None;
    let mut chars = command.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            c if c.is_whitespace() => tokens.extend(current.take()),
            '"' => {
                let token = current.get_or_insert_with(String::new);
                loop {
                    match chars.next() {
                        None => return Err("unterminated quote".into()),
                        Some('"') => break,
                        Some('\\') => expand_escape(&mut chars, token)?,
                        Some(c) => token.push(c),
                    }
                }
            }
            c => current.get_or_insert_with(String::new).push(c),
        }
    }
    tokens.extend(current);
    Ok(tokens)
}

fn expand_escape(
    chars: &mut std::iter::Peekable<std::str::Chars<'_>>,
    out: &mut String,
) -> Result<(), Problem> {
    let until_brace = |chars: &mut std::iter::Peekable<std::str::Chars<'_>>| {
        if chars.next() != Some('{') {
            return Err("expected `{` after the escape".to_string());
        }
        let inner: String = chars.by_ref().take_while(|&c| c != '}').collect();
        Ok(inner)
    };
    match chars.next() {
        Some('n') => out.push('\n'),
        Some('t') => out.push('\t'),
        Some('r') => out.push('\r'),
        Some('\\') => out.push('\\'),
        Some('"') => out.push('"'),
        Some('u') => {
            let hex = until_brace(chars)?;
            let code = u32::from_str_radix(&hex, 16).map_err(|e| format!("\\u{{{hex}}}: {e}"))?;
            out.push(char::from_u32(code).ok_or(format!("\\u{{{hex}}} is no char"))?);
        }
        Some('{') => {
            let inner: String = chars.by_ref().take_while(|&c| c != '}').collect();
            let (text, count) = inner
                .rsplit_once('*')
                .ok_or(format!("\\{{{inner}}}: expected TEXT*COUNT"))?;
            out.push_str(&text.repeat(parse_number::<usize>("repeat count", count)?));
        }
        other => return Err(format!("unknown escape \\{}", other.unwrap_or(' '))),
    }
    Ok(())
}

pub fn parse_number<T: std::str::FromStr>(what: &str, text: &str) -> Result<T, Problem>
where
    T::Err: std::fmt::Display,
{
    text.parse()
        .map_err(|e| format!("{what}: cannot parse {text:?}: {e}"))
}

pub use leaseq_testkit::golden::parse_time;

pub fn parse_at(text: &str, now_ms: u64) -> Result<u64, Problem> {
    match text.strip_prefix('+') {
        Some(relative) => Ok(now_ms + parse_time(relative)?),
        None => parse_time(text),
    }
}

/// A time that must be whole seconds (the API's unit).
pub fn parse_seconds(text: &str) -> Result<u32, Problem> {
    let ms = parse_time(text)?;
    if ms % 1000 != 0 {
        return Err(format!("{text:?} is not a whole number of seconds"));
    }
    u32::try_from(ms / 1000).map_err(|e| format!("{text:?}: {e}"))
}

/// Renders a time like the scripts write it: `61s`, `1500ms`, and compound above an hour
/// (`12h30s`, `4d`).
pub fn fmt_time(ms: u64) -> String {
    if ms < 3_600_000 {
        return if ms.is_multiple_of(1000) {
            format!("{}s", ms / 1000)
        } else {
            format!("{ms}ms")
        };
    }
    let units = [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
        ("ms", 1),
    ];
    let mut rest = ms;
    let mut text = String::new();
    for (unit, unit_ms) in units {
        if rest >= unit_ms {
            write!(text, "{}{unit}", rest / unit_ms).unwrap();
            rest %= unit_ms;
        }
    }
    text
}

pub fn set_limit(limits: &mut Limits, key: &str, value: &str) -> Result<(), Problem> {
    macro_rules! fields {
        ($($field:ident),*) => {
            match key {
                $(stringify!($field) => limits.$field = parse_number(key, value)?,)*
                _ => return Err(format!("unknown config key {key:?}")),
            }
        };
    }
    fields!(
        batch_size_max,
        message_size_max_bytes,
        message_size_min_bytes,
        message_attributes_max,
        in_flight_max,
        visibility_timeout_max_seconds,
        delay_max_seconds,
        retention_min_seconds,
        retention_max_seconds,
        wait_time_max_seconds,
        queue_name_length_max,
        purge_interval_ms,
        queue_name_reuse_delay_ms,
        tags_max,
        max_receive_count_max,
        attribute_name_length_max,
        redrive_generations_max,
        attempt_history_max
    );
    Ok(())
}

/// Queue attributes with SQS names → a patch.
pub fn parse_patch(attributes: Vec<(String, String)>) -> Result<QueueConfigPatch, Problem> {
    let mut patch = QueueConfigPatch::default();
    for (key, value) in attributes {
        let seconds = || parse_number::<u32>(&key, &value);
        match key.as_str() {
            "VisibilityTimeout" => patch.visibility_timeout_seconds = Some(seconds()?),
            "MessageRetentionPeriod" => patch.retention_seconds = Some(seconds()?),
            "DelaySeconds" => patch.delay_seconds = Some(seconds()?),
            "MaximumMessageSize" => patch.maximum_message_size_bytes = Some(seconds()?),
            "ReceiveMessageWaitTimeSeconds" => patch.receive_wait_time_seconds = Some(seconds()?),
            "RedrivePolicy" => patch.redrive_policy = Some(parse_redrive_policy(&value)?),
            "RedriveAllowPolicy" => {
                patch.redrive_allow_policy = Some(parse_redrive_allow_policy(&value)?)
            }
            "Policy" => patch.policy = Some((value != "none").then_some(value)),
            "FifoQueue" => patch.fifo_queue = Some(parse_number::<bool>(&key, &value)?),
            "ContentBasedDeduplication" => {
                patch.content_based_deduplication = Some(parse_number::<bool>(&key, &value)?)
            }
            "DeduplicationScope" => {
                patch.deduplication_scope = Some(match value.as_str() {
                    "queue" => DeduplicationScope::Queue,
                    "messageGroup" => DeduplicationScope::MessageGroup,
                    _ => return Err(format!("DeduplicationScope {value:?}: unknown")),
                })
            }
            "FifoThroughputLimit" => {
                patch.fifo_throughput_limit = Some(match value.as_str() {
                    "perQueue" => FifoThroughputLimit::PerQueue,
                    "perMessageGroupId" => FifoThroughputLimit::PerMessageGroupId,
                    _ => return Err(format!("FifoThroughputLimit {value:?}: unknown")),
                })
            }
            "LeaseqRedeliveryBackoff" => {
                patch.redelivery_backoff = Some(
                    leaseq_core::RedeliveryBackoff::parse(&value)
                        .map_err(|reason| format!("LeaseqRedeliveryBackoff: {reason}"))?,
                )
            }
            "LeaseqFairQueue" => patch.fair_queue = Some(parse_number::<bool>(&key, &value)?),
            "LeaseqFairInFlightMin" => patch.fair_in_flight_min = Some(seconds()?),
            "LeaseqFairComparableFactor" => patch.fair_comparable_factor = Some(seconds()?),
            "LeaseqFairProcessingWindowSeconds" => {
                patch.fair_processing_window_seconds = Some(seconds()?)
            }
            key if PASSTHROUGH_ATTRIBUTES.contains(&key) => {
                patch.passthrough.insert(key.to_string(), value);
            }
            key => return Err(format!("unknown queue attribute {key:?}")),
        }
    }
    Ok(patch)
}

/// `dlq:3` or `none`.
fn parse_redrive_policy(text: &str) -> Result<Option<RedrivePolicy>, Problem> {
    if text == "none" {
        return Ok(None);
    }
    let (queue, count) = text.rsplit_once(':').ok_or(format!(
        "RedrivePolicy {text:?}: expected QUEUE:MAX_RECEIVE_COUNT"
    ))?;
    Ok(Some(RedrivePolicy {
        dead_letter_queue: queue.to_string(),
        max_receive_count: parse_number("maxReceiveCount", count)?,
    }))
}

/// `allowAll`, `denyAll`, `byQueue:a,b` or `none`.
fn parse_redrive_allow_policy(text: &str) -> Result<Option<RedriveAllowPolicy>, Problem> {
    Ok(Some(match text {
        "none" => return Ok(None),
        "allowAll" => RedriveAllowPolicy::AllowAll,
        "denyAll" => RedriveAllowPolicy::DenyAll,
        _ => match text.strip_prefix("byQueue:") {
            Some(names) => RedriveAllowPolicy::ByQueue(
                names
                    .split(',')
                    .filter(|n| !n.is_empty())
                    .map(String::from)
                    .collect(),
            ),
            None => return Err(format!("RedriveAllowPolicy {text:?}: unknown")),
        },
    }))
}

/// `String:hello`, `Number.float:1.5`, `Binary:bytes` (the text's UTF-8 bytes).
pub fn parse_attribute(spec: &str) -> Result<MessageAttribute, Problem> {
    let (data_type, value) = spec
        .split_once(':')
        .ok_or(format!("attribute {spec:?}: expected TYPE:VALUE"))?;
    let value = if data_type.starts_with("Binary") {
        AttributeValue::Binary(value.as_bytes().to_vec())
    } else {
        AttributeValue::Text(value.to_string())
    };
    Ok(MessageAttribute {
        data_type: data_type.to_string(),
        value,
    })
}

/// A value as a script would write it: quoted with escapes when it is not a plain word, and
/// shortened when it is long.
pub fn quote(text: &str) -> String {
    if text.chars().count() > 40 {
        return format!("<{} bytes>", text.len());
    }
    let plain = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_graphic() && c != '"' && c != '\\');
    if plain {
        return text.to_string();
    }
    format!("{text:?}")
}

pub fn join_or_none(items: impl Iterator<Item = String>) -> String {
    let joined: Vec<String> = items.collect();
    if joined.is_empty() {
        "(none)".into()
    } else {
        joined.join(" ")
    }
}
