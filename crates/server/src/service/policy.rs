//! Queue access policies: `AddPermission` and `RemovePermission` edit the queue's `Policy`
//! document (the `sqs` crate writes the statements) as one logged change of its settings, and
//! with `auth = "sigv4"` the policy decides what other accounts may do.
//!
//! A request names its queue's owner by the account of its `QueueUrl` (`/ACCOUNT/NAME`) or by
//! `GetQueueUrl`'s `QueueOwnerAWSAccountId`; without one, or when that is the signer's own
//! account, the queue is the caller's own and everything is allowed. Otherwise [`Service::target`]
//! takes the queue in the owner's namespace (the owner's account, the region of the caller's
//! endpoint) and [`Service::authorize`] lets the request through only if the action is one
//! another account may be granted (`leaseq_sqs::policy::evaluate::iam_action`) and the queue's
//! policy allows it (`leaseq_sqs::policy::evaluate::evaluate`). Every refusal is the same
//! `AccessDenied`, also for a queue that does not exist, so that another account learns nothing
//! about the owner's queues it may not use. The owner's own requests never consult the policy
//! (a policy cannot lock its owner out). With `auth = "none"` nothing of this applies.
//!
//! A queue's parsed policy is kept until its document changes, so a decision costs no parse
//! (see `leaseq-sqs`'s `benches/policy.rs`). The check reads the policy under the engine lock
//! and the action then runs as a separate
//! engine operation: a request that races a policy change is decided by the policy just before
//! it, as it would be had it arrived a moment earlier.

use std::sync::Arc;

use leaseq_core::{Error, QueueConfigPatch};
use leaseq_sqs::error::SqsError;
use leaseq_sqs::policy::evaluate::{self, Decision, Policy};
use leaseq_sqs::{Action, Outcome};
use parking_lot::Mutex;
use rustc_hash::FxHashMap;

use super::{Caller, Service, ServiceConfig};

/// Queues whose parsed policy is kept at most.
const POLICY_CACHE_QUEUES_MAX: usize = 4096;

/// Parsed policies by the engine name of their queue, each with the document it was parsed
/// from (a changed document is parsed again).
pub(super) type PolicyCache = Mutex<FxHashMap<String, (String, Arc<Policy>)>>;

/// Where an action's queues are, and what must allow it.
pub(super) struct Target {
    /// The prefix of the engine names of the action's queues (`leaseq_sqs::namespace`).
    pub(super) prefix: String,
    /// For a request of another account than the queue's owner: who must be allowed what.
    pub(super) grant: Option<Grant>,
}

/// A request of another account, which the queue's policy must allow.
pub(super) struct Grant {
    /// The caller's account.
    account_id: Arc<str>,
    /// The IAM action (`SendMessage` for a `SendMessageBatch`).
    iam_action: &'static str,
    /// The engine name of the queue the action addresses (its name under the target's
    /// prefix, as `leaseq_sqs::namespace::qualify` spells it), found once by [`Service::target`]
    /// so that [`Service::authorize`] need not look again.
    queue: String,
}

/// [`Service::target`] for a node configured by `config` (a cluster's router asks it before
/// any service of its own runs the action).
pub(super) fn target_of(
    config: &ServiceConfig,
    action: &Action,
    caller: &Caller,
) -> Result<Target, SqsError> {
    let own = Target {
        prefix: super::namespace_prefix(config, caller),
        grant: None,
    };
    let (Some(account_id), Some((name, Some(owner)))) = (
        &caller.account_id,
        leaseq_sqs::namespace::addressed_queue(action),
    ) else {
        return Ok(own);
    };
    if **account_id == *owner {
        return Ok(own);
    }
    // A client-sent `QueueOwnerAWSAccountId` becomes part of an engine name: only a 12-digit
    // account id may (a URL's account is one by construction).
    if !leaseq_sqs::namespace::is_account_id(owner) {
        return Err(SqsError::access_denied());
    }
    let iam_action = evaluate::iam_action(action).ok_or_else(SqsError::access_denied)?;
    // The owner's queue in the region the caller's endpoint names (SQS's queue URLs are
    // regional: `sqs.REGION.amazonaws.com/ACCOUNT/NAME`).
    let region = caller
        .namespace
        .as_ref()
        .map_or(config.region.as_str(), |namespace| &namespace.region);
    let prefix = super::prefix_of(config, owner, region);
    let queue = format!("{prefix}{name}");
    Ok(Target {
        prefix,
        grant: Some(Grant {
            account_id: account_id.clone(),
            iam_action,
            queue,
        }),
    })
}

impl Service {
    /// The namespace whose queues `action` addresses, and for another account's queue the grant
    /// its policy must give. An owner-only action on another account's queue is refused here.
    pub(super) fn target(&self, action: &Action, caller: &Caller) -> Result<Target, SqsError> {
        target_of(&self.config, action, caller)
    }

    /// Whether the policy of the grant's queue allows the grant; `AccessDenied` if not, or if
    /// there is no such queue.
    pub(super) fn authorize(&self, grant: &Grant) -> Result<(), SqsError> {
        let policy = self.parsed_policy(&grant.queue)?;
        let resource = leaseq_sqs::queue_arn(&self.context(), &grant.queue);
        let request = evaluate::Request {
            account_id: &grant.account_id,
            action: grant.iam_action,
            resource: &resource,
        };
        match policy.evaluate(&request) {
            Decision::Allow => Ok(()),
            Decision::ExplicitDeny | Decision::ImplicitDeny => Err(SqsError::access_denied()),
        }
    }

    /// The queue's policy, parsed: from the cache while the queue's document is the one it
    /// was parsed from (one comparison under the engine lock), else parsed without the lock.
    fn parsed_policy(&self, name: &str) -> Result<Arc<Policy>, SqsError> {
        let cached = {
            let engine = self.host_for(name)?.engine();
            let text = engine
                .queue(name)
                .and_then(|queue| queue.config.policy.as_deref())
                .ok_or_else(SqsError::access_denied)?;
            match self.policies.lock().get(name) {
                Some((parsed_from, policy)) if parsed_from == text => Ok(policy.clone()),
                _ => Err(text.to_string()),
            }
        };
        let text = match cached {
            Ok(policy) => return Ok(policy),
            Err(text) => text,
        };
        let policy = Arc::new(Policy::parse(&text));
        let mut cache = self.policies.lock();
        // Bounded: entries of deleted or renamed queues are dropped with the rest, now and then.
        if cache.len() >= POLICY_CACHE_QUEUES_MAX {
            cache.clear();
        }
        cache.insert(name.to_string(), (text, policy.clone()));
        Ok(policy)
    }

    pub(super) async fn add_permission(
        &self,
        name: &str,
        label: &str,
        account_ids: &[String],
        actions: &[String],
    ) -> Result<Outcome, SqsError> {
        self.edit_policy(name, |policy, arn| {
            leaseq_sqs::policy::add_permission(policy, arn, label, account_ids, actions).map(Some)
        })
        .await
    }

    pub(super) async fn remove_permission(
        &self,
        name: &str,
        label: &str,
    ) -> Result<Outcome, SqsError> {
        self.edit_policy(name, |policy, _| {
            leaseq_sqs::policy::remove_permission(policy, label)
        })
        .await
    }

    /// Replaces the queue's policy with what `edit` makes of it (given the queue's ARN), in one
    /// engine operation, so two edits never interleave.
    async fn edit_policy(
        &self,
        name: &str,
        edit: impl FnOnce(Option<&str>, &str) -> Result<Option<String>, SqsError>,
    ) -> Result<Outcome, SqsError> {
        let arn = leaseq_sqs::queue_arn(&self.context(), name);
        self.run(name, |engine, journal| {
            let queue = engine.queue(name).ok_or(Error::QueueDoesNotExist)?;
            let policy = edit(queue.config.policy.as_deref(), &arn)?;
            let patch = QueueConfigPatch {
                policy: Some(policy),
                ..QueueConfigPatch::default()
            };
            engine.set_queue_config(self.now_ms(), name, &patch, journal)?;
            Ok::<_, SqsError>(Outcome::Empty)
        })
        .await
    }
}
