//! Feeds arbitrary bytes to the segment and snapshot decoders. They must never panic, and a
//! successful segment scan must describe contiguous, individually valid frames.
//!
//! Arbitrary bytes almost never get past the segment header's checksum, so the same input also
//! builds a segment whose checksums are right (a header, then frames whose payloads come from
//! the input) and damages it in one place, as a torn write or a flipped bit would. The scan of
//! that segment must return every frame before the damage intact, and every frame when there is
//! no damage.

#![no_main]

use leaseq_wal::format::{self, SegmentHeader, SEGMENT_HEADER_LEN_BYTES};
use libfuzzer_sys::fuzz_target;

/// Checks the scan of `bytes` against the frames it reports, and returns it.
fn scan(bytes: &[u8]) -> Option<format::SegmentScan> {
    let scan = format::scan_segment(bytes).ok()?;
    let mut offset = SEGMENT_HEADER_LEN_BYTES as u64;
    for frame in &scan.frames {
        assert_eq!(frame.offset, offset);
        let payload = format::decode_frame(bytes, frame.offset as usize).expect("scanned frame");
        assert_eq!(payload.len(), frame.len_bytes as usize);
        offset += format::frame_len_bytes(payload.len()) as u64;
    }
    assert_eq!(scan.valid_end, offset);
    // The scan stops without an error only where nothing but zeros follows (the end of the
    // bytes, or space zeroed ahead of the records).
    let rest = &bytes[offset as usize..];
    assert_eq!(scan.stop.is_none(), rest.iter().all(|&byte| byte == 0));
    Some(scan)
}

/// How the built segment is damaged.
enum Damage {
    None,
    /// Cut at this offset, as a torn write leaves a file.
    Truncate(usize),
    /// One bit flipped at this byte offset.
    Flip(usize, u8),
}

/// A segment with valid checksums and then one damage, with the payloads of its frames.
struct DamagedSegment<'a> {
    bytes: Vec<u8>,
    payloads: Vec<&'a [u8]>,
    damage: Damage,
}

/// Builds a [`DamagedSegment`] from `data`: after three bytes that choose the damage, each
/// payload is one length byte and up to that many bytes.
fn damaged_segment(data: &[u8]) -> Option<DamagedSegment<'_>> {
    let (&[kind, at_low, at_high], mut rest) = data.split_first_chunk::<3>()?;
    let mut segment = SegmentHeader {
        segment: 7,
        base_lsn: 100,
    }
    .encode()
    .to_vec();
    let mut payloads = Vec::new();
    while let Some((&len, tail)) = rest.split_first() {
        let (payload, after) = tail.split_at(usize::from(len).min(tail.len()));
        format::encode_frame(payload, &mut segment);
        payloads.push(payload);
        rest = after;
    }
    let at = usize::from(u16::from_le_bytes([at_low, at_high])) % (segment.len() + 1);
    let damage = match kind % 3 {
        0 => Damage::None,
        1 => Damage::Truncate(at),
        _ if at == segment.len() => Damage::None,
        _ => Damage::Flip(at, kind / 3 % 8),
    };
    match damage {
        Damage::None => {}
        Damage::Truncate(at) => segment.truncate(at),
        Damage::Flip(at, bit) => segment[at] ^= 1 << bit,
    }
    Some(DamagedSegment {
        bytes: segment,
        payloads,
        damage,
    })
}

fuzz_target!(|data: &[u8]| {
    let _ = leaseq_wal::snapshot::decode(data);
    scan(data);

    let Some(DamagedSegment {
        bytes: segment,
        payloads,
        damage,
    }) = damaged_segment(data)
    else {
        return;
    };
    let damaged_at = match damage {
        Damage::None => usize::MAX,
        Damage::Truncate(at) | Damage::Flip(at, _) => at,
    };
    let Some(scan) = scan(&segment) else {
        // Only damage to the header makes the whole segment unreadable.
        assert!(damaged_at < SEGMENT_HEADER_LEN_BYTES);
        return;
    };
    assert!(damaged_at >= SEGMENT_HEADER_LEN_BYTES);
    let mut offset = SEGMENT_HEADER_LEN_BYTES;
    for (index, payload) in payloads.iter().enumerate() {
        let end = offset + format::frame_len_bytes(payload.len());
        if end > damaged_at {
            break;
        }
        let frame = scan.frames.get(index).expect("a frame before the damage");
        assert_eq!(frame.offset as usize, offset);
        assert_eq!(format::decode_frame(&segment, offset), Ok(*payload));
        offset = end;
    }
    if let Damage::None = damage {
        assert_eq!(scan.frames.len(), payloads.len());
        assert!(scan.stop.is_none());
    }
});
