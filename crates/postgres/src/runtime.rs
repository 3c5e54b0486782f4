//! The store's own tokio runtime, on which its connections and its flusher live.
//!
//! The store is called from everywhere: appends from request tasks under the engine lock, blocking
//! reads from inside `block_in_place`, syncs and snapshot writes from checkpoint threads that have
//! no runtime at all, and recovery from whatever thread opens the node (a current-thread runtime
//! in the conformance suite). A runtime of its own makes all of these one case: work is spawned
//! onto it and a blocking caller waits on a plain channel, which neither panics inside another
//! runtime (as `Handle::block_on` would) nor depends on the caller's runtime making progress.

use std::future::Future;

use tokio::runtime::{Builder, Handle, Runtime};

/// A one-thread runtime, shut down in the background when dropped (dropping a runtime inside
/// another's task would panic; a reboot in the conformance suite does just that).
pub(crate) struct StoreRuntime {
    runtime: Option<Runtime>,
}

impl StoreRuntime {
    /// Starts the runtime's thread.
    pub(crate) fn new() -> std::io::Result<StoreRuntime> {
        let runtime = Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("leaseq-postgres")
            .enable_all()
            .build()?;
        Ok(StoreRuntime {
            runtime: Some(runtime),
        })
    }

    /// The runtime's handle, to spawn onto.
    pub(crate) fn handle(&self) -> &Handle {
        self.runtime
            .as_ref()
            .expect("the runtime lives until drop")
            .handle()
    }

    /// Runs `work` on the runtime and blocks the calling thread (any thread) until it is done.
    pub(crate) fn block<T: Send + 'static>(
        &self,
        work: impl Future<Output = T> + Send + 'static,
    ) -> T {
        let (sender, receiver) = std::sync::mpsc::sync_channel(1);
        self.handle().spawn(async move {
            let _ = sender.send(work.await);
        });
        // The runtime lives as long as `self`, so the task ends only by answering or panicking.
        receiver
            .recv()
            .expect("a task of the PostgreSQL store's runtime panicked")
    }
}

impl Drop for StoreRuntime {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}
