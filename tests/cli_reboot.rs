//! `kube-shutdown-drain reboot` (issue 20) against the fake API server and a fake logind on a
//! private bus: it waits for a drain slot, drains, then asks logind to reboot; with no slot in
//! time, or a drain that did not complete (unless `--force`), it reboots nothing.

mod engine_support;
mod logind;

use std::time::Duration;

use engine_support::*;
use serde_json::json;

const SLOTS: &str = "[fleet]\nslots = 1\n";

async fn rig() -> Option<logind::Rig> {
    let rig = logind::Rig::start(logind::LogindOptions::default()).await;
    if rig.is_none() && skip_or_fail("dbus-daemon or python3-dbusmock missing") {
        return None;
    }
    rig
}

/// Whether the fake logind started a shutdown within `within` (it ends at once: nobody holds
/// a lock in these tests).
async fn shut_down(rig: &logind::Rig, within: Duration) -> Option<String> {
    rig.wait_outcome(0, within).await.map(|o| o.what)
}

#[tokio::test]
async fn reboot_takes_a_slot_drains_and_then_asks_logind() {
    let Some(rig) = rig().await else { return };
    let c = Cluster::start(vec![slow_pod(NS, "web", NODE, 0.3)]).await;
    let config = c.config(SLOTS);
    let r = cli_on_bus(&config, &["reboot"], rig.address()).await;
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stderr
            .contains("node node-a holds drain slot kube-shutdown-drain-slot-0")
            && r.stderr.contains("asked logind to reboot node node-a"),
        "{}",
        r.stderr
    );
    assert!(r.stdout.contains("drained"), "{}", r.stdout);
    assert_eq!(c.evictions_of(NS, "web"), 1);
    assert!(c.pod(NS, "web").is_none() && unschedulable(&c.node(NODE)));
    assert_eq!(
        shut_down(&rig, Duration::from_secs(10)).await.as_deref(),
        Some("no-locks"),
        "logind was asked to reboot"
    );
    // `status` names the slot and its holder.
    let r = cli(&config, &["status"]).await;
    let line = r
        .stdout
        .lines()
        .find(|l| l.contains("drain slots:"))
        .unwrap_or_else(|| panic!("{}", r.stdout));
    assert!(
        line.contains("kube-shutdown-drain-slot-0 held by node-a/")
            && line.ends_with("(this node)"),
        "{line}"
    );
    let marker = stored_marker(&c.node(NODE)).expect("marker");
    assert_eq!(marker["why"], json!("reboot by kube-shutdown-drain reboot"));
    assert_eq!(marker["kind"], json!("reboot"));
}

/// One take of the slot is one write of its Lease and one line in the log (issue 29 item 9:
/// the command's wait took it, then its drain wrote it again and said so again).
#[tokio::test]
async fn reboot_writes_its_slot_once_and_says_the_take_once() {
    let Some(rig) = rig().await else { return };
    let c = Cluster::start(vec![slow_pod(NS, "web", NODE, 0.3)]).await;
    let config = c.config_file("admin", SLOTS);
    let r = cli_with_log(&config, &["reboot"], rig.address(), Some("info")).await;
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let writes: Vec<String> = c
        .server
        .recorder()
        .requests()
        .iter()
        .filter(|r| r.path.contains("/leases") && matches!(r.method.as_str(), "POST" | "PATCH"))
        .map(|r| format!("{} {} {}", r.method, r.path, r.status))
        .collect();
    assert_eq!(writes.len(), 1, "{writes:?}");
    assert_eq!(
        r.stderr.matches("took drain slot").count(),
        1,
        "{}",
        r.stderr
    );
    let taken = c
        .server
        .store()
        .list("Event", Some("default"))
        .into_iter()
        .filter(|e| e["reason"] == json!("DrainSlotTaken"))
        .count();
    assert_eq!(taken, 1, "one DrainSlotTaken Event");
    assert!(shut_down(&rig, Duration::from_secs(10)).await.is_some());
}

/// A cluster with a pod on node-a and the one slot held fresh by node-b.
async fn every_slot_held_by_node_b() -> Cluster {
    let c = Cluster::start(vec![slow_pod(NS, "web", NODE, 0.3)]).await;
    c.server
        .store()
        .upsert(
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "kube-shutdown-drain-slot-0", "namespace": "kube-shutdown-drain",
                         "labels": {"kube-shutdown-drain/slot-group": "all"}},
            "spec": {"holderIdentity": "node-b/0b0e1d00-0000-4000-8000-0000000000b2",
                     "renewTime": jiff::Timestamp::now().to_string()}}),
        )
        .unwrap();
    c
}

#[tokio::test]
async fn with_every_slot_held_reboot_changes_nothing_and_names_the_holder() {
    let Some(rig) = rig().await else { return };
    let c = every_slot_held_by_node_b().await;
    let config = c.config(SLOTS);
    let r = cli_on_bus(&config, &["reboot", "--slot-timeout", "1s"], rig.address()).await;
    assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stderr
            .contains("held by node-b/0b0e1d00-0000-4000-8000-0000000000b2")
            && r.stderr.contains("nothing changed, not rebooting"),
        "{}",
        r.stderr
    );
    assert!(!unschedulable(&c.node(NODE)) && c.marker_text().is_none());
    assert_eq!(c.evictions_of(NS, "web"), 0);
    assert_eq!(shut_down(&rig, Duration::from_millis(500)).await, None);
}

#[tokio::test]
async fn force_with_every_slot_held_does_not_wait_for_one() {
    let Some(rig) = rig().await else { return };
    let c = every_slot_held_by_node_b().await;
    let config = c.config(SLOTS);
    // A drain of 10 minutes would wait 5 for a slot; --force looks once.
    let r = tokio::time::timeout(
        Duration::from_secs(60),
        cli_on_bus(
            &config,
            &["reboot", "--force", "--drain-timeout", "10m"],
            rig.address(),
        ),
    )
    .await
    .expect("reboot --force does not wait for a slot");
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stderr
            .contains("--force: not waiting for a drain slot for node node-a")
            && r.stderr.contains("asked logind to reboot node node-a"),
        "{}",
        r.stderr
    );
    assert!(
        unschedulable(&c.node(NODE)),
        "cordoned ([fleet] on_no_slot)"
    );
    assert_eq!(
        c.evictions_of(NS, "web"),
        0,
        "nothing evicted without a slot"
    );
    assert!(shut_down(&rig, Duration::from_secs(10)).await.is_some());
}

#[tokio::test]
async fn an_incomplete_drain_reboots_only_with_force() {
    let Some(rig) = rig().await else { return };
    let c = Cluster::start(vec![
        pod_with(
            NS,
            "db-0",
            NODE,
            json!({"metadata": {"labels": {"app": "db"}}}),
        ),
        pdb(NS, "db", "db", 1),
    ])
    .await;
    let config = c.config("");
    let r = cli_on_bus(&config, &["reboot", "--drain-timeout", "2s"], rig.address()).await;
    assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains("not rebooting node node-a") && r.stderr.contains("--force"),
        "{}",
        r.stderr
    );
    assert!(unschedulable(&c.node(NODE)), "left cordoned, as said");
    assert_eq!(shut_down(&rig, Duration::from_millis(500)).await, None);
    let r = cli_on_bus(
        &config,
        &["reboot", "--drain-timeout", "2s", "--force", "--poweroff"],
        rig.address(),
    )
    .await;
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains("asked logind to power off node node-a"),
        "{}",
        r.stderr
    );
    assert!(shut_down(&rig, Duration::from_secs(10)).await.is_some());
}

#[tokio::test]
async fn bad_durations_are_usage_errors() {
    let c = Cluster::start(vec![]).await;
    let config = c.config("");
    let r = cli(&config, &["reboot", "--slot-timeout", "soon"]).await;
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains("\"soon\" is not a duration"),
        "{}",
        r.stderr
    );
}
