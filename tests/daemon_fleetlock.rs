//! The FleetLock server in the daemon (`[fleetlock]`, issue 31), spoken to as zincati speaks to
//! it: `kube-shutdown-drain run` against the fake API server and a fake logind on a private
//! bus, requests over real HTTP on 127.0.0.1. steady-state at start answers 200; bad requests
//! (no protocol header, a malformed body, another node's id) are refused and change nothing;
//! pre-reboot is refused while a hold stands, then asked again until 200, which comes only once
//! the node is drained and holds its slot; zincati's reboot (through logind) finds it drained;
//! after the boot steady-state answers 200 only once the node is restored and its slot given
//! back after `release_delay`. A local user who is not the agent is refused, and nothing changes.

mod daemon_support;
mod logind;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use daemon_support::{NODE, SLOT, Setup, World, open_seed};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The machine id the daemon reads (through the tests' variable), and zincati's id for it.
const MACHINE_ID: &str = "3d1219c7c4c5404aaa1f6d2a48adfda4";
const MACHINE_ID_ENV: &str = "KUBE_SHUTDOWN_DRAIN_MACHINE_ID_FILE";

fn zincati_id() -> String {
    let base = kube_shutdown_drain::reboot::zincati_id::parse_id128(MACHINE_ID).unwrap();
    let id = kube_shutdown_drain::reboot::zincati_id::app_specific(
        &base,
        &kube_shutdown_drain::reboot::zincati_id::ZINCATI_APP_ID,
    );
    kube_shutdown_drain::reboot::zincati_id::lower_hex(&id)
}

/// A loopback port free now.
fn free_port() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

/// A world whose daemon serves FleetLock on `addr` for `agent_user`; started with the machine id
/// file, READY=1 awaited.
async fn world(addr: SocketAddr, agent_user: &str, more: &str) -> Option<World> {
    let mut w = World::start(Setup {
        seed: open_seed(),
        config: format!("[fleetlock]\nlisten = \"{addr}\"\nagent_user = \"{agent_user}\"\n{more}"),
        ..Setup::default()
    })
    .await?;
    std::fs::write(w.dir().join("machine-id"), format!("{MACHINE_ID}\n")).unwrap();
    spawn(&mut w);
    w.wait_ready().await;
    Some(w)
}

fn spawn(w: &mut World) {
    let machine_id = w.dir().join("machine-id");
    let wrap = move |bin: &Path, _: &std::fs::File| {
        let mut c = std::process::Command::new(bin);
        c.env_remove("JOURNAL_STREAM")
            .env(MACHINE_ID_ENV, &machine_id);
        c
    };
    w.spawn_daemon_into(Some(&wrap));
}

fn body(id: &str) -> String {
    serde_json::to_string_pretty(&json!({"client_params": {"id": id, "group": "default"}})).unwrap()
}

/// One POST as zincati's client writes it (with the protocol header unless `header` is false);
/// the status, and the error body's `kind` (empty on 200).
async fn post(addr: SocketAddr, path: &str, body: &str, header: bool) -> (u16, String) {
    let header = if header {
        "fleet-lock-protocol: true\r\n"
    } else {
        ""
    };
    let raw = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\naccept: */*\r\n{header}\
         content-length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(raw.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut out))
        .await
        .expect("the server answers and closes")
        .unwrap();
    let text = String::from_utf8(out).unwrap();
    let status: u16 = text.get(9..12).and_then(|s| s.parse().ok()).unwrap();
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let kind = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v["kind"].as_str().map(str::to_string))
        .unwrap_or_default();
    (status, kind)
}

async fn pre_reboot(addr: SocketAddr) -> (u16, String) {
    post(addr, "/v1/pre-reboot", &body(&zincati_id()), true).await
}

async fn steady_state(addr: SocketAddr) -> (u16, String) {
    post(addr, "/v1/steady-state", &body(&zincati_id()), true).await
}

/// Asks as zincati does until 200 (every 200 ms here, every 5 minutes there); the kinds of the
/// refusals seen on the way, in order, each once.
async fn until_200(
    w: &World,
    ask: impl AsyncFn() -> (u16, String),
    within: Duration,
) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + within;
    let mut kinds: Vec<String> = Vec::new();
    loop {
        let (status, kind) = ask().await;
        if status == 200 {
            return kinds;
        }
        assert_eq!(status, 409, "{kind}; log:\n{}", w.log());
        if kinds.last() != Some(&kind) {
            kinds.push(kind);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no 200 within {within:?} (refused: {kinds:?}); log:\n{}",
            w.log()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn me() -> String {
    let uid = nix::unistd::geteuid();
    nix::unistd::User::from_uid(uid)
        .unwrap()
        .map_or_else(|| panic!("uid {uid} has no name"), |u| u.name)
}

#[tokio::test]
async fn zincati_gets_its_200_only_once_the_node_is_drained_and_after_the_boot_once_restored() {
    let addr = free_port();
    let more = "[fleet]\nslots = 1\nrelease_delay = \"2s\"\n";
    let Some(mut w) = world(addr, &me(), more).await else {
        return;
    };
    // zincati at start: steady-state, 200 (nothing to restore, no slot held).
    let seen = until_200(&w, || steady_state(addr), Duration::from_secs(20)).await;
    println!("steady-state at start refused first with {seen:?}");
    // Bad requests are refused and change nothing.
    let id = zincati_id();
    let refused = [
        (post(addr, "/v1/pre-reboot", &body(&id), false).await, 400),
        (
            post(addr, "/v1/pre-reboot", "{\"client_params\": {", true).await,
            400,
        ),
        (
            post(
                addr,
                "/v1/pre-reboot",
                &body("0123456789abcdef0123456789abcdef"),
                true,
            )
            .await,
            403,
        ),
    ];
    for ((status, kind), want) in &refused {
        assert_eq!(status, want, "{kind}");
    }
    let kinds: Vec<&str> = refused.iter().map(|((_, k), _)| k.as_str()).collect();
    assert_eq!(
        kinds,
        [
            "missing_protocol_header",
            "bad_request_body",
            "not_this_node"
        ]
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!w.is_cordoned() && w.slot_holder().is_none(), "{}", w.log());
    assert!(!w.log().contains("needs a reboot"), "{}", w.log());
    // A hold keeps it: refused with the hold's kind until the annotation goes.
    w.api
        .store()
        .modify("Node", None, NODE, |n| {
            n["metadata"]["annotations"]["kube-shutdown-drain/hold"] = json!("kernel bisect, ana")
        })
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (status, kind) = pre_reboot(addr).await;
        assert_eq!(status, 409, "{kind}: {}", w.log());
        if kind == "reboot_held" {
            break;
        }
        assert_eq!(kind, "reboot_pending", "{}", w.log());
        assert!(tokio::time::Instant::now() < deadline, "{}", w.log());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!w.is_cordoned(), "a hold changes nothing: {}", w.log());
    w.api
        .store()
        .modify("Node", None, NODE, |n| {
            n["metadata"]["annotations"]
                .as_object_mut()
                .unwrap()
                .remove("kube-shutdown-drain/hold");
        })
        .unwrap();
    // Asked again until 200 (each ask has the holds judged again, at most every 5 s).
    let seen = until_200(&w, || pre_reboot(addr), Duration::from_secs(40)).await;
    assert!(
        seen.iter().all(|k| [
            "reboot_held",
            "reboot_pending",
            "failed_lock_semaphore_full",
            "drain_in_progress"
        ]
        .contains(&k.as_str())),
        "{seen:?}"
    );
    assert!(
        w.is_drained() && w.is_cordoned(),
        "200 only once drained: {}",
        w.log()
    );
    let holder = w.slot_holder().unwrap_or_default();
    assert!(holder.starts_with(&format!("{NODE}/")), "{holder}");
    assert!(
        w.rig.outcomes().is_empty(),
        "the daemon itself asks logind for nothing"
    );
    // Recursive: asked again, 200 again.
    assert_eq!(pre_reboot(addr).await, (200, String::new()));
    // zincati reboots through systemd: logind's window finds the node drained.
    w.rig.reboot().await;
    let outcome = w
        .rig
        .wait_outcome(0, Duration::from_secs(20))
        .await
        .unwrap_or_else(|| panic!("logind's window never ended; log:\n{}", w.log()));
    assert_eq!(outcome.what, "released", "{}", outcome.line);
    // The boot after: steady-state answers 200 only once restored and the slot given back.
    w.kill_daemon();
    w.notify.clear();
    w.rig.simulate_boot().await;
    w.new_boot();
    spawn(&mut w);
    w.wait_ready().await;
    let seen = until_200(&w, || steady_state(addr), Duration::from_secs(60)).await;
    assert!(
        seen.contains(&"restore_in_progress".to_string()),
        "the restore and the release delay are waited for: {seen:?}"
    );
    assert!(w.is_restored(), "{}", w.log());
    assert_eq!(w.slot_holder(), None, "slot {SLOT} given back: {}", w.log());
    assert_eq!(w.rig.outcomes().len(), 1, "one reboot: {}", w.log());
}

#[tokio::test]
async fn a_local_user_who_is_not_the_agent_is_refused_and_nothing_changes() {
    let addr = free_port();
    // The agent is `nobody`; this test's requests come from its own user.
    if nix::unistd::User::from_name("nobody")
        .ok()
        .flatten()
        .is_none()
    {
        eprintln!("SKIPPED: no user `nobody` on this host");
        assert!(std::env::var_os("CI").is_none(), "CI needs user nobody");
        return;
    }
    let Some(w) = world(addr, "nobody", "").await else {
        return;
    };
    for _ in 0..3 {
        assert_eq!(
            pre_reboot(addr).await,
            (403, "caller_not_update_agent".to_string()),
            "{}",
            w.log()
        );
    }
    assert_eq!(
        steady_state(addr).await,
        (403, "caller_not_update_agent".to_string())
    );
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!w.is_cordoned(), "{}", w.log());
    assert!(!w.log().contains("needs a reboot"), "{}", w.log());
    assert!(w.node_events("RebootRequired").is_empty());
    assert!(
        w.log().contains("only the update agent (user nobody"),
        "the refusal names the agent: {}",
        w.log()
    );
    let status = w.status_json().await;
    let server = status["reboot"]["fleetlock"].as_str().unwrap_or_default();
    assert!(
        server.contains("user nobody") && server.contains(&format!("http://{addr}/")),
        "{status}"
    );
}

/// With the bus (and logind) gone, the daemon could neither see the agent's reboot nor hold it
/// for a drain: every request gets 503 `no_answer`, which zincati retries, and none starts a
/// drain; once logind is back, the agent's pre-reboot is heard again.
#[tokio::test]
async fn without_logind_the_agent_is_answered_503_and_nothing_is_drained() {
    let addr = free_port();
    let Some(mut w) = world(addr, &me(), "").await else {
        return;
    };
    until_200(&w, || steady_state(addr), Duration::from_secs(20)).await;
    w.rig.stop_bus();
    w.expect_log(
        "reconnecting to logind",
        Duration::from_secs(10),
        "the daemon sees logind go",
    )
    .await;
    for _ in 0..15 {
        assert_eq!(pre_reboot(addr).await, (503, "no_answer".to_string()));
        assert_eq!(steady_state(addr).await, (503, "no_answer".to_string()));
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    let log = w.log();
    assert!(!log.contains("needs a reboot"), "no need heard: {log}");
    assert!(!w.is_cordoned() && w.marker().is_none(), "{log}");
    w.rig
        .start_bus_again(logind::LogindOptions::default())
        .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    loop {
        let (status, kind) = pre_reboot(addr).await;
        if status == 409 {
            assert_eq!(kind, "reboot_pending", "{}", w.log());
            break;
        }
        assert_eq!((status, kind.as_str()), (503, "no_answer"));
        assert!(tokio::time::Instant::now() < deadline, "{}", w.log());
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    w.expect_log(
        "needs a reboot",
        Duration::from_secs(15),
        "the pre-reboot after logind's return is a need",
    )
    .await;
}

/// Under a unit whose user namespace does not map the agent (the shipped `PrivateUsers=yes`:
/// only root), the daemon does not start: exit 2, which the unit does not restart, and one
/// line naming the agent, the map, the drop-in to install and the way for an older systemd.
#[tokio::test]
async fn a_namespace_that_does_not_map_the_agent_stops_the_daemon_at_start_with_exit_2() {
    let addr = free_port();
    let Some(mut w) = World::start(Setup {
        seed: open_seed(),
        config: format!("[fleetlock]\nlisten = \"{addr}\"\nagent_user = \"nobody\"\n"),
        ..Setup::default()
    })
    .await
    else {
        return;
    };
    if nix::unistd::User::from_name("nobody")
        .ok()
        .flatten()
        .is_none()
    {
        eprintln!("SKIPPED: no user `nobody` on this host");
        assert!(std::env::var_os("CI").is_none(), "CI needs user nobody");
        return;
    }
    std::fs::write(w.dir().join("machine-id"), format!("{MACHINE_ID}\n")).unwrap();
    // What PrivateUsers=self shows a root service in /proc/self/uid_map.
    let uid_map = w.dir().join("uid_map");
    std::fs::write(&uid_map, "         0          0          1\n").unwrap();
    let (machine_id, map_file) = (w.dir().join("machine-id"), uid_map.clone());
    let wrap = move |bin: &Path, _: &std::fs::File| {
        let mut c = std::process::Command::new(bin);
        c.env_remove("JOURNAL_STREAM")
            .env(MACHINE_ID_ENV, &machine_id)
            .env("KUBE_SHUTDOWN_DRAIN_UID_MAP_FILE", &map_file);
        c
    };
    w.spawn_daemon_into(Some(&wrap));
    let status = w
        .wait_exit(Duration::from_secs(30))
        .unwrap_or_else(|| panic!("the daemon runs; log:\n{}", w.log()));
    assert_eq!(status.code(), Some(2), "{}", w.log());
    let log = w.log();
    let line = log
        .lines()
        .find(|l| l.contains("is not mapped in the daemon's user namespace"))
        .unwrap_or_else(|| panic!("no line says why; log:\n{log}"));
    let map = uid_map.display();
    for part in [
        &format!("[fleetlock] of node {NODE}: the update agent's user nobody (uid 65534)"),
        &format!("({map}: 0 0 1)"),
        "/usr/share/kube-shutdown-drain/zincati/kube-shutdown-drain.service.d/50-fleetlock.conf",
        "PrivateUsers=identity",
        "PrivateUsers=no",
        "systemctl restart kube-shutdown-drain.service",
    ] {
        assert!(line.contains(part), "{part:?} not in {line}");
    }
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "nothing listens on {addr}"
    );
}
