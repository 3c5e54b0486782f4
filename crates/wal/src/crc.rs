//! CRC32C (Castagnoli), the checksum of frames, segment headers and snapshots.
//!
//! The `crc32c` crate is built for long buffers: each call aligns the buffer, then runs three
//! interleaved streams over 24 KiB and 768-byte chunks before a plain loop over the rest. Most
//! of the log's checksums are over short inputs (a frame's 4-byte length, then a lease or delete
//! record of some tens of bytes, or a message of a few hundred), where that set-up costs more
//! than the checksum itself: a lease record's frame took about 300 instructions. Below
//! [`INTERLEAVED_FROM_BYTES`], where the crate's interleaved paths never run anyway, the SSE 4.2
//! instruction is applied here directly, eight bytes at a time; longer inputs, and machines
//! without SSE 4.2, go to the crate. Both compute the same function (the tests compare them).

/// The length from which the `crc32c` crate interleaves three streams (3 × its 256-byte short
/// block); below it the crate, too, runs one stream of 8-byte steps.
const INTERLEAVED_FROM_BYTES: usize = 768;

/// The CRC32C of `data` continued from `crc` (the CRC of what came before; 0 for none).
#[inline]
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if data.len() < INTERLEAVED_FROM_BYTES && std::arch::is_x86_feature_detected!("sse4.2") {
        // SAFETY: the CPU has SSE 4.2, the only feature `short_sse42` is compiled with.
        return unsafe { short_sse42(crc, data) };
    }
    crc32c::crc32c_append(crc, data)
}

/// The CRC32C of `data`.
#[inline]
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c_append(0, data)
}

/// The CRC32C of a little-endian `u32` followed by `data` (a frame's length, then its
/// payload): the length is one 4-byte step rather than a call of its own.
#[inline]
pub fn crc32c_of_u32_then(value: u32, data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if data.len() < INTERLEAVED_FROM_BYTES && std::arch::is_x86_feature_detected!("sse4.2") {
        // SAFETY: as in `crc32c_append`.
        return unsafe { u32_then_sse42(value, data) };
    }
    crc32c::crc32c_append(crc32c::crc32c(&value.to_le_bytes()), data)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
fn u32_then_sse42(value: u32, data: &[u8]) -> u32 {
    use std::arch::x86_64::_mm_crc32_u32;
    // The running value is kept inverted (the CRC's pre- and post-conditioning).
    let inverted = _mm_crc32_u32(!0, value);
    short_sse42(!inverted, data)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "sse4.2")]
fn short_sse42(crc: u32, data: &[u8]) -> u32 {
    use std::arch::x86_64::{_mm_crc32_u32, _mm_crc32_u64, _mm_crc32_u8};
    let word = |bytes: &[u8]| u64::from_le_bytes(bytes.try_into().expect("8 bytes"));
    let mut running = u64::from(!crc);
    // Four steps per iteration: one loop branch per 32 bytes.
    let mut blocks = data.chunks_exact(32);
    for block in &mut blocks {
        running = _mm_crc32_u64(running, word(&block[0..8]));
        running = _mm_crc32_u64(running, word(&block[8..16]));
        running = _mm_crc32_u64(running, word(&block[16..24]));
        running = _mm_crc32_u64(running, word(&block[24..32]));
    }
    let mut words = blocks.remainder().chunks_exact(8);
    for bytes in &mut words {
        running = _mm_crc32_u64(running, word(bytes));
    }
    // The CRC instructions leave the upper half of a 64-bit result zero.
    let mut running = running as u32;
    let mut rest = words.remainder();
    if let Some((four, after)) = rest.split_first_chunk::<4>() {
        running = _mm_crc32_u32(running, u32::from_le_bytes(*four));
        rest = after;
    }
    for &byte in rest {
        running = _mm_crc32_u8(running, byte);
    }
    !running
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The check value of CRC-32C ("123456789"), from the catalogue of parametrised CRC
    /// algorithms (reveng.sourceforge.io/crc-catalogue, CRC-32/ISCSI: check=0xe3069283).
    #[test]
    fn the_catalogue_check_value() {
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
        assert_eq!(crc32c_append(crc32c(b"1234"), b"56789"), 0xe306_9283);
        assert_eq!(crc32c(b""), 0);
    }

    proptest! {
        /// Every length on both sides of each step size and of the crate's threshold, at
        /// every alignment, continued from any CRC: the same value as the `crc32c` crate.
        #[test]
        fn agrees_with_the_crate(
            data in proptest::collection::vec(any::<u8>(), 0..2_000),
            offset in 0usize..8,
            crc in any::<u32>(),
            value in any::<u32>(),
        ) {
            let data = &data[offset.min(data.len())..];
            prop_assert_eq!(crc32c_append(crc, data), crc32c::crc32c_append(crc, data));
            let mut framed = value.to_le_bytes().to_vec();
            framed.extend_from_slice(data);
            prop_assert_eq!(crc32c_of_u32_then(value, data), crc32c::crc32c(&framed));
        }
    }

    /// Each length from 0 to past the threshold, so that every remainder case (32-byte blocks,
    /// 8-byte words, a 4-byte step, single bytes) is covered for certain, not by chance.
    #[test]
    fn agrees_with_the_crate_at_every_length() {
        let data: Vec<u8> = (0..INTERLEAVED_FROM_BYTES + 80)
            .map(|i| (i * 131 + 7) as u8)
            .collect();
        for len in 0..data.len() {
            let data = &data[..len];
            assert_eq!(crc32c(data), crc32c::crc32c(data), "length {len}");
            let mut framed = (len as u32).to_le_bytes().to_vec();
            framed.extend_from_slice(data);
            assert_eq!(
                crc32c_of_u32_then(len as u32, data),
                crc32c::crc32c(&framed),
                "length {len}"
            );
        }
    }
}
