//! DaemonSet pods stopped last (`[drain] daemonsets = "stop-last"`, issue 21) against the fake
//! API server and its DaemonSet controller: once the workloads are gone the node gets our
//! second taint (NoSchedule, recorded in the marker), then the DaemonSet pods that do not
//! tolerate it are evicted by priority, `system-node-critical` last; the controller does not
//! create them again while the taint is there; a pod tolerating every taint and the mirror pod
//! stay; restore removes the taint and the controller brings the pods back.

mod engine_support;

use std::sync::Arc;
use std::time::Duration;

use engine_support::*;
use kube_shutdown_drain::engine::Engine;
use kube_shutdown_drain::report::{Outcome, Report};
use serde_json::{Value, json};
use tokio::time::Instant;

const STOP_LAST: &str = "[drain]\ndaemonsets = \"stop-last\"\n";
const DS_TAINT: (&str, &str) = ("kube-shutdown-drain/daemonsets", "NoSchedule");

/// The tolerations the DaemonSet controller gives every pod it makes (none for our keys).
fn controller_tolerations() -> Value {
    json!([
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute"},
        {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute"},
        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
    ])
}

/// DaemonSet `name` (its template: `tolerations`, `priority` and `class`) and its pod on node
/// `node`, which takes `seconds` to stop.
fn daemon(
    name: &str,
    node: &str,
    tolerations: Value,
    priority: i32,
    class: Option<&str>,
) -> [Value; 2] {
    let mut spec = json!({"containers": [{"name": "c", "image": "agent"}],
                          "tolerations": tolerations, "priority": priority});
    if let Some(class) = class {
        spec["priorityClassName"] = json!(class);
    }
    let ds = json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": name, "namespace": NS, "uid": format!("{name}-uid")},
        "spec": {"selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}}, "spec": spec.clone()}}});
    let mut pod = slow_pod(NS, &format!("{name}-{node}"), node, 0.3);
    pod["metadata"]["labels"] = json!({"app": name});
    pod["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "DaemonSet",
        "name": name, "uid": format!("{name}-uid"), "controller": true}]);
    for (k, v) in spec.as_object().unwrap() {
        if k != "containers" {
            pod["spec"][k] = v.clone();
        }
    }
    [ds, pod]
}

/// node-a: a workload, four DaemonSets' pods (log shipper at priority 0, exporter at 1000, a
/// node-critical agent, a CNI pod tolerating everything) and a mirror pod; node-b: the log
/// shipper's pod there.
async fn node_with_agents() -> Cluster {
    let mut objects = vec![slow_pod(NS, "web", NODE, 0.5)];
    let mut mirror = bare_pod(NS, "etcd-node-a", NODE);
    mirror["metadata"]["annotations"] = json!({"kubernetes.io/config.mirror": "x"});
    objects.push(mirror);
    objects.extend(daemon("logs", NODE, controller_tolerations(), 0, None));
    objects.push(daemon("logs", OTHER_NODE, controller_tolerations(), 0, None)[1].clone());
    objects.extend(daemon(
        "exporter",
        NODE,
        controller_tolerations(),
        1000,
        None,
    ));
    objects.extend(daemon(
        "agent",
        NODE,
        controller_tolerations(),
        2_000_001_000,
        Some("system-node-critical"),
    ));
    objects.extend(daemon(
        "cni",
        NODE,
        json!([{"operator": "Exists"}]),
        2_000_001_000,
        Some("system-node-critical"),
    ));
    Cluster::start(objects).await
}

async fn prepare_and_drain(c: &Cluster, extra: &str) -> Report {
    let engine = Arc::new(Engine::new(c.settings(extra)).unwrap());
    let deadline = Instant::now() + Duration::from_secs(30);
    let (prepared, report) = engine.prepare_and_drain("reboot", deadline, |_| {}).await;
    prepared.expect("prepared");
    report
}

/// The live pods on `node` of app `app` (names).
fn live_pods(c: &Cluster, node: &str, app: &str) -> Vec<String> {
    c.server
        .store()
        .list("Pod", Some(NS))
        .into_iter()
        .filter(|p| {
            p["spec"]["nodeName"] == json!(node) && p["metadata"]["labels"]["app"] == json!(app)
        })
        .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
        .map(|p| {
            p["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect()
}

/// Where in the server's record the eviction of `name` was first POSTed.
fn eviction_at(c: &Cluster, name: &str) -> usize {
    let path = format!("/api/v1/namespaces/{NS}/pods/{name}/eviction");
    c.server
        .recorder()
        .requests()
        .iter()
        .position(|r| r.method == "POST" && r.path == path)
        .unwrap_or_else(|| panic!("no eviction of {name}"))
}

/// Where the patch that added our DaemonSet taint is in the server's record.
fn taint_patch_at(c: &Cluster) -> usize {
    c.server
        .recorder()
        .requests()
        .iter()
        .position(|r| {
            r.method == "PATCH"
                && r.path == format!("/api/v1/nodes/{NODE}")
                && r.body.contains(DS_TAINT.0)
        })
        .expect("a patch adding the DaemonSet taint")
}

fn row<'a>(report: &'a Report, name: &str) -> &'a kube_shutdown_drain::report::PodReport {
    report
        .pods
        .iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("no row {name}"))
}

fn has_ds_taint(c: &Cluster) -> bool {
    taints(&c.node(NODE)).contains(&(DS_TAINT.0.into(), DS_TAINT.1.into()))
}

#[tokio::test]
async fn daemonset_pods_go_last_by_priority_under_a_recorded_taint_and_come_back_at_restore() {
    let c = node_with_agents().await;
    let report = prepare_and_drain(&c, STOP_LAST).await;
    assert!(report.complete, "{}", report.to_text());
    // The order from the server's record: the workload's eviction, then the taint, then the
    // DaemonSet pods lowest priority first, the node-critical agent last.
    let (web, taint) = (eviction_at(&c, "web"), taint_patch_at(&c));
    let (logs, exporter, agent) = (
        eviction_at(&c, "logs-node-a"),
        eviction_at(&c, "exporter-node-a"),
        eviction_at(&c, "agent-node-a"),
    );
    assert!(
        web < taint && taint < logs && logs < exporter && exporter < agent,
        "web {web}, taint {taint}, logs {logs}, exporter {exporter}, agent {agent}"
    );
    // Each group started once the one before was gone (the report's own times).
    let done = |n: &str| row(&report, n).finished_ms.expect("finished");
    let began = |n: &str| row(&report, n).started_ms.expect("started");
    assert!(done("web") <= began("logs-node-a"));
    assert!(done("logs-node-a") <= began("exporter-node-a"));
    assert!(done("exporter-node-a") <= began("agent-node-a"));
    for name in ["logs-node-a", "exporter-node-a", "agent-node-a"] {
        let r = row(&report, name);
        assert_eq!(r.reason.as_str(), "daemon-set");
        assert_eq!(r.action.as_str(), "evict", "{name}");
        assert!(
            matches!(r.outcome, Outcome::Evicted | Outcome::Gone),
            "{name}: {:?}",
            r.outcome
        );
    }
    // What stays: the CNI pod (tolerates every taint), the mirror pod, the other node's pod.
    assert_eq!(row(&report, "cni-node-a").outcome, Outcome::Skipped);
    assert_eq!(row(&report, "etcd-node-a").outcome, Outcome::Skipped);
    assert_eq!(
        c.evictions_of(NS, "cni-node-a") + c.evictions_of(NS, "etcd-node-a"),
        0
    );
    assert!(c.pod(NS, "etcd-node-a").is_some());
    assert_eq!(live_pods(&c, NODE, "cni"), ["cni-node-a"]);
    assert_eq!(live_pods(&c, OTHER_NODE, "logs"), ["logs-node-b"]);
    assert_eq!(c.evictions_of(NS, "logs-node-b"), 0);
    // The taint is on, recorded in the marker; the controller made no pod again under it.
    assert!(has_ds_taint(&c));
    let marker = stored_marker(&c.node(NODE)).expect("marker");
    assert!(
        marker["taints"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["key"] == DS_TAINT.0 && t["effect"] == DS_TAINT.1),
        "{marker}"
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for app in ["logs", "exporter", "agent"] {
        assert!(
            live_pods(&c, NODE, app).is_empty(),
            "{app} came back under the taint"
        );
    }
    // Restore: the taint goes with the rest, and the controller brings the pods back.
    let engine = Engine::new(c.settings(STOP_LAST)).unwrap();
    engine.restore().await.expect("restored");
    assert!(!has_ds_taint(&c) && !unschedulable(&c.node(NODE)));
    assert!(c.marker_text().is_none());
    until("the DaemonSet pods back on node-a", || {
        ["logs", "exporter", "agent"]
            .iter()
            .all(|app| live_pods(&c, NODE, app).len() == 1)
    })
    .await;
}

#[tokio::test]
async fn by_default_the_drain_leaves_daemonset_pods_and_adds_no_second_taint() {
    let c = node_with_agents().await;
    let report = prepare_and_drain(&c, "").await;
    assert!(report.complete, "{}", report.to_text());
    for name in [
        "logs-node-a",
        "exporter-node-a",
        "agent-node-a",
        "cni-node-a",
    ] {
        assert_eq!(row(&report, name).outcome, Outcome::Skipped, "{name}");
        assert_eq!(c.evictions_of(NS, name), 0, "{name}");
    }
    assert!(!has_ds_taint(&c));
}

#[tokio::test]
async fn the_plan_shows_the_pods_of_the_last_stage_in_their_order() {
    let c = node_with_agents().await;
    let plan = Engine::new(c.settings(STOP_LAST))
        .unwrap()
        .plan()
        .await
        .unwrap();
    let text = plan.to_text();
    assert!(text.contains("(3 of them stopped last)"), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    let at = |name: &str| {
        lines
            .iter()
            .position(|l| l.starts_with(&format!("{NS}/{name} ")))
            .unwrap_or_else(|| panic!("{text}"))
    };
    assert!(
        at("web") < at("logs-node-a")
            && at("logs-node-a") < at("exporter-node-a")
            && at("exporter-node-a") < at("agent-node-a"),
        "{text}"
    );
    assert!(
        lines[at("agent-node-a")].contains("last")
            && lines[at("agent-node-a")].contains("critical"),
        "{text}"
    );
    assert!(!lines[at("cni-node-a")].contains("last"), "{text}");
    let json = serde_json::to_value(&plan).unwrap();
    let logs = json["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "logs-node-a")
        .unwrap()
        .clone();
    assert_eq!(logs["last"], json!(0), "{logs}");
}

#[tokio::test]
async fn with_credentials_that_may_not_taint_the_daemonset_pods_stay_and_the_report_says_why() {
    let c = node_with_agents().await;
    let engine =
        Arc::new(Engine::new(c.settings_as(&format!("system:node:{NODE}"), STOP_LAST)).unwrap());
    let deadline = Instant::now() + Duration::from_secs(30);
    let (prepared, report) = engine.prepare_and_drain("reboot", deadline, |_| {}).await;
    assert!(
        prepared
            .expect("prepared without the taint")
            .taint_forbidden
    );
    assert!(!report.complete);
    let said = report.errors.join("\n");
    assert!(
        said.contains("daemonsets = \"stop-last\"")
            && said.contains("node-a")
            && said.contains("left running"),
        "{said}"
    );
    for name in ["logs-node-a", "exporter-node-a", "agent-node-a"] {
        assert_eq!(
            c.evictions_of(NS, name),
            0,
            "{name} evicted without the taint"
        );
    }
    assert_eq!(row(&report, "web").outcome, Outcome::Evicted);
}
