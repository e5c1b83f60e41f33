//! What the journal receives from a CLI drain and from the daemon's shutdown drain: the fields
//! `NODE`, `POD`, `BUDGET`, `OUTCOME`, `SHUTDOWN_KIND`, `BOOT_ID` that `journalctl -o json` shows,
//! read back from the datagrams tracing-journald sent (see `tests/journal`). Needs root and
//! unshare(1) for a private mount namespace; otherwise skipped with the reason printed.

mod daemon_support;
mod engine_support;
mod journal;
mod logind;

use std::time::Duration;

use engine_support::*;
use journal::{Journal, assert_clean, cannot_capture, find, one};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_under_journald_carries_node_pod_budget_outcome_and_boot_id_fields() {
    if let Some(why) = cannot_capture() {
        println!("skipped: {why}");
        return;
    }
    let c = Cluster::start(vec![
        pod(NS, "web", NODE),
        pod(NS, "guarded", NODE),
        pdb(NS, "guarded-pdb", "guarded", 1),
    ])
    .await;
    let config = c.config_file("admin", "[drain]\ntimeout = \"2s\"\n");
    let mut journal = Journal::start();
    let stderr_path = c.dir.path().join("stderr");
    let stderr = std::fs::File::create(&stderr_path).unwrap();
    let mut cmd = journal.command(env!("CARGO_BIN_EXE_kube-shutdown-drain").as_ref(), &stderr);
    cmd.arg("--config")
        .arg(&config)
        .arg("drain")
        .env("KUBE_SHUTDOWN_DRAIN_LOG", "info")
        .env(
            "DBUS_SYSTEM_BUS_ADDRESS",
            "unix:path=/nonexistent/kube-shutdown-drain-test-bus",
        )
        .stdout(std::process::Stdio::null())
        .stderr(stderr);
    let status = tokio::task::spawn_blocking(move || cmd.status().unwrap())
        .await
        .unwrap();
    let entries = journal.finish();
    let stderr = std::fs::read_to_string(&stderr_path).unwrap();
    assert_eq!(status.code(), Some(1), "the guarded pod stays: {stderr}");
    assert!(
        stderr.is_empty(),
        "logs went to the journal, not stderr: {stderr}"
    );
    assert_clean(&entries);
    let marker = find(&entries, "prepared node node-a: marker written");
    assert_eq!(one(marker, "NODE"), Some(NODE));
    assert!(one(marker, "BOOT_ID").is_some_and(|b| !b.is_empty()));
    let refused = find(&entries, "eviction of pod work/guarded refused (429)");
    assert_eq!(one(refused, "NODE"), Some(NODE));
    assert_eq!(one(refused, "POD"), Some("work/guarded"));
    assert_eq!(one(refused, "BUDGET"), Some("work/guarded-pdb"));
    let gone = find(&entries, "pod work/web is gone");
    assert_eq!(one(gone, "POD"), Some("work/web"));
    assert_eq!(one(gone, "OUTCOME"), Some("evicted"));
    assert_eq!(one(gone, "NODE"), Some(NODE));
}

#[tokio::test]
async fn the_daemons_shutdown_drain_carries_the_shutdown_kind_and_the_node() {
    if let Some(why) = cannot_capture() {
        println!("skipped: {why}");
        return;
    }
    let setup = daemon_support::Setup {
        seed: daemon_support::open_seed(),
        config: "[drain]\ntimeout = \"15s\"\n[daemon]\nrelease_margin = \"2s\"\n".into(),
        ..daemon_support::Setup::default()
    };
    let Some(mut world) = daemon_support::World::start(setup).await else {
        return;
    };
    let mut journal = Journal::start();
    world.spawn_daemon_into(Some(&|bin, log| journal.command(bin, log)));
    world.wait_ready().await;
    world.rig.reboot().await;
    let begin = std::time::Instant::now();
    while world.rig.outcomes().is_empty() && begin.elapsed() < Duration::from_secs(25) {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(
        world.rig.outcomes().first().map(|o| o.what.clone()),
        Some("released".to_owned())
    );
    world.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(world.wait_exit(Duration::from_secs(10)).is_some());
    let entries = journal.finish();
    assert_clean(&entries);
    let announced = find(&entries, "logind announced a reboot");
    assert_eq!(one(announced, "SHUTDOWN_KIND"), Some("reboot"));
    assert_eq!(one(announced, "NODE"), Some(daemon_support::NODE));
    let marker = find(&entries, "prepared node demo-node-1: marker written");
    assert_eq!(one(marker, "SHUTDOWN_KIND"), Some("reboot"));
    assert!(one(marker, "BOOT_ID").is_some_and(|b| !b.is_empty()));
    let gone = entries
        .iter()
        .find(|e| one(e, "OUTCOME") == Some("evicted"))
        .expect("an evicted pod");
    assert_eq!(one(gone, "SHUTDOWN_KIND"), Some("reboot"));
    assert_eq!(one(gone, "NODE"), Some(daemon_support::NODE));
    assert!(one(gone, "POD").is_some());
    let drained = find(&entries, "drained node");
    assert_eq!(one(drained, "OUTCOME"), Some("drained"));
}
