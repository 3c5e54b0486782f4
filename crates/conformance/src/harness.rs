//! The harness: runs scripts on one store or on several at once (the mirror), and compares
//! what they answer with what the scripts say.
//!
//! Each store gets a *session*: a node opened on a new store, its own names for ids and
//! receipts, and its background receives (long polls started with `as=`). All sessions share
//! one clock, so `advance` moves them together. Every command runs on every session in turn;
//! after each, the harness waits until the service has settled (see [`crate::clock`]), and the
//! sessions' rendered answers must be equal: that is the mirror's assertion, and the first
//! session's answer is the script's output.
//!
//! Scripts run on a current-thread tokio runtime, so the order in which woken tasks run does not
//! depend on how the operating system schedules threads. Real time appears only as guards: an
//! answer that does not come within a few seconds fails the script, it never passes it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use leaseq_server::clock::{Clock, SharedClock};
use leaseq_server::Caller;
use leaseq_sqs::{decode, encode, encode_error, Context, RawRequest, Response};
use serde_json::Value;
use tokio::task::JoinHandle;

use crate::clock::ScriptClock;
use crate::render::{self, Names, Spec, BASE_URL, START_MS};
use crate::script::{self, format_time_ms, Args, Problem};
use crate::{request, stores, Node, Service, Store, ACCOUNT_ID, REGION};
use leaseq_testkit::golden::{diff, parse_time as parse_time_ms};

/// How long a command may take to answer, in real time, before the script fails.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the service may take to settle after a command, in real time.
const SETTLE_TIMEOUT: Duration = Duration::from_secs(5);
/// Yields per look at the clock while settling: enough for every woken task to run up to its
/// next wait.
const YIELDS_PER_ROUND: usize = 16;
/// The header line of scripts that reboot.
const PERSISTENT_HEADER: &str = "# stores: persistent";

/// Runs every script the stores can all run; panics with a diff of each that differs.
pub fn run_scripts(stores: &[&dyn Store]) {
    let label: Vec<String> = stores.iter().map(|store| store.name()).collect();
    let label = label.join(" = ");
    let update = std::env::var("UPDATE_GOLDEN").is_ok_and(|value| value == "1");
    let persistent = stores.iter().all(|store| store.persistent());
    let mut failures = Vec::new();
    let mut ran = 0;
    for path in script_paths() {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let expected = std::fs::read_to_string(&path).expect("a script is readable");
        assert!(
            expected.starts_with("# "),
            "{name}: a script opens with a comment sentence saying what it proves"
        );
        if !persistent
            && expected
                .lines()
                .any(|line| line.trim() == PERSISTENT_HEADER)
        {
            continue;
        }
        ran += 1;
        match run_script(stores, &expected) {
            Err(problem) => failures.push(format!("--- {name} on {label}: {problem}")),
            Ok(actual) if actual == expected => {}
            Ok(actual) if update => write_atomically(&path, &actual),
            Ok(actual) => failures.push(format!(
                "--- {name} on {label}\n{}",
                diff(&expected, &actual)
            )),
        }
    }
    assert!(ran > 0, "no script ran on {label}");
    assert!(
        failures.is_empty(),
        "{} conformance script(s) failed on {label} (`-` expected, `+` actual); rerun with \
         UPDATE_GOLDEN=1 to accept the actual output:\n\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn script_paths() -> Vec<PathBuf> {
    let directory = crate::scripts_directory();
    let mut paths: Vec<PathBuf> = std::fs::read_dir(&directory)
        .unwrap_or_else(|error| panic!("{}: {error}", directory.display()))
        .map(|entry| entry.expect("a directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "txt"))
        .collect();
    paths.sort();
    paths
}

/// Tests of several stores may update the same script at once: each writes a whole file.
fn write_atomically(path: &std::path::Path, text: &str) {
    let temporary = path.with_extension(format!("txt.{}.tmp", std::process::id()));
    std::fs::write(&temporary, text).expect("the scripts directory is writable");
    std::fs::rename(&temporary, path).expect("the scripts directory is writable");
}

/// Runs one script and returns its text with the actual outputs.
fn run_script(stores: &[&dyn Store], text: &str) -> Result<String, Problem> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    runtime.block_on(async {
        let mut harness = Harness::open(stores)?;
        let mut rendered = String::new();
        for (index, line) in text.lines().enumerate() {
            let trimmed = line.trim();
            if trimmed.starts_with("->") {
                continue; // An output line of the previous command: rendered again below.
            }
            if trimmed.is_empty() || trimmed.starts_with('#') {
                rendered.push_str(line.trim_end());
                rendered.push('\n');
                continue;
            }
            let command = script::command_part(line);
            let output = harness
                .execute(command)
                .await
                .map_err(|problem| format!("line {}: {command}: {problem}", index + 1))?;
            script::render(&mut rendered, command, &output);
        }
        harness.close()?;
        Ok(rendered)
    })
}

struct Harness {
    clock: ScriptClock,
    sessions: Vec<Session>,
}

impl Harness {
    fn open(stores: &[&dyn Store]) -> Result<Harness, Problem> {
        let clock = ScriptClock::new(START_MS);
        let shared: SharedClock = Arc::new(clock.clone());
        let sessions = stores
            .iter()
            .map(|store| {
                Ok(Session {
                    label: store.name(),
                    node: store.open(shared.clone())?,
                    names: Names::default(),
                    polls: BTreeMap::new(),
                })
            })
            .collect::<Result<Vec<Session>, Problem>>()?;
        Ok(Harness { clock, sessions })
    }

    async fn execute(&mut self, command: &str) -> Result<Vec<String>, Problem> {
        let (verb, rest) = verb_of(command);
        let mut args = Args::parse(rest)?;
        if let Some(at) = args.take("at") {
            self.clock.set(START_MS + parse_time_ms(&at)?);
            self.settle().await?;
        }
        if verb == "advance" {
            let by_ms = parse_time_ms(&args.positional("a time")?)?;
            args.finish()?;
            self.clock.set(self.clock.now_ms() + by_ms);
            self.settle().await?;
            let now = format_time_ms(i128::from(self.clock.now_ms() - START_MS));
            let outputs = self.sessions.iter().map(|s| s.now_line(&now)).collect();
            return self.agree(outputs);
        }
        let mut outputs = Vec::new();
        for index in 0..self.sessions.len() {
            let mut args = Args::parse(rest)?;
            args.take("at");
            let output = self.sessions[index].execute(verb, args).await?;
            self.settle().await?;
            outputs.push(self.sessions[index].resolve(output));
        }
        self.agree(outputs)
    }

    /// The common answer of every session, or what each said.
    fn agree(&self, outputs: Vec<Vec<String>>) -> Result<Vec<String>, Problem> {
        if outputs.windows(2).all(|pair| pair[0] == pair[1]) {
            return Ok(outputs.into_iter().next().unwrap_or_default());
        }
        let said: Vec<String> = self
            .sessions
            .iter()
            .zip(&outputs)
            .map(|(session, output)| format!("  {}: {}", session.label, output.join(" | ")))
            .collect();
        Err(format!(
            "the stores answered differently:\n{}",
            said.join("\n")
        ))
    }

    /// Waits until every task woken by the last command has run and every task still waiting
    /// sleeps on the clock again, none of them past its time.
    async fn settle(&self) -> Result<(), Problem> {
        let started = Instant::now();
        loop {
            for _ in 0..YIELDS_PER_ROUND {
                tokio::task::yield_now().await;
            }
            let expected: usize = self
                .sessions
                .iter()
                .map(|session| session.unfinished_polls() + session.node.background_sleepers())
                .sum();
            // A transfer between buckets is background work too: its driver may not have run
            // yet (woken, its sleep not dropped), or be waiting for a log.
            let transfers: u64 = self
                .sessions
                .iter()
                .map(|session| session.node.transfers_waiting())
                .sum();
            if transfers == 0 && self.clock.settled(expected) {
                return Ok(());
            }
            if started.elapsed() > SETTLE_TIMEOUT {
                return Err(format!(
                    "the service did not settle within {SETTLE_TIMEOUT:?}: expected {expected} \
                     sleepers on the clock, found {}; {transfers} transfer(s) waiting",
                    self.clock.describe()
                ));
            }
            // Work on other threads (the log's sync thread) is what we wait for now.
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    fn close(self) -> Result<(), Problem> {
        for session in &self.sessions {
            if let Some(name) = session.polls.keys().next() {
                return Err(format!("{name} was never awaited"));
            }
            session.node.shut_down();
        }
        Ok(())
    }
}

/// The command's verb (two words for `move …`) and the rest.
fn verb_of(command: &str) -> (&str, &str) {
    let first_end = command.find(char::is_whitespace).unwrap_or(command.len());
    let end = if &command[..first_end] == "move" {
        let after = &command[first_end..].trim_start();
        let offset = command.len() - after.len();
        offset + after.find(char::is_whitespace).unwrap_or(after.len())
    } else {
        first_end
    };
    (&command[..end], &command[end..])
}

/// One store's node with its names and its background receives.
struct Session {
    label: String,
    node: Box<dyn Node>,
    names: Names,
    polls: BTreeMap<String, Poll>,
}

/// A receive running in the background.
struct Poll {
    spec: Spec,
    task: JoinHandle<Response>,
}

/// What a command did: answered, or started a background receive under a name.
enum Output {
    Lines(Vec<String>),
    Started(String),
}

impl Session {
    fn unfinished_polls(&self) -> usize {
        self.polls
            .values()
            .filter(|poll| !poll.task.is_finished())
            .count()
    }

    fn waiting(&self) -> Vec<&str> {
        let waiting = self
            .polls
            .iter()
            .filter(|(_, poll)| !poll.task.is_finished());
        waiting.map(|(name, _)| name.as_str()).collect()
    }

    fn now_line(&self, now: &str) -> Vec<String> {
        let waiting = self.waiting();
        if waiting.is_empty() {
            vec![format!("now={now}")]
        } else {
            vec![format!("now={now} waiting={}", waiting.join(","))]
        }
    }

    async fn execute(&mut self, verb: &str, mut args: Args) -> Result<Output, Problem> {
        let ok = || Ok(Output::Lines(vec!["ok".to_string()]));
        match verb {
            "waiting" => {
                args.finish()?;
                let waiting = self.waiting();
                let line = if waiting.is_empty() {
                    "(none)".into()
                } else {
                    waiting.join(" ")
                };
                Ok(Output::Lines(vec![line]))
            }
            "await" => {
                let name = args.positional("a poll's name")?;
                args.finish()?;
                self.answer_of(&name).await.map(Output::Lines)
            }
            "shutdown" => {
                args.finish()?;
                self.node.shut_down();
                ok()
            }
            "reboot" => {
                args.finish()?;
                if let Some(name) = self.polls.keys().next() {
                    return Err(format!("await {name} before a reboot"));
                }
                self.node.reboot()?;
                ok()
            }
            _ => self.request(verb, args).await,
        }
    }

    /// A request to the service, answered now or (with `as=NAME`) left running.
    async fn request(&mut self, verb: &str, mut args: Args) -> Result<Output, Problem> {
        let background = args.take("as");
        let request = request::build(verb, &mut args, &mut self.names)?;
        args.finish()?;
        let caller = stores::caller(request.user_agent.as_deref());
        let answer = call(
            self.node.service(),
            request.spec.action,
            request.body,
            caller,
        );
        if let Some(name) = background {
            if self.polls.contains_key(&name) {
                return Err(format!("{name} is already running"));
            }
            let task = tokio::spawn(answer);
            self.polls.insert(
                name.clone(),
                Poll {
                    spec: request.spec,
                    task,
                },
            );
            return Ok(Output::Started(name));
        }
        let response = tokio::time::timeout(ANSWER_TIMEOUT, answer)
            .await
            .map_err(|_| {
                format!(
                    "no answer within {ANSWER_TIMEOUT:?} of real time (a receive that waits \
                     runs in the background: as=NAME)"
                )
            })?;
        Ok(Output::Lines(self.render(request.spec, &response)))
    }

    async fn answer_of(&mut self, name: &str) -> Result<Vec<String>, Problem> {
        let poll = self.polls.remove(name).ok_or(format!("no poll {name}"))?;
        if !poll.task.is_finished() {
            return Err(format!("{name} is still waiting (`waiting` shows it)"));
        }
        let response = poll
            .task
            .await
            .map_err(|error| format!("{name} failed: {error}"))?;
        Ok(self.render(poll.spec, &response))
    }

    fn render(&mut self, spec: Spec, response: &Response) -> Vec<String> {
        render::response(spec, response.status, &response.body, &mut self.names)
    }

    /// The output of a command once the service has settled: a background receive says
    /// whether it is still waiting.
    fn resolve(&self, output: Output) -> Vec<String> {
        match output {
            Output::Lines(lines) => lines,
            Output::Started(name) => {
                let finished = self.polls[&name].task.is_finished();
                vec![if finished { "answered" } else { "waiting" }.to_string()]
            }
        }
    }
}

fn context() -> Context {
    Context {
        base_url: BASE_URL.into(),
        region: REGION.into(),
        account_id: ACCOUNT_ID.into(),
        request_id: "conformance".into(),
    }
}

/// A request as a client sends it: encoded as JSON 1.0, decoded as the HTTP layer decodes it,
/// executed, and the outcome encoded as the response.
async fn call(
    service: Arc<dyn Service>,
    action: &'static str,
    body: Value,
    caller: Caller,
) -> Response {
    {
        let ctx = context();
        let bytes = body.to_string().into_bytes();
        let target = format!("AmazonSQS.{action}");
        let decoded = decode(&RawRequest {
            method: "POST",
            path: "/",
            query: None,
            target: Some(&target),
            content_type: Some("application/x-amz-json-1.0"),
            body: &bytes,
        });
        let (protocol, action, shape) = match decoded {
            Ok(decoded) => decoded,
            Err((protocol, error)) => return encode_error(protocol, &error, &ctx),
        };
        let name = action.name();
        match service.execute(action, caller).await {
            Ok(outcome) => encode(protocol, name, &outcome, &shape, &ctx),
            Err(error) => encode_error(protocol, &error, &ctx),
        }
    }
}
