//! `leaseq message history QUEUE MESSAGE-ID`: a message's delivery attempts, through leaseq's
//! extra action `LeaseqGetMessageHistory`.

use std::fmt::Write as _;

use clap::{Args, Subcommand};
use serde_json::{json, Value};

use crate::admin::{Client, EndpointArgs};

/// `leaseq message ...`
#[derive(Args, Debug)]
pub struct MessageArgs {
    #[command(subcommand)]
    command: MessageCommand,
}

#[derive(Subcommand, Debug)]
enum MessageCommand {
    /// Show a message's attempts, oldest first (the most recent ones the server keeps): when
    /// each was received, its lease deadline (first and last), extensions, how it ended
    /// (leased, expired, released, deleted, failed) and the client's address and user agent.
    /// Works for live messages, messages in a dead-letter queue, and recently deleted ones.
    History {
        /// The queue.
        queue: String,
        /// The message id (`MessageId`).
        message_id: String,
        /// Print the raw JSON answer.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        endpoint: EndpointArgs,
    },
}

/// Runs `leaseq message`.
pub fn run(args: MessageArgs) -> anyhow::Result<()> {
    match args.command {
        MessageCommand::History {
            queue,
            message_id,
            json,
            endpoint,
        } => {
            let client = Client::new(&endpoint.endpoint)?;
            let url = client.call("GetQueueUrl", &json!({ "QueueName": queue }))?;
            let answer = client.call(
                "LeaseqGetMessageHistory",
                &json!({ "QueueUrl": url["QueueUrl"], "MessageId": message_id }),
            )?;
            if json {
                println!("{}", serde_json::to_string_pretty(&answer)?);
            } else {
                print!("{}", render(&queue, &answer));
            }
            Ok(())
        }
    }
}

/// The answer as text: a line about the message, then a table of its attempts.
fn render(queue: &str, answer: &Value) -> String {
    let number = |value: &Value| value.as_u64();
    let time = |value: &Value| number(value).map_or("-".to_string(), utc);
    let mut out = format!(
        "message {} in {queue}: {}, {} receive(s), sent {}",
        answer["MessageId"].as_str().unwrap_or("?"),
        answer["State"].as_str().unwrap_or("?"),
        number(&answer["ApproximateReceiveCount"]).unwrap_or(0),
        time(&answer["SentTimestamp"]),
    );
    if let Some(at) = number(&answer["DeletedTimestamp"]) {
        write!(out, ", deleted {}", utc(at)).unwrap();
    }
    out.push('\n');
    if let Some(source) = answer["DeadLetterQueueSourceArn"].as_str() {
        let source = source.rsplit(':').next().unwrap_or(source);
        writeln!(
            out,
            "dead-lettered from {source} at {}",
            time(&answer["DeadLetteredTimestamp"])
        )
        .unwrap();
    }
    if let Some(reason) = answer["FailureReason"].as_str() {
        writeln!(out, "failed: {reason}").unwrap();
    }
    let attempts = answer["Attempts"].as_array().cloned().unwrap_or_default();
    if attempts.is_empty() {
        out.push_str("no attempts (never received)\n");
        return out;
    }
    writeln!(
        out,
        "{:>7}  {:<24}  {:<24}  {:>4}  {:<8}  {:<24}  client",
        "attempt", "received", "lease until", "ext", "outcome", "ended"
    )
    .unwrap();
    for attempt in &attempts {
        let client = match (
            attempt["ClientAddress"].as_str(),
            attempt["UserAgent"].as_str(),
        ) {
            (Some(address), Some(agent)) => format!("{address} {agent}"),
            _ => "-".to_string(),
        };
        writeln!(
            out,
            "{:>7}  {:<24}  {:<24}  {:>4}  {:<8}  {:<24}  {client}",
            number(&attempt["Attempt"]).unwrap_or(0),
            time(&attempt["ReceivedTimestamp"]),
            time(&attempt["LeaseDeadline"]),
            number(&attempt["Extensions"]).unwrap_or(0),
            attempt["Outcome"].as_str().unwrap_or("?"),
            time(&attempt["EndedTimestamp"]),
        )
        .unwrap();
    }
    out
}

/// Milliseconds since the Unix epoch as UTC, `2026-11-30T06:40:01.123Z`.
fn utc(ms: u64) -> String {
    let (days, ms_of_day) = ((ms / 86_400_000) as i64, ms % 86_400_000);
    // Days to a civil date (Howard Hinnant's algorithm, proleptic Gregorian).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
        ms_of_day / 3_600_000,
        ms_of_day / 60_000 % 60,
        ms_of_day / 1_000 % 60,
        ms_of_day % 1_000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_utc() {
        assert_eq!(utc(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(utc(951_782_400_000), "2000-02-29T00:00:00.000Z");
        assert_eq!(utc(1_796_020_801_123), "2026-11-30T06:40:01.123Z");
    }

    #[test]
    fn the_table_shows_each_attempt_and_how_it_ended() {
        let answer = json!({
            "MessageId": "m-1", "State": "IN_FLIGHT", "ApproximateReceiveCount": 2,
            "SentTimestamp": 1_000,
            "Attempts": [
                {"Attempt": 1, "ReceivedTimestamp": 2_000, "LeaseDeadline": 32_000,
                 "Extensions": 0, "Outcome": "expired", "EndedTimestamp": 32_000,
                 "ClientAddress": "10.0.0.1:5000", "UserAgent": "boto3/1.35"},
                {"Attempt": 2, "ReceivedTimestamp": 40_000, "LeaseDeadline": 130_000,
                 "Extensions": 3, "Outcome": "leased"}
            ]
        });
        let text = render("jobs", &answer);
        let lines: Vec<&str> = text.lines().collect();
        assert!(lines[0].starts_with("message m-1 in jobs: IN_FLIGHT, 2 receive(s)"));
        assert!(lines[2].contains("expired") && lines[2].ends_with("10.0.0.1:5000 boto3/1.35"));
        assert!(lines[3].contains("leased") && lines[3].ends_with('-'));
    }
}
