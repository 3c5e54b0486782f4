//! The engine: every queue, and the operations of the SQS model on them.
//!
//! Each operation takes the current time (`now_ms`, the server's clock, in milliseconds since the
//! Unix epoch) and a journal. It checks the request against the state, writes what it decided as
//! [`Record`]s into the journal, applies each record with [`Engine::apply`] and answers from the
//! resulting state. A caller that makes the state durable logs the journal's records before it
//! answers the client; recovery feeds them back through [`Engine::apply`].
//!
//! The engine reads no clock: time never goes backwards inside it (an earlier `now_ms` is taken
//! as the latest time seen), so a clock step back on the host cannot reorder leases.

use std::collections::BTreeMap;
use std::sync::Arc;

use rustc_hash::FxHashMap;

use crate::config::QueueConfig;
use crate::error::{Error, Field, Result};
use crate::fifo::FifoMessage;
use crate::history::{AttemptOutcome, Client, Clients};
use crate::limits::Limits;
use crate::message::{MessageId, Payload};
use crate::queue::{Queue, QueueCounters};
use crate::receipt::ReceiptKey;
use crate::record::Record;

mod apply;

pub use apply::FrozenEngine;
mod fail;
mod fifo;
mod history;
mod messages;
mod moves;
mod observe;
mod payload_cache;
mod queues;
mod transfer;

pub use history::{HistoryLookup, MessageHistory, HISTORY_SCAN_STEP};
pub use observe::LeaseView;
pub use payload_cache::PAYLOAD_OVERHEAD_BYTES;
pub use queues::check_dead_letter_target;

pub use moves::{
    deleted_destination, destination_deleted, MoveProgress, MoveTaskInfo, PeekedMessage,
    MOVE_RATE_MAX_PER_SECOND, MOVE_TASKS_KEPT_PER_SOURCE,
};

/// Where an operation writes the records of what it changed.
pub type Journal = Vec<Record>;

/// What a deployment may tune.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Bounds on everything.
    pub limits: Limits,
    /// Answer a delete that carries a superseded attempt's receipt with
    /// [`Error::ReceiptSuperseded`] instead of SQS's silent success. Either way it deletes nothing.
    pub reject_stale_deletes: bool,
    /// Where queues live: the buckets, and which one this engine serves (see
    /// [`crate::transfer`]). The default is one bucket: every queue is local.
    pub placement: crate::transfer::Placement,
    /// With a durable log, how much memory the payloads of recently logged messages may keep,
    /// so that receiving them soon after their send reads nothing back from the log (see
    /// `engine/payload_cache.rs`); 0 keeps none. Default [`PAYLOAD_CACHE_BYTES_DEFAULT`].
    pub payload_cache_bytes: u64,
}

/// The default payload cache budget: none, so memory holds no bodies unless asked to. With
/// 64 MiB, consuming a cached message costs 1,200 fewer instructions (callgrind: 10.7 k -> 9.6 k
/// per message), yet at `--fsync always`, where the kernel's share dominates, server CPU per
/// message moved within the noise (`scripts/bench-jetstream.sh`, A/B: W3 5.4 / 5.6 -> 5.3 /
/// 5.1 us; W1, W2 and `leaseq bench --workload w4` unchanged). It pays more at `--fsync never`
/// (W3 4.4-5.1 -> 3.9 us, measured before the backlog rule of `engine/payload_cache.rs`).
pub const PAYLOAD_CACHE_BYTES_DEFAULT: u64 = 0;

impl Default for EngineConfig {
    fn default() -> EngineConfig {
        EngineConfig {
            limits: Limits::default(),
            reject_stale_deletes: false,
            placement: crate::transfer::Placement::default(),
            payload_cache_bytes: PAYLOAD_CACHE_BYTES_DEFAULT,
        }
    }
}

/// A receive request.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReceiveRequest {
    /// At most this many messages (1 to `Limits::batch_size_max`).
    pub max_messages: usize,
    /// Lease length; the queue's visibility timeout when `None`.
    pub visibility_timeout_seconds: Option<u32>,
    /// Who is receiving, for the attempt history (see [`crate::history`]), if known.
    pub client: Option<Arc<Client>>,
}

/// One delivered message: a new attempt and its lease. The engine hands out deliveries whose
/// payload is a [`PayloadRef`] (it may be in the log); the server reads it and answers with a
/// `Delivery` of the payload itself (see [`Delivery::with_payload`]).
#[derive(Clone, Debug)]
pub struct Delivery<P = Arc<Payload>> {
    /// Stable identity.
    pub message_id: MessageId,
    /// The receipt of this attempt.
    pub receipt: String,
    /// Body and attributes.
    pub payload: P,
    /// This attempt's number (`ApproximateReceiveCount`).
    pub receive_count: u32,
    /// `SentTimestamp`.
    pub sent_at_ms: u64,
    /// `ApproximateFirstReceiveTimestamp`.
    pub first_received_at_ms: u64,
    /// When this lease runs out.
    pub visible_at_ms: u64,
    /// The queue it was dead-lettered from, if it was.
    pub dead_letter_source: Option<Arc<str>>,
    /// Group and deduplication id (FIFO queues).
    pub fifo: Option<Box<FifoMessage>>,
    /// `SequenceNumber` (FIFO queues).
    pub sequence_number: Option<String>,
    /// How the attempt before this one ended, if there was one (for logs).
    pub previous_attempt: Option<AttemptOutcome>,
    /// On a fair queue, whether the message's tenant was noisy when it was delivered (for the
    /// dwell-time metrics); `None` on other queues.
    pub tenant_noisy: Option<bool>,
}

impl<P> Delivery<P> {
    /// The same delivery with its payload replaced (resolved from a reference).
    pub fn with_payload<Q>(self, payload: Q) -> Delivery<Q> {
        Delivery {
            message_id: self.message_id,
            receipt: self.receipt,
            payload,
            receive_count: self.receive_count,
            sent_at_ms: self.sent_at_ms,
            first_received_at_ms: self.first_received_at_ms,
            visible_at_ms: self.visible_at_ms,
            dead_letter_source: self.dead_letter_source,
            fifo: self.fifo,
            sequence_number: self.sequence_number,
            previous_attempt: self.previous_attempt,
            tenant_noisy: self.tenant_noisy,
        }
    }
}

/// The answer to a send.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sent {
    /// The new message's id.
    pub message_id: MessageId,
    /// Its sequence number in the queue.
    pub seq: u64,
    /// What was stored (for the checksums the client verifies). For a duplicate, what this
    /// send carried (the client checks the checksums of what it sent).
    pub payload: Arc<Payload>,
    /// `SequenceNumber` (FIFO queues).
    pub sequence_number: Option<String>,
    /// A FIFO send whose deduplication id was in the window: accepted, not enqueued again;
    /// `message_id` and `seq` are the first message's.
    pub duplicate: bool,
}

/// What a delete did. All three are successes for the client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteOutcome {
    /// The message was deleted.
    Deleted,
    /// The message was already gone (deleted, expired, purged or dead-lettered).
    AlreadyGone,
    /// The receipt belonged to a superseded attempt: nothing was deleted.
    IgnoredStale,
}

/// Where a queue's dead letters go (see `Engine::dead_letter_target`).
#[derive(Clone, Debug)]
pub(crate) enum DeadLetterTarget {
    /// A queue of this engine, by id: one `DeadLetter` record.
    Local(u64),
    /// A queue of another bucket, by name: a transfer (see [`crate::transfer`]).
    Remote(Arc<str>),
}

/// The answer to a create.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Created {
    /// The queue's id.
    pub queue_id: u64,
    /// False when the queue existed already with compatible settings.
    pub created: bool,
}

/// A queue's settings and live counts, as of the time of the call.
#[derive(Clone, Debug)]
pub struct QueueInfo {
    /// Unique id.
    pub queue_id: u64,
    /// Name.
    pub name: Arc<str>,
    /// Settings.
    pub config: QueueConfig,
    /// Tags.
    pub tags: BTreeMap<String, String>,
    /// Creation time.
    pub created_at_ms: u64,
    /// Last change of settings.
    pub last_modified_at_ms: u64,
    /// Ready messages (exact).
    pub ready: usize,
    /// Leased messages (exact).
    pub in_flight: usize,
    /// Delayed messages (exact).
    pub delayed: usize,
    /// `SentTimestamp` of the oldest ready message.
    pub oldest_ready_sent_at_ms: Option<u64>,
    /// What happened so far.
    pub counters: QueueCounters,
    /// Requests with a superseded attempt's receipt since this process started (not durable;
    /// see [`Queue::stale_receipts_seen`]).
    pub stale_receipts_seen: u64,
    /// A fair queue's noisy tenants, most in flight first (`None`: no fair state; see
    /// [`crate::fair`]).
    pub noisy_groups: Option<Vec<NoisyGroup>>,
}

/// A noisy tenant of a fair queue, as [`QueueInfo`] shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NoisyGroup {
    /// Its group id.
    pub group_id: Arc<str>,
    /// Its messages in flight.
    pub in_flight: u32,
    /// Its ready messages.
    pub ready: usize,
    /// Its delayed messages.
    pub delayed: u32,
}

/// All queues and their messages.
#[derive(Debug)]
pub struct Engine {
    config: EngineConfig,
    key: ReceiptKey,
    queues: FxHashMap<u64, Queue>,
    names: BTreeMap<Arc<str>, u64>,
    next_queue_id: u64,
    clock_ms: u64,
    /// Move tasks by id (running, paused, and the most recent finished ones).
    moves: BTreeMap<u64, crate::moves::MoveTask>,
    /// The clients of the attempts in message histories, one copy each.
    clients: Clients,
    /// Names of the queues deleted in the last `Limits::queue_name_reuse_delay_ms`, with the
    /// time of each delete: a create of such a name is refused until then (SQS's
    /// `QueueDeletedRecently`). Derived from `DeleteQueue` records and repeated by snapshots
    /// (`RestoreDeletedQueue`), so a restart keeps them.
    deleted_names: BTreeMap<Arc<str>, u64>,
    /// Messages on their way to other buckets, and the marks of transfers from them.
    transfers: transfer::Transfers,
    /// Names that hash into this engine's bucket but whose queues were placed in another
    /// bucket (their dead-letter queue's, `docs/design/cluster.md`, "Placement"): a name of
    /// them not found here lives elsewhere, as another bucket's name does. The service says so
    /// ([`Engine::place_elsewhere`]); the store, not this engine's log, keeps placements.
    placed_elsewhere: std::collections::BTreeSet<Arc<str>>,
    /// The payloads kept in memory after their records were logged.
    payload_cache: payload_cache::PayloadCache,
}

impl Engine {
    /// An engine without queues; `key` seals receipts.
    pub fn new(config: EngineConfig, key: ReceiptKey) -> Engine {
        Engine {
            key,
            queues: FxHashMap::default(),
            names: BTreeMap::new(),
            next_queue_id: config.placement.first_queue_id(),
            config,
            clock_ms: 0,
            moves: BTreeMap::new(),
            clients: Clients::default(),
            deleted_names: BTreeMap::new(),
            transfers: transfer::Transfers::default(),
            placed_elsewhere: std::collections::BTreeSet::new(),
            payload_cache: payload_cache::PayloadCache::default(),
        }
    }

    /// Takes note that the queue named `name`, whose name hashes into this engine's bucket,
    /// lives in another bucket: this engine then hands its dead letters and redriven messages
    /// over there, and leaves checks of it to the bucket that has it, as for any other
    /// bucket's queue.
    pub fn place_elsewhere(&mut self, name: &str) {
        self.placed_elsewhere.insert(Arc::from(name));
    }

    /// Whether a queue named `name` that is not in this engine may live in another bucket.
    pub(crate) fn is_remote(&self, name: &str) -> bool {
        self.config.placement.is_remote(name) || self.placed_elsewhere.contains(name)
    }

    /// Whether the name `name` is taken in this engine at `now_ms`: a queue has it, or one
    /// that had it was deleted too recently for another to take it (`QueueDeletedRecently`).
    pub fn name_taken(&self, now_ms: u64, name: &str) -> bool {
        self.names.contains_key(name) || self.deleted_recently(name, now_ms)
    }

    /// Where queues live, and which bucket this engine serves.
    pub fn placement(&self) -> crate::transfer::Placement {
        self.config.placement
    }

    /// The bounds in force.
    pub fn limits(&self) -> &Limits {
        &self.config.limits
    }

    /// The latest time the engine has seen.
    pub fn clock_ms(&self) -> u64 {
        self.clock_ms
    }

    fn tick(&mut self, now_ms: u64) -> u64 {
        self.clock_ms = self.clock_ms.max(now_ms);
        self.clock_ms
    }

    /// Whether a queue named `name` was deleted less than the reuse delay before `now_ms`.
    fn deleted_recently(&self, name: &str, now_ms: u64) -> bool {
        let delay_ms = self.config.limits.queue_name_reuse_delay_ms;
        self.deleted_names
            .get(name)
            .is_some_and(|&at_ms| now_ms < at_ms.saturating_add(delay_ms))
    }

    /// Remembers that `name`'s queue was deleted at `now_ms`, and forgets the names whose wait
    /// is over (so the map holds at most the names deleted within the reuse delay).
    fn remember_deleted_name(&mut self, name: Arc<str>, now_ms: u64) {
        let delay_ms = self.config.limits.queue_name_reuse_delay_ms;
        self.deleted_names
            .retain(|_, at_ms| now_ms < at_ms.saturating_add(delay_ms));
        if delay_ms > 0 {
            self.deleted_names.insert(name, now_ms);
        }
    }

    fn id_of(&self, name: &str) -> Result<u64> {
        self.names
            .get(name)
            .copied()
            .ok_or(Error::QueueDoesNotExist)
    }

    fn queue_mut(&mut self, id: u64) -> &mut Queue {
        self.queues
            .get_mut(&id)
            .expect("queue id from the name index")
    }

    /// Read-only access to a queue (its state as of the last operation on it).
    pub fn queue(&self, name: &str) -> Option<&Queue> {
        self.names.get(name).and_then(|id| self.queues.get(id))
    }

    /// Brings the named queue forward to `now_ms` and returns its id.
    fn advanced(&mut self, now_ms: u64, name: &str) -> Result<(u64, u64)> {
        let now_ms = self.tick(now_ms);
        let id = self.id_of(name)?;
        self.queue_mut(id).advance(now_ms);
        Ok((now_ms, id))
    }

    fn commit(&mut self, record: Record, journal: &mut Journal) {
        self.apply(&record);
        journal.push(record);
    }
}

pub(crate) fn check_visibility(seconds: u32, limits: &Limits) -> Result<()> {
    if seconds > limits.visibility_timeout_max_seconds {
        return Err(Error::out_of_range(
            Field::LeaseVisibilityTimeout,
            seconds,
            0u32,
            limits.visibility_timeout_max_seconds,
        ));
    }
    Ok(())
}

/// SQS queue names: 1 to 80 characters from A-Z, a-z, 0-9, `-` and `_`; a FIFO queue's name
/// ends in `.fifo` (counted in the 80). The server may prefix a name with its namespace,
/// `ACCOUNT:REGION:` (a queue of another account or region than its home one); the rule is
/// the name's after that prefix.
pub fn validate_queue_name(full_name: &str, limits: &Limits) -> Result<()> {
    let name = full_name.rsplit(':').next().unwrap_or(full_name);
    let base = name.strip_suffix(".fifo").unwrap_or(name);
    let valid = !base.is_empty()
        && name.len() <= limits.queue_name_length_max
        && base
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !valid {
        return Err(Error::Malformed {
            field: Field::QueueName,
            value: name.to_string(),
            length_max: limits.queue_name_length_max,
        });
    }
    Ok(())
}
