//! The on-disk byte layout of a segment, and its decoder.
//!
//! A segment file is a fixed 32-byte header followed by back-to-back record frames:
//!
//! ```text
//! segment header: magic[8] version:u32 segment:u64 base_lsn:u64 crc32c:u32   (32 bytes)
//! record frame:   length:u32 crc32c:u32 payload[length]                       (8 + length bytes)
//! ```
//!
//! All integers are little-endian. A frame's CRC32C covers its little-endian length followed by
//! its payload, so a torn length field is caught as surely as a torn payload. Records carry no
//! LSN: the record at index `i` of a segment has LSN `base_lsn + i`.
//!
//! This module is pure: it sees byte slices, never files, so the recovery code, the fuzz target
//! and the property tests all exercise the same decoder. The decoder is robust by construction:
//! every length read from the input is checked against the slice before it is used, arithmetic
//! is done in `u64`/`usize` where it cannot overflow, and no input makes it panic.

use crate::Lsn;

/// The first eight bytes of every segment file.
pub const SEGMENT_MAGIC: [u8; 8] = *b"LEASEQWL";
/// The segment format this code writes and reads. Bumped on any layout change.
pub const FORMAT_VERSION: u32 = 1;
/// Size of the segment header.
pub const SEGMENT_HEADER_LEN_BYTES: usize = 32;
/// Size of a record frame's header (length and CRC).
pub const FRAME_HEADER_LEN_BYTES: usize = 8;
/// The largest payload the format accepts. A length field above this is framing corruption,
/// which keeps a flipped high bit from making the decoder trust a multi-gigabyte length.
pub const RECORD_SIZE_LIMIT_BYTES: u32 = 16 << 20;

/// The identity of a segment, written at its start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// The segment's number; it also names the file (`{segment:020}.wal`).
    pub segment: u64,
    /// The LSN of the segment's first record.
    pub base_lsn: Lsn,
}

/// Why a segment header was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// Fewer than [`SEGMENT_HEADER_LEN_BYTES`] bytes: the file was torn while being created.
    #[error("segment header is truncated ({len_bytes} of 32 bytes)")]
    Truncated {
        /// How many bytes the file has.
        len_bytes: usize,
    },
    /// The magic bytes are wrong: this is not a leaseq segment, or its start is damaged.
    #[error("segment header has bad magic bytes")]
    BadMagic,
    /// A format version this code does not read.
    #[error("segment format version {version} is not supported (expected {FORMAT_VERSION})")]
    UnsupportedVersion {
        /// The version found in the file.
        version: u32,
    },
    /// The header's CRC does not match its contents.
    #[error("segment header checksum mismatch")]
    ChecksumMismatch,
}

/// Why a record frame was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FrameError {
    /// The frame runs past the end of the bytes: a torn write if at the tail.
    #[error("record frame is truncated")]
    Truncated,
    /// The length field exceeds [`RECORD_SIZE_LIMIT_BYTES`].
    #[error("record length {len_bytes} exceeds the format limit")]
    TooLarge {
        /// The length field's value.
        len_bytes: u32,
    },
    /// The CRC does not match the length and payload.
    #[error("record checksum mismatch")]
    ChecksumMismatch,
}

impl SegmentHeader {
    /// Encodes the header into its fixed 32 bytes.
    pub fn encode(&self) -> [u8; SEGMENT_HEADER_LEN_BYTES] {
        let mut out = [0u8; SEGMENT_HEADER_LEN_BYTES];
        out[0..8].copy_from_slice(&SEGMENT_MAGIC);
        out[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        out[12..20].copy_from_slice(&self.segment.to_le_bytes());
        out[20..28].copy_from_slice(&self.base_lsn.to_le_bytes());
        let crc = crate::crc::crc32c(&out[0..28]);
        out[28..32].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes a header from the start of `bytes`.
    pub fn decode(bytes: &[u8]) -> Result<SegmentHeader, HeaderError> {
        let Some(header) = bytes.get(..SEGMENT_HEADER_LEN_BYTES) else {
            return Err(HeaderError::Truncated {
                len_bytes: bytes.len(),
            });
        };
        if header[0..8] != SEGMENT_MAGIC {
            return Err(HeaderError::BadMagic);
        }
        if crate::crc::crc32c(&header[0..28]) != read_u32(header, 28) {
            return Err(HeaderError::ChecksumMismatch);
        }
        let version = read_u32(header, 8);
        if version != FORMAT_VERSION {
            return Err(HeaderError::UnsupportedVersion { version });
        }
        Ok(SegmentHeader {
            segment: read_u64(header, 12),
            base_lsn: read_u64(header, 20),
        })
    }
}

/// The number of bytes a payload of `payload_len_bytes` occupies on disk.
pub fn frame_len_bytes(payload_len_bytes: usize) -> usize {
    FRAME_HEADER_LEN_BYTES + payload_len_bytes
}

/// The CRC32C of a frame: over the little-endian length, then the payload.
pub fn frame_checksum(payload: &[u8]) -> u32 {
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    crate::crc::crc32c_of_u32_then(len, payload)
}

/// Appends the frame for `payload` to `out`.
///
/// The caller must have checked the payload against [`RECORD_SIZE_LIMIT_BYTES`].
pub fn encode_frame(payload: &[u8], out: &mut Vec<u8>) {
    assert!(payload.len() <= RECORD_SIZE_LIMIT_BYTES as usize);
    let len = payload.len() as u32;
    out.reserve(frame_len_bytes(payload.len()));
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&frame_checksum(payload).to_le_bytes());
    out.extend_from_slice(payload);
}

/// Decodes the frame starting at `offset` of `bytes` and returns its payload.
pub fn decode_frame(bytes: &[u8], offset: usize) -> Result<&[u8], FrameError> {
    let rest = bytes.get(offset..).unwrap_or(&[]);
    if rest.len() < FRAME_HEADER_LEN_BYTES {
        return Err(FrameError::Truncated);
    }
    let len_bytes = read_u32(rest, 0);
    if len_bytes > RECORD_SIZE_LIMIT_BYTES {
        return Err(FrameError::TooLarge { len_bytes });
    }
    let end = FRAME_HEADER_LEN_BYTES + len_bytes as usize;
    let Some(payload) = rest.get(FRAME_HEADER_LEN_BYTES..end) else {
        return Err(FrameError::Truncated);
    };
    if frame_checksum(payload) != read_u32(rest, 4) {
        return Err(FrameError::ChecksumMismatch);
    }
    Ok(payload)
}

/// Whether a valid frame starts at any byte offset at or after `from`.
///
/// Recovery uses this to tell a torn tail (nothing valid after the damage) from corruption in
/// the middle (valid records after the damage, which must not be silently cut off). The scan
/// is byte by byte because a damaged length field loses the frame alignment.
pub fn valid_frame_at_or_after(bytes: &[u8], from: usize) -> Option<usize> {
    let last = bytes.len().checked_sub(FRAME_HEADER_LEN_BYTES)?;
    (from..=last).find(|&offset| decode_frame(bytes, offset).is_ok())
}

/// A valid frame found by [`scan_segment`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameRef {
    /// Byte offset of the frame within the segment.
    pub offset: u64,
    /// Payload length.
    pub len_bytes: u32,
}

/// Where and why a segment scan stopped before the end of the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScanStop {
    /// Byte offset of the first invalid frame.
    pub offset: u64,
    /// What was wrong with it.
    pub error: FrameError,
    /// Whether a valid frame starts somewhere after the invalid one (so the damage is not a
    /// torn tail).
    pub valid_frame_after: bool,
}

/// The result of scanning one segment's bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentScan {
    /// The decoded header.
    pub header: SegmentHeader,
    /// The valid frames from the start, in order.
    pub frames: Vec<FrameRef>,
    /// The offset just past the last valid frame.
    pub valid_end: u64,
    /// `None` if the valid frames reach the end of the bytes, or are followed only by zero
    /// bytes (`valid_end` then tells where the zeros begin).
    pub stop: Option<ScanStop>,
}

/// Decodes the header and every frame of a whole segment held in memory.
pub fn scan_segment(bytes: &[u8]) -> Result<SegmentScan, HeaderError> {
    let header = SegmentHeader::decode(bytes)?;
    let mut frames = Vec::new();
    let mut offset = SEGMENT_HEADER_LEN_BYTES;
    let mut stop = None;
    while offset < bytes.len() {
        match decode_frame(bytes, offset) {
            Ok(payload) => {
                frames.push(FrameRef {
                    offset: offset as u64,
                    len_bytes: payload.len() as u32,
                });
                offset += frame_len_bytes(payload.len());
            }
            // Zeros to the end: space the writer zeroed ahead of its records (see
            // `sync.rs`), or blocks a crash left allocated but unwritten. Neither holds a
            // record, and no frame starts with a zero length and a zero CRC.
            Err(_) if bytes[offset..].iter().all(|&byte| byte == 0) => break,
            Err(error) => {
                stop = Some(ScanStop {
                    offset: offset as u64,
                    error,
                    valid_frame_after: valid_frame_at_or_after(bytes, offset + 1).is_some(),
                });
                break;
            }
        }
    }
    Ok(SegmentScan {
        header,
        frames,
        valid_end: offset as u64,
        stop,
    })
}

fn read_u32(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    word.copy_from_slice(&bytes[at..at + 4]);
    u32::from_le_bytes(word)
}

fn read_u64(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(word)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment(payloads: &[&[u8]]) -> Vec<u8> {
        let mut bytes = SegmentHeader {
            segment: 3,
            base_lsn: 17,
        }
        .encode()
        .to_vec();
        for payload in payloads {
            encode_frame(payload, &mut bytes);
        }
        bytes
    }

    #[test]
    fn header_round_trips_and_rejects_damage() {
        let header = SegmentHeader {
            segment: 9,
            base_lsn: 1 << 40,
        };
        let bytes = header.encode();
        assert_eq!(SegmentHeader::decode(&bytes), Ok(header));
        assert_eq!(
            SegmentHeader::decode(&bytes[..31]),
            Err(HeaderError::Truncated { len_bytes: 31 })
        );
        let mut bad = bytes;
        bad[0] ^= 1;
        assert_eq!(SegmentHeader::decode(&bad), Err(HeaderError::BadMagic));
        let mut bad = bytes;
        bad[13] ^= 1;
        assert_eq!(
            SegmentHeader::decode(&bad),
            Err(HeaderError::ChecksumMismatch)
        );
    }

    #[test]
    fn scan_finds_all_frames() {
        let bytes = segment(&[b"a", b"", b"hello"]);
        let scan = scan_segment(&bytes).expect("valid header");
        assert_eq!(scan.frames.len(), 3);
        assert_eq!(scan.valid_end, bytes.len() as u64);
        assert_eq!(scan.stop, None);
        assert_eq!(
            decode_frame(&bytes, scan.frames[2].offset as usize),
            Ok(&b"hello"[..])
        );
    }

    #[test]
    fn scan_tells_torn_tail_from_middle_damage() {
        let bytes = segment(&[b"one", b"two", b"three"]);
        let torn = &bytes[..bytes.len() - 2];
        let stop = scan_segment(torn).expect("header").stop.expect("stop");
        assert_eq!(stop.error, FrameError::Truncated);
        assert!(!stop.valid_frame_after);

        let mut flipped = bytes.clone();
        let second = SEGMENT_HEADER_LEN_BYTES + frame_len_bytes(3);
        flipped[second + 9] ^= 0x10;
        let stop = scan_segment(&flipped).expect("header").stop.expect("stop");
        assert_eq!(stop.offset, second as u64);
        assert_eq!(stop.error, FrameError::ChecksumMismatch);
        assert!(stop.valid_frame_after);
    }

    #[test]
    fn zero_filled_tail_ends_the_records() {
        let records = segment(&[b"x"]);
        let mut bytes = records.clone();
        bytes.extend_from_slice(&[0u8; 64]);
        let scan = scan_segment(&bytes).expect("header");
        assert_eq!(scan.stop, None);
        assert_eq!(scan.frames.len(), 1);
        assert_eq!(scan.valid_end, records.len() as u64);
        assert!(
            decode_frame(&bytes, records.len()).is_err(),
            "zeros are no frame"
        );

        // Anything but zeros after the records is damage.
        bytes[records.len() + 40] = 1;
        let stop = scan_segment(&bytes).expect("header").stop.expect("stop");
        assert_eq!(stop.offset, records.len() as u64);
        assert!(!stop.valid_frame_after);
    }
}
