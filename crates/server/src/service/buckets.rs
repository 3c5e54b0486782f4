//! What one bucket asks of another: the few requests that cross buckets.
//!
//! Every SQS action but the listings concerns one queue and runs on its bucket's engine alone.
//! What crosses buckets is a short list, each a [`BucketCall`] answered by the other bucket's
//! engine ([`Service::answer_bucket_call`]): a listing gathers every bucket's names; a
//! `RedrivePolicy`, a move task or a delete checks or tells the bucket of the queue it names; a
//! transfer hands a message over (see `transfers.rs`). A call to a bucket this node serves is
//! answered here, by the same function; a call to one it does not (a cluster's node owns some
//! buckets only) goes to [`RemoteBuckets`], which the cluster provides and which forwards it to
//! the bucket's owner. So the code that crosses buckets is written once, for one node and many.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use leaseq_core::{Engine, IncomingTransfer, TransferAnswer};
use leaseq_sqs::error::SqsError;

use super::Service;

/// A request to the engine of one bucket from outside it.
#[derive(Clone, Debug)]
pub enum BucketCall {
    /// The names of the bucket's queues that start with `prefix`, in name order.
    ListQueues { prefix: String },
    /// The bucket's queues whose `RedrivePolicy` names `dead_letter_queue`, in name order.
    SourcesNaming { dead_letter_queue: String },
    /// Whether the bucket's queue `target` may be the dead-letter queue of `source` (of
    /// another bucket; a FIFO queue or not): see `leaseq_core::engine::check_dead_letter_target`.
    CheckDeadLetterTarget {
        source: String,
        source_fifo: bool,
        target: String,
    },
    /// Whether the bucket has a queue `name`, and whether it is a FIFO queue.
    QueueKind { name: String },
    /// The queue `name` (of another bucket) was deleted: the bucket's move tasks into it fail.
    DestinationDeleted { name: String },
    /// A message handed over from another bucket: taken or refused (`leaseq_core::transfer`).
    /// Answered once the answer is durable in the bucket's log.
    Transfer(IncomingTransfer),
}

/// A bucket's answer to a [`BucketCall`], of the call's kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BucketAnswer {
    /// To `ListQueues` and `SourcesNaming`.
    Names(Vec<Arc<str>>),
    /// To `CheckDeadLetterTarget` (a refusal is the call's error) and `DestinationDeleted`.
    Done,
    /// To `QueueKind`: `None` when there is no such queue, else whether it is a FIFO queue.
    Kind(Option<bool>),
    /// To `Transfer`.
    Transfer(TransferAnswer),
}

/// The answer of [`RemoteBuckets::call`].
pub type RemoteAnswer<'a> =
    Pin<Box<dyn Future<Output = Result<BucketAnswer, SqsError>> + Send + 'a>>;

/// The buckets of the log that this node's service does not serve: a cluster's, which forwards
/// each call to the bucket's owner.
pub trait RemoteBuckets: Send + Sync + 'static {
    /// Has the owner of `bucket` answer `call`. An error whose outcome is unknown (the answer
    /// was lost) is `ServiceUnavailable`; every call is safe to repeat.
    fn call(&self, bucket: u32, call: BucketCall) -> RemoteAnswer<'_>;
}

/// A mistaken answer to a call (of another kind than the call's): the protocol between nodes
/// was broken.
fn unexpected(answer: BucketAnswer) -> SqsError {
    SqsError::internal(format!("a bucket answered a call with {answer:?}"))
}

impl Service {
    /// Has the engine of `bucket` answer `call`: here if this node serves it, else through the
    /// remote buckets.
    pub(super) async fn call_bucket(
        &self,
        bucket: u32,
        call: BucketCall,
    ) -> Result<BucketAnswer, SqsError> {
        if self.hosts.get(bucket).is_some() {
            return self.answer_bucket_call(bucket, call).await;
        }
        match &self.remote {
            Some(remote) => remote.call(bucket, call).await,
            None => Err(SqsError::service_unavailable(format!(
                "bucket {bucket} of the log is served by no node right now; try again"
            ))),
        }
    }

    /// Answers `call` on the engine of `bucket`, which this node serves (a call from another
    /// bucket of this node, or from another node). Each answer waits until the log is durable
    /// up to what it saw or journaled.
    pub async fn answer_bucket_call(
        &self,
        bucket: u32,
        call: BucketCall,
    ) -> Result<BucketAnswer, SqsError> {
        let host = self.hosts.get(bucket).ok_or_else(|| {
            SqsError::service_unavailable(format!("this node does not serve bucket {bucket}"))
        })?;
        let names = |names: fn(&Engine, &str) -> Vec<Arc<str>>, argument: String| {
            self.run_on(host, move |engine, _| {
                Ok::<_, SqsError>(BucketAnswer::Names(names(engine, &argument)))
            })
        };
        match call {
            BucketCall::ListQueues { prefix } => names(Engine::list_queues, prefix).await,
            BucketCall::SourcesNaming { dead_letter_queue } => {
                names(Engine::sources_naming, dead_letter_queue).await
            }
            BucketCall::CheckDeadLetterTarget {
                source,
                source_fifo,
                target,
            } => {
                self.run_on(host, |engine, _| {
                    leaseq_core::engine::check_dead_letter_target(
                        &source,
                        source_fifo,
                        engine.queue(&target),
                    )
                    .map(|()| BucketAnswer::Done)
                })
                .await
            }
            BucketCall::QueueKind { name } => {
                self.run_on(host, |engine, _| {
                    let kind = engine.queue(&name).map(|queue| queue.fifo().is_some());
                    Ok::<_, SqsError>(BucketAnswer::Kind(kind))
                })
                .await
            }
            BucketCall::DestinationDeleted { name } => {
                self.run_on(host, |engine, journal| {
                    engine.remote_destination_deleted(self.now_ms(), &name, journal);
                    Ok::<_, SqsError>(BucketAnswer::Done)
                })
                .await
            }
            BucketCall::Transfer(transfer) => {
                self.run_on(host, |engine, journal| {
                    let answer = engine.ingest_transfer(self.now_ms(), transfer, journal);
                    Ok::<_, SqsError>(BucketAnswer::Transfer(answer))
                })
                .await
            }
        }
    }

    /// The names `call` (`ListQueues` or `SourcesNaming`) finds in every bucket but `except`,
    /// merged in name order.
    pub(super) async fn names_in_buckets(
        &self,
        call: BucketCall,
        except: Option<u32>,
    ) -> Result<Vec<Arc<str>>, SqsError> {
        let mut all = Vec::new();
        let buckets = self.hosts.bucket_count();
        for bucket in (0..buckets).filter(|bucket| Some(*bucket) != except) {
            match self.call_bucket(bucket, call.clone()).await? {
                BucketAnswer::Names(names) => all.extend(names),
                other => return Err(unexpected(other)),
            }
        }
        if buckets > 1 {
            all.sort_unstable();
        }
        Ok(all)
    }

    /// `check_dead_letter_target` on the bucket of `target`, for a `source` of another bucket.
    pub(super) async fn check_dead_letter_target_in(
        &self,
        bucket: u32,
        source: &str,
        source_fifo: bool,
        target: &str,
    ) -> Result<(), SqsError> {
        let call = BucketCall::CheckDeadLetterTarget {
            source: source.into(),
            source_fifo,
            target: target.into(),
        };
        match self.call_bucket(bucket, call).await? {
            BucketAnswer::Done => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    /// Whether the queue `name` exists (in its bucket), and whether it is a FIFO queue.
    pub(super) async fn queue_kind(&self, name: &str) -> Result<Option<bool>, SqsError> {
        let call = BucketCall::QueueKind { name: name.into() };
        match self.call_bucket(self.hosts.bucket_of(name), call).await? {
            BucketAnswer::Kind(kind) => Ok(kind),
            other => Err(unexpected(other)),
        }
    }

    /// Tells every bucket but the deleted queue's own that `name` was deleted.
    pub(super) async fn tell_destination_deleted(&self, name: &str) -> Result<(), SqsError> {
        let own = self.hosts.bucket_of(name);
        for bucket in (0..self.hosts.bucket_count()).filter(|bucket| *bucket != own) {
            let call = BucketCall::DestinationDeleted { name: name.into() };
            match self.call_bucket(bucket, call).await? {
                BucketAnswer::Done => {}
                other => return Err(unexpected(other)),
            }
        }
        Ok(())
    }

    /// Hands `transfer` to the bucket of its destination; its answer, durable there.
    pub(super) async fn hand_transfer_to(
        &self,
        transfer: IncomingTransfer,
    ) -> Result<TransferAnswer, SqsError> {
        let bucket = self.hosts.bucket_of(&transfer.destination);
        match self
            .call_bucket(bucket, BucketCall::Transfer(transfer))
            .await?
        {
            BucketAnswer::Transfer(answer) => Ok(answer),
            other => Err(unexpected(other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::{OnceLock, Weak};

    use leaseq_core::{EngineConfig, QueueConfigPatch, ReceiptKey, RedrivePolicy, SendInput};
    use leaseq_sqs::namespace::Namespace;
    use leaseq_sqs::{Action, Outcome, QueueRef};

    use super::*;
    use crate::service::{bucket_of_action, Api, Caller, ServiceConfig};

    /// Services splitting a log's buckets (bucket `b` on service `b % NODES`), each reaching
    /// the others' through calls.
    struct Split(OnceLock<[Weak<Service>; NODES]>);

    const NODES: usize = 3;

    impl RemoteBuckets for Split {
        fn call(&self, bucket: u32, call: BucketCall) -> RemoteAnswer<'_> {
            Box::pin(async move {
                let service = self.0.get().unwrap()[bucket as usize % NODES]
                    .upgrade()
                    .unwrap();
                service.answer_bucket_call(bucket, call).await
            })
        }
    }

    fn config() -> ServiceConfig {
        ServiceConfig {
            engine: EngineConfig::default(),
            region: "us-east-1".into(),
            account_id: "000000000000".into(),
        }
    }

    /// Requests of another namespace go to the service of their engine name's bucket (the
    /// namespace's prefix included), and what crosses buckets reaches the other service:
    /// the remote dead-letter queue's check and the listing. (Dead letters between services
    /// run in the conformance suite, `MemoryStore::split`.)
    #[tokio::test]
    async fn a_namespaced_request_runs_where_its_engine_name_lives() {
        // Not a power of two: FNV-1a's low bits alone would tie a name's bucket parity to its
        // prefix's.
        const BUCKETS: u32 = 9;
        let split = Arc::new(Split(OnceLock::new()));
        let services: [Arc<Service>; NODES] = [0, 1, 2].map(|node| {
            let served: Vec<u32> = (0..BUCKETS)
                .filter(|b| *b as usize % NODES == node)
                .collect();
            let key = ReceiptKey::new([7; 16]);
            let service = Service::in_memory_some_buckets(config(), key, BUCKETS, &served);
            Arc::new(service.with_remote_buckets(split.clone()))
        });
        let _ = split.0.set(services.each_ref().map(Arc::downgrade));
        let caller = Caller {
            sender_id: "AIDATEST".into(),
            address: None,
            user_agent: None,
            namespace: Some(Namespace {
                account_id: "111111111111".into(),
                region: "eu-west-1".into(),
            }),
            account_id: None,
        };
        let prefix = caller.namespace.as_ref().unwrap().prefix();
        // Names whose engine names (with the prefix) fall on different services, and whose
        // plain names fall on the other ones: a route by the plain name would miss both.
        let node = |name: &str| leaseq_core::bucket_of(name, BUCKETS) as usize % NODES;
        let pick = |on: usize| {
            (0..1000)
                .map(|i| format!("q{i}"))
                .find(|name| node(&format!("{prefix}{name}")) == on && node(name) != on)
                .unwrap()
        };
        let (queue, dlq) = (pick(0), pick(1));
        let execute = |action: Action| {
            let bucket = bucket_of_action(&config(), BUCKETS, &action, &caller).unwrap_or(0);
            let service = services[bucket as usize % NODES].clone();
            let caller = caller.clone();
            async move { service.execute(action, &caller).await }
        };
        let create = |name: &str, attributes: QueueConfigPatch| Action::CreateQueue {
            name: name.into(),
            attributes,
            tags: BTreeMap::new(),
        };
        execute(create(&dlq, QueueConfigPatch::default()))
            .await
            .unwrap();
        let policy = |dead_letter_queue: &str| QueueConfigPatch {
            redrive_policy: Some(Some(RedrivePolicy {
                dead_letter_queue: dead_letter_queue.into(),
                max_receive_count: 1,
            })),
            ..QueueConfigPatch::default()
        };
        // Checked on the other service: a dead-letter queue that does not exist is refused.
        let refused = execute(create(&queue, policy("missing"))).await;
        assert_eq!(
            refused.unwrap_err().code,
            leaseq_sqs::error::ErrorCode::InvalidParameterValue
        );
        execute(create(&queue, policy(&dlq))).await.unwrap();
        let listed = execute(Action::ListQueues {
            prefix: String::new(),
            max_results: None,
            next_token: None,
        })
        .await
        .unwrap();
        let Outcome::QueueUrls { names, .. } = listed else {
            panic!("{listed:?}")
        };
        let mut expected = vec![format!("{prefix}{dlq}"), format!("{prefix}{queue}")];
        expected.sort();
        assert_eq!(
            names.iter().map(|n| n.to_string()).collect::<Vec<_>>(),
            expected
        );
        execute(Action::SendMessage {
            queue: QueueRef::new(&queue),
            message: SendInput::body("m"),
        })
        .await
        .unwrap();
    }
}
