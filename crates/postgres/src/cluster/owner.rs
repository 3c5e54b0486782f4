//! The owner's half of a cluster node: what it holds ([`Owned`]), and how it takes the log over,
//! serves, steps down when it loses the lock or the epoch, and hands the log off on shutdown.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leaseq_server::clock::SharedClock;
use leaseq_server::{Api as _, Service};
use tokio::sync::Notify;
use tokio_postgres::Client;

use super::ownership::{self, LockSession};
use super::{stopped, BucketNode, Role, ANNOUNCE_EVERY, HAND_OFF_DRAIN_MAX};
use crate::PostgresError;

/// What an owner holds.
pub(super) struct Owned {
    pub(super) service: Arc<Service>,
    pub(super) epoch: i64,
    /// The lock's session, for checks of the epoch on the request path. Weak: the
    /// [`LockSession`] alone keeps it open, so dropping that releases the lock at once, however
    /// long a request still holds this `Owned`.
    pub(super) lock_client: std::sync::Weak<Client>,
    /// Requests executing on `service` now; a hand-off waits for them.
    in_flight: AtomicU64,
    /// Notified when `in_flight` drops to zero.
    idle: Notify,
    /// When this ownership began serving.
    pub(super) since: Instant,
}

impl Owned {
    /// Counts a request in until the guard drops.
    pub(super) fn enter(&self) -> InFlight<'_> {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(self)
    }

    /// Waits until no request is executing, or `limit` passed.
    async fn drained(&self, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        while self.in_flight.load(Ordering::Acquire) > 0 {
            let idle = self.idle.notified();
            if self.in_flight.load(Ordering::Acquire) == 0 {
                return;
            }
            if tokio::time::timeout_at(deadline, idle).await.is_err() {
                return;
            }
        }
    }
}

pub(super) struct InFlight<'a>(&'a Owned);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

impl BucketNode {
    /// Waits until a shutdown's hand-off is done: the log checkpointed and the lock released
    /// (at once if this node did not own the log).
    pub(crate) async fn handed_off(&self) {
        let mut handed_off = self.handed_off.subscribe();
        let _ = handed_off.wait_for(|done| *done).await;
    }

    /// Raises the epoch (in the opening of the log), recovers the engine and starts the
    /// service, on PostgreSQL's clock.
    pub(super) async fn take_over(
        &self,
        lock: LockSession,
    ) -> Result<(Arc<Owned>, LockSession), PostgresError> {
        let started = Instant::now();
        let clock: SharedClock = match &self.config.clock {
            Some(clock) => clock.clone(),
            None => {
                self.clock
                    .set_offset(ownership::clock_offset_ms(&lock.client).await?);
                self.clock.clone()
            }
        };
        let config = self.config.clone();
        let bucket = self.bucket;
        let opened = tokio::task::spawn_blocking(move || {
            crate::open_service_with_epoch(
                &config.log,
                config.service,
                config.checkpoint_log_bytes_min,
                bucket,
            )
        })
        .await
        .map_err(|error| PostgresError::Config(format!("the takeover's task failed: {error}")))?;
        let (service, (epoch, previous_released)) = opened?;
        self.epoch.send_replace(epoch);
        // No answer before the old owner's last possible one (see `serving_delay`): a window
        // after the lock's grant, or at once if the old owner released the bucket.
        let delay = super::serving_delay(self.config.node_timeout, previous_released);
        tokio::time::sleep_until(lock.granted + delay).await;
        let sent = Instant::now();
        // The claim recorded this node as the owner but not yet as serving, so that standbys
        // do not forward to it while it replays; now it serves (if the epoch is still ours).
        if !lock.alive()
            || !ownership::serving(&lock.client, &self.schema, self.bucket_id(), epoch).await?
        {
            self.epoch.send_replace(0);
            return Err(PostgresError::Config(
                "lost the ownership lock or the epoch while recovering".into(),
            ));
        }
        self.confirmed.open(sent, epoch);
        // The placements of the bucket's names, read when it was taken over, join the node's
        // before the bucket serves: as its owner, this node knows them all.
        let mut service = service
            .with_clock(clock)
            .with_placements(self.queues_placed.clone());
        if let Some(remote) = self.remote.get() {
            service = service.with_remote_buckets(remote.clone());
        }
        if let Some(metrics) = &self.config.metrics {
            service = service.with_metrics(metrics.clone());
        }
        let owned = Arc::new(Owned {
            service: Arc::new(service),
            epoch,
            lock_client: Arc::downgrade(&lock.client),
            in_flight: AtomicU64::new(0),
            idle: Notify::new(),
            since: Instant::now(),
        });
        *self.role.write() = Role::Owner(owned.clone());
        *self.refused.lock() = None;
        self.takeovers.fetch_add(1, Ordering::Relaxed);
        if previous_released {
            self.takeovers_after_release.fetch_add(1, Ordering::Relaxed);
        }
        tracing::info!(
            node = %self.identity.node_id,
            bucket = self.bucket,
            epoch,
            previous_released,
            serving_delay_ms = delay.as_millis() as u64,
            took_ms = started.elapsed().as_millis() as u64,
            clock_offset_ms = self.clock.offset_ms(),
            "took the log over: this node is the owner"
        );
        Ok((owned, lock))
    }

    /// Serves as the owner until the lock's session or the epoch is lost (then steps down) or
    /// the node shuts down (then hands off).
    pub(super) async fn serve_as_owner(&self, (owned, lock): (Arc<Owned>, LockSession)) {
        let mut shutdown = self.shutdown.subscribe();
        let mut alive = lock.alive_watch();
        let mut announced = Instant::now();
        loop {
            if announced.elapsed() >= ANNOUNCE_EVERY {
                // The row for operators, and the clock's offset measured again (the hosts'
                // clocks drift; a step back is ignored by the engine).
                let (client, schema, node) = (
                    lock.client.clone(),
                    self.schema.clone(),
                    self.identity.clone(),
                );
                let clock = self.config.clock.is_none().then(|| self.clock.clone());
                tokio::spawn(async move {
                    let _ = ownership::announce(&client, &schema, &node, false).await;
                    if let Some(clock) = clock {
                        if let Ok(offset_ms) = ownership::clock_offset_ms(&client).await {
                            clock.set_offset(offset_ms);
                        }
                    }
                });
                announced = Instant::now();
            }
            tokio::select! {
                () = tokio::time::sleep(self.config.heartbeat()) => {}
                () = self.look_again.notified() => {}
                _ = alive.changed() => {}
                () = stopped(&mut shutdown) => {
                    self.hand_off(&owned, lock, true).await;
                    return;
                }
            }
            // A live node this bucket's placement prefers: hand the bucket to it (it waits
            // for the lock), once this ownership has served a while (a preferred node that
            // cannot take over must not make the bucket change hands without pause).
            if self.config.log.buckets > 1 && owned.since.elapsed() >= super::REBALANCE_AFTER {
                if let Some(preferred) = self
                    .placement
                    .other_preferred(&self.identity.node_id, self.bucket)
                {
                    tracing::info!(bucket = self.bucket, %preferred, "handing the bucket to the node placement prefers");
                    self.hand_off(&owned, lock, false).await;
                    return;
                }
            }
            let reason = super::step_down_reason(
                lock.alive(),
                owned.service.hosts().stopped_reason().is_some(),
                self.confirmed.since(),
                self.config.node_timeout,
            );
            if let Some(reason) = reason {
                self.step_down(&owned, lock, reason);
                return;
            }
        }
    }

    /// Stops owning at once: the lock (and any chance of a confirmed read) goes, the service
    /// releases its long polls; requests executing now fail their confirmation.
    fn step_down(&self, owned: &Owned, lock: LockSession, reason: &str) {
        *self.role.write() = Role::Standby { owner: None };
        self.epoch.send_replace(0);
        self.confirmed.retire();
        owned.service.shut_down();
        drop(lock);
        self.step_downs.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(node = %self.identity.node_id, epoch = owned.epoch, reason, "stepped down: this node no longer owns the log");
    }

    /// Leaves gracefully: no new requests (they wait for the next owner), the ones executing
    /// finish, a checkpoint makes the next owner's replay short; then the ownership retires its
    /// confirmations, so that no answer leaves this node's engine any more, and only then
    /// records the release (on the lock's session, fenced by the epoch), which lets the next
    /// owner serve at once; then the lock goes.
    async fn hand_off(&self, owned: &Owned, lock: LockSession, leaving: bool) {
        *self.role.write() = Role::Standby { owner: None };
        owned.service.shut_down();
        owned.drained(HAND_OFF_DRAIN_MAX).await;
        let service = owned.service.clone();
        match tokio::task::spawn_blocking(move || service.hosts().checkpoint()).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => {
                tracing::error!(%error, "the hand-off's checkpoint failed; the next owner replays the log")
            }
            Err(error) => tracing::error!(%error, "the hand-off's checkpoint panicked"),
        }
        self.epoch.send_replace(0);
        // Invariant: the release is written only after this. A request still executing (past
        // the drain's limit, or one that slipped in before the role changed) fails its second
        // confirmation from here on, even one whose check of the epoch is on its way.
        self.confirmed.retire();
        let released = if lock.alive() {
            let release =
                ownership::release(&lock.client, &self.schema, self.bucket_id(), owned.epoch);
            match tokio::time::timeout(self.config.node_timeout, release).await {
                Ok(Ok(released)) => released,
                Ok(Err(error)) => {
                    tracing::warn!(%error, "the hand-off's release failed; the next owner waits a confirmation window");
                    false
                }
                Err(_) => false,
            }
        } else {
            false
        };
        drop(lock);
        self.step_downs.fetch_add(1, Ordering::Relaxed);
        tracing::info!(node = %self.identity.node_id, bucket = self.bucket, epoch = owned.epoch, released, "handed the bucket off");
        if leaving {
            self.handed_off.send_replace(true);
        }
    }
}
