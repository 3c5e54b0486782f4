//! Recovery: a node's engine rebuilt from its log store, whatever the store is.
//!
//! The newest snapshot is applied first (its records through `Engine::apply`, the function live
//! traffic uses), then every later record, each followed by `Engine::spill` as live traffic does
//! once it has appended, so bodies stay in the log. The store decides how it finds those
//! ([`Recoverable`]); what is done with them is written once, here.

use std::sync::Arc;
use std::time::Instant;

use leaseq_core::{codec, Engine, EngineConfig, ReceiptKey};

use crate::checkpoint::{self, Checkpoints};
use crate::log_store::{LogError, Recoverable};

/// An engine and the store it was recovered from, with the checkpoint policy that continues
/// from the newest snapshot.
pub struct Recovered<S> {
    /// The engine, as of the last record in the store.
    pub engine: Engine,
    /// The store, ready for appends.
    pub store: Arc<S>,
    /// When the next checkpoint is due.
    pub checkpoints: Checkpoints,
}

/// Why a store could not be recovered.
#[derive(Debug, thiserror::Error)]
pub enum RecoverError {
    /// The log could not be opened or replayed.
    #[error(transparent)]
    Log(#[from] LogError),
    /// The newest snapshot could not be read, or is damaged inside (its checksum matched, its
    /// records do not decode).
    #[error("the snapshot at log position {0} could not be loaded: {1}")]
    Snapshot(u64, checkpoint::LoadError),
}

/// Recovers an engine from `opening`, checkpointing after at least `checkpoint_log_bytes_min`
/// logged bytes.
pub fn recover<R: Recoverable>(
    mut opening: R,
    engine_config: EngineConfig,
    key: ReceiptKey,
    checkpoint_log_bytes_min: u64,
) -> Result<Recovered<R::Store>, RecoverError> {
    let started = Instant::now();
    let mut engine = Engine::new(engine_config, key);
    let (snapshot_lsn, snapshot_records, snapshot_bytes) = match opening.latest_snapshot()? {
        Some(snapshot) => {
            let records = checkpoint::load(&mut engine, snapshot.reader)
                .map_err(|error| RecoverError::Snapshot(snapshot.lsn, error))?;
            (snapshot.lsn, records, snapshot.len_bytes)
        }
        None => (0, 0, 0),
    };
    let mut replayed: u64 = 0;
    let mut decoder = codec::Decoder::default();
    let store = opening.replay(snapshot_lsn, &mut |record| {
        let decoded = decoder
            .decode(record.bytes)
            .map_err(|error| error.to_string())?;
        engine.apply(&decoded);
        if let Some(location) = record.location {
            engine.spill(&decoded, location);
        }
        replayed += 1;
        Ok(())
    })?;
    tracing::info!(
        snapshot_lsn,
        snapshot_records,
        log_records = replayed,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "recovered state from the snapshot and the log"
    );
    let checkpoints = Checkpoints::new(checkpoint_log_bytes_min, snapshot_lsn)
        .with_last_snapshot_bytes(snapshot_bytes);
    Ok(Recovered {
        engine,
        store: Arc::new(store),
        checkpoints,
    })
}
