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
        let (transfer, transfer_out_lsn) = {
            // The body's segment stays while the guard lives (see `EngineHost::payload_reads`).
            let _reads = source.payload_reads();
            let (transfer, tail_lsn) = {
                let engine = source.engine();
                let Some(transfer) = engine.next_transfer() else {
                    return Ok(false);
                };
                // Records are appended under the engine's lock, so the log's tail now is at or
                // past the transfer's `TransferOut`.
                (transfer, source.store().tail_lsn())
            };
            let payload = payloads::payload(source.store(), &transfer.message.payload)
                .map_err(|error| {
                    SqsError::service_unavailable(format!(
                        "The body of a message on its way to another bucket could not be read: {error}."
                    ))
                })?;
            (transfer.with_payload(payload), tail_lsn)
        };
        // Step 1 of the protocol must be durable before the target may take the message: were
        // the source to lose its `TransferOut` (a crash, a new owner), it would give the same
        // transfer id to another message, which the target would answer from memory as taken
        // (lost), while the first message, back in its queue, would be transferred again
        // (twice in the target). The driver is woken as the record is appended, not once it
        // is durable.
        source.durable(transfer_out_lsn).await?;
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
    use std::sync::Arc;

    use leaseq_core::{
        EngineConfig, Journal, Location, MessageId, QueueConfigPatch, ReceiptKey, ReceiveRequest,
        Record, RedrivePolicy, SendInput,
    };

    use super::*;
    use crate::checkpoint::Checkpoints;
    use crate::host::{EngineHost, Hosts, CHECKPOINT_LOG_BYTES_MIN};
    use crate::log_store::MemoryLog;
    use crate::log_store::{Appended, LogError, LogFuture, LogStore, Lsn, Segment, SnapshotSink};
    use crate::service::ServiceConfig;

    fn config() -> ServiceConfig {
        ServiceConfig {
            engine: EngineConfig::default(),
            region: "us-east-1".into(),
            account_id: "000000000000".into(),
        }
    }

    /// A log whose records become durable only up to what the test allows (everything, until
    /// it holds them back): a flush that has not completed yet, frozen.
    #[derive(Default)]
    struct HeldLog {
        log: MemoryLog,
        /// Durable up to here while held; `None`: everything is.
        held_at: parking_lot::Mutex<Option<Lsn>>,
        released: tokio::sync::Notify,
    }

    impl HeldLog {
        fn hold(&self) {
            *self.held_at.lock() = Some(self.log.tail_lsn());
        }

        fn release(&self) {
            *self.held_at.lock() = None;
            self.released.notify_waiters();
        }
    }

    impl LogStore for HeldLog {
        fn append(
            &self,
            journal: &Journal,
            placed: &mut dyn FnMut(&Record, Location),
        ) -> Result<Appended, LogError> {
            self.log.append(journal, placed)
        }
        fn tail_lsn(&self) -> Lsn {
            self.log.tail_lsn()
        }
        fn wait_durable(&self, lsn: Lsn) -> LogFuture<'_, ()> {
            Box::pin(async move {
                loop {
                    let released = self.released.notified();
                    if self.held_at.lock().is_none_or(|held| lsn <= held) {
                        return Ok(());
                    }
                    released.await;
                }
            })
        }
        fn sync(&self) -> Result<(), LogError> {
            self.log.sync()
        }
        fn read_cached(&self, location: Location) -> Result<Option<Vec<u8>>, LogError> {
            self.log.read_cached(location)
        }
        fn read(&self, location: Location) -> Result<Vec<u8>, LogError> {
            self.log.read(location)
        }
        fn stored_bytes(&self, location: Location) -> u64 {
            self.log.stored_bytes(location)
        }
        fn snapshot_writer(&self, lsn: Lsn) -> Result<Box<dyn SnapshotSink + '_>, LogError> {
            self.log.snapshot_writer(lsn)
        }
        fn segments(&self) -> Vec<Segment> {
            self.log.segments()
        }
        fn remove_segments(
            &self,
            lsn: Lsn,
            keep: &dyn Fn(u64) -> bool,
        ) -> Result<Vec<u64>, LogError> {
            self.log.remove_segments(lsn, keep)
        }
        fn keeps_records(&self) -> bool {
            false
        }
        fn stats(&self) -> Option<crate::metrics::LogStats> {
            None
        }
    }

    /// The driver hands a transfer over only once its `TransferOut` is durable in the source's
    /// log: until then the target must not have the message (a source that lost the record
    /// would give its transfer id to another message, lost as "already taken").
    #[tokio::test]
    async fn a_transfer_is_handed_over_only_once_its_transfer_out_is_durable() {
        const BUCKETS: u32 = 16;
        let (queue, dlq) = ("q", "dlq");
        let logs: Vec<Arc<HeldLog>> = (0..BUCKETS).map(|_| Arc::default()).collect();
        let hosts = (0..BUCKETS)
            .map(|bucket| {
                let engine_config = EngineConfig {
                    placement: leaseq_core::Placement {
                        bucket,
                        buckets: BUCKETS,
                    },
                    ..EngineConfig::default()
                };
                let engine = leaseq_core::Engine::new(engine_config, ReceiptKey::new([1; 16]));
                let store: Arc<dyn LogStore> = logs[bucket as usize].clone();
                EngineHost::new(engine, store, Checkpoints::new(CHECKPOINT_LOG_BYTES_MIN, 0))
            })
            .collect();
        let service = Service::with_hosts(config(), Hosts::buckets(hosts));
        let source = leaseq_core::transfer::bucket_of(queue, BUCKETS) as usize;
        assert_ne!(
            source as u32,
            leaseq_core::transfer::bucket_of(dlq, BUCKETS)
        );
        for (name, patch) in [
            (dlq, QueueConfigPatch::default()),
            (
                queue,
                QueueConfigPatch {
                    redrive_policy: Some(Some(RedrivePolicy {
                        dead_letter_queue: dlq.into(),
                        max_receive_count: 1,
                    })),
                    ..QueueConfigPatch::default()
                },
            ),
        ] {
            service
                .run(name, |e, j| {
                    e.create_queue(0, name, &patch, BTreeMap::new(), j)
                })
                .await
                .unwrap();
        }
        let id = MessageId::from_random([2; 16]);
        service
            .run(queue, |e, j| e.send(0, queue, SendInput::body("m"), id, j))
            .await
            .unwrap();
        let receive = |now_ms: u64, j: &mut Journal, e: &mut leaseq_core::Engine| {
            let request = ReceiveRequest {
                max_messages: 10,
                visibility_timeout_seconds: Some(0),
                client: None,
            };
            e.receive(now_ms, queue, request, j)
        };
        service.run(queue, |e, j| receive(1, j, e)).await.unwrap();
        // The second receive dead-letters it: its `TransferOut` is appended, not yet durable.
        logs[source].hold();
        let (received, _) = service.apply_now(queue, |e, j| receive(2, j, e)).unwrap();
        assert_eq!(received.unwrap().len(), 0);
        let in_dlq = || {
            service
                .host_for(dlq)
                .unwrap()
                .engine()
                .queue(dlq)
                .unwrap()
                .len()
        };
        let mut failures = HandOverFailures::default();
        let handing = service.hand_over_transfers(&mut failures);
        tokio::pin!(handing);
        let waited = tokio::time::timeout(std::time::Duration::from_millis(100), &mut handing);
        assert!(
            waited.await.is_err(),
            "handed over before its record was durable"
        );
        assert_eq!(
            in_dlq(),
            0,
            "the target took a transfer its source may still lose"
        );
        // Durable now: the hand-over goes on, and the dead-letter queue has it.
        logs[source].release();
        handing.await;
        assert_eq!(in_dlq(), 1);
        assert_eq!(service.transfers_waiting(), 0);
    }

    /// A dead letter for a queue of another bucket waits in its outbox, counted by the
    /// metrics, until the driver hands it over; then the dead-letter queue has it.
    #[tokio::test]
    async fn a_dead_letter_waits_in_the_outbox_until_handed_over() {
        let service = Service::in_memory_buckets(config(), ReceiptKey::new([1; 16]), 16);
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
