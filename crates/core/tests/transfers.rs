//! Transfers between buckets (see `leaseq_core::transfer`): a dead-letter move whose
//! dead-letter queue lives in another bucket's engine reaches it exactly once, through crashes
//! of either side at every step, snapshots in between, and a destination that does not exist.
//!
//! Each engine here has a log (every record it journaled, through the byte codec); a crash
//! rebuilds it from a prefix of that log, as recovery does.

use std::collections::BTreeMap;
use std::sync::Arc;

use leaseq_core::transfer::{bucket_of_queue_id, REFUSED_FOR_MS};
use leaseq_core::{
    bucket_of, codec, Engine, EngineConfig, Journal, MessageId, Payload, PayloadRef, Placement,
    QueueConfigPatch, ReceiptKey, ReceiveRequest, Record, RedrivePolicy, SendInput, TransferAnswer,
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
        ..EngineConfig::default()
    }
}

fn body(payload: &PayloadRef) -> String {
    match payload {
        PayloadRef::Inline(payload) => payload.body.clone(),
        PayloadRef::Stored(_) => panic!("no log stores payloads here"),
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
        PayloadRef::Stored(_) => panic!("no log stores payloads here"),
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
