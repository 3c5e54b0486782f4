//! `leaseq dlq peek` and `leaseq redrive ...` against a real server: the runbook from a shell
//! (peek, canary, ramp up, finish).

mod common;

use aws_sdk_sqs::types::QueueAttributeName;
use common::Server;
use leaseq_testkit::names::unique_name;

fn leaseq(server: &Server, args: &[&str]) -> (bool, String) {
    let output = common::leaseq_command()
        .args(args)
        .args(["--endpoint", &server.endpoint])
        .output()
        .expect("run leaseq");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), text)
}

async fn visible(server: &Server, url: &str) -> String {
    server
        .client
        .get_queue_attributes()
        .queue_url(url)
        .attribute_names(QueueAttributeName::ApproximateNumberOfMessages)
        .send()
        .await
        .unwrap()
        .attributes()
        .unwrap()[&QueueAttributeName::ApproximateNumberOfMessages]
        .clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peek_canary_ramp_and_finish_from_the_cli() {
    let server = Server::start().await;
    let sqs = &server.client;
    let dlq_name = unique_name("cli-dlq");
    let dlq = sqs
        .create_queue()
        .queue_name(&dlq_name)
        .send()
        .await
        .unwrap();
    let dlq = dlq.queue_url().unwrap().to_string();
    let policy = format!(
        r#"{{"deadLetterTargetArn":"arn:aws:sqs:us-east-1:000000000000:{dlq_name}","maxReceiveCount":"1"}}"#
    );
    let source = sqs
        .create_queue()
        .queue_name(unique_name("cli-src"))
        .attributes(QueueAttributeName::RedrivePolicy, policy)
        .send()
        .await
        .unwrap();
    let source = source.queue_url().unwrap().to_string();
    for i in 0..5 {
        sqs.send_message()
            .queue_url(&source)
            .message_body(format!("job-{i}"))
            .send()
            .await
            .unwrap();
    }
    while visible(&server, &dlq).await != "5" {
        sqs.receive_message()
            .queue_url(&source)
            .max_number_of_messages(10)
            .visibility_timeout(0)
            .send()
            .await
            .unwrap();
    }

    // Peek, page by page; nothing is leased.
    let (ok, page) = leaseq(&server, &["dlq", "peek", &dlq_name, "--max", "2"]);
    assert!(ok, "{page}");
    assert_eq!(page.matches("receives=1").count(), 2, "{page}");
    assert!(page.contains("body=\"job-0\""), "{page}");
    assert!(page.contains("READY"), "{page}");
    assert!(page.contains("source=cli-src"), "{page}");
    assert!(page.contains("next: --after 2"), "{page}");
    let (ok, rest) = leaseq(&server, &["dlq", "peek", &dlq_name, "--after", "2"]);
    assert!(ok, "{rest}");
    assert_eq!(rest.matches("receives=1").count(), 3, "{rest}");
    assert!(!rest.contains("next:"), "{rest}");
    assert_eq!(visible(&server, &dlq).await, "5", "peek leased nothing");

    // A canary of two messages at one per second, watched until it pauses.
    let (ok, out) = leaseq(
        &server,
        &[
            "redrive", "start", &dlq_name, "--rate", "1", "--limit", "2", "--watch",
        ],
    );
    assert!(ok, "{out}");
    assert!(out.contains("PAUSED moved 2/5 rate=1/s limit=2"), "{out}");
    assert_eq!(visible(&server, &source).await, "2");
    let (ok, out) = leaseq(&server, &["redrive", "resume", &dlq_name]);
    assert!(
        !ok,
        "a canary at its limit resumes only with a new limit: {out}"
    );
    assert!(out.contains("limit"), "{out}");
    let (ok, out) = leaseq(&server, &["redrive", "pause", &dlq_name]);
    assert!(ok && out.contains("PAUSED"), "{out}");

    // Ramp up: no limit, the fastest rate; resume and watch it finish.
    let (ok, out) = leaseq(
        &server,
        &[
            "redrive", "update", &dlq_name, "--rate", "500", "--limit", "0",
        ],
    );
    assert!(ok, "{out}");
    assert!(out.contains("PAUSED moved 2/5 rate=500/s"), "{out}");
    assert!(!out.contains("limit="), "{out}");
    let (ok, out) = leaseq(&server, &["redrive", "resume", &dlq_name, "--watch"]);
    assert!(ok, "{out}");
    assert!(out.contains("COMPLETED moved 5/5"), "{out}");
    let (ok, out) = leaseq(&server, &["redrive", "status", &dlq_name]);
    assert!(ok && out.starts_with("COMPLETED moved 5/5"), "{out}");
    assert_eq!(visible(&server, &source).await, "5");
    assert_eq!(visible(&server, &dlq).await, "0");
    let (ok, out) = leaseq(&server, &["redrive", "cancel", &dlq_name]);
    assert!(
        !ok && out.contains("no running or paused move task"),
        "{out}"
    );
}
