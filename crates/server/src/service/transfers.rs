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

use std::time::{Duration, Instant};

use leaseq_core::TransferAnswer;
use leaseq_sqs::error::SqsError;

use super::Service;
use crate::host::EngineHost;
use crate::payloads;

/// How often a hand-over that keeps failing (its target's owner is down, say) is logged again:
/// the driver tries again every tick, and a warning each time would flood the log.
const FAILURE_LOGGED_EVERY: Duration = Duration::from_secs(10);

/// The transfer driver's account of failed hand-overs, for its log: the first failure of a run
/// of them is logged at once, then at most one line every [`FAILURE_LOGGED_EVERY`] with the
/// failures since, and the first success after them says how long they lasted.
#[derive(Debug, Default)]
pub(super) struct HandOverFailures {
    /// When the current run of failures began.
    since: Option<Instant>,
    /// When it was last logged.
    logged: Option<Instant>,
    /// Failures since then.
    unlogged: u64,
}

impl HandOverFailures {
    /// A hand-over failed at `now`: whether to log it, and the failures it stands for.
    fn failed(&mut self, now: Instant) -> Option<u64> {
        self.since.get_or_insert(now);
        self.unlogged += 1;
        if self
            .logged
            .is_some_and(|at| now.duration_since(at) < FAILURE_LOGGED_EVERY)
        {
            return None;
        }
        self.logged = Some(now);
        Some(std::mem::take(&mut self.unlogged))
    }

    /// Hand-overs go through at `now`: how long they had failed, if they had.
    fn went_through(&mut self, now: Instant) -> Option<Duration> {
        let since = self.since.take()?;
        *self = HandOverFailures::default();
        Some(now.duration_since(since))
    }
}

impl Service {
    /// Hands over every waiting transfer of every host, until the outboxes are empty or a
    /// hand-over fails (it is tried again at the next tick).
    pub(super) async fn hand_over_transfers(&self, failures: &mut HandOverFailures) {
        if self.hosts.bucket_count() < 2 {
            return;
        }
        for source in self.hosts.iter() {
            loop {
                match self.hand_over(source).await {
                    Ok(true) => {
                        if let Some(failing) = failures.went_through(Instant::now()) {
                            tracing::info!(
                                failing_ms = failing.as_millis() as u64,
                                "transfers between buckets go through again"
                            );
                        }
                    }
                    Ok(false) => break,
                    Err(error) => {
                        if let Some(failures) = failures.failed(Instant::now()) {
                            tracing::warn!(
                                error = %error.message,
                                failures,
                                "a transfer between buckets waits for the next try (tried again every tick; logged at most every 10 s)"
                            );
                        }
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
        let answer = self.hand_transfer_to(transfer).await?;
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

#[cfg(test)]
mod tests {
    use super::HandOverFailures;

    #[test]
    fn failed_hand_overs_are_logged_once_then_every_ten_seconds_with_their_count() {
        let start = std::time::Instant::now();
        let at = |ms: u64| start + std::time::Duration::from_millis(ms);
        let mut failures = HandOverFailures::default();
        assert_eq!(failures.failed(at(0)), Some(1));
        // Every tick for ten seconds: nothing logged, counted.
        for tick in 1..200 {
            assert_eq!(failures.failed(at(tick * 50)), None);
        }
        assert_eq!(failures.failed(at(10_000)), Some(200));
        assert_eq!(
            failures.went_through(at(12_000)),
            Some(std::time::Duration::from_secs(12))
        );
        assert_eq!(failures.went_through(at(12_050)), None);
        // A new run of failures is logged at once.
        assert_eq!(failures.failed(at(12_100)), Some(1));
    }

    use std::collections::BTreeMap;

    use leaseq_core::{
        EngineConfig, MessageId, QueueConfigPatch, ReceiptKey, ReceiveRequest, RedrivePolicy,
        SendInput,
    };

    use super::*;
    use crate::service::ServiceConfig;

    /// A dead letter for a queue of another bucket waits in its outbox, counted by the
    /// metrics, until the driver hands it over; then the dead-letter queue has it.
    #[tokio::test]
    async fn a_dead_letter_waits_in_the_outbox_until_handed_over() {
        let config = ServiceConfig {
            engine: EngineConfig::default(),
            region: "us-east-1".into(),
            account_id: "000000000000".into(),
        };
        let service = Service::in_memory_buckets(config, ReceiptKey::new([1; 16]), 16);
        let (queue, dlq) = ("q", "dlq");
        assert!(!std::ptr::eq(
            service.host_for(queue).unwrap(),
            service.host_for(dlq).unwrap()
        ));
        let create = |name: &'static str, patch: QueueConfigPatch| {
            let service = &service;
            async move {
                service
                    .run(name, |e, j| {
                        e.create_queue(0, name, &patch, BTreeMap::new(), j)
                    })
                    .await
                    .unwrap();
            }
        };
        create(dlq, QueueConfigPatch::default()).await;
        let policy = QueueConfigPatch {
            redrive_policy: Some(Some(RedrivePolicy {
                dead_letter_queue: dlq.into(),
                max_receive_count: 1,
            })),
            ..QueueConfigPatch::default()
        };
        create(queue, policy).await;
        service
            .run(queue, |e, j| {
                e.send(
                    0,
                    queue,
                    SendInput::body("m"),
                    MessageId::from_random([2; 16]),
                    j,
                )
            })
            .await
            .unwrap();
        let receive = |now_ms: u64| {
            let service = &service;
            async move {
                let request = ReceiveRequest {
                    max_messages: 10,
                    visibility_timeout_seconds: Some(0),
                    client: None,
                };
                service
                    .run(queue, |e, j| e.receive(now_ms, queue, request, j))
                    .await
                    .unwrap()
                    .len()
            }
        };
        assert_eq!(receive(1).await, 1);
        // Spent: it leaves for the outbox instead of being delivered.
        assert_eq!(receive(2).await, 0);
        let waiting = |service: &Service| service.bucket_stats().unwrap().transfers_waiting;
        assert_eq!(waiting(&service), 1);
        let in_dlq = |service: &Service| {
            let engine = service.host_for(dlq).unwrap().engine();
            engine.queue(dlq).unwrap().len()
        };
        assert_eq!(in_dlq(&service), 0);
        service
            .hand_over_transfers(&mut HandOverFailures::default())
            .await;
        assert_eq!((waiting(&service), in_dlq(&service)), (0, 1));
        assert_eq!(service.bucket_stats().unwrap().buckets, 16);
    }
}
