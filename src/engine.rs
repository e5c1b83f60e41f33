//! `Engine`: the facade the CLI and the daemon use. It owns the settings and the kube clients
//! (built on first use, so `Engine::new` does no network I/O) and ties prepare, drain, restore,
//! the Node Events and the last report together.

use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Node;
use kube::config::Kubeconfig;
use tokio::sync::OnceCell;
use tokio::time::Instant;

use crate::client::{self, ApiError, ClientError, Clients};
use crate::config::Settings;
use crate::drain::{self, DrainOptions};
use crate::events::{NodeEvents, Reason as EventReason};
use crate::node::{self, Marker, NodeError, NodeOps};
use crate::plan::Plan;
use crate::report::{Report, ReportError};

pub use crate::node::{PrepareOutcome, RestoreOutcome};

/// An engine operation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error(transparent)]
    Node(#[from] NodeError),
    #[error("cannot list the pods of node {node}: {source}")]
    ListPods { node: String, source: ApiError },
    #[error(transparent)]
    Report(#[from] ReportError),
}

impl Error {
    /// The API server could not be reached.
    pub fn is_unreachable(&self) -> bool {
        match self {
            Error::Node(e) => e.is_unreachable(),
            Error::ListPods { source, .. } => source.is_unreachable(),
            _ => false,
        }
    }

    /// The Node object does not exist.
    pub fn is_node_missing(&self) -> bool {
        matches!(self, Error::Node(NodeError::Missing { .. }))
    }

    /// The kubeconfig is unusable (a configuration problem).
    pub fn is_config(&self) -> bool {
        matches!(self, Error::Client(_))
    }
}

/// The API server URL of the kubeconfig's current context, the one `client::connect` uses; for
/// messages that must name the server.
fn server_url(kubeconfig: &Kubeconfig) -> String {
    let cluster = kubeconfig
        .current_context
        .as_ref()
        .and_then(|name| kubeconfig.contexts.iter().find(|c| &c.name == name))
        .and_then(|c| c.context.as_ref())
        .map(|c| c.cluster.as_str());
    cluster
        .and_then(|name| kubeconfig.clusters.iter().find(|c| c.name == name))
        .and_then(|c| c.cluster.as_ref())
        .and_then(|c| c.server.clone())
        .unwrap_or_else(|| "(no server in the kubeconfig's current context)".to_string())
}

/// The facade. Cheap to share behind an `Arc`.
pub struct Engine {
    settings: Arc<Settings>,
    kubeconfig: Kubeconfig,
    clients: OnceCell<Clients>,
    why: Mutex<String>,
}

impl Engine {
    /// Reads the kubeconfig (a bad one is an error here); no network I/O.
    pub fn new(settings: Arc<Settings>) -> Result<Engine, Error> {
        let kubeconfig = client::read_kubeconfig(&settings.kubeconfig)?;
        Ok(Engine {
            settings,
            kubeconfig,
            clients: OnceCell::new(),
            why: Mutex::new("drain".to_string()),
        })
    }

    pub fn settings(&self) -> &Arc<Settings> {
        &self.settings
    }

    /// The clients, built on first use.
    pub async fn clients(&self) -> Result<&Clients, Error> {
        self.clients
            .get_or_try_init(|| {
                client::connect(
                    self.kubeconfig.clone(),
                    &self.settings.kubeconfig,
                    self.settings.request_timeout,
                )
            })
            .await
            .map_err(Error::from)
    }

    async fn ops(&self) -> Result<NodeOps<'_>, Error> {
        Ok(NodeOps {
            clients: self.clients().await?,
            settings: &self.settings,
        })
    }

    /// The current boot ID (from `settings.boot_id_path`).
    pub fn boot_id(&self) -> Result<String, Error> {
        Ok(node::read_boot_id(&self.settings.boot_id_path)?)
    }

    /// Reads the Node.
    pub async fn node(&self) -> Result<Node, Error> {
        Ok(self.ops().await?.get().await?)
    }

    /// Marker first, then the taint, then the cordon; transient failures are retried for up to
    /// the configured drain timeout ([`Engine::prepare_by`] takes a deadline).
    pub async fn prepare(&self, why: &str) -> Result<PrepareOutcome, Error> {
        self.prepare_by(why, Instant::now() + self.settings.drain.timeout)
            .await
    }

    /// [`Engine::prepare`], retrying transient failures (no answer, 5xx) until `deadline`.
    pub async fn prepare_by(&self, why: &str, deadline: Instant) -> Result<PrepareOutcome, Error> {
        let boot_id = self.boot_id()?;
        *self.why.lock().unwrap_or_else(|p| p.into_inner()) = why.to_string();
        Ok(self.ops().await?.prepare(why, &boot_id, deadline).await?)
    }

    /// What a drain would do now. Changes nothing.
    pub async fn plan(&self) -> Result<Plan, Error> {
        let clients = self.clients().await?;
        drain::plan(clients, &self.settings)
            .await
            .map_err(|source| Error::ListPods {
                node: self.settings.node_name.clone(),
                source,
            })
    }

    /// Drains the node; returns by `deadline`, always, and stores the report as the last report.
    pub async fn drain(&self, deadline: Instant) -> Report {
        let why = self.why.lock().unwrap_or_else(|p| p.into_inner()).clone();
        self.drain_with(
            deadline,
            DrainOptions {
                why,
                dry_run: false,
            },
        )
        .await
    }

    /// [`Engine::drain`] with options (`dry_run` changes nothing and stores no report).
    pub async fn drain_with(&self, deadline: Instant, options: DrainOptions) -> Report {
        let clients = match tokio::time::timeout_at(deadline, self.clients()).await {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return self.failed_report(&options, e.to_string()),
            Err(_) => return self.failed_report(&options, "no client before the deadline".into()),
        };
        let events = NodeEvents::new(clients.clone(), &self.settings.node_name);
        let server = server_url(&self.kubeconfig);
        let report = drain::drain(
            clients,
            &server,
            self.settings.clone(),
            events,
            options,
            deadline,
        )
        .await;
        if !report.dry_run {
            match report.write_to(&self.settings.state_dir) {
                Ok(path) => {
                    tracing::info!(node = %self.settings.node_name, "wrote report file {} for node {}", path.display(), self.settings.node_name)
                }
                Err(e) => tracing::warn!(node = %self.settings.node_name, "{e}"),
            }
        }
        report
    }

    fn failed_report(&self, options: &DrainOptions, error: String) -> Report {
        let mut r = drain::empty_report(&self.settings, options, jiff::Timestamp::now());
        r.errors.push(error);
        r.finish();
        r
    }

    /// Undoes only what the marker says we did; writes a Restored event when there was a marker.
    /// Transient failures are retried for up to the configured drain timeout
    /// ([`Engine::restore_by`] takes a deadline). A taint these credentials may not remove is an
    /// error ([`NodeError::TaintLeft`]); the marker then keeps it.
    pub async fn restore(&self) -> Result<RestoreOutcome, Error> {
        self.restore_by(Instant::now() + self.settings.drain.timeout)
            .await
    }

    /// [`Engine::restore`], retrying transient failures (no answer, 5xx) until `deadline`.
    pub async fn restore_by(&self, deadline: Instant) -> Result<RestoreOutcome, Error> {
        let clients = self.clients().await?;
        let out = self.ops().await?.restore(deadline).await?;
        if let Some(m) = &out.marker {
            let msg = format!(
                "node {} restored after {}: {}",
                self.settings.node_name,
                m.why,
                restore_text(&out)
            );
            NodeEvents::new(clients.clone(), &self.settings.node_name)
                .emit(EventReason::Restored, &msg)
                .await;
        }
        Ok(out)
    }

    /// The marker on the Node, if any.
    pub async fn marker(&self) -> Result<Option<Marker>, Error> {
        let node = self.node().await?;
        Ok(node::marker_of(&node, &self.settings.node_name)?)
    }

    /// Waits for the Node's Ready condition, by a watch, until `deadline`.
    pub async fn wait_ready(&self, deadline: Instant) -> Result<(), Error> {
        Ok(self.ops().await?.wait_ready(deadline).await?)
    }

    /// The last stored report, if any.
    pub fn last_report(&self) -> Result<Option<Report>, Error> {
        Ok(Report::read_last(&self.settings.state_dir)?)
    }
}

/// What a restore did, in words for a person (the CLI, the journal, the Node Event): "uncordoned,
/// taint removed", or what there was not to undo. A marker whose cordon is no longer recorded
/// means an earlier restore already undid it (or the cordon never happened); it is not an
/// admin's cordon unless the node was cordoned before the drain.
pub fn restore_text(out: &RestoreOutcome) -> String {
    let Some(m) = &out.marker else {
        return "no marker of ours; nothing left to undo".to_owned();
    };
    let cordon = if out.uncordoned {
        "uncordoned"
    } else if out.left_cordon_alone {
        "someone else had already uncordoned it"
    } else if m.was_unschedulable {
        "cordon left alone (the node was cordoned before the drain)"
    } else {
        "no cordon of ours left to undo"
    };
    let taint = if out.untainted {
        "taint removed"
    } else {
        "no taint of ours left to remove"
    };
    format!("{cordon}, {taint}, marker cleared")
}
