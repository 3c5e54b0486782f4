//! The idle timeout of an HTTP/2 connection: how the accept loop knows that a connection has
//! had no stream open for a while, so that it can close it (with GOAWAY) and free its
//! `max_connections` slot.
//!
//! Why not hyper's HTTP/2 keep-alive: its pings only find peers that are gone (a ping left
//! unanswered closes the connection). A live client that keeps a connection open and sends
//! nothing answers every ping, and would hold its slot for ever. HTTP/1.1 has no such gap:
//! hyper's header read timeout runs between requests, so an idle keep-alive connection is
//! closed after it.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

/// The streams of one HTTP/2 connection: how many are being answered, and when the last one
/// ended.
#[derive(Debug)]
pub(super) struct Streams {
    /// When the connection was handed to hyper; the origin of `last_ended_ms`.
    started_at: Instant,
    /// Requests whose answer is not yet produced (a long poll counts while it waits).
    open: AtomicUsize,
    /// Milliseconds from `started_at` to the end of the latest stream (0: none yet).
    last_ended_ms: AtomicU64,
}

/// A stream being answered; dropped when its answer is produced (or its request abandoned).
#[derive(Debug)]
pub(super) struct OpenStream(Arc<Streams>);

impl Streams {
    pub(super) fn new() -> Arc<Streams> {
        Arc::new(Streams {
            started_at: Instant::now(),
            open: AtomicUsize::new(0),
            last_ended_ms: AtomicU64::new(0),
        })
    }

    /// Counts a stream as open until the returned guard is dropped.
    pub(super) fn open(self: &Arc<Streams>) -> OpenStream {
        self.open.fetch_add(1, Ordering::SeqCst);
        OpenStream(self.clone())
    }

    /// Completes once the connection has had no stream open for `idle_timeout` (counted from
    /// the end of its last stream, or from its start if it has had none).
    pub(super) async fn idle_for(&self, idle_timeout: Duration) {
        self.idle_after(self.started_at, idle_timeout).await;
    }

    /// Completes once the connection has had no stream open for `idle_timeout`, counted from
    /// the end of its last stream or from `since`, whichever is later.
    pub(super) async fn idle_after(&self, since: Instant, idle_timeout: Duration) {
        let mut deadline = since.max(self.started_at) + idle_timeout;
        loop {
            tokio::time::sleep_until(deadline).await;
            if self.open.load(Ordering::SeqCst) > 0 {
                // A stream open now ends at the earliest now: no point looking before
                // `idle_timeout` from now.
                deadline = Instant::now() + idle_timeout;
                continue;
            }
            // Read after `open`: a stream that ended before `open` was seen at 0 stored its
            // end first (see `OpenStream::drop`), so it is seen here.
            let last_ended_ms = self.last_ended_ms.load(Ordering::SeqCst);
            let last_ended_at = self.started_at + Duration::from_millis(last_ended_ms);
            let idle_until = last_ended_at.max(since) + idle_timeout;
            if idle_until <= Instant::now() {
                return;
            }
            deadline = idle_until;
        }
    }
}

impl Drop for OpenStream {
    fn drop(&mut self) {
        let streams = &self.0;
        // Rounded up, so the idle time is never counted from before the stream ended.
        let ended_ms = streams.started_at.elapsed().as_micros().div_ceil(1000);
        let ended_ms = u64::try_from(ended_ms).unwrap_or(u64::MAX);
        // The end is stored before the count falls: whoever sees no stream open also sees
        // when the last one ended, and never takes a connection whose stream just ended for
        // one idle since an earlier time.
        streams.last_ended_ms.fetch_max(ended_ms, Ordering::SeqCst);
        streams.open.fetch_sub(1, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Real time, in tenths of a second: every check is that the connection is not idle too
    // early, which a loaded machine cannot make fail, and the patience for it to become idle
    // is generous.
    const IDLE_TIMEOUT: Duration = Duration::from_millis(200);
    const PATIENCE: Duration = Duration::from_secs(10);

    /// Waits, in a task of its own, for `streams` to be idle; when it was.
    fn idle_at(streams: &Arc<Streams>) -> tokio::task::JoinHandle<Instant> {
        let streams = streams.clone();
        tokio::spawn(async move {
            streams.idle_for(IDLE_TIMEOUT).await;
            Instant::now()
        })
    }

    async fn within_patience(idle: tokio::task::JoinHandle<Instant>) -> Instant {
        let idle = tokio::time::timeout(PATIENCE, idle).await;
        idle.expect("idle within the patience").unwrap()
    }

    #[tokio::test]
    async fn without_streams_idle_counts_from_the_start() {
        let streams = Streams::new();
        let idle = within_patience(idle_at(&streams)).await;
        assert!(idle >= streams.started_at + IDLE_TIMEOUT);
    }

    #[tokio::test]
    async fn idle_after_counts_from_its_start_on_a_long_idle_connection() {
        // A connection idle for longer than the grace already: the grace still runs from the
        // close's start (the GOAWAY gets its chance to be acknowledged).
        let streams = Streams::new();
        drop(streams.open());
        tokio::time::sleep(2 * IDLE_TIMEOUT).await;
        let since = Instant::now();
        let idle = tokio::time::timeout(PATIENCE, streams.idle_after(since, IDLE_TIMEOUT)).await;
        idle.expect("idle within the patience");
        assert!(Instant::now() >= since + IDLE_TIMEOUT);
    }

    #[tokio::test]
    async fn a_stream_longer_than_the_timeout_keeps_the_connection_busy() {
        // A long poll, say: open for three timeouts, the idle time counting from its end.
        let streams = Streams::new();
        let open = streams.open();
        let idle = idle_at(&streams);
        tokio::time::sleep(3 * IDLE_TIMEOUT).await;
        assert!(!idle.is_finished());
        let ended_at = Instant::now();
        drop(open);
        let idle = within_patience(idle).await;
        assert!(idle >= ended_at + IDLE_TIMEOUT, "{:?}", idle - ended_at);
    }

    #[tokio::test]
    async fn short_streams_more_often_than_the_timeout_keep_it_busy() {
        let streams = Streams::new();
        let idle = idle_at(&streams);
        let mut ended_at = Instant::now();
        for _ in 0..12 {
            drop(streams.open());
            ended_at = Instant::now();
            tokio::time::sleep(IDLE_TIMEOUT / 4).await;
        }
        // Counted from the last stream's end (from the start or the first end, it would be
        // earlier).
        let idle = within_patience(idle).await;
        assert!(idle >= ended_at + IDLE_TIMEOUT, "{:?}", idle - ended_at);
    }
}
