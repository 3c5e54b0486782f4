//! Receive, and the one long-poll loop.
//!
//! A receive that finds nothing and may wait registers with the queue's waiters *before* it
//! looks again (so a message sent between its look and its sleep still wakes it), then sleeps on
//! the service's clock until the earliest of: a wake-up from a record that made a message ready,
//! the queue's next deadline (a lease or delay ends), its own wait time, or shutdown.

use std::sync::atomic::{AtomicUsize, Ordering};

use leaseq_core::{Delivery, Error, ReceiveRequest};
use leaseq_sqs::error::SqsError;

use super::{Caller, Service};
use crate::payloads;

/// A receive as the service runs it.
pub(super) struct Receive {
    /// What to lease, for how long, by whom.
    pub request: ReceiveRequest,
    /// The request's `WaitTimeSeconds`; `None` takes the queue's.
    pub wait_time_seconds: Option<u32>,
    /// A FIFO queue's `ReceiveRequestAttemptId`.
    pub attempt_id: Option<String>,
}

/// Counts a waiting receive for as long as it lives, however its future ends (answered, timed
/// out, or dropped because the client went away).
struct WaitingGuard<'a>(&'a AtomicUsize);

impl<'a> WaitingGuard<'a> {
    fn new(counter: &'a AtomicUsize) -> Self {
        counter.fetch_add(1, Ordering::Relaxed);
        WaitingGuard(counter)
    }
}

impl Drop for WaitingGuard<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What a receive learned besides its deliveries: enough to wait well.
struct ReceiveProbe<P = Delivery> {
    deliveries: Vec<P>,
    queue_id: u64,
    queue_wait_seconds: u32,
    next_deadline_ms: Option<u64>,
}

impl Service {
    /// Receives waiting for messages right now.
    pub fn waiting_receives(&self) -> usize {
        self.waiting.load(Ordering::Relaxed)
    }

    /// `ReceiveMessage`: leases up to the requested messages, waiting for them if asked to.
    pub(super) async fn receive_message(
        &self,
        name: &str,
        mut receive: Receive,
        caller: &Caller,
    ) -> Result<Vec<Delivery>, SqsError> {
        receive.request.client = Some(caller.client());
        let deliveries = self.receive(name, &receive).await?;
        if deliveries.is_empty() {
            self.observe_empty_receive(name);
        }
        self.observe_dwell(name, &deliveries);
        self.log_deliveries(name, &deliveries);
        Ok(deliveries)
    }

    /// A receive that waits up to its wait time for a message (long polling).
    async fn receive(&self, name: &str, receive: &Receive) -> Result<Vec<Delivery>, SqsError> {
        let started_ms = self.now_ms();
        let mut probe = self.try_receive(name, receive).await?;
        let wait_seconds = receive
            .wait_time_seconds
            .unwrap_or(probe.queue_wait_seconds);
        if !probe.deliveries.is_empty() || wait_seconds == 0 {
            return Ok(probe.deliveries);
        }
        let deadline_ms = started_ms + u64::from(wait_seconds) * 1_000;
        let _waiting = WaitingGuard::new(&self.waiting);
        let mut shutdown = self.shutdown.subscribe();
        loop {
            if *shutdown.borrow_and_update() {
                return Ok(Vec::new());
            }
            let channel = self.waiters.channel(probe.queue_id);
            let notified = channel.notified();
            tokio::pin!(notified);
            // Register before looking, so a message sent between the look and the sleep wakes us.
            notified.as_mut().enable();
            probe = self.try_receive(name, receive).await?;
            if !probe.deliveries.is_empty() {
                return Ok(probe.deliveries);
            }
            if self.now_ms() >= deadline_ms {
                return Ok(Vec::new());
            }
            let wake_at_ms = probe
                .next_deadline_ms
                .map_or(deadline_ms, |at_ms| at_ms.min(deadline_ms));
            tokio::select! {
                _ = &mut notified => {}
                _ = self.clock.sleep_until(wake_at_ms) => {}
                _ = shutdown.changed() => return Ok(Vec::new()),
            }
        }
    }

    /// One receive attempt. With long polling (a wait time not 0), a queue at its in-flight
    /// limit answers empty instead of `OverLimit` and the receive waits, as SQS does.
    ///
    /// The payloads of the leased messages are read from the log after the engine lock is
    /// released and before waiting for durability, under a read guard taken before the lease:
    /// a checkpoint removes segments only under the write guard, so no segment a delivery
    /// refers to can go between the lease and the read (even if the message is purged or
    /// relocated meanwhile).
    async fn try_receive(&self, name: &str, receive: &Receive) -> Result<ReceiveProbe, SqsError> {
        let host = self.host_for(name)?;
        let reads = host.payload_reads();
        let (probe, tail_lsn) = self.apply_on(host, |engine, journal| {
            // A record per message leased, reserved at once rather than grown 1, 4, 8, 16.
            journal.reserve(receive.request.max_messages);
            let now_ms = self.now_ms();
            let request = receive.request.clone();
            let attempt_id = receive.attempt_id.as_deref();
            let received = engine.receive_with_attempt(now_ms, name, request, attempt_id, journal);
            let deliveries = match received {
                Err(Error::OverLimit { .. }) if long_polling(engine, name, receive) => Vec::new(),
                result => result?,
            };
            let queue = engine.queue(name).ok_or(Error::QueueDoesNotExist)?;
            Ok::<_, Error>(ReceiveProbe {
                deliveries,
                queue_id: queue.id,
                queue_wait_seconds: queue.config.receive_wait_time_seconds,
                next_deadline_ms: queue.next_deadline_ms(),
            })
        })?;
        let probe = probe.map_err(SqsError::from).and_then(|probe| {
            Ok(ReceiveProbe {
                deliveries: payloads::resolve(host.store(), probe.deliveries)?,
                queue_id: probe.queue_id,
                queue_wait_seconds: probe.queue_wait_seconds,
                next_deadline_ms: probe.next_deadline_ms,
            })
        });
        drop(reads);
        host.durable(tail_lsn).await?;
        probe
    }
}

/// Whether the receive waits: its own wait time, else the queue's.
fn long_polling(engine: &leaseq_core::Engine, name: &str, receive: &Receive) -> bool {
    match receive.wait_time_seconds {
        Some(wait) => wait > 0,
        None => engine
            .queue(name)
            .is_some_and(|queue| queue.config.receive_wait_time_seconds > 0),
    }
}
