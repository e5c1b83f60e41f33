//! Table tests of the cluster-health holds: `max_unready` over a group of Nodes (NotReady,
//! cordoned by someone else or by our drain, another group), kured's alert rules (`filter`,
//! `match_only`, `firing_only`), and every failed read an `unknown` naming what it could not read.

use std::path::Path;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use serde_json::{Value, json};

use super::alerts::{Alert, AlertsError};
use super::holds::{Alerts, Context, Group, Holds, Key, Pause, Pods, Seen, judge};
use super::window::Windows;
use crate::api::ApiError;
use crate::api::error::{Cause, Kind};
use crate::config::{FleetSettings, Settings, Source};

const ME: &str = "fleet-a";
const NOW: &str = "2026-12-04T12:00:00Z";

/// `[fleet]` and what follows it in a config file.
fn fleet(toml: &str) -> FleetSettings {
    let text = format!("node_name = \"{ME}\"\n[fleet]\n{toml}");
    let src = Source {
        path: Path::new("/etc/x.toml"),
        text: &text,
    };
    crate::config::from_toml(&src, Ok(ME))
        .map(|s: Settings| s.fleet)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// A Node: Ready or not, cordoned or not, with `labels` and `annotations`.
fn node(name: &str, ready: bool, unschedulable: bool, labels: Value, annotations: Value) -> Node {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
        "spec": {"unschedulable": unschedulable},
        "status": {"conditions": [{"type": "Ready", "status": if ready { "True" } else { "Unknown" }}]}
    }))
    .unwrap()
}

fn ready(name: &str) -> Node {
    node(name, true, false, json!({}), json!({}))
}

fn not_ready(name: &str) -> Node {
    node(name, false, false, json!({}), json!({}))
}

fn cordoned(name: &str) -> Node {
    node(name, true, true, json!({}), json!({}))
}

/// Cordoned by our own drain: our marker says so.
fn drained_by_us(name: &str) -> Node {
    let marker = json!({"was_unschedulable": false, "boot_id": "0b0e1d00-0000-4000-8000-000000000001",
        "time": "2026-12-04T11:00:00Z", "why": "reboot", "cordoned": true, "version": 1});
    node(
        name,
        true,
        true,
        json!({}),
        json!({"kube-shutdown-drain/marker": marker.to_string()}),
    )
}

fn zoned(n: Node, zone: &str) -> Node {
    let mut n = n;
    n.metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("zone".into(), zone.into());
    n
}

fn refused(object: &str) -> ApiError {
    ApiError::new(
        object,
        "http://127.0.0.1:1",
        Kind::Transport(Cause::ConnectionRefused),
    )
}

/// What was read: this node Ready and uncordoned, nothing else holding it.
fn seen(group: Group, alerts: Alerts) -> Seen {
    Seen {
        node: Ok(ready(ME)),
        pause: Pause::Absent,
        pods: Pods::NotAsked,
        group,
        alerts,
    }
}

fn holds(fleet: &FleetSettings, seen: &Seen) -> Holds {
    holds_judged(fleet, seen, true)
}

/// [`holds`], with the gates counted (`gates`: before the drain) or not (after it).
fn holds_judged(fleet: &FleetSettings, seen: &Seen, gates: bool) -> Holds {
    let windows = Windows::any_time();
    let cx = Context {
        node: ME,
        lease_namespace: "kube-shutdown-drain",
        blocking_pod_selector: None,
        windows: &windows,
        forecast: None,
        estimate: None,
        fleet,
        gates,
    };
    judge(&cx, seen, NOW.parse::<Timestamp>().unwrap())
}

/// What holds this node, read as the first of `nodes` (its own Node) and the group listed.
fn group_holds(fleet: &FleetSettings, nodes: Vec<Node>) -> Holds {
    let mut s = seen(Group::NotAsked, Alerts::NotAsked);
    if let Some(own) = nodes.first() {
        s.node = Ok(own.clone());
    }
    s.group = Group::Listed(nodes);
    holds(fleet, &s)
}

/// A fleet of three, `max_unready = 1`: this node goes only while both others are in; a
/// NotReady one, or one cordoned by someone else, holds it; one our drain cordoned does not (the
/// drain slots count it).
#[test]
fn with_max_unready_1_one_out_node_of_three_holds_the_others() {
    let f = fleet("max_unready = 1");
    assert!(group_holds(&f, vec![ready(ME), ready("fleet-b"), ready("fleet-c")]).may_go());
    let h = group_holds(&f, vec![ready(ME), ready("fleet-b"), not_ready("fleet-c")]);
    assert_eq!(h.keys(), [Key::UnreadyNodes], "{h}");
    assert_eq!(
        h.reasons[0].message,
        "1 other node of node fleet-a's group all is out (fleet-c NotReady): max_unready 1 lets \
         at most 1 node of its 3 nodes out at once, this node's reboot included, so node fleet-a \
         waits"
    );
    let h = group_holds(&f, vec![ready(ME), cordoned("fleet-b"), ready("fleet-c")]);
    assert_eq!(h.keys(), [Key::UnreadyNodes], "{h}");
    assert!(
        h.to_string().contains("(fleet-b cordoned by someone else)"),
        "{h}"
    );
    let h = group_holds(
        &f,
        vec![ready(ME), drained_by_us("fleet-b"), ready("fleet-c")],
    );
    assert!(h.may_go(), "a node our drain cordoned holds a slot: {h}");
    // This node itself out does not count against it.
    assert!(group_holds(&f, vec![cordoned(ME), ready("fleet-b")]).may_go());
}

#[test]
fn a_larger_max_unready_or_percentage_lets_more_be_out() {
    let three_out = || {
        let mut nodes = vec![ready(ME)];
        nodes.extend((0..3).map(|i| not_ready(&format!("down-{i}"))));
        nodes.extend((0..6).map(|i| ready(&format!("up-{i}"))));
        nodes
    };
    // 10 nodes, 3 others out: 4 may be out with this one, 3 may not.
    assert!(group_holds(&fleet("max_unready = 4"), three_out()).may_go());
    assert!(!group_holds(&fleet("max_unready = 3"), three_out()).may_go());
    assert!(group_holds(&fleet("max_unready = \"40%\""), three_out()).may_go());
    let h = group_holds(&fleet("max_unready = \"39%\""), three_out());
    assert!(
        h.to_string()
            .contains("max_unready \"39%\" lets at most 3 nodes of its 10 nodes"),
        "{h}"
    );
}

/// With `group_label`, only the nodes of this node's group count.
#[test]
fn only_the_nodes_of_the_slot_group_count() {
    let f = fleet("group_label = \"zone\"\nmax_unready = 1");
    let nodes = vec![
        zoned(ready(ME), "a"),
        zoned(not_ready("fleet-b"), "b"),
        not_ready("fleet-c"),
        zoned(ready("fleet-d"), "a"),
    ];
    let h = group_holds(&f, nodes.clone());
    assert!(h.may_go(), "{h}");
    let mut nodes = nodes;
    nodes.push(zoned(cordoned("fleet-e"), "a"));
    let h = group_holds(&f, nodes);
    assert!(
        h.to_string()
            .contains("group a is out (fleet-e cordoned by someone else)"),
        "{h}"
    );
}

#[test]
fn a_group_or_node_that_cannot_be_read_holds_as_unknown() {
    let f = fleet("max_unready = 1");
    let h = group_holds(&f, vec![]);
    assert!(
        h.may_go(),
        "an empty group (the list without this node) lets it go: {h}"
    );
    let h = holds(
        &f,
        &seen(
            Group::Unreadable(refused("nodes of group all")),
            Alerts::NotAsked,
        ),
    );
    assert_eq!(h.keys(), [Key::Unknown], "{h}");
    assert!(
        h.to_string().starts_with(
            "cannot tell how many nodes of node fleet-a's group are unready (max_unready 1): \
             nodes of group all: "
        ),
        "{h}"
    );
    let h = holds(&f, &seen(Group::NotAsked, Alerts::NotAsked));
    assert_eq!(h.keys(), [Key::Unknown], "never a may-go: {h}");
    let mut s = seen(Group::NotAsked, Alerts::NotAsked);
    s.node = Err(refused("node fleet-a"));
    let h = holds(&f, &s);
    assert_eq!(h.keys(), [Key::Unknown], "{h}");
    assert!(
        h.to_string()
            .contains("its group is not known: node fleet-a"),
        "{h}"
    );
    // Without max_unready nothing is asked and nothing holds.
    assert!(holds(&fleet(""), &seen(Group::NotAsked, Alerts::NotAsked)).may_go());
}

fn alert(name: &str, firing: bool) -> Alert {
    Alert {
        name: name.into(),
        firing,
    }
}

const PROM: &str = "[fleet.alerts]\nprometheus_url = \"http://127.0.0.1:9090\"\n";

fn alert_holds(extra: &str, list: Vec<Alert>) -> Holds {
    holds(
        &fleet(&format!("{PROM}{extra}")),
        &seen(Group::NotAsked, Alerts::Listed(list)),
    )
}

/// kured's rules: every active alert counts; `firing_only` leaves pending ones; `filter` leaves
/// the alerts it matches, or with `match_only` keeps only those.
#[test]
fn an_alert_counts_by_kureds_rules() {
    let list = || {
        vec![
            alert("Watchdog", true),
            alert("NodeDown", true),
            alert("DiskFilling", false),
        ]
    };
    let cases: &[(&str, &[&str])] = &[
        ("", &["DiskFilling (pending)", "NodeDown", "Watchdog"]),
        ("firing_only = true", &["NodeDown", "Watchdog"]),
        (
            "filter = \"^Watchdog$\"",
            &["DiskFilling (pending)", "NodeDown"],
        ),
        (
            "filter = \"Down|Disk\"\nmatch_only = true",
            &["DiskFilling (pending)", "NodeDown"],
        ),
        (
            "filter = \"Down|Disk\"\nmatch_only = true\nfiring_only = true",
            &["NodeDown"],
        ),
        (
            "filter = \"dog\"\nmatch_only = false\nfiring_only = true",
            &["NodeDown"],
        ),
        ("filter = \".\"", &[]),
    ];
    for (extra, want) in cases {
        let h = alert_holds(extra, list());
        if want.is_empty() {
            assert!(h.may_go(), "{extra}: {h}");
            continue;
        }
        assert_eq!(h.keys(), [Key::AlertsFiring], "{extra}: {h}");
        let text = h.to_string();
        assert!(
            text.contains(&format!(
                "at Prometheus http://127.0.0.1:9090: {};",
                want.join(", ")
            )),
            "{extra}: {text}"
        );
    }
    let h = alert_holds("", vec![alert("NodeDown", true), alert("NodeDown", true)]);
    assert_eq!(
        h.reasons[0].message,
        "1 alert is active at Prometheus http://127.0.0.1:9090: NodeDown; node fleet-a waits \
         until none does"
    );
    assert!(alert_holds("", vec![]).may_go());
}

#[test]
fn alerts_that_cannot_be_read_hold_as_unknown_naming_the_url() {
    let f = fleet(PROM);
    let e = AlertsError::Request {
        url: "http://127.0.0.1:9090/api/v1/alerts".into(),
        why: "connection refused".into(),
    };
    let h = holds(&f, &seen(Group::NotAsked, Alerts::Unreadable(e)));
    assert_eq!(h.keys(), [Key::Unknown], "{h}");
    assert_eq!(
        h.to_string(),
        "cannot tell whether an alert of Prometheus fires, so node fleet-a waits: \
         http://127.0.0.1:9090/api/v1/alerts: connection refused"
    );
    let h = holds(&f, &seen(Group::NotAsked, Alerts::NotAsked));
    assert_eq!(h.keys(), [Key::Unknown], "never a may-go: {h}");
}

/// Both gates and a failed read together, in the order of `Key::ALL`.
/// After the drain the gates hold nothing: an unready node or an alert (perhaps raised by the
/// drain itself) does not call off the reboot the node drained for; an admin's hold still does.
#[test]
fn after_the_drain_the_gates_hold_nothing_but_the_other_reasons_still_do() {
    let f = fleet(&format!("max_unready = 1\n{PROM}"));
    let mut s = seen(
        Group::Listed(vec![ready(ME), not_ready("fleet-b")]),
        Alerts::Listed(vec![alert("NodeDown", true)]),
    );
    assert!(holds_judged(&f, &s, false).may_go());
    // Not read after the drain: nothing asked is no `unknown` either.
    let unread = seen(Group::NotAsked, Alerts::NotAsked);
    assert!(holds_judged(&f, &unread, false).may_go());
    s.pause = Pause::Present(Box::default());
    assert_eq!(holds_judged(&f, &s, false).keys(), [Key::Paused]);
}

#[test]
fn both_gates_stand_after_the_other_reasons_in_their_order() {
    let f = fleet(&format!("max_unready = 1\n{PROM}"));
    let s = seen(
        Group::Listed(vec![ready(ME), not_ready("fleet-b")]),
        Alerts::Listed(vec![alert("NodeDown", true)]),
    );
    assert_eq!(holds(&f, &s).keys(), [Key::UnreadyNodes, Key::AlertsFiring]);
}

#[test]
fn many_alerts_are_named_up_to_ten_and_counted() {
    let list = (0..12).map(|i| alert(&format!("A{i:02}"), true)).collect();
    let text = alert_holds("", list).to_string();
    assert!(
        text.contains("12 alerts are active at Prometheus http://127.0.0.1:9090: A00, A01,"),
        "{text}"
    );
    assert!(text.contains("A09 and 2 more;"), "{text}");
}
