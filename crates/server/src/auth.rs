//! Who is asking: SigV4 verification of SQS requests on the server's one clock.
//!
//! With `auth = "sigv4"` every SQS request (both protocols, header-signed or presigned) must be
//! signed by one of the configured keys; [`Authenticator::verify`] hands the request's parts to
//! `leaseq_sqs::sigv4` (which knows the algorithm and AWS's errors) with the time of the
//! service's [`Clock`], so a test on a `ManualClock` can age a signature past AWS's 15 minutes
//! without waiting. With `auth = "none"` (no authenticator) nothing is checked, and the access
//! key id of an `Authorization` header, if any, is taken as the sender, as before.
//!
//! Nothing here logs or returns anything of a secret: refusals are AWS's sentences, which name
//! the access key id at most.

use std::fmt;

use axum::http::{HeaderMap, Method, Uri};
use leaseq_sqs::sigv4::{AuthError, HeaderSource, Request, Verified};
pub use leaseq_sqs::sigv4::{Credential, Keys, Secret};

use crate::clock::SharedClock;

/// Verifies requests against a set of keys on a clock.
pub struct Authenticator {
    keys: Keys,
    clock: SharedClock,
}

impl fmt::Debug for Authenticator {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // `Keys`' own Debug lists access key ids only.
        f.debug_struct("Authenticator")
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

/// `http::HeaderMap` as the verifier reads headers.
struct Headers<'a>(&'a HeaderMap);

impl HeaderSource for Headers<'_> {
    fn for_each_value(&self, name: &str, visit: &mut dyn FnMut(&[u8])) {
        for value in self.0.get_all(name) {
            visit(value.as_bytes());
        }
    }
}

impl Authenticator {
    /// An authenticator of `keys`, reading the time from `clock`.
    pub fn new(keys: Keys, clock: SharedClock) -> Authenticator {
        Authenticator { keys, clock }
    }

    /// Who signed this request, or why it is refused.
    pub fn verify(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        body: &[u8],
    ) -> Result<Verified, AuthError> {
        let request = Request {
            method: method.as_str(),
            path: uri.path(),
            query: uri.query(),
            authority: uri.authority().map(|authority| authority.as_str()),
            headers: &Headers(headers),
            body,
        };
        self.keys.verify(&request, self.clock.now_ms())
    }
}
