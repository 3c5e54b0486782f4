//! The leaseq server: everything between the socket and the engine.
//!
//! Bottom-up:
//! - [`log_store`]: the log seam. [`LogStore`] is where records become durable and bodies are
//!   read back; [`log_store::FileLog`] (the embedded write-ahead log) and
//!   [`log_store::MemoryLog`] (`--in-memory`) implement it.
//! - [`host`]: the engine behind its mutex over a log store: apply, append, wait for
//!   durability, poisoning; [`payloads`] (bodies spilled and read back), [`checkpoint`]
//!   (snapshots, segment removal, compaction) and [`recovery`] (snapshot + replay) are written
//!   once against the seam.
//! - [`service`]: every action, one file per group, the one long-poll loop and the one move
//!   driver, on the one [`clock`]. [`service::Api`] is what `http` calls.
//! - [`http`] accepts connections ([`http::serve`]) and requests, bounds their size, decodes
//!   them with the `sqs` crate, hands the [`leaseq_sqs::Action`] to the service and encodes its
//!   [`leaseq_sqs::Outcome`].
//! - [`metrics`] observes requests and leases and renders them for Prometheus; [`advisor`]
//!   recommends a visibility timeout; [`dashboard`] serves `/metrics`, `/api/queues` and the
//!   dashboard page.
//! - [`auth`]: SigV4 verification of SQS requests (`auth = "sigv4"`) on the service's clock.
//! - [`data_dir`]: the data directory (lock, receipt key) of the file log.
//! - [`placements`]: the queues that live outside their name's bucket, which every router reads.
//!
//! Invariant: only this crate reads the real clock (`clock::now_ms`).

pub mod advisor;
pub mod auth;
pub mod checkpoint;
pub mod clock;
pub mod dashboard;
pub mod data_dir;
pub mod host;
pub mod http;
mod ids;
pub mod log_store;
pub mod metrics;
pub mod payloads;
pub mod placements;
pub mod recovery;
pub mod service;
pub mod waiters;

pub use data_dir::{DataDir, OpenError};
pub use http::{router, router_with_metrics, HttpConfig};
pub use log_store::LogStore;
pub use metrics::Metrics;
pub use service::{bucket_of_action, Api, Caller, Service, ServiceConfig};
