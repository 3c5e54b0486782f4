//! The transfer driver: hands each bucket's outbox to the buckets its messages go to (see
//! `leaseq_core::transfer` for the protocol and why it is exactly once).
//!
//! It runs in the move driver's task ([`Service::drive_moves`]), woken at once when an
//! operation journals a `TransferOut` and otherwise every tick. For each host with a transfer
//! waiting, one at a time and in order: read the body from the source's log, let the target's
//! engine take or refuse it and wait until that is durable in the target's log, then record the
//! answer in the source's engine and wait until that is durable too, before the next one. A
//! crash anywhere leaves at most the last transfer to hand over again, and the target answers
//! it from memory.

use leaseq_core::TransferAnswer;
use leaseq_sqs::error::SqsError;

use super::Service;
use crate::host::EngineHost;
use crate::payloads;

impl Service {
    /// Hands over every waiting transfer of every host, until the outboxes are empty or a
    /// hand-over fails (it is tried again at the next tick).
    pub(super) async fn hand_over_transfers(&self) {
        if self.hosts.len() < 2 {
            return;
        }
        for source in self.hosts.iter() {
            loop {
                match self.hand_over(source).await {
                    Ok(true) => continue,
                    Ok(false) => break,
                    Err(error) => {
                        tracing::warn!(error = %error.message, "a transfer between buckets waits for the next try");
                        break;
                    }
                }
            }
        }
    }

    /// Hands the first transfer of `source`'s outbox over to its target and records the
    /// answer. Returns whether there was one.
    async fn hand_over(&self, source: &EngineHost) -> Result<bool, SqsError> {
        let transfer = {
            // The body's segment stays while the guard lives (see `EngineHost::payload_reads`).
            let _reads = source.payload_reads();
            let Some(transfer) = source.engine().next_transfer() else {
                return Ok(false);
            };
            let payload = payloads::payload(source.store(), &transfer.message.payload)
                .map_err(|error| {
                    SqsError::service_unavailable(format!(
                        "The body of a message on its way to another bucket could not be read: {error}."
                    ))
                })?;
            transfer.with_payload(payload)
        };
        let transfer_id = transfer.transfer_id;
        let target = self.host_for(&transfer.destination);
        let answer = self
            .run_on(target, |engine, journal| {
                Ok::<_, SqsError>(engine.ingest_transfer(self.now_ms(), transfer, journal))
            })
            .await?;
        if answer == TransferAnswer::OutOfOrder {
            // Cannot happen while one driver hands transfers over in order; answering either way
            // could lose the message or take it twice, so it stays in the outbox.
            tracing::error!(
                transfer_id,
                "a bucket refused a transfer as out of order; it stays in its outbox"
            );
            return Ok(false);
        }
        self.run_on(source, |engine, journal| {
            Ok::<_, SqsError>(engine.finish_transfer(self.now_ms(), transfer_id, answer, journal))
        })
        .await?;
        Ok(true)
    }
}
