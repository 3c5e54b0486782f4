//! A received message as the handler sees it: identity, body, attributes and the attempt
//! number. The receipt stays inside the worker, which alone acknowledges and extends.

use std::collections::HashMap;

use aws_sdk_sqs::types::{MessageAttributeValue, MessageSystemAttributeName};

/// One delivery of a message.
#[derive(Debug, Clone)]
pub struct Message {
    inner: aws_sdk_sqs::types::Message,
    attempt: u32,
}

impl Message {
    /// Wraps a message from `ReceiveMessage`; `None` if it lacks an id or a receipt, without
    /// which it can be neither traced nor acknowledged.
    pub(crate) fn from_sqs(inner: aws_sdk_sqs::types::Message) -> Option<Message> {
        inner.message_id.as_ref()?;
        inner.receipt_handle.as_ref()?;
        // The receive count is the attempt number; a server that does not return it (it was
        // asked for) gets the conservative answer that this is the first attempt.
        let attempt = inner
            .attributes()
            .and_then(|a| a.get(&MessageSystemAttributeName::ApproximateReceiveCount))
            .and_then(|count| count.parse().ok())
            .unwrap_or(1);
        Some(Message { inner, attempt })
    }

    /// The stable message id (the same on every attempt).
    pub fn id(&self) -> &str {
        self.inner.message_id().unwrap_or_default()
    }

    /// The body.
    pub fn body(&self) -> &str {
        self.inner.body().unwrap_or_default()
    }

    /// The attempt number: the receive count of this delivery, starting at 1.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }

    /// A system attribute such as `ApproximateFirstReceiveTimestamp` or `MessageGroupId`.
    pub fn system_attribute(&self, name: MessageSystemAttributeName) -> Option<&str> {
        self.inner
            .attributes()
            .and_then(|a| a.get(&name))
            .map(String::as_str)
    }

    /// The message attributes the sender set.
    pub fn attributes(&self) -> Option<&HashMap<String, MessageAttributeValue>> {
        self.inner.message_attributes()
    }

    /// The text of the `String` or `Number` message attribute `name`.
    pub fn attribute_text(&self, name: &str) -> Option<&str> {
        self.attributes()?.get(name)?.string_value()
    }

    /// The message as the SDK returned it.
    pub fn as_sqs(&self) -> &aws_sdk_sqs::types::Message {
        &self.inner
    }

    pub(crate) fn receipt_handle(&self) -> &str {
        self.inner.receipt_handle().unwrap_or_default()
    }
}
