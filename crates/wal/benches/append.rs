//! Append throughput of 256-byte records under `FsyncPolicy::Always`, at 1, 16 and 256
//! concurrent appenders, each appending and then waiting for durability in a loop; and, as the
//! yardstick, the bare rate of `write` + `fdatasync` on the same disk. With group commit, the
//! records/s at high concurrency should be a multiple of the bare fdatasync rate.
//!
//! The files live under Cargo's target directory (`CARGO_TARGET_TMPDIR`), not `/tmp`, which
//! is a tmpfs on many machines and would make fdatasync free.

use std::fs::{self, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use leaseq_wal::{DirStorage, FsyncPolicy, Options, Storage, StorageFile, Wal};

const RECORD_LEN_BYTES: usize = 256;

fn bench_dir(name: &str) -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"))
        .join("leaseq-wal-bench")
        .join(name);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).expect("create bench dir");
    dir
}

/// A [`DirStorage`] that counts fdatasyncs, to report how many records each one covered
/// (the group-commit batch size), a number less noisy than records/s on a shared machine.
#[derive(Debug)]
struct CountingStorage {
    inner: DirStorage,
    syncs: Arc<AtomicU64>,
}

#[derive(Debug)]
struct CountingFile {
    inner: Arc<dyn StorageFile>,
    syncs: Arc<AtomicU64>,
}

impl CountingStorage {
    fn wrap(&self, file: Arc<dyn StorageFile>) -> Arc<dyn StorageFile> {
        let syncs = self.syncs.clone();
        Arc::new(CountingFile { inner: file, syncs })
    }
}

impl Storage for CountingStorage {
    fn open(&self, name: &str) -> io::Result<Arc<dyn StorageFile>> {
        Ok(self.wrap(self.inner.open(name)?))
    }
    fn create(&self, name: &str) -> io::Result<Arc<dyn StorageFile>> {
        Ok(self.wrap(self.inner.create(name)?))
    }
    fn list(&self) -> io::Result<Vec<String>> {
        self.inner.list()
    }
    fn remove(&self, name: &str) -> io::Result<()> {
        self.inner.remove(name)
    }
    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        self.inner.rename(from, to)
    }
    fn sync_dir(&self) -> io::Result<()> {
        self.inner.sync_dir()
    }
}

impl StorageFile for CountingFile {
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.inner.read_exact_at(buf, offset)
    }
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.inner.write_all_at(buf, offset)
    }
    fn sync_data(&self) -> io::Result<()> {
        self.syncs.fetch_add(1, Ordering::Relaxed);
        self.inner.sync_data()
    }
    fn set_len(&self, len_bytes: u64) -> io::Result<()> {
        self.inner.set_len(len_bytes)
    }
    fn len_bytes(&self) -> io::Result<u64> {
        self.inner.len_bytes()
    }
}

/// Runs `appenders` threads that together append and await `records` records.
fn append_concurrently(wal: &Wal, appenders: u64, records: u64) -> Duration {
    let payload = [0xA5u8; RECORD_LEN_BYTES];
    let start = Instant::now();
    std::thread::scope(|scope| {
        for appender in 0..appenders {
            let share = records / appenders + u64::from(appender < records % appenders);
            let payload = &payload;
            scope.spawn(move || {
                for _ in 0..share {
                    let record = wal.append(payload).expect("append");
                    wal.wait_durable_blocking(record.lsn).expect("durable");
                }
            });
        }
    });
    start.elapsed()
}

fn append_always(c: &mut Criterion) {
    let dir = bench_dir("append-always");
    let options = Options {
        fsync: FsyncPolicy::Always,
        ..Options::default()
    };
    let syncs = Arc::new(AtomicU64::new(0));
    let storage = CountingStorage {
        inner: DirStorage::new(&dir).expect("bench dir"),
        syncs: syncs.clone(),
    };
    let (wal, _) = Wal::open(Arc::new(storage), options, |_| Ok(())).expect("open");
    let mut group = c.benchmark_group("append_256B_always");
    group.throughput(Throughput::Elements(1));
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(4));
    for appenders in [1u64, 16, 256] {
        let (lsn_before, syncs_before) = (wal.next_lsn(), syncs.load(Ordering::Relaxed));
        group.bench_with_input(
            BenchmarkId::from_parameter(format!("{appenders}_appenders")),
            &appenders,
            |b, &appenders| b.iter_custom(|iters| append_concurrently(&wal, appenders, iters)),
        );
        let records = wal.next_lsn() - lsn_before;
        let fdatasyncs = syncs.load(Ordering::Relaxed) - syncs_before;
        println!(
            "{appenders} appenders: {records} records, {fdatasyncs} fdatasyncs, {:.1} records per fdatasync",
            records as f64 / fdatasyncs.max(1) as f64
        );
        // Keep the disk bounded across the run.
        let next_lsn = wal.next_lsn();
        wal.remove_segments_before(next_lsn)
            .expect("remove segments");
    }
    group.finish();
    wal.close().expect("close");
    let _ = fs::remove_dir_all(&dir);
}

fn bare_fdatasync(c: &mut Criterion) {
    let dir = bench_dir("fdatasync");
    let file = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(dir.join("yardstick"))
        .expect("open");
    let payload = [0x5Au8; RECORD_LEN_BYTES];
    let mut offset = 0u64;
    let mut group = c.benchmark_group("yardstick");
    group.throughput(Throughput::Elements(1));
    group.sample_size(10);
    group.warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(4));
    group.bench_function("write_256B_fdatasync", |b| {
        b.iter(|| {
            file.write_all_at(&payload, offset).expect("write");
            file.sync_data().expect("fdatasync");
            offset += RECORD_LEN_BYTES as u64;
        })
    });
    group.finish();
    let _ = fs::remove_dir_all(&dir);
}

criterion_group!(benches, bare_fdatasync, append_always);
criterion_main!(benches);
