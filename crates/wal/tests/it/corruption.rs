//! Torn tails and corruption: truncation at every byte of the tail, bit flips at every record
//! boundary, damage in a non-last segment, missing segments, and salvage.

use leaseq_wal::fault::FaultStorage;
use leaseq_wal::format::{frame_len_bytes, SEGMENT_HEADER_LEN_BYTES};
use leaseq_wal::{segment_file_name, FsyncPolicy, Options, Position, WalError};

use crate::common::{append_all, open, small_segments, small_zero_ahead};

const RECORDS: u64 = 5;

/// A one-segment log of five records, and their positions.
fn five_records() -> (FaultStorage, Vec<Position>) {
    let storage = FaultStorage::new();
    let (wal, _, _) = open(&storage, small_zero_ahead()).unwrap();
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
    let file = storage.contents(&name).unwrap();
    // The writer keeps the file zeroed ahead of its records.
    let records_end = frame_end(positions.last().unwrap()) as usize;
    assert!(file.len() > records_end, "no space zeroed ahead");
    assert!(file[records_end..].iter().all(|&byte| byte == 0));
    let bytes = &file[..records_end];
    for cut in 0..=bytes.len() {
        // The cut alone (a file that was extended only as far as it was written), and the cut
        // followed by zeros (space zeroed ahead, or allocated and never written).
        let zeros: &[usize] = if cut < SEGMENT_HEADER_LEN_BYTES {
            &[0]
        } else {
            &[0, 1, 4096]
        };
        for &zeros in zeros {
            let context = format!("cut at {cut}, then {zeros} zeros");
            let damaged = storage.fork();
            let mut contents = bytes[..cut].to_vec();
            contents.resize(cut + zeros, 0);
            damaged.set_contents(&name, contents);
            let (wal, recovery, replayed) = open(&damaged, small_zero_ahead())
                .unwrap_or_else(|error| panic!("{context}: {error}"));
            let complete = positions
                .iter()
                .filter(|p| frame_end(p) <= cut as u64)
                .count();
            assert_eq!(replayed.len(), complete, "{context}");
            let on_boundary = cut == SEGMENT_HEADER_LEN_BYTES
                || positions.iter().any(|p| frame_end(p) == cut as u64);
            assert_eq!(recovery.torn_tail.is_none(), on_boundary, "{context}");
            // The log continues after the cut, and the continuation survives a reopen.
            let record = wal.append(b"after the cut").unwrap();
            assert_eq!(record.lsn, complete as u64 + 1, "{context}");
            wal.close().unwrap();
            let (_, _, replayed) = open(&damaged, small_zero_ahead()).unwrap();
            assert_eq!(replayed.len(), complete + 1, "{context}");
            assert_eq!(replayed[complete].payload, b"after the cut");
        }
    }
}

#[test]
fn a_last_segment_of_only_zeros_was_torn_while_created() {
    let storage = FaultStorage::new();
    let options = small_segments(FsyncPolicy::Always);
    let (wal, _, _) = open(&storage, options.clone()).unwrap();
    let appended = append_all(&wal, 0, 30);
    wal.close().unwrap();
    let last = appended.last().unwrap().1.segment;
    assert!(last > 1);
    // The file's length reached the disk but none of its blocks did: nothing in it was ever
    // acknowledged (its header is fsynced before any record in it is).
    let name = segment_file_name(last);
    let len = storage.contents(&name).unwrap().len();
    storage.set_contents(&name, vec![0; len]);
    let (_, recovery, replayed) = open(&storage, options.clone()).unwrap();
    let torn = recovery.torn_tail.expect("a torn segment");
    assert_eq!((torn.file.as_str(), torn.offset), (name.as_str(), 0));
    assert!(!storage.file_names().contains(&name));
    let kept = appended.iter().filter(|a| a.1.segment < last).count();
    assert_eq!(replayed.len(), kept);

    // A zeroed header in front of records is corruption, not a torn creation.
    let (wal, _, _) = open(&storage, options.clone()).unwrap();
    append_all(&wal, 100, 30);
    wal.close().unwrap();
    let name = storage
        .file_names()
        .into_iter()
        .filter(|n| n.ends_with(".wal"))
        .max()
        .unwrap();
    let mut contents = storage.contents(&name).unwrap();
    contents[..SEGMENT_HEADER_LEN_BYTES].fill(0);
    storage.set_contents(&name, contents);
    let error = open(&storage, options).unwrap_err();
    assert!(
        matches!(error, WalError::Corrupt { offset: 0, .. }),
        "{error}"
    );
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
            let result = open(&damaged, small_zero_ahead());
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
                ..small_zero_ahead()
            };
            let (wal, recovery, replayed) = open(&damaged, salvage.clone()).expect(&context);
            assert_eq!(replayed.len(), index, "{context}");
            let report = recovery.salvage.expect("salvage report");
            assert_eq!(report.offset, position.offset, "{context}");
            assert!(report.bytes_dropped > 0);
            wal.close().unwrap();
            // Salvaged means clean: a second open needs no salvage.
            let (_, recovery, replayed) = open(&damaged, small_zero_ahead()).expect(&context);
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
