//! The decoders must never panic, whatever the bytes: arbitrary input, and valid segments with
//! random damage. (The same property is fuzzed by `crates/wal/fuzz`.)

use leaseq_wal::format::{self, SegmentHeader, SEGMENT_HEADER_LEN_BYTES};
use leaseq_wal::snapshot;
use proptest::prelude::*;

fn valid_segment(payloads: &[Vec<u8>]) -> Vec<u8> {
    let header = SegmentHeader {
        segment: 1,
        base_lsn: 1,
    };
    let mut bytes = header.encode().to_vec();
    for payload in payloads {
        format::encode_frame(payload, &mut bytes);
    }
    bytes
}

/// Invariants of any successful scan.
fn check_scan(bytes: &[u8]) {
    let Ok(scan) = format::scan_segment(bytes) else {
        return;
    };
    let mut offset = SEGMENT_HEADER_LEN_BYTES as u64;
    for frame in &scan.frames {
        assert_eq!(frame.offset, offset);
        let payload = format::decode_frame(bytes, frame.offset as usize).unwrap();
        assert_eq!(payload.len(), frame.len_bytes as usize);
        offset += format::frame_len_bytes(payload.len()) as u64;
    }
    assert_eq!(scan.valid_end, offset);
    assert!(scan.valid_end <= bytes.len() as u64);
    // The scan stops short only at damage; zeros after the records end them.
    let rest_is_zeros = bytes[scan.valid_end as usize..]
        .iter()
        .all(|&byte| byte == 0);
    assert_eq!(scan.stop.is_none(), rest_is_zeros);
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..2048)) {
        check_scan(&bytes);
        let _ = snapshot::decode(&bytes);
        let _ = format::decode_frame(&bytes, 0);
    }

    #[test]
    fn arbitrary_frames_after_a_valid_header_never_panic(
        tail in prop::collection::vec(any::<u8>(), 0..2048),
    ) {
        let mut bytes = valid_segment(&[]);
        bytes.extend_from_slice(&tail);
        check_scan(&bytes);
    }

    #[test]
    fn damaged_valid_segments_never_panic(
        payloads in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..64), 0..12),
        damage in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 0..4),
        cut in any::<prop::sample::Index>(),
    ) {
        let mut bytes = valid_segment(&payloads);
        check_scan(&bytes);
        let scan = format::scan_segment(&bytes).unwrap();
        prop_assert_eq!(scan.frames.len(), payloads.len());
        prop_assert_eq!(scan.stop, None);
        for (at, value) in damage {
            let index = at.index(bytes.len());
            bytes[index] ^= value;
        }
        check_scan(&bytes);
        let len = cut.index(bytes.len() + 1);
        check_scan(&bytes[..len]);
    }
}
