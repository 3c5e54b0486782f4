//! The canonical request, exactly as AWS builds it ("Create a canonical request" in the IAM user
//! guide's SigV4 chapter, and `aws-sigv4`'s `canonical_request.rs`, whose test suite from
//! `aws-c-auth` this module passes; see `crates/sqs/tests/sigv4_suite.rs`):
//!
//! ```text
//! METHOD \n CANONICAL-URI \n CANONICAL-QUERY \n CANONICAL-HEADERS \n SIGNED-HEADERS \n PAYLOAD-HASH
//! ```
//!
//! - the URI: the path with dot segments and empty segments removed, URI-encoded once more (SigV4
//!   for every service but S3 encodes the already-encoded path a second time, so `%` is `%25`);
//! - the query: each name and value percent-decoded, encoded again with only the unreserved
//!   characters (`A–Z a–z 0–9 - _ . ~`) left as they are, sorted by name then value, without
//!   a presigned URL's `X-Amz-Signature`;
//! - the headers: each signed header as `name:value\n`, its values trimmed of spaces, runs of
//!   spaces made one, several values joined by `,`; `host` from the `Host` header or, over
//!   HTTP/2, the `:authority`;
//! - the payload hash: SHA-256 of the body as received, in hex (never a value the client sends
//!   in `X-Amz-Content-SHA256`: the signature must cover the bytes that are executed).

use std::borrow::Cow;

use sha2::{Digest as _, Sha256};

use super::parse::Signed;
use super::{HeaderSource, Request};

/// Percent-decodes a query component (`+` is a space, as form encoding has it). Invalid
/// escapes stay as they are; invalid UTF-8 becomes U+FFFD (it is re-encoded the same way on
/// both sides only if the client sent valid UTF-8, so such a request fails to verify).
pub fn percent_decode(text: &str) -> String {
    let bytes = decode_bytes(text.as_bytes());
    String::from_utf8(bytes)
        .unwrap_or_else(|error| String::from_utf8_lossy(error.as_bytes()).into_owned())
}

fn decode_bytes(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < bytes.len() => {
                match (hex_value(bytes[i + 1]), hex_value(bytes[i + 2])) {
                    (Some(high), Some(low)) => {
                        out.push(high << 4 | low);
                        i += 2;
                    }
                    _ => out.push(b'%'),
                }
            }
            byte => out.push(byte),
        }
        i += 1;
    }
    out
}

fn hex_value(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        b'A'..=b'F' => Some(digit - b'A' + 10),
        _ => None,
    }
}

fn is_unreserved(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~')
}

const UPPER_HEX: &[u8; 16] = b"0123456789ABCDEF";

/// URI-encodes `bytes` into `out`, leaving unreserved characters (and `/` when `keep_slash`).
fn uri_encode(bytes: &[u8], keep_slash: bool, out: &mut Vec<u8>) {
    for &byte in bytes {
        if is_unreserved(byte) || (keep_slash && byte == b'/') {
            out.push(byte);
        } else {
            out.extend_from_slice(&[
                b'%',
                UPPER_HEX[usize::from(byte >> 4)],
                UPPER_HEX[usize::from(byte & 15)],
            ]);
        }
    }
}

/// The path with dot segments and empty segments removed (RFC 3986 5.2.4, as `aws-sigv4`
/// normalizes it), always absolute, keeping a trailing slash.
fn normalize_path(path: &str, out: &mut Vec<u8>) {
    if !path.contains('.') && !path.contains("//") && path.starts_with('/') {
        uri_encode(path.as_bytes(), true, out);
        return;
    }
    let mut segments: Vec<&str> = Vec::new();
    for segment in path.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            segment => segments.push(segment),
        }
    }
    out.push(b'/');
    for (index, segment) in segments.iter().enumerate() {
        if index > 0 {
            out.push(b'/');
        }
        uri_encode(segment.as_bytes(), false, out);
    }
    let ends_with_slash = ["/", "/.", "/./", "/..", "/../"]
        .iter()
        .any(|end| path.ends_with(end));
    if ends_with_slash && !segments.is_empty() {
        out.push(b'/');
    }
}

/// A query component's canonical bytes, borrowed when they are the bytes sent.
type Component<'a> = Cow<'a, [u8]>;

/// A query component in canonical form: as sent when it holds only unreserved characters (the
/// common case, which costs no copy), else percent-decoded and encoded again.
fn canonical_component(raw: &str) -> Component<'_> {
    if raw.bytes().all(is_unreserved) {
        return Cow::Borrowed(raw.as_bytes());
    }
    let mut encoded = Vec::with_capacity(raw.len() + 8);
    uri_encode(&decode_bytes(raw.as_bytes()), false, &mut encoded);
    Cow::Owned(encoded)
}

/// The canonical query string of `query` (raw), without `X-Amz-Signature` when `presigned`.
fn canonical_query(query: &str, presigned: bool, out: &mut Vec<u8>) {
    let mut pairs: Vec<(Component<'_>, Component<'_>)> = Vec::new();
    for pair in query.split('&') {
        if pair.is_empty() {
            continue;
        }
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        if presigned && name == "X-Amz-Signature" {
            continue;
        }
        pairs.push((canonical_component(name), canonical_component(value)));
    }
    // Sorted by the encoded name, then the encoded value (byte order, as `aws-sigv4` sorts).
    pairs.sort_unstable();
    for (index, (name, value)) in pairs.iter().enumerate() {
        if index > 0 {
            out.push(b'&');
        }
        out.extend_from_slice(name);
        out.push(b'=');
        out.extend_from_slice(value);
    }
}

/// Appends a header value trimmed of spaces, with runs of spaces made one.
fn push_trimmed(value: &[u8], out: &mut Vec<u8>) {
    let start = value.iter().position(|&b| b != b' ').unwrap_or(value.len());
    let end = value
        .iter()
        .rposition(|&b| b != b' ')
        .map_or(start, |i| i + 1);
    let trimmed = &value[start..end];
    // Most values have no run of spaces: one copy.
    if !trimmed.windows(2).any(|pair| pair == b"  ") {
        out.extend_from_slice(trimmed);
        return;
    }
    let mut previous_space = false;
    for &byte in trimmed {
        if byte == b' ' {
            if previous_space {
                continue;
            }
            previous_space = true;
        } else {
            previous_space = false;
        }
        out.push(byte);
    }
}

/// Appends the canonical headers (each `name:values\n`).
fn canonical_headers(request: &Request<'_>, signed_headers: &str, out: &mut Vec<u8>) {
    for name in signed_headers.split(';') {
        out.extend_from_slice(name.as_bytes());
        out.push(b':');
        let mut first = true;
        let mut found = false;
        request.headers.for_each_value(name, &mut |value| {
            if !first {
                out.push(b',');
            }
            first = false;
            found = true;
            push_trimmed(value, out);
        });
        if !found && name == "host" {
            if let Some(authority) = request.authority {
                push_trimmed(authority.as_bytes(), out);
            }
        }
        out.push(b'\n');
    }
}

/// The lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> [u8; 64] {
    hex(&Sha256::digest(bytes))
}

/// Lowercase hex of a 32-byte digest.
pub fn hex(digest: &[u8]) -> [u8; 64] {
    let mut out = [0u8; 64];
    for (index, byte) in digest.iter().take(32).enumerate() {
        out[2 * index] = crate::HEX_DIGITS[usize::from(byte >> 4)];
        out[2 * index + 1] = crate::HEX_DIGITS[usize::from(byte & 15)];
    }
    out
}

/// Writes the canonical request of `request` signed as `signed` into `out`.
pub fn canonical_request(request: &Request<'_>, signed: &Signed<'_>, out: &mut Vec<u8>) {
    out.extend_from_slice(request.method.as_bytes());
    out.push(b'\n');
    normalize_path(request.path, out);
    out.push(b'\n');
    canonical_query(
        request.query.unwrap_or(""),
        signed.presigned_date.is_some(),
        out,
    );
    out.push(b'\n');
    canonical_headers(request, signed.signed_headers, out);
    out.push(b'\n');
    out.extend_from_slice(signed.signed_headers.as_bytes());
    out.push(b'\n');
    out.extend_from_slice(&sha256_hex(request.body));
}

/// A header source over a list of `(name, value)` pairs, names in any case (tests, tools).
pub struct HeaderList<'a>(pub &'a [(&'a str, &'a str)]);

impl HeaderSource for HeaderList<'_> {
    fn for_each_value(&self, name: &str, visit: &mut dyn FnMut(&[u8])) {
        for (header, value) in self.0 {
            if header.eq_ignore_ascii_case(name) {
                visit(value.as_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(text: &str) -> String {
        let mut out = Vec::new();
        normalize_path(text, &mut out);
        String::from_utf8(out).unwrap()
    }

    fn query(text: &str) -> String {
        let mut out = Vec::new();
        canonical_query(text, false, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn paths_are_normalized_and_encoded_again() {
        assert_eq!(path(""), "/");
        assert_eq!(path("/"), "/");
        assert_eq!(path("/000000000000/jobs"), "/000000000000/jobs");
        assert_eq!(path("/example/.."), "/");
        assert_eq!(path("/./example/../foo/"), "/foo/");
        assert_eq!(path("//example//"), "/example/");
        assert_eq!(path("/example%20space/"), "/example%2520space/");
        assert_eq!(path("/a b"), "/a%20b");
    }

    #[test]
    fn queries_are_decoded_encoded_and_sorted() {
        assert_eq!(query(""), "");
        assert_eq!(query("b=2&a=1&a=0"), "a=0&a=1&b=2");
        assert_eq!(query("Param1"), "Param1=");
        assert_eq!(query("k=a+b&x=%7e"), "k=a%20b&x=~");
        assert_eq!(
            query("Version=2012-11-05&Action=ListQueues"),
            "Action=ListQueues&Version=2012-11-05"
        );
        assert_eq!(query("q=%2"), "q=%252");
    }

    #[test]
    fn header_values_are_trimmed() {
        let mut out = Vec::new();
        push_trimmed(b"  a   b  c ", &mut out);
        assert_eq!(out, b"a b c");
        out.clear();
        push_trimmed(b"    ", &mut out);
        assert_eq!(out, b"");
    }
}
