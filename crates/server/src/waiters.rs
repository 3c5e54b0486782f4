//! Long-poll wake-ups: one `Notify` per queue.
//!
//! A waiting receive registers interest *before* it looks at the queue (`Notified::enable`), so a
//! message that arrives between its look and its sleep still wakes it. Senders call
//! `notify_one` once per message that became ready: a woken receive that finds nothing (another
//! took the message) simply waits again, and a notification that reaches a receive that is
//! giving up is passed on to the next waiter by tokio.

use std::sync::Arc;

use parking_lot::Mutex;
use rustc_hash::FxHashMap;
use tokio::sync::Notify;

/// Wake-up channels by queue id.
#[derive(Default)]
pub struct Waiters {
    by_queue: Mutex<FxHashMap<u64, Arc<Notify>>>,
}

impl Waiters {
    /// The channel of a queue (created on first use).
    pub fn channel(&self, queue_id: u64) -> Arc<Notify> {
        self.by_queue.lock().entry(queue_id).or_default().clone()
    }

    /// Wakes up to `count` waiters of a queue.
    pub fn wake(&self, queue_id: u64, count: usize) {
        let channel = self.by_queue.lock().get(&queue_id).cloned();
        if let Some(channel) = channel {
            for _ in 0..count {
                channel.notify_one();
            }
        }
    }

    /// Wakes every waiter of a queue (it was deleted or purged) and forgets the channel.
    pub fn close(&self, queue_id: u64) {
        if let Some(channel) = self.by_queue.lock().remove(&queue_id) {
            channel.notify_waiters();
        }
    }
}
