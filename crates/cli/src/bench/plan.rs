//! The plan of a bench run: the flags resolved against a workload preset, checked against the
//! limits, and cut into phases (an optional backlog fill, then the measured run).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, ensure};
use clap::ValueEnum;
use serde::Serialize;

use super::BenchArgs;

/// The standard workloads of BENCHMARKS.md that the generator can run by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Workload {
    /// W1 send: one 256 B message per SendMessage.
    W1,
    /// W2 send-batch: SendMessageBatch of 10 × 256 B.
    W2,
    /// W3 consume: ReceiveMessage (max 10, long poll) + DeleteMessageBatch on a 200 000 backlog.
    W3,
    /// W4 mixed: producers and consumers at once, with end-to-end latency.
    W4,
    /// W5 backlog: W3 on a backlog of the size given by `--backlog`.
    W5,
}

impl Workload {
    fn title(self) -> &'static str {
        match self {
            Workload::W1 => "W1 send",
            Workload::W2 => "W2 send-batch",
            Workload::W3 => "W3 consume",
            Workload::W4 => "W4 mixed",
            Workload::W5 => "W5 backlog",
        }
    }
}

/// Bounds on the flags, so that a typo cannot start a run that never ends or exhausts memory.
struct Limits;

impl Limits {
    const WORKERS_MAX: usize = 10_000;
    const DURATION_MAX_S: f64 = 24.0 * 3600.0;
    /// SQS's largest message.
    const MESSAGE_SIZE_MAX_BYTES: usize = 1024 * 1024;
    /// SQS's largest batch and largest receive.
    const BATCH_SIZE_MAX: usize = 10;
    const WAIT_TIME_MAX_S: u32 = 20;
    /// Every body starts with the send time in microseconds since the epoch, 20 digits.
    const TIMESTAMP_BYTES: usize = 20;
    const RATE_MAX_PER_S: f64 = 10_000_000.0;
    /// Well under the default visibility timeout (30 s), so held messages are not redelivered.
    const WORK_MAX_MS: u64 = 20_000;
}

/// Everything a run needs to know, with every default filled in.
#[derive(Debug, Clone, Serialize)]
pub struct Plan {
    pub workload: Option<Workload>,
    pub endpoint: String,
    /// `--ca-bundle`, for an `https://` endpoint.
    pub ca_bundle: Option<std::path::PathBuf>,
    pub region: String,
    pub queue: String,
    pub keep: bool,
    pub producers: usize,
    pub consumers: usize,
    pub duration_s: f64,
    pub message_size_bytes: usize,
    pub batch_size: usize,
    pub messages_max: Option<u64>,
    pub backlog: u64,
    pub fill_concurrency: usize,
    pub fill_timeout_s: f64,
    pub receive_max: usize,
    pub wait_time_seconds: u32,
    pub server_pid: Option<u32>,
    pub threads: usize,
    /// Message groups of a FIFO queue; `None` drives a standard queue.
    pub groups: Option<u64>,
    /// Tenants (group ids on a standard queue) and tenant `t0`'s weight among them.
    pub tenants: Option<(u64, u64)>,
    /// The producers' total send rate of the measured phase (`None`: as fast as answered).
    pub rate_per_s: Option<f64>,
    /// How long a consumer holds each received message before deleting it.
    pub work_ms: u64,
    /// `--queue-attribute`s, in the order given.
    pub queue_attributes_given: Vec<(String, String)>,
    /// pgmq's database, when pgmq is driven instead of an SQS endpoint.
    pub pgmq: Option<String>,
    /// NATS JetStream's URL, when JetStream is driven instead of an SQS endpoint.
    pub jetstream: Option<String>,
    /// Where PostgreSQL's costs are read from, if they are reported.
    pub postgres_stats: Option<String>,
}

/// One phase of a run: who works, and when the phase is complete.
#[derive(Debug, Clone)]
pub struct Phase {
    pub name: &'static str,
    pub producers: usize,
    pub consumers: usize,
    pub batch_size: usize,
    /// Producers stop once this many messages have been handed out to send.
    pub send_limit: Option<u64>,
    /// Consumers stop once this many messages have been deleted.
    pub consume_target: Option<u64>,
    pub duration: Duration,
    /// Whether consumers measure send → receive latency (only meaningful when the messages were
    /// sent during the same phase).
    pub record_end_to_end: bool,
    /// The producers' total send rate (`None`: each sends as soon as its last send answered).
    pub rate_per_s: Option<f64>,
}

impl Phase {
    /// The backlog was cut short: never wait for more messages than it holds.
    pub fn limit_consumption_to(&mut self, available: u64) {
        if self.producers == 0 {
            self.consume_target = Some(self.consume_target.map_or(available, |t| t.min(available)));
        }
    }
}

impl Plan {
    pub fn from_args(args: &BenchArgs) -> anyhow::Result<Plan> {
        let workload = args.workload;
        let (producers_default, consumers_default) = match workload {
            Some(Workload::W1 | Workload::W2) | None => (args.concurrency.unwrap_or(16), 0),
            Some(Workload::W3 | Workload::W5) => (0, args.concurrency.unwrap_or(16)),
            Some(Workload::W4) => {
                let workers = args.concurrency.unwrap_or(16);
                (workers, workers)
            }
        };
        let backlog_default = match workload {
            Some(Workload::W3) => 200_000,
            Some(Workload::W5) => 1_000,
            _ => 0,
        };
        let duration_default = match workload {
            Some(Workload::W3 | Workload::W4 | Workload::W5) => 60.0,
            _ => 10.0,
        };
        let batch_default = if workload == Some(Workload::W2) {
            10
        } else {
            1
        };
        let plan = Plan {
            workload,
            endpoint: args.endpoint.clone(),
            ca_bundle: args.ca_bundle.clone(),
            region: args.region.clone(),
            queue: {
                let name = args.queue.clone().unwrap_or_else(unique_queue_name);
                match args.groups {
                    Some(_) if !name.ends_with(".fifo") => format!("{name}.fifo"),
                    _ => name,
                }
            },
            keep: args.keep,
            producers: args.producers.unwrap_or(producers_default),
            consumers: args.consumers.unwrap_or(consumers_default),
            duration_s: args.duration.unwrap_or(duration_default),
            message_size_bytes: args.message_size.unwrap_or(256),
            batch_size: args.batch_size.unwrap_or(batch_default),
            messages_max: args.messages,
            backlog: args.backlog.unwrap_or(backlog_default),
            fill_concurrency: args.fill_concurrency,
            fill_timeout_s: args.fill_timeout,
            receive_max: args.receive_max,
            wait_time_seconds: args.wait_time_seconds,
            server_pid: args.server_pid,
            pgmq: args.pgmq.clone(),
            jetstream: args.jetstream.clone(),
            postgres_stats: args.postgres_stats.clone(),
            threads: args.threads.unwrap_or_else(available_cpus),
            groups: args.groups,
            tenants: args.tenants.map(|tenants| (tenants, args.noisy_weight)),
            rate_per_s: args.rate,
            work_ms: args.work_ms,
            queue_attributes_given: args
                .queue_attributes
                .iter()
                .map(|given| match given.split_once('=') {
                    Some((name, value)) if !name.is_empty() => {
                        Ok((name.to_string(), value.to_string()))
                    }
                    _ => Err(anyhow::anyhow!(
                        "--queue-attribute takes NAME=VALUE, not {given:?}"
                    )),
                })
                .collect::<anyhow::Result<_>>()?,
        };
        plan.check()?;
        ensure!(
            plan.producers > 0 || plan.backlog > 0 || args.queue.is_some(),
            "consuming messages sent before this run (no producers, no backlog) needs the queue \
             that holds them (--queue NAME)"
        );
        Ok(plan)
    }

    fn check(&self) -> anyhow::Result<()> {
        let workers = self.producers + self.consumers;
        ensure!(workers > 0, "nothing to do: no producers and no consumers");
        ensure!(
            workers <= Limits::WORKERS_MAX && self.fill_concurrency <= Limits::WORKERS_MAX,
            "at most {} workers",
            Limits::WORKERS_MAX
        );
        ensure!(
            self.fill_concurrency > 0 || self.backlog == 0,
            "--fill-concurrency must be above 0"
        );
        for (name, seconds) in [
            ("--duration", self.duration_s),
            ("--fill-timeout", self.fill_timeout_s),
        ] {
            ensure!(
                seconds > 0.0 && seconds <= Limits::DURATION_MAX_S,
                "{name} must be above 0 and at most {} s",
                Limits::DURATION_MAX_S
            );
        }
        ensure!(
            (1..=Limits::MESSAGE_SIZE_MAX_BYTES).contains(&self.message_size_bytes),
            "--message-size must be 1 to {} bytes",
            Limits::MESSAGE_SIZE_MAX_BYTES
        );
        for (name, value) in [
            ("--batch-size", self.batch_size),
            ("--receive-max", self.receive_max),
        ] {
            ensure!(
                (1..=Limits::BATCH_SIZE_MAX).contains(&value),
                "{name} must be 1 to 10"
            );
        }
        ensure!(
            self.wait_time_seconds <= Limits::WAIT_TIME_MAX_S,
            "--wait-time-seconds must be 0 to 20"
        );
        ensure!(self.messages_max != Some(0), "--messages must be above 0");
        ensure!(self.threads > 0, "--threads must be above 0");
        ensure!(self.groups != Some(0), "--groups must be at least 1");
        if let Some((tenants, weight)) = self.tenants {
            ensure!(tenants > 0, "--tenants must be at least 1");
            ensure!(weight > 0, "--noisy-weight must be at least 1");
        }
        if let Some(rate) = self.rate_per_s {
            ensure!(
                rate.is_finite() && rate > 0.0 && rate <= Limits::RATE_MAX_PER_S,
                "--rate must be above 0 and at most {} messages a second",
                Limits::RATE_MAX_PER_S
            );
            ensure!(self.producers > 0, "--rate paces producers: there are none");
        }
        ensure!(
            self.work_ms <= Limits::WORK_MAX_MS,
            "--work-ms must be at most {} (a visibility timeout is 30 s)",
            Limits::WORK_MAX_MS
        );
        if self.tenants.is_some() {
            ensure!(
                self.message_size_bytes > Limits::TIMESTAMP_BYTES,
                "--tenants needs messages of more than {} bytes (the send time and the tenant's \
                 mark)",
                Limits::TIMESTAMP_BYTES
            );
        }
        if self.producers == 0 && self.backlog == 0 && self.messages_max.is_none() {
            bail!(
                "consumers without producers need messages to consume: a backlog to fill first \
                 (--backlog N), or a count of messages a named queue already holds \
                 (--queue NAME --messages N)"
            );
        }
        Ok(())
    }

    /// What the run drives, for the report: the SQS endpoint, or pgmq's or JetStream's server.
    pub fn target(&self) -> String {
        if let Some(url) = &self.jetstream {
            format!("NATS JetStream {url}")
        } else if self.pgmq.is_some() {
            // The connection string may hold a password: name the system only.
            "pgmq".to_string()
        } else {
            format!("endpoint {}", self.endpoint)
        }
    }

    /// One line for the log: what this run does.
    pub fn describe(&self) -> String {
        let title = self.workload.map_or("custom", Workload::title);
        format!(
            "{title}, {} producers (batch {}), {} consumers (receive max {}, wait {} s), {} B \
             messages, backlog {}, up to {} s{}, {} generator threads",
            self.producers,
            self.batch_size,
            self.consumers,
            self.receive_max,
            self.wait_time_seconds,
            self.message_size_bytes,
            self.backlog,
            self.duration_s,
            self.messages_max
                .map_or(String::new(), |m| format!(" or {m} messages")),
            self.threads,
        ) + &self.groups.map_or(String::new(), |groups| {
            format!(", FIFO with {groups} groups")
        }) + &self.tenants.map_or(String::new(), |(tenants, weight)| {
            format!(", {tenants} tenants (t0 weighs {weight})")
        }) + &self.rate_per_s.map_or(String::new(), |rate| {
            format!(", sends paced at {rate} msg/s")
        }) + &(if self.work_ms > 0 {
            format!(", consumers hold each message {} ms", self.work_ms)
        } else {
            String::new()
        })
    }

    /// Filling the backlog: batches of 10, as fast as the server takes them.
    pub fn fill_phase(&self) -> Option<Phase> {
        (self.backlog > 0).then(|| Phase {
            name: "fill",
            producers: self.fill_concurrency,
            consumers: 0,
            batch_size: Limits::BATCH_SIZE_MAX,
            send_limit: Some(self.backlog),
            consume_target: None,
            duration: Duration::from_secs_f64(self.fill_timeout_s),
            record_end_to_end: false,
            rate_per_s: None,
        })
    }

    /// The measured phase. Without producers, consumers stop when the backlog is drained (or
    /// `--messages` are consumed; without a backlog, `--messages` of a queue filled before this
    /// run); with producers, when as many as were sent are consumed.
    pub fn run_phase(&self) -> Phase {
        let consume_target = match (self.producers, self.consumers) {
            (_, 0) => None,
            (0, _) => Some(match (self.messages_max, self.backlog) {
                (Some(messages), 0) => messages,
                (messages, backlog) => messages.map_or(backlog, |m| m.min(backlog)),
            }),
            _ => self.messages_max,
        };
        Phase {
            name: "run",
            producers: self.producers,
            consumers: self.consumers,
            batch_size: self.batch_size,
            send_limit: self.messages_max,
            consume_target,
            duration: Duration::from_secs_f64(self.duration_s),
            record_end_to_end: self.producers > 0 && self.consumers > 0,
            rate_per_s: self.rate_per_s,
        }
    }

    /// The attributes of the queue to create: `FifoQueue` for `--groups`, then those given.
    pub fn queue_attributes(&self) -> Vec<(String, String)> {
        let fifo = self
            .groups
            .map(|_| ("FifoQueue".to_string(), "true".to_string()));
        fifo.into_iter()
            .chain(self.queue_attributes_given.iter().cloned())
            .collect()
    }

    /// Bytes of the body that carry the send time; the rest is padding.
    pub fn timestamp_bytes() -> usize {
        Limits::TIMESTAMP_BYTES
    }
}

fn unique_queue_name() -> String {
    let since_epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    format!(
        "leaseq-bench-{}-{}",
        std::process::id(),
        since_epoch.as_millis()
    )
}

fn available_cpus() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    fn plan(args: &[&str]) -> anyhow::Result<Plan> {
        let cli = Cli::try_parse_from(std::iter::once("bench").chain(args.iter().copied()))?;
        Plan::from_args(&cli.bench)
    }

    #[test]
    fn presets_fill_in_what_is_not_given() {
        let w2 = plan(&["--workload", "w2", "-c", "64"]).unwrap();
        assert_eq!(
            (w2.producers, w2.consumers, w2.batch_size, w2.backlog),
            (64, 0, 10, 0)
        );
        let w3 = plan(&["--workload", "w3"]).unwrap();
        assert_eq!((w3.producers, w3.consumers, w3.backlog), (0, 16, 200_000));
        assert_eq!(w3.run_phase().consume_target, Some(200_000));
        assert_eq!(w3.fill_phase().unwrap().send_limit, Some(200_000));
        let w4 = plan(&["--workload", "w4", "-c", "8", "--producers", "2"]).unwrap();
        assert_eq!((w4.producers, w4.consumers), (2, 8));
        assert!(w4.run_phase().record_end_to_end);
        let w5 = plan(&["--workload", "w5", "--messages", "500"]).unwrap();
        assert_eq!(w5.run_phase().consume_target, Some(500));
    }

    #[test]
    fn out_of_range_flags_are_refused() {
        assert!(plan(&["--batch-size", "11"]).is_err());
        assert!(plan(&["--receive-max", "0"]).is_err());
        assert!(plan(&["--wait-time-seconds", "21"]).is_err());
        assert!(plan(&["--duration", "0"]).is_err());
        assert!(plan(&["--producers", "0"]).is_err());
        assert!(plan(&["--producers", "0", "--consumers", "4"]).is_err());
        assert!(plan(&["--messages", "0"]).is_err());
    }

    /// Consumers alone, with no backlog to fill, consume `--messages` of a named queue that an
    /// earlier run (or anything else) filled: both flags are needed.
    #[test]
    fn consumers_can_drain_a_queue_filled_before() {
        let drain = plan(&[
            "--workload",
            "w3",
            "--backlog",
            "0",
            "--queue",
            "kept",
            "--messages",
            "5000",
        ])
        .unwrap();
        assert_eq!(
            (drain.producers, drain.consumers, drain.backlog),
            (0, 16, 0)
        );
        assert!(drain.fill_phase().is_none());
        assert_eq!(drain.run_phase().consume_target, Some(5000));
        assert!(plan(&["--workload", "w3", "--backlog", "0", "--queue", "kept"]).is_err());
        assert!(plan(&["--workload", "w3", "--backlog", "0", "--messages", "5000"]).is_err());
    }

    #[test]
    fn pacing_holding_and_queue_attributes_are_checked() {
        let paced = plan(&[
            "--rate",
            "500",
            "--work-ms",
            "20",
            "--queue-attribute",
            "LeaseqFairQueue=false",
            "--queue-attribute",
            "DelaySeconds=0",
        ])
        .unwrap();
        assert_eq!(paced.run_phase().rate_per_s, Some(500.0));
        assert!(paced.fill_phase().is_none(), "no backlog");
        assert_eq!(
            paced.queue_attributes(),
            [
                ("LeaseqFairQueue".to_string(), "false".to_string()),
                ("DelaySeconds".to_string(), "0".to_string())
            ]
        );
        assert!(paced
            .describe()
            .ends_with("sends paced at 500 msg/s, consumers hold each message 20 ms"));
        // The backlog fill is never paced.
        let filled = plan(&["--workload", "w4", "--backlog", "100", "--rate", "50"]).unwrap();
        assert_eq!(filled.fill_phase().unwrap().rate_per_s, None);
        let fifo = plan(&[
            "--groups",
            "4",
            "--queue-attribute",
            "ContentBasedDeduplication=true",
        ]);
        assert_eq!(fifo.unwrap().queue_attributes()[0].0, "FifoQueue");
        for bad in [
            &["--rate", "0"][..],
            &["--rate", "-5"],
            &["--rate", "NaN"],
            &["--workload", "w3", "--rate", "10"],
            &["--work-ms", "20001"],
            &["--queue-attribute", "NoEquals"],
            &["--queue-attribute", "=true"],
            &["--tenants", "3", "--message-size", "20"],
        ] {
            assert!(plan(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn tenants_drive_a_standard_queue_with_a_noisy_one() {
        let fair = plan(&[
            "--workload",
            "w4",
            "--tenants",
            "51",
            "--noisy-weight",
            "20",
        ])
        .unwrap();
        assert_eq!(fair.tenants, Some((51, 20)));
        assert!(!fair.queue.ends_with(".fifo"));
        assert!(fair.describe().ends_with("51 tenants (t0 weighs 20)"));
        assert!(plan(&["--tenants", "0"]).is_err());
        assert!(plan(&["--tenants", "5", "--noisy-weight", "0"]).is_err());
        assert!(plan(&["--tenants", "5", "--groups", "5"]).is_err());
        assert!(plan(&["--noisy-weight", "5"]).is_err());
    }

    #[test]
    fn groups_make_a_fifo_queue() {
        let fifo = plan(&["--workload", "w4", "--groups", "10"]).unwrap();
        assert_eq!(fifo.groups, Some(10));
        assert!(fifo.queue.ends_with(".fifo"), "{}", fifo.queue);
        assert!(fifo.describe().ends_with("FIFO with 10 groups"));
        let named = plan(&["--groups", "1", "--queue", "mine.fifo"]).unwrap();
        assert_eq!(named.queue, "mine.fifo");
        assert!(plan(&["--groups", "0"]).is_err());
        assert!(!plan(&["--workload", "w4"])
            .unwrap()
            .queue
            .ends_with(".fifo"));
    }

    #[test]
    fn a_cut_short_backlog_bounds_consumption() {
        let mut run = plan(&["--workload", "w3", "--backlog", "1000"])
            .unwrap()
            .run_phase();
        run.limit_consumption_to(600);
        assert_eq!(run.consume_target, Some(600));
    }
}
