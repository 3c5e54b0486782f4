//! FIFO queues: the worker handles the messages of each group in send order and never two of a
//! group at once, while groups run in parallel.

use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_sdk_sqs::types::{MessageSystemAttributeName, QueueAttributeName};
use leaseq_worker::{LeaseContext, Message, Outcome, Worker};

use crate::common::{create_queue, start_server, wait_for, worker_config};

const GROUPS: usize = 3;
const PER_GROUP: usize = 8;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_group_is_handled_in_order_and_one_at_a_time() {
    let server = start_server().await;
    let queue = create_queue(
        &server.client,
        "jobs.fifo",
        &[
            (QueueAttributeName::FifoQueue, "true"),
            (QueueAttributeName::ContentBasedDeduplication, "true"),
        ],
    )
    .await;
    for index in 0..PER_GROUP {
        for group in 0..GROUPS {
            server
                .client
                .send_message()
                .queue_url(&queue)
                .message_group_id(format!("g{group}"))
                .message_body(format!("g{group}-{index}"))
                .send()
                .await
                .unwrap();
        }
    }
    let mut config = worker_config(&queue);
    config.concurrency = 6;
    // Leases longer than the test, so none is extended or lost: a lease lost to a slow machine
    // would redeliver a message, which this test would count as a group handled out of order.
    config.lease.visibility_timeout = Duration::from_secs(30);
    let handled: Arc<Mutex<BTreeMap<String, Vec<usize>>>> = Arc::default();
    let active: Arc<Mutex<HashSet<String>>> = Arc::default();
    let overlaps: Arc<Mutex<Vec<String>>> = Arc::default();
    let handler = {
        let (handled, active, overlaps) = (handled.clone(), active.clone(), overlaps.clone());
        move |message: Message, _lease: LeaseContext| {
            let (handled, active, overlaps) = (handled.clone(), active.clone(), overlaps.clone());
            async move {
                let group = message
                    .system_attribute(MessageSystemAttributeName::MessageGroupId)
                    .expect("a FIFO message has its group")
                    .to_string();
                let (_, index) = message.body().split_once('-').expect("g<group>-<index>");
                let index: usize = index.parse().unwrap();
                if !active.lock().unwrap().insert(group.clone()) {
                    overlaps.lock().unwrap().push(message.body().to_string());
                }
                tokio::time::sleep(Duration::from_millis(30)).await;
                active.lock().unwrap().remove(&group);
                handled
                    .lock()
                    .unwrap()
                    .entry(group)
                    .or_default()
                    .push(index);
                Outcome::Ack
            }
        }
    };
    let worker = Worker::new(server.client.clone(), config)
        .unwrap()
        .start(handler);
    wait_for("every message handled", || {
        let handled = handled.clone();
        async move {
            handled
                .lock()
                .unwrap()
                .values()
                .map(Vec::len)
                .sum::<usize>()
                == GROUPS * PER_GROUP
        }
    })
    .await;
    worker.shutdown().await;
    assert!(
        overlaps.lock().unwrap().is_empty(),
        "{:?}",
        overlaps.lock().unwrap()
    );
    let expected: Vec<usize> = (0..PER_GROUP).collect();
    for (group, indexes) in handled.lock().unwrap().iter() {
        assert_eq!(indexes, &expected, "order of group {group}");
    }
}
