//! `leaseq serve`: settings from flags, `LEASEQ_*` environment variables and a TOML file (in that
//! order of precedence), then the server until SIGINT or SIGTERM. A cluster node (`--cluster`)
//! is served by `serve/cluster.rs`.

mod cluster;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use clap::Args;
use leaseq_core::{EngineConfig, ReceiptKey};
use leaseq_server::auth::{Authenticator, Credential, Keys, Secret};
use leaseq_server::clock::SystemClock;
use leaseq_server::http::tls::Tls;
use leaseq_server::http::{Connections, HEADER_READ_TIMEOUT_DEFAULT, MAX_CONNECTIONS_DEFAULT};
use leaseq_server::{Api, Caller, DataDir, HttpConfig, Metrics, Service, ServiceConfig};
use leaseq_sqs::{Action, RawRequest};
use leaseq_wal::FsyncPolicy;
use serde::Deserialize;

/// Flags of `leaseq serve`. Every flag can also be set by its environment variable or in the
/// `--config` file (same name, with `_` for `-`).
#[derive(Args, Debug, Default)]
pub struct ServeArgs {
    /// TOML file with settings (and `[[queues]]` to create at start-up).
    #[arg(long, env = "LEASEQ_CONFIG")]
    config: Option<PathBuf>,
    /// Address to listen on [default: 127.0.0.1:9324].
    #[arg(long, env = "LEASEQ_LISTEN")]
    listen: Option<SocketAddr>,
    /// Directory for the server's data [default: ./leaseq-data].
    #[arg(long, env = "LEASEQ_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// Region used in queue ARNs [default: us-east-1].
    #[arg(long, env = "LEASEQ_REGION")]
    region: Option<String>,
    /// Account id used in queue URLs and ARNs [default: 000000000000].
    #[arg(long, env = "LEASEQ_ACCOUNT_ID")]
    account_id: Option<String>,
    /// Base URL for queue URLs (e.g. https://sqs.example.com); default: from each request's Host.
    #[arg(long, env = "LEASEQ_EXTERNAL_URL")]
    external_url: Option<String>,
    /// Queues to create at start-up (comma-separated names; use the config file for attributes).
    #[arg(long = "queue", env = "LEASEQ_QUEUES", value_delimiter = ',')]
    queues: Vec<String>,
    /// Answer a delete with a superseded attempt's receipt with an error instead of SQS's
    /// silent success (it never deletes the newer attempt either way).
    #[arg(long, env = "LEASEQ_REJECT_STALE_DELETES")]
    reject_stale_deletes: Option<bool>,
    /// When a reply waits for the disk: `always` (fdatasync before every reply; nothing
    /// acknowledged is lost, even on power loss), `interval=<ms>` (fdatasync at most every <ms>;
    /// a power loss can lose that much acknowledged data) or `never` (the OS decides; a power loss
    /// can lose any acknowledged data; a crash of the process loses nothing) [default: always].
    #[arg(long, env = "LEASEQ_FSYNC")]
    fsync: Option<String>,
    /// Keep the log in PostgreSQL instead of the data directory: a libpq-style connection
    /// string such as `host=db.internal user=leaseq dbname=leaseq` (tables in the schema
    /// `leaseq`, created at start-up). The node then keeps nothing it needs on local disk: the
    /// same flags on another machine serve the same queues and messages.
    #[arg(long, env = "LEASEQ_POSTGRES")]
    postgres: Option<String>,
    /// The PostgreSQL schema of the log's tables, with `--postgres` [default: leaseq]. Nodes
    /// (and tests) with different schemas keep separate logs in one database.
    #[arg(long, env = "LEASEQ_POSTGRES_SCHEMA")]
    postgres_schema: Option<String>,
    /// With `--postgres`, how many group commits may be in flight at once, each on a
    /// PostgreSQL session of its own [default: 1, one at a time]. More hide a slow commit's
    /// latency (a remote server, a synchronous standby): another starts once the oldest has
    /// run 1 ms. Acknowledgements stay in log order whatever the number.
    #[arg(long, env = "LEASEQ_POSTGRES_FLUSHES", value_parser = clap::value_parser!(u16).range(1..=64))]
    postgres_flushes: Option<u16>,
    /// With `--postgres`, how many buckets the log has: queues hash into them, and each has an
    /// engine, a flusher and a PostgreSQL session of its own, the shape a cluster will spread
    /// over nodes (in one node it costs single sends a third of their throughput: keep 1 unless
    /// preparing such a log) [default: 1; at most 256]. Fixed for the life of a log: a new log
    /// records it, and a node started with another count than its log's refuses to start. In a
    /// cluster, the nodes share the buckets out (start every node with the same count).
    #[arg(long, env = "LEASEQ_POSTGRES_BUCKETS", value_parser = clap::value_parser!(u16).range(1..=256))]
    postgres_buckets: Option<u16>,
    /// Run as a node of a cluster on the `--postgres` log: several nodes share it, each bucket
    /// of it (`--postgres-buckets`) owned by one node that runs its engine, the others
    /// forwarding the bucket's requests to it and taking over within `--node-timeout-ms` when
    /// it dies or stops answering. Any node answers any request [default: false].
    #[arg(long, env = "LEASEQ_CLUSTER")]
    cluster: Option<bool>,
    /// With `--cluster`, this node's id, unique in the cluster [default: the `--advertise`
    /// address].
    #[arg(long, env = "LEASEQ_NODE_ID")]
    node_id: Option<String>,
    /// With `--cluster`, `host:port` where the other nodes reach this node's SQS listener
    /// [default: `--listen`, unless it is a wildcard address such as 0.0.0.0].
    #[arg(long, env = "LEASEQ_ADVERTISE")]
    advertise: Option<String>,
    /// With `--cluster`, a plain-HTTP listener where the other nodes forward requests to this
    /// one (the SQS API, as on `--listen`; signatures are verified as there). Needed when
    /// `--listen` speaks TLS (`--tls-cert`), since nodes forward over plain HTTP: keep it on a
    /// private network; `--advertise` then defaults to it.
    #[arg(long, env = "LEASEQ_CLUSTER_LISTEN")]
    cluster_listen: Option<SocketAddr>,
    /// With `--cluster`, how long the owner may stop answering PostgreSQL (a pause, a
    /// partition) before a standby takes the log over [default: 5000]. Shorter fails over
    /// sooner; too short makes a briefly starved owner lose the log (safe, but a takeover).
    #[arg(long, env = "LEASEQ_NODE_TIMEOUT_MS", value_parser = clap::value_parser!(u64).range(400..))]
    node_timeout_ms: Option<u64>,
    /// Keep nothing on disk: every queue and message is lost when the server stops.
    #[arg(long, env = "LEASEQ_IN_MEMORY")]
    in_memory: Option<bool>,
    /// Start even if the log is corrupt in the middle, dropping everything after the damage
    /// (the log says what was dropped). Without it, such a log stops the start.
    #[arg(long, env = "LEASEQ_SALVAGE")]
    salvage: Option<bool>,
    /// Write a checkpoint (a snapshot of the state, after which old log segments are removed)
    /// once the log has grown by this many bytes, or by the size of the last snapshot if that
    /// is larger [default: 67108864].
    #[arg(long, env = "LEASEQ_CHECKPOINT_BYTES")]
    checkpoint_bytes: Option<u64>,
    /// Memory for the bodies of recently logged messages, so that a receive soon after the
    /// send reads nothing back from the log; older ones are read from the log. Each body counts
    /// its logged size plus 128 bytes, and is kept only while its queue's messages would all
    /// fit [default: 0, none].
    #[arg(long, env = "LEASEQ_PAYLOAD_CACHE_BYTES")]
    payload_cache_bytes: Option<u64>,
    /// Log filter, e.g. `info` or `leaseq_server=debug` [default: info].
    #[arg(long, env = "LEASEQ_LOG")]
    log: Option<String>,
    /// Record metrics (request counts and latency, processing time and lease time left at each
    /// delete, empty receives, invalid receipts) for `GET /metrics`, the dashboard (`GET /`) and
    /// the visibility advisor. With `false`, those pages show only the engine's counts
    /// [default: true].
    #[arg(long, env = "LEASEQ_METRICS")]
    metrics: Option<bool>,
    /// Threads answering requests [default: the number of CPUs available]. The log's own
    /// thread (it writes and fsyncs) comes on top. On a small machine shared with busy clients,
    /// fewer threads than CPUs can spend less CPU per request (fewer hand-offs between threads)
    /// at the cost of peak throughput.
    #[arg(long, env = "LEASEQ_THREADS", value_parser = clap::value_parser!(u16).range(1..))]
    threads: Option<u16>,
    /// Authentication of SQS requests: `sigv4` (every request must be signed, in its
    /// Authorization header or as a presigned URL, by a key of `--credentials` or the config
    /// file's `[[credentials]]`, and acts for that key's account; another account's queue
    /// only as its `Policy` allows) or `none` (nothing is checked; a signature's access key
    /// id, if any, is the sender; policies are not enforced) [default: none]. With
    /// `none`, listening on an address other than loopback also needs `--allow-anonymous true`.
    #[arg(long, env = "LEASEQ_AUTH")]
    auth: Option<String>,
    /// Serve without authentication (`--auth none`) on an address other than loopback, where
    /// anyone who reaches the port may use and delete every queue [default: false].
    #[arg(long, env = "LEASEQ_ALLOW_ANONYMOUS")]
    allow_anonymous: Option<bool>,
    /// Keys accepted with `--auth sigv4`, comma-separated `ACCESS_KEY_ID:SECRET[:ACCOUNT_ID]`;
    /// `SECRET` may be `@PATH`, a file holding the secret (its trailing newline dropped). The
    /// account defaults to `--account-id`. Prefer the environment variable or a file: a flag
    /// shows in `ps`. Added to the config file's `[[credentials]]`.
    #[arg(
        long,
        env = "LEASEQ_CREDENTIALS",
        value_delimiter = ',',
        hide_env_values = true
    )]
    credentials: Vec<String>,
    /// Serve the dashboard (`GET /`), `/api/*` and `/metrics` on this address instead of
    /// `--listen` [default: with `--auth sigv4` or TLS, 127.0.0.1:9325; otherwise on
    /// `--listen` as before]. It also answers `/livez` and `/readyz`. It is plain HTTP (never
    /// TLS) and not authenticated: keep it on loopback or a private network.
    #[arg(long, env = "LEASEQ_ADMIN_LISTEN")]
    admin_listen: Option<SocketAddr>,
    /// The log's format: `text` (colours only when the output is a terminal) or `json` (one
    /// object per line, for log collectors) [default: text].
    #[arg(long, env = "LEASEQ_LOG_FORMAT")]
    log_format: Option<String>,
    /// PEM file of the TLS certificate chain (the server's certificate first). With
    /// `--tls-key`, `--listen` serves HTTPS only (HTTP/2 and HTTP/1.1 by ALPN) and queue URLs
    /// are `https://`. Both files are read again on SIGHUP: new connections get the new pair,
    /// open ones keep theirs, and a pair that fails to load is logged and the old one kept.
    #[arg(long, env = "LEASEQ_TLS_CERT")]
    tls_cert: Option<PathBuf>,
    /// PEM file of the TLS private key (PKCS#8, PKCS#1 or SEC1) of `--tls-cert`.
    #[arg(long, env = "LEASEQ_TLS_KEY")]
    tls_key: Option<PathBuf>,
    /// Milliseconds a client may take to send a request's header (and over TLS, the
    /// handshake), counted from the connection's start or the previous answer; then the
    /// connection is closed. An idle connection closes after as long: HTTP/1.1 keep-alive
    /// between requests, HTTP/2 with no request in progress (with GOAWAY) [default: 30000].
    #[arg(long, env = "LEASEQ_HEADER_READ_TIMEOUT_MS", value_parser = clap::value_parser!(u64).range(1..))]
    header_read_timeout_ms: Option<u64>,
    /// Connections served at once on `--listen`; beyond it, new connections wait (in the
    /// kernel's listen backlog) until one closes. Keep `ulimit -n` above it; `/metrics` shows
    /// `leaseq_http_connections_open` and `leaseq_http_connection_limit_reached_total`
    /// [default: 10000].
    #[arg(long, env = "LEASEQ_MAX_CONNECTIONS", value_parser = clap::value_parser!(u64).range(1..))]
    max_connections: Option<u64>,
}

/// The `--config` file.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<SocketAddr>,
    data_dir: Option<PathBuf>,
    region: Option<String>,
    account_id: Option<String>,
    external_url: Option<String>,
    reject_stale_deletes: Option<bool>,
    fsync: Option<String>,
    postgres: Option<String>,
    postgres_schema: Option<String>,
    postgres_flushes: Option<u16>,
    postgres_buckets: Option<u16>,
    cluster: Option<bool>,
    node_id: Option<String>,
    advertise: Option<String>,
    cluster_listen: Option<SocketAddr>,
    node_timeout_ms: Option<u64>,
    in_memory: Option<bool>,
    salvage: Option<bool>,
    checkpoint_bytes: Option<u64>,
    payload_cache_bytes: Option<u64>,
    log: Option<String>,
    metrics: Option<bool>,
    threads: Option<u16>,
    auth: Option<String>,
    allow_anonymous: Option<bool>,
    admin_listen: Option<SocketAddr>,
    log_format: Option<String>,
    tls_cert: Option<PathBuf>,
    tls_key: Option<PathBuf>,
    header_read_timeout_ms: Option<u64>,
    max_connections: Option<u64>,
    #[serde(default)]
    credentials: Vec<CredentialSpec>,
    #[serde(default)]
    queues: Vec<QueueSpec>,
}

/// A `[[credentials]]` entry: a key clients sign with, and the account it acts for.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct CredentialSpec {
    access_key_id: String,
    /// The secret itself, or:
    secret_access_key: Option<String>,
    /// a file holding it (a mounted secret).
    secret_access_key_file: Option<PathBuf>,
    /// Default: the server's `account_id`.
    account_id: Option<String>,
}

impl std::fmt::Debug for CredentialSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the secret.
        f.debug_struct("CredentialSpec")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key_file", &self.secret_access_key_file)
            .field("account_id", &self.account_id)
            .finish_non_exhaustive()
    }
}

/// How SQS requests are authenticated.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AuthMode {
    /// Nothing is checked (today's behaviour, the default).
    None,
    /// Every request must carry a valid SigV4 signature of a configured key.
    SigV4,
}

/// A queue to create at start-up, with SQS attribute names and values.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct QueueSpec {
    name: String,
    #[serde(default)]
    attributes: BTreeMap<String, String>,
    #[serde(default)]
    tags: BTreeMap<String, String>,
}

/// Settings after merging flags, environment and file.
#[derive(Debug)]
struct Settings {
    listen: SocketAddr,
    data_dir: PathBuf,
    region: String,
    account_id: String,
    external_url: Option<String>,
    reject_stale_deletes: bool,
    fsync: FsyncPolicy,
    /// The PostgreSQL connection string, if the log lives there.
    postgres: Option<String>,
    postgres_schema: String,
    postgres_flushes: usize,
    /// Buckets of the PostgreSQL log (1 unless `--postgres-buckets`).
    postgres_buckets: u32,
    /// `Some` for a cluster node (`--cluster`).
    cluster: Option<cluster::ClusterSettings>,
    in_memory: bool,
    salvage: bool,
    checkpoint_bytes: u64,
    payload_cache_bytes: u64,
    log: String,
    metrics: bool,
    /// `None`: one per CPU.
    threads: Option<u16>,
    auth: AuthMode,
    /// `log_format = "json"`.
    log_json: bool,
    /// Where the dashboard, `/api/*` and `/metrics` listen; `None`: on `listen`.
    admin_listen: Option<SocketAddr>,
    /// The keys of `auth = "sigv4"` (their `Debug` prints no secret).
    credentials: Vec<Credential>,
    /// `tls_cert` and `tls_key`, loaded (so a bad file stops the start).
    tls: Option<Arc<Tls>>,
    header_read_timeout: Duration,
    max_connections: usize,
    queues: Vec<QueueSpec>,
}

/// Reads a secret from a file, without its trailing newline.
fn read_secret(path: &std::path::Path) -> anyhow::Result<String> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading the secret access key file {}", path.display()))?;
    let secret = text.trim_end_matches(['\n', '\r']).to_string();
    if secret.is_empty() {
        bail!("the secret access key file {} is empty", path.display());
    }
    Ok(secret)
}

/// An account id as AWS writes them: 12 digits.
fn check_account_id(account_id: &str) -> anyhow::Result<()> {
    if !leaseq_sqs::namespace::is_account_id(account_id) {
        bail!("account_id must be 12 digits, not {account_id:?}");
    }
    Ok(())
}

/// The keys of the file's `[[credentials]]` and of `--credentials`.
fn credentials(
    file: Vec<CredentialSpec>,
    flags: Vec<String>,
    default_account: &str,
) -> anyhow::Result<Vec<Credential>> {
    let mut out: Vec<Credential> = Vec::new();
    for spec in file {
        let secret = match (spec.secret_access_key, &spec.secret_access_key_file) {
            (Some(secret), None) if !secret.is_empty() => secret,
            (None, Some(path)) => read_secret(path)?,
            _ => bail!(
                "[[credentials]] {:?}: set exactly one of secret_access_key and \
                 secret_access_key_file",
                spec.access_key_id
            ),
        };
        out.push(credential(
            spec.access_key_id,
            secret,
            spec.account_id,
            default_account,
        )?);
    }
    for flag in flags.iter().filter(|flag| !flag.is_empty()) {
        let mut parts = flag.splitn(3, ':');
        let (Some(id), Some(secret)) = (parts.next(), parts.next()) else {
            bail!("--credentials entries are ACCESS_KEY_ID:SECRET[:ACCOUNT_ID]");
        };
        let secret = match secret.strip_prefix('@') {
            Some(path) => read_secret(std::path::Path::new(path))?,
            None => secret.to_string(),
        };
        let account = parts.next().map(str::to_string);
        out.push(credential(
            id.to_string(),
            secret,
            account,
            default_account,
        )?);
    }
    let mut ids: Vec<&str> = out.iter().map(|c| &*c.access_key_id).collect();
    ids.sort_unstable();
    if let Some(pair) = ids.windows(2).find(|pair| pair[0] == pair[1]) {
        bail!("the access key id {:?} is configured twice", pair[0]);
    }
    Ok(out)
}

fn credential(
    access_key_id: String,
    secret: String,
    account_id: Option<String>,
    default_account: &str,
) -> anyhow::Result<Credential> {
    if access_key_id.is_empty()
        || access_key_id.len() > leaseq_sqs::sigv4::parse::ACCESS_KEY_ID_LENGTH_MAX
        || !access_key_id.bytes().all(|b| b.is_ascii_alphanumeric())
    {
        bail!("access_key_id {access_key_id:?} must be 1 to 128 letters and digits");
    }
    if secret.is_empty() {
        bail!("the secret of access key id {access_key_id:?} is empty");
    }
    let account_id = account_id.unwrap_or_else(|| default_account.to_string());
    check_account_id(&account_id)
        .with_context(|| format!("the account of access key id {access_key_id:?}"))?;
    Ok(Credential {
        access_key_id: access_key_id.into(),
        secret: Secret::new(secret),
        account_id: account_id.into(),
    })
}

/// Refuses settings that would expose every queue to anyone: no authentication beyond loopback
/// unless `allow_anonymous` says so, and `sigv4` without a key to sign with.
fn check_exposure(
    auth: AuthMode,
    allow_anonymous: bool,
    listen: SocketAddr,
    credentials: &[Credential],
) -> anyhow::Result<()> {
    match auth {
        AuthMode::None if !listen.ip().is_loopback() && !allow_anonymous => bail!(
            "refusing to listen on {listen} with auth = \"none\": anyone who can reach it could \
             read, send and delete every message. Set auth = \"sigv4\" with [[credentials]] \
             (--auth sigv4 --credentials, LEASEQ_AUTH, LEASEQ_CREDENTIALS), or \
             allow_anonymous = true (--allow-anonymous true, LEASEQ_ALLOW_ANONYMOUS) to serve \
             it unauthenticated anyway"
        ),
        AuthMode::SigV4 if credentials.is_empty() => bail!(
            "auth = \"sigv4\" needs at least one key: [[credentials]] in the config file or \
             --credentials (LEASEQ_CREDENTIALS)"
        ),
        _ => Ok(()),
    }
}

/// The bucket count of the PostgreSQL log, checked: 1 to `leaseq_postgres::BUCKETS_MAX` (the
/// flag's parser bounds it too, but not the TOML file).
fn postgres_buckets(buckets: Option<u16>) -> anyhow::Result<u32> {
    let buckets = buckets.map_or(1, u32::from);
    if !(1..=leaseq_postgres::BUCKETS_MAX).contains(&buckets) {
        bail!(
            "postgres_buckets must be 1 to {}, not {buckets}",
            leaseq_postgres::BUCKETS_MAX
        );
    }
    Ok(buckets)
}

fn parse_fsync(text: &str) -> anyhow::Result<FsyncPolicy> {
    match text {
        "always" => Ok(FsyncPolicy::Always),
        "never" => Ok(FsyncPolicy::Never),
        _ => match text.strip_prefix("interval=").map(str::parse::<u64>) {
            Some(Ok(ms)) if ms > 0 => Ok(FsyncPolicy::Interval(Duration::from_millis(ms))),
            _ => bail!("--fsync must be always, never or interval=<milliseconds>, not {text:?}"),
        },
    }
}

fn settings(args: ServeArgs) -> anyhow::Result<Settings> {
    let file: FileConfig = match &args.config {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading config file {}", path.display()))?;
            toml::from_str(&text)
                .with_context(|| format!("parsing config file {}", path.display()))?
        }
        None => FileConfig::default(),
    };
    let postgres = args.postgres.or(file.postgres);
    let in_memory = args.in_memory.or(file.in_memory).unwrap_or(false);
    if in_memory && postgres.is_some() {
        bail!("--in-memory and --postgres exclude each other: choose where the log lives");
    }
    let listen = args
        .listen
        .or(file.listen)
        .unwrap_or_else(|| SocketAddr::from(([127, 0, 0, 1], 9324)));
    let account_id = args
        .account_id
        .or(file.account_id)
        .unwrap_or_else(|| "000000000000".into());
    check_account_id(&account_id)?;
    let auth = match args.auth.or(file.auth).as_deref() {
        None | Some("none") => AuthMode::None,
        Some("sigv4") => AuthMode::SigV4,
        Some(other) => bail!("auth must be \"sigv4\" or \"none\", not {other:?}"),
    };
    let allow_anonymous = args
        .allow_anonymous
        .or(file.allow_anonymous)
        .unwrap_or(false);
    let credentials = credentials(file.credentials, args.credentials, &account_id)?;
    check_exposure(auth, allow_anonymous, listen, &credentials)?;
    let tls = match (
        args.tls_cert.or(file.tls_cert),
        args.tls_key.or(file.tls_key),
    ) {
        (None, None) => None,
        (Some(certificate), Some(key)) => Some(Arc::new(Tls::load(&certificate, &key)?)),
        (Some(_), None) | (None, Some(_)) => bail!(
            "tls_cert and tls_key go together: set both (--tls-cert and --tls-key, \
             LEASEQ_TLS_CERT and LEASEQ_TLS_KEY) to serve HTTPS, or neither"
        ),
    };
    let header_read_timeout = match args.header_read_timeout_ms.or(file.header_read_timeout_ms) {
        None => HEADER_READ_TIMEOUT_DEFAULT,
        Some(0) => bail!("header_read_timeout_ms must be at least 1"),
        Some(ms) => Duration::from_millis(ms),
    };
    let max_connections = match args.max_connections.or(file.max_connections) {
        None => MAX_CONNECTIONS_DEFAULT,
        Some(0) => bail!("max_connections must be at least 1"),
        Some(n) => usize::try_from(n).context("max_connections is too large")?,
    };
    let cluster = cluster::settings(cluster::Flags {
        cluster: args.cluster.or(file.cluster).unwrap_or(false),
        postgres: postgres.is_some(),
        tls: tls.is_some(),
        listen,
        node_id: args.node_id.or(file.node_id),
        advertise: args.advertise.or(file.advertise),
        cluster_listen: args.cluster_listen.or(file.cluster_listen),
        node_timeout_ms: args.node_timeout_ms.or(file.node_timeout_ms),
    })?;
    let postgres_buckets = postgres_buckets(args.postgres_buckets.or(file.postgres_buckets))?;
    if let Some(cluster_listen) = cluster.as_ref().and_then(|c| c.cluster_listen) {
        check_exposure(auth, allow_anonymous, cluster_listen, &credentials)?;
    }
    let mut queues = file.queues;
    queues.extend(args.queues.into_iter().map(|name| QueueSpec {
        name,
        ..QueueSpec::default()
    }));
    Ok(Settings {
        listen,
        data_dir: args
            .data_dir
            .or(file.data_dir)
            .unwrap_or_else(|| PathBuf::from("./leaseq-data")),
        region: args
            .region
            .or(file.region)
            .unwrap_or_else(|| "us-east-1".into()),
        account_id,
        external_url: args.external_url.or(file.external_url),
        reject_stale_deletes: args
            .reject_stale_deletes
            .or(file.reject_stale_deletes)
            .unwrap_or(false),
        fsync: parse_fsync(args.fsync.or(file.fsync).as_deref().unwrap_or("always"))?,
        postgres,
        postgres_schema: args
            .postgres_schema
            .or(file.postgres_schema)
            .unwrap_or_else(|| "leaseq".into()),
        postgres_flushes: match args.postgres_flushes.or(file.postgres_flushes) {
            Some(0) => bail!("postgres_flushes must be at least 1"),
            Some(flushes) => usize::from(flushes),
            None => leaseq_postgres::FLUSHES_IN_FLIGHT_DEFAULT,
        },
        postgres_buckets,
        cluster,
        in_memory,
        salvage: args.salvage.or(file.salvage).unwrap_or(false),
        checkpoint_bytes: args
            .checkpoint_bytes
            .or(file.checkpoint_bytes)
            .unwrap_or(leaseq_server::host::CHECKPOINT_LOG_BYTES_MIN),
        payload_cache_bytes: args
            .payload_cache_bytes
            .or(file.payload_cache_bytes)
            .unwrap_or(leaseq_core::PAYLOAD_CACHE_BYTES_DEFAULT),
        log: args.log.or(file.log).unwrap_or_else(|| "info".into()),
        metrics: args.metrics.or(file.metrics).unwrap_or(true),
        threads: match args.threads.or(file.threads) {
            Some(0) => bail!("threads must be at least 1"),
            threads => threads,
        },
        log_json: match args.log_format.or(file.log_format).as_deref() {
            None | Some("text") => false,
            Some("json") => true,
            Some(other) => bail!("log_format must be \"text\" or \"json\", not {other:?}"),
        },
        // The admin surface is never served over TLS: with auth or TLS on, it moves to plain
        // HTTP on loopback (see README, "Running in production").
        admin_listen: args
            .admin_listen
            .or(file.admin_listen)
            .or(match (auth, &tls) {
                (AuthMode::None, None) => None,
                _ => Some(SocketAddr::from(([127, 0, 0, 1], 9325))),
            }),
        auth,
        credentials,
        tls,
        header_read_timeout,
        max_connections,
        queues,
    })
}

/// Runs the server until SIGINT or SIGTERM.
pub fn run(args: ServeArgs) -> anyhow::Result<()> {
    let settings = settings(args)?;
    let filter = tracing_subscriber::EnvFilter::try_new(&settings.log)?;
    if settings.log_json {
        tracing_subscriber::fmt()
            .json()
            .with_env_filter(filter)
            .init();
    } else {
        // Colour codes only for a person at a terminal, not in files or collectors.
        use std::io::IsTerminal as _;
        tracing_subscriber::fmt()
            .with_ansi(std::io::stdout().is_terminal())
            .with_env_filter(filter)
            .init();
    }
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = settings.threads {
        runtime.worker_threads(usize::from(threads));
    }
    runtime.enable_all().build()?.block_on(serve(settings))
}

async fn serve(settings: Settings) -> anyhow::Result<()> {
    let service_config = ServiceConfig {
        engine: EngineConfig {
            reject_stale_deletes: settings.reject_stale_deletes,
            payload_cache_bytes: settings.payload_cache_bytes,
            ..EngineConfig::default()
        },
        region: settings.region.clone(),
        account_id: settings.account_id.clone(),
    };
    if settings.cluster.is_some() {
        return cluster::serve(settings, service_config).await;
    }
    let (_data_dir, service) = open_service(&settings, service_config)?;
    let metrics = settings.metrics.then(|| Arc::new(Metrics::default()));
    let service = Arc::new(match &metrics {
        Some(metrics) => service.with_metrics(metrics.clone()),
        None => service,
    });
    // Move tasks that were running when the server stopped resume here.
    tokio::spawn(service.clone().drive_moves());
    for queue in &settings.queues {
        create_queue(&service, queue)
            .await
            .with_context(|| format!("creating queue {:?} from the configuration", queue.name))?;
    }
    let reloads = match settings.tls.clone() {
        Some(tls) => Some(tokio::spawn(reload_on_hangup(tls)?)),
        None => None,
    };
    // The admin listener is bound before the main one, so that once the SQS port accepts
    // connections the admin port does too (whoever waits for the first may use the second).
    let admin_listener = bind_setting(settings.admin_listen, "admin_listen").await?;
    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .with_context(|| format!("listening on {}", settings.listen))?;
    let storage = if settings.postgres.is_some() {
        format!("log in PostgreSQL, schema {}", settings.postgres_schema)
    } else if settings.in_memory {
        "in memory only".to_string()
    } else {
        format!(
            "data in {}, fsync {:?}",
            settings.data_dir.display(),
            settings.fsync
        )
    };
    let auth = match settings.auth {
        AuthMode::None => "no authentication".to_string(),
        AuthMode::SigV4 => format!("SigV4 with {} keys", settings.credentials.len()),
    };
    let scheme = match settings.tls {
        Some(_) => "https",
        None => "http",
    };
    tracing::info!(
        "leaseq listening on {scheme}://{} (region {}, account {}, {storage}, {auth})",
        listener.local_addr()?,
        settings.region,
        settings.account_id,
    );
    let dashboard_routes = leaseq_server::dashboard::routes(service.clone());
    let (main_routes, admin) = match admin_listener {
        None => (dashboard_routes, None),
        Some(listener) => {
            tracing::info!(
                "dashboard, /api and /metrics on http://{} (admin_listen)",
                listener.local_addr()?
            );
            drop(dashboard_routes);
            let serving = tokio::spawn(leaseq_server::dashboard::serve_admin(
                listener,
                service.clone(),
            ));
            (Default::default(), Some(serving))
        }
    };
    let shutdown_service = service.clone();
    leaseq_server::http::serve(
        listener,
        service.clone(),
        HttpConfig {
            external_url: settings.external_url.clone(),
            region: settings.region.clone(),
            account_id: settings.account_id.clone(),
            request_body_max_bytes: 4 * 1024 * 1024,
            dashboard_page: settings.admin_listen.is_none(),
            node_id: None,
            auth: authenticator(&settings),
        },
        metrics,
        main_routes,
        Connections {
            tls: settings.tls.clone(),
            header_read_timeout: settings.header_read_timeout,
            max_connections: settings.max_connections,
            stats: service.connection_stats().clone(),
        },
        async move {
            shutdown_signal().await;
            tracing::info!("shutting down: answering requests in flight, releasing long polls");
            shutdown_service.shut_down();
        },
    )
    .await;
    if let Some(admin) = admin {
        admin.abort();
    }
    if let Some(reloads) = reloads {
        reloads.abort();
    }
    // A checkpoint at shutdown makes the next start replay (almost) nothing.
    if let Err(error) = service.hosts().checkpoint() {
        tracing::error!(%error, "final checkpoint failed; the next start replays the log");
    }
    tracing::info!("stopped");
    Ok(())
}

/// The SigV4 verifier of `auth = "sigv4"`, or `None`.
/// The listener of an optional address setting (`setting` names it in the error), bound now.
async fn bind_setting(
    address: Option<SocketAddr>,
    setting: &str,
) -> anyhow::Result<Option<tokio::net::TcpListener>> {
    let Some(address) = address else {
        return Ok(None);
    };
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .with_context(|| format!("listening on {address} ({setting})"))?;
    Ok(Some(listener))
}

fn authenticator(settings: &Settings) -> Option<Arc<Authenticator>> {
    match settings.auth {
        AuthMode::None => None,
        AuthMode::SigV4 => Some(Arc::new(Authenticator::new(
            Keys::new(settings.credentials.clone()),
            Arc::new(SystemClock),
        ))),
    }
}

/// Opens the service where the settings keep the log: PostgreSQL, nowhere (`--in-memory`) or the
/// data directory (whose lock the returned `DataDir` holds).
fn open_service(
    settings: &Settings,
    service_config: ServiceConfig,
) -> anyhow::Result<(Option<DataDir>, Service)> {
    Ok(if let Some(connection) = &settings.postgres {
        // Opening blocks (connect, migrate, recover) on the store's own runtime.
        let config = leaseq_postgres::PgConfig {
            schema: settings.postgres_schema.clone(),
            flushes_in_flight: settings.postgres_flushes,
            buckets: settings.postgres_buckets,
            ..leaseq_postgres::PgConfig::new(connection.clone())
        };
        let checkpoint_bytes = settings.checkpoint_bytes;
        let service = tokio::task::block_in_place(|| {
            leaseq_postgres::open_service(&config, service_config, checkpoint_bytes)
        })
        .context("opening the PostgreSQL log")?;
        (None, service)
    } else if settings.in_memory {
        tracing::warn!("--in-memory: nothing is kept on disk; a restart loses every message");
        (
            None,
            Service::in_memory(service_config, ReceiptKey::new(rand::random())),
        )
    } else {
        let options = leaseq_wal::Options {
            fsync: settings.fsync,
            salvage: settings.salvage,
            ..leaseq_wal::Options::default()
        };
        let (dir, service) = DataDir::open(
            &settings.data_dir,
            service_config,
            options,
            settings.checkpoint_bytes,
        )
        .with_context(|| format!("opening data directory {}", settings.data_dir.display()))?;
        (Some(dir), service)
    })
}

/// Creates a configured queue through the same decoder clients go through, so the file's
/// attribute names and values are checked exactly like a `CreateQueue` request's.
async fn create_queue(service: &Service, queue: &QueueSpec) -> anyhow::Result<()> {
    let body = serde_json::json!({
        "QueueName": queue.name,
        "Attributes": queue.attributes,
        "tags": queue.tags,
    })
    .to_string();
    let request = RawRequest {
        method: "POST",
        path: "/",
        query: None,
        target: Some("AmazonSQS.CreateQueue"),
        content_type: Some("application/x-amz-json-1.0"),
        body: body.as_bytes(),
    };
    let action: Action = match leaseq_sqs::decode(&request) {
        Ok((_, action, _)) => action,
        Err((_, error)) => bail!("{error}"),
    };
    service
        .execute(action, &Caller::default())
        .await
        .map_err(|error| anyhow::anyhow!("{error}"))?;
    Ok(())
}

/// Reads the TLS certificate and key again on every SIGHUP; a pair that does not load is
/// logged and the one in use kept. The handler is installed here, before the listener is
/// bound, so that no SIGHUP after the server answers can meet the default action (exit).
#[cfg(unix)]
fn reload_on_hangup(tls: Arc<Tls>) -> anyhow::Result<impl std::future::Future<Output = ()>> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hangups = signal(SignalKind::hangup()).context("installing the SIGHUP handler")?;
    Ok(async move {
        while hangups.recv().await.is_some() {
            match tls.reload() {
                Ok(()) => tracing::info!(
                    certificate = %tls.certificate_path().display(),
                    "SIGHUP: TLS certificate and key reloaded; new connections use them"
                ),
                Err(error) => tracing::error!(
                    %error,
                    "SIGHUP: TLS certificate and key not reloaded; still serving the previous pair"
                ),
            }
        }
    })
}

#[cfg(not(unix))]
fn reload_on_hangup(_tls: Arc<Tls>) -> anyhow::Result<impl std::future::Future<Output = ()>> {
    Ok(std::future::ready(()))
}

async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut terminate =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                .expect("installing the SIGTERM handler");
        tokio::select! {
            _ = interrupt => {}
            _ = terminate.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = interrupt.await;
}
