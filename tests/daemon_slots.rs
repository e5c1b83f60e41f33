//! `kube-shutdown-drain run` (the real binary) and its drain slot (`[fleet] slots`, issue 29)
//! on a private bus with the fake logind and the fake API server: a shutdown cancelled after
//! its drain took the slot, before its cordon landed, gives the slot back; a reboot gate that
//! opens because the slots cannot be read does not say a slot is open.

mod daemon_support;
mod logind;

use std::time::Duration;

use daemon_support::{NODE, Setup, World};
use fake_apiserver::Route;
use serde_json::json;

/// `kube-shutdown-drain run`'s test-only length of the watch for a prepare write that lands
/// after a cancel (kube-apiserver's one-minute request timeout in production).
const LANDING_WINDOW_ENV: &str = "KUBE_SHUTDOWN_DRAIN_LANDING_WINDOW";
/// The watch in these tests: long enough that the gated PATCH is on the server through it.
const LANDING_WINDOW: &str = "3s";

#[tokio::test]
async fn a_shutdown_cancelled_before_the_cordon_landed_still_gives_back_its_slot() {
    let Some(mut world) = World::start(Setup {
        config: "request_timeout = \"1s\"\n[drain]\ntimeout = \"15s\"\n\
                 [daemon]\nrelease_margin = \"2s\"\nrestore_ready_timeout = \"2s\"\n\
                 [fleet]\nslots = 1\n"
            .to_string(),
        ..Setup::default()
    })
    .await
    else {
        return;
    };
    // The restore watches LANDING_WINDOW for the gated PATCH instead of the minute it gives a
    // real API server: the PATCH never lands either way.
    let wrap = |bin: &std::path::Path, _log: &std::fs::File| {
        let mut c = std::process::Command::new(bin);
        c.env_remove("JOURNAL_STREAM")
            .env(LANDING_WINDOW_ENV, LANDING_WINDOW);
        c
    };
    world.spawn_daemon_into(Some(&wrap));
    world.wait_ready().await;
    world
        .expect_log(
            "nothing to restore",
            Duration::from_secs(10),
            "the boot restore ran",
        )
        .await;
    // The prepare's writes wait at the server and never land: no marker, no cordon.
    let patch = Route::new("PATCH", &format!("/api/v1/nodes/{NODE}"));
    world.api.faults().gate(patch.clone());
    world.rig.reboot().await;
    world
        .expect_until(
            Duration::from_secs(10),
            |w| w.api.faults().waiting_at(&patch) >= 1,
            "the prepare's PATCH reached the server",
        )
        .await;
    assert!(
        world
            .slot_holder()
            .is_some_and(|h| h.starts_with(&format!("{NODE}/"))),
        "the drain took the slot before its prepare: {:?}",
        world.slot_holder()
    );
    world.rig.cancel().await;
    // The cancel's restore finds no marker, watches LANDING_WINDOW for one that lands late, then
    // gives the slot back.
    world
        .expect_until(
            Duration::from_secs(30),
            |w| w.slot_holder().is_none(),
            "the cancelled shutdown's slot was given back",
        )
        .await;
    assert!(!world.is_cordoned() && world.marker().is_none());
    world
        .expect_log(
            &format!("node {NODE} gave back drain slot kube-shutdown-drain-slot-0"),
            Duration::from_secs(5),
            "the give-back is said",
        )
        .await;
}

/// The reasons of the block locks (the reboot gate) our daemon holds.
async fn gate_reasons(world: &World) -> Vec<String> {
    world
        .rig
        .inhibitors()
        .await
        .into_iter()
        .filter(|(what, who, _, mode, _, _)| {
            what == "shutdown" && who == "kube-shutdown-drain" && mode == "block"
        })
        .map(|(_, _, why, _, _, _)| why)
        .collect()
}

/// The gate closed (the one slot held by another node) opens when the slots cannot be read;
/// the daemon then says why, and its line on the open gate claims no open slot (issue 29
/// item 9).
#[tokio::test]
async fn a_gate_opened_because_the_slots_cannot_be_read_claims_no_open_slot() {
    let Some(mut world) = World::start(Setup {
        config: "[daemon]\nrelease_margin = \"2s\"\nrestore_ready_timeout = \"5s\"\n\
                 [drain]\ntimeout = \"6s\"\n[fleet]\nslots = 1\ngate = true\n"
            .to_owned(),
        ..Setup::default()
    })
    .await
    else {
        return;
    };
    world
        .rig
        .start_systemd_version("running", Duration::from_secs(30), "257.13-1")
        .await;
    let lease = |renewed: jiff::Timestamp| {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
               "metadata": {"name": "kube-shutdown-drain-slot-0", "namespace": "kube-shutdown-drain",
                            "labels": {"kube-shutdown-drain/slot-group": "all"}},
               "spec": {"holderIdentity": "garbage-without-slash", "acquireTime": renewed.to_string(),
                        "renewTime": renewed.to_string(), "leaseDurationSeconds": 3600}})
    };
    // A holder that is not NODE/BOOT_ID, renewed now: held (judged by its times alone).
    world
        .api
        .store()
        .upsert(lease(jiff::Timestamp::now()))
        .unwrap();
    world.spawn_daemon();
    world.wait_ready().await;
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while gate_reasons(&world).await.is_empty() {
        assert!(
            std::time::Instant::now() < until,
            "the gate closes: {}",
            world.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Every read of the slot is refused from now on; a write to the Lease wakes the look.
    world.api.faults().fail_next(
        Route::new("GET", "/leases/kube-shutdown-drain-slot-0"),
        10_000,
        403,
    );
    world
        .api
        .store()
        .upsert(lease(jiff::Timestamp::now()))
        .unwrap();
    world
        .expect_log(
            "is open: cannot read its drain slots",
            // Generous: the wait ends as soon as the line is there, and a fresh-clone run's
            // release build beside the tests once made the follower's look take over 10 s.
            Duration::from_secs(30),
            "the follower says why the gate opens",
        )
        .await;
    let said = format!("the reboot gate of node {NODE} is open: a drain slot");
    world
        .expect_until(
            Duration::from_secs(30),
            |w| w.log().contains(&said),
            "the loop says the gate is open",
        )
        .await;
    let log = world.log();
    let line = log.lines().find(|l| l.contains(&said)).unwrap_or_default();
    assert!(
        line.contains("or its drain slots cannot be read"),
        "claims an open slot it could not read: {line}"
    );
    world.kill_daemon();
}
