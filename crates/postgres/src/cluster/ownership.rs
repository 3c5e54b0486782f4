//! Ownership of the bucket: the session that proves a node alive, the check that it still owns,
//! and the statements a standby reads the owner with.
//!
//! **Liveness** is a session advisory lock, [`LockSession`]: the owner holds
//! `pg_advisory_lock(ownership key)` on a session of its own, and PostgreSQL releases it the
//! moment that session ends, whether the node died (its socket closed) or stopped answering
//! (the session's `idle_session_timeout`, set to the node timeout, ends a session that has sent
//! nothing for that long: a paused process). The owner keeps the session busy with a check of
//! the bucket's epoch every heartbeat, so a healthy owner's session never idles that long.
//!
//! **Safety** is the epoch, never liveness: a node that lost its session may not know it yet,
//! but the node that got the lock next raised the epoch before reading anything, and every flush
//! of the old owner is fenced by that epoch (see `docs/design/postgres.md`). What liveness adds
//! is that reads are answered only while the node's epoch was confirmed recently
//! ([`Confirmed`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::watch;
use tokio_postgres::Client;

use crate::schema::{self, Schema};
use crate::PostgresError;

/// The bucket's owner, as a standby reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct OwnerRow {
    pub node_id: String,
    pub advertise: String,
    pub epoch: i64,
}

/// Every bucket's owner as PostgreSQL records it, once it serves (`owned_since`: a node that
/// is still recovering is not forwarded to), in one statement: the standbys of a node share it
/// (`ClusterNode::watch_cluster`), so a node of many buckets polls PostgreSQL once a round on
/// one session, not once per bucket on a session each.
pub(crate) async fn read_owners(
    client: &Client,
    schema: &Schema,
) -> Result<Vec<(i32, OwnerRow)>, PostgresError> {
    let rows = client
        .query(
            &schema.sql(
                "SELECT bucket, owner, owner_advertise, epoch FROM {schema}.bucket
                 WHERE owner IS NOT NULL AND owner_advertise IS NOT NULL
                   AND owned_since IS NOT NULL",
            ),
            &[],
        )
        .await?;
    Ok(rows
        .iter()
        .map(|row| {
            let owner = OwnerRow {
                node_id: row.get(1),
                advertise: row.get(2),
                epoch: row.get(3),
            };
            (row.get(0), owner)
        })
        .collect())
}

/// Marks `epoch`'s owner of the bucket as serving (`owned_since`), so that standbys forward to
/// it from now on; `false` if the epoch is no longer `epoch` (another node took over).
pub(crate) async fn serving(
    client: &Client,
    schema: &Schema,
    bucket: i32,
    epoch: i64,
) -> Result<bool, PostgresError> {
    update_as_owner(
        client,
        schema,
        bucket,
        epoch,
        "owned_since = clock_timestamp()",
    )
    .await
}

/// The release at the end of a hand-off, on the lock's session and fenced by `epoch`: records
/// that `epoch`'s owner lets no answer leave any more (it retired its confirmation first), so
/// that the next claim need not wait out its confirmation window, and clears the serving mark so
/// that standbys stop forwarding to it. `false` if the epoch is no longer `epoch`.
pub(crate) async fn release(
    client: &Client,
    schema: &Schema,
    bucket: i32,
    epoch: i64,
) -> Result<bool, PostgresError> {
    update_as_owner(
        client,
        schema,
        bucket,
        epoch,
        "released_epoch = epoch, owned_since = NULL",
    )
    .await
}

/// Sets `columns` (an SQL `SET` list of ours) of the bucket's row while its epoch is `epoch`:
/// `false` if it is no longer (another node took over).
async fn update_as_owner(
    client: &Client,
    schema: &Schema,
    bucket: i32,
    epoch: i64,
    columns: &str,
) -> Result<bool, PostgresError> {
    let sql = format!("UPDATE {{schema}}.bucket SET {columns} WHERE bucket = $1 AND epoch = $2");
    let updated = client
        .execute(&schema.sql(&sql), &[&bucket, &epoch])
        .await?;
    Ok(updated == 1)
}

/// Records this node in the node table (or refreshes its row): for operators only.
pub(crate) async fn announce(
    client: &Client,
    schema: &Schema,
    node: &crate::NodeIdentity,
    starting: bool,
) -> Result<(), PostgresError> {
    let sql = if starting {
        "INSERT INTO {schema}.node AS n (node_id, advertise, started_at, seen_at)
         VALUES ($1, $2, clock_timestamp(), clock_timestamp())
         ON CONFLICT (node_id) DO UPDATE SET advertise = $2, started_at = clock_timestamp(),
             seen_at = clock_timestamp()"
    } else {
        "UPDATE {schema}.node SET seen_at = clock_timestamp(), advertise = $2 WHERE node_id = $1"
    };
    client
        .execute(&schema.sql(sql), &[&node.node_id, &node.advertise])
        .await?;
    Ok(())
}

/// Marks this node gone from the node table (its row stays for operators, seen an hour ago),
/// so that the other nodes' placement stops counting it live at once.
pub(crate) async fn leave(
    client: &Client,
    schema: &Schema,
    node: &crate::NodeIdentity,
) -> Result<(), PostgresError> {
    client
        .execute(
            &schema.sql(
                "UPDATE {schema}.node SET seen_at = clock_timestamp() - interval '1 hour'
                 WHERE node_id = $1",
            ),
            &[&node.node_id],
        )
        .await?;
    Ok(())
}

/// The nodes that refreshed their row within `within_ms`, by id.
pub(crate) async fn live_nodes(
    client: &Client,
    schema: &Schema,
    within_ms: i64,
) -> Result<Vec<String>, PostgresError> {
    let rows = client
        .query(
            &schema.sql(
                "SELECT node_id FROM {schema}.node
                 WHERE seen_at > clock_timestamp() - make_interval(secs => $1::bigint / 1000.0)
                 ORDER BY node_id",
            ),
            &[&within_ms],
        )
        .await?;
    Ok(rows.iter().map(|row| row.get(0)).collect())
}

/// The keys of the advisory locks held in this database now (the buckets' ownership locks
/// among them: `Schema::ownership_key`).
pub(crate) async fn held_locks(
    client: &Client,
) -> Result<std::collections::HashSet<i64>, PostgresError> {
    let rows = client
        .query(
            "SELECT (l.classid::bigint << 32) | l.objid::bigint FROM pg_locks l
             WHERE l.locktype = 'advisory' AND l.granted
               AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())",
            &[],
        )
        .await?;
    Ok(rows.iter().map(|row| row.get(0)).collect())
}

/// The offset of PostgreSQL's clock from this host's, in milliseconds, rounded so that this
/// host's clock plus the offset is never ahead of PostgreSQL's: the reading is compared with the
/// host's time *after* the answer arrived, so the round trip makes the offset smaller, never
/// larger. A lease deadline is then never reached early on this node's clock (see
/// `docs/design/cluster.md`, "One clock"). A reading whose answer took long is taken again
/// (`choose_clock_reading`), so that the clock is not behind by a pause.
pub(crate) async fn clock_offset_ms(client: &Client) -> Result<i64, PostgresError> {
    let mut best = None;
    for taken in 1..=super::CLOCK_READINGS_MAX {
        let host_sent_ms = leaseq_server::clock::now_ms() as i64;
        let row = client
            .query_one(
                "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint",
                &[],
            )
            .await?;
        let reading = super::ClockReading {
            host_sent_ms,
            postgres_ms: row.get(0),
            host_received_ms: leaseq_server::clock::now_ms() as i64,
        };
        if let Some(chosen) = super::choose_clock_reading(&mut best, reading, taken) {
            if chosen.round_trip_ms() > super::CLOCK_READING_ROUND_TRIP_MAX_MS {
                tracing::warn!(
                    round_trip_ms = chosen.round_trip_ms(),
                    "every reading of PostgreSQL's clock took long: leases this node grants may \
                     end up to that much early once another node takes over"
                );
            }
            return Ok(super::clock_offset_ms(chosen));
        }
    }
    unreachable!("the last reading is always chosen")
}

/// When this node last saw the bucket's epoch be its own, while an ownership takes
/// confirmations: from [`Confirmed::open`] (a takeover's serving mark) until
/// [`Confirmed::retire`] (a step-down, or a hand-off before it writes its release). A
/// confirmation that arrives after the retirement (a heartbeat's or a request's check already
/// on its way) counts for nothing: the hand-off's release promises that no answer leaves after
/// it, and a request's second confirmation is the last moment before its answer does.
///
/// A confirmation belongs to one ownership, named by its epoch: a request of an ownership that
/// ended never leans on a later ownership's confirmations, even on the same node (one that
/// handed a bucket off to the node placement preferred, and took it back while a request of
/// the first ownership was still on its way, at a bucket call to another node, say).
#[derive(Debug, Default)]
pub(crate) struct Confirmed {
    state: Mutex<ConfirmedState>,
}

#[derive(Debug, Default)]
struct ConfirmedState {
    /// When the last confirmation's statement was sent.
    at: Option<Instant>,
    /// The epoch of the ownership that takes confirmations (0: none does).
    epoch: i64,
}

impl Confirmed {
    /// Takes in a confirmation of `epoch` whose statement was sent `at`: `false`, and nothing
    /// recorded, unless `epoch`'s ownership takes confirmations.
    pub(crate) fn mark(&self, at: Instant, epoch: i64) -> bool {
        let mut state = self.state.lock();
        if state.epoch == 0 || state.epoch != epoch {
            return false;
        }
        if state.at.is_none_or(|last| last < at) {
            state.at = Some(at);
        }
        true
    }

    /// Whether `epoch` was confirmed within `window` of now (never after its ownership ended).
    pub(crate) fn within(&self, window: Duration, epoch: i64) -> bool {
        let state = self.state.lock();
        state.epoch == epoch && super::confirmed_within(state.at.map(|at| at.elapsed()), window)
    }

    /// How long ago the current ownership's epoch was last confirmed (`None`: not since the
    /// node last lost it).
    pub(crate) fn since(&self) -> Option<Duration> {
        self.state.lock().at.map(|at| at.elapsed())
    }

    /// Forgets the last confirmation (the lock's session is gone); a later one would count.
    pub(crate) fn clear(&self) {
        self.state.lock().at = None;
    }

    /// A new ownership, of `epoch`, confirmed it with a statement sent `at`: its confirmations
    /// count.
    pub(crate) fn open(&self, at: Instant, epoch: i64) {
        *self.state.lock() = ConfirmedState {
            at: Some(at),
            epoch,
        };
    }

    /// The ownership ends: the last confirmation is forgotten and none counts any more, until
    /// the next [`Confirmed::open`]. Every request that has not passed its second confirmation
    /// by now fails it.
    pub(crate) fn retire(&self) {
        *self.state.lock() = ConfirmedState::default();
    }
}

/// The session that holds the ownership lock, once [`LockSession::acquire`] returned.
pub(crate) struct LockSession {
    pub client: Arc<Client>,
    /// When the lock was granted (just after, on this host).
    pub granted: tokio::time::Instant,
    /// `false` once the session is known to be gone (a heartbeat failed).
    alive: watch::Receiver<bool>,
    heartbeat: tokio::task::JoinHandle<()>,
}

impl LockSession {
    /// Connects a session that ends itself after `node_timeout` without a statement, then waits
    /// (however long) until it holds the ownership lock of the bucket. Heartbeats start at once,
    /// so the session stays alive while the node recovers; each confirms `confirmed` when the
    /// epoch it reads is `epoch`'s current value (0 until the node has claimed the bucket).
    pub(crate) async fn acquire(
        connection: &str,
        schema: &Schema,
        bucket: i32,
        node_timeout: Duration,
        heartbeat: Duration,
        epoch: watch::Receiver<i64>,
        confirmed: Arc<Confirmed>,
    ) -> Result<LockSession, PostgresError> {
        let (client, closed) = schema::connect_watched(connection).await?;
        // No statement timeout: the lock may take hours to come. The idle timeout counts only
        // between statements, so it is set before the wait, and from the moment the lock is
        // granted a node that stops sending heartbeats loses it.
        client
            .batch_execute(&format!(
                "SET statement_timeout = 0; SET idle_session_timeout = {}",
                node_timeout.as_millis().max(1)
            ))
            .await?;
        client
            .execute(
                "SELECT pg_advisory_lock($1)",
                &[&schema.ownership_key(bucket)],
            )
            .await?;
        let granted = tokio::time::Instant::now();
        let client = Arc::new(client);
        let (alive_tx, alive) = watch::channel(true);
        let heartbeat = tokio::spawn(beat(
            Beat {
                client: client.clone(),
                schema: schema.clone(),
                bucket,
                every: heartbeat,
                epoch,
                confirmed,
                alive: alive_tx,
            },
            closed,
        ));
        Ok(LockSession {
            client,
            granted,
            alive,
            heartbeat,
        })
    }

    /// Whether the session is still believed alive.
    pub(crate) fn alive(&self) -> bool {
        *self.alive.borrow()
    }

    /// Changes when the session is found gone.
    pub(crate) fn alive_watch(&self) -> watch::Receiver<bool> {
        self.alive.clone()
    }
}

impl Drop for LockSession {
    fn drop(&mut self) {
        // The heartbeat holds a clone of the client; once it stops, the last clone goes and the
        // connection closes, which releases the lock.
        self.heartbeat.abort();
    }
}

/// What the heartbeat of a lock's session works with.
struct Beat {
    client: Arc<Client>,
    schema: Schema,
    bucket: i32,
    every: Duration,
    epoch: watch::Receiver<i64>,
    confirmed: Arc<Confirmed>,
    alive: watch::Sender<bool>,
}

impl Beat {
    /// The session is gone (or the epoch is not ours): no read may lean on an earlier
    /// confirmation, and the owner steps down.
    fn lost(&self, why: &str) {
        self.confirmed.clear();
        let _ = self.alive.send(false);
        tracing::warn!(why, "the ownership session is lost");
    }
}

/// Reads the bucket's epoch every `every`, keeping the session busy; marks `confirmed` when it
/// is ours; says the session is lost (and stops) when a read fails or takes longer than a
/// heartbeat should, when the epoch is another's, or the moment the connection ends (a session
/// ended by PostgreSQL releases the lock at once, and another node may take over within
/// milliseconds: an earlier confirmation must not let this node answer reads meanwhile).
async fn beat(state: Beat, mut closed: tokio::sync::oneshot::Receiver<()>) {
    let sql = state
        .schema
        .sql("SELECT epoch FROM {schema}.bucket WHERE bucket = $1");
    let mut ticks = tokio::time::interval(state.every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let read_max = super::heartbeat_answer_max(state.every);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            _ = &mut closed => return state.lost("the connection ended"),
        }
        let sent = Instant::now();
        let bucket = [&state.bucket as &(dyn tokio_postgres::types::ToSql + Sync)];
        let read = state.client.query_opt(&sql, &bucket);
        let row = tokio::select! {
            row = tokio::time::timeout(read_max, read) => row,
            _ = &mut closed => return state.lost("the connection ended"),
        };
        match row {
            Ok(Ok(row)) => {
                let current: Option<i64> = row.map(|row| row.get(0));
                let ours = *state.epoch.borrow();
                if ours != 0 && current == Some(ours) {
                    // The epoch was ours when the statement was sent, at the latest (ignored
                    // once a hand-off retired the ownership's confirmations).
                    state.confirmed.mark(sent, ours);
                } else if ours != 0 {
                    return state.lost("the bucket's epoch is another node's");
                }
            }
            Ok(Err(error)) => return state.lost(&crate::describe(&error)),
            Err(_) => return state.lost("a heartbeat got no answer"),
        }
    }
}

/// One check of the epoch, now, on the ownership session: `true` when it is still `epoch`.
pub(crate) async fn check_epoch(
    client: &Client,
    schema: &Schema,
    bucket: i32,
    epoch: i64,
) -> Result<bool, PostgresError> {
    let row = client
        .query_opt(
            &schema.sql("SELECT epoch FROM {schema}.bucket WHERE bucket = $1"),
            &[&bucket],
        )
        .await?;
    Ok(row.map(|row| row.get::<_, i64>(0)) == Some(epoch))
}
