//! Fresh ids for messages and requests: version-4 UUIDs that need to be unique, not secret.
//!
//! Each thread draws 16 random bytes once and then counts in the low 8: an id is its thread's
//! seed plus how many ids the thread made before. Ids of one thread differ in the counter (2^62
//! of them before it wraps, the version and variant bits aside), ids of different threads,
//! processes or nodes in 122 random bits of seed. Drawing 16 random bytes per id (the
//! thread-local ChaCha generator) cost ~220 instructions a message; `Uuid::new_v4` asks the
//! kernel, a system call per id.
//!
//! Nothing relies on ids being unpredictable: a message is acted on through its receipt, which
//! is sealed (`leaseq_core::receipt`), and every look-up by id is confined to a queue its caller
//! may read.

use std::cell::Cell;

/// 16 bytes no other call in this process, or in any other, is expected to return.
pub(crate) fn unique_bytes() -> [u8; 16] {
    thread_local! {
        static NEXT: Cell<(u64, u64)> = Cell::new({
            let seed: [u8; 16] = rand::random();
            let (high, low) = seed.split_at(8);
            (
                u64::from_be_bytes(high.try_into().expect("8 bytes")),
                u64::from_be_bytes(low.try_into().expect("8 bytes")),
            )
        });
    }
    let (high, low) = NEXT.with(|next| {
        let (high, low) = next.get();
        next.set((high, low.wrapping_add(1)));
        (high, low)
    });
    let mut bytes = [0; 16];
    bytes[..8].copy_from_slice(&high.to_be_bytes());
    bytes[8..].copy_from_slice(&low.to_be_bytes());
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_differ_within_a_thread_and_between_threads() {
        let mine: Vec<[u8; 16]> = (0..1000).map(|_| unique_bytes()).collect();
        let theirs: Vec<[u8; 16]> =
            std::thread::spawn(|| (0..1000).map(|_| unique_bytes()).collect())
                .join()
                .unwrap();
        let all: std::collections::HashSet<[u8; 16]> =
            mine.iter().chain(&theirs).copied().collect();
        assert_eq!(all.len(), 2000);
        // Once version and variant bits are set (as a message id's are), still all distinct.
        let versioned: std::collections::HashSet<_> = all
            .iter()
            .map(|bytes| leaseq_core::MessageId::from_random(*bytes))
            .collect();
        assert_eq!(versioned.len(), 2000);
    }
}
