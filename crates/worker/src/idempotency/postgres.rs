//! The PostgreSQL idempotency store. Records live in one table; a handler whose effect is in the
//! same database writes the effect and the completion in one transaction
//! ([`PostgresStore::complete_in`]), so either both commit or neither does, and a crash between
//! effect and acknowledgement leaves a completed record that turns the redelivery into a no-op.
//!
//! Connections come from a small pool of idle connections kept by the store; each attempt holds
//! at most one while it runs.

use std::sync::Mutex;
use std::time::Duration;

use tokio_postgres::{Client, GenericClient, NoTls, Transaction};
use tracing::warn;

use super::{Begin, Claim, IdempotencyError, IdempotencyStore};

/// The most idle connections the store keeps open.
const IDLE_CONNECTIONS_MAX: usize = 16;

/// How often `begin` tries again when the record it conflicted with vanished (released) before
/// it could be read.
const BEGIN_ATTEMPTS_MAX: usize = 3;

/// Idempotency records in a PostgreSQL table (created if missing).
pub struct PostgresStore {
    config: tokio_postgres::Config,
    table: String,
    idle: Mutex<Vec<Client>>,
}

/// A connection borrowed from the store; returned to its pool when dropped.
pub struct PooledClient<'a> {
    store: &'a PostgresStore,
    client: Option<Client>,
}

impl std::ops::Deref for PooledClient<'_> {
    type Target = Client;
    fn deref(&self) -> &Client {
        self.client.as_ref().expect("present until drop")
    }
}

impl std::ops::DerefMut for PooledClient<'_> {
    fn deref_mut(&mut self) -> &mut Client {
        self.client.as_mut().expect("present until drop")
    }
}

impl Drop for PooledClient<'_> {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            let mut idle = self.store.idle();
            if !client.is_closed() && idle.len() < IDLE_CONNECTIONS_MAX {
                idle.push(client);
            }
        }
    }
}

impl PostgresStore {
    /// Connects with `config` (a libpq-style string such as
    /// `host=127.0.0.1 user=postgres dbname=app`) and creates `table` if it does not exist.
    pub async fn connect(config: &str, table: &str) -> Result<PostgresStore, IdempotencyError> {
        if !is_identifier(table) {
            return Err(IdempotencyError::InvalidTableName(table.to_string()));
        }
        let store = PostgresStore {
            config: config.parse()?,
            table: table.to_string(),
            idle: Mutex::new(Vec::new()),
        };
        let client = store.connection().await?;
        client.batch_execute(&store.create_table_sql()).await?;
        drop(client);
        Ok(store)
    }

    /// The table of idempotency records.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// A connection for the handler's own work (its effect and [`PostgresStore::complete_in`]).
    pub async fn connection(&self) -> Result<PooledClient<'_>, IdempotencyError> {
        let idle = self.idle().pop();
        let client = match idle {
            Some(client) => client,
            None => self.open().await?,
        };
        Ok(PooledClient {
            store: self,
            client: Some(client),
        })
    }

    /// Marks the claim's key completed inside `transaction`, the one holding the handler's
    /// effect. Fails with [`IdempotencyError::Fenced`] if the claim no longer owns the record;
    /// then the transaction must be rolled back (dropping it does that), or the effect would
    /// commit without the right to it.
    pub async fn complete_in(
        &self,
        transaction: &Transaction<'_>,
        claim: &Claim,
        result: Option<&str>,
    ) -> Result<(), IdempotencyError> {
        self.mark_completed(transaction, claim, result).await
    }

    async fn open(&self) -> Result<Client, IdempotencyError> {
        let (client, connection) = self.config.connect(NoTls).await?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                warn!(%error, "idempotency store connection ended");
            }
        });
        Ok(client)
    }

    fn idle(&self) -> std::sync::MutexGuard<'_, Vec<Client>> {
        // The guarded list is only pushed to and popped from; poisoning cannot leave it torn.
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn create_table_sql(&self) -> String {
        format!(
            "CREATE TABLE IF NOT EXISTS {} (
                idempotency_key TEXT PRIMARY KEY,
                status TEXT NOT NULL CHECK (status IN ('processing', 'completed')),
                owner TEXT NOT NULL,
                result TEXT,
                started_at TIMESTAMPTZ NOT NULL,
                completed_at TIMESTAMPTZ
            )",
            self.table
        )
    }

    /// The completion, fenced by owner, on any client or transaction.
    async fn mark_completed(
        &self,
        client: &impl GenericClient,
        claim: &Claim,
        result: Option<&str>,
    ) -> Result<(), IdempotencyError> {
        let sql = format!(
            "UPDATE {} SET status = 'completed', result = $3, completed_at = clock_timestamp()
             WHERE idempotency_key = $1 AND owner = $2 AND status = 'processing'",
            self.table
        );
        let updated = client
            .execute(&sql, &[&claim.key, &claim.owner, &result])
            .await?;
        if updated == 1 {
            return Ok(());
        }
        // Completed already by this very claim (in the handler's transaction) is success.
        let sql = format!(
            "SELECT 1 FROM {} WHERE idempotency_key = $1 AND owner = $2 AND status = 'completed'",
            self.table
        );
        match client.query_opt(&sql, &[&claim.key, &claim.owner]).await? {
            Some(_) => Ok(()),
            None => Err(IdempotencyError::Fenced {
                key: claim.key.clone(),
            }),
        }
    }

    /// Inserts a processing record, or takes over a stale one; `Some(reclaimed)` if this owner
    /// got the record.
    async fn try_claim(
        &self,
        client: &Client,
        key: &str,
        owner: &str,
        stale_after: Duration,
    ) -> Result<Option<bool>, IdempotencyError> {
        // `xmax = 0` holds for a freshly inserted row and not for one updated by ON CONFLICT,
        // which tells a new record from a taken-over one in the same statement.
        let sql = format!(
            "INSERT INTO {table} AS r (idempotency_key, status, owner, started_at)
             VALUES ($1, 'processing', $2, clock_timestamp())
             ON CONFLICT (idempotency_key) DO UPDATE
                 SET owner = EXCLUDED.owner, started_at = EXCLUDED.started_at
                 WHERE r.status = 'processing'
                   AND r.started_at < clock_timestamp() - make_interval(secs => $3)
             RETURNING (xmax = 0) AS inserted",
            table = self.table
        );
        let stale_seconds = stale_after.as_secs_f64();
        let row = client
            .query_opt(&sql, &[&key, &owner, &stale_seconds])
            .await?;
        Ok(row.map(|row| !row.get::<_, bool>("inserted")))
    }
}

impl IdempotencyStore for PostgresStore {
    async fn begin(
        &self,
        key: &str,
        owner: &str,
        stale_after: Duration,
    ) -> Result<Begin, IdempotencyError> {
        let client = self.connection().await?;
        let select = format!(
            "SELECT status, result FROM {} WHERE idempotency_key = $1",
            self.table
        );
        for _ in 0..BEGIN_ATTEMPTS_MAX {
            if let Some(reclaimed) = self.try_claim(&client, key, owner, stale_after).await? {
                return Ok(Begin::Claimed(Claim {
                    key: key.to_string(),
                    owner: owner.to_string(),
                    reclaimed,
                }));
            }
            // The record exists and is not stale; it may vanish (released) before this read, in
            // which case the claim is tried again.
            if let Some(row) = client.query_opt(&select, &[&key]).await? {
                let status: &str = row.get("status");
                return Ok(match status {
                    "completed" => Begin::Completed {
                        result: row.get("result"),
                    },
                    _ => Begin::InProgress,
                });
            }
        }
        Ok(Begin::InProgress)
    }

    async fn complete(&self, claim: &Claim, result: Option<&str>) -> Result<(), IdempotencyError> {
        let client = self.connection().await?;
        self.mark_completed(&*client, claim, result).await
    }

    async fn release(&self, claim: &Claim) -> Result<(), IdempotencyError> {
        let client = self.connection().await?;
        let sql = format!(
            "DELETE FROM {} WHERE idempotency_key = $1 AND owner = $2 AND status = 'processing'",
            self.table
        );
        client.execute(&sql, &[&claim.key, &claim.owner]).await?;
        Ok(())
    }
}

/// A plain SQL identifier, optionally schema-qualified, safe to paste into statements.
fn is_identifier(name: &str) -> bool {
    let part = |part: &str| {
        let mut chars = part.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
            && part.len() <= 63
    };
    let parts: Vec<&str> = name.split('.').collect();
    parts.len() <= 2 && parts.iter().all(|p| part(p))
}

#[cfg(test)]
mod tests {
    use super::is_identifier;

    #[test]
    fn only_plain_identifiers_are_table_names() {
        assert!(is_identifier("processed_message"));
        assert!(is_identifier("app.processed_message_2"));
        assert!(!is_identifier("x; DROP TABLE y"));
        assert!(!is_identifier("a.b.c"));
        assert!(!is_identifier("1abc"));
        assert!(!is_identifier(""));
    }
}
