//! Lease keeping: extension keeps a slow handler's message from anyone else; the total cap and
//! the progress window end a stuck handler's lease; a killed worker's lease simply runs out.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use leaseq_worker::{LeaseContext, LeaseLoss, Message, Outcome, Worker};
use tokio::time::Instant;

use crate::common::{
    self, counts, create_queue, receive_count, send, start_server, wait_for, worker_config,
};

/// What handlers observed, shared with the test.
type Log<T> = Arc<Mutex<Vec<T>>>;

/// Counts runs of a handler and the most that ran at once.
#[derive(Default)]
struct Runs {
    started: AtomicUsize,
    active: AtomicUsize,
    active_max: AtomicUsize,
}

impl Runs {
    fn enter(&self) {
        self.started.fetch_add(1, Ordering::SeqCst);
        let active = self.active.fetch_add(1, Ordering::SeqCst) + 1;
        self.active_max.fetch_max(active, Ordering::SeqCst);
    }

    fn leave(&self) {
        self.active.fetch_sub(1, Ordering::SeqCst);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_slower_than_the_lease_runs_once_because_its_lease_is_extended() {
    let server = start_server().await;
    let queue = create_queue(&server.client, "slow", &[]).await;
    send(&server.client, &queue, "slow job").await;
    let runs = Arc::new(Runs::default());
    let handler = {
        let runs = runs.clone();
        move |_message: Message, lease: LeaseContext| {
            let runs = runs.clone();
            async move {
                runs.enter();
                // Twice the 2 s lease: without extensions the message would be redelivered to
                // the competing worker mid-way.
                tokio::time::sleep(Duration::from_secs(4)).await;
                runs.leave();
                assert!(!lease.is_lost(), "lease lost: {:?}", lease.loss());
                Outcome::Ack
            }
        }
    };
    // Two workers compete for the queue, so a lapsed lease would show as a second run.
    let first = Worker::new(server.client.clone(), worker_config(&queue))
        .unwrap()
        .start(handler.clone());
    let second = Worker::new(server.client.clone(), worker_config(&queue))
        .unwrap()
        .start(handler);
    wait_for("the slow message to be acknowledged", || async {
        first.metrics().acks + second.metrics().acks == 1
    })
    .await;
    let (first, second) = (first.shutdown().await, second.shutdown().await);
    assert_eq!(runs.started.load(Ordering::SeqCst), 1);
    assert_eq!(runs.active_max.load(Ordering::SeqCst), 1);
    assert!(
        first.metrics.extensions + second.metrics.extensions >= 2,
        "{first:?} {second:?}"
    );
    assert_eq!(first.metrics.lease_losses + second.metrics.lease_losses, 0);
    assert_eq!(counts(&server.client, &queue).await, (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_handler_loses_its_lease_at_the_cap_and_the_message_is_redelivered() {
    let server = start_server().await;
    let queue = create_queue(&server.client, "stuck", &[]).await;
    send(&server.client, &queue, "stuck job").await;
    let mut config = worker_config(&queue);
    config.lease.lease_total_max = Duration::from_secs(3);
    config.shutdown_deadline = Duration::from_millis(100);
    let started_at = Instant::now();
    let seen: Log<(u32, Option<LeaseLoss>, Duration)> = Arc::default();
    let handler = {
        let seen = seen.clone();
        move |_message: Message, lease: LeaseContext| {
            let seen = seen.clone();
            async move {
                if lease.attempt() > 1 {
                    seen.lock()
                        .unwrap()
                        .push((lease.attempt(), None, started_at.elapsed()));
                    return Outcome::Ack;
                }
                let began_at = Instant::now();
                lease.lost().await;
                let loss = lease.loss().cloned();
                seen.lock().unwrap().push((1, loss, began_at.elapsed()));
                // Stuck for good: it ignores the cancellation, as a deadlocked handler would.
                std::future::pending::<Outcome>().await
            }
        }
    };
    let worker = Worker::new(server.client.clone(), config)
        .unwrap()
        .start(handler);
    wait_for("the redelivered message to be acknowledged", || async {
        worker.metrics().acks == 1
    })
    .await;
    let report = worker.shutdown().await;
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:?}");
    let (attempt, loss, lost_after) = &seen[0];
    assert_eq!(
        (*attempt, loss.clone()),
        (1, Some(LeaseLoss::TotalLeaseCapReached))
    );
    // The cap is 3 s from the receive, and the last extension stops there; the context is
    // cancelled 0.5 s before the lease ends, so at most 2.5 s after the handler began (the
    // receive came first), and not before the first lease would have ended without extension.
    assert!(
        *lost_after >= Duration::from_millis(1500) && *lost_after < Duration::from_secs(3),
        "{lost_after:?}"
    );
    assert!(report.metrics.extensions >= 1, "{report:?}");
    let (attempt, _, redelivered_after) = &seen[1];
    assert_eq!(*attempt, 2);
    assert!(
        *redelivered_after >= Duration::from_millis(2500),
        "{redelivered_after:?}"
    );
    assert_eq!(report.metrics.lease_losses, 1);
    assert_eq!(counts(&server.client, &queue).await, (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_handler_that_reports_progress_keeps_its_lease() {
    let server = start_server().await;
    let queue = create_queue(&server.client, "progress", &[]).await;
    send(&server.client, &queue, "progressing").await;
    send(&server.client, &queue, "silent").await;
    let mut config = worker_config(&queue);
    config.lease.progress_window = Some(Duration::from_millis(700));
    let losses: Log<(String, Option<LeaseLoss>)> = Arc::default();
    let handler = {
        let losses = losses.clone();
        move |message: Message, lease: LeaseContext| {
            let losses = losses.clone();
            async move {
                let body = message.body().to_string();
                if lease.attempt() > 1 {
                    return Outcome::Ack;
                }
                for _ in 0..16 {
                    if body == "progressing" {
                        lease.report_progress();
                    }
                    tokio::select! {
                        () = tokio::time::sleep(Duration::from_millis(250)) => {}
                        () = lease.lost() => {
                            losses.lock().unwrap().push((body, lease.loss().cloned()));
                            return Outcome::retry();
                        }
                    }
                }
                Outcome::Ack
            }
        }
    };
    let worker = Worker::new(server.client.clone(), config)
        .unwrap()
        .start(handler);
    wait_for("both messages to be acknowledged", || async {
        worker.metrics().acks == 2
    })
    .await;
    let report = worker.shutdown().await;
    let losses = losses.lock().unwrap().clone();
    assert_eq!(
        losses,
        vec![("silent".to_string(), Some(LeaseLoss::NoProgress))]
    );
    assert_eq!(report.metrics.lease_losses, 1);
    // The silent message's retry was dropped (its lease was lost); it came back on its own when
    // the lease ended and was acknowledged on its second attempt.
    assert_eq!(report.metrics.outcomes_dropped_lease_lost, 1);
    assert!(report.metrics.extensions >= 2, "{report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_worker_s_message_comes_back_when_its_lease_ends() {
    let server = start_server().await;
    let queue = create_queue(&server.client, "killed", &[]).await;
    send(&server.client, &queue, "orphan").await;
    // The doomed worker runs on a runtime of its own, which is then shut down without waiting:
    // its tasks are dropped mid-lease and release nothing, as in a kill -9.
    let (started_tx, started_rx) = std::sync::mpsc::channel();
    let (kill_tx, kill_rx) = tokio::sync::oneshot::channel::<()>();
    let endpoint = server.endpoint.clone();
    let config = worker_config(&queue);
    let doomed = std::thread::spawn(move || {
        let runtime = tokio::runtime::Runtime::new().unwrap();
        runtime.block_on(async move {
            let client = common::sdk_client(&endpoint);
            let handler = move |_message: Message, _lease: LeaseContext| {
                let started_tx = started_tx.clone();
                async move {
                    started_tx.send(Instant::now()).unwrap();
                    std::future::pending::<Outcome>().await
                }
            };
            let _worker = Worker::new(client, config).unwrap().start(handler);
            let _ = kill_rx.await;
        });
        runtime.shutdown_background();
    });
    let started_at = tokio::task::spawn_blocking(move || started_rx.recv_timeout(common::PATIENCE))
        .await
        .unwrap()
        .expect("the doomed worker received the message");
    kill_tx.send(()).unwrap();
    tokio::task::spawn_blocking(move || doomed.join())
        .await
        .unwrap()
        .unwrap();
    let killed_at = Instant::now();
    let message = loop {
        if let Some(message) = common::receive_one(&server.client, &queue, 5, 30).await {
            break message;
        }
        assert!(
            killed_at.elapsed() < common::PATIENCE,
            "the message never came back"
        );
    };
    assert_eq!(message.body(), Some("orphan"));
    assert_eq!(receive_count(&message), 2);
    // It came back only when the 2 s lease ran out (less the time the receive took to arrive).
    assert!(
        started_at.elapsed() >= Duration::from_millis(1500),
        "{:?}",
        started_at.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_extension_cancels_the_handler_and_its_ack_is_dropped() {
    let server = start_server().await;
    let queue = create_queue(&server.client, "purged", &[]).await;
    send(&server.client, &queue, "doomed").await;
    let losses: Log<Option<LeaseLoss>> = Arc::default();
    let handler = {
        let losses = losses.clone();
        move |_message: Message, lease: LeaseContext| {
            let losses = losses.clone();
            async move {
                lease.lost().await;
                losses.lock().unwrap().push(lease.loss().cloned());
                // A handler that acks anyway must not get its message deleted: the lease is
                // gone, so the receipt no longer speaks for it.
                Outcome::Ack
            }
        }
    };
    let worker = Worker::new(server.client.clone(), worker_config(&queue))
        .unwrap()
        .start(handler);
    wait_for("the message to be in hand", || async {
        worker.metrics().received == 1
    })
    .await;
    // Purging deletes the message under the worker's feet; its next extension is refused.
    server
        .client
        .purge_queue()
        .queue_url(&queue)
        .send()
        .await
        .unwrap();
    wait_for("the outcome to be dropped", || async {
        worker.metrics().outcomes_dropped_lease_lost == 1
    })
    .await;
    let report = worker.shutdown().await;
    let losses = losses.lock().unwrap().clone();
    assert!(
        matches!(losses.as_slice(), [Some(LeaseLoss::ExtensionRejected { code })] if !code.is_empty()),
        "{losses:?}"
    );
    assert_eq!((report.metrics.lease_losses, report.metrics.acks), (1, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leases_of_many_messages_in_hand_are_extended_in_batches() {
    let server = start_server().await;
    let queue = create_queue(&server.client, "many", &[]).await;
    const MESSAGES: usize = 20;
    for n in 0..MESSAGES {
        send(&server.client, &queue, &format!("job {n}")).await;
    }
    let mut config = worker_config(&queue);
    config.concurrency = MESSAGES;
    let handler = |_message: Message, _lease: LeaseContext| async {
        tokio::time::sleep(Duration::from_millis(2500)).await;
        Outcome::Ack
    };
    let worker = Worker::new(server.client.clone(), config)
        .unwrap()
        .start(handler);
    wait_for("every message to be acknowledged", || async {
        worker.metrics().acks == MESSAGES as u64
    })
    .await;
    let report = worker.shutdown().await;
    let metrics = report.metrics;
    // Every lease outlived its first 2 s, so each was extended at least once, and the twenty
    // extensions went out in a few calls of up to ten, not one call each.
    assert!(metrics.extensions >= MESSAGES as u64, "{metrics:?}");
    assert!(
        metrics.extension_calls * 2 <= metrics.extensions,
        "{metrics:?}"
    );
    assert_eq!(metrics.lease_losses, 0, "{metrics:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unconfirmed_extension_cancels_the_handler_before_the_lease_can_end() {
    let server = start_server().await;
    let queue = create_queue(&server.client, "partition", &[]).await;
    send(&server.client, &queue, "cut off").await;
    let proxy = common::Proxy::start(&server).await;
    let losses: Log<(Option<LeaseLoss>, Duration)> = Arc::default();
    let handler = {
        let losses = losses.clone();
        move |_message: Message, lease: LeaseContext| {
            let losses = losses.clone();
            async move {
                let began_at = Instant::now();
                lease.lost().await;
                losses
                    .lock()
                    .unwrap()
                    .push((lease.loss().cloned(), began_at.elapsed()));
                Outcome::Ack
            }
        }
    };
    let client = common::sdk_client(&proxy.endpoint);
    let worker = Worker::new(client, worker_config(&queue))
        .unwrap()
        .start(handler);
    wait_for("the message to be in hand", || async {
        worker.metrics().received == 1
    })
    .await;
    proxy.cut();
    wait_for("the outcome to be dropped", || async {
        worker.metrics().outcomes_dropped_lease_lost == 1
    })
    .await;
    let report = worker.shutdown().await;
    let losses = losses.lock().unwrap().clone();
    assert_eq!(losses.len(), 1, "{losses:?}");
    let (loss, lost_after) = &losses[0];
    assert_eq!(loss, &Some(LeaseLoss::Unconfirmed));
    // Cancelled (0.5 s) before the 2 s lease, which began before the handler, could end.
    assert!(*lost_after < Duration::from_secs(2), "{lost_after:?}");
    assert_eq!((report.metrics.extensions, report.metrics.acks), (0, 0));
    // Not deleted: the message comes back when the server's lease ends.
    let message = common::receive_one(&server.client, &queue, 5, 30)
        .await
        .expect("the message back");
    assert_eq!(receive_count(&message), 2);
}
