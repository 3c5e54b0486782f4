//! The fault-injecting TCP proxy between the node and PostgreSQL, on a runtime of its own (the
//! simulation's thread blocks in the store's calls, and the proxy must forward meanwhile).
//!
//! The simulation steers it: [`Proxy::arm`] cuts every connection at the next bytes the node
//! sends (before they reach PostgreSQL, inside them, or right after all of them went on, before
//! the answer comes back); [`Proxy::go_away`] cuts every connection and refuses new ones until
//! [`Proxy::come_back`] (PostgreSQL away); [`Proxy::set_delays`] holds each connection's bytes,
//! both ways, for its own share (drawn when it opened) of the delay, so statements on different
//! connections (the flushes in flight, each on a session of its own; the readers') overtake
//! each other. It counts what it did.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// Where an armed cut falls in the next bytes the node sends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cut {
    /// None of them reach PostgreSQL.
    Before,
    /// A part of them does (PostgreSQL gets a torn message and runs nothing).
    Inside,
    /// All of them do, and the connection is cut before the answer comes back (PostgreSQL may
    /// run and commit the statement; the node cannot know).
    After,
}

/// What the proxy did, counted.
#[derive(Default)]
pub struct Counters {
    pub connections: AtomicU64,
    pub refused: AtomicU64,
    pub held_chunks: AtomicU64,
    pub cuts_before: AtomicU64,
    pub cuts_inside: AtomicU64,
    pub cuts_after: AtomicU64,
}

struct Control {
    away: bool,
    armed: Option<Cut>,
    delay_max_ms: u64,
    rng: StdRng,
}

struct Shared {
    control: Mutex<Control>,
    /// Bumped to cut every connection open at that moment.
    generation: watch::Sender<u64>,
    counters: Counters,
}

impl Shared {
    fn cut_all(&self) {
        self.generation.send_modify(|generation| *generation += 1);
    }
}

pub struct Proxy {
    pub address: SocketAddr,
    shared: Arc<Shared>,
    // Declared last: stops the proxy's tasks (and with them every connection) when dropped.
    runtime: Option<tokio::runtime::Runtime>,
}

impl Proxy {
    /// A proxy to `target`, forwarding until told otherwise.
    pub fn start(target: SocketAddr, seed: u64) -> Proxy {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("pg-sim-proxy")
            .enable_all()
            .build()
            .expect("the proxy's runtime");
        let listener = runtime
            .block_on(TcpListener::bind("127.0.0.1:0"))
            .expect("a port for the proxy");
        let address = listener.local_addr().expect("the proxy's address");
        let shared = Arc::new(Shared {
            control: Mutex::new(Control {
                away: false,
                armed: None,
                delay_max_ms: 0,
                rng: StdRng::seed_from_u64(seed),
            }),
            generation: watch::channel(0).0,
            counters: Counters::default(),
        });
        runtime.spawn(accept_loop(listener, target, shared.clone()));
        Proxy {
            address,
            shared,
            runtime: Some(runtime),
        }
    }

    /// Cuts every connection at the next bytes the node sends, on any of them.
    pub fn arm(&self, cut: Cut) {
        self.shared.control.lock().armed = Some(cut);
    }

    pub fn disarm(&self) {
        self.shared.control.lock().armed = None;
    }

    /// PostgreSQL goes away: every connection is cut and new ones are refused.
    pub fn go_away(&self) {
        self.shared.control.lock().away = true;
        self.shared.cut_all();
    }

    /// Cuts every connection open now (new ones go through unless the proxy is away).
    pub fn cut_all(&self) {
        self.shared.cut_all();
    }

    /// PostgreSQL is back: new connections go through.
    pub fn come_back(&self) {
        self.shared.control.lock().away = false;
    }

    pub fn is_away(&self) -> bool {
        self.shared.control.lock().away
    }

    /// Every connection holds its bytes for its share of `delay_max_ms` (0: none).
    pub fn set_delays(&self, delay_max_ms: u64) {
        self.shared.control.lock().delay_max_ms = delay_max_ms;
    }

    pub fn counters(&self) -> &Counters {
        &self.shared.counters
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

async fn accept_loop(listener: TcpListener, target: SocketAddr, shared: Arc<Shared>) {
    while let Ok((client, _)) = listener.accept().await {
        let share = {
            let mut control = shared.control.lock();
            if control.away {
                drop(control);
                shared.counters.refused.fetch_add(1, Ordering::Relaxed);
                continue; // Refused: closed at once.
            }
            control.rng.random_range(0.05..=1.0)
        };
        shared.counters.connections.fetch_add(1, Ordering::Relaxed);
        let Ok(server) = TcpStream::connect(target).await else {
            continue;
        };
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        tokio::spawn(forward(client, server, shared.clone(), share));
    }
}

/// Holds bytes for the connection's `share` of the delay while delays are on.
async fn hold(shared: &Shared, share: f64) {
    let delay_max_ms = shared.control.lock().delay_max_ms;
    if delay_max_ms > 0 {
        shared.counters.held_chunks.fetch_add(1, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_secs_f64(
            share * delay_max_ms as f64 / 1000.0,
        ))
        .await;
    }
}

/// Copies both ways until either side closes, an armed cut fires, or every connection is cut.
async fn forward(client: TcpStream, server: TcpStream, shared: Arc<Shared>, share: f64) {
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let mut generation = shared.generation.subscribe();
    generation.borrow_and_update();
    let upstream = async {
        let mut buffer = vec![0u8; 16 << 10];
        loop {
            let read = client_read.read(&mut buffer).await?;
            if read == 0 {
                return Ok::<(), std::io::Error>(());
            }
            hold(&shared, share).await;
            let armed = {
                let mut control = shared.control.lock();
                control
                    .armed
                    .take()
                    .map(|cut| (cut, control.rng.random_range(1..read.max(2))))
            };
            if let Some((cut, inside)) = armed {
                let (part, counter) = match cut {
                    Cut::Before => (0, &shared.counters.cuts_before),
                    Cut::Inside => (inside.min(read - 1), &shared.counters.cuts_inside),
                    Cut::After => (read, &shared.counters.cuts_after),
                };
                counter.fetch_add(1, Ordering::Relaxed);
                server_write.write_all(&buffer[..part]).await?;
                shared.cut_all();
                return Ok(());
            }
            server_write.write_all(&buffer[..read]).await?;
        }
    };
    let downstream = async {
        let mut buffer = vec![0u8; 16 << 10];
        loop {
            let read = server_read.read(&mut buffer).await?;
            if read == 0 {
                return Ok::<(), std::io::Error>(());
            }
            hold(&shared, share).await;
            client_write.write_all(&buffer[..read]).await?;
        }
    };
    tokio::select! {
        _ = upstream => {}
        _ = downstream => {}
        _ = generation.changed() => {}
    }
}
