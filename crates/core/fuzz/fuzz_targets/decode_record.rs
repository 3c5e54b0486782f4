//! Feeds arbitrary bytes to the record decoder (`codec::decode`). It must never panic, and every
//! record has exactly one encoding: whatever it accepts re-encodes to the very same bytes (map
//! keys must come sorted and once each, flags are 0 or 1, nothing may trail).
//!
//! A `Decoder`, which shares repeated strings between records, must decode the same records as
//! `decode`, also when its shared strings come from an earlier record.

#![no_main]

use leaseq_core::codec;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let decoded = codec::decode(data);
    let mut decoder = codec::Decoder::default();
    assert_eq!(decoder.decode(data), decoded);
    // Again, now that the decoder holds this record's strings.
    assert_eq!(decoder.decode(data), decoded);
    let Ok(record) = decoded else {
        return;
    };
    let mut encoded = Vec::new();
    codec::encode(&record, &mut encoded);
    assert_eq!(encoded, data, "{record:?}");
});
