//! prepare / restore / marker / wait_ready against the fake API server: the marker written by
//! the same guarded write as the taint and the cordon, only our taint touched, an admin's cordon
//! survives (also one stored while our write is held at the server), concurrent taint writers
//! lose nothing (races staged at the fake's gates), kubelet credentials (taint forbidden) still
//! cordon and drain and fall back to the retry interval for budgets, Ready followed by a watch,
//! a taint they may not remove stays listed in the marker, transient failures are retried, a
//! changed taint configuration is recorded, clear errors for a missing node, an unreachable
//! server and a bad kubeconfig.

mod engine_support;

use std::sync::Arc;
use std::time::Duration;

use engine_support::*;
use fake_apiserver::{RecordedRequest, Route};
use kube_shutdown_drain::engine::{Engine, Error as EngineError, PrepareOutcome};
use kube_shutdown_drain::node::MARKER_ANNOTATION;
use serde_json::{Value, json};
use tokio::time::Instant;

const OUR_TAINT: (&str, &str) = ("kube-shutdown-drain/shutdown", "PreferNoSchedule");
const NODE_PATH: &str = "/api/v1/nodes/node-a";

fn has_taint(node: &Value, key: &str, effect: &str) -> bool {
    taints(node).contains(&(key.to_string(), effect.to_string()))
}

fn has_our_taint(node: &Value) -> bool {
    has_taint(node, OUR_TAINT.0, OUR_TAINT.1)
}

fn resource_version(node: &Value) -> String {
    node["metadata"]["resourceVersion"]
        .as_str()
        .expect("a stored node has a resourceVersion")
        .to_string()
}

/// A guarded write refused because the object changed (a failed JSON-patch `test`, or a stale
/// resourceVersion).
fn is_guard_failure(status: u16) -> bool {
    status == 409 || status == 422
}

/// Every PATCH of `node-a`.
fn node_patches() -> Route {
    Route::new("PATCH", NODE_PATH)
}

/// The PATCHes of `node-a` the server answered, in order.
fn patch_log(c: &Cluster) -> Vec<RecordedRequest> {
    c.server.recorder().matching("PATCH", NODE_PATH)
}

/// The JSON-patch operations of a recorded PATCH (asserting it is a JSON patch).
fn ops(r: &RecordedRequest) -> Vec<Value> {
    assert_eq!(
        r.content_type.as_deref(),
        Some("application/json-patch+json"),
        "a JSON patch: {}",
        r.body
    );
    serde_json::from_str(&r.body).expect("a JSON-patch body")
}

/// The resourceVersion a PATCH is guarded by: its first operation, a `test` of it.
fn guarded_by(r: &RecordedRequest) -> String {
    let ops = ops(r);
    assert_eq!(
        (ops[0]["op"].as_str(), ops[0]["path"].as_str()),
        (Some("test"), Some("/metadata/resourceVersion")),
        "guarded by the resourceVersion read: {}",
        r.body
    );
    ops[0]["value"]
        .as_str()
        .expect("a resourceVersion")
        .to_string()
}

/// The marker a PATCH writes, parsed (from `add` of the annotation or of the whole map).
fn marker_written(r: &RecordedRequest) -> Option<Value> {
    let pointer = format!(
        "/metadata/annotations/{}",
        MARKER_ANNOTATION.replace('/', "~1")
    );
    ops(r).iter().find_map(|o| {
        let text = match o["path"].as_str()? {
            p if p == pointer => o["value"].as_str()?.to_string(),
            "/metadata/annotations" => o["value"][MARKER_ANNOTATION].as_str()?.to_string(),
            _ => return None,
        };
        Some(serde_json::from_str(&text).expect("the marker is JSON"))
    })
}

/// Whether a PATCH adds our taint (to the list, or as a new list).
fn adds_our_taint(r: &RecordedRequest) -> bool {
    let ours = |t: &Value| t["key"] == OUR_TAINT.0 && t["effect"] == OUR_TAINT.1;
    ops(r).iter().any(|o| {
        o["op"] == "add"
            && match o["path"].as_str() {
                Some("/spec/taints/-") => ours(&o["value"]),
                Some("/spec/taints") => o["value"].as_array().is_some_and(|ts| ts.iter().any(ours)),
                _ => false,
            }
    })
}

/// Whether any operation of a PATCH touches the taints.
fn touches_taints(r: &RecordedRequest) -> bool {
    ops(r).iter().any(|o| {
        o["path"]
            .as_str()
            .is_some_and(|p| p.starts_with("/spec/taints"))
    })
}

/// Whether a PATCH sets `spec.unschedulable` to true.
fn cordons(r: &RecordedRequest) -> bool {
    ops(r).iter().any(|o| {
        (o["op"] == "add" || o["op"] == "replace")
            && o["path"] == "/spec/unschedulable"
            && o["value"] == true
    })
}

/// Whether any operation of a PATCH touches `spec.unschedulable`.
fn touches_cordon(r: &RecordedRequest) -> bool {
    ops(r).iter().any(|o| o["path"] == "/spec/unschedulable")
}

/// The methods of the requests for `node-a` itself (GET and PATCH), in the order answered.
fn node_reads_and_writes(c: &Cluster) -> Vec<String> {
    c.server
        .recorder()
        .requests()
        .into_iter()
        .filter(|r| r.path == NODE_PATH && (r.method == "GET" || r.method == "PATCH"))
        .map(|r| r.method)
        .collect()
}

/// Leaves the engine and the test as the only writers of `node-a`: its simulated kubelet stops
/// heart-beating (a heartbeat is a Node write, and would fail a guard the test did not stage),
/// with the node-monitor grace set far beyond any test so the node does not go Unknown either.
fn only_we_write_the_node(c: &Cluster) {
    let hour = Duration::from_secs(3600);
    c.server.kubelets().set_timing(hour, hour);
    c.server.kubelets().stop(NODE).unwrap();
}

/// Our next write of `node-a` is held at the gate of `route`: checks that it is the only one
/// held, runs `other` (another writer's change, stored directly) and checks that the change was
/// stored (a new resourceVersion) while ours stayed held. Returns the resourceVersions before and
/// after the other write.
async fn while_ours_is_held(
    c: &Cluster,
    route: &Route,
    other: impl FnOnce(&Cluster),
) -> (String, String) {
    c.until_held(route, 1).await;
    let before = resource_version(&c.node(NODE));
    other(c);
    let after = resource_version(&c.node(NODE));
    assert_ne!(before, after, "the other writer's change was stored");
    assert_eq!(
        c.server.faults().waiting_at(route),
        1,
        "our write was still held when the other change was stored"
    );
    (before, after)
}

/// Prepares `node-a` (settings plus `extra`) with its node PATCH held at a gate, while `other`
/// changes the node. Asserts that the race happened as staged before returning what prepare
/// returned: no PATCH was answered before the other write; the held PATCH was built from the
/// node as it was before that write and failed its guard; the node was read again and the
/// PATCH re-sent, guarded by the other write's resourceVersion, and applied.
async fn prepare_racing(
    c: &Cluster,
    extra: &str,
    other: impl FnOnce(&Cluster),
) -> (Arc<Engine>, Result<PrepareOutcome, EngineError>) {
    only_we_write_the_node(c);
    let route = node_patches();
    c.server.faults().gate(route.clone());
    let engine = Arc::new(Engine::new(c.settings(extra)).unwrap());
    let task = tokio::spawn({
        let engine = engine.clone();
        async move { engine.prepare("shutdown").await }
    });
    let (read, stored) = while_ours_is_held(c, &route, |c| {
        assert_eq!(
            c.server.recorder().count("PATCH", NODE_PATH),
            0,
            "no node PATCH answered before the other write"
        );
        assert!(c.marker_text().is_none(), "no marker before ours");
        other(c)
    })
    .await;
    c.server.faults().ungate(&route);
    let out = task.await.unwrap();

    let patches = patch_log(c);
    assert_eq!(patches.len(), 2, "the held write and the re-sent one");
    let (held, resent) = (&patches[0], &patches[1]);
    assert_eq!(guarded_by(held), read, "the held write came from our read");
    assert!(
        is_guard_failure(held.status),
        "the held write failed its guard: {} {}",
        held.status,
        held.response
    );
    assert_eq!(
        guarded_by(resent),
        stored,
        "re-sent from the node read again"
    );
    assert_eq!(resent.status, 200, "{}", resent.response);
    let order = node_reads_and_writes(c);
    assert_eq!(
        order,
        ["GET", "PATCH", "GET", "PATCH"],
        "read, the held write refused, read again, the write re-sent"
    );
    (engine, out)
}

#[tokio::test]
async fn prepare_writes_marker_taint_and_cordon_in_one_guarded_patch_and_restore_undoes_it() {
    let c = Cluster::start(vec![]).await;
    only_we_write_the_node(&c);
    c.add_taint("example.com/other", "NoSchedule");
    let engine = Engine::new(c.settings("")).unwrap();
    let read = resource_version(&c.node(NODE));
    let out = engine.prepare("shutdown").await.unwrap();
    assert!(out.tainted && out.cordoned && !out.taint_forbidden);
    assert!(!out.marker.was_unschedulable && !out.marker.taint_was_present);
    assert_eq!(out.marker.boot_id, "0b0e1d00-0000-4000-8000-000000000001");
    assert_eq!(out.marker.why, "shutdown");

    let patches = patch_log(&c);
    assert_eq!(patches.len(), 1, "marker, taint and cordon in one write");
    let p = &patches[0];
    assert_eq!(guarded_by(p), read, "guarded by the resourceVersion read");
    let written = marker_written(p).expect("the write carries the marker");
    assert_eq!(written["cordoned"], true);
    assert_eq!(
        written["taints"],
        json!([{"key": OUR_TAINT.0, "effect": OUR_TAINT.1}])
    );
    assert!(adds_our_taint(p) && cordons(p), "{}", p.body);

    let node = c.node(NODE);
    assert!(unschedulable(&node));
    assert!(has_our_taint(&node));
    assert!(has_taint(&node, "example.com/other", "NoSchedule"));
    let marker = engine.marker().await.unwrap().expect("marker");
    assert_eq!(marker, out.marker);

    c.server.recorder().clear();
    let before_restore = resource_version(&c.node(NODE));
    let restored = engine.restore().await.unwrap();
    assert!(restored.uncordoned && restored.untainted);
    let patches = patch_log(&c);
    assert_eq!(
        patches.len(),
        1,
        "taint, cordon and marker undone in one write"
    );
    let p = &patches[0];
    assert_eq!(guarded_by(p), before_restore, "restore is guarded too");
    let removes: Vec<String> = ops(p)
        .iter()
        .filter(|o| o["op"] == "remove")
        .filter_map(|o| o["path"].as_str().map(str::to_string))
        .collect();
    assert_eq!(
        removes,
        [
            "/spec/taints/1",
            "/spec/unschedulable",
            "/metadata/labels/node.kubernetes.io~1exclude-from-external-load-balancers",
            "/metadata/annotations/kube-shutdown-drain~1marker"
        ],
        "our taint (after the other one), the cordon, the load-balancer label, the marker: {}",
        p.body
    );
    let node = c.node(NODE);
    assert!(!unschedulable(&node));
    assert!(!has_our_taint(&node));
    assert!(
        has_taint(&node, "example.com/other", "NoSchedule"),
        "other taints untouched"
    );
    assert!(stored_marker(&node).is_none());
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

/// Another writer adds a taint while our prepare write is held at the server, twice: each held
/// write (built from the node before that taint) fails its guard, the node is read again and the
/// write re-sent from the new read; in the end every taint is there. Then a writer removes a
/// taint before ours and adds one while our restore write is held: the held removal (by list
/// index, which now names another taint) fails its guard, and the re-sent one removes exactly
/// ours.
#[tokio::test]
async fn a_concurrent_taint_writer_loses_nothing() {
    let c = Cluster::start(vec![]).await;
    only_we_write_the_node(&c);
    c.add_taint("example.com/first", "NoSchedule");
    let route = node_patches();
    let engine = Arc::new(Engine::new(c.settings("")).unwrap());
    c.server.faults().gate(route.clone());
    let prepare = tokio::spawn({
        let engine = engine.clone();
        async move { engine.prepare("shutdown").await }
    });
    let mut rounds = Vec::new();
    for i in 0..2 {
        let rvs = while_ours_is_held(&c, &route, |c| {
            assert!(!has_our_taint(&c.node(NODE)), "our taint not written yet");
            c.add_taint(&format!("example.com/writer-{i}"), "NoExecute");
        })
        .await;
        rounds.push(rvs);
        c.server.faults().pass(&route, 1);
        until("the held write answered", || {
            c.server.recorder().count("PATCH", NODE_PATH) == i + 1
        })
        .await;
    }
    c.server.faults().ungate(&route);
    let out = prepare.await.unwrap().unwrap();
    assert!(out.tainted && out.cordoned, "{out:?}");

    // The race happened as staged: each held write came from the read before the other
    // writer's taint and failed its guard; the next one came from the read after it.
    let patches = patch_log(&c);
    let statuses: Vec<u16> = patches.iter().map(|r| r.status).collect();
    assert!(
        statuses.len() == 3
            && is_guard_failure(statuses[0])
            && is_guard_failure(statuses[1])
            && statuses[2] == 200,
        "two failed guards, then the write: {statuses:?}"
    );
    assert_eq!(guarded_by(&patches[0]), rounds[0].0);
    assert_eq!(guarded_by(&patches[1]), rounds[0].1);
    assert_eq!(guarded_by(&patches[1]), rounds[1].0);
    assert_eq!(guarded_by(&patches[2]), rounds[1].1);
    assert!(
        patches.iter().all(adds_our_taint),
        "each write adds our taint"
    );
    assert_eq!(
        node_reads_and_writes(&c),
        ["GET", "PATCH", "GET", "PATCH", "GET", "PATCH"],
        "read again after each failed guard"
    );
    let node = c.node(NODE);
    for (k, e) in [
        ("example.com/first", "NoSchedule"),
        ("example.com/writer-0", "NoExecute"),
        ("example.com/writer-1", "NoExecute"),
        OUR_TAINT,
    ] {
        assert!(has_taint(&node, k, e), "{k}:{e} lost: {:?}", taints(&node));
    }

    // Restore: while our removal is held, the writer removes the first taint (so our taint's
    // index moves down by one) and adds another.
    c.server.recorder().clear();
    c.server.faults().gate(route.clone());
    let restore = tokio::spawn({
        let engine = engine.clone();
        async move { engine.restore().await }
    });
    let (mut before, mut after) = (Vec::new(), Vec::new());
    let (read, stored) = while_ours_is_held(&c, &route, |c| {
        before = taints(&c.node(NODE));
        c.server
            .store()
            .remove_node_taint(NODE, "example.com/first", None)
            .unwrap();
        c.add_taint("example.com/late", "NoSchedule");
        after = taints(&c.node(NODE));
    })
    .await;
    c.server.faults().ungate(&route);
    let r = restore.await.unwrap().unwrap();
    assert!(r.untainted && r.uncordoned, "{r:?}");
    let patches = patch_log(&c);
    assert_eq!(patches.len(), 2, "the held removal and the re-sent one");
    let removed = |p: &RecordedRequest| -> Vec<usize> {
        ops(p)
            .iter()
            .filter_map(|o| {
                o["path"]
                    .as_str()?
                    .strip_prefix("/spec/taints/")?
                    .parse()
                    .ok()
            })
            .collect()
    };
    let ours = (OUR_TAINT.0.to_string(), OUR_TAINT.1.to_string());
    let (held, resent) = (&patches[0], &patches[1]);
    assert_eq!(guarded_by(held), read);
    assert!(is_guard_failure(held.status), "{}", held.status);
    let held_index = removed(held);
    assert_eq!(held_index.len(), 1);
    assert_eq!(before[held_index[0]], ours, "the held write named ours");
    assert_ne!(
        after[held_index[0]], ours,
        "after the other write that index names another taint"
    );
    assert_eq!(guarded_by(resent), stored);
    assert_eq!(resent.status, 200);
    let resent_index = removed(resent);
    assert_eq!(resent_index.len(), 1);
    assert_eq!(after[resent_index[0]], ours, "the re-sent write names ours");
    let node = c.node(NODE);
    assert!(!has_our_taint(&node));
    assert!(!has_taint(&node, "example.com/first", "NoSchedule"));
    for (k, e) in [
        ("example.com/writer-0", "NoExecute"),
        ("example.com/writer-1", "NoExecute"),
        ("example.com/late", "NoSchedule"),
    ] {
        assert!(has_taint(&node, k, e), "{k}:{e} lost: {:?}", taints(&node));
    }
}

/// The kubelet's own credentials may not taint (NodeRestriction): the write with the taint is
/// refused (403), the same write without it stores the marker and the cordon, and the drain
/// still works; restore too.
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
    let patches = patch_log(&c);
    assert_eq!(patches.len(), 2, "the write with the taint, then without");
    assert_eq!(patches[0].status, 403, "{}", patches[0].response);
    assert!(adds_our_taint(&patches[0]), "{}", patches[0].body);
    assert_eq!(patches[1].status, 200, "{}", patches[1].response);
    assert!(
        !touches_taints(&patches[1]) && cordons(&patches[1]),
        "{}",
        patches[1].body
    );
    let node = c.node(NODE);
    assert!(unschedulable(&node));
    assert!(!has_our_taint(&node));
    assert_eq!(stored_marker(&node).expect("marker")["taints"], json!([]));
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
    // A lower bound only, by causality: each attempt is sent after the previous one's answer
    // plus the pause, so a loaded machine can make the gaps longer, never shorter. The attempts
    // while the budget was shut were paced by the interval, not a short backoff.
    for w in shut[..3].windows(2) {
        let gap = w[1].elapsed - w[0].elapsed;
        assert!(
            gap >= interval.as_secs_f64() - 0.001,
            "attempts {gap:.3} s apart, under the 1 s retry interval"
        );
    }
}

/// Ready is followed by a watch: the node is listed once and watched, and the change to Ready,
/// made while that watch is open and the wait still running, arrives through it (no read of
/// the node after the change, as polling would make).
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
    let of_node_a = |r: &RecordedRequest| {
        r.method == "GET"
            && r.path == "/api/v1/nodes"
            && r.query_param("fieldSelector").as_deref() == Some("metadata.name=node-a")
    };
    let is_watch = |r: &RecordedRequest| r.query_param("watch").as_deref() == Some("true");
    // Any read of the node other than a watch: a list, or a GET of it.
    let is_read = |r: &RecordedRequest| {
        (of_node_a(r) && !is_watch(r)) || (r.method == "GET" && r.path == NODE_PATH)
    };
    until("a watch of node-a", || {
        c.server
            .recorder()
            .requests()
            .iter()
            .any(|r| of_node_a(r) && is_watch(r))
    })
    .await;
    assert!(!wait.is_finished(), "still waiting while not Ready");
    let before_change = c.server.recorder().requests();
    set_ready("True");
    wait.await.unwrap().unwrap();
    let reqs = c.server.recorder().requests();
    assert_eq!(
        before_change.iter().filter(|r| is_read(r)).count(),
        1,
        "one list before the watch: {before_change:#?}"
    );
    assert!(
        reqs[before_change.len()..].iter().all(|r| !is_read(r)),
        "no read of the node after the change, Ready came by the watch: {reqs:#?}"
    );
    assert_eq!(
        reqs.iter().filter(|r| of_node_a(r) && is_watch(r)).count(),
        1,
        "one watch: {reqs:#?}"
    );
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

/// Two 503s on the Node GET and one on the PATCH: prepare retries them (the PATCH re-sent as it
/// was, not rebuilt) and ends with the marker, the taint and the cordon, each recorded in the
/// marker.
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
    let patches = rec.matching("PATCH", node_route);
    let statuses: Vec<u16> = patches.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [503, 200]);
    assert_eq!(
        patches[0].body, patches[1].body,
        "the same write, sent again"
    );
    assert!(adds_our_taint(&patches[1]) && cordons(&patches[1]));
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

    let config = c.config("[drain]\ntimeout = \"1s\"\n");
    let r = cli(&config, &["drain"]).await;
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(r.stderr.contains(NODE), "{}", r.stderr);
}

/// The marker cannot be written at all: the write with the taint is refused (a final answer,
/// 400), so is the same write without the taint; nothing else is changed and the error says so.
#[tokio::test]
async fn a_failed_marker_write_changes_nothing_else() {
    let c = Cluster::start(vec![]).await;
    c.server.faults().fail_next(node_patches(), 2, 400);
    let engine = Engine::new(c.settings("")).unwrap();
    let err = engine.prepare("shutdown").await.unwrap_err();
    let text = err.to_string();
    assert!(text.contains("marker") && text.contains(NODE), "{text}");
    assert!(text.contains("nothing else was changed"), "{text}");
    let node = c.node(NODE);
    assert!(stored_marker(&node).is_none());
    assert!(!unschedulable(&node));
    assert!(taints(&node).is_empty());
    let patches = patch_log(&c);
    assert_eq!(patches.len(), 2, "the write with the taint, then without");
    assert!(patches.iter().all(|p| p.status == 400));
    assert!(adds_our_taint(&patches[0]), "{}", patches[0].body);
    assert!(!touches_taints(&patches[1]), "{}", patches[1].body);
    assert!(patches.iter().all(|p| marker_written(p).is_some()));
}

/// The write with the taint is refused with a final answer (400, not a guard failure, not
/// transient): the same write without the taint, from the same read, stores the marker and the
/// cordon (recorded as ours, no taint listed), and the taint's error is returned.
#[tokio::test]
async fn a_failed_taint_still_cordons() {
    let c = Cluster::start(vec![]).await;
    only_we_write_the_node(&c);
    let read = resource_version(&c.node(NODE));
    c.server.faults().fail_next(node_patches(), 1, 400);
    let engine = Engine::new(c.settings("")).unwrap();
    let err = engine.prepare("shutdown").await.unwrap_err();
    let text = err.to_string();
    assert!(text.contains("taint") && text.contains(NODE), "{text}");
    assert!(!text.contains("nothing else was changed"), "{text}");

    // From the request log: the refused write carried the taint, the one applied did not.
    let patches = patch_log(&c);
    assert_eq!(patches.len(), 2, "the write with the taint, then without");
    let (refused, applied) = (&patches[0], &patches[1]);
    assert_eq!(refused.status, 400);
    assert!(
        adds_our_taint(refused) && cordons(refused),
        "{}",
        refused.body
    );
    assert_eq!(
        marker_written(refused).unwrap()["taints"],
        json!([{"key": OUR_TAINT.0, "effect": OUR_TAINT.1}])
    );
    assert_eq!(applied.status, 200, "{}", applied.response);
    assert!(
        !touches_taints(applied) && cordons(applied),
        "{}",
        applied.body
    );
    let m = marker_written(applied).unwrap();
    assert_eq!(
        (m["cordoned"].clone(), m["taints"].clone()),
        (json!(true), json!([]))
    );
    assert_eq!(
        (guarded_by(refused), guarded_by(applied)),
        (read.clone(), read),
        "both built from the one read"
    );
    assert_eq!(node_reads_and_writes(&c), ["GET", "PATCH", "PATCH"]);

    let node = c.node(NODE);
    assert!(unschedulable(&node), "cordoned although the taint failed");
    assert!(!has_our_taint(&node));
    let marker = stored_marker(&node).expect("marker");
    assert_eq!(marker["cordoned"], true);
    assert_eq!(marker["taints"], json!([]));
    // Restore undoes the cordon.
    let r = engine.restore().await.unwrap();
    assert!(r.uncordoned && !r.untainted, "{r:?}");
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

/// An admin cordons while our prepare write (marker, taint, cordon) is held at the server: the
/// held write fails its guard, the node is read again, and the re-sent write records the cordon
/// as the admin's (`was_unschedulable`), not ours, and does not write it; our taint still lands.
/// Restore removes our taint and leaves the admin's cordon.
#[tokio::test]
async fn an_admin_cordon_during_prepare_is_not_taken_for_ours() {
    let c = Cluster::start(vec![]).await;
    let (engine, out) = prepare_racing(&c, "", |c| {
        assert!(
            !unschedulable(&c.node(NODE)),
            "not cordoned before the admin"
        );
        c.cordon_as_admin();
    })
    .await;
    let out = out.unwrap();
    let patches = patch_log(&c);
    let (held, resent) = (&patches[0], &patches[1]);
    assert!(cordons(held) && adds_our_taint(held), "{}", held.body);
    assert_eq!(marker_written(held).unwrap()["cordoned"], true);
    assert!(
        !touches_cordon(resent),
        "the re-sent write leaves the cordon: {}",
        resent.body
    );
    assert!(adds_our_taint(resent), "{}", resent.body);
    let m = marker_written(resent).unwrap();
    assert_eq!(
        (m["cordoned"].clone(), m["was_unschedulable"].clone()),
        (json!(false), json!(true))
    );
    assert!(
        !out.cordoned && !out.marker.cordoned && out.marker.was_unschedulable,
        "{out:?}"
    );
    assert!(out.tainted);

    c.server.recorder().clear();
    let r = engine.restore().await.unwrap();
    assert!(!r.uncordoned && r.untainted, "{r:?}");
    let restore = &patch_log(&c)[0];
    assert!(
        !touches_cordon(restore),
        "restore leaves the cordon: {}",
        restore.body
    );
    let node = c.node(NODE);
    assert!(unschedulable(&node), "the admin's cordon stays");
    assert!(!has_our_taint(&node));
    assert!(stored_marker(&node).is_none());
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

/// With the taint disabled our prepare write is the marker and the cordon; an admin cordons
/// while it is held: it fails its guard and the re-sent write is the marker alone, recording no
/// cordon of ours; restore only clears the marker and the node stays cordoned. (The
/// load-balancer label is off here, so the writes hold only what the race is about.)
#[tokio::test]
async fn an_admin_cordon_racing_our_cordon_write_wins() {
    let c = Cluster::start(vec![]).await;
    let (engine, out) = prepare_racing(
        &c,
        "[taint]\nenabled = false\n[drain]\nexclude_from_load_balancers = false\n",
        |c| c.cordon_as_admin(),
    )
    .await;
    let out = out.unwrap();
    let patches = patch_log(&c);
    let (held, resent) = (&patches[0], &patches[1]);
    assert!(cordons(held) && !touches_taints(held), "{}", held.body);
    let resent_ops = ops(resent);
    assert_eq!(
        resent_ops.len(),
        2,
        "the guard and the marker only: {}",
        resent.body
    );
    assert!(marker_written(resent).is_some());
    assert!(
        !out.cordoned && !out.marker.cordoned && out.marker.was_unschedulable,
        "{out:?}"
    );

    c.server.recorder().clear();
    let r = engine.restore().await.unwrap();
    assert!(!r.uncordoned && !r.untainted, "{r:?}");
    let restore = &patch_log(&c)[0];
    assert!(
        !touches_cordon(restore) && !touches_taints(restore),
        "{}",
        restore.body
    );
    let node = c.node(NODE);
    assert!(unschedulable(&node), "the admin's cordon stays");
    assert!(stored_marker(&node).is_none());
}

/// The index in the request log of the first eviction, and of the first PATCH of the node the
/// server accepted.
fn first_eviction_and_cordon(c: &Cluster) -> (Option<usize>, Option<usize>) {
    let reqs = c.server.recorder().requests();
    let eviction = reqs
        .iter()
        .position(|r| r.method == "POST" && r.path.ends_with("/eviction"));
    let cordon = reqs
        .iter()
        .position(|r| r.method == "PATCH" && r.path == NODE_PATH && r.status == 200);
    (eviction, cordon)
}

/// The server throttles the prepare's write with a Retry-After far past the deadline: the
/// prepare does not give up at once (the one retry would), it keeps trying on its backoff, and
/// the shutdown path's evictions wait for its cordon.
#[tokio::test]
async fn a_prepare_throttled_past_its_deadline_keeps_trying_and_the_evictions_wait_for_it() {
    let c = Cluster::start(vec![pod(NS, "a", NODE), pod(NS, "b", NODE)]).await;
    c.server
        .faults()
        .fail_next_with_retry_after(node_patches(), 3, 429, 3600);
    let engine = Engine::new(c.settings("")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    let (prepared, report) = engine.prepare_and_drain("shutdown", deadline, |_| {}).await;
    let out = prepared.expect("the prepare landed");
    assert!(out.cordoned && out.tainted, "{out:?}");
    assert!(unschedulable(&c.node(NODE)));
    assert!(report.complete, "{}", report.to_text());
    let throttled = patch_log(&c).iter().filter(|r| r.status == 429).count();
    assert_eq!(throttled, 3, "every throttled write was tried again");
    let (eviction, cordon) = first_eviction_and_cordon(&c);
    assert!(
        eviction > cordon && cordon.is_some(),
        "the first eviction ({eviction:?}) after the cordon ({cordon:?})"
    );
}

/// A guard that fails round after round (a 422 loop: more than the guarded write's 10
/// re-reads) is tried again, the node read anew each round, until the write lands.
#[tokio::test]
async fn a_prepare_whose_guard_keeps_failing_keeps_trying_until_it_lands() {
    let c = Cluster::start(vec![]).await;
    c.server.faults().fail_next(node_patches(), 15, 422);
    let engine = Engine::new(c.settings("")).unwrap();
    let out = engine
        .prepare_by("shutdown", Instant::now() + Duration::from_secs(20))
        .await
        .expect("the write lands after the guard stops failing");
    assert!(out.cordoned, "{out:?}");
    assert!(unschedulable(&c.node(NODE)));
    let statuses: Vec<u16> = patch_log(&c).iter().map(|r| r.status).collect();
    assert_eq!(
        statuses.iter().filter(|s| **s == 422).count(),
        15,
        "{statuses:?}"
    );
    assert_eq!(statuses.last(), Some(&200), "{statuses:?}");
}

/// A cordon that never lands holds the evictions for half of the drain's time, not longer: the
/// pods are then evicted without it (a drain that never starts would lose them all) while the
/// prepare keeps trying to the deadline, and its failure is returned.
#[tokio::test]
async fn the_evictions_wait_for_a_cordon_that_never_lands_only_half_of_the_budget() {
    let c = Cluster::start(vec![pod(NS, "a", NODE), pod(NS, "b", NODE)]).await;
    c.server.faults().fail_next(node_patches(), 100_000, 422);
    let engine = Engine::new(c.settings("")).unwrap();
    let budget = Duration::from_secs(6);
    let started = std::time::SystemTime::now();
    let (prepared, report) = engine
        .prepare_and_drain("shutdown", Instant::now() + budget, |_| {})
        .await;
    assert!(prepared.is_err(), "the node was never cordoned");
    assert!(!unschedulable(&c.node(NODE)));
    assert_eq!(report.counts.evicted, 2, "{}", report.to_text());
    let reqs = c.server.recorder().requests();
    let first = reqs
        .iter()
        .find(|r| r.method == "POST" && r.path.ends_with("/eviction"))
        .expect("evictions were sent");
    let after = first.at.duration_since(started).unwrap();
    // A lower bound: load can only make it later. 100 ms for the clocks' granularity.
    assert!(
        after + Duration::from_millis(100) >= budget / 2,
        "the first eviction {after:?} after the start, before half of {budget:?}"
    );
    let last_patch = reqs.iter().rposition(|r| r.method == "PATCH").unwrap();
    let first_eviction = reqs
        .iter()
        .position(|r| r.path.ends_with("/eviction"))
        .unwrap();
    assert!(
        last_patch > first_eviction,
        "the prepare kept trying after the evictions began"
    );
}

/// Issue 29 item 9: `drain` by hand against a Node that changes on every write (every guarded
/// PATCH refused with 409) gives up at its deadline, round after round of the guarded write, and
/// says how many writes it sent: one PATCH per attempt it counts (it said "10 attempts" after
/// sending 70).
#[tokio::test]
async fn a_drain_by_hand_on_a_node_that_keeps_changing_counts_every_write_it_sent() {
    let c = Cluster::start(vec![]).await;
    c.server.faults().fail_next(node_patches(), 100_000, 409);
    let config = c.config_file("admin", "[drain]\ntimeout = \"3s\"\n");
    let r = cli(&config, &["drain"]).await;
    assert_ne!(r.code, 0, "{}", r.stderr);
    let sent = patch_log(&c).len();
    assert!(
        sent > 10,
        "more than one round of the guarded write: {sent}"
    );
    let said = format!("node node-a kept changing; gave up the prepare after {sent} attempts");
    assert!(r.stderr.contains(&said), "{said:?} in {}", r.stderr);
    assert!(c.marker_text().is_none() && !unschedulable(&c.node(NODE)));
}
