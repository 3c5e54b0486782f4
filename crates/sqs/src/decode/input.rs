//! One view of a request's parameters over both protocols.
//!
//! A JSON request is an object tree (`{"Entries":[{"Id":"a"}]}`); a Query request is a flat
//! list of dotted names (`SendMessageBatchRequestEntry.1.Id=a`). Both describe the same Smithy
//! shapes, with different member names where the Query protocol flattens lists and maps. Each
//! action is decoded once, against [`Input`], which takes both names and reads whichever the
//! request has.

use std::collections::BTreeMap;
use std::fmt;

use base64::engine::general_purpose::STANDARD;
use base64::Engine as _;
use serde_json::{Map, Value};

use crate::error::{ErrorCode, SqsError};

/// Query parameters: name to raw (percent-decoded) bytes.
pub type Params = BTreeMap<String, Vec<u8>>;

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
        params: &'a Params,
        /// The prefix of this structure's members.
        prefix: String,
    },
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
fn percent_decode(bytes: &[u8]) -> Result<Vec<u8>, SqsError> {
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

/// The bytes of a blob member's text (base64, around which blanks are allowed), if it is valid.
pub fn decode_blob(text: &str) -> Option<Vec<u8>> {
    STANDARD.decode(text.trim()).ok()
}

/// Adds the pairs of a form body or query string to `params` (a later value of a name wins).
pub fn parse_form(bytes: &[u8], params: &mut Params) -> Result<(), SqsError> {
    for pair in bytes.split(|&b| b == b'&').filter(|pair| !pair.is_empty()) {
        let (key, value) = match pair.iter().position(|&b| b == b'=') {
            Some(at) => (&pair[..at], &pair[at + 1..]),
            None => (pair, &[][..]),
        };
        let key = String::from_utf8(percent_decode(key)?)
            .map_err(|_| malformed("A parameter name is not valid UTF-8.".into()))?;
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
    pub fn query(params: &'a Params) -> Input<'a> {
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
                let name = format!("{prefix}{query}");
                match params.get(&name) {
                    None => Ok(None),
                    Some(bytes) => String::from_utf8(bytes.clone())
                        .map(Some)
                        .map_err(|_| malformed(format!("The value of {name} is not valid UTF-8."))),
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
    fn query_indexes(params: &Params, prefix: &str, query: &str) -> Vec<u32> {
        let start = format!("{prefix}{query}.");
        let mut indexes: Vec<u32> = params
            .range(start.clone()..)
            .take_while(|(key, _)| key.starts_with(&start))
            .filter_map(|(key, _)| {
                let rest = &key[start.len()..];
                rest.split('.').next()?.parse::<u32>().ok()
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
                    prefix: format!("{prefix}{query}.{index}."),
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
                prefix: format!("{prefix}{query}."),
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
