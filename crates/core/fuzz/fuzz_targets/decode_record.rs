//! Feeds arbitrary bytes to the record decoder (`codec::decode`). It must never panic, and every
//! record has exactly one encoding per format version: whatever it accepts in the current
//! version re-encodes to the very same bytes (map keys must come sorted and once each, flags are
//! 0 or 1, nothing may trail); an older version's record re-encodes in the current version and
//! decodes back to the same record.
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
    if data[0] == codec::FORMAT_VERSION {
        assert_eq!(encoded, data, "{record:?}");
    } else {
        assert_eq!(codec::decode(&encoded).as_ref(), Ok(&record), "{record:?}");
    }
});
