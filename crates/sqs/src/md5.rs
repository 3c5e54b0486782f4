//! The checksums SQS returns with a send and a receive, which SDKs recompute and compare.
//!
//! `MD5OfMessageBody` is the MD5 of the body's UTF-8 bytes. `MD5OfMessageAttributes` and
//! `MD5OfMessageSystemAttributes` hash an encoding of the attributes, sorted by name: for each,
//! the name, the data type, one transport byte (1 for String and Number values, 2 for Binary) and
//! the value, every variable-length part preceded by its length as a 4-byte big-endian integer.
//! Several SDKs (Java, .NET, Go v1, Ruby) reject a response whose checksum differs from theirs.

use std::collections::BTreeMap;

use ::md5::{Digest, Md5};
use leaseq_core::{AttributeValue, MessageAttribute, Payload};

const TRANSPORT_STRING: u8 = 1;
const TRANSPORT_BINARY: u8 = 2;

/// Lowercase hex of a digest, through a table of digits: `write!("{b:02x}")` per byte went
/// through the formatting machinery and cost as much as the MD5 of a 256-byte body.
fn hex(digest: &[u8]) -> String {
    let mut out = vec![0; digest.len() * 2];
    for (pair, &byte) in out.chunks_exact_mut(2).zip(digest) {
        pair[0] = crate::HEX_DIGITS[usize::from(byte >> 4)];
        pair[1] = crate::HEX_DIGITS[usize::from(byte & 0x0f)];
    }
    String::from_utf8(out).expect("hex digits are ASCII")
}

fn update_with_length(hasher: &mut Md5, bytes: &[u8]) {
    let length = u32::try_from(bytes.len()).expect("attribute parts are far below 4 GiB");
    hasher.update(length.to_be_bytes());
    hasher.update(bytes);
}

/// `MD5OfMessageBody` / `MD5OfBody`: hex MD5 of the body.
pub fn md5_of_body(body: &str) -> String {
    String::from_utf8(md5_hex_of_body(body).to_vec()).expect("hex digits are ASCII")
}

/// [`md5_of_body`] as its 32 ASCII hex digits, in place: for the encoder, which copies them
/// into the response and has no use for a `String` of its own.
pub fn md5_hex_of_body(body: &str) -> [u8; 32] {
    hex_digits(&Md5::digest(body.as_bytes()).into())
}

/// A digest's 32 lowercase hex digits, in place.
pub fn hex_digits(digest: &[u8; 16]) -> [u8; 32] {
    crate::hex::hex16(digest)
}

/// `MD5OfMessageBody` / `MD5OfBody` of a payload: the digest it keeps (computed once, when the
/// message was sent), as text. Equal to [`md5_of_body`] of its body.
pub fn md5_of_payload_body(payload: &Payload) -> String {
    String::from_utf8(hex_digits(payload.body_md5()).to_vec()).expect("hex digits are ASCII")
}

/// `MD5OfMessageAttributes` over the given attributes (in name order, as a `BTreeMap` iterates),
/// or `None` when there are none (SQS then omits the field).
pub fn md5_of_message_attributes<'a>(
    attributes: impl IntoIterator<Item = (&'a String, &'a MessageAttribute)>,
) -> Option<String> {
    let mut hasher = Md5::new();
    let mut any = false;
    // Byte order of the names; callers pass BTreeMap iterators, which are in that order. SQS
    // attribute names are ASCII, where byte order and the SDKs' string order agree.
    let mut sorted: Vec<(&String, &MessageAttribute)> = attributes.into_iter().collect();
    sorted.sort_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    for (name, attribute) in sorted {
        any = true;
        update_with_length(&mut hasher, name.as_bytes());
        update_with_length(&mut hasher, attribute.data_type.as_bytes());
        match &attribute.value {
            AttributeValue::Text(text) => {
                hasher.update([TRANSPORT_STRING]);
                update_with_length(&mut hasher, text.as_bytes());
            }
            AttributeValue::Binary(bytes) => {
                hasher.update([TRANSPORT_BINARY]);
                update_with_length(&mut hasher, bytes);
            }
        }
    }
    any.then(|| hex(&hasher.finalize()))
}

/// `MD5OfMessageSystemAttributes`: the same encoding over the system attributes a producer may
/// send, of which SQS has one (`AWSTraceHeader`, data type `String`).
pub fn md5_of_system_attributes(trace_header: Option<&str>) -> Option<String> {
    let header = trace_header?;
    let attributes = BTreeMap::from([(
        "AWSTraceHeader".to_string(),
        MessageAttribute {
            data_type: "String".into(),
            value: AttributeValue::Text(header.into()),
        },
    )]);
    md5_of_message_attributes(&attributes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(data_type: &str, value: &str) -> MessageAttribute {
        MessageAttribute {
            data_type: data_type.into(),
            value: AttributeValue::Text(value.into()),
        }
    }

    fn md5(attributes: &[(&str, MessageAttribute)]) -> String {
        let map: BTreeMap<String, MessageAttribute> = attributes
            .iter()
            .map(|(name, attribute)| (name.to_string(), attribute.clone()))
            .collect();
        md5_of_message_attributes(&map).unwrap()
    }

    #[test]
    fn hex_of_every_byte() {
        let bytes: Vec<u8> = (0..=255).collect();
        let expected: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex(&bytes), expected);
    }

    #[test]
    fn body() {
        assert_eq!(md5_of_body("hello"), "5d41402abc4b2a76b9719d911017c592");
        assert_eq!(md5_of_body(""), "d41d8cd98f00b204e9800998ecf8427e");
    }

    // Vectors published with AWS SDK tests and SQS emulators that pass them.
    #[test]
    fn attribute_vectors() {
        assert_eq!(
            md5(&[("SellerName", text("String", "Example Store"))]),
            "cd28f3b68aeee4b2eac9c66f2f694b58"
        );
        assert_eq!(
            md5(&[("timestamp", text("Number", "1493147359900"))]),
            "235c5c510d26fb653d073faed50ae77c"
        );
        assert_eq!(
            md5(&[
                ("ordinal", text("Number", "1")),
                ("category", text("String", "test")),
            ]),
            "d21ae90c49061e927f57df5f5d72be1f"
        );
        assert_eq!(
            md5(&[
                (
                    "test_attribute_name_2",
                    text("String", "test_attribute_value_2")
                ),
                (
                    "test_attribute_name_1",
                    text("String", "test_attribute_value_1")
                ),
            ]),
            "d53f3b558fe951154770f25cb63dbba9"
        );
        let binary = MessageAttribute {
            data_type: "Binary".into(),
            value: AttributeValue::Binary(b"test_attribute_value".to_vec()),
        };
        assert_eq!(
            md5(&[("test_attribute_name", binary)]),
            "23f6bd27ea87aab7dfeadcc9aebee495"
        );
    }

    #[test]
    fn none_without_attributes() {
        assert_eq!(md5_of_message_attributes(&BTreeMap::new()), None);
        assert_eq!(md5_of_system_attributes(None), None);
    }

    #[test]
    fn system_attributes_hash_like_a_string_attribute() {
        let header = "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1";
        assert_eq!(
            md5_of_system_attributes(Some(header)).unwrap(),
            md5(&[("AWSTraceHeader", text("String", header))])
        );
    }
}
