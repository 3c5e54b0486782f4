//! Feeds arbitrary bytes to the decoding half of snapshot loading: the loop of the server's
//! `checkpoint::load` (a `u32` little-endian length, then that many bytes of one record, again
//! and again) with one `codec::Decoder` for the whole snapshot, as recovery runs it. It must never
//! panic, and the shared decoder, whose strings carry over from record to record, must decode
//! every record exactly as a fresh `codec::decode` does.
//!
//! The records are not applied to an `Engine`: `Engine::apply` asserts that a record fits the
//! state (a snapshot passed its checksum and was written by us, so a misfit is our bug), and
//! arbitrary records do not fit.

#![no_main]

use leaseq_core::codec::{self, DecodeError};
use libfuzzer_sys::fuzz_target;

/// The fewest bytes a record takes: version, tag, `now_ms` and a queue id.
const RECORD_LEN_MIN_BYTES: usize = 1 + 1 + 8 + 8;

/// The loop of `checkpoint::load`, without `apply`: the number of records, or the first error.
fn decode_snapshot(payload: &[u8]) -> Result<usize, DecodeError> {
    let mut decoder = codec::Decoder::default();
    let mut at = 0;
    let mut records = 0;
    while at < payload.len() {
        let len_bytes = payload.get(at..at + 4).ok_or(DecodeError::Truncated(at))?;
        let len = u32::from_le_bytes(len_bytes.try_into().expect("4 bytes")) as usize;
        let bytes = payload
            .get(at + 4..at + 4 + len)
            .ok_or(DecodeError::Truncated(at))?;
        let record = decoder.decode(bytes);
        assert_eq!(record, codec::decode(bytes));
        record?;
        at += 4 + len;
        records += 1;
    }
    Ok(records)
}

fuzz_target!(|data: &[u8]| {
    if let Ok(records) = decode_snapshot(data) {
        assert!(records * (4 + RECORD_LEN_MIN_BYTES) <= data.len());
    }
});
