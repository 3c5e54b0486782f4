//! `leaseq cluster status`: the cluster as PostgreSQL records it (buckets, their owners and
//! epochs, whether the owner's lock is held, what a takeover would replay, and the nodes with
//! the age of their last sign of life), read from the database, not from any node, so it works
//! whichever nodes are up.

use anyhow::Context as _;
use clap::{Args, Subcommand};
use serde_json::json;

/// `leaseq cluster ...`.
#[derive(Args, Debug)]
pub struct ClusterArgs {
    #[command(subcommand)]
    command: ClusterCommand,
}

#[derive(Subcommand, Debug)]
enum ClusterCommand {
    /// Show the buckets of the log and their owners, and the nodes.
    Status(StatusArgs),
}

#[derive(Args, Debug)]
struct StatusArgs {
    /// The cluster's PostgreSQL, as `leaseq serve --postgres` takes it.
    #[arg(long, env = "LEASEQ_POSTGRES")]
    postgres: String,
    /// The schema of the cluster's log [default: leaseq].
    #[arg(long, env = "LEASEQ_POSTGRES_SCHEMA", default_value = "leaseq")]
    postgres_schema: String,
    /// Print one JSON object instead of tables.
    #[arg(long)]
    json: bool,
}

/// Runs `leaseq cluster ...`.
pub fn run(args: ClusterArgs) -> anyhow::Result<()> {
    let ClusterCommand::Status(args) = args.command;
    let status = leaseq_postgres::cluster::status::read(&args.postgres, &args.postgres_schema)
        .context("reading the cluster's state from PostgreSQL")?;
    let owner_of = |node_id: &str| {
        status
            .buckets
            .iter()
            .filter(|bucket| bucket.lock_held && bucket.owner.as_deref() == Some(node_id))
            .count()
    };
    if args.json {
        let buckets: Vec<_> = status
            .buckets
            .iter()
            .map(|bucket| {
                json!({
                    "bucket": bucket.bucket,
                    "epoch": bucket.epoch,
                    "owner": bucket.owner,
                    "owner_advertise": bucket.owner_advertise,
                    "owned_for_seconds": bucket.owned_for_seconds,
                    "lock_held": bucket.lock_held,
                    "frames_since_snapshot": bucket.frames_since_snapshot,
                })
            })
            .collect();
        let nodes: Vec<_> = status
            .nodes
            .iter()
            .map(|node| {
                json!({
                    "node_id": node.node_id,
                    "advertise": node.advertise,
                    "started_seconds_ago": node.started_seconds_ago,
                    "seen_seconds_ago": node.seen_seconds_ago,
                    "buckets_owned": owner_of(&node.node_id),
                })
            })
            .collect();
        println!("{}", json!({"buckets": buckets, "nodes": nodes}));
        return Ok(());
    }
    println!(
        "{:<7} {:>7}  {:<20} {:<22} {:>10}  {:<9} {:>13}",
        "bucket", "epoch", "owner", "address", "owned for", "lock", "replay frames"
    );
    for bucket in &status.buckets {
        println!(
            "{:<7} {:>7}  {:<20} {:<22} {:>10}  {:<9} {:>13}",
            bucket.bucket,
            bucket.epoch,
            bucket.owner.as_deref().unwrap_or("(single node)"),
            bucket.owner_advertise.as_deref().unwrap_or("-"),
            bucket
                .owned_for_seconds
                .map_or("-".to_string(), |seconds| format!("{seconds:.1} s")),
            if bucket.lock_held { "held" } else { "NOT HELD" },
            bucket.frames_since_snapshot,
        );
    }
    println!();
    println!(
        "{:<20} {:<22} {:>12} {:>12} {:>7}",
        "node", "address", "started", "last seen", "owns"
    );
    for node in &status.nodes {
        println!(
            "{:<20} {:<22} {:>10.1} s {:>10.1} s {:>7}",
            node.node_id,
            node.advertise,
            node.started_seconds_ago,
            node.seen_seconds_ago,
            owner_of(&node.node_id),
        );
    }
    Ok(())
}
