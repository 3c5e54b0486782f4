//! End-to-end tests of the worker against the real leaseq server stack (in process, on a
//! loopback port, spoken to through `aws-sdk-sqs`) and, for the idempotency store, the
//! PostgreSQL of this machine (`LEASEQ_TEST_POSTGRES`, default
//! `host=127.0.0.1 user=postgres dbname=test`).
//!
//! Leases are real here (the server's clock is the real one), so the tests use visibility
//! timeouts of one or two seconds and wait on long polls or the worker's counters, never on
//! fixed sleeps of the test itself.

mod common;
mod fail;
mod fifo;
mod idempotency;
mod lease;
mod outcomes;
