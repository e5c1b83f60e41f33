//! What the forecast reads, and nothing it writes: the Node (it must exist), the node's pods
//! (the drain's own paged list), every PodDisruptionBudget (one list), every Node only when a
//! budget lets the node's pods go one round at a time (a replacement must then run elsewhere),
//! the last report, and logind's `InhibitDelayMaxUSec` from the system bus. Four requests at
//! most; dropping the future stops them (a shutdown must never wait for a forecast).

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams};
use tokio::time::Instant;

use super::budgets::{self, budget_name};
use super::{Forecast, Inputs, Logind, forecast};
use crate::api::ApiError;
use crate::config::Settings;
use crate::engine::{self, Engine};
use crate::policy::filters::Action;
use crate::policy::plan::Plan;
use crate::time_limit::{self as time_limit, TimeLimit};

/// A forecast could not be made.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(transparent)]
    Engine(#[from] engine::Error),
    /// A list the forecast cannot do without (the node's pods, the budgets).
    #[error("cannot list {0}; the forecast needs it")]
    List(ApiError),
}

impl ReadError {
    /// No usable answer from the API server until the deadline (no answer, a timeout or a 5xx,
    /// as the Node read counts it), or the node is missing: exit 3 in the CLI, as the README's
    /// exit codes say; a list refused for what it asks (403) stays exit 1.
    pub fn is_unreachable(&self) -> bool {
        match self {
            ReadError::Engine(e) => e.is_unreachable() || e.is_node_missing(),
            ReadError::List(e) => e.is_server_trouble(),
        }
    }

    /// The kubeconfig is unusable, or its trust refused the server's certificate: exit 2 in the
    /// CLI.
    pub fn is_config(&self) -> bool {
        match self {
            ReadError::Engine(e) => e.is_config(),
            ReadError::List(e) => e.is_permanent(),
        }
    }
}

/// logind's time limit from the system bus, or, when logind cannot be read, the one a logind
/// that fits the configuration would give (drain timeout plus release margin), with why.
pub async fn logind_time_limit(settings: &Settings) -> (TimeLimit, Logind) {
    let read = async {
        let logind = crate::host::logind::Logind::connect()
            .await
            .map_err(|e| e.to_string())?;
        logind.time_limit(settings).await.map_err(|e| e.to_string())
    };
    match read.await {
        Ok(b) => (b, Logind::Read),
        Err(why) => {
            let d = &settings.drain;
            let margin = settings.daemon.release_margin;
            (
                time_limit::compute(d.timeout, d.timeout + margin, margin),
                Logind::Assumed(why),
            )
        }
    }
}

/// Whether a budget lets more of the node's evicted pods go than it allows at once, so that
/// where replacements can run matters (the other nodes are then read).
fn wants_nodes(plan: &Plan, pods: &[Pod], budgets: &[PodDisruptionBudget]) -> bool {
    let evicted: Vec<&Pod> = pods
        .iter()
        .filter(|p| {
            plan.pods.iter().any(|pp| {
                pp.action == Action::Evict && Some(pp.uid.as_str()) == p.metadata.uid.as_deref()
            })
        })
        .collect();
    budgets.iter().any(|b| {
        let allowed = budgets::numbers(b).allowed;
        let here = evicted.iter().filter(|p| budgets::selects(b, p)).count();
        allowed > 0 && here > allowed as usize
    })
}

/// Reads what the forecast needs and makes it, against `time_limit` (see [`logind_time_limit`]).
pub async fn gather(
    engine: &Engine,
    time_limit: &TimeLimit,
    logind: Logind,
) -> Result<Forecast, ReadError> {
    let settings = engine.settings().clone();
    let node = &settings.node_name;
    // The node must exist: a forecast of a node that is not there would be empty.
    engine.node().await?;
    let clients = engine.clients().await?;
    let deadline = Instant::now() + settings.drain.timeout;
    let pods = crate::drain::list_node_pods(clients, node, deadline)
        .await
        .map_err(ReadError::List)?;
    let pods: Vec<Pod> = pods
        .into_iter()
        .filter(|p| crate::drain::tracker::missing_part(p).is_none())
        .collect();
    let plan = Plan::build(&settings, &pods);
    let pdbs: Api<PodDisruptionBudget> = Api::all(clients.api.clone());
    let lp = ListParams::default();
    let budgets = clients
        .retry(deadline, "poddisruptionbudgets of all namespaces", || {
            pdbs.list(&lp)
        })
        .await
        .map_err(ReadError::List)?
        .items;
    let nodes = if wants_nodes(&plan, &pods, &budgets) {
        let api: Api<Node> = Api::all(clients.api.clone());
        match clients.retry(deadline, "nodes", || api.list(&lp)).await {
            Ok(list) => Some(list.items),
            Err(e) => {
                tracing::warn!(
                    node = %node,
                    "cannot list {e}; the forecast for node {node} assumes replacements find a node"
                );
                None
            }
        }
    } else {
        None
    };
    let last = engine.last_report().unwrap_or_else(|e| {
        tracing::warn!(node = %node, "{e}; the forecast for node {node} uses no earlier timings");
        None
    });
    tracing::debug!(
        node = %node,
        "forecast for node {node}: {} pods, {} budgets ({}), {} nodes read",
        pods.len(),
        budgets.len(),
        budgets.iter().map(budget_name).collect::<Vec<_>>().join(", "),
        nodes.as_ref().map_or(0, Vec::len)
    );
    Ok(forecast(&Inputs {
        settings: &settings,
        plan: &plan,
        pods: &pods,
        budgets: &budgets,
        nodes: nodes.as_deref(),
        time_limit,
        logind,
        last: last.as_ref(),
        now: jiff::Timestamp::now(),
    }))
}
