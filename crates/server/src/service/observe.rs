//! What the service tells observers: the hooks that feed [`Metrics`] from deletes, receives and
//! refused receipts, the scrape of every queue, and the visibility advice.
//!
//! Every hook does nothing when metrics are off, so the cost of metrics can be measured by
//! turning them off (`leaseq serve --metrics false`).

use std::sync::Arc;

use leaseq_core::{DeleteOutcome, Delivery, Engine, Error, Journal, LeaseView, QueueInfo, Record};
use leaseq_sqs::error::SqsError;
use leaseq_sqs::VisibilityAdvice;
use rustc_hash::FxHashMap;

use super::Service;
use crate::advisor::advice_for;
use crate::metrics::{group_pressure, GroupPressure, LeaseRow, LogStats, Metrics, ObservedQueue};

/// Timer entries an observer's look at a queue's leases walks at most (delayed messages share
/// the index with leases): bounds the time the engine lock is held for it.
const LEASE_SCAN_MAX: usize = 1_000;

/// Logs (at debug level) each move to a dead-letter queue in `journal` with the message id, its
/// last attempt and, for a fail-now, the reason. `engine` has applied the journal.
pub(super) fn log_dead_letters(engine: &Engine, journal: &Journal) {
    if !tracing::enabled!(tracing::Level::DEBUG) {
        return;
    }
    for record in journal {
        let (queue_id, dead_letter_queue_id, dead_letter_seq, reason) = match record {
            Record::DeadLetter {
                queue_id,
                dead_letter_queue_id,
                dead_letter_seq,
                ..
            } => (queue_id, dead_letter_queue_id, dead_letter_seq, None),
            Record::FailMessage {
                queue_id,
                dead_letter_queue_id,
                dead_letter_seq,
                reason,
                ..
            } => (
                queue_id,
                dead_letter_queue_id,
                dead_letter_seq,
                Some(reason),
            ),
            _ => continue,
        };
        let (Some(source), Some(target)) = (
            engine.queue_by_id(*queue_id),
            engine.queue_by_id(*dead_letter_queue_id),
        ) else {
            continue;
        };
        if let Some(message) = target.message(*dead_letter_seq) {
            tracing::debug!(
                queue = &*source.name,
                message_id = %message.id,
                attempt = message.receive_count,
                dead_letter_queue = &*target.name,
                reason = reason.map(String::as_str),
                "dead-lettered"
            );
        }
    }
}

impl Service {
    /// Turns metrics on: the service records its observations into `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Service {
        self.metrics = Some(metrics);
        self
    }

    /// The metrics this service records into, if they are on.
    pub fn metrics(&self) -> Option<&Arc<Metrics>> {
        self.metrics.as_ref()
    }

    /// The counts of the SQS listener's connections: the accept loop that serves this service
    /// counts into them when they are its [`crate::http::Connections::stats`].
    pub fn connection_stats(&self) -> &Arc<crate::metrics::ConnectionStats> {
        &self.connection_stats
    }

    /// Records what a delete with `receipt` did, `deleted` (the engine's answer): the lease it
    /// ended (processing time, lease time left, attempt) or the invalid receipt. Runs under the
    /// engine lock, like the delete itself.
    pub(super) fn delete_observed(
        &self,
        engine: &Engine,
        name: &str,
        receipt: &str,
        deleted: Result<(DeleteOutcome, Option<LeaseView>), Error>,
    ) -> Result<(), SqsError> {
        match deleted {
            Ok((DeleteOutcome::Deleted, Some(lease))) => {
                {
                    // The engine's clock: never earlier than a time it has seen.
                    let now_ms = engine.clock_ms();
                    if let Some(metrics) = &self.metrics {
                        metrics.queue(lease.queue_id).observe_delete(&lease, now_ms);
                    }
                    tracing::debug!(
                        queue = name,
                        message_id = %lease.message_id,
                        attempt = lease.receive_count,
                        processing_ms = now_ms.saturating_sub(lease.leased_at_ms),
                        late = now_ms >= lease.visible_at_ms,
                        "deleted"
                    );
                }
                Ok(())
            }
            Ok(_) => Ok(()),
            Err(error) => Err(self.receipt_error(engine, name, error, receipt)),
        }
    }

    /// The client's error for a refused receipt, counting invalid receipts per queue.
    pub(super) fn receipt_error(
        &self,
        engine: &Engine,
        name: &str,
        error: Error,
        receipt: &str,
    ) -> SqsError {
        if let (Some(metrics), Error::ReceiptHandleIsInvalid) = (&self.metrics, &error) {
            if let Some(queue_id) = engine.queue_id(name) {
                metrics
                    .queue(queue_id)
                    .invalid_receipts
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        SqsError::for_receipt(error, receipt)
    }

    /// Logs each delivery (at debug level) with the message id and the attempt, so a message's
    /// attempts can be followed in the log: attempt 1 received, attempt 1 expired, attempt 2
    /// received, attempt 2 deleted.
    pub(super) fn log_deliveries(&self, name: &str, deliveries: &[Delivery]) {
        if !tracing::enabled!(tracing::Level::DEBUG) {
            return;
        }
        for delivery in deliveries {
            if let Some(outcome) = delivery.previous_attempt {
                tracing::debug!(
                    queue = name,
                    message_id = %delivery.message_id,
                    attempt = delivery.receive_count - 1,
                    outcome = outcome.as_str(),
                    "attempt ended"
                );
            }
            tracing::debug!(
                queue = name,
                message_id = %delivery.message_id,
                attempt = delivery.receive_count,
                lease_expires_at_ms = delivery.visible_at_ms,
                "received"
            );
        }
    }

    /// Records the dwell time of each first receive of a fair queue's message (quiet or noisy
    /// tenant, as the engine saw it at the delivery).
    pub(super) fn observe_dwell(&self, name: &str, deliveries: &[Delivery]) {
        let Some(metrics) = &self.metrics else { return };
        let mut first_receives = deliveries
            .iter()
            .filter_map(|delivery| Some((delivery, delivery.tenant_noisy?)))
            .filter(|(delivery, _)| delivery.receive_count == 1)
            .peekable();
        if first_receives.peek().is_none() {
            return;
        }
        let Some(queue_id) = self
            .host_for(name)
            .ok()
            .and_then(|host| host.engine().queue_id(name))
        else {
            return;
        };
        let stats = metrics.queue(queue_id);
        for (delivery, noisy) in first_receives {
            stats.observe_dwell(delivery.sent_at_ms, delivery.first_received_at_ms, noisy);
        }
    }

    /// Counts a receive of the named queue that returned nothing.
    pub(super) fn observe_empty_receive(&self, name: &str) {
        if let Some(metrics) = &self.metrics {
            if let Some(queue_id) = self
                .host_for(name)
                .ok()
                .and_then(|host| host.engine().queue_id(name))
            {
                metrics
                    .queue(queue_id)
                    .empty_receives
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }

    /// Every queue's state now, with what the server observed of it, in name order. Forgets the
    /// observations of queues that no longer exist.
    pub fn observe_queues(&self) -> (u64, Vec<ObservedQueue>) {
        let (now_ms, infos) = {
            let now_ms = self.now_ms();
            let mut clock_ms = 0;
            let mut infos: Vec<QueueInfo> = Vec::new();
            for host in self.hosts.iter() {
                let mut engine = host.engine();
                let names = engine.list_queues("");
                infos.extend(
                    names
                        .iter()
                        .filter_map(|name| engine.queue_info(now_ms, name).ok()),
                );
                clock_ms = clock_ms.max(engine.clock_ms());
            }
            // Every bucket's queues, in name order (each bucket's are already).
            if self.hosts.len() > 1 {
                infos.sort_unstable_by(|a, b| a.name.cmp(&b.name));
            }
            (clock_ms, infos)
        };
        let Some(metrics) = &self.metrics else {
            return (now_ms, infos.into_iter().map(|info| (info, None)).collect());
        };
        let live: Vec<u64> = infos.iter().map(|info| info.queue_id).collect();
        metrics.retain_queues(&live);
        let queues = infos
            .into_iter()
            .map(|info| {
                let stats = metrics.queue_if_seen(info.queue_id);
                (info, stats)
            })
            .collect();
        (now_ms, queues)
    }

    /// For each queue (by id), the in-flight leases that end first (at most `limit`), as of the
    /// last look at the queue (call after [`Service::observe_queues`], which brings every queue
    /// up to now).
    pub fn leases_ending_first(&self, limit: usize) -> FxHashMap<u64, Vec<LeaseRow>> {
        let mut leases = FxHashMap::default();
        for host in self.hosts.iter() {
            leases.extend(Self::leases_of(&host.engine(), limit));
        }
        leases
    }

    fn leases_of(engine: &leaseq_core::Engine, limit: usize) -> FxHashMap<u64, Vec<LeaseRow>> {
        engine
            .list_queues("")
            .iter()
            .filter_map(|name| engine.queue(name))
            .map(|queue| {
                let leases = queue
                    .leases_ending_first(limit, LEASE_SCAN_MAX)
                    .map(|message| LeaseRow {
                        message_id: message.id,
                        attempt: message.receive_count,
                        leased_at_ms: message.leased_at_ms,
                        lease_expires_at_ms: message.visible_at_ms,
                    })
                    .collect();
                (queue.id, leases)
            })
            .collect()
    }

    /// For each FIFO queue (by id), its groups blocked by leases (call after
    /// [`Service::observe_queues`], which brings every queue up to now).
    pub fn fifo_group_pressure(&self) -> FxHashMap<u64, GroupPressure> {
        let mut pressure = FxHashMap::default();
        for host in self.hosts.iter() {
            let engine = host.engine();
            let now_ms = engine.clock_ms();
            pressure.extend(
                engine
                    .list_queues("")
                    .iter()
                    .filter_map(|name| engine.queue(name))
                    .filter_map(|queue| Some((queue.id, group_pressure(queue, now_ms)?))),
            );
        }
        pressure
    }

    /// The log's storage and this process's checkpoints (`None` for a store that keeps
    /// nothing). With several buckets: every bucket's segments, and the first bucket's
    /// checkpoints.
    pub fn storage_stats(&self) -> Option<crate::metrics::StorageStats> {
        let first = self.hosts.iter().next()?;
        if !first.store().keeps_records() {
            return None;
        }
        let segments: Vec<_> = self
            .hosts
            .iter()
            .flat_map(|host| host.store().segments())
            .collect();
        Some(crate::metrics::StorageStats {
            log_bytes: segments.iter().map(|segment| segment.size_bytes).sum(),
            log_segments: segments.len() as u64,
            checkpoints: first.checkpoint_stats(),
        })
    }

    /// Messages waiting in the outboxes of this service's buckets, on their way to another
    /// bucket.
    pub fn transfers_waiting(&self) -> u64 {
        self.hosts
            .iter()
            .map(|host| host.engine().outbox_len() as u64)
            .sum()
    }

    /// How many buckets this node serves and how many messages wait in their outboxes
    /// (`None` for a node of one bucket, which has no transfers).
    pub fn bucket_stats(&self) -> Option<crate::metrics::BucketStats> {
        if self.hosts.bucket_count() < 2 {
            return None;
        }
        Some(crate::metrics::BucketStats {
            buckets: self.hosts.len() as u64,
            transfers_waiting: self.transfers_waiting(),
        })
    }

    /// The log store's measurements (`None` for one that keeps nothing); with several
    /// buckets, every bucket's log's together.
    pub fn log_stats(&self) -> Option<LogStats> {
        self.hosts
            .iter()
            .filter_map(|host| {
                let mut stats = host.store().stats()?;
                let (bytes, payloads) = host.engine().payload_cache_usage();
                stats.payload_cache = (bytes, payloads as u64);
                Some(stats)
            })
            .reduce(|mut all, one| {
                all.merge(&one);
                all
            })
    }

    /// The advisor's finding for the named queue.
    pub(super) async fn visibility_advice(&self, name: &str) -> Result<VisibilityAdvice, SqsError> {
        let info = self
            .read(name, |engine| engine.queue_info(self.now_ms(), name))
            .await?;
        let stats = self
            .metrics
            .as_ref()
            .and_then(|metrics| metrics.queue_if_seen(info.queue_id));
        Ok(advice_for(&info, stats.as_deref()))
    }
}
