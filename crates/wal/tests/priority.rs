//! The sync thread's scheduling priority (sync.rs, `yield_to_requests`). A test binary of its
//! own: it looks at every thread of its process, and other tests' logs would have sync threads
//! of their own.

use std::sync::Arc;

use leaseq_wal::fault::FaultStorage;
use leaseq_wal::{FsyncPolicy, Options, Wal};

/// The nice value of thread `tid` of this process (field 19 of its `stat`).
fn nice_of(tid: &str) -> i32 {
    let stat = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat")).unwrap();
    // The fields after the command name, which is in parentheses, start with field 3.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    fields[19 - 3].parse().unwrap()
}

/// The nice values of the log's sync threads now running.
fn sync_threads() -> Vec<i32> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .map(|task| task.unwrap().file_name().into_string().unwrap())
        .filter(|tid| {
            std::fs::read_to_string(format!("/proc/self/task/{tid}/comm")).unwrap()
                == "leaseq-wal-sync\n"
        })
        .map(|tid| nice_of(&tid))
        .collect()
}

/// Opens a log under `fsync`, appends a record and syncs it, and returns the nice values of
/// the sync threads then running. Nobody waits for the record, so no caller leads: the sync
/// thread writes and fdatasyncs it, and has thus set its priority before `sync` returns.
fn sync_thread_nice_under(fsync: FsyncPolicy) -> Vec<i32> {
    let options = Options {
        fsync,
        ..Options::default()
    };
    let (wal, _) = Wal::open(Arc::new(FaultStorage::new()), options, |_| Ok(())).unwrap();
    wal.append(b"a record").unwrap();
    wal.sync().unwrap();
    let nice = sync_threads();
    wal.close().unwrap();
    nice
}

/// Under `Always` the sync thread runs five nice levels below the thread that opened the log,
/// whose own priority is unchanged; under the other policies it keeps that thread's priority.
#[test]
fn the_sync_thread_yields_to_requests_only_under_always() {
    let this_thread = std::fs::read_link("/proc/thread-self").unwrap();
    let this_tid = this_thread
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let own = nice_of(&this_tid);
    assert_eq!(
        sync_thread_nice_under(FsyncPolicy::Always),
        vec![(own + 5).min(19)]
    );
    assert_eq!(nice_of(&this_tid), own);
    assert!(
        sync_threads().is_empty(),
        "closing the log ends its sync thread"
    );
    assert_eq!(sync_thread_nice_under(FsyncPolicy::Never), vec![own]);
    assert_eq!(
        sync_thread_nice_under(FsyncPolicy::Interval(std::time::Duration::from_millis(10))),
        vec![own]
    );
}
