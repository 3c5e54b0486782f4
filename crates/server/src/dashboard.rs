//! The observation endpoints of the embedded service: `GET /metrics` (Prometheus text),
//! `GET /api/queues` (the dashboard's JSON), the dead-letter actions under
//! `/api/queues/{name}/` (peek and redrive, in `dashboard/dlq.rs`), a message's attempt history
//! (`dashboard/history.rs`) and the dashboard page itself (`GET /`, served by the HTTP layer).
//!
//! The page is one file compiled into the binary (`dashboard.html`: inline CSS and JavaScript,
//! no external library, no CDN), so it works on a machine without internet access. It polls
//! `/api/queues` and draws its charts by hand on a canvas.

mod api;
mod dlq;
mod history;

use std::collections::BTreeSet;
use std::sync::Arc;

use axum::extract::State;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde_json::{json, Value};

use crate::advisor::advice_for;
use crate::metrics::{render, Metrics, ProcessStats, Scrape};
use crate::service::Api;
use crate::Service;

const PAGE: &str = include_str!("dashboard.html");

/// In-flight leases listed per queue, those ending first.
const LEASES_SHOWN: usize = 10;
/// Noisy tenants of a fair queue shown per queue, the noisiest (most in flight) first.
const NOISY_TENANTS_SHOWN: usize = 5;

/// The dashboard page.
pub fn page() -> Response {
    (
        [
            (CONTENT_TYPE, "text/html; charset=utf-8"),
            (CACHE_CONTROL, "no-cache"),
        ],
        PAGE,
    )
        .into_response()
}

/// What the dashboard observes: the services of the buckets this process serves (a node's one
/// service, or the services of the buckets a cluster node owns), and the [`Api`] its per-queue
/// routes execute actions through (a cluster node's routes each to its queue's bucket).
pub trait Observed: Api {
    /// Calls `each` with every service whose queues the dashboard lists and `/metrics` counts,
    /// at the moment of the call.
    fn each_service(&self, each: &mut dyn FnMut(&Service));

    /// Where this node observes its requests (`None`: metrics off).
    fn request_metrics(&self) -> Option<Arc<Metrics>>;

    /// The counts of this node's SQS listener's connections.
    fn connection_counts(&self) -> Option<crate::metrics::ConnectionCounts>;

    /// Lines of Prometheus text the node adds to `/metrics` (a cluster node's own counters).
    fn node_metrics(&self) -> String {
        String::new()
    }
}

impl Observed for Service {
    fn each_service(&self, each: &mut dyn FnMut(&Service)) {
        each(self);
    }

    fn request_metrics(&self) -> Option<Arc<Metrics>> {
        self.metrics().cloned()
    }

    fn connection_counts(&self) -> Option<crate::metrics::ConnectionCounts> {
        Some(self.connection_stats().counts())
    }
}

/// `GET /metrics`, `GET /api/queues`, the dead-letter actions and message histories for
/// `observed`:
///
/// - `GET /api/queues/{name}/peek?max=10&after=0`: messages without leasing them;
/// - `GET /api/queues/{name}/messages/{message_id}/history`: a message's attempts;
/// - `GET /api/queues/{name}/redrives`: the queue's recent move tasks;
/// - `POST /api/queues/{name}/redrives` (`{"rate_per_second": n}`): start a redrive;
/// - `POST /api/queues/{name}/redrives/{task_id}/cancel` (`{}`): cancel one.
///
/// The POST routes take only `application/json` bodies, which a cross-site form cannot send.
/// Pass it to [`crate::http::serve`] (every path here starts with one of
/// [`crate::http::ROUTED_PATH_PREFIXES`]) or merge it with [`crate::router`].
pub fn routes<O: Observed>(observed: Arc<O>) -> Router {
    let [metrics_path, queues_path, peek_path, history_path, redrives_path, cancel_path] = PATHS;
    Router::new()
        .route(metrics_path, get(metrics::<O>))
        .route(queues_path, get(queues::<O>))
        .route(peek_path, get(dlq::peek::<O>))
        .route(history_path, get(history::history::<O>))
        .route(redrives_path, get(dlq::list::<O>).post(dlq::start::<O>))
        .route(cancel_path, post(dlq::cancel::<O>))
        .with_state(observed)
}

/// Serves the admin surface on a listener of its own (`leaseq serve --admin-listen`): the page
/// on `GET /`, [`routes`], and the probes `/livez` and `/readyz` (as the SQS listener answers
/// them, so that `leaseq healthcheck` can ask here when the SQS listener speaks TLS); plain
/// HTTP/1.1, until the task is dropped or aborted. Nothing here is authenticated, which is why
/// it is not on the SQS listener then.
pub async fn serve_admin(listener: tokio::net::TcpListener, service: Arc<Service>) {
    let router = routes(service.clone())
        .route("/", get(|| async { page() }))
        .merge(crate::http::probes(service));
    if let Err(error) = axum::serve(listener, router).await {
        tracing::error!(%error, "the admin listener failed");
    }
}

/// The paths [`routes`] serves, in the order it mounts them. Each starts with one of
/// [`crate::http::ROUTED_PATH_PREFIXES`], or the accept loop would never route a request to it
/// (checked by a test).
pub const PATHS: [&str; 6] = [
    "/metrics",
    "/api/queues",
    "/api/queues/{name}/peek",
    "/api/queues/{name}/messages/{message_id}/history",
    "/api/queues/{name}/redrives",
    "/api/queues/{name}/redrives/{task_id}/cancel",
];

async fn metrics<O: Observed>(State(observed): State<Arc<O>>) -> Response {
    let scrape = Gathered::of(&*observed, false);
    let empty = Metrics::default();
    let mut page = render(&Scrape {
        now_ms: scrape.now_ms,
        queues: &scrape.queues,
        metrics: scrape.metrics.as_deref().unwrap_or(&empty),
        log: scrape.log,
        fifo_groups: &scrape.fifo_groups,
        process: ProcessStats::read(),
        storage: scrape.storage,
        connections: scrape.connections,
        buckets: scrape.buckets,
    });
    page.push_str(&observed.node_metrics());
    (
        [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
        page,
    )
        .into_response()
}

/// What an [`Observed`] shows at one moment: every queue, FIFO group (and, for the dashboard,
/// lease) of every service; every log's latencies and batch sizes in one histogram; the
/// storage, buckets and transfers summed; the first service's checkpoints; the node's request
/// metrics and connections.
#[derive(Default)]
struct Gathered {
    now_ms: u64,
    queues: Vec<crate::metrics::ObservedQueue>,
    leases: rustc_hash::FxHashMap<u64, Vec<crate::metrics::LeaseRow>>,
    fifo_groups: rustc_hash::FxHashMap<u64, crate::metrics::GroupPressure>,
    metrics: Option<Arc<Metrics>>,
    log: Option<crate::metrics::LogStats>,
    storage: Option<crate::metrics::StorageStats>,
    connections: Option<crate::metrics::ConnectionCounts>,
    buckets: Option<crate::metrics::BucketStats>,
    services: usize,
}

impl Gathered {
    fn of(observed: &impl Observed, leases: bool) -> Gathered {
        // The wall clock until a service tells its engine's (none: a node that owns no bucket).
        let mut gathered = Gathered {
            now_ms: crate::clock::now_ms(),
            metrics: observed.request_metrics(),
            connections: observed.connection_counts(),
            ..Gathered::default()
        };
        observed.each_service(&mut |service| gathered.add(service, leases));
        gathered
    }

    fn add(&mut self, service: &Service, leases: bool) {
        let (now_ms, queues) = service.observe_queues();
        if self.services == 0 {
            self.now_ms = now_ms;
        }
        self.services += 1;
        self.queues.extend(queues);
        if leases {
            self.leases
                .extend(service.leases_ending_first(LEASES_SHOWN));
        }
        self.fifo_groups.extend(service.fifo_group_pressure());
        if let Some(log) = service.log_stats() {
            match &mut self.log {
                None => self.log = Some(log),
                Some(all) => all.merge(&log),
            }
        }
        if let Some(storage) = service.storage_stats() {
            match &mut self.storage {
                None => self.storage = Some(storage),
                Some(sum) => {
                    sum.log_bytes += storage.log_bytes;
                    sum.log_segments += storage.log_segments;
                }
            }
        }
        if let Some(buckets) = service.bucket_stats() {
            let sum = self.buckets.get_or_insert_with(Default::default);
            sum.buckets += buckets.buckets;
            sum.transfers_waiting += buckets.transfers_waiting;
        }
    }
}

async fn queues<O: Observed>(State(observed): State<Arc<O>>) -> Response {
    let Gathered {
        now_ms,
        mut queues,
        mut leases,
        fifo_groups,
        metrics,
        ..
    } = Gathered::of(&*observed, true);
    // A cluster node's buckets list their queues one bucket after another.
    queues.sort_by(|(a, _), (b, _)| a.name.cmp(&b.name));
    let dead_letter_queues: BTreeSet<&str> = queues
        .iter()
        .filter_map(|(info, _)| info.config.redrive_policy.as_ref())
        .map(|policy| policy.dead_letter_queue.as_str())
        .collect();
    let list: Vec<Value> = queues
        .iter()
        .map(|(info, stats)| {
            let c = &info.counters;
            let load = |f: fn(&crate::metrics::QueueStats) -> u64| stats.as_deref().map_or(0, f);
            let advice = advice_for(info, stats.as_deref());
            let seconds = |ms: u64| ms as f64 / 1000.0;
            let leases: Vec<Value> = leases
                .remove(&info.queue_id)
                .unwrap_or_default()
                .iter()
                .map(|lease| {
                    json!({
                        "message_id": lease.message_id.to_string(),
                        "attempt": lease.attempt,
                        "held_seconds": seconds(now_ms.saturating_sub(lease.leased_at_ms)),
                        "expires_in_seconds": seconds(lease.lease_expires_at_ms.saturating_sub(now_ms)),
                    })
                })
                .collect();
            json!({
                "name": &*info.name,
                "visible": info.ready,
                "in_flight": info.in_flight,
                "delayed": info.delayed,
                "oldest_age_seconds": info
                    .oldest_ready_sent_at_ms
                    .map_or(0.0, |sent| now_ms.saturating_sub(sent) as f64 / 1000.0),
                "visibility_timeout_seconds": info.config.visibility_timeout_seconds,
                "dead_letter_queue": info.config.redrive_policy.as_ref().map(|p| &p.dead_letter_queue),
                "max_receive_count": info.config.redrive_policy.as_ref().map(|p| p.max_receive_count),
                "is_dead_letter_queue": dead_letter_queues.contains(&*info.name),
                "counters": {
                    "sent": c.sent,
                    "received": c.received,
                    "deleted": c.deleted,
                    "deleted_late": c.deleted_late,
                    "leases_expired": c.leases_expired,
                    "leases_extended": c.leases_changed,
                    "leases_released": c.leases_released,
                    "dead_lettered": c.dead_lettered,
                    "empty_receives": load(|s| s.empty_receives.load(std::sync::atomic::Ordering::Relaxed)),
                    "ack_failures_stale": info.stale_receipts_seen,
                    "ack_failures_invalid": load(|s| s.invalid_receipts.load(std::sync::atomic::Ordering::Relaxed)),
                },
                "leases_ending_first": leases,
                // Fair queues (standard queues with group ids): the noisy tenants, most in
                // flight first; `null` without group ids.
                "noisy_tenants": info.noisy_groups.as_ref().map(|groups| groups
                    .iter()
                    .take(NOISY_TENANTS_SHOWN)
                    .map(|group| json!({
                        "group_id": &*group.group_id,
                        "in_flight": group.in_flight,
                        "ready": group.ready,
                        "delayed": group.delayed,
                    }))
                    .collect::<Vec<Value>>()),
                "fifo_groups": fifo_groups.get(&info.queue_id).map(|groups| json!({
                    "in_flight": groups.in_flight,
                    "blocked_long": groups.blocked_long,
                })),
                "processing_ms": advice.processing_ms.map(|p| json!({
                    "p50": p.p50, "p95": p.p95, "p99": p.p99, "max": p.max,
                })),
                "advice": {
                    "verdict": advice.verdict,
                    "recommended_visibility_timeout_seconds": advice.recommended_visibility_timeout_seconds,
                    "reason": advice.reason,
                },
            })
        })
        .collect();
    let body = json!({
        "now_ms": now_ms,
        "metrics": metrics.is_some(),
        "queues": list,
    });
    (
        [
            (CONTENT_TYPE, "application/json"),
            (CACHE_CONTROL, "no-cache"),
        ],
        body.to_string(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::ROUTED_PATH_PREFIXES;

    #[test]
    fn every_dashboard_path_is_under_a_routed_prefix() {
        for path in PATHS {
            assert!(
                ROUTED_PATH_PREFIXES
                    .iter()
                    .any(|prefix| path.starts_with(prefix)),
                "{path} is under none of {ROUTED_PATH_PREFIXES:?}: the accept loop would answer it as an SQS request"
            );
        }
    }
}
