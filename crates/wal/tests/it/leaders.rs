//! The group commit led by waiters under `FsyncPolicy::Always` (see `sync.rs`): on a
//! multi-threaded runtime the waiter that needs durability writes and fdatasyncs on its own
//! thread, followers ride the next batch, and the leader role passes on even when a chosen
//! leader gives up. The fault storage's sync gate freezes a batch in flight so each test can
//! arrange exactly who waits while it runs.

use std::future::Future;
use std::sync::Arc;
use std::task::{Context, Waker};
use std::time::Duration;

use leaseq_wal::fault::FaultStorage;
use leaseq_wal::{FsyncPolicy, Options, Wal};

use crate::common::{append_all, open, payload};
use crate::concurrency::assert_durable;

fn options() -> Options {
    Options {
        fsync: FsyncPolicy::Always,
        ..Options::default()
    }
}

/// A log with its first segment already created, so every later batch is one fdatasync.
fn warm_log(storage: &FaultStorage) -> Arc<Wal> {
    let (wal, _, _) = open(storage, options()).unwrap();
    append_all(&wal, 0, 1);
    Arc::new(wal)
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap()
}

/// Holds the first batch in its fdatasync until every task has appended, then lets it go:
/// the followers must all ride one second batch, and each is acknowledged only once an
/// fdatasync covers its record.
#[test]
fn followers_ride_the_next_leaders_batch() {
    const TASKS: u64 = 64;
    let storage = FaultStorage::new();
    let wal = warm_log(&storage);
    let runtime = runtime();
    let syncs_before = storage.sync_count();
    storage.hold_syncs();
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let (wal, storage) = (wal.clone(), storage.clone());
            runtime.spawn(async move {
                let record = wal.append(&payload(task)).unwrap();
                wal.wait_durable(record.lsn).await.unwrap();
                assert_durable(&storage, &wal, &record);
            })
        })
        .collect();
    storage.wait_for_held_syncs(1);
    while wal.next_lsn() < 2 + TASKS {
        std::thread::yield_now();
    }
    storage.release_syncs();
    runtime.block_on(async {
        for task in tasks {
            task.await.unwrap();
        }
    });
    // The held batch, then one batch with everything appended while it was held.
    assert_eq!(storage.sync_count() - syncs_before, 2);
    assert_eq!(wal.durable_lsn(), 1 + TASKS);
}

/// The leader's fdatasync fails: the log is poisoned, the leader and every follower get the
/// error, none is acknowledged, and nobody writes again.
#[test]
fn a_failed_fsync_in_the_leader_fails_every_waiter() {
    const TASKS: u64 = 32;
    let storage = FaultStorage::new();
    let wal = warm_log(&storage);
    let runtime = runtime();
    storage.hold_syncs();
    storage.fail_next_sync();
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let wal = wal.clone();
            runtime.spawn(async move {
                let record = wal.append(&payload(task)).unwrap();
                wal.wait_durable(record.lsn).await
            })
        })
        .collect();
    storage.wait_for_held_syncs(1);
    while wal.next_lsn() < 2 + TASKS {
        std::thread::yield_now();
    }
    let syncs_before = storage.sync_count();
    storage.release_syncs();
    let outcomes = runtime.block_on(async {
        let mut outcomes = Vec::new();
        for task in tasks {
            outcomes.push(task.await.unwrap());
        }
        outcomes
    });
    for outcome in outcomes {
        assert!(outcome.unwrap_err().is_poisoned());
    }
    assert_eq!(wal.durable_lsn(), 1);
    assert!(wal.append(b"later").unwrap_err().is_poisoned());
    assert_eq!(storage.sync_count(), syncs_before);
    drop(runtime);
    let wal = Arc::into_inner(wal).unwrap();
    assert!(wal.close().unwrap_err().is_poisoned());
}

/// A publish chooses the lowest waiter to lead the next batch; if that waiter's future is
/// dropped before it runs, the role must pass to the next waiter, or the records would sit
/// pending with their waiters asleep forever.
#[test]
fn a_chosen_leader_that_gives_up_hands_the_role_on() {
    let storage = FaultStorage::new();
    let wal = warm_log(&storage);
    let runtime = runtime();

    // A blocking waiter leads a batch that the gate holds in its fdatasync.
    storage.hold_syncs();
    let first = wal.append(b"first").unwrap();
    let leader = {
        let wal = wal.clone();
        std::thread::spawn(move || wal.wait_durable_blocking(first.lsn))
    };
    storage.wait_for_held_syncs(1);

    // Two async waiters register as followers while it is held.
    let second = wal.append(b"second").unwrap();
    let third = wal.append(b"third").unwrap();
    let _runtime_context = runtime.enter();
    let mut gives_up = Box::pin(wal.wait_durable(second.lsn));
    let mut stays = Box::pin(wal.wait_durable(third.lsn));
    let mut context = Context::from_waker(Waker::noop());
    assert!(gives_up.as_mut().poll(&mut context).is_pending());
    assert!(stays.as_mut().poll(&mut context).is_pending());

    // The held batch ends; its publish chooses `gives_up` (the lowest LSN) to lead next.
    storage.release_syncs();
    leader.join().unwrap().unwrap();
    assert_eq!(wal.durable_lsn(), first.lsn);
    drop(gives_up);

    let outcome = runtime.block_on(tokio::time::timeout(Duration::from_secs(10), stays));
    outcome
        .expect("the leader role was lost with the dropped waiter")
        .unwrap();
    assert_eq!(wal.durable_lsn(), third.lsn);
}

/// Records nobody waits for (their requests gave up) still get written when the append
/// buffer fills: an appender blocked on it asks the sync thread to write.
#[test]
fn a_full_buffer_of_unwaited_records_is_written() {
    let storage = FaultStorage::new();
    let (wal, _, _) = open(
        &storage,
        Options {
            buffer_size_max_bytes: 1 << 10,
            ..options()
        },
    )
    .unwrap();
    let mut last = None;
    for i in 0..200 {
        last = Some(wal.append(&payload(i)).unwrap());
    }
    assert!(wal.durable_lsn() > 0);
    let last = last.unwrap();
    wal.wait_durable_blocking(last.lsn).unwrap();
    assert_eq!(wal.read(last.position).unwrap(), payload(199));
}
