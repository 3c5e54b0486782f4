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
    /// The queue `name`, whose name hashes into another bucket, was placed in this one
    /// (`crate::placements`): the bucket's owner learns it before the queue is created here,
    /// and so routes the queue's requests to itself from the first.
    Placed { name: String },
}

impl BucketCall {
    /// The queue the call is about, which lives in the bucket it is made to; `None` for a call
    /// about the bucket, or one made to every bucket.
    fn queue(&self) -> Option<&str> {
        match self {
            BucketCall::CheckDeadLetterTarget { target, .. } => Some(target),
            BucketCall::QueueKind { name } => Some(name),
            BucketCall::Transfer(transfer) => Some(&transfer.destination),
            BucketCall::ListQueues { .. }
            | BucketCall::SourcesNaming { .. }
            | BucketCall::DestinationDeleted { .. }
            | BucketCall::Placed { .. } => None,
        }
    }
}

/// A bucket's answer to a [`BucketCall`], of the call's kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BucketAnswer {
    /// To `ListQueues` and `SourcesNaming`.
    Names(Vec<Arc<str>>),
    /// To `CheckDeadLetterTarget` (a refusal is the call's error), `DestinationDeleted` and
    /// `Placed`.
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
        if let Some(name) = call.queue() {
            // Asked by a node that has not learned the queue's placement yet: its answer here
            // would be that no such queue exists (`crate::placements`).
            let placed = self.hosts.bucket_of(name);
            if placed != bucket {
                return Err(SqsError::service_unavailable(format!(
                    "the queue {name} lives in bucket {placed}, not {bucket}; try again"
                )));
            }
        }
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
            BucketCall::Placed { name } => {
                self.hosts.placements().insert(Arc::from(name), bucket);
                Ok(BucketAnswer::Done)
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

    /// Tells every bucket but the deleted queue's own that `name` was deleted. Best effort:
    /// the delete is done and durable, and a task of a bucket that could not be told (served
    /// by no node right now) fails anyway when its next message is refused by the missing
    /// destination.
    pub(super) async fn tell_destination_deleted(&self, name: &str) {
        let own = self.hosts.bucket_of(name);
        for bucket in (0..self.hosts.bucket_count()).filter(|bucket| *bucket != own) {
            let call = BucketCall::DestinationDeleted { name: name.into() };
            self.tell(bucket, call, name, "a bucket was not told of a deleted queue; its move tasks into it fail at their next message")
                .await;
        }
    }

    /// Tells the owner of `bucket` that the queue `name` was placed there (a best effort:
    /// an owner that was not told reads the placement within a round of its watch).
    pub(super) async fn tell_placed(&self, bucket: u32, name: &str) {
        let call = BucketCall::Placed { name: name.into() };
        self.tell(bucket, call, name, "the owner of a bucket was not told of a queue placed there; it reads it from the log's placements")
            .await;
    }

    /// Makes `call` (answered `Done`) to `bucket` about the queue `name`, a best effort: a
    /// failure is logged as `unheard`.
    async fn tell(&self, bucket: u32, call: BucketCall, name: &str, unheard: &str) {
        match self.call_bucket(bucket, call).await {
            Ok(BucketAnswer::Done) => {}
            Ok(other) => tracing::error!(bucket, "{}", unexpected(other).message),
            Err(error) => {
                tracing::warn!(bucket, queue = name, error = %error.message, "{unheard}")
            }
        }
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

/// Bucket calls between a cluster's nodes: the path they are posted to, and their encoding.
///
/// A call is `MAGIC | bucket (u32) | sent at (u64 ms) | kind (u8) | its fields | tag (16)`,
/// big-endian, strings as a u32 length and UTF-8, a transfer as
/// `leaseq_core::IncomingTransfer::encode` makes it. The tag is the receipt key's
/// (`ReceiptKey::tag_for`), which every node of the cluster has from PostgreSQL and no client
/// has: a node answers only calls another node made, and none older than
/// [`wire::CALL_AGE_MAX_MS`] by its clock (every call is safe to repeat anyway). An answer is
/// `kind (u8) | its fields`; an error carries its SQS code and message.
pub mod wire {
    use std::sync::Arc;

    use leaseq_core::{IncomingTransfer, ReceiptKey, TransferAnswer};
    use leaseq_sqs::error::{ErrorCode, SqsError};

    use super::{BucketAnswer, BucketCall};

    /// Where a node posts the bucket calls it has another node answer.
    pub const PATH: &str = "/_leaseq/bucket-call";
    /// The oldest call a node answers, by its clock (the nodes' clocks are PostgreSQL's, give
    /// or take a round trip).
    pub const CALL_AGE_MAX_MS: u64 = 60_000;
    const MAGIC: &[u8; 4] = b"LQB1";
    const DOMAIN: &[u8] = b"leaseq: a bucket call between the nodes of a cluster";
    const TAG_LEN: usize = 16;

    fn put_str(out: &mut Vec<u8>, text: &str) {
        out.extend_from_slice(&(text.len() as u32).to_be_bytes());
        out.extend_from_slice(text.as_bytes());
    }

    /// A call, signed.
    pub fn encode_call(key: &ReceiptKey, now_ms: u64, bucket: u32, call: &BucketCall) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&bucket.to_be_bytes());
        out.extend_from_slice(&now_ms.to_be_bytes());
        match call {
            BucketCall::ListQueues { prefix } => {
                out.push(1);
                put_str(&mut out, prefix);
            }
            BucketCall::SourcesNaming { dead_letter_queue } => {
                out.push(2);
                put_str(&mut out, dead_letter_queue);
            }
            BucketCall::CheckDeadLetterTarget {
                source,
                source_fifo,
                target,
            } => {
                out.push(3);
                put_str(&mut out, source);
                out.push(u8::from(*source_fifo));
                put_str(&mut out, target);
            }
            BucketCall::QueueKind { name } => {
                out.push(4);
                put_str(&mut out, name);
            }
            BucketCall::DestinationDeleted { name } => {
                out.push(5);
                put_str(&mut out, name);
            }
            BucketCall::Transfer(transfer) => {
                out.push(6);
                out.extend_from_slice(&transfer.encode());
            }
            BucketCall::Placed { name } => {
                out.push(7);
                put_str(&mut out, name);
            }
        }
        let tag = key.tag_for(DOMAIN, &out);
        out.extend_from_slice(&tag);
        out
    }

    /// Reads what the bytes hold, front to back.
    struct Reader<'a>(&'a [u8]);

    impl<'a> Reader<'a> {
        fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
            if self.0.len() < n {
                return Err("truncated".into());
            }
            let (taken, rest) = self.0.split_at(n);
            self.0 = rest;
            Ok(taken)
        }

        fn u8(&mut self) -> Result<u8, String> {
            Ok(self.take(1)?[0])
        }

        fn u32(&mut self) -> Result<u32, String> {
            Ok(u32::from_be_bytes(
                self.take(4)?.try_into().expect("4 bytes"),
            ))
        }

        fn u64(&mut self) -> Result<u64, String> {
            Ok(u64::from_be_bytes(
                self.take(8)?.try_into().expect("8 bytes"),
            ))
        }

        fn string(&mut self) -> Result<String, String> {
            let len = self.u32()? as usize;
            String::from_utf8(self.take(len)?.to_vec()).map_err(|_| "not UTF-8".to_string())
        }

        fn end(&self) -> Result<(), String> {
            match self.0.len() {
                0 => Ok(()),
                n => Err(format!("{n} bytes left over")),
            }
        }
    }

    /// The bucket and the call that `bytes` hold, if `key` signed them no longer than
    /// [`CALL_AGE_MAX_MS`] before `now_ms`.
    pub fn decode_call(
        key: &ReceiptKey,
        now_ms: u64,
        bytes: &[u8],
    ) -> Result<(u32, BucketCall), String> {
        let signed_len = bytes
            .len()
            .checked_sub(TAG_LEN)
            .ok_or_else(|| "truncated".to_string())?;
        let (signed, tag) = bytes.split_at(signed_len);
        // Not constant-time: the tag is a PRF's output over the whole call, and the clock in
        // the call means a guessed tag is good for a minute at most.
        if key.tag_for(DOMAIN, signed) != tag {
            return Err("not signed by a node of this cluster".into());
        }
        let mut reader = Reader(signed);
        if reader.take(4)? != MAGIC {
            return Err("not a bucket call".into());
        }
        let bucket = reader.u32()?;
        let sent_ms = reader.u64()?;
        if sent_ms.saturating_add(CALL_AGE_MAX_MS) < now_ms {
            return Err(format!("a call sent {} ms ago", now_ms - sent_ms));
        }
        let call = match reader.u8()? {
            1 => BucketCall::ListQueues {
                prefix: reader.string()?,
            },
            2 => BucketCall::SourcesNaming {
                dead_letter_queue: reader.string()?,
            },
            3 => BucketCall::CheckDeadLetterTarget {
                source: reader.string()?,
                source_fifo: reader.u8()? != 0,
                target: reader.string()?,
            },
            4 => BucketCall::QueueKind {
                name: reader.string()?,
            },
            5 => BucketCall::DestinationDeleted {
                name: reader.string()?,
            },
            6 => {
                let transfer =
                    IncomingTransfer::decode(reader.0).map_err(|error| error.to_string())?;
                reader.0 = &[];
                BucketCall::Transfer(transfer)
            }
            7 => BucketCall::Placed {
                name: reader.string()?,
            },
            kind => return Err(format!("unknown call {kind}")),
        };
        reader.end()?;
        Ok((bucket, call))
    }

    /// An answer, or the error the call ended in.
    pub fn encode_answer(answer: &Result<BucketAnswer, SqsError>) -> Vec<u8> {
        let mut out = Vec::new();
        match answer {
            Ok(BucketAnswer::Names(names)) => {
                out.push(1);
                out.extend_from_slice(&(names.len() as u32).to_be_bytes());
                for name in names {
                    put_str(&mut out, name);
                }
            }
            Ok(BucketAnswer::Done) => out.push(2),
            Ok(BucketAnswer::Kind(kind)) => {
                out.push(3);
                out.push(match kind {
                    None => 0,
                    Some(false) => 1,
                    Some(true) => 2,
                });
            }
            Ok(BucketAnswer::Transfer(answer)) => {
                out.push(4);
                out.push(match answer {
                    TransferAnswer::Taken => 0,
                    TransferAnswer::Refused => 1,
                    TransferAnswer::OutOfOrder => 2,
                });
            }
            Err(error) => {
                out.push(5);
                put_str(&mut out, error.code.json_type());
                put_str(&mut out, &error.message);
            }
        }
        out
    }

    /// The answer `bytes` hold.
    pub fn decode_answer(bytes: &[u8]) -> Result<Result<BucketAnswer, SqsError>, String> {
        let mut reader = Reader(bytes);
        let answer = match reader.u8()? {
            1 => {
                let count = reader.u32()? as usize;
                let mut names = Vec::with_capacity(count.min(4096));
                for _ in 0..count {
                    names.push(Arc::from(reader.string()?));
                }
                Ok(BucketAnswer::Names(names))
            }
            2 => Ok(BucketAnswer::Done),
            3 => Ok(BucketAnswer::Kind(match reader.u8()? {
                0 => None,
                1 => Some(false),
                2 => Some(true),
                kind => return Err(format!("unknown queue kind {kind}")),
            })),
            4 => Ok(BucketAnswer::Transfer(match reader.u8()? {
                0 => TransferAnswer::Taken,
                1 => TransferAnswer::Refused,
                2 => TransferAnswer::OutOfOrder,
                answer => return Err(format!("unknown transfer answer {answer}")),
            })),
            5 => {
                let code = reader.string()?;
                let message = reader.string()?;
                let code = ErrorCode::ALL
                    .into_iter()
                    .find(|known| known.json_type() == code)
                    .ok_or_else(|| format!("unknown error code {code}"))?;
                Err(SqsError::new(code, message))
            }
            kind => return Err(format!("unknown answer {kind}")),
        };
        reader.end()?;
        Ok(answer)
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
        let placements = Arc::new(crate::placements::Placements::default());
        let services: [Arc<Service>; NODES] = [0, 1, 2].map(|node| {
            let served: Vec<u32> = (0..BUCKETS)
                .filter(|b| *b as usize % NODES == node)
                .collect();
            let key = ReceiptKey::new([7; 16]);
            let service = Service::in_memory_some_buckets(config(), key, BUCKETS, &served);
            Arc::new(
                service
                    .with_remote_buckets(split.clone())
                    .with_placements(placements.clone()),
            )
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
        // As the HTTP layer routes: a create placed in another service's bucket goes there.
        let execute = |action: Action| {
            let (services, placements) = (services.clone(), placements.clone());
            let caller = caller.clone();
            async move {
                let service_of = |action: &Action| {
                    let bucket = bucket_of_action(&config(), BUCKETS, &placements, action, &caller);
                    services[bucket.unwrap_or(0) as usize % NODES].clone()
                };
                let again = action.clone();
                match service_of(&action).execute(action, &caller).await {
                    Err(error) if crate::service::is_not_served_here(&error) => {
                        service_of(&again).execute(again, &caller).await
                    }
                    result => result,
                }
            }
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
        // Placed in its dead-letter queue's bucket, by the engine names.
        let bucket_of = |name: &str| leaseq_core::bucket_of(&format!("{prefix}{name}"), BUCKETS);
        assert_eq!(
            placements.get(&format!("{prefix}{queue}")),
            Some(bucket_of(&dlq))
        );
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
            queue: QueueRef::new(queue.as_str()),
            message: SendInput::body("m"),
        })
        .await
        .unwrap();
    }

    /// Every call and answer reads back as it was written; a call whose bytes changed, signed
    /// under another key, or older than a minute is refused.
    #[test]
    fn bucket_calls_read_back_and_refuse_what_no_node_signed() {
        use leaseq_core::{IncomingTransfer, Message, MessageId, TransferKind};

        let key = ReceiptKey::new([9; 16]);
        let payload =
            leaseq_core::Payload::new("hello".into(), BTreeMap::new(), None, "AIDATEST".into());
        let message = Message {
            id: MessageId::from_random([3; 16]),
            payload: leaseq_core::PayloadRef::Inline(Arc::new(payload)),
            sent_at_ms: 5,
            visible_at_ms: 6,
            leased_at_ms: 6,
            history: None,
            receive_count: 3,
            state: leaseq_core::MessageState::Ready,
            redrive_generation: 1,
            dead_letter_source: None,
            fifo: None,
        };
        let transfer = IncomingTransfer {
            source_bucket: 2,
            transfer_id: 17,
            destination: "dlq".into(),
            from_fifo: false,
            kind: TransferKind::DeadLetter,
            reason: Some("cannot parse".into()),
            message,
        };
        let calls = [
            BucketCall::ListQueues { prefix: "p".into() },
            BucketCall::SourcesNaming {
                dead_letter_queue: "dlq".into(),
            },
            BucketCall::CheckDeadLetterTarget {
                source: "q".into(),
                source_fifo: true,
                target: "dlq.fifo".into(),
            },
            BucketCall::QueueKind { name: "q".into() },
            BucketCall::DestinationDeleted { name: "q".into() },
            BucketCall::Transfer(transfer),
            BucketCall::Placed { name: "q".into() },
        ];
        for call in calls {
            let bytes = wire::encode_call(&key, 1_000, 7, &call);
            let (bucket, read) = wire::decode_call(&key, 1_000, &bytes).unwrap();
            assert_eq!((bucket, format!("{read:?}")), (7, format!("{call:?}")));
            let mut changed = bytes.clone();
            changed[10] ^= 1;
            assert!(wire::decode_call(&key, 1_000, &changed).is_err());
            let other = ReceiptKey::new([8; 16]);
            assert!(wire::decode_call(&other, 1_000, &bytes).is_err());
            let late = 1_000 + wire::CALL_AGE_MAX_MS + 1;
            assert!(wire::decode_call(&key, late, &bytes).is_err());
        }
        let answers = [
            Ok(BucketAnswer::Names(vec!["a".into(), "b".into()])),
            Ok(BucketAnswer::Done),
            Ok(BucketAnswer::Kind(None)),
            Ok(BucketAnswer::Kind(Some(true))),
            Ok(BucketAnswer::Transfer(TransferAnswer::Refused)),
            Err(SqsError::new(
                leaseq_sqs::error::ErrorCode::InvalidParameterValue,
                "Value dlq for parameter RedrivePolicy is invalid.",
            )),
        ];
        for answer in answers {
            let read = wire::decode_answer(&wire::encode_answer(&answer)).unwrap();
            assert_eq!(format!("{read:?}"), format!("{answer:?}"));
        }
    }
}
