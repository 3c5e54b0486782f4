//! CPU time of SigV4 verification per request (`leaseq_sqs::sigv4::Keys::verify`), the cost
//! `auth = "sigv4"` adds to every request. The bar (issue "Safe to expose"): at most 3 µs.
//!
//! Workloads, each signed once by `aws-sigv4` (AWS's Rust signer) as the SDK signs it:
//! - `json_send`: a JSON `SendMessage` of a 256-byte body, headers as `aws-sdk-sqs` sends them;
//! - `json_send_batch10`: a JSON `SendMessageBatch` of 10 such messages (the body hash grows);
//! - `presigned_get`: a presigned Query `GET`.
//!
//! The signing key is cached after the first request (per key, day and region), so this is the
//! steady state: the body's SHA-256, the canonical request and its SHA-256, one HMAC.
//!
//! Wall-clock timings are noisy on a busy machine. For a deterministic count, run one workload
//! a fixed number of times under callgrind and divide the instructions of `run_workload` by the
//! count:
//! `LEASEQ_SIGV4_WORKLOAD=json_send LEASEQ_SIGV4_ITERATIONS=10000 valgrind --tool=callgrind
//! --toggle-collect='sigv4::run_workload' target/release/deps/sigv4-… --bench`.

use std::hint::black_box;
use std::time::{Duration, UNIX_EPOCH};

use aws_credential_types::Credentials;
use aws_sigv4::http_request::{
    sign, SignableBody, SignableRequest, SignatureLocation, SigningSettings,
};
use aws_sigv4::sign::v4;
use aws_smithy_runtime_api::client::identity::Identity;
use criterion::{Criterion, Throughput};
use leaseq_sqs::sigv4::canonical::HeaderList;
use leaseq_sqs::sigv4::{Credential, Keys, Request, Secret};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const KEY_ID: &str = "AKIAEXAMPLE1";
const SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
const NOW_MS: u64 = 1_796_126_400_000;

struct Signed {
    method: &'static str,
    path: String,
    query: Option<String>,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

fn signed(
    method: &'static str,
    uri: &str,
    headers: &[(&str, &str)],
    body: &[u8],
    presign: bool,
) -> Signed {
    let identity: Identity = Credentials::new(KEY_ID, SECRET, None, None, "bench").into();
    let mut settings = SigningSettings::default();
    if presign {
        settings.signature_location = SignatureLocation::QueryParams;
        settings.expires_in = Some(Duration::from_secs(900));
    }
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region("us-east-1")
        .name("sqs")
        .time(UNIX_EPOCH + Duration::from_millis(NOW_MS))
        .settings(settings)
        .build()
        .unwrap()
        .into();
    let request = SignableRequest::new(
        method,
        uri,
        headers.iter().copied(),
        SignableBody::Bytes(body),
    )
    .unwrap();
    let (instructions, _) = sign(request, &params).unwrap().into_parts();
    let (added_headers, added_params) = instructions.into_parts();
    let mut all: Vec<(String, String)> = headers
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
    for header in added_headers {
        all.push((header.name().to_string(), header.value().to_string()));
    }
    let after = uri.splitn(4, '/').nth(3).unwrap_or("");
    let (path, query) = match after.split_once('?') {
        Some((path, query)) => (format!("/{path}"), Some(query.to_string())),
        None => (format!("/{after}"), None),
    };
    let mut query: Vec<String> = query.into_iter().collect();
    for (name, value) in added_params {
        let encoded: String = value
            .bytes()
            .map(|b| {
                if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                    (b as char).to_string()
                } else {
                    format!("%{b:02X}")
                }
            })
            .collect();
        query.push(format!("{name}={encoded}"));
    }
    Signed {
        method,
        path,
        query: (!query.is_empty()).then(|| query.join("&")),
        headers: all,
        body: body.to_vec(),
    }
}

fn json_send(entries: usize) -> Signed {
    let payload = "x".repeat(256);
    let body = if entries == 1 {
        format!(
            r#"{{"QueueUrl":"http://localhost:9324/000000000000/bench","MessageBody":"{payload}"}}"#
        )
    } else {
        let list: Vec<String> = (0..entries)
            .map(|i| format!(r#"{{"Id":"m{i}","MessageBody":"{payload}"}}"#))
            .collect();
        format!(
            r#"{{"QueueUrl":"http://localhost:9324/000000000000/bench","Entries":[{}]}}"#,
            list.join(",")
        )
    };
    let target = if entries == 1 {
        "AmazonSQS.SendMessage"
    } else {
        "AmazonSQS.SendMessageBatch"
    };
    let length = body.len().to_string();
    signed(
        "POST",
        "http://localhost:9324/",
        &[
            ("host", "localhost:9324"),
            ("content-type", "application/x-amz-json-1.0"),
            ("content-length", &length),
            ("x-amz-target", target),
            ("user-agent", "aws-sdk-rust/1.3.9 os/linux lang/rust/1.89.0"),
            (
                "x-amz-user-agent",
                "aws-sdk-rust/1.3.9 api/sqs/1.119.0 os/linux lang/rust/1.89.0",
            ),
            (
                "amz-sdk-invocation-id",
                "a4b1c1de-53ab-4a44-b53d-0c8a4d3a9e21",
            ),
            ("amz-sdk-request", "attempt=1; max=1"),
        ],
        body.as_bytes(),
        false,
    )
}

/// This thread's user + system CPU time in ms, from `/proc/thread-self/stat` (Linux; clock
/// ticks of 10 ms), or 0 elsewhere. Unlike wall time, it leaves out the time other processes of
/// a busy machine held the CPU.
fn thread_cpu_ms() -> u64 {
    let Ok(stat) = std::fs::read_to_string("/proc/thread-self/stat") else {
        return 0;
    };
    // The fields after the command (which is in parentheses and may hold spaces).
    let Some((_, rest)) = stat.rsplit_once(')') else {
        return 0;
    };
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the whole line, 12 and 13 after the command.
    let ticks: u64 = [11, 12]
        .iter()
        .filter_map(|&i| fields.get(i).and_then(|f| f.parse::<u64>().ok()))
        .sum();
    ticks * 10
}

/// Verifies `request` `iterations` times (the function callgrind counts).
#[inline(never)]
fn run_workload(keys: &Keys, request: &Signed, iterations: usize) {
    let headers: Vec<(&str, &str)> = request
        .headers
        .iter()
        .map(|(n, v)| (n.as_str(), v.as_str()))
        .collect();
    let headers = HeaderList(&headers);
    for _ in 0..iterations {
        let verified = keys.verify(
            &Request {
                method: request.method,
                path: &request.path,
                query: request.query.as_deref(),
                authority: None,
                headers: &headers,
                body: &request.body,
            },
            NOW_MS,
        );
        assert!(black_box(verified).is_ok());
    }
}

fn main() {
    let keys = Keys::new([Credential {
        access_key_id: KEY_ID.into(),
        secret: Secret::new(SECRET),
        account_id: "111111111111".into(),
    }]);
    let workloads = [
        ("json_send", json_send(1)),
        ("json_send_batch10", json_send(10)),
        (
            "presigned_get",
            signed(
                "GET",
                "http://localhost:9324/000000000000/bench?Action=ReceiveMessage&Version=2012-11-05&MaxNumberOfMessages=10",
                &[("host", "localhost:9324")],
                b"",
                true,
            ),
        ),
    ];
    if let Ok(wanted) = std::env::var("LEASEQ_SIGV4_WORKLOAD") {
        let iterations: usize = std::env::var("LEASEQ_SIGV4_ITERATIONS")
            .ok()
            .and_then(|n| n.parse().ok())
            .unwrap_or(10_000);
        let (_, request) = workloads
            .iter()
            .find(|(name, _)| *name == wanted)
            .expect("LEASEQ_SIGV4_WORKLOAD names a workload");
        // Once outside the count: it derives and caches the signing key.
        run_workload(&keys, request, 1);
        let (cpu_before, wall) = (thread_cpu_ms(), std::time::Instant::now());
        run_workload(&keys, request, iterations);
        let cpu_ms = thread_cpu_ms().saturating_sub(cpu_before);
        println!(
            "{wanted}: {iterations} verifications, {:.2} µs of CPU each ({:.2} µs wall; the CPU \
             time is this thread's, in clock ticks, so run long enough)",
            cpu_ms as f64 * 1000.0 / iterations as f64,
            wall.elapsed().as_secs_f64() * 1e6 / iterations as f64,
        );
        return;
    }
    let mut criterion = Criterion::default().configure_from_args();
    let mut group = criterion.benchmark_group("sigv4_verify");
    group.throughput(Throughput::Elements(1));
    for (name, request) in &workloads {
        let headers: Vec<(&str, &str)> = request
            .headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.as_str()))
            .collect();
        let headers = HeaderList(&headers);
        let verify = || {
            keys.verify(
                &Request {
                    method: request.method,
                    path: &request.path,
                    query: request.query.as_deref(),
                    authority: None,
                    headers: &headers,
                    body: &request.body,
                },
                NOW_MS,
            )
        };
        verify().expect("the benchmark's request verifies");
        group.bench_function(*name, |bench| bench.iter(|| black_box(verify())));
    }
    group.finish();
    criterion.final_summary();
}
