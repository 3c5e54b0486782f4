//! PostgreSQL in a run: the pgmq driver (`--pgmq`), so leaseq on PostgreSQL and pgmq are
//! driven by the same generator with the same request shapes, and the cost a run puts on
//! PostgreSQL (`--postgres-stats`): CPU time of every PostgreSQL process, WAL bytes and commits,
//! per message.
//!
//! pgmq's calls stand in for the SQS actions of the report: `SendMessage` is `pgmq.send`,
//! `SendMessageBatch` is `pgmq.send_batch`, `ReceiveMessage` is `pgmq.read_with_poll` (or
//! `pgmq.read` without a wait), `DeleteMessageBatch` is `pgmq.delete` of an array of ids. Each is
//! one statement, so one round trip and one commit, as pgmq's own clients make them.

use std::time::Duration;

use tokio_postgres::{Client, NoTls, Statement};

use super::client::{CallError, ReceivedMessage};

/// One session of a pgmq worker, with its statements prepared.
pub struct PgmqConnection {
    client: Client,
    queue: String,
    send: Statement,
    send_batch: Statement,
    read: Statement,
    read_with_poll: Statement,
    delete: Statement,
}

fn failed(error: tokio_postgres::Error) -> CallError {
    // A closed session breaks the connection; anything else is PostgreSQL's answer.
    if error.is_closed() {
        CallError::Connection(error.to_string())
    } else {
        CallError::Status {
            status: 500,
            code: error
                .code()
                .map(|c| c.code().to_string())
                .unwrap_or_default(),
            message: error.to_string(),
        }
    }
}

/// Connects with a libpq-style string, the connection driven by a task of its own.
pub async fn connect(connection: &str) -> Result<Client, CallError> {
    let (client, driver) = tokio_postgres::connect(connection, NoTls)
        .await
        .map_err(|error| CallError::Connection(error.to_string()))?;
    tokio::spawn(driver);
    Ok(client)
}

/// pgmq's queue names are identifiers (letters, digits, underscores).
pub fn queue_name(name: &str) -> String {
    name.chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

impl PgmqConnection {
    pub async fn open(connection: &str, queue: &str) -> Result<PgmqConnection, CallError> {
        let client = connect(connection).await?;
        let prepare = |sql: &'static str| client.prepare(sql);
        let send = prepare("SELECT pgmq.send($1, to_jsonb($2::text))").await;
        let send_batch = prepare(
            "SELECT count(*) FROM pgmq.send_batch($1, \
             (SELECT array_agg(to_jsonb(b)) FROM unnest($2::text[]) AS b))",
        )
        .await;
        let read = prepare("SELECT msg_id, message #>> '{}' FROM pgmq.read($1, $2, $3)").await;
        let read_with_poll = prepare(
            "SELECT msg_id, message #>> '{}' FROM pgmq.read_with_poll($1, $2, $3, $4, 100)",
        )
        .await;
        let delete = prepare("SELECT count(*) FROM pgmq.delete($1, $2::bigint[])").await;
        Ok(PgmqConnection {
            send: send.map_err(failed)?,
            send_batch: send_batch.map_err(failed)?,
            read: read.map_err(failed)?,
            read_with_poll: read_with_poll.map_err(failed)?,
            delete: delete.map_err(failed)?,
            client,
            queue: queue.to_string(),
        })
    }

    /// Sends `bodies` (one: `pgmq.send`; more: `pgmq.send_batch`); the messages sent.
    pub async fn send(&self, bodies: &[String]) -> Result<u64, CallError> {
        if let [body] = bodies {
            self.client
                .query_one(&self.send, &[&self.queue, body])
                .await
                .map_err(failed)?;
            return Ok(1);
        }
        let row = self
            .client
            .query_one(&self.send_batch, &[&self.queue, &bodies])
            .await
            .map_err(failed)?;
        Ok(row.get::<_, i64>(0) as u64)
    }

    /// Reads up to `max` messages, leased for `visibility_s`, waiting up to `wait_s` (polling
    /// every 100 ms inside PostgreSQL, pgmq's default long poll). The receipt is the message id.
    pub async fn read(
        &self,
        visibility_s: i32,
        max: i32,
        wait_s: i32,
    ) -> Result<Vec<ReceivedMessage>, CallError> {
        let rows = if wait_s > 0 {
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
                [&self.queue, &visibility_s, &max, &wait_s];
            self.client.query(&self.read_with_poll, &params).await
        } else {
            let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] =
                [&self.queue, &visibility_s, &max];
            self.client.query(&self.read, &params).await
        }
        .map_err(failed)?;
        Ok(rows
            .iter()
            .map(|row| ReceivedMessage {
                receipt_handle: row.get::<_, i64>(0).to_string(),
                body: row.get::<_, Option<String>>(1).unwrap_or_default(),
            })
            .collect())
    }

    /// Deletes the messages with these receipts (ids); the number deleted.
    pub async fn delete(&self, receipts: &[&str]) -> Result<u64, CallError> {
        let ids: Vec<i64> = receipts.iter().filter_map(|r| r.parse().ok()).collect();
        let row = self
            .client
            .query_one(&self.delete, &[&self.queue, &ids])
            .await
            .map_err(failed)?;
        Ok(row.get::<_, i64>(0) as u64)
    }
}

/// Creates a pgmq queue (pgmq's SQL must be installed in the database).
pub async fn create_queue(connection: &str, queue: &str) -> anyhow::Result<()> {
    let client = connect(connection).await?;
    client.execute("SELECT pgmq.create($1)", &[&queue]).await?;
    Ok(())
}

pub async fn drop_queue(connection: &str, queue: &str) -> anyhow::Result<()> {
    let client = connect(connection).await?;
    client
        .execute("SELECT pgmq.drop_queue($1)", &[&queue])
        .await?;
    Ok(())
}

/// What PostgreSQL had done by a moment: CPU time of all its processes on this machine, WAL
/// bytes written, commits.
#[derive(Clone, Copy, Debug, Default)]
pub struct PgSample {
    pub cpu: Duration,
    pub wal_bytes: u64,
    pub commits: u64,
}

impl PgSample {
    /// Samples PostgreSQL through `client` (the CPU time from `/proc`: PostgreSQL must run on
    /// this machine).
    pub async fn take(client: &Client) -> anyhow::Result<PgSample> {
        let row = client
            .query_one(
                "SELECT (pg_current_wal_lsn() - '0/0')::bigint, \
                 (SELECT sum(xact_commit)::bigint FROM pg_stat_database), \
                 current_setting('data_directory')",
                &[],
            )
            .await?;
        let data_directory: String = row.get(2);
        Ok(PgSample {
            cpu: postgres_cpu_time(&data_directory),
            wal_bytes: row.get::<_, i64>(0) as u64,
            commits: row.get::<_, i64>(1) as u64,
        })
    }
}

/// CPU time of the PostgreSQL server whose data directory is `data_directory`: its postmaster
/// and every process it started (backends, the WAL writer, the checkpointer...), summed from
/// `/proc`, so other clusters on the machine do not count. If the postmaster cannot be found
/// (its `postmaster.pid` unreadable), every process named `postgres` counts. A backend that
/// ended during the run takes its time with it, so runs keep their sessions open.
fn postgres_cpu_time(data_directory: &str) -> Duration {
    let postmaster = std::fs::read_to_string(format!("{data_directory}/postmaster.pid"))
        .ok()
        .and_then(|pid_file| pid_file.lines().next()?.trim().parse::<u32>().ok());
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Duration::ZERO;
    };
    entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&pid| match postmaster {
            Some(postmaster) => {
                pid == postmaster || super::stats::process_parent(pid) == Some(postmaster)
            }
            None => std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|comm| comm.trim() == "postgres"),
        })
        .filter_map(|pid| super::stats::process_cpu_time(pid).ok())
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queue_names_become_identifiers() {
        assert_eq!(queue_name("bench-1a2b.x"), "bench_1a2b_x");
    }
}
