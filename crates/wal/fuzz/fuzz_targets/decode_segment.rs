//! Feeds arbitrary bytes to the segment and snapshot decoders. They must never panic, and a
//! successful segment scan must describe contiguous, individually valid frames.

#![no_main]

use leaseq_wal::format::{self, SEGMENT_HEADER_LEN_BYTES};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = leaseq_wal::snapshot::decode(data);
    let Ok(scan) = format::scan_segment(data) else {
        return;
    };
    let mut offset = SEGMENT_HEADER_LEN_BYTES as u64;
    for frame in &scan.frames {
        assert_eq!(frame.offset, offset);
        let payload = format::decode_frame(data, frame.offset as usize).expect("scanned frame");
        assert_eq!(payload.len(), frame.len_bytes as usize);
        offset += format::frame_len_bytes(payload.len()) as u64;
    }
    assert_eq!(scan.valid_end, offset);
    assert_eq!(scan.stop.is_none(), scan.valid_end == data.len() as u64);
});
