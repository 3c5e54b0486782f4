//! Transfers between buckets (see `leaseq_core::transfer`): a dead-letter move whose
//! dead-letter queue lives in another bucket's engine reaches it exactly once, through crashes
//! of either side at every step, snapshots in between, and a destination that does not exist.
//! So does a message of a move task (redrive) whose destination lives in another bucket, and it
//! arrives as the same redrive in one engine would make it.
//!
//! Each engine here has a log (every record it journaled, through the byte codec); a crash
//! rebuilds it from a prefix of that log, as recovery does.

use std::collections::BTreeMap;
use std::sync::Arc;

use leaseq_core::engine::{destination_deleted, MoveProgress};
use leaseq_core::transfer::{bucket_of_queue_id, REFUSED_FOR_MS};
use leaseq_core::{
    bucket_of, codec, Engine, EngineConfig, Error, Journal, Limits, Message, MessageId, MoveStatus,
    MoveTask, Payload, PayloadRef, Placement, QueueConfigPatch, ReceiptKey, ReceiveRequest, Record,
    RedriveAllowPolicy, RedrivePolicy, SendInput, TransferAnswer, TransferKind,
};

const BUCKETS: u32 = 4;

/// An engine of one bucket and the log of everything it journaled.
struct Node {
    placement: Placement,
    engine: Engine,
    log: Vec<Record>,
}

impl Node {
    fn new(bucket: u32) -> Node {
        let placement = Placement {
            bucket,
            buckets: BUCKETS,
        };
        Node {
            placement,
            engine: Engine::new(config(placement), ReceiptKey::new([9; 16])),
            log: Vec::new(),
        }
    }

    /// Runs `operation` and logs its records (through the codec, as a log stores them).
    fn run<T>(&mut self, operation: impl FnOnce(&mut Engine, &mut Journal) -> T) -> T {
        let mut journal = Journal::new();
        let result = operation(&mut self.engine, &mut journal);
        for record in journal {
            let mut bytes = Vec::new();
            codec::encode(&record, &mut bytes);
            self.log
                .push(codec::decode(&bytes).expect("a record decodes"));
        }
        result
    }

    /// A crash that loses the last `lost` records: the engine is rebuilt from the rest.
    fn crash(&mut self, lost: usize) {
        self.log.truncate(self.log.len() - lost);
        let mut engine = Engine::new(config(self.placement), ReceiptKey::new([9; 16]));
        for record in &self.log {
            engine.apply(record);
        }
        engine.check_invariants();
        self.engine = engine;
    }

    /// A checkpoint: the log becomes the engine's snapshot (through the codec).
    fn checkpoint(&mut self) {
        let mut snapshot = Vec::new();
        self.engine.snapshot(|record| {
            let mut bytes = Vec::new();
            codec::encode(&record, &mut bytes);
            snapshot.push(codec::decode(&bytes).expect("a snapshot record decodes"));
        });
        self.log = snapshot;
        self.crash(0);
    }

    fn create(&mut self, name: &str, patch: &QueueConfigPatch) {
        assert!(
            !self.placement.is_remote(name),
            "{name} is not in this bucket"
        );
        self.run(|engine, journal| {
            engine
                .create_queue(0, name, patch, BTreeMap::new(), journal)
                .unwrap()
        });
    }

    fn send(&mut self, now_ms: u64, queue: &str, input: SendInput, n: u8) {
        self.run(|engine, journal| {
            engine
                .send(
                    now_ms,
                    queue,
                    input,
                    MessageId::from_random([n; 16]),
                    journal,
                )
                .unwrap()
        });
    }

    /// Receives up to ten messages with a lease of one second: their bodies and receipts.
    fn receive(&mut self, now_ms: u64, queue: &str) -> Vec<(String, String)> {
        let request = ReceiveRequest {
            max_messages: 10,
            visibility_timeout_seconds: Some(1),
            client: None,
        };
        self.run(|engine, journal| engine.receive(now_ms, queue, request, journal))
            .unwrap()
            .into_iter()
            .map(|delivery| (body(&delivery.payload), delivery.receipt))
            .collect()
    }

    /// The bodies of a queue's messages, in order.
    fn bodies(&mut self, now_ms: u64, queue: &str) -> Vec<String> {
        self.engine
            .peek(now_ms, queue, 0, 1000)
            .unwrap()
            .iter()
            .map(|peeked| body(&peeked.message.payload))
            .collect()
    }
}

fn config(placement: Placement) -> EngineConfig {
    EngineConfig {
        placement,
        // Names can be used again at once, so that a test can delete a destination and create
        // it again within `REFUSED_FOR_MS`.
        limits: Limits {
            queue_name_reuse_delay_ms: 0,
            ..Limits::default()
        },
        ..EngineConfig::default()
    }
}

fn body(payload: &PayloadRef) -> String {
    match payload {
        PayloadRef::Inline(payload) => payload.body.clone(),
        PayloadRef::Stored(_) | PayloadRef::Cached(_) => panic!("no log stores payloads here"),
    }
}

/// A queue name of `bucket`, starting with `prefix`.
fn name_in(bucket: u32, prefix: &str, suffix: &str) -> String {
    (0..)
        .map(|i| format!("{prefix}{i}{suffix}"))
        .find(|name| bucket_of(name, BUCKETS) == bucket)
        .unwrap()
}

fn with_dead_letter_queue(dlq: &str, max_receive_count: u32) -> QueueConfigPatch {
    QueueConfigPatch {
        redrive_policy: Some(Some(RedrivePolicy {
            dead_letter_queue: dlq.into(),
            max_receive_count,
        })),
        ..QueueConfigPatch::default()
    }
}

/// A source queue in bucket 0 and its dead-letter queue in bucket 1 (both FIFO or not), with
/// `n` messages spent (received `max_receive_count` = 1 times, lease over).
struct Setup {
    source: Node,
    target: Node,
    queue: String,
    dlq: String,
}

fn setup(fifo: bool, n: u8) -> Setup {
    let suffix = if fifo { ".fifo" } else { "" };
    let (queue, dlq) = (name_in(0, "jobs", suffix), name_in(1, "dlq", suffix));
    let (mut source, mut target) = (Node::new(0), Node::new(1));
    let kind = QueueConfigPatch {
        fifo_queue: fifo.then_some(true),
        content_based_deduplication: fifo.then_some(true),
        ..QueueConfigPatch::default()
    };
    target.create(&dlq, &kind);
    source.create(
        &queue,
        &QueueConfigPatch {
            ..with_dead_letter_queue(&dlq, 1)
        }
        .merged(&kind),
    );
    for i in 0..n {
        let input = SendInput::body(format!("m{i}"));
        let input = if fifo {
            input.in_group(format!("g{}", i % 2))
        } else {
            input
        };
        source.send(1_000, &queue, input, i);
    }
    // The first receives: FIFO groups deliver one message at a time per receive pass, so
    // receive until every message had its one receive.
    let mut received = 0;
    let mut now_ms = 2_000;
    while received < usize::from(n) {
        let got = source.receive(now_ms, &queue);
        assert!(!got.is_empty(), "every message is received once");
        received += got.len();
        now_ms += 2_000;
    }
    Setup {
        source,
        target,
        queue,
        dlq,
    }
}

trait Merge {
    fn merged(self, other: &QueueConfigPatch) -> QueueConfigPatch;
}

impl Merge for QueueConfigPatch {
    fn merged(mut self, other: &QueueConfigPatch) -> QueueConfigPatch {
        self.fifo_queue = other.fifo_queue;
        self.content_based_deduplication = other.content_based_deduplication;
        self
    }
}

/// Hands the outbox's first transfer to the target, once: the target's answer.
fn hand_over(source: &Node, target: &mut Node, now_ms: u64) -> Option<(u64, TransferAnswer)> {
    let transfer = source.engine.next_transfer()?;
    let payload: Arc<Payload> = match &transfer.message.payload {
        PayloadRef::Inline(payload) => payload.clone(),
        PayloadRef::Stored(_) | PayloadRef::Cached(_) => panic!("no log stores payloads here"),
    };
    let transfer_id = transfer.transfer_id;
    let incoming = transfer.with_payload(payload);
    let answer = target.run(|engine, journal| engine.ingest_transfer(now_ms, incoming, journal));
    Some((transfer_id, answer))
}

/// Runs the protocol until the outbox is empty.
fn drain(source: &mut Node, target: &mut Node, now_ms: u64) {
    while let Some((transfer_id, answer)) = hand_over(source, target, now_ms) {
        assert!(source.run(|engine, journal| {
            engine.finish_transfer(now_ms, transfer_id, answer, journal)
        }));
    }
}

#[test]
fn queue_ids_carry_their_bucket() {
    for bucket in [0, 1, 3] {
        let mut node = Node::new(bucket);
        let name = name_in(bucket, "q", "");
        node.create(&name, &QueueConfigPatch::default());
        let id = node.engine.queue(&name).unwrap().id;
        assert_eq!(bucket_of_queue_id(id), bucket, "{name}: {id:#x}");
        // Bucket 0's ids are what a one-bucket engine always gave: 1, 2, ...
        if bucket == 0 {
            assert_eq!(id, 1);
        }
    }
}

#[test]
fn a_spent_message_reaches_a_dead_letter_queue_of_another_bucket() {
    let Setup {
        mut source,
        mut target,
        queue,
        dlq,
    } = setup(false, 5);
    // The next receive finds every message spent: they leave for the outbox, none is delivered.
    assert!(source.receive(10_000, &queue).is_empty());
    assert_eq!(source.engine.outbox_len(), 5);
    let info = source.engine.queue_info(10_000, &queue).unwrap();
    assert_eq!((info.ready, info.in_flight), (0, 0));
    assert_eq!(info.counters.dead_lettered, 5);
    drain(&mut source, &mut target, 11_000);
    assert_eq!(source.engine.outbox_len(), 0);
    assert_eq!(target.bodies(11_000, &dlq), ["m0", "m1", "m2", "m3", "m4"]);
    for peeked in target.engine.peek(11_000, &dlq, 0, 10).unwrap() {
        assert_eq!(
            peeked.message.dead_letter_source.as_deref(),
            Some(queue.as_str())
        );
        assert_eq!(peeked.message.receive_count, 1);
    }
    // The dead-letter queue serves them as its own.
    assert_eq!(target.receive(12_000, &dlq).len(), 5);
    // Both sides' logs rebuild the same state.
    let before = (source.engine.outbox_len(), target.bodies(12_000, &dlq));
    source.crash(0);
    target.crash(0);
    assert_eq!(
        before,
        (source.engine.outbox_len(), target.bodies(12_000, &dlq))
    );
}

/// Every way a hand-over can be cut short: the target's record lost, the source's answer lost,
/// or both sides' logs fine but the answer never delivered. Each time the protocol goes on
/// from what the logs hold, and every message arrives once.
#[test]
fn a_transfer_is_taken_exactly_once_whatever_crashes() {
    for (target_loses, source_loses) in [(true, false), (false, true), (false, false), (true, true)]
    {
        let Setup {
            mut source,
            mut target,
            queue,
            dlq,
        } = setup(false, 3);
        assert!(source.receive(10_000, &queue).is_empty());
        let (transfer_id, answer) = hand_over(&source, &mut target, 11_000).unwrap();
        assert_eq!(answer, TransferAnswer::Taken);
        if target_loses {
            // The target's record was not durable: it never took the message.
            target.crash(1);
            assert!(target.bodies(11_000, &dlq).is_empty());
        }
        assert!(source.run(|engine, journal| {
            engine.finish_transfer(11_000, transfer_id, answer, journal)
        }));
        if source_loses {
            source.crash(1);
        }
        if target_loses && !source_loses {
            // Not a state the protocol allows (the source records an answer only once the
            // target's record is durable); the message would be lost, which is why.
            assert_eq!(source.engine.outbox_len(), 2);
            continue;
        }
        drain(&mut source, &mut target, 12_000);
        assert_eq!(
            target.bodies(12_000, &dlq),
            ["m0", "m1", "m2"],
            "target lost {target_loses}, source lost {source_loses}"
        );
        assert_eq!(source.engine.outbox_len(), 0);
        assert!(source.bodies(12_000, &queue).is_empty());
    }
}

#[test]
fn a_transfer_handed_over_twice_is_answered_from_memory() {
    let Setup {
        mut source,
        mut target,
        queue,
        dlq,
    } = setup(false, 2);
    assert!(source.receive(10_000, &queue).is_empty());
    let (first, answer) = hand_over(&source, &mut target, 11_000).unwrap();
    let logged = target.log.len();
    // Handed over again (the answer got lost on the way): the same answer, nothing journaled.
    assert_eq!(
        hand_over(&source, &mut target, 11_001),
        Some((first, answer))
    );
    assert_eq!(target.log.len(), logged);
    // The target remembers it through a snapshot too.
    target.checkpoint();
    assert_eq!(
        hand_over(&source, &mut target, 11_002),
        Some((first, answer))
    );
    source.run(|engine, journal| engine.finish_transfer(11_003, first, answer, journal));
    // An older transfer than the last answered cannot be answered safely.
    let (second, _) = hand_over(&source, &mut target, 11_004).unwrap();
    assert!(second > first);
    let mut stale = source.engine.next_transfer().unwrap();
    stale.transfer_id = first;
    let stale = stale.with_payload(Arc::new(Payload::new(
        "m".into(),
        BTreeMap::new(),
        None,
        Arc::from(""),
    )));
    let logged = target.log.len();
    let answer = target.run(|engine, journal| engine.ingest_transfer(11_005, stale, journal));
    assert_eq!(answer, TransferAnswer::OutOfOrder);
    assert_eq!(target.log.len(), logged);
    assert!(!source.run(|engine, journal| {
        engine.finish_transfer(11_006, second, TransferAnswer::OutOfOrder, journal)
    }));
    assert_eq!(target.bodies(11_006, &dlq), ["m0", "m1"]);
}

#[test]
fn snapshots_keep_the_outbox_and_the_marks() {
    let Setup {
        mut source,
        mut target,
        queue,
        dlq,
    } = setup(false, 4);
    assert!(source.receive(10_000, &queue).is_empty());
    // One transfer taken but not yet answered at the source, when both checkpoint.
    let (transfer_id, answer) = hand_over(&source, &mut target, 11_000).unwrap();
    source.checkpoint();
    target.checkpoint();
    assert_eq!(source.engine.outbox_len(), 4);
    // Then the answer, lost in a crash, and a snapshot again.
    source.run(|engine, journal| engine.finish_transfer(11_001, transfer_id, answer, journal));
    source.crash(1);
    source.checkpoint();
    drain(&mut source, &mut target, 12_000);
    assert_eq!(target.bodies(12_000, &dlq), ["m0", "m1", "m2", "m3"]);
    // Transfer ids go on after a snapshot, never again from 1: a new message is a new transfer.
    source.send(13_000, &queue, SendInput::body("late"), 99);
    source.receive(13_000, &queue);
    source.checkpoint();
    assert!(source.receive(15_000, &queue).is_empty());
    let next = source.engine.next_transfer().unwrap();
    assert!(next.transfer_id > transfer_id + 3, "{}", next.transfer_id);
    drain(&mut source, &mut target, 16_000);
    assert_eq!(target.bodies(16_000, &dlq).last().unwrap(), "late");
}

#[test]
fn a_refused_transfer_comes_back_and_its_destination_counts_as_missing() {
    let (queue, dlq) = (name_in(0, "jobs", ""), name_in(1, "gone", ""));
    let (mut source, mut target) = (Node::new(0), Node::new(1));
    source.create(&queue, &with_dead_letter_queue(&dlq, 1));
    source.send(1_000, &queue, SendInput::body("m"), 1);
    assert_eq!(source.receive(2_000, &queue).len(), 1);
    assert!(source.receive(4_000, &queue).is_empty());
    let (transfer_id, answer) = hand_over(&source, &mut target, 4_000).unwrap();
    assert_eq!(answer, TransferAnswer::Refused);
    source.run(|engine, journal| engine.finish_transfer(4_000, transfer_id, answer, journal));
    // Back in its queue, ready, with its receive count: delivered past its limit, as when a
    // local dead-letter queue is missing.
    assert_eq!(source.engine.outbox_len(), 0);
    let info = source.engine.queue_info(4_000, &queue).unwrap();
    assert_eq!((info.ready, info.counters.dead_lettered), (1, 0));
    let got = source.receive(4_001, &queue);
    assert_eq!(got.len(), 1, "delivered, not transferred again");
    // Through a restart too, and only for a while: then the destination is tried again.
    source.crash(0);
    assert_eq!(source.receive(6_000, &queue).len(), 1);
    source.checkpoint();
    assert_eq!(source.receive(8_000, &queue).len(), 1);
    assert!(source
        .receive(4_000 + REFUSED_FOR_MS + 10_000, &queue)
        .is_empty());
    assert_eq!(source.engine.outbox_len(), 1);
    // The destination exists now: it takes the message.
    target.create(&dlq, &QueueConfigPatch::default());
    drain(&mut source, &mut target, 4_000 + REFUSED_FOR_MS + 10_000);
    assert_eq!(target.bodies(4_000 + REFUSED_FOR_MS + 10_001, &dlq), ["m"]);
}

#[test]
fn a_destination_of_the_other_kind_refuses() {
    let (queue, dlq) = (name_in(0, "jobs", ""), name_in(1, "dlq", ".fifo"));
    let (mut source, mut target) = (Node::new(0), Node::new(1));
    // Created after the policy was set (the policy's check is the caller's for a remote name).
    source.create(&queue, &with_dead_letter_queue(&dlq, 1));
    target.create(
        &dlq,
        &QueueConfigPatch {
            fifo_queue: Some(true),
            content_based_deduplication: Some(true),
            ..QueueConfigPatch::default()
        },
    );
    source.send(1_000, &queue, SendInput::body("m"), 1);
    source.receive(2_000, &queue);
    assert!(source.receive(4_000, &queue).is_empty());
    let (_, answer) = hand_over(&source, &mut target, 4_000).unwrap();
    assert_eq!(answer, TransferAnswer::Refused);
    assert!(target.bodies(4_000, &dlq).is_empty());
}

#[test]
fn fifo_groups_keep_their_order_across_buckets() {
    let Setup {
        mut source,
        mut target,
        queue,
        dlq,
    } = setup(true, 6);
    // Spent messages leave group by group as receives reach them.
    let mut now_ms = 20_000;
    while source.engine.outbox_len() < 6 {
        assert!(source.receive(now_ms, &queue).is_empty());
        now_ms += 1_000;
    }
    drain(&mut source, &mut target, now_ms);
    let peeked = target.engine.peek(now_ms, &dlq, 0, 10).unwrap();
    let order = |group: &str| -> Vec<String> {
        peeked
            .iter()
            .filter(|p| &*p.message.fifo.as_ref().unwrap().group_id == group)
            .map(|p| body(&p.message.payload))
            .collect()
    };
    assert_eq!(order("g0"), ["m0", "m2", "m4"]);
    assert_eq!(order("g1"), ["m1", "m3", "m5"]);
    for p in &peeked {
        // As a local FIFO dead-letter move: the message id becomes the deduplication id.
        let fifo = p.message.fifo.as_ref().unwrap();
        assert_eq!(&*fifo.deduplication_id, p.message.id.to_string());
    }
    // The dead-letter queue delivers group by group, in order.
    let first = target.receive(now_ms, &dlq);
    assert_eq!(first.len(), 6);
}

#[test]
fn fail_now_transfers_with_its_reason() {
    let (queue, dlq) = (name_in(0, "jobs", ""), name_in(1, "dlq", ""));
    let (mut source, mut target) = (Node::new(0), Node::new(1));
    target.create(&dlq, &QueueConfigPatch::default());
    source.create(&queue, &with_dead_letter_queue(&dlq, 5));
    source.send(1_000, &queue, SendInput::body("poison"), 1);
    let (_, receipt) = source.receive(2_000, &queue).pop().unwrap();
    source.run(|engine, journal| {
        engine
            .fail_message(2_100, &queue, &receipt, "bad input", journal)
            .unwrap()
    });
    assert_eq!(source.engine.outbox_len(), 1);
    // The receipt acts on nothing any more: the message left.
    let gone = source.run(|engine, journal| engine.delete(2_200, &queue, &receipt, journal));
    assert_eq!(gone.unwrap().0, leaseq_core::DeleteOutcome::AlreadyGone);
    drain(&mut source, &mut target, 3_000);
    let peeked = target.engine.peek(3_000, &dlq, 0, 10).unwrap();
    assert_eq!(peeked.len(), 1);
    assert_eq!(peeked[0].failure_reason.as_deref(), Some("bad input"));
    let history = peeked[0].message.history.as_ref().unwrap();
    assert_eq!(
        history.attempts.back().unwrap().outcome,
        leaseq_core::AttemptOutcome::Failed
    );
}

/// A log that keeps payloads: the outbox's bodies are spilled and relocated like a queue's,
/// so a checkpoint keeps their segments and a compaction may move them.
#[test]
fn outbox_payloads_are_spilled_and_relocated() {
    let Setup {
        mut source,
        mut target,
        queue,
        ..
    } = setup(false, 1);
    assert!(source.receive(10_000, &queue).is_empty());
    let transfer = source.engine.next_transfer().unwrap();
    let PayloadRef::Inline(payload) = transfer.message.payload.clone() else {
        panic!("inline");
    };
    let (queue_id, seq) = {
        let Some(Record::TransferOut { queue_id, seq, .. }) = source.log.last() else {
            panic!("a transfer out last");
        };
        (*queue_id, *seq)
    };
    // The relocation of a payload the outbox holds, as a compaction does, then its spill.
    let from = leaseq_core::Location {
        segment: 1,
        offset: 0,
        len_bytes: 10,
    };
    let relocate = Record::Relocate {
        now_ms: 10_000,
        queue_id,
        seq,
        payload: payload.clone(),
    };
    source.engine.spill(&relocate, from);
    let frozen = source.engine.freeze();
    let mut stored = Vec::new();
    frozen.stored_payloads(|q, s, location| stored.push((q, s, location)));
    assert_eq!(stored, [(queue_id, seq, from)]);
    let mut journal = Journal::new();
    let to_payload = payload.clone();
    assert!(source
        .engine
        .relocate(queue_id, seq, from, to_payload, &mut journal));
    assert_eq!(journal.len(), 1);
    assert_eq!(
        source.engine.next_transfer().unwrap().message.payload,
        PayloadRef::Inline(payload)
    );
    let _ = &mut target;
}

// Move tasks (redrive) across buckets.

impl Node {
    /// A one-bucket engine: every queue is local. A redrive across buckets is compared with the
    /// same redrive in it.
    fn single() -> Node {
        let placement = Placement::default();
        Node {
            placement,
            engine: Engine::new(config(placement), ReceiptKey::new([9; 16])),
            log: Vec::new(),
        }
    }

    /// Starts a move task out of `dlq`: its id. `remote_sources`: the dead-letter sources are
    /// in other buckets (the caller checked them there).
    fn start_redrive(
        &mut self,
        now_ms: u64,
        dlq: &str,
        destination: Option<&str>,
        remote_sources: bool,
    ) -> u64 {
        self.run(|engine, journal| {
            let info = if remote_sources {
                engine.start_move_task_with_remote_sources(
                    now_ms,
                    dlq,
                    destination,
                    None,
                    None,
                    journal,
                )
            } else {
                engine.start_move_task(now_ms, dlq, destination, None, None, journal)
            };
            info.unwrap().task.task_id
        })
    }

    /// One batch of up to 20 messages, their new ids drawn from `first_id` on.
    fn move_batch(&mut self, now_ms: u64, task_id: u64, first_id: u8) -> MoveProgress {
        let ids: Vec<MessageId> = (0..20)
            .map(|i| MessageId::from_random([first_id + i; 16]))
            .collect();
        self.run(|engine, journal| engine.move_batch(now_ms, task_id, &ids, journal))
            .unwrap()
    }

    fn task(&self, task_id: u64) -> MoveTask {
        self.engine.move_task(task_id).unwrap().task
    }

    /// A queue's messages, in order.
    fn messages(&mut self, now_ms: u64, queue: &str) -> Vec<Message> {
        self.engine
            .peek(now_ms, queue, 0, 1000)
            .unwrap()
            .into_iter()
            .map(|peeked| peeked.message)
            .collect()
    }
}

/// Hands the outbox's first transfer to the node of its destination's bucket, once.
fn hand_over_to(source: &Node, targets: &mut [&mut Node], now_ms: u64) -> (u64, TransferAnswer) {
    let destination = source.engine.next_transfer().unwrap().destination;
    let bucket = bucket_of(&destination, BUCKETS);
    let target = targets
        .iter_mut()
        .find(|node| node.placement.bucket == bucket)
        .expect("a node for the destination's bucket");
    hand_over(source, target, now_ms).unwrap()
}

/// Runs the protocol until the outbox is empty, each transfer to the node of its bucket.
fn drain_to(source: &mut Node, targets: &mut [&mut Node], now_ms: u64) {
    while source.engine.outbox_len() > 0 {
        let (transfer_id, answer) = hand_over_to(source, targets, now_ms);
        assert!(source.run(|engine, journal| {
            engine.finish_transfer(now_ms, transfer_id, answer, journal)
        }));
    }
}

fn kind(fifo: bool) -> QueueConfigPatch {
    QueueConfigPatch {
        fifo_queue: fifo.then_some(true),
        content_based_deduplication: fifo.then_some(true),
        ..QueueConfigPatch::default()
    }
}

/// Queues `a` (bucket 0) and `b` (bucket 2) whose dead-letter queue is `dlq` (bucket 1), each
/// with `n` spent messages that went to `dlq` (through transfers); and `local`, one engine with
/// the same queues and the same messages, moved the same way at the same times.
struct Redrive {
    /// The engines of buckets 0, 1, 2 and 3 (3 holds no queue unless a test makes one).
    nodes: [Node; 4],
    local: Node,
    a: String,
    b: String,
    dlq: String,
    /// When the messages are all in `dlq`.
    now_ms: u64,
}

fn redrive_setup(fifo: bool, n: u8) -> Redrive {
    let suffix = if fifo { ".fifo" } else { "" };
    let (a, b, dlq) = (
        name_in(0, "a", suffix),
        name_in(2, "b", suffix),
        name_in(1, "dlq", suffix),
    );
    let mut nodes = [Node::new(0), Node::new(1), Node::new(2), Node::new(3)];
    let mut local = Node::single();
    nodes[1].create(&dlq, &kind(fifo));
    local.create(&dlq, &kind(fifo));
    let mut now_ms = 1_000;
    for (bucket, name, first_id) in [(0, &a, 0), (2, &b, 100)] {
        let patch = with_dead_letter_queue(&dlq, 1).merged(&kind(fifo));
        nodes[bucket].create(name, &patch);
        local.create(name, &patch);
        for i in 0..n {
            let input = SendInput::body(format!("{name}/m{i}"));
            let input = if fifo {
                input.in_group(format!("g{}", i % 2))
            } else {
                input
            };
            nodes[bucket].send(now_ms, name, input.clone(), first_id + i);
            local.send(now_ms, name, input, first_id + i);
        }
        // Receive (the one receive each has) until every message is spent and gone, the same
        // calls on both sides.
        for _ in 0..100 {
            if nodes[bucket].bodies(now_ms, name).is_empty() {
                break;
            }
            now_ms += 2_000;
            let got = nodes[bucket].receive(now_ms, name);
            let got_local = local.receive(now_ms, name);
            let bodies = |got: Vec<(String, String)>| -> Vec<String> {
                got.into_iter().map(|(body, _)| body).collect()
            };
            assert_eq!(bodies(got), bodies(got_local));
        }
        assert!(nodes[bucket].bodies(now_ms, name).is_empty());
        assert!(local.bodies(now_ms, name).is_empty());
        let [n0, n1, n2, _] = &mut nodes;
        drain(if bucket == 0 { n0 } else { n2 }, n1, now_ms);
    }
    assert_eq!(
        nodes[1].bodies(now_ms, &dlq),
        local.bodies(now_ms, &dlq),
        "the dead-letter queues hold the same messages"
    );
    assert_eq!(nodes[1].bodies(now_ms, &dlq).len(), 2 * usize::from(n));
    Redrive {
        nodes,
        local,
        a,
        b,
        dlq,
        now_ms,
    }
}

impl Redrive {
    /// Runs the protocol from bucket 1 (the dead-letter queue's) to the others.
    fn drain(&mut self, now_ms: u64) {
        let [n0, n1, n2, n3] = &mut self.nodes;
        drain_to(n1, &mut [n0, n2, n3], now_ms);
    }

    /// Hands bucket 1's first transfer over, once.
    fn hand_over(&mut self, now_ms: u64) -> (u64, TransferAnswer) {
        let [n0, n1, n2, n3] = &mut self.nodes;
        hand_over_to(n1, &mut [n0, n2, n3], now_ms)
    }

    /// Checks that `a` and `b` hold what the same redrive in one engine gave them, message for
    /// message (ids, bodies, times, receive counts, history, source, generation, groups), with
    /// the same counts.
    fn assert_like_local(&mut self, now_ms: u64) {
        for (bucket, name) in [(0, self.a.clone()), (2, self.b.clone())] {
            let node = &mut self.nodes[bucket];
            let messages = node.messages(now_ms, &name);
            assert!(!messages.is_empty(), "{name} holds the redriven messages");
            assert_eq!(messages, self.local.messages(now_ms, &name), "{name}");
            let counters = node.engine.queue_info(now_ms, &name).unwrap().counters;
            let local = self
                .local
                .engine
                .queue_info(now_ms, &name)
                .unwrap()
                .counters;
            assert_eq!(counters, local, "{name}");
        }
    }
}

/// A redrive out of a dead-letter queue in one bucket back to the queues the messages came
/// from, in two other buckets: every message lands in its source once, as the same redrive in
/// one engine lands it, and the task completes once the last transfer was taken.
#[test]
fn a_redrive_reaches_sources_in_two_other_buckets_as_a_local_one() {
    let mut r = redrive_setup(false, 3);
    let now_ms = r.now_ms + 1_000;
    // Without the caller's word that the sources are elsewhere, the engine sees none.
    let not_a_dlq = r.nodes[1]
        .run(|engine, journal| engine.start_move_task(now_ms, &r.dlq, None, None, None, journal));
    assert_eq!(not_a_dlq.unwrap_err(), Error::NotADeadLetterQueue);
    let task_id = r.nodes[1].start_redrive(now_ms, &r.dlq, None, true);
    let local_task = r.local.start_redrive(now_ms, &r.dlq, None, false);
    let progress = r.nodes[1].move_batch(now_ms, task_id, 200);
    let local = r.local.move_batch(now_ms, local_task, 200);
    assert_eq!(progress.moved, 6);
    assert_eq!(local.moved, 6);
    assert_eq!(local.status, MoveStatus::Completed);
    // Moved out of the source, counted, but not complete while the transfers are on their way.
    assert_eq!(progress.status, MoveStatus::Running);
    assert_eq!(r.nodes[1].engine.outbox_len(), 6);
    assert!(r.nodes[1].bodies(now_ms, &r.dlq).is_empty());
    assert_eq!(r.nodes[1].task(task_id).moved, 6);
    let transfer = r.nodes[1].engine.next_transfer().unwrap();
    assert!(matches!(transfer.kind, TransferKind::Move { task_id: t, .. } if t == task_id));
    assert_eq!(
        r.nodes[1].move_batch(now_ms, task_id, 200).status,
        MoveStatus::Running
    );
    r.drain(now_ms);
    let done = r.nodes[1].move_batch(now_ms + 1, task_id, 200);
    assert_eq!((done.moved, done.status), (0, MoveStatus::Completed));
    assert_eq!(
        r.nodes[1].task(task_id).moved,
        r.local.task(local_task).moved
    );
    r.assert_like_local(now_ms + 1);
    // Each side's log rebuilds the same state.
    for node in &mut r.nodes {
        node.crash(0);
    }
    r.assert_like_local(now_ms + 1);
    assert!(r.nodes[1].bodies(now_ms + 1, &r.dlq).is_empty());
    assert_eq!(r.nodes[1].task(task_id).status, MoveStatus::Completed);
}

/// A task with a destination of its own in another bucket: kept by name, checked against the
/// source's `RedriveAllowPolicy` here (the rest is the caller's to check there), and its
/// messages arrive as a local redrive to that queue gives them.
#[test]
fn a_redrive_to_a_destination_in_another_bucket() {
    let mut r = redrive_setup(false, 2);
    let elsewhere = name_in(3, "elsewhere", "");
    r.nodes[3].create(&elsewhere, &QueueConfigPatch::default());
    r.local.create(&elsewhere, &QueueConfigPatch::default());
    let now_ms = r.now_ms + 1_000;
    // A name of this bucket must exist here.
    let missing = name_in(1, "missing", "");
    let start = |node: &mut Node, destination: &str| {
        node.run(|engine, journal| {
            engine.start_move_task_with_remote_sources(
                now_ms,
                &r.dlq,
                Some(destination),
                None,
                None,
                journal,
            )
        })
    };
    assert!(matches!(
        start(&mut r.nodes[1], &missing),
        Err(Error::NotFound(_))
    ));
    // The dead-letter queue's allow policy is checked here, by name.
    let deny = QueueConfigPatch {
        redrive_allow_policy: Some(Some(RedriveAllowPolicy::ByQueue(vec![r.a.clone()]))),
        ..QueueConfigPatch::default()
    };
    let set = |node: &mut Node, patch: &QueueConfigPatch| {
        node.run(|engine, journal| {
            engine
                .set_queue_config(now_ms, &r.dlq, patch, journal)
                .unwrap()
        })
    };
    set(&mut r.nodes[1], &deny);
    assert!(matches!(
        start(&mut r.nodes[1], &elsewhere),
        Err(Error::InvalidTarget { .. })
    ));
    let allow = QueueConfigPatch {
        redrive_allow_policy: Some(None),
        ..QueueConfigPatch::default()
    };
    set(&mut r.nodes[1], &allow);
    let info = start(&mut r.nodes[1], &elsewhere).unwrap();
    assert_eq!(info.task.remote_destination.as_deref(), Some(&*elsewhere));
    assert_eq!(info.task.destination_queue_id, None);
    assert!(info.task.has_destination());
    assert_eq!(info.destination.as_deref(), Some(&*elsewhere));
    // Kept through a snapshot (and the codec).
    r.nodes[1].checkpoint();
    let task_id = info.task.task_id;
    assert_eq!(
        r.nodes[1].task(task_id).remote_destination.as_deref(),
        Some(&*elsewhere)
    );
    let local_task = r
        .local
        .start_redrive(now_ms, &r.dlq, Some(&elsewhere), false);
    assert_eq!(r.nodes[1].move_batch(now_ms, task_id, 50).moved, 4);
    r.local.move_batch(now_ms, local_task, 50);
    r.drain(now_ms);
    let done = r.nodes[1].move_batch(now_ms, task_id, 50);
    assert_eq!(done.status, MoveStatus::Completed);
    let messages = r.nodes[3].messages(now_ms, &elsewhere);
    assert_eq!(messages.len(), 4);
    assert_eq!(messages, r.local.messages(now_ms, &elsewhere));
    assert!(r.nodes[0].bodies(now_ms, &r.a).is_empty());
}

/// Every way a hand-over of a move can be cut short, as for dead letters, and the source losing
/// its `TransferOut`s (the messages are then still in the dead-letter queue, not counted as
/// moved, and the next batch moves them): each message arrives once, as a local redrive makes
/// it.
#[test]
fn a_move_transfer_is_taken_exactly_once_whatever_crashes() {
    for (target_loses, source_loses) in [(true, false), (false, true), (false, false), (true, true)]
    {
        let mut r = redrive_setup(false, 2);
        let now_ms = r.now_ms + 1_000;
        let task_id = r.nodes[1].start_redrive(now_ms, &r.dlq, None, true);
        let local_task = r.local.start_redrive(now_ms, &r.dlq, None, false);
        r.nodes[1].move_batch(now_ms, task_id, 200);
        // The source loses its batch: nothing left, nothing counted.
        r.nodes[1].crash(4);
        assert_eq!(r.nodes[1].engine.outbox_len(), 0);
        assert_eq!(r.nodes[1].bodies(now_ms, &r.dlq).len(), 4);
        assert_eq!(r.nodes[1].task(task_id).moved, 0);
        assert_eq!(r.nodes[1].move_batch(now_ms, task_id, 200).moved, 4);
        r.local.move_batch(now_ms, local_task, 200);
        let target_bucket = bucket_of(
            &r.nodes[1].engine.next_transfer().unwrap().destination,
            BUCKETS,
        );
        let (transfer_id, answer) = r.hand_over(now_ms);
        assert_eq!(answer, TransferAnswer::Taken);
        if target_loses {
            r.nodes[target_bucket as usize].crash(1);
        }
        assert!(r.nodes[1].run(|engine, journal| {
            engine.finish_transfer(now_ms, transfer_id, answer, journal)
        }));
        if source_loses {
            r.nodes[1].crash(1);
        }
        if target_loses && !source_loses {
            // Not a state the protocol allows (see the dead-letter twin of this test).
            continue;
        }
        r.drain(now_ms);
        assert_eq!(
            r.nodes[1].move_batch(now_ms, task_id, 200).status,
            MoveStatus::Completed
        );
        assert_eq!(r.nodes[1].task(task_id).moved, 4);
        r.assert_like_local(now_ms);
    }
}

/// A destination that is gone when the messages arrive refuses them: each comes back to the
/// dead-letter queue as it was, no longer counts as moved, and the task fails with a reason that
/// names the destination, also through a crash that loses the refusal's answer and through a
/// snapshot. The refusal does not mark the destination as missing: created again, it takes a
/// new task's messages, and a dead letter for it, at once.
#[test]
fn a_refused_move_fails_its_task_and_the_message_comes_back() {
    let mut r = redrive_setup(false, 2);
    let elsewhere = name_in(3, "elsewhere", "");
    r.nodes[3].create(&elsewhere, &QueueConfigPatch::default());
    let now_ms = r.now_ms + 1_000;
    let before = r.nodes[1].messages(now_ms, &r.dlq);
    let counters = r.nodes[1]
        .engine
        .queue_info(now_ms, &r.dlq)
        .unwrap()
        .counters;
    let task_id = r.nodes[1].start_redrive(now_ms, &r.dlq, Some(&elsewhere), true);
    assert_eq!(r.nodes[1].move_batch(now_ms, task_id, 50).moved, 4);
    let (first, answer) = r.hand_over(now_ms);
    assert_eq!(answer, TransferAnswer::Taken);
    r.nodes[1].run(|engine, journal| engine.finish_transfer(now_ms, first, answer, journal));
    r.nodes[3].run(|engine, journal| engine.delete_queue(now_ms, &elsewhere, journal).unwrap());
    let (second, answer) = r.hand_over(now_ms + 1);
    assert_eq!(answer, TransferAnswer::Refused);
    r.nodes[1].run(|engine, journal| engine.finish_transfer(now_ms + 1, second, answer, journal));
    let failed = |node: &Node| {
        let task = node.task(task_id);
        (task.status, task.moved, task.failure_reason)
    };
    let expected = (MoveStatus::Failed, 3, Some(destination_deleted(&elsewhere)));
    assert_eq!(failed(&r.nodes[1]), expected);
    // The answer lost in a crash: the task runs again until the answer, repeated from memory,
    // is recorded again.
    r.nodes[1].crash(1);
    assert_eq!(r.nodes[1].task(task_id).status, MoveStatus::Running);
    assert_eq!(r.nodes[1].engine.outbox_len(), 3);
    let logged = r.nodes[3].log.len();
    assert_eq!(r.hand_over(now_ms + 2), (second, TransferAnswer::Refused));
    assert_eq!(r.nodes[3].log.len(), logged);
    r.nodes[1].run(|engine, journal| {
        engine.finish_transfer(now_ms + 2, second, TransferAnswer::Refused, journal)
    });
    assert_eq!(failed(&r.nodes[1]), expected);
    // The rest comes back too; the task stays failed with its first reason.
    r.drain(now_ms + 3);
    assert_eq!(r.nodes[1].task(task_id).moved, 1);
    assert_eq!(r.nodes[1].task(task_id).status, MoveStatus::Failed);
    // Each message but the one taken is back as it was (only its visibility is new), and the
    // dead-letter queue's counts did not change.
    let mut back = r.nodes[1].messages(now_ms + 3, &r.dlq);
    assert_eq!(back.len(), 3);
    for (message, was) in back.iter_mut().zip(&before[1..]) {
        message.visible_at_ms = was.visible_at_ms;
    }
    assert_eq!(back, before[1..]);
    let after = r.nodes[1]
        .engine
        .queue_info(now_ms + 3, &r.dlq)
        .unwrap()
        .counters;
    assert_eq!(after, counters);
    // Derived from the records alone: replay and a snapshot agree.
    let state = |node: &mut Node| (failed(node), node.messages(now_ms + 3, &r.dlq));
    let live = state(&mut r.nodes[1]);
    r.nodes[1].crash(0);
    assert_eq!(state(&mut r.nodes[1]), live);
    r.nodes[1].checkpoint();
    assert_eq!(state(&mut r.nodes[1]), live);
    // Created again within `REFUSED_FOR_MS`: a new task's messages go there at once.
    let later = now_ms + 10;
    assert!(later < now_ms + REFUSED_FOR_MS);
    r.nodes[3].create(&elsewhere, &QueueConfigPatch::default());
    let again = r.nodes[1].start_redrive(later, &r.dlq, Some(&elsewhere), true);
    assert_eq!(r.nodes[1].move_batch(later, again, 80).moved, 3);
    r.drain(later);
    assert_eq!(
        r.nodes[1].move_batch(later, again, 80).status,
        MoveStatus::Completed
    );
    assert_eq!(r.nodes[3].bodies(later, &elsewhere).len(), 3);
    // And a dead letter for it is not held back as if it were missing.
    let jobs = name_in(1, "jobs", "");
    r.nodes[1].create(&jobs, &with_dead_letter_queue(&elsewhere, 1));
    r.nodes[1].send(later, &jobs, SendInput::body("spent"), 90);
    assert_eq!(r.nodes[1].receive(later, &jobs).len(), 1);
    assert!(r.nodes[1].receive(later + 2_000, &jobs).is_empty());
    assert_eq!(r.nodes[1].engine.outbox_len(), 1);
}

/// A redrive back to a source queue that was deleted meanwhile: its messages come back and the
/// task fails, saying so; what reached the other source stays there.
#[test]
fn a_redrive_to_a_deleted_source_fails_its_task() {
    let mut r = redrive_setup(false, 2);
    let now_ms = r.now_ms + 1_000;
    let b = r.b.clone();
    r.nodes[2].run(|engine, journal| engine.delete_queue(now_ms, &b, journal).unwrap());
    let task_id = r.nodes[1].start_redrive(now_ms, &r.dlq, None, true);
    r.nodes[1].move_batch(now_ms, task_id, 50);
    r.drain(now_ms);
    let task = r.nodes[1].task(task_id);
    assert_eq!((task.status, task.moved), (MoveStatus::Failed, 2));
    let reason = task.failure_reason.unwrap();
    assert!(
        reason.starts_with(&format!("The original source queue {b} ")),
        "{reason}"
    );
    assert_eq!(r.nodes[0].bodies(now_ms, &r.a).len(), 2);
    let back = r.nodes[1].messages(now_ms, &r.dlq);
    assert_eq!(back.len(), 2);
    assert!(back
        .iter()
        .all(|m| m.dead_letter_source.as_deref() == Some(&*b) && m.receive_count == 1));
}

/// Snapshots in the middle of a redrive: the outbox keeps its transfers' kind and the task its
/// count, so what arrives after them is still a redrive, once.
#[test]
fn snapshots_in_the_middle_of_a_redrive() {
    let mut r = redrive_setup(false, 3);
    let now_ms = r.now_ms + 1_000;
    let task_id = r.nodes[1].start_redrive(now_ms, &r.dlq, None, true);
    let local_task = r.local.start_redrive(now_ms, &r.dlq, None, false);
    // Two batches of the same ids on both sides (a batch takes at most 20 messages).
    r.nodes[1].move_batch(now_ms, task_id, 200);
    r.local.move_batch(now_ms, local_task, 200);
    // Two transfers finished, a third taken but not finished, when every node checkpoints.
    for _ in 0..2 {
        let (transfer_id, answer) = r.hand_over(now_ms);
        r.nodes[1]
            .run(|engine, journal| engine.finish_transfer(now_ms, transfer_id, answer, journal));
    }
    let (third, answer) = r.hand_over(now_ms);
    for node in &mut r.nodes {
        node.checkpoint();
    }
    assert_eq!(r.nodes[1].engine.outbox_len(), 4);
    assert_eq!(r.nodes[1].task(task_id).moved, 6);
    let transfer = r.nodes[1].engine.next_transfer().unwrap();
    assert_eq!(transfer.transfer_id, third);
    assert!(matches!(transfer.kind, TransferKind::Move { .. }));
    // Handed over again after the snapshot: answered from memory.
    assert_eq!(r.hand_over(now_ms), (third, answer));
    r.drain(now_ms);
    for node in &mut r.nodes {
        node.checkpoint();
    }
    assert_eq!(
        r.nodes[1].move_batch(now_ms, task_id, 200).status,
        MoveStatus::Completed
    );
    r.assert_like_local(now_ms);
}

/// FIFO queues: a redrive across buckets keeps each group's order, and the messages arrive
/// with their new ids as deduplication ids, as in one engine.
#[test]
fn a_fifo_redrive_across_buckets_keeps_group_order() {
    let mut r = redrive_setup(true, 6);
    let now_ms = r.now_ms + 1_000;
    let task_id = r.nodes[1].start_redrive(now_ms, &r.dlq, None, true);
    let local_task = r.local.start_redrive(now_ms, &r.dlq, None, false);
    r.nodes[1].move_batch(now_ms, task_id, 200);
    r.local.move_batch(now_ms, local_task, 200);
    r.drain(now_ms);
    r.assert_like_local(now_ms);
    let a = r.a.clone();
    let messages = r.nodes[0].messages(now_ms, &a);
    let order = |group: &str| -> Vec<String> {
        messages
            .iter()
            .filter(|m| &*m.fifo.as_ref().unwrap().group_id == group)
            .map(|m| body(&m.payload))
            .collect()
    };
    assert_eq!(order("g0"), [0, 2, 4].map(|i| format!("{a}/m{i}")));
    assert_eq!(order("g1"), [1, 3, 5].map(|i| format!("{a}/m{i}")));
    for m in &messages {
        assert_eq!(m.redrive_generation, 1);
        assert_eq!(
            &*m.fifo.as_ref().unwrap().deduplication_id,
            m.id.to_string()
        );
    }
    // Delivered group by group, in order.
    let mut delivered = Vec::new();
    let mut at = now_ms;
    while delivered.len() < 6 {
        let got = r.nodes[0].receive(at, &a);
        assert!(!got.is_empty());
        for (body, receipt) in got {
            delivered.push(body);
            r.nodes[0].run(|engine, journal| engine.delete(at, &a, &receipt, journal).unwrap());
        }
        at += 10;
    }
    let g0: Vec<&String> = delivered
        .iter()
        .filter(|b| order("g0").contains(b))
        .collect();
    assert_eq!(g0, order("g0").iter().collect::<Vec<_>>());
}

/// A task whose destination lives in another bucket fails when that queue is deleted there
/// (the deleting side says so with `remote_destination_deleted`), as a task whose destination is
/// deleted in its own engine does, paused or running, through a snapshot and a replay; a task
/// into another queue goes on.
#[test]
fn a_task_fails_when_its_destination_in_another_bucket_is_deleted() {
    let mut r = redrive_setup(false, 2);
    let (doomed, other) = (name_in(3, "doomed", ""), name_in(2, "other", ""));
    let now_ms = r.now_ms + 1_000;
    let start = |node: &mut Node, destination: &str| {
        node.run(|engine, journal| {
            engine.start_move_task_with_remote_sources(
                now_ms,
                &r.dlq,
                Some(destination),
                Some(1),
                None,
                journal,
            )
        })
        .unwrap()
        .task
        .task_id
    };
    let task_id = start(&mut r.nodes[1], &doomed);
    // Another name: nothing fails, nothing is journaled.
    let logged = r.nodes[1].log.len();
    let failed = r.nodes[1]
        .run(|engine, journal| engine.remote_destination_deleted(now_ms, &other, journal));
    assert_eq!((failed, r.nodes[1].log.len()), (0, logged));
    r.nodes[1].run(|engine, journal| {
        engine
            .change_move_task(now_ms, task_id, leaseq_core::MoveTaskChange::Pause, journal)
            .unwrap()
    });
    let failed = r.nodes[1]
        .run(|engine, journal| engine.remote_destination_deleted(now_ms, &doomed, journal));
    assert_eq!(failed, 1);
    let task = r.nodes[1].task(task_id);
    assert_eq!(task.status, MoveStatus::Failed);
    assert_eq!(
        task.failure_reason.as_deref(),
        Some(leaseq_core::engine::destination_deleted(&doomed).as_str())
    );
    r.nodes[1].crash(0);
    assert_eq!(r.nodes[1].task(task_id).status, MoveStatus::Failed);
    r.nodes[1].checkpoint();
    assert_eq!(r.nodes[1].task(task_id).status, MoveStatus::Failed);
    // Failed tasks are not active: a new one may start, into another queue, and is not failed
    // by the old name.
    let next = start(&mut r.nodes[1], &other);
    let failed = r.nodes[1]
        .run(|engine, journal| engine.remote_destination_deleted(now_ms, &doomed, journal));
    assert_eq!(failed, 0);
    assert_eq!(r.nodes[1].task(next).status, MoveStatus::Running);
}
