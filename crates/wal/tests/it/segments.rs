//! Segment rolling, stats and removal.

use leaseq_wal::fault::{CrashMode, FaultStorage};
use leaseq_wal::{segment_file_name, FsyncPolicy, WalError};

use crate::common::{append_all, open, small_segments};

#[test]
fn segments_roll_and_report_contiguous_ranges() {
    let storage = FaultStorage::new();
    let options = small_segments(FsyncPolicy::Always);
    let (wal, _, _) = open(&storage, options.clone()).unwrap();
    let appended = append_all(&wal, 0, 60);
    let segments = wal.segments();
    assert!(segments.len() >= 4, "{segments:?}");
    assert_eq!(segments[0].first_lsn, 1);
    for pair in segments.windows(2) {
        assert_eq!(pair[0].end_lsn, pair[1].first_lsn);
        assert_eq!(pair[0].segment + 1, pair[1].segment);
        assert!(pair[0].size_bytes <= options.segment_size_max_bytes);
        assert!(!pair[0].active);
    }
    let last = segments.last().unwrap();
    assert!(last.active);
    assert_eq!(last.end_lsn, 61);
    for info in &segments {
        // The records, then the zeros written ahead of them, within the segment's bound.
        let contents = storage.contents(&segment_file_name(info.segment)).unwrap();
        assert!(contents.len() as u64 >= info.size_bytes);
        assert!(contents.len() as u64 <= options.segment_size_max_bytes);
        assert!(contents[info.size_bytes as usize..].iter().all(|&b| b == 0));
    }
    assert_eq!(appended.last().unwrap().1.segment, last.segment);
}

#[test]
fn removal_takes_whole_old_segments_and_never_the_active_one() {
    let storage = FaultStorage::new();
    let options = small_segments(FsyncPolicy::Always);
    let (wal, _, _) = open(&storage, options.clone()).unwrap();
    let appended = append_all(&wal, 0, 60);
    let before = wal.segments();
    // An LSN in the middle of the third segment removes the first two only.
    let cut_lsn = before[2].first_lsn + 1;
    let removed = wal.remove_segments_before(cut_lsn).unwrap();
    assert_eq!(removed, vec![before[0].segment, before[1].segment]);
    assert_eq!(wal.segments()[0].first_lsn, before[2].first_lsn);
    assert!(!storage
        .file_names()
        .contains(&segment_file_name(before[0].segment)));
    let gone = appended[0].1;
    assert!(matches!(
        wal.read(gone),
        Err(WalError::InvalidPosition { .. })
    ));

    // Everything below "infinity" still leaves the active segment.
    wal.remove_segments_before(u64::MAX).unwrap();
    let after = wal.segments();
    assert_eq!(after.len(), 1);
    assert!(after[0].active);
    let kept = appended.iter().filter(|a| a.1.segment == after[0].segment);
    for (_, position, payload) in kept {
        assert_eq!(&wal.read(*position).unwrap(), payload);
    }

    // A crash right after removal does not bring the segments back, and the LSNs continue.
    let storage = storage.crash(CrashMode::DropUnsynced);
    drop(wal);
    let (wal, recovery, replayed) = open(&storage, options).unwrap();
    assert_eq!(replayed.first().unwrap().lsn, after[0].first_lsn);
    assert_eq!(recovery.next_lsn, 61);
    assert_eq!(wal.append(b"next").unwrap().lsn, 61);
}

/// Segments kept only for what they hold (message payloads) may have gaps between them; an open
/// that says a snapshot covers them reads them without scanning, and scans from the first
/// segment the snapshot does not cover.
#[test]
fn removal_with_keep_leaves_gaps_that_a_covered_open_accepts() {
    let storage = FaultStorage::new();
    let options = small_segments(FsyncPolicy::Always);
    let (wal, _, _) = open(&storage, options.clone()).unwrap();
    let appended = append_all(&wal, 0, 60);
    let before = wal.segments();
    assert!(before.len() >= 5, "{before:?}");
    // A snapshot covers everything before the fifth segment; the second and fourth still hold
    // something needed.
    let covered_lsn = before[4].first_lsn - 1;
    let kept = [before[1].segment, before[3].segment];
    let removed = wal
        .remove_segments(covered_lsn + 1, |segment| kept.contains(&segment))
        .unwrap();
    assert_eq!(removed, vec![before[0].segment, before[2].segment]);
    drop(wal);

    // Without the snapshot, the gap is corruption.
    let error = open(&storage, options.clone()).unwrap_err();
    assert!(error.to_string().contains("missing"), "{error}");

    let covered = leaseq_wal::Options {
        covered_lsn,
        ..options.clone()
    };
    let (wal, recovery, replayed) = open(&storage, covered).unwrap();
    assert_eq!(replayed.first().unwrap().lsn, before[4].first_lsn);
    assert_eq!(recovery.next_lsn, 61);
    for (_, position, payload) in &appended {
        if kept.contains(&position.segment) || position.segment >= before[4].segment {
            assert_eq!(&wal.read(*position).unwrap(), payload);
        } else {
            assert!(wal.read(*position).is_err());
        }
    }
    let next = wal.append(b"after").unwrap();
    assert_eq!(next.lsn, 61);
    drop(wal);

    // A snapshot that claims less than the kept segments cover: records would be missing.
    let too_little = leaseq_wal::Options {
        covered_lsn: before[2].first_lsn,
        ..options
    };
    let error = open(&storage, too_little).unwrap_err();
    assert!(error.to_string().contains("missing"), "{error}");
}

#[test]
fn the_active_segment_is_zeroed_one_to_two_steps_ahead_of_its_records() {
    let storage = FaultStorage::new();
    let step = 1024;
    let options = leaseq_wal::Options {
        fsync: FsyncPolicy::Always,
        segment_size_max_bytes: 6 * step,
        zero_ahead_bytes: step,
        ..leaseq_wal::Options::default()
    };
    let check = |context: &str| {
        let wal_files = storage.file_names();
        let name = wal_files
            .iter()
            .filter(|n| n.ends_with(".wal"))
            .max()
            .unwrap();
        let contents = storage.contents(name).unwrap();
        let len = contents.len() as u64;
        // The records end where the zeros begin (the last record is not zero-padded inside).
        let records_end = contents.iter().rposition(|&b| b != 0).unwrap() as u64 + 1;
        let expected = records_end + step..=records_end + 2 * step;
        assert!(
            expected.contains(&len) || len == options.segment_size_max_bytes,
            "{context}: {len} bytes for records ending at {records_end}"
        );
        assert_eq!(
            storage.durable_len_bytes(name),
            Some(len),
            "{context}: zeros are synced"
        );
    };
    let (wal, _, _) = open(&storage, options.clone()).unwrap();
    for i in 0..200 {
        append_all(&wal, i, 1);
        check(&format!("after record {i}"));
    }
    wal.close().unwrap();
    // A reopened log goes on zeroing ahead of the recovered records.
    let (wal, _, replayed) = open(&storage, options.clone()).unwrap();
    assert_eq!(replayed.len(), 200);
    for i in 200..260 {
        append_all(&wal, i, 1);
        check(&format!("after record {i}, reopened"));
    }
    assert!(
        wal.segments().len() > 1,
        "the records crossed segment rolls"
    );

    // Off, the file grows with its records.
    let storage = FaultStorage::new();
    let off = leaseq_wal::Options {
        zero_ahead_bytes: 0,
        ..options
    };
    let (wal, _, _) = open(&storage, off).unwrap();
    let appended = append_all(&wal, 0, 10);
    let last = appended.last().unwrap().1;
    let end = last.offset + leaseq_wal::format::frame_len_bytes(last.len_bytes as usize) as u64;
    let contents = storage.contents(&segment_file_name(1)).unwrap();
    assert_eq!(contents.len() as u64, end);
}
