//! The idempotency boundary: a record per business idempotency key (never per receipt, which
//! changes on every attempt) that says whether the key's effect is being processed or is done.
//!
//! The protocol (seed 004): [`IdempotencyStore::begin`] inserts a *processing* record owned by
//! this attempt, or finds the existing one: *completed* means a duplicate (acknowledge without
//! running the handler), *processing* means another attempt is at work (retry later) unless the
//! record is older than `stale_after`, in which case its owner is presumed dead and this attempt
//! takes the record over. [`IdempotencyStore::complete`] marks the record completed, fenced by
//! the owner: an attempt whose record was taken over cannot complete it. With the PostgreSQL
//! store the completion can be written in the same transaction as the handler's effect, so the
//! effect and the record commit together.
//!
//! [`idempotent`] wraps a handler with this protocol.

mod memory;
#[cfg(feature = "postgres")]
mod postgres;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tracing::{info, warn};

pub use memory::MemoryStore;
#[cfg(feature = "postgres")]
pub use postgres::{PooledClient, PostgresStore};

use crate::{Handler, LeaseContext, Message, Outcome};

/// The right to process one idempotency key, held by one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    key: String,
    owner: String,
    reclaimed: bool,
}

impl Claim {
    /// The idempotency key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The owner: an id unique to the attempt that holds the claim.
    pub fn owner(&self) -> &str {
        &self.owner
    }

    /// Whether the claim took over a stale processing record: an earlier attempt may have done
    /// part of the effect, so the handler may need to reconcile.
    pub fn reclaimed(&self) -> bool {
        self.reclaimed
    }
}

/// What [`IdempotencyStore::begin`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Begin {
    /// This attempt owns the key now (a new record, or a stale one taken over).
    Claimed(Claim),
    /// Another attempt is processing the key and its record is not stale: retry later.
    InProgress,
    /// The key's effect is done: a duplicate. Carries the result recorded at completion.
    Completed {
        /// What the completing attempt recorded, if anything.
        result: Option<String>,
    },
}

/// An idempotency store failed.
#[derive(Debug, thiserror::Error)]
pub enum IdempotencyError {
    /// The claim's record now belongs to another attempt (it was taken over as stale), or is
    /// gone: this attempt must not complete it, and its uncommitted effect must be rolled back.
    #[error("the idempotency record of {key:?} is no longer owned by this attempt")]
    Fenced {
        /// The idempotency key.
        key: String,
    },
    /// A table name that is not a plain SQL identifier.
    #[error(
        "invalid table name {0:?}: use letters, digits and underscores (schema.table allowed)"
    )]
    InvalidTableName(String),
    /// The database failed.
    #[cfg(feature = "postgres")]
    #[error("database error")]
    Database(#[from] tokio_postgres::Error),
}

impl IdempotencyError {
    /// Whether trying again later may succeed (a database outage), as opposed to a fenced claim
    /// or a configuration mistake.
    pub fn is_retryable(&self) -> bool {
        match self {
            IdempotencyError::Fenced { .. } | IdempotencyError::InvalidTableName(_) => false,
            #[cfg(feature = "postgres")]
            IdempotencyError::Database(_) => true,
        }
    }
}

/// A store of idempotency records.
pub trait IdempotencyStore: Send + Sync + 'static {
    /// Claims `key` for `owner`, or reports a duplicate or an attempt in progress. A processing
    /// record older than `stale_after` is taken over.
    fn begin(
        &self,
        key: &str,
        owner: &str,
        stale_after: Duration,
    ) -> impl Future<Output = Result<Begin, IdempotencyError>> + Send;

    /// Marks the claim's key completed with `result`. Succeeds if the claim's owner already
    /// completed it; fails with [`IdempotencyError::Fenced`] if another owner holds the record.
    fn complete(
        &self,
        claim: &Claim,
        result: Option<&str>,
    ) -> impl Future<Output = Result<(), IdempotencyError>> + Send;

    /// Gives the key up (the attempt failed before its effect), so a retry can claim it at once
    /// instead of waiting for `stale_after`. A no-op if the claim no longer owns the record.
    fn release(&self, claim: &Claim) -> impl Future<Output = Result<(), IdempotencyError>> + Send;
}

/// A handler wrapped in the idempotency protocol; see [`idempotent`].
pub struct Idempotent<S, K, H> {
    store: Arc<S>,
    key: K,
    handler: H,
    stale_after: Duration,
}

/// Wraps `handler` so that each idempotency key's effect runs once, however often its messages
/// are delivered.
///
/// `key` extracts the business idempotency key from a message (`None` makes the message fail
/// permanently: without a key it cannot be processed safely). A duplicate of a completed key is
/// acknowledged without running `handler`; a key another attempt is processing is retried after
/// the backoff. `handler` gets the [`Claim`]; it may complete it itself (with the PostgreSQL
/// store, in the transaction of its effect); when it returns [`Outcome::Ack`] without having
/// done so, the wrapper completes it. On `Retry` or `Fail` the claim is released.
///
/// `stale_after` is how old a processing record must be before another attempt may take it over;
/// make it longer than the worker's `lease_total_max`, so no live attempt is ever taken over. A
/// handler that panics (or a worker that dies) leaves its record processing: the key is then
/// retried once the record is stale, and the claim reports `reclaimed()`.
pub fn idempotent<S, K, H, Fut>(
    store: Arc<S>,
    key: K,
    stale_after: Duration,
    handler: H,
) -> Idempotent<S, K, H>
where
    S: IdempotencyStore,
    K: Fn(&Message) -> Option<String> + Send + Sync + 'static,
    H: Fn(Message, LeaseContext, Claim) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send,
{
    Idempotent {
        store,
        key,
        handler,
        stale_after,
    }
}

impl<S, K, H, Fut> Handler for Idempotent<S, K, H>
where
    S: IdempotencyStore,
    K: Fn(&Message) -> Option<String> + Send + Sync + 'static,
    H: Fn(Message, LeaseContext, Claim) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send,
{
    async fn handle(&self, message: Message, lease: LeaseContext) -> Outcome {
        let Some(key) = (self.key)(&message) else {
            return Outcome::fail("the message has no idempotency key");
        };
        // The message id and attempt together name this attempt uniquely: a redelivery of the
        // same message has a higher attempt, a duplicate send has another message id.
        let owner = format!("{}#{}", message.id(), lease.attempt());
        match self.store.begin(&key, &owner, self.stale_after).await {
            Ok(Begin::Claimed(claim)) => self.run(message, lease, claim).await,
            Ok(Begin::Completed { .. }) => {
                info!(%key, "duplicate of a completed key; acknowledged without running the handler");
                Outcome::Ack
            }
            Ok(Begin::InProgress) => {
                info!(%key, "key in progress elsewhere; retrying later");
                Outcome::retry()
            }
            Err(error) => {
                warn!(%key, %error, "idempotency store failed; retrying later");
                Outcome::retry()
            }
        }
    }
}

impl<S, K, H, Fut> Idempotent<S, K, H>
where
    S: IdempotencyStore,
    H: Fn(Message, LeaseContext, Claim) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Outcome> + Send,
{
    async fn run(&self, message: Message, lease: LeaseContext, claim: Claim) -> Outcome {
        let outcome = (self.handler)(message, lease, claim.clone()).await;
        if outcome == Outcome::Ack {
            return match self.store.complete(&claim, None).await {
                Ok(()) => Outcome::Ack,
                Err(error) => {
                    warn!(key = claim.key(), %error, "completing the idempotency record failed; retrying");
                    Outcome::retry()
                }
            };
        }
        if let Err(error) = self.store.release(&claim).await {
            warn!(key = claim.key(), %error, "releasing the idempotency record failed; it goes stale");
        }
        outcome
    }
}
