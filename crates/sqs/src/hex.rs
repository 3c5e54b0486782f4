//! Lowercase hexadecimal text of 16 bytes (an MD5 digest, a message id, a request id), and the
//! hyphenated UUID form (8-4-4-4-12) of the same digits. Every answer carries a few of them: a
//! send's answer a digest and a message id, a receive's two per message, every answer a request
//! id. A table of digits took about 130 instructions for 16 bytes; the SSE2 version (part of
//! x86_64) about 20.

/// The 32 lowercase hexadecimal digits of `bytes`, two per byte, high nibble first.
#[cfg(target_arch = "x86_64")]
pub fn hex16(bytes: &[u8; 16]) -> [u8; 32] {
    use std::arch::x86_64::{
        __m128i, _mm_add_epi8, _mm_and_si128, _mm_cmpgt_epi8, _mm_loadu_si128, _mm_set1_epi8,
        _mm_srli_epi16, _mm_storeu_si128, _mm_unpackhi_epi8, _mm_unpacklo_epi8,
    };
    let mut out = [0u8; 32];
    // SAFETY: SSE2 is part of x86_64; the load reads the 16 bytes of `bytes` and the two
    // stores write the 32 of `out`, none needing alignment.
    unsafe {
        let bytes = _mm_loadu_si128(bytes.as_ptr().cast::<__m128i>());
        let nibble = _mm_set1_epi8(0x0f);
        let high = _mm_and_si128(_mm_srli_epi16(bytes, 4), nibble);
        let low = _mm_and_si128(bytes, nibble);
        // A nibble's digit: '0' + n, and 'a' - '0' - 10 more from 10 on.
        let digits = |nibbles: __m128i| {
            let letter = _mm_cmpgt_epi8(nibbles, _mm_set1_epi8(9));
            let offset = _mm_and_si128(letter, _mm_set1_epi8((b'a' - b'0' - 10) as i8));
            _mm_add_epi8(_mm_add_epi8(nibbles, _mm_set1_epi8(b'0' as i8)), offset)
        };
        let first = digits(_mm_unpacklo_epi8(high, low));
        let second = digits(_mm_unpackhi_epi8(high, low));
        _mm_storeu_si128(out.as_mut_ptr().cast::<__m128i>(), first);
        _mm_storeu_si128(out.as_mut_ptr().add(16).cast::<__m128i>(), second);
    }
    out
}

#[cfg(not(target_arch = "x86_64"))]
pub fn hex16(bytes: &[u8; 16]) -> [u8; 32] {
    hex16_by_table(bytes)
}

/// [`hex16`] through a table of digits.
#[cfg(any(test, not(target_arch = "x86_64")))]
fn hex16_by_table(bytes: &[u8; 16]) -> [u8; 32] {
    let mut out = [0; 32];
    for (pair, &byte) in out.chunks_exact_mut(2).zip(bytes) {
        pair[0] = crate::HEX_DIGITS[usize::from(byte >> 4)];
        pair[1] = crate::HEX_DIGITS[usize::from(byte & 0x0f)];
    }
    out
}

/// 16 bytes as a UUID's text: lowercase, hyphenated 8-4-4-4-12 (what `uuid`'s `hyphenated`
/// writes), without the formatting machinery.
pub fn hyphenated(bytes: &[u8; 16]) -> [u8; 36] {
    let digits = hex16(bytes);
    let mut out = [b'-'; 36];
    out[..8].copy_from_slice(&digits[..8]);
    out[9..13].copy_from_slice(&digits[8..12]);
    out[14..18].copy_from_slice(&digits[12..16]);
    out[19..23].copy_from_slice(&digits[16..20]);
    out[24..].copy_from_slice(&digits[20..]);
    out
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// The digits are the table's, and the hyphenated text is a message id's `Display`
        /// (uuid's).
        #[test]
        fn digits_and_uuid_text_agree_with_references(bytes in any::<[u8; 16]>()) {
            prop_assert_eq!(hex16(&bytes), hex16_by_table(&bytes));
            let expected = bytes.iter().map(|byte| format!("{byte:02x}")).collect::<String>();
            prop_assert_eq!(&hex16(&bytes)[..], expected.as_bytes());
            let id = leaseq_core::MessageId(bytes).to_string();
            prop_assert_eq!(&hyphenated(&bytes)[..], id.as_bytes());
        }
    }

    #[test]
    fn every_nibble_has_its_digit() {
        let bytes: [u8; 16] = std::array::from_fn(|index| (index as u8) << 4 | (15 - index as u8));
        assert_eq!(&hex16(&bytes), b"0f1e2d3c4b5a69788796a5b4c3d2e1f0");
    }
}
