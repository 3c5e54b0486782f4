//! The conformance suite: golden scripts over the leaseq *service*, run against every log store.
//!
//! The scripts in `scripts/` are the service's spec as a client sees it: each command becomes an
//! SQS request (JSON 1.0, decoded by `leaseq_sqs::decode` exactly as the HTTP layer decodes it),
//! the service executes the [`Action`] and the [`Outcome`] is encoded as the wire would carry it;
//! the harness renders that response with symbolic names for what is random or sealed. The same
//! scripts run on every [`Store`] (the in-memory log, the file log, and later the PostgreSQL log
//! and the cluster): passing them is a store's definition of done. A mirror runs two stores side
//! by side and asserts that they answer every command alike, as toyDB's `Mirror` engine does.
//!
//! ```no_run
//! // In another crate's tests: the whole suite on a store, and a mirror of it and the file log
//! // (here the in-memory store stands in for the new one).
//! use leaseq_conformance::stores::{FileStore, MemoryStore};
//! leaseq_conformance::run_all(&MemoryStore::default());
//! leaseq_conformance::run_mirror(&MemoryStore::default(), &FileStore::new());
//! ```
//!
//! # The language
//!
//! One command per line; its output follows `->` at column 41, further output lines start with
//! `->` at the same column. `#` lines and blank lines are kept. A script opens with a comment
//! sentence saying what it proves; a line `# stores: persistent` marks a script that reboots, so
//! it runs only on stores that keep their state. `UPDATE_GOLDEN=1 cargo test -p
//! leaseq-conformance` rewrites the scripts with the actual output, to be reviewed as a diff.
//!
//! Names bind what the service makes, by first appearance: message ids `m1`, receipts `r1`,
//! move tasks `t1`, list tokens `k1`. A receipt argument is a name, `raw:TEXT` (sent as it is)
//! or `tampered:r1` (one character changed). Values may be quoted (`body="two words"`; inside
//! quotes `\n`, `\t`, `\"`, `\\` and `\{a*300}`, 300 times `a`). Times in the output are relative
//! to the start of the script (`30s`, `1500ms`); the clock starts at 0 and moves only when told.
//!
//! Time and concurrency:
//! - `advance TIME` moves the clock (`advance 30s`, `advance 500ms`); any command takes
//!   `at=TIME` (absolute) to move it first. [`now=TIME`, and `waiting=p1,p2` if polls wait]
//! - `receive … as=P` starts the receive in the background [`pending`]; `await P` prints its
//!   answer (failing the script if it is still waiting); `waiting` lists the polls still
//!   waiting [`p1 p2` | `(none)`]. After every command the harness lets the service settle:
//!   every woken task has run, and every waiting one sleeps on the clock again.
//! - `shutdown` releases waiting receives (they answer empty) [`ok`]; `reboot` crashes the
//!   node (only what was synced survives) and recovers it on the same store [`ok`].
//!
//! Queues (`NAME` is a queue name; its URL is built):
//! - `create NAME [Attribute=VALUE]... [tag.KEY=VALUE]...` [the queue's name]. Attributes use
//!   SQS names and values; `RedrivePolicy=dlq:3` and `RedriveAllowPolicy=byQueue:a,b` (or
//!   `allowAll`, `denyAll`) are short for their JSON.
//! - `url NAME` [name], `list [prefix=P] [max=N] [token=kN]` [names, `next=kN`],
//!   `sources NAME [max=N] [token=kN]` (`ListDeadLetterSourceQueues`)
//! - `attributes NAME [ATTRIBUTE]...` (default `All`) [one `Name=Value` per line; timestamps
//!   relative], `set NAME Attribute=VALUE...`, `tag NAME KEY=VALUE...`, `untag NAME KEY...`,
//!   `purge NAME`, `delete-queue NAME` [`ok`], `tags NAME` [`KEY=VALUE`...]
//!
//! Messages:
//! - `send NAME body=TEXT [delay=S] [group=G] [dedup=D] [attr.NAME=TYPE:VALUE]...` [`m1`, and
//!   `seq=N` on FIFO queues]
//! - `send-batch NAME ID.body=TEXT [ID.delay=S] [ID.group=G] [ID.dedup=D]...` [one line per
//!   entry: `ID m1` or `ID error CODE: message`]
//! - `receive NAME [max=N] [visibility=S] [wait=S|queue] [attempt=ID] [client=UA] [verbose]
//!   [as=P]` [one line per message: `m1 receipt=r1 body=… receives=N`, plus `group`, `dedup`,
//!   `seq` (FIFO), `source` (dead-lettered from), attributes; `verbose` adds the timestamps;
//!   `(none)`]. Without `wait=` the receive does not wait (`WaitTimeSeconds=0`); `wait=queue`
//!   leaves the queue's `ReceiveMessageWaitTimeSeconds` in charge.
//! - `delete NAME RECEIPT`, `visibility NAME RECEIPT SECONDS`, `fail NAME RECEIPT [reason=T]`
//!   [`ok`]; `delete-batch NAME ID=RECEIPT...`, `visibility-batch NAME ID=RECEIPT:SECONDS...`
//!   [one line per entry]
//! - `peek NAME [max=N] [after=SEQ]` [one line per message, `next=SEQ`], `history NAME mN`
//!   [the message, then one line per attempt]
//! - `move start SOURCE [to=DEST] [rate=N] [limit=N]` [`t1`], `move list SOURCE [max=N]` [one
//!   line per task], `move cancel tN` [`moved=N`], `move pause|resume tN`, `move update tN
//!   [rate=N] [limit=N]` [the task]
//!
//! An error renders as `error CODE: message` (the JSON `__type` without its namespace).

mod clock;
mod harness;
mod render;
mod request;
mod script;
pub mod stores;

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;

use leaseq_server::clock::SharedClock;
use leaseq_server::Caller;
use leaseq_sqs::{Action, Outcome, SqsError};

/// The region of queue ARNs in the scripts.
pub const REGION: &str = "us-east-1";
/// The account id of queue URLs and ARNs in the scripts.
pub const ACCOUNT_ID: &str = "000000000000";

/// The service under test: executes an action for a caller. Implementations share themselves
/// with the returned future, so a long poll can run in the background while a script goes on.
pub trait Service: Send + Sync + 'static {
    /// Executes one action (a receive may wait for its wait time, following the clock).
    fn execute(
        &self,
        action: Action,
        caller: Caller,
    ) -> Pin<Box<dyn Future<Output = Result<Outcome, SqsError>> + Send>>;
}

/// A kind of log store: opens a service on a new, empty store of that kind.
pub trait Store {
    /// A short name for failure messages (`memory`, `file`, `postgres`).
    fn name(&self) -> String;

    /// Whether the store keeps its state across a reboot (scripts marked `# stores:
    /// persistent` run only on such stores).
    fn persistent(&self) -> bool;

    /// Opens a service on a new, empty store, following `clock` for every time it reads and
    /// every wait. Called inside the tokio runtime the script runs on, so the service may spawn
    /// its background tasks (such as the move driver).
    fn open(&self, clock: SharedClock) -> Result<Box<dyn Node>, String>;
}

/// A service opened on a store: one node.
pub trait Node {
    /// The service, to execute actions on.
    fn service(&self) -> Arc<dyn Service>;

    /// Releases every waiting receive (they answer empty) and stops background tasks.
    fn shut_down(&self);

    /// Crashes the node and opens it again on the same store, with the same receipt key:
    /// whatever was acknowledged must survive. Stores that keep nothing return an error.
    fn reboot(&mut self) -> Result<(), String>;

    /// How many background tasks of the node (not requests) wait on the clock when the node
    /// is idle (the move driver: 1). The harness counts sleepers to know the node settled.
    fn background_sleepers(&self) -> usize;

    /// Messages in the node's outboxes, on their way to another bucket: the node has not
    /// settled while any waits (its transfer driver is at work, or about to be woken).
    fn transfers_waiting(&self) -> u64;
}

/// Where the scripts are.
pub fn scripts_directory() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts")
}

/// Runs every script that `store` can run, and panics with a diff of every one that differs.
pub fn run_all(store: &dyn Store) {
    harness::run_scripts(&[store]);
}

/// Runs every script that both stores can run on both at once, asserting after every command
/// that they answered alike (each with its own names for ids and receipts), and that the
/// answers are the script's.
pub fn run_mirror(first: &dyn Store, second: &dyn Store) {
    harness::run_scripts(&[first, second]);
}
