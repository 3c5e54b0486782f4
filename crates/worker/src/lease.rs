//! The lease keeper: one task per worker that extends the leases of every message in hand.
//!
//! Each lease is extended once less than the extension lead is left (see
//! [`LeaseConfig::extension_lead`]), in `ChangeMessageVisibilityBatch` calls of up to ten
//! entries. A lease is not extended past `lease_total_max` from its receive, nor while its
//! handler has reported no progress within `progress_window`. A lease whose extension the server
//! refused, or that reaches its deadline minus `expiry_margin` without a confirmed extension, is
//! lost: its context is cancelled and the keeper forgets it.
//!
//! Deadlines are measured from the moment the request was *sent*, which is no later than the
//! moment the server started the lease, so the keeper's idea of a deadline is never later than
//! the server's (up to the clocks' rate difference, which `expiry_margin` covers).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_sqs::types::ChangeMessageVisibilityBatchRequestEntry;
use tokio::sync::Notify;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use crate::metrics::Metrics;
use crate::{LeaseConfig, LeaseContext, LeaseLoss};

/// SQS's limit on entries per batch call.
const BATCH_ENTRIES_MAX: usize = 10;

/// How long after a failed extension call the keeper tries again (bounded by the lead).
const RETRY_INTERVAL_MAX: Duration = Duration::from_secs(1);

/// One lease in hand.
#[derive(Debug)]
struct Lease {
    receipt_handle: String,
    context: LeaseContext,
    received_at: Instant,
    deadline: Instant,
    /// No extension before this (after a failed call, so failures do not loop tightly).
    next_try_at: Instant,
    /// Set once the keeper decided not to extend again; the loss reported at the deadline.
    stopped: Option<LeaseLoss>,
}

/// An extension the keeper is about to ask for.
#[derive(Debug, PartialEq, Eq)]
struct Extension {
    id: u64,
    visibility_seconds: i32,
}

/// What one pass over the leases decided.
#[derive(Debug, Default)]
struct Plan {
    extensions: Vec<Extension>,
    lost: Vec<(u64, LeaseLoss)>,
    next_wake: Option<Instant>,
}

pub(crate) struct LeaseKeeper {
    client: aws_sdk_sqs::Client,
    queue_url: String,
    config: LeaseConfig,
    metrics: Arc<Metrics>,
    leases: Mutex<HashMap<u64, Lease>>,
    next_id: Mutex<u64>,
    changed: Notify,
    /// Held for the whole of each extension call, so [`LeaseKeeper::unregister`] can wait out a
    /// call that may still extend the lease it removed.
    calls: tokio::sync::Mutex<()>,
}

impl LeaseKeeper {
    pub(crate) fn new(
        client: aws_sdk_sqs::Client,
        queue_url: String,
        config: LeaseConfig,
        metrics: Arc<Metrics>,
    ) -> LeaseKeeper {
        LeaseKeeper {
            client,
            queue_url,
            config,
            metrics,
            leases: Mutex::new(HashMap::new()),
            next_id: Mutex::new(0),
            changed: Notify::new(),
            calls: tokio::sync::Mutex::new(()),
        }
    }

    /// Starts keeping the lease of a message received by a request sent at `received_at`.
    pub(crate) fn register(
        &self,
        receipt_handle: &str,
        context: LeaseContext,
        received_at: Instant,
    ) -> u64 {
        let id = {
            let mut next_id = lock(&self.next_id);
            *next_id += 1;
            *next_id
        };
        let lease = Lease {
            receipt_handle: receipt_handle.to_string(),
            context,
            received_at,
            deadline: received_at + self.config.visibility_timeout,
            next_try_at: received_at,
            stopped: None,
        };
        lock(&self.leases).insert(id, lease);
        self.changed.notify_one();
        id
    }

    /// Stops keeping a lease (its handler finished); a no-op for a lease already lost. Returns
    /// once no extension of it can still be under way, so that a visibility the caller sets next
    /// (a retry's backoff) cannot be overwritten by a late extension.
    pub(crate) async fn unregister(&self, id: u64) {
        lock(&self.leases).remove(&id);
        // A call that includes this lease took the call lock before reading the lease table,
        // and so before the removal above; waiting for the lock waits that call out.
        drop(self.calls.lock().await);
    }

    /// Extends leases until `stop` is cancelled.
    pub(crate) async fn run(self: Arc<Self>, stop: CancellationToken) {
        loop {
            let plan = plan(&mut lock(&self.leases), &self.config, Instant::now());
            self.lose(plan.lost);
            if !plan.extensions.is_empty() {
                self.extend(plan.extensions).await;
                continue;
            }
            let wake = plan
                .next_wake
                .unwrap_or_else(|| Instant::now() + Duration::from_secs(3600));
            tokio::select! {
                () = tokio::time::sleep_until(wake) => {}
                () = self.changed.notified() => {}
                () = stop.cancelled() => return,
            }
        }
    }

    fn lose(&self, lost: Vec<(u64, LeaseLoss)>) {
        let mut leases = lock(&self.leases);
        for (id, reason) in lost {
            if let Some(lease) = leases.remove(&id) {
                lose_context(&lease.context, reason, &self.metrics);
            }
        }
    }

    async fn extend(&self, extensions: Vec<Extension>) {
        for batch in extensions.chunks(BATCH_ENTRIES_MAX) {
            self.extend_batch(batch).await;
        }
    }

    /// Sends one batch. The call may take no longer than the earliest time one of its leases
    /// must count as lost; an unanswered call leaves the deadlines as they were.
    async fn extend_batch(&self, batch: &[Extension]) {
        let _call = self.calls.lock().await;
        let sent_at = Instant::now();
        let Some((entries, answer_by)) = self.batch_entries(batch) else {
            return;
        };
        // Whatever the answer, no lease of this batch is tried again right away: a success moves
        // its deadline later anyway, and an entry missing from the answer must not spin.
        self.retry_later(batch, sent_at);
        let request = self
            .client
            .change_message_visibility_batch()
            .queue_url(&self.queue_url)
            .set_entries(Some(entries))
            .send();
        Metrics::add(&self.metrics.extension_calls, 1);
        match tokio::time::timeout_at(answer_by, request).await {
            Ok(Ok(output)) => {
                let mut leases = lock(&self.leases);
                for entry in output.successful() {
                    let Some(extension) = find(batch, entry.id()) else {
                        continue;
                    };
                    if let Some(lease) = leases.get_mut(&extension.id) {
                        let seconds = u64::try_from(extension.visibility_seconds).unwrap_or(0);
                        lease.deadline = sent_at + Duration::from_secs(seconds);
                        Metrics::add(&self.metrics.extensions, 1);
                    }
                }
                for entry in output.failed() {
                    let Some(extension) = find(batch, entry.id()) else {
                        continue;
                    };
                    if let Some(lease) = leases.remove(&extension.id) {
                        let code = entry.code().to_string();
                        lose_context(
                            &lease.context,
                            LeaseLoss::ExtensionRejected { code },
                            &self.metrics,
                        );
                    }
                }
            }
            Ok(Err(error)) => {
                let error = aws_sdk_sqs::error::DisplayErrorContext(&error);
                warn!(queue = %self.queue_url, %error, "lease extension failed; will retry");
            }
            Err(_) => {
                warn!(queue = %self.queue_url, "lease extension unanswered before a lease could run out");
            }
        }
    }

    fn batch_entries(
        &self,
        batch: &[Extension],
    ) -> Option<(Vec<ChangeMessageVisibilityBatchRequestEntry>, Instant)> {
        let leases = lock(&self.leases);
        let mut entries = Vec::with_capacity(batch.len());
        let mut answer_by: Option<Instant> = None;
        for extension in batch {
            let Some(lease) = leases.get(&extension.id) else {
                continue;
            };
            let lose_at = lease.deadline - self.config.expiry_margin;
            answer_by = Some(answer_by.map_or(lose_at, |at| at.min(lose_at)));
            let entry = ChangeMessageVisibilityBatchRequestEntry::builder()
                .id(extension.id.to_string())
                .receipt_handle(&lease.receipt_handle)
                .visibility_timeout(extension.visibility_seconds)
                .build()
                .expect("id and receipt handle are set");
            entries.push(entry);
        }
        Some((entries, answer_by?))
    }

    fn retry_later(&self, batch: &[Extension], failed_at: Instant) {
        let retry_interval = (self.config.extension_lead() / 4).min(RETRY_INTERVAL_MAX);
        let mut leases = lock(&self.leases);
        for extension in batch {
            if let Some(lease) = leases.get_mut(&extension.id) {
                lease.next_try_at = failed_at + retry_interval;
            }
        }
    }

    /// Cancels every lease in hand (at shutdown), returning how many there were.
    pub(crate) fn lose_all(&self, reason: &LeaseLoss) -> usize {
        let mut leases = lock(&self.leases);
        let count = leases.len();
        for (_, lease) in leases.drain() {
            lose_context(&lease.context, reason.clone(), &self.metrics);
        }
        count
    }
}

fn find<'a>(batch: &'a [Extension], entry_id: &str) -> Option<&'a Extension> {
    let id: u64 = entry_id.parse().ok()?;
    batch.iter().find(|extension| extension.id == id)
}

fn lose_context(context: &LeaseContext, reason: LeaseLoss, metrics: &Metrics) {
    warn!(message_id = context.message_id(), attempt = context.attempt(), reason = ?reason, "lease lost");
    if context.lose(reason) {
        Metrics::add(&metrics.lease_losses, 1);
    }
}

/// Decides, for every lease, whether it is lost, due for extension (and by how much), or when to
/// look at it next. Its only effect is recording why a lease stopped being extended.
fn plan(leases: &mut HashMap<u64, Lease>, config: &LeaseConfig, now: Instant) -> Plan {
    let mut plan = Plan::default();
    let lead = config.extension_lead();
    for (&id, lease) in leases.iter_mut() {
        let lose_at = lease.deadline - config.expiry_margin;
        if now >= lose_at {
            let reason = lease.stopped.clone().unwrap_or(LeaseLoss::Unconfirmed);
            plan.lost.push((id, reason));
            continue;
        }
        let mut wake = lose_at;
        let extend_at = (lease.deadline - lead).max(lease.next_try_at);
        if lease.stopped.is_none() {
            if now >= extend_at {
                match extension_seconds(lease, config, now) {
                    Ok(visibility_seconds) => plan.extensions.push(Extension {
                        id,
                        visibility_seconds,
                    }),
                    Err(reason) => {
                        debug!(
                            message_id = lease.context.message_id(),
                            ?reason,
                            "lease no longer extended"
                        );
                        lease.stopped = Some(reason);
                    }
                }
            } else {
                wake = wake.min(extend_at);
            }
        }
        plan.next_wake = Some(plan.next_wake.map_or(wake, |at| at.min(wake)));
    }
    plan
}

/// The visibility to extend a due lease to, or why it must not be extended.
fn extension_seconds(lease: &Lease, config: &LeaseConfig, now: Instant) -> Result<i32, LeaseLoss> {
    if let Some(window) = config.progress_window {
        if now.duration_since(lease.context.progress_at()) > window {
            return Err(LeaseLoss::NoProgress);
        }
    }
    let cap_at = lease.received_at + config.lease_total_max;
    let allowed = cap_at
        .saturating_duration_since(now)
        .min(config.visibility_timeout);
    let seconds = allowed.as_secs();
    // An extension that would not move the deadline later is no extension.
    if now + Duration::from_secs(seconds) <= lease.deadline {
        return Err(LeaseLoss::TotalLeaseCapReached);
    }
    Ok(i32::try_from(seconds).unwrap_or(i32::MAX))
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // Nothing panics while holding these locks except an assertion of our own, after which
    // the worker is broken anyway; recovering keeps shutdown working.
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> LeaseConfig {
        LeaseConfig {
            visibility_timeout: Duration::from_secs(30),
            slack: Duration::from_secs(5),
            expiry_margin: Duration::from_secs(1),
            lease_total_max: Duration::from_secs(75),
            progress_window: None,
        }
    }

    fn lease_at(received_at: Instant, config: &LeaseConfig) -> Lease {
        Lease {
            receipt_handle: "r".into(),
            context: LeaseContext::new(1, "m", Arc::from("q")),
            received_at,
            deadline: received_at + config.visibility_timeout,
            next_try_at: received_at,
            stopped: None,
        }
    }

    fn one(lease: Lease) -> HashMap<u64, Lease> {
        HashMap::from([(1, lease)])
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_is_extended_a_third_before_its_deadline_not_earlier() {
        let config = config();
        let start = Instant::now();
        let mut leases = one(lease_at(start, &config));
        let decided = plan(&mut leases, &config, start + Duration::from_secs(19));
        assert!(decided.extensions.is_empty() && decided.lost.is_empty());
        assert_eq!(decided.next_wake, Some(start + Duration::from_secs(20)));
        let decided = plan(&mut leases, &config, start + Duration::from_secs(20));
        let expected = Extension {
            id: 1,
            visibility_seconds: 30,
        };
        assert_eq!(decided.extensions, vec![expected]);
    }

    #[tokio::test(start_paused = true)]
    async fn the_last_extension_stops_at_the_total_cap_and_the_lease_is_then_lost() {
        let config = config();
        let start = Instant::now();
        let mut lease = lease_at(start, &config);
        // Extended once already, at 20 s, to 50 s; the cap is 75 s.
        lease.deadline = start + Duration::from_secs(50);
        let mut leases = one(lease);
        let decided = plan(&mut leases, &config, start + Duration::from_secs(40));
        let expected = Extension {
            id: 1,
            visibility_seconds: 30,
        };
        assert_eq!(decided.extensions, vec![expected]);
        leases.get_mut(&1).unwrap().deadline = start + Duration::from_secs(70);
        // At 60 s only 15 s remain under the cap: the deadline moves to 75 s, not 90 s.
        let decided = plan(&mut leases, &config, start + Duration::from_secs(60));
        let expected = Extension {
            id: 1,
            visibility_seconds: 15,
        };
        assert_eq!(decided.extensions, vec![expected]);
        leases.get_mut(&1).unwrap().deadline = start + Duration::from_secs(75);
        let decided = plan(&mut leases, &config, start + Duration::from_secs(66));
        assert!(decided.extensions.is_empty());
        assert_eq!(decided.next_wake, Some(start + Duration::from_secs(74)));
        let decided = plan(&mut leases, &config, start + Duration::from_secs(74));
        assert_eq!(decided.lost, vec![(1, LeaseLoss::TotalLeaseCapReached)]);
    }

    #[tokio::test(start_paused = true)]
    async fn without_progress_in_the_window_a_lease_is_not_extended() {
        let mut config = config();
        config.progress_window = Some(Duration::from_secs(15));
        let start = Instant::now();
        let mut leases = one(lease_at(start, &config));
        tokio::time::advance(Duration::from_secs(10)).await;
        leases[&1].context.report_progress();
        let decided = plan(&mut leases, &config, start + Duration::from_secs(20));
        assert_eq!(decided.extensions.len(), 1);
        let decided = plan(&mut leases, &config, start + Duration::from_secs(26));
        assert!(decided.extensions.is_empty());
        let decided = plan(&mut leases, &config, start + Duration::from_secs(29));
        assert_eq!(decided.lost, vec![(1, LeaseLoss::NoProgress)]);
    }

    #[tokio::test(start_paused = true)]
    async fn an_unconfirmed_extension_counts_as_lost_one_margin_before_the_deadline() {
        let config = config();
        let start = Instant::now();
        let mut lease = lease_at(start, &config);
        // The extension at 20 s failed; the next try is due at 21 s.
        lease.next_try_at = start + Duration::from_secs(21);
        let mut leases = one(lease);
        let decided = plan(&mut leases, &config, start + Duration::from_secs(20));
        assert!(decided.extensions.is_empty());
        assert_eq!(decided.next_wake, Some(start + Duration::from_secs(21)));
        let decided = plan(&mut leases, &config, start + Duration::from_secs(29));
        assert_eq!(decided.lost, vec![(1, LeaseLoss::Unconfirmed)]);
    }
}
