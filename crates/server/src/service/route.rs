//! Where a node's SQS requests are served: here, or by a peer node it forwards them to.
//!
//! A single node serves everything itself ([`Route::Here`], the default of
//! [`super::Api::route`]). In a cluster (issue "leaseq cluster", `docs/design/cluster.md`) one
//! node owns the log and runs the engine; every other node is a standby that forwards each SQS
//! request, unchanged, to the owner ([`Route::Peer`]), so clients and load balancers need no
//! knowledge of ownership. While a takeover is under way no owner is known
//! ([`Route::Unknown`]); the HTTP layer then waits a little for one before it answers
//! `ServiceUnavailable`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use leaseq_sqs::error::{ErrorCode, SqsError};

/// Where a request goes.
#[derive(Clone, Debug)]
pub enum Route {
    /// This node serves it.
    Here,
    /// Another node serves it: forward the request to it.
    Peer(Peer),
    /// No node is known to serve it right now (a takeover is under way).
    Unknown,
}

/// A node requests are forwarded to.
#[derive(Clone, Debug)]
pub struct Peer {
    /// The peer's node id, for logs.
    pub node_id: Arc<str>,
    /// `host:port` of the peer's SQS listener (plain HTTP).
    pub address: Arc<str>,
}

/// What a node counts of the requests it forwarded.
#[derive(Debug, Default)]
pub struct ForwardStats {
    /// Requests forwarded and answered by the peer (whatever the answer).
    pub forwarded: AtomicU64,
    /// Forwards that failed before the peer took the request (it could not be reached, or it
    /// answered that it no longer serves), so they were tried again elsewhere or refused.
    pub refused: AtomicU64,
    /// Forwards whose outcome is unknown: the connection broke after the request was sent.
    pub broken: AtomicU64,
    /// Requests answered `ServiceUnavailable` because no node serving them was known in time.
    pub unrouted: AtomicU64,
}

impl ForwardStats {
    /// The four counts, in the order of the fields.
    pub fn read(&self) -> [u64; 4] {
        [
            self.forwarded.load(Ordering::Relaxed),
            self.refused.load(Ordering::Relaxed),
            self.broken.load(Ordering::Relaxed),
            self.unrouted.load(Ordering::Relaxed),
        ]
    }
}

/// What a service answers when the bucket of a request's queue is not one it serves: the queue
/// was just placed in another bucket, or the bucket changed owner while the request was on its
/// way. The HTTP layer routes a `CreateQueue` that gets it once more (`is_not_served_here`);
/// anything else goes back to the client, whose SDK tries again.
pub fn not_served_here() -> SqsError {
    SqsError::service_unavailable(NOT_SERVED_HERE)
}

/// Whether `error` is [`not_served_here`]'s.
pub fn is_not_served_here(error: &SqsError) -> bool {
    error.code == ErrorCode::ServiceUnavailable && error.message == NOT_SERVED_HERE
}

const NOT_SERVED_HERE: &str = "this node does not serve the queue's bucket right now; try again";
