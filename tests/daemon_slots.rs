//! `kube-shutdown-drain run` (the real binary) and its drain slot (`[fleet] slots`, issue 29)
//! on a private bus with the fake logind and the fake API server: a shutdown cancelled after
//! its drain took the slot, before its cordon landed, gives the slot back.

mod daemon_support;
mod logind;

use std::time::Duration;

use daemon_support::{NODE, Setup, World, started};
use fake_apiserver::Route;

fn slot_holder(world: &World) -> Option<String> {
    world
        .api
        .store()
        .get(
            "Lease",
            Some("kube-shutdown-drain"),
            "kube-shutdown-drain-slot-0",
        )
        .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_string))
}

#[tokio::test]
async fn a_shutdown_cancelled_before_the_cordon_landed_still_gives_back_its_slot() {
    let Some(world) = started(Setup {
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
        slot_holder(&world).is_some_and(|h| h.starts_with(&format!("{NODE}/"))),
        "the drain took the slot before its prepare: {:?}",
        slot_holder(&world)
    );
    world.rig.cancel().await;
    // The cancel's restore finds no marker, watches a minute for one that lands late, then
    // gives the slot back.
    world
        .expect_until(
            Duration::from_secs(150),
            |w| slot_holder(w).is_none(),
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
