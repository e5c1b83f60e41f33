//! Drain slots (`[fleet]`, issue 20) against the fake API server: a node takes a slot Lease
//! before it cordons and gives it back at its restore; a node that finds every slot held
//! cordons only (or drains anyway, `on_no_slot = "drain"`) and says who holds them; two nodes
//! racing for one slot at the fake's gates never both hold it; a holder that will never give
//! its slot back (Node gone, restored in another boot, held past `hold_max`, whatever its
//! holder or its `renewTime` say) loses it; a give-back keeps a take that raced it; the
//! kubelet's credentials, which may not list the slots, restore holding none (issue 29).

mod engine_support;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use engine_support::*;
use fake_apiserver::Route;
use kube_shutdown_drain::config::Settings;
use kube_shutdown_drain::engine::Engine;
use kube_shutdown_drain::fleet::queue;
use kube_shutdown_drain::fleet::slots::{Slots, Taken};
use kube_shutdown_drain::report::Report;
use serde_json::{Value, json};
use tokio::time::Instant;

const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-shutdown-drain/leases";
const SLOT: &str = "kube-shutdown-drain-slot-0";
const BOOT: &str = "0b0e1d00-0000-4000-8000-000000000001";

/// Settings for `node` with its own shipped identity, `[fleet] slots = 1` and `extra` TOML.
fn settings_for(c: &Cluster, node: &str, extra: &str) -> Arc<Settings> {
    let kc = c.kubeconfig(&identity_of(node));
    let text = format!(
        "node_name = \"{node}\"\nkubeconfig = \"{}\"\nstate_dir = \"{}\"\nrequest_timeout = \"2s\"\n[fleet]\nslots = 1\n{extra}",
        kc.display(),
        c.dir.path().join(format!("state-{node}")).display()
    );
    let mut s = Settings::from_str_at(Path::new("/test/config.toml"), &text)
        .unwrap_or_else(|e| panic!("test settings are valid: {e}"));
    s.boot_id_path = c.dir.path().join("boot_id");
    Arc::new(s)
}

async fn prepare_and_drain(settings: Arc<Settings>, within: Duration) -> Report {
    let engine = Engine::new(settings).unwrap();
    let (prepared, report) = engine
        .prepare_and_drain("reboot", Instant::now() + within, |_| {})
        .await;
    prepared.expect("prepared");
    report
}

fn holder(c: &Cluster, name: &str) -> Option<String> {
    c.server
        .store()
        .get("Lease", Some("kube-shutdown-drain"), name)
        .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_string))
}

fn events(c: &Cluster, reason: &str) -> Vec<String> {
    c.server
        .store()
        .list("Event", Some("default"))
        .into_iter()
        .filter(|e| e["reason"] == json!(reason))
        .map(|e| e["message"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn lease(holder: &str, renewed: &str) -> Value {
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
           "metadata": {"name": SLOT, "namespace": "kube-shutdown-drain",
                        "labels": {"kube-shutdown-drain/slot-group": "all"}},
           "spec": {"holderIdentity": holder, "acquireTime": renewed, "renewTime": renewed,
                    "leaseDurationSeconds": 3600}})
}

/// The one slot held by node-a, renewed now.
fn held_fresh_by_node_a(c: &Cluster) {
    c.server
        .store()
        .upsert(lease(
            &format!("{NODE}/{BOOT}"),
            &jiff::Timestamp::now().to_string(),
        ))
        .unwrap();
}

async fn cluster() -> Cluster {
    Cluster::start(vec![
        slow_pod(NS, "web-a", NODE, 0.2),
        slow_pod(NS, "web-b", OTHER_NODE, 0.2),
    ])
    .await
}

#[tokio::test]
async fn one_slot_lets_one_node_drain_and_the_next_once_the_first_is_restored() {
    let c = cluster().await;
    let report = prepare_and_drain(settings_for(&c, NODE, ""), Duration::from_secs(10)).await;
    assert!(report.complete, "{}", report.to_text());
    assert_eq!(holder(&c, SLOT), Some(format!("{NODE}/{BOOT}")));
    assert_eq!(events(&c, "DrainSlotTaken").len(), 1);

    // node-b finds the one slot held: it waits half its 2 s, then cordons and evicts nothing.
    let b = settings_for(&c, OTHER_NODE, "");
    let report = prepare_and_drain(b.clone(), Duration::from_secs(2)).await;
    assert!(!report.complete);
    let said = report.errors.join("\n");
    assert!(
        said.contains(&format!("held by {NODE}/{BOOT}")) && said.contains("nothing evicted"),
        "{said}"
    );
    assert!(
        unschedulable(&c.node(OTHER_NODE)),
        "cordoned without a slot"
    );
    let slot = report
        .slot
        .as_ref()
        .expect("the report says how the slot wait went");
    assert_eq!(
        (slot.slot.as_deref(), slot.holders.clone()),
        (None, vec![format!("{NODE}/{BOOT}")])
    );
    assert!(slot.waited_ms >= 500, "waited half its 2 s: {slot:?}");
    assert!(
        report.to_text().contains("no drain slot after"),
        "{}",
        report.to_text()
    );
    assert_eq!(c.evictions_of(NS, "web-b"), 0);
    let unavailable = events(&c, "DrainSlotUnavailable");
    assert!(
        unavailable
            .iter()
            .any(|m| m.contains("node node-b") && m.contains(NODE)),
        "{unavailable:?}"
    );

    // node-a's restore gives the slot back; node-b's next drain takes it.
    Engine::new(settings_for(&c, NODE, ""))
        .unwrap()
        .restore()
        .await
        .expect("restored");
    assert_eq!(holder(&c, SLOT), None);
    assert_eq!(
        events(&c, "DrainSlotReleased"),
        [format!("node {NODE} gave back drain slot {SLOT}")]
    );
    let report = prepare_and_drain(b, Duration::from_secs(10)).await;
    assert!(report.complete, "{}", report.to_text());
    assert_eq!(
        report.slot.as_ref().and_then(|s| s.slot.as_deref()),
        Some(SLOT)
    );
    assert_eq!(holder(&c, SLOT), Some(format!("{OTHER_NODE}/{BOOT}")));
    assert_eq!(c.evictions_of(NS, "web-b"), 1);
}

#[tokio::test]
async fn a_node_that_went_ahead_without_a_slot_waits_for_one_once_a_boot() {
    let c = cluster().await;
    held_fresh_by_node_a(&c);
    let b = settings_for(&c, OTHER_NODE, "");
    // The announcement's drain waits half its 2 s and cordons without a slot.
    let report = prepare_and_drain(b.clone(), Duration::from_secs(2)).await;
    assert!(!report.complete && unschedulable(&c.node(OTHER_NODE)));
    // The stop phase's drain of the same boot: with 10 minutes it would wait 5 for a slot. The
    // node is prepared in this boot and holds none: it looks once and goes on.
    let report = tokio::time::timeout(
        Duration::from_secs(60),
        prepare_and_drain(b.clone(), Duration::from_secs(600)),
    )
    .await
    .expect("no second wait for a slot in one boot");
    let slot = report.slot.as_ref().expect("the slot's part of the report");
    assert_eq!(
        (slot.slot.as_deref(), slot.holders.clone()),
        (None, vec![format!("{NODE}/{BOOT}")])
    );
    assert_eq!(c.evictions_of(NS, "web-b"), 0, "cordoned only, as before");
    // In the next boot the marker is an older boot's: the node waits again.
    std::fs::write(
        c.dir.path().join("boot_id"),
        "0b0e1d00-0000-4000-8000-000000000002\n",
    )
    .unwrap();
    let report = prepare_and_drain(b, Duration::from_secs(2)).await;
    let slot = report.slot.as_ref().expect("the slot's part of the report");
    assert!(
        slot.slot.is_none() && slot.waited_ms >= 500,
        "waited half its 2 s in the new boot: {slot:?}"
    );
}

#[tokio::test]
async fn on_no_slot_drain_drains_anyway() {
    let c = cluster().await;
    held_fresh_by_node_a(&c);
    let report = prepare_and_drain(
        settings_for(&c, OTHER_NODE, "on_no_slot = \"drain\"\n"),
        Duration::from_secs(6),
    )
    .await;
    assert!(report.complete, "{}", report.to_text());
    assert_eq!(c.evictions_of(NS, "web-b"), 1);
    assert_eq!(
        holder(&c, SLOT),
        Some(format!("{NODE}/{BOOT}")),
        "the slot stays node-a's"
    );
}

/// Takes a slot for `node` through the API, looking until `within` from now.
async fn take(c: &Cluster, node: &str, within: Duration) -> Taken {
    let settings = settings_for(c, node, "");
    let engine = Engine::new(settings.clone()).unwrap();
    let clients = engine.clients().await.unwrap().clone();
    let n: k8s_openapi::api::core::v1::Node = serde_json::from_value(c.node(node)).unwrap();
    Slots {
        clients: &clients,
        settings: &settings,
    }
    .take(&n, BOOT, Instant::now() + within, Instant::now() + within)
    .await
    .expect("an answer")
}

/// Both nodes' writes are held at the gate, then let go together: one wins, the other sees it
/// held; `route` is the write they race on (the create of a new Lease, or the patch of a free
/// one).
async fn race(c: &Cluster, route: Route) {
    c.server.faults().gate(route.clone());
    let (ca, cb) = (c, c);
    let a = async move { take(ca, NODE, Duration::from_secs(3)).await };
    let b = async move { take(cb, OTHER_NODE, Duration::from_secs(3)).await };
    let open = async {
        c.until_held(&route, 2).await;
        c.server.faults().ungate(&route);
    };
    let (a, b, ()) = tokio::join!(a, b, open);
    let won: Vec<&Taken> = [&a, &b]
        .into_iter()
        .filter(|t| matches!(t, Taken::Slot(_)))
        .collect();
    assert_eq!(won.len(), 1, "exactly one winner: {a:?} / {b:?}");
    let winner = if matches!(a, Taken::Slot(_)) {
        NODE
    } else {
        OTHER_NODE
    };
    assert_eq!(holder(c, SLOT), Some(format!("{winner}/{BOOT}")));
    let Taken::Full(holders) = (if winner == NODE { b } else { a }) else {
        unreachable!()
    };
    // The loser names the winner, whichever way it lost (a 409 on its create: "just taken").
    assert!(
        holders
            .iter()
            .all(|h| h.starts_with(&format!("{winner}/{BOOT}"))),
        "{holders:?}"
    );
}

#[tokio::test]
async fn two_nodes_racing_to_create_the_slot_never_both_hold_it() {
    let c = cluster().await;
    race(&c, Route::new("POST", LEASES)).await;
}

#[tokio::test]
async fn two_nodes_racing_for_a_free_slot_never_both_hold_it() {
    let c = cluster().await;
    c.server
        .store()
        .upsert(lease("", &jiff::Timestamp::now().to_string()))
        .unwrap();
    race(&c, Route::new("PATCH", &format!("{LEASES}/{SLOT}"))).await;
}

#[tokio::test]
async fn a_holder_that_will_never_give_the_slot_back_loses_it() {
    let now = jiff::Timestamp::now();
    let hours_ago = (now - jiff::SignedDuration::from_hours(2)).to_string();
    let c = cluster().await;
    let store = c.server.store();
    // Held fresh by node-b in the boot its kubelet reports: node-a waits in vain.
    let node_b_boot = |boot: &str| {
        store
            .modify("Node", None, OTHER_NODE, |n| {
                n["status"]["nodeInfo"] = json!({"bootID": boot});
            })
            .unwrap();
    };
    node_b_boot("boot-1");
    store
        .upsert(lease(&format!("{OTHER_NODE}/boot-1"), &now.to_string()))
        .unwrap();
    assert!(
        matches!(take(&c, NODE, Duration::from_millis(600)).await, Taken::Full(h) if h == [format!("{OTHER_NODE}/boot-1")])
    );
    // node-b rebooted and was restored (no marker) without giving it back.
    node_b_boot("boot-2");
    assert_eq!(
        take(&c, NODE, Duration::from_secs(2)).await,
        Taken::Slot(SLOT.into())
    );
    assert_eq!(holder(&c, SLOT), Some(format!("{NODE}/{BOOT}")));
    // A holder whose Node is gone.
    store
        .upsert(lease("node-gone/boot-1", &now.to_string()))
        .unwrap();
    assert_eq!(
        take(&c, OTHER_NODE, Duration::from_secs(2)).await,
        Taken::Slot(SLOT.into())
    );
    // A holder that never came back within hold_max (node-a, still in its boot and marked).
    store
        .modify("Node", None, NODE, |n| {
            n["metadata"]["annotations"] = json!({"kube-shutdown-drain/marker": "{}"});
        })
        .unwrap();
    store
        .upsert(lease(&format!("{NODE}/{BOOT}"), &hours_ago))
        .unwrap();
    assert_eq!(
        take(&c, OTHER_NODE, Duration::from_secs(2)).await,
        Taken::Slot(SLOT.into())
    );
    assert_eq!(holder(&c, SLOT), Some(format!("{OTHER_NODE}/{BOOT}")));
}

#[tokio::test]
async fn the_kubelets_credentials_may_not_hold_a_slot_and_the_node_is_cordoned_saying_so() {
    let c = cluster().await;
    let kc = c.kubeconfig(&format!("system:node:{NODE}"));
    let text = format!(
        "node_name = \"{NODE}\"\nkubeconfig = \"{}\"\nstate_dir = \"{}\"\nrequest_timeout = \"2s\"\n[fleet]\nslots = 1\n",
        kc.display(),
        c.dir.path().join("state").display()
    );
    let mut s = Settings::from_str_at(Path::new("/test/config.toml"), &text).unwrap();
    s.boot_id_path = c.dir.path().join("boot_id");
    let report = prepare_and_drain(Arc::new(s), Duration::from_secs(4)).await;
    let said = report.errors.join("\n");
    assert!(
        said.contains("no drain slot for node node-a") && said.contains("403"),
        "{said}"
    );
    assert!(unschedulable(&c.node(NODE)));
    assert_eq!(c.evictions_of(NS, "web-a"), 0);
}

/// A node waiting for a slot is woken by the holder's give-back (the group's Leases are
/// watched): it gets the slot within a wait shorter than its fallback look (5 s).
#[tokio::test]
async fn a_slot_given_back_wakes_the_waiting_node() {
    let c = cluster().await;
    let report = prepare_and_drain(settings_for(&c, NODE, ""), Duration::from_secs(10)).await;
    assert!(report.complete);
    c.server.recorder().clear();
    let waiting = take(&c, OTHER_NODE, Duration::from_secs(4));
    let give_back = async {
        // Once node-b has looked and found the slot held, node-a is restored.
        until("node-b's first look", || {
            c.server
                .recorder()
                .requests()
                .iter()
                .any(|r| r.method == "GET" && r.path == format!("/api/v1/nodes/{NODE}"))
        })
        .await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        Engine::new(settings_for(&c, NODE, ""))
            .unwrap()
            .restore()
            .await
            .expect("restored");
    };
    let (taken, ()) = tokio::join!(waiting, give_back);
    assert_eq!(taken, Taken::Slot(SLOT.into()));
}

/// A server that takes the slot's write but never answers an Event costs the drain at most
/// a second: the `DrainSlotTaken` Event does not hold the prepare and the evictions, even
/// with a request timeout as long as the budget.
#[tokio::test]
async fn a_hanging_event_post_leaves_the_drain_its_time() {
    let c = cluster().await;
    c.server.faults().hang(Route::new("POST", "/events"));
    let settings = settings_for(&c, NODE, "");
    let mut settings = Arc::unwrap_or_clone(settings);
    settings.request_timeout = Duration::from_secs(30);
    let report = prepare_and_drain(Arc::new(settings), Duration::from_secs(8)).await;
    assert!(report.complete, "{}", report.to_text());
    assert_eq!(holder(&c, SLOT), Some(format!("{NODE}/{BOOT}")));
    assert_eq!(c.evictions_of(NS, "web-a"), 1);
    assert!(unschedulable(&c.node(NODE)));
}

/// A slot look that no answer ever completes (the Lease reads hang) ends the wait with the
/// error, not with "every slot is held" by nobody: the report and the Event say why.
#[tokio::test]
async fn a_slot_look_cut_before_any_answer_says_the_error() {
    let c = cluster().await;
    c.server
        .faults()
        .hang(Route::new("GET", &format!("{LEASES}/{SLOT}")));
    let mut settings = Arc::unwrap_or_clone(settings_for(&c, NODE, ""));
    settings.request_timeout = Duration::from_secs(30);
    let engine = Engine::new(Arc::new(settings))
        .unwrap()
        .looking_once_for_a_slot();
    let (prepared, report) = engine
        .prepare_and_drain("reboot", Instant::now() + Duration::from_secs(4), |_| {})
        .await;
    prepared.expect("prepared");
    let slot = report.slot.as_ref().expect("the slot's part of the report");
    assert!(
        slot.slot.is_none() && slot.holders.is_empty() && slot.error.is_some(),
        "{slot:?}"
    );
    let unavailable = events(&c, "DrainSlotUnavailable");
    assert!(
        unavailable.iter().any(|m| !m.contains("held by")),
        "{unavailable:?}"
    );
    assert!(
        unschedulable(&c.node(NODE)),
        "cordoned ([fleet] on_no_slot)"
    );
}

/// A Lease whose holder is not `NODE/BOOT_ID` (another program's, garbage, bytes) is held no
/// longer than `hold_max` either (issue 29 item 3): renewed two days ago, node-a takes it; one
/// renewed now stays its holder's.
#[tokio::test]
async fn a_holder_that_is_not_node_slash_boot_loses_the_slot_after_hold_max() {
    let now = jiff::Timestamp::now();
    let two_days_ago = (now - jiff::SignedDuration::from_hours(48)).to_string();
    let c = cluster().await;
    for foreign in ["garbage-without-slash", "\u{1}\u{7f}\u{fffd}/\u{0}/x"] {
        c.server
            .store()
            .upsert(lease(foreign, &two_days_ago))
            .unwrap();
        assert_eq!(
            take(&c, NODE, Duration::from_secs(2)).await,
            Taken::Slot(SLOT.into()),
            "{foreign:?}"
        );
        assert_eq!(holder(&c, SLOT), Some(format!("{NODE}/{BOOT}")));
    }
    c.server
        .store()
        .upsert(lease("garbage-without-slash", &now.to_string()))
        .unwrap();
    assert_eq!(
        take(&c, NODE, Duration::from_millis(600)).await,
        Taken::Full(vec!["garbage-without-slash".into()])
    );
}

/// A holder identity of 120 kB (any program that may write the Lease can put one there) is
/// cut where it enters: the holders a full group names stay a few hundred bytes, and so do the
/// Event and the log line that quote them (issue 40 item 13).
#[tokio::test]
async fn a_huge_holder_identity_is_cut_where_it_enters() {
    let c = cluster().await;
    let huge = format!("node-b/{}", "b".repeat(120_000));
    c.server
        .store()
        .upsert(lease(&huge, &jiff::Timestamp::now().to_string()))
        .unwrap();
    let Taken::Full(holders) = take(&c, NODE, Duration::from_millis(600)).await else {
        panic!("the slot is held");
    };
    assert_eq!(holders.len(), 1);
    assert!(
        holders[0].starts_with("node-b/bbb") && holders[0].len() <= 300,
        "{} bytes",
        holders[0].len()
    );
}

/// A `renewTime` far in the future does not keep a slot taken two days ago (issue 29 item 4):
/// the holder is alive in the boot it took the slot in, marked, yet its hold began longer ago
/// than `hold_max`.
#[tokio::test]
async fn a_renew_time_in_the_future_does_not_keep_a_slot_taken_long_ago() {
    let two_days_ago = (jiff::Timestamp::now() - jiff::SignedDuration::from_hours(48)).to_string();
    let c = cluster().await;
    let store = c.server.store();
    store
        .modify("Node", None, OTHER_NODE, |n| {
            n["status"]["nodeInfo"] = json!({"bootID": "boot-1"});
            n["metadata"]["annotations"] = json!({"kube-shutdown-drain/marker": "{}"});
        })
        .unwrap();
    let mut forged = lease(&format!("{OTHER_NODE}/boot-1"), &two_days_ago);
    forged["spec"]["renewTime"] = json!("2100-01-01T00:00:00.000000Z");
    store.upsert(forged).unwrap();
    assert_eq!(
        take(&c, NODE, Duration::from_secs(2)).await,
        Taken::Slot(SLOT.into())
    );
    assert_eq!(holder(&c, SLOT), Some(format!("{NODE}/{BOOT}")));
}

/// A slot Lease whose times all lie a day ahead (`renewTime` alone, or with `acquireTime`) is
/// held from when this node first saw it and stale `hold_max` after that (issue 40 item 6):
/// such a time read as now on every look, so the hold never aged. Each case on a cluster of its
/// own, both at once; `hold_max` is 3 s.
#[tokio::test]
async fn a_hold_whose_times_all_lie_ahead_goes_stale_hold_max_after_it_was_first_seen() {
    let tomorrow = jiff::Timestamp::now() + jiff::SignedDuration::from_hours(24);
    let case = |acquired: bool| async move {
        let c = cluster().await;
        let store = c.server.store();
        store
            .modify("Node", None, OTHER_NODE, |n| {
                n["status"]["nodeInfo"] = json!({"bootID": "boot-1"});
                n["metadata"]["annotations"] = json!({"kube-shutdown-drain/marker": "{}"});
            })
            .unwrap();
        let mut ahead = lease(&format!("{OTHER_NODE}/boot-1"), &tomorrow.to_string());
        if !acquired {
            ahead["spec"].as_object_mut().unwrap().remove("acquireTime");
        }
        store.upsert(ahead).unwrap();
        let settings = settings_for(&c, NODE, "hold_max = \"3s\"\n");
        let engine = Engine::new(settings.clone()).unwrap();
        let clients = engine.clients().await.unwrap().clone();
        let n: k8s_openapi::api::core::v1::Node = serde_json::from_value(c.node(NODE)).unwrap();
        let slots = Slots {
            clients: &clients,
            settings: &settings,
        };
        let first_look = Instant::now();
        let take = |within: Duration| {
            slots.take(&n, BOOT, Instant::now() + within, Instant::now() + within)
        };
        // Seen now: held, however far ahead its times are.
        assert_eq!(
            take(Duration::from_millis(500)).await.expect("an answer"),
            Taken::Full(vec![format!("{OTHER_NODE}/boot-1")]),
            "acquireTime too: {acquired}"
        );
        // hold_max after the first look: stale, and taken.
        tokio::time::sleep_until(first_look + Duration::from_millis(3500)).await;
        assert_eq!(
            take(Duration::from_secs(2)).await.expect("an answer"),
            Taken::Slot(SLOT.into()),
            "acquireTime too: {acquired}"
        );
        assert_eq!(holder(&c, SLOT), Some(format!("{NODE}/{BOOT}")));
    };
    tokio::join!(case(false), case(true));
}

/// A give-back that read the slot held by its node, and whose write finds it taken again by the
/// same node meanwhile (the next boot's drain, a new shutdown), leaves the new take alone: its
/// guard fails, and the Lease read again was renewed since the list.
#[tokio::test]
async fn a_give_back_racing_a_new_take_of_the_same_node_keeps_the_new_holder() {
    let c = cluster().await;
    held_fresh_by_node_a(&c);
    let patch = Route::new("PATCH", &format!("{LEASES}/{SLOT}"));
    c.server.faults().gate(patch.clone());
    let engine = Engine::new(settings_for(&c, NODE, "")).unwrap();
    let give_back = engine.give_back_slots(Instant::now() + Duration::from_secs(10));
    let renewed = (jiff::Timestamp::now() + jiff::SignedDuration::from_secs(1)).to_string();
    let take_meanwhile = async {
        c.until_held(&patch, 1).await;
        c.server
            .store()
            .upsert(lease(&format!("{NODE}/boot-2"), &renewed))
            .unwrap();
        c.server.faults().ungate(&patch);
    };
    let (given, ()) = tokio::join!(give_back, take_meanwhile);
    given.expect("the give-back ends well");
    assert_eq!(holder(&c, SLOT), Some(format!("{NODE}/boot-2")));
    assert!(events(&c, "DrainSlotReleased").is_empty());
}

/// The carry of a slot into this boot (`[fleet] release_delay`) is a guarded write: an admin's
/// change to the Lease between the carry's read and its write stands (issue 40 item 15: the
/// carry written without its guard passed the suite). The change is made while the carry's
/// patch is held at the fake's gate: the slot given back (holder removed), or handed to
/// another node, its times kept either way.
#[tokio::test]
async fn an_admins_change_between_the_carrys_read_and_its_write_stands() {
    let renewed = jiff::Timestamp::now().to_string();
    let earlier_boot = format!("{NODE}/0b0e1d00-0000-4000-8000-000000000000");
    for (change, holder_after) in [
        ("given back", None),
        ("handed to node-b", Some("node-b/boot-9")),
    ] {
        let c = cluster().await;
        c.server
            .store()
            .upsert(lease(&earlier_boot, &renewed))
            .unwrap();
        let patch = Route::new("PATCH", &format!("{LEASES}/{SLOT}"));
        c.server.faults().gate(patch.clone());
        let engine = Engine::new(settings_for(&c, NODE, "")).unwrap();
        let carry = engine.carry_slots(Instant::now() + Duration::from_secs(10));
        let change_meanwhile = async {
            c.until_held(&patch, 1).await;
            c.server
                .store()
                .modify(
                    "Lease",
                    Some("kube-shutdown-drain"),
                    SLOT,
                    |l| match holder_after {
                        None => {
                            l["spec"].as_object_mut().unwrap().remove("holderIdentity");
                        }
                        Some(h) => l["spec"]["holderIdentity"] = json!(h),
                    },
                )
                .unwrap();
            c.server.faults().ungate(&patch);
        };
        let (carried, ()) = tokio::join!(carry, change_meanwhile);
        assert_eq!(
            carried.expect("the carry ends well"),
            Vec::<String>::new(),
            "{change}"
        );
        assert_eq!(holder(&c, SLOT).as_deref(), holder_after, "{change}");
    }
}

/// With the kubelet's credentials the slot Leases may not be listed (403): the node holds no
/// slot it could give back, and the restore completes (issue 29 item 1), with a marker and
/// without one.
#[tokio::test]
async fn with_the_kubelets_credentials_the_restore_completes_holding_no_slot() {
    let c = cluster().await;
    let kc = c.kubeconfig(&format!("system:node:{NODE}"));
    let text = format!(
        "node_name = \"{NODE}\"\nkubeconfig = \"{}\"\nstate_dir = \"{}\"\nrequest_timeout = \"2s\"\n[fleet]\nslots = 1\n",
        kc.display(),
        c.dir.path().join("state").display()
    );
    let mut s = Settings::from_str_at(Path::new("/test/config.toml"), &text).unwrap();
    s.boot_id_path = c.dir.path().join("boot_id");
    let s = Arc::new(s);
    prepare_and_drain(s.clone(), Duration::from_secs(2)).await;
    assert!(unschedulable(&c.node(NODE)));
    let engine = Engine::new(s).unwrap();
    let out = engine.restore().await.expect("the restore completes");
    assert!(out.uncordoned && !unschedulable(&c.node(NODE)));
    engine
        .restore()
        .await
        .expect("with no marker too (the daemon's boot restore)");
    let lists = c
        .server
        .recorder()
        .requests()
        .into_iter()
        .filter(|r| r.method == "GET" && r.path == LEASES && !r.query.contains("watch"))
        .map(|r| r.status)
        .collect::<Vec<_>>();
    assert_eq!(lists, [403, 403], "one refused list per give-back");
}

#[tokio::test]
async fn a_slot_this_node_already_holds_is_kept_at_once_not_waited_for_nor_written() {
    let c = cluster().await;
    held_fresh_by_node_a(&c);
    c.server.recorder().clear();
    assert_eq!(
        take(&c, NODE, Duration::from_secs(2)).await,
        Taken::Kept(SLOT.into()),
        "node-a's own fresh hold is no other holder's"
    );
    let writes = c
        .server
        .recorder()
        .requests()
        .into_iter()
        .filter(|r| r.method != "GET" && r.path.contains("/leases"))
        .count();
    assert_eq!(writes, 0, "a slot held in this boot is not written again");
    assert_eq!(holder(&c, SLOT), Some(format!("{NODE}/{BOOT}")));
}

/// A waiting Lease of `node` (issue 31), in line since `since`, renewed at `renewed`.
/// `node`'s waiting Lease as this version writes it: its wait's start in a label too.
fn waiting_lease(node: &str, since: &str, renewed: &str) -> Value {
    let mut lease = older_waiting_lease(node, since, renewed);
    let seconds = since
        .parse::<jiff::Timestamp>()
        .expect("a timestamp")
        .as_millisecond();
    lease["metadata"]["labels"][queue::SINCE_LABEL] = json!(seconds.to_string());
    lease
}

/// `node`'s waiting Lease as an earlier version wrote it: the group's label only.
fn older_waiting_lease(node: &str, since: &str, renewed: &str) -> Value {
    json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
           "metadata": {"name": queue::wait_name(node), "namespace": "kube-shutdown-drain",
                        "labels": {queue::WAITING_LABEL: "all"}},
           "spec": {"holderIdentity": format!("{node}/{BOOT}"), "acquireTime": since,
                    "renewTime": renewed, "leaseDurationSeconds": 1800}})
}

fn ago(seconds: i64) -> String {
    (jiff::Timestamp::now() - jiff::SignedDuration::from_secs(seconds)).to_string()
}

/// The writes `node`'s identity sent to the one slot Lease (creates and patches).
fn slot_writes_of(c: &Cluster, node: &str) -> usize {
    c.server
        .recorder()
        .requests()
        .iter()
        .filter(|r| r.user == identity_of(node))
        .filter(|r| {
            (r.method == "PATCH" && r.path == format!("{LEASES}/{SLOT}"))
                || (r.method == "POST" && r.path == LEASES && r.body.contains(SLOT))
        })
        .count()
}

/// node-a waits ahead of node-b; the slot is given back while node-a's take is held at the
/// fake's gate (the slot stays open meanwhile): node-b, second in line, writes nothing to the
/// slot, and node-a gets it.
#[tokio::test]
async fn with_nodes_waiting_in_line_only_the_first_tries_a_slot_given_back() {
    let c = slot_held_by_node_c().await;
    let store = c.server.store();
    store
        .upsert(waiting_lease(NODE, &ago(60), &ago(1)))
        .unwrap();
    store
        .upsert(waiting_lease(OTHER_NODE, &ago(30), &ago(1)))
        .unwrap();
    let route = Route::new("PATCH", &format!("{LEASES}/{SLOT}"));
    // node-b's wait ends before a slot left open could pass node-a over.
    let second = take(
        &c,
        OTHER_NODE,
        queue::PASS_OVER - Duration::from_millis(200),
    );
    let first = take(&c, NODE, Duration::from_secs(10));
    let give_back = async {
        until("both nodes' first look", || {
            [NODE, OTHER_NODE].iter().all(|n| {
                c.server.recorder().requests().iter().any(|r| {
                    r.user == identity_of(n)
                        && r.method == "GET"
                        && r.path == format!("{LEASES}/{SLOT}")
                })
            })
        })
        .await;
        c.server.faults().gate(route.clone());
        store
            .upsert(lease("", &jiff::Timestamp::now().to_string()))
            .unwrap();
        c.until_held(&route, 1).await;
        // node-b has seen the slot given back too; give it time to (wrongly) try.
        tokio::time::sleep(Duration::from_millis(800)).await;
        c.server.faults().ungate(&route);
    };
    let (second, first, ()) = tokio::join!(second, first, give_back);
    assert_eq!(first, Taken::Slot(SLOT.into()));
    assert!(matches!(second, Taken::Full(_)), "{second:?}");
    assert_eq!(slot_writes_of(&c, OTHER_NODE), 0, "node-b waited its turn");
    assert_eq!(holder(&c, SLOT), Some(format!("{NODE}/{BOOT}")));
    // node-a's wait ended: its waiting Lease is given back.
    let waited = store
        .get(
            "Lease",
            Some("kube-shutdown-drain"),
            &queue::wait_name(NODE),
        )
        .unwrap();
    assert!(waited["spec"]["holderIdentity"].is_null(), "{waited}");
}

/// A waiter ahead that does not take an open slot is passed over after PASS_OVER; one whose
/// waiting Lease was not renewed for STALE is not in line at all.
#[tokio::test]
async fn a_dead_waiter_ahead_is_passed_over_and_a_stale_one_is_not_in_line() {
    let c = cluster().await;
    let store = c.server.store();
    let free = || {
        store
            .upsert(lease("", &jiff::Timestamp::now().to_string()))
            .unwrap()
    };
    free();
    // node-a says it waits, renewed a second ago, but no daemon of it runs.
    store
        .upsert(waiting_lease(NODE, &ago(60), &ago(1)))
        .unwrap();
    let started = Instant::now();
    assert_eq!(
        take(&c, OTHER_NODE, Duration::from_secs(8)).await,
        Taken::Slot(SLOT.into())
    );
    assert!(
        started.elapsed() >= queue::PASS_OVER,
        "node-b took the slot only once node-a had left it open for PASS_OVER: {:?}",
        started.elapsed()
    );
    // node-a's waiting Lease, last renewed longer than STALE ago: node-b takes the slot before
    // PASS_OVER could pass anyone over.
    free();
    let stale = queue::STALE.as_secs() as i64 + 60;
    store
        .upsert(waiting_lease(NODE, &ago(stale + 60), &ago(stale)))
        .unwrap();
    assert_eq!(
        take(
            &c,
            OTHER_NODE,
            queue::PASS_OVER - Duration::from_millis(200)
        )
        .await,
        Taken::Slot(SLOT.into())
    );
}

/// Issue 42: the drain records the budgets that covered the pods it evicted (for the settling
/// after the restore) from a list of every budget taken beside it. A list that never answers
/// costs the drain no more than a moment past its last pod: its record is then the evicted
/// pods' namespaces, and the drain (and a shutdown's lock) does not wait out its deadline.
#[tokio::test]
async fn a_budget_list_that_hangs_does_not_hold_the_drain_past_its_last_pod() {
    let c = Cluster::start(vec![
        slow_pod(NS, "web-a", NODE, 0.2),
        pdb(NS, "web", "web-a", 0),
    ])
    .await;
    let budgets = Route::new("GET", "/apis/policy/v1/poddisruptionbudgets");
    c.server.faults().hang(budgets.clone());
    let started = Instant::now();
    let report = prepare_and_drain(settings_for(&c, NODE, ""), Duration::from_secs(120)).await;
    let took = started.elapsed();
    assert!(report.complete, "{}", report.to_text());
    assert_eq!(
        report.settle,
        Some(kube_shutdown_drain::report::Covering::Namespaces(vec![
            NS.to_string()
        ]))
    );
    // Not a speed figure: a drain that waited for the list would end near its deadline (108 s
    // of work time), one that did not ends seconds after its last pod.
    assert!(
        took < Duration::from_secs(60),
        "the drain waited {took:?} for a budget list that never answered"
    );
    c.server.faults().unhang(&budgets);
    // Answered, the record names the budget.
    let c2 = Cluster::start(vec![
        slow_pod(NS, "web-a", NODE, 0.2),
        pdb(NS, "web", "web-a", 0),
    ])
    .await;
    let report = prepare_and_drain(settings_for(&c2, NODE, ""), Duration::from_secs(10)).await;
    assert_eq!(
        report.settle,
        Some(kube_shutdown_drain::report::Covering::Budgets(vec![
            format!("{NS}/web")
        ]))
    );
}

/// The watches `node`'s identity opened whose query holds `needle`.
fn watches_of(c: &Cluster, node: &str, needle: &str) -> usize {
    c.server
        .recorder()
        .requests()
        .iter()
        .filter(|r| r.user == identity_of(node) && r.query.contains("watch=true"))
        .filter(|r| r.query.contains(needle))
        .count()
}

/// Issue 43: a waiting node does not watch the line, and one behind the front does not watch
/// the slots: a renewal of a waiting Lease reaches only the live node just behind it, a slot's
/// write no node far back. When the node ahead leaves the line, the one behind lists it again,
/// watches the next one ahead and, come to the front, the slots: it passes a dead waiter over
/// and takes a slot given back.
#[tokio::test]
async fn a_waiter_watches_only_the_node_ahead_and_moves_up_when_it_leaves() {
    let c = cluster().await;
    let store = c.server.store();
    for n in ["node-c", "node-d", "node-e"] {
        store.upsert(node(n)).unwrap();
    }
    let now = || jiff::Timestamp::now().to_string();
    store.upsert(lease("node-c/boot-1", &now())).unwrap();
    // Two nodes wait ahead with no daemon running: the front of a group of one slot.
    store
        .upsert(waiting_lease("node-d", &ago(90), &ago(1)))
        .unwrap();
    store
        .upsert(waiting_lease("node-e", &ago(80), &ago(1)))
        .unwrap();
    let first = take(&c, NODE, Duration::from_secs(40));
    let second = async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        take(&c, OTHER_NODE, Duration::from_secs(25)).await
    };
    let name = |n: &str| format!("metadata.name%3D{}", queue::wait_name(n));
    let steer = async {
        until("node-a watching node-e and node-b watching node-a", || {
            watches_of(&c, NODE, &name("node-e")) > 0 && watches_of(&c, OTHER_NODE, &name(NODE)) > 0
        })
        .await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        for n in [NODE, OTHER_NODE] {
            assert_eq!(watches_of(&c, n, "waiting-in"), 0, "{n} watches the line");
        }
        // A renewal of node-d's Lease reaches no one (node-e runs no daemon); node-e's, node-a
        // alone; a write of the slot, neither node (both behind the front).
        c.server.recorder().clear();
        store
            .upsert(waiting_lease("node-d", &ago(90), &now()))
            .unwrap();
        store.upsert(lease("node-c/boot-1", &now())).unwrap();
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(c.server.recorder().watch_counts().live, 0);
        store
            .upsert(waiting_lease("node-e", &ago(80), &now()))
            .unwrap();
        until("node-a told of node-e's renewal", || {
            c.server.recorder().watch_counts().live == 1
        })
        .await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_eq!(c.server.recorder().watch_counts().live, 1);
        // node-e leaves the line: node-a lists it again, watches node-d and the slots.
        store
            .remove(
                "Lease",
                Some("kube-shutdown-drain"),
                &queue::wait_name("node-e"),
            )
            .unwrap();
        until("node-a watching node-d and the slots", || {
            watches_of(&c, NODE, &name("node-d")) > 0 && watches_of(&c, NODE, "slot-group") > 0
        })
        .await;
        assert_eq!(watches_of(&c, OTHER_NODE, "slot-group"), 0);
        // The slot given back: node-d does not take it, node-a passes it over and does.
        store.upsert(lease("", &now())).unwrap();
    };
    let (first, second, ()) = tokio::join!(first, second, steer);
    assert_eq!(first, Taken::Slot(SLOT.into()));
    assert!(matches!(second, Taken::Full(_)), "{second:?}");
    assert_eq!(slot_writes_of(&c, OTHER_NODE), 0, "node-b waited its turn");
}

/// A list of the line that fails leaves the node waiting as if there were no line, and is tried
/// again 30 s later: the node then watches the node ahead of it as before.
#[tokio::test]
async fn a_failed_list_of_the_line_is_tried_again_later() {
    let c = cluster().await;
    let store = c.server.store();
    for n in ["node-c", "node-d"] {
        store.upsert(node(n)).unwrap();
    }
    store
        .upsert(lease("node-c/boot-1", &jiff::Timestamp::now().to_string()))
        .unwrap();
    store
        .upsert(waiting_lease("node-d", &ago(90), &ago(1)))
        .unwrap();
    // Each read of the line starts with the waits an earlier version wrote (`!waiting-since`).
    let lists = Route::new("GET", "waiting-since");
    c.server.faults().fail_next(lists, 1, 403);
    take_until_watching(&c, NODE, "node-d", "node-a never watched node-d").await;
    let listed: Vec<f64> = c
        .server
        .recorder()
        .matching("GET", "%21kube-shutdown-drain%2Fwaiting-since")
        .iter()
        .filter(|r| r.user == identity_of(NODE) && !r.query.contains("watch=true"))
        .map(|r| r.elapsed)
        .collect();
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert!(listed[1] - listed[0] >= 29.0, "{listed:?}");
}

/// `node` waits for the one slot (for 60 s) until it watches the waiting Lease of `ahead`, within
/// 50 s; the wait may not end first, and `never` is said if it does not watch it.
async fn take_until_watching(c: &Cluster, node: &str, ahead: &str, never: &str) {
    let waiting = take(c, node, Duration::from_secs(60));
    let watched = async {
        let name = format!("metadata.name%3D{}", queue::wait_name(ahead));
        let seen = eventually(Duration::from_secs(50), || watches_of(c, node, &name) > 0).await;
        assert!(seen, "{never}");
    };
    tokio::select! {
        taken = waiting => panic!("the wait ended first: {taken:?}"),
        () = watched => {}
    }
}

/// The cluster with the one slot held by node-c (no daemon runs there).
async fn slot_held_by_node_c() -> Cluster {
    let c = cluster().await;
    let store = c.server.store();
    store.upsert(node("node-c")).unwrap();
    store
        .upsert(lease("node-c/boot-1", &jiff::Timestamp::now().to_string()))
        .unwrap();
    c
}

/// The reads of the line `node` sent (lists of waiting Leases, not watches).
fn line_reads(c: &Cluster, node: &str) -> Vec<fake_apiserver::RecordedRequest> {
    c.server
        .recorder()
        .matching("GET", "waiting-in")
        .into_iter()
        .filter(|r| r.user == identity_of(node) && !r.query.contains("watch=true"))
        .collect()
}

/// Issue 43: a node that joins the back of a long line reads only the part of it near its own
/// place, never the whole line (every node of a fleet-wide wave doing so at its join would cost
/// the API server the square of the fleet): the waits that started up to its own, a page of
/// three (twice the group's one slot, and one), then the nearest span before its own wait that
/// holds one. It watches the node just ahead, and not the slots: it is not in front.
#[tokio::test]
async fn a_node_joining_far_back_reads_only_the_line_near_its_place() {
    let c = slot_held_by_node_c().await;
    let store = c.server.store();
    // 80 nodes wait (no daemons run), their waits started 700 s apart, the last 1,000 s ago.
    for i in 0..80 {
        let n = format!("far-{i:02}");
        store
            .upsert(waiting_lease(&n, &ago(1000 + 700 * i), &ago(1)))
            .unwrap();
    }
    let waiting = take(&c, NODE, Duration::from_secs(40));
    let name = |n: &str| format!("metadata.name%3D{}", queue::wait_name(n));
    let slot_reads = || {
        c.server
            .recorder()
            .matching("GET", &format!("{LEASES}/{SLOT}"))
            .into_iter()
            .filter(|r| r.user == identity_of(NODE))
            .count()
    };
    let watched = async {
        until("node-a watching far-00", || {
            watches_of(&c, NODE, &name("far-00")) > 0
        })
        .await;
        // Not in front: once it has read its place it looks at the slots no more (a node second
        // in line would look again within 10 s).
        tokio::time::sleep(Duration::from_millis(500)).await;
        let before = slot_reads();
        tokio::time::sleep(Duration::from_secs(11)).await;
        assert_eq!(slot_reads(), before, "node-a far back looked at the slots");
    };
    tokio::select! {
        taken = waiting => panic!("the wait ended first: {taken:?}"),
        () = watched => {}
    }
    let reads = line_reads(&c, NODE);
    let queries: Vec<&str> = reads.iter().map(|r| r.query.as_str()).collect();
    // The older version's waits; one page up to its own start; spans of 0.1, 0.4, 1.6, 6.4,
    // 25.6, 102.4 and 409.6 s (none in them), 1,638.4 s (far-00 alone: node-a counts itself
    // second there, yet not in
    // front, for the nodes it did not read).
    assert_eq!(reads.len(), 10, "{queries:#?}");
    assert!(queries[1].contains("limit=3"), "{queries:#?}");
    for q in &queries[2..] {
        assert!(
            q.contains("waiting-since%3E"),
            "a read of the whole line: {q}"
        );
    }
    // A quarter of the whole line's bytes, at most (its 81 Leases as stored; each read holds
    // node-a's own Lease too).
    let whole: usize = store
        .list("Lease", Some("kube-shutdown-drain"))
        .iter()
        .filter(|l| l.pointer("/metadata/name").is_some_and(|n| n != SLOT))
        .map(|l| serde_json::to_vec(l).unwrap().len())
        .sum();
    assert!(
        reads.iter().all(|r| r.response_len.is_some()),
        "an answer's length unknown"
    );
    let read: u64 = reads.iter().filter_map(|r| r.response_len).sum();
    assert!(
        read * 4 < whole as u64,
        "{read} bytes read of a line of {whole}"
    );
    for n in ["far-01", "far-79"] {
        assert_eq!(watches_of(&c, NODE, &name(n)), 0, "node-a watches {n}");
    }
}

/// A line with a wait written by an earlier version (no `waiting-since` label) and one written
/// by this one: a node joining behind both reads both, counts itself third, and watches the
/// one just ahead (the later).
#[tokio::test]
async fn a_wait_written_by_an_earlier_version_counts_in_the_line() {
    let c = slot_held_by_node_c().await;
    let store = c.server.store();
    store
        .upsert(waiting_lease("node-d", &ago(90), &ago(1)))
        .unwrap();
    store
        .upsert(older_waiting_lease("node-e", &ago(80), &ago(1)))
        .unwrap();
    take_until_watching(&c, NODE, "node-e", "node-a never watched node-e").await;
    let node_d = format!("metadata.name%3D{}", queue::wait_name("node-d"));
    assert_eq!(watches_of(&c, NODE, &node_d), 0);
}

/// A waiting Lease that cannot be written (here one 403) leaves the node out of line for 30 s,
/// not for the rest of its wait: it writes it again then, joins, and watches the node ahead.
#[tokio::test]
async fn a_waiting_lease_that_could_not_be_written_is_written_again_later() {
    let c = slot_held_by_node_c().await;
    let store = c.server.store();
    store
        .upsert(waiting_lease("node-d", &ago(90), &ago(1)))
        .unwrap();
    // The slot is held: the node's only create of a Lease is its waiting Lease.
    c.server
        .faults()
        .fail_next(Route::new("POST", "/leases"), 1, 403);
    take_until_watching(
        &c,
        NODE,
        "node-d",
        "node-a never joined the line behind node-d",
    )
    .await;
    let posts: Vec<(f64, u16)> = c
        .server
        .recorder()
        .matching("POST", "/leases")
        .iter()
        .filter(|r| r.user == identity_of(NODE))
        .map(|r| (r.elapsed, r.status))
        .collect();
    assert_eq!(posts.len(), 2, "{posts:?}");
    assert_eq!((posts[0].1, posts[1].1), (403, 201), "{posts:?}");
    assert!(posts[1].0 - posts[0].0 >= 29.0, "{posts:?}");
    let held = store
        .get(
            "Lease",
            Some("kube-shutdown-drain"),
            &queue::wait_name(NODE),
        )
        .expect("node-a's waiting Lease");
    assert_eq!(
        held.pointer("/spec/holderIdentity").and_then(Value::as_str),
        Some(format!("{NODE}/{BOOT}").as_str())
    );
}
