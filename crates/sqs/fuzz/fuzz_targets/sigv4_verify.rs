//! Feeds arbitrary requests to the SigV4 verifier (`leaseq_sqs::sigv4`), the first code that
//! reads an `Authorization` header or a presigned query string on a server with `auth = "sigv4"`.
//! It must never panic, every refusal must be one of AWS's authentication errors (a sender
//! fault, nothing else), and no answer may repeat the secret.
//!
//! The input is text: the method, path and query string on three lines (an empty query line is
//! none), then `name:value` header lines up to an empty line, then the body. The verifier's key
//! is the one of the AWS test suite's vectors, and the time theirs, so the committed seeds (two
//! of those vectors) verify and mutations explore the paths around a valid signature.

#![no_main]

use leaseq_sqs::sigv4::canonical::HeaderList;
use leaseq_sqs::sigv4::{parse, Credential, Keys, Request, Secret};
use leaseq_sqs::{ErrorCode, SqsError};
use libfuzzer_sys::fuzz_target;

const SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
/// 2015-08-30T12:36:00Z, the vectors' time.
const NOW_MS: u64 = 1_440_938_160_000;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let mut lines = text.split('\n');
    let (Some(method), Some(path), Some(query)) = (lines.next(), lines.next(), lines.next())
    else {
        return;
    };
    let mut headers = Vec::new();
    let mut consumed = method.len() + path.len() + query.len() + 3;
    for line in lines.by_ref() {
        consumed += line.len() + 1;
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.push((name, value));
        }
    }
    let body = text.as_bytes().get(consumed..).unwrap_or(&[]);
    for (name, value) in &headers {
        if name.eq_ignore_ascii_case("authorization") {
            let _ = parse::authorization(value);
        }
    }
    let _ = parse::amz_date_ms(method);
    let keys = Keys::for_service(
        [Credential {
            access_key_id: "AKIDEXAMPLE".into(),
            secret: Secret::new(SECRET),
            account_id: "000000000000".into(),
        }],
        "service",
    );
    let request = Request {
        method,
        path,
        query: (!query.is_empty()).then_some(query),
        authority: None,
        headers: &HeaderList(&headers),
        body,
    };
    if let Err(error) = keys.verify(&request, NOW_MS) {
        let error = SqsError::from(error);
        assert!(error.is_sender_fault());
        assert!(matches!(
            error.code,
            ErrorCode::MissingAuthenticationToken
                | ErrorCode::IncompleteSignature
                | ErrorCode::InvalidClientTokenId
                | ErrorCode::SignatureDoesNotMatch
                | ErrorCode::RequestExpired
        ));
        assert!(!error.message.contains(SECRET));
    }
});
