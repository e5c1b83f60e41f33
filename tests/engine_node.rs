//! prepare / restore / marker / wait_ready against the fake API server: the marker written by
//! the same guarded write as the taint and the cordon, only our taint touched, an admin's cordon
//! survives (also one that lands between our read and our write), concurrent taint writers lose nothing, kubelet credentials (taint
//! forbidden) still drain, a taint they may not remove stays listed in the marker, transient
//! failures are retried, a changed taint configuration is recorded, clear errors for a missing
//! node, an unreachable server and a bad kubeconfig.

mod engine_support;

use std::sync::Arc;
use std::time::Duration;

use engine_support::*;
use fake_apiserver::Route;
use kube_shutdown_drain::engine::{Engine, PrepareOutcome};
use kube_shutdown_drain::node::MARKER_ANNOTATION;
use serde_json::json;
use tokio::time::Instant;

const OUR_TAINT: (&str, &str) = ("kube-shutdown-drain/shutdown", "PreferNoSchedule");

/// The marker annotation as stored on the node, parsed.
fn stored_marker(node: &serde_json::Value) -> Option<serde_json::Value> {
    node.pointer(&format!(
        "/metadata/annotations/{}",
        MARKER_ANNOTATION.replace('/', "~1")
    ))
    .and_then(|v| v.as_str())
    .map(|t| serde_json::from_str(t).expect("the marker is JSON"))
}

fn has_taint(node: &serde_json::Value, key: &str, effect: &str) -> bool {
    taints(node).contains(&(key.to_string(), effect.to_string()))
}

fn has_our_taint(node: &serde_json::Value) -> bool {
    has_taint(node, OUR_TAINT.0, OUR_TAINT.1)
}

/// Makes the server hold every PATCH of `node-a` for `delay` before applying it.
fn delay_node_patches(c: &Cluster, delay: Duration) {
    c.server
        .faults()
        .add_latency(Route::new("PATCH", "/api/v1/nodes/node-a"), delay);
}

/// Runs `then` on the server's store once the server has answered our first read of `node-a`
/// (polling every 2 ms): a write by someone else that lands between our read and our write.
fn once_we_have_read_the_node(
    c: &Cluster,
    then: impl FnOnce(&fake_apiserver::Store) + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    let store = c.server.store().clone();
    let recorder = c.server.recorder().clone();
    tokio::spawn(async move {
        loop {
            if !recorder.matching("GET", "/api/v1/nodes/node-a").is_empty() {
                then(&store);
                return;
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    })
}

/// Prepares `node-a` (settings plus `extra`) while an admin cordons it: every node PATCH waits
/// 200 ms in the server, and the admin cordons as soon as we have read the node, while our
/// write (built from that read) waits.
async fn prepare_while_an_admin_cordons(c: &Cluster, extra: &str) -> (Engine, PrepareOutcome) {
    delay_node_patches(c, Duration::from_millis(200));
    let admin = once_we_have_read_the_node(c, cordon_as_admin);
    let engine = Engine::new(c.settings(extra)).unwrap();
    let out = engine.prepare("shutdown").await.unwrap();
    admin.await.unwrap();
    (engine, out)
}

#[tokio::test]
async fn prepare_writes_marker_taint_and_cordon_in_one_guarded_patch_and_restore_undoes_it() {
    let c = Cluster::start(vec![]).await;
    c.add_taint("example.com/other", "NoSchedule");
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
    assert_eq!(patches.len(), 1, "marker, taint and cordon in one write");
    let p = &patches[0];
    assert_eq!(
        p.content_type.as_deref(),
        Some("application/json-patch+json")
    );
    let ops: Vec<serde_json::Value> = serde_json::from_str(&p.body).unwrap();
    assert_eq!(
        (ops[0]["op"].as_str(), ops[0]["path"].as_str()),
        (Some("test"), Some("/metadata/resourceVersion")),
        "guarded by the resourceVersion read: {}",
        p.body
    );
    let paths: Vec<&str> = ops.iter().filter_map(|o| o["path"].as_str()).collect();
    assert!(
        paths.iter().any(|p| p.starts_with("/metadata/annotations"))
            && p.body.contains(MARKER_ANNOTATION)
            && paths.contains(&"/spec/taints/-")
            && paths.contains(&"/spec/unschedulable"),
        "{paths:?}"
    );

    let node = c.node(NODE);
    assert!(unschedulable(&node));
    assert!(has_our_taint(&node));
    assert!(has_taint(&node, "example.com/other", "NoSchedule"));
    let marker = engine.marker().await.unwrap().expect("marker");
    assert_eq!(marker, out.marker);

    c.server.recorder().clear();
    let restored = engine.restore().await.unwrap();
    assert!(restored.uncordoned && restored.untainted);
    assert_eq!(
        c.server.recorder().matching("PATCH", "/nodes/").len(),
        1,
        "taint, cordon and marker undone in one write"
    );
    let node = c.node(NODE);
    assert!(!unschedulable(&node));
    assert!(!has_our_taint(&node));
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
    c.cordon_as_admin();
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
    assert!(has_our_taint(&c.node(NODE)));
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
    c.add_taint("example.com/first", "NoSchedule");
    // Every node PATCH waits 100 ms before it is applied; the writer changes the taints
    // meanwhile.
    delay_node_patches(&c, Duration::from_millis(100));
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
    assert!(!has_our_taint(&node));
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
    assert!(!has_our_taint(&node));
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
    let err = engine
        .prepare_by("x", Instant::now() + Duration::from_secs(1))
        .await
        .unwrap_err();
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

/// Two 503s on the Node GET and one on the PATCH: prepare retries them and ends with the marker,
/// the taint and the cordon, each recorded in the marker.
#[tokio::test]
async fn prepare_retries_transient_failures() {
    let c = Cluster::start(vec![]).await;
    let node_route = "/api/v1/nodes/node-a";
    c.server
        .faults()
        .fail_next(Route::new("GET", node_route), 2, 503);
    c.server
        .faults()
        .fail_next(Route::new("PATCH", node_route), 1, 503);
    let engine = Engine::new(c.settings("")).unwrap();
    let out = engine
        .prepare_by("shutdown", Instant::now() + Duration::from_secs(10))
        .await
        .unwrap();
    assert!(out.tainted && out.cordoned, "{out:?}");
    let node = c.node(NODE);
    assert!(unschedulable(&node));
    assert!(has_our_taint(&node));
    let marker = stored_marker(&node).expect("marker");
    assert_eq!(marker["cordoned"], true);
    assert_eq!(
        marker["taints"],
        json!([{"key": OUR_TAINT.0, "effect": OUR_TAINT.1}])
    );
    let rec = c.server.recorder();
    assert_eq!(
        rec.matching("GET", node_route)
            .iter()
            .filter(|r| r.status == 503)
            .count(),
        2
    );
    assert_eq!(
        rec.matching("PATCH", node_route)
            .iter()
            .filter(|r| r.status == 503)
            .count(),
        1
    );
}

/// 5xx answers until the deadline count as an unreachable server (exit code 3), and the error
/// names the node; the CLI's `drain` says so too.
#[tokio::test]
async fn a_server_answering_5xx_until_the_deadline_is_unreachable() {
    let c = Cluster::start(vec![]).await;
    c.server
        .faults()
        .fail_next(Route::new("GET", "/api/v1/nodes/node-a"), 1000, 503);
    let engine = Engine::new(c.settings("")).unwrap();
    let started = Instant::now();
    let err = engine
        .prepare_by("x", started + Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(err.is_unreachable(), "{err}");
    assert!(err.to_string().contains(NODE), "{err}");
    let attempts = c
        .server
        .recorder()
        .matching("GET", "/api/v1/nodes/node-a")
        .len();
    assert!(attempts >= 3, "retried with backoff: {attempts} attempts");
    assert!(stored_marker(&c.node(NODE)).is_none());

    let config = c.config_file("admin", "[drain]\ntimeout = \"1s\"\n");
    let r = cli(&config, &["drain"]).await;
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(r.stderr.contains(NODE), "{}", r.stderr);
}

/// The marker cannot be written at all (the write with the taint and the one without it are
/// both refused): nothing else is changed and the error says so.
#[tokio::test]
async fn a_failed_marker_write_changes_nothing_else() {
    let c = Cluster::start(vec![]).await;
    c.server
        .faults()
        .fail_next(Route::new("PATCH", "/api/v1/nodes/node-a"), 2, 400);
    let engine = Engine::new(c.settings("")).unwrap();
    let err = engine.prepare("shutdown").await.unwrap_err();
    let text = err.to_string();
    assert!(text.contains("marker") && text.contains(NODE), "{text}");
    assert!(text.contains("nothing else was changed"), "{text}");
    let node = c.node(NODE);
    assert!(stored_marker(&node).is_none());
    assert!(!unschedulable(&node));
    assert!(taints(&node).is_empty());
    assert_eq!(c.server.recorder().matching("PATCH", "/nodes/").len(), 2);
}

/// The write with the taint is refused with a non-transient error: the marker and the cordon
/// are written without it (the cordon recorded as ours), and the taint error is returned.
#[tokio::test]
async fn a_failed_taint_still_cordons() {
    let c = Cluster::start(vec![]).await;
    c.server
        .faults()
        .fail_next(Route::new("PATCH", "/api/v1/nodes/node-a"), 1, 400);
    let engine = Engine::new(c.settings("")).unwrap();
    let err = engine.prepare("shutdown").await.unwrap_err();
    let text = err.to_string();
    assert!(text.contains("taint") && text.contains(NODE), "{text}");
    let node = c.node(NODE);
    assert!(unschedulable(&node), "cordoned although the taint failed");
    assert!(!has_our_taint(&node));
    let marker = stored_marker(&node).expect("marker");
    assert_eq!(marker["cordoned"], true);
    assert_eq!(marker["taints"], json!([]));
    let patches = c
        .server
        .recorder()
        .matching("PATCH", "/api/v1/nodes/node-a");
    assert!(patches[0].body.contains("/spec/taints") && !patches[1].body.contains("/spec/taints"));
    // Restore undoes the cordon.
    engine.restore().await.unwrap();
    assert!(!unschedulable(&c.node(NODE)));
}

/// A marker whose prepare died before the cordon (here: written as prepare writes it, recording
/// no cordon), then an admin cordons: restore leaves the admin's cordon.
#[tokio::test]
async fn an_admin_cordon_after_a_marker_only_prepare_survives_restore() {
    let c = Cluster::start(vec![]).await;
    let marker = json!({"was_unschedulable": false, "taint_was_present": false,
        "boot_id": "0b0e1d00-0000-4000-8000-000000000001", "time": "2026-11-29T23:00:00Z",
        "why": "shutdown", "cordoned": false, "taints": []});
    c.server
        .store()
        .modify("Node", None, NODE, |n| {
            n["metadata"]["annotations"] = json!({MARKER_ANNOTATION: marker.to_string()});
            // The admin's cordon, after our marker.
            n["spec"]["unschedulable"] = json!(true);
        })
        .unwrap();
    let engine = Engine::new(c.settings("")).unwrap();
    let r = engine.restore().await.unwrap();
    assert!(!r.uncordoned);
    let node = c.node(NODE);
    assert!(unschedulable(&node), "the admin's cordon stays");
    assert!(stored_marker(&node).is_none(), "the marker is cleared");

    // A marker of an older version (no `cordoned`, no `taints`): nothing is guessed.
    let old = json!({"was_unschedulable": false, "taint_was_present": false,
        "boot_id": "b", "time": "2026-11-29T23:00:00Z", "why": "shutdown",
        "taint_key": OUR_TAINT.0, "taint_effect": OUR_TAINT.1});
    c.server
        .store()
        .modify("Node", None, NODE, |n| {
            n["metadata"]["annotations"] = json!({MARKER_ANNOTATION: old.to_string()});
        })
        .unwrap();
    c.add_taint(OUR_TAINT.0, OUR_TAINT.1);
    let r = engine.restore().await.unwrap();
    assert!(!r.uncordoned && !r.untainted);
    let node = c.node(NODE);
    assert!(unschedulable(&node) && has_our_taint(&node));
}

/// An admin cordons between our read and our write: the write's guard fails, we read again,
/// and the cordon is not recorded as ours (the taint is); restore leaves the node cordoned.
#[tokio::test]
async fn an_admin_cordon_during_prepare_is_not_taken_for_ours() {
    let c = Cluster::start(vec![]).await;
    let (engine, out) = prepare_while_an_admin_cordons(&c, "").await;
    assert!(!out.cordoned && !out.marker.cordoned, "{out:?}");
    assert!(out.tainted);
    let r = engine.restore().await.unwrap();
    assert!(!r.uncordoned && r.untainted);
    let node = c.node(NODE);
    assert!(unschedulable(&node), "the admin's cordon stays");
    assert!(!has_our_taint(&node));
}

/// A drain with admin credentials, a restore with the kubelet's: the cordon is undone, the taint
/// (which these credentials may not remove) stays listed in the marker, the error names node
/// and taint, and the CLI exits 1. A later restore with admin credentials finishes the job.
#[tokio::test]
async fn a_taint_the_restore_may_not_remove_stays_in_the_marker() {
    let c = Cluster::start(vec![]).await;
    let admin = Engine::new(c.settings("")).unwrap();
    admin.prepare("shutdown").await.unwrap();

    let kubelet = Engine::new(c.settings_as("system:node:node-a", "")).unwrap();
    let err = kubelet.restore().await.unwrap_err();
    let text = err.to_string();
    assert!(text.contains(NODE), "{text}");
    assert!(
        text.contains(&format!("{}:{}", OUR_TAINT.0, OUR_TAINT.1)),
        "{text}"
    );
    assert!(!err.is_unreachable());
    let node = c.node(NODE);
    assert!(!unschedulable(&node), "the cordon part is done");
    assert!(has_our_taint(&node));
    let marker = stored_marker(&node).expect("the marker stays");
    assert_eq!(marker["cordoned"], false);
    assert_eq!(
        marker["taints"],
        json!([{"key": OUR_TAINT.0, "effect": OUR_TAINT.1}])
    );

    // The CLI with the kubelet's credentials: exit 1, the reason on stderr.
    let config = c.config_file("system:node:node-a", "");
    let r = cli(&config, &["restore"]).await;
    assert_eq!(r.code, 1, "{}", r.stderr);
    assert!(
        r.stderr.contains(OUR_TAINT.0) && r.stderr.contains(NODE),
        "{}",
        r.stderr
    );

    let r = admin.restore().await.unwrap();
    assert!(r.untainted && !r.uncordoned);
    let node = c.node(NODE);
    assert!(!has_our_taint(&node));
    assert!(stored_marker(&node).is_none());
}

/// The taint configuration changes between two prepares: the marker lists both taints we added
/// and restore removes exactly those, leaving another writer's taint.
#[tokio::test]
async fn a_changed_taint_configuration_is_recorded_and_restored() {
    let c = Cluster::start(vec![]).await;
    c.add_taint("example.com/other", "NoSchedule");
    let first = Engine::new(c.settings("")).unwrap();
    first.prepare("drain by hand").await.unwrap();
    let second = Engine::new(
        c.settings("[taint]\nkey = \"example.com/maintenance\"\neffect = \"NoSchedule\"\n"),
    )
    .unwrap();
    let out = second.prepare("shutdown").await.unwrap();
    assert!(out.tainted);
    let listed: Vec<(String, String)> = out
        .marker
        .taints
        .iter()
        .map(|t| (t.key.clone(), t.effect.clone()))
        .collect();
    assert_eq!(
        listed,
        vec![
            (OUR_TAINT.0.to_string(), OUR_TAINT.1.to_string()),
            (
                "example.com/maintenance".to_string(),
                "NoSchedule".to_string()
            ),
        ]
    );
    let node = c.node(NODE);
    assert!(has_our_taint(&node));
    assert!(has_taint(&node, "example.com/maintenance", "NoSchedule"));

    let r = second.restore().await.unwrap();
    assert!(r.untainted && r.uncordoned);
    let node = c.node(NODE);
    assert!(!has_our_taint(&node));
    assert!(!has_taint(&node, "example.com/maintenance", "NoSchedule"));
    assert!(has_taint(&node, "example.com/other", "NoSchedule"));
    assert!(!unschedulable(&node));
}

/// An admin cordons while our cordon write is on its way: the write's resourceVersion guard
/// fails (422 for the JSON-patch `test`, or 409), we read the Node again, find it cordoned by
/// someone else and leave it so, unrecorded; restore keeps it cordoned.
#[tokio::test]
async fn an_admin_cordon_racing_our_cordon_write_wins() {
    let c = Cluster::start(vec![]).await;
    let (engine, out) = prepare_while_an_admin_cordons(&c, "[taint]\nenabled = false\n").await;
    assert!(!out.cordoned && !out.marker.cordoned, "{out:?}");
    let conflicts = c
        .server
        .recorder()
        .matching("PATCH", "/api/v1/nodes/node-a")
        .iter()
        .filter(|r| r.status == 409 || r.status == 422)
        .count();
    assert_eq!(conflicts, 1, "our cordon write lost the race once");
    let r = engine.restore().await.unwrap();
    assert!(!r.uncordoned);
    let node = c.node(NODE);
    assert!(unschedulable(&node), "the admin's cordon stays");
    assert!(stored_marker(&node).is_none());
}
