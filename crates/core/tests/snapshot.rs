//! A snapshot rebuilds the engine exactly: queues, settings, counters, every message with its
//! lease, receive count and dead-letter origin, and receipts issued before it stay valid.

use leaseq_core::{
    codec, Engine, EngineConfig, Journal, MessageId, QueueConfigPatch, ReceiptKey, ReceiveRequest,
    RedrivePolicy, SendInput,
};

fn engine() -> Engine {
    Engine::new(EngineConfig::default(), ReceiptKey::new([5; 16]))
}

fn rebuild(engine: &Engine) -> Engine {
    let mut records = Vec::new();
    engine.snapshot(|record| {
        // Through the byte encoding, as the server stores it.
        let mut bytes = Vec::new();
        codec::encode(&record, &mut bytes);
        records.push(codec::decode(&bytes).expect("a snapshot record decodes"));
    });
    let mut rebuilt = self::engine();
    for record in &records {
        rebuilt.apply(record);
    }
    rebuilt.check_invariants();
    rebuilt
}

fn describe(engine: &mut Engine, now_ms: u64) -> String {
    let mut out = String::new();
    for name in engine.list_queues("") {
        let info = engine.queue_info(now_ms, &name).unwrap();
        out += &format!(
            "{name} ready={} in_flight={} delayed={} config={:?} tags={:?} counters={:?}\n",
            info.ready, info.in_flight, info.delayed, info.config, info.tags, info.counters
        );
        for (seq, message) in engine.queue(&name).unwrap().messages() {
            out += &format!("  {seq} {message:?}\n");
        }
    }
    out
}

#[test]
fn a_snapshot_rebuilds_the_engine() {
    let mut engine = engine();
    let mut journal = Journal::new();
    let none = QueueConfigPatch::default();
    engine
        .create_queue(0, "dlq", &none, Default::default(), &mut journal)
        .unwrap();
    let with_dlq = QueueConfigPatch {
        redrive_policy: Some(Some(RedrivePolicy {
            dead_letter_queue: "dlq".into(),
            max_receive_count: 1,
        })),
        ..QueueConfigPatch::default()
    };
    engine
        .create_queue(
            0,
            "jobs",
            &with_dlq,
            [("team".into(), "a".into())].into(),
            &mut journal,
        )
        .unwrap();
    engine
        .create_queue(0, "gone", &none, Default::default(), &mut journal)
        .unwrap();
    engine.delete_queue(1, "gone", &mut journal).unwrap();
    for i in 0..20u8 {
        let mut input = SendInput::body(format!("job-{i}"));
        input.delay_seconds = Some(u32::from(i % 3) * 10);
        let id = MessageId::from_random([i; 16]);
        engine.send(1_000, "jobs", input, id, &mut journal).unwrap();
    }
    let request = ReceiveRequest {
        max_messages: 5,
        visibility_timeout_seconds: Some(5),
        client: None,
    };
    let first = engine
        .receive(2_000, "jobs", request.clone(), &mut journal)
        .unwrap();
    // Leases run out; the next receive moves the first batch to the dead-letter queue.
    engine
        .receive(8_000, "jobs", request.clone(), &mut journal)
        .unwrap();
    let held = engine
        .receive(12_000, "jobs", request, &mut journal)
        .unwrap();
    assert!(!first.is_empty() && !held.is_empty());

    let mut rebuilt = rebuild(&engine);
    assert_eq!(
        describe(&mut rebuilt, 12_000),
        describe(&mut engine, 12_000)
    );
    // Queue ids are never reused, even after the deleted queue's id.
    rebuilt
        .create_queue(12_500, "new", &none, Default::default(), &mut journal)
        .unwrap();
    assert_eq!(rebuilt.queue("new").unwrap().id, 4);
    // A receipt issued before the snapshot still acts after it.
    let (outcome, _) = rebuilt
        .delete(12_600, "jobs", &held[0].receipt, &mut journal)
        .unwrap();
    assert_eq!(outcome, leaseq_core::DeleteOutcome::Deleted);
}

#[test]
fn a_frozen_engine_keeps_the_moment_it_was_taken() {
    let mut engine = engine();
    let mut journal = Journal::new();
    let none = QueueConfigPatch::default();
    engine
        .create_queue(0, "q", &none, Default::default(), &mut journal)
        .unwrap();
    for i in 0..2_000u32 {
        let id = MessageId::from_random([(i % 251) as u8; 16]);
        let input = SendInput::body(format!("m{i}"));
        engine.send(1, "q", input, id, &mut journal).unwrap();
    }
    let before = describe(&mut engine, 1);
    let frozen = engine.freeze();
    assert_eq!(frozen.message_count(), 2_000);

    // Traffic goes on: leases, deletes, new messages, a new queue.
    let request = ReceiveRequest {
        max_messages: 10,
        visibility_timeout_seconds: Some(30),
        client: None,
    };
    for _ in 0..50 {
        for delivery in engine
            .receive(2, "q", request.clone(), &mut journal)
            .unwrap()
        {
            engine
                .delete(3, "q", &delivery.receipt, &mut journal)
                .unwrap();
        }
    }
    engine.receive(4, "q", request, &mut journal).unwrap();
    let id = MessageId::from_random([7; 16]);
    engine
        .send(5, "q", SendInput::body("late"), id, &mut journal)
        .unwrap();
    engine
        .create_queue(6, "later", &none, Default::default(), &mut journal)
        .unwrap();

    let mut rebuilt = self::engine();
    frozen.records(|record| rebuilt.apply(&record));
    rebuilt.check_invariants();
    assert_eq!(describe(&mut rebuilt, 1), before);
    assert_ne!(describe(&mut engine, 6), before);
}

/// A FIFO queue's state comes back from a snapshot: settings, groups (a held group stays
/// blocked), the deduplication window (also for a deleted message), remembered receive attempts
/// (a retry returns the same receipts), and sequence numbers go on from where they were.
#[test]
fn a_snapshot_rebuilds_fifo_state() {
    let mut engine = engine();
    let mut journal = Journal::new();
    let fifo = QueueConfigPatch {
        fifo_queue: Some(true),
        content_based_deduplication: Some(true),
        deduplication_scope: Some(leaseq_core::DeduplicationScope::MessageGroup),
        ..QueueConfigPatch::default()
    };
    engine
        .create_queue(0, "q.fifo", &fifo, Default::default(), &mut journal)
        .unwrap();
    let mut send = |engine: &mut Engine, body: &str, group: &str, id: u8| {
        let input = SendInput::body(body).in_group(group);
        let id = MessageId::from_random([id; 16]);
        engine
            .send(1_000, "q.fifo", input, id, &mut journal)
            .unwrap()
    };
    let a0 = send(&mut engine, "a0", "a", 1);
    send(&mut engine, "a1", "a", 2);
    let b0 = send(&mut engine, "b0", "b", 3);
    let request = ReceiveRequest {
        max_messages: 1,
        visibility_timeout_seconds: Some(60),
        client: None,
    };
    let mut journal = Journal::new();
    // b's only message is received and deleted: its id stays in the window.
    let b = engine
        .receive(2_000, "q.fifo", request.clone(), &mut journal)
        .unwrap();
    assert_eq!(b[0].message_id, a0.message_id, "oldest head first");
    let held = engine
        .receive_with_attempt(
            2_000,
            "q.fifo",
            request.clone(),
            Some("try-1"),
            &mut journal,
        )
        .unwrap();
    assert_eq!(held[0].message_id, b0.message_id);
    engine
        .delete(2_500, "q.fifo", &held[0].receipt, &mut journal)
        .unwrap();
    let retry_before = engine
        .receive_with_attempt(
            2_600,
            "q.fifo",
            request.clone(),
            Some("try-2"),
            &mut journal,
        )
        .unwrap();
    assert!(retry_before.is_empty(), "a is held, b is empty");
    let input = SendInput::body("d0").in_group("d");
    engine
        .send(
            2_700,
            "q.fifo",
            input,
            MessageId::from_random([4; 16]),
            &mut journal,
        )
        .unwrap();
    let d = engine
        .receive_with_attempt(
            2_800,
            "q.fifo",
            request.clone(),
            Some("try-3"),
            &mut journal,
        )
        .unwrap();
    assert_eq!(d[0].payload.inline().unwrap().body, "d0");

    let mut rebuilt = rebuild(&engine);
    // The remembered attempt answers a retry with the same receipt.
    let retried = rebuilt
        .receive_with_attempt(
            2_900,
            "q.fifo",
            request.clone(),
            Some("try-3"),
            &mut journal,
        )
        .unwrap();
    assert_eq!(retried.len(), 1);
    assert_eq!(retried[0].receipt, d[0].receipt);
    // The retry restarted the lease (SQS: a retry "resets the visibility timeout"); the same
    // retry on the original engine does the same.
    assert_eq!(retried[0].visible_at_ms, 2_900 + 60_000);
    let retried_live = engine
        .receive_with_attempt(
            2_900,
            "q.fifo",
            request.clone(),
            Some("try-3"),
            &mut journal,
        )
        .unwrap();
    assert_eq!(retried_live[0].receipt, d[0].receipt);
    assert_eq!(describe(&mut rebuilt, 3_000), describe(&mut engine, 3_000));
    let info = rebuilt.queue_info(3_000, "q.fifo").unwrap();
    assert_eq!(
        info.config.fifo,
        engine.queue("q.fifo").unwrap().config.fifo
    );
    // The window outlived the delete and the snapshot: same body, same group → duplicate.
    let input = SendInput::body("b0").in_group("b");
    let again = rebuilt
        .send(
            3_000,
            "q.fifo",
            input,
            MessageId::from_random([9; 16]),
            &mut journal,
        )
        .unwrap();
    assert!(again.duplicate);
    assert_eq!(again.message_id, b0.message_id);
    // a is still held.
    let nothing = rebuilt
        .receive(3_000, "q.fifo", request.clone(), &mut journal)
        .unwrap();
    assert!(nothing.is_empty());
    // Sequence numbers go on increasing.
    let input = SendInput::body("c0").in_group("c");
    let c0 = rebuilt
        .send(
            3_000,
            "q.fifo",
            input,
            MessageId::from_random([10; 16]),
            &mut journal,
        )
        .unwrap();
    let number = |sent: &leaseq_core::Sent| -> u128 {
        sent.sequence_number.as_deref().unwrap().parse().unwrap()
    };
    assert!(number(&c0) > number(&b0));
    // The held receipt from before the snapshot still deletes; then a's next message comes.
    rebuilt
        .delete(3_100, "q.fifo", &b[0].receipt, &mut journal)
        .unwrap();
    let next = rebuilt
        .receive(3_100, "q.fifo", request, &mut journal)
        .unwrap();
    assert_eq!(next[0].payload.inline().unwrap().body, "a1");
}
