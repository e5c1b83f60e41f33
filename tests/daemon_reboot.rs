//! Reboots the node asks for (`[reboot]`, issue 31): `kube-shutdown-drain run` against the fake
//! API server and a fake logind on a private bus, with a sentinel file in a temporary
//! directory. The file appearing drains the node and only then asks logind to reboot; the boot
//! after restores it. A hold annotation or a closed window keeps the node waiting (said, with
//! the reason's key), and a file removed before the reboot takes nothing.

mod daemon_support;
mod logind;

use std::path::{Path, PathBuf};
use std::time::Duration;

use daemon_support::{NODE, Setup, World, open_seed, slot_lease};
use serde_json::json;

/// A world whose daemon watches `sentinel` (and whose config carries `more`).
async fn world(sentinel: &Path, more: &str) -> Option<World> {
    daemon_support::started(Setup {
        seed: open_seed(),
        config: format!(
            "[reboot]\nsentinel_file = \"{}\"\n{more}",
            sentinel.display()
        ),
        ..Setup::default()
    })
    .await
}

fn sentinel_dir() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("ksd-sentinel-")
        .tempdir()
        .expect("a temp dir");
    let file = dir.path().join("reboot-required");
    (dir, file)
}

/// The position of `needle` in `log`, for the order of what was said.
fn at(log: &str, needle: &str) -> usize {
    log.find(needle)
        .unwrap_or_else(|| panic!("no {needle:?} in the log:\n{log}"))
}

#[tokio::test]
async fn a_sentinel_file_drains_the_node_then_reboots_it_and_the_next_boot_restores_it() {
    let (_dir, sentinel) = sentinel_dir();
    let Some(mut w) = world(&sentinel, "").await else {
        return;
    };
    w.expect_log(
        &format!("node {NODE} needs no reboot"),
        Duration::from_secs(10),
        "the file's absence is said at start",
    )
    .await;
    assert!(!w.is_cordoned(), "nothing happens without the file");
    let status = w.status_json().await;
    assert_eq!(status["reboot"]["need"], json!("not_needed"), "{status}");
    assert_eq!(status["reboot"]["holds"], json!([]), "{status}");
    std::fs::write(&sentinel, "*** System restart required ***\n").unwrap();
    w.expect_log(
        &format!("asking logind to reboot node {NODE}"),
        Duration::from_secs(30),
        "the file asks for a reboot",
    )
    .await;
    let outcome = w
        .rig
        .wait_outcome(0, Duration::from_secs(30))
        .await
        .unwrap_or_else(|| panic!("logind never rebooted; log:\n{}", w.log()));
    assert_eq!(outcome.what, "released", "{}", outcome.line);
    assert!(w.is_drained() && w.is_cordoned(), "{}", w.log());
    let log = w.log();
    // The node was drained before logind was asked, and logind's own window found it drained.
    assert!(
        at(
            &log,
            &format!("node {NODE} needs a reboot: {}", sentinel.display())
        ) < at(&log, &format!("node {NODE} drained for its reboot"))
            && at(&log, &format!("node {NODE} drained for its reboot"))
                < at(&log, &format!("asking logind to reboot node {NODE}")),
        "{log}"
    );
    assert!(
        log.contains(&format!(
            "drain of node {NODE} started (reboot the node asked for ([reboot]))"
        )),
        "the reboot's own drain names its reason: {log}"
    );
    // The cluster sees it too: one Event each.
    for reason in ["RebootRequired", "RebootStarted"] {
        assert_eq!(w.node_events(reason).len(), 1, "{reason}: {}", w.log());
    }
    assert!(w.node_events("RebootWaiting").is_empty());
    // The boot after: the node is restored (the file is gone, as a reboot removes it from /run).
    std::fs::remove_file(&sentinel).unwrap();
    w.boot_again().await;
    w.expect_restored(
        Duration::from_secs(20),
        "the boot after the reboot restores the node",
    )
    .await;
    // The new boot's follower looked, and found no need: no second reboot.
    w.expect_log(
        &format!("node {NODE} needs no reboot"),
        Duration::from_secs(10),
        "the new boot's follower says the need is gone",
    )
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        w.rig.outcomes().len(),
        1,
        "no second reboot; log:\n{}",
        w.log()
    );
}

#[tokio::test]
async fn a_hold_keeps_the_node_waiting_and_a_file_removed_before_its_turn_takes_nothing() {
    let (dir, sentinel) = sentinel_dir();
    let textfile = dir.path().join("metrics.prom");
    let metrics = format!("[metrics]\ntextfile = \"{}\"\n", textfile.display());
    let Some(w) = world(&sentinel, &metrics).await else {
        return;
    };
    w.api
        .store()
        .modify("Node", None, NODE, |n| {
            n["metadata"]["annotations"]["kube-shutdown-drain/hold"] = json!("kernel bisect, ana")
        })
        .unwrap();
    std::fs::write(&sentinel, "").unwrap();
    w.expect_log(
        &format!("the reboot of node {NODE} waits (held)"),
        Duration::from_secs(20),
        "the hold annotation holds the reboot, said with its key",
    )
    .await;
    assert!(
        w.log().contains("annotation kube-shutdown-drain/hold"),
        "{}",
        w.log()
    );
    let held = format!("reboot needed, waits: node {NODE} is held by its annotation");
    if let Err(statuses) = w.notify.wait_status(&held, Duration::from_secs(10)).await {
        panic!("STATUS= never said what holds the reboot: {statuses:?}");
    }
    // The metrics say it: needed, waiting for the hold, the window (none) open.
    let held = format!("kube_shutdown_drain_reboot_waiting{{node=\"{NODE}\",reason=\"held\"}} 1");
    w.expect_until(
        Duration::from_secs(10),
        |_| {
            let text = std::fs::read_to_string(&textfile).unwrap_or_default();
            text.lines().any(|l| l == held)
                && text
                    .lines()
                    .any(|l| l == "kube_shutdown_drain_reboot_required 1")
                && text
                    .lines()
                    .any(|l| l == "kube_shutdown_drain_reboot_window_open 1")
        },
        "the metrics say the reboot is needed and held",
    )
    .await;
    // `status` judges the same: needed, held by the annotation.
    let status = w.status_json().await;
    assert_eq!(status["reboot"]["need"], json!("needed"), "{status}");
    assert_eq!(
        status["reboot"]["holds"][0]["key"],
        json!("held"),
        "{status}"
    );
    // Held, nothing on the node changes: no slot, no cordon, no eviction.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !w.is_cordoned() && !w.is_drained() && !w.log().contains("rebooting node"),
        "a held node is left alone; log:\n{}",
        w.log()
    );
    w.expect_until(
        Duration::from_secs(10),
        |w| w.node_events("RebootWaiting").len() == 1,
        "one RebootWaiting Event names the hold",
    )
    .await;
    let waiting = &w.node_events("RebootWaiting")[0];
    assert!(
        waiting["message"]
            .as_str()
            .is_some_and(|m| m.contains("annotation kube-shutdown-drain/hold")),
        "{waiting}"
    );
    std::fs::remove_file(&sentinel).unwrap();
    w.expect_log(
        &format!("node {NODE} needs no reboot: {}", sentinel.display()),
        Duration::from_secs(10),
        "the file's removal is seen",
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!w.is_cordoned() && !w.is_tainted(), "{}", w.log());
    assert!(w.rig.outcomes().is_empty(), "no reboot; log:\n{}", w.log());
    assert!(w.marker().is_none(), "nothing recorded on the node");
}

#[tokio::test]
async fn outside_its_window_the_node_waits_and_says_when_the_window_opens() {
    let (_dir, sentinel) = sentinel_dir();
    // A one-hour window three days from today: closed now whatever the hour.
    let day = jiff::Zoned::now()
        .with_time_zone(jiff::tz::TimeZone::UTC)
        .date()
        .checked_add(jiff::Span::new().days(3))
        .unwrap()
        .weekday();
    let name = &format!("{day:?}")[..3];
    let window = format!(
        "[[reboot.window]]\ndays = [\"{name}\"]\nstart_time = \"12:00\"\nlength_minutes = 60\n"
    );
    let Some(w) = world(&sentinel, &window).await else {
        return;
    };
    std::fs::write(&sentinel, "").unwrap();
    w.expect_log(
        &format!("the reboot of node {NODE} waits (outside_window)"),
        Duration::from_secs(20),
        "a closed window holds the reboot",
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!w.is_cordoned(), "{}", w.log());
    assert!(w.rig.outcomes().is_empty(), "no reboot; log:\n{}", w.log());
}

/// How many times the current run's log says `needle`, waited for to reach `count`.
async fn expect_said(w: &World, needle: &str, count: usize, why: &str) {
    w.expect_until(
        Duration::from_secs(20),
        |w| w.log().matches(needle).count() >= count,
        &format!("{why} ({needle:?} said {count} times)"),
    )
    .await;
}

/// The holder of this node's waiting Lease (the line for a drain slot), if it is held.
fn waiting_holder(w: &World) -> Option<String> {
    let name = format!("kube-shutdown-drain-waiting.{NODE}");
    w.api
        .store()
        .get("Lease", Some("kube-shutdown-drain"), &name)
        .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_string))
}

/// The reboot waits for the one slot, in line (its waiting Lease written after 5 s); the need
/// goes away: nothing was changed, the waiting Lease goes back at once (not when it goes stale
/// half an hour later), and the slot once free is not taken.
#[tokio::test]
async fn a_need_that_goes_away_while_the_reboot_waits_for_a_slot_takes_nothing() {
    let (_dir, sentinel) = sentinel_dir();
    let Some(w) = world(&sentinel, "[fleet]\nslots = 1\n").await else {
        return;
    };
    w.expect_log(
        &format!("node {NODE} needs no reboot"),
        Duration::from_secs(15),
        "the file's absence counts once it has stood",
    )
    .await;
    // demo-node-2 holds the one slot, in the boot its Node reports (not stale).
    let holder = w.other_holder();
    w.api.store().upsert(slot_lease(Some(&holder))).unwrap();
    std::fs::write(&sentinel, "").unwrap();
    w.expect_log(
        &format!("every drain slot of group all is held ({holder}); node {NODE} waits for one"),
        Duration::from_secs(20),
        "the reboot waits for the slot demo-node-2 holds",
    )
    .await;
    w.expect_until(
        Duration::from_secs(20),
        |w| waiting_holder(w).is_some_and(|h| h.starts_with(&format!("{NODE}/"))),
        "the node joins the line: its waiting Lease is held",
    )
    .await;
    std::fs::remove_file(&sentinel).unwrap();
    let gone = format!(
        "node {NODE} needs no reboot: {} does not exist",
        sentinel.display()
    );
    expect_said(&w, &gone, 2, "the file's removal is seen").await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(
        !w.is_cordoned() && !w.is_tainted() && w.marker().is_none(),
        "{}",
        w.log()
    );
    assert!(w.rig.outcomes().is_empty(), "no reboot; log:\n{}", w.log());
    assert_eq!(w.slot_holder(), Some(holder), "the slot is not ours");
    w.expect_until(
        Duration::from_secs(10),
        |w| waiting_holder(w).is_none(),
        "the waiting Lease goes back with the wait called off",
    )
    .await;
    // demo-node-2 gives the slot back: the reboot called off takes it no more.
    w.api.store().upsert(slot_lease(None)).unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        w.slot_holder(),
        None,
        "the slot stays free; log:\n{}",
        w.log()
    );
    assert!(!w.is_cordoned(), "{}", w.log());
}

#[tokio::test]
async fn a_daemon_stopped_during_its_own_reboot_restores_the_node_at_its_next_start() {
    let (_dir, sentinel) = sentinel_dir();
    // The demo's `web` budget keeps one pod: the reboot's drain runs until it is stopped.
    let Some(mut w) = daemon_support::started(Setup {
        config: format!(
            "[drain]\ntimeout = \"60s\"\n[reboot]\nsentinel_file = \"{}\"\n",
            sentinel.display()
        ),
        ..Setup::default()
    })
    .await
    else {
        return;
    };
    std::fs::write(&sentinel, "").unwrap();
    w.expect_log(
        &format!("drain of node {NODE} started (reboot the node asked for ([reboot]))"),
        Duration::from_secs(20),
        "the reboot's drain starts",
    )
    .await;
    w.expect_until(Duration::from_secs(10), World::is_cordoned, "cordoned")
        .await;
    w.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(
        w.wait_exit(Duration::from_secs(10)).is_some(),
        "the daemon stops; log:\n{}",
        w.log()
    );
    assert!(w.is_cordoned() && w.rig.outcomes().is_empty());
    // The need went while the daemon was away; its next start restores what the reboot did.
    std::fs::remove_file(&sentinel).unwrap();
    w.spawn_daemon();
    w.wait_ready().await;
    w.expect_log(
        "is from the node's own reboot, which never reached logind's window",
        Duration::from_secs(10),
        "the start tells the own reboot's marker from a shutdown's",
    )
    .await;
    w.expect_restored(Duration::from_secs(30), "the next start restores the node")
        .await;
    assert!(w.rig.outcomes().is_empty(), "no reboot; log:\n{}", w.log());
}

#[tokio::test]
async fn another_programs_block_lock_keeps_the_node_from_its_own_reboot_even_where_root_passes_it()
{
    let (_dir, sentinel) = sentinel_dir();
    // systemd 252's logind: root's Reboot passes a block lock, so the daemon must look itself.
    let Some(w) = daemon_support::started(Setup {
        seed: open_seed(),
        logind: logind::LogindOptions {
            block_binds_root: false,
            ..logind::LogindOptions::default()
        },
        config: format!("[reboot]\nsentinel_file = \"{}\"\n", sentinel.display()),
        ..Setup::default()
    })
    .await
    else {
        return;
    };
    let _theirs = w.rig.foreign_lock_in("backup-job", "block").await;
    std::fs::write(&sentinel, "").unwrap();
    w.expect_log(
        &format!("not rebooting node {NODE}: another program blocks shutdowns (backup-job ("),
        Duration::from_secs(30),
        "the foreign block lock is honoured",
    )
    .await;
    w.expect_restored(Duration::from_secs(20), "the drained node is restored")
        .await;
    assert!(w.rig.outcomes().is_empty(), "no reboot; log:\n{}", w.log());
    w.expect_log(
        &format!(
            "node {NODE} still needs a reboot (a step of it failed, as the journal says); trying \
             again in 600 s"
        ),
        Duration::from_secs(5),
        "the next try waits",
    )
    .await;
}

/// The KEP-5683 conditions of a node's status, as `(type, status, reason)`, ours only.
fn lifecycle_conditions(w: &World) -> Vec<(String, String, String)> {
    let node = w.node();
    let ours = ["MaintenancePlanned", "DrainInProgress", "Drained"];
    node["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| ours.contains(&c["type"].as_str().unwrap_or_default()))
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            (s("type"), s("status"), s("reason"))
        })
        .collect()
}

fn condition(w: &World, kind: &str) -> Option<(String, String)> {
    lifecycle_conditions(w)
        .into_iter()
        .find(|(t, _, _)| t == kind)
        .map(|(_, s, r)| (s, r))
}

/// `[node] lifecycle_conditions = true`: the reboot's need sets MaintenancePlanned, its drain
/// DrainInProgress then Drained, on the Node's status beside the kubelet's conditions (Ready
/// stays), with the shipped RBAC; the boot after sets all three false.
#[tokio::test]
async fn the_lifecycle_conditions_follow_the_need_the_drain_and_the_restore() {
    let (_dir, sentinel) = sentinel_dir();
    let Some(mut w) = world(&sentinel, "[node]\nlifecycle_conditions = true\n").await else {
        return;
    };
    std::fs::write(&sentinel, "").unwrap();
    w.rig
        .wait_outcome(0, Duration::from_secs(30))
        .await
        .unwrap_or_else(|| panic!("logind never rebooted; log:\n{}", w.log()));
    let t = |s: &str, r: &str| Some((s.to_string(), r.to_string()));
    assert_eq!(
        condition(&w, "MaintenancePlanned"),
        t("True", "RebootNeeded"),
        "{:?}\n{}",
        lifecycle_conditions(&w),
        w.log()
    );
    assert_eq!(condition(&w, "Drained"), t("True", "DrainCompleted"));
    assert_eq!(
        condition(&w, "DrainInProgress"),
        t("False", "DrainCompleted")
    );
    let ready = w.node()["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["type"] == "Ready");
    assert!(ready, "the kubelet's conditions stay: {}", w.node());
    assert!(
        !w.log().contains("cannot write the conditions"),
        "{}",
        w.log()
    );
    std::fs::remove_file(&sentinel).unwrap();
    w.boot_again().await;
    w.expect_restored(Duration::from_secs(20), "the boot after restores")
        .await;
    let cleared = w
        .wait_until(Duration::from_secs(10), |w| {
            let now = lifecycle_conditions(w);
            now.len() == 3 && now.iter().all(|(_, s, r)| s == "False" && r == "Restored")
        })
        .await;
    assert!(
        cleared,
        "the restore sets the three conditions false: {:?}\n{}",
        lifecycle_conditions(&w),
        w.log()
    );
    // Every write of the conditions, in order: a transition time only where the status
    // changes; DrainInProgress True once (the drain in logind's window after the reboot's own
    // drain finds nothing to do and writes nothing); messages without a repeated prefix.
    let mut status: std::collections::HashMap<String, String> = Default::default();
    let mut in_progress = 0;
    let patches = w
        .api
        .recorder()
        .requests()
        .into_iter()
        .filter(|r| r.method == "PATCH" && r.path.ends_with(&format!("/nodes/{NODE}/status")));
    for r in patches {
        let body: serde_json::Value = serde_json::from_str(&r.body).unwrap();
        for c in body["status"]["conditions"].as_array().unwrap() {
            let (kind, now) = (c["type"].as_str().unwrap(), c["status"].as_str().unwrap());
            let changed = status.insert(kind.to_string(), now.to_string()).as_deref() != Some(now);
            assert_eq!(
                c.get("lastTransitionTime").is_some(),
                changed,
                "{kind} {now} in {}",
                r.body
            );
            in_progress += usize::from(kind == "DrainInProgress" && now == "True");
            let message = c["message"].as_str().unwrap_or_default();
            assert!(
                message.matches(&format!("node {NODE}")).count() <= 1,
                "{message}"
            );
            assert!(!message.contains("0 evicted"), "{message}");
        }
    }
    assert_eq!(in_progress, 1, "one drain in progress: {}", w.log());
}

/// The node's own reboot takes its drain slot once: the drain at logind's announcement, which
/// finds the node drained, keeps the slot without writing it again (its `acquireTime` stays),
/// and the take is said once (journal and `DrainSlotTaken`).
#[tokio::test]
async fn the_own_reboot_writes_its_drain_slot_once_and_says_the_take_once() {
    let (_dir, sentinel) = sentinel_dir();
    let Some(w) = world(&sentinel, "[fleet]\nslots = 1\n").await else {
        return;
    };
    std::fs::write(&sentinel, "").unwrap();
    let outcome = w
        .rig
        .wait_outcome(0, Duration::from_secs(30))
        .await
        .unwrap_or_else(|| panic!("logind never rebooted; log:\n{}", w.log()));
    assert_eq!(outcome.what, "released", "{}", outcome.line);
    let slot_path = format!("/leases/{}", daemon_support::SLOT);
    let writes: Vec<String> = w
        .api
        .recorder()
        .requests()
        .into_iter()
        .filter(|r| {
            (r.method == "POST"
                && r.path.ends_with("/leases")
                && r.body.contains(daemon_support::SLOT))
                || (r.method != "GET" && r.path.ends_with(&slot_path))
        })
        .map(|r| format!("{} {} -> {}", r.method, r.path, r.status))
        .collect();
    assert_eq!(
        writes.len(),
        1,
        "one write of the slot: {writes:?}\n{}",
        w.log()
    );
    let log = w.log();
    assert_eq!(
        log.matches("took drain slot").count(),
        1,
        "the take is said once: {log}"
    );
    assert_eq!(w.node_events("DrainSlotTaken").len(), 1, "{log}");
    assert!(
        w.slot_holder().is_some_and(|h| h.starts_with(NODE)),
        "{log}"
    );
}

/// A sentinel file created and removed 100 times within a second, as a package upgrade may:
/// the need never stands 5 s, so nothing is said, posted, written or taken; the file left in
/// place then reboots the node, with one `RebootRequired` for the episode.
#[tokio::test]
async fn a_need_that_flaps_for_a_second_drains_nothing_and_posts_nothing() {
    let (_dir, sentinel) = sentinel_dir();
    let Some(w) = world(&sentinel, "[fleet]\nslots = 1\n").await else {
        return;
    };
    w.expect_log(
        &format!("node {NODE} needs no reboot"),
        Duration::from_secs(15),
        "the file's absence counts once it has stood",
    )
    .await;
    for _ in 0..100 {
        std::fs::write(&sentinel, "").unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
        std::fs::remove_file(&sentinel).unwrap();
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Twice the time a need must stand, after the burst.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let log = w.log();
    assert!(!log.contains("needs a reboot"), "{log}");
    for reason in ["RebootRequired", "RebootStarted", "DrainSlotTaken"] {
        assert!(w.node_events(reason).is_empty(), "{reason}: {log}");
    }
    assert!(!w.is_cordoned() && w.marker().is_none(), "{log}");
    assert_eq!(w.slot_holder(), None, "no slot taken: {log}");
    let evictions = w.api.recorder().count("POST", "/eviction");
    assert_eq!(evictions, 0, "no pod evicted: {log}");
    // The file that stays: one episode, one RebootRequired, the reboot.
    std::fs::write(&sentinel, "").unwrap();
    w.rig
        .wait_outcome(0, Duration::from_secs(40))
        .await
        .unwrap_or_else(|| panic!("logind never rebooted; log:\n{}", w.log()));
    assert_eq!(w.node_events("RebootRequired").len(), 1, "{}", w.log());
    assert_eq!(w.node_events("RebootStarted").len(), 1, "{}", w.log());
}

/// The holds are judged again once the drain is over, before logind is asked: a hold set while
/// the reboot's drain runs keeps the node from its reboot, which is restored and tried again
/// after a pause said with what ended it.
#[tokio::test]
async fn a_hold_set_during_the_reboots_drain_keeps_the_node_from_its_reboot() {
    let (_dir, sentinel) = sentinel_dir();
    let mut seed = open_seed();
    // The cart pod takes 3 s to stop: the drain lasts long enough to be held meanwhile.
    for object in &mut seed {
        if object["metadata"]["name"] == "cart-7f9b8c6d5-x2k4f" {
            object["metadata"]["annotations"]["fake-apiserver.test/termination-seconds"] =
                json!("3");
        }
    }
    let Some(w) = daemon_support::started(Setup {
        seed,
        config: format!("[reboot]\nsentinel_file = \"{}\"\n", sentinel.display()),
        ..Setup::default()
    })
    .await
    else {
        return;
    };
    std::fs::write(&sentinel, "").unwrap();
    w.expect_log(
        &format!("drain of node {NODE} started (reboot the node asked for ([reboot]))"),
        Duration::from_secs(20),
        "the reboot's drain starts",
    )
    .await;
    w.api
        .store()
        .modify("Node", None, NODE, |n| {
            n["metadata"]["annotations"]["kube-shutdown-drain/hold"] = json!("kernel bisect, ana")
        })
        .unwrap();
    w.expect_log(
        &format!("node {NODE} drained for its reboot"),
        Duration::from_secs(20),
        "the drain completes",
    )
    .await;
    w.expect_log(
        "(looked at after its drain)",
        Duration::from_secs(10),
        "the hold set during the drain is seen after it",
    )
    .await;
    w.expect_restored(Duration::from_secs(20), "the drained node is restored")
        .await;
    w.expect_log(
        &format!("node {NODE} still needs a reboot (a hold came before its reboot)"),
        Duration::from_secs(5),
        "the next try waits, said with what ended this one",
    )
    .await;
    assert!(w.rig.outcomes().is_empty(), "no reboot; log:\n{}", w.log());
    assert!(
        !w.log()
            .contains(&format!("asking logind to reboot node {NODE}")),
        "{}",
        w.log()
    );
}

/// Issue 42: `[fleet] max_unready` in the whole daemon. Another node of the group is NotReady
/// (its kubelet says so): the needed reboot waits, said with the key `unready_nodes` in the log,
/// the metrics and one `RebootWaiting` Event naming that node; once it is Ready again, the node
/// reboots (at the looker's next look, within a minute).
#[tokio::test]
async fn another_node_not_ready_holds_the_reboot_until_it_is_back() {
    let (dir, sentinel) = sentinel_dir();
    let textfile = dir.path().join("metrics.prom");
    let config = format!(
        "[metrics]\ntextfile = \"{}\"\n[fleet]\nslots = 1\nmax_unready = 1\n",
        textfile.display()
    );
    let mut seed = open_seed();
    seed.push(json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": "other"},
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": "False"}]}}));
    let Some(w) = daemon_support::started(Setup {
        seed,
        config: format!(
            "[reboot]\nsentinel_file = \"{}\"\n{config}",
            sentinel.display()
        ),
        ..Setup::default()
    })
    .await
    else {
        return;
    };
    std::fs::write(&sentinel, "").unwrap();
    w.expect_log(
        &format!("the reboot of node {NODE} waits (unready_nodes)"),
        Duration::from_secs(20),
        "a NotReady node of the group holds the reboot, said with its key",
    )
    .await;
    let waiting =
        format!("kube_shutdown_drain_reboot_waiting{{node=\"{NODE}\",reason=\"unready_nodes\"}} 1");
    w.expect_until(
        Duration::from_secs(10),
        |_| {
            std::fs::read_to_string(&textfile)
                .unwrap_or_default()
                .lines()
                .any(|l| l == waiting)
        },
        "the metrics say the reboot waits for the unready node",
    )
    .await;
    w.expect_until(
        Duration::from_secs(10),
        |w| w.node_events("RebootWaiting").len() == 1,
        "one RebootWaiting Event names the unready node",
    )
    .await;
    let event = &w.node_events("RebootWaiting")[0];
    assert!(
        event["message"]
            .as_str()
            .is_some_and(|m| m.contains("other") && m.contains("max_unready 1")),
        "{event}"
    );
    assert!(
        !w.is_cordoned() && w.rig.outcomes().is_empty(),
        "nothing happens while held; log:\n{}",
        w.log()
    );
    w.api
        .store()
        .modify("Node", None, "other", |n| {
            n["status"]["conditions"][0]["status"] = json!("True")
        })
        .unwrap();
    w.expect_until(
        Duration::from_secs(90),
        |w| !w.rig.outcomes().is_empty(),
        "once the other node is Ready again the node reboots",
    )
    .await;
    assert!(
        w.is_drained(),
        "drained before its reboot; log:\n{}",
        w.log()
    );
}
