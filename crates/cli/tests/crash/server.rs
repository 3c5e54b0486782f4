//! The `leaseq serve` child process of the crash test: started on a free loopback port with
//! `--fsync always`, killed with SIGKILL, restarted on the same data directory.

use std::fs::File;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::http;

/// How long a start (recovery included) may take before the test fails. Generous because the
/// whole workspace's tests compete for two cores.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// How many fresh ports to try when the one picked was taken between probing and binding.
const START_ATTEMPTS_MAX: usize = 5;

/// A running server. Killed (SIGKILL) on drop.
pub struct Server {
    child: Child,
    pub addr: SocketAddr,
    log_path: PathBuf,
}

impl Server {
    /// Starts a server on `data_dir` and waits until it answers `GET /health`. Its output goes
    /// to `log_path`. Panics, with the server's log, if it exits instead (a failed recovery).
    pub async fn start(data_dir: &Path, log_path: &Path) -> Server {
        for _ in 0..START_ATTEMPTS_MAX {
            let addr = free_loopback_addr();
            let mut server = Server {
                child: spawn(addr, data_dir, log_path),
                addr,
                log_path: log_path.to_path_buf(),
            };
            let started = Instant::now();
            loop {
                if let Some(status) = server.child.try_wait().expect("try_wait") {
                    let log = server.log();
                    if log.contains("in use") {
                        break; // Lost the port to someone else; try another.
                    }
                    panic!("leaseq exited with {status} instead of starting; its log:\n{log}");
                }
                if http::healthy(addr).await {
                    return server;
                }
                assert!(
                    started.elapsed() < STARTUP_TIMEOUT,
                    "leaseq did not answer /health within {STARTUP_TIMEOUT:?}; its log:\n{}",
                    server.log()
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        panic!("leaseq found no free port in {START_ATTEMPTS_MAX} attempts");
    }

    /// SIGKILL: no shutdown, no final fsync, no checkpoint.
    pub fn kill(&mut self) {
        // `Child::kill` sends SIGKILL on unix.
        self.child.kill().expect("SIGKILL the server");
        self.child.wait().expect("reap the server");
    }

    /// The server's output so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(addr: SocketAddr, data_dir: &Path, log_path: &Path) -> Child {
    let log = File::create(log_path).expect("create the server log");
    let mut command = Command::new(env!("CARGO_BIN_EXE_leaseq"));
    // Settings from the developer's environment must not leak into the test.
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("LEASEQ_") {
            command.env_remove(name);
        }
    }
    command
        .args(["serve", "--listen", &addr.to_string(), "--fsync", "always"])
        .arg("--data-dir")
        .arg(data_dir)
        // A delete with a superseded receipt is refused instead of silently ignored, so every
        // acknowledged delete really deleted (or found the message already gone).
        .args(["--reject-stale-deletes", "true", "--log", "info"])
        // Checkpoints (snapshot + segment removal) often, so kills land in them too. An
        // environment variable, not a flag, so a binary without checkpoints ignores it.
        .env("LEASEQ_CHECKPOINT_BYTES", (256u64 << 10).to_string())
        .stdin(Stdio::null())
        .stdout(log.try_clone().expect("clone the log file"))
        .stderr(log)
        .spawn()
        .expect("spawn leaseq serve")
}

fn free_loopback_addr() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .expect("a free loopback port")
}
