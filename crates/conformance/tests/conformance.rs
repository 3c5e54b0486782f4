//! The conformance suite on every store of this workspace, and on mirrors of two.

use leaseq_conformance::stores::{FileStore, MemoryStore};
use leaseq_conformance::{run_all, run_mirror};

#[test]
fn memory() {
    run_all(&MemoryStore::default());
}

/// One engine per bucket behind the service's router: every script answers as on one engine.
#[test]
fn memory_buckets() {
    run_all(&MemoryStore::buckets(16));
}

/// The buckets spread over three services, as a cluster spreads them over its nodes: each
/// request runs on its queue's bucket's service, and what crosses buckets goes between
/// services as bucket calls. Every script answers as on one engine.
#[test]
fn memory_buckets_on_three_nodes() {
    run_all(&MemoryStore::split(16, 3));
}

#[test]
fn file() {
    run_all(&FileStore::new());
}

#[test]
fn file_checkpointing() {
    run_all(&FileStore::checkpointing());
}

#[test]
fn mirror_memory_and_file() {
    run_mirror(&MemoryStore::default(), &FileStore::new());
}

#[test]
fn mirror_file_and_file_checkpointing() {
    run_mirror(&FileStore::new(), &FileStore::checkpointing());
}
