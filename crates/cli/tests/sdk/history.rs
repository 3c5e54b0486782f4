//! Attempt history (`LeaseqGetMessageHistory`, `leaseq message history`): each attempt of a
//! message with its lease, how it ended and the client that received it, kept through a kill -9,
//! carried into the dead-letter queue and remembered after the delete.

use serde_json::{json, Value};

use super::*;

async fn history(server: &Server, queue_url: &str, message_id: &str) -> (u16, Value) {
    let body = json!({ "QueueUrl": queue_url, "MessageId": message_id }).to_string();
    let response = server
        .json("LeaseqGetMessageHistory", body.as_bytes())
        .await;
    (response.status, response.json())
}

fn outcomes(history: &Value) -> Vec<(u64, String)> {
    history["Attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|attempt| {
            (
                attempt["Attempt"].as_u64().unwrap(),
                attempt["Outcome"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[tokio::test]
async fn attempts_survive_a_crash_follow_the_message_into_the_dead_letter_queue_and_its_delete() {
    let mut server = Server::start().await;
    let dlq = create_queue(&server.client, "history-dlq", &[]).await;
    let dlq_arn = queue_arn(&server.client, &dlq).await;
    let policy = json!({ "deadLetterTargetArn": dlq_arn, "maxReceiveCount": 2 }).to_string();
    let queue = create_queue(
        &server.client,
        "history",
        &[(QueueAttributeName::RedrivePolicy, policy.as_str())],
    )
    .await;
    let sent = server
        .client
        .send_message()
        .queue_url(&queue)
        .message_body("job-42")
        .send()
        .await
        .unwrap();
    let id = sent.message_id().unwrap().to_string();
    let (status, never) = history(&server, &queue, &id).await;
    assert_eq!(status, 200, "{never}");
    assert_eq!(never["State"], "READY");
    assert_eq!(outcomes(&never), []);

    // Attempt 1 runs out; attempt 2 is extended, then released.
    let receive = |visibility: i32| {
        server
            .client
            .receive_message()
            .queue_url(&queue)
            .visibility_timeout(visibility)
            .wait_time_seconds(5)
            .send()
    };
    receive(1).await.unwrap();
    let second = receive(30).await.unwrap();
    let receipt = second.messages()[0].receipt_handle().unwrap().to_string();
    for seconds in [60, 0] {
        server
            .client
            .change_message_visibility()
            .queue_url(&queue)
            .receipt_handle(&receipt)
            .visibility_timeout(seconds)
            .send()
            .await
            .unwrap();
    }

    server.restart().await;
    let (status, found) = history(&server, &queue, &id).await;
    assert_eq!(status, 200, "{found}");
    assert_eq!(found["ApproximateReceiveCount"], 2);
    assert_eq!(
        outcomes(&found),
        [(1, "expired".to_string()), (2, "released".to_string())],
        "{found}"
    );
    let attempts = found["Attempts"].as_array().unwrap();
    for attempt in attempts {
        let agent = attempt["UserAgent"].as_str().unwrap();
        assert!(agent.contains("aws-sdk-rust"), "{agent}");
        let address = attempt["ClientAddress"].as_str().unwrap();
        assert!(address.starts_with("127.0.0.1:"), "{address}");
    }
    assert_eq!(attempts[0]["Extensions"], 0);
    assert_eq!(attempts[1]["Extensions"], 1);
    let ended = attempts[0]["EndedTimestamp"].as_u64().unwrap();
    assert_eq!(ended, attempts[0]["LeaseDeadline"].as_u64().unwrap());
    // Released: it ended before the deadline its receive gave it.
    assert!(attempts[1]["EndedTimestamp"].as_u64() < attempts[1]["FirstLeaseDeadline"].as_u64());

    // The third receive finds it spent: it moves to the dead-letter queue, history and all.
    let moved = server
        .client
        .receive_message()
        .queue_url(&queue)
        .send()
        .await
        .unwrap();
    assert!(moved.messages().is_empty());
    let (status, gone) = history(&server, &queue, &id).await;
    assert_eq!(status, 404, "{gone}");
    assert!(
        gone["__type"]
            .as_str()
            .unwrap()
            .contains("ResourceNotFound"),
        "{gone}"
    );
    let (_, in_dlq) = history(&server, &dlq, &id).await;
    assert_eq!(in_dlq["State"], "READY");
    assert!(
        in_dlq["DeadLetteredTimestamp"].as_u64().is_some(),
        "{in_dlq}"
    );
    assert!(in_dlq["DeadLetterQueueSourceArn"]
        .as_str()
        .unwrap()
        .ends_with(":history"));
    assert_eq!(outcomes(&in_dlq).len(), 2);

    // Received and deleted from the dead-letter queue: remembered as deleted.
    let from_dlq = server
        .client
        .receive_message()
        .queue_url(&dlq)
        .send()
        .await
        .unwrap();
    let receipt = from_dlq.messages()[0].receipt_handle().unwrap();
    server
        .client
        .delete_message()
        .queue_url(&dlq)
        .receipt_handle(receipt)
        .send()
        .await
        .unwrap();
    let (_, deleted) = history(&server, &dlq, &id).await;
    assert_eq!(deleted["State"], "DELETED");
    assert_eq!(
        outcomes(&deleted),
        [
            (1, "expired".to_string()),
            (2, "released".to_string()),
            (3, "deleted".to_string())
        ]
    );

    // The CLI shows the same.
    let output = crate::common::leaseq_command()
        .args(["message", "history", "history-dlq", &id])
        .args(["--endpoint", &server.endpoint])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{text} {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        text.contains("DELETED") && text.contains("dead-lettered from history"),
        "{text}"
    );
    let rows: Vec<&str> = text
        .lines()
        .skip_while(|l| !l.contains("attempt"))
        .skip(1)
        .collect();
    assert_eq!(rows.len(), 3, "{text}");
    assert!(
        rows[0].contains("expired") && rows[0].contains("aws-sdk-rust"),
        "{text}"
    );
}

#[tokio::test]
async fn a_bad_or_unknown_message_id_is_a_clear_error() {
    let server = Server::start().await;
    let queue = create_queue(&server.client, "history-errors", &[]).await;
    let (status, bad) = history(&server, &queue, "not-a-uuid").await;
    assert_eq!(status, 400);
    assert!(
        bad["__type"]
            .as_str()
            .unwrap()
            .contains("InvalidParameterValue"),
        "{bad}"
    );
    let unknown = "6f0c2c1e-8d4b-4b7e-9a51-3f1f1e0b6a11";
    let (status, missing) = history(&server, &queue, unknown).await;
    assert_eq!(status, 404);
    assert!(
        missing["message"].as_str().unwrap().contains(unknown),
        "{missing}"
    );
    let body = json!({ "QueueUrl": format!("{}/000000000000/nope", server.endpoint), "MessageId": unknown });
    let response = server
        .json("LeaseqGetMessageHistory", body.to_string().as_bytes())
        .await;
    assert_eq!(response.status, 400);
    assert!(response.json()["__type"]
        .as_str()
        .unwrap()
        .contains("QueueDoesNotExist"));
}
