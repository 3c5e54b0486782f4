//! Queue operations: create, delete, settings, tags, listing, purge.
use std::collections::BTreeMap;
use std::sync::Arc;

use crate::config::{QueueConfig, QueueConfigPatch};
use crate::error::{Error, Field, Result, TargetProblem};
use crate::fifo::FifoConfig;
use crate::queue::Queue;
use crate::record::Record;

use super::{validate_queue_name, Created, Engine, Journal, QueueInfo};

impl Engine {
    /// Creates a queue, or returns the existing one if every setting `patch` names matches it.
    pub fn create_queue(
        &mut self,
        now_ms: u64,
        name: &str,
        patch: &QueueConfigPatch,
        tags: BTreeMap<String, String>,
        journal: &mut Journal,
    ) -> Result<Created> {
        let now_ms = self.tick(now_ms);
        validate_queue_name(name, &self.config.limits)?;
        if !name.ends_with(".fifo") {
            // SQS knows the FIFO settings on FIFO queues only: a standard queue's create may not
            // name them, `FifoQueue=false` included, whether the queue exists or not.
            if patch.fifo_queue == Some(false) {
                return Err(Error::UnknownSetting("FifoQueue".into()));
            }
            if let Some(setting) = patch.fifo_setting() {
                return Err(Error::UnknownSetting(setting.into()));
            }
        }
        if let Ok(id) = self.id_of(name) {
            let queue = &self.queues[&id];
            return match queue.config.conflicting_setting(patch) {
                Some(setting) => Err(Error::QueueAlreadyExists(setting)),
                None => Ok(Created {
                    queue_id: id,
                    created: false,
                }),
            };
        }
        // An existing queue answered above, as an idempotent create does, whenever it was made.
        if self.deleted_recently(name, now_ms) {
            return Err(Error::QueueDeletedRecently);
        }
        let fifo = patch.fifo_queue == Some(true);
        if fifo != name.ends_with(".fifo") {
            return Err(Error::FifoNameMismatch {
                name: name.to_string(),
                length_max: self.config.limits.queue_name_length_max,
            });
        }
        let base = QueueConfig {
            fifo: fifo.then(FifoConfig::default),
            ..QueueConfig::default()
        };
        let config = base.patched(patch, &self.config.limits)?;
        self.check_redrive_policy(name, &config)?;
        self.check_tag_count(tags.len())?;
        let queue_id = self.next_queue_id;
        let record = Record::CreateQueue {
            now_ms,
            queue_id,
            name: name.to_string(),
            config: Box::new(config),
            tags,
        };
        self.commit(record, journal);
        Ok(Created {
            queue_id,
            created: true,
        })
    }

    fn check_redrive_policy(&self, source: &str, config: &QueueConfig) -> Result<()> {
        let Some(policy) = config.redrive_policy.as_ref() else {
            return Ok(());
        };
        let target = self.queue(&policy.dead_letter_queue);
        if target.is_none() && self.is_remote(&policy.dead_letter_queue) {
            // A queue of another bucket: its engine is the one that knows it, so whoever
            // serves both buckets checks it there, with `check_dead_letter_target` (see
            // `crate::transfer`).
            return Ok(());
        }
        check_dead_letter_target(source, config.fifo.is_some(), target)
    }

    fn check_tag_count(&self, count: usize) -> Result<()> {
        if count > self.config.limits.tags_max {
            return Err(Error::TooMany {
                field: Field::Tags,
                count,
                max: self.config.limits.tags_max,
            });
        }
        Ok(())
    }

    /// Deletes a queue and its messages. Queues that name it as dead-letter queue keep their
    /// policy; their messages stay where they are until it exists again. Its name cannot be
    /// used again for `Limits::queue_name_reuse_delay_ms` (SQS's 60 seconds).
    pub fn delete_queue(&mut self, now_ms: u64, name: &str, journal: &mut Journal) -> Result<()> {
        let now_ms = self.tick(now_ms);
        let queue_id = self.id_of(name)?;
        self.commit(Record::DeleteQueue { now_ms, queue_id }, journal);
        Ok(())
    }

    /// Changes settings.
    pub fn set_queue_config(
        &mut self,
        now_ms: u64,
        name: &str,
        patch: &QueueConfigPatch,
        journal: &mut Journal,
    ) -> Result<()> {
        let (now_ms, queue_id) = self.advanced(now_ms, name)?;
        // Whether a queue is FIFO is decided when it is created. SQS knows `FifoQueue` on FIFO
        // queues only, where `true` changes nothing and `false` is refused.
        match (
            patch.fifo_queue,
            self.queues[&queue_id].config.fifo.is_some(),
        ) {
            (None, _) | (Some(true), true) => {}
            (Some(false), true) => return Err(Error::QueueTypeChange),
            (Some(_), false) => return Err(Error::UnknownSetting("FifoQueue".into())),
        }
        let config = self.queues[&queue_id]
            .config
            .patched(patch, &self.config.limits)?;
        if patch.redrive_policy.is_some() {
            self.check_redrive_policy(name, &config)?;
        }
        let record = Record::SetConfig {
            now_ms,
            queue_id,
            config: Box::new(config),
        };
        self.commit(record, journal);
        Ok(())
    }

    /// Adds or overwrites tags.
    pub fn tag_queue(
        &mut self,
        now_ms: u64,
        name: &str,
        tags: &BTreeMap<String, String>,
        journal: &mut Journal,
    ) -> Result<()> {
        let now_ms = self.tick(now_ms);
        let queue_id = self.id_of(name)?;
        let mut next = self.queues[&queue_id].tags.clone();
        next.extend(tags.iter().map(|(k, v)| (k.clone(), v.clone())));
        self.check_tag_count(next.len())?;
        self.commit(
            Record::SetTags {
                now_ms,
                queue_id,
                tags: next,
            },
            journal,
        );
        Ok(())
    }

    /// Removes tags by key (absent keys are ignored).
    pub fn untag_queue(
        &mut self,
        now_ms: u64,
        name: &str,
        keys: &[String],
        journal: &mut Journal,
    ) -> Result<()> {
        let now_ms = self.tick(now_ms);
        let queue_id = self.id_of(name)?;
        let mut next = self.queues[&queue_id].tags.clone();
        for key in keys {
            next.remove(key);
        }
        self.commit(
            Record::SetTags {
                now_ms,
                queue_id,
                tags: next,
            },
            journal,
        );
        Ok(())
    }

    /// Settings and exact counts.
    pub fn queue_info(&mut self, now_ms: u64, name: &str) -> Result<QueueInfo> {
        let (_, queue_id) = self.advanced(now_ms, name)?;
        let queue = &self.queues[&queue_id];
        Ok(QueueInfo {
            queue_id,
            name: queue.name.clone(),
            config: queue.config.clone(),
            tags: queue.tags.clone(),
            created_at_ms: queue.created_at_ms,
            last_modified_at_ms: queue.last_modified_at_ms,
            ready: queue.ready_count(),
            in_flight: queue.in_flight_count(),
            delayed: queue.delayed_count(),
            oldest_ready_sent_at_ms: queue.oldest_ready_sent_at_ms(),
            counters: queue.counters.clone(),
            stale_receipts_seen: queue.stale_receipts_seen,
            noisy_groups: queue.fair().map(|fair| {
                fair.noisy_tenants()
                    .into_iter()
                    .map(|(group_id, tenant)| crate::engine::NoisyGroup {
                        group_id,
                        in_flight: tenant.in_flight,
                        ready: tenant.ready_count(),
                        delayed: tenant.delayed,
                    })
                    .collect()
            }),
        })
    }

    /// Queue names starting with `prefix`, in order.
    pub fn list_queues(&self, prefix: &str) -> Vec<Arc<str>> {
        self.names
            .range::<str, _>((
                std::ops::Bound::Included(prefix),
                std::ops::Bound::Unbounded,
            ))
            .take_while(|(name, _)| name.starts_with(prefix))
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// The names a create refuses as of the engine's clock (queues deleted less than
    /// `Limits::queue_name_reuse_delay_ms` ago), each with the time of its delete, in order.
    pub fn recently_deleted_queues(&self) -> Vec<(Arc<str>, u64)> {
        self.deleted_names
            .iter()
            .filter(|(name, _)| self.deleted_recently(name, self.clock_ms))
            .map(|(name, &deleted_at_ms)| (name.clone(), deleted_at_ms))
            .collect()
    }

    /// Names of the queues whose redrive policy targets `name`, in order.
    pub fn dead_letter_sources(&self, name: &str) -> Result<Vec<Arc<str>>> {
        self.id_of(name)?;
        Ok(self.sources_naming(name))
    }

    /// Names of this engine's queues whose redrive policy targets `name`, in order, wherever
    /// `name` lives (a dead-letter queue of another bucket has sources here too).
    pub fn sources_naming(&self, name: &str) -> Vec<Arc<str>> {
        self.names
            .iter()
            .filter(|(_, id)| {
                self.queues[id]
                    .config
                    .redrive_policy
                    .as_ref()
                    .is_some_and(|policy| policy.dead_letter_queue == name)
            })
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Deletes every message of a queue; at most once per `Limits::purge_interval_ms`.
    pub fn purge_queue(&mut self, now_ms: u64, name: &str, journal: &mut Journal) -> Result<()> {
        let (now_ms, queue_id) = self.advanced(now_ms, name)?;
        let interval_ms = self.config.limits.purge_interval_ms;
        if let Some(last) = self.queues[&queue_id].last_purge_at_ms {
            if now_ms < last + interval_ms {
                return Err(Error::PurgeInProgress);
            }
        }
        self.commit(Record::Purge { now_ms, queue_id }, journal);
        Ok(())
    }

    /// When time alone next changes the named queue (see [`Queue::next_deadline_ms`]).
    pub fn next_deadline_ms(&self, name: &str) -> Option<u64> {
        self.queue(name).and_then(Queue::next_deadline_ms)
    }
}

/// Whether `target` (`None`: no such queue) may be the dead-letter queue of the queue named
/// `source` (a FIFO queue or not): it exists, is of the same kind, is not the source itself,
/// and its `RedriveAllowPolicy` allows the source. What a `RedrivePolicy` is checked against
/// when it is set, by the engine for a queue of its own and by the caller on the target's
/// engine for a queue of another bucket.
pub fn check_dead_letter_target(
    source: &str,
    source_fifo: bool,
    target: Option<&Queue>,
) -> Result<()> {
    let target = target.ok_or(Error::NotFound(Field::RedrivePolicy))?;
    let refuse = |problem| {
        Err(Error::InvalidTarget {
            field: Field::RedrivePolicy,
            queue: source.to_string(),
            target: target.name.to_string(),
            source_fifo,
            problem,
        })
    };
    if target.config.fifo.is_some() != source_fifo {
        return refuse(TargetProblem::OtherKind);
    }
    if &*target.name == source {
        return refuse(TargetProblem::Itself);
    }
    let allowed = target
        .config
        .redrive_allow_policy
        .as_ref()
        .is_none_or(|allow| allow.allows(source));
    if !allowed {
        return refuse(TargetProblem::NotAllowed);
    }
    Ok(())
}
