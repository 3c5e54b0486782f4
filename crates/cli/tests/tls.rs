//! TLS on the SQS listener (`tls_cert`, `tls_key`): the SDK over HTTPS trusting a CA made at
//! test time, HTTP/2 and HTTP/1.1 keep-alive chosen by ALPN, `https://` queue URLs, the
//! certificate reloaded on SIGHUP without dropping an open connection, the start-up errors
//! of a half or broken configuration, and `leaseq healthcheck` over HTTPS.

mod common;
#[path = "common/pki.rs"]
mod pki;

use std::ffi::OsStr;
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::{Request, Version};
use hyper_util::rt::{TokioExecutor, TokioIo};
use leaseq_testkit::launch::{
    free_loopback_addr, ChildServer, InProcessServer, Options, ServeCommand,
};
use leaseq_testkit::names::ScratchDir;
use pki::{Ca, ServerPair};
use serde_json::Value;

fn scratch(name: &str) -> ScratchDir {
    ScratchDir::new(env!("CARGO_TARGET_TMPDIR"), &format!("tls-{name}"))
}

/// An in-process server with TLS from `pair`, its files in `dir`.
async fn tls_server(pair: &ServerPair, dir: &ScratchDir) -> InProcessServer {
    InProcessServer::start_with(Options {
        tls: Some(pair.write(dir.path())),
        ..Options::default()
    })
    .await
}

/// `leaseq serve` in memory with TLS from `certificate` and `key` on `--listen`, its admin
/// listener (plain HTTP) on `admin_listen`.
fn tls_serve(certificate: &Path, key: &Path, admin_listen: &str) -> ServeCommand {
    common::serve_command()
        .args(["--in-memory", "true", "--admin-listen", admin_listen])
        .args([OsStr::new("--tls-cert"), certificate.as_os_str()])
        .args([OsStr::new("--tls-key"), key.as_os_str()])
}

/// An AWS JSON 1.0 request of `action` with `body`.
fn json_request(action: &str, body: &Value) -> Request<Full<Bytes>> {
    Request::post("/")
        .header("host", "localhost")
        .header("content-type", "application/x-amz-json-1.0")
        .header("x-amz-target", format!("AmazonSQS.{action}"))
        .body(Full::new(Bytes::from(body.to_string())))
        .unwrap()
}

async fn json_body(response: hyper::Response<hyper::body::Incoming>) -> Value {
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    serde_json::from_slice(&bytes).unwrap_or_else(|_| panic!("not JSON: {bytes:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sdk_round_trips_over_https_trusting_a_custom_ca() {
    let dir = scratch("sdk");
    let ca = Ca::new("leaseq test CA");
    let server = tls_server(&ca.server_pair("leaseq"), &dir).await;
    assert!(
        server.endpoint().starts_with("https://"),
        "{}",
        server.endpoint()
    );
    let endpoint = format!("https://localhost:{}", server.addr().port());
    let sdk = pki::sdk_client_trusting(&endpoint, &ca.pem());
    let created = sdk.create_queue().queue_name("tls-jobs").send().await;
    let url = created.expect("CreateQueue over HTTPS").queue_url.unwrap();
    // Queue URLs keep the host the client used, with the scheme it used.
    assert_eq!(url, format!("{endpoint}/000000000000/tls-jobs"));
    sdk.send_message()
        .queue_url(&url)
        .message_body("over TLS")
        .send()
        .await
        .expect("SendMessage over HTTPS");
    let received = sdk
        .receive_message()
        .queue_url(&url)
        .send()
        .await
        .expect("ReceiveMessage over HTTPS");
    let messages = received.messages.unwrap_or_default();
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0].body.as_deref(), Some("over TLS"));
    sdk.delete_message()
        .queue_url(&url)
        .receipt_handle(messages[0].receipt_handle.clone().unwrap())
        .send()
        .await
        .expect("DeleteMessage over HTTPS");
    let listed = sdk.list_queues().send().await.unwrap();
    assert_eq!(listed.queue_urls.unwrap_or_default(), [url]);

    // The client really verifies: trusting another CA, the same request fails in the
    // handshake and never reaches the server.
    let stranger = Ca::new("someone else's CA");
    let untrusting = pki::sdk_client_trusting(&endpoint, &stranger.pem());
    let refused = untrusting.list_queues().send().await;
    assert!(refused.is_err(), "{refused:?}");
    // And the listener speaks nothing but TLS: a plain HTTP request gets no HTTP answer.
    let plain = leaseq_testkit::http::try_request(server.addr(), "GET", "/health", &[], b"").await;
    assert!(plain.is_err(), "{plain:?}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alpn_h2_is_http2_and_http1_keeps_its_connection_alive() {
    let dir = scratch("alpn");
    let ca = Ca::new("leaseq test CA");
    let server = tls_server(&ca.server_pair("leaseq"), &dir).await;

    // HTTP/2: a client that offers only h2 gets it (RFC 7301: the server picks from the
    // client's list), and several streams share the one connection.
    let stream = pki::connect(server.addr(), pki::client_config(&ca.pem(), &[b"h2"]))
        .await
        .unwrap();
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let (mut h2, connection) = hyper::client::conn::http2::handshake::<_, _, Full<Bytes>>(
        TokioExecutor::new(),
        TokioIo::new(stream),
    )
    .await
    .expect("an HTTP/2 handshake");
    tokio::spawn(connection);
    let body = serde_json::json!({ "QueueName": "h2-jobs" });
    let created = h2
        .send_request(json_request("CreateQueue", &body))
        .await
        .unwrap();
    assert_eq!(created.version(), Version::HTTP_2);
    assert_eq!(created.status(), 200);
    let url = json_body(created).await["QueueUrl"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(url, "https://localhost/000000000000/h2-jobs");
    let sends = (0..8).map(|i| {
        let mut h2 = h2.clone();
        let body = serde_json::json!({ "QueueUrl": url, "MessageBody": format!("m{i}") });
        async move { h2.send_request(json_request("SendMessage", &body)).await }
    });
    for sent in futures_join_all(sends).await {
        let sent = sent.expect("a SendMessage stream");
        assert_eq!(sent.status(), 200);
    }
    let attributes = serde_json::json!({
        "QueueUrl": url,
        "AttributeNames": ["ApproximateNumberOfMessages"],
    });
    let counted = h2
        .send_request(json_request("GetQueueAttributes", &attributes))
        .await
        .unwrap();
    assert_eq!(
        json_body(counted).await["Attributes"]["ApproximateNumberOfMessages"],
        "8"
    );

    // A client offering both gets the server's preference, h2 (rustls picks the first of
    // the server's list that the client offered).
    let both = pki::connect(
        server.addr(),
        pki::client_config(&ca.pem(), &[b"http/1.1", b"h2"]),
    )
    .await
    .unwrap();
    assert_eq!(both.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    // HTTP/1.1, for a client that offers only it, on a kept-alive connection.
    let stream = pki::connect(server.addr(), pki::client_config(&ca.pem(), &[b"http/1.1"]))
        .await
        .unwrap();
    assert_eq!(stream.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
    let mut h1 = pki::http1(stream).await;
    for _ in 0..3 {
        let (answer, body) =
            pki::exchange(&mut h1, json_request("ListQueues", &serde_json::json!({})))
                .await
                .expect("a request on the kept-alive connection");
        assert_eq!(answer.version(), Version::HTTP_11);
        assert_eq!(answer.status(), 200);
        assert!(answer.headers().get("connection").is_none());
        let listed: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(listed["QueueUrls"][0], url);
    }
    // A client that offers no ALPN at all speaks HTTP/1.1 (RFC 9113 §3.2: h2 over TLS only
    // by ALPN).
    let stream = pki::connect(server.addr(), pki::client_config(&ca.pem(), &[]))
        .await
        .unwrap();
    assert_eq!(stream.get_ref().1.alpn_protocol(), None);
    let mut bare = pki::http1(stream).await;
    let (answer, _) = pki::exchange(
        &mut bare,
        json_request("ListQueues", &serde_json::json!({})),
    )
    .await
    .unwrap();
    assert_eq!(answer.status(), 200);
    server.stop().await;
}

/// All of `futures`, concurrently.
async fn futures_join_all<F: std::future::Future + Send + 'static>(
    futures: impl Iterator<Item = F>,
) -> Vec<F::Output>
where
    F::Output: Send,
{
    let handles: Vec<_> = futures.map(tokio::spawn).collect();
    let mut out = Vec::new();
    for handle in handles {
        out.push(handle.await.unwrap());
    }
    out
}

/// Waits until `server`'s log holds `text` `count` times (or fails after 10 s).
async fn wait_for_log(server: &ChildServer, text: &str, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while server.log().matches(text).count() < count {
        assert!(
            Instant::now() < deadline,
            "no {text:?} in: {}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_pair_for_new_connections_and_keeps_open_ones() {
    let dir = scratch("reload");
    let ca = Ca::new("leaseq test CA");
    let first = ca.server_pair("first");
    let (certificate, key) = first.write(dir.path());
    // Not the default admin port (127.0.0.1:9325 with TLS), which may be taken.
    let command = tls_serve(&certificate, &key, "127.0.0.1:0");
    let server = ChildServer::start(command, dir.path()).await;
    assert!(server.endpoint().starts_with("https://"));
    assert!(
        server.log().contains("leaseq listening on https://"),
        "{}",
        server.log()
    );
    let config = pki::client_config(&ca.pem(), &[b"http/1.1"]);

    // A connection opened before the reload, kept alive across it.
    let stream = pki::connect(server.addr(), config).await.unwrap();
    assert_eq!(pki::peer_certificate(&stream), first.der);
    let mut open = pki::http1(stream).await;
    let list = || json_request("ListQueues", &serde_json::json!({}));
    assert_eq!(
        pki::exchange(&mut open, list()).await.unwrap().0.status(),
        200
    );

    let second = ca.server_pair("second");
    assert_ne!(second.der, first.der);
    second.write(dir.path());
    server.signal("HUP");
    wait_for_log(&server, "TLS certificate and key reloaded", 1).await;

    // The open connection goes on (the same hyper connection: a closed one would fail here).
    let (answer, _) = pki::exchange(&mut open, list())
        .await
        .expect("the open connection");
    assert_eq!(answer.status(), 200);
    // A new one sees the new certificate: a client without a session to resume (one that
    // resumes its session keeps the identity that session was made with, as TLS has it).
    let fresh = || pki::client_config(&ca.pem(), &[b"http/1.1"]);
    let stream = pki::connect(server.addr(), fresh()).await.unwrap();
    assert_eq!(pki::peer_certificate(&stream), second.der);

    // A reload that fails (a key that is not PEM) keeps the pair in use, and says so.
    std::fs::write(&key, "not a key").unwrap();
    server.signal("HUP");
    wait_for_log(&server, "TLS certificate and key not reloaded", 1).await;
    assert!(
        server.log().contains("holds no usable PEM private key"),
        "{}",
        server.log()
    );
    let stream = pki::connect(server.addr(), fresh()).await.unwrap();
    assert_eq!(pki::peer_certificate(&stream), second.der);
    // And a key of another certificate is refused as not belonging to it.
    std::fs::write(&key, &first.key_pem).unwrap();
    server.signal("HUP");
    wait_for_log(&server, "TLS certificate and key not reloaded", 2).await;
    assert!(
        server.log().contains("does not belong to the certificate"),
        "{}",
        server.log()
    );
    let stream = pki::connect(server.addr(), fresh()).await.unwrap();
    assert_eq!(pki::peer_certificate(&stream), second.der);
    assert_eq!(
        pki::exchange(&mut open, list()).await.unwrap().0.status(),
        200
    );
}

/// `leaseq serve` (in memory, on a free port) with `args`: it must fail to start; its stderr.
fn refused_start(args: &[&OsStr]) -> String {
    let base = ["--in-memory", "true", "--listen", "127.0.0.1:0"].map(OsStr::new);
    common::refused_serve(base.iter().chain(args))
}

#[test]
fn a_half_or_broken_tls_configuration_stops_the_start() {
    let dir = scratch("refused");
    let ca = Ca::new("leaseq test CA");
    let pair = ca.server_pair("leaseq");
    let (certificate, key) = pair.write(dir.path());
    let (certificate, key) = (certificate.as_os_str(), key.as_os_str());
    let flag = |name: &'static str| OsStr::new(name);

    let alone = refused_start(&[flag("--tls-cert"), certificate]);
    assert!(
        alone.contains("tls_cert and tls_key go together"),
        "{alone}"
    );
    let alone = refused_start(&[flag("--tls-key"), key]);
    assert!(
        alone.contains("tls_cert and tls_key go together"),
        "{alone}"
    );

    let missing = dir.path().join("missing.pem");
    let unreadable = refused_start(&[
        flag("--tls-cert"),
        missing.as_os_str(),
        flag("--tls-key"),
        key,
    ]);
    assert!(
        unreadable.contains("reading the TLS certificate file"),
        "{unreadable}"
    );
    assert!(unreadable.contains("missing.pem"), "{unreadable}");

    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "-----BEGIN CERTIFICATE-----\nnot base64!\n").unwrap();
    let invalid = refused_start(&[
        flag("--tls-cert"),
        garbage.as_os_str(),
        flag("--tls-key"),
        key,
    ]);
    assert!(invalid.contains("holds no PEM certificate"), "{invalid}");
    // A key file that holds a certificate is not a key.
    let not_a_key = refused_start(&[
        flag("--tls-cert"),
        certificate,
        flag("--tls-key"),
        certificate,
    ]);
    assert!(
        not_a_key.contains("holds no usable PEM private key"),
        "{not_a_key}"
    );
    // A key of another pair.
    let other = dir.path().join("other-key.pem");
    std::fs::write(&other, ca.server_pair("other").key_pem).unwrap();
    let mismatch = refused_start(&[
        flag("--tls-cert"),
        certificate,
        flag("--tls-key"),
        other.as_os_str(),
    ]);
    assert!(
        mismatch.contains("does not belong to the certificate"),
        "{mismatch}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_tls_the_probes_and_the_dashboard_are_on_the_plain_admin_listener() {
    let dir = scratch("admin");
    let ca = Ca::new("leaseq test CA");
    let (certificate, key) = ca.server_pair("leaseq").write(dir.path());
    let admin = free_loopback_addr();
    let command = tls_serve(&certificate, &key, &admin.to_string());
    let mut server = ChildServer::start(command, dir.path()).await;
    for path in ["/readyz", "/livez", "/metrics", "/"] {
        let answer = leaseq_testkit::http::request(admin, "GET", path, &[], b"").await;
        assert_eq!(answer.status, 200, "{path}: {answer:?}");
    }
    let ready = common::healthcheck(&format!("http://{admin}"));
    assert!(ready.status.success(), "{ready:?}");
    assert_eq!(String::from_utf8_lossy(&ready.stdout).trim(), "ok");
    // The TLS listener itself needs the CA (`leaseq_healthcheck_asks_a_tls_listener`).
    let https = common::healthcheck(&server.endpoint());
    assert!(!https.status.success());
    let stderr = String::from_utf8_lossy(&https.stderr);
    assert!(stderr.contains("needs --ca-bundle"), "{https:?}");
    assert!(stderr.contains("ask the admin listener"), "{https:?}");
    server.stop().await;
}

/// `leaseq healthcheck` with `args` against `endpoint`, off the test's runtime (the server is
/// in this process): whether it succeeded, and what it printed (stdout, or stderr).
async fn healthcheck(endpoint: String, args: Vec<std::ffi::OsString>) -> (bool, String) {
    let output = tokio::task::spawn_blocking(move || {
        let args: Vec<&OsStr> = args.iter().map(|arg| arg.as_os_str()).collect();
        common::healthcheck_with(&endpoint, &args)
    })
    .await
    .unwrap();
    let printed = if output.status.success() {
        &output.stdout
    } else {
        &output.stderr
    };
    let printed = String::from_utf8_lossy(printed).trim().to_string();
    (output.status.success(), printed)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaseq_healthcheck_asks_a_tls_listener() {
    let dir = scratch("healthcheck");
    let ca = Ca::new("leaseq test CA");
    let server = tls_server(&ca.server_pair("leaseq"), &dir).await;
    let bundle = dir.path().join("ca.pem");
    std::fs::write(&bundle, ca.pem()).unwrap();
    let trusting = || vec!["--ca-bundle".into(), bundle.clone().into_os_string()];
    let port = server.addr().port();
    // By name and by address: the certificate names both.
    for endpoint in [
        format!("https://localhost:{port}"),
        format!("https://127.0.0.1:{port}"),
    ] {
        let (ready, printed) = healthcheck(endpoint.clone(), trusting()).await;
        assert!(ready, "{endpoint}: {printed}");
        assert_eq!(printed, "ok");
    }
    let mut livez = trusting();
    livez.extend(["--path".into(), "/livez".into()]);
    let (live, printed) = healthcheck(server.endpoint().to_string(), livez).await;
    assert!(live, "{printed}");

    // It really verifies: trusting another CA, the handshake fails.
    let stranger = dir.path().join("stranger.pem");
    std::fs::write(&stranger, Ca::new("someone else's CA").pem()).unwrap();
    let untrusting = vec!["--ca-bundle".into(), stranger.into_os_string()];
    let (ready, printed) = healthcheck(server.endpoint().to_string(), untrusting).await;
    assert!(!ready);
    assert!(printed.contains("TLS with"), "{printed}");
    // A bundle without a certificate is refused as such.
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "").unwrap();
    let empty = vec!["--ca-bundle".into(), empty.into_os_string()];
    let (ready, printed) = healthcheck(server.endpoint().to_string(), empty).await;
    assert!(!ready);
    assert!(printed.contains("holds no certificate"), "{printed}");
    // Plain HTTP to a TLS listener gets no HTTP answer.
    let plain = server.endpoint().replace("https://", "http://");
    let (ready, _) = healthcheck(plain, vec![]).await;
    assert!(!ready);
    // And a not-ready server is reported as such over TLS too: 503 once draining.
    server.release_long_polls();
    let (ready, printed) = healthcheck(server.endpoint().to_string(), trusting()).await;
    assert!(!ready, "{printed}");
    assert!(printed.contains("answered 503"), "{printed}");
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_and_limits_from_the_config_file_and_the_environment() {
    let dir = scratch("settings");
    let ca = Ca::new("leaseq test CA");
    let (certificate, key) = ca.server_pair("leaseq").write(dir.path());
    let config = dir.path().join("leaseq.toml");
    std::fs::write(
        &config,
        format!(
            "in_memory = true\nadmin_listen = \"127.0.0.1:0\"\ntls_cert = {:?}\ntls_key = {:?}\n\
             max_connections = 1\n",
            certificate.display().to_string(),
            key.display().to_string(),
        ),
    )
    .unwrap();
    let command = common::serve_command()
        .args(["--config".as_ref(), config.as_os_str()])
        .env("LEASEQ_HEADER_READ_TIMEOUT_MS", "400")
        .https();
    let server = ChildServer::start(command, dir.path()).await;
    assert!(
        server.log().contains("leaseq listening on https://"),
        "{}",
        server.log()
    );
    // LEASEQ_HEADER_READ_TIMEOUT_MS: a silent connection is closed (it took the one slot of
    // max_connections = 1 until then).
    let mut silent = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
    let mut buffer = [0u8; 64];
    let read = tokio::time::timeout(
        Duration::from_secs(10),
        tokio::io::AsyncReadExt::read(&mut silent, &mut buffer),
    )
    .await;
    assert!(matches!(read, Ok(Ok(0)) | Ok(Err(_))), "{read:?}");
    // max_connections = 1 from the file: with one TLS connection open, a second one's
    // handshake waits (its connection is not accepted) until the first closes.
    let config = || pki::client_config(&ca.pem(), &[b"http/1.1"]);
    let first = pki::connect(server.addr(), config()).await.unwrap();
    let mut first = pki::http1(first).await;
    let list = || json_request("ListQueues", &serde_json::json!({}));
    assert_eq!(
        pki::exchange(&mut first, list()).await.unwrap().0.status(),
        200
    );
    let second = tokio::spawn(pki::connect(server.addr(), config()));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !second.is_finished(),
        "a second connection was served beside the first"
    );
    drop(first);
    let second = tokio::time::timeout(Duration::from_secs(10), second).await;
    let second = second.expect("accepted once the first closed").unwrap();
    assert!(second.is_ok(), "{second:?}");
}
