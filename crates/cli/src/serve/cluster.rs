//! `leaseq serve --cluster`: a node of a cluster on the PostgreSQL log. The node is a
//! [`ClusterNode`] (`leaseq_postgres::cluster`): it owns the log and runs the engine, or stands
//! by and forwards every SQS request to the node that does, taking over when that node dies.
//! This file starts it, serves its SQS listener and admin routes, and hands the log off on
//! SIGTERM before the listener drains, so that a rolling restart moves the log with a short
//! replay instead of a takeover after the node timeout.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context as _};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use leaseq_postgres::cluster::{ClusterConfig, ClusterNode};
use leaseq_postgres::{NodeIdentity, PgConfig};
use leaseq_server::http::Connections;
use leaseq_server::{Api, HttpConfig, Metrics, ServiceConfig};
use serde_json::json;

use super::{bind_setting, create_queue, shutdown_signal, Settings};

/// A cluster node's settings.
#[derive(Debug)]
pub(super) struct ClusterSettings {
    pub(super) node_id: String,
    pub(super) advertise: String,
    /// A plain-HTTP listener for the other nodes' forwards, besides `listen`.
    pub(super) cluster_listen: Option<SocketAddr>,
    pub(super) node_timeout: Duration,
}

/// The cluster flags as given, before they are checked.
pub(super) struct Flags {
    pub(super) cluster: bool,
    pub(super) postgres: bool,
    pub(super) tls: bool,
    pub(super) listen: SocketAddr,
    pub(super) node_id: Option<String>,
    pub(super) advertise: Option<String>,
    pub(super) cluster_listen: Option<SocketAddr>,
    pub(super) node_timeout_ms: Option<u64>,
}

/// The cluster settings, checked: a cluster keeps its log in PostgreSQL, and the other nodes
/// must be able to reach this one over plain HTTP.
pub(super) fn settings(flags: Flags) -> anyhow::Result<Option<ClusterSettings>> {
    let Flags {
        cluster,
        postgres,
        tls,
        listen,
        node_id,
        advertise,
        cluster_listen,
        node_timeout_ms,
    } = flags;
    if !cluster {
        if node_id.is_some()
            || advertise.is_some()
            || cluster_listen.is_some()
            || node_timeout_ms.is_some()
        {
            bail!(
                "node_id, advertise, cluster_listen and node_timeout_ms are settings of a cluster \
                 node: add --cluster true"
            );
        }
        return Ok(None);
    }
    if !postgres {
        bail!("a cluster keeps its log in PostgreSQL: --cluster needs --postgres");
    }
    if tls && cluster_listen.is_none() {
        bail!(
            "cluster nodes forward requests to each other over plain HTTP, which a TLS listener \
             does not speak: with tls_cert and tls_key, also set cluster_listen \
             (--cluster-listen host:port, a plain-HTTP listener on a private network) for the \
             other nodes"
        );
    }
    // Where peers forward to: the plain listener for them, or the SQS listener itself.
    let peer_listen = cluster_listen.unwrap_or(listen);
    let advertise = match advertise {
        Some(advertise) => advertise,
        None if peer_listen.ip().is_unspecified() => bail!(
            "{peer_listen} is a wildcard address, which other nodes cannot reach: set \
             --advertise host:port"
        ),
        None => peer_listen.to_string(),
    };
    if advertise.is_empty() || advertise.contains('/') || !advertise.contains(':') {
        bail!("--advertise must be host:port, not {advertise:?}");
    }
    let node_id = node_id.unwrap_or_else(|| advertise.clone());
    if node_id.is_empty() || node_id.len() > 128 || node_id.chars().any(|c| c.is_control()) {
        bail!("--node-id must be 1 to 128 printable characters, not {node_id:?}");
    }
    let node_timeout = Duration::from_millis(
        node_timeout_ms
            .unwrap_or(leaseq_postgres::cluster::NODE_TIMEOUT_DEFAULT.as_millis() as u64),
    );
    if node_timeout < leaseq_postgres::cluster::NODE_TIMEOUT_MIN {
        bail!(
            "node_timeout_ms must be at least {}",
            leaseq_postgres::cluster::NODE_TIMEOUT_MIN.as_millis()
        );
    }
    Ok(Some(ClusterSettings {
        node_id,
        advertise,
        cluster_listen,
        node_timeout,
    }))
}

/// Runs a cluster node until SIGINT or SIGTERM, then hands the log off (if it owns it) and
/// drains its connections.
pub(super) async fn serve(mut settings: Settings, service: ServiceConfig) -> anyhow::Result<()> {
    let cluster = settings
        .cluster
        .as_ref()
        .context("a cluster node's settings")?;
    let connection = settings
        .postgres
        .clone()
        .context("a cluster node's PostgreSQL")?;
    let metrics = settings.metrics.then(|| Arc::new(Metrics::default()));
    let config = ClusterConfig {
        log: PgConfig {
            schema: settings.postgres_schema.clone(),
            flushes_in_flight: settings.postgres_flushes,
            buckets: settings.postgres_buckets,
            node: Some(NodeIdentity {
                node_id: cluster.node_id.clone(),
                advertise: cluster.advertise.clone(),
            }),
            ..PgConfig::new(connection)
        },
        service,
        checkpoint_log_bytes_min: settings.checkpoint_bytes,
        node_timeout: cluster.node_timeout,
        metrics: metrics.clone(),
        clock: None,
    };
    let node = ClusterNode::new(config)?;
    // The admin and peer listeners are bound before the main one, so that once the SQS port
    // accepts connections the others do too (whoever waits for the first may use the others at
    // once: a test's `GET /api/cluster` on the admin port was refused, now and then, in the
    // moment between the two binds).
    let admin_listener = bind_setting(settings.admin_listen, "admin_listen").await?;
    let peer_listener = bind_setting(cluster.cluster_listen, "cluster_listen").await?;
    let listener = tokio::net::TcpListener::bind(settings.listen)
        .await
        .with_context(|| format!("listening on {}", settings.listen))?;
    let scheme = if settings.tls.is_some() {
        "https"
    } else {
        "http"
    };
    tracing::info!(
        "leaseq cluster node {} listening on {scheme}://{} (advertised to the other nodes as {}; \
         log in PostgreSQL, schema {}; node timeout {} ms)",
        cluster.node_id,
        listener.local_addr()?,
        cluster.advertise,
        settings.postgres_schema,
        cluster.node_timeout.as_millis(),
    );
    // Each takeover of a bucket starts the new service's move driver and creates the
    // configured queues of the bucket (again: CreateQueue with the same attributes changes
    // nothing).
    let queues = Arc::new(std::mem::take(&mut settings.queues));
    // A node that cannot join (its bucket count is not the log's) stops the server.
    let (failed, failure) = tokio::sync::oneshot::channel::<String>();
    let running = node.clone().run(move |service| {
        tokio::spawn(service.clone().drive_moves());
        let queues = queues.clone();
        tokio::spawn(async move {
            let ours = queues
                .iter()
                .filter(|queue| service.hosts().for_queue(&queue.name).is_some());
            for queue in ours {
                create_configured_queue(&service, queue).await;
            }
        });
    });
    let control = tokio::spawn(async move {
        if let Err(error) = running.await {
            let _ = failed.send(error.to_string());
        }
    });
    let admin = match admin_listener {
        None => None,
        Some(listener) => {
            let router = routes(node.clone())
                .route("/", get(|| async { leaseq_server::dashboard::page() }))
                .merge(leaseq_server::http::probes(node.clone()));
            Some(tokio::spawn(async move {
                if let Err(error) = axum::serve(listener, router).await {
                    tracing::error!(%error, "the admin listener failed");
                }
            }))
        }
    };
    let main_routes = match admin {
        None => routes(node.clone()),
        Some(_) => Router::new(),
    }
    .merge(bucket_calls(node.clone()));
    let http = HttpConfig {
        external_url: settings.external_url.clone(),
        region: settings.region.clone(),
        account_id: settings.account_id.clone(),
        request_body_max_bytes: 4 * 1024 * 1024,
        dashboard_page: settings.admin_listen.is_none(),
        auth: super::authenticator(&settings),
        node_id: Some(cluster.node_id.clone()),
    };
    let connections = Connections {
        tls: settings.tls.clone(),
        header_read_timeout: settings.header_read_timeout,
        max_connections: settings.max_connections,
        stats: node.connection_stats().clone(),
    };
    // The other nodes' forwards arrive here when `--listen` speaks TLS: the same API over
    // plain HTTP, stopped once the main listener has drained.
    let (peers_stop, peers_stopped) = tokio::sync::oneshot::channel::<()>();
    let peers = match peer_listener {
        None => None,
        Some(listener) => {
            tracing::info!(
                "the other nodes' forwards on http://{}",
                listener.local_addr()?
            );
            Some(tokio::spawn(leaseq_server::http::serve(
                listener,
                node.clone(),
                HttpConfig {
                    dashboard_page: false,
                    ..http.clone()
                },
                metrics.clone(),
                bucket_calls(node.clone()),
                Connections {
                    tls: None,
                    ..connections.clone()
                },
                async move {
                    let _ = peers_stopped.await;
                },
            )))
        }
    };
    let reloads = match settings.tls.clone() {
        Some(tls) => Some(tokio::spawn(super::reload_on_hangup(tls)?)),
        None => None,
    };
    let stopping = node.clone();
    let join_error = Arc::new(std::sync::Mutex::new(None::<String>));
    let join_failed = join_error.clone();
    leaseq_server::http::serve(
        listener,
        node.clone(),
        http,
        metrics,
        main_routes,
        connections,
        async move {
            tokio::select! {
                () = shutdown_signal() => {}
                Ok(error) = failure => {
                    *join_error.lock().expect("not poisoned") = Some(error);
                }
            }
            tracing::info!("shutting down: handing the log off, then answering requests in flight");
            stopping.shut_down();
            stopping.handed_off().await;
        },
    )
    .await;
    let _ = peers_stop.send(());
    if let Some(peers) = peers {
        let _ = peers.await;
    }
    control.abort();
    if let Some(admin) = admin {
        admin.abort();
    }
    if let Some(reloads) = reloads {
        reloads.abort();
    }
    if let Some(error) = join_failed.lock().expect("not poisoned").take() {
        bail!("{error}");
    }
    tracing::info!("stopped");
    Ok(())
}

/// Creates a configured queue of a bucket this node just took over. A `RedrivePolicy` naming a
/// queue of another bucket is checked on that bucket's owner, which may be taking its own
/// bucket over right now: tried again for a while.
async fn create_configured_queue(service: &leaseq_server::Service, queue: &super::QueueSpec) {
    let mut wait = Duration::from_millis(100);
    for attempt in 1..=10 {
        match create_queue(service, queue).await {
            Ok(()) => return,
            Err(error) if attempt == 10 => {
                tracing::error!(queue = queue.name, %error, "creating a configured queue");
            }
            Err(error) => {
                tracing::debug!(queue = queue.name, %error, "creating a configured queue; trying again");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(2));
            }
        }
    }
}

/// The bucket calls of the other nodes (`leaseq_server::service::bucket_wire`): answered if
/// this node owns the bucket, refused as not serving (the caller looks again) if not.
fn bucket_calls(node: Arc<ClusterNode>) -> Router {
    Router::new()
        .route(
            leaseq_server::service::bucket_wire::PATH,
            axum::routing::post(bucket_call),
        )
        .with_state(node)
}

async fn bucket_call(State(node): State<Arc<ClusterNode>>, body: axum::body::Bytes) -> Response {
    match node.answer_posted_call(&body).await {
        Ok(Some(answer)) => answer.into_response(),
        Ok(None) => (
            StatusCode::SERVICE_UNAVAILABLE,
            [(leaseq_server::http::forward::NOT_SERVING, "1")],
            "this node does not own the bucket",
        )
            .into_response(),
        Err(error) => (StatusCode::FORBIDDEN, error).into_response(),
    }
}

/// The admin routes of a cluster node: `GET /api/cluster` (this node's view of the cluster),
/// and the dashboard's routes over the buckets this node owns (`GET /metrics` with the node's
/// cluster lines, `GET /api/queues` listing the queues of its buckets, and the per-queue routes,
/// which a queue of a bucket another node owns answers 503).
fn routes(node: Arc<ClusterNode>) -> Router {
    Router::new()
        .route("/api/cluster", get(cluster_status))
        .with_state(node.clone())
        .merge(leaseq_server::dashboard::routes(node))
}

async fn cluster_status(State(node): State<Arc<ClusterNode>>) -> Response {
    let status = node.status();
    let owner = status
        .owner
        .map(|owner| json!({"node_id": owner.node_id, "advertise": owner.advertise}));
    let buckets: Vec<_> = node
        .bucket_owners()
        .into_iter()
        .zip(node.bucket_epochs())
        .map(|(owner, epoch)| json!({"owner": owner, "epoch": epoch}))
        .collect();
    axum::Json(json!({
        "node_id": status.node_id,
        "role": status.role,
        "epoch": status.epoch,
        "owner": owner,
        "buckets_owned": status.buckets_owned,
        "transfers_waiting": node.transfers_waiting(),
        "buckets": buckets,
        "takeovers": status.takeovers,
        "takeovers_after_release": status.takeovers_after_release,
        "step_downs": status.step_downs,
    }))
    .into_response()
}
