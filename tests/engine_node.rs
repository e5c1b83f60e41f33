//! prepare / restore / marker / wait_ready against the fake API server: marker before any
//! change, only our taint touched, an admin's cordon survives (also one that lands between our
//! marker and our cordon), concurrent taint writers lose nothing, kubelet credentials (taint
//! forbidden) still drain, a taint they may not remove stays listed in the marker, transient
//! failures are retried, a changed taint configuration is recorded, clear errors for a missing
//! node, an unreachable server and a bad kubeconfig.

mod engine_support;

use std::sync::Arc;
use std::time::Duration;

use engine_support::*;
use fake_apiserver::Route;
use kube_shutdown_drain::engine::{Engine, Error as EngineError, PrepareOutcome};
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

/// A guarded write refused because the object changed (a failed JSON-patch `test`, or a stale
/// resourceVersion).
fn is_guard_failure(status: u16) -> bool {
    status == 409 || status == 422
}

fn has_our_taint(node: &serde_json::Value) -> bool {
    has_taint(node, OUR_TAINT.0, OUR_TAINT.1)
}

/// Every PATCH of `node-a`.
fn node_patches() -> Route {
    Route::new("PATCH", "/api/v1/nodes/node-a")
}

/// Prepares `node-a` (settings plus `extra`) with every node PATCH held at a gate: the marker
/// write goes through, and once the marker is stored and our next write is held, `between` runs
/// (another writer acting between our marker and our next write); then every write goes on.
/// Asserts that the race was staged as described before returning what prepare returned.
async fn prepare_with_a_write_after_the_marker(
    c: &Cluster,
    extra: &str,
    between: impl FnOnce(&Cluster),
) -> (Arc<Engine>, Result<PrepareOutcome, EngineError>) {
    let route = node_patches();
    c.server.faults().gate(route.clone());
    let engine = Arc::new(Engine::new(c.settings(extra)).unwrap());
    let task = tokio::spawn({
        let engine = engine.clone();
        async move { engine.prepare("shutdown").await }
    });
    c.until_held(&route, 1).await;
    assert!(
        c.marker_text().is_none(),
        "the first node PATCH is the marker"
    );
    c.server.faults().pass(&route, 1);
    until("our marker stored", || c.marker_text().is_some()).await;
    c.until_held(&route, 1).await;
    assert_eq!(
        c.server.recorder().count("PATCH", "/api/v1/nodes/node-a"),
        1,
        "only the marker write was answered when the other writer acts"
    );
    between(c);
    c.server.faults().ungate(&route);
    let out = task.await.unwrap();
    (engine, out)
}

/// Prepares `node-a` while an admin cordons it between our marker and our next write.
async fn prepare_while_an_admin_cordons(c: &Cluster, extra: &str) -> (Arc<Engine>, PrepareOutcome) {
    let (engine, out) = prepare_with_a_write_after_the_marker(c, extra, |c| {
        assert!(
            !unschedulable(&c.node(NODE)),
            "not cordoned before the admin"
        );
        c.cordon_as_admin();
    })
    .await;
    (engine, out.unwrap())
}

#[tokio::test]
async fn prepare_writes_the_marker_first_then_taint_then_cordon_and_restore_undoes_it() {
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
    assert!(has_our_taint(&node));
    assert!(has_taint(&node, "example.com/other", "NoSchedule"));
    let marker = engine.marker().await.unwrap().expect("marker");
    assert_eq!(marker, out.marker);

    let restored = engine.restore().await.unwrap();
    assert!(restored.uncordoned && restored.untainted);
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

/// Another writer changes the taints while prepare adds ours, twice: each time our taint write
/// (a JSON patch guarded by a `test` of the taints) is held at the server while the writer adds a
/// taint, so the guard fails, we read again, and in the end every taint is there. Restore is
/// guarded the same way.
#[tokio::test]
async fn a_concurrent_taint_writer_loses_nothing() {
    let c = Cluster::start(vec![]).await;
    c.add_taint("example.com/first", "NoSchedule");
    let route = node_patches();
    let engine = Arc::new(Engine::new(c.settings("")).unwrap());
    c.server.faults().gate(route.clone());
    let prepare = tokio::spawn({
        let engine = engine.clone();
        async move { engine.prepare("shutdown").await }
    });
    // The marker write goes through.
    c.until_held(&route, 1).await;
    c.server.faults().pass(&route, 1);
    until("our marker stored", || c.marker_text().is_some()).await;
    // Our taint write is held while the writer adds a taint; twice.
    for i in 0..2 {
        c.until_held(&route, 1).await;
        assert!(!has_our_taint(&c.node(NODE)), "our taint not written yet");
        c.add_taint(&format!("example.com/writer-{i}"), "NoExecute");
        c.server.faults().pass(&route, 1);
        until("the held taint write answered", || {
            c.server.recorder().count("PATCH", "/api/v1/nodes/node-a") == i + 2
        })
        .await;
    }
    c.server.faults().ungate(&route);
    let out = prepare.await.unwrap().unwrap();
    assert!(out.tainted && out.cordoned, "{out:?}");
    let node = c.node(NODE);
    for (k, e) in [
        ("example.com/first", "NoSchedule"),
        ("example.com/writer-0", "NoExecute"),
        ("example.com/writer-1", "NoExecute"),
        OUR_TAINT,
    ] {
        assert!(has_taint(&node, k, e), "{k}:{e} lost: {:?}", taints(&node));
    }
    // The race happened as staged: the two held taint writes failed their guard, the third
    // (after reading the Node again) went through.
    let patches = c
        .server
        .recorder()
        .matching("PATCH", "/api/v1/nodes/node-a");
    let statuses: Vec<u16> = patches.iter().map(|r| r.status).collect();
    assert!(
        statuses.len() >= 4
            && statuses[0] == 200
            && is_guard_failure(statuses[1])
            && is_guard_failure(statuses[2])
            && statuses[3] == 200,
        "marker, two failed guards, the taint: {statuses:?}"
    );
    assert!(
        patches[1..4]
            .iter()
            .all(|r| r.content_type.as_deref() == Some("application/json-patch+json")),
        "the guarded writes are JSON patches"
    );

    // Restore: our taint removal is held while the writer adds a taint.
    c.server.recorder().clear();
    c.server.faults().gate(route.clone());
    let restore = tokio::spawn({
        let engine = engine.clone();
        async move { engine.restore().await }
    });
    c.until_held(&route, 1).await;
    c.add_taint("example.com/late", "NoSchedule");
    c.server.faults().ungate(&route);
    restore.await.unwrap().unwrap();
    let first = &c
        .server
        .recorder()
        .matching("PATCH", "/api/v1/nodes/node-a")[0];
    assert!(
        is_guard_failure(first.status),
        "the held removal failed its guard: {}",
        first.status
    );
    let node = c.node(NODE);
    assert!(!has_our_taint(&node));
    assert!(has_taint(&node, "example.com/late", "NoSchedule"));
    assert!(has_taint(&node, "example.com/writer-1", "NoExecute"));
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

/// With kubelet credentials the budget cannot be read or watched (403), so a blocked eviction is
/// tried again on `retry_interval` instead of on a budget change: while the budget stays shut,
/// attempts follow each other no sooner than the interval; once it opens, the drain completes.
#[tokio::test]
async fn kubelet_credentials_fall_back_to_the_retry_interval_for_budgets() {
    let c = Cluster::start(vec![
        pod(NS, "guarded", NODE),
        pdb(NS, "guarded-pdb", "guarded", 1),
    ])
    .await;
    let interval = Duration::from_secs(1);
    let engine = Arc::new(
        Engine::new(c.settings_as("system:node:node-a", "[drain]\nretry_interval = \"1s\"\n"))
            .unwrap(),
    );
    let drain = tokio::spawn({
        let engine = engine.clone();
        async move { engine.drain(Instant::now() + Duration::from_secs(20)).await }
    });
    let evictions = "/api/v1/namespaces/work/pods/guarded/eviction";
    // The evictions sent after the budget read was refused: with the budget unchanged, only the
    // retry interval can cause each one after the first.
    let after_refusal = || {
        let reqs = c.server.recorder().requests();
        let refused = reqs
            .iter()
            .rposition(|r| r.method == "GET" && r.path.contains("poddisruptionbudgets"));
        refused
            .map(|i| {
                reqs[i + 1..]
                    .iter()
                    .filter(|r| r.method == "POST" && r.path == evictions)
                    .cloned()
                    .collect::<Vec<_>>()
            })
            .unwrap_or_default()
    };
    until("three evictions after the budget read was refused", || {
        after_refusal().len() >= 3
    })
    .await;
    let shut = after_refusal();
    c.server
        .store()
        .modify("PodDisruptionBudget", Some(NS), "guarded-pdb", |p| {
            p["spec"]["minAvailable"] = json!(0)
        })
        .unwrap();
    let report = drain.await.unwrap();
    assert!(report.complete, "{}", report.to_text());

    let budget_reads = c.server.recorder().matching("GET", "poddisruptionbudgets");
    assert!(
        !budget_reads.is_empty(),
        "the drain tried to follow the budget"
    );
    assert!(
        budget_reads.iter().all(|r| r.status == 403),
        "the kubelet may not read budgets: {:?}",
        budget_reads.iter().map(|r| r.status).collect::<Vec<_>>()
    );
    assert!(shut.iter().all(|r| r.status == 429), "refused while shut");
    let posts = c.server.recorder().matching("POST", evictions);
    assert_eq!(posts.last().unwrap().status, 201, "accepted once open");
    // A lower bound only (a loaded machine can make the gaps longer, never shorter): the
    // attempts while the budget was shut were paced by the interval, not a short backoff.
    for w in shut[..3].windows(2) {
        let gap = w[1].elapsed - w[0].elapsed;
        assert!(
            gap >= interval.as_secs_f64() - 0.001,
            "attempts {gap:.3} s apart, under the 1 s retry interval"
        );
    }
}

/// Ready is followed by a watch: one read of the Node, then a watch of it, and the change to
/// Ready arrives through that watch (no second read, as polling would make).
#[tokio::test]
async fn wait_ready_follows_the_node_by_a_watch() {
    let c = Cluster::start(vec![]).await;
    let set_ready = |ready: &'static str| {
        c.server
            .store()
            .modify("Node", None, NODE, |n| {
                n["status"]["conditions"][0]["status"] = json!(ready)
            })
            .unwrap();
    };
    set_ready("False");
    let engine = Arc::new(Engine::new(c.settings("")).unwrap());

    // Not Ready and never becomes Ready: the deadline holds (a generous bound).
    let started = Instant::now();
    let err = engine
        .wait_ready(started + Duration::from_secs(1))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not Ready"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(6));

    // Becomes Ready once the watch is open.
    c.server.recorder().clear();
    let wait = tokio::spawn({
        let engine = engine.clone();
        async move {
            engine
                .wait_ready(Instant::now() + Duration::from_secs(30))
                .await
        }
    });
    let is_node_watch = |r: &fake_apiserver::RecordedRequest| {
        r.method == "GET"
            && r.path == "/api/v1/nodes"
            && r.query_param("watch").as_deref() == Some("true")
            && r.query_param("fieldSelector").as_deref() == Some("metadata.name=node-a")
    };
    until("a watch of node-a", || {
        c.server.recorder().requests().iter().any(is_node_watch)
    })
    .await;
    assert!(!wait.is_finished(), "still waiting while not Ready");
    set_ready("True");
    wait.await.unwrap().unwrap();
    let reqs = c.server.recorder().requests();
    let reads = reqs
        .iter()
        .filter(|r| r.method == "GET" && r.path == "/api/v1/nodes/node-a")
        .count();
    assert_eq!(reads, 1, "one read, no polling: {reqs:#?}");
    assert_eq!(reqs.iter().filter(|r| is_node_watch(r)).count(), 1);
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
/// names the node; the read was retried (not given up after one answer) and prepare returned by
/// its deadline; the CLI's `drain` says so too.
#[tokio::test]
async fn a_server_answering_5xx_until_the_deadline_is_unreachable() {
    let c = Cluster::start(vec![]).await;
    c.server
        .faults()
        .fail_next(Route::new("GET", "/api/v1/nodes/node-a"), 1000, 503);
    let engine = Engine::new(c.settings("")).unwrap();
    let started = Instant::now();
    let deadline = Duration::from_secs(2);
    let err = engine
        .prepare_by("x", started + deadline)
        .await
        .unwrap_err();
    assert!(
        started.elapsed() < deadline + Duration::from_secs(5),
        "returned by its deadline"
    );
    assert!(err.is_unreachable(), "{err}");
    assert!(err.to_string().contains(NODE), "{err}");
    let attempts = c.server.recorder().matching("GET", "/api/v1/nodes/node-a");
    assert!(
        attempts.len() >= 2 && attempts.iter().all(|r| r.status == 503),
        "retried, every answer a 503: {} attempts",
        attempts.len()
    );
    assert_eq!(c.server.recorder().count("PATCH", "/nodes/"), 0);
    assert!(stored_marker(&c.node(NODE)).is_none());

    let config = c.config_file("admin", "[drain]\ntimeout = \"1s\"\n");
    let r = cli(&config, &["drain"]).await;
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(r.stderr.contains(NODE), "{}", r.stderr);
}

/// The marker write itself fails: nothing else is changed and the error says so.
#[tokio::test]
async fn a_failed_marker_write_changes_nothing_else() {
    let c = Cluster::start(vec![]).await;
    c.server
        .faults()
        .fail_next(Route::new("PATCH", "/api/v1/nodes/node-a"), 1, 400);
    let engine = Engine::new(c.settings("")).unwrap();
    let err = engine.prepare("shutdown").await.unwrap_err();
    let text = err.to_string();
    assert!(text.contains("marker") && text.contains(NODE), "{text}");
    assert!(text.contains("nothing else was changed"), "{text}");
    let node = c.node(NODE);
    assert!(stored_marker(&node).is_none());
    assert!(!unschedulable(&node));
    assert!(taints(&node).is_empty());
    assert_eq!(c.server.recorder().matching("PATCH", "/nodes/").len(), 1);
}

/// The taint write fails with a non-transient error: the cordon still happens (recorded as
/// ours), and the taint error is returned.
#[tokio::test]
async fn a_failed_taint_still_cordons() {
    let c = Cluster::start(vec![]).await;
    // Once the marker is stored and our taint write is held, that write is made to fail.
    let (engine, out) = prepare_with_a_write_after_the_marker(&c, "", |c| {
        c.server.faults().fail_next(node_patches(), 1, 400)
    })
    .await;
    let err = out.unwrap_err();
    let patches = c
        .server
        .recorder()
        .matching("PATCH", "/api/v1/nodes/node-a");
    assert_eq!(
        (patches[1].status, patches[1].content_type.as_deref()),
        (400, Some("application/json-patch+json")),
        "the failed write is the taint"
    );
    let text = err.to_string();
    assert!(text.contains("taint") && text.contains(NODE), "{text}");
    let node = c.node(NODE);
    assert!(unschedulable(&node), "cordoned although the taint failed");
    assert!(!has_our_taint(&node));
    let marker = stored_marker(&node).expect("marker");
    assert_eq!(marker["cordoned"], true);
    assert_eq!(marker["taints"], json!([]));
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

/// An admin cordons while our prepare is between its marker and its cordon: the cordon is not
/// recorded as ours, and restore leaves the node cordoned.
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
/// fails (409), we read the Node again, find it cordoned by someone else and leave it so,
/// unrecorded; restore keeps it cordoned.
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
        .filter(|r| r.status == 409)
        .count();
    assert_eq!(conflicts, 1, "our cordon write lost the race once");
    let r = engine.restore().await.unwrap();
    assert!(!r.uncordoned);
    let node = c.node(NODE);
    assert!(unschedulable(&node), "the admin's cordon stays");
    assert!(stored_marker(&node).is_none());
}
