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
//! Every consumed message has one receipt sealed and one opened, so their base64 and their tag
//! are written here for exactly this length ([`encode`], [`decode`], [`ReceiptKey::tag`]): the
//! `base64` crate's general engine spent about 900 instructions on the two, three times these,
//! and `siphasher`'s streaming hasher about 300 on a tag, where these rounds take 222 (the tests
//! check each against its crate).

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
    /// SipHash's state after its initialization with this key, for a 128-bit output.
    initial: [u64; 4],
}

impl std::fmt::Debug for ReceiptKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ReceiptKey(..)")
    }
}

impl ReceiptKey {
    /// A key from 16 secret bytes (random, and kept across restarts so receipts stay valid).
    pub fn new(key: [u8; 16]) -> ReceiptKey {
        let k0 = u64::from_le_bytes(key[..8].try_into().expect("8 bytes"));
        let k1 = u64::from_le_bytes(key[8..].try_into().expect("8 bytes"));
        // SipHash's initialization (Aumasson and Bernstein, "SipHash: a fast short-input PRF",
        // 2012, section 2); the 128-bit output also flips 0xee into v1.
        let initial = [
            k0 ^ 0x736f_6d65_7073_6575,
            k1 ^ 0x646f_7261_6e64_6f6d ^ 0xee,
            k0 ^ 0x6c79_6765_6e65_7261,
            k1 ^ 0x7465_6462_7974_6573,
        ];
        ReceiptKey { key, initial }
    }

    /// The tag of a receipt's body: SipHash-2-4 with a 128-bit output, as `siphasher`'s
    /// `SipHasher24::finish128().as_bytes()` gives it (the tests compare the two), for the body's
    /// one length: two 8-byte words, then the last five bytes with the length in the top byte,
    /// each compressed by two rounds; then four rounds per half of the output.
    fn tag(&self, body: &[u8; BODY_LEN]) -> [u8; 16] {
        let word = |at: usize| u64::from_le_bytes(body[at..at + 8].try_into().expect("8 bytes"));
        let mut last = [0u8; 8];
        last[..BODY_LEN - 16].copy_from_slice(&body[16..]);
        last[7] = BODY_LEN as u8;
        let mut v = self.initial;
        for m in [word(0), word(8), u64::from_le_bytes(last)] {
            v[3] ^= m;
            sip_round(&mut v);
            sip_round(&mut v);
            v[0] ^= m;
        }
        v[2] ^= 0xee;
        (0..4).for_each(|_| sip_round(&mut v));
        let h1 = v[0] ^ v[1] ^ v[2] ^ v[3];
        v[1] ^= 0xdd;
        (0..4).for_each(|_| sip_round(&mut v));
        let h2 = v[0] ^ v[1] ^ v[2] ^ v[3];
        let mut tag = [0u8; 16];
        tag[..8].copy_from_slice(&h1.to_le_bytes());
        tag[8..].copy_from_slice(&h2.to_le_bytes());
        tag
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
        let tag = self.tag(sealed.first_chunk().expect("the body"));
        sealed[BODY_LEN..].copy_from_slice(&tag);
        encode(&sealed)
    }

    /// Decodes and authenticates a receipt string; anything not sealed by this key is
    /// [`Error::ReceiptHandleIsInvalid`].
    pub fn open(&self, text: &str) -> Result<Receipt> {
        let Some(sealed) = decode(text.as_bytes()) else {
            return Err(Error::ReceiptHandleIsInvalid);
        };
        let tag = self.tag(sealed.first_chunk().expect("the body"));
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

/// One SipRound (the paper's section 2): additions, rotations and xors of the four words.
#[inline(always)]
fn sip_round(v: &mut [u64; 4]) {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13) ^ v[0];
    v[0] = v[0].rotate_left(32);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(16) ^ v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(21) ^ v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(17) ^ v[2];
    v[2] = v[2].rotate_left(32);
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

/// Each 12-bit value's two characters in [`ALPHABET`]: the first for its high six bits.
static PAIRS: [[u8; 2]; 4096] = {
    let mut pairs = [[0u8; 2]; 4096];
    let mut value = 0;
    while value < pairs.len() {
        pairs[value] = [ALPHABET[value >> 6], ALPHABET[value & 63]];
        value += 1;
    }
    pairs
};

/// The unpadded base64url of a sealed receipt: six groups of six bytes give eight characters
/// each, two per 12 bits (from [`PAIRS`]), and the last byte two (its high six bits, then its
/// low two followed by four zero bits). A character at a time, three bytes per step, took
/// about 270 instructions (callgrind); with this, `Engine::delivery`, which seals the receipt,
/// went from 547 instructions to 372.
fn encode(sealed: &[u8; SEALED_LEN]) -> String {
    // Room to read each group as eight bytes.
    let mut padded = [0u8; SEALED_LEN + 3];
    padded[..SEALED_LEN].copy_from_slice(sealed);
    let mut text = [0u8; ENCODED_LEN];
    for (group, out) in text.chunks_exact_mut(8).enumerate() {
        let at = group * 6;
        let eight = u64::from_be_bytes(padded[at..at + 8].try_into().expect("8 bytes"));
        for (pair, out) in out.chunks_exact_mut(2).enumerate() {
            let value = (eight >> (52 - 12 * pair)) & 0xfff;
            out.copy_from_slice(&PAIRS[value as usize]);
        }
    }
    let last = sealed[SEALED_LEN - 1];
    text[ENCODED_LEN - 2] = ALPHABET[usize::from(last >> 2)];
    text[ENCODED_LEN - 1] = ALPHABET[usize::from(last << 4 & 63)];
    crate::bytes::utf8(&text)
        .expect("base64url is ASCII")
        .to_owned()
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
        /// A receipt body's tag is `siphasher`'s SipHash-2-4 with a 128-bit output, under any
        /// key, for any body.
        #[test]
        fn tags_agree_with_siphasher(key in any::<[u8; 16]>(), body in any::<[u8; BODY_LEN]>()) {
            let mut reference = SipHasher24::new_with_key(&key);
            reference.write(&body);
            prop_assert_eq!(ReceiptKey::new(key).tag(&body), reference.finish128().as_bytes());
        }

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
