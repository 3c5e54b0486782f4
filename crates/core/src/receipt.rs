//! Receipts: the per-attempt authority to delete or extend a lease.
//!
//! A receipt names the queue (by its unique id, so a receipt outlives neither its queue nor a
//! queue later created under the same name), the message (its sequence number in the queue) and
//! the attempt (the receive count the receive produced). It is sealed with a keyed MAC
//! (SipHash-2-4, 128-bit tag) under a secret the caller hands in, so clients cannot forge or alter
//! one: a receipt either decodes to exactly what the engine issued or is rejected.
//!
//! Layout before base64url (no padding): version (1 byte) | queue id (8, big-endian) |
//! sequence (8) | attempt (4) | tag (16) = 37 bytes, 50 characters.

use std::hash::Hasher;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use siphasher::sip128::{Hasher128, SipHasher24};

use crate::error::{Error, Result};

const VERSION: u8 = 1;
const BODY_LEN: usize = 1 + 8 + 8 + 4;
const SEALED_LEN: usize = BODY_LEN + 16;
const ENCODED_LEN: usize = (SEALED_LEN * 4).div_ceil(3);

/// The decoded content of a receipt.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Receipt {
    /// The unique id of the queue the message was received from.
    pub queue_id: u64,
    /// The message's sequence number in that queue.
    pub seq: u64,
    /// The attempt this receipt belongs to (1 for the first receive).
    pub attempt: u32,
}

/// The server secret that seals receipts.
#[derive(Clone)]
pub struct ReceiptKey {
    key: [u8; 16],
}

impl std::fmt::Debug for ReceiptKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReceiptKey(..)")
    }
}

impl ReceiptKey {
    /// A key from 16 secret bytes (random, and kept across restarts so receipts stay valid).
    pub fn new(key: [u8; 16]) -> ReceiptKey {
        ReceiptKey { key }
    }

    fn tag(&self, body: &[u8]) -> [u8; 16] {
        let mut mac = SipHasher24::new_with_key(&self.key);
        mac.write(body);
        mac.finish128().as_bytes()
    }

    /// The receipt string for `receipt`.
    /// A 128-bit tag of `message` under this key, for another use than receipts: `domain`
    /// (a fixed name of that use, at least 24 bytes) comes first, so no tag of one use is a
    /// tag of another, nor of a receipt (whose body is 21 bytes). A cluster's nodes share the
    /// key (it is in PostgreSQL) and sign what they ask of each other with it.
    pub fn tag_for(&self, domain: &[u8], message: &[u8]) -> [u8; 16] {
        assert!(domain.len() >= 24, "a domain longer than a receipt's body");
        let mut mac = SipHasher24::new_with_key(&self.key);
        mac.write(&(domain.len() as u32).to_be_bytes());
        mac.write(domain);
        mac.write(message);
        mac.finish128().as_bytes()
    }

    pub fn seal(&self, receipt: Receipt) -> String {
        let mut sealed = [0u8; SEALED_LEN];
        sealed[0] = VERSION;
        sealed[1..9].copy_from_slice(&receipt.queue_id.to_be_bytes());
        sealed[9..17].copy_from_slice(&receipt.seq.to_be_bytes());
        sealed[17..21].copy_from_slice(&receipt.attempt.to_be_bytes());
        let tag = self.tag(&sealed[..BODY_LEN]);
        sealed[BODY_LEN..].copy_from_slice(&tag);
        URL_SAFE_NO_PAD.encode(sealed)
    }

    /// Decodes and authenticates a receipt string; anything not sealed by this key is
    /// [`Error::ReceiptHandleIsInvalid`].
    pub fn open(&self, text: &str) -> Result<Receipt> {
        if text.len() != ENCODED_LEN {
            return Err(Error::ReceiptHandleIsInvalid);
        }
        let mut sealed = [0u8; SEALED_LEN];
        match URL_SAFE_NO_PAD.decode_slice(text, &mut sealed) {
            Ok(SEALED_LEN) => {}
            _ => return Err(Error::ReceiptHandleIsInvalid),
        }
        let tag = self.tag(&sealed[..BODY_LEN]);
        // Constant-time comparison: a timing side channel must not reveal a valid tag's prefix.
        let difference = tag
            .iter()
            .zip(&sealed[BODY_LEN..])
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        if difference != 0 || sealed[0] != VERSION {
            return Err(Error::ReceiptHandleIsInvalid);
        }
        let u64_at = |i: usize| u64::from_be_bytes(sealed[i..i + 8].try_into().expect("8 bytes"));
        Ok(Receipt {
            queue_id: u64_at(1),
            seq: u64_at(9),
            attempt: u32::from_be_bytes(sealed[17..21].try_into().expect("4 bytes")),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_tamper() {
        let key = ReceiptKey::new([7; 16]);
        let receipt = Receipt {
            queue_id: 3,
            seq: 99,
            attempt: 2,
        };
        let text = key.seal(receipt);
        assert_eq!(text.len(), ENCODED_LEN);
        assert_eq!(key.open(&text), Ok(receipt));
        // Any single changed character is rejected.
        for i in 0..text.len() {
            let mut bytes = text.clone().into_bytes();
            bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
            let altered = String::from_utf8(bytes).unwrap();
            assert_eq!(key.open(&altered), Err(Error::ReceiptHandleIsInvalid));
        }
        assert_eq!(
            ReceiptKey::new([8; 16]).open(&text),
            Err(Error::ReceiptHandleIsInvalid)
        );
        assert_eq!(key.open("garbage"), Err(Error::ReceiptHandleIsInvalid));
        assert_eq!(key.open(""), Err(Error::ReceiptHandleIsInvalid));
    }
}
