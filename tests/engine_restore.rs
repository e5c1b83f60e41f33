//! What restore will never undo, against the fake API server (issues 9 and 23): the cordon only
//! while our field manager alone owns `spec.unschedulable` (a co-owner keeps it; without
//! managedFields never), only our taint keys, nothing for a foreign marker (which
//! prepare replaces, still tainting and cordoning), a stale marker never applied to a later
//! admin cordon, and the boot restore's wait for a kubelet heartbeat from this boot. Each test
//! reads its evidence from the server: the request log, managedFields, the Node and its Events.

mod engine_support;

use std::time::Duration;

use engine_support::*;
use kube::api::{Patch, PatchParams};
use kube_shutdown_drain::engine::Engine;
use kube_shutdown_drain::node::MARKER_ANNOTATION;
use serde_json::{Value, json};
use tokio::time::Instant;

const OUR_TAINT: &str = "kube-shutdown-drain/shutdown";
const LIFECYCLE_TAINT: &str = "node.kubernetes.io/unschedulable";

/// The managers owning `f:spec.f:unschedulable` in the node's managedFields.
fn unschedulable_owners(node: &Value) -> Vec<String> {
    node.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(|entries| {
            entries
                .iter()
                .filter(|e| e.pointer("/fieldsV1/f:spec/f:unschedulable").is_some())
                .filter_map(|e| e["manager"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// Reasons of the Events about `node-a`.
fn event_reasons(c: &Cluster) -> Vec<String> {
    c.server
        .store()
        .list("Event", Some("default"))
        .iter()
        .filter(|e| e.pointer("/involvedObject/name") == Some(&json!(NODE)))
        .filter_map(|e| e["reason"].as_str().map(str::to_string))
        .collect()
}

fn event_messages(c: &Cluster, reason: &str) -> Vec<String> {
    c.server
        .store()
        .list("Event", Some("default"))
        .iter()
        .filter(|e| e["reason"] == json!(reason))
        .filter_map(|e| e["message"].as_str().map(str::to_string))
        .collect()
}

/// `kubectl cordon node-a`.
async fn admin_cordons(c: &Cluster) {
    kubectl_api(c)
        .await
        .patch(
            NODE,
            &as_kubectl(),
            &Patch::Strategic(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .unwrap();
}

/// Sets our annotation on `node-a` to `text`, as anyone with write access could.
fn set_marker_text(c: &Cluster, text: &str) {
    let text = text.to_string();
    c.server
        .store()
        .modify("Node", None, NODE, move |n| {
            n["metadata"]["annotations"] = json!({MARKER_ANNOTATION: text});
        })
        .unwrap();
}

#[tokio::test]
async fn our_cordon_is_sent_as_our_field_manager_and_restore_uncordons_while_we_own_it() {
    let c = Cluster::start(vec![]).await;
    let engine = Engine::new(c.settings("")).unwrap();
    engine.prepare("shutdown").await.unwrap();
    let patches = c
        .server
        .recorder()
        .matching("PATCH", "/api/v1/nodes/node-a");
    assert!(!patches.is_empty());
    for p in &patches {
        assert_eq!(
            p.query_param("fieldManager").as_deref(),
            Some("kube-shutdown-drain"),
            "{}",
            p.uri()
        );
    }
    assert_eq!(unschedulable_owners(&c.node(NODE)), ["kube-shutdown-drain"]);
    let out = engine.restore().await.unwrap();
    assert!(out.uncordoned && out.cordon_kept.is_none(), "{out:?}");
    let node = c.node(NODE);
    assert!(!unschedulable(&node) && stored_marker(&node).is_none());
}

#[tokio::test]
async fn a_stale_marker_never_uncordons_a_later_admin_cordon() {
    // drain; the admin uncordons and removes the taint by hand (the marker stays); days later
    // the admin cordons for maintenance; then restore (CLI or boot) runs.
    let c = Cluster::start(vec![]).await;
    let engine = Engine::new(c.settings("")).unwrap();
    engine.prepare("drain").await.unwrap();
    admin_uncordons_and_removes_our_taint(&c).await;
    assert!(stored_marker(&c.node(NODE)).unwrap()["cordoned"] == json!(true));
    admin_cordons(&c).await;
    assert_eq!(unschedulable_owners(&c.node(NODE)), ["kubectl"]);
    c.server.recorder().clear();

    let out = engine.restore().await.unwrap();
    assert!(!out.uncordoned, "{out:?}");
    let why = out
        .cordon_kept
        .expect("restore says why it kept the cordon");
    assert!(why.contains("owned by field manager kubectl"), "{why}");
    let node = c.node(NODE);
    assert!(unschedulable(&node), "the admin's cordon stays");
    assert!(stored_marker(&node).is_none(), "the marker is cleared");
    let sent: Vec<String> = c
        .server
        .recorder()
        .matching("PATCH", "/api/v1/nodes/node-a")
        .iter()
        .map(|r| r.body.clone())
        .collect();
    assert!(
        sent.iter().all(|b| !b.contains("/spec/unschedulable")),
        "no write touched the cordon: {sent:?}"
    );
    assert!(event_reasons(&c).contains(&"CordonLeftInPlace".to_string()));
}

#[tokio::test]
async fn a_prepare_after_an_admin_recordon_does_not_record_that_cordon_as_ours() {
    let c = Cluster::start(vec![]).await;
    let engine = Engine::new(c.settings("")).unwrap();
    engine.prepare("drain").await.unwrap();
    admin_uncordons_and_removes_our_taint(&c).await;
    admin_cordons(&c).await;
    // A new shutdown: prepare refreshes the marker from the Node as it is now.
    let out = engine.prepare("shutdown").await.unwrap();
    assert!(!out.cordoned && out.tainted, "{out:?}");
    let marker = stored_marker(&c.node(NODE)).unwrap();
    assert_eq!(marker["cordoned"], json!(false), "{marker}");
    assert_eq!(marker["was_unschedulable"], json!(true), "{marker}");
    let out = engine.restore().await.unwrap();
    assert!(!out.uncordoned && out.untainted, "{out:?}");
    let node = c.node(NODE);
    assert!(unschedulable(&node), "the admin's cordon stays");
    assert!(!taints(&node).iter().any(|(k, _)| k == OUR_TAINT));
}

/// `kubectl apply --server-side` of `spec.unschedulable: true` by an admin, as field manager
/// `kubectl` (the node may be cordoned already: the same value is shared ownership).
async fn admin_applies_a_cordon(c: &Cluster) {
    kubectl_api(c)
        .await
        .patch(
            NODE,
            &PatchParams::apply("kubectl"),
            &Patch::Apply(json!({
                "apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE},
                "spec": {"unschedulable": true}
            })),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn an_admin_who_also_applies_the_cordon_keeps_it_at_restore_and_restore_names_them() {
    // We cordon for a drain; meanwhile an admin decides the node stays out of service and
    // applies `unschedulable: true` server-side: the field is now owned by both managers.
    let c = Cluster::start(vec![]).await;
    let engine = Engine::new(c.settings("")).unwrap();
    engine.prepare("drain").await.unwrap();
    admin_applies_a_cordon(&c).await;
    let mut owners = unschedulable_owners(&c.node(NODE));
    owners.sort();
    assert_eq!(owners, ["kube-shutdown-drain", "kubectl"]);

    let out = engine.restore().await.unwrap();
    assert!(!out.uncordoned, "{out:?}");
    let why = out.cordon_kept.clone().expect("says why the cordon stays");
    assert!(why.contains("kubectl"), "{why}");
    assert!(out.untainted, "our taint still goes: {out:?}");
    let node = c.node(NODE);
    assert!(unschedulable(&node), "the admin's cordon stays");
    assert!(stored_marker(&node).is_none());
    assert!(
        event_messages(&c, "CordonLeftInPlace")
            .iter()
            .any(|m| m.contains("kubectl")),
        "the Event names the co-owner"
    );
}

#[tokio::test]
async fn without_managed_fields_even_our_own_cordon_stays_and_restore_says_why() {
    let c = Cluster::start(vec![]).await;
    c.server.store().set_managed_fields(false);
    let engine = Engine::new(c.settings("")).unwrap();
    engine.prepare("drain").await.unwrap();
    let node = c.node(NODE);
    assert!(node.pointer("/metadata/managedFields").is_none());
    assert!(taints(&node).iter().any(|(k, _)| k == LIFECYCLE_TAINT));
    let out = engine.restore().await.unwrap();
    assert!(!out.uncordoned, "{out:?}");
    assert!(out.cordon_kept.clone().unwrap().contains("cannot be told"));
    assert!(out.untainted, "our taint key still goes: {out:?}");
    assert!(unschedulable(&c.node(NODE)));
    assert!(
        event_messages(&c, "CordonLeftInPlace")
            .iter()
            .any(|m| m.contains("cannot be told"))
    );
}

#[tokio::test]
async fn without_managed_fields_a_marker_forged_with_the_lifecycle_taint_time_uncordons_nothing() {
    // An admin cordons; someone who can read and write the Node writes a marker whose
    // `cordoned_at` is the lifecycle taint's `timeAdded` (as readable as the marker itself).
    let c = Cluster::start(vec![]).await;
    c.server.store().set_managed_fields(false);
    admin_cordons(&c).await;
    let added = c.node(NODE)["spec"]["taints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["key"] == json!(LIFECYCLE_TAINT))
        .and_then(|t| t["timeAdded"].as_str().map(str::to_string))
        .expect("the lifecycle controller's taint with its time");
    let forged = json!({
        "was_unschedulable": false, "taint_was_present": false,
        "boot_id": "0b0e1d00-0000-4000-8000-0000000000ff", "time": added,
        "why": "drain", "cordoned": true, "cordoned_at": added, "version": 1, "taints": []
    });
    set_marker_text(&c, &forged.to_string());
    let engine = Engine::new(c.settings("")).unwrap();
    let out = engine.restore().await.unwrap();
    assert!(!out.uncordoned, "{out:?}");
    assert!(unschedulable(&c.node(NODE)), "the admin's cordon stays");
    assert!(out.cordon_kept.unwrap().contains("cannot be told"));
}

#[tokio::test]
async fn a_marker_listing_taints_of_others_removes_none_of_them() {
    let c = Cluster::start(vec![]).await;
    c.add_taint("admin/maintenance", "NoExecute");
    c.add_taint("node.kubernetes.io/unreachable", "NoSchedule");
    c.add_taint(OUR_TAINT, "PreferNoSchedule");
    let marker = json!({
        "was_unschedulable": false, "taint_was_present": false,
        "boot_id": "0b0e1d00-0000-4000-8000-0000000000ff", "time": "2026-11-29T10:00:00Z",
        "why": "drain", "cordoned": false, "version": 1,
        "taints": [
            {"key": "admin/maintenance", "effect": "NoExecute"},
            {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
            {"key": OUR_TAINT, "effect": "PreferNoSchedule"}
        ]
    });
    set_marker_text(&c, &marker.to_string());
    let engine = Engine::new(c.settings("")).unwrap();
    let out = engine.restore().await.unwrap();
    assert_eq!(
        out.refused_taints,
        [
            "admin/maintenance:NoExecute",
            "node.kubernetes.io/unreachable:NoSchedule"
        ]
    );
    let left: Vec<String> = taints(&c.node(NODE)).into_iter().map(|(k, _)| k).collect();
    assert_eq!(
        left,
        ["admin/maintenance", "node.kubernetes.io/unreachable"]
    );
    assert!(stored_marker(&c.node(NODE)).is_none());
}

#[tokio::test]
async fn a_garbage_marker_is_replaced_by_prepare_which_still_taints_and_cordons() {
    let c = Cluster::start(vec![]).await;
    set_marker_text(&c, "{not json");
    let engine = Engine::new(c.settings("")).unwrap();
    let out = engine.prepare("shutdown").await.unwrap();
    assert!(out.cordoned && out.tainted, "{out:?}");
    assert!(
        out.replaced_foreign
            .unwrap()
            .contains("not a marker of ours")
    );
    let node = c.node(NODE);
    assert!(unschedulable(&node));
    assert!(taints(&node).iter().any(|(k, _)| k == OUR_TAINT));
    let marker = stored_marker(&node).unwrap();
    assert_eq!(marker["cordoned"], json!(true));
    assert!(event_reasons(&c).contains(&"ForeignMarker".to_string()));
}

#[tokio::test]
async fn restore_clears_each_kind_of_foreign_marker_and_undoes_nothing() {
    let ours = json!({
        "was_unschedulable": false, "taint_was_present": false,
        "boot_id": "0b0e1d00-0000-4000-8000-0000000000ff", "time": "2026-11-29T10:00:00Z",
        "why": "drain", "cordoned": true, "cordoned_at": "2026-11-29T10:00:00Z", "version": 1,
        "taints": [{"key": OUR_TAINT, "effect": "PreferNoSchedule"}]
    });
    let with = |k: &str, v: Value| {
        let mut m = ours.clone();
        m[k] = v;
        m.to_string()
    };
    let cases = [
        (
            "unparsable",
            "{not json".to_string(),
            "not a marker of ours",
        ),
        (
            "wrong shape",
            r#"{"cordoned":true}"#.to_string(),
            "not a marker of ours",
        ),
        (
            "over 4 KiB",
            with("why", json!("x".repeat(5000))),
            "more than the 4096",
        ),
        (
            "unknown version",
            with("version", json!(2)),
            "marker version 2",
        ),
        (
            "impossible boot ID",
            with("boot_id", json!("not-a-boot")),
            "is not a boot ID",
        ),
    ];
    for (case, text, why) in cases {
        let c = Cluster::start(vec![]).await;
        c.add_taint(OUR_TAINT, "PreferNoSchedule");
        kubectl_api(&c)
            .await
            .patch(
                NODE,
                &PatchParams {
                    field_manager: Some("kube-shutdown-drain".into()),
                    ..Default::default()
                },
                &Patch::Strategic(json!({"spec": {"unschedulable": true}})),
            )
            .await
            .unwrap();
        set_marker_text(&c, &text);
        let engine = Engine::new(c.settings("")).unwrap();
        let out = engine.restore().await.unwrap();
        let reason = out.foreign_marker.clone().unwrap_or_default();
        assert!(reason.contains(why), "{case}: {out:?}");
        assert!(!out.uncordoned && !out.untainted, "{case}: {out:?}");
        let node = c.node(NODE);
        assert!(unschedulable(&node), "{case}: the cordon stays");
        assert!(
            taints(&node).iter().any(|(k, _)| k == OUR_TAINT),
            "{case}: the taint stays"
        );
        assert!(
            marker_text(&node).is_none(),
            "{case}: the marker is cleared"
        );
        assert!(
            event_messages(&c, "ForeignMarker")
                .iter()
                .any(|m| m.contains("undid nothing")),
            "{case}: an Event says so"
        );
    }
}

#[tokio::test]
async fn status_shows_a_foreign_marker_and_a_cordon_that_is_not_ours() {
    let c = Cluster::start(vec![]).await;
    set_marker_text(&c, "{not json");
    let config = c.config("");
    let run = cli(&config, &["status"]).await;
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(run.stdout.contains("FOREIGN"), "{}", run.stdout);
    let run = cli(&config, &["status", "--output", "json"]).await;
    let v: Value = serde_json::from_str(&run.stdout).expect(&run.stderr);
    assert!(
        v["foreign_marker"]
            .as_str()
            .unwrap()
            .contains("not a marker of ours")
    );
    // Our marker, but the cordon now belongs to kubectl.
    let engine = Engine::new(c.settings("")).unwrap();
    engine.prepare("drain").await.unwrap();
    admin_uncordons_and_removes_our_taint(&c).await;
    admin_cordons(&c).await;
    let run = cli(&config, &["status", "--output", "json"]).await;
    let v: Value = serde_json::from_str(&run.stdout).expect(&run.stderr);
    assert!(v["foreign_marker"].is_null());
    assert!(
        v["cordon_kept"].as_str().unwrap().contains("kubectl"),
        "{v}"
    );
    // `restore` by hand clears a foreign marker with a warning and exits 0.
    set_marker_text(&c, "{not json");
    let run = cli(&config, &["restore"]).await;
    assert_eq!(run.code, 0, "{}{}", run.stdout, run.stderr);
    assert!(run.stderr.contains("not one we wrote"), "{}", run.stderr);
    assert!(unschedulable(&c.node(NODE)));
}

/// Makes `node-a` look as a stopped kubelet of an earlier boot left it: Ready=True with the
/// heartbeat and the Lease renewal from long before this boot.
fn stale_ready(c: &Cluster) {
    c.server.kubelets().stop_leaving_stale_ready(NODE).unwrap();
    let node = c.node(NODE);
    assert!(
        node["status"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["type"] == json!("Ready") && c["status"] == json!("True")),
        "the stale Ready=True stays"
    );
}

#[tokio::test]
async fn a_stale_ready_is_not_enough_until_the_kubelet_heartbeats_in_this_boot() {
    let c = Cluster::start(vec![]).await;
    stale_ready(&c);
    let engine = Engine::new(c.settings("")).unwrap();
    let err = engine
        .wait_ready(Instant::now() + Duration::from_millis(1500))
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("before this boot began"), "{err}");
    // The kubelet starts: its first heartbeat is from this boot.
    let started = Instant::now();
    let server = &c.server;
    let (waited, ()) = tokio::join!(
        engine.wait_ready(started + Duration::from_secs(20)),
        async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            server.kubelets().start(NODE).unwrap();
        }
    );
    waited.unwrap();
}

#[tokio::test]
async fn a_lease_renewed_in_this_boot_proves_a_live_kubelet() {
    let c = Cluster::start(vec![]).await;
    stale_ready(&c);
    let engine = Engine::new(c.settings("")).unwrap();
    let store = c.server.store().clone();
    let started = Instant::now();
    let (waited, ()) = tokio::join!(
        engine.wait_ready(started + Duration::from_secs(20)),
        async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let now = jiff::Timestamp::now()
                .strftime("%Y-%m-%dT%H:%M:%S.%6fZ")
                .to_string();
            store
                .modify("Lease", Some("kube-node-lease"), NODE, |l| {
                    l["spec"]["renewTime"] = json!(now);
                })
                .unwrap();
        }
    );
    waited.unwrap();
    assert!(
        !c.server
            .recorder()
            .matching(
                "GET",
                "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/node-a"
            )
            .is_empty(),
        "the Lease was read"
    );
}

// The load-balancer exclusion label (issue 11, item 6): added by the prepare in its one guarded
// write, recorded in the marker, removed by restore only while our field manager owns it.

const LB_LABEL: &str = "node.kubernetes.io/exclude-from-external-load-balancers";

fn lb_label(node: &Value) -> Option<String> {
    node.pointer("/metadata/labels")
        .and_then(|l| l.get(LB_LABEL))
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// The managers owning the label in the node's managedFields.
fn lb_label_owners(node: &Value) -> Vec<String> {
    let field = format!(
        "/fieldsV1/f:metadata/f:labels/f:{}",
        LB_LABEL.replace('/', "~1")
    );
    node.pointer("/metadata/managedFields")
        .and_then(Value::as_array)
        .map(|entries| {
            entries
                .iter()
                .filter(|e| e.pointer(&field).is_some())
                .filter_map(|e| e["manager"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// `kubectl label node node-a LB_LABEL=VALUE --overwrite` (`None`: `LB_LABEL-`).
async fn admin_labels(c: &Cluster, value: Option<&str>) {
    kubectl_api(c)
        .await
        .patch(
            NODE,
            &as_kubectl(),
            &Patch::Merge(json!({"metadata": {"labels": {LB_LABEL: value}}})),
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn prepare_labels_the_node_out_of_load_balancers_in_its_one_write_and_restore_removes_it() {
    let c = Cluster::start(vec![]).await;
    let engine = Engine::new(c.settings("")).unwrap();
    engine.prepare("shutdown").await.unwrap();
    let patches: Vec<_> = c
        .server
        .recorder()
        .matching("PATCH", "/api/v1/nodes/node-a")
        .into_iter()
        .filter(|r| r.status < 300)
        .collect();
    assert_eq!(patches.len(), 1, "one write: {patches:?}");
    let body = &patches[0].body;
    assert!(
        body.contains("resourceVersion")
            && body.contains("unschedulable")
            && body.contains("exclude-from-external-load-balancers"),
        "the guarded prepare patch carries the label: {body}"
    );
    let node = c.node(NODE);
    assert_eq!(lb_label(&node).as_deref(), Some("true"));
    assert_eq!(lb_label_owners(&node), ["kube-shutdown-drain"]);
    assert_eq!(
        stored_marker(&node).unwrap()["excluded_from_load_balancers"],
        true
    );
    let out = engine.restore().await.unwrap();
    assert!(
        out.lb_label_removed && out.lb_label_kept.is_none(),
        "{out:?}"
    );
    let node = c.node(NODE);
    assert_eq!(lb_label(&node), None);
    assert!(stored_marker(&node).is_none());
    assert!(
        kube_shutdown_drain::engine::restore_text(&out)
            .contains("load-balancer exclusion label removed")
    );
}

#[tokio::test]
async fn an_admin_label_is_never_recorded_as_ours_nor_removed() {
    let c = Cluster::start(vec![]).await;
    admin_labels(&c, Some("true")).await;
    let engine = Engine::new(c.settings("")).unwrap();
    engine.prepare("shutdown").await.unwrap();
    assert_eq!(
        stored_marker(&c.node(NODE)).unwrap()["excluded_from_load_balancers"],
        false
    );
    let out = engine.restore().await.unwrap();
    assert!(!out.lb_label_removed, "{out:?}");
    let node = c.node(NODE);
    assert_eq!(lb_label(&node).as_deref(), Some("true"));
    assert_eq!(lb_label_owners(&node), ["kubectl"]);
}

#[tokio::test]
async fn a_label_set_again_by_an_admin_after_ours_stays_at_restore() {
    let c = Cluster::start(vec![]).await;
    let engine = Engine::new(c.settings("")).unwrap();
    engine.prepare("shutdown").await.unwrap();
    // The admin removes our label and sets it again (for maintenance of their own).
    admin_labels(&c, None).await;
    admin_labels(&c, Some("true")).await;
    assert_eq!(lb_label_owners(&c.node(NODE)), ["kubectl"]);
    // `status` says so before the restore.
    let config = c.config("");
    let run = cli(&config, &["status", "--output", "json"]).await;
    let v: Value = serde_json::from_str(&run.stdout).expect(&run.stderr);
    assert!(v["label_kept"].as_str().unwrap().contains("kubectl"), "{v}");
    let text = cli(&config, &["status"]).await.stdout;
    assert!(text.contains("lb exclusion:  not provably ours"), "{text}");
    let out = engine.restore().await.unwrap();
    assert!(!out.lb_label_removed, "{out:?}");
    let why = out.lb_label_kept.clone().expect("says why the label stays");
    assert!(why.contains("kubectl"), "{why}");
    assert!(out.uncordoned, "the rest is restored: {out:?}");
    assert_eq!(lb_label(&c.node(NODE)).as_deref(), Some("true"));
}

#[tokio::test]
async fn a_label_an_admin_also_applies_server_side_stays_at_restore() {
    let c = Cluster::start(vec![]).await;
    let engine = Engine::new(c.settings("")).unwrap();
    engine.prepare("shutdown").await.unwrap();
    // The same value, applied: both managers own the label now.
    kubectl_api(&c)
        .await
        .patch(
            NODE,
            &PatchParams::apply("kubectl"),
            &Patch::Apply(json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": NODE, "labels": {LB_LABEL: "true"}}
            })),
        )
        .await
        .unwrap();
    let mut owners = lb_label_owners(&c.node(NODE));
    owners.sort();
    assert_eq!(owners, ["kube-shutdown-drain", "kubectl"]);
    let out = engine.restore().await.unwrap();
    assert!(!out.lb_label_removed, "{out:?}");
    assert!(
        out.lb_label_kept
            .as_deref()
            .unwrap_or("")
            .contains("also owned by field manager kubectl"),
        "{out:?}"
    );
    assert!(out.uncordoned, "the cordon was ours alone: {out:?}");
    assert_eq!(lb_label(&c.node(NODE)).as_deref(), Some("true"));
}

#[tokio::test]
async fn without_managed_fields_the_label_stays_and_restore_says_why() {
    let c = Cluster::start(vec![]).await;
    c.server.store().set_managed_fields(false);
    let engine = Engine::new(c.settings("")).unwrap();
    engine.prepare("drain").await.unwrap();
    assert_eq!(lb_label(&c.node(NODE)).as_deref(), Some("true"));
    let out = engine.restore().await.unwrap();
    assert!(!out.lb_label_removed, "{out:?}");
    assert!(out.lb_label_kept.unwrap().contains("cannot be told"));
    assert_eq!(lb_label(&c.node(NODE)).as_deref(), Some("true"));
    assert!(
        event_messages(&c, "LoadBalancerExclusionLeftInPlace")
            .iter()
            .any(|m| m.contains("cannot be told"))
    );
}

#[tokio::test]
async fn exclude_from_load_balancers_false_adds_no_label() {
    let c = Cluster::start(vec![]).await;
    let engine = Engine::new(c.settings("[drain]\nexclude_from_load_balancers = false\n")).unwrap();
    engine.prepare("drain").await.unwrap();
    let node = c.node(NODE);
    assert_eq!(lb_label(&node), None);
    assert_eq!(
        stored_marker(&node).unwrap()["excluded_from_load_balancers"],
        false
    );
    assert!(unschedulable(&node));
}

/// `kubectl annotate node node-a kube-shutdown-drain/marker-`: someone removes our marker.
async fn someone_removes_the_marker(c: &Cluster) {
    let params = PatchParams {
        field_manager: Some("kubectl-annotate".into()),
        ..Default::default()
    };
    kubectl_api(c)
        .await
        .patch(
            NODE,
            &params,
            &Patch::Merge(json!({"metadata": {"annotations": {MARKER_ANNOTATION: null}}})),
        )
        .await
        .unwrap();
    assert!(stored_marker(&c.node(NODE)).is_none());
}

/// Issue 29 item 8: the marker removed by someone while our cordon, taint and label stay. The
/// cordon and the label are ours by managedFields (our manager alone owns them): restore
/// undoes them. The taint list was last written by the node-lifecycle controller (its
/// `node.kubernetes.io/unschedulable` after our cordon), so our taint is not provably ours: it
/// stays, and restore says so with the command that removes it, in its text and its Event.
#[tokio::test]
async fn without_the_marker_restore_undoes_what_managed_fields_prove_ours_and_names_the_rest() {
    let c = Cluster::start(vec![]).await;
    let engine = Engine::new(c.settings("")).unwrap();
    engine.prepare("drain").await.unwrap();
    until("the lifecycle controller's taint", || {
        taints(&c.node(NODE))
            .iter()
            .any(|(k, _)| k == LIFECYCLE_TAINT)
    })
    .await;
    someone_removes_the_marker(&c).await;

    let out = engine.restore().await.unwrap();
    assert!(
        out.uncordoned && out.lb_label_removed && !out.untainted,
        "{out:?}"
    );
    let node = c.node(NODE);
    assert!(!unschedulable(&node));
    assert_eq!(lb_label(&node), None);
    assert!(
        taints(&node).iter().any(|(k, _)| k == OUR_TAINT),
        "unproven: stays"
    );
    let text = kube_shutdown_drain::engine::restore_text(&out);
    assert!(
        text.starts_with("no marker of ours (someone removed it); undid what managedFields prove ours: uncordoned, load-balancer exclusion label removed; taint kube-shutdown-drain/shutdown:PreferNoSchedule stays on node node-a (")
            && text.contains("kube-controller-manager")
            && text.ends_with("remove it with `kubectl taint nodes node-a kube-shutdown-drain/shutdown:PreferNoSchedule-`"),
        "{text}"
    );
    let said = event_messages(&c, "Restored");
    assert_eq!(said, [format!("node node-a restored: {text}")]);
}

/// Issue 29 item 8: an admin cordoned before our prepare (so it did not cordon) and the taint
/// list was ours when the marker was removed: restore removes our taint, never the admin's
/// cordon nor the admin's taint.
#[tokio::test]
async fn without_the_marker_our_taint_goes_and_an_admin_cordon_stays() {
    let c = Cluster::start(vec![]).await;
    admin_cordons(&c).await;
    until("the lifecycle controller's taint", || {
        taints(&c.node(NODE))
            .iter()
            .any(|(k, _)| k == LIFECYCLE_TAINT)
    })
    .await;
    let engine = Engine::new(c.settings("[drain]\nexclude_from_load_balancers = false\n")).unwrap();
    let prepared = engine.prepare("drain").await.unwrap();
    assert!(prepared.tainted && !prepared.cordoned, "{prepared:?}");
    someone_removes_the_marker(&c).await;

    let out = engine.restore().await.unwrap();
    assert!(
        out.untainted && !out.uncordoned && out.unproven.is_empty(),
        "{out:?}"
    );
    assert_eq!(
        out.removed_taints,
        ["kube-shutdown-drain/shutdown:PreferNoSchedule"]
    );
    let node = c.node(NODE);
    assert!(unschedulable(&node), "the admin's cordon stays");
    assert_eq!(unschedulable_owners(&node), ["kubectl"]);
    let keys: Vec<String> = taints(&node).into_iter().map(|(k, _)| k).collect();
    assert_eq!(keys, [LIFECYCLE_TAINT]);
    // A second restore finds nothing of ours.
    let again = engine.restore().await.unwrap();
    assert_eq!(
        kube_shutdown_drain::engine::restore_text(&again),
        "no marker of ours; nothing left to undo"
    );
}

/// Issue 29 item 8: a duplicated taint of ours (two copies of key and effect, as a writer that
/// appends without looking leaves) goes entirely.
#[tokio::test]
async fn every_copy_of_our_taint_goes() {
    let c = Cluster::start(vec![]).await;
    let engine = Engine::new(c.settings("")).unwrap();
    engine.prepare("drain").await.unwrap();
    c.server
        .store()
        .modify("Node", None, NODE, |n| {
            let copy = json!({"key": OUR_TAINT, "effect": "PreferNoSchedule", "value": "again"});
            n["spec"]["taints"].as_array_mut().unwrap().push(copy);
        })
        .unwrap();
    let copies = |n: &Value| taints(n).iter().filter(|(k, _)| k == OUR_TAINT).count();
    assert_eq!(copies(&c.node(NODE)), 2);
    let out = engine.restore().await.unwrap();
    assert!(out.untainted, "{out:?}");
    assert_eq!(copies(&c.node(NODE)), 0);
    assert!(stored_marker(&c.node(NODE)).is_none());
}

/// Issue 29 item 8: `[taint] key` changed between the prepare and the restore. The marker our
/// field manager wrote lists the old key's taint: its record, not today's configuration, says
/// what to remove, so the taint goes with the marker (a marker someone else wrote still widens
/// nothing: `a_marker_listing_taints_of_others_removes_none_of_them`).
#[tokio::test]
async fn the_marker_not_todays_config_says_which_taint_restore_removes() {
    let c = Cluster::start(vec![]).await;
    c.add_taint("example.com/other", "NoSchedule");
    let before = Engine::new(
        c.settings("[taint]\nkey = \"example.com/maintenance\"\neffect = \"NoSchedule\"\n"),
    )
    .unwrap();
    assert!(before.prepare("drain").await.unwrap().tainted);
    let after = Engine::new(c.settings("")).unwrap();
    let out = after.restore().await.unwrap();
    assert!(out.untainted && out.refused_taints.is_empty(), "{out:?}");
    assert_eq!(out.removed_taints, ["example.com/maintenance:NoSchedule"]);
    let node = c.node(NODE);
    let keys: Vec<String> = taints(&node).into_iter().map(|(k, _)| k).collect();
    assert!(
        !keys.contains(&"example.com/maintenance".to_string()),
        "{keys:?}"
    );
    assert!(keys.contains(&"example.com/other".to_string()), "{keys:?}");
    assert!(stored_marker(&node).is_none());
}
