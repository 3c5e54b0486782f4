//! Concurrent appenders under `FsyncPolicy::Always`: every acknowledgement must come after an
//! fdatasync that covers the record, which the fault storage can check exactly.

use std::sync::Arc;

use leaseq_wal::fault::FaultStorage;
use leaseq_wal::format::frame_len_bytes;
use leaseq_wal::{segment_file_name, Appended, FsyncPolicy, Options, Wal};

use crate::common::{open, payload};

const THREADS: u64 = 8;
const RECORDS_PER_THREAD: u64 = 150;

fn options() -> Options {
    Options {
        fsync: FsyncPolicy::Always,
        segment_size_max_bytes: 16 << 10,
        ..Options::default()
    }
}

/// Asserts that `record` is inside the durable image of its segment right now.
pub fn assert_durable(storage: &FaultStorage, wal: &Wal, record: &Appended) {
    let position = record.position;
    let end = position.offset + frame_len_bytes(position.len_bytes as usize) as u64;
    let durable_len = storage
        .durable_len_bytes(&segment_file_name(position.segment))
        .unwrap_or(0);
    assert!(
        durable_len >= end,
        "LSN {} acknowledged before it was synced",
        record.lsn
    );
    assert!(wal.durable_lsn() >= record.lsn);
}

#[test]
fn threads_are_acknowledged_only_when_durable() {
    let storage = FaultStorage::new();
    let (wal, _, _) = open(&storage, options()).unwrap();
    let wal = Arc::new(wal);
    let threads: Vec<_> = (0..THREADS)
        .map(|thread| {
            let (wal, storage) = (wal.clone(), storage.clone());
            std::thread::spawn(move || {
                let mut lsns = Vec::new();
                for i in 0..RECORDS_PER_THREAD {
                    let body = payload(thread * 1000 + i);
                    let record = wal.append(&body).unwrap();
                    wal.wait_durable_blocking(record.lsn).unwrap();
                    assert_durable(&storage, &wal, &record);
                    assert_eq!(wal.read(record.position).unwrap(), body);
                    lsns.push(record.lsn);
                }
                lsns
            })
        })
        .collect();
    let mut lsns: Vec<u64> = threads
        .into_iter()
        .flat_map(|thread| thread.join().unwrap())
        .collect();
    lsns.sort_unstable();
    let total = THREADS * RECORDS_PER_THREAD;
    assert_eq!(lsns, (1..=total).collect::<Vec<_>>());
    Arc::into_inner(wal).unwrap().close().unwrap();
    let (_, recovery, _) = open(&storage, options()).unwrap();
    assert_eq!(recovery.records_replayed, total);
}

#[test]
fn async_tasks_are_acknowledged_only_when_durable() {
    let storage = FaultStorage::new();
    let (wal, _, _) = open(&storage, options()).unwrap();
    let wal = Arc::new(wal);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .unwrap();
    runtime.block_on(async {
        let tasks: Vec<_> = (0..64u64)
            .map(|task| {
                let (wal, storage) = (wal.clone(), storage.clone());
                tokio::spawn(async move {
                    for i in 0..20 {
                        let record = wal.append(&payload(task * 100 + i)).unwrap();
                        wal.wait_durable(record.lsn).await.unwrap();
                        assert_durable(&storage, &wal, &record);
                    }
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
    });
    assert_eq!(wal.next_lsn(), 64 * 20 + 1);
}

#[test]
fn a_failed_fsync_fails_every_concurrent_waiter_it_covers() {
    let storage = FaultStorage::new();
    let (wal, _, _) = open(&storage, options()).unwrap();
    let wal = Arc::new(wal);
    storage.fail_next_sync();
    let threads: Vec<_> = (0..THREADS)
        .map(|thread| {
            let (wal, storage) = (wal.clone(), storage.clone());
            std::thread::spawn(move || {
                let mut acknowledged = 0;
                for i in 0..RECORDS_PER_THREAD {
                    let Ok(record) = wal.append(&payload(thread * 1000 + i)) else {
                        break;
                    };
                    match wal.wait_durable_blocking(record.lsn) {
                        Ok(()) => {
                            assert_durable(&storage, &wal, &record);
                            acknowledged += 1;
                        }
                        Err(error) => {
                            assert!(error.is_poisoned());
                            break;
                        }
                    }
                }
                acknowledged
            })
        })
        .collect();
    let acknowledged: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    // The very first fdatasync failed, so nothing was ever acknowledged.
    assert_eq!(acknowledged, 0);
}
