//! Acting on a handler's outcome: delete, change visibility, quarantine, or release. The caller
//! has already checked that the lease is still held; a settle with a lost lease never happens.
//!
//! Ack only after the effect is durable is the handler's part (it returns `Ack` only then); the
//! worker's part is to delete nothing else, and to delete a failed message only after its
//! quarantined copy was accepted.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_sqs::error::SdkError;
use aws_sdk_sqs::operation::change_message_visibility::ChangeMessageVisibilityError;
use aws_sdk_sqs::operation::delete_message::DeleteMessageError;
use aws_sdk_sqs::operation::send_message::SendMessageError;
use aws_sdk_sqs::types::{MessageAttributeValue, MessageSystemAttributeName};
use tracing::{info, warn};

use crate::metrics::Metrics;
use crate::{Backoff, FailurePolicy, Message, Outcome};

/// SQS's limit on message attributes per message.
const MESSAGE_ATTRIBUTES_MAX: usize = 10;
/// The failure attributes a quarantined copy carries.
const FAILURE_ATTRIBUTES: usize = 4;
/// The longest failure reason carried, so a huge error text cannot make the copy too large.
const REASON_CHARS_MAX: usize = 1024;
/// SQS's longest visibility timeout.
const VISIBILITY_SECONDS_MAX: u64 = 43_200;

/// An outcome the worker could not carry out. The message then comes back when its lease ends.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SettleError {
    /// DeleteMessage failed.
    #[error("deleting the message failed")]
    Delete(#[source] Box<SdkError<DeleteMessageError>>),
    /// ChangeMessageVisibility failed.
    #[error("changing the message's visibility failed")]
    ChangeVisibility(#[source] Box<SdkError<ChangeMessageVisibilityError>>),
    /// Sending the quarantined copy failed, so the original was kept.
    #[error("sending the message to the quarantine queue failed")]
    Quarantine(#[source] Box<SdkError<SendMessageError>>),
    /// The original has too many attributes for the failure attributes to fit.
    #[error("the message has {count} attributes; a quarantined copy can keep at most 6")]
    QuarantineAttributes {
        /// The original's attribute count.
        count: usize,
    },
}

pub(crate) struct Settler {
    pub(crate) client: aws_sdk_sqs::Client,
    pub(crate) queue_url: Arc<str>,
    pub(crate) failure: FailurePolicy,
    pub(crate) backoff: Backoff,
    pub(crate) metrics: Arc<Metrics>,
}

impl Settler {
    pub(crate) async fn settle(
        &self,
        message: &Message,
        outcome: Outcome,
    ) -> Result<(), SettleError> {
        match outcome {
            Outcome::Ack => {
                self.delete(message).await?;
                Metrics::add(&self.metrics.acks, 1);
            }
            Outcome::Retry { after } => {
                let after = after
                    .unwrap_or_else(|| self.backoff.delay(message.attempt(), &mut rand::rng()));
                self.change_visibility(message, after).await?;
                info!(delay_ms = after.as_millis() as u64, "retry scheduled");
                Metrics::add(&self.metrics.retries, 1);
            }
            Outcome::Fail { reason } => {
                self.fail(message, &reason).await?;
                Metrics::add(&self.metrics.failures, 1);
            }
        }
        Ok(())
    }

    /// Makes the message visible at once (graceful shutdown, or an unfinished handler).
    pub(crate) async fn release(&self, message: &Message) -> Result<(), SettleError> {
        self.change_visibility(message, Duration::ZERO).await?;
        Metrics::add(&self.metrics.releases, 1);
        Ok(())
    }

    async fn fail(&self, message: &Message, reason: &str) -> Result<(), SettleError> {
        match &self.failure {
            FailurePolicy::Quarantine { queue_url } => {
                self.quarantine(message, queue_url, reason).await?;
                self.delete(message).await?;
                warn!(%reason, quarantine = %queue_url, "message failed permanently; quarantined");
            }
            FailurePolicy::ReleaseToRedrive => {
                // The backoff, not visibility 0: on a queue without a redrive policy a
                // permanently failing message would otherwise come straight back, forever.
                let after = self.backoff.delay(message.attempt(), &mut rand::rng());
                self.change_visibility(message, after).await?;
                warn!(%reason, "message failed permanently; left to the redrive policy");
            }
        }
        Ok(())
    }

    async fn quarantine(
        &self,
        message: &Message,
        queue_url: &str,
        reason: &str,
    ) -> Result<(), SettleError> {
        let attributes = self.quarantine_attributes(message, reason)?;
        let mut request = self
            .client
            .send_message()
            .queue_url(queue_url)
            .message_body(message.body())
            .set_message_attributes(Some(attributes));
        if queue_url.ends_with(".fifo") {
            // A FIFO quarantine keeps the message's group, and the message id as deduplication
            // id makes a repeated quarantine of the same message (after a failed delete) a no-op.
            let group = message
                .system_attribute(MessageSystemAttributeName::MessageGroupId)
                .unwrap_or(message.id());
            request = request
                .message_group_id(group)
                .message_deduplication_id(message.id());
        }
        request
            .send()
            .await
            .map_err(|e| SettleError::Quarantine(Box::new(e)))?;
        Ok(())
    }

    fn quarantine_attributes(
        &self,
        message: &Message,
        reason: &str,
    ) -> Result<HashMap<String, MessageAttributeValue>, SettleError> {
        let mut attributes = message.attributes().cloned().unwrap_or_default();
        if attributes.len() + FAILURE_ATTRIBUTES > MESSAGE_ATTRIBUTES_MAX {
            return Err(SettleError::QuarantineAttributes {
                count: attributes.len(),
            });
        }
        let reason: String = reason.chars().take(REASON_CHARS_MAX).collect();
        let failure = [
            ("leaseq.FailureReason", "String", reason),
            ("leaseq.SourceMessageId", "String", message.id().to_string()),
            (
                "leaseq.SourceQueueUrl",
                "String",
                self.queue_url.to_string(),
            ),
            (
                "leaseq.ReceiveCount",
                "Number",
                message.attempt().to_string(),
            ),
        ];
        for (name, data_type, value) in failure {
            let value = MessageAttributeValue::builder()
                .data_type(data_type)
                .string_value(value)
                .build()
                .expect("the data type is set");
            attributes.insert(name.to_string(), value);
        }
        Ok(attributes)
    }

    async fn delete(&self, message: &Message) -> Result<(), SettleError> {
        self.client
            .delete_message()
            .queue_url(&*self.queue_url)
            .receipt_handle(message.receipt_handle())
            .send()
            .await
            .map_err(|e| SettleError::Delete(Box::new(e)))?;
        Ok(())
    }

    async fn change_visibility(
        &self,
        message: &Message,
        after: Duration,
    ) -> Result<(), SettleError> {
        // SQS counts in whole seconds; rounding up keeps a requested delay a lower bound.
        let seconds = after.as_secs() + u64::from(after.subsec_nanos() > 0);
        let seconds = seconds.min(VISIBILITY_SECONDS_MAX) as i32;
        self.client
            .change_message_visibility()
            .queue_url(&*self.queue_url)
            .receipt_handle(message.receipt_handle())
            .visibility_timeout(seconds)
            .send()
            .await
            .map_err(|e| SettleError::ChangeVisibility(Box::new(e)))?;
        Ok(())
    }
}
