//! AWS's published SigV4 vectors (`tests/sigv4-suite`, from `aws-c-auth`; see its README): for
//! each, the signed request verifies at the vector's time with the vector's key, the canonical
//! request we build is byte for byte the one AWS expects, and the same request with one
//! signature digit changed, or checked 16 minutes later, is refused.

use std::path::{Path, PathBuf};

use leaseq_sqs::sigv4::canonical::{canonical_request, HeaderList};
use leaseq_sqs::sigv4::parse::{self, amz_date_ms};
use leaseq_sqs::sigv4::{AuthError, Credential, Keys, Request, Secret};

/// A signed request read from a vector's `*-signed-request.txt`.
struct Vector {
    method: String,
    path: String,
    query: Option<String>,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

fn read_request(path: &Path) -> Vector {
    let text = std::fs::read_to_string(path).unwrap();
    let (head, body) = text.split_once("\n\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let request_line = lines.next().unwrap();
    let mut parts = request_line.splitn(2, ' ');
    let method = parts.next().unwrap().to_string();
    let target = parts.next().unwrap().trim_end_matches(" HTTP/1.1");
    let (path, query) = match target.split_once('?') {
        Some((path, query)) => (path.to_string(), Some(query.to_string())),
        None => (target.to_string(), None),
    };
    let headers = lines
        .map(|line| {
            let (name, value) = line.split_once(':').unwrap();
            (name.to_string(), value.trim_matches(' ').to_string())
        })
        .collect();
    Vector {
        method,
        path,
        query,
        headers,
        body: body.trim_end_matches('\n').as_bytes().to_vec(),
    }
}

struct Context {
    access_key_id: String,
    secret: String,
    service: String,
    now_ms: u64,
}

fn context(dir: &Path) -> Context {
    let Ok(text) = std::fs::read_to_string(dir.join("context.json")) else {
        // The older vector (double-encode-path) has no context: `aws-sigv4`'s test key.
        return Context {
            access_key_id: "ANOTREAL".into(),
            secret: "notrealrnrELgWzOk3IfjzDKtFBhDby".into(),
            service: "service".into(),
            now_ms: amz_date_ms("20150830T123600Z").unwrap(),
        };
    };
    let json: serde_json::Value = serde_json::from_str(&text).unwrap();
    let timestamp = json["timestamp"].as_str().unwrap().replace(['-', ':'], "");
    Context {
        access_key_id: json["credentials"]["access_key_id"]
            .as_str()
            .unwrap()
            .into(),
        secret: json["credentials"]["secret_access_key"]
            .as_str()
            .unwrap()
            .into(),
        service: json["service"].as_str().unwrap().into(),
        now_ms: amz_date_ms(&timestamp).unwrap(),
    }
}

fn vectors() -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/sigv4-suite/v4");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .collect();
    dirs.sort();
    dirs
}

fn verify(vector: &Vector, keys: &Keys, now_ms: u64) -> Result<(), AuthError> {
    let headers: Vec<(&str, &str)> = vector
        .headers
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_str()))
        .collect();
    let request = Request {
        method: &vector.method,
        path: &vector.path,
        query: vector.query.as_deref(),
        authority: None,
        headers: &HeaderList(&headers),
        body: &vector.body,
    };
    keys.verify(&request, now_ms).map(|_| ())
}

/// Our canonical request of a vector, to compare with AWS's.
fn our_canonical(vector: &Vector) -> String {
    let headers: Vec<(&str, &str)> = vector
        .headers
        .iter()
        .map(|(name, value)| (name.as_str(), value.as_str()))
        .collect();
    let request = Request {
        method: &vector.method,
        path: &vector.path,
        query: vector.query.as_deref(),
        authority: None,
        headers: &HeaderList(&headers),
        body: &vector.body,
    };
    let authorization = vector
        .headers
        .iter()
        .find(|(name, _)| name.eq_ignore_ascii_case("authorization"))
        .map(|(_, value)| value.clone());
    let mut decoded = Default::default();
    let params;
    let signed = match &authorization {
        Some(header) => parse::authorization(header).unwrap(),
        None => {
            params = parse::presigned_params(vector.query.as_deref().unwrap());
            parse::presigned(&params, &mut decoded).unwrap()
        }
    };
    let mut out = Vec::new();
    canonical_request(&request, &signed, &mut out);
    String::from_utf8(out).unwrap()
}

/// The vector with the last digit of its signature changed.
fn tampered(vector: &Vector) -> Vector {
    let flip = |text: &str| {
        let last = text.chars().last().unwrap();
        let other = if last == '0' { '1' } else { '0' };
        format!("{}{other}", &text[..text.len() - 1])
    };
    let mut headers = vector.headers.clone();
    let mut query = vector.query.clone();
    if let Some(header) = headers
        .iter_mut()
        .find(|(name, _)| name.eq_ignore_ascii_case("authorization"))
    {
        header.1 = flip(&header.1);
    } else {
        query = query.map(|query| flip(&query));
    }
    Vector {
        method: vector.method.clone(),
        path: vector.path.clone(),
        query,
        headers,
        body: vector.body.clone(),
    }
}

#[test]
fn every_vector_verifies_with_awss_canonical_request() {
    let mut checked = 0;
    for dir in vectors() {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let context = context(&dir);
        let keys = Keys::for_service(
            [Credential {
                access_key_id: context.access_key_id.as_str().into(),
                secret: Secret::new(context.secret.clone()),
                account_id: "000000000000".into(),
            }],
            &context.service,
        );
        for form in ["header", "query"] {
            let signed_path = dir.join(format!("{form}-signed-request.txt"));
            if !signed_path.exists() {
                continue;
            }
            let vector = read_request(&signed_path);
            let expected =
                std::fs::read_to_string(dir.join(format!("{form}-canonical-request.txt"))).unwrap();
            // The older vector's canonical request was written for another date than its signed
            // request carries; its signature still checks.
            if dir.join("context.json").exists() {
                assert_eq!(
                    our_canonical(&vector),
                    expected.trim_end_matches('\n'),
                    "{name} ({form}): canonical request"
                );
            }
            if let Err(error) = verify(&vector, &keys, context.now_ms) {
                panic!("{name} ({form}): {error:?}");
            }
            assert_eq!(
                verify(&tampered(&vector), &keys, context.now_ms),
                Err(AuthError::Mismatch(None)),
                "{name} ({form}): a changed signature"
            );
            // A header signature is good for 15 minutes; these presigned URLs for an hour.
            let later_ms = context.now_ms + if form == "header" { 16 } else { 61 } * 60_000;
            assert!(
                matches!(verify(&vector, &keys, later_ms), Err(AuthError::Expired(_))),
                "{name} ({form}): too late"
            );
            checked += 1;
        }
    }
    // 29 vectors with both forms, the older one with the header form alone.
    assert_eq!(checked, 59, "vectors checked");
}
