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
    let report = world.expect_report("a report").await;
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
    let report = world.expect_report("the window's report").await;
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

/// A bare pod on the node whose own grace period is `grace` s and that takes `stops_in` s to
/// stop once evicted (the fake's kubelet).
fn slow_pod(name: &str, grace: u64, stops_in: u64) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": format!("90d00000-0000-4000-8000-0000000{grace:02}{stops_in:03}"),
            "annotations": {"fake-apiserver.test/termination-seconds": stops_in.to_string()}
        },
        "spec": {
            "nodeName": daemon_support::NODE,
            "terminationGracePeriodSeconds": grace,
            "containers": [{"name": "c", "image": "busybox:1.37"}]
        },
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    })
}

/// logind's window of 3 s (5 s less the 2 s margin) and a 60 s `[drain] timeout`, `slow` (its
/// own grace 20 s, 6 s to stop) on the node, the unit's `TimeoutStopSec` `stop_timeout`.
async fn short_window(stop_timeout: Duration) -> Option<World> {
    let mut seed = open_seed();
    seed.push(slow_pod("slow", 20, 6));
    let mut setup = setup(seed);
    setup.config = setup
        .config
        .replace("timeout = \"15s\"", "timeout = \"60s\"");
    setup.logind.delay_max = Duration::from_secs(5);
    let mut world = started(setup).await?;
    world.rig.start_systemd("running", stop_timeout).await;
    Some(world)
}

/// The `gracePeriodSeconds` of every eviction of `default/NAME` (`None`: the pod's own).
fn graces_sent(world: &World, name: &str) -> Vec<Option<i64>> {
    world
        .api
        .recorder()
        .matching("POST", &format!("/namespaces/default/pods/{name}/eviction"))
        .iter()
        .map(|r| r.json().expect("a JSON body")["deleteOptions"]["gracePeriodSeconds"].as_i64())
        .collect()
}

/// The window's report, once written (the write may end a moment after the lock goes).
async fn window_report(world: &World) -> serde_json::Value {
    let written = world
        .wait_until(Duration::from_secs(5), |w| w.last_report().is_some())
        .await;
    assert!(written, "no report of the window; log:\n{}", world.log());
    world.last_report().expect("the window's report")
}

/// Issue 29 item 7: a drain logind's window cuts goes on in the stop phase, so its evictions'
/// graces end with the stop phase, not with the window: `slow` keeps its own 20 s (the window
/// has 3 s) and is gone, in the stop phase, before the daemon stops.
#[tokio::test]
async fn graces_fit_the_stop_phase_when_the_drain_goes_on_there() {
    let Some(mut world) = short_window(Duration::from_secs(60)).await else {
        return;
    };
    world.rig.reboot().await;
    world.expect_released(Duration::from_secs(15)).await;
    assert_eq!(
        graces_sent(&world, "slow"),
        vec![None],
        "slow keeps its own grace; log:\n{}",
        world.log()
    );
    assert!(
        world.pods_on_node().contains(&"default/slow".to_owned()),
        "slow is still stopping when the window ends"
    );
    let window = window_report(&world).await;
    let fitted = &window["grace_fitted_to"];
    assert_eq!(fitted["end"], "stop-phase", "{window}");
    // The stop phase: the 60 s unit timeout less the 2 s margin, within the 57 s [drain]
    // timeout leaves after the window: its end 60 s from the start, less the 500 ms kept back.
    let after = fitted["after_ms"].as_u64().expect("a time");
    assert!((55_000..=59_500).contains(&after), "{window}");
    let why = fitted["why"].as_str().expect("why");
    assert!(why.contains("TimeoutStopSec 60 s"), "{why}");
    assert!(
        world.log().contains(
            "evictions from node demo-node-1 get grace periods up to the end of the stop phase"
        ),
        "{}",
        world.log()
    );

    world.rig.set_system_state("stopping").await;
    world.signal(Signal::SIGTERM);
    world
        .expect_drained(Duration::from_secs(30), "slow is gone in the stop phase")
        .await;
    let status = exit_within(&mut world, Duration::from_secs(20)).await;
    assert!(status.is_some_and(|s| s.success()), "{status:?}");
    assert_eq!(graces_sent(&world, "slow"), vec![None], "evicted once");
    let stage = world.last_report().expect("the stop phase's report");
    assert!(stage["complete"].as_bool().unwrap_or(false), "{stage}");
    assert_eq!(stage["grace_fitted_to"]["end"], "stop-phase", "{stage}");
}

/// Where the stop phase cannot be counted on (the unit's `TimeoutStopSec` of 6 s leaves 4 s
/// after the margin, less than a stage needs), graces are fitted to logind's window, as before.
#[tokio::test]
async fn graces_fit_loginds_window_when_no_stop_phase_can_be_counted_on() {
    let Some(world) = short_window(Duration::from_secs(6)).await else {
        return;
    };
    world.rig.reboot().await;
    world.expect_released(Duration::from_secs(15)).await;
    let sent = graces_sent(&world, "slow");
    assert_eq!(sent.len(), 1, "{sent:?}");
    let grace = sent[0].expect("a grace period fitted to the window");
    assert!((1..=3).contains(&grace), "{grace} s in a 3 s window");
    let window = window_report(&world).await;
    assert_eq!(
        window["grace_fitted_to"]["end"], "logind-window",
        "{window}"
    );
    let why = window["grace_fitted_to"]["why"].as_str().expect("why");
    assert!(why.contains("TimeoutStopSec (6 s)"), "{why}");
}
