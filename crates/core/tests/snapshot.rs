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
    };
    let first = engine
        .receive(2_000, "jobs", request, &mut journal)
        .unwrap();
    // Leases run out; the next receive moves the first batch to the dead-letter queue.
    engine
        .receive(8_000, "jobs", request, &mut journal)
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
    let outcome = rebuilt
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
    };
    for _ in 0..50 {
        for delivery in engine.receive(2, "q", request, &mut journal).unwrap() {
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
