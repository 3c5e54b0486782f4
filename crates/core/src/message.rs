//! What a producer sends: body, attributes, and the checks SQS applies to them.
//!
//! A [`Payload`] is immutable once accepted and shared (`Arc`) between the queue, the record that
//! logged it and every receive that returns it, so a delivery never copies a body. With a durable
//! log, a message keeps a [`PayloadRef::Stored`] [`Location`] of the record that carries its
//! payload, so a backlog costs memory for its metadata only; the server reads bodies back from
//! the log when it delivers them, except for the most recent, which stay in memory within a
//! budget ([`PayloadRef::Cached`]).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

use crate::error::{AttributeProblem, Error, Field, Result};
use crate::limits::Limits;

/// A message's stable identity (a UUID), the same across all its delivery attempts.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MessageId(pub [u8; 16]);

impl MessageId {
    /// A version-4 UUID made from 16 bytes the caller chose to be unique (random, or a random
    /// seed plus a counter): the version and variant bits are set over them.
    pub fn from_random(mut bytes: [u8; 16]) -> MessageId {
        bytes[6] = (bytes[6] & 0x0f) | 0x40;
        bytes[8] = (bytes[8] & 0x3f) | 0x80;
        MessageId(bytes)
    }
}

impl std::str::FromStr for MessageId {
    type Err = uuid::Error;

    /// A message id as [`MessageId`]'s `Display` writes it (any UUID form `uuid` accepts).
    fn from_str(text: &str) -> std::result::Result<MessageId, uuid::Error> {
        uuid::Uuid::parse_str(text).map(|uuid| MessageId(uuid.into_bytes()))
    }
}

impl fmt::Display for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        uuid::Uuid::from_bytes(self.0).hyphenated().fmt(f)
    }
}

impl fmt::Debug for MessageId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// One message attribute: a data type (`String`, `Number`, `Binary`, each optionally with a
/// custom suffix like `Number.float`) and a value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessageAttribute {
    /// The full data type, custom suffix included.
    pub data_type: String,
    /// The value; `String` and `Number` types carry text, `Binary` carries bytes.
    pub value: AttributeValue,
}

/// The value of a [`MessageAttribute`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AttributeValue {
    /// Text (for `String` and `Number` types).
    Text(String),
    /// Bytes (for `Binary` types).
    Binary(Vec<u8>),
}

/// The base type of a data type string.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BaseType {
    /// `String`.
    String,
    /// `Number`.
    Number,
    /// `Binary`.
    Binary,
}

impl MessageAttribute {
    /// The base type, or `None` if the data type is not one SQS knows.
    pub fn base_type(&self) -> Option<BaseType> {
        base_type(&self.data_type)
    }

    fn size_bytes(&self) -> usize {
        self.data_type.len()
            + match &self.value {
                AttributeValue::Text(text) => text.len(),
                AttributeValue::Binary(bytes) => bytes.len(),
            }
    }
}

fn base_type(data_type: &str) -> Option<BaseType> {
    let (base, custom) = match data_type.split_once('.') {
        Some((base, custom)) => (base, Some(custom)),
        None => (data_type, None),
    };
    if custom.is_some_and(str::is_empty) {
        return None;
    }
    match base {
        "String" => Some(BaseType::String),
        "Number" => Some(BaseType::Number),
        "Binary" => Some(BaseType::Binary),
        _ => None,
    }
}

/// Where a payload is kept: in memory, in the log record at a [`Location`], or both.
///
/// Equality is by where the payload is durable: a [`PayloadRef::Cached`] payload equals the
/// [`PayloadRef::Stored`] one of the same location (the copy in memory is a cache, not state;
/// a snapshot writes both alike, and a recovered engine holds whichever its replay left).
#[derive(Clone, Debug)]
pub enum PayloadRef {
    /// In memory (without a durable log, and from a send until its record is logged).
    Inline(Arc<Payload>),
    /// In the log, in the record at this location (a `Send` or `Relocate` that carries it).
    Stored(Location),
    /// In the log, and still in memory: a payload logged recently, kept within the engine's
    /// payload cache budget ([`crate::EngineConfig::payload_cache_bytes`]) so that a receive
    /// soon after the send need not read it back from the log. (Boxed: every message holds a
    /// `PayloadRef`, and a location beside a pointer would make each 8 bytes larger.)
    Cached(Box<CachedPayload>),
}

/// A payload logged at `location` and kept in memory too (see [`PayloadRef::Cached`]).
#[derive(Clone, Debug)]
pub struct CachedPayload {
    /// Where its record is in the log.
    pub location: Location,
    /// The payload itself: the one that record carries.
    pub payload: Arc<Payload>,
}

impl PartialEq for PayloadRef {
    fn eq(&self, other: &PayloadRef) -> bool {
        match (self, other) {
            (PayloadRef::Inline(a), PayloadRef::Inline(b)) => a == b,
            (PayloadRef::Inline(_), _) | (_, PayloadRef::Inline(_)) => false,
            _ => self.stored() == other.stored(),
        }
    }
}

impl Eq for PayloadRef {}

impl PayloadRef {
    /// The payload if it is in memory.
    pub fn inline(&self) -> Option<&Arc<Payload>> {
        match self {
            PayloadRef::Inline(payload) => Some(payload),
            PayloadRef::Cached(cached) => Some(&cached.payload),
            PayloadRef::Stored(_) => None,
        }
    }

    /// The location if it is in the log.
    pub fn stored(&self) -> Option<Location> {
        match self {
            PayloadRef::Inline(_) => None,
            PayloadRef::Stored(location) => Some(*location),
            PayloadRef::Cached(cached) => Some(cached.location),
        }
    }
}

/// Where a record is in the log. The engine treats it as an opaque address it stores and hands
/// back; only the server and the log give it meaning. Fields are `u32` to keep it (and so every
/// message) small: a segment number, an offset in a segment (segments and records are far below
/// 4 GiB) and the record's length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Location {
    /// The log segment.
    pub segment: u32,
    /// Where the record's frame starts in the segment.
    pub offset: u32,
    /// The length of the record (without framing).
    pub len_bytes: u32,
}

/// Everything a message carries besides its queue state. Shared, never mutated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Payload {
    /// The body: non-empty text in SQS's character set.
    pub body: String,
    /// Message attributes by name (sorted, as SQS's MD5 needs them).
    pub attributes: BTreeMap<String, MessageAttribute>,
    /// The `AWSTraceHeader` system attribute.
    pub trace_header: Option<String>,
    /// Who sent it (`SenderId`).
    pub sender_id: Arc<str>,
    /// The MD5 digest of the body (what SQS returns as `MD5OfMessageBody` and `MD5OfBody`),
    /// computed once, by [`Payload::new`], and kept in the message's record (format version 8),
    /// so that no receive computes it again. Private, so that it always is the body's.
    body_md5: [u8; 16],
}

impl Payload {
    /// A payload, with its body's MD5.
    pub fn new(
        body: String,
        attributes: BTreeMap<String, MessageAttribute>,
        trace_header: Option<String>,
        sender_id: Arc<str>,
    ) -> Payload {
        let body_md5 = body_md5(&body);
        Payload::with_body_md5(body, attributes, trace_header, sender_id, body_md5)
    }

    /// A payload with the MD5 its record carried (the codec: a record's MD5 was computed from
    /// the same body when it was written, and the log's checksums keep the two together), or that
    /// its sender computed ([`validate_send`], which debug builds check).
    pub(crate) fn with_body_md5(
        body: String,
        attributes: BTreeMap<String, MessageAttribute>,
        trace_header: Option<String>,
        sender_id: Arc<str>,
        body_md5: [u8; 16],
    ) -> Payload {
        Payload {
            body,
            attributes,
            trace_header,
            sender_id,
            body_md5,
        }
    }

    /// The MD5 digest of the body.
    pub fn body_md5(&self) -> &[u8; 16] {
        &self.body_md5
    }
}

/// The MD5 digest of a body's UTF-8 bytes.
pub(crate) fn body_md5(body: &str) -> [u8; 16] {
    crate::md5_lanes::digest(body.as_bytes())
}

/// A send request, before validation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SendInput {
    /// The message body.
    pub body: String,
    /// Message attributes by name.
    pub attributes: BTreeMap<String, MessageAttribute>,
    /// The `AWSTraceHeader` system attribute.
    pub trace_header: Option<String>,
    /// Per-message delay; the queue's `DelaySeconds` when `None`.
    pub delay_seconds: Option<u32>,
    /// Who sends it.
    pub sender_id: Arc<str>,
    /// `MessageGroupId`: required on FIFO queues; ignored on standard queues (where SQS uses it
    /// for fair queues, which leaseq does not have yet).
    pub group_id: Option<String>,
    /// `MessageDeduplicationId`: FIFO queues only.
    pub deduplication_id: Option<String>,
}

impl SendInput {
    /// A message with just a body, from an anonymous sender.
    pub fn body(body: impl Into<String>) -> SendInput {
        SendInput {
            body: body.into(),
            attributes: BTreeMap::new(),
            trace_header: None,
            delay_seconds: None,
            sender_id: Arc::from(""),
            group_id: None,
            deduplication_id: None,
        }
    }

    /// This message in FIFO group `group_id`.
    pub fn in_group(mut self, group_id: impl Into<String>) -> SendInput {
        self.group_id = Some(group_id.into());
        self
    }
}

/// Checks a send against SQS's rules and the queue's size limit, and returns the payload to
/// store, with `body_md5`, the MD5 of the input's body (computed by the caller, for a batch all at
/// once: see [`crate::md5_lanes`]; debug builds check it).
pub fn validate_send(
    input: SendInput,
    body_md5: [u8; 16],
    size_max_bytes: u32,
    limits: &Limits,
) -> Result<Payload> {
    debug_assert_eq!(body_md5, self::body_md5(&input.body), "not the body's MD5");
    if input.body.is_empty() {
        return Err(Error::Missing(Field::MessageBody));
    }
    check_characters(&input.body, Field::MessageBody)?;
    if let Some(delay) = input.delay_seconds {
        if delay > limits.delay_max_seconds {
            return Err(Error::out_of_range(
                Field::MessageDelaySeconds,
                delay,
                0u32,
                limits.delay_max_seconds,
            ));
        }
    }
    if input.attributes.len() > limits.message_attributes_max {
        return Err(Error::TooMany {
            field: Field::MessageAttributes,
            count: input.attributes.len(),
            max: limits.message_attributes_max,
        });
    }
    let mut size_bytes = input.body.len();
    for (name, attribute) in &input.attributes {
        validate_attribute(name, attribute, limits)?;
        size_bytes += name.len() + attribute.size_bytes();
    }
    if let Some(header) = &input.trace_header {
        check_characters(header, Field::MessageSystemAttributes)?;
    }
    if size_bytes > size_max_bytes as usize {
        return Err(Error::MessageTooLong {
            size_bytes,
            max_bytes: size_max_bytes,
        });
    }
    Ok(Payload::with_body_md5(
        input.body,
        input.attributes,
        input.trace_header,
        input.sender_id,
        body_md5,
    ))
}

/// SQS accepts only XML 1.0 characters: #x9 | #xA | #xD | #x20–#xD7FF | #xE000–#xFFFD |
/// #x10000–#x10FFFF. (Rust strings cannot hold surrogates, so those need no check.)
fn check_characters(text: &str, field: Field) -> Result<()> {
    let allowed = |c: char| {
        matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}')
            || c >= '\u{10000}'
    };
    // Fast path: ASCII from U+0020 on is always allowed.
    if crate::bytes::is_ascii_from_space(text.as_bytes()) {
        return Ok(());
    }
    if let Some(bad) = text.chars().find(|&c| !allowed(c)) {
        return Err(Error::InvalidCharacter {
            field,
            character: bad,
        });
    }
    Ok(())
}

/// What is wrong with a message attribute's name, if anything. SQS's rules (developer guide,
/// "Amazon SQS message attributes"): up to 256 characters, alphanumeric, `_`, `-` and `.`; not
/// starting with `AWS.` or `Amazon.` (any casing); no leading or trailing period, no two in a
/// row. "Alphanumeric" is Unicode's, as AWS answers it: a name such as `attr.1øßä` is accepted
/// and `§` is not (LocalStack's AWS-validated `test_send_message_with_invalid_string_attributes`),
/// where the guide lists only A-Z, a-z and 0-9.
fn name_problem(name: &str, length_max: usize) -> Option<AttributeProblem> {
    if name.is_empty() {
        return Some(AttributeProblem::NameEmpty);
    }
    if name.chars().count() > length_max {
        return Some(AttributeProblem::NameLength { length_max });
    }
    let lower = name.to_lowercase();
    if lower.starts_with("aws.") || lower.starts_with("amazon.") {
        return Some(AttributeProblem::NameReservedPrefix);
    }
    if name.starts_with('.') {
        return Some(AttributeProblem::NameLeadingPeriod);
    }
    if name.ends_with('.') {
        return Some(AttributeProblem::NameTrailingPeriod);
    }
    let mut previous = None;
    for character in name.chars() {
        if !(character.is_alphanumeric() || matches!(character, '_' | '-' | '.')) {
            return Some(AttributeProblem::NameCharacter { character });
        }
        if character == '.' && previous == Some('.') {
            return Some(AttributeProblem::NameSuccessivePeriods);
        }
        previous = Some(character);
    }
    None
}

fn validate_attribute(name: &str, attribute: &MessageAttribute, limits: &Limits) -> Result<()> {
    let bad = |problem: AttributeProblem| {
        Err(Error::InvalidMessageAttribute {
            name: name.to_string(),
            problem,
        })
    };
    if let Some(problem) = name_problem(name, limits.attribute_name_length_max) {
        return bad(problem);
    }
    let length_max = limits.attribute_name_length_max;
    if attribute.data_type.len() > length_max {
        return bad(AttributeProblem::DataTypeLength { length_max });
    }
    match (attribute.base_type(), &attribute.value) {
        (None, _) => bad(AttributeProblem::UnknownDataType),
        (Some(BaseType::Binary), AttributeValue::Binary(bytes)) if !bytes.is_empty() => Ok(()),
        (Some(BaseType::String), AttributeValue::Text(text)) if !text.is_empty() => {
            check_characters(text, Field::MessageAttributes)
        }
        (Some(BaseType::Number), AttributeValue::Text(text)) if !text.is_empty() => {
            if is_sqs_number(text) {
                Ok(())
            } else {
                bad(AttributeProblem::NotANumber)
            }
        }
        _ => bad(AttributeProblem::MissingValue {
            data_type: attribute.data_type.clone(),
        }),
    }
}

/// SQS numbers: optional sign, digits with an optional fraction and exponent, at most 38
/// significant digits, magnitude between 10^-128 and 10^+126.
fn is_sqs_number(text: &str) -> bool {
    let text = text.trim();
    let unsigned = text.strip_prefix(['-', '+']).unwrap_or(text);
    let (mantissa, exponent) = match unsigned.split_once(['e', 'E']) {
        Some((m, e)) => match e.parse::<i32>() {
            Ok(e) => (m, e),
            Err(_) => return false,
        },
        None => (unsigned, 0),
    };
    let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if int_part.is_empty() && frac_part.is_empty() {
        return false;
    }
    if !int_part
        .bytes()
        .chain(frac_part.bytes())
        .all(|b| b.is_ascii_digit())
    {
        return false;
    }
    let digits: String = int_part.chars().chain(frac_part.chars()).collect();
    let significant = digits.trim_start_matches('0');
    if significant.is_empty() {
        return true; // zero
    }
    let significant_trimmed = significant.trim_end_matches('0');
    if significant_trimmed.len() > 38 {
        return false;
    }
    // Decimal exponent of the leading significant digit.
    let leading_zeros = digits.len() - significant.len();
    let magnitude = exponent as i64 + int_part.len() as i64 - 1 - leading_zeros as i64;
    (-128..=126).contains(&magnitude)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// A text passes the check (with its fast path for ASCII from space on) if and only if
        /// it holds only characters SQS allows, at every length (whole blocks and the bytes
        /// after them).
        #[test]
        fn the_character_check_allows_what_sqs_allows(
            bytes in prop::collection::vec(
                prop_oneof![8 => 0x20u8..0x80, 1 => any::<u8>()],
                0..70,
            )
        ) {
            if let Ok(text) = std::str::from_utf8(&bytes) {
                let allowed = text.chars().all(|c| {
                    matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}')
                        || c >= '\u{10000}'
                });
                prop_assert_eq!(check_characters(text, Field::MessageBody).is_ok(), allowed);
            }
        }
    }

    #[test]
    fn numbers_follow_sqs_rules() {
        for ok in ["0", "-1", "3.14", "1e10", "0.000", "+7", ".5", "5."] {
            assert!(is_sqs_number(ok), "{ok}");
        }
        for bad in ["", "abc", "1e", "--1", "1.2.3", "1e200", "1e-200", "0x10"] {
            assert!(!is_sqs_number(bad), "{bad}");
        }
        assert!(!is_sqs_number(&"9".repeat(39)));
        assert!(is_sqs_number(&"9".repeat(38)));
    }

    #[test]
    fn attribute_names_follow_sqs_rules() {
        for ok in [
            "a",
            "Help.Me",
            "a_b-c.d",
            "attr.1øßä",
            "AWSx",
            "amazonia.x",
            &"n".repeat(256),
        ] {
            assert_eq!(name_problem(ok, 256), None, "{ok}");
        }
        let cases = [
            ("", AttributeProblem::NameEmpty),
            (
                &*"n".repeat(257),
                AttributeProblem::NameLength { length_max: 256 },
            ),
            ("aWs.x", AttributeProblem::NameReservedPrefix),
            ("AMAZON.x", AttributeProblem::NameReservedPrefix),
            (".x", AttributeProblem::NameLeadingPeriod),
            ("x.", AttributeProblem::NameTrailingPeriod),
            ("a..b", AttributeProblem::NameSuccessivePeriods),
            ("a!b", AttributeProblem::NameCharacter { character: '!' }),
            ("a§b", AttributeProblem::NameCharacter { character: '§' }),
            ("a b", AttributeProblem::NameCharacter { character: ' ' }),
        ];
        for (name, problem) in cases {
            assert_eq!(name_problem(name, 256), Some(problem), "{name:?}");
        }
    }

    #[test]
    fn message_id_is_a_v4_uuid() {
        let id = MessageId::from_random([0xff; 16]).to_string();
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "4");
    }
}
