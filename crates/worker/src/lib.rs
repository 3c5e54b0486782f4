//! `leaseq-worker`: the consumer half of a lease-based queue, for leaseq and for Amazon SQS.
//!
//! A queue hands a message out on a lease (the visibility timeout). Consuming it correctly means
//! keeping the lease while the work is healthy, knowing when it is lost, acknowledging only after
//! the effect is durable, classifying failures and tolerating duplicates. This crate does that
//! for the application, which writes only a handler:
//!
//! ```no_run
//! use leaseq_worker::{LeaseContext, Message, Outcome, Worker, WorkerConfig};
//!
//! # async fn example(client: aws_sdk_sqs::Client) -> Result<(), leaseq_worker::ConfigError> {
//! let config = WorkerConfig::new("http://127.0.0.1:9324/000000000000/jobs");
//! let worker = Worker::new(client, config)?.start(|message: Message, lease: LeaseContext| async move {
//!     tracing::info!(attempt = lease.attempt(), body = message.body(), "working");
//!     Outcome::Ack
//! });
//! tokio::signal::ctrl_c().await.ok();
//! let report = worker.shutdown().await;
//! println!("{report:?}");
//! # Ok(())
//! # }
//! ```
//!
//! The pieces: [`Worker`] receives (long polling, batches, at most `concurrency` messages in
//! hand) and runs one handler task per message; the lease keeper extends the leases of messages
//! in hand in batches, early and with slack, up to a total cap and only while the handler reports
//! progress (when a progress window is set); a lost lease cancels the handler's [`LeaseContext`];
//! the handler's [`Outcome`] decides what happens to the message; [`idempotency`] turns duplicate
//! deliveries into no-ops. Only the SQS API is used (through `aws-sdk-sqs`), so the same worker
//! runs against leaseq and against Amazon SQS.

mod backoff;
mod config;
mod context;
pub mod idempotency;
mod lease;
mod message;
mod metrics;
mod outcome;
mod settle;
mod worker;

pub use backoff::Backoff;
pub use config::{ConfigError, FailurePolicy, LeaseConfig, WorkerConfig};
pub use context::{LeaseContext, LeaseLoss};
pub use message::Message;
pub use metrics::MetricsSnapshot;
pub use outcome::Outcome;
pub use worker::{Handler, RunningWorker, ShutdownReport, Worker};
