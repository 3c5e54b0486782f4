//! A message's attempt history: one entry per delivery attempt (its lease, how the lease
//! changed and how the attempt ended, and which client received it), bounded, kept with the
//! message while it lives and carried into a dead-letter queue.
//!
//! The history is built by [`crate::Engine::apply`] from the records that change a lease
//! (`Lease`, `ChangeVisibility`, `Delete`, `DeadLetter`, `FailMessage`), so live traffic and
//! recovery build the same one; snapshots carry it inside `RestoreMessage`. The one fact no
//! record states, that a lease ran out, is inferred: an attempt that was neither deleted nor
//! released before the next attempt began (or the message moved) expired at its deadline, and a
//! reader sees an attempt whose deadline has passed as expired (see [`AttemptHistory::view`]).
//!
//! Only received messages pay for it: a message that was never received has none. Client
//! identities are shared (`Arc`) between every attempt of the same client.

use std::collections::VecDeque;
use std::sync::Arc;

use rustc_hash::FxHashSet;

/// The longest user agent kept, in bytes; longer ones are cut (at a character boundary).
pub const USER_AGENT_MAX_BYTES: usize = 256;

/// Who received an attempt: the client's network address and its `User-Agent`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Client {
    /// `ip:port` of the connection, as the server saw it (empty if unknown).
    pub address: String,
    /// The `User-Agent` header, at most [`USER_AGENT_MAX_BYTES`] (empty if none).
    pub user_agent: String,
}

impl Client {
    /// A client, its user agent cut to [`USER_AGENT_MAX_BYTES`].
    pub fn new(address: impl Into<String>, user_agent: &str) -> Client {
        let mut end = user_agent.len().min(USER_AGENT_MAX_BYTES);
        while !user_agent.is_char_boundary(end) {
            end -= 1;
        }
        Client {
            address: address.into(),
            user_agent: user_agent[..end].to_string(),
        }
    }
}

/// How an attempt ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttemptOutcome {
    /// Not ended: the lease is current. (A reader sees it as `Expired` once its deadline passed.)
    Leased,
    /// The lease ran out without a delete.
    Expired,
    /// Released early by a visibility change to 0.
    Released,
    /// Deleted with this attempt's receipt.
    Deleted,
    /// Failed by the consumer (fail-now): the message moved to the dead-letter queue.
    Failed,
}

impl AttemptOutcome {
    /// The outcome's name, as the API and the CLI show it.
    pub fn as_str(self) -> &'static str {
        match self {
            AttemptOutcome::Leased => "leased",
            AttemptOutcome::Expired => "expired",
            AttemptOutcome::Released => "released",
            AttemptOutcome::Deleted => "deleted",
            AttemptOutcome::Failed => "failed",
        }
    }

    /// The outcome with this name.
    pub fn from_code(code: u8) -> Option<AttemptOutcome> {
        Some(match code {
            0 => AttemptOutcome::Leased,
            1 => AttemptOutcome::Expired,
            2 => AttemptOutcome::Released,
            3 => AttemptOutcome::Deleted,
            4 => AttemptOutcome::Failed,
            _ => return None,
        })
    }

    /// Its code in the record encoding.
    pub fn code(self) -> u8 {
        match self {
            AttemptOutcome::Leased => 0,
            AttemptOutcome::Expired => 1,
            AttemptOutcome::Released => 2,
            AttemptOutcome::Deleted => 3,
            AttemptOutcome::Failed => 4,
        }
    }
}

/// One delivery attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attempt {
    /// When it was received (the lease began).
    pub received_at_ms: u64,
    /// The deadline the receive gave the lease.
    pub first_deadline_ms: u64,
    /// The lease's deadline as last changed (equal to the first without extensions).
    pub deadline_ms: u64,
    /// Visibility changes that moved the deadline later than the time of the change.
    pub extensions: u32,
    /// How it ended, so far.
    pub outcome: AttemptOutcome,
    /// When it ended (0 while `Leased`).
    pub ended_at_ms: u64,
    /// Who received it, when the server knew.
    pub client: Option<Arc<Client>>,
}

/// The attempts of one message, the most recent last.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttemptHistory {
    /// When the message was first received (`ApproximateFirstReceiveTimestamp`): kept even
    /// after the first attempt left the bounded list.
    pub first_received_at_ms: u64,
    /// The number of the first attempt kept (1 unless older ones were dropped).
    pub first_attempt: u32,
    /// When the message moved to a dead-letter queue, if it did (the latest move).
    pub dead_lettered_at_ms: Option<u64>,
    /// The attempts kept, oldest first.
    pub attempts: VecDeque<Attempt>,
}

impl AttemptHistory {
    /// A history with no attempt kept yet, of a message first received at `first_received_at_ms`
    /// (records of format version 3 and older carry only that).
    ///
    /// With room for one attempt, which it gets at once (a receive creates it): most messages
    /// are received once, and a list grown from empty took room for four (224 bytes per
    /// message received, where one takes 56) and about 130 instructions more (callgrind).
    pub fn empty(first_received_at_ms: u64, next_attempt: u32) -> AttemptHistory {
        AttemptHistory {
            first_received_at_ms,
            first_attempt: next_attempt,
            dead_lettered_at_ms: None,
            attempts: VecDeque::with_capacity(1),
        }
    }

    /// Starts attempt `number` (the previous one, if still leased, expired at its deadline),
    /// keeping at most `kept` attempts.
    pub(crate) fn begin(
        &mut self,
        number: u32,
        now_ms: u64,
        deadline_ms: u64,
        client: Option<Arc<Client>>,
        kept: usize,
    ) {
        self.end_lease();
        self.attempts.push_back(Attempt {
            received_at_ms: now_ms,
            first_deadline_ms: deadline_ms,
            deadline_ms,
            extensions: 0,
            outcome: AttemptOutcome::Leased,
            ended_at_ms: 0,
            client,
        });
        // Attempt numbers are consecutive: the first kept is the new one's, less the others.
        self.first_attempt = number + 1 - self.attempts.len() as u32;
        while self.attempts.len() > kept.max(1) {
            self.attempts.pop_front();
            self.first_attempt += 1;
        }
    }

    /// The current attempt's lease changed at `now_ms` to end at `deadline_ms`. On a standard
    /// queue the current attempt's receipt may lease its message again after the lease ended
    /// (released or run out): the attempt is leased again, not a new one.
    pub(crate) fn change(&mut self, now_ms: u64, deadline_ms: u64) {
        let Some(attempt) = self.attempts.back_mut() else {
            return;
        };
        if deadline_ms <= now_ms {
            attempt.outcome = AttemptOutcome::Released;
            attempt.ended_at_ms = now_ms;
            attempt.deadline_ms = now_ms;
        } else {
            attempt.outcome = AttemptOutcome::Leased;
            attempt.ended_at_ms = 0;
            attempt.deadline_ms = deadline_ms;
            attempt.extensions += 1;
        }
    }

    /// The message was deleted (with the current attempt's receipt) or failed at `now_ms`.
    pub(crate) fn end(&mut self, outcome: AttemptOutcome, now_ms: u64) {
        if let Some(attempt) = self.current_mut() {
            attempt.outcome = outcome;
            attempt.ended_at_ms = now_ms;
        }
    }

    /// The message moved to a dead-letter queue at `now_ms`.
    pub(crate) fn dead_lettered(&mut self, now_ms: u64) {
        self.end_lease();
        self.dead_lettered_at_ms = Some(now_ms);
    }

    /// A current attempt that is still `Leased` expired at its deadline: called when something
    /// happens that only a message whose lease ran out allows.
    fn end_lease(&mut self) {
        if let Some(attempt) = self.current_mut() {
            attempt.outcome = AttemptOutcome::Expired;
            attempt.ended_at_ms = attempt.deadline_ms;
        }
    }

    /// The last attempt, if it is still leased.
    fn current_mut(&mut self) -> Option<&mut Attempt> {
        self.attempts
            .back_mut()
            .filter(|attempt| attempt.outcome == AttemptOutcome::Leased)
    }

    /// The attempts as a reader at `now_ms` sees them, numbered: a lease whose deadline passed
    /// has expired even though nothing recorded it yet.
    pub fn view(&self, now_ms: u64) -> Vec<(u32, Attempt)> {
        self.attempts
            .iter()
            .zip(self.first_attempt..)
            .map(|(attempt, number)| {
                let mut attempt = attempt.clone();
                if attempt.outcome == AttemptOutcome::Leased && attempt.deadline_ms <= now_ms {
                    attempt.outcome = AttemptOutcome::Expired;
                    attempt.ended_at_ms = attempt.deadline_ms;
                }
                (number, attempt)
            })
            .collect()
    }
}

/// One shared [`Client`] per distinct client, so the attempts of one client (live or replayed)
/// hold one copy. Entries no attempt refers to any more are dropped when the set has doubled
/// since the last sweep, so it stays proportional to the clients still referred to.
#[derive(Debug, Default)]
pub(crate) struct Clients {
    set: FxHashSet<Arc<Client>>,
    /// The last client interned: a receive of ten messages interns the same one ten times.
    last: Option<Arc<Client>>,
    sweep_at_len: usize,
}

impl Clients {
    /// The shared copy of `client`.
    pub fn intern(&mut self, client: &Arc<Client>) -> Arc<Client> {
        if let Some(last) = &self.last {
            if Arc::ptr_eq(last, client) || **last == **client {
                return last.clone();
            }
        }
        let shared = match self.set.get(client) {
            Some(shared) => shared.clone(),
            None => {
                if self.set.len() >= self.sweep_at_len.max(64) {
                    self.last = None;
                    // Held only by the set: no attempt refers to it.
                    self.set.retain(|client| Arc::strong_count(client) > 1);
                    self.sweep_at_len = self.set.len() * 2;
                }
                self.set.insert(client.clone());
                client.clone()
            }
        };
        self.last = Some(shared.clone());
        shared
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(name: &str) -> Option<Arc<Client>> {
        Some(Arc::new(Client::new("10.0.0.1:4000", name)))
    }

    #[test]
    fn attempts_end_as_the_records_say_and_a_passed_deadline_reads_as_expired() {
        let mut history = AttemptHistory::empty(1_000, 1);
        history.begin(1, 1_000, 31_000, client("a"), 10);
        history.change(5_000, 61_000);
        history.change(6_000, 91_000);
        assert_eq!(history.attempts[0].extensions, 2);
        assert_eq!(history.attempts[0].first_deadline_ms, 31_000);
        // Before the deadline it is leased; after, a reader sees it expired.
        assert_eq!(history.view(90_000)[0].1.outcome, AttemptOutcome::Leased);
        let late = history.view(91_000);
        assert_eq!(late[0].1.outcome, AttemptOutcome::Expired);
        assert_eq!(late[0].1.ended_at_ms, 91_000);
        // The next attempt records the expiry for good.
        history.begin(2, 100_000, 130_000, client("b"), 10);
        assert_eq!(history.attempts[0].outcome, AttemptOutcome::Expired);
        history.change(101_000, 101_000);
        assert_eq!(history.attempts[1].outcome, AttemptOutcome::Released);
        assert_eq!(history.attempts[1].ended_at_ms, 101_000);
        history.begin(3, 102_000, 132_000, None, 10);
        // Released, then leased again by the same receipt: still the same attempt.
        history.change(103_000, 103_000);
        history.change(104_000, 134_000);
        assert_eq!(history.attempts[2].outcome, AttemptOutcome::Leased);
        assert_eq!(history.attempts[2].ended_at_ms, 0);
        history.end(AttemptOutcome::Deleted, 110_000);
        // A released attempt stays released when the next begins.
        let view = history.view(200_000);
        let outcomes: Vec<_> = view.iter().map(|(n, a)| (*n, a.outcome)).collect();
        assert_eq!(
            outcomes,
            [
                (1, AttemptOutcome::Expired),
                (2, AttemptOutcome::Released),
                (3, AttemptOutcome::Deleted)
            ]
        );
        assert_eq!(history.first_received_at_ms, 1_000);
    }

    #[test]
    fn only_the_last_attempts_are_kept_and_numbered_as_they_were() {
        let mut history = AttemptHistory::empty(0, 1);
        for number in 1..=7 {
            history.begin(number, number as u64 * 10, number as u64 * 10 + 5, None, 3);
        }
        let numbers: Vec<u32> = history.view(0).iter().map(|(n, _)| *n).collect();
        assert_eq!(numbers, [5, 6, 7]);
        assert_eq!(history.first_received_at_ms, 0);
        // A history restored from an old record starts numbering at the message's next attempt.
        let mut restored = AttemptHistory::empty(0, 4);
        restored.begin(4, 10, 20, None, 3);
        assert_eq!(restored.view(0)[0].0, 4);
    }

    #[test]
    fn a_dead_letter_move_ends_a_leased_attempt_as_expired() {
        let mut history = AttemptHistory::empty(0, 1);
        history.begin(1, 0, 30_000, None, 10);
        history.dead_lettered(40_000);
        assert_eq!(history.attempts[0].outcome, AttemptOutcome::Expired);
        assert_eq!(history.attempts[0].ended_at_ms, 30_000);
        assert_eq!(history.dead_lettered_at_ms, Some(40_000));
    }

    #[test]
    fn user_agents_are_cut_at_a_character_boundary() {
        let long = "é".repeat(USER_AGENT_MAX_BYTES);
        let client = Client::new("", &long);
        assert!(client.user_agent.len() <= USER_AGENT_MAX_BYTES);
        assert!(long.starts_with(&client.user_agent));
        assert_eq!(Client::new("a", "short").user_agent, "short");
    }

    #[test]
    fn clients_are_shared_and_forgotten_once_no_attempt_holds_them() {
        let mut clients = Clients::default();
        let a = clients.intern(&Arc::new(Client::new("x", "a")));
        let again = clients.intern(&Arc::new(Client::new("x", "a")));
        assert!(Arc::ptr_eq(&a, &again));
        drop((a, again));
        // Many distinct clients, none held: the set is swept instead of growing with them.
        for i in 0..10_000 {
            clients.intern(&Arc::new(Client::new(format!("10.0.0.1:{i}"), "ua")));
        }
        assert!(
            clients.set.len() < 200,
            "{} clients kept",
            clients.set.len()
        );
    }
}
