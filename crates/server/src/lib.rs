//! The leaseq server: everything between the socket and the engine.
//!
//! - [`http`] accepts connections ([`http::serve`]) and requests, bounds their size, decodes
//!   them with the `sqs` crate, hands the [`leaseq_sqs::Action`] to a [`Backend`] and encodes
//!   its [`leaseq_sqs::Outcome`].
//! - [`backend`] is the boundary between the protocol and the engine: a backend executes actions.
//! - [`embedded`] is the backend of one process: the lease engine behind a mutex, the clock, the
//!   long-poll waiters.
//! - [`metrics`] observes requests and leases and renders them for Prometheus; [`advisor`]
//!   recommends a visibility timeout; [`dashboard`] serves `/metrics`, `/api/queues` and the
//!   dashboard page.
//!
//! Invariant: only this crate reads the real clock (`clock::now_ms`).

pub mod advisor;
pub mod backend;
pub mod checkpoint;
pub mod clock;
pub mod dashboard;
pub mod data_dir;
pub mod embedded;
pub mod http;
pub mod metrics;
pub mod payloads;
pub mod waiters;

pub use backend::{Backend, Caller};
pub use data_dir::{DataDir, OpenError};
pub use embedded::{Embedded, EmbeddedConfig};
pub use http::{router, router_with_metrics, HttpConfig};
pub use metrics::Metrics;
