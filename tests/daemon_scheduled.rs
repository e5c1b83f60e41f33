//! `kube-shutdown-drain run` with a shutdown scheduled ahead (issue 19): logind's schedule file,
//! written into the directory the daemon is pointed at (tests only), drains the node before any
//! `PrepareForShutdown`; removing it (`shutdown -c`) restores the node; the announcement after
//! the early drain releases the lock; a schedule that fires and is never announced restores the
//! node after the 30 s docs/forecast.md names; a garbled file warns and drains nothing; a kind
//! `[shutdown]` maps to "none" is left alone.

mod daemon_support;
mod logind;

use std::time::Duration;

use daemon_support::{EVICTED, NODE, Setup, World, open_seed, started};

fn setup(extra: &str) -> Setup {
    Setup {
        seed: open_seed(),
        config: format!(
            "[drain]\ntimeout = \"15s\"\nretry_interval = \"1s\"\n\
             [daemon]\nrelease_margin = \"2s\"\nrestore_ready_timeout = \"5s\"\n{extra}\n"
        ),
        ..Setup::default()
    }
}

/// Accepted requests that change the node (PATCH) or evict a pod.
fn writes(world: &World) -> usize {
    let r = world.api.recorder();
    let patches = r.matching("PATCH", &format!("/api/v1/nodes/{NODE}"));
    let evictions = r.matching("POST", "/eviction");
    patches
        .iter()
        .chain(evictions.iter())
        .filter(|r| r.status < 300)
        .count()
}

#[tokio::test]
async fn a_schedule_written_ahead_drains_the_node_before_logind_announces_anything_and_its_cancel_restores()
 {
    let Some(world) = started(setup("")).await else {
        return;
    };
    // Less than the lead (the drain timeout, 15 s) is left: the drain starts at once.
    world.schedule("reboot", Duration::from_secs(12));
    world
        .expect_drained(
            Duration::from_secs(10),
            "the scheduled reboot drains the node",
        )
        .await;
    world.assert_drain_requests(&EVICTED);
    assert!(world.rig.outcomes().is_empty(), "logind announced nothing");
    assert!(world.marker().is_some(), "the prepare recorded its marker");
    world
        .expect_log(
            "reboot scheduled for",
            Duration::from_secs(5),
            "the reason names the schedule",
        )
        .await;
    world.cancel_schedule();
    world
        .expect_until(
            Duration::from_secs(10),
            |w| w.is_restored() && w.marker().is_none(),
            "the cancel restores the node and removes the marker",
        )
        .await;
    world
        .expect_locks(
            1,
            Duration::from_secs(2),
            "the lock is still held for the next shutdown",
        )
        .await;
}

#[tokio::test]
async fn a_schedule_already_there_when_the_daemon_starts_is_drained_for() {
    let Some(mut world) = World::start(setup("")).await else {
        return;
    };
    world.schedule("reboot", Duration::from_secs(12));
    world.spawn_daemon();
    world.wait_ready().await;
    world
        .expect_drained(
            Duration::from_secs(10),
            "the schedule found at start drains the node",
        )
        .await;
    assert!(world.rig.outcomes().is_empty(), "logind announced nothing");
}

#[tokio::test]
async fn prepare_for_shutdown_after_the_early_drain_releases_the_lock() {
    let Some(world) = started(setup("")).await else {
        return;
    };
    world.schedule("reboot", Duration::from_secs(12));
    world
        .expect_log(
            "drained node demo-node-1 ahead of the reboot",
            Duration::from_secs(10),
            "the early drain ends",
        )
        .await;
    world.rig.reboot().await;
    let outcome = world.expect_released(Duration::from_secs(10)).await;
    println!("released after the early drain: {}", outcome.line);
    assert!(
        world.is_drained(),
        "the node stays drained; log:\n{}",
        world.log()
    );
}

#[tokio::test]
async fn a_schedule_that_fired_and_was_never_announced_restores_the_node_30_s_after() {
    let Some(world) = started(setup("")).await else {
        return;
    };
    let at = std::time::Instant::now() + Duration::from_secs(6);
    world.schedule("reboot", Duration::from_secs(6));
    world
        .expect_drained(
            Duration::from_secs(10),
            "the scheduled reboot drains the node",
        )
        .await;
    // logind fires it: the file goes at its time; a block inhibitor (another program's) then
    // refuses the shutdown, so nothing is announced.
    tokio::time::sleep_until(at.into()).await;
    world.cancel_schedule();
    let fired = std::time::Instant::now();
    world
        .expect_log(
            "at its time: the reboot scheduled for",
            Duration::from_secs(5),
            "a file gone at its time is taken as fired, not as a cancel",
        )
        .await;
    assert!(
        world.is_drained() && world.marker().is_some(),
        "a fired schedule keeps the node drained while logind starts it; log:\n{}",
        world.log()
    );
    world
        .expect_until(
            Duration::from_secs(60),
            |w| w.is_restored() && w.marker().is_none(),
            "the node is restored once logind announced nothing",
        )
        .await;
    let after = fired.elapsed();
    println!("restored {} ms after the schedule fired", after.as_millis());
    assert!(
        after >= Duration::from_secs(30),
        "not before the 30 s docs/forecast.md names ({after:?}); log:\n{}",
        world.log()
    );
    world
        .expect_log(
            &format!(
                "logind announced no reboot within 30 s of its schedule firing (a block \
                 inhibitor may have refused it); restoring node {NODE}"
            ),
            Duration::from_secs(2),
            "the restore says why",
        )
        .await;
    assert!(world.rig.outcomes().is_empty(), "logind announced nothing");
}

#[tokio::test]
async fn a_schedule_further_ahead_than_the_lead_drains_nothing_yet() {
    let Some(world) = started(setup("")).await else {
        return;
    };
    world.schedule("reboot", Duration::from_secs(3600));
    world
        .expect_log(
            "draining node demo-node-1 15 s before it",
            Duration::from_secs(5),
            "the schedule is seen",
        )
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        writes(&world),
        0,
        "nothing is written an hour ahead; log:\n{}",
        world.log()
    );
}

#[tokio::test]
async fn a_garbled_schedule_file_is_no_schedule_with_a_warning_naming_it() {
    let Some(world) = started(setup("")).await else {
        return;
    };
    world.write_schedule("USEC=soon\nMODE=reboot\n");
    let file = world.schedule_dir().join("scheduled");
    world
        .expect_log(
            &format!("logind's schedule file {} is garbled", file.display()),
            Duration::from_secs(5),
            "a garbled file is warned about, naming it",
        )
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        writes(&world),
        0,
        "nothing is drained; log:\n{}",
        world.log()
    );
}

#[tokio::test]
async fn a_schedule_of_a_kind_mapped_to_none_does_nothing() {
    let Some(world) = started(setup("[shutdown]\nreboot = \"none\"")).await else {
        return;
    };
    world.schedule("reboot", Duration::from_secs(12));
    world
        .expect_log(
            "[shutdown] reboot = \"none\": node demo-node-1 is left as it is",
            Duration::from_secs(5),
            "the policy is said",
        )
        .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        writes(&world),
        0,
        "nothing is drained; log:\n{}",
        world.log()
    );
    assert!(
        !world.log().contains("ahead of it"),
        "no drain ahead was started for it; log:\n{}",
        world.log()
    );
}
