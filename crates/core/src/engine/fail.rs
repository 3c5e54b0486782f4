//! Fail-now: a consumer that knows a message will never succeed (a permanent failure) sends it
//! to the dead-letter queue at once, with a reason, instead of letting it burn
//! `maxReceiveCount` attempts.

use crate::error::{Error, Result};
use crate::queue::MessageState;
use crate::record::Record;

use crate::transfer::TransferKind;

use super::{DeadLetterTarget, Engine, Journal};

/// The longest failure reason kept (longer ones are cut at a character boundary).
pub const FAILURE_REASON_MAX_BYTES: usize = 1024;

impl Engine {
    /// Moves the message of `receipt` to its queue's dead-letter queue now, recording `reason`
    /// (shown by peek). The lease rules hold: only the receipt of the current attempt, while its
    /// lease lasts, may do it; the queue must have a dead-letter queue.
    pub fn fail_message(
        &mut self,
        now_ms: u64,
        name: &str,
        receipt: &str,
        reason: &str,
        journal: &mut Journal,
    ) -> Result<()> {
        let (queue_id, receipt) = self.open_receipt(now_ms, name, receipt)?;
        let now_ms = self.clock_ms;
        let queue = &self.queues[&queue_id];
        let Some(message) = queue.message(receipt.seq) else {
            return Err(Error::MessageNotInFlight);
        };
        if receipt.attempt > message.receive_count {
            return Err(Error::ReceiptHandleIsInvalid);
        }
        if receipt.attempt < message.receive_count || message.state != MessageState::InFlight {
            return Err(Error::ReceiptSuperseded);
        }
        let Some((target, _)) = self.dead_letter_target(queue) else {
            return Err(Error::NoDeadLetterQueue);
        };
        let mut end = reason.len().min(FAILURE_REASON_MAX_BYTES);
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        let dead_letter_queue_id = match target {
            DeadLetterTarget::Local(id) => id,
            DeadLetterTarget::Remote(destination) => {
                let reason = Some(reason[..end].to_string());
                self.transfer_out(
                    now_ms,
                    queue_id,
                    receipt.seq,
                    &destination,
                    TransferKind::DeadLetter,
                    reason,
                    journal,
                );
                return Ok(());
            }
        };
        let record = Record::FailMessage {
            now_ms,
            queue_id,
            seq: receipt.seq,
            dead_letter_queue_id,
            dead_letter_seq: self.queues[&dead_letter_queue_id].next_seq(),
            reason: reason[..end].to_string(),
        };
        self.commit(record, journal);
        Ok(())
    }
}
