//! What the embedded backend tells observers: the hooks that feed [`Metrics`] from deletes,
//! receives and refused receipts, the scrape of every queue, and the visibility advice.
//!
//! Every hook does nothing when metrics are off, so the cost of metrics can be measured by
//! turning them off (`leaseq serve --metrics false`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use leaseq_core::engine::HistoryLookup;
use leaseq_core::{
    DeleteOutcome, Delivery, Engine, Error, Journal, MessageId, Queue, QueueInfo, Record,
};
use leaseq_sqs::error::{ErrorCode, SqsError};
use leaseq_sqs::{Outcome, VisibilityAdvice};

use rustc_hash::FxHashMap;

use super::Embedded;
use crate::advisor::advice_for;
use crate::metrics::{LogStats, Metrics, ObservedQueue};

/// Timer entries an observer's look at a queue's leases walks at most (delayed messages share
/// the index with leases): bounds the time the engine lock is held for it.
const LEASE_SCAN_MAX: usize = 1_000;

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

impl Embedded {
    /// Turns metrics on: the backend records its observations into `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<Metrics>) -> Embedded {
        self.metrics = Some(metrics);
        self
    }

    /// The metrics this backend records into, if they are on.
    pub fn metrics(&self) -> Option<&Arc<Metrics>> {
        self.metrics.as_ref()
    }

    /// Deletes with `receipt`, recording the lease it ends (processing time, lease time left,
    /// attempt) or the invalid receipt. Runs under the engine lock, like the delete itself.
    pub(super) fn delete_observed(
        &self,
        engine: &mut Engine,
        now_ms: u64,
        name: &str,
        receipt: &str,
        journal: &mut Journal,
    ) -> Result<(), SqsError> {
        let Some(metrics) = &self.metrics else {
            return engine
                .delete(now_ms, name, receipt, journal)
                .map(drop)
                .map_err(|error| SqsError::for_receipt(error, receipt));
        };
        match engine.delete_ending(now_ms, name, receipt, journal) {
            Ok((DeleteOutcome::Deleted, lease)) => {
                if let Some(lease) = lease {
                    // The engine's clock: never earlier than a time it has seen.
                    let now_ms = engine.clock_ms();
                    metrics.queue(lease.queue_id).observe_delete(&lease, now_ms);
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

    /// Counts a receive of the named queue that returned nothing.
    pub(super) fn observe_empty_receive(&self, name: &str) {
        if let Some(metrics) = &self.metrics {
            if let Some(queue_id) = self.engine.lock().queue_id(name) {
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
            let mut engine = self.engine.lock();
            let now_ms = self.now_ms();
            let infos: Vec<QueueInfo> = engine
                .list_queues("")
                .iter()
                .filter_map(|name| engine.queue_info(now_ms, name).ok())
                .collect();
            (engine.clock_ms(), infos)
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
    /// last look at the queue (call after [`Embedded::observe_queues`], which brings every queue
    /// up to now).
    pub fn leases_ending_first(&self, limit: usize) -> FxHashMap<u64, Vec<LeaseRow>> {
        let engine = self.engine.lock();
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
    /// [`Embedded::observe_queues`], which brings every queue up to now).
    pub fn fifo_group_pressure(&self) -> FxHashMap<u64, GroupPressure> {
        let engine = self.engine.lock();
        let now_ms = engine.clock_ms();
        engine
            .list_queues("")
            .iter()
            .filter_map(|name| engine.queue(name))
            .filter_map(|queue| Some((queue.id, group_pressure(queue, now_ms)?)))
            .collect()
    }

    /// The log's fsync latency, batch sizes and reads from the disk (`None` in memory).
    pub fn log_stats(&self) -> Option<LogStats> {
        self.log.as_ref().map(|log| LogStats {
            fsync_micros: log.stats().fsync_micros.snapshot(),
            batch_records: log.stats().batch_records.snapshot(),
            uncached_reads: log.stats().uncached_reads.load(Ordering::Relaxed),
        })
    }

    /// The advisor's finding for the named queue.
    pub(super) async fn visibility_advice(&self, name: &str) -> Result<VisibilityAdvice, SqsError> {
        let info = self
            .read(|engine| engine.queue_info(self.now_ms(), name))
            .await?;
        let stats = self
            .metrics
            .as_ref()
            .and_then(|metrics| metrics.queue_if_seen(info.queue_id));
        Ok(advice_for(&info, stats.as_deref()))
    }

    /// A message's attempt history (`LeaseqGetMessageHistory`). The engine looks for the
    /// message in steps, each under its own hold of the engine lock (see
    /// `leaseq_core::engine::HISTORY_SCAN_STEP`), so a lookup in a long queue never holds up
    /// other requests for long.
    pub(super) async fn message_history(
        &self,
        name: &str,
        message_id: MessageId,
    ) -> Result<Outcome, SqsError> {
        let mut from_seq = 0;
        let mut tail_lsn = None;
        let found = loop {
            let (step, step_lsn) = self.apply_now(|engine, _| {
                engine.message_history(self.now_ms(), name, message_id, from_seq)
            })?;
            tail_lsn = tail_lsn.max(step_lsn);
            match step? {
                HistoryLookup::Continue(next) => {
                    from_seq = next;
                    tokio::task::yield_now().await;
                }
                HistoryLookup::NotFound => break None,
                HistoryLookup::Found(history) => break Some(history),
            }
        };
        // What it saw may include records not yet durable.
        self.durable(tail_lsn).await?;
        match found {
            Some(history) => Ok(Outcome::MessageHistory(history)),
            None => Err(SqsError::new(
                ErrorCode::ResourceNotFound,
                format!(
                    "The queue {name} has no message {message_id}: it was never sent there, or it \
                     left the queue (deleted messages are remembered for their last {} deletes).",
                    leaseq_core::queue::RECENTLY_DELETED_KEPT
                ),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
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
