//! Feeds arbitrary bytes to the record decoder (`codec::decode`). It must never panic, and what
//! it accepts must survive a round trip.
//!
//! The round trip is not byte-exact for every accepted input, and the target asserts only what
//! the format promises. Maps (tags, passthrough settings, message attributes) are `BTreeMap`s:
//! the encoder writes each key once, in key order, but the decoder accepts entries in any order
//! and a repeated key (the last value wins). So:
//! - the decoded record re-encodes to bytes that decode to the same record (the encoder's output
//!   is canonical);
//! - the re-encoding equals the input unless the record has a non-empty map, and is never
//!   longer than the input (duplicates only drop entries);
//! - at the same length (nothing dropped) the only difference left is order, which needs a map
//!   of at least two entries.
//!
//! A `Decoder`, which shares repeated strings between records, must decode the same records as
//! `decode`, also when its shared strings come from an earlier record.

#![no_main]

use leaseq_core::codec;
use leaseq_core::Record;
use libfuzzer_sys::fuzz_target;

/// The number of entries of every map in `record`.
fn map_lens(record: &Record) -> Vec<usize> {
    match record {
        Record::CreateQueue { config, tags, .. } | Record::RestoreQueue { config, tags, .. } => {
            vec![config.passthrough.len(), tags.len()]
        }
        Record::SetConfig { config, .. } => vec![config.passthrough.len()],
        Record::SetTags { tags, .. } => vec![tags.len()],
        Record::Send { payload, .. } => vec![payload.attributes.len()],
        Record::RestoreMessage { message, .. } => vec![message.payload.attributes.len()],
        _ => Vec::new(),
    }
}

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
    assert_eq!(codec::decode(&encoded).as_ref(), Ok(&record));
    if encoded != data {
        let lens = map_lens(&record);
        assert!(lens.iter().any(|&len| len > 0), "{record:?}");
        assert!(encoded.len() <= data.len(), "{record:?}");
        if encoded.len() == data.len() {
            assert!(lens.iter().any(|&len| len >= 2), "{record:?}");
        }
    }
});
