//! Connections cut at random moments under load, through a TCP proxy between the node and
//! PostgreSQL: the cut falls after a seeded number of bytes from the node, either inside a
//! request (PostgreSQL gets part of a flush and runs nothing) or right after a whole one
//! (PostgreSQL commits the flush, and its answer is lost: the outcome the node cannot know).
//! Whatever the moment, the node refuses (`ServiceUnavailable`) rather than guess; once the
//! proxy lets connections through again it recovers by itself (it resolves the cut flush) and
//! acknowledges sends again; then the same node, and a new node on the same schema, hold every
//! acknowledged send, once, and nothing that was never sent.
//!
//! `LEASEQ_PG_CUT_SEED=<n>` repeats a seed, `LEASEQ_PG_CUT_CYCLES=<n>` runs longer.

mod common;

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use leaseq_postgres::{drop_schema, open_service, PgConfig};
use leaseq_sqs::error::ErrorCode;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use common::{call, connection, message_counts, service_config, QUEUE_URL};

const CYCLES_DEFAULT: u64 = 4;
const SENDERS: usize = 8;
/// Bytes from the node to PostgreSQL after which the proxy cuts (seeded below this).
const CUT_AFTER_BYTES_MAX: i64 = 64 << 10;
/// How long the load may run before the cut and the recovery must be over.
const LOAD_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the proxy refuses connections after the cut (PostgreSQL away for a moment).
const AWAY_FOR: Duration = Duration::from_millis(300);
/// Sends each sender gets acknowledged after the recovery before it stops.
const SENDS_AFTER_RECOVERY: usize = 5;

/// A TCP proxy that forwards to PostgreSQL until the node has sent its byte budget, then cuts
/// every connection it carries and refuses new ones for [`AWAY_FOR`], then forwards again (with
/// no budget: one cut per cycle).
struct Proxy {
    address: SocketAddr,
    budget_bytes: Arc<AtomicI64>,
}

/// Where the cut falls in the read that spends the budget.
#[derive(Clone, Copy, Debug)]
enum Cut {
    /// Inside it: only the bytes within the budget go on.
    Inside,
    /// After it: the whole read goes on, then the connection is cut before any answer.
    After,
}

impl Proxy {
    async fn start(target: SocketAddr, mode: Cut) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let budget_bytes = Arc::new(AtomicI64::new(i64::MAX));
        let (cut, _) = watch::channel(false);
        let budget = budget_bytes.clone();
        let mut cut_at: Option<Instant> = None;
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                if *cut.borrow() {
                    let since = *cut_at.get_or_insert_with(Instant::now);
                    if since.elapsed() < AWAY_FOR {
                        continue; // Refused: dropped at once.
                    }
                    // Back: new connections go through and are never cut.
                    budget.store(i64::MAX, Ordering::SeqCst);
                    cut.send_replace(false);
                }
                let server = TcpStream::connect(target).await.unwrap();
                tokio::spawn(forward(client, server, budget.clone(), cut.clone(), mode));
            }
        });
        Proxy {
            address,
            budget_bytes,
        }
    }
}

/// Copies both ways; node-to-server bytes spend the budget, and once it is spent every
/// connection is cut (the flag tells the others).
async fn forward(
    client: TcpStream,
    server: TcpStream,
    budget: Arc<AtomicI64>,
    cut: watch::Sender<bool>,
    mode: Cut,
) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let mut cut_seen = cut.subscribe();
    let upstream = async {
        let mut buffer = vec![0u8; 16 << 10];
        loop {
            let read = client_read.read(&mut buffer).await?;
            if read == 0 {
                return Ok::<(), std::io::Error>(());
            }
            let left = budget.fetch_sub(read as i64, Ordering::SeqCst) - read as i64;
            if left < 0 {
                let part = match mode {
                    Cut::Inside => (read as i64 + left).max(0) as usize,
                    Cut::After => read,
                };
                server_write.write_all(&buffer[..part]).await?;
                budget.store(i64::MAX, Ordering::SeqCst);
                cut.send_replace(true);
                return Ok(());
            }
            server_write.write_all(&buffer[..read]).await?;
        }
    };
    let downstream = tokio::io::copy(&mut server_read, &mut client_write);
    tokio::select! {
        _ = upstream => {}
        _ = downstream => {}
        _ = cut_seen.wait_for(|cut| *cut) => {}
    }
}

fn target() -> SocketAddr {
    let config: tokio_postgres::Config = connection("x").parse().unwrap();
    let host = match config.get_hosts().first() {
        Some(tokio_postgres::config::Host::Tcp(host)) => host.clone(),
        _ => "127.0.0.1".into(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    let host = if host == "localhost" {
        "127.0.0.1".into()
    } else {
        host
    };
    format!("{host}:{port}")
        .parse()
        .expect("PostgreSQL at an IP address")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_sends_survive_connections_cut_at_any_moment() {
    let seed = leaseq_testkit::sim::seed_or_clock("LEASEQ_PG_CUT_SEED");
    let cycles = leaseq_testkit::sim::env_number("LEASEQ_PG_CUT_CYCLES").unwrap_or(CYCLES_DEFAULT);
    println!("cut test: seed {seed}, {cycles} cycles (rerun with LEASEQ_PG_CUT_SEED={seed})");
    for cycle in 0..cycles {
        let mut rng = StdRng::seed_from_u64(seed ^ cycle.wrapping_mul(0x9E37_79B9_7F4A_7C15));
        let cut_after = rng.random_range(0..CUT_AFTER_BYTES_MAX);
        let mode = if rng.random_bool(0.5) {
            Cut::Inside
        } else {
            Cut::After
        };
        let (acknowledged, drained) = cut_cycle(cycle, cut_after, mode).await;
        println!(
            "cycle {cycle}: cut {mode:?} the request at {cut_after} B: {acknowledged} sends \
             acknowledged, {drained} messages held after the recovery"
        );
    }
}

/// One node through the proxy, cut under load; then a node without the proxy checks.
async fn cut_cycle(cycle: u64, cut_after_bytes: i64, mode: Cut) -> (usize, usize) {
    let proxy = Proxy::start(target(), mode).await;
    let name = format!("leaseq_cuts_{}_{cycle}", std::process::id());
    let direct = connection(&name);
    let through_proxy = format!("{direct} host=127.0.0.1 port={}", proxy.address.port());
    drop_schema(&direct, &name).unwrap();
    let config = PgConfig {
        schema: name.clone(),
        ..PgConfig::new(through_proxy)
    };
    let service =
        tokio::task::block_in_place(|| open_service(&config, service_config(), 64 << 20)).unwrap();
    let service = Arc::new(service);
    call(&service, "CreateQueue", json!({"QueueName": "jobs"}))
        .await
        .unwrap();
    proxy.budget_bytes.store(cut_after_bytes, Ordering::SeqCst);
    let mut senders = Vec::new();
    for sender in 0..SENDERS {
        let service = service.clone();
        senders.push(tokio::spawn(async move {
            send_through_the_cut(&service, sender).await
        }));
    }
    let mut acknowledged = HashSet::new();
    for sender in senders {
        acknowledged.extend(sender.await.unwrap());
    }
    // The node that was cut, recovered by itself, then a new node on the same schema.
    let drained = drain(&service).await;
    check(cycle, &acknowledged, &drained);
    drop(service);
    let config = PgConfig {
        schema: name.clone(),
        ..PgConfig::new(direct.clone())
    };
    let service =
        tokio::task::block_in_place(|| open_service(&config, service_config(), 64 << 20)).unwrap();
    // The drain's leases are held, so the new node holds every message, none of them visible.
    assert_eq!(
        message_counts(&service).await,
        (0, drained.len()),
        "cycle {cycle}: a new node holds the same messages and leases"
    );
    drop(service);
    drop_schema(&direct, &name).unwrap();
    (acknowledged.len(), drained.len())
}

/// Every acknowledged send is there; anything else is a send that was refused (its outcome
/// unknown to the client), never more than the few in the flushes the cut caught.
fn check(cycle: u64, acknowledged: &HashSet<String>, drained: &HashSet<String>) {
    let missing: Vec<&String> = acknowledged
        .iter()
        .filter(|b| !drained.contains(*b))
        .collect();
    assert!(
        missing.is_empty(),
        "cycle {cycle}: acknowledged sends lost: {missing:?}"
    );
    let unacknowledged = drained.len() - acknowledged.len();
    assert!(
        unacknowledged <= SENDERS,
        "cycle {cycle}: {unacknowledged} refused sends were kept (at most one per sender can be)"
    );
}

/// Sends until the service refuses (the cut), then on until it has acknowledged
/// [`SENDS_AFTER_RECOVERY`] more (it recovered by itself); the bodies acknowledged.
async fn send_through_the_cut(service: &leaseq_server::Service, sender: usize) -> Vec<String> {
    let started = Instant::now();
    let mut bodies = Vec::new();
    let mut after_refusal: Option<usize> = None;
    for n in 0.. {
        assert!(
            started.elapsed() < LOAD_TIMEOUT,
            "the cut never stopped the load, or the node never recovered: {after_refusal:?}"
        );
        if after_refusal == Some(SENDS_AFTER_RECOVERY) {
            return bodies;
        }
        let body = format!("s{sender}-{n}");
        let send = json!({"QueueUrl": QUEUE_URL, "MessageBody": body});
        match call(service, "SendMessage", send).await {
            Ok(_) => {
                bodies.push(body);
                if let Some(count) = &mut after_refusal {
                    *count += 1;
                }
            }
            Err(error) => {
                assert_eq!(error.code, ErrorCode::ServiceUnavailable, "{error:?}");
                after_refusal.get_or_insert(0);
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
    }
    unreachable!("the loop ends after the recovery")
}

/// Every body in the queue, each received once, each one that was sent.
async fn drain(service: &leaseq_server::Service) -> HashSet<String> {
    let bodies = common::drain(service).await;
    for (body, count) in &bodies {
        assert!(body.starts_with('s'), "a body that was never sent: {body}");
        assert_eq!(*count, 1, "received {count} times: {body}");
    }
    bodies.into_keys().collect()
}
