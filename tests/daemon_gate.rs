//! The reboot gate (`[fleet] gate`, issue 20 item 4): `kube-shutdown-drain run` against the fake
//! API server and a fake logind whose block locks refuse root's reboot as systemd 257's do. While
//! the one drain slot is held by another node the daemon holds a block lock naming the holder
//! and the way past it, and logind refuses a reboot; a slot given back opens the gate at once
//! (the watch, not the minute-long look); `kube-shutdown-drain reboot --force` gets past it
//! (SIGUSR1) while another program's block lock still refuses; a shutdown logind starts
//! anyway is never held by the gate.
//!
//! Every test runs twice ([`both!`]): against a logind of systemd 257, whose block locks bind
//! root, and one of systemd 252, whose block locks let root pass (the fake's
//! `block_binds_root`), each asserting what differs between them (root's reboot; an
//! unprivileged user's is refused on both).

mod daemon_support;
mod logind;

use std::time::Duration;

use daemon_support::{BOOT_ID_ENV, NODE, Setup, World, slot_lease};

/// `kube-shutdown-drain run`'s test-only length of the pass SIGUSR1 opens (two minutes in
/// production).
const GATE_PASS_ENV: &str = "KUBE_SHUTDOWN_DRAIN_GATE_PASS";
/// The pass in these tests: long enough for `reboot`'s call to logind after its SIGUSR1 on a
/// loaded machine, short enough to see it end.
const PASS: &str = "5s";

/// The systemd a test's fake logind and manager play.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Systemd {
    /// Debian 13: a `block` lock binds root too, and logind sends the metadata signal.
    V257,
    /// Debian 12: root passes a `block` lock; no metadata signal.
    V252,
}

impl Systemd {
    fn version(self) -> &'static str {
        match self {
            Systemd::V257 => "257.13-1",
            Systemd::V252 => "252.38-1~deb12u1",
        }
    }

    fn binds_root(self) -> bool {
        self == Systemd::V257
    }

    /// What the daemon's journal and `status` say the gate binds on it.
    fn binding(self) -> &'static str {
        match self {
            Systemd::V257 => "binds root too",
            Systemd::V252 => "binds only unprivileged users",
        }
    }

    fn logind(self) -> logind::LogindOptions {
        logind::LogindOptions {
            block_binds_root: self.binds_root(),
            metadata: self.binds_root(),
            ..logind::LogindOptions::default()
        }
    }
}

/// Runs the test `$name(Systemd)` as `$name::systemd_257` and `$name::systemd_252`.
macro_rules! both {
    ($name:ident) => {
        mod $name {
            #[tokio::test]
            async fn systemd_257() {
                super::$name(super::Systemd::V257).await;
            }

            #[tokio::test]
            async fn systemd_252() {
                super::$name(super::Systemd::V252).await;
            }
        }
    };
}

/// A daemon with `[fleet] slots = 1, gate = true`, the slot held by demo-node-2, a fake logind
/// and systemd playing `systemd`, and a pass of [`PASS`]; `extra` is appended to its config.
async fn gated_with(systemd: Systemd, extra: &str) -> Option<(World, String)> {
    let mut world = World::start(Setup {
        logind: systemd.logind(),
        config: format!(
            "[daemon]\nrelease_margin = \"2s\"\nrestore_ready_timeout = \"5s\"\n{extra}\n\
             [drain]\ntimeout = \"6s\"\n[fleet]\nslots = 1\ngate = true\n"
        ),
        ..Setup::default()
    })
    .await?;
    world
        .rig
        .start_systemd_version("running", Duration::from_secs(30), systemd.version())
        .await;
    let holder = world.other_holder();
    world.api.store().upsert(slot_lease(Some(&holder))).unwrap();
    spawn_with_pass(&mut world);
    world.wait_ready().await;
    Some((world, holder))
}

/// [`gated_with`] and nothing more in the config.
async fn gated(systemd: Systemd) -> Option<(World, String)> {
    gated_with(systemd, "").await
}

/// Starts the daemon with the pass of [`PASS`].
fn spawn_with_pass(world: &mut World) {
    let wrap = |bin: &std::path::Path, _log: &std::fs::File| {
        let mut c = std::process::Command::new(bin);
        c.env_remove("JOURNAL_STREAM").env(GATE_PASS_ENV, PASS);
        c
    };
    world.spawn_daemon_into(Some(&wrap));
}

/// Root's `systemctl reboot` while the gate is closed: refused on systemd 257 (nothing starts:
/// false), taken on 252, where the shutdown then runs past the gate and the daemon drains for
/// it (true).
async fn root_reboots_past_the_closed_gate(world: &World, systemd: Systemd) -> bool {
    let answer = world.rig.try_reboot().await;
    if systemd.binds_root() {
        assert!(access_denied(&answer), "{answer:?}");
        assert!(world.rig.outcomes().is_empty(), "no shutdown started");
        return false;
    }
    answer.expect("systemd 252's logind lets root past a block lock");
    assert!(
        wait_gate(world, false, Duration::from_secs(5)).await,
        "the gate goes the moment the shutdown is announced: {}",
        world.log()
    );
    world
        .expect_log(
            "logind announced a ",
            Duration::from_secs(10),
            "the daemon hears the shutdown root started",
        )
        .await;
    true
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

both!(the_gate_refuses_a_reboot_while_every_slot_is_held_and_opens_when_one_is_given_back);
async fn the_gate_refuses_a_reboot_while_every_slot_is_held_and_opens_when_one_is_given_back(
    systemd: Systemd,
) {
    let Some((world, holder)) = gated(systemd).await else {
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
        .expect_log(systemd.binding(), Duration::from_secs(2), systemd.version())
        .await;
    assert!(!world.is_cordoned(), "the gate changes nothing on the Node");
    let (_, status) = command(&world, &["status"]).await;
    assert!(
        status.contains(&format!(
            "reboot gate: CLOSED: reboot gate of Kubernetes node {NODE}"
        )) && status.contains(&format!(
            "systemd {}: the reboot gate {}",
            systemd.version(),
            systemd.binding()
        )),
        "{status}"
    );
    // An unprivileged user's reboot is refused on either systemd.
    if let Some(answer) = world.rig.try_reboot_unprivileged().await {
        assert!(
            answer.as_ref().is_err_and(|e| e.contains("AccessDenied")),
            "nobody's reboot: {answer:?}"
        );
        assert!(world.rig.outcomes().is_empty(), "no shutdown started");
    }
    // Root's reboot (this test runs as root, as systemctl would): refused from 257 on.
    if root_reboots_past_the_closed_gate(&world, systemd).await {
        assert!(shutdown_came(&world).await, "the shutdown goes on");
        return;
    }

    // The holder gives the slot back: the watch opens the gate well within the minute of the
    // look without a change.
    world.api.store().upsert(slot_lease(None)).unwrap();
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

both!(reboot_force_passes_the_gate_but_not_another_programs_block_lock);
async fn reboot_force_passes_the_gate_but_not_another_programs_block_lock(systemd: Systemd) {
    let Some((mut world, holder)) = gated(systemd).await else {
        return;
    };
    assert!(wait_gate(&world, true, Duration::from_secs(10)).await);
    // Another program's block lock: from systemd 257 logind refuses the command's reboot, and
    // the command says so; before 257 root passes it as it passes the gate.
    let theirs = world.rig.foreign_lock_in("backup-job", "block").await;
    let (code, said) = reboot_command(&world, &["--force", "--drain-timeout", "2s"]).await;
    if systemd.binds_root() {
        assert_ne!(code, 0, "{said}");
        assert!(
            said.contains(&format!("asked the daemon (PID [{}])", world.pid()))
                && said.contains("Access denied"),
            "{said}"
        );
        assert!(world.rig.outcomes().is_empty());
        // Nothing was rebooted: the pass ends and the gate closes again.
        world
            .expect_log(
                "the pass of the reboot gate of node demo-node-1 ended",
                Duration::from_secs(20),
                "the pass the refused command opened ends",
            )
            .await;
        closed_for(&world, Duration::from_secs(10)).await;
        drop(theirs);
        // Without it the same command reboots: the gate opened for it, the slot still held.
        let (code, said) = reboot_command(&world, &["--force", "--drain-timeout", "2s"]).await;
        assert_eq!(code, 0, "{said}");
        assert!(
            said.contains("asked logind to reboot node") && said.contains(&holder),
            "{said}"
        );
    } else {
        assert_eq!(code, 0, "{said}");
        assert!(said.contains("asked logind to reboot node"), "{said}");
        drop(theirs);
    }
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

both!(a_shutdown_logind_starts_past_the_gate_is_never_held_by_it);
async fn a_shutdown_logind_starts_past_the_gate_is_never_held_by_it(systemd: Systemd) {
    // logind's own start (a scheduled shutdown firing, `systemctl start reboot.target`) passes
    // every lock on either systemd.
    let Some((world, _holder)) = gated(systemd).await else {
        return;
    };
    assert!(wait_gate(&world, true, Duration::from_secs(10)).await);
    // logind lists the lock as it grants it; the daemon holds it a moment later: only a lock it
    // holds is said to go.
    world
        .expect_log(
            &format!("WARN reboot gate of Kubernetes node {NODE}"),
            Duration::from_secs(5),
            "the daemon holds the lock logind granted",
        )
        .await;
    world
        .expect_log(systemd.binding(), Duration::from_secs(2), systemd.version())
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

both!(with_the_forecast_the_gate_also_closes_while_a_drain_would_block);
async fn with_the_forecast_the_gate_also_closes_while_a_drain_would_block(systemd: Systemd) {
    // The slot is free; the demo's `web` budget (minAvailable 2 of 2) would block a drain.
    let Some(mut world) = World::start(Setup {
        logind: logind::LogindOptions {
            delay_max: Duration::from_secs(150),
            ..systemd.logind()
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
    if systemd == Systemd::V252 {
        // Before 257 root's reboot passes this gate too (and the drain then waits on `web`).
        assert!(root_reboots_past_the_closed_gate(&world, systemd).await);
        return;
    }
    assert!(!root_reboots_past_the_closed_gate(&world, systemd).await);
    world.open_web_budget();
    assert!(
        wait_gate(&world, false, Duration::from_secs(15)).await,
        "a forecast that completes opens it: {}",
        world.log()
    );
}

both!(a_logind_that_never_answers_the_gates_lock_does_not_hold_the_next_shutdown);
async fn a_logind_that_never_answers_the_gates_lock_does_not_hold_the_next_shutdown(
    systemd: Systemd,
) {
    let Some((world, _holder)) = gated(systemd).await else {
        return;
    };
    assert!(wait_gate(&world, true, Duration::from_secs(10)).await);
    world.rig.hang_block_inhibit(true).await;
    // A new holder (an identity not of ours: never stale) is a new reason: the daemon asks
    // logind for a lock carrying it, and logind never answers.
    world
        .api
        .store()
        .upsert(slot_lease(Some("some-other-operator")))
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
    // Without the metadata signal (systemd 252) the kind may be unknown: "a shutdown".
    let announced = "logind announced a ";
    world
        .expect_log(announced, Duration::from_secs(10), "the drain starts")
        .await;
    let log = world.log();
    let announced = log.find(announced).unwrap();
    assert!(
        log.find("refused the reboot gate's block lock")
            .is_none_or(|refused| refused > announced),
        "the announcement waited for the gate's call to logind:\n{log}"
    );
}

both!(the_gate_opens_while_the_slot_leases_cannot_be_read_also_after_it_had_closed);
async fn the_gate_opens_while_the_slot_leases_cannot_be_read_also_after_it_had_closed(
    systemd: Systemd,
) {
    // An API outage must never keep root from rebooting: the gate opens when it cannot tell.
    let Some((world, _holder)) = gated(systemd).await else {
        return;
    };
    closed_for(&world, Duration::from_secs(10)).await;
    for outage in 1..=2 {
        let since = std::time::Instant::now();
        world.api.stop_listener();
        assert!(
            wait_gate(&world, false, Duration::from_secs(20)).await,
            "outage {outage}: the gate opens while the API server refuses connections: {}",
            world.log()
        );
        println!(
            "outage {outage}: the reboot gate opened {} ms after the API server stopped listening",
            since.elapsed().as_millis()
        );
        if outage == 2 {
            break;
        }
        // The server answers again: the gate closes again (the holder still holds the slot).
        world
            .api
            .start_listener()
            .await
            .expect("the API server listens again");
        closed_for(&world, Duration::from_secs(30)).await;
    }
    // The second outage goes on: root's reboot is taken, on either systemd.
    world
        .rig
        .try_reboot()
        .await
        .expect("logind takes root's reboot while the API server is away");
    assert!(shutdown_came(&world).await, "the shutdown goes on");
}

both!(many_sigusr1s_open_one_pass_said_once_and_the_gate_closes_again_when_it_ends);
async fn many_sigusr1s_open_one_pass_said_once_and_the_gate_closes_again_when_it_ends(
    systemd: Systemd,
) {
    let Some((world, _holder)) = gated(systemd).await else {
        return;
    };
    closed_for(&world, Duration::from_secs(10)).await;
    // 300 `kube-shutdown-drain reboot` in a loop, say; each signal restarts the pass.
    for _ in 0..300 {
        world.signal(nix::sys::signal::Signal::SIGUSR1);
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert!(
        wait_gate(&world, false, Duration::from_secs(5)).await,
        "the pass opens the gate: {}",
        world.log()
    );
    // Nothing was rebooted: the pass ends and the gate closes again.
    let ended = format!("the pass of the reboot gate of node {NODE} ended");
    world
        .expect_log(&ended, Duration::from_secs(30), "the pass ends")
        .await;
    let why = closed_for(&world, Duration::from_secs(10)).await;
    assert!(why.contains(&format!("node {NODE}")), "{why}");
    let log = world.log();
    let opened = format!("sigusr1: the reboot gate of node {NODE} opens for 5 s");
    assert_eq!(
        (log.matches(&opened).count(), log.matches(&ended).count()),
        (1, 1),
        "one line as the pass starts and one as it ends, however many signals:\n{log}"
    );
}

both!(the_gate_is_never_held_while_the_node_drains_ahead_of_a_scheduled_shutdown);
async fn the_gate_is_never_held_while_the_node_drains_ahead_of_a_scheduled_shutdown(
    systemd: Systemd,
) {
    let Some((world, _holder)) = gated(systemd).await else {
        return;
    };
    closed_for(&world, Duration::from_secs(10)).await;
    // Less than the lead (the drain timeout, 6 s) is left: the early drain starts at once.
    let at = std::time::Instant::now() + Duration::from_secs(5);
    world.schedule("reboot", Duration::from_secs(5));
    world
        .expect_log(
            &format!("node {NODE} ahead of it"),
            Duration::from_secs(5),
            "the early drain starts",
        )
        .await;
    // The drain waits half its time (2.5 s) for a slot that stays held, then cordons: the gate
    // is gone before it ends.
    let ended = "ahead of the reboot scheduled for";
    assert!(
        wait_gate(&world, false, Duration::from_secs(5)).await,
        "the gate goes as the early drain starts: {}",
        world.log()
    );
    let log = world.log();
    assert!(
        !log.contains(ended),
        "the gate was held until the early drain ended:\n{log}"
    );
    // Never back during the drain, nor after it while logind's timer runs (a block lock would
    // refuse the scheduled shutdown as it fires).
    let mut looks = 0;
    while std::time::Instant::now() < at + Duration::from_secs(1) {
        let held = gate_reasons(&world).await;
        assert!(
            held.is_empty(),
            "the gate is held ahead of a scheduled shutdown: {held:?}; log:\n{}",
            world.log()
        );
        looks += 1;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    world
        .expect_log(
            ended,
            Duration::from_secs(2),
            "the early drain ended before the schedule's time",
        )
        .await;
    assert!(looks > 10, "looked at the locks {looks} times");
}
