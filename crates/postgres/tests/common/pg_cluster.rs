//! PostgreSQL clusters of a test's own, made with Debian's `pg_createcluster` on a free port and
//! dropped at the end: restarted (`tests/restart.rs`) or replicated to a synchronous standby and
//! failed over (`tests/failover.rs`) without touching the machine's PostgreSQL, which other
//! tests share. Where the cluster tools are missing, or the test does not run as root,
//! [`Cluster::create`] says so and returns `None`.

#![allow(dead_code)]

use std::process::Command;

/// A PostgreSQL cluster of the test's own, dropped (stopped and deleted) when this is.
pub struct Cluster {
    version: String,
    name: String,
    port: u16,
}

impl Cluster {
    /// A new cluster, started, or `None` (with the reason printed) where this machine cannot.
    pub fn create(purpose: &str) -> Option<Cluster> {
        let cluster = Cluster::created(purpose)?;
        cluster.ctl("start");
        Some(cluster)
    }

    /// A new cluster whose `postgresql.conf` ends with `settings` and that takes replication
    /// connections from loopback, started; `None` where this machine cannot.
    pub fn create_with(purpose: &str, settings: &[&str]) -> Option<Cluster> {
        let cluster = Cluster::created(purpose)?;
        cluster.append("postgresql.conf", settings);
        cluster.append(
            "pg_hba.conf",
            &[
                "local replication all trust",
                "host replication all 127.0.0.1/32 trust",
            ],
        );
        cluster.ctl("start");
        Some(cluster)
    }

    /// A streaming replica of `self`, started, which `self` knows by `application_name` (the
    /// name `synchronous_standby_names` lists): a new cluster whose data directory is a base
    /// backup of this one's, taken with `pg_basebackup -R` (which writes `standby.signal` and
    /// the connection to the primary).
    pub fn standby(&self, purpose: &str, application_name: &str) -> Cluster {
        let standby = Cluster::created(purpose).expect("a cluster was made before");
        let data = standby.data_directory();
        // Emptied, not removed: the directory is the postgres user's, its parent may not be.
        for entry in std::fs::read_dir(&data).expect("the standby's data directory") {
            let path = entry.expect("an entry of the data directory").path();
            if path.is_dir() {
                std::fs::remove_dir_all(&path).expect("emptying the data directory");
            } else {
                std::fs::remove_file(&path).expect("emptying the data directory");
            }
        }
        let source = format!(
            "host=127.0.0.1 port={} user=postgres application_name={application_name}",
            self.port
        );
        run(
            "runuser",
            &[
                "-u",
                "postgres",
                "--",
                &self.bin("pg_basebackup"),
                "-d",
                &source,
                "-D",
                &data,
                "-R",
                "-X",
                "stream",
            ],
        );
        standby.ctl("start");
        standby
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `pg_ctlcluster … stop -m immediate`: every process killed at once, as a crash of its
    /// host (no shutdown checkpoint; the standby keeps what it received).
    pub fn crash(&self) {
        run(
            "pg_ctlcluster",
            &[
                "--skip-systemctl-redirect",
                &self.version,
                &self.name,
                "stop",
                "-m",
                "immediate",
            ],
        );
    }

    fn created(purpose: &str) -> Option<Cluster> {
        let is_root = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|out| String::from_utf8_lossy(&out.stdout).trim() == "0");
        let clusters = Command::new("pg_lsclusters").arg("-h").output();
        let Some(version) = clusters.ok().filter(|_| is_root).and_then(|out| {
            let text = String::from_utf8_lossy(&out.stdout).to_string();
            text.split_whitespace().next().map(str::to_string)
        }) else {
            println!("SKIPPED: a PostgreSQL cluster of the test's own needs root and Debian's pg_createcluster");
            return None;
        };
        let port = free_port();
        let name = format!("leaseq_{purpose}_{}", std::process::id());
        let cluster = Cluster {
            version,
            name,
            port,
        };
        let port = port.to_string();
        run(
            "pg_createcluster",
            &[
                &cluster.version,
                &cluster.name,
                "-p",
                &port,
                "--",
                "--auth=trust",
            ],
        );
        Some(cluster)
    }

    /// Debian's place for the cluster's data.
    fn data_directory(&self) -> String {
        format!("/var/lib/postgresql/{}/{}", self.version, self.name)
    }

    /// A program of this PostgreSQL version.
    fn bin(&self, program: &str) -> String {
        format!("/usr/lib/postgresql/{}/bin/{program}", self.version)
    }

    /// Appends `lines` to one of the cluster's configuration files (Debian keeps them in /etc).
    fn append(&self, file: &str, lines: &[&str]) {
        use std::io::Write as _;
        let path = format!("/etc/postgresql/{}/{}/{file}", self.version, self.name);
        let mut config = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap_or_else(|error| panic!("opening {path}: {error}"));
        for line in lines {
            writeln!(config, "{line}").expect("writing the configuration");
        }
    }

    pub fn ctl(&self, command: &str) {
        run(
            "pg_ctlcluster",
            &[
                "--skip-systemctl-redirect",
                &self.version,
                &self.name,
                command,
            ],
        );
    }

    pub fn connection(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user=postgres dbname=postgres application_name=leaseq_restart",
            self.port
        )
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new("pg_dropcluster")
            .args(["--stop", &self.version, &self.name])
            .status();
    }
}

pub fn run(program: &str, args: &[&str]) {
    let status = Command::new(program).args(args).status();
    assert!(
        status.as_ref().is_ok_and(|s| s.success()),
        "{program} {args:?}: {status:?}"
    );
}

/// A free port for a cluster of the test's own, where no bind to port 0 can take it meanwhile
/// (see `free_loopback_addr`).
pub fn free_port() -> u16 {
    leaseq_testkit::launch::free_loopback_addr().port()
}
