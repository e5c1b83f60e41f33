//! What holds a reboot (issue 31, "When"), read against the fake API server with the shipped
//! identity and RBAC: the Node's hold annotation present or absent and who set it, the pause
//! Lease present, absent, forbidden (to the kubelet's credentials), and
//! the API server down (every read `unknown`, never a "may go"); the pods of
//! `blocking_pod_selector` running here, completed here, or running on another node.

mod engine_support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use engine_support::*;
use kube::api::Patch;
use kube_shutdown_drain::config::reboot::{RebootSettings, from_toml};
use kube_shutdown_drain::config::{Settings, Source};
use kube_shutdown_drain::engine::Engine;
use kube_shutdown_drain::reboot::holds::{Context, Holds, Key, PAUSE_LEASE};
use kube_shutdown_drain::reboot::holds_read::holds;
use kube_shutdown_drain::reboot::window::Windows;
use serde_json::{Value, json};
use tokio::time::Instant;

/// `[reboot]` with a trigger and `extra`.
fn reboot(extra: &str) -> RebootSettings {
    let text = format!("[reboot]\nupdate_engine = true\n{extra}");
    from_toml(&Source {
        path: Path::new("/test/config.toml"),
        text: &text,
    })
    .unwrap_or_else(|e| panic!("test [reboot] is valid: {e}"))
}

/// What holds `node-a` now, read with its shipped identity within `within`; windows: any time.
async fn holds_now(settings: &Arc<Settings>, reboot: &RebootSettings, within: Duration) -> Holds {
    let engine = Engine::new(settings.clone()).unwrap();
    let clients = engine.clients().await.unwrap();
    let windows = Windows::any_time();
    let cx = Context::new(settings, reboot, &windows, None, None);
    holds(clients, &cx, Instant::now() + within).await
}

fn keys(h: &Holds) -> Vec<&'static str> {
    h.reasons.iter().map(|r| r.key.as_str()).collect()
}

fn pause_lease(namespace: &str) -> Value {
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": PAUSE_LEASE, "namespace": namespace},
        "spec": {}})
}

/// A pod of `app=backup` on `node` in `phase`.
fn backup(name: &str, node: &str, phase: &str) -> Value {
    let mut p = pod_with(
        NS,
        name,
        node,
        json!({"metadata": {"labels": {"app": "backup"}}}),
    );
    p["status"]["phase"] = json!(phase);
    p
}

#[tokio::test]
async fn a_node_without_annotation_pause_or_blocking_pod_may_go() {
    let c = Cluster::start(vec![pod(NS, "web", NODE)]).await;
    let h = holds_now(
        &c.settings(""),
        &reboot("blocking_pod_selector = \"app=backup\""),
        Duration::from_secs(5),
    )
    .await;
    assert!(h.may_go(), "{h}");
}

#[tokio::test]
async fn the_hold_annotation_holds_the_node_and_says_who_set_it() {
    let c = Cluster::start(vec![]).await;
    let settings = c.settings("");
    let r = reboot("");
    // An admin's kubectl annotate: the API server records its field manager.
    kubectl_api(&c)
        .await
        .patch(
            NODE,
            &kube::api::PatchParams {
                field_manager: Some("ops-oncall".into()),
                ..Default::default()
            },
            &Patch::Merge(
                json!({"metadata": {"annotations": {"kube-shutdown-drain/hold": "db migration"}}}),
            ),
        )
        .await
        .unwrap();
    let h = holds_now(&settings, &r, Duration::from_secs(5)).await;
    assert_eq!(h.keys(), [Key::Held], "{h}");
    assert_eq!(
        h.reasons[0].message,
        "node node-a is held by its annotation kube-shutdown-drain/hold (set by field manager \
         ops-oncall): remove the annotation to let it reboot"
    );
    // A server that sends no managedFields: the value says who.
    c.server.store().set_managed_fields(false);
    c.server
        .store()
        .modify("Node", None, NODE, |n| {
            n["metadata"]["annotations"]["kube-shutdown-drain/hold"] = json!("ticket OPS-42")
        })
        .unwrap();
    let h = holds_now(&settings, &r, Duration::from_secs(5)).await;
    assert_eq!(h.keys(), [Key::Held], "{h}");
    assert!(
        h.reasons[0].message.contains("(value \"ticket OPS-42\")"),
        "{h}"
    );
    // Removed: the node may go; the hold on node-b is not node-a's.
    c.server
        .store()
        .modify("Node", None, NODE, |n| {
            n["metadata"]["annotations"]
                .as_object_mut()
                .unwrap()
                .remove("kube-shutdown-drain/hold");
        })
        .unwrap();
    c.server
        .store()
        .modify("Node", None, OTHER_NODE, |n| {
            n["metadata"]["annotations"] = json!({"kube-shutdown-drain/hold": "x"})
        })
        .unwrap();
    let h = holds_now(&settings, &r, Duration::from_secs(5)).await;
    assert!(h.may_go(), "{h}");
}

#[tokio::test]
async fn the_pause_lease_in_the_lease_namespace_pauses_every_node() {
    let c = Cluster::start(vec![pause_lease("kube-shutdown-drain")]).await;
    let r = reboot("");
    for node in [NODE, OTHER_NODE] {
        let kc = c.kubeconfig(&identity_of(node));
        let text = format!(
            "node_name = \"{node}\"\nkubeconfig = \"{}\"\nrequest_timeout = \"2s\"\n",
            kc.display()
        );
        let settings =
            Arc::new(Settings::from_str_at(Path::new("/test/config.toml"), &text).unwrap());
        let h = holds_now(&settings, &r, Duration::from_secs(5)).await;
        assert_eq!(keys(&h), ["paused"], "{node}: {h}");
        assert_eq!(
            h.reasons[0].message,
            format!(
                "the fleet's reboots are paused by Lease \
                 kube-shutdown-drain/kube-shutdown-drain-pause since {}: node {node} waits \
                 until it is deleted",
                c.server
                    .store()
                    .get("Lease", Some("kube-shutdown-drain"), PAUSE_LEASE)
                    .unwrap()["metadata"]["creationTimestamp"]
                    .as_str()
                    .unwrap()
            )
        );
    }
    // Deleted: the fleet goes on.
    c.server
        .store()
        .remove("Lease", Some("kube-shutdown-drain"), PAUSE_LEASE)
        .unwrap();
    let h = holds_now(&c.settings(""), &r, Duration::from_secs(5)).await;
    assert!(h.may_go(), "{h}");
    // A pause in another namespace is not this fleet's.
    c.server.store().upsert(pause_lease("default")).unwrap();
    let h = holds_now(&c.settings(""), &r, Duration::from_secs(5)).await;
    assert!(h.may_go(), "{h}");
}

/// The kubelet's credentials (`system:node:NAME`): the Node authorizer lets a node read only its
/// own Lease in `kube-node-lease`, so the pause Lease answers 403, and the node waits, saying
/// why, rather than going.
#[tokio::test]
async fn a_pause_lease_the_identity_may_not_read_is_unknown_not_a_go() {
    let c = Cluster::start(vec![]).await;
    c.expect_denials();
    let settings = c.settings_as("system:node:node-a", "");
    let h = holds_now(&settings, &reboot(""), Duration::from_secs(5)).await;
    assert_eq!(keys(&h), ["unknown"], "{h}");
    let message = &h.reasons[0].message;
    assert!(
        message.starts_with(
            "cannot tell whether the fleet is paused (Lease \
             kube-shutdown-drain/kube-shutdown-drain-pause), so node node-a waits: Lease \
             kube-shutdown-drain/kube-shutdown-drain-pause: "
        ),
        "{message}"
    );
    assert!(message.contains("forbidden"), "{message}");
    let answered: Vec<u16> = c
        .server
        .recorder()
        .requests()
        .iter()
        .filter(|q| q.path.ends_with(&format!("/leases/{PAUSE_LEASE}")))
        .map(|q| q.status)
        .collect();
    assert_eq!(answered, [403], "one read, refused, not retried");
}

/// The API server down: every read is an `unknown` naming its object, by the deadline.
#[tokio::test]
async fn with_the_api_server_down_every_read_is_unknown() {
    let c = Cluster::start(vec![]).await;
    let settings = c.settings("");
    let engine = Engine::new(settings.clone()).unwrap();
    let clients = engine.clients().await.unwrap();
    c.server.stop_listener();
    let r = reboot("blocking_pod_selector = \"app=backup\"");
    let windows = Windows::any_time();
    let cx = Context::new(&settings, &r, &windows, None, None);
    let h = holds(clients, &cx, Instant::now() + Duration::from_secs(1)).await;
    assert_eq!(keys(&h), ["unknown", "unknown", "unknown"], "{h}");
    let text = h.to_string();
    for says in [
        "cannot tell whether node node-a is held (kube-shutdown-drain/hold): node node-a: ",
        "cannot tell whether the fleet is paused (Lease \
         kube-shutdown-drain/kube-shutdown-drain-pause), so node node-a waits: Lease \
         kube-shutdown-drain/kube-shutdown-drain-pause: ",
        "cannot tell whether pods selected by blocking_pod_selector \"app=backup\" run on node \
         node-a: pods of node node-a: ",
    ] {
        assert!(text.contains(says), "{says:?} in {text}");
    }
    assert!(!h.may_go());
}

/// kured's blocking pod selector: a selected pod running on this node holds it; one that
/// completed here (Succeeded) or runs on another node does not.
#[tokio::test]
async fn a_selected_pod_running_here_holds_the_node_one_completed_or_elsewhere_does_not() {
    let c = Cluster::start(vec![
        backup("backup-run", NODE, "Running"),
        backup("backup-done", NODE, "Succeeded"),
        backup("backup-there", OTHER_NODE, "Running"),
        pod(NS, "web", NODE),
    ])
    .await;
    let settings = c.settings("");
    let r = reboot("blocking_pod_selector = \"app=backup\"");
    let h = holds_now(&settings, &r, Duration::from_secs(5)).await;
    assert_eq!(keys(&h), ["blocking_pods"], "{h}");
    assert_eq!(
        h.reasons[0].message,
        "node node-a runs 1 pod selected by blocking_pod_selector \"app=backup\": \
         work/backup-run"
    );
    // The pods were asked for by this node's name only.
    let lists: Vec<String> = c
        .server
        .recorder()
        .requests()
        .iter()
        .filter(|q| q.method == "GET" && q.path == "/api/v1/pods")
        .map(|q| q.query.clone())
        .collect();
    assert!(
        !lists.is_empty() && lists.iter().all(|q| q.contains("spec.nodeName%3Dnode-a")),
        "{lists:?}"
    );
    // The running one completes: nothing holds the node any more.
    c.server
        .store()
        .modify("Pod", Some(NS), "backup-run", |p| {
            p["status"]["phase"] = json!("Succeeded")
        })
        .unwrap();
    let h = holds_now(&settings, &r, Duration::from_secs(5)).await;
    assert!(h.may_go(), "{h}");
    // Without a selector the pods are not read at all.
    let before = c.server.recorder().requests().len();
    let h = holds_now(&settings, &reboot(""), Duration::from_secs(5)).await;
    assert!(h.may_go(), "{h}");
    assert!(
        c.server.recorder().requests()[before..]
            .iter()
            .all(|q| q.path != "/api/v1/pods"),
        "no pod list without blocking_pod_selector"
    );
}

/// A window open now that closes in about half an hour, as `[[reboot.window]]` in UTC.
fn window_closing_soon() -> String {
    let now = jiff::Timestamp::now().to_zoned(jiff::tz::TimeZone::UTC);
    let start = now.checked_sub(jiff::SignedDuration::from_mins(1)).unwrap();
    let day = start.strftime("%a").to_string();
    let start_time = start.strftime("%H:%M").to_string();
    format!(
        "[[reboot.window]]\ndays = [\"{day}\"]\nstart_time = \"{start_time}\"\nlength_minutes = 30\n"
    )
}

/// The last drain's report in `settings`' state directory: complete, `minutes` long.
fn last_drain(settings: &Settings, minutes: u64) {
    let mut report = json!({
        "node": NODE, "why": "reboot", "started_at": "2026-12-01T00:00:00Z",
        "duration_ms": minutes * 60_000, "complete": true, "deadline_reached": false,
        "dry_run": false, "pods": []
    });
    report["counts"] =
        serde_json::to_value(kube_shutdown_drain::report::Counts::default()).unwrap();
    let report: kube_shutdown_drain::report::Report =
        serde_json::from_value(report).expect("a report");
    std::fs::create_dir_all(&settings.state_dir).unwrap();
    report.write_to(&settings.state_dir).unwrap();
}

/// The daemon's and `status`'s judging (`holds_of`) weighs the drain still to come: a window
/// that closes before the last drain's length would end holds the node, said with where the
/// estimate came from; the same window with a short last drain, or after the drain, does not.
#[tokio::test]
async fn a_window_that_closes_before_the_last_drains_length_holds_the_node() {
    use kube_shutdown_drain::reboot::holds_read::{Weighed, holds_of};
    let c = Cluster::start(vec![]).await;
    let settings = c.settings(&format!(
        "[reboot]\nupdate_engine = true\ntime_zone = \"UTC\"\n{}",
        window_closing_soon()
    ));
    let engine = Engine::new(settings.clone()).unwrap();
    let windows = Windows::of(&settings);
    let to_come = Weighed {
        forecast: None,
        drain_to_come: true,
    };
    // No report yet: no estimate, the open window lets it go.
    let h = holds_of(&engine, &windows, to_come).await;
    assert!(h.may_go(), "{h}");
    last_drain(&settings, 120);
    let h = holds_of(&engine, &windows, to_come).await;
    assert_eq!(keys(&h), ["outside_window"], "{h}");
    assert!(h.to_string().contains("last drain's report"), "{h}");
    // After the drain, its length no longer counts.
    let h = holds_of(&engine, &windows, Weighed::default()).await;
    assert!(h.may_go(), "{h}");
    last_drain(&settings, 5);
    let h = holds_of(&engine, &windows, to_come).await;
    assert!(h.may_go(), "a 5-minute drain fits: {h}");
}
