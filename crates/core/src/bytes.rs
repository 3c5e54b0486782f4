//! Whether any byte of a text is of a kind, asked 16 bytes at a time: the checks that every
//! message body passes through (its characters when sent, its UTF-8 when read back from the
//! log; what JSON must escape, when answered, is `leaseq_sqs::scan`'s). Most bodies hold no such byte,
//! so the checks do not stop early (a branch per block costs more than the few blocks it saves)
//! and a text's last bytes that do not fill a block are checked in the block that ends with the
//! text, overlapping the one before (a byte loop over those last bytes costs a few instructions
//! a byte).

/// Whether any byte of `bytes` is marked: on x86_64, `block_marks` marks 16 bytes at a time (SSE2,
/// part of x86_64: the top bit of each marked byte's lane set), and `byte` marks the bytes of a
/// text shorter than 16; elsewhere `byte` marks every byte. The two must agree.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn any_marked(
    bytes: &[u8],
    block_marks: impl Fn(std::arch::x86_64::__m128i) -> std::arch::x86_64::__m128i,
    byte: impl Fn(u8) -> bool,
) -> bool {
    use std::arch::x86_64::{
        __m128i, _mm_loadu_si128, _mm_movemask_epi8, _mm_or_si128, _mm_setzero_si128,
    };
    if bytes.len() < 16 {
        return bytes.iter().fold(false, |any, &b| any | byte(b));
    }
    // SAFETY: SSE2 is part of x86_64; each load reads a 16-byte chunk of `bytes`, or its last
    // 16 bytes (it has at least 16), and needs no alignment.
    unsafe {
        let load = |block: &[u8]| _mm_loadu_si128(block.as_ptr().cast::<__m128i>());
        let blocks = bytes.chunks_exact(16);
        let rest = blocks.remainder().len();
        let mut marked = blocks.fold(_mm_setzero_si128(), |marked, block| {
            _mm_or_si128(marked, block_marks(load(block)))
        });
        if rest > 0 {
            marked = _mm_or_si128(marked, block_marks(load(&bytes[bytes.len() - 16..])));
        }
        _mm_movemask_epi8(marked) != 0
    }
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
fn any_marked(bytes: &[u8], byte: impl Fn(u8) -> bool) -> bool {
    bytes.iter().fold(false, |any, &b| any | byte(b))
}

/// Whether every byte of `bytes` is ASCII (below 0x80).
pub fn is_ascii(bytes: &[u8]) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        // A byte's top bit is its mark already.
        !any_marked(bytes, |block| block, |byte| byte >= 0x80)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        !any_marked(bytes, |byte| byte >= 0x80)
    }
}

/// Whether every byte of `bytes` is ASCII from U+0020 (space) on: 0x20 to 0x7f.
pub fn is_ascii_from_space(bytes: &[u8]) -> bool {
    let outside = |byte: u8| !(0x20..0x80).contains(&byte);
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_cmplt_epi8, _mm_set1_epi8};
        // Signed, below 0x20: a control character, or (negative) 0x80 and above.
        // SAFETY: SSE2 is part of x86_64.
        let block = |block| unsafe { _mm_cmplt_epi8(block, _mm_set1_epi8(0x20)) };
        !any_marked(bytes, block, outside)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        !any_marked(bytes, outside)
    }
}

/// `bytes` as text, if they are UTF-8: ASCII (the common case) found 16 bytes at a time, about 3
/// instructions per 16 where `std::str::from_utf8` took about 13 (callgrind: 217 for a 256-byte
/// body read back from the log); anything else checked by `from_utf8`.
pub fn utf8(bytes: &[u8]) -> Result<&str, std::str::Utf8Error> {
    if is_ascii(bytes) {
        // SAFETY: every byte is ASCII (checked just above), and ASCII is UTF-8.
        Ok(unsafe { std::str::from_utf8_unchecked(bytes) })
    } else {
        std::str::from_utf8(bytes)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// Bytes that are mostly ASCII from space on, in texts long and short, so that each check
    /// sees texts it accepts as well as ones it refuses (at every position of a block and of the
    /// overlapping last one).
    fn texts() -> impl Strategy<Value = Vec<u8>> {
        let byte = prop_oneof![
            8 => 0x20u8..0x80,
            1 => any::<u8>(),
        ];
        prop::collection::vec(byte, 0..80)
    }

    proptest! {
        #[test]
        fn is_ascii_agrees_with_the_standard_library(bytes in texts()) {
            prop_assert_eq!(is_ascii(&bytes), bytes.is_ascii());
        }

        #[test]
        fn is_ascii_from_space_agrees_with_a_byte_loop(bytes in texts()) {
            let expected = bytes.iter().all(|&byte| (0x20..0x80).contains(&byte));
            prop_assert_eq!(is_ascii_from_space(&bytes), expected);
        }

        #[test]
        fn utf8_agrees_with_the_standard_library(
            bytes in prop_oneof![texts(), any::<String>().prop_map(String::into_bytes)]
        ) {
            prop_assert_eq!(utf8(&bytes), std::str::from_utf8(&bytes));
        }
    }

    /// One marked byte is found wherever it sits, in texts of every length up to three blocks.
    #[test]
    fn a_single_marked_byte_is_found_at_every_position() {
        for len in 1..48 {
            for at in 0..len {
                let mut bytes = vec![b'a'; len];
                bytes[at] = 0x80;
                assert!(!is_ascii(&bytes), "len {len}, at {at}");
                bytes[at] = 0x1f;
                assert!(!is_ascii_from_space(&bytes), "len {len}, at {at}");
                assert!(is_ascii(&bytes), "len {len}, at {at}");
            }
        }
    }
}
