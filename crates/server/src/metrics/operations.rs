//! What operators watch besides the queues: the process and the log's storage.
//!
//! - The process, under the names every Prometheus client library uses for it
//!   (`process_cpu_seconds_total`, `process_resident_memory_bytes`, `process_open_fds`,
//!   `process_max_fds`, `process_start_time_seconds`: the "Process metrics" of Prometheus'
//!   "Writing client libraries" guidelines), read from `/proc/self` at scrape time on Linux and
//!   absent elsewhere.
//! - The log's storage (`leaseq_log_bytes`, `leaseq_log_segments`,
//!   `leaseq_log_bytes_since_checkpoint`, `leaseq_snapshot_bytes`,
//!   `leaseq_snapshot_age_seconds`, `leaseq_checkpoint_*`), for every store that keeps records
//!   (the file log, PostgreSQL): its segments' sizes as the store reports them, and what this
//!   process's checkpoints did ([`crate::checkpoint::CheckpointStats`]).

use crate::checkpoint::CheckpointStats;

use super::{Page, Seconds};

/// The process's resources, as `/proc/self` tells them.
#[derive(Clone, Debug, PartialEq)]
pub struct ProcessStats {
    /// User and system CPU time, in seconds.
    pub cpu_seconds: f64,
    /// Resident set size, in bytes.
    pub resident_memory_bytes: u64,
    /// Open file descriptors.
    pub open_fds: u64,
    /// The soft limit of open file descriptors (`None`: unlimited).
    pub max_fds: Option<u64>,
    /// When the process started, in seconds since the Unix epoch.
    pub start_time_seconds: f64,
}

/// Clock ticks per second of `/proc`'s times (`USER_HZ`). The kernel's ABI fixes it at 100 for
/// user space on every architecture Rust targets, so it is not asked for (as Prometheus' own
/// procfs library does: `userHZ = 100` in prometheus/procfs).
const TICKS_PER_SECOND: f64 = 100.0;

impl ProcessStats {
    /// The process's resources now (`None` where there is no `/proc/self`, or it cannot be
    /// read).
    pub fn read() -> Option<ProcessStats> {
        #[cfg(target_os = "linux")]
        {
            read_linux()
        }
        #[cfg(not(target_os = "linux"))]
        {
            None
        }
    }
}

#[cfg(target_os = "linux")]
fn read_linux() -> Option<ProcessStats> {
    let text = |path: &str| std::fs::read_to_string(path).ok();
    let boot_time_seconds = boot_time_seconds(&text("/proc/stat")?)?;
    let (cpu_seconds, start_time_seconds) =
        cpu_and_start(&text("/proc/self/stat")?, boot_time_seconds)?;
    // The listing's own descriptor is among them, as in every client library's count.
    let open_fds = std::fs::read_dir("/proc/self/fd").ok()?.count() as u64;
    Some(ProcessStats {
        cpu_seconds,
        resident_memory_bytes: resident_bytes(&text("/proc/self/status")?)?,
        open_fds,
        max_fds: max_open_files(&text("/proc/self/limits")?),
        start_time_seconds,
    })
}

/// `btime` of `/proc/stat`: when the machine booted, in seconds since the Unix epoch.
fn boot_time_seconds(proc_stat: &str) -> Option<u64> {
    proc_stat
        .lines()
        .find_map(|line| line.strip_prefix("btime "))
        .and_then(|value| value.trim().parse().ok())
}

/// CPU seconds (utime + stime) and the start time from `/proc/self/stat` (proc(5): fields 14,
/// 15 and 22, in clock ticks; the start time counts from boot).
fn cpu_and_start(stat: &str, boot_time_seconds: u64) -> Option<(f64, f64)> {
    // The command name (field 2) is in parentheses and may hold spaces and parentheses: the
    // fields after it start after the last `)`.
    let after_name = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // `fields[0]` is field 3 (the state).
    let field = |number: usize| fields.get(number - 3)?.parse::<u64>().ok();
    let cpu_ticks = field(14)? + field(15)?;
    let start_ticks = field(22)?;
    Some((
        cpu_ticks as f64 / TICKS_PER_SECOND,
        boot_time_seconds as f64 + start_ticks as f64 / TICKS_PER_SECOND,
    ))
}

/// `VmRSS` of `/proc/self/status`, which it gives in kB (proc(5)).
fn resident_bytes(status: &str) -> Option<u64> {
    let line = status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:"))?;
    let kilobytes: u64 = line.split_whitespace().next()?.parse().ok()?;
    Some(kilobytes * 1024)
}

/// The soft limit of `Max open files` in `/proc/self/limits` (`None` if unlimited or absent).
fn max_open_files(limits: &str) -> Option<u64> {
    let line = limits
        .lines()
        .find_map(|line| line.strip_prefix("Max open files"))?;
    line.split_whitespace().next()?.parse().ok()
}

/// The log store's size and what the checkpoints of this process did.
#[derive(Clone, Debug, PartialEq)]
pub struct StorageStats {
    /// The bytes of the records in the log's segments, framing included (the file log's
    /// segment files, whose active one is preallocated beyond it; PostgreSQL's frame rows).
    pub log_bytes: u64,
    /// The log's segments.
    pub log_segments: u64,
    /// The checkpoints' own account.
    pub checkpoints: CheckpointStats,
}

/// A node of several buckets: how many, and the messages on their way between them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BucketStats {
    /// The buckets this node serves (an engine each).
    pub buckets: u64,
    /// Messages in the outboxes: dead letters and redriven messages waiting for the bucket
    /// they go to (see `leaseq_core::transfer`).
    pub transfers_waiting: u64,
}

pub(super) fn render_buckets(page: &mut Page, buckets: &BucketStats) {
    page.family(
        "leaseq_buckets",
        "gauge",
        "Buckets this node serves, an engine and a log each.",
    );
    page.sample("leaseq_buckets", &[], buckets.buckets);
    page.family(
        "leaseq_transfers_waiting",
        "gauge",
        "Messages on their way to another bucket (dead letters and redriven messages whose \
         destination's engine has not taken them yet).",
    );
    page.sample("leaseq_transfers_waiting", &[], buckets.transfers_waiting);
}

pub(super) fn render_process(page: &mut Page, process: &ProcessStats) {
    page.family(
        "process_cpu_seconds_total",
        "counter",
        "Total user and system CPU time spent in seconds.",
    );
    page.sample(
        "process_cpu_seconds_total",
        &[],
        Seconds(process.cpu_seconds),
    );
    page.family(
        "process_resident_memory_bytes",
        "gauge",
        "Resident memory size in bytes.",
    );
    page.sample(
        "process_resident_memory_bytes",
        &[],
        process.resident_memory_bytes,
    );
    page.family(
        "process_open_fds",
        "gauge",
        "Number of open file descriptors.",
    );
    page.sample("process_open_fds", &[], process.open_fds);
    if let Some(max_fds) = process.max_fds {
        page.family(
            "process_max_fds",
            "gauge",
            "Maximum number of open file descriptors.",
        );
        page.sample("process_max_fds", &[], max_fds);
    }
    page.family(
        "process_start_time_seconds",
        "gauge",
        "Start time of the process since unix epoch in seconds.",
    );
    page.sample(
        "process_start_time_seconds",
        &[],
        Seconds(process.start_time_seconds),
    );
}

pub(super) fn render_storage(page: &mut Page, storage: &StorageStats, now_ms: u64) {
    let checkpoints = &storage.checkpoints;
    page.family(
        "leaseq_log_bytes",
        "gauge",
        "Bytes of the records in the log's segments, framing included (the file log's \
         segment files; PostgreSQL's frame rows).",
    );
    page.sample("leaseq_log_bytes", &[], storage.log_bytes);
    page.family("leaseq_log_segments", "gauge", "Segments of the log.");
    page.sample("leaseq_log_segments", &[], storage.log_segments);
    page.family(
        "leaseq_log_bytes_since_checkpoint",
        "gauge",
        "Log bytes appended since the last checkpoint began, or since the process started \
         (a checkpoint is due after checkpoint_bytes, or as many as the last snapshot holds).",
    );
    page.sample(
        "leaseq_log_bytes_since_checkpoint",
        &[],
        checkpoints.log_bytes_since,
    );
    if checkpoints.snapshot_bytes > 0 {
        page.family(
            "leaseq_snapshot_bytes",
            "gauge",
            "Size of the newest snapshot (written, or loaded at start).",
        );
        page.sample("leaseq_snapshot_bytes", &[], checkpoints.snapshot_bytes);
    }
    page.family(
        "leaseq_checkpoints_total",
        "counter",
        "Checkpoints this process completed.",
    );
    page.sample("leaseq_checkpoints_total", &[], checkpoints.completed);
    page.family(
        "leaseq_snapshot_age_seconds",
        "gauge",
        "Seconds since this process last wrote a snapshot, or, before its first checkpoint, \
         since it started (a snapshot recovered at start is older by an unrecorded time).",
    );
    let since_ms = checkpoints.snapshot_age_since_ms();
    page.sample(
        "leaseq_snapshot_age_seconds",
        &[],
        Seconds(now_ms.saturating_sub(since_ms) as f64 / 1e3),
    );
    if let Some(duration_micros) = checkpoints.last_duration_micros {
        page.family(
            "leaseq_checkpoint_duration_seconds",
            "gauge",
            "Duration of the last checkpoint, from the freeze to the last relocated payload.",
        );
        page.sample(
            "leaseq_checkpoint_duration_seconds",
            &[],
            Seconds(duration_micros as f64 / 1e6),
        );
    }
    if let Some(paused_micros) = checkpoints.last_paused_micros {
        page.family(
            "leaseq_checkpoint_pause_seconds",
            "gauge",
            "How long the last checkpoint held the engine lock (the freeze), pausing traffic.",
        );
        page.sample(
            "leaseq_checkpoint_pause_seconds",
            &[],
            Seconds(paused_micros as f64 / 1e6),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_files_parse() {
        // Shapes of proc(5): a command name with a space and a parenthesis.
        let stat = "4242 (leaseq (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 \
                    9 0 12345 1000000 500 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 \
                    0 0 0 0";
        let (cpu, start) = cpu_and_start(stat, 1_700_000_000).unwrap();
        assert_eq!(cpu, 3.0);
        assert_eq!(start, 1_700_000_123.45);
        assert_eq!(
            boot_time_seconds("cpu  1 2 3\nbtime 1700000000\nprocesses 9\n"),
            Some(1_700_000_000)
        );
        assert_eq!(
            resident_bytes("Name:\tleaseq\nVmRSS:\t   2048 kB\nVmData:\t1 kB\n"),
            Some(2048 * 1024)
        );
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max cpu time              unlimited            unlimited            seconds   \n\
                      Max open files            1024                 524288               files     \n";
        assert_eq!(max_open_files(limits), Some(1024));
        assert_eq!(
            max_open_files(
                "Max open files            unlimited            unlimited            files"
            ),
            None
        );
        assert_eq!(cpu_and_start("garbage", 0), None);
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn this_process_reads_plausibly() {
        let process = ProcessStats::read().expect("/proc/self");
        assert!(process.resident_memory_bytes > 1 << 20, "{process:?}");
        assert!(process.open_fds >= 3, "{process:?}");
        assert!(process.max_fds.is_none_or(|max| max >= process.open_fds));
        // Started after 2020 and not in the future (by the machine's clock).
        let now_seconds = crate::clock::now_ms() as f64 / 1e3;
        assert!(
            process.start_time_seconds > 1.58e9 && process.start_time_seconds <= now_seconds + 1.0,
            "{process:?}"
        );
        // Burn CPU and see the counter move.
        let before = process.cpu_seconds;
        let mut x = 0u64;
        let started = std::time::Instant::now();
        while started.elapsed() < std::time::Duration::from_millis(120) {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
        }
        std::hint::black_box(x);
        let after = ProcessStats::read().unwrap().cpu_seconds;
        assert!(after > before, "{before} -> {after}");
    }
}
