//! An in-memory idempotency store, for tests, examples and single-process workers whose effects
//! are themselves in memory. Its records vanish with the process.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use super::{Begin, Claim, IdempotencyError, IdempotencyStore};

#[derive(Debug)]
struct Record {
    owner: String,
    started_at: Instant,
    /// `Some` once completed, with the recorded result.
    completed: Option<Option<String>>,
}

/// Idempotency records in a map.
#[derive(Debug, Default)]
pub struct MemoryStore {
    records: Mutex<HashMap<String, Record>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> MemoryStore {
        MemoryStore::default()
    }

    fn records(&self) -> std::sync::MutexGuard<'_, HashMap<String, Record>> {
        // Every update below is a single insert or field write, so a poisoned map is whole.
        self.records.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl IdempotencyStore for MemoryStore {
    async fn begin(
        &self,
        key: &str,
        owner: &str,
        stale_after: Duration,
    ) -> Result<Begin, IdempotencyError> {
        let now = Instant::now();
        let mut records = self.records();
        let claim = |reclaimed| {
            Begin::Claimed(Claim {
                key: key.to_string(),
                owner: owner.to_string(),
                reclaimed,
            })
        };
        let Some(record) = records.get_mut(key) else {
            let record = Record {
                owner: owner.to_string(),
                started_at: now,
                completed: None,
            };
            records.insert(key.to_string(), record);
            return Ok(claim(false));
        };
        if let Some(result) = &record.completed {
            return Ok(Begin::Completed {
                result: result.clone(),
            });
        }
        if now.duration_since(record.started_at) < stale_after {
            return Ok(Begin::InProgress);
        }
        record.owner = owner.to_string();
        record.started_at = now;
        Ok(claim(true))
    }

    async fn complete(&self, claim: &Claim, result: Option<&str>) -> Result<(), IdempotencyError> {
        let mut records = self.records();
        match records.get_mut(&claim.key) {
            Some(record) if record.owner == claim.owner => {
                if record.completed.is_none() {
                    record.completed = Some(result.map(str::to_string));
                }
                Ok(())
            }
            _ => Err(IdempotencyError::Fenced {
                key: claim.key.clone(),
            }),
        }
    }

    async fn release(&self, claim: &Claim) -> Result<(), IdempotencyError> {
        let mut records = self.records();
        let owned_and_open = records
            .get(&claim.key)
            .is_some_and(|r| r.owner == claim.owner && r.completed.is_none());
        if owned_and_open {
            records.remove(&claim.key);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const STALE: Duration = Duration::from_secs(60);

    fn claimed(begin: Begin) -> Claim {
        match begin {
            Begin::Claimed(claim) => claim,
            other => panic!("expected a claim, got {other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_completed_key_is_a_duplicate_and_a_processing_one_is_in_progress() {
        let store = MemoryStore::new();
        let claim = claimed(store.begin("k", "a", STALE).await.unwrap());
        assert!(!claim.reclaimed());
        assert_eq!(
            store.begin("k", "b", STALE).await.unwrap(),
            Begin::InProgress
        );
        store.complete(&claim, Some("done")).await.unwrap();
        let duplicate = store.begin("k", "c", STALE).await.unwrap();
        assert_eq!(
            duplicate,
            Begin::Completed {
                result: Some("done".into())
            }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_stale_record_is_taken_over_and_fences_its_old_owner() {
        let store = MemoryStore::new();
        let old = claimed(store.begin("k", "a", STALE).await.unwrap());
        tokio::time::advance(STALE + Duration::from_secs(1)).await;
        let new = claimed(store.begin("k", "b", STALE).await.unwrap());
        assert!(new.reclaimed());
        assert!(matches!(
            store.complete(&old, None).await,
            Err(IdempotencyError::Fenced { .. })
        ));
        store.release(&old).await.unwrap();
        store.complete(&new, None).await.unwrap();
        assert_eq!(
            store.begin("k", "c", STALE).await.unwrap(),
            Begin::Completed { result: None }
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_released_key_can_be_claimed_at_once() {
        let store = MemoryStore::new();
        let first = claimed(store.begin("k", "a", STALE).await.unwrap());
        store.release(&first).await.unwrap();
        let second = claimed(store.begin("k", "b", STALE).await.unwrap());
        assert!(!second.reclaimed());
    }
}
