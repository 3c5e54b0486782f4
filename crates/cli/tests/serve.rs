//! `leaseq serve` as an operator runs it: settings from a TOML file and `LEASEQ_*` variables,
//! queues created at start-up from the file, a graceful stop on SIGTERM that ends long polls and
//! writes a checkpoint, and a restart that finds every acknowledged message again.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use leaseq_testkit::http;
use leaseq_testkit::launch::{free_loopback_addr, ChildServer};
use leaseq_testkit::names::ScratchDir;
use serde_json::{json, Value};

fn scratch(name: &str) -> ScratchDir {
    ScratchDir::new(env!("CARGO_TARGET_TMPDIR"), &format!("serve-{name}"))
}

/// Starts the binary with `args` and `env`, which make it listen on `addr`, logging into
/// `dir`, and waits for `/health`.
async fn start(
    args: &[&str],
    env: &[(&str, &str)],
    dir: &ScratchDir,
    addr: SocketAddr,
) -> ChildServer {
    let mut command = common::serve_command().args(args).listening_on(addr);
    for (name, value) in env {
        command = command.env(name, value);
    }
    ChildServer::start(command, dir.path()).await
}

/// Starts the binary in memory with `args` and `env` on a free port (the launcher adds
/// `--listen`), logging into `dir`, and waits for `/health`.
async fn start_in_memory(args: &[&str], env: &[(&str, &str)], dir: &ScratchDir) -> ChildServer {
    let mut command = common::serve_command()
        .args(["--in-memory", "true"])
        .args(args);
    for (name, value) in env {
        command = command.env(name, value);
    }
    ChildServer::start(command, dir.path()).await
}

/// Runs `leaseq serve` with `args`, which must be refused before the server starts; returns
/// what it printed on stderr.
fn refused(args: &[&str]) -> String {
    common::refused_serve(args)
}

async fn call(addr: SocketAddr, action: &str, body: Value) -> (u16, Value) {
    let response = http::sqs_json(addr, action, &body).await;
    let parsed = serde_json::from_slice(&response.body).unwrap_or(Value::Null);
    (response.status, parsed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn config_file_env_graceful_stop_and_restart() {
    let dir = scratch("config");
    let addr = free_loopback_addr();
    let config = dir.path().join("leaseq.toml");
    std::fs::write(
        &config,
        format!(
            r#"
listen = "{addr}"
data_dir = "{data}"
account_id = "123456789012"
threads = 1

[[queues]]
name = "jobs-dlq"

[[queues]]
name = "jobs"
attributes = {{ VisibilityTimeout = "45", RedrivePolicy = '{{"deadLetterTargetArn":"arn:aws:sqs:eu-west-1:123456789012:jobs-dlq","maxReceiveCount":"3"}}', LeaseqRedeliveryBackoff = "1s,5s,30s,2m", LeaseqFairInFlightMin = "10" }}
tags = {{ team = "payments" }}
"#,
            data = dir.path().join("data").display()
        ),
    )
    .unwrap();
    let config_arg = config.to_str().unwrap();
    // The region comes from the environment, everything else from the file.
    let env = [("LEASEQ_REGION", "eu-west-1")];
    let mut server = start(&["--config", config_arg], &env, &dir, addr).await;
    assert!(server
        .log()
        .contains(&format!("leaseq listening on http://{addr}")));

    let url = format!("http://{addr}/123456789012/jobs");
    let (status, attributes) = call(
        addr,
        "GetQueueAttributes",
        json!({"QueueUrl": url, "AttributeNames": ["All"]}),
    )
    .await;
    assert_eq!(status, 200, "{attributes}");
    let attributes = &attributes["Attributes"];
    assert_eq!(attributes["VisibilityTimeout"], "45");
    assert_eq!(
        attributes["QueueArn"],
        "arn:aws:sqs:eu-west-1:123456789012:jobs"
    );
    let redrive: Value =
        serde_json::from_str(attributes["RedrivePolicy"].as_str().unwrap()).unwrap();
    assert_eq!(redrive["maxReceiveCount"], 3);
    let (_, tags) = call(addr, "ListQueueTags", json!({"QueueUrl": url})).await;
    assert_eq!(tags["Tags"]["team"], "payments");
    // leaseq's own attributes from [[queues]], returned when named.
    let names = ["LeaseqRedeliveryBackoff", "LeaseqFairInFlightMin"];
    let (status, leaseq) = call(
        addr,
        "GetQueueAttributes",
        json!({"QueueUrl": url, "AttributeNames": names}),
    )
    .await;
    assert_eq!(status, 200, "{leaseq}");
    assert_eq!(
        leaseq["Attributes"]["LeaseqRedeliveryBackoff"],
        "1s,5s,30s,2m"
    );
    assert_eq!(leaseq["Attributes"]["LeaseqFairInFlightMin"], "10");

    for i in 0..5 {
        let (status, _) = call(
            addr,
            "SendMessage",
            json!({"QueueUrl": url, "MessageBody": format!("m{i}")}),
        )
        .await;
        assert_eq!(status, 200);
    }
    // A long poll on an empty queue is in progress when the server is asked to stop.
    let empty_url = format!("http://{addr}/123456789012/jobs-dlq");
    let poll = tokio::spawn(async move {
        let started = Instant::now();
        let answer = call(
            addr,
            "ReceiveMessage",
            json!({"QueueUrl": empty_url, "WaitTimeSeconds": 20}),
        )
        .await;
        (answer, started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.terminate();
    let ((status, answer), waited) = poll.await.unwrap();
    assert_eq!(status, 200, "{answer}");
    assert!(answer.get("Messages").is_none());
    assert!(
        waited < Duration::from_secs(10),
        "the long poll lasted {waited:?}"
    );
    let exit = server.wait_exit().await;
    assert!(exit.success(), "{exit}: {}", server.log());
    let first_log = server.log();
    assert!(first_log.contains("checkpoint written"), "{first_log}");
    assert!(first_log.contains("stopped"), "{first_log}");

    // The restart recovers from the checkpoint, and the configured queues are not duplicated.
    server.start_again().await;
    let (_, listed) = call(addr, "ListQueues", json!({})).await;
    assert_eq!(listed["QueueUrls"].as_array().unwrap().len(), 2, "{listed}");
    let (_, attributes) = call(
        addr,
        "GetQueueAttributes",
        json!({"QueueUrl": url, "AttributeNames": ["ApproximateNumberOfMessages"]}),
    )
    .await;
    assert_eq!(attributes["Attributes"]["ApproximateNumberOfMessages"], "5");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_config_file_is_refused_with_a_clear_message() {
    let dir = scratch("bad-config");
    let config = dir.path().join("bad.toml");
    let config_arg = config.to_str().unwrap();
    std::fs::write(&config, "listen = \"127.0.0.1:1\"\nno_such_setting = 1\n").unwrap();
    let stderr = refused(&["--config", config_arg]);
    assert!(stderr.contains("no_such_setting"), "{stderr}");

    std::fs::write(
        &config,
        "[[queues]]\nname = \"q\"\nattributes = { VisibilityTimeout = \"99999\" }\n",
    )
    .unwrap();
    let stderr = refused(&[
        "--config",
        config_arg,
        "--in-memory",
        "true",
        "--listen",
        "127.0.0.1:0",
    ]);
    assert!(stderr.contains("VisibilityTimeout"), "{stderr}");

    // No threads to answer with: refused from the file and from the flag, before starting.
    std::fs::write(&config, "threads = 0\n").unwrap();
    let stderr = refused(&["--config", config_arg]);
    assert!(stderr.contains("threads must be at least 1"), "{stderr}");
    let stderr = refused(&["--threads", "0"]);
    assert!(stderr.contains("--threads"), "{stderr}");

    // Two places for the log: refused. PostgreSQL that cannot be reached: refused promptly.
    let stderr = refused(&["--in-memory", "true", "--postgres", "host=127.0.0.1 port=1"]);
    assert!(stderr.contains("exclude each other"), "{stderr}");
    std::fs::write(
        &config,
        "postgres = \"host=127.0.0.1 port=1 user=postgres\"\n",
    )
    .unwrap();
    let stderr = refused(&["--config", config_arg, "--listen", "127.0.0.1:0"]);
    assert!(stderr.contains("connecting to PostgreSQL"), "{stderr}");
}

/// A cluster node started with another bucket count than its log records stops, naming both,
/// instead of standing by for buckets it can never serve.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_node_of_another_bucket_count_than_its_log_stops() {
    let postgres = common::PostgresSchema::new(&format!("serve_buckets_{}", std::process::id()));
    let log = [
        "--postgres",
        postgres.connection.as_str(),
        "--postgres-schema",
        postgres.schema.as_str(),
        "--listen",
        "127.0.0.1:0",
    ];
    // A single node records the log's count (2); a cluster node of 3 then stops.
    let first = [&log[..], &["--postgres-buckets", "2"]].concat();
    let mut single = common::leaseq_command()
        .arg("serve")
        .args(first)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let recorded = Instant::now() + Duration::from_secs(10);
    // The count is recorded when the single node has opened the log; give it until then.
    loop {
        let status = leaseq_postgres::cluster::status::read(&postgres.connection, &postgres.schema);
        if status.is_ok_and(|status| status.buckets.len() == 2) {
            break;
        }
        assert!(
            Instant::now() < recorded,
            "the single node did not open the log"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    single.kill().unwrap();
    single.wait().unwrap();
    let cluster = [
        "--cluster",
        "true",
        "--node-id",
        "n1",
        "--advertise",
        "127.0.0.1:9",
        "--postgres-buckets",
        "3",
    ];
    let stderr = refused_at_once(&[&log[..], &cluster[..]].concat());
    assert!(
        stderr.contains("has 2 bucket(s)") && stderr.contains("started with 3"),
        "{stderr}"
    );
}

/// [`refused`], for a start that would otherwise not end (a cluster node waits for its
/// PostgreSQL): refused within 10 s, or killed and the test fails.
fn refused_at_once(args: &[&str]) -> String {
    let mut child = common::leaseq_command()
        .arg("serve")
        .args(args)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("leaseq serve {args:?} was not refused at start");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output().unwrap();
    assert!(!output.status.success(), "{output:?}");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_buckets_are_bounded() {
    let dir = scratch("postgres-buckets");
    let config = dir.path().join("buckets.toml");
    let config_arg = config.to_str().unwrap();
    // Out of bounds: from the flag (clap's range), the environment and the file.
    for count in ["0", "257"] {
        let stderr = refused(&["--postgres-buckets", count]);
        assert!(stderr.contains("--postgres-buckets"), "{stderr}");
    }
    let output = common::leaseq_command()
        .arg("serve")
        .env("LEASEQ_POSTGRES_BUCKETS", "300")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{output:?}");
    assert!(stderr.contains("--postgres-buckets"), "{stderr}");
    std::fs::write(&config, "postgres_buckets = 1000\n").unwrap();
    let stderr = refused(&["--config", config_arg]);
    assert!(
        stderr.contains("postgres_buckets must be 1 to 256, not 1000"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_log_stops_the_start_unless_salvage_is_asked_for() {
    let dir = scratch("corrupt");
    let addr = free_loopback_addr();
    let data = dir.path().join("data");
    let listen = addr.to_string();
    let args = [
        "--listen",
        listen.as_str(),
        "--data-dir",
        data.to_str().unwrap(),
    ];
    let mut server = start(&args, &[], &dir, addr).await;
    let url = format!("http://{addr}/000000000000/q");
    call(addr, "CreateQueue", json!({"QueueName": "q"})).await;
    for i in 0..50 {
        let body = json!({"QueueUrl": url, "MessageBody": format!("message {i}")});
        assert_eq!(call(addr, "SendMessage", body).await.0, 200);
    }
    server.stop().await;

    // Flip one byte in the middle of the log: damage followed by valid records is corruption,
    // not a torn tail.
    let segment = std::fs::read_dir(data.join("wal"))
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .find(|path| path.extension().is_some_and(|e| e == "wal"))
        .expect("a log segment");
    let mut bytes = std::fs::read(&segment).unwrap();
    // The middle of the records, not of the file: the log keeps zeros ahead of its records.
    let records_end = bytes.iter().rposition(|&byte| byte != 0).unwrap();
    let middle = records_end / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(&segment, &bytes).unwrap();
    let file_name = segment.file_name().unwrap().to_string_lossy().into_owned();

    let stderr = refused(&args);
    assert!(stderr.contains("corrupt log"), "{stderr}");
    assert!(stderr.contains(&file_name), "{stderr}");
    assert!(stderr.contains("at byte"), "{stderr}");

    // With --salvage the server starts; the checkpoint written at shutdown still has every
    // message.
    let salvage = [&args[..], &["--salvage", "true"]].concat();
    let mut server = start(&salvage, &[], &dir, addr).await;
    let (_, attributes) = call(
        addr,
        "GetQueueAttributes",
        json!({"QueueUrl": url, "AttributeNames": ["ApproximateNumberOfMessages"]}),
    )
    .await;
    assert_eq!(
        attributes["Attributes"]["ApproximateNumberOfMessages"],
        "50"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exposing_the_port_needs_authentication_or_an_explicit_yes() {
    // No authentication beyond loopback: refused, naming both ways out.
    let stderr = refused(&["--in-memory", "true", "--listen", "0.0.0.0:0"]);
    assert!(
        stderr.contains("auth") && stderr.contains("allow_anonymous"),
        "{stderr}"
    );
    let stderr = refused(&["--auth", "basic", "--in-memory", "true"]);
    assert!(
        stderr.contains("auth must be \"sigv4\" or \"none\""),
        "{stderr}"
    );
    let stderr = refused(&["--auth", "sigv4", "--in-memory", "true"]);
    assert!(stderr.contains("needs at least one key"), "{stderr}");
    let stderr = refused(&[
        "--auth",
        "sigv4",
        "--credentials",
        "AKIA1:s:12345",
        "--in-memory",
        "true",
    ]);
    assert!(stderr.contains("account_id must be 12 digits"), "{stderr}");
    let dir = scratch("exposure");
    let config = dir.path().join("leaseq.toml");
    let config_arg = config.to_str().unwrap();
    std::fs::write(
        &config,
        "auth = \"sigv4\"\n[[credentials]]\naccess_key_id = \"AKIA1\"\nsecret_access_key = \"x\"\nsecret_access_key_file = \"/nonexistent\"\n",
    )
    .unwrap();
    let stderr = refused(&["--config", config_arg, "--in-memory", "true"]);
    assert!(
        stderr.contains("exactly one of secret_access_key"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("\"x\""),
        "the secret is not repeated: {stderr}"
    );

    // allow_anonymous = true: it starts on every address.
    let addr = free_loopback_addr();
    let listen = format!("0.0.0.0:{}", addr.port());
    let mut server = start(
        &["--in-memory", "true", "--listen", &listen],
        &[("LEASEQ_ALLOW_ANONYMOUS", "true")],
        &dir,
        addr,
    )
    .await;
    let (status, _) = call(addr, "ListQueues", json!({})).await;
    assert_eq!(status, 200);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_from_the_config_file_a_secret_file_and_the_environment() {
    let dir = scratch("credentials");
    let addr = free_loopback_addr();
    let secret_file = dir.path().join("secret");
    std::fs::write(&secret_file, "file-secret\n").unwrap();
    let config = dir.path().join("leaseq.toml");
    std::fs::write(
        &config,
        format!(
            "auth = \"sigv4\"\nin_memory = true\nlisten = \"0.0.0.0:{port}\"\n\n\
             [[credentials]]\naccess_key_id = \"AKIAFILE\"\nsecret_access_key_file = \"{file}\"\n\
             account_id = \"111111111111\"\n",
            port = addr.port(),
            file = secret_file.display()
        ),
    )
    .unwrap();
    let mut server = start(
        &["--config", config.to_str().unwrap()],
        &[("LEASEQ_CREDENTIALS", "AKIAENV:env-secret:222222222222")],
        &dir,
        addr,
    )
    .await;
    let endpoint = format!("http://{addr}");
    let from_file = leaseq_testkit::sdk::sdk_client_signing(&endpoint, "AKIAFILE", "file-secret");
    from_file.list_queues().send().await.unwrap();
    let from_env = leaseq_testkit::sdk::sdk_client_signing(&endpoint, "AKIAENV", "env-secret");
    from_env.list_queues().send().await.unwrap();
    let wrong = leaseq_testkit::sdk::sdk_client_signing(&endpoint, "AKIAENV", "file-secret");
    assert!(wrong.list_queues().send().await.is_err());
    // Unsigned: refused.
    let (status, body) = call(addr, "ListQueues", json!({})).await;
    assert_eq!(status, 403, "{body}");
    // The log names the keys' count, never a secret.
    let log = server.log();
    assert!(log.contains("SigV4 with 2 keys"), "{log}");
    assert!(
        !log.contains("file-secret") && !log.contains("env-secret"),
        "{log}"
    );
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthcheck_exits_0_only_for_a_ready_server() {
    let dir = scratch("healthcheck");
    let mut server = start_in_memory(&[], &[], &dir).await;
    let addr = server.addr();
    let ready = common::healthcheck(&format!("http://{addr}"));
    assert!(ready.status.success(), "{ready:?}");
    assert_eq!(String::from_utf8_lossy(&ready.stdout).trim(), "ok");
    server.stop().await;
    // Nothing listens there now.
    let gone = common::healthcheck(&format!("http://{addr}"));
    assert!(!gone.status.success());
    assert!(
        String::from_utf8_lossy(&gone.stderr).contains("connecting to"),
        "{gone:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_keys_the_dashboard_is_only_on_the_admin_listener() {
    let dir = scratch("admin-listen");
    let admin = free_loopback_addr();
    let admin_listen = admin.to_string();
    let mut server = start_in_memory(
        &["--auth", "sigv4", "--admin-listen", &admin_listen],
        &[("LEASEQ_CREDENTIALS", "AKIAADMIN:admin-secret")],
        &dir,
    )
    .await;
    let addr = server.addr();
    let get = |address: std::net::SocketAddr, path: &'static str| async move {
        let mut connection = http::Connection::connect(address).await.unwrap();
        connection.send("GET", path, &[], b"").await.unwrap()
    };
    // The SQS port: the dashboard's paths are SQS requests, refused unsigned.
    for path in ["/", "/metrics", "/api/queues"] {
        let response = get(addr, path).await;
        assert_eq!(response.status, 403, "{path}: {}", response.text());
        assert!(
            response.text().contains("MissingAuthenticationToken"),
            "{path}"
        );
    }
    // The admin port: the page, the metrics and the JSON routes.
    let page = get(admin, "/").await;
    assert_eq!(page.status, 200);
    assert!(page.text().contains("<html"), "{}", page.text());
    assert_eq!(get(admin, "/metrics").await.status, 200);
    assert_eq!(get(admin, "/api/queues").await.status, 200);
    // Probes stay on the SQS port, unauthenticated.
    assert_eq!(get(addr, "/readyz").await.status, 200);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_are_json_lines_or_text_without_colour_codes() {
    let dir = scratch("log-format");
    let mut server = start_in_memory(&["--log-format", "json"], &[], &dir).await;
    server.stop().await;
    let log = server.log();
    let lines: Vec<&str> = log.lines().filter(|line| !line.is_empty()).collect();
    assert!(!lines.is_empty());
    for line in &lines {
        let object: Value = serde_json::from_str(line)
            .unwrap_or_else(|error| panic!("not a JSON line ({error}): {line}"));
        assert!(
            object["level"].is_string() && object["fields"]["message"].is_string(),
            "{line}"
        );
    }
    assert!(log.contains("leaseq listening on"), "{log}");
    // Text (the default) into a file: no colour codes.
    let mut server = start_in_memory(&[], &[], &dir).await;
    server.stop().await;
    let log = server.log();
    assert!(log.contains("leaseq listening on"), "{log}");
    assert!(!log.contains('\u{1b}'), "{log:?}");
    let stderr = refused(&["--log-format", "xml"]);
    assert!(stderr.contains("log_format must be"), "{stderr}");
}
