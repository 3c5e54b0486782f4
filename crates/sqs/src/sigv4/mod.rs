//! SigV4 verification: whether a request was signed by a key this server knows, and by whom.
//!
//! A request is signed in its `Authorization` header or, as a presigned URL, in its query string
//! (`X-Amz-Signature` and its companions). [`Keys::verify`] rebuilds the canonical request
//! exactly as the client built it ([`canonical`]), the string to sign
//! (`AWS4-HMAC-SHA256 \n date \n scope \n hex(SHA-256(canonical request))`) and its HMAC under
//! the key derived from the secret for the scope's day, region and service, and compares that
//! with the signature the client sent in constant time (`hmac`'s `verify_slice`).
//!
//! The derived key is cached per credential scope (access key id, day, region), so a request
//! costs two SHA-256s of its own bytes (body, canonical request) and one HMAC; the four HMACs
//! of the derivation run once per key and day. The clock is handed in (`now_ms`): AWS accepts a
//! signature dated at most 15 minutes from its own time (`RequestExpired` otherwise), and a
//! presigned URL until its `X-Amz-Expires` runs out.
//!
//! Secrets never leave [`Keys`]: errors name the access key id at most, and `Debug` prints
//! no secret.

pub mod canonical;
pub mod parse;

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, RwLock};

use hmac::{Hmac, KeyInit as _, Mac as _};
use sha2::Sha256;

use crate::error::{ErrorCode, SqsError};
use parse::Signed;

/// AWS's bound on the distance between a signature's date and the server's time (both ways).
pub const CLOCK_SKEW_MAX_MS: u64 = 15 * 60 * 1000;

/// The service name SQS requests are signed for.
pub const SERVICE: &str = "sqs";

/// Derived keys kept at most; beyond, the cache starts over (a day's keys are four HMACs away).
const CACHED_KEYS_MAX: usize = 4096;

type HmacSha256 = Hmac<Sha256>;

/// The headers of a request, as the verifier reads them.
pub trait HeaderSource {
    /// Calls `visit` with each value of the header `name` (lowercase), in the order received.
    fn for_each_value(&self, name: &str, visit: &mut dyn FnMut(&[u8]));
}

/// What the verifier needs of a request.
pub struct Request<'a> {
    /// `GET`, `POST`...
    pub method: &'a str,
    /// The path as received (still percent-encoded).
    pub path: &'a str,
    /// The query string as received, without `?`.
    pub query: Option<&'a str>,
    /// The URI's authority (HTTP/2's `:authority`), the `host` of a request without `Host`.
    pub authority: Option<&'a str>,
    /// The headers.
    pub headers: &'a dyn HeaderSource,
    /// The body.
    pub body: &'a [u8],
}

/// Why a request is not authenticated. Each variant is one of AWS's error codes; none says
/// anything about a secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AuthError {
    /// No `Authorization` header and no presigned parameters (`MissingAuthenticationToken`).
    Missing,
    /// The signature's parameters are malformed or incomplete (`IncompleteSignature`); the
    /// sentence says which.
    Incomplete(&'static str),
    /// The access key id is not one of ours (`InvalidClientTokenId`).
    UnknownKey,
    /// The signature is not the one the key makes, or the scope is wrong
    /// (`SignatureDoesNotMatch`); `None` is AWS's standard sentence.
    Mismatch(Option<String>),
    /// The signature's date is too far from the server's time, or a presigned URL expired
    /// (`RequestExpired`).
    Expired(String),
}

impl From<AuthError> for SqsError {
    fn from(error: AuthError) -> SqsError {
        match error {
            AuthError::Missing => SqsError::new(
                ErrorCode::MissingAuthenticationToken,
                "The request must contain either a valid (registered) AWS access key ID or X.509 certificate.",
            ),
            AuthError::Incomplete(sentence) => {
                SqsError::new(ErrorCode::IncompleteSignature, sentence)
            }
            AuthError::UnknownKey => SqsError::new(
                ErrorCode::InvalidClientTokenId,
                "The security token included in the request is invalid.",
            ),
            AuthError::Mismatch(None) => SqsError::new(
                ErrorCode::SignatureDoesNotMatch,
                "The request signature we calculated does not match the signature you provided. \
                 Check your AWS Secret Access Key and signing method. Consult the service \
                 documentation for details.",
            ),
            AuthError::Mismatch(Some(sentence)) => {
                SqsError::new(ErrorCode::SignatureDoesNotMatch, sentence)
            }
            AuthError::Expired(sentence) => SqsError::new(ErrorCode::RequestExpired, sentence),
        }
    }
}

/// A secret access key. Its `Debug` prints nothing of it.
#[derive(Clone)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret access key.
    pub fn new(secret: impl Into<String>) -> Secret {
        Secret(secret.into())
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

/// One configured key: its id, secret and the account it acts for.
#[derive(Clone, Debug)]
pub struct Credential {
    /// The access key id clients sign with.
    pub access_key_id: Arc<str>,
    /// The secret access key.
    pub secret: Secret,
    /// The account whose queues the key's requests address.
    pub account_id: Arc<str>,
}

/// Who signed a request that verified.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Verified {
    /// The access key id (a message's `SenderId`).
    pub access_key_id: Arc<str>,
    /// Its account.
    pub account_id: Arc<str>,
}

/// The keys a server accepts, and their derived signing keys.
pub struct Keys {
    by_id: HashMap<Arc<str>, Credential>,
    /// The service requests must be signed for (`sqs`; the test suite's vectors use `service`).
    service: String,
    /// Keyed HMAC states of derived signing keys, by credential scope
    /// (`AKID/YYYYMMDD/region/service/aws4_request`, the text the request carries).
    cache: RwLock<HashMap<Box<str>, HmacSha256>>,
}

impl fmt::Debug for Keys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut ids: Vec<&str> = self.by_id.keys().map(|id| &**id).collect();
        ids.sort_unstable();
        f.debug_struct("Keys")
            .field("access_key_ids", &ids)
            .finish()
    }
}

impl Keys {
    /// The keys for SQS requests.
    pub fn new(credentials: impl IntoIterator<Item = Credential>) -> Keys {
        Keys::for_service(credentials, SERVICE)
    }

    /// The keys for requests signed for `service` (for test vectors of other services).
    pub fn for_service(credentials: impl IntoIterator<Item = Credential>, service: &str) -> Keys {
        Keys {
            by_id: credentials
                .into_iter()
                .map(|credential| (credential.access_key_id.clone(), credential))
                .collect(),
            service: service.to_string(),
            cache: RwLock::new(HashMap::new()),
        }
    }

    /// Whether no key is configured.
    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// Checks `request`'s signature at server time `now_ms`.
    pub fn verify(&self, request: &Request<'_>, now_ms: u64) -> Result<Verified, AuthError> {
        let mut authorization = None;
        request
            .headers
            .for_each_value("authorization", &mut |value| {
                authorization.get_or_insert(value.to_vec());
            });
        let mut decoded = Default::default();
        let presigned = request
            .query
            .map(parse::presigned_params)
            .unwrap_or_default();
        let signed = match &authorization {
            Some(header) => {
                let header = std::str::from_utf8(header).map_err(|_| {
                    AuthError::Incomplete("The Authorization header is not valid text.")
                })?;
                parse::authorization(header)?
            }
            None if presigned.any() => parse::presigned(&presigned, &mut decoded)?,
            None => return Err(AuthError::Missing),
        };
        self.check(request, &signed, now_ms)
    }

    fn check(
        &self,
        request: &Request<'_>,
        signed: &Signed<'_>,
        now_ms: u64,
    ) -> Result<Verified, AuthError> {
        let presigned = signed.presigned_date.is_some();
        let scope = &signed.scope;
        let key = self
            .by_id
            .get(scope.access_key_id)
            .ok_or(AuthError::UnknownKey)?;
        if scope.service != self.service {
            return Err(AuthError::Mismatch(Some(format!(
                "Credential should be scoped to correct service: '{}'.",
                self.service
            ))));
        }
        if !is_region(scope.region) {
            return Err(AuthError::Mismatch(Some(format!(
                "Credential should be scoped to a valid region, not '{}'.",
                printable(scope.region)
            ))));
        }
        let date = self.date(request, signed)?;
        let date_ms = parse::amz_date_ms(&date).ok_or(AuthError::Incomplete(
            "X-Amz-Date must be in the ISO-8601 basic format YYYYMMDD'T'HHMMSS'Z'.",
        ))?;
        if date[..8] != *scope.date {
            return Err(AuthError::Mismatch(Some(format!(
                "Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date \
                 from HTTP: '{}' != '{}', from '{}'.",
                scope.date,
                &date[..8],
                date
            ))));
        }
        check_time(date_ms, signed.presigned_expires_seconds, presigned, now_ms)?;
        let signature = decode_signature(signed.signature).ok_or(AuthError::Mismatch(None))?;
        let mut canonical = Vec::with_capacity(512 + request.body.len() / 8);
        canonical::canonical_request(request, signed, &mut canonical);
        let mut string_to_sign = Vec::with_capacity(160);
        string_to_sign.extend_from_slice(parse::ALGORITHM.as_bytes());
        string_to_sign.push(b'\n');
        string_to_sign.extend_from_slice(date.as_bytes());
        string_to_sign.push(b'\n');
        let mut tail = String::with_capacity(48);
        scope.write_tail(&mut tail);
        string_to_sign.extend_from_slice(tail.as_bytes());
        string_to_sign.push(b'\n');
        string_to_sign.extend_from_slice(&canonical::sha256_hex(&canonical));
        let mut mac = self.signing_mac(signed.credential, key, scope);
        mac.update(&string_to_sign);
        // Constant time: `verify_slice` compares with `subtle`.
        mac.verify_slice(&signature)
            .map_err(|_| AuthError::Mismatch(None))?;
        Ok(Verified {
            access_key_id: key.access_key_id.clone(),
            account_id: key.account_id.clone(),
        })
    }

    /// The signature's date: the presigned `X-Amz-Date`, or the `X-Amz-Date` header.
    fn date(&self, request: &Request<'_>, signed: &Signed<'_>) -> Result<String, AuthError> {
        if let Some(date) = signed.presigned_date {
            return Ok(canonical::percent_decode(date));
        }
        let mut date = None;
        request.headers.for_each_value("x-amz-date", &mut |value| {
            date.get_or_insert_with(|| String::from_utf8_lossy(value).into_owned());
        });
        date.ok_or(AuthError::Incomplete(
            "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' header.",
        ))
    }

    /// The HMAC keyed with the scope's derived signing key, from the cache or derived now.
    fn signing_mac(
        &self,
        credential: &str,
        key: &Credential,
        scope: &parse::Scope<'_>,
    ) -> HmacSha256 {
        if let Some(mac) = self
            .cache
            .read()
            .ok()
            .and_then(|cache| cache.get(credential).cloned())
        {
            return mac;
        }
        let derive = |key: &[u8], data: &str| -> Vec<u8> {
            let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length");
            mac.update(data.as_bytes());
            mac.finalize().into_bytes().to_vec()
        };
        let secret = format!("AWS4{}", key.secret.0);
        let date_key = derive(secret.as_bytes(), scope.date);
        let region_key = derive(&date_key, scope.region);
        let service_key = derive(&region_key, scope.service);
        let signing_key = derive(&service_key, "aws4_request");
        let mac = HmacSha256::new_from_slice(&signing_key).expect("HMAC takes keys of any length");
        if let Ok(mut cache) = self.cache.write() {
            if cache.len() >= CACHED_KEYS_MAX {
                cache.clear();
            }
            cache.insert(credential.into(), mac.clone());
        }
        mac
    }
}

/// AWS's rule of time: a header signature within 15 minutes of now either way; a presigned URL
/// from 15 minutes before its date until its lifetime ends.
fn check_time(
    date_ms: u64,
    expires_seconds: Option<u64>,
    presigned: bool,
    now_ms: u64,
) -> Result<(), AuthError> {
    // The sentences are built only for a refusal: formatting dates costs more than the check.
    let date = || parse::format_amz_date(date_ms);
    let now = || parse::format_amz_date(now_ms);
    if date_ms > now_ms.saturating_add(CLOCK_SKEW_MAX_MS) {
        return Err(AuthError::Expired(format!(
            "Signature not yet current: {} is still later than {} ({} + 15 min.)",
            date(),
            parse::format_amz_date(now_ms.saturating_add(CLOCK_SKEW_MAX_MS)),
            now()
        )));
    }
    if presigned {
        let expires_ms = expires_seconds.unwrap_or(0).saturating_mul(1000);
        if now_ms > date_ms.saturating_add(expires_ms) {
            return Err(AuthError::Expired("Request has expired.".to_string()));
        }
    } else if date_ms.saturating_add(CLOCK_SKEW_MAX_MS) < now_ms {
        return Err(AuthError::Expired(format!(
            "Signature expired: {} is now earlier than {} ({} - 15 min.)",
            date(),
            parse::format_amz_date(now_ms - CLOCK_SKEW_MAX_MS),
            now()
        )));
    }
    Ok(())
}

/// A region name: lowercase letters, digits and hyphens.
fn is_region(region: &str) -> bool {
    !region.is_empty()
        && region.len() <= 64
        && region
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// Text safe to repeat in an error: printable ASCII only, at most 64 characters.
fn printable(text: &str) -> String {
    text.chars()
        .take(64)
        .map(|c| if c.is_ascii_graphic() { c } else { '?' })
        .collect()
}

/// The 32 bytes of a 64-digit hex signature.
fn decode_signature(text: &str) -> Option<[u8; 32]> {
    let bytes = text.as_bytes();
    if bytes.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (index, pair) in bytes.chunks_exact(2).enumerate() {
        let high = hex_digit(pair[0])?;
        let low = hex_digit(pair[1])?;
        out[index] = high << 4 | low;
    }
    Some(out)
}

fn hex_digit(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        _ => None,
    }
}

#[cfg(test)]
mod tests;
