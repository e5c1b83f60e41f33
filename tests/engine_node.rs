//! prepare / restore / marker / wait_ready against the fake API server: marker before any
//! change, only our taint touched, an admin's cordon survives, concurrent taint writers lose
//! nothing, kubelet credentials (taint forbidden) still drain, clear errors for a missing node,
//! an unreachable server and a bad kubeconfig.

mod engine_support;

use std::sync::Arc;
use std::time::Duration;

use engine_support::*;
use fake_apiserver::Route;
use kube_shutdown_drain::engine::Engine;
use kube_shutdown_drain::node::MARKER_ANNOTATION;
use serde_json::json;
use tokio::time::Instant;

const OUR_TAINT: (&str, &str) = ("kube-shutdown-drain/shutdown", "PreferNoSchedule");

fn has_taint(node: &serde_json::Value, key: &str, effect: &str) -> bool {
    taints(node).contains(&(key.to_string(), effect.to_string()))
}

#[tokio::test]
async fn prepare_writes_the_marker_first_then_taint_then_cordon_and_restore_undoes_it() {
    let c = Cluster::start(vec![]).await;
    c.server
        .store()
        .set_node_taint(
            NODE,
            json!({"key": "example.com/other", "effect": "NoSchedule"}),
        )
        .unwrap();
    let engine = Engine::new(c.settings("")).unwrap();
    let out = engine.prepare("shutdown").await.unwrap();
    assert!(out.tainted && out.cordoned && !out.taint_forbidden);
    assert!(!out.marker.was_unschedulable && !out.marker.taint_was_present);
    assert_eq!(out.marker.boot_id, "0b0e1d00-0000-4000-8000-000000000001");
    assert_eq!(out.marker.why, "shutdown");

    let patches = c
        .server
        .recorder()
        .matching("PATCH", "/api/v1/nodes/node-a");
    assert_eq!(patches.len(), 3, "marker, taint, cordon");
    assert!(
        patches[0].body.contains(MARKER_ANNOTATION),
        "marker first: {}",
        patches[0].body
    );
    assert!(
        patches[0].body.contains("resourceVersion"),
        "marker guarded by resourceVersion"
    );
    assert_eq!(
        patches[1].content_type.as_deref(),
        Some("application/json-patch+json")
    );
    assert!(
        patches[1].body.contains("\"test\""),
        "taint guarded by a JSON-patch test"
    );
    assert!(patches[2].body.contains("unschedulable"));

    let node = c.node(NODE);
    assert!(unschedulable(&node));
    assert!(has_taint(&node, OUR_TAINT.0, OUR_TAINT.1));
    assert!(has_taint(&node, "example.com/other", "NoSchedule"));
    let marker = engine.marker().await.unwrap().expect("marker");
    assert_eq!(marker, out.marker);

    let restored = engine.restore().await.unwrap();
    assert!(restored.uncordoned && restored.untainted);
    let node = c.node(NODE);
    assert!(!unschedulable(&node));
    assert!(!has_taint(&node, OUR_TAINT.0, OUR_TAINT.1));
    assert!(
        has_taint(&node, "example.com/other", "NoSchedule"),
        "other taints untouched"
    );
    assert!(
        node.pointer(&format!(
            "/metadata/annotations/{}",
            MARKER_ANNOTATION.replace('/', "~1")
        ))
        .is_none()
    );
    assert_eq!(engine.marker().await.unwrap(), None);

    // Idempotent: a second restore finds no marker and changes nothing.
    c.server.recorder().clear();
    let again = engine.restore().await.unwrap();
    assert!(again.marker.is_none() && !again.uncordoned && !again.untainted);
    assert_eq!(c.server.recorder().matching("PATCH", "/nodes/").len(), 0);
    let events = c.server.store().list("Event", Some("default"));
    assert_eq!(
        events.iter().filter(|e| e["reason"] == "Restored").count(),
        1
    );
}

#[tokio::test]
async fn an_admin_cordoned_node_stays_cordoned_after_restore() {
    let c = Cluster::start(vec![pod(NS, "p", NODE)]).await;
    c.server
        .store()
        .modify("Node", None, NODE, |n| {
            n["spec"]["unschedulable"] = json!(true)
        })
        .unwrap();
    let engine = Engine::new(c.settings("")).unwrap();
    let out = engine.prepare("shutdown").await.unwrap();
    assert!(out.marker.was_unschedulable && !out.cordoned);
    let report = engine.drain(Instant::now() + Duration::from_secs(10)).await;
    assert!(report.complete, "{}", report.to_text());
    let restored = engine.restore().await.unwrap();
    assert!(!restored.uncordoned && restored.untainted);
    assert!(unschedulable(&c.node(NODE)), "the admin's cordon stays");
}

#[tokio::test]
async fn a_taint_that_was_there_before_stays_after_restore() {
    let c = Cluster::start(vec![]).await;
    c.server
        .store()
        .set_node_taint(
            NODE,
            json!({"key": OUR_TAINT.0, "effect": OUR_TAINT.1, "value": "admin"}),
        )
        .unwrap();
    let engine = Engine::new(c.settings("")).unwrap();
    let out = engine.prepare("shutdown").await.unwrap();
    assert!(out.marker.taint_was_present && !out.tainted);
    engine.restore().await.unwrap();
    assert!(has_taint(&c.node(NODE), OUR_TAINT.0, OUR_TAINT.1));
}

/// A second prepare (a drain by hand, then a shutdown) keeps what the first one recorded, so the
/// node is still uncordoned in the end.
#[tokio::test]
async fn a_second_prepare_keeps_the_first_record() {
    let c = Cluster::start(vec![]).await;
    let engine = Engine::new(c.settings("")).unwrap();
    engine.prepare("drain by hand").await.unwrap();
    let second = engine.prepare("shutdown").await.unwrap();
    assert!(!second.marker.was_unschedulable && !second.marker.taint_was_present);
    assert_eq!(second.marker.why, "shutdown");
    let r = engine.restore().await.unwrap();
    assert!(r.uncordoned && r.untainted);
    assert!(!unschedulable(&c.node(NODE)));
}

/// Another writer changes the taints while prepare adds ours: the JSON-patch `test` fails, we
/// read again, and in the end every taint is there.
#[tokio::test]
async fn a_concurrent_taint_writer_loses_nothing() {
    let c = Cluster::start(vec![]).await;
    c.server
        .store()
        .set_node_taint(
            NODE,
            json!({"key": "example.com/first", "effect": "NoSchedule"}),
        )
        .unwrap();
    // Every node PATCH waits 100 ms before it is applied; the writer changes the taints
    // meanwhile.
    c.server.faults().add_latency(
        Route::new("PATCH", "/api/v1/nodes/node-a"),
        Duration::from_millis(100),
    );
    let store = c.server.store().clone();
    let writer = tokio::spawn(async move {
        for i in 0..3 {
            tokio::time::sleep(Duration::from_millis(60)).await;
            store
                .set_node_taint(
                    NODE,
                    json!({"key": format!("example.com/writer-{i}"), "effect": "NoExecute"}),
                )
                .unwrap();
        }
    });
    let engine = Engine::new(c.settings("")).unwrap();
    let out = engine.prepare("shutdown").await.unwrap();
    writer.await.unwrap();
    assert!(out.tainted);
    let node = c.node(NODE);
    for (k, e) in [
        ("example.com/first", "NoSchedule"),
        ("example.com/writer-0", "NoExecute"),
        ("example.com/writer-1", "NoExecute"),
        ("example.com/writer-2", "NoExecute"),
        OUR_TAINT,
    ] {
        assert!(has_taint(&node, k, e), "{k}:{e} lost: {:?}", taints(&node));
    }
    let guarded_failures = c
        .server
        .recorder()
        .matching("PATCH", "/api/v1/nodes/node-a")
        .iter()
        .filter(|r| r.status == 422 || r.status == 409)
        .count();
    assert!(
        guarded_failures >= 1,
        "the race happened (a guard failed at least once)"
    );

    // Restore is guarded the same way.
    let store = c.server.store().clone();
    let writer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(60)).await;
        store
            .set_node_taint(
                NODE,
                json!({"key": "example.com/late", "effect": "NoSchedule"}),
            )
            .unwrap();
    });
    engine.restore().await.unwrap();
    writer.await.unwrap();
    let node = c.node(NODE);
    assert!(!has_taint(&node, OUR_TAINT.0, OUR_TAINT.1));
    assert!(has_taint(&node, "example.com/late", "NoSchedule"));
    assert!(has_taint(&node, "example.com/writer-2", "NoExecute"));
}

/// The kubelet's own credentials may not taint (NodeRestriction): a warning, and the cordon,
/// the marker and the drain still work; restore too.
#[tokio::test]
async fn kubelet_credentials_cordon_and_drain_without_the_taint() {
    let c = Cluster::start(vec![
        pod(NS, "web", NODE),
        daemonset_pod(NS, "ds", NODE),
        pod(NS, "guarded", NODE),
        pdb(NS, "guarded-pdb", "guarded", 0),
    ])
    .await;
    let engine = Engine::new(c.settings_as(
        "system:node:node-a",
        "[drain]\nretry_interval = \"200ms\"\n",
    ))
    .unwrap();
    let out = engine.prepare("shutdown").await.unwrap();
    assert!(out.taint_forbidden && !out.tainted && out.cordoned);
    let node = c.node(NODE);
    assert!(unschedulable(&node));
    assert!(!has_taint(&node, OUR_TAINT.0, OUR_TAINT.1));
    let report = engine.drain(Instant::now() + Duration::from_secs(10)).await;
    assert!(report.complete, "{}", report.to_text());
    assert!(c.pod(NS, "web").is_none() && c.pod(NS, "guarded").is_none());
    assert!(c.pod(NS, "ds").is_some());
    let reqs = c.server.recorder().requests();
    assert!(reqs.iter().all(|r| !r.path.contains("daemonsets")));
    assert!(reqs.iter().all(|r| r.user == "system:node:node-a"));
    let r = engine.restore().await.unwrap();
    assert!(r.uncordoned);
    assert!(!unschedulable(&c.node(NODE)));
}

/// With kubelet credentials the budget cannot be watched (403), so a blocked eviction falls back
/// to `retry_interval` and still completes once the budget opens.
#[tokio::test]
async fn kubelet_credentials_fall_back_to_the_retry_interval_for_budgets() {
    let c = Cluster::start(vec![
        pod(NS, "guarded", NODE),
        pdb(NS, "guarded-pdb", "guarded", 1),
    ])
    .await;
    let engine = Engine::new(c.settings_as(
        "system:node:node-a",
        "[drain]\nretry_interval = \"300ms\"\n",
    ))
    .unwrap();
    let store = c.server.store().clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(700)).await;
        store
            .modify("PodDisruptionBudget", Some(NS), "guarded-pdb", |p| {
                p["spec"]["minAvailable"] = json!(0)
            })
            .unwrap();
    });
    let report = engine.drain(Instant::now() + Duration::from_secs(10)).await;
    assert!(report.complete, "{}", report.to_text());
    let budget_reads = c.server.recorder().matching("GET", "poddisruptionbudgets");
    assert!(
        budget_reads.iter().all(|r| r.status == 403),
        "the kubelet may not read budgets"
    );
}

#[tokio::test]
async fn wait_ready_follows_the_node_by_a_watch() {
    let c = Cluster::start(vec![]).await;
    c.server
        .store()
        .modify("Node", None, NODE, |n| {
            n["status"]["conditions"][0]["status"] = json!("False")
        })
        .unwrap();
    let engine = Arc::new(Engine::new(c.settings("")).unwrap());
    // Not Ready and never becomes Ready: the deadline holds.
    let started = Instant::now();
    let err = engine
        .wait_ready(started + Duration::from_millis(500))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not Ready"), "{err}");
    assert!(started.elapsed() < Duration::from_millis(1500));
    // Becomes Ready 300 ms in.
    let store = c.server.store().clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        store
            .modify("Node", None, NODE, |n| {
                n["status"]["conditions"][0]["status"] = json!("True")
            })
            .unwrap();
    });
    let started = Instant::now();
    engine
        .wait_ready(started + Duration::from_secs(10))
        .await
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn clear_errors_for_missing_node_unreachable_server_and_bad_kubeconfig() {
    let c = Cluster::start(vec![]).await;
    let mut s = (*c.settings("")).clone();
    s.node_name = "no-such-node".into();
    let engine = Engine::new(Arc::new(s)).unwrap();
    let err = engine.prepare("x").await.unwrap_err();
    assert!(err.is_node_missing(), "{err}");
    assert!(err.to_string().contains("no-such-node"), "{err}");

    let engine = Engine::new(c.settings("")).unwrap();
    c.server.stop_listener();
    let err = engine.prepare("x").await.unwrap_err();
    assert!(err.is_unreachable(), "{err}");
    assert!(err.to_string().contains(NODE), "{err}");

    let bad = c.dir.path().join("bad-kubeconfig");
    std::fs::write(&bad, "apiVersion: v1\nkind: Config\nclusters: [[[\n").unwrap();
    let mut s = (*c.settings("")).clone();
    s.kubeconfig = bad.clone();
    let err = Engine::new(Arc::new(s))
        .err()
        .expect("a bad kubeconfig is an error");
    assert!(err.is_config(), "{err}");
    assert!(
        err.to_string().contains(&bad.display().to_string()),
        "{err}"
    );
}

/// A kubeconfig that parses but cannot make a client (no server URL): prepare says so as a
/// configuration error, and drain returns a report carrying the error instead of hanging.
#[tokio::test]
async fn a_kubeconfig_without_a_server_is_a_config_error() {
    let c = Cluster::start(vec![]).await;
    let kc = c.dir.path().join("no-server");
    std::fs::write(
        &kc,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: x\n  cluster: {}\nusers:\n- name: x\n  user: {token: t}\ncontexts:\n- name: x\n  context: {cluster: x, user: x}\ncurrent-context: x\n",
    )
    .unwrap();
    let mut s = (*c.settings("")).clone();
    s.kubeconfig = kc.clone();
    let engine = Engine::new(Arc::new(s)).unwrap();
    let err = engine.prepare("x").await.unwrap_err();
    assert!(err.is_config(), "{err}");
    assert!(err.to_string().contains("no-server"), "{err}");
    let report = engine.drain(Instant::now() + Duration::from_secs(2)).await;
    assert!(!report.complete);
    assert!(
        report.errors.iter().any(|e| e.contains("no-server")),
        "{:?}",
        report.errors
    );
}
