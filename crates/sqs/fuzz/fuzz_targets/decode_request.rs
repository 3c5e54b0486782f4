//! Feeds arbitrary HTTP requests to `leaseq_sqs::decode`, which parses untrusted bytes (JSON
//! bodies, form-encoded Query strings and bodies, queue URLs). It must never panic; it must
//! answer in the protocol the request chose (JSON exactly when there is an `X-Amz-Target`);
//! and the error response the server would send for a rejected request must carry the error's
//! message intact, which checks the XML escaping of messages that quote the request.
//!
//! And `decode`, which takes the JSON fast path of the hot actions where it can, must answer
//! exactly what the reference path alone (`decode_reference`) answers: the same action and shape,
//! or the same error.
//!
//! The input is text-like so that seeds are easy to write and mutations stay meaningful: five
//! lines (method, path, query string, `X-Amz-Target`, `Content-Type`; an empty optional line is
//! an absent one), then the body, which is everything after the fifth newline.

#![no_main]

use std::borrow::Cow;

use leaseq_sqs::{
    decode, decode_reference, encode_error, Context, ErrorCode, Protocol, RawRequest, SqsError,
};
use libfuzzer_sys::fuzz_target;
use quick_xml::events::Event;

fn optional(line: &str) -> Option<&str> {
    (!line.is_empty()).then_some(line)
}

fn context() -> Context {
    Context {
        base_url: "http://localhost:9324".into(),
        region: "us-east-1".into(),
        account_id: "000000000000".into(),
        request_id: "req-1".into(),
    }
}

/// The text of the `Message` element of a Query error response, unescaped.
fn xml_message(body: &str) -> String {
    let mut reader = quick_xml::Reader::from_str(body);
    let mut in_message = false;
    let mut raw = String::new();
    loop {
        match reader.read_event().expect("well-formed XML") {
            Event::Start(element) => in_message = element.name().as_ref() == b"Message",
            Event::Text(text) if in_message => raw.push_str(&text.decode().expect("text")),
            Event::GeneralRef(reference) if in_message => {
                raw.push('&');
                raw.push_str(&reference.decode().expect("reference"));
                raw.push(';');
            }
            Event::End(_) => in_message = false,
            Event::Eof => break,
            _ => {}
        }
    }
    quick_xml::escape::unescape(&raw)
        .expect("known entities")
        .into_owned()
}

/// `message` as XML can carry it: characters XML 1.0 forbids become U+FFFD.
fn xml_carried(message: &str) -> String {
    message
        .chars()
        .map(|c| match c {
            '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' => c,
            c if c >= '\u{10000}' => c,
            _ => '\u{FFFD}',
        })
        .collect()
}

fn check_error_response(protocol: Protocol, error: &SqsError) {
    let response = encode_error(protocol, error, &context());
    assert!((400..600).contains(&response.status), "{error:?}");
    match protocol {
        Protocol::Json => {
            let body: serde_json::Value =
                serde_json::from_slice(&response.body).expect("JSON error body");
            assert_eq!(body["message"].as_str(), Some(error.message.as_str()));
        }
        // A parameterless GET of a queue's URL: SQS answers a bare `<UnknownOperationException/>`
        // document, with no message (see `encode_error`).
        Protocol::Query if error.code == ErrorCode::UnknownOperation => {
            let body = std::str::from_utf8(&response.body).expect("UTF-8 error body");
            assert!(body.ends_with("<UnknownOperationException/>"), "{body}");
        }
        Protocol::Query => {
            let body = std::str::from_utf8(&response.body).expect("UTF-8 error body");
            assert_eq!(xml_message(body), xml_carried(&error.message));
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut parts = data.splitn(6, |&b| b == b'\n');
    let mut line = || String::from_utf8_lossy(parts.next().unwrap_or_default());
    let lines: [Cow<str>; 5] = [line(), line(), line(), line(), line()];
    let body = parts.next().unwrap_or_default();
    let [method, path, query, target, content_type] = &lines;
    let request = RawRequest {
        method,
        path,
        query: optional(query),
        target: optional(target),
        content_type: optional(content_type),
        body,
    };
    let expected = match request.target {
        Some(_) => Protocol::Json,
        None => Protocol::Query,
    };
    let decoded = decode(&request);
    assert_eq!(decoded, decode_reference(&request));
    match decoded {
        Ok((protocol, _action, _shape)) => assert_eq!(protocol, expected),
        Err((protocol, error)) => {
            assert_eq!(protocol, expected);
            check_error_response(protocol, &error);
        }
    }
});
