//! Metrics: what the server observes about requests and leases, and the Prometheus text
//! exposition of it together with the engine's own counts (`GET /metrics`).
//!
//! Two kinds of numbers end up on the page:
//!
//! - Counts the engine keeps anyway (ready, in flight, delayed, oldest ready message, the
//!   [`QueueCounters`](leaseq_core::QueueCounters)) are read at scrape time from
//!   [`QueueInfo`]: collecting them costs nothing per request.
//! - What only the server sees is observed as it happens, with relaxed atomic adds and no
//!   allocation: per action, request counts and latency; per queue, empty receives, deletes with
//!   an invalid receipt, and at each delete the processing time (receive to delete), the lease
//!   time left and the attempt number. The log's fsync latency and batch size come from
//!   [`leaseq_wal::WalStats`].
//!
//! The text format is written here rather than through a client library: every value is either
//! computed at scrape time from the engine or read from a lock-free [`Histogram`] shared with the
//! log, so a library would only be a writer of `name{labels} value` lines (the format is
//! Prometheus' text exposition format 0.0.4; `tests` check its rules).

use std::fmt::{Display, Write as _};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use leaseq_core::{LeaseView, Queue, QueueInfo};

use leaseq_core::histogram::{Histogram, HistogramSnapshot};
use parking_lot::RwLock;
use rustc_hash::FxHashMap;

mod connections;
mod operations;

pub use connections::{ConnectionCounts, ConnectionStats, OpenConnection};
pub use operations::{BucketStats, ProcessStats, StorageStats};

/// Bucket bounds of processing time and lease time left, in milliseconds (5 ms to 12 h, the
/// longest lease).
pub const LEASE_MS_BOUNDS: &[u64] = &[
    5, 10, 25, 50, 100, 250, 500, 1_000, 2_000, 3_000, 5_000, 7_500, 10_000, 15_000, 20_000,
    30_000, 45_000, 60_000, 90_000, 120_000, 180_000, 300_000, 600_000, 900_000, 1_800_000,
    3_600_000, 7_200_000, 14_400_000, 43_200_000,
];

/// Bucket bounds of the attempt number at delete.
pub const RECEIVE_COUNT_BOUNDS: &[u64] = &[1, 2, 3, 4, 5, 10, 20, 50, 100];

/// Bucket bounds of request latency, in microseconds (50 µs to 30 s; long polls wait up to 20 s).
pub const REQUEST_MICROS_BOUNDS: &[u64] = &[
    50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000, 20_000_000, 30_000_000,
];

/// What the server observed about one queue.
#[derive(Debug)]
pub struct QueueStats {
    /// Receives that returned no message.
    pub empty_receives: AtomicU64,
    /// Deletes and visibility changes whose receipt was not valid for the queue at all.
    pub invalid_receipts: AtomicU64,
    /// Receive to delete, in milliseconds, of each delete of a current attempt.
    pub processing_ms: Histogram,
    /// Lease time left at each delete, in milliseconds (0 for a late delete).
    pub lease_remaining_ms: Histogram,
    /// The attempt number of each deleted message.
    pub receive_count: Histogram,
    /// Fair queues: send to first receive, in milliseconds, of messages of quiet tenants
    /// (messages without a group id included).
    pub dwell_quiet_ms: Histogram,
    /// Fair queues: the same for messages of noisy tenants.
    pub dwell_noisy_ms: Histogram,
}

impl Default for QueueStats {
    fn default() -> Self {
        QueueStats {
            empty_receives: AtomicU64::new(0),
            invalid_receipts: AtomicU64::new(0),
            processing_ms: Histogram::new(LEASE_MS_BOUNDS),
            lease_remaining_ms: Histogram::new(LEASE_MS_BOUNDS),
            receive_count: Histogram::new(RECEIVE_COUNT_BOUNDS),
            dwell_quiet_ms: Histogram::new(LEASE_MS_BOUNDS),
            dwell_noisy_ms: Histogram::new(LEASE_MS_BOUNDS),
        }
    }
}

impl QueueStats {
    /// Records a delete at `now_ms` that ended `lease`.
    pub fn observe_delete(&self, lease: &LeaseView, now_ms: u64) {
        self.processing_ms
            .observe(now_ms.saturating_sub(lease.leased_at_ms));
        self.lease_remaining_ms
            .observe(lease.visible_at_ms.saturating_sub(now_ms));
        self.receive_count.observe(u64::from(lease.receive_count));
    }

    /// Records the first receive, at `now_ms`, of a fair queue's message sent at `sent_at_ms`.
    pub fn observe_dwell(&self, sent_at_ms: u64, now_ms: u64, tenant_noisy: bool) {
        let dwell_ms = now_ms.saturating_sub(sent_at_ms);
        if tenant_noisy {
            self.dwell_noisy_ms.observe(dwell_ms);
        } else {
            self.dwell_quiet_ms.observe(dwell_ms);
        }
    }
}

/// Requests of one action.
#[derive(Debug)]
struct ActionStats {
    name: &'static str,
    /// By outcome: success, the client's fault, the server's fault.
    outcomes: [AtomicU64; 3],
    duration_micros: Histogram,
}

/// How a request ended, for `leaseq_requests_total{outcome}`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestOutcome {
    /// Answered with a result.
    Success,
    /// Answered with an error that is the client's fault (`Sender`).
    ClientError,
    /// Answered with an error on the server's side (`Receiver`).
    ServerError,
}

const OUTCOME_LABELS: [&str; 3] = ["success", "client_error", "server_error"];

/// Everything the server observes. Shared by the HTTP layer (requests) and the backend
/// (queues); rendered by [`render`].
#[derive(Debug, Default)]
pub struct Metrics {
    actions: RwLock<Vec<Arc<ActionStats>>>,
    queues: RwLock<FxHashMap<u64, Arc<QueueStats>>>,
}

impl Metrics {
    /// Counts one request of `action` (a name from the `sqs` crate) and its latency.
    pub fn observe_request(&self, action: &'static str, outcome: RequestOutcome, took: Duration) {
        let stats = self.action(action);
        stats.outcomes[outcome as usize].fetch_add(1, Ordering::Relaxed);
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        stats.duration_micros.observe(micros);
    }

    fn action(&self, name: &'static str) -> Arc<ActionStats> {
        // About twenty actions: a scan of a short vector under a read lock beats hashing.
        let find = |actions: &[Arc<ActionStats>]| {
            actions
                .iter()
                .find(|stats| std::ptr::eq(stats.name, name) || stats.name == name)
                .cloned()
        };
        if let Some(stats) = find(&self.actions.read()) {
            return stats;
        }
        let mut actions = self.actions.write();
        if let Some(stats) = find(&actions) {
            return stats;
        }
        let stats = Arc::new(ActionStats {
            name,
            outcomes: Default::default(),
            duration_micros: Histogram::new(REQUEST_MICROS_BOUNDS),
        });
        actions.push(stats.clone());
        actions.sort_by_key(|stats| stats.name);
        stats
    }

    /// The observations of the queue with id `queue_id` (created on first use).
    pub fn queue(&self, queue_id: u64) -> Arc<QueueStats> {
        if let Some(stats) = self.queues.read().get(&queue_id) {
            return stats.clone();
        }
        self.queues.write().entry(queue_id).or_default().clone()
    }

    /// The observations of a queue, if any were made.
    pub fn queue_if_seen(&self, queue_id: u64) -> Option<Arc<QueueStats>> {
        self.queues.read().get(&queue_id).cloned()
    }

    /// Forgets queues that no longer exist (called at scrape time with the live ids).
    pub fn retain_queues(&self, live: &[u64]) {
        let mut queues = self.queues.write();
        if queues.len() > live.len() {
            queues.retain(|id, _| live.contains(id));
        }
    }
}

/// The log's measurements as the page shows them.
#[derive(Clone, Debug)]
pub struct LogStats {
    /// fdatasync latency, in microseconds.
    pub fsync_micros: HistogramSnapshot,
    /// Records per batch of the log's group commit.
    pub batch_records: HistogramSnapshot,
    /// Message body reads that found the record only on the disk.
    pub uncached_reads: u64,
    /// What the engines' payload caches count against their budget (bytes), and how many
    /// payloads they count (see `leaseq_core`'s `engine/payload_cache.rs`).
    pub payload_cache: (u64, u64),
}

impl LogStats {
    /// Adds another log's measurements (another bucket's) to these.
    pub fn merge(&mut self, other: &LogStats) {
        self.fsync_micros.merge(&other.fsync_micros);
        self.batch_records.merge(&other.batch_records);
        self.uncached_reads += other.uncached_reads;
        self.payload_cache.0 += other.payload_cache.0;
        self.payload_cache.1 += other.payload_cache.1;
    }
}

/// A queue's state and what the server observed of it (`None`: nothing yet, or metrics off).
pub type ObservedQueue = (QueueInfo, Option<Arc<QueueStats>>);

/// Everything a scrape shows, taken at one moment.
#[derive(Debug)]
pub struct Scrape<'a> {
    /// Time of the scrape.
    pub now_ms: u64,
    /// Every queue, with what the server observed of it.
    pub queues: &'a [ObservedQueue],
    /// The server's request observations.
    pub metrics: &'a Metrics,
    /// The log's measurements (`None` in memory).
    pub log: Option<LogStats>,
    /// FIFO queues' groups under lease, by queue id.
    pub fifo_groups: &'a FxHashMap<u64, GroupPressure>,
    /// The process's resources (`None` where `/proc/self` cannot tell them).
    pub process: Option<ProcessStats>,
    /// The log's storage and checkpoints (`None` for a store that keeps nothing).
    pub storage: Option<StorageStats>,
    /// The SQS listener's connections (`None`: no accept loop counts them).
    pub connections: Option<ConnectionCounts>,
    /// The buckets and the transfers between them (`None`: a node of one bucket).
    pub buckets: Option<BucketStats>,
}

/// The Prometheus text exposition (format 0.0.4) of a scrape.
pub fn render(scrape: &Scrape) -> String {
    let mut page = Page::default();
    // The Prometheus convention for what is running: a constant 1 labelled with the version.
    page.family(
        "leaseq_build_info",
        "gauge",
        "The leaseq build serving these metrics (always 1).",
    );
    page.sample(
        "leaseq_build_info",
        &[("version", env!("CARGO_PKG_VERSION"))],
        1,
    );
    if let Some(process) = &scrape.process {
        operations::render_process(&mut page, process);
    }
    if let Some(storage) = &scrape.storage {
        operations::render_storage(&mut page, storage, scrape.now_ms);
    }
    if let Some(connections) = &scrape.connections {
        connections::render_connections(&mut page, connections);
    }
    if let Some(buckets) = &scrape.buckets {
        operations::render_buckets(&mut page, buckets);
    }
    render_queue_gauges(&mut page, scrape);
    render_fifo_groups(&mut page, scrape);
    render_queue_counters(&mut page, scrape);
    render_queue_histograms(&mut page, scrape);
    render_requests(&mut page, scrape.metrics);
    if let Some(log) = &scrape.log {
        page.family(
            "leaseq_log_fsync_duration_seconds",
            "histogram",
            "Duration of each fdatasync of the write-ahead log.",
        );
        page.histogram(
            "leaseq_log_fsync_duration_seconds",
            &[],
            &log.fsync_micros,
            1e6,
        );
        page.family(
            "leaseq_log_fsync_batch_records",
            "histogram",
            "Records written by each batch of the log's group commit.",
        );
        page.histogram(
            "leaseq_log_fsync_batch_records",
            &[],
            &log.batch_records,
            1.0,
        );
        page.family(
            "leaseq_log_uncached_reads_total",
            "counter",
            "Message body reads that found the record neither in the log's buffer nor in the \
             page cache, and waited for the disk off the request threads.",
        );
        page.sample("leaseq_log_uncached_reads_total", &[], log.uncached_reads);
        page.family(
            "leaseq_payload_cache_bytes",
            "gauge",
            "Memory counted for the message bodies kept after they were logged, so that \
             receives need not read them back (an upper bound; see --payload-cache-bytes).",
        );
        page.sample("leaseq_payload_cache_bytes", &[], log.payload_cache.0);
        page.family(
            "leaseq_payload_cache_payloads",
            "gauge",
            "Message bodies counted in leaseq_payload_cache_bytes.",
        );
        page.sample("leaseq_payload_cache_payloads", &[], log.payload_cache.1);
    }
    page.out
}

fn render_queue_gauges(page: &mut Page, scrape: &Scrape) {
    page.family(
        "leaseq_queue_messages",
        "gauge",
        "Messages in the queue by state: visible (ready), in_flight (leased), delayed.",
    );
    for (info, _) in scrape.queues {
        let name = &*info.name;
        for (state, count) in [
            ("visible", info.ready),
            ("in_flight", info.in_flight),
            ("delayed", info.delayed),
        ] {
            page.sample(
                "leaseq_queue_messages",
                &[("queue", name), ("state", state)],
                count,
            );
        }
    }
    page.family(
        "leaseq_queue_oldest_message_age_seconds",
        "gauge",
        "Age of the oldest visible (ready) message; 0 when none is ready.",
    );
    for (info, _) in scrape.queues {
        let age_ms = info
            .oldest_ready_sent_at_ms
            .map_or(0, |sent| scrape.now_ms.saturating_sub(sent));
        page.sample(
            "leaseq_queue_oldest_message_age_seconds",
            &[("queue", &info.name)],
            Seconds(age_ms as f64 / 1000.0),
        );
    }
    page.family(
        "leaseq_queue_visibility_recommended_seconds",
        "gauge",
        "The visibility advisor's recommended timeout (equal to the current one when it fits or evidence is short).",
    );
    for (info, stats) in scrape.queues {
        let advice = crate::advisor::advice_for(info, stats.as_deref());
        page.sample(
            "leaseq_queue_visibility_recommended_seconds",
            &[("queue", &info.name)],
            advice.recommended_visibility_timeout_seconds,
        );
    }
    page.family(
        "leaseq_queue_noisy_groups",
        "gauge",
        "Fair queues (standard queues with group ids): tenants (message groups) now noisy, served after the quiet ones.",
    );
    for (info, _) in scrape.queues {
        if let Some(noisy) = &info.noisy_groups {
            page.sample(
                "leaseq_queue_noisy_groups",
                &[("queue", &info.name)],
                noisy.len(),
            );
        }
    }
    page.family(
        "leaseq_queue_visibility_timeout_seconds",
        "gauge",
        "The queue's visibility timeout (lease length by default).",
    );
    for (info, _) in scrape.queues {
        page.sample(
            "leaseq_queue_visibility_timeout_seconds",
            &[("queue", &info.name)],
            info.config.visibility_timeout_seconds,
        );
    }
}

fn render_fifo_groups(page: &mut Page, scrape: &Scrape) {
    let fifo: Vec<(&QueueInfo, &GroupPressure)> = scrape
        .queues
        .iter()
        .filter_map(|(info, _)| Some((info, scrape.fifo_groups.get(&info.queue_id)?)))
        .collect();
    page.family(
        "leaseq_fifo_groups_in_flight",
        "gauge",
        "FIFO message groups with a message in flight (blocked for other consumers).",
    );
    for (info, groups) in &fifo {
        page.sample(
            "leaseq_fifo_groups_in_flight",
            &[("queue", &info.name)],
            groups.in_flight,
        );
    }
    page.family(
        "leaseq_fifo_groups_blocked",
        "gauge",
        "FIFO message groups blocked by a lease that began more than over_seconds ago.",
    );
    let over = (FIFO_GROUP_BLOCKED_MS / 1000).to_string();
    for (info, groups) in &fifo {
        page.sample(
            "leaseq_fifo_groups_blocked",
            &[("queue", &info.name), ("over_seconds", &over)],
            groups.blocked_long,
        );
    }
}

/// Counter families read from each queue: name, help, value.
type CounterOf = fn(&QueueInfo, Option<&QueueStats>) -> u64;

const QUEUE_COUNTERS: &[(&str, &str, CounterOf)] = &[
    (
        "leaseq_messages_sent_total",
        "Messages enqueued by sends.",
        |i, _| i.counters.sent,
    ),
    (
        "leaseq_messages_received_total",
        "Deliveries: leases granted by receives.",
        |i, _| i.counters.received,
    ),
    (
        "leaseq_messages_deleted_total",
        "Messages deleted with the receipt of their current attempt.",
        |i, _| i.counters.deleted,
    ),
    (
        "leaseq_messages_deleted_late_total",
        "Late acks: deletes that came after the lease had run out.",
        |i, _| i.counters.deleted_late,
    ),
    (
        "leaseq_receives_empty_total",
        "Receives that returned no message.",
        |_, s| s.map_or(0, |s| s.empty_receives.load(Ordering::Relaxed)),
    ),
    (
        "leaseq_leases_expired_total",
        "Leases that ran out without a delete (each is a redelivery or a dead-letter move).",
        |i, _| i.counters.leases_expired,
    ),
    (
        "leaseq_leases_extended_total",
        "Leases changed to a later deadline (ChangeMessageVisibility > 0).",
        |i, _| i.counters.leases_changed,
    ),
    (
        "leaseq_leases_released_total",
        "Leases released early (ChangeMessageVisibility 0).",
        |i, _| i.counters.leases_released,
    ),
    (
        "leaseq_messages_dead_lettered_total",
        "Messages moved from this queue to its dead-letter queue.",
        |i, _| i.counters.dead_lettered,
    ),
    (
        "leaseq_messages_retention_expired_total",
        "Messages removed because their retention period ended.",
        |i, _| i.counters.retention_expired,
    ),
    (
        "leaseq_messages_purged_total",
        "Messages removed by purges.",
        |i, _| i.counters.purged,
    ),
];

fn render_queue_counters(page: &mut Page, scrape: &Scrape) {
    for (name, help, value) in QUEUE_COUNTERS {
        page.family(name, "counter", help);
        for (info, stats) in scrape.queues {
            page.sample(
                name,
                &[("queue", &info.name)],
                value(info, stats.as_deref()),
            );
        }
    }
    page.family(
        "leaseq_ack_failures_total",
        "counter",
        "Deletes and visibility changes refused or ignored for their receipt: stale (a superseded attempt's; counted since this process started) or invalid.",
    );
    for (info, stats) in scrape.queues {
        let invalid = stats
            .as_ref()
            .map_or(0, |s| s.invalid_receipts.load(Ordering::Relaxed));
        for (reason, count) in [("stale", info.stale_receipts_seen), ("invalid", invalid)] {
            page.sample(
                "leaseq_ack_failures_total",
                &[("queue", &info.name), ("reason", reason)],
                count,
            );
        }
    }
}

fn render_queue_histograms(page: &mut Page, scrape: &Scrape) {
    type Pick = fn(&QueueStats) -> &Histogram;
    let families: [(&str, &str, Pick, f64); 3] = [
        (
            "leaseq_processing_time_seconds",
            "Processing time: from the receive that began an attempt to its delete.",
            |s| &s.processing_ms,
            1e3,
        ),
        (
            "leaseq_lease_remaining_at_delete_seconds",
            "Lease time left at each delete (0 for a late delete).",
            |s| &s.lease_remaining_ms,
            1e3,
        ),
        (
            "leaseq_receive_count_at_delete",
            "The attempt number (ApproximateReceiveCount) of each deleted message.",
            |s| &s.receive_count,
            1.0,
        ),
    ];
    for (name, help, pick, scale) in families {
        page.family(name, "histogram", help);
        for (info, stats) in scrape.queues {
            if let Some(stats) = stats {
                page.histogram(
                    name,
                    &[("queue", &info.name)],
                    &pick(stats).snapshot(),
                    scale,
                );
            }
        }
    }
    // Fair queues only: dwell time (send to first receive) of quiet and noisy tenants.
    let name = "leaseq_dwell_time_seconds";
    page.family(
        name,
        "histogram",
        "Fair queues: from send to first receive, by whether the message's tenant was quiet or noisy then.",
    );
    for (info, stats) in scrape.queues {
        let (Some(stats), Some(_)) = (stats, &info.noisy_groups) else {
            continue;
        };
        for (tenant, histogram) in [
            ("quiet", &stats.dwell_quiet_ms),
            ("noisy", &stats.dwell_noisy_ms),
        ] {
            page.histogram(
                name,
                &[("queue", &info.name), ("tenant", tenant)],
                &histogram.snapshot(),
                1e3,
            );
        }
    }
}

fn render_requests(page: &mut Page, metrics: &Metrics) {
    let actions = metrics.actions.read().clone();
    page.family(
        "leaseq_requests_total",
        "counter",
        "Requests by action and outcome (success, client_error, server_error).",
    );
    for stats in &actions {
        for (outcome, count) in OUTCOME_LABELS.iter().zip(&stats.outcomes) {
            page.sample(
                "leaseq_requests_total",
                &[("action", stats.name), ("outcome", outcome)],
                count.load(Ordering::Relaxed),
            );
        }
    }
    page.family(
        "leaseq_request_duration_seconds",
        "histogram",
        "Time the backend took to execute each decoded request (a long poll includes its wait).",
    );
    for stats in &actions {
        page.histogram(
            "leaseq_request_duration_seconds",
            &[("action", stats.name)],
            &stats.duration_micros.snapshot(),
            1e6,
        );
    }
}

/// A float printed the way Prometheus reads it back exactly enough.
struct Seconds(f64);

impl Display for Seconds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[derive(Default)]
struct Page {
    out: String,
}

impl Page {
    fn family(&mut self, name: &str, kind: &str, help: &str) {
        let _ = writeln!(self.out, "# HELP {name} {}", escape_help(help));
        let _ = writeln!(self.out, "# TYPE {name} {kind}");
    }

    fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: impl Display) {
        self.out.push_str(name);
        self.labels(labels, None);
        let _ = writeln!(self.out, " {value}");
    }

    fn labels(&mut self, labels: &[(&str, &str)], le: Option<&str>) {
        if labels.is_empty() && le.is_none() {
            return;
        }
        self.out.push('{');
        let extra = le.map(|le| ("le", le));
        for (i, (key, value)) in labels.iter().copied().chain(extra).enumerate() {
            if i > 0 {
                self.out.push(',');
            }
            let _ = write!(self.out, "{key}=\"{}\"", escape_label(value));
        }
        self.out.push('}');
    }

    /// A histogram's `_bucket` lines (cumulative, then `+Inf`), `_sum` and `_count`; values are
    /// divided by `per_unit` (microseconds to seconds: 1e6). Division, not multiplication by
    /// 1e-6, so a bound of 50 µs prints as `5e-5`'s exact decimal `0.00005`.
    fn histogram(
        &mut self,
        name: &str,
        labels: &[(&str, &str)],
        snapshot: &HistogramSnapshot,
        per_unit: f64,
    ) {
        let bucket = format!("{name}_bucket");
        for (bound, count) in snapshot.bounds.iter().zip(&snapshot.cumulative) {
            let le = (*bound as f64 / per_unit).to_string();
            self.out.push_str(&bucket);
            self.labels(labels, Some(&le));
            let _ = writeln!(self.out, " {count}");
        }
        self.out.push_str(&bucket);
        self.labels(labels, Some("+Inf"));
        let _ = writeln!(self.out, " {}", snapshot.count);
        self.sample(
            &format!("{name}_sum"),
            labels,
            Seconds(snapshot.sum as f64 / per_unit),
        );
        self.sample(&format!("{name}_count"), labels, snapshot.count);
    }
}

fn escape_label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn escape_help(value: &str) -> String {
    value.replace('\\', "\\\\").replace('\n', "\\n")
}

// What the dashboard and the metrics page show of a queue's leases and FIFO groups.

/// How long a FIFO group may stay blocked (a message of it in flight) before it counts in
/// `leaseq_fifo_groups_blocked`.
pub const FIFO_GROUP_BLOCKED_MS: u64 = 60_000;

/// Timer entries an observer's look at a FIFO queue's groups walks at most (the in-flight limit
/// is 120 000, delayed messages share the index).
const FIFO_SCAN_MAX: usize = 250_000;

/// A FIFO queue's groups under lease.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GroupPressure {
    /// Groups with a message in flight: blocked for every other consumer.
    pub in_flight: usize,
    /// Of those, groups whose oldest lease began more than [`FIFO_GROUP_BLOCKED_MS`] ago.
    pub blocked_long: usize,
}

/// The groups of a FIFO queue that are blocked by leases, as of the queue's last advance;
/// `None` for a standard queue.
pub fn group_pressure(queue: &Queue, now_ms: u64) -> Option<GroupPressure> {
    queue.fifo()?;
    let mut oldest_lease: FxHashMap<&str, u64> = FxHashMap::default();
    for message in queue.leases_ending_first(usize::MAX, FIFO_SCAN_MAX) {
        if let Some(fifo) = &message.fifo {
            let at = oldest_lease
                .entry(&fifo.group_id)
                .or_insert(message.leased_at_ms);
            *at = (*at).min(message.leased_at_ms);
        }
    }
    let blocked_long = oldest_lease
        .values()
        .filter(|&&at| now_ms.saturating_sub(at) > FIFO_GROUP_BLOCKED_MS)
        .count();
    Some(GroupPressure {
        in_flight: oldest_lease.len(),
        blocked_long,
    })
}

/// One in-flight lease, for the dashboard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaseRow {
    /// The message.
    pub message_id: leaseq_core::MessageId,
    /// The attempt holding the lease.
    pub attempt: u32,
    /// When the attempt began.
    pub leased_at_ms: u64,
    /// When the lease ends unless extended.
    pub lease_expires_at_ms: u64,
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet};

    use leaseq_core::{QueueConfig, QueueCounters};

    use super::*;

    fn info(name: &str) -> QueueInfo {
        QueueInfo {
            queue_id: 1,
            name: Arc::from(name),
            config: QueueConfig::default(),
            tags: BTreeMap::new(),
            created_at_ms: 0,
            last_modified_at_ms: 0,
            ready: 3,
            in_flight: 2,
            delayed: 1,
            oldest_ready_sent_at_ms: Some(1_000),
            counters: QueueCounters {
                sent: 6,
                received: 4,
                leases_expired: 1,
                ..QueueCounters::default()
            },
            stale_receipts_seen: 2,
            noisy_groups: Some(vec![leaseq_core::NoisyGroup {
                group_id: Arc::from("tenant-a"),
                in_flight: 40,
                ready: 900,
                delayed: 0,
            }]),
        }
    }

    /// The rules of the text format that a scraper relies on: every sample belongs to the
    /// family declared last (name, or name + `_bucket`/`_sum`/`_count` for histograms), each
    /// family is declared once, label values are quoted, buckets are cumulative and `+Inf`
    /// equals `_count`.
    fn check_format(page: &str) {
        let mut declared = BTreeSet::new();
        let mut current: Option<(String, String)> = None;
        let mut last_bucket: Option<(String, f64)> = None;
        for line in page.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').unwrap();
                assert!(declared.insert(name.to_string()), "{name} declared twice");
                current = Some((name.to_string(), kind.to_string()));
                continue;
            }
            if line.starts_with("# HELP ") {
                continue;
            }
            let (series, value) = line.rsplit_once(' ').unwrap();
            let value: f64 = value.parse().unwrap_or_else(|_| panic!("value of {line}"));
            let name = series.split('{').next().unwrap();
            let (family, kind) = current.as_ref().expect("sample before TYPE");
            let allowed = match kind.as_str() {
                "histogram" => [
                    format!("{family}_bucket"),
                    format!("{family}_sum"),
                    format!("{family}_count"),
                ]
                .contains(&name.to_string()),
                _ => name == family,
            };
            assert!(allowed, "{name} is not in family {family}");
            if let Some(labels) = series.strip_prefix(name) {
                if !labels.is_empty() {
                    assert!(labels.starts_with('{') && labels.ends_with('}'), "{line}");
                }
            }
            if name.ends_with("_bucket") {
                // The series without its `le` label: buckets of one series must not decrease.
                let key = series
                    .split(",le=")
                    .next()
                    .unwrap()
                    .split("{le=")
                    .next()
                    .unwrap();
                if let Some((previous_key, previous)) = &last_bucket {
                    if previous_key == key {
                        assert!(value >= *previous, "buckets not cumulative at {line}");
                    }
                }
                last_bucket = Some((key.to_string(), value));
            } else if name.ends_with("_count") {
                let (_, inf) = last_bucket.take().expect("_count after buckets");
                assert_eq!(inf, value, "+Inf differs from _count: {line}");
            }
        }
    }

    #[test]
    fn page_follows_the_text_format_and_shows_the_engine_counts() {
        let metrics = Metrics::default();
        metrics.observe_request(
            "SendMessage",
            RequestOutcome::Success,
            Duration::from_micros(300),
        );
        metrics.observe_request(
            "SendMessage",
            RequestOutcome::ClientError,
            Duration::from_millis(2),
        );
        let stats = metrics.queue(1);
        stats.empty_receives.fetch_add(5, Ordering::Relaxed);
        let lease = LeaseView {
            queue_id: 1,
            message_id: leaseq_core::MessageId::from_random([1; 16]),
            leased_at_ms: 10_000,
            visible_at_ms: 40_000,
            receive_count: 2,
        };
        stats.observe_delete(&lease, 22_000);
        stats.observe_dwell(1_000, 1_300, false);
        stats.observe_dwell(1_000, 61_000, true);
        let queues = vec![(info("jobs"), Some(stats))];
        let page = render(&Scrape {
            now_ms: 4_000,
            queues: &queues,
            metrics: &metrics,
            log: None,
            fifo_groups: &[(
                1,
                GroupPressure {
                    in_flight: 2,
                    blocked_long: 1,
                },
            )]
            .into_iter()
            .collect(),
            process: None,
            storage: None,
            connections: None,
            buckets: None,
        });
        check_format(&page);
        for expected in [
            "leaseq_queue_messages{queue=\"jobs\",state=\"visible\"} 3",
            "leaseq_queue_messages{queue=\"jobs\",state=\"in_flight\"} 2",
            "leaseq_queue_messages{queue=\"jobs\",state=\"delayed\"} 1",
            "leaseq_queue_oldest_message_age_seconds{queue=\"jobs\"} 3",
            "leaseq_queue_visibility_recommended_seconds{queue=\"jobs\"} 30",
            "leaseq_queue_noisy_groups{queue=\"jobs\"} 1",
            "leaseq_fifo_groups_in_flight{queue=\"jobs\"} 2",
            "leaseq_fifo_groups_blocked{queue=\"jobs\",over_seconds=\"60\"} 1",
            "leaseq_messages_sent_total{queue=\"jobs\"} 6",
            "leaseq_leases_expired_total{queue=\"jobs\"} 1",
            "leaseq_receives_empty_total{queue=\"jobs\"} 5",
            "leaseq_ack_failures_total{queue=\"jobs\",reason=\"stale\"} 2",
            "leaseq_processing_time_seconds_bucket{queue=\"jobs\",le=\"10\"} 0",
            "leaseq_processing_time_seconds_bucket{queue=\"jobs\",le=\"15\"} 1",
            "leaseq_processing_time_seconds_sum{queue=\"jobs\"} 12",
            "leaseq_lease_remaining_at_delete_seconds_bucket{queue=\"jobs\",le=\"20\"} 1",
            "leaseq_receive_count_at_delete_bucket{queue=\"jobs\",le=\"2\"} 1",
            "leaseq_dwell_time_seconds_bucket{queue=\"jobs\",tenant=\"quiet\",le=\"0.5\"} 1",
            "leaseq_dwell_time_seconds_bucket{queue=\"jobs\",tenant=\"noisy\",le=\"45\"} 0",
            "leaseq_dwell_time_seconds_bucket{queue=\"jobs\",tenant=\"noisy\",le=\"60\"} 1",
            "leaseq_requests_total{action=\"SendMessage\",outcome=\"success\"} 1",
            "leaseq_requests_total{action=\"SendMessage\",outcome=\"client_error\"} 1",
            "leaseq_request_duration_seconds_count{action=\"SendMessage\"} 2",
        ] {
            assert!(
                page.lines().any(|line| line == expected),
                "missing {expected} in\n{page}"
            );
        }
    }

    #[test]
    fn log_histograms_and_escaped_labels() {
        let fsync = Histogram::new(leaseq_wal::stats::FSYNC_MICROS_BOUNDS);
        fsync.observe(700);
        let batch = Histogram::new(leaseq_wal::stats::BATCH_RECORDS_BOUNDS);
        batch.observe(3);
        let metrics = Metrics::default();
        let page = render(&Scrape {
            now_ms: 10_000,
            queues: &[(info("a\"b\\c"), None)],
            metrics: &metrics,
            log: Some(LogStats {
                fsync_micros: fsync.snapshot(),
                batch_records: batch.snapshot(),
                uncached_reads: 5,
                payload_cache: (4224, 33),
            }),
            fifo_groups: &FxHashMap::default(),
            process: Some(ProcessStats {
                cpu_seconds: 1.25,
                resident_memory_bytes: 1 << 20,
                open_fds: 12,
                max_fds: Some(1024),
                start_time_seconds: 1_700_000_000.5,
            }),
            storage: Some(StorageStats {
                log_bytes: 4096,
                log_segments: 2,
                checkpoints: crate::checkpoint::CheckpointStats {
                    completed: 3,
                    started_at_ms: 1_000,
                    log_bytes_since: 100,
                    snapshot_bytes: 512,
                    snapshot_written_at_ms: Some(7_500),
                    last_duration_micros: Some(1_500),
                    last_paused_micros: Some(20),
                },
            }),
            connections: Some(ConnectionCounts {
                open: 7,
                accepted: 40,
                limit_reached: 2,
                max: 10,
            }),
            buckets: Some(BucketStats {
                buckets: 16,
                transfers_waiting: 3,
            }),
        });
        check_format(&page);
        for expected in [
            "process_cpu_seconds_total 1.25",
            "process_resident_memory_bytes 1048576",
            "process_open_fds 12",
            "process_max_fds 1024",
            "process_start_time_seconds 1700000000.5",
            "leaseq_log_bytes 4096",
            "leaseq_log_segments 2",
            "leaseq_log_bytes_since_checkpoint 100",
            "leaseq_snapshot_bytes 512",
            "leaseq_checkpoints_total 3",
            "leaseq_snapshot_age_seconds 2.5",
            "leaseq_checkpoint_duration_seconds 0.0015",
            "leaseq_checkpoint_pause_seconds 0.00002",
            "leaseq_http_connections_open 7",
            "leaseq_http_connections_max 10",
            "leaseq_http_connections_accepted_total 40",
            "leaseq_http_connection_limit_reached_total 2",
            "leaseq_buckets 16",
            "leaseq_transfers_waiting 3",
            "leaseq_payload_cache_bytes 4224",
            "leaseq_payload_cache_payloads 33",
        ] {
            assert!(
                page.lines().any(|line| line == expected),
                "missing {expected} in\n{page}"
            );
        }
        assert!(page.contains("leaseq_log_fsync_duration_seconds_bucket{le=\"0.001\"} 1"));
        assert!(page.contains("leaseq_log_fsync_duration_seconds_bucket{le=\"0.0005\"} 0"));
        assert!(page.contains("leaseq_log_fsync_batch_records_bucket{le=\"4\"} 1"));
        assert!(page.contains("\nleaseq_log_uncached_reads_total 5\n"));
        assert!(page.contains("queue=\"a\\\"b\\\\c\""));
    }
}

#[cfg(test)]
mod group_pressure_tests {
    use leaseq_core::{
        Engine, EngineConfig, Journal, MessageId, QueueConfigPatch, ReceiptKey, ReceiveRequest,
        SendInput,
    };

    use super::*;

    #[test]
    fn fifo_groups_in_flight_and_blocked_long() {
        let mut engine = Engine::new(EngineConfig::default(), ReceiptKey::new([3; 16]));
        let mut journal = Journal::new();
        let patch = QueueConfigPatch {
            fifo_queue: Some(true),
            ..QueueConfigPatch::default()
        };
        engine
            .create_queue(0, "jobs.fifo", &patch, Default::default(), &mut journal)
            .unwrap();
        for (i, group) in ["a", "a", "b", "c"].into_iter().enumerate() {
            let mut input = SendInput::body(format!("job-{i}"));
            input.group_id = Some(group.into());
            input.deduplication_id = Some(format!("d{i}"));
            let id = MessageId::from_random([i as u8; 16]);
            engine
                .send(0, "jobs.fifo", input, id, &mut journal)
                .unwrap();
        }
        let request = |max_messages| ReceiveRequest {
            max_messages,
            visibility_timeout_seconds: Some(600),
            client: None,
        };
        // Group a's first message at 1 s, then (a is blocked) b at 70 s; c stays ready.
        let first = engine.receive(1_000, "jobs.fifo", request(1), &mut journal);
        assert_eq!(first.unwrap().len(), 1);
        let second = engine.receive(70_000, "jobs.fifo", request(1), &mut journal);
        assert_eq!(second.unwrap().len(), 1);
        let queue = engine.queue("jobs.fifo").unwrap();
        assert_eq!(
            group_pressure(queue, 80_000),
            Some(GroupPressure {
                in_flight: 2,
                blocked_long: 1
            })
        );
        assert_eq!(
            group_pressure(queue, 30_000).map(|p| p.blocked_long),
            Some(0)
        );
        engine
            .create_queue(
                0,
                "standard",
                &QueueConfigPatch::default(),
                Default::default(),
                &mut journal,
            )
            .unwrap();
        assert_eq!(group_pressure(engine.queue("standard").unwrap(), 0), None);
    }
}
