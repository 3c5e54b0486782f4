//! Queue actions: create, look up, list (with SQS's pagination), delete, attributes, purge and
//! tags.
//!
//! As in SQS, a queue's name cannot be used again for 60 seconds after the queue was deleted
//! ("You must wait 60 seconds after deleting a queue before you can create another with the same
//! name", `API_DeleteQueue`; `CreateQueue` answers `QueueDeletedRecently`). The service keeps
//! the names it deleted in the last minute, by its clock, in memory: a restarted node forgets
//! them (the wait is a courtesy of AWS's eventual consistency, not state worth a record).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use leaseq_core::{Error, QueueConfigPatch};
use leaseq_sqs::error::SqsError;
use leaseq_sqs::Outcome;

use super::Service;

/// How long a deleted queue's name stays unusable: SQS's 60 seconds.
pub(super) const RECREATE_DELAY_MS: u64 = 60_000;

/// Names of queues deleted less than [`RECREATE_DELAY_MS`] ago, with the time of the delete.
/// Only touched under the engine's lock (inside an operation), so a create and a delete of the
/// same name are ordered by it; the mutex only makes the map shareable.
#[derive(Debug, Default)]
pub(super) struct RecentlyDeleted(Mutex<HashMap<String, u64>>);

impl RecentlyDeleted {
    /// Remembers that `name` was deleted at `now_ms`, and forgets names whose wait is over (so
    /// the map holds at most the names deleted in the last minute).
    fn deleted(&self, name: &str, now_ms: u64) {
        let mut names = self.0.lock().expect("recently deleted lock");
        names.retain(|_, at_ms| now_ms < at_ms.saturating_add(RECREATE_DELAY_MS));
        names.insert(name.to_string(), now_ms);
    }

    /// Whether `name` was deleted less than [`RECREATE_DELAY_MS`] before `now_ms`.
    fn blocks(&self, name: &str, now_ms: u64) -> bool {
        let names = self.0.lock().expect("recently deleted lock");
        names
            .get(name)
            .is_some_and(|&at_ms| now_ms < at_ms.saturating_add(RECREATE_DELAY_MS))
    }
}

impl Service {
    pub(super) async fn create_queue(
        &self,
        name: String,
        attributes: QueueConfigPatch,
        tags: BTreeMap<String, String>,
    ) -> Result<Outcome, SqsError> {
        self.run(|e, j| {
            let now_ms = self.now_ms();
            // An existing queue answers as an idempotent create does, whenever it was made.
            if e.queue(&name).is_none() && self.recently_deleted.blocks(&name, now_ms) {
                return Err(SqsError::queue_deleted_recently());
            }
            Ok(e.create_queue(now_ms, &name, &attributes, tags, j)?)
        })
        .await?;
        Ok(Outcome::QueueUrl(Arc::from(name)))
    }

    pub(super) async fn get_queue_url(&self, name: &str) -> Result<Outcome, SqsError> {
        let name = self
            .read(|e| Ok(e.queue(name).ok_or(Error::QueueDoesNotExist)?.name.clone()))
            .await?;
        Ok(Outcome::QueueUrl(name))
    }

    pub(super) async fn list_queues(
        &self,
        prefix: &str,
        max_results: Option<usize>,
        next_token: Option<String>,
    ) -> Result<Outcome, SqsError> {
        let mut names = self.read(|e| Ok(e.list_queues(prefix))).await?;
        // The home namespace's names hold no separator; another's prefix holds one. Either way
        // a caller lists its own namespace's queues only (see `leaseq_sqs::namespace`).
        let separator = leaseq_sqs::namespace::SEPARATOR;
        let namespaced = prefix.contains(separator);
        names.retain(|name| name.contains(separator) == namespaced);
        let (names, next_token) = leaseq_sqs::paginate(names, max_results, next_token.as_deref())?;
        Ok(Outcome::QueueUrls { names, next_token })
    }

    pub(super) async fn list_dead_letter_sources(
        &self,
        name: &str,
        max_results: Option<usize>,
        next_token: Option<String>,
    ) -> Result<Outcome, SqsError> {
        let names = self.read(|e| e.dead_letter_sources(name)).await?;
        let (names, next_token) = leaseq_sqs::paginate(names, max_results, next_token.as_deref())?;
        Ok(Outcome::DeadLetterSourceQueues { names, next_token })
    }

    pub(super) async fn delete_queue(&self, name: &str) -> Result<Outcome, SqsError> {
        self.simple(|e, now, j| {
            e.delete_queue(now, name, j)?;
            self.recently_deleted.deleted(name, now);
            Ok(())
        })
        .await
    }

    pub(super) async fn get_queue_attributes(&self, name: &str) -> Result<Outcome, SqsError> {
        let info = self.read(|e| e.queue_info(self.now_ms(), name)).await?;
        Ok(Outcome::QueueAttributes {
            info: Box::new(info),
        })
    }

    pub(super) async fn set_queue_attributes(
        &self,
        name: &str,
        attributes: &QueueConfigPatch,
    ) -> Result<Outcome, SqsError> {
        self.simple(|e, now, j| e.set_queue_config(now, name, attributes, j))
            .await
    }

    pub(super) async fn purge_queue(&self, name: &str) -> Result<Outcome, SqsError> {
        self.run(|e, j| {
            e.purge_queue(self.now_ms(), name, j)
                .map_err(|error| SqsError::for_queue(error, name))
        })
        .await?;
        Ok(Outcome::Empty)
    }

    pub(super) async fn tag_queue(
        &self,
        name: &str,
        tags: &BTreeMap<String, String>,
    ) -> Result<Outcome, SqsError> {
        self.simple(|e, now, j| e.tag_queue(now, name, tags, j))
            .await
    }

    pub(super) async fn untag_queue(
        &self,
        name: &str,
        keys: &[String],
    ) -> Result<Outcome, SqsError> {
        self.simple(|e, now, j| e.untag_queue(now, name, keys, j))
            .await
    }

    pub(super) async fn list_queue_tags(&self, name: &str) -> Result<Outcome, SqsError> {
        let info = self.read(|e| e.queue_info(self.now_ms(), name)).await?;
        Ok(Outcome::QueueTags(info.tags))
    }
}
