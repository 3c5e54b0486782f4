//! Move tasks: the SQS actions and leaseq's extensions that start, list and change them, and the
//! one driver that moves messages of running tasks at their rate.
//!
//! The driver is one tokio task per service ([`Service::drive_moves`]), paced by the service's
//! clock (so tests jump time instead of waiting). Every tick it looks
//! at the running tasks and, for each, moves as many messages as the task's rate allows since
//! it last did (a token bucket holding at most one second of messages), as one engine operation
//! through [`Service::run`]: the `MoveMessages` record is logged and durable before the next
//! batch starts. A crash loses at most the batch whose record was not durable, and that batch
//! was not moved either: replay gives every message in exactly one place. After a restart the
//! engine's running tasks are running again, and the new process's driver picks them up.

use std::collections::HashMap;
use std::sync::Arc;

use leaseq_core::{Error, Field, MessageId, MoveTaskChange};
use leaseq_sqs::error::SqsError;
use leaseq_sqs::{Outcome, TaskHandle};

use super::{BucketCall, Service};

/// How often the driver looks for work.
const DRIVE_TICK_MS: u64 = 50;

/// The rate of a task started without one (SQS optimizes it; we move at its maximum).
pub const AUTOMATIC_RATE_PER_SECOND: u32 = 500;

/// The largest batch (one record) the driver moves at once.
const MOVE_BATCH_MAX: usize = 100;

impl Service {
    /// Moves messages of the running move tasks at their rates until the service shuts down.
    /// The server spawns it once, after recovery.
    pub async fn drive_moves(self: Arc<Self>) {
        let mut shutdown = self.shutdown.subscribe();
        // Per task: when its credit was last topped up, and the messages it may move now.
        let mut credits: HashMap<(usize, u64), (u64, f64)> = HashMap::new();
        let mut failures = super::transfers::HandOverFailures::default();
        loop {
            if *shutdown.borrow_and_update() {
                return;
            }
            self.hand_over_transfers(&mut failures).await;
            // Every bucket's running tasks, each with the host that runs it. (Task ids are per
            // engine: the credits are kept by bucket and task.)
            let tasks: Vec<_> = self
                .hosts
                .iter()
                .enumerate()
                .flat_map(|(bucket, host)| {
                    let tasks = host.engine().running_move_tasks();
                    tasks.into_iter().map(move |task| (bucket, host, task))
                })
                .collect();
            credits.retain(|key, _| {
                tasks
                    .iter()
                    .any(|(bucket, _, task)| (*bucket, task.task_id) == *key)
            });
            for (bucket, host, task) in tasks {
                let key = (bucket, task.task_id);
                let rate = f64::from(task.rate_per_second.unwrap_or(AUTOMATIC_RATE_PER_SECOND));
                let now_ms = self.now_ms();
                let (last_ms, credit) = credits.entry(key).or_insert((now_ms, 1.0));
                let elapsed_seconds = now_ms.saturating_sub(*last_ms) as f64 / 1_000.0;
                *credit = (*credit + rate * elapsed_seconds).min(rate.max(1.0));
                *last_ms = now_ms;
                let count = (credit.floor() as usize).min(MOVE_BATCH_MAX);
                if count == 0 {
                    continue;
                }
                let ids: Vec<MessageId> = (0..count)
                    .map(|_| MessageId::from_random(crate::ids::unique_bytes()))
                    .collect();
                let moved = self
                    .run_on(host, |engine, journal| {
                        engine.move_batch(self.now_ms(), task.task_id, &ids, journal)
                    })
                    .await;
                match moved {
                    Ok(progress) => {
                        if let Some((_, credit)) = credits.get_mut(&key) {
                            *credit -= progress.moved as f64;
                        }
                    }
                    Err(error) => {
                        tracing::error!(task_id = task.task_id, error = %error.message, "a move batch failed");
                    }
                }
            }
            tokio::select! {
                _ = self.clock.sleep_until(self.now_ms() + DRIVE_TICK_MS) => {}
                _ = self.transfers_waiting.notified() => {}
                _ = shutdown.changed() => return,
            }
        }
    }

    pub(super) async fn start_move_task(
        &self,
        source: String,
        destination: Option<String>,
        rate_per_second: Option<u32>,
        limit: Option<u64>,
    ) -> Result<Outcome, SqsError> {
        let sources_elsewhere = self
            .check_move_in_other_buckets(&source, destination.as_deref())
            .await?;
        let info = self
            .run(&source, |engine, journal| {
                let start = if sources_elsewhere {
                    leaseq_core::Engine::start_move_task_with_remote_sources
                } else {
                    leaseq_core::Engine::start_move_task
                };
                start(
                    engine,
                    self.now_ms(),
                    &source,
                    destination.as_deref(),
                    rate_per_second,
                    limit,
                    journal,
                )
            })
            .await?;
        Ok(Outcome::MoveTaskStarted {
            task_id: info.task.task_id,
            source: Arc::from(source),
        })
    }

    /// What a move task out of `source` needs checked in other buckets than `source`'s, which
    /// its engine cannot see: whether queues of other buckets name `source` as their
    /// dead-letter queue (returned), and that a `destination` of another bucket exists and is
    /// of `source`'s kind (as its engine checks a destination of its own). Nothing to check
    /// for a source that does not exist: its engine says so.
    async fn check_move_in_other_buckets(
        &self,
        source: &str,
        destination: Option<&str>,
    ) -> Result<bool, SqsError> {
        let Some(source_fifo) = self
            .host_for(source)?
            .engine()
            .queue(source)
            .map(|queue| queue.fifo().is_some())
        else {
            return Ok(false);
        };
        let source_bucket = self.hosts.bucket_of(source);
        if let Some(destination) =
            destination.filter(|destination| self.hosts.bucket_of(destination) != source_bucket)
        {
            let fifo = self
                .queue_kind(destination)
                .await?
                .ok_or(Error::NotFound(Field::DestinationArn))?;
            if fifo != source_fifo {
                return Err(Error::InvalidTarget {
                    field: Field::DestinationArn,
                    queue: source.to_string(),
                    target: destination.to_string(),
                    source_fifo,
                    problem: leaseq_core::TargetProblem::OtherKind,
                }
                .into());
            }
        }
        let call = BucketCall::SourcesNaming {
            dead_letter_queue: source.into(),
        };
        let elsewhere = self.names_in_buckets(call, Some(source_bucket)).await?;
        Ok(!elsewhere.is_empty())
    }

    pub(super) async fn list_move_tasks(
        &self,
        source: String,
        max_results: usize,
    ) -> Result<Outcome, SqsError> {
        let mut tasks = self
            .read(&source, |engine| engine.move_tasks(&source))
            .await?;
        tasks.truncate(max_results);
        Ok(Outcome::MoveTasks(tasks))
    }

    /// Applies `changes` to the task a handle names, in order, as one operation.
    pub(super) async fn change_move_task(
        &self,
        task: TaskHandle,
        changes: Vec<MoveTaskChange>,
    ) -> Result<leaseq_core::engine::MoveTaskInfo, SqsError> {
        self.run(&task.source, |engine, journal| {
            // As SQS answers a handle: its source queue first, then its task (recorded from
            // AWS in LocalStack's test_cancel_with_invalid_source_arn_in_task_handle and
            // test_cancel_with_invalid_task_id_in_task_handle).
            if engine.queue(&task.source).is_none() {
                return Err(SqsError::from(Error::NotFound(Field::SourceArn)));
            }
            let no_task = || SqsError::from(Error::NotFound(Field::TaskHandle));
            let task_id = task.task_id.ok_or_else(no_task)?;
            let info = engine.move_task(task_id).map_err(|_| no_task())?;
            if info.source.as_deref() != Some(task.source.as_str()) {
                return Err(no_task());
            }
            let now_ms = self.now_ms();
            let mut info = info;
            for change in changes {
                info = engine.change_move_task(now_ms, task_id, change, journal)?;
            }
            Ok(info)
        })
        .await
    }

    pub(super) async fn cancel_move_task(&self, task: TaskHandle) -> Result<Outcome, SqsError> {
        let info = self
            .change_move_task(task, vec![MoveTaskChange::Cancel])
            .await?;
        Ok(Outcome::MoveTaskCancelled {
            moved: info.task.moved,
        })
    }
}
