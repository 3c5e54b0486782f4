//! The test kit of the leaseq workspace, a dev-dependency of every test crate and nothing
//! else: what the tests share instead of copying.
//!
//! - [`sim`]: the seeded-simulation driver (seeds and steps from environment variables, a
//!   failure printed with its seed and the command that replays it). Always there, and free of
//!   leaseq types, so the core's own tests can use it.
//! - [`names`]: unique queue names and scratch directories.
//! - [`golden`]: the diff and the times of golden scripts (the engine's and the conformance
//!   suite's).
//! - [`history`]: a recorder of the operations clients run against a server, with when each
//!   was invoked and completed and what came of it, and a checker of the recorded history
//!   against the lease rules (lost sends, deletes that come back, two holders, stale receipts,
//!   FIFO order, dead-lettering, exact counts). Plain std, so always there.
//! - `launch` (feature `server`): the in-process server on the production accept loop, and the
//!   `leaseq` binary as a child process.
//! - `http` (feature `server`): raw HTTP through hyper's client, and raw bytes for what is not
//!   HTTP, answers parsed by `httparse`.
//! - `sdk` (feature `sdk`): the `aws-sdk-sqs` client for a test server, and SQS's MD5s.

pub mod golden;
pub mod history;
pub mod names;
pub mod sim;

#[cfg(feature = "server")]
pub mod http;
#[cfg(feature = "server")]
pub mod launch;
#[cfg(feature = "sdk")]
pub mod sdk;
