//! The reboot gate (`[fleet] gate`, issue 20 item 4): `kube-shutdown-drain run` against the fake
//! API server and a fake logind whose block locks refuse root's reboot as systemd 257's do. While
//! the one drain slot is held by another node the daemon holds a block lock naming the holder
//! and the way past it, and logind refuses a reboot; a slot given back opens the gate at once
//! (the watch, not the minute-long look); `kube-shutdown-drain reboot --force` gets past it
//! (SIGUSR1) while another program's block lock still refuses; a shutdown logind starts
//! anyway is never held by the gate.

mod daemon_support;
mod logind;

use std::time::Duration;

use daemon_support::{BOOT_ID_ENV, NODE, Setup, World};
use serde_json::{Value, json};

const SLOT: &str = "kube-shutdown-drain-slot-0";
const OTHER: &str = "demo-node-2";

/// The slot Lease, held by `holder` (`None`: given back).
fn lease(holder: Option<&str>) -> Value {
    let now = jiff::Timestamp::now().to_string();
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
           "metadata": {"name": SLOT, "namespace": "kube-shutdown-drain",
                        "labels": {"kube-shutdown-drain/slot-group": "all"}},
           "spec": {"holderIdentity": holder, "acquireTime": now, "renewTime": now,
                    "leaseDurationSeconds": 3600}})
}

/// `demo-node-2` in the boot its Node reports: a holder that is not stale.
fn other_holder(world: &World) -> String {
    let node = world
        .api
        .store()
        .get("Node", None, OTHER)
        .expect("the demo seed has demo-node-2");
    let boot = node["status"]["nodeInfo"]["bootID"]
        .as_str()
        .filter(|b| !b.is_empty())
        .unwrap_or("0b0e1d00-0000-4000-8000-0000000000b2");
    format!("{OTHER}/{boot}")
}

/// A daemon with `[fleet] slots = 1, gate = true`, the slot held by demo-node-2, and a fake
/// systemd of `version`.
async fn gated(version: &str) -> Option<(World, String)> {
    let mut world = World::start(Setup {
        config: "[daemon]\nrelease_margin = \"2s\"\nrestore_ready_timeout = \"5s\"\n\
                 [drain]\ntimeout = \"6s\"\n[fleet]\nslots = 1\ngate = true\n"
            .to_owned(),
        ..Setup::default()
    })
    .await?;
    world
        .rig
        .start_systemd_version("running", Duration::from_secs(30), version)
        .await;
    let holder = other_holder(&world);
    world.api.store().upsert(lease(Some(&holder))).unwrap();
    world.spawn_daemon();
    world.wait_ready().await;
    Some((world, holder))
}

/// The reasons of the block locks our daemon holds.
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

async fn wait_gate(world: &World, closed: bool, within: Duration) -> bool {
    let until = std::time::Instant::now() + within;
    while std::time::Instant::now() < until {
        if gate_reasons(world).await.is_empty() != closed {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// The gate's reason once it closes, within `within`.
async fn closed_for(world: &World, within: Duration) -> String {
    assert!(
        wait_gate(world, true, within).await,
        "the gate closes: {}",
        world.log()
    );
    gate_reasons(world).await.remove(0)
}

/// Whether the fake logind's shutdown ended (released or timed out) within 20 s.
async fn shutdown_came(world: &World) -> bool {
    world
        .rig
        .wait_outcome(0, Duration::from_secs(20))
        .await
        .is_some()
}

/// `kube-shutdown-drain reboot ARGS` on the world's bus, config and boot.
async fn reboot_command(world: &World, args: &[&str]) -> (i32, String) {
    command(world, &[&["reboot"], args].concat()).await
}

/// `kube-shutdown-drain ARGS` on the world's bus, config and boot: the exit code and what it
/// printed.
async fn command(world: &World, args: &[&str]) -> (i32, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_kube-shutdown-drain"))
        .arg("--config")
        .arg(world.config_path())
        .args(args)
        .env_remove("JOURNAL_STREAM")
        .env("KUBE_SHUTDOWN_DRAIN_LOG", "warn")
        .env("DBUS_SYSTEM_BUS_ADDRESS", world.rig.address())
        .env(BOOT_ID_ENV, world.boot_id_path())
        .kill_on_drop(true)
        .output()
        .await
        .expect("the binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

/// logind's `org.freedesktop.DBus.Error.AccessDenied` (zbus reads it as the fdo error).
fn access_denied(answer: &zbus::Result<()>) -> bool {
    matches!(answer, Err(zbus::Error::FDO(e)) if matches!(**e, zbus::fdo::Error::AccessDenied(_)))
}

#[tokio::test]
async fn the_gate_refuses_a_reboot_while_every_slot_is_held_and_opens_when_one_is_given_back() {
    let Some((world, holder)) = gated("257.13-1").await else {
        return;
    };
    let why = closed_for(&world, Duration::from_secs(10)).await;
    assert!(
        why.contains(&format!("node {NODE}"))
            && why.contains(&holder)
            && why.contains("kube-shutdown-drain reboot --force")
            && why.contains("stopping kube-shutdown-drain.service"),
        "{why}"
    );
    world
        .expect_log("binds root too", Duration::from_secs(2), "systemd 257")
        .await;
    // Root's reboot (this test runs as root, as systemctl would) is refused.
    let answer = world.rig.try_reboot().await;
    assert!(access_denied(&answer), "{answer:?}");
    assert!(world.rig.outcomes().is_empty(), "no shutdown started");
    assert!(!world.is_cordoned(), "the gate changes nothing on the Node");
    let (_, status) = command(&world, &["status"]).await;
    assert!(
        status.contains(&format!(
            "reboot gate: CLOSED: reboot gate of Kubernetes node {NODE}"
        )) && status.contains("systemd 257.13-1: the reboot gate binds root too"),
        "{status}"
    );

    // The holder gives the slot back: the watch opens the gate well within the minute of the
    // look without a change.
    world.api.store().upsert(lease(None)).unwrap();
    assert!(
        wait_gate(&world, false, Duration::from_secs(10)).await,
        "the gate opens once a slot is free: {}",
        world.log()
    );
    world
        .expect_log(
            "is open: a drain slot is open to it",
            Duration::from_secs(2),
            "the opening is said",
        )
        .await;
    world
        .rig
        .try_reboot()
        .await
        .expect("logind takes the reboot");
    assert!(
        shutdown_came(&world).await,
        "the shutdown goes on (the daemon drains within its budget)"
    );
}

#[tokio::test]
async fn reboot_force_passes_the_gate_but_not_another_programs_block_lock() {
    let Some((mut world, holder)) = gated("257.13-1").await else {
        return;
    };
    assert!(wait_gate(&world, true, Duration::from_secs(10)).await);
    // Another program's block lock: logind refuses the command's reboot, and the command says so.
    let theirs = world.rig.foreign_lock_in("backup-job", "block").await;
    let (code, said) = reboot_command(&world, &["--force", "--drain-timeout", "2s"]).await;
    assert_ne!(code, 0, "{said}");
    assert!(
        said.contains(&format!("asked the daemon (PID [{}])", world.pid()))
            && said.contains("Access denied"),
        "{said}"
    );
    assert!(world.rig.outcomes().is_empty());
    drop(theirs);
    // Without it the same command reboots: the gate opened for it, the slot still held.
    let (code, said) = reboot_command(&world, &["--force", "--drain-timeout", "2s"]).await;
    assert_eq!(code, 0, "{said}");
    assert!(
        said.contains("asked logind to reboot node") && said.contains(&holder),
        "{said}"
    );
    assert!(shutdown_came(&world).await, "logind started the reboot");
    world
        .expect_log(
            "sigusr1: the reboot gate of node demo-node-1 opens",
            Duration::from_secs(2),
            "the daemon says why the gate opened",
        )
        .await;
    assert!(gate_reasons(&world).await.is_empty());
    world.signal(nix::sys::signal::Signal::SIGTERM);
    world.wait_exit(Duration::from_secs(10));
}

#[tokio::test]
async fn a_shutdown_logind_starts_past_the_gate_is_never_held_by_it() {
    // systemd 252: root passes a block lock, so a root reboot starts with the gate closed.
    let Some((world, _holder)) = gated("252.38-1~deb12u1").await else {
        return;
    };
    assert!(wait_gate(&world, true, Duration::from_secs(10)).await);
    world
        .expect_log(
            "binds only unprivileged users",
            Duration::from_secs(2),
            "systemd 252",
        )
        .await;
    world.rig.start_shutdown("reboot").await;
    assert!(
        wait_gate(&world, false, Duration::from_secs(2)).await,
        "the gate goes the moment the shutdown is announced"
    );
    world
        .expect_log(
            "is open: the daemon no longer waits",
            Duration::from_secs(2),
            "said",
        )
        .await;
    assert!(shutdown_came(&world).await);
}

#[tokio::test]
async fn with_the_forecast_the_gate_also_closes_while_a_drain_would_block() {
    // The slot is free; the demo's `web` budget (minAvailable 2 of 2) would block a drain.
    let Some(mut world) = World::start(Setup {
        logind: logind::LogindOptions {
            delay_max: Duration::from_secs(150),
            ..logind::LogindOptions::default()
        },
        config: "[daemon]\nrelease_margin = \"2s\"\nforecast_interval = \"1s\"\n\
                 [fleet]\nslots = 1\ngate = true\n"
            .to_owned(),
        ..Setup::default()
    })
    .await
    else {
        return;
    };
    world.spawn_daemon();
    world.wait_ready().await;
    let why = closed_for(&world, Duration::from_secs(15)).await;
    assert!(
        why.contains(&format!("a drain of node {NODE} now would be blocked"))
            && why.contains("shop/web")
            && !why.contains("drain slot of group"),
        "{why}"
    );
    world.open_web_budget();
    assert!(
        wait_gate(&world, false, Duration::from_secs(15)).await,
        "a forecast that completes opens it: {}",
        world.log()
    );
}

#[tokio::test]
async fn a_logind_that_never_answers_the_gates_lock_does_not_hold_the_next_shutdown() {
    let Some((world, _holder)) = gated("257.13-1").await else {
        return;
    };
    assert!(wait_gate(&world, true, Duration::from_secs(10)).await);
    world.rig.hang_block_inhibit(true).await;
    // A new holder (an identity not of ours: never stale) is a new reason: the daemon asks
    // logind for a lock carrying it, and logind never answers.
    world
        .api
        .store()
        .upsert(lease(Some("some-other-operator")))
        .unwrap();
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while world.rig.unanswered().await == 0 {
        assert!(
            std::time::Instant::now() < until,
            "the daemon asks again: {}",
            world.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    world.rig.start_shutdown("reboot").await;
    world
        .expect_log(
            "logind announced a reboot",
            Duration::from_secs(10),
            "the drain starts",
        )
        .await;
    let log = world.log();
    let announced = log.find("logind announced a reboot").unwrap();
    assert!(
        log.find("refused the reboot gate's block lock")
            .is_none_or(|refused| refused > announced),
        "the announcement waited for the gate's call to logind:\n{log}"
    );
}
