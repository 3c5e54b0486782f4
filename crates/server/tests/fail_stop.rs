//! When the log refuses a record the engine has already applied (here: a record over the log's
//! size limit, which does not poison the log), the server stops answering instead of serving a
//! state that a restart would not recover; after the restart the refused change is gone.

use std::path::Path;
use std::sync::Arc;

use leaseq_core::{EngineConfig, QueueConfigPatch, ReceiptKey, SendInput};
use leaseq_server::data_dir::recover;
use leaseq_server::{Api, Caller, Service, ServiceConfig};
use leaseq_sqs::{Action, ErrorCode, QueueRef};
use leaseq_wal::DirStorage;

fn open(dir: &Path) -> Service {
    let config = ServiceConfig {
        engine: EngineConfig::default(),
        region: "us-east-1".into(),
        account_id: "000000000000".into(),
    };
    let options = leaseq_wal::Options {
        record_size_max_bytes: 4096,
        ..leaseq_wal::Options::default()
    };
    let storage = Arc::new(DirStorage::new(dir).unwrap());
    recover(storage, config, ReceiptKey::new([3; 16]), options)
        .unwrap()
        .0
}

fn send(body: String) -> Action {
    Action::SendMessage {
        queue: QueueRef::new("q"),
        message: SendInput::body(body),
    }
}

#[tokio::test]
async fn an_unlogged_change_stops_the_server_until_restart() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fail-stop");
    let _ = std::fs::remove_dir_all(&dir);
    let backend = open(&dir);
    let caller = Caller::default();
    let create = Action::CreateQueue {
        name: "q".into(),
        attributes: QueueConfigPatch::default(),
        tags: Default::default(),
    };
    backend.execute(create, &caller).await.unwrap();
    backend
        .execute(send("small".into()), &caller)
        .await
        .unwrap();

    assert_eq!(backend.readiness(), Ok(()));
    let refused = backend.execute(send("x".repeat(8192)), &caller).await;
    assert_eq!(refused.unwrap_err().code, ErrorCode::ServiceUnavailable);
    // Everything after it is refused too, reads included.
    let again = backend.execute(send("small again".into()), &caller).await;
    assert_eq!(again.unwrap_err().code, ErrorCode::ServiceUnavailable);
    let list = Action::ListQueues {
        prefix: String::new(),
        max_results: None,
        next_token: None,
    };
    assert!(backend.execute(list, &caller).await.is_err());
    // GET /readyz says so (503), with the reason.
    let reason = backend.readiness().unwrap_err();
    assert!(reason.starts_with("the log failed"), "{reason}");
    drop(backend);

    let restarted = open(&dir);
    let info = restarted
        .hosts()
        .only()
        .engine()
        .queue_info(0, "q")
        .unwrap();
    assert_eq!(info.ready, 1, "only the acknowledged send survives");
    restarted
        .execute(send("after restart".into()), &caller)
        .await
        .unwrap();
}
