//! `kube-shutdown-drain run` (the real binary) with a kubeconfig whose exec credential plugin
//! hangs, on a private bus with the fake logind: the lock still goes before logind's maximum
//! (from the fake logind's ledger), SIGTERM during the plugin still stops the daemon, and the
//! plugin (with what it started) is killed; nothing it printed reaches the log. And with a
//! kubeconfig whose certificate authority did not sign the API server's certificate: the lock
//! goes at the first refused handshake, not at the drain's deadline.

mod daemon_support;
mod logind;
mod tls_support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use daemon_support::{IDENTITY, Setup, World};
use logind::LogindOptions;
use nix::sys::signal::Signal;
use tls_support::{Ca, Front, b64, server_tls};

const SECRET: &str = "s3cr3t-token-never-logged";

/// Replaces the world's kubeconfig with one whose user runs a plugin that prints `SECRET` on
/// both streams, starts a child, writes the child's PID to the returned file and hangs.
fn hanging_plugin(world: &World) -> PathBuf {
    let dir = world.dir();
    let pid_file = dir.join("plugin-child.pid");
    let plugin = dir.join("plugin-hangs");
    std::fs::write(
        &plugin,
        format!(
            "#!/bin/sh\necho {SECRET}\necho {SECRET} >&2\nsleep 300 &\necho $! > {}\nwait\n",
            pid_file.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let server = world.api.url();
    std::fs::write(
        dir.join("kubeconfig"),
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {server}\n\
             users:\n- name: u\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      \
             command: {}\n      interactiveMode: Never\n      args: [\"--token={SECRET}\"]\n\
             contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: u\ncurrent-context: fake\n",
            plugin.display()
        ),
    )
    .unwrap();
    pid_file
}

/// The plugin's child, once it has started.
async fn plugin_child(pid_file: &Path) -> i32 {
    for _ in 0..1000 {
        if let Some(pid) = std::fs::read_to_string(pid_file)
            .ok()
            .and_then(|t| t.trim().parse().ok())
        {
            return pid;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the plugin never started");
}

/// Whether process `pid` is gone (or a zombie waiting for its new parent).
fn gone(pid: i32) -> bool {
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_err()
        || std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| s.contains(") Z "))
}

/// The world of [`setup`] with the hanging plugin, the daemon started (READY=1) and the
/// plugin running for its boot restore; the plugin's child's PID.
async fn started_with_a_hanging_plugin() -> Option<(World, i32)> {
    let mut world = World::start(setup()).await?;
    let pid_file = hanging_plugin(&world);
    world.spawn_daemon();
    world.wait_ready().await;
    let child = plugin_child(&pid_file).await;
    Some((world, child))
}

fn setup() -> Setup {
    Setup {
        // The request timeout is far beyond the budget: only the drain's deadline bounds the
        // plugin on the shutdown path.
        config: "request_timeout = \"30s\"\n[drain]\ntimeout = \"3s\"\n[daemon]\n\
                 release_margin = \"1s\"\nrestore_ready_timeout = \"5s\"\n"
            .to_owned(),
        ..Setup::default()
    }
}

/// A shutdown while the plugin hangs: the drain gives up on it at its deadline and the lock
/// goes before logind's maximum (20 s), within the 3 s budget and the margin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_exec_plugin_does_not_hold_the_lock_past_the_budget() {
    let Some((world, _)) = started_with_a_hanging_plugin().await else {
        return;
    };
    world.rig.reboot().await;
    let outcome = world.expect_released(Duration::from_secs(25)).await;
    assert!(
        outcome.elapsed < 3.0 + 1.0,
        "released at {} s, after the 3 s budget + 1 s margin; log:\n{}",
        outcome.elapsed,
        world.log()
    );
    // Named either way the wait ended: the drain's own run of the plugin gave no answer, or
    // the drain waited for the daemon's fetch ahead of it (the same plugin, hanging).
    let plugin = format!(
        "exec credential plugin {}",
        world.dir().join("plugin-hangs").display()
    );
    world
        .expect_until(
            Duration::from_secs(5),
            |w| {
                w.log().lines().any(|l| {
                    l.contains(&plugin)
                        && (l.contains("gave no answer within")
                            || l.contains("before the deadline"))
                })
            },
            "the drain names the plugin that did not answer",
        )
        .await;
    let log = world.log();
    assert!(
        !log.contains(SECRET),
        "the plugin's output or args leaked:\n{log}"
    );
}

/// SIGTERM while the boot restore waits for the plugin: the daemon exits at once, and the
/// plugin and its child are killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_during_a_hanging_exec_plugin_stops_the_daemon_and_the_plugin() {
    let Some((mut world, child)) = started_with_a_hanging_plugin().await else {
        return;
    };
    world.signal(Signal::SIGTERM);
    let status = world.wait_exit(Duration::from_secs(10));
    assert!(
        status.is_some(),
        "the daemon still runs 10 s after SIGTERM; log:\n{}",
        world.log()
    );
    for _ in 0..500 {
        if gone(child) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(gone(child), "the plugin's child outlived the daemon");
    assert!(!world.log().contains(SECRET), "{}", world.log());
}

/// A plugin whose token expires: the daemon fetches it once it is ready and again before it
/// expires (the drain timeout and a request timeout ahead), never on the shutdown's path: the
/// reboot's drain runs no plugin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_credential_is_fetched_ahead_and_refreshed_before_it_expires_not_at_the_shutdown() {
    let Some(mut world) = World::start(setup()).await else {
        return;
    };
    let dir = world.dir().to_path_buf();
    let counter = dir.join("plugin-runs");
    // The first token expires in 38 s, so it is refreshed 33 s (3 s drain timeout + 30 s
    // request timeout) before: about 5 s after the first fetch. Later tokens last an hour.
    let plugin = dir.join("plugin-ok");
    std::fs::write(
        &plugin,
        format!(
            "#!/bin/sh\nn=$(cat {runs} 2>/dev/null | wc -l)\necho run >> {runs}\n\
             if [ \"$n\" -eq 0 ]; then e=$(date -u -d '+38 seconds' +%FT%TZ); \
             else e=$(date -u -d '+1 hour' +%FT%TZ); fi\n\
             echo '{{\"apiVersion\":\"client.authentication.k8s.io/v1\",\
             \"kind\":\"ExecCredential\",\"status\":{{\"token\":\"admin\",\
             \"expirationTimestamp\":\"'$e'\"}}}}'\n",
            runs = counter.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&plugin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let server = world.api.url();
    std::fs::write(
        dir.join("kubeconfig"),
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {server}\n\
             users:\n- name: u\n  user:\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      \
             command: {}\n      interactiveMode: Never\n\
             contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: u\ncurrent-context: fake\n",
            plugin.display()
        ),
    )
    .unwrap();
    let runs = || {
        std::fs::read_to_string(&counter)
            .map(|t| t.lines().count())
            .unwrap_or(0)
    };
    world.spawn_daemon();
    world.wait_ready().await;
    world
        .expect_until(
            Duration::from_secs(10),
            |_| runs() >= 1,
            "the credential fetched once the daemon is ready",
        )
        .await;
    world
        .expect_until(
            Duration::from_secs(20),
            |_| runs() >= 2,
            "the credential fetched again before it expires",
        )
        .await;
    let before = runs();
    world.rig.reboot().await;
    world.expect_released(Duration::from_secs(25)).await;
    assert!(
        world.is_cordoned(),
        "drained with the cached token; log:\n{}",
        world.log()
    );
    assert_eq!(
        runs(),
        before,
        "the shutdown's drain ran the plugin; log:\n{}",
        world.log()
    );
}

/// The API server's certificate is signed by a CA the kubeconfig does not name: no request can
/// pass. At start the boot restore tries once and then waits at its slowest pace, saying so;
/// at a reboot with a budget of a minute the drain sends each of its first requests once and
/// ends at the refusal, and logind gets its lock back before the drain's deadline could have
/// come. Judged by the handshakes the API server's TLS front saw during the drain (a drain that
/// retried would make dozens in its minute), the lock's release and the report naming the
/// refusal and the kubeconfig; the release's time is printed, not judged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_certificate_gives_the_lock_back_at_once_at_a_reboot() {
    let setup = Setup {
        logind: LogindOptions {
            delay_max: Duration::from_secs(70),
            ..LogindOptions::default()
        },
        config: "[drain]\ntimeout = \"60s\"\n".to_owned(),
        ..Setup::default()
    };
    let Some(mut world) = World::start(setup).await else {
        return;
    };
    let ca = Ca::new();
    let front = Front::start(
        &world.api.url(),
        server_tls(&ca.server(&["127.0.0.1"]), None),
    )
    .await;
    let stranger = Ca::named("another cluster's CA");
    let kubeconfig = world.dir().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: {}\n    \
             certificate-authority-data: {}\nusers:\n- name: u\n  user:\n    token: {IDENTITY}\n\
             contexts:\n- name: c\n  context:\n    cluster: c\n    user: u\ncurrent-context: c\n",
            front.url,
            b64(&stranger.pem)
        ),
    )
    .unwrap();
    world.spawn_daemon();
    world.wait_ready().await;
    world
        .expect_log(
            "trying again in 30 s, once the kubeconfig, the server's certificate or the node's \
             clock is put right",
            Duration::from_secs(20),
            "the boot restore waits at its slowest pace after a refused certificate",
        )
        .await;
    let before = front.connections();
    world.rig.reboot().await;
    let outcome = world.expect_released(Duration::from_secs(90)).await;
    let during = front.connections() - before;
    println!(
        "lock released {:.3} s after the announcement (InhibitDelayMaxSec 70 s, drain timeout \
         60 s), {during} handshakes during the drain",
        outcome.elapsed
    );
    assert!(
        during <= 6,
        "{during} handshakes during the drain: a request was sent again; log:\n{}",
        world.log()
    );
    let refused = format!(
        "certificate refused (UnknownIssuer): not signed by the certificate-authority of \
         kubeconfig {}",
        kubeconfig.display()
    );
    let report = world.expect_report("the drain's report").await;
    let errors = report["errors"].to_string();
    assert!(errors.contains(&refused), "{report:#}");
    let log = world.log();
    assert!(log.contains(&refused), "{log}");
    assert!(!log.contains("attempts in"), "nothing was retried:\n{log}");
    assert!(
        world.api.recorder().requests().is_empty(),
        "nothing passed the front"
    );
}
