//! The reads behind [`super::holds::judge`]: the Node (its hold annotation), the pause Lease in
//! `[fleet] lease_namespace`, only with `[reboot] blocking_pod_selector` the node's pods (the
//! drain's own paged list by `spec.nodeName`; the selector is matched by the judge), only with
//! `[fleet] max_unready` the Nodes of the node's slot group (once its own Node is read: one list,
//! by `group_label`'s value when it has one, served from the API server's cache), and only with
//! `[fleet.alerts]` the alerts ([`super::alerts`]). Sent at once, each retried (the alerts asked
//! once) until `deadline`, nothing written; a read that fails is kept as its error, which the
//! judge turns into an `unknown` reason. Under the shipped RBAC the node identity may do all of
//! them: `get` and `list` Nodes, `list` pods and `get` Leases (the ClusterRole). The kubelet's
//! credentials may read the Nodes and the node's pods, not the pause Lease (see
//! [`super::holds`]).

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};
use tokio::time::Instant;

use super::holds::{
    Alerts, Context, Estimate, ForecastSaid, Group, Holds, PAUSE_LEASE, Pause, Pods, Seen, judge,
};
use super::window::Windows;
use crate::api::Clients;
use crate::config::Settings;
use crate::engine::Engine;
use crate::forecast::Forecast;
use crate::report::Report;

/// How long one judging of the holds may take, its reads retried until then.
const JUDGE_MAX: std::time::Duration = std::time::Duration::from_secs(10);

/// What weighs on a reboot besides what is read: the daemon's last forecast, and whether the
/// drain is still to come (then its length is estimated: the forecast's estimate, else the last
/// drain's report in the state directory, and a window that would close before it ends holds).
#[derive(Debug, Clone, Copy, Default)]
pub struct Weighed<'a> {
    pub forecast: Option<&'a Forecast>,
    pub drain_to_come: bool,
}

/// What holds the configured node now, through `engine`'s clients, read within [`JUDGE_MAX`]
/// (clients that cannot be made are an `unknown` reason). The daemon's follower and its own
/// reboot ask this, and so does `status`.
pub async fn holds_of(engine: &Engine, windows: &Windows, weighed: Weighed<'_>) -> Holds {
    let settings = engine.settings();
    let estimate = weighed
        .drain_to_come
        .then(|| estimate(settings, weighed.forecast))
        .flatten();
    let forecast = weighed.forecast.map(ForecastSaid::from);
    let cx = Context {
        gates: weighed.drain_to_come,
        ..Context::new(settings, &settings.reboot, windows, forecast, estimate)
    };
    match engine.clients().await {
        Ok(clients) => holds(clients, &cx, Instant::now() + JUDGE_MAX).await,
        Err(e) => Holds::unknown(&settings.node_name, &e.to_string()),
    }
}

/// The drain's expected length: the forecast's estimate, else the last complete drain's length
/// (its report in the state directory; an unreadable report is no estimate, said at debug).
fn estimate(settings: &Settings, forecast: Option<&Forecast>) -> Option<Estimate> {
    if let Some(e) = forecast.and_then(Estimate::from_forecast) {
        return Some(e);
    }
    match Report::read_last(&settings.state_dir) {
        Ok(report) => report.as_ref().and_then(Estimate::from_report),
        Err(e) => {
            tracing::debug!(
                "no estimate of the drain of node {}: {e}",
                settings.node_name
            );
            None
        }
    }
}

/// What holds the node now: reads (until `deadline` at most) and judges at the instant the
/// reads are done. The one call the reboot loop makes before it takes a slot and again before
/// the reboot; an empty answer means the node may go.
#[tracing::instrument(skip_all, fields(node = %cx.node))]
pub async fn holds(clients: &Clients, cx: &Context<'_>, deadline: Instant) -> Holds {
    let seen = read(clients, cx, deadline).await;
    let holds = judge(cx, &seen, jiff::Timestamp::now());
    tracing::debug!("{holds}");
    holds
}

/// Reads what [`judge`] weighs; each failure is kept, none stops the others.
pub async fn read(clients: &Clients, cx: &Context<'_>, deadline: Instant) -> Seen {
    let nodes: Api<Node> = Api::all(clients.api.clone());
    let leases: Api<Lease> = Api::namespaced(clients.api.clone(), cx.lease_namespace);
    let node_object = format!("node {}", cx.node);
    let pause_object = format!("Lease {}/{PAUSE_LEASE}", cx.lease_namespace);
    let node_and_group = async {
        let node = clients
            .retry(deadline, &node_object, || nodes.get(cx.node))
            .await;
        let group = match &node {
            Ok(own) if cx.gates && cx.fleet.max_unready.is_some() => {
                group(clients, cx, own, deadline).await
            }
            _ => Group::NotAsked,
        };
        (node, group)
    };
    let pause = async {
        match clients
            .retry(deadline, &pause_object, || leases.get(PAUSE_LEASE))
            .await
        {
            Ok(lease) => Pause::Present(Box::new(lease)),
            // The API server's own NotFound (a Status body), not a proxy's 404.
            Err(e) if e.is_not_found() => Pause::Absent,
            Err(e) => Pause::Unreadable(e),
        }
    };
    let pods = async {
        if cx.blocking_pod_selector.is_none() {
            return Pods::NotAsked;
        }
        match crate::drain::list_node_pods(clients, cx.node, deadline).await {
            Ok(pods) => Pods::Listed(pods),
            Err(e) => Pods::Unreadable(e),
        }
    };
    let alerts = async {
        let Some(settings) = cx.fleet.alerts.as_ref().filter(|_| cx.gates) else {
            return Alerts::NotAsked;
        };
        match super::alerts::active(settings, deadline).await {
            Ok(list) => Alerts::Listed(list),
            Err(e) => Alerts::Unreadable(e),
        }
    };
    let ((node, group), pause, pods, alerts) = tokio::join!(node_and_group, pause, pods, alerts);
    Seen {
        node,
        pause,
        pods,
        group,
        alerts,
    }
}

/// The Nodes of `own`'s slot group, for `max_unready`: listed by `group_label`'s value when it
/// has one, else all of them (the judge keeps the group's), from the API server's cache
/// (`resourceVersion=0`): a minute-old view is enough for a gate judged every minute, and costs
/// the server no read of etcd.
async fn group(clients: &Clients, cx: &Context<'_>, own: &Node, deadline: Instant) -> Group {
    let nodes: Api<Node> = Api::all(clients.api.clone());
    let name = crate::fleet::group_of(cx.fleet, own);
    let lp = match &cx.fleet.group_label {
        Some(key) if name != crate::fleet::UNLABELLED => {
            ListParams::default().labels(&format!("{key}={name}"))
        }
        _ => ListParams::default(),
    }
    .match_any();
    let object = format!("nodes of group {name}");
    match clients.retry(deadline, &object, || nodes.list(&lp)).await {
        Ok(list) => Group::Listed(list.items),
        Err(e) => Group::Unreadable(e),
    }
}
