//! The boundary between the SQS protocol layer and whatever keeps the queues.
//!
//! The HTTP layer knows only this trait: it decodes a request into an [`Action`], asks a backend
//! to execute it and encodes the [`Outcome`]. The embedded engine is one backend; a backend that
//! keeps its state in PostgreSQL (so several stateless nodes can share it) is another. A backend
//! owns long polling, because how a waiting receive learns of new messages depends on where the
//! messages live.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::http::HeaderValue;
use leaseq_core::Client;

use leaseq_sqs::error::SqsError;
use leaseq_sqs::{Action, Outcome};

/// Who is asking, as far as the backend needs to know.
#[derive(Clone, Debug, Default)]
pub struct Caller {
    /// The sender id stamped on messages this caller sends (`SenderId`).
    /// Shared by every message of the request (a batch of ten allocates it once).
    pub sender_id: Arc<str>,
    /// The address of the client's connection, if the server knows it.
    pub address: Option<SocketAddr>,
    /// The request's `User-Agent` header, if any (kept as the header: most requests never
    /// look at it).
    pub user_agent: Option<HeaderValue>,
}

impl Caller {
    /// The client as an attempt history records it.
    pub fn client(&self) -> Arc<Client> {
        let address = self.address.map(|a| a.to_string()).unwrap_or_default();
        let user_agent = self
            .user_agent
            .as_ref()
            .map(|ua| String::from_utf8_lossy(ua.as_bytes()))
            .unwrap_or_default();
        Arc::new(Client::new(address, &user_agent))
    }
}

/// Executes SQS actions.
pub trait Backend: Send + Sync + 'static {
    /// Executes one action. A receive may wait (long polling) up to its wait time, and returns
    /// early, empty, when the backend shuts down.
    fn execute(
        &self,
        action: Action,
        caller: &Caller,
    ) -> impl Future<Output = Result<Outcome, SqsError>> + Send;

    /// Releases every waiting receive (they answer empty) and refuses new waits.
    fn shut_down(&self);
}
