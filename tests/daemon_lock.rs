//! The lock never outlives the budget, whatever blocks, and the budget is what logind allows at
//! the shutdown: the real binary on a private bus with the fake logind, whose ledger (the
//! `released`/`timeout` line and its time since `PrepareForShutdown`) is the evidence. The
//! drain of the demo node never completes (the `web` budget stays shut), so every lock here
//! goes at the drain's deadline, or by the lock's own guard thread just after it.

mod daemon_support;
mod frozen;
mod journal;
mod logind;

use std::time::Duration;

use daemon_support::{Setup, World, started};
use frozen::FreezableDir;
use logind::{LogindOptions, Outcome, require};
use nix::sys::signal::Signal;

/// logind's maximum in these tests, unless a test sets its own: far above every budget, so a
/// `timeout` outcome (or a release near it) can only mean the lock outlived the budget.
const LOGIND_MAX: Duration = Duration::from_secs(20);

fn config(drain_timeout: &str, margin: &str) -> String {
    format!(
        "[drain]\ntimeout = \"{drain_timeout}\"\nretry_interval = \"1s\"\n\
         [daemon]\nrelease_margin = \"{margin}\"\nrestore_ready_timeout = \"5s\"\n"
    )
}

fn setup(drain_timeout: &str) -> Setup {
    Setup {
        config: config(drain_timeout, "1s"),
        ..Setup::default()
    }
}

/// Asserts the lock went by `budget` plus the guard's 500 ms and slack, far before logind's
/// maximum; prints when.
fn assert_released_within(outcome: &Outcome, budget: f64, what: &str) {
    println!("{what}: {}", outcome.line);
    assert_eq!(outcome.what, "released", "{what}: {}", outcome.line);
    assert!(
        outcome.elapsed < budget + 2.0 && outcome.elapsed < LOGIND_MAX.as_secs_f64(),
        "{what}: the lock went {} s after the signal, for a {budget} s budget",
        outcome.elapsed
    );
}

/// The drain's `within` time from its announcement line, in seconds.
fn announced_within(world: &World) -> f64 {
    let log = world.log();
    log.lines()
        .find_map(|l| {
            l.split("draining node demo-node-1 within ")
                .nth(1)
                .and_then(|rest| rest.split(' ').next())
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or_else(|| panic!("no drain announced; log:\n{log}"))
}

/// How long after the shutdown's announcement the drain ended, in seconds: the report's start
/// and duration against the boot record's announcement time. The budget counts from the
/// announcement, and the drain starts a moment after it (longer on a loaded machine), so its
/// own duration alone falls short of the budget by that moment.
async fn ended_after_announcement(world: &World) -> f64 {
    let report = world.expect_report("a report is written").await;
    world
        .expect_recorded_end("the boot record holds the drain's end")
        .await;
    let shutdown = world
        .recorded_shutdown()
        .expect("the boot record has the shutdown");
    let at = |text: &serde_json::Value| -> jiff::Timestamp {
        text.as_str()
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("not an RFC 3339 time: {text}"))
    };
    let started = at(&report["started_at"]);
    let announced = at(&shutdown["at"]);
    let ran = report["duration_ms"].as_f64().expect("duration_ms") / 1000.0;
    started.duration_since(announced).as_secs_f64() + ran
}

#[tokio::test]
async fn a_maximum_raised_while_the_daemon_runs_is_the_next_shutdowns_budget() {
    // At start logind allows 5 s: a 4 s budget (1 s margin) for a 30 s drain timeout. An admin
    // raises InhibitDelayMaxSec to 12 s and reloads logind: the next shutdown gets 11 s.
    let Some(world) = started(Setup {
        logind: LogindOptions {
            delay_max: Duration::from_secs(5),
            ..LogindOptions::default()
        },
        ..setup("30s")
    })
    .await
    else {
        return;
    };
    world.rig.set_delay_max(Duration::from_secs(12)).await;
    world.rig.reboot().await;
    let outcome = world.expect_released(Duration::from_secs(20)).await;
    assert_released_within(&outcome, 11.0, "raised maximum");
    assert_eq!(announced_within(&world), 11.0, "log:\n{}", world.log());
    let took = ended_after_announcement(&world).await;
    assert!(
        (took - 11.0).abs() < 1.0,
        "the drain ended {took} s after the announcement, not at the 11 s logind allows now"
    );
}

#[tokio::test]
async fn the_clamped_budget_is_loginds_maximum_less_the_margin_to_the_second() {
    // logind allows 9 s, the margin is 3 s: a 60 s drain timeout is cut to 6 s, exactly.
    let Some(world) = started(Setup {
        logind: LogindOptions {
            delay_max: Duration::from_secs(9),
            ..LogindOptions::default()
        },
        config: config("60s", "3s"),
        ..Setup::default()
    })
    .await
    else {
        return;
    };
    world.rig.reboot().await;
    let outcome = world.expect_released(Duration::from_secs(15)).await;
    assert_eq!(outcome.what, "released", "{}", outcome.line);
    assert_eq!(announced_within(&world), 6.0, "log:\n{}", world.log());
    let took = ended_after_announcement(&world).await;
    assert!(
        (took - 6.0).abs() < 1.0,
        "the drain ended {took} s after the announcement for a budget of 9 s - 3 s"
    );
    assert!(
        outcome.elapsed < 9.0 - 3.0 + 1.0,
        "released {} s after the signal, past the margin",
        outcome.elapsed
    );
}

#[tokio::test]
async fn a_journald_that_stops_reading_never_holds_the_lock_past_the_budget() {
    if let Some(why) = journal::cannot_capture() {
        require(
            false,
            &format!("a private mount namespace for the journal ({why})"),
        );
        return;
    }
    let Some(mut world) = World::start(setup("4s")).await else {
        return;
    };
    let journal = journal::Journal::start();
    world.spawn_daemon_into(Some(&|bin, log| journal.command(bin, log)));
    world.wait_ready().await;
    // journald stops reading; the daemon logs every step of the drain to it.
    journal.stall();
    world.rig.reboot().await;
    let outcome = world
        .rig
        .wait_outcome(0, LOGIND_MAX + Duration::from_secs(5))
        .await
        .expect("an outcome");
    assert_released_within(&outcome, 4.0, "stalled journald");
    // The drain did its work meanwhile: logging did not stop it.
    assert!(
        world.is_cordoned() && world.is_tainted(),
        "the node was not prepared"
    );
    world.assert_drain_requests(&["shop/cart-7f9b8c6d5-x2k4f"]);
    // And a stop is still heard.
    world.signal(Signal::SIGTERM);
    assert!(
        world.wait_exit(Duration::from_secs(5)).is_some(),
        "SIGTERM not acted on while journald does not read"
    );
}

/// A world whose state directory (`state`) or metrics textfile (`metrics`) is on a filesystem
/// the test freezes once the daemon is ready.
async fn frozen_world(state: bool) -> Option<(World, FreezableDir)> {
    let dir = match FreezableDir::create() {
        Ok(dir) => dir,
        Err(why) => {
            require(false, &format!("a freezable filesystem ({why})"));
            return None;
        }
    };
    let mut s = setup("4s");
    if state {
        s.state_dir = Some(dir.path().join("state"));
    } else {
        s.config.push_str(&format!(
            "[metrics]\ntextfile = \"{}\"\n",
            dir.path().join("kube_shutdown_drain.prom").display()
        ));
    }
    let world = started(s).await?;
    Some((world, dir))
}

#[tokio::test]
async fn a_frozen_state_directory_never_holds_the_lock_past_the_budget() {
    let Some((world, mut dir)) = frozen_world(true).await else {
        return;
    };
    dir.freeze();
    world.rig.reboot().await;
    let outcome = world
        .rig
        .wait_outcome(0, LOGIND_MAX + Duration::from_secs(5))
        .await
        .expect("an outcome");
    assert_released_within(&outcome, 4.0, "frozen state directory");
    assert!(world.is_cordoned() && world.is_tainted());
    world.assert_drain_requests(&["shop/cart-7f9b8c6d5-x2k4f"]);
    dir.thaw();
}

#[tokio::test]
async fn a_frozen_metrics_directory_never_holds_the_lock_past_the_budget() {
    let Some((world, mut dir)) = frozen_world(false).await else {
        return;
    };
    dir.freeze();
    world.rig.reboot().await;
    let outcome = world
        .rig
        .wait_outcome(0, LOGIND_MAX + Duration::from_secs(5))
        .await
        .expect("an outcome");
    assert_released_within(&outcome, 4.0, "frozen metrics directory");
    assert!(world.is_cordoned() && world.is_tainted());
    world.assert_drain_requests(&["shop/cart-7f9b8c6d5-x2k4f"]);
    dir.thaw();
}

#[tokio::test]
async fn a_credential_plugin_that_hangs_never_holds_the_lock_past_the_budget() {
    let Some(mut world) = World::start(setup("4s")).await else {
        return;
    };
    // The kubeconfig's exec plugin never answers (a hung cloud credential helper).
    let plugin = world.dir().join("hang.sh");
    std::fs::write(&plugin, "#!/bin/sh\nexec sleep 3600\n").unwrap();
    std::fs::set_permissions(&plugin, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n\
         clusters: [{{name: c, cluster: {{server: \"{}\"}}}}]\n\
         contexts: [{{name: c, context: {{cluster: c, user: u}}}}]\n\
         users: [{{name: u, user: {{exec: {{apiVersion: client.authentication.k8s.io/v1, \
         command: \"{}\", interactiveMode: Never}}}}}}]\n",
        world.api.url(),
        plugin.display()
    );
    std::fs::write(world.dir().join("kubeconfig"), kubeconfig).unwrap();
    world.spawn_daemon();
    world.wait_ready().await;
    world.rig.reboot().await;
    let outcome = world
        .rig
        .wait_outcome(0, LOGIND_MAX + Duration::from_secs(5))
        .await
        .expect("an outcome");
    assert_released_within(&outcome, 4.0, "hung credential plugin");
    // A stop is still heard while the plugin hangs.
    world.signal(Signal::SIGTERM);
    assert!(
        world.wait_exit(Duration::from_secs(5)).is_some(),
        "SIGTERM not acted on while the credential plugin hangs; log:\n{}",
        world.log()
    );
}

#[tokio::test]
async fn sighup_neither_kills_the_daemon_nor_cuts_the_drain() {
    let Some(world) = started(setup("4s")).await else {
        return;
    };
    world.signal(Signal::SIGHUP);
    world
        .expect_log(
            "sighup: ignored",
            Duration::from_secs(5),
            "the daemon says what SIGHUP does",
        )
        .await;
    assert_eq!(world.rig.our_locks().await, 1, "the lock survives SIGHUP");
    world.rig.reboot().await;
    world
        .expect_log(
            "refused (429)",
            Duration::from_secs(10),
            "the drain waits on the budget",
        )
        .await;
    world.signal(Signal::SIGHUP);
    let outcome = world.expect_released(Duration::from_secs(15)).await;
    // Released at the budget, not at the SIGHUP: the drain ran on.
    assert!(
        outcome.elapsed > 3.0,
        "released {} s after the signal: SIGHUP cut the drain",
        outcome.elapsed
    );
    assert_released_within(&outcome, 4.0, "sighup during the drain");
}
