//! The real `leaseq` binary as a child process: `leaseq serve` on a loopback port, its output
//! captured to a log file per start, killed with SIGKILL (nothing flushed, no checkpoint) or
//! stopped with SIGTERM (a graceful stop), and started again on the same data directory.
//!
//! Only the `leaseq` package's own tests know where the binary is
//! (`env!("CARGO_BIN_EXE_leaseq")`), so they hand its path to [`ServeCommand::new`].

use std::ffi::OsString;
use std::fs::File;
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::http;

/// How long a start (recovery included) may take before the test fails. Generous because the
/// whole workspace's tests compete for two cores.
const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a graceful stop may take.
const STOP_TIMEOUT: Duration = Duration::from_secs(15);

/// How many fresh ports to try when the one picked was taken between probing and binding.
const START_ATTEMPTS_MAX: usize = 5;

/// How often a start or a stop is checked on.
const POLL_INTERVAL: Duration = Duration::from_millis(20);

/// How to start `leaseq serve`: the binary, its flags and environment, and where it listens.
#[derive(Clone, Debug)]
pub struct ServeCommand {
    binary: PathBuf,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    /// Where the flags or the configuration file make it listen; `None`: on a free port, with
    /// `--listen` added.
    address: Option<SocketAddr>,
    /// The configuration file makes `--listen` TLS ([`ServeCommand::https`]).
    https: bool,
}

impl ServeCommand {
    /// `binary serve`, with none of the developer's `LEASEQ_*` variables: settings from the
    /// environment must not leak into the server under test.
    pub fn new(binary: impl Into<PathBuf>) -> ServeCommand {
        ServeCommand {
            binary: binary.into(),
            args: Vec::new(),
            env: Vec::new(),
            address: None,
            https: false,
        }
    }

    /// Adds flags.
    pub fn args<I, S>(mut self, args: I) -> ServeCommand
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Adds `--data-dir dir`.
    pub fn data_dir(self, dir: &Path) -> ServeCommand {
        self.args([OsString::from("--data-dir"), dir.as_os_str().to_owned()])
    }

    /// Sets environment variable `name`.
    pub fn env(mut self, name: impl Into<OsString>, value: impl Into<OsString>) -> ServeCommand {
        self.env.push((name.into(), value.into()));
        self
    }

    /// The flags or the configuration file make the server listen on `address`: no `--listen`
    /// is added, and a start that finds the port taken fails instead of trying another.
    pub fn listening_on(mut self, address: SocketAddr) -> ServeCommand {
        self.address = Some(address);
        self
    }

    /// The configuration file (or the environment) makes `--listen` TLS: a start waits for
    /// the port rather than for `/health`, and [`ChildServer::endpoint`] is `https://`.
    /// `--tls-cert` among the flags says so by itself.
    pub fn https(mut self) -> ServeCommand {
        self.https = true;
        self
    }

    /// Whether `--listen` is TLS: its `/health` is then not plain HTTP, so a start waits for
    /// the port to accept connections instead (it listens only once recovery is done, as
    /// `/health` would answer).
    fn is_tls(&self) -> bool {
        self.https || self.args.iter().any(|arg| arg == "--tls-cert")
    }

    /// Spawns the server on `address`, its output to `log_path`.
    fn spawn(&self, address: SocketAddr, log_path: &Path) -> Child {
        let log = File::create(log_path).expect("creating the server's log file");
        let mut command = Command::new(&self.binary);
        for (name, _) in std::env::vars_os() {
            if name.to_string_lossy().starts_with("LEASEQ_") {
                command.env_remove(name);
            }
        }
        command.arg("serve");
        if self.address.is_none() {
            command.arg("--listen").arg(address.to_string());
        }
        command
            .args(&self.args)
            .envs(self.env.iter().map(|(name, value)| (name, value)))
            .env("RUST_BACKTRACE", "1")
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("cloning the log file handle"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|error| panic!("spawning {}: {error}", self.binary.display()))
    }
}

/// A running `leaseq serve` child; SIGKILLed on drop.
pub struct ChildServer {
    command: ServeCommand,
    log_dir: PathBuf,
    child: Child,
    addr: SocketAddr,
    /// Every spawn's log, in order; the last is the running server's.
    logs: Vec<PathBuf>,
}

impl ChildServer {
    /// Starts `command`, with its logs in `log_dir` (`start-N.log`), and waits until it
    /// answers `GET /health`. Panics, with its log, if it exits instead (a failed recovery,
    /// refused settings).
    pub async fn start(command: ServeCommand, log_dir: &Path) -> ChildServer {
        let mut logs = Vec::new();
        let (child, addr) = start(&command, log_dir, &mut logs).await;
        ChildServer {
            command,
            log_dir: log_dir.to_path_buf(),
            child,
            addr,
            logs,
        }
    }

    /// Starts `command`, which fixes its address, as [`ChildServer::start`] does, and waits
    /// until its log says that it listens (`listen_line`, a line it logs once its listener is
    /// bound): `None` if it could not bind the address because another process holds it (the
    /// caller may pick another address). The log line, not `/health`, tells that the server
    /// answering is this one: a process that took the port first may answer `/health` too.
    pub async fn start_at_fixed_address(
        command: ServeCommand,
        log_dir: &Path,
        listen_line: &str,
    ) -> Option<ChildServer> {
        assert!(command.address.is_some(), "the command fixes no address");
        let addr = command.address.expect("checked");
        let mut logs = Vec::new();
        let log_path = log_dir.join("start-0.log");
        logs.push(log_path.clone());
        let mut child = command.spawn(addr, &log_path);
        let started = Instant::now();
        loop {
            let log = read(&log_path);
            if log.contains(listen_line) {
                break;
            }
            if let Some(status) = child.try_wait().expect("waiting for the server") {
                if log.contains("in use") {
                    return None;
                }
                panic!("leaseq did not start (it exited with {status}); its log:\n{log}");
            }
            assert!(
                started.elapsed() < STARTUP_TIMEOUT,
                "leaseq did not log {listen_line:?} within {STARTUP_TIMEOUT:?}; its log:\n{log}"
            );
            tokio::time::sleep(POLL_INTERVAL).await;
        }
        if let Err(reason) = wait_for_health(&mut child, addr, command.is_tls()).await {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "leaseq did not start ({reason}); its log:\n{}",
                read(&log_path)
            );
        }
        Some(ChildServer {
            command,
            log_dir: log_dir.to_path_buf(),
            child,
            addr,
            logs,
        })
    }

    /// The address it listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:PORT` (`https://` with `--tls-cert`), an SDK's endpoint.
    pub fn endpoint(&self) -> String {
        let scheme = if self.command.is_tls() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{}", self.addr)
    }

    /// The process id, to send it signals (SIGHUP reloads the TLS certificate).
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// Sends a signal by name (`HUP`, `TERM`...) and returns without waiting for its effect.
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .arg(format!("-{name}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("running kill");
        assert!(
            status.success(),
            "kill -{name} {}: {status}",
            self.child.id()
        );
    }

    /// The running (or last) server's output so far.
    pub fn log(&self) -> String {
        self.logs.last().map(read).unwrap_or_default()
    }

    /// The output of every start so far, in order.
    pub fn logs(&self) -> String {
        self.logs.iter().map(read).collect()
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGKILL: no shutdown, no final fsync, no checkpoint.
    pub fn kill(&mut self) {
        // `Child::kill` sends SIGKILL on unix; it fails only if the child was already reaped.
        let _ = self.child.kill();
        self.child.wait().expect("reaping the server");
    }

    /// Sends SIGTERM, which asks for a graceful stop, and returns without waiting for it.
    pub fn terminate(&self) {
        let status = Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status()
            .expect("running kill");
        assert!(status.success(), "kill -TERM {}: {status}", self.child.id());
    }

    /// Waits for the process to exit (after [`ChildServer::terminate`]); panics, with its log,
    /// if it has not within 15 s.
    pub async fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + STOP_TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().expect("waiting for the server") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "no exit within {STOP_TIMEOUT:?}: {}",
                self.log()
            );
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }

    /// A graceful stop: SIGTERM, then the exit, which must be a success.
    pub async fn stop(&mut self) {
        self.terminate();
        let status = self.wait_exit().await;
        assert!(status.success(), "stopped with {status}: {}", self.log());
    }

    /// Starts the same command again (on the same data directory), on a new port unless the
    /// command fixes it, after the last one was killed or stopped; kills it first if not.
    pub async fn start_again(&mut self) {
        if self.is_running() {
            self.kill();
        }
        let (child, addr) = start(&self.command, &self.log_dir, &mut self.logs).await;
        self.child = child;
        self.addr = addr;
    }

    /// kill -9, then [`ChildServer::start_again`].
    pub async fn restart(&mut self) {
        self.kill();
        self.start_again().await;
    }

    /// A graceful stop (a graceful stop writes a checkpoint, so the next start recovers from a
    /// snapshot rather than by replaying the log), then [`ChildServer::start_again`].
    pub async fn restart_gracefully(&mut self) {
        self.stop().await;
        self.start_again().await;
    }
}

impl Drop for ChildServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Spawns `command` and waits until it is healthy, on a fresh port for each lost race for one;
/// each spawn's log path is pushed to `logs`.
async fn start(
    command: &ServeCommand,
    log_dir: &Path,
    logs: &mut Vec<PathBuf>,
) -> (Child, SocketAddr) {
    for _ in 0..START_ATTEMPTS_MAX {
        let addr = command.address.unwrap_or_else(free_loopback_addr);
        let log_path = log_dir.join(format!("start-{}.log", logs.len()));
        logs.push(log_path.clone());
        let mut child = command.spawn(addr, &log_path);
        match wait_for_health(&mut child, addr, command.is_tls()).await {
            Ok(()) => return (child, addr),
            Err(reason) => {
                let _ = child.kill();
                let _ = child.wait();
                let log = read(&log_path);
                // Only a lost race for a port we picked is worth another try.
                if command.address.is_some() || !log.contains("in use") {
                    panic!("leaseq did not start ({reason}); its log:\n{log}");
                }
            }
        }
    }
    panic!("leaseq found no free port in {START_ATTEMPTS_MAX} attempts");
}

async fn wait_for_health(child: &mut Child, addr: SocketAddr, tls: bool) -> Result<(), String> {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().expect("waiting for the server") {
            return Err(format!("it exited with {status}"));
        }
        let up = if tls {
            tokio::net::TcpStream::connect(addr).await.is_ok()
        } else {
            http::healthy(addr).await
        };
        if up {
            return Ok(());
        }
        if started.elapsed() > STARTUP_TIMEOUT {
            return Err(format!("no 200 from /health within {STARTUP_TIMEOUT:?}"));
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// A loopback port nobody listens on right now, below the kernel's ephemeral range
/// (`net.ipv4.ip_local_port_range`, 32768-60999 by default): no bind to port 0 and no outgoing
/// connection of any process can take it by chance between this probe and the server's bind,
/// as one did when these ports came from a bind to port 0 (a node of a concurrent test started
/// on the same port, and answered the other's health checks). Ports are tried from a start that
/// differs between processes, one after the other, and one process never gets a port twice.
///
/// Another process may still take it first (one picking the same way); [`start`] then retries
/// with a new one (a test that fixes the port with [`ServeCommand::listening_on`] takes that
/// risk, and finds out from the server's own "listening on" line).
pub fn free_loopback_addr() -> SocketAddr {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u32 = 20_000;
    const END: u32 = 32_768;
    static NEXT: AtomicU32 = AtomicU32::new(u32::MAX);
    if NEXT.load(Ordering::Relaxed) == u32::MAX {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |elapsed| elapsed.subsec_nanos());
        let start = std::process::id().wrapping_mul(7919).wrapping_add(nanos) % (END - FIRST);
        let _ = NEXT.compare_exchange(u32::MAX, start, Ordering::Relaxed, Ordering::Relaxed);
    }
    for _ in FIRST..END {
        let port = FIRST + NEXT.fetch_add(1, Ordering::Relaxed) % (END - FIRST);
        let address = SocketAddr::from(([127, 0, 0, 1], port as u16));
        if TcpListener::bind(address).is_ok() {
            return address;
        }
    }
    panic!("no free loopback port between {FIRST} and {END}")
}

fn read(path: &PathBuf) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn free_ports_lie_below_the_ephemeral_range_and_are_never_handed_out_twice() {
        let mut seen = std::collections::BTreeSet::new();
        // Held, so that the next probe finds each of them taken and must move on.
        let mut held = Vec::new();
        for _ in 0..200 {
            let address = free_loopback_addr();
            assert!((20_000..32_768).contains(&address.port()), "{address}");
            assert!(seen.insert(address.port()), "{address} twice");
            held.push(TcpListener::bind(address).expect("free when handed out"));
        }
    }
}
