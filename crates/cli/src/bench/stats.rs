//! What the generator measures: per-action counts and latency histograms (each worker keeps its
//! own, merged at the end, so recording takes no lock), live counters for the progress line, and
//! CPU time of the generator itself and of the server process.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use hdrhistogram::Histogram;

use super::client::Action;

/// Latencies in microseconds, 3 significant digits; the histogram grows with the largest value.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new(3).expect("3 significant digits is a valid histogram precision")
}

/// One action's results.
pub struct ActionStats {
    /// Requests answered 2xx.
    pub requests: u64,
    /// Messages those requests carried (sent, received or deleted), failed entries excluded.
    pub messages: u64,
    /// Requests that failed (transport or non-2xx).
    pub errors: u64,
    /// Entries of 2xx batch answers that were reported as failed.
    pub failed_entries: u64,
    /// Receives answered with no message (their latency is the wait, so it is not recorded).
    pub empty: u64,
    /// Latency of the successful requests, µs.
    pub latency_us: Histogram<u64>,
    /// The first error seen, to show the user what went wrong.
    pub first_error: Option<String>,
}

impl Default for ActionStats {
    fn default() -> Self {
        ActionStats {
            requests: 0,
            messages: 0,
            errors: 0,
            failed_entries: 0,
            empty: 0,
            latency_us: new_histogram(),
            first_error: None,
        }
    }
}

/// A worker's (or, merged, the phase's) results.
pub struct Recorder {
    pub actions: BTreeMap<Action, ActionStats>,
    /// Send → receive latency of received messages, µs (only when the phase records it).
    pub end_to_end_us: Histogram<u64>,
    /// The same, of tenant `t0`'s messages (the noisy tenant), with `--tenants`.
    pub end_to_end_noisy_us: Histogram<u64>,
    /// The same, of every other tenant's messages, with `--tenants`.
    pub end_to_end_quiet_us: Histogram<u64>,
    /// Connections opened: one per worker, unless the server closes them.
    pub connections_opened: u64,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder {
            actions: BTreeMap::new(),
            end_to_end_us: new_histogram(),
            end_to_end_noisy_us: new_histogram(),
            end_to_end_quiet_us: new_histogram(),
            connections_opened: 0,
        }
    }
}

impl Recorder {
    pub fn success(
        &mut self,
        action: Action,
        latency: Duration,
        messages: u64,
        failed_entries: u64,
    ) {
        let stats = self.actions.entry(action).or_default();
        stats.requests += 1;
        stats.messages += messages;
        stats.failed_entries += failed_entries;
        record(&mut stats.latency_us, micros(latency));
    }

    pub fn failure(&mut self, action: Action, error: &dyn std::fmt::Display) {
        let stats = self.actions.entry(action).or_default();
        stats.errors += 1;
        if stats.first_error.is_none() {
            stats.first_error = Some(error.to_string());
        }
    }

    /// A message's send → receive latency; `noisy` says whether it was tenant `t0`'s, if the
    /// message had a tenant.
    pub fn end_to_end(&mut self, latency_us: u64, noisy: Option<bool>) {
        let latency_us = latency_us.max(1);
        record(&mut self.end_to_end_us, latency_us);
        match noisy {
            Some(true) => record(&mut self.end_to_end_noisy_us, latency_us),
            Some(false) => record(&mut self.end_to_end_quiet_us, latency_us),
            None => {}
        }
    }

    pub fn merge(&mut self, other: Recorder) {
        for (action, theirs) in other.actions {
            let ours = self.actions.entry(action).or_default();
            ours.requests += theirs.requests;
            ours.messages += theirs.messages;
            ours.errors += theirs.errors;
            ours.failed_entries += theirs.failed_entries;
            ours.empty += theirs.empty;
            ours.latency_us
                .add(&theirs.latency_us)
                .expect("auto-resizing histograms merge");
            if ours.first_error.is_none() {
                ours.first_error = theirs.first_error;
            }
        }
        self.connections_opened += other.connections_opened;
        for (ours, theirs) in [
            (&mut self.end_to_end_us, &other.end_to_end_us),
            (&mut self.end_to_end_noisy_us, &other.end_to_end_noisy_us),
            (&mut self.end_to_end_quiet_us, &other.end_to_end_quiet_us),
        ] {
            ours.add(theirs).expect("auto-resizing histograms merge");
        }
    }
}

/// Records a value, growing the histogram as needed. (`saturating_record` would not grow it: it
/// clamps to the current, initially tiny, range.) A value too large even to grow to is clamped.
fn record(histogram: &mut Histogram<u64>, value: u64) {
    if histogram.record(value).is_err() {
        histogram.saturating_record(value);
    }
}

fn micros(latency: Duration) -> u64 {
    u64::try_from(latency.as_micros())
        .unwrap_or(u64::MAX)
        .max(1)
}

/// Counters that workers bump as they go, read once a second for the progress line.
#[derive(Default)]
pub struct Progress {
    pub sent: AtomicU64,
    pub received: AtomicU64,
    pub deleted: AtomicU64,
    pub errors: AtomicU64,
}

/// A reading of [`Progress`].
#[derive(Clone, Copy, Debug, Default)]
pub struct ProgressSnapshot {
    pub sent: u64,
    pub received: u64,
    pub deleted: u64,
    pub errors: u64,
}

impl Progress {
    pub fn snapshot(&self) -> ProgressSnapshot {
        ProgressSnapshot {
            sent: self.sent.load(Relaxed),
            received: self.received.load(Relaxed),
            deleted: self.deleted.load(Relaxed),
            errors: self.errors.load(Relaxed),
        }
    }
}

/// CPU time consumed so far by the generator and, if known, by the server.
#[derive(Clone, Copy, Debug)]
pub struct CpuSample {
    pub generator: Duration,
    pub server: Option<Duration>,
}

impl CpuSample {
    pub fn take(server_pid: Option<u32>) -> CpuSample {
        CpuSample {
            generator: own_cpu_time(),
            server: server_pid.and_then(|pid| process_cpu_time(pid).ok()),
        }
    }
}

/// User plus system CPU time of this process, all threads.
fn own_cpu_time() -> Duration {
    // SAFETY: `getrusage` only writes the `rusage` we hand it, which is a plain C struct for
    // which all zeroes is a valid value.
    let usage = unsafe {
        let mut usage: libc::rusage = std::mem::zeroed();
        if libc::getrusage(libc::RUSAGE_SELF, &mut usage) != 0 {
            return Duration::ZERO;
        }
        usage
    };
    let timeval = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    timeval(usage.ru_utime) + timeval(usage.ru_stime)
}

/// The parent of process `pid`, from `/proc/PID/stat` (field 4).
pub(super) fn process_parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let after_name = stat.rsplit_once(')')?.1;
    after_name.split_whitespace().nth(1)?.parse().ok()
}

/// User plus system CPU time of another process, from `/proc/PID/stat` (clock-tick resolution,
/// usually 10 ms, which is why runs should last seconds).
pub(super) fn process_cpu_time(pid: u32) -> std::io::Result<Duration> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    let bad = || {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "unexpected /proc stat format",
        )
    };
    // The command name (field 2) may contain spaces and parentheses; fields after its closing
    // parenthesis start with field 3, the state. utime and stime are fields 14 and 15.
    let after_name = stat.rsplit_once(')').ok_or_else(bad)?.1;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = |index: usize| -> std::io::Result<u64> {
        fields
            .get(index)
            .and_then(|f| f.parse().ok())
            .ok_or_else(bad)
    };
    let total_ticks = ticks(11)? + ticks(12)?;
    // SAFETY: sysconf only reads a configuration value.
    let ticks_per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let ticks_per_second = u64::try_from(ticks_per_second)
        .ok()
        .filter(|&t| t > 0)
        .ok_or_else(bad)?;
    Ok(Duration::from_micros(
        total_ticks * 1_000_000 / ticks_per_second,
    ))
}

/// Resident set size now and at its peak, bytes, from `/proc/PID/status`.
pub fn process_rss_bytes(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kib = |key: &str| -> Option<u64> {
        let line = status.lines().find(|line| line.starts_with(key))?;
        line[key.len()..]
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()
    };
    Some((kib("VmRSS:")? * 1024, kib("VmHWM:")? * 1024))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_grow_past_their_initial_range() {
        let mut recorder = Recorder::default();
        recorder.success(Action::SendMessage, Duration::from_millis(250), 1, 0);
        recorder.success(Action::SendMessage, Duration::from_micros(40), 1, 0);
        let latency = &recorder.actions[&Action::SendMessage].latency_us;
        assert!(latency.max() >= 249_000, "max {}", latency.max());
        assert!(latency.min() <= 41);
    }

    #[test]
    fn reads_cpu_time_and_rss_of_a_process() {
        let pid = std::process::id();
        assert!(process_cpu_time(pid).is_ok());
        let (rss, peak) = process_rss_bytes(pid).unwrap();
        assert!(rss > 0 && peak >= rss);
        assert!(own_cpu_time() > Duration::ZERO);
    }
}
