//! `leaseq dlq peek` and `leaseq redrive start|pause|resume|update|cancel|status`: the
//! dead-letter runbook from a shell, against a running server.
//!
//! The commands speak the SQS JSON protocol to the server (the same requests any client can
//! send), using leaseq's extension actions (`LeaseqPeekMessages`, `Leaseq*MessageMoveTask`)
//! where SQS has none. A task is named by its source queue: a source has at most one active
//! task, and `status` shows the most recent ones.

use std::io::Write as _;
use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::{Args, Subcommand};
use serde_json::{json, Value};

/// Where the server is.
#[derive(Args, Clone)]
pub struct Endpoint {
    /// The server's URL.
    #[arg(long, default_value = "http://127.0.0.1:9324", global = true)]
    endpoint: String,
}

/// `leaseq dlq ...`
#[derive(Args)]
pub struct DlqArgs {
    #[command(subcommand)]
    command: DlqCommand,
    #[command(flatten)]
    endpoint: Endpoint,
}

#[derive(Subcommand)]
enum DlqCommand {
    /// List a queue's messages (body, attributes, receive count, enqueue time, source queue)
    /// without leasing them or changing any count.
    Peek {
        /// The queue (a dead-letter queue, above all).
        queue: String,
        /// Messages per page (1-100).
        #[arg(long, default_value_t = 10)]
        max: u32,
        /// Start after this sequence number (the `next:` of the previous page).
        #[arg(long)]
        after: Option<u64>,
        /// Print the raw JSON answer.
        #[arg(long)]
        json: bool,
    },
}

/// `leaseq redrive ...`
#[derive(Args)]
pub struct RedriveArgs {
    #[command(subcommand)]
    command: RedriveCommand,
    #[command(flatten)]
    endpoint: Endpoint,
}

#[derive(Subcommand)]
enum RedriveCommand {
    /// Start moving a dead-letter queue's messages back to their source queues (or to --to).
    Start {
        /// The dead-letter queue.
        queue: String,
        /// Move every message to this queue instead of to the queue it came from.
        #[arg(long)]
        to: Option<String>,
        /// Messages per second (1-500); automatic without.
        #[arg(long)]
        rate: Option<u32>,
        /// A canary: move only this many messages, then pause.
        #[arg(long)]
        limit: Option<u64>,
        /// Show progress until the task stops.
        #[arg(long)]
        watch: bool,
    },
    /// Pause the queue's active task.
    Pause {
        /// The dead-letter queue.
        queue: String,
    },
    /// Resume the queue's paused task.
    Resume {
        /// The dead-letter queue.
        queue: String,
        /// Show progress until the task stops.
        #[arg(long)]
        watch: bool,
    },
    /// Change the active task's rate or message limit.
    Update {
        /// The dead-letter queue.
        queue: String,
        /// Messages per second (1-500), or 0 for automatic.
        #[arg(long)]
        rate: Option<u32>,
        /// Total messages before it pauses, or 0 for no limit.
        #[arg(long)]
        limit: Option<u64>,
    },
    /// Cancel the queue's active task (what moved stays moved).
    Cancel {
        /// The dead-letter queue.
        queue: String,
    },
    /// Show the queue's recent tasks; with --watch, a live progress line for the newest.
    Status {
        /// The dead-letter queue.
        queue: String,
        /// Redraw the newest task's progress until it stops.
        #[arg(long)]
        watch: bool,
    },
}

/// Runs `leaseq dlq`.
pub fn run_dlq(args: DlqArgs) -> anyhow::Result<()> {
    runtime()?.block_on(async move {
        let client = Client::new(&args.endpoint.endpoint)?;
        match args.command {
            DlqCommand::Peek {
                queue,
                max,
                after,
                json,
            } => peek(&client, &queue, max, after, json).await,
        }
    })
}

/// Runs `leaseq redrive`.
pub fn run_redrive(args: RedriveArgs) -> anyhow::Result<()> {
    runtime()?.block_on(async move {
        let client = Client::new(&args.endpoint.endpoint)?;
        match args.command {
            RedriveCommand::Start {
                queue,
                to,
                rate,
                limit,
                watch,
            } => {
                let mut request = json!({"SourceArn": client.arn(&queue).await?});
                if let Some(to) = to {
                    request["DestinationArn"] = json!(client.arn(&to).await?);
                }
                if let Some(rate) = rate {
                    request["MaxNumberOfMessagesPerSecond"] = json!(rate);
                }
                if let Some(limit) = limit {
                    request["LeaseqMessageLimit"] = json!(limit);
                }
                client.call("StartMessageMoveTask", request).await?;
                println!("started a move task on {queue}");
                finish(&client, &queue, watch).await
            }
            RedriveCommand::Pause { queue } => {
                change(&client, &queue, "LeaseqPauseMessageMoveTask", json!({})).await
            }
            RedriveCommand::Resume { queue, watch } => {
                change(&client, &queue, "LeaseqResumeMessageMoveTask", json!({})).await?;
                finish(&client, &queue, watch).await
            }
            RedriveCommand::Update { queue, rate, limit } => {
                let mut request = json!({});
                if let Some(rate) = rate {
                    request["MaxNumberOfMessagesPerSecond"] = json!(rate);
                }
                if let Some(limit) = limit {
                    request["LeaseqMessageLimit"] = json!(limit);
                }
                change(&client, &queue, "LeaseqUpdateMessageMoveTask", request).await
            }
            RedriveCommand::Cancel { queue } => {
                let handle = active_handle(&client, &queue).await?;
                let answer = client
                    .call("CancelMessageMoveTask", json!({"TaskHandle": handle}))
                    .await?;
                println!(
                    "cancelled: {} messages moved before the cancel",
                    answer["ApproximateNumberOfMessagesMoved"]
                );
                Ok(())
            }
            RedriveCommand::Status { queue, watch } => {
                if watch {
                    return finish(&client, &queue, true).await;
                }
                let tasks = tasks(&client, &queue).await?;
                if tasks.is_empty() {
                    println!("no move tasks on {queue}");
                }
                for task in &tasks {
                    println!("{}", describe(task));
                }
                Ok(())
            }
        }
    })
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?)
}

async fn peek(
    client: &Client,
    queue: &str,
    max: u32,
    after: Option<u64>,
    raw: bool,
) -> anyhow::Result<()> {
    let mut request = json!({"QueueUrl": client.url(queue).await?, "MaxNumberOfMessages": max});
    if let Some(after) = after {
        request["NextToken"] = json!(after.to_string());
    }
    let answer = client.call("LeaseqPeekMessages", request).await?;
    if raw {
        println!("{}", serde_json::to_string_pretty(&answer)?);
        return Ok(());
    }
    let messages = answer["Messages"].as_array().cloned().unwrap_or_default();
    if messages.is_empty() {
        println!("(no messages)");
    }
    for message in &messages {
        let attributes = &message["Attributes"];
        let text = |key: &str| attributes[key].as_str().unwrap_or("-").to_string();
        let source = attributes["DeadLetterQueueSourceArn"]
            .as_str()
            .map_or("-".to_string(), |arn| {
                arn.rsplit(':').next().unwrap_or(arn).to_string()
            });
        println!(
            "#{} {} {} receives={} redrives={} sent_ms={} source={} body={}",
            message["LeaseqSequence"],
            message["MessageId"].as_str().unwrap_or_default(),
            message["LeaseqState"].as_str().unwrap_or_default(),
            text("ApproximateReceiveCount"),
            message["LeaseqRedriveGeneration"],
            text("SentTimestamp"),
            source,
            serde_json::to_string(&message["Body"])?,
        );
        if let Some(reason) = message["LeaseqFailureReason"].as_str() {
            println!("    failed: {reason}");
        }
        if let Some(attributes) = message["MessageAttributes"].as_object() {
            for (name, value) in attributes {
                println!("    {name} = {value}");
            }
        }
    }
    if let Some(next) = answer["NextToken"].as_str() {
        println!("next: --after {next}");
    }
    Ok(())
}

async fn change(
    client: &Client,
    queue: &str,
    action: &str,
    mut request: Value,
) -> anyhow::Result<()> {
    request["TaskHandle"] = json!(active_handle(client, queue).await?);
    let task = client.call(action, request).await?;
    println!("{}", describe(&task));
    Ok(())
}

async fn tasks(client: &Client, queue: &str) -> anyhow::Result<Vec<Value>> {
    let answer = client
        .call(
            "ListMessageMoveTasks",
            json!({"SourceArn": client.arn(queue).await?, "MaxResults": 10}),
        )
        .await?;
    Ok(answer["Results"].as_array().cloned().unwrap_or_default())
}

async fn active_handle(client: &Client, queue: &str) -> anyhow::Result<String> {
    let tasks = tasks(client, queue).await?;
    match tasks.first() {
        Some(task) if matches!(task["Status"].as_str(), Some("RUNNING" | "PAUSED")) => {
            Ok(task["TaskHandle"].as_str().unwrap_or_default().to_string())
        }
        _ => bail!("{queue} has no running or paused move task"),
    }
}

/// One line about a task.
fn describe(task: &Value) -> String {
    let mut line = format!(
        "{} moved {}/{}",
        task["Status"].as_str().unwrap_or("?"),
        task["ApproximateNumberOfMessagesMoved"],
        task["ApproximateNumberOfMessagesToMove"],
    );
    match task["MaxNumberOfMessagesPerSecond"].as_u64() {
        Some(rate) => line.push_str(&format!(" rate={rate}/s")),
        None => line.push_str(" rate=auto"),
    }
    if let Some(limit) = task["LeaseqMessageLimit"].as_u64() {
        line.push_str(&format!(" limit={limit}"));
    }
    if let Some(destination) = task["DestinationArn"].as_str() {
        line.push_str(&format!(
            " to={}",
            destination.rsplit(':').next().unwrap_or(destination)
        ));
    }
    if let Some(held) = task["LeaseqMessagesHeldBack"].as_u64() {
        line.push_str(&format!(
            " held_back={held} (redriven too often: left in place)"
        ));
    }
    if let Some(reason) = task["FailureReason"].as_str() {
        line.push_str(&format!(" reason: {reason}"));
    }
    line
}

/// With `watch`, redraws a progress bar and the observed rate until the newest task is no
/// longer running; then prints its final line.
async fn finish(client: &Client, queue: &str, watch: bool) -> anyhow::Result<()> {
    const WIDTH: u64 = 30;
    let mut last: Option<(std::time::Instant, u64)> = None;
    let mut rate_seen = 0.0;
    loop {
        let tasks = tasks(client, queue).await?;
        let task = tasks.first().context("no move task")?.clone();
        let running = task["Status"] == "RUNNING";
        if !watch || !running {
            if watch {
                println!();
            }
            println!("{}", describe(&task));
            return Ok(());
        }
        let moved = task["ApproximateNumberOfMessagesMoved"]
            .as_u64()
            .unwrap_or(0);
        let total = task["ApproximateNumberOfMessagesToMove"]
            .as_u64()
            .unwrap_or(0)
            .max(1);
        let now = std::time::Instant::now();
        if let Some((then, moved_then)) = last {
            let seconds = now.duration_since(then).as_secs_f64();
            if seconds > 0.0 {
                rate_seen = (moved.saturating_sub(moved_then)) as f64 / seconds;
            }
        }
        last = Some((now, moved));
        let filled = (moved.min(total) * WIDTH / total) as usize;
        print!(
            "\r[{}{}] {moved}/{total} {rate_seen:.0} msg/s   ",
            "#".repeat(filled),
            "-".repeat(WIDTH as usize - filled)
        );
        std::io::stdout().flush()?;
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// The JSON-protocol client (`leaseq_sqs::client`) with the look-ups these commands share.
struct Client {
    sqs: leaseq_sqs::client::Client,
}

impl Client {
    fn new(endpoint: &str) -> anyhow::Result<Client> {
        let sqs = leaseq_sqs::client::Client::new(endpoint).context("--endpoint")?;
        Ok(Client { sqs })
    }

    async fn call(&self, action: &str, body: Value) -> anyhow::Result<Value> {
        Ok(self.sqs.call(action, &body).await?)
    }

    async fn url(&self, queue: &str) -> anyhow::Result<String> {
        let answer = self
            .call("GetQueueUrl", json!({"QueueName": queue}))
            .await?;
        Ok(answer["QueueUrl"].as_str().unwrap_or_default().to_string())
    }

    async fn arn(&self, queue: &str) -> anyhow::Result<String> {
        let answer = self
            .call(
                "GetQueueAttributes",
                json!({"QueueUrl": self.url(queue).await?, "AttributeNames": ["QueueArn"]}),
            )
            .await?;
        Ok(answer["Attributes"]["QueueArn"]
            .as_str()
            .unwrap_or_default()
            .to_string())
    }
}
