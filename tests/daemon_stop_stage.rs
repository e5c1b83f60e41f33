//! The stop phase's second stage (issue 21): `kube-shutdown-drain run` (the real binary) on a
//! private bus with the fake logind and a fake systemd manager (`SystemState`, the unit's
//! `TimeoutStopUSec`). SIGTERM while the system shuts down drains what is left, without the
//! lock, within the unit's stop timeout: a shutdown that never went through logind, and a drain
//! logind's window cut short; SIGTERM while the system runs stops at once.

mod daemon_support;
mod logind;

use std::time::Duration;

use daemon_support::{Setup, World, demo_seed, open_seed, started};
use nix::sys::signal::Signal;

fn setup(seed: Vec<serde_json::Value>) -> Setup {
    Setup {
        seed,
        config: "[drain]\ntimeout = \"15s\"\nretry_interval = \"1s\"\n\
                 [daemon]\nrelease_margin = \"2s\"\n"
            .to_string(),
        ..Setup::default()
    }
}

/// Waits for the daemon's exit without blocking the test's runtime (the fake API server runs on
/// it, and the daemon's last requests need it).
async fn exit_within(world: &mut World, within: Duration) -> Option<std::process::ExitStatus> {
    let end = tokio::time::Instant::now() + within;
    loop {
        if let Some(status) = world.wait_exit(Duration::ZERO) {
            return Some(status);
        }
        if tokio::time::Instant::now() >= end {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn with_systemd(world: &mut World, state: &str) {
    world
        .rig
        .start_systemd(state, Duration::from_secs(30))
        .await;
}

#[tokio::test]
async fn a_shutdown_that_never_went_through_logind_is_drained_in_the_stop_phase() {
    let Some(mut world) = started(setup(open_seed())).await else {
        return;
    };
    // `systemctl start reboot.target`: no PrepareForShutdown; systemd stops the unit.
    with_systemd(&mut world, "stopping").await;
    world.signal(Signal::SIGTERM);
    world
        .expect_log(
            "draining what is left in the stop phase, within 15 s",
            Duration::from_secs(5),
            "SIGTERM in a shutdown starts the second stage",
        )
        .await;
    world
        .expect_locks(0, Duration::from_secs(5), "the stage never holds logind")
        .await;
    world
        .expect_drained(Duration::from_secs(20), "the stop phase drains")
        .await;
    assert!(world.is_cordoned() && world.is_tainted());
    let status = exit_within(&mut world, Duration::from_secs(20)).await;
    assert!(
        status.is_some_and(|s| s.success()),
        "exits after the stage: {status:?}"
    );
    let recorded = world
        .recorded_shutdown()
        .expect("the boot record has the shutdown");
    assert_eq!(
        recorded["end"]["outcome"],
        "drained",
        "{recorded}; log:\n{}",
        world.log()
    );
    let report = world.last_report().expect("a report");
    assert!(
        report["why"]
            .as_str()
            .is_some_and(|w| w.ends_with("stop phase")),
        "{report}"
    );
}

#[tokio::test]
async fn a_drain_cut_by_logind_goes_on_in_the_stop_phase() {
    let mut setup = setup(demo_seed());
    setup.logind.delay_max = Duration::from_secs(5);
    let Some(mut world) = started(setup).await else {
        return;
    };
    with_systemd(&mut world, "running").await;
    world.reboot_until_stuck_on_the_budget().await;
    let outcome = world
        .rig
        .wait_outcome(0, Duration::from_secs(15))
        .await
        .expect("logind's window ends");
    assert_eq!(outcome.what, "released", "{}", outcome.line);
    assert!(!world.is_drained(), "the web budget held a pod");

    world.rig.set_system_state("stopping").await;
    world.signal(Signal::SIGTERM);
    world
        .expect_log(
            "draining what is left in the stop phase",
            Duration::from_secs(5),
            "the incomplete window drain goes on",
        )
        .await;
    world.open_web_budget();
    world
        .expect_drained(Duration::from_secs(20), "drained in the stop phase")
        .await;
    let status = exit_within(&mut world, Duration::from_secs(20)).await;
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
    let recorded = world
        .recorded_shutdown()
        .expect("the boot record has the shutdown");
    assert_eq!(recorded["end"]["outcome"], "drained", "{recorded}");
}

#[tokio::test]
async fn a_stop_while_the_system_runs_stops_at_once() {
    let Some(mut world) = started(setup(open_seed())).await else {
        return;
    };
    with_systemd(&mut world, "running").await;
    world.api.recorder().clear();
    world.signal(Signal::SIGTERM);
    let status = exit_within(&mut world, Duration::from_secs(10)).await;
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
    assert!(!world.log().contains("stop phase"), "{}", world.log());
    assert!(!world.is_cordoned(), "nothing was drained");
    assert!(
        world
            .api
            .recorder()
            .matching("POST", "/eviction")
            .is_empty(),
        "no eviction"
    );
}

#[tokio::test]
async fn after_a_complete_drain_the_stop_in_the_shutdown_drains_nothing_again() {
    let Some(mut world) = started(setup(open_seed())).await else {
        return;
    };
    with_systemd(&mut world, "running").await;
    world.rig.reboot().await;
    world.expect_released(Duration::from_secs(20)).await;
    world.rig.set_system_state("stopping").await;
    let report = world.last_report().expect("the window's report");
    world.signal(Signal::SIGTERM);
    let status = exit_within(&mut world, Duration::from_secs(10)).await;
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
    assert!(!world.log().contains("stop phase"), "{}", world.log());
    assert_eq!(
        world.last_report(),
        Some(report),
        "the window's report stays"
    );
}

/// `[drain] timeout` is the drain's one time across both stages: a window drain that had all of
/// it (logind allows more) leaves nothing for the stop phase.
#[tokio::test]
async fn a_drain_that_had_its_whole_timeout_in_the_window_has_no_second_stage() {
    let mut setup = setup(demo_seed());
    setup.config = setup
        .config
        .replace("timeout = \"15s\"", "timeout = \"7s\"");
    let Some(mut world) = started(setup).await else {
        return;
    };
    with_systemd(&mut world, "running").await;
    world.reboot_until_stuck_on_the_budget().await;
    world.expect_released(Duration::from_secs(15)).await;
    assert!(!world.is_drained(), "the web budget held a pod");
    world.rig.set_system_state("stopping").await;
    world.signal(Signal::SIGTERM);
    let status = exit_within(&mut world, Duration::from_secs(10)).await;
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
    assert!(
        world
            .log()
            .contains("has had its [drain] timeout (7 s) but for "),
        "{}",
        world.log()
    );
    assert!(world.log().contains("no second stage; stopping at once"));
    assert!(
        !world.log().contains("draining what is left"),
        "{}",
        world.log()
    );
}
