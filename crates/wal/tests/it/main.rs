//! Integration tests of the write-ahead log, one module per concern. One test binary keeps link
//! time down.

mod common;
mod concurrency;
mod corruption;
mod decoder;
mod faults;
mod leaders;
mod model;
mod reads;
mod roundtrip;
mod segments;
mod snapshots;
