//! Finding, 16 bytes at a time, the bytes of a text that a JSON string cannot hold as they are
//! (`"`, `\` and control characters) and, where asked, the bytes of non-ASCII characters: what
//! ends a string the JSON reader (`decode::json`) reads, and what the JSON writer (`encode`)
//! must escape. Most strings of a request or an answer (a message body, a receipt handle) hold
//! none of them, and a byte at a time took about 2 instructions a byte where this takes under 1.

/// Whether `byte` is special: `"`, `\`, a control character, or, if `non_ascii`, 0x80 or above.
fn is_special(byte: u8, non_ascii: bool) -> bool {
    byte == b'"' || byte == b'\\' || byte < 0x20 || (non_ascii && byte >= 0x80)
}

/// The special bytes among 16 (see [`is_special`]): the top bit of each one's lane set.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn special_lanes(bytes: std::arch::x86_64::__m128i, non_ascii: bool) -> std::arch::x86_64::__m128i {
    use std::arch::x86_64::{
        _mm_cmpeq_epi8, _mm_cmplt_epi8, _mm_min_epu8, _mm_or_si128, _mm_set1_epi8,
    };
    // SAFETY: SSE2 is part of x86_64.
    unsafe {
        let quote = _mm_cmpeq_epi8(bytes, _mm_set1_epi8(b'"' as i8));
        let backslash = _mm_cmpeq_epi8(bytes, _mm_set1_epi8(b'\\' as i8));
        let low = if non_ascii {
            // Signed, below 0x20: a control character, or (negative) 0x80 and above.
            _mm_cmplt_epi8(bytes, _mm_set1_epi8(0x20))
        } else {
            // Unsigned, at most 0x1f: min(byte, 0x1f) is the byte itself.
            _mm_cmpeq_epi8(_mm_min_epu8(bytes, _mm_set1_epi8(0x1f)), bytes)
        };
        _mm_or_si128(_mm_or_si128(quote, backslash), low)
    }
}

/// Whether `text` holds a byte that a JSON string cannot hold as it is (`"`, `\`, a control
/// character): most do not, and are then written whole. The check does not stop early (see
/// `leaseq_core::bytes`).
///
/// On x86_64 it keeps two running minimums over 16 lanes instead of a mask per block: of each
/// byte xor 0x02, which is at most 0x20 exactly for a control character (0x00 to 0x1f) or `"`
/// (0x22); and of each byte xor `\`, which is 0 exactly for `\`. That is 6 instructions per
/// 16 bytes where a mask per block took 15 (callgrind: `json_string` of a 256-byte body took
/// 326 instructions with the masks, 216 with this).
#[cfg(target_arch = "x86_64")]
pub(crate) fn any_special(text: &[u8]) -> bool {
    use std::arch::x86_64::{
        __m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_min_epu8, _mm_movemask_epi8, _mm_or_si128,
        _mm_set1_epi8, _mm_xor_si128,
    };
    if text.len() < 16 {
        return text
            .iter()
            .fold(false, |any, &byte| any | is_special(byte, false));
    }
    // SAFETY: SSE2 is part of x86_64; every load reads 16 bytes inside `text` (a chunk, or the
    // last 16 bytes of a text of at least 16), and needs no alignment.
    unsafe {
        let (quote_mask, backslash) = (_mm_set1_epi8(0x02), _mm_set1_epi8(b'\\' as i8));
        let (mut low, mut backslashes) = (_mm_set1_epi8(-1), _mm_set1_epi8(-1));
        let mut fold = |block: &[u8]| {
            let block = _mm_loadu_si128(block.as_ptr().cast::<__m128i>());
            low = _mm_min_epu8(low, _mm_xor_si128(block, quote_mask));
            backslashes = _mm_min_epu8(backslashes, _mm_xor_si128(block, backslash));
        };
        let blocks = text.chunks_exact(16);
        let rest = blocks.remainder().len();
        blocks.for_each(&mut fold);
        if rest > 0 {
            fold(&text[text.len() - 16..]);
        }
        // Lanes at most 0x20 (min(lane, 0x20) is the lane), and lanes that are 0.
        let low = _mm_cmpeq_epi8(_mm_min_epu8(low, _mm_set1_epi8(0x20)), low);
        let backslashes = _mm_cmpeq_epi8(backslashes, _mm_set1_epi8(0));
        _mm_movemask_epi8(_mm_or_si128(low, backslashes)) != 0
    }
}

#[cfg(not(target_arch = "x86_64"))]
pub(crate) fn any_special(text: &[u8]) -> bool {
    text.iter()
        .fold(false, |any, &byte| any | is_special(byte, false))
}

/// The first special byte of `text` at or after `at` (see [`is_special`]), or `text.len()`.
#[cfg(target_arch = "x86_64")]
pub(crate) fn special_byte(text: &[u8], at: usize, non_ascii: bool) -> usize {
    use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_movemask_epi8};
    // A mask of the special bytes among the 16 at `start`.
    let block = |start: usize| -> u32 {
        assert!(start + 16 <= text.len());
        // SAFETY: SSE2 is part of x86_64; the 16 bytes at `start` are inside `text` (asserted
        // above), and the load needs no alignment.
        unsafe {
            let bytes = _mm_loadu_si128(text.as_ptr().add(start).cast::<__m128i>());
            _mm_movemask_epi8(special_lanes(bytes, non_ascii)) as u32
        }
    };
    let mut at = at;
    while at + 16 <= text.len() {
        let special = block(at);
        if special != 0 {
            return at + special.trailing_zeros() as usize;
        }
        at += 16;
    }
    if at >= text.len() || text.len() < 16 {
        return special_byte_by_byte(text, at, non_ascii);
    }
    // The last 16 bytes of the text, less those before `at`.
    let last = text.len() - 16;
    match block(last) >> (at - last) {
        0 => text.len(),
        special => at + special.trailing_zeros() as usize,
    }
}

#[cfg(not(target_arch = "x86_64"))]
pub(crate) fn special_byte(text: &[u8], at: usize, non_ascii: bool) -> usize {
    special_byte_by_byte(text, at, non_ascii)
}

/// [`special_byte`], a byte at a time.
fn special_byte_by_byte(text: &[u8], at: usize, non_ascii: bool) -> usize {
    text[at..]
        .iter()
        .position(|&byte| is_special(byte, non_ascii))
        .map_or(text.len(), |offset| at + offset)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// The 16-byte search finds what the byte-at-a-time one does, at every offset and
        /// length (whole blocks, and the last bytes that do not fill one).
        #[test]
        fn the_block_search_agrees_with_the_byte_search(
            text in prop::collection::vec(prop_oneof![any::<u8>(), Just(b'x')], 0..80),
            at in 0usize..80,
            non_ascii in any::<bool>(),
        ) {
            let at = at.min(text.len());
            prop_assert_eq!(
                special_byte(&text, at, non_ascii),
                special_byte_by_byte(&text, at, non_ascii)
            );
        }
    }

    proptest! {
        /// The running-minimum check answers as a byte loop does, on texts that are mostly
        /// printable ASCII (so that long texts without a special byte are common) with the
        /// occasional byte of any value, and with the bytes next to the special ones.
        #[test]
        fn any_special_agrees_with_the_byte_search(
            text in prop::collection::vec(
                prop_oneof![
                    40 => 0x20u8..0x7f,
                    1 => any::<u8>(),
                    1 => prop::sample::select(vec![b'"', b'\\', 0x1f, 0x20, 0x21, 0x23, 0x5b, 0x5d, 0x7f, 0x80]),
                ],
                0..100,
            ),
        ) {
            prop_assert_eq!(
                any_special(&text),
                special_byte_by_byte(&text, 0, false) < text.len()
            );
        }
    }

    /// Each special byte is found at every position of texts up to three blocks long, and its
    /// neighbours are not taken for special ones.
    #[test]
    fn any_special_finds_each_special_byte_anywhere() {
        for len in 1..48 {
            for at in 0..len {
                let mut text = vec![b'a'; len];
                for byte in 0..=255u8 {
                    text[at] = byte;
                    assert_eq!(
                        any_special(&text),
                        is_special(byte, false),
                        "{len} {at} {byte}"
                    );
                }
            }
        }
    }
}
