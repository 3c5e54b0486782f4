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
//!
//! Every consumed message has one receipt sealed and one opened, so their base64 is written
//! here for exactly this length ([`encode`], [`decode`]): the `base64` crate's general engine
//! spent about 900 instructions on the two, three times these (the tests check both against it).

use std::hash::Hasher;

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
        encode(&sealed)
    }

    /// Decodes and authenticates a receipt string; anything not sealed by this key is
    /// [`Error::ReceiptHandleIsInvalid`].
    pub fn open(&self, text: &str) -> Result<Receipt> {
        let Some(sealed) = decode(text.as_bytes()) else {
            return Err(Error::ReceiptHandleIsInvalid);
        };
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

/// base64url's alphabet (RFC 4648, section 5).
const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Each byte's value in [`ALPHABET`], or [`NOT_IN_ALPHABET`].
const VALUES: [u8; 256] = {
    let mut values = [NOT_IN_ALPHABET; 256];
    let mut i = 0;
    while i < ALPHABET.len() {
        values[ALPHABET[i] as usize] = i as u8;
        i += 1;
    }
    values
};

/// Marks a byte outside the alphabet: the only value with its top bit set.
const NOT_IN_ALPHABET: u8 = 0xff;

/// The unpadded base64url of a sealed receipt: twelve groups of three bytes give four characters
/// each, and the last byte two (its low two bits followed by four zero bits).
fn encode(sealed: &[u8; SEALED_LEN]) -> String {
    let mut text = [0u8; ENCODED_LEN];
    let character = |sextet: u32| ALPHABET[(sextet & 63) as usize];
    let (groups, [last]) = sealed.split_at(SEALED_LEN - 1) else {
        unreachable!("one byte after the groups")
    };
    for (group, out) in groups.chunks_exact(3).zip(text.chunks_exact_mut(4)) {
        let bits = u32::from(group[0]) << 16 | u32::from(group[1]) << 8 | u32::from(group[2]);
        out[0] = character(bits >> 18);
        out[1] = character(bits >> 12);
        out[2] = character(bits >> 6);
        out[3] = character(bits);
    }
    text[ENCODED_LEN - 2] = character(u32::from(*last) >> 2);
    text[ENCODED_LEN - 1] = character(u32::from(*last) << 4);
    String::from_utf8(text.to_vec()).expect("base64url is ASCII")
}

/// The sealed receipt `text` encodes, if it is exactly the unpadded base64url of 37 bytes:
/// anything else (another length, a character outside the alphabet, non-zero bits after the
/// last byte, which would let two texts name one receipt) is `None`.
fn decode(text: &[u8]) -> Option<[u8; SEALED_LEN]> {
    let text: &[u8; ENCODED_LEN] = text.try_into().ok()?;
    let mut sealed = [0u8; SEALED_LEN];
    // Whether any character was outside the alphabet, checked once at the end.
    let mut seen = 0u8;
    let mut value = |character: u8| {
        let value = VALUES[usize::from(character)];
        seen |= value;
        u32::from(value)
    };
    let (groups, [next_to_last, last]) = text.split_at(ENCODED_LEN - 2) else {
        unreachable!("two characters after the groups")
    };
    for (group, out) in groups.chunks_exact(4).zip(sealed.chunks_exact_mut(3)) {
        let bits =
            value(group[0]) << 18 | value(group[1]) << 12 | value(group[2]) << 6 | value(group[3]);
        out[0] = (bits >> 16) as u8;
        out[1] = (bits >> 8) as u8;
        out[2] = bits as u8;
    }
    let (high, low) = (value(*next_to_last), value(*last));
    if seen & 0x80 != 0 || low & 0x0f != 0 {
        return None;
    }
    sealed[SEALED_LEN - 1] = (high << 2 | low >> 4) as u8;
    Some(sealed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine as _;
    use proptest::prelude::*;

    proptest! {
        /// The base64url of any 37 bytes is the `base64` crate's, and decodes to them.
        #[test]
        fn encoding_agrees_with_the_base64_crate(sealed in any::<[u8; SEALED_LEN]>()) {
            let text = encode(&sealed);
            prop_assert_eq!(&text, &URL_SAFE_NO_PAD.encode(sealed));
            prop_assert_eq!(decode(text.as_bytes()), Some(sealed));
        }

        /// A text with any one byte replaced by any other decodes exactly when the `base64`
        /// crate decodes it to 37 bytes, and to the same bytes: characters outside the alphabet
        /// and non-zero trailing bits are refused by both.
        #[test]
        fn decoding_agrees_with_the_base64_crate(
            sealed in any::<[u8; SEALED_LEN]>(),
            at in 0..ENCODED_LEN,
            byte in any::<u8>(),
        ) {
            let mut text = encode(&sealed).into_bytes();
            text[at] = byte;
            let mut reference = [0u8; SEALED_LEN];
            let expected = match URL_SAFE_NO_PAD.decode_slice(&text, &mut reference) {
                Ok(SEALED_LEN) => Some(reference),
                _ => None,
            };
            prop_assert_eq!(decode(&text), expected);
        }
    }

    /// Texts of other lengths, and the last character's four zero bits.
    #[test]
    fn decoding_refuses_other_lengths_and_trailing_bits() {
        let text = encode(&[0xa5; SEALED_LEN]);
        assert_eq!(decode(text.as_bytes()), Some([0xa5; SEALED_LEN]));
        assert_eq!(decode(&text.as_bytes()[1..]), None);
        assert_eq!(decode(format!("{text}A").as_bytes()), None);
        assert_eq!(decode(b""), None);
        // The last byte 0xa5 ends in bits 01, so its last character is 'Q' (010000); 'R'
        // (010001) sets a trailing bit.
        assert!(text.ends_with('Q'), "{text}");
        let trailing = format!("{}R", &text[..ENCODED_LEN - 1]);
        assert_eq!(decode(trailing.as_bytes()), None);
    }

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
