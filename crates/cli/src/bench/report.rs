//! The results of a run, as a table for people and as one JSON object for scripts.

use std::fmt::Write as _;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::client::Action;
use super::plan::{Phase, Plan, Workload};
use super::postgres::PgSample;
use super::stats::{process_rss_bytes, CpuSample, ProgressSnapshot, Recorder};

/// Everything a run measured.
#[derive(Serialize)]
pub struct BenchReport {
    pub workload: Option<Workload>,
    pub queue_url: String,
    pub plan: Plan,
    /// Filling the backlog, when there was one.
    pub fill: Option<PhaseReport>,
    /// The measured phase.
    pub run: PhaseReport,
}

/// One phase's results.
#[derive(Serialize)]
pub struct PhaseReport {
    pub phase: &'static str,
    pub elapsed_s: f64,
    pub producers: usize,
    pub consumers: usize,
    pub messages_sent: u64,
    pub messages_received: u64,
    pub messages_deleted: u64,
    /// The count that CPU time per message divides by: messages sent, or deleted when there
    /// were no producers, or the larger of the two when both ran.
    pub messages: u64,
    /// One per worker if the server keeps connections alive; more if it closes them.
    pub connections_opened: u64,
    pub actions: Vec<ActionReport>,
    /// Send → receive, µs, for messages sent and received within this phase.
    pub end_to_end_latency_us: Option<Latency>,
    /// The same for tenant `t0`'s messages (the noisy one), with `--tenants`.
    pub end_to_end_noisy_latency_us: Option<Latency>,
    /// The same for the other tenants' messages (the quiet ones), with `--tenants`.
    pub end_to_end_quiet_latency_us: Option<Latency>,
    pub generator_cpu: CpuReport,
    pub server_cpu: Option<CpuReport>,
    pub server_rss_bytes: Option<u64>,
    pub server_rss_peak_bytes: Option<u64>,
    /// What the phase cost PostgreSQL, with `--postgres-stats` or `--pgmq`.
    pub postgres: Option<PostgresReport>,
}

/// PostgreSQL's costs over a phase, per message of the phase.
#[derive(Serialize)]
pub struct PostgresReport {
    pub cpu: CpuReport,
    pub wal_bytes: u64,
    pub commits: u64,
    pub wal_bytes_per_message: Option<f64>,
    pub commits_per_message: Option<f64>,
}

#[derive(Serialize)]
pub struct ActionReport {
    pub action: &'static str,
    pub requests: u64,
    pub messages: u64,
    pub errors: u64,
    pub failed_entries: u64,
    pub empty_receives: u64,
    pub requests_per_s: f64,
    pub messages_per_s: f64,
    pub latency_us: Latency,
    pub first_error: Option<String>,
}

/// Latency percentiles in microseconds (of the histogram's 3 significant digits).
#[derive(Serialize)]
pub struct Latency {
    pub samples: u64,
    pub mean: f64,
    pub p50: u64,
    pub p90: u64,
    pub p99: u64,
    pub p999: u64,
    pub max: u64,
}

impl Latency {
    fn of(histogram: &Histogram<u64>) -> Latency {
        Latency {
            samples: histogram.len(),
            mean: histogram.mean(),
            p50: histogram.value_at_quantile(0.50),
            p90: histogram.value_at_quantile(0.90),
            p99: histogram.value_at_quantile(0.99),
            p999: histogram.value_at_quantile(0.999),
            max: histogram.max(),
        }
    }

    /// The percentiles, if anything was recorded.
    fn of_any(histogram: &Histogram<u64>) -> Option<Latency> {
        (!histogram.is_empty()).then(|| Latency::of(histogram))
    }
}

/// CPU time over a phase.
#[derive(Serialize)]
pub struct CpuReport {
    pub cpu_s: f64,
    /// CPU time divided by wall time: how many cores it kept busy on average.
    pub cores: f64,
    pub us_per_message: Option<f64>,
}

impl CpuReport {
    fn new(cpu: Duration, elapsed: Duration, messages: u64) -> CpuReport {
        CpuReport {
            cpu_s: cpu.as_secs_f64(),
            cores: cpu.as_secs_f64() / elapsed.as_secs_f64().max(1e-9),
            us_per_message: (messages > 0).then(|| cpu.as_secs_f64() * 1e6 / messages as f64),
        }
    }
}

impl BenchReport {
    pub fn new(
        plan: &Plan,
        queue_url: String,
        fill: Option<PhaseReport>,
        run: PhaseReport,
    ) -> BenchReport {
        BenchReport {
            workload: plan.workload,
            queue_url,
            plan: plan.clone(),
            fill,
            run,
        }
    }

    pub fn to_text(&self) -> String {
        let mut text = String::new();
        let _ = writeln!(text, "leaseq bench: {}", self.plan.describe());
        let _ = writeln!(text, "{}, queue {}", self.plan.target(), self.queue_url);
        if let Some(fill) = &self.fill {
            fill.write_text(&mut text);
        }
        self.run.write_text(&mut text);
        text
    }
}

impl PhaseReport {
    pub fn new(
        phase: &Phase,
        elapsed: Duration,
        recorder: Recorder,
        counts: ProgressSnapshot,
        cpu_before: CpuSample,
        cpu_after: CpuSample,
        server_pid: Option<u32>,
    ) -> PhaseReport {
        let messages = match (phase.producers, phase.consumers) {
            (_, 0) => counts.sent,
            (0, _) => counts.deleted,
            _ => counts.sent.max(counts.deleted),
        };
        let seconds = elapsed.as_secs_f64().max(1e-9);
        let actions = Action::MEASURED
            .iter()
            .filter_map(|action| Some((action, recorder.actions.get(action)?)))
            .map(|(action, stats)| ActionReport {
                action: action.name(),
                requests: stats.requests,
                messages: stats.messages,
                errors: stats.errors,
                failed_entries: stats.failed_entries,
                empty_receives: stats.empty,
                requests_per_s: stats.requests as f64 / seconds,
                messages_per_s: stats.messages as f64 / seconds,
                latency_us: Latency::of(&stats.latency_us),
                first_error: stats.first_error.clone(),
            })
            .collect();
        let server_cpu = cpu_before
            .server
            .zip(cpu_after.server)
            .map(|(before, after)| CpuReport::new(after.saturating_sub(before), elapsed, messages));
        let rss = server_pid.and_then(process_rss_bytes);
        PhaseReport {
            phase: phase.name,
            elapsed_s: elapsed.as_secs_f64(),
            producers: phase.producers,
            consumers: phase.consumers,
            messages_sent: counts.sent,
            messages_received: counts.received,
            messages_deleted: counts.deleted,
            messages,
            connections_opened: recorder.connections_opened,
            actions,
            end_to_end_latency_us: Latency::of_any(&recorder.end_to_end_us),
            end_to_end_noisy_latency_us: Latency::of_any(&recorder.end_to_end_noisy_us),
            end_to_end_quiet_latency_us: Latency::of_any(&recorder.end_to_end_quiet_us),
            generator_cpu: CpuReport::new(
                cpu_after.generator.saturating_sub(cpu_before.generator),
                elapsed,
                messages,
            ),
            server_cpu,
            server_rss_bytes: rss.map(|(now, _)| now),
            server_rss_peak_bytes: rss.map(|(_, peak)| peak),
            postgres: None,
        }
    }

    /// Adds PostgreSQL's costs between two samples.
    pub fn add_postgres(&mut self, before: PgSample, after: PgSample, elapsed: Duration) {
        let messages = self.messages;
        let per_message = |total: u64| (messages > 0).then(|| total as f64 / messages as f64);
        let wal_bytes = after.wal_bytes.saturating_sub(before.wal_bytes);
        let commits = after.commits.saturating_sub(before.commits);
        self.postgres = Some(PostgresReport {
            cpu: CpuReport::new(after.cpu.saturating_sub(before.cpu), elapsed, messages),
            wal_bytes,
            commits,
            wal_bytes_per_message: per_message(wal_bytes),
            commits_per_message: per_message(commits),
        });
    }

    fn write_text(&self, text: &mut String) {
        let seconds = self.elapsed_s.max(1e-9);
        let _ = writeln!(
            text,
            "\n{}: {:.2} s, {} producers, {} consumers; sent {} ({:.0} msg/s), received {}, deleted {} ({:.0} msg/s)",
            self.phase,
            self.elapsed_s,
            self.producers,
            self.consumers,
            self.messages_sent,
            self.messages_sent as f64 / seconds,
            self.messages_received,
            self.messages_deleted,
            self.messages_deleted as f64 / seconds,
        );
        let _ = writeln!(
            text,
            "  {:<20} {:>9} {:>9} {:>7} {:>10} {:>9} {:>9} {:>9} {:>9}",
            "action", "requests", "messages", "errors", "msg/s", "p50", "p99", "p99.9", "max"
        );
        for action in &self.actions {
            let latency = &action.latency_us;
            let _ = writeln!(
                text,
                "  {:<20} {:>9} {:>9} {:>7} {:>10.0} {:>9} {:>9} {:>9} {:>9}",
                action.action,
                action.requests,
                action.messages,
                action.errors + action.failed_entries,
                action.messages_per_s,
                micros(latency.p50),
                micros(latency.p99),
                micros(latency.p999),
                micros(latency.max),
            );
        }
        for (name, latency) in [
            ("end-to-end", &self.end_to_end_latency_us),
            ("  t0 (noisy)", &self.end_to_end_noisy_latency_us),
            ("  other tenants", &self.end_to_end_quiet_latency_us),
        ] {
            let Some(latency) = latency else { continue };
            let _ = writeln!(
                text,
                "  {:<20} {:>9} {:>9} {:>7} {:>10} {:>9} {:>9} {:>9} {:>9}",
                name,
                "",
                latency.samples,
                "",
                "",
                micros(latency.p50),
                micros(latency.p99),
                micros(latency.p999),
                micros(latency.max),
            );
        }
        for action in &self.actions {
            if action.empty_receives > 0 {
                let _ = writeln!(
                    text,
                    "  {} answered empty: {}",
                    action.action, action.empty_receives
                );
            }
            if let Some(error) = &action.first_error {
                let _ = writeln!(text, "  first error of {}: {error}", action.action);
            }
        }
        let _ = writeln!(text, "  connections opened: {}", self.connections_opened);
        let _ = writeln!(text, "  generator CPU: {}", self.generator_cpu.to_text());
        if let Some(postgres) = &self.postgres {
            let per = |value: Option<f64>| value.map_or("-".to_string(), |v| format!("{v:.2}"));
            let _ = writeln!(
                text,
                "  PostgreSQL: CPU {}; WAL {} B ({} B/msg); {} commits ({} per msg)",
                postgres.cpu.to_text(),
                postgres.wal_bytes,
                per(postgres.wal_bytes_per_message),
                postgres.commits,
                per(postgres.commits_per_message),
            );
        }
        if let Some(server) = &self.server_cpu {
            let _ = write!(text, "  server CPU: {}", server.to_text());
            if let (Some(now), Some(peak)) = (self.server_rss_bytes, self.server_rss_peak_bytes) {
                let mib = |bytes: u64| bytes as f64 / (1024.0 * 1024.0);
                let _ = write!(
                    text,
                    "; RSS {:.1} MiB (peak {:.1} MiB)",
                    mib(now),
                    mib(peak)
                );
            }
            let _ = writeln!(text);
        }
    }
}

impl CpuReport {
    fn to_text(&self) -> String {
        let per_message = self
            .us_per_message
            .map_or(String::new(), |us| format!(", {us:.1} µs/msg"));
        format!("{:.2} s ({:.2} cores){per_message}", self.cpu_s, self.cores)
    }
}

/// A latency in the unit that keeps it readable.
fn micros(us: u64) -> String {
    match us {
        0..=9_999 => format!("{us}µs"),
        10_000..=9_999_999 => format!("{:.1}ms", us as f64 / 1e3),
        _ => format!("{:.2}s", us as f64 / 1e6),
    }
}

/// The line printed every second while a phase runs.
pub fn progress_line(
    phase: &str,
    elapsed: Duration,
    interval: Duration,
    last: &ProgressSnapshot,
    now: &ProgressSnapshot,
) -> String {
    let per_second = |now: u64, last: u64| (now - last) as f64 / interval.as_secs_f64().max(1e-9);
    format!(
        "{phase} {:>6.1}s  sent {:>8.0} msg/s ({} total)  received {:>8.0} msg/s ({} total)  errors {}",
        elapsed.as_secs_f64(),
        per_second(now.sent, last.sent),
        now.sent,
        per_second(now.received, last.received),
        now.received,
        now.errors,
    )
}
