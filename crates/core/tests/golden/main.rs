//! Golden scripts: the lease semantics of the engine, written down as scenarios with their
//! expected output. The files in `tests/scripts/` are the spec; this harness runs each one
//! against a real [`Engine`], renders what actually happened in the same format and compares the
//! two texts. `UPDATE_GOLDEN=1 cargo test -p leaseq-core --test golden` rewrites the files with
//! the actual output, so a change of behaviour shows up as a reviewed diff.
//!
//! # The language
//!
//! One command per line, its output after `->` at column 41; further output lines are
//! continuation lines that start with `->` at the same column. Lines starting with `#` and blank
//! lines are kept as they are. The harness ignores the output it reads and renders its own.
//!
//! ```text
//! # Receipts: a superseded attempt's receipt never deletes the newer attempt.
//! queue create q VisibilityTimeout=30      -> created id=1
//! send q body=job-42                       -> m1
//! receive q at=0s                          -> m1 attempt=1 receipt=r1
//! ```
//!
//! - Every command takes `at=TIME`: the clock for this and later commands. `TIME` is an absolute
//!   time since the start of the script (`31s`, `500ms`, `12h`, `11h59m30s`, `4d`), or `+TIME`
//!   relative to the previous command's time. The harness clock may go backwards; the engine's
//!   never does (see `clock`).
//! - Names bind what the engine makes: the n-th message sent is `mN`, the n-th receipt issued is
//!   `rN`. A receipt argument is a name (`r2`), `raw:TEXT` (a literal handle), `tampered:r2` (one
//!   character changed) or `foreign:r2` (the same content sealed with another server key).
//! - Values may be quoted (`body="two words"`); inside quotes `\n`, `\t`, `\\`, `\"`, `\u{1F600}`
//!   and `\{a*81}` (81 times `a`) are expanded.
//!
//! Commands (outputs in brackets):
//!
//! - `config reject_stale_deletes=true in_flight_max=3 ...`: engine options and any field of
//!   `Limits`; only before the first other command. [`ok`]
//! - `queue create NAME [Attribute=VALUE]... [tag.KEY=VALUE]...` [`created id=N` | `exists id=N`]
//! - `queue set NAME Attribute=VALUE...`, `queue delete NAME`, `queue tag NAME KEY=VALUE...
//!   [generate=N]`, `queue untag NAME KEY...`, `purge NAME` [`ok`]
//! - `queue get NAME` [one `Attribute=VALUE` per line], `queue tags NAME`, `queue list [PREFIX]`,
//!   `queue sources NAME` (the queues whose dead-letter queue it is)
//!
//!   Attributes use SQS names and units (seconds, bytes). `RedrivePolicy=dlq:3` names the
//!   dead-letter queue and `maxReceiveCount`; `RedriveAllowPolicy=allowAll|denyAll|byQueue:a,b`;
//!   either `=none` removes the policy.
//! - `send NAME body=TEXT|body_len=N [delay=TIME] [attr.NAME=TYPE:VALUE]... [trace=TEXT]
//!   [sender=TEXT]` [`mN`]
//! - `receive NAME [max=N] [visibility=TIME] [attempt_id=TEXT] [client=UA] [verbose]` [`mN attempt=A
//!   receipt=rN` per message (on FIFO queues also `group=G`), `verbose` adds body, timestamps,
//!   lease end, dead-letter source, deduplication id and sequence number; `(none)` if nothing]
//!
//!   Sends take `group=G` (FIFO queues, and standard ones: fair queues' tenants) and FIFO sends
//!   `dedup=D`; a duplicate renders as `duplicate of mN`. A
//!   receive that returns an earlier receive's receipts again names them as before (`r1`).
//! - `delete NAME RECEIPT` [`deleted` | `already-gone` | `ignored-stale`]
//! - `change-visibility NAME RECEIPT TIME` [`visible_at=TIME`]
//! - `counts NAME` [`ready=R in_flight=F delayed=D` and `oldest_ready_age=TIME` if R > 0]
//! - `deadline NAME` [`next_deadline=TIME` | `next_deadline=none`], `clock` [`clock=TIME`]
//! - `messages NAME` [one line per stored message], `counters NAME` [the non-zero counters]
//! - `tenants NAME` [a fair queue's tenants by group id, `noisy` marked: ready, delayed, in
//!   flight, recent processing time, last send; then the noisy count and the queue's recent
//!   processing time; `(no tenants)` without fair state]
//! - `history NAME mN` [the message (state, receives, first receive, dead-letter move), then
//!   one line per attempt kept: times, extensions, outcome, the `client=` user agent of the
//!   receive; `not found`]
//!
//! An engine error renders as `error: Variant` plus its fields. After every command the harness
//! calls [`Engine::check_invariants`]; after the last one it replays the whole journal into a
//! fresh engine and asserts that every queue ends in the same state (live traffic and replay
//! agree).

mod parse;

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use leaseq_core::engine::{HistoryLookup, MoveTaskInfo};
use leaseq_core::{
    AttributeValue, Client, DeduplicationScope, DeleteOutcome, Delivery, Engine, EngineConfig,
    Error, FifoThroughputLimit, Journal, MessageId, MoveTaskChange, PayloadRef, QueueConfig,
    ReceiptKey, ReceiveRequest, RedriveAllowPolicy, SendInput,
};

use parse::{
    fmt_time, join_or_none, parse_at, parse_attribute, parse_number, parse_patch, parse_seconds,
    quote, set_limit, Args, Problem,
};

use leaseq_testkit::golden::{command_part, render};

#[test]
fn golden_scripts() {
    let directory = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/scripts");
    let update = std::env::var("UPDATE_GOLDEN").is_ok_and(|value| value == "1");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&directory)
        .expect("tests/scripts exists")
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "txt"))
        .collect();
    paths.sort();
    assert!(!paths.is_empty(), "no scripts in {}", directory.display());

    let mut failures = Vec::new();
    for path in &paths {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let expected = std::fs::read_to_string(path).expect("script is readable");
        assert!(
            expected.starts_with("# "),
            "{name}: a script opens with a comment sentence saying what it proves"
        );
        let actual = run_script(&name, &expected);
        if actual == expected {
            continue;
        }
        if update {
            std::fs::write(path, &actual).expect("script is writable");
        } else {
            failures.push(format!(
                "--- {name}\n{}",
                leaseq_testkit::golden::diff(&expected, &actual)
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "{} golden script(s) differ from the engine (`-` expected, `+` actual); \
         rerun with UPDATE_GOLDEN=1 to accept the actual output:\n\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// Runs one script and returns its text with the actual outputs.
fn run_script(name: &str, text: &str) -> String {
    let mut harness = Harness::default();
    let mut rendered = String::new();
    for (index, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.starts_with("->") {
            continue; // An output line of the previous command: re-rendered below.
        }
        if trimmed.is_empty() || trimmed.starts_with('#') {
            rendered.push_str(line.trim_end());
            rendered.push('\n');
            continue;
        }
        let command = command_part(line);
        let output = harness
            .execute(command)
            .unwrap_or_else(|problem| panic!("{name}:{}: {problem}", index + 1));
        if let Some(engine) = &harness.engine {
            engine.check_invariants();
        }
        render(&mut rendered, command, &output);
    }
    harness.check_replay(name);
    rendered
}

// ----- the harness ----------------------------------------------------------------------------

/// The fixed server secret of every script.
fn receipt_key() -> ReceiptKey {
    ReceiptKey::new(*b"golden-scripts!!")
}

#[derive(Default)]
struct Harness {
    config: EngineConfig,
    engine: Option<Engine>,
    /// Every record the engine wrote, in order.
    journal: Journal,
    /// The time of the current command.
    now_ms: u64,
    /// Message ids drawn so far (the deterministic id generator's state).
    ids_drawn: u64,
    message_names: HashMap<MessageId, String>,
    receipts: HashMap<String, String>,
}

impl Harness {
    fn engine(&mut self) -> &mut Engine {
        let config = self.config.clone();
        self.engine
            .get_or_insert_with(|| Engine::new(config, receipt_key()))
    }

    fn execute(&mut self, command: &str) -> Result<Vec<String>, Problem> {
        let mut args = Args::parse(command)?;
        if let Some(at) = args.named("at") {
            self.now_ms = parse_at(&at, self.now_ms)?;
        }
        let verb = args.positional("a command")?;
        let output = match verb.as_str() {
            "config" => self.configure(&mut args)?,
            "queue" => self.queue_command(&mut args)?,
            "purge" => {
                let name = args.positional("a queue name")?;
                let now_ms = self.now_ms;
                let result = self.with_journal(|e, j| e.purge_queue(now_ms, &name, j));
                outcome(result, |()| vec!["ok".into()])
            }
            "send" => self.send(&mut args)?,
            "receive" => self.receive(&mut args)?,
            "delete" => self.delete(&mut args)?,
            "change-visibility" => self.change_visibility(&mut args)?,
            "counts" => self.counts(&mut args)?,
            "deadline" => self.deadline(&mut args)?,
            "clock" => vec![format!("clock={}", fmt_time(self.engine().clock_ms()))],
            "messages" => self.messages(&mut args)?,
            "counters" => self.counters(&mut args)?,
            "tenants" => self.tenants(&mut args)?,
            "move" => self.move_command(&mut args)?,
            "peek" => self.peek(&mut args)?,
            "history" => self.history(&mut args)?,
            "fail" => {
                let name = args.positional("a queue name")?;
                let receipt = self.receipt(&args.positional("a receipt")?)?;
                let reason = args.named("reason").unwrap_or_default();
                let now_ms = self.now_ms;
                let result =
                    self.with_journal(|e, j| e.fail_message(now_ms, &name, &receipt, &reason, j));
                outcome(result, |()| vec!["ok".into()])
            }
            other => return Err(format!("unknown command {other:?}")),
        };
        args.finish()?;
        Ok(output)
    }

    /// Runs an engine operation that writes records into the script's journal.
    fn with_journal<T>(&mut self, op: impl FnOnce(&mut Engine, &mut Journal) -> T) -> T {
        let mut journal = std::mem::take(&mut self.journal);
        let result = op(self.engine(), &mut journal);
        self.journal = journal;
        result
    }

    fn configure(&mut self, args: &mut Args) -> Result<Vec<String>, Problem> {
        if self.engine.is_some() {
            return Err("`config` must come before every other command".into());
        }
        for (key, value) in args.take_all_named() {
            if key == "reject_stale_deletes" {
                self.config.reject_stale_deletes = parse_number::<bool>(&key, &value)?;
            } else {
                set_limit(&mut self.config.limits, &key, &value)?;
            }
        }
        Ok(vec!["ok".into()])
    }

    fn queue_command(&mut self, args: &mut Args) -> Result<Vec<String>, Problem> {
        let action = args.positional("a queue action")?;
        let name = match action.as_str() {
            "list" => args.optional_positional().unwrap_or_default(),
            _ => args.positional("a queue name")?,
        };
        let now_ms = self.now_ms;
        Ok(match action.as_str() {
            "create" => {
                let tags: BTreeMap<String, String> =
                    args.take_prefixed("tag.").into_iter().collect();
                let patch = parse_patch(args.take_all_named())?;
                let result =
                    self.with_journal(|e, j| e.create_queue(now_ms, &name, &patch, tags, j));
                outcome(result, |created| {
                    let verb = if created.created { "created" } else { "exists" };
                    vec![format!("{verb} id={}", created.queue_id)]
                })
            }
            "set" => {
                let patch = parse_patch(args.take_all_named())?;
                let result = self.with_journal(|e, j| e.set_queue_config(now_ms, &name, &patch, j));
                outcome(result, |()| vec!["ok".into()])
            }
            "delete" => {
                let result = self.with_journal(|e, j| e.delete_queue(now_ms, &name, j));
                outcome(result, |()| vec!["ok".into()])
            }
            "tag" => {
                let mut tags: BTreeMap<String, String> = BTreeMap::new();
                if let Some(count) = args.named("generate") {
                    for i in 1..=parse_number::<usize>("generate", &count)? {
                        tags.insert(format!("key-{i:02}"), format!("value-{i}"));
                    }
                }
                tags.extend(args.take_all_named());
                let result = self.with_journal(|e, j| e.tag_queue(now_ms, &name, &tags, j));
                outcome(result, |()| vec!["ok".into()])
            }
            "untag" => {
                let keys = args.take_all_positional();
                let result = self.with_journal(|e, j| e.untag_queue(now_ms, &name, &keys, j));
                outcome(result, |()| vec!["ok".into()])
            }
            "tags" => outcome(self.engine().queue_info(now_ms, &name), |info| {
                // Long tag lists are summed up: a script about the limit need not spell 50 out.
                let count = info.tags.len();
                let listed = info.tags.iter().map(|(k, v)| format!("{k}={v}"));
                match count {
                    0 => vec!["count=0".into()],
                    1..=10 => vec![format!("count={count}"), join_or_none(listed)],
                    _ => vec![format!("count={count}")],
                }
            }),
            "get" => outcome(self.engine().queue_info(now_ms, &name), |info| {
                let mut lines = config_lines(&info.config);
                lines.push(format!("CreatedTimestamp={}", fmt_time(info.created_at_ms)));
                lines.push(format!(
                    "LastModifiedTimestamp={}",
                    fmt_time(info.last_modified_at_ms)
                ));
                lines
            }),
            "list" => vec![join_or_none(
                self.engine()
                    .list_queues(&name)
                    .iter()
                    .map(|n| n.to_string()),
            )],
            "sources" => outcome(self.engine().dead_letter_sources(&name), |sources| {
                vec![join_or_none(sources.iter().map(|n| n.to_string()))]
            }),
            other => return Err(format!("unknown queue action {other:?}")),
        })
    }

    fn send(&mut self, args: &mut Args) -> Result<Vec<String>, Problem> {
        let name = args.positional("a queue name")?;
        let body = match (args.named("body"), args.named("body_len")) {
            (Some(body), None) => body,
            (None, Some(len)) => "x".repeat(parse_number::<usize>("body_len", &len)?),
            (None, None) => return Err("send needs body= or body_len=".into()),
            (Some(_), Some(_)) => return Err("send takes body= or body_len=, not both".into()),
        };
        let delay_seconds = args
            .named("delay")
            .map(|delay| parse_seconds(&delay))
            .transpose()?;
        let mut attributes = BTreeMap::new();
        for (attribute, spec) in args.take_prefixed("attr.") {
            attributes.insert(attribute, parse_attribute(&spec)?);
        }
        let input = SendInput {
            body,
            attributes,
            trace_header: args.named("trace"),
            delay_seconds,
            sender_id: Arc::from(args.named("sender").unwrap_or_default()),
            group_id: args.named("group"),
            deduplication_id: args.named("dedup"),
        };
        let message_id = self.draw_id();
        let now_ms = self.now_ms;
        let result = self.with_journal(|e, j| e.send(now_ms, &name, input, message_id, j));
        Ok(outcome(result, |sent| {
            if sent.duplicate {
                return vec![format!(
                    "duplicate of {}",
                    self.message_name(sent.message_id)
                )];
            }
            vec![self.name_message(sent.message_id)]
        }))
    }

    fn receive(&mut self, args: &mut Args) -> Result<Vec<String>, Problem> {
        let name = args.positional("a queue name")?;
        let max_messages = match args.named("max") {
            Some(max) => parse_number::<usize>("max", &max)?,
            None => 1,
        };
        let visibility_timeout_seconds = args
            .named("visibility")
            .map(|v| parse_seconds(&v))
            .transpose()?;
        let verbose = args.flag("verbose");
        let attempt_id = args.named("attempt_id");
        let client = args
            .named("client")
            .map(|name| Arc::new(Client::new("10.0.0.1:4000", &name)));
        let request = ReceiveRequest {
            max_messages,
            visibility_timeout_seconds,
            client,
        };
        let now_ms = self.now_ms;
        let result = self.with_journal(|e, j| {
            e.receive_with_attempt(now_ms, &name, request, attempt_id.as_deref(), j)
        });
        Ok(outcome(result, |deliveries| {
            if deliveries.is_empty() {
                return vec!["(none)".into()];
            }
            deliveries
                .into_iter()
                .map(|delivery| self.render_delivery(delivery, verbose))
                .collect()
        }))
    }

    fn render_delivery(&mut self, delivery: Delivery<PayloadRef>, verbose: bool) -> String {
        // A receipt handed out again (a retried receive attempt) keeps its name.
        let known = self
            .receipts
            .iter()
            .find(|(_, receipt)| **receipt == delivery.receipt)
            .map(|(label, _)| label.clone());
        let label = known.unwrap_or_else(|| {
            let label = format!("r{}", self.receipts.len() + 1);
            self.receipts
                .insert(label.clone(), delivery.receipt.clone());
            label
        });
        let mut line = format!(
            "{} attempt={} receipt={label}",
            self.message_name(delivery.message_id),
            delivery.receive_count
        );
        if let Some(fifo) = &delivery.fifo {
            write!(line, " group={}", fifo.group_id).unwrap();
        }
        if verbose {
            if let (Some(fifo), Some(sequence)) = (&delivery.fifo, &delivery.sequence_number) {
                write!(
                    line,
                    " dedup={} sequence={sequence}",
                    quote(&fifo.deduplication_id)
                )
                .unwrap();
            }
            // Scripts run without a log, so every payload is in memory.
            let payload = delivery.payload.inline().expect("payload in memory");
            write!(
                line,
                " body={} sent={} first_received={} visible_at={}",
                quote(&payload.body),
                fmt_time(delivery.sent_at_ms),
                fmt_time(delivery.first_received_at_ms),
                fmt_time(delivery.visible_at_ms)
            )
            .unwrap();
            if let Some(source) = &delivery.dead_letter_source {
                write!(line, " source={source}").unwrap();
            }
            for (name, attribute) in &payload.attributes {
                let value = match &attribute.value {
                    AttributeValue::Text(text) => quote(text),
                    AttributeValue::Binary(bytes) => format!("<{} bytes>", bytes.len()),
                };
                write!(line, " attr.{name}={}:{value}", attribute.data_type).unwrap();
            }
            if let Some(trace) = &payload.trace_header {
                write!(line, " trace={}", quote(trace)).unwrap();
            }
            if !payload.sender_id.is_empty() {
                write!(line, " sender={}", quote(&payload.sender_id)).unwrap();
            }
        }
        line
    }

    fn message_name(&self, id: MessageId) -> String {
        self.message_names
            .get(&id)
            .cloned()
            .unwrap_or_else(|| id.to_string())
    }

    /// Resolves a receipt argument: a bound name, `raw:`, `tampered:` or `foreign:`.
    fn receipt(&self, token: &str) -> Result<String, Problem> {
        let bound = |name: &str| {
            self.receipts
                .get(name)
                .cloned()
                .ok_or_else(|| format!("no receipt is named {name:?}"))
        };
        if let Some(raw) = token.strip_prefix("raw:") {
            return Ok(raw.to_string());
        }
        if let Some(name) = token.strip_prefix("tampered:") {
            let mut bytes = bound(name)?.into_bytes();
            bytes[10] = if bytes[10] == b'A' { b'B' } else { b'A' };
            return Ok(String::from_utf8(bytes).expect("base64 is ASCII"));
        }
        if let Some(name) = token.strip_prefix("foreign:") {
            let content = receipt_key().open(&bound(name)?).expect("we sealed it");
            return Ok(ReceiptKey::new(*b"another-server!!").seal(content));
        }
        bound(token)
    }

    fn delete(&mut self, args: &mut Args) -> Result<Vec<String>, Problem> {
        let name = args.positional("a queue name")?;
        let receipt = self.receipt(&args.positional("a receipt")?)?;
        let now_ms = self.now_ms;
        let result = self.with_journal(|e, j| {
            e.delete(now_ms, &name, &receipt, j)
                .map(|(outcome, _)| outcome)
        });
        Ok(outcome(result, |deleted| {
            vec![match deleted {
                DeleteOutcome::Deleted => "deleted",
                DeleteOutcome::AlreadyGone => "already-gone",
                DeleteOutcome::IgnoredStale => "ignored-stale",
            }
            .into()]
        }))
    }

    fn change_visibility(&mut self, args: &mut Args) -> Result<Vec<String>, Problem> {
        let name = args.positional("a queue name")?;
        let receipt = self.receipt(&args.positional("a receipt")?)?;
        let seconds = parse_seconds(&args.positional("a visibility timeout")?)?;
        let now_ms = self.now_ms;
        let result =
            self.with_journal(|e, j| e.change_visibility(now_ms, &name, &receipt, seconds, j));
        Ok(outcome(result, |visible_at_ms| {
            vec![format!("visible_at={}", fmt_time(visible_at_ms))]
        }))
    }

    fn counts(&mut self, args: &mut Args) -> Result<Vec<String>, Problem> {
        let name = args.positional("a queue name")?;
        let now_ms = self.now_ms;
        let engine = self.engine();
        let result = engine.queue_info(now_ms, &name);
        let clock_ms = engine.clock_ms();
        Ok(outcome(result, |info| {
            let mut line = format!(
                "ready={} in_flight={} delayed={}",
                info.ready, info.in_flight, info.delayed
            );
            if let Some(sent_at_ms) = info.oldest_ready_sent_at_ms {
                write!(
                    line,
                    " oldest_ready_age={}",
                    fmt_time(clock_ms - sent_at_ms)
                )
                .unwrap();
            }
            vec![line]
        }))
    }

    /// The next deadline after bringing the queue forward to the command's time.
    fn deadline(&mut self, args: &mut Args) -> Result<Vec<String>, Problem> {
        let name = args.positional("a queue name")?;
        let now_ms = self.now_ms;
        let engine = self.engine();
        Ok(outcome(engine.queue_info(now_ms, &name), |_| {
            let deadline = engine
                .next_deadline_ms(&name)
                .map_or("none".into(), fmt_time);
            vec![format!("next_deadline={deadline}")]
        }))
    }

    fn messages(&mut self, args: &mut Args) -> Result<Vec<String>, Problem> {
        let name = args.positional("a queue name")?;
        let now_ms = self.now_ms;
        if let Err(error) = self.engine().queue_info(now_ms, &name) {
            return Ok(vec![render_error(&error)]);
        }
        let engine = self.engine.as_ref().expect("engine exists");
        let queue = engine.queue(&name).expect("queue exists");
        let lines: Vec<String> = queue
            .messages()
            .map(|(seq, message)| {
                let mut line = format!(
                    "{} seq={seq} {:?} attempt={} sent={} visible_at={}",
                    self.message_name(message.id),
                    message.state,
                    message.receive_count,
                    fmt_time(message.sent_at_ms),
                    fmt_time(message.visible_at_ms)
                );
                if let Some(source) = &message.dead_letter_source {
                    write!(line, " source={source}").unwrap();
                }
                if message.redrive_generation > 0 {
                    write!(line, " generation={}", message.redrive_generation).unwrap();
                }
                if let Some(fifo) = &message.fifo {
                    write!(
                        line,
                        " group={} dedup={}",
                        fifo.group_id,
                        quote(&fifo.deduplication_id)
                    )
                    .unwrap();
                }
                line
            })
            .collect();
        Ok(if lines.is_empty() {
            vec!["(none)".into()]
        } else {
            lines
        })
    }

    fn move_command(&mut self, args: &mut Args) -> Result<Vec<String>, Problem> {
        let verb = args.positional("a move verb")?;
        let now_ms = self.now_ms;
        let optional_number = |value: Option<String>, key: &str| -> Result<Option<u64>, Problem> {
            match value.as_deref() {
                None | Some("auto") | Some("none") => Ok(None),
                Some(text) => Ok(Some(parse_number::<u64>(key, text)?)),
            }
        };
        match verb.as_str() {
            "start" => {
                let source = args.positional("a source queue")?;
                let destination = args.named("to");
                let rate = optional_number(args.named("rate"), "rate")?.map(|r| r as u32);
                let limit = optional_number(args.named("limit"), "limit")?;
                let result = self.with_journal(|e, j| {
                    e.start_move_task(now_ms, &source, destination.as_deref(), rate, limit, j)
                });
                Ok(outcome(result, |info| vec![render_task(&info)]))
            }
            "batch" => {
                let task_id = parse_number::<u64>("task", &args.positional("a task id")?)?;
                let max = parse_number::<usize>("max", &args.named("max").unwrap_or("10".into()))?;
                let ids: Vec<MessageId> = (0..max).map(|_| self.draw_id()).collect();
                let result = self.with_journal(|e, j| e.move_batch(now_ms, task_id, &ids, j));
                // Name the ids that were used, in order; return the rest.
                Ok(outcome(result, |progress| {
                    let names: Vec<String> = ids[..progress.moved]
                        .iter()
                        .map(|id| self.name_message(*id))
                        .collect();
                    self.ids_drawn -= (max - progress.moved) as u64;
                    vec![format!(
                        "moved={} [{}] status={:?}",
                        progress.moved,
                        names.join(" "),
                        progress.status
                    )]
                }))
            }
            "pause" | "resume" | "cancel" | "rate" | "limit" => {
                let task_id = parse_number::<u64>("task", &args.positional("a task id")?)?;
                let change = match verb.as_str() {
                    "pause" => MoveTaskChange::Pause,
                    "resume" => MoveTaskChange::Resume,
                    "cancel" => MoveTaskChange::Cancel,
                    "rate" => MoveTaskChange::Rate(
                        optional_number(args.optional_positional(), "rate")?.map(|r| r as u32),
                    ),
                    _ => {
                        MoveTaskChange::Limit(optional_number(args.optional_positional(), "limit")?)
                    }
                };
                let result =
                    self.with_journal(|e, j| e.change_move_task(now_ms, task_id, change, j));
                Ok(outcome(result, |info| vec![render_task(&info)]))
            }
            "list" => {
                let source = args.positional("a source queue")?;
                Ok(outcome(self.engine().move_tasks(&source), |tasks| {
                    if tasks.is_empty() {
                        return vec!["(none)".into()];
                    }
                    tasks.iter().map(render_task).collect()
                }))
            }
            other => Err(format!("unknown move verb {other:?}")),
        }
    }

    fn draw_id(&mut self) -> MessageId {
        self.ids_drawn += 1;
        let mut random = [0u8; 16];
        random[..8].copy_from_slice(&self.ids_drawn.to_be_bytes());
        MessageId::from_random(random)
    }

    fn name_message(&mut self, id: MessageId) -> String {
        let label = format!("m{}", self.message_names.len() + 1);
        self.message_names.insert(id, label.clone());
        label
    }

    fn history(&mut self, args: &mut Args) -> Result<Vec<String>, Problem> {
        let name = args.positional("a queue name")?;
        let message = args.positional("a message name")?;
        let id = *self
            .message_names
            .iter()
            .find(|(_, n)| **n == message)
            .ok_or_else(|| format!("no message named {message}"))?
            .0;
        let now_ms = self.now_ms;
        let mut from_seq = 0;
        let found = loop {
            match self.engine().message_history(now_ms, &name, id, from_seq) {
                Err(error) => return Ok(outcome::<()>(Err(error), |_| Vec::new())),
                Ok(HistoryLookup::Continue(next)) => from_seq = next,
                Ok(HistoryLookup::NotFound) => return Ok(vec!["not found".into()]),
                Ok(HistoryLookup::Found(found)) => break found,
            }
        };
        let state = match found.state {
            Some(state) => format!("{state:?}"),
            None => format!("Deleted at={}", fmt_time(found.deleted_at_ms.unwrap_or(0))),
        };
        let mut head = format!(
            "{message} seq={} {state} receives={}",
            found.seq, found.receive_count
        );
        if let Some(at) = found.first_received_at_ms {
            write!(head, " first_received={}", fmt_time(at)).unwrap();
        }
        if let Some(at) = found.visible_at_ms {
            write!(head, " visible_at={}", fmt_time(at)).unwrap();
        }
        if let (Some(source), Some(at)) = (&found.dead_letter_source, found.dead_lettered_at_ms) {
            write!(head, " dead_lettered_from={source} at={}", fmt_time(at)).unwrap();
        }
        let mut lines = vec![head];
        for (number, attempt) in &found.attempts {
            let mut line = format!(
                "attempt={number} received={} lease={} deadline={} extensions={} {}",
                fmt_time(attempt.received_at_ms),
                fmt_time(attempt.first_deadline_ms),
                fmt_time(attempt.deadline_ms),
                attempt.extensions,
                attempt.outcome.as_str(),
            );
            if attempt.ended_at_ms > 0 {
                write!(line, " at={}", fmt_time(attempt.ended_at_ms)).unwrap();
            }
            if let Some(client) = &attempt.client {
                write!(line, " client={}", quote(&client.user_agent)).unwrap();
            }
            lines.push(line);
        }
        Ok(lines)
    }

    fn peek(&mut self, args: &mut Args) -> Result<Vec<String>, Problem> {
        let name = args.positional("a queue name")?;
        let after = parse_number::<u64>("after", &args.named("after").unwrap_or("0".into()))?;
        let max = parse_number::<usize>("max", &args.named("max").unwrap_or("10".into()))?;
        let now_ms = self.now_ms;
        Ok(outcome(
            self.engine().peek(now_ms, &name, after, max),
            |messages| {
                if messages.is_empty() {
                    return vec!["(none)".into()];
                }
                messages
                    .iter()
                    .map(|peeked| {
                        let message = &peeked.message;
                        let body = message.payload.inline().expect("payload in memory");
                        let mut line = format!(
                            "{} seq={} {:?} attempt={} sent={} body={}",
                            self.message_name(message.id),
                            peeked.seq,
                            message.state,
                            message.receive_count,
                            fmt_time(message.sent_at_ms),
                            quote(&body.body)
                        );
                        if let Some(source) = &message.dead_letter_source {
                            write!(line, " source={source}").unwrap();
                        }
                        if message.redrive_generation > 0 {
                            write!(line, " generation={}", message.redrive_generation).unwrap();
                        }
                        if let Some(reason) = &peeked.failure_reason {
                            write!(line, " failed={}", quote(reason)).unwrap();
                        }
                        line
                    })
                    .collect()
            },
        ))
    }

    fn counters(&mut self, args: &mut Args) -> Result<Vec<String>, Problem> {
        let name = args.positional("a queue name")?;
        let now_ms = self.now_ms;
        Ok(outcome(self.engine().queue_info(now_ms, &name), |info| {
            let c = info.counters;
            let all = [
                ("sent", c.sent),
                ("received", c.received),
                ("deleted", c.deleted),
                ("deleted_late", c.deleted_late),
                ("leases_expired", c.leases_expired),
                ("leases_changed", c.leases_changed),
                ("leases_released", c.leases_released),
                ("stale_receipts_seen", info.stale_receipts_seen),
                ("dead_lettered", c.dead_lettered),
                ("retention_expired", c.retention_expired),
                ("purged", c.purged),
            ];
            let nonzero = all
                .iter()
                .filter(|(_, value)| *value > 0)
                .map(|(key, value)| format!("{key}={value}"));
            vec![join_or_none(nonzero)]
        }))
    }

    /// `tenants NAME`: a fair queue's tenants, noisy ones marked, by group id.
    fn tenants(&mut self, args: &mut Args) -> Result<Vec<String>, Problem> {
        let name = args.positional("queue name")?;
        let now_ms = self.now_ms;
        // Brings the queue forward to now, as every read does.
        let info = self.engine().queue_info(now_ms, &name);
        if let Err(error) = info {
            return Ok(vec![render_error(&error)]);
        }
        let queue = self.engine().queue(&name).expect("queue exists");
        let Some(fair) = queue.fair() else {
            return Ok(vec!["(no tenants)".into()]);
        };
        let mut tenants: Vec<_> = fair.tenants().collect();
        tenants.sort_by(|a, b| a.0.cmp(b.0));
        let window_ms = u64::from(queue.config.fairness.processing_window_seconds) * 1000;
        let mut lines: Vec<String> = tenants
            .into_iter()
            .map(|(group, tenant)| {
                let group = if group.is_empty() { "(none)" } else { group };
                format!(
                    "{group}{} ready={} delayed={} in_flight={} processing={} last_sent={}",
                    if tenant.noisy { " noisy" } else { "" },
                    tenant.ready_count(),
                    tenant.delayed,
                    tenant.in_flight,
                    fmt_time(tenant.processing.recent_ms(now_ms, window_ms)),
                    fmt_time(tenant.last_sent_at_ms),
                )
            })
            .collect();
        lines.push(format!(
            "noisy={} processing={}",
            fair.noisy_count(),
            fmt_time(fair.processing.recent_ms(now_ms, window_ms))
        ));
        Ok(lines)
    }

    /// Replays the journal into a fresh engine and checks that every queue ends in the same
    /// state as the live engine's: the records alone carry everything that happened.
    fn check_replay(&mut self, script: &str) {
        let Some(live) = &mut self.engine else { return };
        let now_ms = live.clock_ms();
        let mut replayed = Engine::new(self.config.clone(), receipt_key());
        for record in &self.journal {
            replayed.apply(record);
        }
        replayed.check_invariants();
        // A snapshot of the live engine rebuilds the same state too (move tasks included).
        let mut restored = Engine::new(self.config.clone(), receipt_key());
        live.snapshot(|record| restored.apply(&record));
        restored.check_invariants();
        let names = live.list_queues("");
        for name in &names {
            assert_eq!(
                snapshot(live, now_ms, name),
                snapshot(&mut restored, now_ms, name),
                "{script}: queue {name} differs after restoring a snapshot"
            );
        }
        assert_eq!(
            names,
            replayed.list_queues(""),
            "{script}: replay has other queues"
        );
        // The names of queues deleted within the reuse delay, which a create refuses.
        let deleted = live.recently_deleted_queues();
        assert_eq!(
            deleted,
            replayed.recently_deleted_queues(),
            "{script}: replay forgot or invented deleted queues' names"
        );
        assert_eq!(
            deleted,
            restored.recently_deleted_queues(),
            "{script}: a snapshot forgot or invented deleted queues' names"
        );
        for name in &names {
            assert_eq!(
                snapshot(live, now_ms, name),
                snapshot(&mut replayed, now_ms, name),
                "{script}: queue {name} differs after replaying the journal"
            );
        }
    }
}

/// Everything about a queue that the journal must reproduce.
fn snapshot(engine: &mut Engine, now_ms: u64, name: &str) -> String {
    let info = engine.queue_info(now_ms, name).expect("queue exists");
    let mut text = format!(
        "id={} ready={} in_flight={} delayed={} oldest={:?} deadline={:?} created={} modified={}\n\
         config={:?}\ntags={:?}\n",
        info.queue_id,
        info.ready,
        info.in_flight,
        info.delayed,
        info.oldest_ready_sent_at_ms,
        engine.next_deadline_ms(name),
        info.created_at_ms,
        info.last_modified_at_ms,
        info.config,
        info.tags,
    );
    let queue = engine.queue(name).expect("queue exists");
    for (seq, message) in queue.messages() {
        writeln!(text, "{seq}: {message:?}").unwrap();
    }
    if let Some(fifo) = queue.fifo() {
        for entry in fifo.window() {
            writeln!(text, "window: {entry:?}").unwrap();
        }
        for (id, attempt) in fifo.attempts() {
            writeln!(text, "attempt {id}: {attempt:?}").unwrap();
        }
        // Whether a group is held is history, not a function of its messages' states.
        let released: Vec<&str> = fifo.released_groups().map(|id| &**id).collect();
        let mut available = Vec::new();
        while let Some(next) = fifo.next_available(available.last().copied()) {
            available.push(next);
        }
        writeln!(text, "released: {released:?} available: {available:?}").unwrap();
    }
    for (seq, reason) in queue.failure_reasons() {
        writeln!(text, "failure {seq}: {reason}").unwrap();
    }
    // Which tenants are noisy is history too (decided at each change, from the totals then).
    if let Some(fair) = queue.fair() {
        let mut tenants: Vec<_> = fair.tenants().collect();
        tenants.sort_by(|a, b| a.0.cmp(b.0));
        for (group, tenant) in tenants {
            writeln!(text, "tenant {group:?}: {tenant:?}").unwrap();
        }
        writeln!(text, "fair: {:?} next={:?}", fair.processing, fair.next()).unwrap();
    }
    if let Ok(tasks) = engine.move_tasks(name) {
        for info in tasks {
            writeln!(text, "task: {info:?}").unwrap();
        }
    }
    text
}

fn render_task(info: &MoveTaskInfo) -> String {
    let task = &info.task;
    let mut line = format!(
        "task={} {:?} moved={}/{}",
        task.task_id, task.status, task.moved, task.to_move
    );
    let destination = match (&info.destination, task.destination_queue_id) {
        (Some(name), _) => name.to_string(),
        (None, Some(id)) => format!("deleted#{id}"),
        (None, None) => "(sources)".into(),
    };
    write!(line, " to={destination}").unwrap();
    match task.rate_per_second {
        Some(rate) => write!(line, " rate={rate}").unwrap(),
        None => line.push_str(" rate=auto"),
    }
    if let Some(limit) = task.limit {
        write!(line, " limit={limit}").unwrap();
    }
    if task.held_back > 0 {
        write!(line, " held_back={}", task.held_back).unwrap();
    }
    if let Some(reason) = &task.failure_reason {
        write!(line, " reason: {reason}").unwrap();
    }
    line
}

/// The output of an engine call: what `render` makes of its value, or the error.
fn outcome<T>(
    result: leaseq_core::Result<T>,
    render: impl FnOnce(T) -> Vec<String>,
) -> Vec<String> {
    match result {
        Ok(value) => render(value),
        Err(error) => vec![render_error(&error)],
    }
}

/// An error as its variant and data: the structured fields are the spec, the wording of a
/// protocol is not (the `sqs` crate's tests pin that).
fn render_error(error: &Error) -> String {
    format!("error: {error:?}")
}

fn config_lines(config: &QueueConfig) -> Vec<String> {
    let mut lines = vec![
        format!("VisibilityTimeout={}", config.visibility_timeout_seconds),
        format!("MessageRetentionPeriod={}", config.retention_seconds),
        format!("DelaySeconds={}", config.delay_seconds),
        format!("MaximumMessageSize={}", config.maximum_message_size_bytes),
        format!(
            "ReceiveMessageWaitTimeSeconds={}",
            config.receive_wait_time_seconds
        ),
    ];
    if let Some(policy) = &config.redrive_policy {
        lines.push(format!(
            "RedrivePolicy={}:{}",
            policy.dead_letter_queue, policy.max_receive_count
        ));
    }
    if let Some(policy) = &config.redrive_allow_policy {
        let text = match policy {
            RedriveAllowPolicy::AllowAll => "allowAll".to_string(),
            RedriveAllowPolicy::DenyAll => "denyAll".to_string(),
            RedriveAllowPolicy::ByQueue(names) => format!("byQueue:{}", names.join(",")),
        };
        lines.push(format!("RedriveAllowPolicy={text}"));
    }
    if let Some(policy) = &config.policy {
        lines.push(format!("Policy={}", quote(policy)));
    }
    for (key, value) in &config.passthrough {
        lines.push(format!("{key}={}", quote(value)));
    }
    let fair = &config.fairness;
    let default = leaseq_core::FairConfig::default();
    if fair.enabled != default.enabled {
        lines.push(format!("LeaseqFairQueue={}", fair.enabled));
    }
    if fair.in_flight_min != default.in_flight_min {
        lines.push(format!("LeaseqFairInFlightMin={}", fair.in_flight_min));
    }
    if fair.comparable_factor != default.comparable_factor {
        lines.push(format!(
            "LeaseqFairComparableFactor={}",
            fair.comparable_factor
        ));
    }
    if fair.processing_window_seconds != default.processing_window_seconds {
        lines.push(format!(
            "LeaseqFairProcessingWindowSeconds={}",
            fair.processing_window_seconds
        ));
    }
    if let Some(backoff) = &config.redelivery_backoff {
        lines.push(format!(
            "LeaseqRedeliveryBackoff={}",
            quote(&backoff.to_string())
        ));
    }
    if let Some(fifo) = &config.fifo {
        lines.push("FifoQueue=true".into());
        lines.push(format!(
            "ContentBasedDeduplication={}",
            fifo.content_based_deduplication
        ));
        lines.push(format!(
            "DeduplicationScope={}",
            match fifo.deduplication_scope {
                DeduplicationScope::Queue => "queue",
                DeduplicationScope::MessageGroup => "messageGroup",
            }
        ));
        lines.push(format!(
            "FifoThroughputLimit={}",
            match fifo.throughput_limit {
                FifoThroughputLimit::PerQueue => "perQueue",
                FifoThroughputLimit::PerMessageGroupId => "perMessageGroupId",
            }
        ));
    }
    lines
}
