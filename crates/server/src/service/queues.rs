//! Queue actions: create, look up, list (with SQS's pagination), delete, attributes, purge and
//! tags.
//!
//! As in SQS, a queue's name cannot be used again for 60 seconds after the queue was deleted
//! ("You must wait 60 seconds after deleting a queue before you can create another with the same
//! name", `API_DeleteQueue`; `CreateQueue` answers `QueueDeletedRecently`). The engine keeps the
//! names it deleted (`leaseq_core::Error::QueueDeletedRecently`), derived from its records, so a
//! restarted node still knows them.

use std::collections::BTreeMap;
use std::sync::Arc;

use leaseq_core::{Error, QueueConfigPatch};
use leaseq_sqs::error::SqsError;
use leaseq_sqs::Outcome;

use super::{BucketCall, Service};

impl Service {
    pub(super) async fn create_queue(
        &self,
        name: String,
        attributes: QueueConfigPatch,
        tags: BTreeMap<String, String>,
    ) -> Result<Outcome, SqsError> {
        let source_fifo = attributes.fifo_queue == Some(true);
        self.check_remote_dead_letter_queue(&name, source_fifo, &attributes)
            .await?;
        self.run(&name, |e, j| {
            e.create_queue(self.now_ms(), &name, &attributes, tags, j)
        })
        .await?;
        Ok(Outcome::QueueUrl(Arc::from(name)))
    }

    pub(super) async fn get_queue_url(&self, name: &str) -> Result<Outcome, SqsError> {
        let name = self
            .read(name, |e| {
                Ok(e.queue(name).ok_or(Error::QueueDoesNotExist)?.name.clone())
            })
            .await?;
        Ok(Outcome::QueueUrl(name))
    }

    pub(super) async fn list_queues(
        &self,
        prefix: &str,
        max_results: Option<usize>,
        next_token: Option<String>,
    ) -> Result<Outcome, SqsError> {
        let call = BucketCall::ListQueues {
            prefix: prefix.into(),
        };
        let mut names = self.names_in_buckets(call, None).await?;
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
        // The dead-letter queue must exist; its sources may live in any bucket.
        self.read(name, |e| e.dead_letter_sources(name).map(drop))
            .await?;
        let call = BucketCall::SourcesNaming {
            dead_letter_queue: name.into(),
        };
        let names = self.names_in_buckets(call, None).await?;
        let (names, next_token) = leaseq_sqs::paginate(names, max_results, next_token.as_deref())?;
        Ok(Outcome::DeadLetterSourceQueues { names, next_token })
    }

    pub(super) async fn delete_queue(&self, name: &str) -> Result<Outcome, SqsError> {
        let outcome = self
            .simple(name, |e, now, j| e.delete_queue(now, name, j))
            .await?;
        // Move tasks of other buckets into this queue fail now, as those of its own bucket did
        // in the delete's record.
        self.tell_destination_deleted(name).await;
        Ok(outcome)
    }

    pub(super) async fn get_queue_attributes(&self, name: &str) -> Result<Outcome, SqsError> {
        let info = self
            .read(name, |e| e.queue_info(self.now_ms(), name))
            .await?;
        Ok(Outcome::QueueAttributes {
            info: Box::new(info),
        })
    }

    pub(super) async fn set_queue_attributes(
        &self,
        name: &str,
        attributes: &QueueConfigPatch,
    ) -> Result<Outcome, SqsError> {
        let source_fifo = self
            .host_for(name)?
            .engine()
            .queue(name)
            .is_some_and(|queue| queue.fifo().is_some());
        self.check_remote_dead_letter_queue(name, source_fifo, attributes)
            .await?;
        self.simple(name, |e, now, j| {
            e.set_queue_config(now, name, attributes, j)
        })
        .await
    }

    pub(super) async fn purge_queue(&self, name: &str) -> Result<Outcome, SqsError> {
        self.run(name, |e, j| {
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
        self.simple(name, |e, now, j| e.tag_queue(now, name, tags, j))
            .await
    }

    pub(super) async fn untag_queue(
        &self,
        name: &str,
        keys: &[String],
    ) -> Result<Outcome, SqsError> {
        self.simple(name, |e, now, j| e.untag_queue(now, name, keys, j))
            .await
    }

    pub(super) async fn list_queue_tags(&self, name: &str) -> Result<Outcome, SqsError> {
        let info = self
            .read(name, |e| e.queue_info(self.now_ms(), name))
            .await?;
        Ok(Outcome::QueueTags(info.tags))
    }

    /// Checks a `RedrivePolicy` whose dead-letter queue lives in another bucket on that
    /// bucket's engine, as the source's engine checks one of its own (which it cannot: it
    /// takes a remote name as it is). Nothing to do for a policy of the source's own bucket.
    async fn check_remote_dead_letter_queue(
        &self,
        source: &str,
        source_fifo: bool,
        attributes: &QueueConfigPatch,
    ) -> Result<(), SqsError> {
        let Some(Some(policy)) = &attributes.redrive_policy else {
            return Ok(());
        };
        let target = &policy.dead_letter_queue;
        let bucket = self.hosts.bucket_of(target);
        if bucket == self.hosts.bucket_of(source) {
            return Ok(());
        }
        self.check_dead_letter_target_in(bucket, source, source_fifo, target)
            .await
    }
}
