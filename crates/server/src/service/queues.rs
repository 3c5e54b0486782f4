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
        // With several buckets, the creates of a name are decided one at a time, here in the
        // service of its name's bucket (or of the bucket it was placed in).
        let _placing = match self.hosts.bucket_count() {
            1 => None,
            _ => Some(self.placing.lock().await),
        };
        self.place_new_queue(&name, &attributes).await?;
        let source_fifo = attributes.fifo_queue == Some(true);
        self.check_remote_dead_letter_queue(&name, source_fifo, &attributes)
            .await?;
        // In the bucket it was placed in, if this node serves it (else `not_served_here`,
        // and the HTTP layer routes the request there).
        self.run(&name, |e, j| {
            e.create_queue(self.now_ms(), &name, &attributes, tags, j)
        })
        .await?;
        Ok(Outcome::QueueUrl(Arc::from(name)))
    }

    /// Places a new queue whose `RedrivePolicy` names a dead-letter queue of another bucket in
    /// that bucket, so that its dead-letter moves and the redrives back are records of one log
    /// rather than transfers (`crate::placements`). Decided by the service of the name's own
    /// bucket, under `placing`; a name taken there (a queue has it, or had it too recently)
    /// stays, and so does one placed before.
    async fn place_new_queue(
        &self,
        name: &str,
        attributes: &QueueConfigPatch,
    ) -> Result<(), SqsError> {
        let buckets = self.hosts.bucket_count();
        let Some(Some(policy)) = &attributes.redrive_policy else {
            return Ok(());
        };
        if buckets == 1 {
            return Ok(());
        }
        let home = leaseq_core::bucket_of(name, buckets);
        let Some(host) = self.hosts.get(home) else {
            // Routed here by its placement: decided already.
            return Ok(());
        };
        let target = &policy.dead_letter_queue;
        let bucket = self.hosts.bucket_of(target);
        if bucket == home
            || self.hosts.placements().get(name).is_some()
            || host.engine().name_taken(self.now_ms(), name)
        {
            return Ok(());
        }
        // A dead-letter queue that would not take the queue fails the create, which then
        // places nothing.
        let fifo = attributes.fifo_queue == Some(true);
        self.check_dead_letter_target_in(bucket, name, fifo, target)
            .await?;
        host.store().place(name, bucket).await.map_err(|error| {
            SqsError::service_unavailable(format!(
                "the queue could not be placed in its dead-letter queue's bucket ({error}); try again"
            ))
        })?;
        host.engine().place_elsewhere(name);
        self.hosts.placements().insert(Arc::from(name), bucket);
        if self.hosts.get(bucket).is_none() {
            self.tell_placed(bucket, name).await;
        }
        tracing::info!(
            queue = name,
            bucket,
            home,
            "placed a new queue in its dead-letter queue's bucket"
        );
        Ok(())
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
        // The source's engine checks a queue of its own bucket, unless the name was placed
        // (its engine then takes a missing one as living elsewhere, as any other bucket's).
        if bucket == self.hosts.bucket_of(source) && self.hosts.placements().get(target).is_none() {
            return Ok(());
        }
        self.check_dead_letter_target_in(bucket, source, source_fifo, target)
            .await
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use leaseq_core::{
        EngineConfig, MessageId, QueueConfigPatch, ReceiptKey, ReceiveRequest, RedrivePolicy,
        SendInput,
    };
    use leaseq_sqs::action::QueueRef;
    use leaseq_sqs::Action;

    use crate::clock::ManualClock;
    use crate::service::transfers::HandOverFailures;
    use crate::service::{Api, Caller, Service, ServiceConfig};

    const BUCKETS: u32 = 16;

    fn service(clock: &Arc<ManualClock>) -> Service {
        let config = ServiceConfig {
            engine: EngineConfig::default(),
            region: "us-east-1".into(),
            account_id: "000000000000".into(),
        };
        Service::in_memory_buckets(config, ReceiptKey::new([3; 16]), BUCKETS)
            .with_clock(clock.clone())
    }

    fn caller() -> Caller {
        Caller {
            sender_id: "AIDATEST".into(),
            address: None,
            user_agent: None,
            namespace: None,
            account_id: None,
        }
    }

    fn create(name: &str, dead_letter_queue: Option<&str>) -> Action {
        Action::CreateQueue {
            name: name.into(),
            attributes: policy(dead_letter_queue),
            tags: BTreeMap::new(),
        }
    }

    fn policy(dead_letter_queue: Option<&str>) -> QueueConfigPatch {
        QueueConfigPatch {
            redrive_policy: dead_letter_queue.map(|dlq| {
                Some(RedrivePolicy {
                    dead_letter_queue: dlq.into(),
                    max_receive_count: 1,
                })
            }),
            ..QueueConfigPatch::default()
        }
    }

    /// Sends one message to `queue` and receives it twice: the second receive makes it a
    /// dead letter (`maxReceiveCount` 1).
    async fn spend_one(service: &Service, queue: &str, now_ms: u64) {
        service
            .run(queue, |e, j| {
                let id = MessageId::from_random([now_ms as u8; 16]);
                e.send(now_ms, queue, SendInput::body("m"), id, j)
            })
            .await
            .unwrap();
        for at in [now_ms + 1, now_ms + 2] {
            let request = ReceiveRequest {
                max_messages: 10,
                visibility_timeout_seconds: Some(0),
                client: None,
            };
            service
                .run(queue, |e, j| e.receive(at, queue, request, j))
                .await
                .unwrap();
        }
    }

    fn length(service: &Service, queue: &str) -> usize {
        let engine = service.host_for(queue).unwrap().engine();
        engine.queue(queue).unwrap().len()
    }

    /// A queue created with a dead-letter queue of another bucket lives in that bucket, so its
    /// dead letters move in one record, with nothing waiting in an outbox; the name stays
    /// there for good (deleted and created again without a policy). A name already taken
    /// stays where it is, and a queue of the name's own bucket may still name the placed
    /// queue as its dead-letter queue (its engine takes it as another bucket's).
    #[tokio::test]
    async fn a_queue_lives_in_the_bucket_of_the_dead_letter_queue_it_was_created_with() {
        let clock = Arc::new(ManualClock::new(1_000));
        let service = service(&clock);
        let caller = caller();
        let bucket = |name: &str| leaseq_core::bucket_of(name, BUCKETS);
        let (queue, dlq) = ("q", "dlq");
        assert_ne!(bucket(queue), bucket(dlq));
        service.execute(create(dlq, None), &caller).await.unwrap();
        service
            .execute(create(queue, Some(dlq)), &caller)
            .await
            .unwrap();
        assert_eq!(service.placements().get(queue), Some(bucket(dlq)));
        assert!(std::ptr::eq(
            service.host_for(queue).unwrap(),
            service.host_for(dlq).unwrap()
        ));
        spend_one(&service, queue, 2_000).await;
        assert_eq!(service.transfers_waiting(), 0);
        assert_eq!(length(&service, dlq), 1);

        // Another queue of the placed name's own bucket names it as its dead-letter queue.
        let neighbour = (0..1000)
            .map(|i| format!("n{i}"))
            .find(|name| bucket(name) == bucket(queue))
            .unwrap();
        service
            .execute(create(&neighbour, None), &caller)
            .await
            .unwrap();
        let set = Action::SetQueueAttributes {
            queue: QueueRef::new(neighbour.as_str()),
            attributes: policy(Some(queue)),
        };
        service.execute(set, &caller).await.unwrap();
        spend_one(&service, &neighbour, 3_000).await;
        assert_eq!(service.transfers_waiting(), 1);
        service
            .hand_over_transfers(&mut HandOverFailures::default())
            .await;
        assert_eq!(length(&service, queue), 1);

        // Deleted, and created again after SQS's minute without a policy: the same bucket.
        let delete = Action::DeleteQueue {
            queue: QueueRef::new(queue),
        };
        service.execute(delete, &caller).await.unwrap();
        clock.advance(120_000);
        service.execute(create(queue, None), &caller).await.unwrap();
        assert!(std::ptr::eq(
            service.host_for(queue).unwrap(),
            service.host_for(dlq).unwrap()
        ));

        // A name taken in its own bucket is not placed: the create answers as for any queue
        // that exists with other settings.
        let taken = (0..1000)
            .map(|i| format!("t{i}"))
            .find(|name| bucket(name) != bucket(dlq))
            .unwrap();
        service
            .execute(create(&taken, None), &caller)
            .await
            .unwrap();
        let again = service.execute(create(&taken, Some(dlq)), &caller).await;
        assert_eq!(
            again.unwrap_err().code,
            leaseq_sqs::error::ErrorCode::QueueNameExists
        );
        assert_eq!(service.placements().get(&taken), None);
    }
}
