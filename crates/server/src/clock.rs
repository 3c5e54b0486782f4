//! The server's clock: the one place leaseq reads the time, and the one thing it waits on.
//!
//! Visibility is measured on this clock, never the client's. The engine takes its readings as
//! `now_ms` and ignores a reading earlier than one it has seen, so a step back of the host clock
//! cannot shorten or reorder leases.
//!
//! Everything in the server that waits for a time does so through [`Clock::sleep_until`]: long
//! polls (their wait time and the next lease or delay deadline of their queue) and the pacing of
//! message move tasks. So a test that runs the service on a [`ManualClock`] jumps time with
//! [`ManualClock::advance`] and every waiter whose deadline passed wakes at once, as
//! quinn-proto's tests step endpoints to their next timeout instead of sleeping.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

/// A future that completes when a clock reaches a time.
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A source of time in milliseconds since the Unix epoch, and of waits for a time.
pub trait Clock: Send + Sync + 'static {
    /// The time now.
    fn now_ms(&self) -> u64;

    /// Completes once [`Clock::now_ms`] has reached `at_ms` (at once if it has).
    fn sleep_until(&self, at_ms: u64) -> Sleep;
}

/// A shared clock, as the service holds it.
pub type SharedClock = Arc<dyn Clock>;

/// Milliseconds since the Unix epoch, by the host's clock.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The host's clock: [`now_ms`], and tokio's timers for waits.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        now_ms()
    }

    fn sleep_until(&self, at_ms: u64) -> Sleep {
        // A wall-clock deadline turned into a monotonic wait: if the host clock steps while we
        // sleep, the waiter wakes early or late and, as every waiter here does, looks again.
        let wait = Duration::from_millis(at_ms.saturating_sub(now_ms()));
        Box::pin(tokio::time::sleep(wait))
    }
}

/// The host's clock moved by an offset that may change: a cluster node runs its engine on the
/// time of the PostgreSQL server that holds the log (it measures the offset when it takes the
/// log over, and again from time to time), so that every node reads a lease's deadline as the
/// same instant and a new owner cannot end leases early.
#[derive(Debug, Default)]
pub struct OffsetClock {
    offset_ms: AtomicI64,
}

impl OffsetClock {
    /// The host's clock plus `offset_ms`.
    pub fn new(offset_ms: i64) -> OffsetClock {
        OffsetClock {
            offset_ms: AtomicI64::new(offset_ms),
        }
    }

    /// Sets the offset. A reading may go back by the change: the engine ignores readings
    /// earlier than one it has seen.
    pub fn set_offset(&self, offset_ms: i64) {
        self.offset_ms.store(offset_ms, Ordering::Relaxed);
    }

    /// The offset in force.
    pub fn offset_ms(&self) -> i64 {
        self.offset_ms.load(Ordering::Relaxed)
    }
}

impl Clock for OffsetClock {
    fn now_ms(&self) -> u64 {
        now_ms().saturating_add_signed(self.offset_ms())
    }

    fn sleep_until(&self, at_ms: u64) -> Sleep {
        // As `SystemClock`: a waiter that wakes early (the offset changed) looks again.
        let wait = Duration::from_millis(at_ms.saturating_sub(self.now_ms()));
        Box::pin(tokio::time::sleep(wait))
    }
}

/// A clock that moves only when a test moves it. Waiters sleep until [`ManualClock::advance`]
/// or [`ManualClock::set`] reaches their time; no real time passes.
#[derive(Clone, Debug)]
pub struct ManualClock {
    now: Arc<watch::Sender<u64>>,
}

impl ManualClock {
    /// A clock that reads `start_ms` until it is moved.
    pub fn new(start_ms: u64) -> ManualClock {
        ManualClock {
            now: Arc::new(watch::channel(start_ms).0),
        }
    }

    /// Moves the clock forward by `ms`, waking every waiter whose time has come.
    pub fn advance(&self, ms: u64) {
        self.now.send_modify(|now| *now = now.saturating_add(ms));
    }

    /// Sets the clock to `at_ms` (it may go back: the engine ignores readings earlier than one
    /// it has seen), waking every waiter whose time has come.
    pub fn set(&self, at_ms: u64) {
        self.now.send_replace(at_ms);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        *self.now.borrow()
    }

    fn sleep_until(&self, at_ms: u64) -> Sleep {
        let mut now = self.now.subscribe();
        Box::pin(async move {
            // `wait_for` checks the current value first, so a time already reached completes at
            // once. The sender lives as long as the clock; if it is gone nothing will ever
            // wake this waiter, which then waits for whatever else it selects on.
            if now.wait_for(|now| *now >= at_ms).await.is_err() {
                std::future::pending::<()>().await;
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_manual_clock_wakes_sleepers_when_advanced_past_their_time() {
        let clock = ManualClock::new(1_000);
        let mut early = tokio::spawn(clock.sleep_until(1_500));
        let late = tokio::spawn(clock.sleep_until(3_000));
        clock.sleep_until(900).await;
        clock.advance(400);
        tokio::task::yield_now().await;
        assert!(!early.is_finished());
        clock.advance(100);
        (&mut early).await.unwrap();
        assert!(!late.is_finished());
        clock.set(3_000);
        late.await.unwrap();
        assert_eq!(clock.now_ms(), 3_000);
    }

    #[test]
    fn an_offset_clock_reads_the_host_clock_moved_by_its_offset() {
        let clock = OffsetClock::new(-60_000);
        let before = now_ms();
        let read = clock.now_ms();
        assert!(
            read + 60_000 >= before && read + 60_000 <= now_ms(),
            "{read}"
        );
        clock.set_offset(3_600_000);
        assert!(clock.now_ms() >= before + 3_600_000);
        assert_eq!(clock.offset_ms(), 3_600_000);
    }
}
