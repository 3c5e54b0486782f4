//! The verifier against `aws-sigv4`, AWS's own Rust signer, as the oracle: every request it
//! signs verifies, and every change to what it signed (body, header, path, query, key, time)
//! does not. AWS's published vectors are in `crates/sqs/tests/sigv4_suite.rs`.

use std::borrow::Cow;
use std::time::{Duration, UNIX_EPOCH};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    sign, SignableBody, SignableRequest, SignatureLocation, SigningSettings,
};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;

use super::*;

const KEY_ID: &str = "AKIAEXAMPLE1";
const SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
const ACCOUNT: &str = "111111111111";
/// 2026-12-01T12:00:00Z.
const NOW_MS: u64 = 1_796_126_400_000;

fn keys() -> Keys {
    Keys::new([Credential {
        access_key_id: KEY_ID.into(),
        secret: Secret::new(SECRET),
        account_id: ACCOUNT.into(),
    }])
}

/// A request as a server receives it.
#[derive(Clone, Debug)]
struct Received {
    method: String,
    path: String,
    query: Option<String>,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Received {
    fn verify(&self, keys: &Keys, now_ms: u64) -> Result<Verified, AuthError> {
        let headers: Vec<(&str, &str)> = self
            .headers
            .iter()
            .map(|(name, value)| (name.as_str(), value.as_str()))
            .collect();
        keys.verify(
            &Request {
                method: &self.method,
                path: &self.path,
                query: self.query.as_deref(),
                authority: None,
                headers: &canonical::HeaderList(&headers),
                body: &self.body,
            },
            now_ms,
        )
    }

    fn set_header(&mut self, name: &str, value: &str) {
        for header in &mut self.headers {
            if header.0.eq_ignore_ascii_case(name) {
                header.1 = value.to_string();
            }
        }
    }
}

struct Signing<'a> {
    method: &'a str,
    uri: &'a str,
    headers: &'a [(&'a str, &'a str)],
    body: &'a [u8],
    secret: &'a str,
    key_id: &'a str,
    region: &'a str,
    service: &'a str,
    time_ms: u64,
    presign_seconds: Option<u64>,
}

impl Default for Signing<'_> {
    fn default() -> Self {
        Signing {
            method: "POST",
            uri: "http://127.0.0.1:9324/",
            headers: &[
                ("host", "127.0.0.1:9324"),
                ("content-type", "application/x-amz-json-1.0"),
                ("x-amz-target", "AmazonSQS.ListQueues"),
            ],
            body: b"{}",
            secret: SECRET,
            key_id: KEY_ID,
            region: "us-east-1",
            service: "sqs",
            time_ms: NOW_MS,
            presign_seconds: None,
        }
    }
}

/// Signs with `aws-sigv4` and returns the request as it arrives.
fn signed(signing: Signing<'_>) -> Received {
    let identity: Identity =
        Credentials::new(signing.key_id, signing.secret, None, None, "test").into();
    let mut settings = SigningSettings::default();
    if let Some(seconds) = signing.presign_seconds {
        settings.signature_location = SignatureLocation::QueryParams;
        settings.expires_in = Some(Duration::from_secs(seconds));
    }
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(signing.region)
        .name(signing.service)
        .time(UNIX_EPOCH + Duration::from_millis(signing.time_ms))
        .settings(settings)
        .build()
        .unwrap()
        .into();
    let request = SignableRequest::new(
        signing.method,
        signing.uri,
        signing.headers.iter().copied(),
        SignableBody::Bytes(signing.body),
    )
    .unwrap();
    let (instructions, _signature) = sign(request, &params).unwrap().into_parts();
    let (added_headers, added_params) = instructions.into_parts();
    let after_authority = signing.uri.splitn(4, '/').nth(3).unwrap_or("");
    let (path, query) = match after_authority.split_once('?') {
        Some((path, query)) => (format!("/{path}"), Some(query.to_string())),
        None => (format!("/{after_authority}"), None),
    };
    let mut query_parts: Vec<String> = query.into_iter().collect();
    for (name, value) in added_params {
        let value: Cow<'_, str> = value;
        query_parts.push(format!("{name}={}", encode_component(&value)));
    }
    let mut headers: Vec<(String, String)> = signing
        .headers
        .iter()
        .map(|(name, value)| (name.to_string(), value.to_string()))
        .collect();
    for header in added_headers {
        headers.push((header.name().to_string(), header.value().to_string()));
    }
    Received {
        method: signing.method.to_string(),
        path,
        query: (!query_parts.is_empty()).then(|| query_parts.join("&")),
        headers,
        body: signing.body.to_vec(),
    }
}

fn encode_component(text: &str) -> String {
    let mut out = Vec::new();
    for &byte in text.as_bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.~".contains(&byte) {
            out.push(byte);
        } else {
            out.extend_from_slice(format!("%{byte:02X}").as_bytes());
        }
    }
    String::from_utf8(out).unwrap()
}

fn expect(result: Result<Verified, AuthError>) -> Verified {
    result.unwrap_or_else(|error| panic!("expected to verify, got {error:?}"))
}

#[test]
fn what_aws_sigv4_signs_verifies_and_names_the_account() {
    let keys = keys();
    let verified = expect(signed(Signing::default()).verify(&keys, NOW_MS));
    assert_eq!(&*verified.access_key_id, KEY_ID);
    assert_eq!(&*verified.account_id, ACCOUNT);
    // The Query protocol: a form body, and a GET with the parameters in the URL.
    let form = signed(Signing {
        headers: &[
            ("host", "localhost:9324"),
            (
                "content-type",
                "application/x-www-form-urlencoded; charset=utf-8",
            ),
        ],
        uri: "http://localhost:9324/000000000000/jobs",
        body: b"Action=SendMessage&MessageBody=hello%20world&Version=2012-11-05",
        ..Signing::default()
    });
    expect(form.verify(&keys, NOW_MS));
    let get = signed(Signing {
        method: "GET",
        uri: "http://localhost:9324/?Action=ListQueues&Version=2012-11-05&QueueNamePrefix=a%20b~",
        headers: &[("host", "localhost:9324")],
        body: b"",
        ..Signing::default()
    });
    assert!(get.query.as_deref().unwrap().contains("Action=ListQueues"));
    expect(get.verify(&keys, NOW_MS));
    // Header values with runs of spaces and a header of several values.
    let spaced = signed(Signing {
        headers: &[
            ("host", "127.0.0.1:9324"),
            ("x-amz-target", "  AmazonSQS.ListQueues  "),
            ("x-custom", "a   b"),
        ],
        ..Signing::default()
    });
    expect(spaced.verify(&keys, NOW_MS));
}

#[test]
fn presigned_urls_verify_until_they_expire() {
    let keys = keys();
    let url = signed(Signing {
        method: "GET",
        uri: "http://localhost:9324/000000000000/jobs?Action=ReceiveMessage&Version=2012-11-05",
        headers: &[("host", "localhost:9324")],
        body: b"",
        presign_seconds: Some(300),
        ..Signing::default()
    });
    assert!(url.query.as_deref().unwrap().contains("X-Amz-Signature="));
    assert!(!url.headers.iter().any(|(name, _)| name == "authorization"));
    expect(url.verify(&keys, NOW_MS));
    expect(url.verify(&keys, NOW_MS + 300_000));
    assert_eq!(
        url.verify(&keys, NOW_MS + 300_001),
        Err(AuthError::Expired("Request has expired.".into()))
    );
    // A URL dated more than 15 minutes ahead is not yet valid.
    assert!(matches!(
        url.verify(&keys, NOW_MS - CLOCK_SKEW_MAX_MS - 1000),
        Err(AuthError::Expired(sentence)) if sentence.starts_with("Signature not yet current")
    ));
    // Any change to the signed query fails.
    let mut changed = url.clone();
    changed.query = Some(
        url.query
            .clone()
            .unwrap()
            .replace("ReceiveMessage", "PurgeQueue"),
    );
    assert_eq!(
        changed.verify(&keys, NOW_MS),
        Err(AuthError::Mismatch(None))
    );
    let mut longer = url.clone();
    longer.query = Some(
        url.query
            .clone()
            .unwrap()
            .replace("X-Amz-Expires=300", "X-Amz-Expires=3000"),
    );
    assert_eq!(longer.verify(&keys, NOW_MS), Err(AuthError::Mismatch(None)));
}

#[test]
fn every_change_to_what_was_signed_fails() {
    let keys = keys();
    let original = signed(Signing::default());
    let mut body = original.clone();
    body.body = b"{\"QueueNamePrefix\":\"x\"}".to_vec();
    let mut header = original.clone();
    header.set_header("x-amz-target", "AmazonSQS.DeleteQueue");
    let mut path = original.clone();
    path.path = "/000000000000/jobs".into();
    let mut method = original.clone();
    method.method = "PUT".into();
    let mut query = original.clone();
    query.query = Some("Action=PurgeQueue".into());
    let mut host = original.clone();
    host.set_header("host", "evil.example:9324");
    let mut signature = original.clone();
    let authorization = signature
        .headers
        .iter()
        .find(|(name, _)| name == "authorization")
        .unwrap()
        .1
        .clone();
    let last = authorization.chars().last().unwrap();
    let flipped = if last == '0' { '1' } else { '0' };
    signature.set_header(
        "authorization",
        &format!("{}{flipped}", &authorization[..authorization.len() - 1]),
    );
    for (what, request) in [
        ("body", body),
        ("header", header),
        ("path", path),
        ("method", method),
        ("query", query),
        ("host", host),
        ("signature", signature),
    ] {
        assert_eq!(
            request.verify(&keys, NOW_MS),
            Err(AuthError::Mismatch(None)),
            "{what}"
        );
    }
    // The wrong secret for a known key.
    let wrong = signed(Signing {
        secret: "not-the-secret",
        ..Signing::default()
    });
    assert_eq!(wrong.verify(&keys, NOW_MS), Err(AuthError::Mismatch(None)));
    // A key the server does not know.
    let unknown = signed(Signing {
        key_id: "AKIAUNKNOWN",
        ..Signing::default()
    });
    assert_eq!(unknown.verify(&keys, NOW_MS), Err(AuthError::UnknownKey));
}

#[test]
fn the_body_hash_header_cannot_stand_in_for_the_body() {
    // A client that signs `UNSIGNED-PAYLOAD` (or lies in X-Amz-Content-SHA256) does not get a
    // body past the signature: the verifier hashes the body it received.
    let keys = keys();
    let identity: Identity = Credentials::new(KEY_ID, SECRET, None, None, "test").into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region("us-east-1")
        .name("sqs")
        .time(UNIX_EPOCH + Duration::from_millis(NOW_MS))
        .settings(SigningSettings::default())
        .build()
        .unwrap()
        .into();
    let headers = [("host", "127.0.0.1:9324")];
    let request = SignableRequest::new(
        "POST",
        "http://127.0.0.1:9324/",
        headers.iter().copied(),
        SignableBody::UnsignedPayload,
    )
    .unwrap();
    let (instructions, _) = sign(request, &params).unwrap().into_parts();
    let mut received = Received {
        method: "POST".into(),
        path: "/".into(),
        query: None,
        headers: vec![("host".into(), "127.0.0.1:9324".into())],
        body: b"{}".to_vec(),
    };
    for (name, value) in instructions.headers() {
        received.headers.push((name.into(), value.into()));
    }
    received
        .headers
        .push(("x-amz-content-sha256".into(), "UNSIGNED-PAYLOAD".into()));
    assert_eq!(
        received.verify(&keys, NOW_MS),
        Err(AuthError::Mismatch(None))
    );
}

#[test]
fn a_signature_is_good_for_15_minutes_either_way() {
    // AWS's rule (common errors, RequestExpired): more than 15 minutes after the date stamp,
    // or a date stamp more than 15 minutes in the future, is refused.
    let keys = keys();
    let request = signed(Signing::default());
    expect(request.verify(&keys, NOW_MS + CLOCK_SKEW_MAX_MS));
    expect(request.verify(&keys, NOW_MS - CLOCK_SKEW_MAX_MS));
    let Err(AuthError::Expired(late)) = request.verify(&keys, NOW_MS + CLOCK_SKEW_MAX_MS + 1000)
    else {
        panic!("a late request verified");
    };
    assert_eq!(
        late,
        "Signature expired: 20261201T120000Z is now earlier than 20261201T120001Z (20261201T121501Z - 15 min.)"
    );
    let Err(AuthError::Expired(early)) = request.verify(&keys, NOW_MS - CLOCK_SKEW_MAX_MS - 1000)
    else {
        panic!("an early request verified");
    };
    assert!(
        early.starts_with("Signature not yet current: 20261201T120000Z"),
        "{early}"
    );
}

#[test]
fn the_scope_must_name_sqs_a_region_and_the_signature_day() {
    let keys = keys();
    let service = signed(Signing {
        service: "sns",
        ..Signing::default()
    });
    assert_eq!(
        service.verify(&keys, NOW_MS),
        Err(AuthError::Mismatch(Some(
            "Credential should be scoped to correct service: 'sqs'.".into()
        )))
    );
    let region = signed(Signing {
        region: "US_EAST",
        ..Signing::default()
    });
    assert!(
        matches!(region.verify(&keys, NOW_MS), Err(AuthError::Mismatch(Some(s))) if s.contains("valid region"))
    );
    // The scope's day must be the X-Amz-Date's.
    let mut day = signed(Signing::default());
    day.set_header("x-amz-date", "20261202T120000Z");
    assert!(
        matches!(day.verify(&keys, NOW_MS + 60_000), Err(AuthError::Mismatch(Some(s))) if s.starts_with("Date in Credential scope does not match"))
    );
    let mut no_date = signed(Signing::default());
    no_date.headers.retain(|(name, _)| name != "x-amz-date");
    assert!(
        matches!(no_date.verify(&keys, NOW_MS), Err(AuthError::Incomplete(s)) if s.contains("'X-Amz-Date'"))
    );
}

#[test]
fn unsigned_requests_are_missing_authentication() {
    let keys = keys();
    let mut request = signed(Signing::default());
    request.headers.retain(|(name, _)| name != "authorization");
    assert_eq!(request.verify(&keys, NOW_MS), Err(AuthError::Missing));
    request
        .headers
        .push(("authorization".into(), "Basic dXNlcjpwYXNz".into()));
    assert!(matches!(
        request.verify(&keys, NOW_MS),
        Err(AuthError::Incomplete(_))
    ));
}

#[test]
fn errors_have_aws_codes_and_say_nothing_of_the_secret() {
    let cases = [
        (
            AuthError::Missing,
            ErrorCode::MissingAuthenticationToken,
            403,
        ),
        (
            AuthError::Incomplete("x"),
            ErrorCode::IncompleteSignature,
            400,
        ),
        (AuthError::UnknownKey, ErrorCode::InvalidClientTokenId, 403),
        (
            AuthError::Mismatch(None),
            ErrorCode::SignatureDoesNotMatch,
            403,
        ),
        (
            AuthError::Expired("x".into()),
            ErrorCode::RequestExpired,
            400,
        ),
    ];
    for (error, code, status) in cases {
        let error = SqsError::from(error);
        assert_eq!((error.code, error.status()), (code, status));
        assert!(error.is_sender_fault());
        assert!(!error.message.contains(SECRET));
    }
    let keys = keys();
    let printed = format!("{keys:?} {:?}", Secret::new(SECRET));
    assert!(
        !printed.contains(SECRET) && !printed.contains("wJalr"),
        "{printed}"
    );
    assert!(printed.contains(KEY_ID));
}

#[test]
fn derived_keys_are_cached_per_scope() {
    let keys = keys();
    let request = signed(Signing::default());
    expect(request.verify(&keys, NOW_MS));
    expect(request.verify(&keys, NOW_MS));
    assert_eq!(keys.cache.read().unwrap().len(), 1);
    let other_region = signed(Signing {
        region: "eu-west-1",
        ..Signing::default()
    });
    expect(other_region.verify(&keys, NOW_MS));
    let next_day = signed(Signing {
        time_ms: NOW_MS + 86_400_000,
        ..Signing::default()
    });
    expect(next_day.verify(&keys, NOW_MS + 86_400_000));
    assert_eq!(keys.cache.read().unwrap().len(), 3);
    // A wrong secret under a cached scope still fails (the cache is keyed by the key's scope,
    // and holds what the configured secret derives).
    let wrong = signed(Signing {
        secret: "other",
        ..Signing::default()
    });
    assert_eq!(wrong.verify(&keys, NOW_MS), Err(AuthError::Mismatch(None)));
}

#[test]
fn every_cut_of_a_signature_is_refused_without_a_panic() {
    // What the fuzz target explores at random, done exhaustively for one request: every prefix
    // of the Authorization header and of a presigned query string, and any server time.
    let keys = keys();
    let request = signed(Signing::default());
    let authorization = request
        .headers
        .iter()
        .find(|(name, _)| name == "authorization")
        .unwrap()
        .1
        .clone();
    for cut in 0..authorization.len() {
        let mut cut_request = request.clone();
        cut_request.set_header("authorization", &authorization[..cut]);
        assert!(cut_request.verify(&keys, NOW_MS).is_err(), "{cut}");
    }
    let url = signed(Signing {
        method: "GET",
        uri: "http://localhost:9324/?Action=ListQueues",
        headers: &[("host", "localhost:9324")],
        body: b"",
        presign_seconds: Some(60),
        ..Signing::default()
    });
    let query = url.query.clone().unwrap();
    for cut in 0..query.len() {
        let mut cut_url = url.clone();
        cut_url.query = Some(query[..cut].to_string());
        assert!(cut_url.verify(&keys, NOW_MS).is_err(), "{cut}");
    }
    for now_ms in [0, 1, u64::MAX / 2, u64::MAX - 1, u64::MAX] {
        assert!(request.verify(&keys, now_ms).is_err());
    }
}
