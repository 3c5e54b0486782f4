//! `leaseq queues` and `leaseq stats`: an operator's look at a running server, through the SQS
//! API it serves (`ListQueues`, `GetQueueAttributes`) and leaseq's extra action
//! `LeaseqGetVisibilityAdvice`.
//!
//! The client is `leaseq_sqs::client`, driven to completion call by call: these commands make
//! a handful of small requests a second at most.

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _};
use clap::Args;
use serde_json::{json, Value};

/// How long one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Where the server is.
#[derive(Args, Debug)]
pub struct EndpointArgs {
    /// The server's URL (plain HTTP).
    #[arg(long, env = "LEASEQ_ENDPOINT", default_value = "http://127.0.0.1:9324")]
    pub(crate) endpoint: String,
}

/// Flags of `leaseq queues`.
#[derive(Args, Debug)]
pub struct QueuesArgs {
    #[command(flatten)]
    endpoint: EndpointArgs,
    /// Only queues whose name starts with this.
    #[arg(long, default_value = "")]
    prefix: String,
}

/// Flags of `leaseq stats`.
#[derive(Args, Debug)]
pub struct StatsArgs {
    #[command(flatten)]
    endpoint: EndpointArgs,
    /// Only these queues (repeat or separate with commas); default: every queue.
    #[arg(long = "queue", value_delimiter = ',')]
    queues: Vec<String>,
    /// Redraw the table every `--interval` seconds until interrupted, with rates.
    #[arg(long)]
    watch: bool,
    /// Seconds between redraws with `--watch`.
    #[arg(long, default_value_t = 2.0)]
    interval: f64,
}

/// A blocking JSON 1.0 client of one server: `leaseq_sqs::client` on a runtime of its own
/// thread, since these commands make a handful of calls a second at most.
pub(crate) struct Client {
    sqs: leaseq_sqs::client::Client,
    runtime: tokio::runtime::Runtime,
}

impl Client {
    pub(crate) fn new(endpoint: &str) -> anyhow::Result<Client> {
        let sqs = leaseq_sqs::client::Client::new(endpoint)
            .context("--endpoint")?
            .with_timeout(REQUEST_TIMEOUT);
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        Ok(Client { sqs, runtime })
    }

    /// Calls `action` with `body`; an SQS error becomes an `Err` with its code and message.
    pub(crate) fn call(&self, action: &str, body: &Value) -> anyhow::Result<Value> {
        Ok(self.runtime.block_on(self.sqs.call(action, body))?)
    }

    fn queue_urls(&self, prefix: &str) -> anyhow::Result<Vec<String>> {
        let mut urls = Vec::new();
        let mut token: Option<String> = None;
        // Pages of 1000; a bound on pages keeps a misbehaving server from looping us forever.
        for _ in 0..1000 {
            let mut body = json!({ "QueueNamePrefix": prefix, "MaxResults": 1000 });
            if let Some(token) = &token {
                body["NextToken"] = json!(token);
            }
            let page = self.call("ListQueues", &body)?;
            urls.extend(
                page["QueueUrls"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|url| url.as_str().map(str::to_string)),
            );
            match page["NextToken"].as_str() {
                Some(next) => token = Some(next.to_string()),
                None => return Ok(urls),
            }
        }
        bail!("ListQueues kept returning pages");
    }
}

fn name_of(url: &str) -> &str {
    url.rsplit('/').next().unwrap_or(url)
}

/// `leaseq queues`: one queue name per line.
pub fn queues(args: QueuesArgs) -> anyhow::Result<()> {
    let client = Client::new(&args.endpoint.endpoint)?;
    for url in client.queue_urls(&args.prefix)? {
        println!("{}", name_of(&url));
    }
    Ok(())
}

/// One queue's row of the table.
#[derive(Clone, Debug)]
struct Row {
    name: String,
    visible: u64,
    in_flight: u64,
    delayed: u64,
    visibility_seconds: u64,
    deliveries: u64,
    expired: u64,
    late: u64,
    extended: u64,
    verdict: String,
    recommended_seconds: u64,
    reason: String,
    p99_ms: Option<u64>,
}

fn number(value: &Value) -> u64 {
    value
        .as_str()
        .and_then(|text| text.parse().ok())
        .or_else(|| value.as_u64())
        .unwrap_or(0)
}

fn row(client: &Client, url: &str) -> anyhow::Result<Row> {
    let attributes = client.call(
        "GetQueueAttributes",
        &json!({ "QueueUrl": url, "AttributeNames": ["All"] }),
    )?;
    let attributes = &attributes["Attributes"];
    let advice = client.call("LeaseqGetVisibilityAdvice", &json!({ "QueueUrl": url }))?;
    Ok(Row {
        name: name_of(url).to_string(),
        visible: number(&attributes["ApproximateNumberOfMessages"]),
        in_flight: number(&attributes["ApproximateNumberOfMessagesNotVisible"]),
        delayed: number(&attributes["ApproximateNumberOfMessagesDelayed"]),
        visibility_seconds: number(&attributes["VisibilityTimeout"]),
        deliveries: number(&advice["Deliveries"]),
        expired: number(&advice["LeasesExpired"]),
        late: number(&advice["DeletedLate"]),
        extended: number(&advice["LeasesExtended"]),
        verdict: advice["Verdict"].as_str().unwrap_or("").to_string(),
        recommended_seconds: number(&advice["RecommendedVisibilityTimeout"]),
        reason: advice["Reason"].as_str().unwrap_or("").to_string(),
        p99_ms: advice["ProcessingTimeMs"]
            .get("P99")
            .map(number)
            .filter(|_| advice["ProcessingTimeMs"].is_object()),
    })
}

/// The table of `rows`; with `previous` (and the seconds since), a deliveries/s column.
fn table(rows: &[Row], previous: Option<(&BTreeMap<String, Row>, f64)>) -> String {
    let mut out = format!(
        "{:<24} {:>9} {:>9} {:>8} {:>11} {:>9} {:>8} {:>6} {:>8} {:>8} {:>10}  {}\n",
        "QUEUE",
        "VISIBLE",
        "IN_FLIGHT",
        "DELAYED",
        "DELIVERIES",
        "DELIV/S",
        "EXPIRED",
        "LATE",
        "EXTENDED",
        "P99",
        "VISIBILITY",
        "ADVICE"
    );
    for row in rows {
        let per_second = previous
            .and_then(|(before, seconds)| {
                let before = before.get(&row.name)?;
                (seconds > 0.0).then(|| {
                    format!(
                        "{:.1}",
                        row.deliveries.saturating_sub(before.deliveries) as f64 / seconds
                    )
                })
            })
            .unwrap_or_else(|| "-".into());
        let p99 = row
            .p99_ms
            .map_or_else(|| "-".into(), |ms| format!("{:.1}s", ms as f64 / 1000.0));
        let advice = if row.recommended_seconds != row.visibility_seconds {
            format!("{} -> {}s", row.verdict, row.recommended_seconds)
        } else {
            row.verdict.clone()
        };
        out.push_str(&format!(
            "{:<24} {:>9} {:>9} {:>8} {:>11} {:>9} {:>8} {:>6} {:>8} {:>8} {:>10}  {}\n",
            row.name,
            row.visible,
            row.in_flight,
            row.delayed,
            row.deliveries,
            per_second,
            row.expired,
            row.late,
            row.extended,
            p99,
            format!("{}s", row.visibility_seconds),
            advice
        ));
    }
    if !rows.is_empty() {
        out.push('\n');
    }
    for row in rows {
        out.push_str(&format!("{}: {}\n", row.name, row.reason));
    }
    out
}

fn rows(client: &Client, queues: &[String]) -> anyhow::Result<Vec<Row>> {
    let urls: Vec<String> = if queues.is_empty() {
        client.queue_urls("")?
    } else {
        queues
            .iter()
            .map(|name| {
                let answer = client.call("GetQueueUrl", &json!({ "QueueName": name }))?;
                Ok(answer["QueueUrl"].as_str().unwrap_or_default().to_string())
            })
            .collect::<anyhow::Result<_>>()?
    };
    urls.iter().map(|url| row(client, url)).collect()
}

/// `leaseq stats`: each queue's counts, lease pressure and the advisor's finding.
pub fn stats(args: StatsArgs) -> anyhow::Result<()> {
    let client = Client::new(&args.endpoint.endpoint)?;
    if !args.watch {
        print!("{}", table(&rows(&client, &args.queues)?, None));
        return Ok(());
    }
    if !(args.interval.is_finite() && args.interval >= 0.1) {
        bail!("--interval must be at least 0.1 seconds");
    }
    let mut previous: Option<(BTreeMap<String, Row>, Instant)> = None;
    loop {
        let current = rows(&client, &args.queues)?;
        let now = Instant::now();
        let before = previous
            .as_ref()
            .map(|(rows, at)| (rows, now.duration_since(*at).as_secs_f64()));
        // Clear the screen and go home, then draw: a live table in any ANSI terminal.
        print!(
            "\x1b[2J\x1b[H{} — every {}s, Ctrl-C to stop\n\n{}",
            args.endpoint.endpoint,
            args.interval,
            table(&current, before)
        );
        std::io::stdout().flush()?;
        previous = Some((
            current
                .into_iter()
                .map(|row| (row.name.clone(), row))
                .collect(),
            now,
        ));
        std::thread::sleep(Duration::from_secs_f64(args.interval));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(name: &str, deliveries: u64) -> Row {
        Row {
            name: name.into(),
            visible: 3,
            in_flight: 1,
            delayed: 0,
            visibility_seconds: 30,
            deliveries,
            expired: 2,
            late: 0,
            extended: 0,
            verdict: "raise".into(),
            recommended_seconds: 60,
            reason: "p99 processing 48 s > visibility 30 s".into(),
            p99_ms: Some(48_000),
        }
    }

    #[test]
    fn table_shows_counts_rates_and_advice() {
        let before: BTreeMap<String, Row> = [("jobs".to_string(), sample("jobs", 10))].into();
        let text = table(&[sample("jobs", 30)], Some((&before, 2.0)));
        let line = text.lines().nth(1).unwrap();
        let cells: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(
            cells,
            [
                "jobs", "3", "1", "0", "30", "10.0", "2", "0", "0", "48.0s", "30s", "raise", "->",
                "60s"
            ]
        );
        assert!(text.contains("jobs: p99 processing 48 s > visibility 30 s"));
    }
}
