//! Looking at messages without leasing them: `LeaseqPeekMessages` (a page of a queue's
//! messages with their bodies) and `LeaseqGetMessageHistory` (one message's attempts).

use leaseq_core::engine::HistoryLookup;
use leaseq_core::MessageId;
use leaseq_sqs::error::{ErrorCode, SqsError};
use leaseq_sqs::{Outcome, PeekedEntry};

use super::Service;
use crate::payloads;

impl Service {
    pub(super) async fn peek(
        &self,
        name: String,
        after_seq: u64,
        max_messages: usize,
    ) -> Result<Outcome, SqsError> {
        // As a receive does: bodies are read under the guard that keeps their segments, before
        // waiting for the log to be durable up to what the peek saw.
        let host = self.host_for(&name)?;
        let reads = host.payload_reads();
        let (peeked, tail_lsn) = self.apply_on(host, |engine, _| {
            engine.peek(self.now_ms(), &name, after_seq, max_messages)
        })?;
        let outcome = peeked
            .map_err(SqsError::from)
            .and_then(|peeked| self.peeked(host, peeked, max_messages));
        drop(reads);
        host.durable(tail_lsn).await?;
        outcome
    }

    /// A page of peeked messages with their bodies read.
    fn peeked(
        &self,
        host: &crate::host::EngineHost,
        peeked: Vec<leaseq_core::engine::PeekedMessage>,
        max_messages: usize,
    ) -> Result<Outcome, SqsError> {
        let full = peeked.len() == max_messages;
        let next_token = peeked
            .last()
            .filter(|_| full)
            .map(|last| last.seq.to_string());
        let payloads = payloads::payloads(
            host.store(),
            peeked
                .iter()
                .map(|peeked| (&peeked.message.payload, peeked.message.id)),
        )?;
        let messages = peeked
            .into_iter()
            .zip(payloads)
            .map(|(peeked, payload)| PeekedEntry {
                seq: peeked.seq,
                message: peeked.message,
                payload,
                failure_reason: peeked.failure_reason,
            })
            .collect();
        Ok(Outcome::Peeked {
            messages,
            next_token,
        })
    }

    /// A message's attempt history (`LeaseqGetMessageHistory`). The engine looks for the
    /// message in steps, each under its own hold of the engine lock (see
    /// `leaseq_core::engine::HISTORY_SCAN_STEP`), so a lookup in a long queue never holds up
    /// other requests for long.
    pub(super) async fn message_history(
        &self,
        name: &str,
        message_id: MessageId,
    ) -> Result<Outcome, SqsError> {
        let mut from_seq = 0;
        let mut tail_lsn = 0;
        let found = loop {
            let (step, step_lsn) = self.apply_now(name, |engine, _| {
                engine.message_history(self.now_ms(), name, message_id, from_seq)
            })?;
            tail_lsn = tail_lsn.max(step_lsn);
            match step? {
                HistoryLookup::Continue(next) => {
                    from_seq = next;
                    tokio::task::yield_now().await;
                }
                HistoryLookup::NotFound => break None,
                HistoryLookup::Found(history) => break Some(history),
            }
        };
        // What it saw may include records not yet durable.
        self.host_for(name)?.durable(tail_lsn).await?;
        match found {
            Some(history) => Ok(Outcome::MessageHistory(history)),
            None => Err(SqsError::new(
                ErrorCode::ResourceNotFound,
                format!(
                    "The queue {name} has no message {message_id}: it was never sent there, or it \
                     left the queue (deleted messages are remembered for their last {} deletes).",
                    leaseq_core::queue::RECENTLY_DELETED_KEPT
                ),
            )),
        }
    }
}
