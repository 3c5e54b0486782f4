//! Acting on a handler's outcome: delete, change visibility, quarantine, or release. The caller
//! has already checked that the lease is still held; a settle with a lost lease never happens.
//!
//! Ack only after the effect is durable is the handler's part (it returns `Ack` only then); the
//! worker's part is to delete nothing else, and to delete a failed message only after its
//! quarantined copy was accepted.
//!
//! A quarantine is one `LeaseqFailMessage` call where the server has that action (leaseq) and
//! the quarantine queue is the source queue's dead-letter queue: the server moves the message
//! there with its reason, atomically, under the lease's rules. Elsewhere (Amazon SQS answers
//! the action as unknown, or the quarantine queue is some other queue) it is a copy sent to the
//! quarantine queue, then a delete of the original. Which one applies is found out at the first
//! failure and remembered.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use aws_sdk_sqs::error::ProvideErrorMetadata as _;
use aws_sdk_sqs::error::SdkError;
use aws_sdk_sqs::operation::change_message_visibility::ChangeMessageVisibilityError;
use aws_sdk_sqs::operation::delete_message::DeleteMessageError;
use aws_sdk_sqs::operation::get_queue_attributes::GetQueueAttributesError;
use aws_sdk_sqs::operation::send_message::SendMessageError;
use aws_sdk_sqs::types::{MessageAttributeValue, MessageSystemAttributeName, QueueAttributeName};
use tracing::{info, warn};

use crate::metrics::Metrics;
use crate::{Backoff, FailurePolicy, Message, Outcome};

/// SQS's limit on message attributes per message.
const MESSAGE_ATTRIBUTES_MAX: usize = 10;
/// The failure attributes a quarantined copy carries when there is room for them.
const FAILURE_ATTRIBUTES: usize = 4;
/// The attribute that carries all of them at once when there is room for one only.
const FAILURE_SUMMARY_ATTRIBUTE: &str = "leaseq.Failure";
/// The error codes of an action the server does not have: the legacy (Query) code, which SQS
/// sends in `x-amzn-query-error` and the SDK reports, and the JSON protocol's `__type`.
const UNKNOWN_ACTION_CODES: [&str; 2] = ["InvalidAction", "UnknownOperationException"];
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
    /// `LeaseqFailMessage` failed (other than as an unknown action), so the message was kept.
    #[error("LeaseqFailMessage failed")]
    FailMessage(#[source] Box<SdkError<DeleteMessageError>>),
    /// Reading the queues' attributes, to tell whether `LeaseqFailMessage` applies, failed.
    #[error("reading the queues' attributes failed")]
    QueueAttributes(#[source] Box<SdkError<GetQueueAttributesError>>),
}

/// Whether `Outcome::Fail` with a quarantine queue uses `LeaseqFailMessage` (see the module
/// comment): not known yet (0, the initial value), yes, or no.
const FAIL_NOW_YES: u8 = 1;
const FAIL_NOW_NO: u8 = 2;

pub(crate) struct Settler {
    pub(crate) client: aws_sdk_sqs::Client,
    pub(crate) queue_url: Arc<str>,
    pub(crate) failure: FailurePolicy,
    pub(crate) backoff: Backoff,
    pub(crate) metrics: Arc<Metrics>,
    /// `FAIL_NOW_*`; shared by the worker's tasks, so the first failure finds it out for all.
    pub(crate) fail_now: AtomicU8,
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
                if self.fail_now_applies(queue_url).await? && self.fail_now(message, reason).await?
                {
                    warn!(%reason, quarantine = %queue_url, "message failed permanently; moved to the dead-letter queue");
                    return Ok(());
                }
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

    /// Whether the quarantine queue is the source queue's dead-letter queue (the target of its
    /// `RedrivePolicy`), the one `LeaseqFailMessage` moves messages to; found out once.
    async fn fail_now_applies(&self, quarantine_url: &str) -> Result<bool, SettleError> {
        match self.fail_now.load(Ordering::Relaxed) {
            FAIL_NOW_YES => return Ok(true),
            FAIL_NOW_NO => return Ok(false),
            _ => {}
        }
        let attribute = |url: &str, name: QueueAttributeName| {
            let request = self.client.get_queue_attributes().queue_url(url);
            async move {
                let output = request
                    .attribute_names(name.clone())
                    .send()
                    .await
                    .map_err(|e| SettleError::QueueAttributes(Box::new(e)))?;
                Ok::<_, SettleError>(output.attributes().and_then(|a| a.get(&name)).cloned())
            }
        };
        let redrive_policy = attribute(&self.queue_url, QueueAttributeName::RedrivePolicy).await?;
        let quarantine_arn = attribute(quarantine_url, QueueAttributeName::QueueArn).await?;
        // The policy is `{"deadLetterTargetArn":"arn:…","maxReceiveCount":…}`: the only quoted
        // ARN in it is the target's.
        let applies = match (redrive_policy, quarantine_arn) {
            (Some(policy), Some(arn)) => policy.contains(&format!("\"{arn}\"")),
            _ => false,
        };
        let state = if applies { FAIL_NOW_YES } else { FAIL_NOW_NO };
        self.fail_now.store(state, Ordering::Relaxed);
        Ok(applies)
    }

    /// `LeaseqFailMessage`: true if the server moved the message; false if it does not have the
    /// action (then it never will: remembered, and the caller copies instead).
    ///
    /// The SDK has no operation for leaseq's action, so this is a `DeleteMessage` request
    /// turned into it before it is signed: the target and the body change, the answer of both
    /// is an empty object, and an error is read as DeleteMessage's (code and message).
    async fn fail_now(&self, message: &Message, reason: &str) -> Result<bool, SettleError> {
        let reason: String = reason.chars().take(REASON_CHARS_MAX).collect();
        let body = format!(
            "{{\"QueueUrl\":{},\"ReceiptHandle\":{},\"Reason\":{}}}",
            json_string(&self.queue_url),
            json_string(message.receipt_handle()),
            json_string(&reason)
        );
        let result = self
            .client
            .delete_message()
            .queue_url(&*self.queue_url)
            .receipt_handle(message.receipt_handle())
            .customize()
            .mutate_request(move |request| {
                let headers = request.headers_mut();
                headers.insert("X-Amz-Target", "AmazonSQS.LeaseqFailMessage");
                headers.insert("Content-Length", body.len().to_string());
                *request.body_mut() = body.clone().into();
            })
            .send()
            .await;
        match result {
            Ok(_) => Ok(true),
            Err(error)
                if error
                    .code()
                    .is_some_and(|c| UNKNOWN_ACTION_CODES.contains(&c)) =>
            {
                info!(
                    code = error.code(),
                    "the server has no LeaseqFailMessage; quarantining by copy"
                );
                self.fail_now.store(FAIL_NOW_NO, Ordering::Relaxed);
                Ok(false)
            }
            Err(error) => Err(SettleError::FailMessage(Box::new(error))),
        }
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

    /// The copy's attributes: the original's, plus the failure's as four attributes where
    /// SQS's limit of ten leaves room for them, else as one (`leaseq.Failure`, the four in a JSON
    /// object), else none: then the failure is in the log only (and the copy is still sent,
    /// since losing the message would be worse than losing its reason).
    fn quarantine_attributes(
        &self,
        message: &Message,
        reason: &str,
    ) -> Result<HashMap<String, MessageAttributeValue>, SettleError> {
        let mut attributes = message.attributes().cloned().unwrap_or_default();
        let reason: String = reason.chars().take(REASON_CHARS_MAX).collect();
        let room = MESSAGE_ATTRIBUTES_MAX.saturating_sub(attributes.len());
        if room < FAILURE_ATTRIBUTES {
            if room == 0 {
                warn!(
                    %reason,
                    source_message_id = message.id(),
                    source_queue_url = %self.queue_url,
                    receive_count = message.attempt(),
                    "the message has {MESSAGE_ATTRIBUTES_MAX} attributes: its quarantined copy cannot carry the failure"
                );
                return Ok(attributes);
            }
            let summary = format!(
                "{{\"FailureReason\":{},\"SourceMessageId\":{},\"SourceQueueUrl\":{},\"ReceiveCount\":{}}}",
                json_string(&reason),
                json_string(message.id()),
                json_string(&self.queue_url),
                message.attempt()
            );
            let value = MessageAttributeValue::builder()
                .data_type("String")
                .string_value(summary)
                .build()
                .expect("the data type is set");
            attributes.insert(FAILURE_SUMMARY_ATTRIBUTE.to_string(), value);
            return Ok(attributes);
        }
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

/// `value` as a JSON string literal (RFC 8259: quotes, backslashes and control characters
/// escaped).
fn json_string(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 => out.push_str(&format!("\\u{:04x}", u32::from(c))),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::json_string;

    #[test]
    fn json_strings_escape_what_rfc_8259_requires() {
        assert_eq!(json_string("plain"), "\"plain\"");
        assert_eq!(
            json_string("a\"b\\c\nd\u{1}é"),
            "\"a\\\"b\\\\c\\nd\\u0001é\""
        );
    }
}
