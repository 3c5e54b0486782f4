//! Snapshots: atomic writes, verification, fallback to an older snapshot, and cleanup.

use leaseq_wal::fault::{CrashMode, FaultStorage};
use leaseq_wal::snapshot::{self, snapshot_file_name};
use leaseq_wal::{FsyncPolicy, Snapshot, Storage};

use crate::common::{open, small_segments};

#[test]
fn latest_snapshot_round_trips_and_survives_a_crash() {
    let storage = FaultStorage::new();
    let (wal, _, _) = open(&storage, small_segments(FsyncPolicy::Always)).unwrap();
    assert_eq!(wal.latest_snapshot().unwrap(), None);
    wal.write_snapshot(10, b"state at 10").unwrap();
    wal.write_snapshot(20, b"state at 20").unwrap();
    wal.write_snapshot(30, b"state at 30").unwrap();
    let latest = Snapshot {
        lsn: 30,
        bytes: b"state at 30".to_vec(),
    };
    assert_eq!(wal.latest_snapshot().unwrap(), Some(latest.clone()));
    // Only the two newest are kept.
    assert!(!storage.file_names().contains(&snapshot_file_name(10)));

    let storage = storage.crash(CrashMode::DropUnsynced);
    drop(wal);
    assert_eq!(snapshot::latest(&storage).unwrap(), Some(latest));
}

#[test]
fn a_damaged_snapshot_falls_back_to_the_previous_one() {
    let storage = FaultStorage::new();
    snapshot::write(&storage, 5, b"five").unwrap();
    snapshot::write(&storage, 9, b"nine").unwrap();
    storage.flip_bit(&snapshot_file_name(9), 33, 1);
    let latest = snapshot::latest(&storage).unwrap().unwrap();
    assert_eq!((latest.lsn, latest.bytes.as_slice()), (5, &b"five"[..]));
}

#[test]
fn a_temporary_file_from_a_crash_is_ignored_and_removed() {
    let storage = FaultStorage::new();
    snapshot::write(&storage, 5, b"five").unwrap();
    let temporary = format!("{}.tmp", snapshot_file_name(7));
    let file = storage.create(&temporary).unwrap();
    file.write_all_at(b"half a snapsh", 0).unwrap();
    assert_eq!(snapshot::latest(&storage).unwrap().unwrap().lsn, 5);
    let (wal, _, _) = open(&storage, small_segments(FsyncPolicy::Always)).unwrap();
    assert!(!storage.file_names().contains(&temporary));
    // Writing the same LSN again after a crash works.
    wal.write_snapshot(7, b"seven").unwrap();
    assert_eq!(wal.latest_snapshot().unwrap().unwrap().bytes, b"seven");
}

/// A snapshot larger than the writer's and reader's chunks streams through whole, a bit flip
/// anywhere in it is caught, and a snapshot in the version 1 layout (CRC over the header first)
/// still reads.
#[test]
fn large_snapshots_stream_and_version_1_still_reads() {
    let storage = FaultStorage::new();
    let payload: Vec<u8> = (0..3_500_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let mut writer = snapshot::SnapshotWriter::create(&storage, 40).unwrap();
    for piece in payload.chunks(777) {
        writer
            .append_with(|buffer| buffer.extend_from_slice(piece))
            .unwrap();
    }
    assert_eq!(writer.finish().unwrap(), payload.len() as u64);
    let file = snapshot::latest_file(&storage).unwrap().unwrap();
    assert_eq!((file.lsn, file.len_bytes), (40, payload.len() as u64));
    let mut read = Vec::new();
    std::io::Read::read_to_end(&mut file.reader(), &mut read).unwrap();
    assert!(read == payload, "streamed payload differs");

    storage.flip_bit(&snapshot_file_name(40), 32 + 2_500_000, 3);
    assert!(snapshot::latest_file(&storage).unwrap().is_none());

    // Version 1: version field 1, CRC32C over the header's first 28 bytes, then the payload.
    let mut v1 = Vec::new();
    v1.extend_from_slice(b"LEASEQSN");
    v1.extend_from_slice(&1u32.to_le_bytes());
    v1.extend_from_slice(&50u64.to_le_bytes());
    v1.extend_from_slice(&(b"old state".len() as u64).to_le_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&v1[..28]), b"old state");
    v1.extend_from_slice(&crc.to_le_bytes());
    v1.extend_from_slice(b"old state");
    assert_eq!(
        snapshot::decode(&v1).map(|s| (s.lsn, s.bytes)),
        Ok((50, b"old state".to_vec()))
    );
    let file = storage.create(&snapshot_file_name(50)).unwrap();
    file.write_all_at(&v1, 0).unwrap();
    let latest = snapshot::latest(&storage).unwrap().unwrap();
    assert_eq!(
        (latest.lsn, latest.bytes.as_slice()),
        (50, &b"old state"[..])
    );
}
