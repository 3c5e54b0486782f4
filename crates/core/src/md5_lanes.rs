//! The MD5 digests of several messages at once: the bodies of a `SendMessageBatch`, whose
//! `MD5OfMessageBody` each entry's answer carries.
//!
//! MD5 (RFC 1321) runs a message through 64 steps per 64-byte block, each step depending on the
//! one before, so one digest keeps one 32-bit lane of the CPU busy at a time. Independent messages
//! need not wait for each other: with AVX2, each 256-bit register holds one word of eight
//! messages, and each instruction advances eight digests; with AVX-512F, sixteen, and a step
//! takes six instructions instead of ten (a round's function is one `vpternlogd`, a rotation one
//! `vprold`). For 256-byte bodies (five blocks) the scalar code (the `md-5` crate) takes about
//! 3,230 instructions a body (callgrind, W2's batches of ten: 36% of a batched message's cost);
//! eight AVX2 lanes do eight blocks in about 730, a little more than the scalar code spends on one.
//!
//! Messages are grouped by length, so that a group's lanes end close together; a lane whose
//! message has ended keeps its digest while the others finish (its extra blocks are computed and
//! discarded). A group of one, a CPU with neither extension and every other architecture use the
//! scalar code. All give the same digests: the tests compare each kernel the CPU has with the
//! `md-5` crate for lengths around every block and padding boundary, and for any messages.

use md5::Digest;

/// The MD5 digest of `message` (the `md-5` crate).
pub fn digest(message: &[u8]) -> [u8; 16] {
    md5::Md5::digest(message).into()
}

/// The MD5 digest of each message, in order: sixteen at a time with AVX-512, eight with AVX2,
/// one by one without either.
pub fn digests(messages: &[&[u8]]) -> Vec<[u8; 16]> {
    #[cfg(target_arch = "x86_64")]
    if messages.len() > 1 {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F.
            return in_groups(messages, |lanes| unsafe { avx512::digests(lanes) });
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2.
            return in_groups(messages, |lanes| unsafe { avx2::digests(lanes) });
        }
    }
    one_by_one(messages)
}

/// The digests of `messages`, one after the other (the `md-5` crate).
fn one_by_one(messages: &[&[u8]]) -> Vec<[u8; 16]> {
    messages.iter().map(|message| digest(message)).collect()
}

/// The digests of `messages` by `lanes` at a time, in groups of messages of close lengths, so
/// that a group's lanes end close together; a group of one takes the scalar code. Missing lanes
/// of the last group hash nothing.
#[cfg(target_arch = "x86_64")]
fn in_groups<const LANES: usize>(
    messages: &[&[u8]],
    lanes: impl Fn(&[&[u8]; LANES]) -> [[u8; 16]; LANES],
) -> Vec<[u8; 16]> {
    let mut digests = vec![[0; 16]; messages.len()];
    let mut order: Vec<usize> = (0..messages.len()).collect();
    order.sort_unstable_by_key(|&index| messages[index].len());
    for group in order.chunks(LANES) {
        if let [index] = group {
            digests[*index] = digest(messages[*index]);
            continue;
        }
        let mut group_messages = [&[][..]; LANES];
        for (lane, &index) in group_messages.iter_mut().zip(group) {
            *lane = messages[index];
        }
        for (&index, lane_digest) in group.iter().zip(lanes(&group_messages)) {
            digests[index] = lane_digest;
        }
    }
    digests
}

/// A way of computing [`digests`].
pub type Kernel = fn(&[&[u8]]) -> Vec<[u8; 16]>;

/// Each way of computing [`digests`] this CPU has, by name: `scalar`, then `avx2` and `avx512`
/// where it has them (`digests` takes the widest). For the tests and `benches/md5.rs`.
pub fn kernels() -> Vec<(&'static str, Kernel)> {
    #[allow(unused_mut)]
    let mut kernels: Vec<(&'static str, Kernel)> = vec![("scalar", one_by_one)];
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") {
            // SAFETY: the CPU has AVX2.
            let avx2: Kernel =
                |messages| in_groups(messages, |lanes| unsafe { avx2::digests(lanes) });
            kernels.push(("avx2", avx2));
        }
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F.
            let avx512: Kernel =
                |messages| in_groups(messages, |lanes| unsafe { avx512::digests(lanes) });
            kernels.push(("avx512", avx512));
        }
    }
    kernels
}

/// One lane's message as MD5 reads it: its whole blocks, then the padded tail (the last bytes,
/// the 0x80 byte, zeros and the length in bits, little-endian), which takes one block or two.
#[cfg(target_arch = "x86_64")]
struct Padded<'a> {
    whole: &'a [u8],
    tail: [u8; 128],
    blocks: usize,
}

#[cfg(target_arch = "x86_64")]
const ZERO_BLOCK: [u8; 64] = [0; 64];

#[cfg(target_arch = "x86_64")]
impl<'a> Padded<'a> {
    fn new(message: &'a [u8]) -> Padded<'a> {
        let whole_len = message.len() / 64 * 64;
        let (whole, rest) = message.split_at(whole_len);
        let mut tail = [0; 128];
        tail[..rest.len()].copy_from_slice(rest);
        tail[rest.len()] = 0x80;
        // The length takes the last 8 bytes of a block: a rest of 56 bytes or more leaves no
        // room for it, and the padding runs into a second block.
        let tail_blocks = if rest.len() < 56 { 1 } else { 2 };
        let bits = (message.len() as u64).wrapping_mul(8);
        tail[tail_blocks * 64 - 8..tail_blocks * 64].copy_from_slice(&bits.to_le_bytes());
        Padded {
            whole,
            tail,
            blocks: whole_len / 64 + tail_blocks,
        }
    }

    /// Block `index`, or zeros past the end (computed by a lane that has ended, and discarded).
    fn block(&self, index: usize) -> &[u8] {
        let whole_blocks = self.whole.len() / 64;
        if index < whole_blocks {
            &self.whole[index * 64..][..64]
        } else if index < self.blocks {
            &self.tail[(index - whole_blocks) * 64..][..64]
        } else {
            &ZERO_BLOCK
        }
    }
}

/// The initial state (RFC 1321, 3.3).
#[cfg(target_arch = "x86_64")]
const INIT: [u32; 4] = [0x6745_2301, 0xefcd_ab89, 0x98ba_dcfe, 0x1032_5476];

/// The 64 steps' constants: the integer part of 2^32 × |sin(i + 1)| (RFC 1321, 3.4).
#[cfg(target_arch = "x86_64")]
const K: [u32; 64] = [
    0xd76a_a478,
    0xe8c7_b756,
    0x2420_70db,
    0xc1bd_ceee,
    0xf57c_0faf,
    0x4787_c62a,
    0xa830_4613,
    0xfd46_9501,
    0x6980_98d8,
    0x8b44_f7af,
    0xffff_5bb1,
    0x895c_d7be,
    0x6b90_1122,
    0xfd98_7193,
    0xa679_438e,
    0x49b4_0821,
    0xf61e_2562,
    0xc040_b340,
    0x265e_5a51,
    0xe9b6_c7aa,
    0xd62f_105d,
    0x0244_1453,
    0xd8a1_e681,
    0xe7d3_fbc8,
    0x21e1_cde6,
    0xc337_07d6,
    0xf4d5_0d87,
    0x455a_14ed,
    0xa9e3_e905,
    0xfcef_a3f8,
    0x676f_02d9,
    0x8d2a_4c8a,
    0xfffa_3942,
    0x8771_f681,
    0x6d9d_6122,
    0xfde5_380c,
    0xa4be_ea44,
    0x4bde_cfa9,
    0xf6bb_4b60,
    0xbebf_bc70,
    0x289b_7ec6,
    0xeaa1_27fa,
    0xd4ef_3085,
    0x0488_1d05,
    0xd9d4_d039,
    0xe6db_99e5,
    0x1fa2_7cf8,
    0xc4ac_5665,
    0xf429_2244,
    0x432a_ff97,
    0xab94_23a7,
    0xfc93_a039,
    0x655b_59c3,
    0x8f0c_cc92,
    0xffef_f47d,
    0x8584_5dd1,
    0x6fa8_7e4f,
    0xfe2c_e6e0,
    0xa301_4314,
    0x4e08_11a1,
    0xf753_7e82,
    0xbd3a_f235,
    0x2ad7_d2bb,
    0xeb86_d391,
];

/// Each lane's digest from the final state, stored word by word (`state[w][lane]`): the four
/// words of its lane, little-endian.
#[cfg(target_arch = "x86_64")]
fn lane_digests<const LANES: usize>(state: &[[u32; LANES]; 4]) -> [[u8; 16]; LANES] {
    std::array::from_fn(|lane| {
        let mut digest = [0; 16];
        for (bytes, words) in digest.chunks_exact_mut(4).zip(state) {
            bytes.copy_from_slice(&words[lane].to_le_bytes());
        }
        digest
    })
}

/// RFC 1321's 64 steps (3.4), for a kernel's `$step` macro: each with its round's function (one
/// of `$f`, `$g`, `$h`, `$i`), the state's words in turn (a, d, c, b), its message word, its
/// constant's index in [`K`] and its rotation.
#[cfg(target_arch = "x86_64")]
macro_rules! md5_steps {
    ($step:ident, [$f:ident, $g:ident, $h:ident, $i:ident], $a:ident, $b:ident, $c:ident, $d:ident) => {
        md5_steps!(@four $step, $f, 0, [0, 1, 2, 3], [7, 12, 17, 22], $a, $b, $c, $d);
        md5_steps!(@four $step, $f, 4, [4, 5, 6, 7], [7, 12, 17, 22], $a, $b, $c, $d);
        md5_steps!(@four $step, $f, 8, [8, 9, 10, 11], [7, 12, 17, 22], $a, $b, $c, $d);
        md5_steps!(@four $step, $f, 12, [12, 13, 14, 15], [7, 12, 17, 22], $a, $b, $c, $d);
        md5_steps!(@four $step, $g, 16, [1, 6, 11, 0], [5, 9, 14, 20], $a, $b, $c, $d);
        md5_steps!(@four $step, $g, 20, [5, 10, 15, 4], [5, 9, 14, 20], $a, $b, $c, $d);
        md5_steps!(@four $step, $g, 24, [9, 14, 3, 8], [5, 9, 14, 20], $a, $b, $c, $d);
        md5_steps!(@four $step, $g, 28, [13, 2, 7, 12], [5, 9, 14, 20], $a, $b, $c, $d);
        md5_steps!(@four $step, $h, 32, [5, 8, 11, 14], [4, 11, 16, 23], $a, $b, $c, $d);
        md5_steps!(@four $step, $h, 36, [1, 4, 7, 10], [4, 11, 16, 23], $a, $b, $c, $d);
        md5_steps!(@four $step, $h, 40, [13, 0, 3, 6], [4, 11, 16, 23], $a, $b, $c, $d);
        md5_steps!(@four $step, $h, 44, [9, 12, 15, 2], [4, 11, 16, 23], $a, $b, $c, $d);
        md5_steps!(@four $step, $i, 48, [0, 7, 14, 5], [6, 10, 15, 21], $a, $b, $c, $d);
        md5_steps!(@four $step, $i, 52, [12, 3, 10, 1], [6, 10, 15, 21], $a, $b, $c, $d);
        md5_steps!(@four $step, $i, 56, [8, 15, 6, 13], [6, 10, 15, 21], $a, $b, $c, $d);
        md5_steps!(@four $step, $i, 60, [4, 11, 2, 9], [6, 10, 15, 21], $a, $b, $c, $d);
    };
    (@four $step:ident, $fun:ident, $first:expr, [$w0:expr, $w1:expr, $w2:expr, $w3:expr],
        [$s0:literal, $s1:literal, $s2:literal, $s3:literal], $a:ident, $b:ident, $c:ident, $d:ident) => {
        $step!($fun, $a, $b, $c, $d, $w0, $first, $s0);
        $step!($fun, $d, $a, $b, $c, $w1, $first + 1, $s1);
        $step!($fun, $c, $d, $a, $b, $w2, $first + 2, $s2);
        $step!($fun, $b, $c, $d, $a, $w3, $first + 3, $s3);
    };
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::{
        __m256i, _mm256_add_epi32, _mm256_and_si256, _mm256_andnot_si256, _mm256_blendv_epi8,
        _mm256_cmpgt_epi32, _mm256_loadu_si256, _mm256_or_si256, _mm256_permute2x128_si256,
        _mm256_set1_epi32, _mm256_setr_epi32, _mm256_slli_epi32, _mm256_srli_epi32,
        _mm256_storeu_si256, _mm256_unpackhi_epi32, _mm256_unpackhi_epi64, _mm256_unpacklo_epi32,
        _mm256_unpacklo_epi64, _mm256_xor_si256,
    };

    use super::{Padded, INIT, K};

    /// Messages per group: one per 32-bit lane of a 256-bit register.
    pub(super) const LANES: usize = 8;

    /// The digests of eight messages.
    ///
    /// # Safety
    /// The CPU must have AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn digests(messages: &[&[u8]; LANES]) -> [[u8; 16]; LANES] {
        let padded = messages.map(Padded::new);
        let blocks = padded.iter().map(|lane| lane.blocks).max().unwrap_or(0);
        let lane_blocks = {
            let count = |lane: usize| padded[lane].blocks as i32;
            _mm256_setr_epi32(
                count(0),
                count(1),
                count(2),
                count(3),
                count(4),
                count(5),
                count(6),
                count(7),
            )
        };
        let mut state = INIT.map(|word| _mm256_set1_epi32(word as i32));
        for block in 0..blocks {
            // SAFETY: the CPU has AVX2 (this function's contract).
            let words = unsafe { words(&padded.each_ref().map(|lane| lane.block(block))) };
            let next = compress(state, &words);
            // A lane whose message has ended keeps its digest.
            let live = _mm256_cmpgt_epi32(lane_blocks, _mm256_set1_epi32(block as i32));
            for (word, next) in state.iter_mut().zip(next) {
                *word = _mm256_blendv_epi8(*word, next, live);
            }
        }
        let mut lanes = [[0u32; LANES]; 4];
        for (lanes, word) in lanes.iter_mut().zip(state) {
            // SAFETY: a store of 32 bytes into an array of 32 bytes; no alignment needed.
            unsafe { _mm256_storeu_si256(lanes.as_mut_ptr().cast::<__m256i>(), word) };
        }
        super::lane_digests(&lanes)
    }

    /// The sixteen words of one block of each lane, word by word: `words[i]` holds word `i` of
    /// every lane. Eight loads of eight words each, transposed (an 8×8 transpose of 32-bit
    /// values, per half block). Inlined into the kernels (a call returns the sixteen words
    /// through memory), which have AVX2.
    ///
    /// # Safety
    /// The CPU must have AVX2.
    #[inline(always)]
    pub(super) unsafe fn words(blocks: &[&[u8]; LANES]) -> [__m256i; 16] {
        let mut words = [_mm256_set1_epi32(0); 16];
        for half in 0..2 {
            // SAFETY: every block is 64 bytes long; each load reads 32 of them, unaligned.
            let row = |lane: usize| unsafe {
                _mm256_loadu_si256(blocks[lane][half * 32..][..32].as_ptr().cast::<__m256i>())
            };
            let rows: [__m256i; LANES] = std::array::from_fn(row);
            // Two lanes interleaved word by word (per 128-bit half): the low words of lanes a and
            // a + 1, or their high words.
            let pair = |low: bool, a: usize| {
                if low {
                    _mm256_unpacklo_epi32(rows[a], rows[a + 1])
                } else {
                    _mm256_unpackhi_epi32(rows[a], rows[a + 1])
                }
            };
            let (lo01, hi01, lo23, hi23) =
                (pair(true, 0), pair(false, 0), pair(true, 2), pair(false, 2));
            let (lo45, hi45, lo67, hi67) =
                (pair(true, 4), pair(false, 4), pair(true, 6), pair(false, 6));
            // Lanes 0-3 (then 4-7): words 0|4, 1|5, 2|6, 3|7 of the four lanes, by 128-bit half.
            let low = [
                _mm256_unpacklo_epi64(lo01, lo23),
                _mm256_unpackhi_epi64(lo01, lo23),
                _mm256_unpacklo_epi64(hi01, hi23),
                _mm256_unpackhi_epi64(hi01, hi23),
            ];
            let high = [
                _mm256_unpacklo_epi64(lo45, lo67),
                _mm256_unpackhi_epi64(lo45, lo67),
                _mm256_unpacklo_epi64(hi45, hi67),
                _mm256_unpackhi_epi64(hi45, hi67),
            ];
            for j in 0..4 {
                words[half * 8 + j] = _mm256_permute2x128_si256::<0x20>(low[j], high[j]);
                words[half * 8 + j + 4] = _mm256_permute2x128_si256::<0x31>(low[j], high[j]);
            }
        }
        words
    }

    /// One block's 64 steps (RFC 1321, 3.4) in every lane, and the state it leaves.
    #[target_feature(enable = "avx2")]
    fn compress(state: [__m256i; 4], m: &[__m256i; 16]) -> [__m256i; 4] {
        let [mut a, mut b, mut c, mut d] = state;
        let ones = _mm256_set1_epi32(-1);
        // F = (b & c) | (!b & d); G = (b & d) | (c & !d); H = b ^ c ^ d; I = c ^ (b | !d).
        macro_rules! f {
            ($b:expr, $c:expr, $d:expr) => {
                _mm256_or_si256(_mm256_and_si256($b, $c), _mm256_andnot_si256($b, $d))
            };
        }
        macro_rules! g {
            ($b:expr, $c:expr, $d:expr) => {
                _mm256_or_si256(_mm256_and_si256($b, $d), _mm256_andnot_si256($d, $c))
            };
        }
        macro_rules! h {
            ($b:expr, $c:expr, $d:expr) => {
                _mm256_xor_si256(_mm256_xor_si256($b, $c), $d)
            };
        }
        macro_rules! i {
            ($b:expr, $c:expr, $d:expr) => {
                _mm256_xor_si256($c, _mm256_or_si256($b, _mm256_xor_si256($d, ones)))
            };
        }
        // a = b + ((a + fun(b, c, d) + m[word] + K[step]) <<< shift)
        macro_rules! step {
            ($fun:ident, $a:ident, $b:ident, $c:ident, $d:ident, $word:expr, $step:expr, $shift:literal) => {
                let sum = _mm256_add_epi32(
                    _mm256_add_epi32($a, $fun!($b, $c, $d)),
                    _mm256_add_epi32(m[$word], _mm256_set1_epi32(K[$step] as i32)),
                );
                let rotated = _mm256_or_si256(
                    _mm256_slli_epi32::<$shift>(sum),
                    _mm256_srli_epi32::<{ 32 - $shift }>(sum),
                );
                $a = _mm256_add_epi32($b, rotated);
            };
        }
        md5_steps!(step, [f, g, h, i], a, b, c, d);
        [
            _mm256_add_epi32(state[0], a),
            _mm256_add_epi32(state[1], b),
            _mm256_add_epi32(state[2], c),
            _mm256_add_epi32(state[3], d),
        ]
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::{
        __m512i, _mm512_add_epi32, _mm512_castsi256_si512, _mm512_cmpgt_epi32_mask,
        _mm512_inserti64x4, _mm512_loadu_epi32, _mm512_mask_blend_epi32, _mm512_rol_epi32,
        _mm512_set1_epi32, _mm512_storeu_epi32, _mm512_ternarylogic_epi32,
    };

    use super::{avx2, Padded, INIT, K};

    /// Messages per group: one per 32-bit lane of a 512-bit register.
    pub(super) const LANES: usize = 16;

    /// The digests of sixteen messages: as `avx2::digests`, with twice the lanes, each round's
    /// function in one instruction (`vpternlogd`) and each rotation in one (`vprold`), where
    /// AVX2 takes three of each.
    ///
    /// # Safety
    /// The CPU must have AVX-512F.
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn digests(messages: &[&[u8]; LANES]) -> [[u8; 16]; LANES] {
        let padded = messages.map(Padded::new);
        let blocks = padded.iter().map(|lane| lane.blocks).max().unwrap_or(0);
        let counts = padded.each_ref().map(|lane| lane.blocks as i32);
        // SAFETY: a load of 64 bytes from an array of 64 bytes; no alignment needed.
        let lane_blocks = unsafe { _mm512_loadu_epi32(counts.as_ptr()) };
        let mut state = INIT.map(|word| _mm512_set1_epi32(word as i32));
        for block in 0..blocks {
            let rows = padded.each_ref().map(|lane| lane.block(block));
            // Lanes 0-7 and 8-15 transposed as AVX2 does, then joined word by word.
            let (low, high) = rows.split_at(avx2::LANES);
            // SAFETY: AVX-512F includes AVX2, and the CPU has it (this function's contract).
            let low = unsafe { avx2::words(low.try_into().expect("eight lanes")) };
            let high = unsafe { avx2::words(high.try_into().expect("eight lanes")) };
            let words: [__m512i; 16] = std::array::from_fn(|word| {
                _mm512_inserti64x4::<1>(_mm512_castsi256_si512(low[word]), high[word])
            });
            let next = compress(state, &words);
            // A lane whose message has ended keeps its digest.
            let live = _mm512_cmpgt_epi32_mask(lane_blocks, _mm512_set1_epi32(block as i32));
            for (word, next) in state.iter_mut().zip(next) {
                *word = _mm512_mask_blend_epi32(live, *word, next);
            }
        }
        let mut lanes = [[0u32; LANES]; 4];
        for (lanes, word) in lanes.iter_mut().zip(state) {
            // SAFETY: a store of 64 bytes into an array of 64 bytes; no alignment needed.
            unsafe { _mm512_storeu_epi32(lanes.as_mut_ptr().cast::<i32>(), word) };
        }
        super::lane_digests(&lanes)
    }

    /// One block's 64 steps (RFC 1321, 3.4) in every lane, and the state it leaves.
    #[target_feature(enable = "avx512f")]
    fn compress(state: [__m512i; 4], m: &[__m512i; 16]) -> [__m512i; 4] {
        let [mut a, mut b, mut c, mut d] = state;
        // The rounds' functions as truth tables of (b, c, d), bit 4b + 2c + d: F = b ? c : d,
        // G = d ? b : c, H = b ^ c ^ d, I = c ^ (b | !d).
        const F: i32 = 0xca;
        const G: i32 = 0xe4;
        const H: i32 = 0x96;
        const I: i32 = 0x39;
        // a = b + ((a + fun(b, c, d) + m[word] + K[step]) <<< shift)
        macro_rules! step {
            ($fun:ident, $a:ident, $b:ident, $c:ident, $d:ident, $word:expr, $step:expr, $shift:literal) => {
                let sum = _mm512_add_epi32(
                    _mm512_add_epi32($a, _mm512_ternarylogic_epi32::<$fun>($b, $c, $d)),
                    _mm512_add_epi32(m[$word], _mm512_set1_epi32(K[$step] as i32)),
                );
                $a = _mm512_add_epi32($b, _mm512_rol_epi32::<$shift>(sum));
            };
        }
        md5_steps!(step, [F, G, H, I], a, b, c, d);
        [
            _mm512_add_epi32(state[0], a),
            _mm512_add_epi32(state[1], b),
            _mm512_add_epi32(state[2], c),
            _mm512_add_epi32(state[3], d),
        ]
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn reference(messages: &[Vec<u8>]) -> Vec<[u8; 16]> {
        messages.iter().map(|message| digest(message)).collect()
    }

    fn slices(messages: &[Vec<u8>]) -> Vec<&[u8]> {
        messages.iter().map(Vec::as_slice).collect()
    }

    /// RFC 1321's test suite (appendix A.5), through the lanes.
    #[test]
    fn rfc_1321_test_suite() {
        let suite: [(&str, &str); 7] = [
            ("", "d41d8cd98f00b204e9800998ecf8427e"),
            ("a", "0cc175b9c0f1b6a831c399e269772661"),
            ("abc", "900150983cd24fb0d6963f7d28e17f72"),
            ("message digest", "f96b697d7cb7938d525a2f31aaf161d0"),
            (
                "abcdefghijklmnopqrstuvwxyz",
                "c3fcd3d76192e4007dfb496cca67e13b",
            ),
            (
                "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789",
                "d174ab98d277d9f5a5611c2c9f419d9f",
            ),
            (
                "12345678901234567890123456789012345678901234567890123456789012345678901234567890",
                "57edf4a22be3c955ac49da2e2107b67a",
            ),
        ];
        let messages: Vec<&[u8]> = suite.iter().map(|(text, _)| text.as_bytes()).collect();
        let hex = |digest: &[u8; 16]| {
            digest
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        };
        let got: Vec<String> = digests(&messages).iter().map(hex).collect();
        let expected: Vec<&str> = suite.iter().map(|(_, digest)| *digest).collect();
        assert_eq!(got, expected);
    }

    /// Every length from 0 to 200 bytes (each block and padding boundary: 55, 56, 63, 64,
    /// 119, 120, 127, 128...), in groups of every size from one to a full group of sixteen and
    /// past it, so that lanes end at different blocks; through `digests` and each kernel.
    #[test]
    fn every_length_agrees_with_the_md5_crate() {
        let messages: Vec<Vec<u8>> = (0..=200u32)
            .map(|len| (0..len).map(|i| (i * 31 + len) as u8).collect())
            .collect();
        for group in 1..=17 {
            for chunk in messages.chunks(group) {
                let expected = reference(chunk);
                assert_eq!(digests(&slices(chunk)), expected, "group of {group}");
                for (kernel, digests) in kernels() {
                    assert_eq!(
                        digests(&slices(chunk)),
                        expected,
                        "{kernel}, group of {group}"
                    );
                }
            }
        }
    }

    /// Every kernel, with every lane at a different number of blocks (lane `i` of `i` whole
    /// blocks and a rest of `7i` bytes), including a full group of each width. (On x86_64 the
    /// machines this is tested on have both extensions; a CPU without one tests fewer.)
    #[test]
    fn every_kernel_agrees_with_the_md5_crate() {
        let messages: Vec<Vec<u8>> = (0..16u8)
            .map(|lane| vec![lane; 64 * usize::from(lane) + usize::from(lane) * 7])
            .collect();
        for count in [2, 8, 9, 16, 17] {
            let messages = &messages[..count.min(16)];
            let mut slices = slices(messages);
            if count == 17 {
                slices.push(b"one past a full group");
            }
            let expected: Vec<[u8; 16]> = slices.iter().map(|message| digest(message)).collect();
            for (kernel, digests) in kernels() {
                assert_eq!(digests(&slices), expected, "{kernel}, {count} messages");
            }
        }
    }

    proptest! {
        /// Any messages, in any number and order, get the digests the `md-5` crate gives.
        #[test]
        fn digests_agree_with_the_md5_crate(
            messages in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..400), 0..40),
        ) {
            let expected = reference(&messages);
            prop_assert_eq!(digests(&slices(&messages)), expected.clone());
            for (kernel, digests) in kernels() {
                prop_assert_eq!(digests(&slices(&messages)), expected.clone(), "{}", kernel);
            }
        }
    }
}
