//! Queue namespaces: a queue belongs to an account and a region, so two accounts (or one
//! account in two regions) can each have a queue `jobs`, with their own URLs and ARNs.
//!
//! The engine knows queues by one name. A queue of the server's home account and region (its
//! `account_id` and `region` settings) keeps its plain name, so every existing log, snapshot and
//! client keeps working unchanged; a queue of another namespace is known to the engine as
//! `ACCOUNT:REGION:NAME` (a queue name never holds `:`, so the two cannot collide). Clients
//! never see that form: [`qualify`] turns the names of a request into the caller's namespace
//! before the service runs it, and [`crate::queue_url`] / [`crate::queue_arn`] split it back
//! into the URL path (`/ACCOUNT/NAME`) and the ARN (`arn:aws:sqs:REGION:ACCOUNT:NAME`).
//!
//! Every queue a request names (by URL, by name, or by ARN in a redrive policy, a redrive
//! allow policy, a move task or its handle) is taken in the caller's namespace: SQS's
//! dead-letter queues, redrive sources and move-task queues must be in the account and region of
//! the queue they serve. The one exception is another account's queue named by its URL (or
//! GetQueueUrl's `QueueOwnerAWSAccountId`, see [`addressed_queue`]) under `auth = "sigv4"`: the
//! service takes it in that account's namespace and lets the queue's policy decide.
//!
//! The caller's account is that of its SigV4 key (`auth = "sigv4"`), else the home account; its
//! region is the one its endpoint's host names ([`region_of_host`]), else the home region.

use std::sync::Arc;

use leaseq_core::RedriveAllowPolicy;

use crate::action::Action;
use crate::error::SqsError;

/// What separates the account, the region and the name in the engine's name of a queue outside
/// the home namespace.
pub const SEPARATOR: char = ':';

/// An account and a region.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Namespace {
    /// The 12-digit account id.
    pub account_id: Arc<str>,
    /// The region, e.g. `us-east-1`.
    pub region: Arc<str>,
}

impl Namespace {
    /// The prefix of the engine's names of this namespace's queues: `ACCOUNT:REGION:`.
    pub fn prefix(&self) -> String {
        prefix(&self.account_id, &self.region)
    }
}

/// The prefix of the engine's names of the queues of `account_id` in `region`:
/// `ACCOUNT:REGION:` ([`Namespace::prefix`] without building a [`Namespace`]).
pub fn prefix(account_id: &str, region: &str) -> String {
    format!("{account_id}{SEPARATOR}{region}{SEPARATOR}")
}

/// Whether `text` is an AWS account id: 12 ASCII digits. The one check for every account id
/// a client sends (a queue URL's `/ACCOUNT/NAME`, `QueueOwnerAWSAccountId`) and for the
/// server's own settings.
pub fn is_account_id(text: &str) -> bool {
    text.len() == 12 && text.bytes().all(|b| b.is_ascii_digit())
}

/// `(account, region, name)` of the engine's name of a queue outside the home namespace, or
/// `None` for a home queue's plain name.
pub fn split(internal: &str) -> Option<(&str, &str, &str)> {
    let (account, rest) = internal.split_once(SEPARATOR)?;
    let (region, name) = rest.split_once(SEPARATOR)?;
    Some((account, region, name))
}

/// The name a client sees of the engine's name of a queue.
pub fn local_name(internal: &str) -> &str {
    split(internal).map_or(internal, |(_, _, name)| name)
}

/// The pattern of every action that names its one queue by `QueueUrl` (a [`QueueRef`](crate::QueueRef)
/// bound to `$queue`), except `SetQueueAttributes`, whose attributes name queues too: one list
/// for [`qualify`] and [`addressed_queue`].
macro_rules! queue_url_actions {
    ($queue:ident) => {
        Action::DeleteQueue { queue: $queue }
            | Action::GetQueueAttributes { queue: $queue }
            | Action::PurgeQueue { queue: $queue }
            | Action::SendMessage { queue: $queue, .. }
            | Action::SendMessageBatch { queue: $queue, .. }
            | Action::ReceiveMessage { queue: $queue, .. }
            | Action::DeleteMessage { queue: $queue, .. }
            | Action::DeleteMessageBatch { queue: $queue, .. }
            | Action::ChangeMessageVisibility { queue: $queue, .. }
            | Action::ChangeMessageVisibilityBatch { queue: $queue, .. }
            | Action::TagQueue { queue: $queue, .. }
            | Action::UntagQueue { queue: $queue, .. }
            | Action::ListQueueTags { queue: $queue }
            | Action::ListDeadLetterSourceQueues { queue: $queue, .. }
            | Action::AddPermission { queue: $queue, .. }
            | Action::RemovePermission { queue: $queue, .. }
            | Action::GetVisibilityAdvice { queue: $queue }
            | Action::LeaseqFailMessage { queue: $queue, .. }
            | Action::LeaseqGetMessageHistory { queue: $queue, .. }
            | Action::LeaseqPeekMessages { queue: $queue, .. }
    };
}

/// Takes every queue name of `action` into the namespace whose engine names start with
/// `prefix` ([`Namespace::prefix`]; empty for the home namespace).
///
/// A name a client sent never holds [`SEPARATOR`] (no queue name does), so no request reaches
/// a queue of another namespace by spelling its engine name: such a name is refused as an
/// invalid queue name (`CreateQueue`, `ListQueues`' prefix) or as a queue that does not exist.
pub fn qualify(action: &mut Action, prefix: &str) -> Result<(), SqsError> {
    let foreign = std::cell::Cell::new(false);
    let put = |name: &mut String| {
        foreign.set(foreign.get() | name.contains(SEPARATOR));
        if !prefix.is_empty() {
            name.insert_str(0, prefix);
        }
    };
    // A queue named by its URL (shared text, replaced only when there is a prefix).
    let put_queue = |name: &mut std::sync::Arc<str>| {
        foreign.set(foreign.get() | name.contains(SEPARATOR));
        if !prefix.is_empty() {
            *name = format!("{prefix}{name}").into();
        }
    };
    match action {
        Action::CreateQueue {
            name, attributes, ..
        } => {
            if name.contains(SEPARATOR) {
                return Err(SqsError::from(leaseq_core::Error::Malformed {
                    field: leaseq_core::Field::QueueName,
                    value: name.clone(),
                    length_max: leaseq_core::Limits::SQS.queue_name_length_max,
                }));
            }
            put(name);
            qualify_patch(attributes, prefix);
        }
        Action::GetQueueUrl { name, .. } => put(name),
        Action::ListQueues { prefix: list, .. } => {
            if list.contains(SEPARATOR) {
                return Err(SqsError::invalid_parameter(
                    "QueueNamePrefix",
                    list,
                    "Can only include alphanumeric characters, hyphens, or underscores.",
                ));
            }
            put(list)
        }
        Action::SetQueueAttributes { queue, attributes } => {
            put_queue(&mut queue.name);
            qualify_patch(attributes, prefix);
        }
        queue_url_actions!(queue) => put_queue(&mut queue.name),
        Action::StartMessageMoveTask {
            source,
            destination,
            ..
        } => {
            put(source);
            if let Some(destination) = destination {
                put(destination);
            }
        }
        Action::ListMessageMoveTasks { source, .. } => put(source),
        Action::CancelMessageMoveTask { task }
        | Action::LeaseqChangeMessageMoveTask { task, .. } => put(&mut task.source),
    }
    if foreign.get() {
        return Err(SqsError::from(leaseq_core::Error::QueueDoesNotExist));
    }
    Ok(())
}

/// The one queue an action addresses by name, and the account its request names as the
/// queue's owner, if any: the account of its `QueueUrl` (`/ACCOUNT/NAME`) or `GetQueueUrl`'s
/// `QueueOwnerAWSAccountId`. `None` for the actions about the caller's own account (creating
/// and listing queues) and for move tasks, which take queues by ARN in the caller's account.
pub fn addressed_queue(action: &Action) -> Option<(&str, Option<&str>)> {
    match action {
        Action::GetQueueUrl {
            name,
            owner_account_id,
        } => Some((name, owner_account_id.as_deref())),
        Action::SetQueueAttributes { queue, .. } | queue_url_actions!(queue) => {
            Some((&queue.name, queue.owner_account_id.as_deref()))
        }
        Action::CreateQueue { .. }
        | Action::ListQueues { .. }
        | Action::StartMessageMoveTask { .. }
        | Action::ListMessageMoveTasks { .. }
        | Action::CancelMessageMoveTask { .. }
        | Action::LeaseqChangeMessageMoveTask { .. } => None,
    }
}

/// The queue whose engine executes `action`, by the name the request gives it (before
/// [`qualify`]): the queue it addresses, the queue `CreateQueue` creates, a move task's source.
/// `None` for `ListQueues`, which gathers every bucket's queues wherever it runs.
pub fn executing_queue(action: &Action) -> Option<&str> {
    match action {
        Action::CreateQueue { name, .. } => Some(name),
        Action::StartMessageMoveTask { source, .. }
        | Action::ListMessageMoveTasks { source, .. } => Some(source),
        Action::CancelMessageMoveTask { task }
        | Action::LeaseqChangeMessageMoveTask { task, .. } => Some(&task.source),
        Action::ListQueues { .. } => None,
        _ => addressed_queue(action).map(|(name, _)| name),
    }
}

fn qualify_patch(patch: &mut leaseq_core::QueueConfigPatch, prefix: &str) {
    // Names from ARNs: `queue_name_of_arn` never yields one with a separator.
    if prefix.is_empty() {
        return;
    }
    if let Some(Some(policy)) = &mut patch.redrive_policy {
        policy.dead_letter_queue.insert_str(0, prefix);
    }
    if let Some(Some(RedriveAllowPolicy::ByQueue(names))) = &mut patch.redrive_allow_policy {
        for name in names {
            name.insert_str(0, prefix);
        }
    }
}

/// The region an SQS endpoint's host names, if any (a port is ignored):
/// `sqs.REGION.amazonaws.com` (and any other domain after `sqs.REGION.`, such as
/// `sqs.eu-west-1.localhost`), the legacy `REGION.queue.amazonaws.com` (any domain after
/// `REGION.queue.`), and `queue.amazonaws.com`, which is `us-east-1`.
pub fn region_of_host(host: &str) -> Option<&str> {
    // Every host that names a region has `sqs` or `queue` as its first or second label, which
    // a port cannot change (the port follows the third). Most requests come to a host that has
    // neither (`localhost:9324`, an internal name, an address): turn those away with two short
    // scans, before the splits below.
    if !names_sqs_in_its_first_labels(host) {
        return None;
    }
    region_of_any_host(host)
}

/// [`region_of_host`] without the early refusal (which the tests hold to it).
fn region_of_any_host(host: &str) -> Option<&str> {
    let host = match host.rsplit_once(':') {
        // Not an IPv6 literal's colon: the part after it is a port.
        Some((name, port)) if !name.contains(':') && port.bytes().all(|b| b.is_ascii_digit()) => {
            name
        }
        _ => host,
    };
    let mut labels = host.split('.');
    let (first, second, third) = (labels.next()?, labels.next(), labels.next());
    let region = match (first, second, third) {
        ("queue", Some("amazonaws"), Some("com")) => "us-east-1",
        (label, Some(region), Some(_)) if label.eq_ignore_ascii_case("sqs") => region,
        (region, Some(queue), Some(_)) if queue.eq_ignore_ascii_case("queue") => region,
        _ => return None,
    };
    is_region(region).then_some(region)
}

/// Whether the first or the second dot-separated label of `host` is `sqs` or `queue`, in any
/// case: what every host [`region_of_host`] finds a region in has.
fn names_sqs_in_its_first_labels(host: &str) -> bool {
    let is_sqs =
        |label: &str| label.eq_ignore_ascii_case("sqs") || label.eq_ignore_ascii_case("queue");
    let bytes = host.as_bytes();
    let Some(first_end) = bytes.iter().position(|&byte| byte == b'.') else {
        return false;
    };
    if is_sqs(&host[..first_end]) {
        return true;
    }
    let rest = &host[first_end + 1..];
    let second_end = rest
        .bytes()
        .position(|byte| byte == b'.')
        .unwrap_or(rest.len());
    is_sqs(&rest[..second_end])
}

/// A region name as AWS spells them: lowercase letters and digits in hyphenated parts, with a
/// digit at the end (`us-east-1`, `eu-central-2`, `us-gov-west-1`).
fn is_region(region: &str) -> bool {
    region.len() <= 32
        && region.contains('-')
        && region.ends_with(|c: char| c.is_ascii_digit())
        && region.split('-').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::QueueRef;

    #[test]
    fn hosts_name_regions() {
        // The endpoint forms of the SQS developer guide's "Amazon SQS endpoints" and the legacy
        // ones SDKs still accept (https://docs.aws.amazon.com/general/latest/gr/sqs-service.html).
        let cases = [
            ("sqs.eu-west-1.amazonaws.com", Some("eu-west-1")),
            ("sqs.us-gov-west-1.amazonaws.com:443", Some("us-gov-west-1")),
            ("ap-south-1.queue.amazonaws.com", Some("ap-south-1")),
            ("queue.amazonaws.com", Some("us-east-1")),
            ("sqs.eu-central-2.localhost:9324", Some("eu-central-2")),
            ("eu-west-3.queue.localhost", Some("eu-west-3")),
            ("localhost:9324", None),
            ("127.0.0.1:9324", None),
            ("[::1]:9324", None),
            ("sqs.localhost", None),
            ("sqs.NOT_A_REGION.localhost", None),
            ("queues.internal", None),
        ];
        for (host, region) in cases {
            assert_eq!(region_of_host(host), region, "{host}");
        }
    }

    proptest::proptest! {
        /// The early refusal turns away no host that names a region.
        #[test]
        fn the_early_refusal_keeps_every_region(
            parts in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::strategy::Just("sqs".to_string()),
                    proptest::strategy::Just("QUEUE".to_string()),
                    proptest::strategy::Just("queue".to_string()),
                    proptest::strategy::Just("eu-west-1".to_string()),
                    proptest::strategy::Just("amazonaws".to_string()),
                    proptest::strategy::Just("com".to_string()),
                    proptest::strategy::Just(".".to_string()),
                    proptest::strategy::Just(":".to_string()),
                    "[a-z0-9:.\\[\\]-]{0,5}",
                ],
                0..8,
            )
        ) {
            let host: String = parts.concat();
            proptest::prop_assert_eq!(region_of_host(&host), region_of_any_host(&host), "{}", host);
        }
    }

    #[test]
    fn account_ids_are_12_digits() {
        assert!(is_account_id("123456789012"));
        for text in [
            "",
            "12345678901",
            "1234567890123",
            "12345678901a",
            "queue",
            "１２３４５６７８９０１２",
        ] {
            assert!(!is_account_id(text), "{text:?}");
        }
    }

    #[test]
    fn names_split_and_qualify() {
        assert_eq!(split("jobs"), None);
        assert_eq!(
            split("111111111111:eu-west-1:jobs"),
            Some(("111111111111", "eu-west-1", "jobs"))
        );
        assert_eq!(local_name("111111111111:eu-west-1:jobs.fifo"), "jobs.fifo");
        let namespace = Namespace {
            account_id: "111111111111".into(),
            region: "eu-west-1".into(),
        };
        let mut action = Action::PurgeQueue {
            queue: QueueRef::new("jobs"),
        };
        qualify(&mut action, &namespace.prefix()).unwrap();
        assert_eq!(
            action,
            Action::PurgeQueue {
                queue: QueueRef::new("111111111111:eu-west-1:jobs")
            }
        );
        // No client reaches another namespace by spelling its engine name, from home or not.
        for prefix in ["", "222222222222:us-east-1:"] {
            let mut spelled = Action::PurgeQueue {
                queue: QueueRef::new("111111111111:eu-west-1:jobs"),
            };
            let error = qualify(&mut spelled, prefix).unwrap_err();
            assert_eq!(error.code, crate::ErrorCode::QueueDoesNotExist);
            let mut create = Action::CreateQueue {
                name: "111111111111:eu-west-1:jobs".into(),
                attributes: Default::default(),
                tags: Default::default(),
            };
            let error = qualify(&mut create, prefix).unwrap_err();
            assert_eq!(error.code, crate::ErrorCode::InvalidParameterValue);
            let mut list = Action::ListQueues {
                prefix: "111111111111:".into(),
                max_results: None,
                next_token: None,
            };
            assert!(qualify(&mut list, prefix).is_err());
        }
    }
}
