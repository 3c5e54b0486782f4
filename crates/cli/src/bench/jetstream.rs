//! NATS JetStream in a run (`--jetstream URL`), so leaseq and its closest peer are driven by the
//! same generator, workers and report (BENCHMARKS.md's yardstick for single-message requests).
//!
//! JetStream's calls stand in for the SQS actions of the report: a queue is a file-stored stream
//! with work-queue retention (a message is gone once acknowledged, as an SQS message once
//! deleted) and one durable pull consumer with explicit acks, which every consumer worker shares
//! as SQS consumers share a queue. `SendMessage` is a publish that waits for its `PubAck` (the
//! stream has stored it); `SendMessageBatch` of N is N asynchronous publishes with their acks
//! in flight together, then awaited (JetStream's fastest publishing mode); `ReceiveMessage` is a
//! pull of up to `--receive-max` messages waiting up to `--wait-time-seconds` (a fetch without
//! waiting at 0); `DeleteMessageBatch` acknowledges each message (a publish to its reply
//! subject) and flushes the connection once. Every worker has a connection of its own.

use std::time::Duration;

use async_nats::jetstream::{self, consumer, stream, Context};
use bytes::Bytes;
use futures_util::StreamExt;

use super::client::{CallError, ReceivedMessage};

/// The durable consumer every consumer worker pulls from.
const CONSUMER: &str = "leaseq-bench";
/// How long a pulled message stays leased to its worker before JetStream redelivers it (the
/// bench's SQS consumers use the queue's default visibility timeout, 30 s).
const ACK_WAIT: Duration = Duration::from_secs(30);

fn failed(error: impl std::fmt::Display) -> CallError {
    CallError::Connection(error.to_string())
}

/// The stream of a bench queue: stream names may not hold `.`, `*`, `>` or spaces.
pub fn stream_name(queue: &str) -> String {
    queue
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

/// One worker's connection, with the consumer handle its pulls go through.
pub struct JetStreamConnection {
    client: async_nats::Client,
    context: Context,
    subject: String,
    consumer: consumer::PullConsumer,
}

impl JetStreamConnection {
    pub async fn open(url: &str, stream: &str) -> Result<JetStreamConnection, CallError> {
        let client = async_nats::connect(url).await.map_err(failed)?;
        let context = jetstream::new(client.clone());
        let consumer = context
            .get_consumer_from_stream(CONSUMER, stream)
            .await
            .map_err(failed)?;
        Ok(JetStreamConnection {
            client,
            context,
            subject: stream.to_string(),
            consumer,
        })
    }

    /// Publishes `bodies`: one waits for its ack; more go out with every ack in flight, then
    /// all are awaited. The messages the stream acknowledged.
    pub async fn send(&self, bodies: Vec<String>) -> Result<u64, CallError> {
        let mut acks = Vec::with_capacity(bodies.len());
        for body in bodies {
            let ack = self
                .context
                .publish(self.subject.clone(), Bytes::from(body))
                .await
                .map_err(failed)?;
            acks.push(ack);
        }
        let mut stored = 0;
        for ack in acks {
            ack.await.map_err(failed)?;
            stored += 1;
        }
        Ok(stored)
    }

    /// Pulls up to `max` messages, waiting up to `wait_s` for the first. The receipt is the
    /// message's reply subject, which its ack is published to.
    pub async fn read(&self, max: usize, wait_s: u32) -> Result<Vec<ReceivedMessage>, CallError> {
        let batch = if wait_s > 0 {
            self.consumer
                .batch()
                .max_messages(max)
                .expires(Duration::from_secs(u64::from(wait_s)))
                .messages()
                .await
        } else {
            self.consumer.fetch().max_messages(max).messages().await
        };
        let mut batch = batch.map_err(failed)?;
        let mut received = Vec::with_capacity(max);
        while let Some(message) = batch.next().await {
            let message = message.map_err(failed)?;
            let Some(reply) = message.reply.as_ref() else {
                continue;
            };
            received.push(ReceivedMessage {
                receipt_handle: reply.to_string(),
                body: String::from_utf8_lossy(&message.payload).into_owned(),
            });
        }
        Ok(received)
    }

    /// Acknowledges the messages with these receipts (reply subjects); the number sent.
    pub async fn ack(&self, receipts: &[&str]) -> Result<u64, CallError> {
        for reply in receipts {
            self.client
                .publish(reply.to_string(), Bytes::new())
                .await
                .map_err(failed)?;
        }
        self.client.flush().await.map_err(failed)?;
        Ok(receipts.len() as u64)
    }
}

/// Creates the stream (file storage, work-queue retention) and its durable pull consumer.
pub async fn create_queue(url: &str, stream: &str) -> anyhow::Result<()> {
    let context = jetstream::new(async_nats::connect(url).await?);
    let created = context
        .get_or_create_stream(stream::Config {
            name: stream.to_string(),
            subjects: vec![stream.to_string()],
            retention: stream::RetentionPolicy::WorkQueue,
            storage: stream::StorageType::File,
            ..Default::default()
        })
        .await
        .map_err(|error| anyhow::anyhow!("{error}"))?;
    created
        .get_or_create_consumer(
            CONSUMER,
            consumer::pull::Config {
                durable_name: Some(CONSUMER.to_string()),
                ack_policy: consumer::AckPolicy::Explicit,
                ack_wait: ACK_WAIT,
                max_ack_pending: -1,
                ..Default::default()
            },
        )
        .await
        .map_err(|error| anyhow::anyhow!("{error}"))?;
    Ok(())
}

pub async fn drop_queue(url: &str, stream: &str) -> anyhow::Result<()> {
    let context = jetstream::new(async_nats::connect(url).await?);
    context
        .delete_stream(stream)
        .await
        .map_err(|error| anyhow::anyhow!("{error}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::stream_name;

    #[test]
    fn queue_names_become_stream_names() {
        assert_eq!(stream_name("bench-1a.fifo"), "bench_1a_fifo");
    }
}
