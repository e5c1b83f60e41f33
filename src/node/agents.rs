//! The boot restore's wait for the node's own agents (`[restore] wait_for_pods`,
//! `wait_for_conditions`): a kubelet that heartbeats is not yet a node whose CNI and CSI node
//! plugins run, and pods scheduled onto it before they do crash-loop. After the fresh heartbeat
//! the restore waits until every pod on this node that the selector matches (at least one) has
//! been Ready since this boot began, and every listed Node condition has its status.
//!
//! "Since this boot began": a pod object outlives a reboot, and its Ready=True from the last boot
//! stays until the node-lifecycle controller marks it (after `--node-monitor-grace-period`), so a
//! Ready condition counts only with a `lastTransitionTime` after the boot's start, or when every
//! container has been running since after it (a kubelet that restarted the containers before
//! its first status update keeps the old transition time).
//!
//! The predicates are pure; `NodeOps::wait_for_agents` (here) follows the pods and the Node
//! with kube's watcher into reflector stores.

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::Api;
use kube::runtime::reflector::{self, reflector};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::time::Instant;

use super::{NodeError, NodeOps};
use crate::api::client::WATCH_SECONDS;
use crate::api::retry;
use crate::config::NodeCondition;
use crate::config::selector::Selector;

/// What the wait still waits for among `pods` (the node's pods `selector` matched); `None` when
/// they are all Ready in this boot.
pub fn pods_waiting<'a>(
    pods: impl IntoIterator<Item = &'a Pod>,
    selector: &Selector,
    since: jiff::Timestamp,
) -> Option<String> {
    let mut count = 0;
    let mut not_ready = Vec::new();
    for pod in pods {
        count += 1;
        if !ready_since(pod, since) {
            let ns = pod.metadata.namespace.as_deref().unwrap_or("");
            let name = pod.metadata.name.as_deref().unwrap_or("");
            not_ready.push(format!("{ns}/{name}"));
        }
    }
    if count == 0 {
        return Some(format!("no pod on the node matches {selector} yet"));
    }
    if not_ready.is_empty() {
        return None;
    }
    not_ready.sort();
    Some(format!(
        "pods matching {selector} not Ready in this boot: {}",
        not_ready.join(", ")
    ))
}

/// Whether `pod` has been Ready since `since`.
pub fn ready_since(pod: &Pod, since: jiff::Timestamp) -> bool {
    let Some(status) = &pod.status else {
        return false;
    };
    let Some(ready) = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Ready")
    else {
        return false;
    };
    if ready.status != "True" {
        return false;
    }
    if ready
        .last_transition_time
        .as_ref()
        .is_some_and(|t| t.0 > since)
    {
        return true;
    }
    let containers = status.container_statuses.as_deref().unwrap_or_default();
    !containers.is_empty()
        && containers.iter().all(|c| {
            c.state
                .as_ref()
                .and_then(|s| s.running.as_ref())
                .and_then(|r| r.started_at.as_ref())
                .is_some_and(|t| t.0 > since)
        })
}

/// What the wait still waits for among the Node's conditions; `None` when each of `wanted` has
/// its status. `node` is `None` before the Node was first read.
pub fn conditions_waiting(node: Option<&Node>, wanted: &[NodeCondition]) -> Option<String> {
    let have = node
        .and_then(|n| n.status.as_ref())
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    let missing: Vec<String> = wanted
        .iter()
        .filter_map(|w| match have.iter().find(|c| c.type_ == w.type_) {
            Some(c) if c.status == w.status => None,
            Some(c) => Some(format!("{}={} (waiting for {w})", c.type_, c.status)),
            None => Some(format!("no condition {} (waiting for {w})", w.type_)),
        })
        .collect();
    (!missing.is_empty()).then(|| format!("node conditions: {}", missing.join(", ")))
}

impl NodeOps<'_> {
    /// Waits until the node's agents run (the module doc): every pod on this node matching
    /// `pods` (at least one) Ready since `since`, and every condition of `conditions` held by
    /// the Node; each followed by kube's watcher into a reflector store (relists after 410,
    /// backoff after errors). `waiting` hears what is still waited for whenever that changes
    /// (the daemon's `STATUS=` line). By `deadline`, else [`NodeError::AgentsNotReady`] with the
    /// last state.
    #[tracing::instrument(skip_all, fields(node = %self.settings.node_name))]
    pub async fn wait_for_agents(
        &self,
        deadline: Instant,
        since: jiff::Timestamp,
        pods: Option<&Selector>,
        conditions: &[NodeCondition],
        waiting: impl Fn(&str),
    ) -> Result<(), NodeError> {
        let started = Instant::now();
        let name = self.settings.node_name.clone();
        let (pod_store, pod_writer) = reflector::store::<Pod>();
        let (node_store, node_writer) = reflector::store::<Node>();
        let pod_events: BoxStream<'_, ()> = match pods {
            Some(sel) => {
                let config = watcher::Config::default()
                    .fields(&format!("spec.nodeName={name}"))
                    .labels(&sel.to_string())
                    .timeout(WATCH_SECONDS);
                let api: Api<Pod> = Api::all(self.clients.watch.clone());
                let stream = watcher::watcher(api, config).backoff(retry::for_watches());
                reflector(pod_writer, stream).map(|_| ()).boxed()
            }
            None => futures::stream::pending().boxed(),
        };
        let node_events: BoxStream<'_, ()> = if conditions.is_empty() {
            futures::stream::pending().boxed()
        } else {
            let (api, config) = self.node_watch();
            let stream = watcher::watcher(api, config).backoff(retry::for_watches());
            reflector(node_writer, stream).map(|_| ()).boxed()
        };
        let state = || {
            let pods_left = pods.and_then(|sel| {
                let listed = pod_store.state();
                pods_waiting(listed.iter().map(|p| p.as_ref()), sel, since)
            });
            let node = node_store.state().into_iter().next();
            let conditions_left = conditions_waiting(node.as_deref(), conditions);
            let left: Vec<String> = pods_left.into_iter().chain(conditions_left).collect();
            (!left.is_empty()).then(|| left.join("; "))
        };
        let mut last = String::new();
        let wait = async {
            let mut events = futures::stream::select(pod_events, node_events);
            loop {
                match state() {
                    None => return,
                    Some(now) if now != last => {
                        waiting(&now);
                        last = now;
                    }
                    Some(_) => {}
                }
                if events.next().await.is_none() {
                    // Both watches ended (they do not): wait for the deadline.
                    std::future::pending::<()>().await;
                }
            }
        };
        match tokio::time::timeout_at(deadline, wait).await {
            Ok(()) => {
                tracing::info!("the agents of node {name} run: restoring");
                Ok(())
            }
            Err(_) => Err(NodeError::AgentsNotReady {
                node: name,
                waited: started.elapsed(),
                state: state().unwrap_or(last),
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn since() -> jiff::Timestamp {
        "2026-12-02T10:00:00Z".parse().unwrap()
    }

    fn pod(name: &str, ready: &str, transition: &str, started: Option<&str>) -> Pod {
        let mut p = json!({
            "metadata": {"name": name, "namespace": "kube-system"},
            "status": {"conditions": [{"type": "Ready", "status": ready, "lastTransitionTime": transition}]},
        });
        if let Some(at) = started {
            p["status"]["containerStatuses"] = json!([{
                "name": "c", "image": "i", "imageID": "", "ready": true, "restartCount": 0,
                "state": {"running": {"startedAt": at}},
            }]);
        }
        serde_json::from_value(p).unwrap()
    }

    fn selector() -> Selector {
        Selector::parse("app=cni").unwrap()
    }

    #[test]
    fn pods_ready_in_this_boot_end_the_wait() {
        let pods = [pod("cni-a", "True", "2026-12-02T10:00:05Z", None)];
        assert_eq!(pods_waiting(&pods, &selector(), since()), None);
    }

    #[test]
    fn a_ready_left_by_the_last_boot_does_not_count_unless_the_containers_restarted() {
        let stale = pod(
            "cni-a",
            "True",
            "2026-12-01T09:00:00Z",
            Some("2026-12-01T09:00:00Z"),
        );
        let text = pods_waiting([&stale], &selector(), since()).unwrap();
        assert_eq!(
            text,
            "pods matching app=cni not Ready in this boot: kube-system/cni-a"
        );
        let restarted = pod(
            "cni-a",
            "True",
            "2026-12-01T09:00:00Z",
            Some("2026-12-02T10:00:03Z"),
        );
        assert_eq!(pods_waiting([&restarted], &selector(), since()), None);
    }

    #[test]
    fn no_matching_pod_and_a_not_ready_one_are_waited_for() {
        assert_eq!(
            pods_waiting(std::iter::empty(), &selector(), since()).as_deref(),
            Some("no pod on the node matches app=cni yet")
        );
        let pods = [pod("csi-b", "False", "2026-12-02T10:00:05Z", None)];
        assert!(pods_waiting(&pods, &selector(), since()).is_some());
    }

    #[test]
    fn conditions_are_matched_by_type_and_status() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "node-a"},
            "status": {"conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "NetworkUnavailable", "status": "True"},
            ]},
        }))
        .unwrap();
        let want = |t: &str, s: &str| NodeCondition {
            type_: t.into(),
            status: s.into(),
        };
        assert_eq!(
            conditions_waiting(Some(&node), &[want("Ready", "True")]),
            None
        );
        assert_eq!(
            conditions_waiting(
                Some(&node),
                &[
                    want("NetworkUnavailable", "False"),
                    want("example.com/Csi", "True")
                ]
            )
            .as_deref(),
            Some(
                "node conditions: NetworkUnavailable=True (waiting for NetworkUnavailable=False), \
                 no condition example.com/Csi (waiting for example.com/Csi=True)"
            )
        );
        assert!(conditions_waiting(None, &[want("Ready", "True")]).is_some());
        assert_eq!(conditions_waiting(None, &[]), None);
    }
}
