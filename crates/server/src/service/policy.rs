//! Queue access policies: `AddPermission` and `RemovePermission` edit the queue's `Policy`
//! document (the `sqs` crate writes the statements) as one logged change of its settings.

use leaseq_core::{Error, QueueConfigPatch};
use leaseq_sqs::error::SqsError;
use leaseq_sqs::Outcome;

use super::Service;

impl Service {
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
        self.run(|engine, journal| {
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
