//! Torn tails and corruption: truncation at every byte of the tail, bit flips at every record
//! boundary, damage in a non-last segment, missing segments, and salvage.

use leaseq_wal::fault::FaultStorage;
use leaseq_wal::format::{frame_len_bytes, SEGMENT_HEADER_LEN_BYTES};
use leaseq_wal::{segment_file_name, FsyncPolicy, Options, Position, WalError};

use crate::common::{append_all, open, small_segments};

const RECORDS: u64 = 5;

/// A one-segment log of five records, and their positions.
fn five_records() -> (FaultStorage, Vec<Position>) {
    let storage = FaultStorage::new();
    let (wal, _, _) = open(&storage, Options::default()).unwrap();
    let appended = append_all(&wal, 0, RECORDS);
    wal.close().unwrap();
    let positions = appended.iter().map(|a| a.1).collect();
    (storage, positions)
}

fn frame_end(position: &Position) -> u64 {
    position.offset + frame_len_bytes(position.len_bytes as usize) as u64
}

#[test]
fn truncation_at_every_byte_of_the_tail_is_cut() {
    let (storage, positions) = five_records();
    let name = segment_file_name(1);
    let bytes = storage.contents(&name).unwrap();
    for cut in 0..=bytes.len() {
        let damaged = storage.fork();
        damaged.set_contents(&name, bytes[..cut].to_vec());
        let (wal, recovery, replayed) = open(&damaged, Options::default())
            .unwrap_or_else(|error| panic!("cut at {cut}: {error}"));
        let complete = positions
            .iter()
            .filter(|p| frame_end(p) <= cut as u64)
            .count();
        assert_eq!(replayed.len(), complete, "cut at {cut}");
        let on_boundary =
            cut == SEGMENT_HEADER_LEN_BYTES || positions.iter().any(|p| frame_end(p) == cut as u64);
        assert_eq!(recovery.torn_tail.is_none(), on_boundary, "cut at {cut}");
        // The log continues after the cut, and the continuation survives a reopen.
        let record = wal.append(b"after the cut").unwrap();
        assert_eq!(record.lsn, complete as u64 + 1, "cut at {cut}");
        wal.close().unwrap();
        let (_, _, replayed) = open(&damaged, Options::default()).unwrap();
        assert_eq!(replayed.len(), complete + 1, "cut at {cut}");
        assert_eq!(replayed[complete].payload, b"after the cut");
    }
}

#[test]
fn bit_flips_at_record_boundaries() {
    let (storage, positions) = five_records();
    let name = segment_file_name(1);
    for (index, position) in positions.iter().enumerate() {
        let is_last = index + 1 == positions.len();
        // Every bit of the length's low byte, a bit of the CRC and one of the payload.
        let flips = (0..8)
            .map(|bit| (0, bit))
            .chain([(4, 3), (8, 5)])
            .map(|(at, bit)| (position.offset + at, bit));
        for (offset, bit) in flips {
            let damaged = storage.fork();
            damaged.flip_bit(&name, offset, bit);
            let context = format!("record {index}, byte {offset}, bit {bit}");
            let result = open(&damaged, Options::default());
            if is_last {
                let (_, recovery, replayed) = result.expect(&context);
                assert_eq!(replayed.len(), index, "{context}");
                assert!(recovery.torn_tail.is_some(), "{context}");
                continue;
            }
            match result {
                Err(WalError::Corrupt { file, offset, .. }) => {
                    assert_eq!(file, name, "{context}");
                    assert_eq!(offset, position.offset, "{context}");
                }
                other => panic!("{context}: expected corruption, got {other:?}"),
            }
            let salvage = Options {
                salvage: true,
                ..Options::default()
            };
            let (wal, recovery, replayed) = open(&damaged, salvage.clone()).expect(&context);
            assert_eq!(replayed.len(), index, "{context}");
            let report = recovery.salvage.expect("salvage report");
            assert_eq!(report.offset, position.offset, "{context}");
            assert!(report.bytes_dropped > 0);
            wal.close().unwrap();
            // Salvaged means clean: a second open needs no salvage.
            let (_, recovery, replayed) = open(&damaged, Options::default()).expect(&context);
            assert_eq!(replayed.len(), index);
            assert_eq!(recovery.salvage, None);
        }
    }
}

/// A log over several segments.
fn multi_segment() -> (FaultStorage, Vec<(u64, Position, Vec<u8>)>) {
    let storage = FaultStorage::new();
    let (wal, _, _) = open(&storage, small_segments(FsyncPolicy::Always)).unwrap();
    let appended = append_all(&wal, 0, 40);
    assert!(wal.segments().len() >= 3);
    wal.close().unwrap();
    (storage, appended)
}

#[test]
fn damage_at_the_end_of_a_non_last_segment_is_corruption() {
    let (storage, appended) = multi_segment();
    let last_of_first = appended
        .iter()
        .rev()
        .find(|a| a.1.segment == 1)
        .map(|a| a.1)
        .unwrap();
    let name = segment_file_name(1);
    storage.flip_bit(&name, last_of_first.offset + 9, 0);
    match open(&storage, small_segments(FsyncPolicy::Always)) {
        Err(WalError::Corrupt { file, offset, .. }) => {
            assert_eq!(
                (file.as_str(), offset),
                (name.as_str(), last_of_first.offset)
            );
        }
        other => panic!("expected corruption, got {other:?}"),
    }
    let options = Options {
        salvage: true,
        ..small_segments(FsyncPolicy::Always)
    };
    let (wal, recovery, replayed) = open(&storage, options).unwrap();
    let kept = appended.iter().filter(|a| a.1 < last_of_first).count();
    assert_eq!(replayed.len(), kept);
    let report = recovery.salvage.unwrap();
    assert!(!report.files_removed.is_empty());
    assert_eq!(wal.segments().len(), 1);
    assert_eq!(wal.append(b"x").unwrap().lsn, kept as u64 + 1);
}

#[test]
fn bad_header_of_a_middle_segment_names_offset_zero() {
    let (storage, _) = multi_segment();
    let name = segment_file_name(2);
    storage.flip_bit(&name, 13, 2);
    match open(&storage, small_segments(FsyncPolicy::Always)) {
        Err(error @ WalError::Corrupt { .. }) => {
            assert!(error.is_corruption());
            let message = error.to_string();
            assert!(
                message.contains(&name) && message.contains("at byte 0"),
                "{message}"
            );
        }
        other => panic!("expected corruption, got {other:?}"),
    }
}

#[test]
fn a_missing_middle_segment_is_corruption() {
    let (storage, _) = multi_segment();
    let without = storage.fork();
    // Model a lost file by replacing the world: remove through the Storage trait.
    leaseq_wal::Storage::remove(&without, &segment_file_name(2)).unwrap();
    match open(&without, small_segments(FsyncPolicy::Always)) {
        Err(WalError::Corrupt { file, reason, .. }) => {
            assert_eq!(file, segment_file_name(3));
            assert!(reason.contains("missing"), "{reason}");
        }
        other => panic!("expected corruption, got {other:?}"),
    }
}

#[test]
fn a_torn_header_of_the_last_segment_is_removed() {
    let (storage, appended) = multi_segment();
    let last = appended.last().unwrap().1.segment;
    let next = segment_file_name(last + 1);
    let created = leaseq_wal::Storage::create(&storage, &next).unwrap();
    created.write_all_at(b"LEASEQ", 0).unwrap();
    let (wal, recovery, replayed) = open(&storage, small_segments(FsyncPolicy::Always)).unwrap();
    assert_eq!(replayed.len(), appended.len());
    assert_eq!(recovery.torn_tail.unwrap().file, next);
    assert_eq!(wal.segments().last().unwrap().segment, last);
}
