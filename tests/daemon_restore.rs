//! `kube-shutdown-drain run` (the real binary) on a private bus with the fake logind and the
//! fake API server (issue 9): a garbage marker met during a shutdown is replaced and the node is
//! still cordoned and tainted before any eviction; after a fast reboot a Ready=True left by the
//! stopped kubelet does not get the node uncordoned until the kubelet heartbeats in this boot.

mod daemon_support;
mod logind;

use std::time::Duration;

use daemon_support::{NODE, Setup, World, open_seed, started};
use fake_apiserver::RecordedRequest;
use kube_shutdown_drain::node::MARKER_ANNOTATION;
use serde_json::{Value, json};

fn setup() -> Setup {
    Setup {
        seed: open_seed(),
        config: "[drain]\ntimeout = \"15s\"\nretry_interval = \"1s\"\n\
                 [daemon]\nrelease_margin = \"2s\"\nrestore_ready_timeout = \"2s\"\n"
            .to_string(),
        ..Setup::default()
    }
}

fn node_patches(world: &World) -> Vec<RecordedRequest> {
    world
        .api
        .recorder()
        .matching("PATCH", &format!("/api/v1/nodes/{NODE}"))
}

#[tokio::test]
async fn a_garbage_marker_during_a_shutdown_is_replaced_and_the_node_cordoned_and_tainted_before_evictions()
 {
    let Some(world) = started(setup()).await else {
        return;
    };
    // The boot restore has looked and found nothing; the garbage lands after it.
    world
        .expect_log(
            "nothing to restore",
            Duration::from_secs(10),
            "the boot restore finds no marker",
        )
        .await;
    world
        .api
        .store()
        .modify("Node", None, NODE, |n| {
            n["metadata"]["annotations"] = json!({MARKER_ANNOTATION: "{not json"});
        })
        .unwrap();
    world.api.recorder().clear();
    world.rig.reboot().await;
    assert!(
        world
            .wait_until(Duration::from_secs(20), World::is_drained)
            .await,
        "the node is drained; log:\n{}",
        world.log()
    );
    world.expect_released(Duration::from_secs(20)).await;
    assert!(world.is_cordoned(), "cordoned; log:\n{}", world.log());
    assert!(world.is_tainted(), "tainted; log:\n{}", world.log());
    let marker: Value =
        serde_json::from_str(&world.marker_text().expect("a marker")).expect("ours, valid JSON");
    assert_eq!(marker["cordoned"], json!(true), "{marker}");
    // The cordon and taint were written before the first eviction.
    let requests = world.api.recorder().requests();
    let first_patch = requests
        .iter()
        .position(|r| r.method == "PATCH" && r.path == format!("/api/v1/nodes/{NODE}"))
        .expect("a node patch");
    let first_eviction = requests
        .iter()
        .position(|r| r.method == "POST" && r.path.ends_with("/eviction"))
        .expect("an eviction");
    assert!(first_patch < first_eviction);
    assert!(requests[first_patch].body.contains("/spec/unschedulable"));
    let events = world.api.store().list("Event", Some("default"));
    assert!(
        events.iter().any(|e| e["reason"] == json!("ForeignMarker")),
        "a Node Event names the foreign marker"
    );
    assert!(world.log().contains("not one we wrote"), "{}", world.log());
}

/// As a stopped kubelet of the previous boot left the node: Ready=True with a heartbeat and a
/// Lease renewal from long ago.
fn stale_ready(world: &World) {
    world.api.kubelets().stop_leaving_stale_ready(NODE).unwrap();
}

#[tokio::test]
async fn a_fast_reboot_with_a_stale_ready_keeps_the_cordon_until_a_fresh_heartbeat() {
    let Some(mut world) = started(setup()).await else {
        return;
    };
    world.rig.reboot().await;
    assert!(
        world
            .wait_until(Duration::from_secs(20), World::is_drained)
            .await,
        "the node is drained; log:\n{}",
        world.log()
    );
    world.expect_released(Duration::from_secs(20)).await;
    assert!(world.is_cordoned() && world.is_tainted());
    world.kill_daemon();
    world.notify.clear();

    // The next boot comes fast: the kubelet is still down and the Node still says Ready=True.
    stale_ready(&world);
    world.rig.simulate_boot().await;
    world.new_boot();
    world.api.recorder().clear();
    world.spawn_daemon();
    world.wait_ready().await;
    assert!(
        world
            .wait_until(Duration::from_secs(15), |w| w
                .log()
                .contains("no live kubelet reporting Ready"))
            .await,
        "the boot restore waits for a heartbeat from this boot; log:\n{}",
        world.log()
    );
    assert!(
        world.log().contains("before this boot began"),
        "{}",
        world.log()
    );
    assert!(
        world.is_cordoned() && world.is_tainted(),
        "nothing undone yet"
    );
    assert!(
        node_patches(&world).is_empty(),
        "no write to the node while the kubelet is down: {:?}",
        node_patches(&world)
            .iter()
            .map(|r| &r.body)
            .collect::<Vec<_>>()
    );
    assert!(world.marker_text().is_some());

    // The kubelet comes up and heartbeats: the next attempt restores.
    world.api.kubelets().start(NODE).unwrap();
    assert!(
        world
            .wait_until(Duration::from_secs(40), World::is_restored)
            .await,
        "restored after the heartbeat; log:\n{}",
        world.log()
    );
    assert!(world.marker_text().is_none());
    world
        .expect_log(
            "restored node demo-node-1",
            Duration::from_secs(5),
            "the daemon logs it",
        )
        .await;
}

#[tokio::test]
async fn a_prepare_write_that_lands_after_the_cancel_is_restored_too() {
    // The prepare's PATCH reaches the server and waits there; the daemon's client gives up on it
    // (a 1 s request timeout), logind cancels, the cancel's restore finds no marker, and only
    // then does the server apply the write, as a real kube-apiserver finishes a request whose
    // client went away.
    let Some(world) = started(Setup {
        config: "request_timeout = \"1s\"\n[drain]\ntimeout = \"15s\"\n\
                 [daemon]\nrelease_margin = \"2s\"\nrestore_ready_timeout = \"2s\"\n"
            .to_string(),
        ..Setup::default()
    })
    .await
    else {
        return;
    };
    world
        .expect_log(
            "nothing to restore",
            Duration::from_secs(10),
            "the boot restore ran",
        )
        .await;
    let patch = fake_apiserver::Route::new("PATCH", &format!("/api/v1/nodes/{NODE}"));
    world.api.faults().set_finish_abandoned(true);
    world.api.faults().gate(patch.clone());
    world.rig.reboot().await;
    world
        .expect_until(
            Duration::from_secs(10),
            |w| w.api.faults().waiting_at(&patch) >= 1,
            "the prepare's PATCH reached the server",
        )
        .await;
    // Past the daemon's request timeout: its client has given up on that PATCH.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    world.rig.cancel().await;
    let restores = |w: &World| w.log().matches("nothing to restore").count();
    world
        .expect_until(
            Duration::from_secs(10),
            |w| restores(w) >= 2,
            "the cancel's restore looked for the marker and found none",
        )
        .await;
    assert!(!world.is_cordoned(), "nothing has landed yet");
    // Now the server applies what was sent before the cancel.
    world.api.faults().ungate(&patch);
    world
        .expect_until(
            Duration::from_secs(10),
            |w| {
                w.api
                    .recorder()
                    .matching("PATCH", "/nodes/")
                    .iter()
                    .any(|r| r.status < 300)
            },
            "the held prepare PATCH was applied",
        )
        .await;
    world
        .expect_log(
            "a marker landed on node demo-node-1 after the cancel",
            Duration::from_secs(10),
            "the daemon saw the late prepare",
        )
        .await;
    world
        .expect_until(
            Duration::from_secs(20),
            |w| w.is_restored() && w.marker().is_none(),
            "the node stayed cordoned by a prepare that landed after the cancel",
        )
        .await;
}

/// `[restore] wait_for_pods` (issue 21): after the kubelet's fresh heartbeat the boot restore
/// still waits, the node cordoned, until the CNI pod is Ready in this boot (its Ready=True from
/// the last boot does not count), and says what it waits for.
#[tokio::test]
async fn the_boot_restore_waits_for_the_cni_pod_of_this_boot() {
    let mut setup = setup();
    setup
        .config
        .push_str("[restore]\nwait_for_pods = \"app=flannel\"\n");
    setup.config = setup.config.replace(
        "restore_ready_timeout = \"2s\"",
        "restore_ready_timeout = \"60s\"",
    );
    let Some(mut world) = started(setup).await else {
        return;
    };
    world.rig.reboot().await;
    world
        .expect_drained(Duration::from_secs(20), "the reboot drains")
        .await;
    world.expect_released(Duration::from_secs(20)).await;
    world.boot_again().await;
    world
        .expect_log(
            "before restoring, waiting for pods matching app=flannel not Ready in this boot: \
             kube-system/kube-flannel-ds-7xk2p",
            Duration::from_secs(20),
            "the restore waits for the CNI pod after the heartbeat",
        )
        .await;
    assert!(
        world.is_cordoned() && world.marker_text().is_some(),
        "nothing undone yet"
    );

    world
        .api
        .store()
        .modify("Pod", Some("kube-system"), "kube-flannel-ds-7xk2p", |p| {
            fake_apiserver::store::set_pod_ready_in(p, true)
        })
        .unwrap();
    world
        .expect_restored(
            Duration::from_secs(20),
            "restored once the CNI pod is Ready",
        )
        .await;
    assert!(
        world
            .log()
            .contains("the agents of node demo-node-1 run: restoring")
    );
}

/// `[drain] daemonsets = "stop-last"` with `[restore] wait_for_pods` naming a DaemonSet's pods
/// (issue 21): the reboot's drain stops node-exporter last, under our second taint; on the next
/// boot the restore removes that taint first (the node still cordoned), the DaemonSet controller
/// brings node-exporter back, and once it is Ready the rest is restored. Without the early
/// untaint the restore would wait for a pod the taint keeps away.
#[tokio::test]
async fn the_boot_restore_brings_back_the_daemonset_pods_it_waits_for_first() {
    let mut setup = setup();
    setup.config = setup
        .config
        .replace("[drain]\n", "[drain]\ndaemonsets = \"stop-last\"\n")
        .replace(
            "restore_ready_timeout = \"2s\"",
            "restore_ready_timeout = \"60s\"",
        );
    setup
        .config
        .push_str("[restore]\nwait_for_pods = \"app.kubernetes.io/name=node-exporter\"\n");
    let Some(mut world) = started(setup).await else {
        return;
    };
    let exporters = |world: &World| -> Vec<String> {
        world
            .api
            .store()
            .list("Pod", Some("monitoring"))
            .into_iter()
            .filter(|p| p["spec"]["nodeName"] == json!(NODE))
            .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
            .map(|p| {
                p["metadata"]["name"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string()
            })
            .collect()
    };
    let ds_tainted = |world: &World| {
        world.node()["spec"]["taints"].as_array().is_some_and(|ts| {
            ts.iter()
                .any(|t| t["key"] == "kube-shutdown-drain/daemonsets")
        })
    };
    world.rig.reboot().await;
    world
        .expect_until(
            Duration::from_secs(20),
            |w| exporters(w).is_empty() && ds_tainted(w),
            "the reboot's drain stops node-exporter last, under the DaemonSet taint",
        )
        .await;
    world.expect_released(Duration::from_secs(20)).await;
    world.boot_again().await;
    world
        .expect_log(
            "removed taint kube-shutdown-drain/daemonsets first",
            Duration::from_secs(20),
            "the boot restore removes the DaemonSet taint before it waits for the agents",
        )
        .await;
    world
        .expect_until(
            Duration::from_secs(20),
            |w| exporters(w).len() == 1,
            "the DaemonSet controller brings node-exporter back",
        )
        .await;
    assert!(world.is_cordoned(), "the node stays cordoned meanwhile");
    world
        .expect_restored(
            Duration::from_secs(20),
            "restored once the new node-exporter pod is Ready",
        )
        .await;
    assert!(world.marker_text().is_none() && !ds_tainted(&world));
}
