//! The engine host: the lease engine of one node behind a mutex, over a [`LogStore`].
//!
//! Concurrency: every operation takes the engine mutex for the few microseconds the engine needs
//! and releases it before anything slow (waiting for the log to be durable, reading bodies from
//! the disk). The engine is not `async` and never blocks, so a plain mutex is both the simplest
//! and the fastest choice on a small machine: there is no engine task to hop to.
//!
//! An operation decides and journals records under the lock ([`EngineHost::apply`]); the
//! records are appended to the log under the same lock, so the log's order is the order in which
//! they were applied; the reply then waits, without any lock, until the log is durable up to the
//! tail the operation saw ([`EngineHost::durable`]).
//!
//! Invariant: a poisoned log serves nothing. Once an append fails after the engine applied the
//! change, the engine holds state the log does not, so every later operation is refused with the
//! reason until the node restarts and recovers from what the log holds. A store that is only
//! unavailable for a while (`LogStore::writable`: reconnecting after a flush of unknown outcome)
//! turns operations away before they touch the engine, and serves again once it says so.

use std::sync::{Arc, OnceLock};

use leaseq_core::{Engine, Journal, Payload, PayloadRef};
use leaseq_sqs::error::SqsError;
use parking_lot::{Mutex, MutexGuard, RwLockReadGuard};

use crate::checkpoint::Checkpoints;
use crate::log_store::{LogError, LogStore, Lsn};
use crate::payloads;
use crate::placements::Placements;

/// The engine hosts of a node: one per bucket it serves (see `leaseq_core::transfer`), each
/// with its own engine, mutex and log. A node of one bucket (the embedded default) has one host
/// serving every queue; a single node of several buckets (`--postgres-buckets`) has every
/// bucket's; a cluster's owner of a bucket has that bucket's only, and reaches the others through
/// [`crate::service::RemoteBuckets`].
pub struct Hosts {
    /// `slots[b]` serves bucket `b` of `slots.len()`, if this node serves it.
    slots: Vec<Option<EngineHost>>,
    /// How many slots hold a host.
    served: usize,
    /// Queues placed outside their name's bucket (shared with a cluster node's other
    /// services, [`Hosts::share_placements`]).
    placements: Arc<Placements>,
}

impl Hosts {
    /// One host serving every queue.
    pub fn one(host: EngineHost) -> Hosts {
        Hosts::buckets(vec![host])
    }

    /// One host per bucket: `hosts[b]`'s engine serves bucket `b` of `hosts.len()`.
    pub fn buckets(hosts: Vec<EngineHost>) -> Hosts {
        assert!(!hosts.is_empty(), "a node serves at least one bucket");
        let buckets = hosts.len() as u32;
        Hosts::some(buckets, hosts)
    }

    /// The hosts of some of a log's `buckets`, each serving the bucket its engine's placement
    /// names (of `buckets`); the other buckets are served elsewhere.
    pub fn some(buckets: u32, hosts: Vec<EngineHost>) -> Hosts {
        assert!(buckets > 0, "a log has at least one bucket");
        let mut slots: Vec<Option<EngineHost>> = (0..buckets).map(|_| None).collect();
        let served = hosts.len();
        for host in hosts {
            let placement = host.engine().placement();
            assert_eq!(
                placement.buckets, buckets,
                "a host of a log of other buckets"
            );
            let slot = &mut slots[placement.bucket as usize];
            assert!(
                slot.is_none(),
                "two hosts serve bucket {}",
                placement.bucket
            );
            *slot = Some(host);
        }
        let placements = Arc::new(Placements::default());
        for (home, host) in (0u32..).zip(&slots) {
            let Some(host) = host else { continue };
            for (name, bucket) in host.store().placements() {
                // The bucket's own names placed elsewhere, and the queues placed in it.
                if bucket != home {
                    host.engine().place_elsewhere(&name);
                }
                placements.insert(name, bucket);
            }
        }
        Hosts {
            slots,
            served,
            placements,
        }
    }

    /// Uses `shared` for the placements from now on, with those this node's hosts' logs
    /// keep: a cluster node's services and its router read one map.
    pub fn share_placements(&mut self, shared: Arc<Placements>) {
        for (name, bucket) in self.placements.all() {
            shared.insert(name, bucket);
        }
        self.placements = shared;
    }

    /// The queues placed outside their name's bucket.
    pub fn placements(&self) -> &Arc<Placements> {
        &self.placements
    }

    /// The log's bucket count (whether this node serves them all or not).
    pub fn bucket_count(&self) -> u32 {
        self.slots.len() as u32
    }

    /// The bucket of the queue named `name` (the engine's name): its placement, else its
    /// name's hash; no hash with one bucket.
    pub fn bucket_of(&self, name: &str) -> u32 {
        self.placements.bucket_of(name, self.slots.len() as u32)
    }

    /// The host of `bucket`, if this node serves it.
    pub fn get(&self, bucket: u32) -> Option<&EngineHost> {
        self.slots.get(bucket as usize)?.as_ref()
    }

    /// The host of the queue named `name` (the engine's name), if this node serves its bucket:
    /// one hash and an index.
    pub fn for_queue(&self, name: &str) -> Option<&EngineHost> {
        self.get(self.bucket_of(name))
    }

    /// The one host of a node of one bucket. Panics with several (for tests and tools that
    /// know they run one).
    pub fn only(&self) -> &EngineHost {
        assert_eq!(
            (self.slots.len(), self.served),
            (1, 1),
            "a node of several buckets has no only host"
        );
        self.slots[0].as_ref().expect("checked above")
    }

    /// Every host this node serves, in bucket order.
    pub fn iter(&self) -> impl Iterator<Item = &EngineHost> {
        self.slots.iter().flatten()
    }

    /// Every host this node serves, with its bucket, in bucket order.
    pub fn iter_buckets(&self) -> impl Iterator<Item = (u32, &EngineHost)> {
        (0u32..)
            .zip(&self.slots)
            .filter_map(|(bucket, slot)| Some((bucket, slot.as_ref()?)))
    }

    /// How many buckets this node serves.
    pub fn len(&self) -> usize {
        self.served
    }

    /// Whether this node serves no bucket (never: see [`Hosts::some`]).
    pub fn is_empty(&self) -> bool {
        self.served == 0
    }

    /// Why a host serves nothing any more (its log failed), if one does not.
    pub fn stopped_reason(&self) -> Option<&str> {
        self.iter().find_map(EngineHost::stopped_reason)
    }

    /// Writes a checkpoint of every host now (see [`EngineHost::checkpoint`]).
    pub fn checkpoint(&self) -> Result<(), LogError> {
        self.iter().try_for_each(EngineHost::checkpoint)
    }

    /// Dates every host's snapshots by `clock` (the service's).
    pub fn set_clock(&self, clock: &crate::clock::SharedClock) {
        for host in self.iter() {
            host.set_clock(clock.clone());
        }
    }
}

/// Log volume between checkpoints, at least (see [`crate::checkpoint`]).
pub const CHECKPOINT_LOG_BYTES_MIN: u64 = 64 << 20;

/// The engine of one node, its log and its checkpoints.
pub struct EngineHost {
    /// Shared with checkpoint threads.
    engine: Arc<Mutex<Engine>>,
    store: Arc<dyn LogStore>,
    /// When the next checkpoint is due (only for a store that keeps records).
    checkpoints: Arc<Checkpoints>,
    /// Set when an append failed after the engine applied the change: the reason every request
    /// is refused until a restart.
    stopped: OnceLock<String>,
}

impl EngineHost {
    /// A host for `engine` (already recovered from `store`), checkpointing by `checkpoints`.
    pub fn new(engine: Engine, store: Arc<dyn LogStore>, checkpoints: Checkpoints) -> EngineHost {
        EngineHost {
            engine: Arc::new(Mutex::new(engine)),
            store,
            checkpoints: Arc::new(checkpoints),
            stopped: OnceLock::new(),
        }
    }

    /// The engine, locked (for inspection and administration; nothing it changes is logged).
    pub fn engine(&self) -> MutexGuard<'_, Engine> {
        self.engine.lock()
    }

    /// The log store.
    pub fn store(&self) -> &dyn LogStore {
        self.store.as_ref()
    }

    /// A message's payload, read from the log if the engine keeps only its location there. May
    /// wait for storage on the calling thread (for inspection and tests).
    pub fn payload(&self, payload: &PayloadRef) -> Result<Arc<Payload>, payloads::ReadError> {
        payloads::payload(self.store.as_ref(), payload)
    }

    /// Runs `operation` on the engine and appends the records it journaled; `observe` sees the
    /// engine and the journal before the lock is released. Returns the operation's result, the
    /// journal (for waking long polls) and the log tail the reply must wait for.
    ///
    /// The reply waits for the log's tail as it was when the operation ran, not just for its
    /// own records: an answer may depend on an earlier operation's records (a receive of a
    /// message whose send is still being synced, a delete that finds the message already
    /// deleted by a request not yet durable), and must not leave before them.
    pub fn apply<T, E>(
        &self,
        operation: impl FnOnce(&mut Engine, &mut Journal) -> Result<T, E>,
        observe: impl FnOnce(&Engine, &Journal),
    ) -> Result<(Result<T, E>, Journal, Lsn), SqsError> {
        // Room for one record before the engine's lock is taken: most operations journal one (a
        // send, a delete), and the first push onto an empty Vec grows it through the slower
        // path that also decides the capacity.
        let mut journal = Journal::with_capacity(1);
        let (result, tail_lsn) = {
            let mut engine = self.engine.lock();
            if let Some(reason) = self.stopped.get() {
                return Err(SqsError::service_unavailable(reason.clone()));
            }
            if let Err(error) = self.store.writable() {
                return Err(SqsError::service_unavailable(format!(
                    "The server cannot make requests durable now: {error}."
                )));
            }
            let result = operation(&mut engine, &mut journal);
            observe(&engine, &journal);
            match payloads::append(self.store.as_ref(), &mut engine, &journal) {
                Ok(appended) => {
                    self.checkpoints.logged(appended.bytes);
                    (result, appended.tail_lsn)
                }
                Err(error) => {
                    // The engine has applied records the log does not have: from here on its
                    // state is not what a restart would recover, so it must not answer
                    // anything. (Poisoned logs fail every call anyway; this also covers
                    // failures that do not poison the log, such as an oversized record.)
                    let error = log_failed(error);
                    let _ = self.stopped.set(error.message.clone());
                    return Err(error);
                }
            }
        };
        if !journal.is_empty() {
            self.checkpoint_if_due();
        }
        Ok((result, journal, tail_lsn))
    }

    /// Waits until the log is durable up to `tail_lsn`. A flush that poisoned the log stops
    /// the host as a failed append does: nothing is served until a restart.
    pub async fn durable(&self, tail_lsn: Lsn) -> Result<(), SqsError> {
        self.store.wait_durable(tail_lsn).await.map_err(|error| {
            let poisoned = error.is_poisoned() || error.is_storage_full();
            let error = log_failed(error);
            if poisoned {
                let _ = self.stopped.set(error.message.clone());
            }
            error
        })
    }

    /// Why the host serves nothing any more (its log failed), if it does not.
    pub fn stopped_reason(&self) -> Option<&str> {
        self.stopped.get().map(String::as_str)
    }

    /// Keeps log segments from being removed while the guard lives: taken before an operation
    /// hands out payload locations and held until they are read (never across an `.await`).
    pub fn payload_reads(&self) -> RwLockReadGuard<'_, ()> {
        self.checkpoints.payload_reads()
    }

    /// What the checkpoints of this process did (for the metrics page).
    pub fn checkpoint_stats(&self) -> crate::checkpoint::CheckpointStats {
        self.checkpoints.stats()
    }

    /// Dates snapshots by `clock` (the service's).
    pub fn set_clock(&self, clock: crate::clock::SharedClock) {
        self.checkpoints.set_clock(clock);
    }

    /// Writes a checkpoint now (at shutdown, so the next start replays almost nothing). Does
    /// nothing for a store that keeps no records.
    pub fn checkpoint(&self) -> Result<(), LogError> {
        if !self.store.keeps_records() {
            return Ok(());
        }
        self.checkpoints.run(&self.engine, self.store.as_ref())
    }

    /// Starts a checkpoint in the background if enough has been logged since the last one.
    fn checkpoint_if_due(&self) {
        if !self.checkpoints.claim_if_due() {
            return;
        }
        let (engine, store, checkpoints) = (
            self.engine.clone(),
            self.store.clone(),
            self.checkpoints.clone(),
        );
        let spawned = std::thread::Builder::new()
            .name("leaseq-checkpoint".into())
            .spawn(move || {
                if let Err(error) = checkpoints.run_claimed(&engine, store.as_ref()) {
                    tracing::error!(%error, "checkpoint failed; the log keeps growing until one succeeds");
                }
            });
        if let Err(error) = spawned {
            tracing::error!(%error, "could not start a checkpoint thread");
        }
    }
}

/// The error a client gets when the log fails. A poisoned log never recovers by itself (a retry
/// of a failed fsync could report success for data that is not on disk), so the message says
/// that a restart is needed instead of leaving clients to retry in vain.
fn log_failed(error: LogError) -> SqsError {
    tracing::error!(%error, "the log failed");
    let remedy = if error.is_storage_full() {
        " The disk is full: free space, then restart the server. It refuses every request until it is restarted."
    } else if error.is_poisoned() {
        " The server refuses every request until it is restarted."
    } else {
        ""
    };
    SqsError::service_unavailable(format!(
        "The server could not make the request durable: {error}.{remedy}"
    ))
}
