//! The fleet view over Nodes, Leases and Events built by hand: a fleet of a dozen nodes, one
//! in each state, the precedence between the rules, the slots, the pause, the progress, the
//! JSON shape against `docs/fleet-view.md`, and the text.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Node};
use serde_json::{Value, json};

use super::*;

const OLD: &str = "0b0e0000-0000-4000-8000-000000000001";
const NEW: &str = "0b0e0000-0000-4000-8000-000000000002";

fn t(s: &str) -> Timestamp {
    s.parse().unwrap()
}

/// 2026-12-06 at `hm` (`"11:40"`), UTC.
fn at(hm: &str) -> String {
    format!("2026-12-06T{hm}:00Z")
}

fn now() -> Timestamp {
    t(&at("12:00"))
}

/// A Node in boot `boot`, Ready `ready` since `since`, with `extra` merged into its object.
fn node(name: &str, boot: &str, ready: &str, since: &str, extra: Value) -> Node {
    let mut v = json!({
        "metadata": {"name": name},
        "status": {
            "nodeInfo": {"bootID": boot},
            "conditions": [{"type": "Ready", "status": ready, "lastTransitionTime": at(since)}]
        }
    });
    merge(&mut v, extra);
    serde_json::from_value(v).unwrap()
}

fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (Value::Array(a), Value::Array(b)) => a.extend(b),
        (into, from) => *into = from,
    }
}

/// The marker annotation of a drain in `boot` at `hm`.
fn marker(boot: &str, hm: &str) -> Value {
    let m = json!({"was_unschedulable": false, "boot_id": boot, "time": at(hm),
        "why": "reboot: /var/run/reboot-required", "cordoned": true, "version": 1});
    json!({"metadata": {"annotations": {"kube-shutdown-drain/marker": m.to_string()}}})
}

fn condition(kind: &str, status: &str, reason: &str, message: &str, hm: &str) -> Value {
    json!({"status": {"conditions": [{"type": kind, "status": status, "reason": reason,
        "message": message, "lastTransitionTime": at(hm), "lastHeartbeatTime": at(hm)}]}})
}

/// The hold annotation `value`, set by field manager `manager` at `hm`.
fn hold(value: &str, manager: &str, hm: &str) -> Value {
    json!({"metadata": {
        "annotations": {"kube-shutdown-drain/hold": value},
        "managedFields": [{"manager": manager, "operation": "Update", "apiVersion": "v1",
            "time": at(hm), "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:annotations": {"f:kube-shutdown-drain/hold": {}}}}}]
    }})
}

/// Slot `name` of `group` held by `holder` since `hm`.
fn slot(name: &str, group: &str, holder: Option<&str>, hm: &str) -> Lease {
    let spec = match holder {
        Some(h) => json!({"holderIdentity": h, "acquireTime": format!("{}.000000Z", &at(hm)[..19]),
            "renewTime": format!("{}.000000Z", &at(hm)[..19]), "leaseDurationSeconds": 3600}),
        None => json!({"leaseDurationSeconds": 3600}),
    };
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "kube-shutdown-drain",
            "labels": {"kube-shutdown-drain/slot-group": group}},
        "spec": spec
    }))
    .unwrap()
}

/// `node`'s waiting Lease in group `all`, waiting since `hm`, renewed at 11:55.
fn waiting(node: &str, hm: &str) -> Lease {
    let time = format!("{}.000000Z", &at(hm)[..19]);
    serde_json::from_value(json!({
        "metadata": {"name": format!("kube-shutdown-drain-waiting.{node}"),
            "namespace": "kube-shutdown-drain", "labels": {"kube-shutdown-drain/waiting-in": "all"}},
        "spec": {"holderIdentity": format!("{node}/{NEW}"), "acquireTime": time,
            "renewTime": "2026-12-06T11:55:00.000000Z", "leaseDurationSeconds": 1800}
    }))
    .unwrap()
}

/// An Event of ours about `node`, as `NodeEvents::event` writes one, at `hm`.
fn event(node: &str, reason: &str, message: &str, hm: &str) -> Event {
    serde_json::from_value(json!({
        "metadata": {"name": format!("{node}.{reason}.{hm}"), "namespace": "default"},
        "involvedObject": {"kind": "Node", "name": node, "apiVersion": "v1"},
        "reason": reason, "message": message,
        "firstTimestamp": at(hm), "lastTimestamp": at(hm),
        "reportingComponent": "kube-shutdown-drain",
        "source": {"component": "kube-shutdown-drain", "host": node}
    }))
    .unwrap()
}

/// A fleet of a dozen nodes, one in each state, at 12:00; the wave began at 10:00.
fn fleet() -> Seen {
    let ready = |name: &str, extra: Value| node(name, NEW, "True", "08:00", extra);
    let nodes = vec![
        ready("n-idle", json!({})),
        ready("n-untraced", json!({})),
        ready("n-needs", json!({})),
        ready(
            "n-planned",
            condition(
                "MaintenancePlanned",
                "True",
                "RebootNeeded",
                "node n-planned needs a reboot",
                "09:30",
            ),
        ),
        ready("n-waiting", json!({})),
        ready("n-line", json!({})),
        ready("n-line2", json!({})),
        ready("n-slot", json!({})),
        ready("n-draining", marker(NEW, "11:41")),
        ready("n-drained", marker(NEW, "11:30")),
        node("n-rebooting", NEW, "Unknown", "11:45", marker(NEW, "11:20")),
        node("n-restoring", NEW, "True", "11:55", marker(OLD, "11:06")),
        ready("n-settling", json!({})),
        ready(
            "n-held",
            hold("kernel debugging, ask bob", "kubectl-annotate", "09:00"),
        ),
    ];
    let leases = vec![
        slot(
            "kube-shutdown-drain-slot-1",
            "all",
            Some(&format!("n-slot/{NEW}")),
            "11:50",
        ),
        slot(
            "kube-shutdown-drain-slot-0",
            "all",
            Some(&format!("n-draining/{NEW}")),
            "11:40",
        ),
        slot(
            "kube-shutdown-drain-slot-2",
            "all",
            Some(&format!("n-drained/{NEW}")),
            "11:29",
        ),
        slot(
            "kube-shutdown-drain-slot-3",
            "all",
            Some(&format!("n-rebooting/{NEW}")),
            "11:19",
        ),
        slot(
            "kube-shutdown-drain-slot-4",
            "all",
            Some(&format!("n-restoring/{OLD}")),
            "11:05",
        ),
        slot(
            "kube-shutdown-drain-slot-5",
            "all",
            Some(&format!("n-settling/{NEW}")),
            "11:57",
        ),
        slot("kube-shutdown-drain-slot-6", "all", None, "11:00"),
        slot(
            "kube-shutdown-drain-gpu-slot-0",
            "gpu",
            Some(&format!("n-gone/{OLD}")),
            "11:00",
        ),
        waiting("n-line2", "10:40"),
        waiting("n-line", "10:30"),
    ];
    let events = vec![
        event(
            "n-idle",
            "RebootRequired",
            "node n-idle needs a reboot",
            "10:00",
        ),
        event("n-idle", "RebootStarted", "rebooting node n-idle", "10:05"),
        event(
            "n-idle",
            "DrainFinished",
            "node n-idle drained: 5 evicted in 90.0 s",
            "10:08",
        ),
        event(
            "n-idle",
            "Restored",
            "node n-idle restored after reboot",
            "10:15",
        ),
        event(
            "n-needs",
            "RebootRequired",
            "node n-needs needs a reboot: /var/run/reboot-required exists",
            "10:00",
        ),
        event(
            "n-waiting",
            "RebootRequired",
            "node n-waiting needs a reboot",
            "10:00",
        ),
        event(
            "n-waiting",
            "RebootWaiting",
            "node n-waiting is outside its maintenance windows: the next opens Sun 2026-12-06 22:00 UTC",
            "10:01",
        ),
        event("n-line", "RebootStarted", "rebooting node n-line", "10:29"),
        event(
            "n-slot",
            "DrainSlotTaken",
            "node n-slot took drain slot kube-shutdown-drain-slot-1",
            "11:50",
        ),
        event(
            "n-draining",
            "DrainStarted",
            "drain of node n-draining started",
            "11:41",
        ),
        event(
            "n-drained",
            "DrainFinished",
            "node n-drained drained: 7 evicted in 100.0 s",
            "11:32",
        ),
        event(
            "n-settling",
            "Restored",
            "node n-settling restored after reboot",
            "11:58",
        ),
        event(
            "n-held",
            "RebootRequired",
            "node n-held needs a reboot",
            "10:00",
        ),
        event(
            "n-held",
            "RebootWaiting",
            "node n-held is held by its annotation kube-shutdown-drain/hold",
            "10:01",
        ),
    ];
    Seen {
        nodes,
        leases,
        events,
        namespace: "kube-shutdown-drain".into(),
    }
}

fn row<'a>(view: &'a FleetView, name: &str) -> &'a NodeRow {
    view.nodes
        .iter()
        .find(|r| r.node == name)
        .unwrap_or_else(|| panic!("no row {name}"))
}

/// The state, detail and since of `name` in the dozen-node fleet.
fn seen_as(name: &str) -> (State, String, Option<Timestamp>) {
    let v = view(&fleet(), now(), true);
    let r = row(&v, name);
    (r.state, r.detail.clone(), r.since)
}

#[test]
fn a_node_restored_with_nothing_after_is_idle() {
    let (state, detail, since) = seen_as("n-idle");
    assert_eq!(state, State::Idle);
    assert_eq!(detail, "last: Restored node n-idle restored after reboot");
    assert_eq!(since, Some(t(&at("10:15"))));
}

#[test]
fn a_node_without_a_trace_is_a_row_only_with_all() {
    let (state, detail, since) = seen_as("n-untraced");
    assert_eq!(state, State::Untraced);
    assert_eq!(detail, "no trace of kube-shutdown-drain");
    assert_eq!(since, None);
    let v = view(&fleet(), now(), false);
    assert!(v.nodes.iter().all(|r| r.node != "n-untraced"));
    assert_eq!(v.nodes.len(), 13);
}

#[test]
fn a_reboot_required_with_nothing_after_is_needs_reboot() {
    let (state, detail, since) = seen_as("n-needs");
    assert_eq!(state, State::NeedsReboot);
    assert_eq!(
        detail,
        "node n-needs needs a reboot: /var/run/reboot-required exists"
    );
    assert_eq!(since, Some(t(&at("10:00"))));
}

#[test]
fn maintenance_planned_true_is_needs_reboot_once_the_events_are_gone() {
    let (state, detail, since) = seen_as("n-planned");
    assert_eq!(state, State::NeedsReboot);
    assert_eq!(detail, "MaintenancePlanned is True");
    assert_eq!(since, Some(t(&at("09:30"))));
}

#[test]
fn a_reboot_waiting_says_what_holds_it() {
    let (state, detail, since) = seen_as("n-waiting");
    assert_eq!(state, State::Waiting);
    assert_eq!(
        detail,
        "node n-waiting is outside its maintenance windows: the next opens Sun 2026-12-06 22:00 UTC"
    );
    assert_eq!(since, Some(t(&at("10:01"))));
}

#[test]
fn a_waiting_lease_is_a_place_in_line() {
    let v = view(&fleet(), now(), true);
    let first = row(&v, "n-line");
    assert_eq!(first.state, State::Waiting);
    assert_eq!(
        first.detail,
        "place 1 of 2 in line for a drain slot of group all; a drain slot (its reboot started)"
    );
    assert_eq!(first.since, Some(t(&at("10:30"))));
    let second = row(&v, "n-line2");
    assert_eq!(second.state, State::Waiting);
    assert_eq!(
        second.detail,
        "place 2 of 2 in line for a drain slot of group all"
    );
    assert_eq!(
        second.place,
        Some(Place {
            group: "all".into(),
            number: 2,
            of: 2
        })
    );
    assert_eq!(second.group.as_deref(), Some("all"));
    assert_eq!(second.traces, ["waiting-lease"]);
}

#[test]
fn a_slot_without_a_marker_is_holding_slot_since_its_take() {
    let (state, detail, since) = seen_as("n-slot");
    assert_eq!(state, State::HoldingSlot);
    assert_eq!(detail, "slot kube-shutdown-drain-slot-1");
    assert_eq!(since, Some(t(&at("11:50"))));
}

#[test]
fn a_marker_of_this_boot_on_a_ready_node_is_draining() {
    let (state, detail, since) = seen_as("n-draining");
    assert_eq!(state, State::Draining);
    assert_eq!(
        detail,
        "draining in slot kube-shutdown-drain-slot-0 for reboot: /var/run/reboot-required"
    );
    assert_eq!(since, Some(t(&at("11:41"))));
}

#[test]
fn a_drain_that_ended_after_the_marker_is_drained() {
    let (state, detail, since) = seen_as("n-drained");
    assert_eq!(state, State::Drained);
    assert!(
        detail.starts_with(
            "drained in slot kube-shutdown-drain-slot-2 for reboot: /var/run/reboot-required: its \
             shutdown follows"
        ),
        "{detail}"
    );
    assert_eq!(since, Some(t(&at("11:32"))));
}

#[test]
fn a_marker_of_this_boot_on_a_node_not_ready_is_rebooting() {
    let (state, detail, since) = seen_as("n-rebooting");
    assert_eq!(state, State::Rebooting);
    assert_eq!(
        detail,
        "drained for reboot: /var/run/reboot-required, Ready Unknown"
    );
    assert_eq!(since, Some(t(&at("11:45"))));
}

#[test]
fn a_drain_that_ended_then_not_ready_is_rebooting_without_a_marker() {
    let mut seen = fleet();
    seen.nodes
        .push(node("n-gone-down", NEW, "False", "11:10", json!({})));
    seen.events.push(event(
        "n-gone-down",
        "DrainFinished",
        "node n-gone-down drained: 1 evicted in 2.0 s",
        "11:09",
    ));
    let v = view(&seen, now(), false);
    let r = row(&v, "n-gone-down");
    assert_eq!(r.state, State::Rebooting);
    assert_eq!(r.detail, "drained, then Ready False");
    assert_eq!(r.since, Some(t(&at("11:10"))));
}

#[test]
fn a_new_boot_under_the_old_marker_is_restoring() {
    let (state, detail, since) = seen_as("n-restoring");
    assert_eq!(state, State::Restoring);
    assert_eq!(
        detail,
        format!(
            "back in boot {NEW} (drained in boot {OLD} for reboot: /var/run/reboot-required), \
             Ready True; the restore has not cleared the marker yet"
        )
    );
    assert_eq!(since, Some(t(&at("11:55"))));
}

#[test]
fn a_slot_kept_after_the_restore_is_settling() {
    let (state, detail, since) = seen_as("n-settling");
    assert_eq!(state, State::Settling);
    assert_eq!(
        detail,
        "restored, keeps slot kube-shutdown-drain-slot-5 until the PodDisruptionBudgets its \
         drain disturbed are healthy again (at most [fleet] settle_max)"
    );
    assert_eq!(since, Some(t(&at("11:58"))));
}

#[test]
fn the_hold_annotation_is_held_by_its_value_and_field_manager() {
    let v = view(&fleet(), now(), true);
    let r = row(&v, "n-held");
    assert_eq!(r.state, State::Held);
    assert_eq!(
        r.detail,
        "kube-shutdown-drain/hold=\"kernel debugging, ask bob\" (set by kubectl-annotate); its \
         reboot waits: node n-held is held by its annotation kube-shutdown-drain/hold"
    );
    assert_eq!(r.since, Some(t(&at("09:00"))));
    assert_eq!(
        r.hold,
        Some(Hold {
            value: "kernel debugging, ask bob".into(),
            by: vec!["kubectl-annotate".into()]
        })
    );
}

/// A node held while it waits in line: the hold is what the operator must lift, so it wins,
/// and the place in line stays in the detail; the node is still to do.
#[test]
fn held_wins_over_waiting_and_keeps_the_place_in_line() {
    let mut seen = fleet();
    let n = seen
        .nodes
        .iter_mut()
        .find(|n| n.metadata.name.as_deref() == Some("n-line2"))
        .unwrap();
    let mut v = serde_json::to_value(&*n).unwrap();
    merge(&mut v, hold("", "kube-shutdown-drain-fleet", "11:00"));
    *n = serde_json::from_value(v).unwrap();
    let v = view(&seen, now(), false);
    let r = row(&v, "n-line2");
    assert_eq!(r.state, State::Held);
    assert_eq!(
        r.detail,
        "kube-shutdown-drain/hold=\"\" (set by kube-shutdown-drain-fleet); its reboot waits: \
         place 2 of 2 in line for a drain slot of group all"
    );
    assert_eq!(v.progress.to_do, 11);
}

/// A drain under way outranks a hold put on meanwhile; the detail says both.
#[test]
fn draining_wins_over_held() {
    let seen = Seen {
        nodes: vec![node("a", NEW, "True", "08:00", {
            let mut m = marker(NEW, "11:00");
            merge(&mut m, hold("stop", "kubectl-annotate", "11:01"));
            m
        })],
        leases: vec![],
        events: vec![],
        namespace: "kube-shutdown-drain".into(),
    };
    let r = &view(&seen, now(), false).nodes[0];
    assert_eq!(r.state, State::Draining);
    assert_eq!(
        r.detail,
        "draining for reboot: /var/run/reboot-required; held by kube-shutdown-drain/hold as well"
    );
}

/// The Events say idle (a restore was the last), but the slot is still held by this boot since
/// before it: settling; once given back (a Lease without a holder), idle.
#[test]
fn a_slot_still_held_after_the_restore_is_settling_not_idle() {
    let seen = |holder: Option<&str>| Seen {
        nodes: vec![node("a", NEW, "True", "11:30", json!({}))],
        leases: vec![slot("kube-shutdown-drain-slot-0", "all", holder, "11:31")],
        events: vec![
            event(
                "a",
                "DrainFinished",
                "node a drained: 2 evicted in 3.0 s",
                "11:00",
            ),
            event("a", "Restored", "node a restored after reboot", "11:32"),
        ],
        namespace: "kube-shutdown-drain".into(),
    };
    let held = format!("a/{NEW}");
    let r = view(&seen(Some(&held)), now(), false).nodes[0].clone();
    assert_eq!(r.state, State::Settling);
    assert_eq!(r.since, Some(t(&at("11:32"))));
    let r = view(&seen(None), now(), false).nodes[0].clone();
    assert_eq!(r.state, State::Idle);
    assert_eq!(r.detail, "last: Restored node a restored after reboot");
}

/// A slot still held by the boot before, after the marker is gone: never carried into this
/// boot, so stale to the others; settling until its daemon gives it back.
#[test]
fn a_slot_of_the_boot_before_without_a_marker_is_settling_and_stale() {
    let seen = Seen {
        nodes: vec![node("a", NEW, "True", "11:30", json!({}))],
        leases: vec![slot(
            "kube-shutdown-drain-slot-0",
            "all",
            Some(&format!("a/{OLD}")),
            "11:00",
        )],
        events: vec![],
        namespace: "kube-shutdown-drain".into(),
    };
    let v = view(&seen, now(), false);
    assert_eq!(v.nodes[0].state, State::Settling);
    assert_eq!(
        v.nodes[0].detail,
        format!(
            "restored into boot {NEW}, but slot kube-shutdown-drain-slot-0 is still held by its \
             boot {OLD}: stale to the other nodes, and given back when its daemon starts"
        )
    );
    assert!(
        v.slots[0]
            .stale
            .as_deref()
            .unwrap()
            .contains("was restored since")
    );
    assert!(
        v.progress.wave.is_empty(),
        "a stale holder is not in the wave"
    );
}

/// `DrainSlotUnsettled` after the take: the budgets did not heal by `settle_max`; the slot
/// goes back now.
#[test]
fn an_unsettled_give_back_is_settling() {
    let seen = Seen {
        nodes: vec![node("a", NEW, "True", "11:30", json!({}))],
        leases: vec![slot(
            "kube-shutdown-drain-slot-0",
            "all",
            Some(&format!("a/{NEW}")),
            "11:31",
        )],
        events: vec![event(
            "a",
            "DrainSlotUnsettled",
            "node a gives back drain slot kube-shutdown-drain-slot-0 with PodDisruptionBudgets db/pg still short",
            "11:59",
        )],
        namespace: "kube-shutdown-drain".into(),
    };
    let r = &view(&seen, now(), false).nodes[0];
    assert_eq!(r.state, State::Settling);
    assert!(
        r.detail
            .starts_with("gives back slot kube-shutdown-drain-slot-0 unsettled: node a gives back"),
        "{}",
        r.detail
    );
}

/// A `MaintenancePlanned` written False after the last `RebootWaiting`: the need went away.
#[test]
fn a_need_withdrawn_by_the_condition_is_idle() {
    let seen = Seen {
        nodes: vec![node(
            "a",
            NEW,
            "True",
            "08:00",
            condition(
                "MaintenancePlanned",
                "False",
                "RebootNotNeeded",
                "node a needs no reboot",
                "11:00",
            ),
        )],
        leases: vec![],
        events: vec![
            event("a", "RebootRequired", "node a needs a reboot", "10:00"),
            event(
                "a",
                "RebootWaiting",
                "node a is outside its maintenance windows",
                "10:01",
            ),
        ],
        namespace: "kube-shutdown-drain".into(),
    };
    let r = &view(&seen, now(), false).nodes[0];
    assert_eq!(r.state, State::Idle);
    assert_eq!(r.traces, ["conditions", "events"]);
}

/// The latest Event is the one with the latest of its times (`series.lastObservedTime` over
/// `lastTimestamp`); Events of other components neither trace nor count.
#[test]
fn the_latest_event_is_decided_by_its_series_and_other_components_do_not_count() {
    let mut waiting = event(
        "a",
        "RebootWaiting",
        "node a waits: alert KubeNodeNotReady fires",
        "09:00",
    );
    waiting.series = Some(
        serde_json::from_value(
            json!({"count": 4, "lastObservedTime": "2026-12-06T11:00:00.000000Z"}),
        )
        .unwrap(),
    );
    let mut kubelet = event(
        "b",
        "NodeNotReady",
        "Node b status is now: NodeNotReady",
        "11:00",
    );
    kubelet.reporting_component = Some("kubelet".into());
    kubelet.source = None;
    let seen = Seen {
        nodes: vec![
            node("a", NEW, "True", "08:00", json!({})),
            node("b", NEW, "True", "08:00", json!({})),
        ],
        leases: vec![],
        events: vec![
            waiting,
            event("a", "RebootRequired", "node a needs a reboot", "10:00"),
            kubelet,
        ],
        namespace: "kube-shutdown-drain".into(),
    };
    let v = view(&seen, now(), false);
    assert_eq!(v.nodes.len(), 1, "b has only the kubelet's Event");
    assert_eq!(v.nodes[0].state, State::Waiting);
    assert_eq!(
        v.nodes[0].detail,
        "node a waits: alert KubeNodeNotReady fires"
    );
    assert_eq!(v.nodes[0].since, Some(t(&at("11:00"))));
}

#[test]
fn the_last_drain_comes_from_the_drained_condition_then_the_events() {
    let v = view(&fleet(), now(), true);
    assert_eq!(
        row(&v, "n-drained").last_drain,
        LastDrain {
            outcome: Outcome::Complete,
            message: Some("node n-drained drained: 7 evicted in 100.0 s".into()),
            at: Some(t(&at("11:32"))),
            from: Source::Event,
        }
    );
    assert_eq!(row(&v, "n-needs").last_drain.outcome, Outcome::Unknown);
    assert_eq!(row(&v, "n-needs").last_drain.from, Source::None);
    let cond = |reason: &str, message: &str| {
        node(
            "a",
            NEW,
            "True",
            "08:00",
            condition("Drained", "False", reason, message, "11:10"),
        )
    };
    let seen = |n: Node| Seen {
        nodes: vec![n],
        leases: vec![],
        events: vec![event(
            "a",
            "DrainFinished",
            "node a not drained: 2 evicted, 1 blocked in 120.0 s",
            "11:05",
        )],
        namespace: "kube-shutdown-drain".into(),
    };
    let d = view(
        &seen(cond("DrainIncomplete", "node a not drained: 1 blocked")),
        now(),
        false,
    )
    .nodes[0]
        .last_drain
        .clone();
    assert_eq!(
        (d.outcome, d.from),
        (Outcome::Incomplete, Source::Condition)
    );
    assert_eq!(d.message.as_deref(), Some("node a not drained: 1 blocked"));
    // The restore's condition says nothing of the drain: the Event does.
    let d = view(
        &seen(cond("Restored", "kube-shutdown-drain restored node a")),
        now(),
        false,
    )
    .nodes[0]
        .last_drain
        .clone();
    assert_eq!((d.outcome, d.from), (Outcome::Incomplete, Source::Event));
    assert_eq!(d.at, Some(t(&at("11:05"))));
}

#[test]
fn slot_rows_by_group_and_number_with_free_and_stale_ones() {
    let v = view(&fleet(), now(), false);
    let names: Vec<(&str, Option<u32>)> = v
        .slots
        .iter()
        .map(|s| (s.slot.as_str(), s.number))
        .collect();
    assert_eq!(names[0], ("kube-shutdown-drain-slot-0", Some(0)));
    assert_eq!(names[6], ("kube-shutdown-drain-slot-6", Some(6)));
    assert_eq!(names[7], ("kube-shutdown-drain-gpu-slot-0", Some(0)));
    let free = &v.slots[6];
    assert_eq!(
        (
            free.holder.as_deref(),
            free.node.as_deref(),
            free.stale.as_deref()
        ),
        (None, None, None)
    );
    let gone = &v.slots[7];
    assert_eq!(gone.group, "gpu");
    assert_eq!(gone.stale.as_deref(), Some("node n-gone is gone"));
    let held = &v.slots[0];
    assert_eq!(held.holder, Some(format!("n-draining/{NEW}")));
    assert_eq!(held.since, Some(t(&at("11:40"))));
    assert_eq!(held.stale, None);
    // The restoring node's slot of its old boot is not stale: the marker is still there.
    assert_eq!(v.slots[4].stale, None);
}

#[test]
fn the_pause_lease_is_the_pause_row() {
    let mut seen = fleet();
    assert_eq!(view(&seen, now(), false).pause, None);
    seen.leases.push(serde_json::from_value(json!({
        "metadata": {"name": "kube-shutdown-drain-pause", "namespace": "kube-shutdown-drain",
            "creationTimestamp": at("11:00"),
            "annotations": {"kube-shutdown-drain/reason": "INC-4711: storage migration"},
            "managedFields": [{"manager": "kubectl-create", "operation": "Update", "time": at("11:00")}]}
    })).unwrap());
    assert_eq!(
        view(&seen, now(), false).pause,
        Some(PauseRow {
            since: Some(t(&at("11:00"))),
            by: vec!["kubectl-create".into()],
            reason: Some("INC-4711: storage migration".into()),
        })
    );
}

#[test]
fn progress_counts_the_wave_and_estimates_at_its_pace() {
    let v = view(&fleet(), now(), true);
    let p = &v.progress;
    // Needs, planned, waiting, line, line2, slot, draining, drained, rebooting, restoring and
    // the held node that needs its reboot; done: idle and settling, restored since 10:00.
    assert_eq!((p.done, p.to_do), (2, 11));
    assert_eq!(p.wave_started, Some(t(&at("10:00"))));
    assert_eq!(
        p.wave,
        [
            "n-drained",
            "n-draining",
            "n-rebooting",
            "n-restoring",
            "n-settling",
            "n-slot"
        ]
    );
    let e = p.estimate.as_ref().unwrap();
    assert_eq!(e.per_hour, 1.0);
    assert_eq!(e.finishes_at, t("2026-12-06T23:00:00Z"));
    assert_eq!(
        progress_line(&v),
        "done 2 / to do 11 since 2026-12-06T10:00:00Z, wave: n-drained, n-draining, \
         n-rebooting, n-restoring, n-settling, n-slot, estimate: done by 2026-12-06T23:00:00Z \
         (in 11h, 1.0 nodes an hour)"
    );
}

#[test]
fn no_estimate_before_a_node_is_done() {
    let mut seen = fleet();
    seen.events
        .retain(|e| e.reason.as_deref() != Some("Restored"));
    let v = view(&seen, now(), false);
    assert_eq!(v.progress.done, 0);
    assert_eq!(v.progress.estimate, None);
    assert!(
        progress_line(&v).ends_with("estimate: no estimate yet"),
        "{}",
        progress_line(&v)
    );
}

fn paused(mut seen: Seen) -> Seen {
    seen.leases.push(serde_json::from_value(json!({
        "metadata": {"name": "kube-shutdown-drain-pause", "namespace": "kube-shutdown-drain",
            "creationTimestamp": at("11:00"),
            "annotations": {"kube-shutdown-drain/reason": "INC-4711: storage migration"},
            "managedFields": [{"manager": "kubectl-create", "operation": "Update", "time": at("11:00")}]}
    })).unwrap());
    seen
}

/// The docs' example: four nodes of the fleet, a free, a held and a stale slot, the pause.
fn example() -> Seen {
    let mut seen = paused(fleet());
    let keep = ["n-drained", "n-held", "n-idle", "n-line"];
    seen.nodes
        .retain(|n| keep.contains(&n.metadata.name.as_deref().unwrap()));
    seen.events
        .retain(|e| keep.contains(&e.involved_object.name.as_deref().unwrap()));
    let slots = [
        "kube-shutdown-drain-slot-2",
        "kube-shutdown-drain-slot-6",
        "kube-shutdown-drain-gpu-slot-0",
        "kube-shutdown-drain-waiting.n-line",
        "kube-shutdown-drain-pause",
    ];
    seen.leases
        .retain(|l| slots.contains(&l.metadata.name.as_deref().unwrap()));
    seen
}

const DOC: &str = include_str!("../../docs/fleet-view.md");

/// The first fenced block of `lang` after `heading` in the doc.
fn doc_block(heading: &str, lang: &str) -> &'static str {
    let from = DOC.find(heading).unwrap_or_else(|| panic!("no {heading}"));
    let fence = format!("```{lang}\n");
    let start = from + DOC[from..].find(&fence).expect("a fenced block") + fence.len();
    &DOC[start..start + DOC[start..].find("```").expect("its end")]
}

/// Every key path in `v`: `nodes[].lastDrain.outcome`.
fn keys(v: &Value, path: &str, out: &mut std::collections::BTreeSet<String>) {
    match v {
        Value::Object(map) => {
            for (k, v) in map {
                let p = format!("{path}.{k}");
                keys(v, &p, out);
                out.insert(p);
            }
        }
        Value::Array(items) => items
            .iter()
            .for_each(|v| keys(v, &format!("{path}[]"), out)),
        _ => {}
    }
}

#[test]
fn the_json_keys_are_the_documented_example_s() {
    let documented: Value = serde_json::from_str(doc_block("## The JSON shape", "json")).unwrap();
    let written = serde_json::to_value(view(&paused(fleet()), now(), true)).unwrap();
    let (mut doc, mut code) = Default::default();
    keys(&documented, "", &mut doc);
    keys(&written, "", &mut code);
    let missing: Vec<&String> = code.difference(&doc).collect();
    let extra: Vec<&String> = doc.difference(&code).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "docs/fleet-view.md's example lacks {missing:?} and has keys the code does not write: \
         {extra:?}"
    );
    // And it is a view this code reads back, with the version it writes.
    let back: FleetView = serde_json::from_value(documented).unwrap();
    assert_eq!(back.version, VERSION);
}

/// The example is what the view makes of the four nodes it shows.
#[test]
fn the_documented_example_is_what_the_view_writes() {
    let documented: Value = serde_json::from_str(doc_block("## The JSON shape", "json")).unwrap();
    let written = serde_json::to_value(view(&example(), now(), false)).unwrap();
    assert_eq!(documented, written);
}

/// The doc's table of states names every state, in the order the rules are taken, as the JSON
/// writes it.
#[test]
fn the_documented_states_are_the_rules_in_order() {
    let section = &DOC[DOC.find("## States").unwrap()..];
    let named: Vec<&str> = section
        .lines()
        .take_while(|l| !l.starts_with("## ") || l.starts_with("## States"))
        .filter(|l| l.starts_with("| ") && l[2..].starts_with(|c: char| c.is_ascii_digit()))
        .map(|l| l.split('`').nth(1).unwrap())
        .collect();
    let code: Vec<&str> = State::ALL.iter().map(|s| s.as_str()).collect();
    assert_eq!(named, code);
    for s in State::ALL {
        assert_eq!(serde_json::to_value(s).unwrap(), s.as_str());
    }
}

#[test]
fn the_text_is_the_documented_table() {
    let shown = text(&view(&paused(fleet()), now(), false), false);
    assert_eq!(shown, doc_block("## What it prints", "text"));
}

#[test]
fn wide_adds_columns_and_shows_details_whole() {
    let v = view(&paused(fleet()), now(), false);
    let wide = text(&v, true);
    let head = wide.lines().next().unwrap();
    let columns: Vec<&str> = head
        .split("   ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(
        columns,
        [
            "NODE",
            "STATE",
            "SINCE",
            "GROUP",
            "SLOT",
            "PLACE",
            "READY",
            "BOOT",
            "TRACES",
            "LAST DRAIN",
            "DETAIL"
        ]
    );
    let line = |name: &str| {
        wide.lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap()
    };
    let restoring = &row(&v, "n-restoring").detail;
    assert!(
        line("n-restoring").ends_with(restoring.as_str()),
        "whole in wide"
    );
    assert!(
        !text(&v, false).contains(restoring.as_str()),
        "cut in narrow"
    );
    let cells: Vec<&str> = line("n-line2").split_whitespace().collect();
    assert_eq!(cells[3..7], ["all", "-", "2/2", "True"]);
    assert!(
        line("n-drained").contains(
            "complete (2026-12-06T11:32:00Z): node n-drained drained: 7 evicted in 100.0 s"
        )
    );
    assert!(
        line("n-rebooting").starts_with("n-rebooting   rebooting      2026-12-06T11:45:00Z   all")
    );
    assert!(wide.contains("RENEWED"));
    assert!(wide.contains("PAUSED since 2026-12-06T11:00:00Z by kubectl-create"));
}

/// What another writer put in an annotation or an Event reaches the terminal escaped.
#[test]
fn text_from_the_cluster_is_escaped() {
    let seen = Seen {
        nodes: vec![
            node(
                "a",
                NEW,
                "True",
                "08:00",
                hold("\u{1b}[2Jgone", "kubectl-annotate", "11:00"),
            ),
            node("b", NEW, "True", "08:00", json!({})),
        ],
        leases: vec![],
        events: vec![event(
            "b",
            "RebootWaiting",
            "waits for \u{1b}]8;;http://x\u{7}this",
            "11:00",
        )],
        namespace: "kube-shutdown-drain".into(),
    };
    let v = view(&seen, now(), false);
    assert_eq!(v.nodes[0].hold.as_ref().unwrap().value, "\u{1b}[2Jgone");
    assert_eq!(v.nodes[1].detail, "waits for \u{1b}]8;;http://x\u{7}this");
    for wide in [false, true] {
        let shown = text(&v, wide);
        assert!(!shown.contains(['\u{1b}', '\u{7}']), "{shown}");
        assert!(shown.contains("\\u{1b}]8;;http://x\\u{7}this"), "{shown}");
    }
}

#[test]
fn ages_as_kubectl_writes_them() {
    let from = now();
    let age = |secs: i64| render::human(from, from + SignedDuration::from_secs(secs));
    for (secs, shown) in [
        (-5, "<invalid>"),
        (-1, "0s"),
        (119, "119s"),
        (250, "4m10s"),
        (300, "5m"),
        (545, "9m5s"),
        (600, "10m"),
        (179 * 60, "179m"),
        (3 * 3600 + 5 * 60, "3h5m"),
        (20 * 3600, "20h"),
        (51 * 3600, "2d3h"),
        (40 * 86400, "40d"),
        ((2 * 365 + 10) * 86400, "2y10d"),
        (9 * 365 * 86400, "9y"),
    ] {
        assert_eq!(age(secs), shown, "{secs} s");
    }
}

/// A node that holds a slot of its boot before and one of this boot shows this boot's.
#[test]
fn the_slot_of_this_boot_is_the_one_shown() {
    let seen = Seen {
        nodes: vec![node("a", NEW, "True", "08:00", json!({}))],
        leases: vec![
            slot(
                "kube-shutdown-drain-slot-0",
                "all",
                Some(&format!("a/{OLD}")),
                "11:00",
            ),
            slot(
                "kube-shutdown-drain-slot-1",
                "all",
                Some(&format!("a/{NEW}")),
                "11:50",
            ),
        ],
        events: vec![],
        namespace: "kube-shutdown-drain".into(),
    };
    let r = &view(&seen, now(), false).nodes[0];
    assert_eq!(r.state, State::HoldingSlot);
    assert_eq!(r.slot.as_deref(), Some("kube-shutdown-drain-slot-1"));
}
