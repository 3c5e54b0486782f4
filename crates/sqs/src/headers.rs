//! The request headers SQS gives a meaning to, read from their values so that the server's HTTP
//! layer only hands them over.
//!
//! `X-Amz-Target` chooses the protocol (AWS JSON 1.0 names its operation there, Query has no such
//! header), and a SigV4 `Authorization` header names the caller's access key id, which SQS
//! reports as a message's `SenderId`. These run on every request, so they borrow from the header
//! value and allocate nothing.

use crate::action::Protocol;

/// The header that names an AWS JSON 1.0 operation (`AmazonSQS.SendMessage`), lowercase as HTTP/2
/// and `http::HeaderMap` spell it.
pub const TARGET: &str = "x-amz-target";

/// The X-Ray trace header of a request. SQS takes it as a sent message's `AWSTraceHeader` system
/// attribute when the message does not carry one (recorded from AWS: LocalStack's
/// `test_aws_trace_header_propagation`, a `SendMessage` with only this header whose message comes
/// back with the header's value as `AWSTraceHeader`).
pub const TRACE_ID: &str = "x-amzn-trace-id";

/// Gives the messages a request sends the trace header `trace_id` (the [`TRACE_ID`] header's
/// value) as their `AWSTraceHeader`, where they carry none of their own. Other actions are left
/// as they are.
pub fn adopt_trace_id(action: &mut crate::Action, trace_id: &str) {
    let adopt = |message: &mut leaseq_core::SendInput| {
        if message.trace_header.is_none() && !trace_id.is_empty() {
            message.trace_header = Some(trace_id.to_string());
        }
    };
    match action {
        crate::Action::SendMessage { message, .. } => adopt(message),
        crate::Action::SendMessageBatch { entries, .. } => {
            entries.iter_mut().for_each(|entry| adopt(&mut entry.value))
        }
        _ => {}
    }
}

/// The longest access key id taken as a sender id; anything longer is not a key id.
pub const ACCESS_KEY_ID_LENGTH_MAX: usize = 128;

/// The protocol of a request with this `X-Amz-Target` header value (or none): JSON when the
/// header is present, Query otherwise. The response, errors included, uses the same protocol.
pub fn protocol(target: Option<&str>) -> Protocol {
    match target {
        Some(_) => Protocol::Json,
        None => Protocol::Query,
    }
}

/// The access key id of a SigV4 `Authorization` header value
/// (`AWS4-HMAC-SHA256 Credential=AKID/20240101/us-east-1/sqs/aws4_request, …`), if it names
/// one of at most [`ACCESS_KEY_ID_LENGTH_MAX`] characters. Signatures are not checked.
pub fn access_key_id(authorization: &str) -> Option<&str> {
    // The header every SDK sends starts with the algorithm and the credential: then the first
    // `Credential=` is right after the prefix (the prefix holds no other `C` a match could start
    // at but HMAC's, which `C-SHA256 Cr` does not continue). That spares the substring search,
    // whose set-up alone cost more than the rest of this function.
    let credential = match authorization.strip_prefix(SIGV4_CREDENTIAL_PREFIX) {
        Some(credential) => credential,
        None => authorization.split_once("Credential=")?.1,
    };
    // Bytes, not chars: `/` is ASCII, so the cut is at a character boundary.
    let end = credential
        .bytes()
        .position(|byte| byte == b'/')
        .unwrap_or(credential.len());
    let key = &credential[..end];
    (!key.is_empty() && key.len() <= ACCESS_KEY_ID_LENGTH_MAX).then_some(key)
}

/// How a SigV4 `Authorization` header starts, up to the credential's value.
const SIGV4_CREDENTIAL_PREFIX: &str = "AWS4-HMAC-SHA256 Credential=";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_header_chooses_json() {
        assert_eq!(protocol(Some("AmazonSQS.SendMessage")), Protocol::Json);
        assert_eq!(protocol(Some("")), Protocol::Json);
        assert_eq!(protocol(None), Protocol::Query);
    }

    #[test]
    fn the_access_key_id_is_the_credential_scope_head() {
        let header = "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/sqs/aws4_request, SignedHeaders=host;x-amz-date, Signature=abc";
        assert_eq!(access_key_id(header), Some("AKIDEXAMPLE"));
        assert_eq!(access_key_id("Credential=solo"), Some("solo"));
        assert_eq!(access_key_id("AWS4-HMAC-SHA256 Credential=/2015"), None);
        assert_eq!(access_key_id("Basic dXNlcjpwYXNz"), None);
        let long = format!("Credential={}/x", "k".repeat(ACCESS_KEY_ID_LENGTH_MAX + 1));
        assert_eq!(access_key_id(&long), None);
    }

    /// The search it replaced: the first `Credential=`, then the value up to the first `/`.
    fn access_key_id_reference(authorization: &str) -> Option<&str> {
        let (_, credential) = authorization.split_once("Credential=")?;
        let key = credential.split('/').next()?;
        (!key.is_empty() && key.len() <= ACCESS_KEY_ID_LENGTH_MAX).then_some(key)
    }

    proptest::proptest! {
        /// With or without the SigV4 prefix, the key is the reference search's.
        #[test]
        fn the_access_key_id_agrees_with_the_search(
            parts in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::strategy::Just("AWS4-HMAC-SHA256 ".to_string()),
                    proptest::strategy::Just("Credential=".to_string()),
                    proptest::strategy::Just("/".to_string()),
                    proptest::strategy::Just("C".to_string()),
                    "[A-Za-z0-9 ,=é-]{0,8}",
                ],
                0..6,
            )
        ) {
            let header: String = parts.concat();
            proptest::prop_assert_eq!(access_key_id(&header), access_key_id_reference(&header));
        }
    }
}
