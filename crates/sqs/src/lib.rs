//! The SQS wire: the only crate that knows SQS action names, JSON and XML shapes, attribute names
//! and AWS error codes.
//!
//! A request's bytes become an [`Action`] (typed, validated, in the engine's vocabulary) with
//! [`decode`]; the server executes it and hands the result back as an [`Outcome`], which
//! [`encode`] turns into the response of the protocol the request came in (AWS JSON 1.0 or
//! Query/XML). Errors of either side become SQS errors through one table in [`error`].

pub mod action;
pub mod attributes;
#[cfg(feature = "client")]
pub mod client;
pub mod decode;
pub mod encode;
pub mod error;
pub mod headers;
pub mod hex;
pub mod md5;
pub mod moves;
pub mod namespace;
pub mod outcome;
pub mod policy;
mod scan;
pub mod sigv4;

use std::sync::Arc;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;

pub use action::{Action, BatchEntry, Protocol, QueueRef, Shape, TaskHandle};
pub use decode::{decode, decode_reference, RawRequest, GET_VISIBILITY_ADVICE};
pub use encode::{encode, encode_error, Response};
pub use error::{ErrorCode, SqsError};
pub use outcome::{Context, Outcome, PeekedEntry, ProcessingPercentiles, VisibilityAdvice};

/// The URL of a queue: `{base_url}/{account_id}/{name}`, the account being the home one
/// (`ctx`'s) or the one of a namespaced engine name ([`namespace`]).
pub fn queue_url(ctx: &Context, name: &str) -> String {
    match namespace::split(name) {
        Some((account_id, _, name)) => format!("{}/{account_id}/{name}", ctx.base_url),
        None => format!("{}/{}/{}", ctx.base_url, ctx.account_id, name),
    }
}

/// The ARN of a queue: `arn:aws:sqs:{region}:{account_id}:{name}`, in the home namespace
/// (`ctx`'s) or that of a namespaced engine name ([`namespace`]).
pub fn queue_arn(ctx: &Context, name: &str) -> String {
    match namespace::split(name) {
        Some((account_id, region, name)) => format!("arn:aws:sqs:{region}:{account_id}:{name}"),
        None => format!("arn:aws:sqs:{}:{}:{}", ctx.region, ctx.account_id, name),
    }
}

/// Lowercase hex digits by value, for the MD5s and JSON's `\u00XX` escapes.
const HEX_DIGITS: &[u8; 16] = b"0123456789abcdef";

/// How many names a list action returns when the client does not say (SQS's 1000).
pub const LIST_PAGE_DEFAULT: usize = 1000;

/// Tokens start with this tag so that a token of another kind is refused, not misread.
const TOKEN_TAG: &str = "lq1:";

/// One page of `names` (sorted, as the engine lists them) for `ListQueues` and
/// `ListDeadLetterSourceQueues`: the names after the one `next_token` ends at, at most
/// `max_results` of them (1000 without), and the token of the next page. As SQS does, a token is
/// returned only to a client that asked for `MaxResults` and only while more names remain.
pub fn paginate(
    names: Vec<Arc<str>>,
    max_results: Option<usize>,
    next_token: Option<&str>,
) -> Result<(Vec<Arc<str>>, Option<String>), SqsError> {
    let after = next_token
        .filter(|token| !token.is_empty())
        .map(|token| {
            URL_SAFE_NO_PAD
                .decode(token)
                .ok()
                .and_then(|bytes| String::from_utf8(bytes).ok())
                .and_then(|text| text.strip_prefix(TOKEN_TAG).map(str::to_string))
                .ok_or_else(|| SqsError::invalid_parameter_value("Invalid NextToken value."))
        })
        .transpose()?;
    let page_size = max_results.unwrap_or(LIST_PAGE_DEFAULT).max(1);
    let mut rest = names
        .into_iter()
        .filter(|name| after.as_deref().is_none_or(|after| &**name > after));
    let page: Vec<Arc<str>> = rest.by_ref().take(page_size).collect();
    let more = rest.next().is_some();
    let token = match (max_results, page.last()) {
        (Some(_), Some(last)) if more => Some(URL_SAFE_NO_PAD.encode(format!("{TOKEN_TAG}{last}"))),
        _ => None,
    };
    Ok((page, token))
}

/// Appends `pieces` one after the other: what `format!` would write, without its machinery, which
/// cost about 300 instructions a call (callgrind) where the wire code builds names and tags on
/// every request.
pub(crate) fn push_all(out: &mut String, pieces: &[&str]) {
    for piece in pieces {
        out.push_str(piece);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx() -> Context {
        Context {
            base_url: "http://localhost:9324".into(),
            region: "us-east-1".into(),
            account_id: "000000000000".into(),
            request_id: "req-1".into(),
        }
    }

    fn names(count: usize) -> Vec<Arc<str>> {
        (0..count).map(|i| Arc::from(format!("q{i:03}"))).collect()
    }

    #[test]
    fn urls_and_arns() {
        assert_eq!(
            queue_url(&ctx(), "jobs"),
            "http://localhost:9324/000000000000/jobs"
        );
        assert_eq!(
            queue_arn(&ctx(), "jobs"),
            "arn:aws:sqs:us-east-1:000000000000:jobs"
        );
        // A queue of another account and region keeps the host the client used.
        let other = "111111111111:eu-west-1:jobs";
        assert_eq!(
            queue_url(&ctx(), other),
            "http://localhost:9324/111111111111/jobs"
        );
        assert_eq!(
            queue_arn(&ctx(), other),
            "arn:aws:sqs:eu-west-1:111111111111:jobs"
        );
    }

    #[test]
    fn pages_through_every_name_once() {
        let all = names(25);
        let mut seen = Vec::new();
        let mut token: Option<String> = None;
        for _ in 0..10 {
            let (page, next) = paginate(all.clone(), Some(10), token.as_deref()).unwrap();
            assert!(page.len() <= 10);
            seen.extend(page);
            token = next;
            if token.is_none() {
                break;
            }
        }
        assert_eq!(seen, all);
    }

    #[test]
    fn no_token_without_max_results_or_at_the_end() {
        let (page, token) = paginate(names(1500), None, None).unwrap();
        assert_eq!((page.len(), token), (1000, None));
        let (page, token) = paginate(names(10), Some(10), None).unwrap();
        assert_eq!((page.len(), token), (10, None));
        let (page, token) = paginate(Vec::new(), Some(10), None).unwrap();
        assert_eq!((page.len(), token), (0, None));
    }

    #[test]
    fn invalid_token() {
        for token in ["!!!", "bm90LW91cnM"] {
            let error = paginate(names(3), Some(1), Some(token)).unwrap_err();
            assert_eq!(error.code, ErrorCode::InvalidParameterValue);
        }
    }
}
