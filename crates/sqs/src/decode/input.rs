//! One view of a request's parameters over both protocols.
//!
//! A JSON request is an object tree (`{"Entries":[{"Id":"a"}]}`); a Query request is a flat
//! list of dotted names (`SendMessageBatchRequestEntry.1.Id=a`). Both describe the same Smithy
//! shapes, with different member names where the Query protocol flattens lists and maps. Each
//! action is decoded once, against [`Input`], which takes both names and reads whichever the
//! request has.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::ops::Bound;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde_json::{Map, Value};

use crate::error::{ErrorCode, SqsError};

/// Query parameters: name to raw (percent-decoded) bytes, borrowed from the request where they
/// needed no decoding (most names, and most values, message bodies included).
pub type Params<'a> = BTreeMap<Cow<'a, str>, Cow<'a, [u8]>>;

/// Where a JSON structure is in the request, for messages: written as `Entries.1.` (with the
/// trailing dot, empty at the top). A chain of borrowed steps, each pointing at the path of the
/// structure around it, so that reading a request builds no text per entry; the text is written
/// only when a message names a member.
#[derive(Clone, Copy, Debug)]
pub enum JsonPath<'a> {
    /// The whole request.
    Top,
    /// A member of the structure at `parent`.
    Member {
        /// Where the enclosing structure is.
        parent: &'a JsonPath<'a>,
        /// The member's name.
        member: &'a str,
        /// The 1-based position of the structure in the member's list, if the member is a list.
        index: Option<usize>,
    },
}

impl fmt::Display for JsonPath<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JsonPath::Top => Ok(()),
            JsonPath::Member {
                parent,
                member,
                index: None,
            } => write!(f, "{parent}{member}."),
            JsonPath::Member {
                parent,
                member,
                index: Some(index),
            } => write!(f, "{parent}{member}.{index}."),
        }
    }
}

/// A structure of the request: the whole request, or one entry of a list in it.
///
/// A nested `Input` borrows the one it was read from (for its path), which is why the accessors
/// that return one give it the lifetime of `&self`.
#[derive(Clone, Debug)]
pub enum Input<'a> {
    /// A JSON object.
    Json {
        /// Its members.
        object: &'a Map<String, Value>,
        /// Where it is in the request, for messages.
        path: JsonPath<'a>,
    },
    /// Query parameters below `prefix` (`""` or `SendMessageBatchRequestEntry.1.`).
    Query {
        /// All parameters of the request.
        params: &'a Params<'a>,
        /// The prefix of this structure's members.
        prefix: String,
    },
}

/// `parts` one after the other, in a `String` of their size (see [`crate::push_all`]).
fn joined(parts: &[&str]) -> String {
    let mut name = String::with_capacity(parts.iter().map(|part| part.len()).sum());
    crate::push_all(&mut name, parts);
    name
}

fn serialization(message: String) -> SqsError {
    SqsError::new(ErrorCode::SerializationException, message)
}

fn malformed(message: String) -> SqsError {
    SqsError::new(ErrorCode::MalformedQueryString, message)
}

fn hex_value(byte: u8) -> Option<u8> {
    match byte {
        b'0'..=b'9' => Some(byte - b'0'),
        b'a'..=b'f' => Some(byte - b'a' + 10),
        b'A'..=b'F' => Some(byte - b'A' + 10),
        _ => None,
    }
}

/// Decodes `application/x-www-form-urlencoded` bytes (`+` is a space, `%XX` a byte).
///
/// The runs between escapes are found with `memchr2` and copied whole: a message body is mostly
/// such a run, and decoding it a byte at a time cost about 20 instructions a byte (callgrind, a
/// Query SendMessage of 256 B).
fn percent_decode(bytes: &[u8]) -> Result<Cow<'_, [u8]>, SqsError> {
    let Some(first) = memchr::memchr2(b'+', b'%', bytes) else {
        return Ok(Cow::Borrowed(bytes));
    };
    let mut out = Vec::with_capacity(bytes.len());
    out.extend_from_slice(&bytes[..first]);
    let mut rest = &bytes[first..];
    while let Some(at) = memchr::memchr2(b'+', b'%', rest) {
        out.extend_from_slice(&rest[..at]);
        if rest[at] == b'+' {
            out.push(b' ');
            rest = &rest[at + 1..];
            continue;
        }
        let high = rest.get(at + 1).copied().and_then(hex_value);
        let low = rest.get(at + 2).copied().and_then(hex_value);
        let (Some(high), Some(low)) = (high, low) else {
            return Err(malformed(
                "The query string has an invalid percent-encoding.".into(),
            ));
        };
        out.push(high << 4 | low);
        rest = &rest[at + 3..];
    }
    out.extend_from_slice(rest);
    Ok(Cow::Owned(out))
}

/// The bytes of a blob member's text (base64, around which blanks are allowed), if it is valid.
pub fn decode_blob(text: &str) -> Option<Vec<u8>> {
    STANDARD.decode(text.trim()).ok()
}

/// Adds the pairs of a form body or query string to `params` (a later value of a name wins).
pub fn parse_form<'a>(bytes: &'a [u8], params: &mut Params<'a>) -> Result<(), SqsError> {
    let mut rest = bytes;
    while !rest.is_empty() {
        let end = memchr::memchr(b'&', rest).unwrap_or(rest.len());
        let pair = &rest[..end];
        rest = rest.get(end + 1..).unwrap_or_default();
        if pair.is_empty() {
            continue;
        }
        let (key, value) = match memchr::memchr(b'=', pair) {
            Some(at) => (&pair[..at], &pair[at + 1..]),
            None => (pair, &[][..]),
        };
        let not_text = |_| malformed("A parameter name is not valid UTF-8.".into());
        let key = match percent_decode(key)? {
            Cow::Borrowed(bytes) => Cow::Borrowed(std::str::from_utf8(bytes).map_err(not_text)?),
            Cow::Owned(bytes) => {
                Cow::Owned(String::from_utf8(bytes).map_err(|e| not_text(e.utf8_error()))?)
            }
        };
        params.insert(key, percent_decode(value)?);
    }
    Ok(())
}

impl<'a> Input<'a> {
    /// The whole JSON request.
    pub fn json(object: &'a Map<String, Value>) -> Input<'a> {
        Input::Json {
            object,
            path: JsonPath::Top,
        }
    }

    /// The whole Query request.
    pub fn query(params: &'a Params<'a>) -> Input<'a> {
        Input::Query {
            params,
            prefix: String::new(),
        }
    }

    /// The name of a member as this protocol spells it, for messages.
    pub fn display_name(&self, json: &str, query: &str) -> String {
        match self {
            Input::Json { path, .. } => format!("{path}{json}"),
            Input::Query { prefix, .. } => format!("{prefix}{query}"),
        }
    }

    fn json_member(&self, json: &str) -> Option<&'a Value> {
        match self {
            Input::Json { object, .. } => object.get(json).filter(|value| !value.is_null()),
            Input::Query { .. } => None,
        }
    }

    fn json_type_error(&self, json: &str, expected: &str) -> SqsError {
        serialization(format!(
            "Unexpected value for member {}: expected {expected}.",
            self.display_name(json, json)
        ))
    }

    /// A string member.
    pub fn string(&self, json: &str, query: &str) -> Result<Option<String>, SqsError> {
        match self {
            Input::Json { .. } => match self.json_member(json) {
                None => Ok(None),
                Some(Value::String(text)) => Ok(Some(text.clone())),
                Some(_) => Err(self.json_type_error(json, "a string")),
            },
            Input::Query { params, prefix } => {
                // At the top of the request a member's parameter is its own name, looked up
                // as it is (no copy).
                let found = if prefix.is_empty() {
                    params.get(query)
                } else {
                    params.get(joined(&[prefix, query]).as_str())
                };
                match found {
                    None => Ok(None),
                    Some(bytes) => String::from_utf8(bytes.to_vec()).map(Some).map_err(|_| {
                        malformed(format!("The value of {prefix}{query} is not valid UTF-8."))
                    }),
                }
            }
        }
    }

    /// A string member the action cannot do without.
    pub fn required_string(&self, json: &str, query: &str) -> Result<String, SqsError> {
        self.string(json, query)?
            .ok_or_else(|| SqsError::missing_parameter(&self.display_name(json, query)))
    }

    /// An integer member.
    pub fn integer(&self, json: &str, query: &str) -> Result<Option<i64>, SqsError> {
        match self {
            Input::Json { .. } => match self.json_member(json) {
                None => Ok(None),
                Some(Value::Number(number)) => number
                    .as_i64()
                    .map(Some)
                    .ok_or_else(|| self.json_type_error(json, "an integer")),
                Some(_) => Err(self.json_type_error(json, "an integer")),
            },
            Input::Query { .. } => match self.string(json, query)? {
                None => Ok(None),
                Some(text) => text.trim().parse::<i64>().map(Some).map_err(|_| {
                    SqsError::invalid_parameter(
                        &self.display_name(json, query),
                        &text,
                        "Must be an integer.",
                    )
                }),
            },
        }
    }

    /// The indexes `N` of the Query members `{prefix}{query}.N[.…]`, in order.
    fn query_indexes(params: &Params<'_>, prefix: &str, query: &str) -> Vec<u32> {
        let start = joined(&[prefix, query, "."]);
        let mut indexes: Vec<u32> = params
            .range::<str, _>((Bound::Included(start.as_str()), Bound::Unbounded))
            .take_while(|(key, _)| key.starts_with(&start))
            .filter_map(|(key, _)| {
                let rest = &key[start.len()..];
                let end = memchr::memchr(b'.', rest.as_bytes()).unwrap_or(rest.len());
                rest[..end].parse::<u32>().ok()
            })
            .collect();
        indexes.sort_unstable();
        indexes.dedup();
        indexes
    }

    /// A list of strings: a JSON array, or Query members `{query}.1`, `{query}.2`, ….
    pub fn string_list(&self, json: &str, query: &str) -> Result<Vec<String>, SqsError> {
        match self {
            Input::Json { .. } => match self.json_member(json) {
                None => Ok(Vec::new()),
                Some(Value::Array(items)) => items
                    .iter()
                    .map(|item| match item {
                        Value::String(text) => Ok(text.clone()),
                        _ => Err(self.json_type_error(json, "a list of strings")),
                    })
                    .collect(),
                Some(_) => Err(self.json_type_error(json, "a list of strings")),
            },
            Input::Query { params, prefix } => Self::query_indexes(params, prefix, query)
                .into_iter()
                .filter_map(|index| {
                    let name = format!("{query}.{index}");
                    self.string(json, &name).transpose()
                })
                .collect(),
        }
    }

    /// The structures of a list: JSON array items, or Query members `{query}.N.…`.
    pub fn entries<'s>(&'s self, json: &'s str, query: &str) -> Result<Vec<Input<'s>>, SqsError> {
        match self {
            Input::Json { path, .. } => match self.json_member(json) {
                None => Ok(Vec::new()),
                Some(Value::Array(items)) => items
                    .iter()
                    .enumerate()
                    .map(|(at, item)| match item {
                        Value::Object(object) => Ok(Input::Json {
                            object,
                            path: JsonPath::Member {
                                parent: path,
                                member: json,
                                index: Some(at + 1),
                            },
                        }),
                        _ => Err(self.json_type_error(json, "a list of structures")),
                    })
                    .collect(),
                Some(_) => Err(self.json_type_error(json, "a list of structures")),
            },
            Input::Query { params, prefix } => Ok(Self::query_indexes(params, prefix, query)
                .into_iter()
                .map(|index| Input::Query {
                    params,
                    prefix: joined(&[prefix, query, ".", itoa::Buffer::new().format(index), "."]),
                })
                .collect()),
        }
    }

    /// A nested structure: a JSON object member, or the Query members `{query}.…`.
    pub fn child<'s>(&'s self, json: &'s str, query: &str) -> Result<Option<Input<'s>>, SqsError> {
        match self {
            Input::Json { path, .. } => match self.json_member(json) {
                None => Ok(None),
                Some(Value::Object(object)) => Ok(Some(Input::Json {
                    object,
                    path: JsonPath::Member {
                        parent: path,
                        member: json,
                        index: None,
                    },
                })),
                Some(_) => Err(self.json_type_error(json, "a structure")),
            },
            Input::Query { params, prefix } => Ok(Some(Input::Query {
                params,
                prefix: joined(&[prefix, query, "."]),
            })),
        }
    }

    /// A map: a JSON object, or Query members `{query}.N.{key}` / `{query}.N.{value}`, where the
    /// value is read by `read` (a string, or a structure for message attributes).
    pub fn map<T>(
        &self,
        json: &str,
        query: &str,
        key: &str,
        value: &str,
        read: impl Fn(&Input<'_>, &str) -> Result<T, SqsError>,
    ) -> Result<BTreeMap<String, T>, SqsError> {
        let mut map = BTreeMap::new();
        match self {
            Input::Json { path, .. } => match self.json_member(json) {
                None => {}
                Some(Value::Object(object)) => {
                    // Values are read through a view of the map as a structure, so that `read`
                    // works the same in both protocols.
                    let view = Input::Json {
                        object,
                        path: JsonPath::Member {
                            parent: path,
                            member: json,
                            index: None,
                        },
                    };
                    for (name, _) in object.iter() {
                        map.insert(name.clone(), read(&view, name)?);
                    }
                }
                Some(_) => return Err(self.json_type_error(json, "a map")),
            },
            Input::Query { .. } => {
                for entry in self.entries(json, query)? {
                    let name = entry.required_string(key, key)?;
                    map.insert(name, read(&entry, value)?);
                }
            }
        }
        Ok(map)
    }

    /// A map of strings (`Attributes`, `tags`).
    pub fn string_map(
        &self,
        json: &str,
        query: &str,
        key: &str,
        value: &str,
    ) -> Result<BTreeMap<String, String>, SqsError> {
        self.map(json, query, key, value, |view, member| {
            // A Query map entry without a value reads as empty, which removes optional settings.
            Ok(view.string(member, member)?.unwrap_or_default())
        })
    }

    /// A blob member: base64 in both protocols.
    pub fn blob(&self, json: &str, query: &str) -> Result<Option<Vec<u8>>, SqsError> {
        let Some(text) = self.string(json, query)? else {
            return Ok(None);
        };
        decode_blob(&text).map(Some).ok_or_else(|| {
            let name = self.display_name(json, query);
            match self {
                Input::Json { .. } => serialization(format!("Member {name} is not valid base64.")),
                Input::Query { .. } => SqsError::invalid_parameter(
                    &name,
                    &text,
                    "The binary value is not valid base64.",
                ),
            }
        })
    }

    /// Whether a JSON list member holds anything, or any Query member starts with `{query}.`.
    pub fn has_any(&self, json: &str, query: &str) -> bool {
        match self {
            Input::Json { .. } => match self.json_member(json) {
                Some(Value::Array(items)) => !items.is_empty(),
                Some(_) => true,
                None => false,
            },
            Input::Query { params, prefix } => {
                !Self::query_indexes(params, prefix, query).is_empty()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The byte-at-a-time decoder that the run copy replaced, kept as its reference.
    fn percent_decode_reference(bytes: &[u8]) -> Result<Vec<u8>, SqsError> {
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'+' => out.push(b' '),
                b'%' => {
                    let high = bytes.get(i + 1).copied().and_then(hex_value);
                    let low = bytes.get(i + 2).copied().and_then(hex_value);
                    let (Some(high), Some(low)) = (high, low) else {
                        return Err(malformed(
                            "The query string has an invalid percent-encoding.".into(),
                        ));
                    };
                    out.push(high << 4 | low);
                    i += 2;
                }
                byte => out.push(byte),
            }
            i += 1;
        }
        Ok(out)
    }

    #[test]
    fn percent_decoding_turns_escapes_and_pluses_into_bytes() {
        assert_eq!(
            *percent_decode(b"a+b%2Fc%2f%C3%A9").unwrap(),
            *"a b/c/é".as_bytes()
        );
        assert_eq!(*percent_decode(b"%25+").unwrap(), *b"% ");
        // What needs no decoding is borrowed, not copied.
        for plain in [&b""[..], b"SendMessage", b"http:127.0.0.1"] {
            let decoded = percent_decode(plain).unwrap();
            assert!(matches!(decoded, Cow::Borrowed(bytes) if bytes == plain));
        }
        for bad in [&b"%"[..], b"a%2", b"%g0", b"%0g", b"ok%"] {
            let error = percent_decode(bad).unwrap_err();
            assert_eq!(error.code, ErrorCode::MalformedQueryString, "{bad:?}");
        }
    }

    #[test]
    fn a_later_value_of_a_name_wins_and_empty_pairs_are_skipped() {
        let mut params = Params::new();
        parse_form(b"A=1&&B&A=%32&C=x+y", &mut params).unwrap();
        let pairs: Vec<(&str, &[u8])> = params
            .iter()
            .map(|(name, value)| (&**name, &**value))
            .collect();
        assert_eq!(pairs, [("A", &b"2"[..]), ("B", b""), ("C", b"x y")]);
    }

    #[test]
    fn query_members_are_found_at_the_top_and_below_a_prefix() {
        let mut params = Params::new();
        parse_form(
            b"QueueUrl=q&MessageAttribute.2.Name=b&MessageAttribute.1.Name=a&MessageAttribute.10.Name=c",
            &mut params,
        )
        .unwrap();
        let top = Input::query(&params);
        assert_eq!(
            top.string("QueueUrl", "QueueUrl").unwrap().as_deref(),
            Some("q")
        );
        assert_eq!(top.string("Other", "Other").unwrap(), None);
        let names: Vec<String> = top
            .entries("MessageAttributes", "MessageAttribute")
            .unwrap()
            .iter()
            .map(|entry| entry.required_string("Name", "Name").unwrap())
            .collect();
        assert_eq!(names, ["a", "b", "c"]);
        let child = top.child("X", "MessageAttribute").unwrap().unwrap();
        assert_eq!(
            child.string("1.Name", "1.Name").unwrap().as_deref(),
            Some("a")
        );
    }

    proptest::proptest! {
        /// The run copy decodes every input as the reference does, errors included, over
        /// strings built from the bytes that mean something to it (and some that do not).
        #[test]
        fn percent_decoding_agrees_with_its_reference(
            parts in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::strategy::Just("+".to_string()),
                    proptest::strategy::Just("%".to_string()),
                    proptest::strategy::Just("%2F".to_string()),
                    proptest::strategy::Just("%c3%A9".to_string()),
                    "%[0-9a-fA-Fg]{0,2}",
                    "[a-zé=&.]{0,8}",
                ],
                0..10,
            )
        ) {
            let text: String = parts.concat();
            let (runs, reference) =
                (percent_decode(text.as_bytes()), percent_decode_reference(text.as_bytes()));
            match (runs, reference) {
                (Ok(runs), Ok(reference)) => proptest::prop_assert_eq!(&*runs, &reference[..], "{}", text),
                (Err(runs), Err(reference)) => {
                    proptest::prop_assert_eq!(runs.message, reference.message, "{}", text)
                }
                (runs, reference) => {
                    proptest::prop_assert!(false, "{text}: {runs:?} against {reference:?}")
                }
            }
        }
    }
}
