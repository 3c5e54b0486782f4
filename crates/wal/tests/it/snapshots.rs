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
