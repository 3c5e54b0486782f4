//! Fair queues: on a standard queue, a `MessageGroupId` names a tenant, and a tenant that takes a
//! disproportionate share of the consumers (a *noisy* tenant) is served after the quiet ones.
//!
//! The rules are Amazon SQS's ("How Amazon SQS fair queues work", SQS developer guide,
//! <https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-fair-queues-detailed.html>):
//!
//! - A tenant is the messages of one group id; each message without a group id is a tenant of its
//!   own, so it is never noisy (the engine keeps all of them under the key `""`, which no group id
//!   can be).
//! - A tenant is noisy when its *concurrency share* is above [`SHARE_PERCENT`] of the queue's
//!   in-flight messages and it has at least `in_flight_min` (AWS: 30) in flight, or when its
//!   *processing-time share* (of the leases that ended in the last processing window) is above
//!   [`SHARE_PERCENT`] of the queue's.
//! - It stops being noisy when its backlog (ready and delayed messages) drains, or after
//!   [`QUIET_PERIOD_MS`] (5 minutes) without a send, or when its shares drop to levels
//!   comparable to the quiet tenants' (at most `comparable_factor`, default 2, times the other
//!   tenants' average, in flight and in processing time).
//! - Whenever a quiet tenant's message is ready, a receive takes it first (oldest first); among
//!   noisy tenants, the one with the fewest messages in flight goes first. Nothing is dropped or
//!   throttled.
//!
//! AWS leaves the processing window open; leaseq's is `LeaseqFairProcessingWindowSeconds`
//! (default 60 s), a sliding window of two buckets; "comparable" is
//! `LeaseqFairComparableFactor`. `in_flight_min` is `LeaseqFairInFlightMin`
//! and fairness can be switched off with `LeaseqFairQueue=false` (the state is kept, the order is
//! the plain oldest-first one).
//!
//! State. [`FairState`] (boxed, `None` on a queue that never saw a group id, so such a queue pays
//! nothing) keeps a [`Tenant`] per group with messages: its ready messages in receive order,
//! its delayed and in-flight counts, its last send and its recent processing time. Two head
//! indexes hold every tenant with a ready message under its first ready message: `quiet` by
//! that message, `noisy` by (in flight, that message). Every state change of a message updates
//! its tenant and moves the tenant between the indexes in O(log n), whatever its backlog.
//! Whether a tenant is noisy is decided at each change of one of its messages (and when its
//! quiet period ends), from the queue's totals at that moment, so replay reproduces it; as in SQS
//! the thresholds are therefore approximate between changes. A tenant with no message left is
//! forgotten (its processing history with it). Snapshots carry what messages alone do not tell:
//! each tenant's last send, processing window and flag (`RestoreTenant`), and the queue's
//! processing window (`RestoreFairTotal`).

use std::collections::BTreeSet;
use std::sync::Arc;

use rustc_hash::FxHashMap;

/// A tenant with more than this percentage of the queue's in-flight messages or recent
/// processing time is noisy (AWS: "more than 10%").
pub const SHARE_PERCENT: u64 = 10;
/// A noisy tenant that sent nothing for this long is quiet again (AWS: 5 consecutive minutes).
pub const QUIET_PERIOD_MS: u64 = 5 * 60 * 1000;
/// The default of `in_flight_min` (AWS: "at least 30 of its own messages in flight").
pub const IN_FLIGHT_MIN_DEFAULT: u32 = 30;
/// The default processing window (leaseq's choice; AWS says "recent").
pub const PROCESSING_WINDOW_DEFAULT_SECONDS: u32 = 60;
/// Bounds of `LeaseqFairProcessingWindowSeconds`.
pub const PROCESSING_WINDOW_MAX_SECONDS: u32 = 3_600;
/// The default of `comparable_factor` (leaseq's choice; AWS says "comparable").
pub const COMPARABLE_FACTOR_DEFAULT: u32 = 2;
/// Bound of `LeaseqFairComparableFactor`.
pub const COMPARABLE_FACTOR_MAX: u32 = 100;
/// Bound of `LeaseqFairInFlightMin`.
pub const IN_FLIGHT_MIN_MAX: u32 = 120_000;

/// A standard queue's fairness settings.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FairConfig {
    /// `LeaseqFairQueue`: quiet tenants first (true, SQS's behaviour) or plain oldest-first.
    pub enabled: bool,
    /// `LeaseqFairInFlightMin`: in-flight messages a tenant needs before its concurrency share
    /// can make it noisy.
    pub in_flight_min: u32,
    /// `LeaseqFairProcessingWindowSeconds`: how far back "recent processing time" reaches.
    pub processing_window_seconds: u32,
    /// `LeaseqFairComparableFactor`: a noisy tenant is quiet again once its in-flight messages
    /// and recent processing time are at most this many times the other tenants' average.
    pub comparable_factor: u32,
}

impl Default for FairConfig {
    fn default() -> Self {
        FairConfig {
            enabled: true,
            in_flight_min: IN_FLIGHT_MIN_DEFAULT,
            processing_window_seconds: PROCESSING_WINDOW_DEFAULT_SECONDS,
            comparable_factor: COMPARABLE_FACTOR_DEFAULT,
        }
    }
}

/// Lease time that ended recently: two buckets of one window each, the older one weighed by how
/// much of it is still inside the window. Integer arithmetic only, so replay computes the same.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcessingWindow {
    /// Where the current bucket starts.
    pub start_ms: u64,
    /// Lease time ended in the current bucket.
    pub current_ms: u64,
    /// Lease time ended in the bucket before.
    pub previous_ms: u64,
}

impl ProcessingWindow {
    fn roll(&mut self, at_ms: u64, window_ms: u64) {
        if at_ms < self.start_ms + window_ms {
            return;
        }
        let buckets = (at_ms - self.start_ms) / window_ms;
        self.previous_ms = if buckets == 1 { self.current_ms } else { 0 };
        self.current_ms = 0;
        self.start_ms += buckets * window_ms;
    }

    fn add(&mut self, at_ms: u64, window_ms: u64, lease_ms: u64) {
        self.roll(at_ms, window_ms);
        self.current_ms = self.current_ms.saturating_add(lease_ms);
    }

    /// Lease time ended in the window that ends at `at_ms`.
    pub fn recent_ms(&self, at_ms: u64, window_ms: u64) -> u64 {
        let mut window = *self;
        window.roll(at_ms, window_ms);
        let into = at_ms.saturating_sub(window.start_ms).min(window_ms);
        let weight = window_ms - into;
        (u128::from(window.previous_ms) * u128::from(weight) / u128::from(window_ms)) as u64
            + window.current_ms
    }
}

/// One tenant of a fair queue.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tenant {
    /// Its ready messages, (sent_at_ms, seq), in receive order.
    ready: BTreeSet<(u64, u64)>,
    /// Its delayed messages.
    pub delayed: u32,
    /// Its messages in flight.
    pub in_flight: u32,
    /// When it last sent (a message arrived in the queue).
    pub last_sent_at_ms: u64,
    /// Its recent processing time.
    pub processing: ProcessingWindow,
    /// Whether it is noisy.
    pub noisy: bool,
}

impl Tenant {
    /// Its ready messages.
    pub fn ready_count(&self) -> usize {
        self.ready.len()
    }

    /// Its first ready message in receive order, as (sent_at_ms, seq).
    pub fn head(&self) -> Option<(u64, u64)> {
        self.ready.first().copied()
    }

    fn is_empty(&self) -> bool {
        self.ready.is_empty() && self.delayed == 0 && self.in_flight == 0
    }

    fn keys(&self) -> TenantKeys {
        TenantKeys {
            head: self.head(),
            noisy: self.noisy,
            in_flight: self.in_flight,
            last_sent_at_ms: self.last_sent_at_ms,
        }
    }
}

/// What a tenant's index entries are made of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct TenantKeys {
    head: Option<(u64, u64)>,
    noisy: bool,
    in_flight: u32,
    last_sent_at_ms: u64,
}

/// What a message was or became, for [`FairState::update`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Slot {
    /// Ready, with its receive-order key.
    Ready(u64, u64),
    /// Delayed.
    Delayed,
    /// In flight, leased at this time.
    InFlight { leased_at_ms: u64 },
}

/// The queue-wide numbers a noisiness decision compares a tenant with.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Totals {
    pub in_flight: usize,
}

/// The fairness state of a standard queue that has seen a group id.
#[derive(Clone, Debug, Default)]
pub struct FairState {
    tenants: FxHashMap<Arc<str>, Tenant>,
    /// Quiet tenants with a ready message, by their first one.
    quiet: BTreeSet<((u64, u64), Arc<str>)>,
    /// Noisy tenants with a ready message, by (in flight, first ready message).
    noisy: BTreeSet<(u32, (u64, u64), Arc<str>)>,
    /// Noisy tenants by the end of their quiet period.
    quiet_timers: BTreeSet<(u64, Arc<str>)>,
    /// The queue's recent processing time.
    pub processing: ProcessingWindow,
    /// The time changes are applied at (set by the queue before each change).
    pub(crate) clock_ms: u64,
    /// Tenants flagged noisy.
    noisy_count: usize,
    /// The key of the messages without a group id (`""`), shared.
    pub(crate) ungrouped: Arc<str>,
}

impl FairState {
    /// The tenant of group `group_id` (`""`: the messages without one), if it has messages.
    pub fn tenant(&self, group_id: &str) -> Option<&Tenant> {
        self.tenants.get(group_id)
    }

    /// Every tenant with messages, in no particular order.
    pub fn tenants(&self) -> impl Iterator<Item = (&Arc<str>, &Tenant)> {
        self.tenants.iter()
    }

    /// Tenants flagged noisy now.
    pub fn noisy_count(&self) -> usize {
        self.noisy_count
    }

    /// The first ready message a fair receive takes: the oldest of a quiet tenant, else the
    /// first of the noisy tenant with the fewest in flight. As (sent_at_ms, seq).
    pub fn next(&self) -> Option<(u64, u64)> {
        if let Some((head, _)) = self.quiet.first() {
            return Some(*head);
        }
        self.noisy.first().map(|(_, head, _)| *head)
    }

    /// The noisy tenants (at most one per noisy share, so few), by most in flight first.
    pub fn noisy_tenants(&self) -> Vec<(Arc<str>, &Tenant)> {
        let mut noisy: Vec<(Arc<str>, &Tenant)> = self
            .quiet_timers
            .iter()
            .map(|(_, group_id)| (group_id.clone(), &self.tenants[group_id]))
            .collect();
        noisy.sort_by(|a, b| {
            (b.1.in_flight, b.1.ready.len(), &b.0).cmp(&(a.1.in_flight, a.1.ready.len(), &a.0))
        });
        noisy
    }

    /// Whether `group_id`'s tenant is noisy.
    pub fn is_noisy(&self, group_id: &str) -> bool {
        self.tenants
            .get(group_id)
            .is_some_and(|tenant| tenant.noisy)
    }

    fn unindex(&mut self, group_id: &Arc<str>) {
        let Some(tenant) = self.tenants.get(group_id) else {
            return;
        };
        if let Some(head) = tenant.head() {
            let found = if tenant.noisy {
                self.noisy
                    .remove(&(tenant.in_flight, head, group_id.clone()))
            } else {
                self.quiet.remove(&(head, group_id.clone()))
            };
            assert!(found, "tenant {group_id} missing from its head index");
        }
        if tenant.noisy {
            self.quiet_timers
                .remove(&(tenant.last_sent_at_ms + QUIET_PERIOD_MS, group_id.clone()));
        }
    }

    fn index(&mut self, group_id: &Arc<str>) {
        let tenant = &self.tenants[group_id];
        if let Some(head) = tenant.head() {
            if tenant.noisy {
                self.noisy
                    .insert((tenant.in_flight, head, group_id.clone()));
            } else {
                self.quiet.insert((head, group_id.clone()));
            }
        }
        if tenant.noisy {
            self.quiet_timers
                .insert((tenant.last_sent_at_ms + QUIET_PERIOD_MS, group_id.clone()));
        }
    }

    /// Message of `group_id` went from `was` to `now` (`None`: not in the queue), at
    /// `self.clock_ms`. Re-decides whether the tenant is noisy. One lookup of the tenant; the
    /// indexes are touched only when the tenant's keys in them changed (a delete of a quiet
    /// tenant's message, for example, moves nothing).
    pub(crate) fn update(
        &mut self,
        config: &FairConfig,
        group_id: &Arc<str>,
        was: Option<Slot>,
        now: Option<Slot>,
        totals: Totals,
    ) {
        let at_ms = self.clock_ms;
        let window_ms = u64::from(config.processing_window_seconds.max(1)) * 1000;
        let tenants_before = self.tenants.len();
        let (tenant, others) = match self.tenants.entry(group_id.clone()) {
            std::collections::hash_map::Entry::Occupied(entry) => {
                (entry.into_mut(), tenants_before - 1)
            }
            std::collections::hash_map::Entry::Vacant(entry) => {
                (entry.insert(Tenant::default()), tenants_before)
            }
        };
        let before = tenant.keys();
        match was {
            None => tenant.last_sent_at_ms = tenant.last_sent_at_ms.max(at_ms),
            Some(Slot::Ready(sent_at_ms, seq)) => {
                assert!(tenant.ready.remove(&(sent_at_ms, seq)), "ready {seq}");
            }
            Some(Slot::Delayed) => tenant.delayed -= 1,
            Some(Slot::InFlight { leased_at_ms }) => {
                tenant.in_flight -= 1;
                // A lease that ended (deleted, released, ran out, failed) is processing time.
                // A lease that changed (extended) ends later and counts then.
                if !matches!(now, Some(Slot::InFlight { .. })) {
                    let lease_ms = at_ms.saturating_sub(leased_at_ms);
                    tenant.processing.add(at_ms, window_ms, lease_ms);
                    self.processing.add(at_ms, window_ms, lease_ms);
                }
            }
        }
        match now {
            None => {}
            Some(Slot::Ready(sent_at_ms, seq)) => {
                tenant.ready.insert((sent_at_ms, seq));
            }
            Some(Slot::Delayed) => tenant.delayed += 1,
            Some(Slot::InFlight { .. }) => tenant.in_flight += 1,
        }
        if tenant.is_empty() {
            if tenant.noisy {
                self.noisy_count -= 1;
            }
            self.tenants.remove(group_id);
            self.unindex_keys(group_id, before);
            return;
        }
        let queue_recent_ms = self.processing.recent_ms(at_ms, window_ms);
        let noisy = decide(
            config,
            group_id,
            tenant,
            Shares {
                at_ms,
                window_ms,
                queue_recent_ms,
                others: others as u64,
                in_flight: totals.in_flight as u64,
            },
        );
        if noisy != tenant.noisy {
            tenant.noisy = noisy;
            if noisy {
                self.noisy_count += 1;
            } else {
                self.noisy_count -= 1;
            }
        }
        let after = tenant.keys();
        if before != after {
            self.unindex_keys(group_id, before);
            self.index_keys(group_id, after);
        }
    }

    /// Removes the index entries of `group_id` made with `keys` (as [`Tenant::keys`] gave them).
    fn unindex_keys(&mut self, group_id: &Arc<str>, keys: TenantKeys) {
        if let Some(head) = keys.head {
            let found = if keys.noisy {
                self.noisy.remove(&(keys.in_flight, head, group_id.clone()))
            } else {
                self.quiet.remove(&(head, group_id.clone()))
            };
            assert!(found, "tenant {group_id} missing from its head index");
        }
        if keys.noisy {
            self.quiet_timers
                .remove(&(keys.last_sent_at_ms + QUIET_PERIOD_MS, group_id.clone()));
        }
    }

    /// Adds the index entries of `group_id` for `keys`.
    fn index_keys(&mut self, group_id: &Arc<str>, keys: TenantKeys) {
        if let Some(head) = keys.head {
            if keys.noisy {
                self.noisy.insert((keys.in_flight, head, group_id.clone()));
            } else {
                self.quiet.insert((head, group_id.clone()));
            }
        }
        if keys.noisy {
            self.quiet_timers
                .insert((keys.last_sent_at_ms + QUIET_PERIOD_MS, group_id.clone()));
        }
    }

    /// Ends the noisy status of the tenants whose quiet period ended by `now_ms`.
    pub(crate) fn advance(&mut self, now_ms: u64) {
        while let Some((at_ms, group_id)) = self.quiet_timers.first().cloned() {
            if at_ms > now_ms {
                break;
            }
            self.unindex(&group_id);
            let tenant = self.tenants.get_mut(&group_id).expect("timer of a tenant");
            tenant.noisy = false;
            self.noisy_count -= 1;
            self.index(&group_id);
        }
    }

    /// Sets what a snapshot says of a tenant (after its messages were restored).
    pub(crate) fn restore_tenant(
        &mut self,
        group_id: &Arc<str>,
        last_sent_at_ms: u64,
        processing: ProcessingWindow,
        noisy: bool,
    ) {
        self.unindex(group_id);
        let tenant = self.tenants.entry(group_id.clone()).or_default();
        tenant.last_sent_at_ms = last_sent_at_ms;
        tenant.processing = processing;
        if tenant.noisy != noisy {
            tenant.noisy = noisy;
            if noisy {
                self.noisy_count += 1;
            } else {
                self.noisy_count -= 1;
            }
        }
        if tenant.is_empty() {
            // A snapshot only names tenants with messages; be safe with a stray one.
            if tenant.noisy {
                self.noisy_count -= 1;
            }
            self.tenants.remove(group_id);
            return;
        }
        self.index(group_id);
    }

    /// Forgets every tenant (purge); the queue's processing history stays.
    pub(crate) fn clear(&mut self) {
        self.tenants.clear();
        self.quiet.clear();
        self.noisy.clear();
        self.quiet_timers.clear();
        self.noisy_count = 0;
    }

    /// Panics unless the tenants agree with `messages` (group, ready key or state) and the
    /// indexes with the tenants. O(n): tests only.
    pub(crate) fn check_invariants<'a>(
        &self,
        messages: impl Iterator<Item = (&'a str, Option<Slot>)>,
    ) {
        let mut expected: FxHashMap<&str, Tenant> = FxHashMap::default();
        for (group_id, slot) in messages {
            let tenant = expected.entry(group_id).or_default();
            match slot {
                Some(Slot::Ready(sent_at_ms, seq)) => {
                    tenant.ready.insert((sent_at_ms, seq));
                }
                Some(Slot::Delayed) => tenant.delayed += 1,
                Some(Slot::InFlight { .. }) => tenant.in_flight += 1,
                None => {}
            }
        }
        assert_eq!(expected.len(), self.tenants.len(), "tenants with messages");
        let mut noisy = 0;
        for (group_id, tenant) in &self.tenants {
            let want = &expected[&**group_id];
            assert_eq!(tenant.ready, want.ready, "tenant {group_id}: ready");
            assert_eq!(tenant.delayed, want.delayed, "tenant {group_id}: delayed");
            assert_eq!(tenant.in_flight, want.in_flight, "tenant {group_id}");
            assert!(
                !(group_id.is_empty() && tenant.noisy),
                "ungrouped never noisy"
            );
            if let Some(head) = tenant.head() {
                if tenant.noisy {
                    assert!(self
                        .noisy
                        .contains(&(tenant.in_flight, head, group_id.clone())));
                } else {
                    assert!(self.quiet.contains(&(head, group_id.clone())));
                }
            }
            if tenant.noisy {
                noisy += 1;
                assert!(self
                    .quiet_timers
                    .contains(&(tenant.last_sent_at_ms + QUIET_PERIOD_MS, group_id.clone())));
            }
        }
        let with_ready = self.tenants.values().filter(|t| t.head().is_some());
        assert_eq!(with_ready.count(), self.quiet.len() + self.noisy.len());
        assert_eq!(noisy, self.noisy_count);
        assert_eq!(noisy, self.quiet_timers.len());
    }
}

/// The queue-wide numbers a tenant's noisiness is decided against.
struct Shares {
    at_ms: u64,
    window_ms: u64,
    queue_recent_ms: u64,
    /// Other tenants with messages.
    others: u64,
    /// The queue's messages in flight.
    in_flight: u64,
}

/// Whether `tenant` is noisy now (AWS's rules; see the module documentation).
fn decide(config: &FairConfig, group_id: &str, tenant: &Tenant, shares: Shares) -> bool {
    let has_backlog = !tenant.ready.is_empty() || tenant.delayed > 0;
    let sending = shares.at_ms < tenant.last_sent_at_ms + QUIET_PERIOD_MS;
    if group_id.is_empty() || !has_backlog || !sending {
        return false;
    }
    let in_flight = u64::from(tenant.in_flight);
    let concurrency = tenant.in_flight >= config.in_flight_min.max(1)
        && in_flight * 100 > SHARE_PERCENT * shares.in_flight;
    let tenant_recent_ms = tenant.processing.recent_ms(shares.at_ms, shares.window_ms);
    let queue_recent_ms = shares.queue_recent_ms;
    let processing =
        queue_recent_ms > 0 && tenant_recent_ms * 100 > SHARE_PERCENT * queue_recent_ms;
    if concurrency || processing {
        return true;
    }
    // Once noisy, a tenant stays so until its shares are comparable to the quiet tenants' (AWS:
    // "until the noisy neighbor's concurrency share and processing time share drop to levels
    // comparable to quiet tenants"): at most `comparable_factor` times the average of the other
    // tenants with messages, in flight and in recent processing time.
    let factor = u64::from(config.comparable_factor);
    let others = shares.others;
    let other_in_flight = shares.in_flight.saturating_sub(in_flight);
    let other_recent_ms = queue_recent_ms.saturating_sub(tenant_recent_ms);
    let comparable = others == 0
        || (in_flight * others <= factor * other_in_flight
            && u128::from(tenant_recent_ms) * u128::from(others)
                <= u128::from(factor) * u128::from(other_recent_ms));
    tenant.noisy && !comparable
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A noisy tenant whose share fell under 10% stays noisy while it holds more than
    /// `comparable_factor` times the other tenants' average, and is quiet once it does not.
    #[test]
    fn a_noisy_tenant_stays_noisy_until_its_share_is_comparable() {
        for (factor, noisy_after_send) in [(2, true), (3, false)] {
            let config = FairConfig {
                in_flight_min: 2,
                comparable_factor: factor,
                ..FairConfig::default()
            };
            let mut fair = FairState::default();
            let mut in_flight = 0;
            let mut change = |fair: &mut FairState, group: &str, was, now, delta: i64| {
                in_flight = (in_flight as i64 + delta) as usize;
                let totals = Totals { in_flight };
                fair.update(&config, &Arc::from(group), was, now, totals);
            };
            let leased = Some(Slot::InFlight { leased_at_ms: 0 });
            for seq in 1..=4 {
                change(&mut fair, "big", None, Some(Slot::Ready(0, seq)), 0);
            }
            for seq in 1..=3 {
                change(&mut fair, "big", Some(Slot::Ready(0, seq)), leased, 1);
            }
            assert!(fair.is_noisy("big"), "3 of 3 in flight");
            // 30 quiet tenants with one in flight each: "big" holds 3 of 33 (9%).
            for tenant in 0..30 {
                let group = format!("quiet-{tenant}");
                let seq = 100 + tenant;
                change(&mut fair, &group, None, Some(Slot::Ready(0, seq)), 0);
                change(&mut fair, &group, Some(Slot::Ready(0, seq)), leased, 1);
            }
            // Its next change: 3 in flight against an average of 1.
            change(&mut fair, "big", None, Some(Slot::Ready(0, 5)), 0);
            assert_eq!(fair.is_noisy("big"), noisy_after_send, "factor {factor}");
            // Down to 2 in flight: comparable with factor 2 too.
            change(&mut fair, "big", leased, None, -1);
            assert!(!fair.is_noisy("big"), "factor {factor}");
        }
    }

    #[test]
    fn the_window_forgets_old_processing_time_gradually() {
        let mut window = ProcessingWindow::default();
        window.add(10_000, 60_000, 5_000);
        assert_eq!(window.recent_ms(10_000, 60_000), 5_000);
        // Next bucket: the old bucket weighs what is left of it inside the window.
        assert_eq!(window.recent_ms(90_000, 60_000), 5_000 * 30 / 60);
        assert_eq!(window.recent_ms(120_000, 60_000), 0);
        window.add(200_000, 60_000, 1_000);
        assert_eq!(window.recent_ms(200_000, 60_000), 1_000);
    }
}
