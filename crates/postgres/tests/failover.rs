//! A PostgreSQL failover under a leaseq cluster: the primary replicates synchronously to a
//! standby (`synchronous_standby_names`, `synchronous_commit = on`), two cluster nodes connect
//! with both hosts and `target_session_attrs=read-write`, producers send through both nodes,
//! and the primary crashes (`stop -m immediate`) and its standby is promoted. The nodes follow
//! the promotion by themselves (the owner loses its sessions and steps down, a node takes the
//! log over on the new primary), and at the end every acknowledged send is there: with a
//! synchronous standby, a COMMIT that PostgreSQL acknowledged (and so a reply leaseq gave) is on
//! the standby too (docs/design/cluster.md, "Deploying").
//!
//! Two PostgreSQL clusters of the test's own (`pg_createcluster`, dropped at the end); where the
//! machine cannot make them, the test says so and passes without running.

#[path = "common/cluster_node.rs"]
mod cluster_node;
mod common;
#[path = "common/pg_cluster.rs"]
mod pg_cluster;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::json;

use cluster_node::{call_at, Node};
use pg_cluster::Cluster;

const PRODUCERS: usize = 4;
/// Load before the primary crashes, and after an owner serves again.
const LOAD_BEFORE: Duration = Duration::from_millis(1_500);
const LOAD_AFTER: Duration = Duration::from_millis(1_000);
/// How long the nodes may take to serve again once the standby is promoted.
const RECOVERY_MAX: Duration = Duration::from_secs(30);
const SCHEMA: &str = "leaseq_failover";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_to_a_synchronous_standby_loses_nothing_acknowledged() {
    let settings = [
        "wal_level = replica",
        "max_wal_senders = 5",
        "synchronous_commit = on",
        "synchronous_standby_names = 'FIRST 1 (leaseq_standby)'",
    ];
    let Some(primary) =
        tokio::task::block_in_place(|| Cluster::create_with("failover_primary", &settings))
    else {
        return;
    };
    let standby =
        tokio::task::block_in_place(|| primary.standby("failover_standby", "leaseq_standby"));
    until_synchronous(&primary).await;

    let both = |name: &str| {
        format!(
            "host=127.0.0.1,127.0.0.1 port={},{} user=postgres dbname=postgres \
             target_session_attrs=read-write application_name={SCHEMA}_{name}",
            primary.port(),
            standby.port()
        )
    };
    let a = Node::start(&both("a"), SCHEMA, "a").await;
    a.until("a owns the log", |s| s.role == "owner").await;
    let b = Node::start(&both("b"), SCHEMA, "b").await;
    b.until("b knows a", |s| s.owner.is_some()).await;
    let created = a.call("CreateQueue", json!({"QueueName": "jobs"})).await;
    assert_eq!(created.status, 200, "{}", created.text());

    // Producers through both nodes; every 200 is an acknowledged send.
    let acknowledged = Arc::new(Mutex::new(HashSet::new()));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let addresses = [a.addr, b.addr];
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|producer| {
            let (acknowledged, stop) = (acknowledged.clone(), stop.clone());
            tokio::spawn(async move {
                let mut refused = 0u64;
                for i in 0u64.. {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        return refused;
                    }
                    let address = addresses[(i as usize + producer) % addresses.len()];
                    let body = format!("p{producer}-{i}");
                    let url = format!("http://{address}/000000000000/jobs");
                    let send = json!({"QueueUrl": url, "MessageBody": body});
                    let answer = call_at(address, "SendMessage", send).await;
                    if answer.status == 200 {
                        acknowledged.lock().insert(body);
                    } else {
                        refused += 1;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
                unreachable!()
            })
        })
        .collect();
    tokio::time::sleep(LOAD_BEFORE).await;
    let before = acknowledged.lock().len();

    tokio::task::block_in_place(|| {
        primary.crash();
        standby.ctl("promote");
    });
    let crashed = Instant::now();
    // An owner again (either node), on the promoted standby.
    let serving = loop {
        let owner = [&a, &b]
            .into_iter()
            .find(|node| node.status().role == "owner");
        if let Some(owner) = owner {
            let attributes = json!({"QueueUrl": "jobs", "AttributeNames": ["All"]});
            if owner.call("GetQueueAttributes", attributes).await.status == 200 {
                break crashed.elapsed();
            }
        }
        assert!(
            crashed.elapsed() < RECOVERY_MAX,
            "a: {:?}, b: {:?}",
            a.status(),
            b.status()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    tokio::time::sleep(LOAD_AFTER).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut refused = 0;
    for producer in producers {
        refused += producer.await.unwrap();
    }

    // Every acknowledged send is in the queue on the new primary.
    let owner = [&a, &b]
        .into_iter()
        .find(|node| node.status().role == "owner")
        .expect("an owner");
    let mut found = HashSet::new();
    loop {
        let receive =
            json!({"QueueUrl": "jobs", "MaxNumberOfMessages": 10, "VisibilityTimeout": 600});
        let answer = owner.call("ReceiveMessage", receive).await;
        assert_eq!(answer.status, 200, "{}", answer.text());
        let answer = answer.json();
        let Some(messages) = answer["Messages"].as_array().filter(|m| !m.is_empty()) else {
            break;
        };
        for message in messages {
            found.insert(message["Body"].as_str().unwrap().to_string());
        }
    }
    let acknowledged = acknowledged.lock();
    let lost: Vec<_> = acknowledged.difference(&found).take(10).collect();
    println!(
        "failover: {} sends acknowledged ({before} before the crash), {refused} refused, served \
         again {serving:?} after the crash, {} found",
        acknowledged.len(),
        found.len()
    );
    assert!(
        lost.is_empty(),
        "acknowledged sends lost in the failover: {lost:?}"
    );
    assert!(
        before > 50 && acknowledged.len() > before,
        "load ran on both sides"
    );
}

/// Waits until the primary reports its standby synchronous.
async fn until_synchronous(primary: &Cluster) {
    let connection = format!(
        "host=127.0.0.1 port={} user=postgres dbname=postgres",
        primary.port()
    );
    let client = common::client_of(&connection).await;
    let started = Instant::now();
    loop {
        let row = client
            .query_opt(
                "SELECT sync_state FROM pg_stat_replication WHERE application_name = 'leaseq_standby'",
                &[],
            )
            .await
            .unwrap();
        if row.is_some_and(|row| row.get::<_, String>(0) == "sync") {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the standby never became synchronous"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
