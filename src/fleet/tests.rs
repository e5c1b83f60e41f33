//! The pure part of the drain slots: names, holders, staleness, the guarded writes.

use std::time::Duration;

use serde_json::json;

use super::*;

fn fleet(slots: u32, group_label: Option<&str>) -> FleetSettings {
    FleetSettings {
        slots,
        group_label: group_label.map(str::to_string),
        ..FleetSettings::default()
    }
}

fn node(v: serde_json::Value) -> Node {
    serde_json::from_value(v).unwrap()
}

fn t(s: &str) -> jiff::Timestamp {
    s.parse().unwrap()
}

/// The times of a Lease that carries only a `renewTime`.
fn renewed_at(renewed: Option<jiff::Timestamp>) -> HeldTimes {
    HeldTimes {
        acquired: None,
        renewed,
        first_seen: None,
    }
}

fn me() -> Holder {
    Holder::parse("node-a/boot-1").unwrap()
}

#[test]
fn holders_are_node_slash_boot_and_nothing_else() {
    assert_eq!(
        Holder::parse("node-a/0b0e").map(|h| (h.node, h.boot_id)),
        Some(("node-a".into(), "0b0e".into()))
    );
    for bad in ["", "node-a", "/b", "a/", "a/b/c", "leader-election-id"] {
        assert_eq!(Holder::parse(bad), None, "{bad:?}");
    }
    // No node name or boot ID is that long: another program's identity, and quoted cut.
    let longest = format!("{}/{}", "n".repeat(253), "b".repeat(64));
    assert!(Holder::parse(&longest).is_some());
    for long in [
        format!("{}/boot-1", "n".repeat(254)),
        format!("node-a/{}", "b".repeat(65)),
        format!("node-a/{}", "b".repeat(120_000)),
    ] {
        assert_eq!(Holder::parse(&long), None, "{}", long.len());
        let l: Lease = serde_json::from_value(json!({"spec": {"holderIdentity": long}})).unwrap();
        assert!(shown(&l).len() <= crate::text::OUTSIDE_MAX);
    }
    assert_eq!(me().to_string(), "node-a/boot-1");
}

#[test]
fn slot_names_per_group() {
    assert_eq!(
        slot_names(&fleet(2, None), ALL),
        ["kube-shutdown-drain-slot-0", "kube-shutdown-drain-slot-1"]
    );
    let zoned = fleet(1, Some("topology.kubernetes.io/zone"));
    let labelled = node(
        json!({"metadata": {"name": "n", "labels": {"topology.kubernetes.io/zone": "eu-West_1a"}}}),
    );
    let group = group_of(&zoned, &labelled);
    assert_eq!(group, "eu-West_1a");
    // The name had to change the value: a hash of the value tells it from `eu-west-1a`.
    assert_eq!(
        slot_names(&zoned, &group),
        ["kube-shutdown-drain-eu-west-1a-32072404-slot-0"]
    );
    assert_eq!(
        slot_names(&zoned, "eu-west-1a"),
        ["kube-shutdown-drain-eu-west-1a-slot-0"]
    );
    let names =
        ["Zone_A", "zone.a", "zone-a", "ZONE-A", "_", "."].map(|g| slot_names(&zoned, g).remove(0));
    let distinct: std::collections::BTreeSet<_> = names.iter().collect();
    assert_eq!(distinct.len(), names.len(), "{names:?}");
    assert_eq!(names[4].len(), "kube-shutdown-drain-00000000-slot-0".len());
    let bare = node(json!({"metadata": {"name": "n"}}));
    assert_eq!(group_of(&zoned, &bare), UNLABELLED);
    assert_eq!(group_of(&fleet(1, None), &labelled), ALL);
    assert!(slot_names(&fleet(0, None), ALL).is_empty());
}

#[test]
fn a_holder_is_stale_when_gone_restored_in_another_boot_or_held_too_long() {
    let holder = Holder::parse("node-b/boot-1").unwrap();
    let now = t("2026-12-02T06:00:00Z");
    let hour = Duration::from_secs(3600);
    let recent = renewed_at(Some(t("2026-12-02T05:30:00Z")));
    let up = |boot: &str, marker: bool| {
        let annotations = if marker {
            json!({MARKER_ANNOTATION: "{}"})
        } else {
            json!({})
        };
        node(
            json!({"metadata": {"name": "node-b", "annotations": annotations},
                    "status": {"nodeInfo": {"bootID": boot, "architecture": "", "containerRuntimeVersion": "",
                        "kernelVersion": "", "kubeProxyVersion": "", "kubeletVersion": "", "machineID": "",
                        "operatingSystem": "", "osImage": "", "systemUUID": ""}}}),
        )
    };
    let why = stale(&holder, None, recent, now, hour).unwrap();
    assert!(why.contains("node-b is gone"), "{why}");
    let why = stale(&holder, Some(&up("boot-2", false)), recent, now, hour).unwrap();
    assert!(
        why.contains("runs boot boot-2") && why.contains("restored"),
        "{why}"
    );
    // Another boot, still marked: it is being restored, and gives the slot back then.
    assert_eq!(
        stale(&holder, Some(&up("boot-2", true)), recent, now, hour),
        None
    );
    // The same boot, or a Node whose kubelet names no boot yet: held.
    assert_eq!(
        stale(&holder, Some(&up("boot-1", false)), recent, now, hour),
        None
    );
    assert_eq!(
        stale(&holder, Some(&up("", false)), recent, now, hour),
        None
    );
    let old = renewed_at(Some(t("2026-12-02T04:59:00Z")));
    let why = stale(&holder, Some(&up("boot-1", true)), old, now, hour).unwrap();
    assert!(why.contains("longer than hold_max (3600 s)"), "{why}");
}

#[test]
fn a_hold_is_judged_from_when_it_was_taken_whatever_its_renew_time_says() {
    let now = t("2026-12-02T06:00:00Z");
    let hour = Duration::from_secs(3600);
    let two_days_ago = Some(t("2026-11-30T06:00:00Z"));
    let times = |acquired: Option<jiff::Timestamp>, renewed: Option<jiff::Timestamp>| HeldTimes {
        acquired,
        renewed,
        first_seen: None,
    };
    // Taken two days ago, "renewed" in 2100: stale, and the far-off time is named.
    let forged = times(two_days_ago, Some(t("2100-01-01T00:00:00Z")));
    let why = held_too_long(forged, now, hour).expect("stale");
    assert!(
        why.contains("2026-11-30T06:00:00Z (acquireTime)")
            && why.contains("longer than hold_max (3600 s)")
            && why.contains("2100-01-01T00:00:00Z is ahead of this node's clock"),
        "{why}"
    );
    // The same through `stale`, with the holder alive in its boot and marked.
    let holder = Holder::parse("node-b/boot-1").unwrap();
    let alive = node(
        json!({"metadata": {"name": "node-b", "annotations": {MARKER_ANNOTATION: "{}"}},
        "status": {"nodeInfo": {"bootID": "boot-1", "architecture": "", "containerRuntimeVersion": "",
            "kernelVersion": "", "kubeProxyVersion": "", "kubeletVersion": "", "machineID": "",
            "operatingSystem": "", "osImage": "", "systemUUID": ""}}}),
    );
    let why = stale(&holder, Some(&alive), forged, now, hour).expect("stale");
    assert!(
        why.contains("node node-b") && why.contains("acquireTime"),
        "{why}"
    );
    // Taken just now by a clock a few seconds or decades ahead: held (counted as now).
    for ahead in ["2026-12-02T06:00:30Z", "2100-01-01T00:00:00Z"] {
        let fresh = times(Some(t(ahead)), Some(t(ahead)));
        assert_eq!(held_too_long(fresh, now, hour), None, "{ahead}");
    }
    // Taken within hold_max, renewed since: held; renewed long ago (acquire missing): stale.
    let recent = Some(t("2026-12-02T05:30:00Z"));
    assert_eq!(held_too_long(times(recent, recent), now, hour), None);
    let why = held_too_long(times(None, two_days_ago), now, hour).expect("stale");
    assert!(why.contains("(renewTime)"), "{why}");
    let why = held_too_long(HeldTimes::default(), now, hour).expect("stale");
    assert!(why.contains("no time"), "{why}");
}

/// A Lease whose times all lie ahead (a day ahead: `renewTime` alone, or both) is judged from
/// when this node first saw it (issue 40 item 6): held within `hold_max` of that, stale after.
#[test]
fn a_hold_whose_times_all_lie_ahead_is_judged_from_its_first_sighting() {
    let now = t("2026-12-02T06:00:00Z");
    let hour = Duration::from_secs(3600);
    let tomorrow = Some(t("2026-12-03T06:00:00Z"));
    for (acquired, renewed) in [(None, tomorrow), (tomorrow, tomorrow)] {
        let seen = |first_seen: &str| HeldTimes {
            acquired,
            renewed,
            first_seen: Some(t(first_seen)),
        };
        assert!(seen("2026-12-02T06:00:00Z").all_ahead_of(now));
        // First seen now, or within the hour: held.
        assert_eq!(held_too_long(seen("2026-12-02T06:00:00Z"), now, hour), None);
        assert_eq!(held_too_long(seen("2026-12-02T05:00:01Z"), now, hour), None);
        // First seen more than an hour ago: stale, naming the sighting and the time ahead.
        let why = held_too_long(seen("2026-12-02T04:59:59Z"), now, hour).expect("stale");
        assert!(
            why.contains("held since 2026-12-02T04:59:59Z (when this node first saw it")
                && why.contains("2026-12-03T06:00:00Z is ahead of this node's clock")
                && why.contains("longer than hold_max (3600 s)"),
            "{why}"
        );
        // A sighting "in the future" (a clock set back since) counts as now.
        assert_eq!(held_too_long(seen("2026-12-05T00:00:00Z"), now, hour), None);
    }
    // A time within the skew, or one in the past, is read as written: no sighting needed.
    let within_skew = HeldTimes {
        renewed: Some(t("2026-12-02T06:00:30Z")),
        ..HeldTimes::default()
    };
    assert!(!within_skew.all_ahead_of(now));
    let half_ahead = HeldTimes {
        acquired: Some(t("2026-12-02T05:00:00Z")),
        renewed: tomorrow,
        first_seen: None,
    };
    assert!(!half_ahead.all_ahead_of(now));
    assert!(!HeldTimes::default().all_ahead_of(now));
}

/// The memory of first sightings: kept per Lease, holder and times (paused time: the monotonic
/// clock moves only when the test says so), and bounded.
#[tokio::test(start_paused = true)]
async fn a_sighting_is_kept_per_lease_holder_and_times_and_the_memory_is_bounded() {
    let memory = sightings::Sightings::default();
    let hour = Duration::from_secs(3600);
    let now = t("2026-12-02T06:00:00Z");
    let ahead = HeldTimes {
        renewed: Some(t("2026-12-03T06:00:00Z")),
        ..HeldTimes::default()
    };
    let look = |now: jiff::Timestamp, holder: &str, times: HeldTimes| {
        memory.judged(
            "kube-shutdown-drain/kube-shutdown-drain-slot-0".into(),
            holder,
            times,
            now,
            tokio::time::Instant::now(),
        )
    };
    let first = look(now, "node-b/boot-1", ahead);
    assert_eq!(first.first_seen, Some(now));
    assert_eq!(held_too_long(first, now, hour), None);
    // An hour and a second later, by the monotonic clock (the wall clock says the same here).
    tokio::time::advance(hour + Duration::from_secs(1)).await;
    let later = now + jiff::SignedDuration::from_secs(3601);
    let again = look(later, "node-b/boot-1", ahead);
    assert_eq!(again.first_seen, Some(now));
    assert!(held_too_long(again, later, hour).is_some());
    // Another holder or other times are a new sighting, judged from now.
    let other = look(later, "node-c/boot-1", ahead);
    assert_eq!(other.first_seen, Some(later));
    let rewritten = HeldTimes {
        renewed: Some(t("2026-12-03T07:00:00Z")),
        ..HeldTimes::default()
    };
    assert_eq!(
        look(later, "node-b/boot-1", rewritten).first_seen,
        Some(later)
    );
    // A Lease read as written is not remembered.
    let fresh = HeldTimes {
        renewed: Some(later),
        ..HeldTimes::default()
    };
    assert_eq!(look(later, "node-d/boot-1", fresh), fresh);
    assert_eq!(memory.len(), 3);
    for i in 0..sightings::KEPT + 10 {
        look(later, &format!("node-{i}/boot-1"), ahead);
    }
    assert_eq!(memory.len(), sightings::KEPT);
}

#[test]
fn held_times_are_read_from_the_lease() {
    let l: Lease = serde_json::from_value(json!({
        "metadata": {"name": "kube-shutdown-drain-slot-0"},
        "spec": {"holderIdentity": "garbage-without-slash", "acquireTime": "2026-11-30T06:00:00.000000Z",
                 "renewTime": "2100-01-01T00:00:00.000000Z"},
    }))
    .unwrap();
    assert_eq!(
        HeldTimes::of(&l),
        HeldTimes {
            acquired: Some(t("2026-11-30T06:00:00Z")),
            renewed: Some(t("2100-01-01T00:00:00Z")),
            first_seen: None,
        }
    );
    assert_eq!(holder_of(&l), None);
}

fn lease(holder: Option<&str>) -> Lease {
    serde_json::from_value(json!({
        "metadata": {"name": "kube-shutdown-drain-slot-0", "namespace": "kube-shutdown-drain", "resourceVersion": "9"},
        "spec": {"holderIdentity": holder, "renewTime": "2026-12-02T05:00:00.000000Z", "leaseDurationSeconds": 3600},
    }))
    .unwrap()
}

fn apply(l: &Lease, patch: json_patch::Patch) -> Lease {
    let mut v = serde_json::to_value(l).unwrap();
    json_patch::patch(&mut v, &patch).unwrap();
    serde_json::from_value(v).unwrap()
}

#[test]
fn a_take_applies_only_to_the_holder_it_was_judged_for() {
    let f = fleet(1, None);
    let now = t("2026-12-02T06:00:00.123456Z");
    let free = lease(None);
    let (patch, ()) = take_patch(&free, &me(), None, now, &f)
        .unwrap()
        .expect("a write");
    let taken = apply(&free, patch.clone());
    assert_eq!(holder_of(&taken), Some(me()));
    assert_eq!(renewed(&taken), Some(now));
    // The patch starts with the resourceVersion test: on a Lease changed since, it fails.
    let v = serde_json::to_value(&patch).unwrap();
    assert_eq!(
        v[0],
        json!({"op": "test", "path": "/metadata/resourceVersion", "value": "9"})
    );
    // Read again after another node took it: nothing to write.
    let other = lease(Some("node-b/boot-7"));
    assert!(take_patch(&other, &me(), None, now, &f).unwrap().is_none());
    // A stale holder judged as such is replaced; a different one found on the re-read is not.
    assert!(
        take_patch(&other, &me(), Some("node-b/boot-7"), now, &f)
            .unwrap()
            .is_some()
    );
    assert!(
        take_patch(&other, &me(), Some("node-c/boot-1"), now, &f)
            .unwrap()
            .is_none()
    );
}

#[test]
fn a_release_clears_only_this_nodes_hold() {
    let held = lease(Some("node-a/boot-0"));
    let (patch, ()) = release_patch(&held, "node-a")
        .unwrap()
        .expect("ours, in any boot");
    let free = apply(&held, patch);
    assert_eq!(identity(&free), None);
    assert_eq!(free.spec.unwrap().lease_duration_seconds, Some(3600));
    assert!(
        release_patch(&lease(Some("node-b/boot-0")), "node-a")
            .unwrap()
            .is_none()
    );
    assert!(release_patch(&lease(None), "node-a").unwrap().is_none());
}

/// A waiting Lease of `node` (boot `boot-1`) for group `all`, waiting since `since`, renewed at
/// `renewed`.
fn waiting(node: &str, since: &str, renewed: &str) -> Lease {
    serde_json::from_value(json!({
        "metadata": {"name": queue::wait_name(node), "namespace": "kube-shutdown-drain",
                     "resourceVersion": "3", "labels": {queue::WAITING_LABEL: "all"}},
        "spec": {"holderIdentity": format!("{node}/boot-1"), "acquireTime": since,
                 "renewTime": renewed, "leaseDurationSeconds": 1800},
    }))
    .unwrap()
}

#[test]
fn the_line_is_by_wait_start_then_node_name_and_leaves_out_the_stale_and_the_given_back() {
    let now = t("2026-12-02T06:00:00Z");
    let fresh = "2026-12-02T05:59:00Z";
    let leases = [
        waiting("node-c", "2026-12-02T05:10:00Z", fresh),
        waiting("node-b", "2026-12-02T05:20:00Z", fresh),
        waiting("node-a", "2026-12-02T05:20:00Z", fresh),
        // Not renewed for 31 minutes: its daemon is gone.
        waiting("node-d", "2026-12-02T05:00:00Z", "2026-12-02T05:29:00Z"),
        // Renewed "in 2100": counts as now, so in line, by its start.
        waiting("node-e", "2026-12-02T05:30:00Z", "2100-01-01T00:00:00Z"),
        // Given back: no holder.
        lease(None),
    ];
    let line = queue::order(&leases, now);
    let names: Vec<&str> = line.iter().map(|w| w.node.as_str()).collect();
    assert_eq!(names, ["node-c", "node-a", "node-b", "node-e"]);
    assert_eq!(queue::place(&line, "node-a"), 1);
    // A node not in line yet is behind all of it.
    assert_eq!(queue::place(&line, "node-z"), 4);
    assert_eq!(queue::place(&[], "node-z"), 0);
    // The first nodes each start with a different open slot.
    assert_eq!(
        [0, 1, 2].map(|p| queue::first_slot(p, 2)),
        [0, 1, 0],
        "places 0 and 1 on slots 0 and 1"
    );
    assert_eq!(queue::first_slot(3, 0), 0);
}

#[test]
fn only_the_first_of_the_line_try_an_open_slot_and_a_waiter_that_leaves_it_open_is_passed_over() {
    let now = t("2026-12-02T06:00:00Z");
    let fresh = "2026-12-02T05:59:00Z";
    let leases = [
        waiting("node-a", "2026-12-02T05:10:00Z", fresh),
        waiting("node-b", "2026-12-02T05:20:00Z", fresh),
        waiting("node-c", "2026-12-02T05:30:00Z", fresh),
    ];
    let at = tokio::time::Instant::now();
    let turns = |open: usize, at: tokio::time::Instant| {
        ["node-a", "node-b", "node-c", "node-new"].map(|n| {
            let mut line = queue::Line::default();
            line.turn(&leases, n, open, now, at)
        })
    };
    assert_eq!(turns(1, at), [Some(0), None, None, None]);
    assert_eq!(turns(2, at), [Some(0), Some(1), None, None]);
    assert_eq!(turns(0, at), [None; 4]);

    // node-c sees one slot open: node-a's turn. It stays open for PASS_OVER: node-a is passed
    // over, node-b's turn; PASS_OVER more: node-b too, node-c's turn.
    let mut c = queue::Line::default();
    assert_eq!(c.turn(&leases, "node-c", 1, now, at), None);
    assert_eq!(c.next_turn(), Some(at + queue::PASS_OVER));
    let just_before = at + queue::PASS_OVER - Duration::from_millis(1);
    assert_eq!(c.turn(&leases, "node-c", 1, now, just_before), None);
    let later = at + queue::PASS_OVER;
    assert_eq!(c.turn(&leases, "node-c", 1, now, later), None);
    let later = later + queue::PASS_OVER;
    assert_eq!(c.turn(&leases, "node-c", 1, now, later), Some(0));
    // No slot open: the time starts again; node-a and node-b stay passed over...
    assert_eq!(c.turn(&leases, "node-c", 0, now, later), None);
    assert_eq!(c.next_turn(), None);
    assert_eq!(c.turn(&leases, "node-c", 1, now, later), Some(0));
    // ...until node-a renews its Lease: it is back in line, ahead.
    let mut renewed = leases.clone();
    renewed[0] = waiting("node-a", "2026-12-02T05:10:00Z", "2026-12-02T05:59:30Z");
    assert_eq!(c.turn(&renewed, "node-c", 1, now, later), None);
}

#[test]
fn a_renewed_wait_keeps_its_start_and_a_wait_of_another_boot_or_node_starts_again() {
    let now = t("2026-12-02T06:00:00.5Z");
    let mine = waiting("node-a", "2026-12-02T05:10:00Z", "2026-12-02T05:50:00Z");
    let (patch, ()) = queue::wait_patch(&mine, &me(), "all", now)
        .unwrap()
        .expect("a write");
    let v = serde_json::to_value(&patch).unwrap();
    assert_eq!(
        v[0],
        json!({"op": "test", "path": "/metadata/resourceVersion", "value": "3"})
    );
    let renewed = apply(&mine, patch);
    let times = HeldTimes::of(&renewed);
    assert_eq!(times.acquired, Some(t("2026-12-02T05:10:00Z")));
    // The start is a label too, milliseconds since the epoch: the line is read by it.
    let since_label = |l: &Lease| {
        l.metadata
            .labels
            .as_ref()
            .and_then(|m| m.get(queue::SINCE_LABEL))
            .cloned()
    };
    let start = t("2026-12-02T05:10:00Z").as_millisecond().to_string();
    assert_eq!(since_label(&renewed), Some(start));
    let new = queue::new_wait(&FleetSettings::default(), "all", &me(), now);
    assert_eq!(since_label(&new), Some(now.as_millisecond().to_string()));
    assert_eq!(times.renewed, Some(now));
    assert_eq!(holder_of(&renewed), Some(me()));
    // Another boot's wait, a stale one, another node's: the wait starts now.
    for old in [
        waiting("node-a", "2026-12-02T05:10:00Z", "2026-12-02T05:50:00Z"),
        waiting("node-a", "2026-12-02T04:10:00Z", "2026-12-02T05:20:00Z"),
        waiting("node-b", "2026-12-02T05:10:00Z", "2026-12-02T05:50:00Z"),
    ]
    .into_iter()
    .enumerate()
    .map(|(i, mut l)| {
        if i == 0 {
            l.spec.as_mut().unwrap().holder_identity = Some("node-a/boot-0".into());
        }
        l
    }) {
        let (patch, ()) = queue::wait_patch(&old, &me(), "all", now).unwrap().unwrap();
        let written = apply(&old, patch);
        assert_eq!(HeldTimes::of(&written).acquired, Some(now));
        assert_eq!(
            since_label(&written),
            Some(now.as_millisecond().to_string())
        );
    }
    // The name never meets a slot's, and stays a valid object name.
    assert_eq!(
        queue::wait_name("node-a"),
        "kube-shutdown-drain-waiting.node-a"
    );
    let long = "n".repeat(253);
    assert!(queue::wait_name(&long).len() <= 253);
    assert_ne!(
        queue::wait_name(&long),
        queue::wait_name(&format!("{}m", "n".repeat(252)))
    );
}

#[test]
fn only_the_first_of_the_line_watch_the_slots_and_each_watches_the_node_just_ahead() {
    assert_eq!(
        [0, 1, 2, 3, 4, 199].map(|place| queue::in_front(place, 2)),
        [true, true, true, true, false, false]
    );
    // A group of no slots still has a front of two.
    assert!(queue::in_front(1, 0) && !queue::in_front(2, 0));
    let every = |place| queue::look_every(place, 2).as_secs();
    assert_eq!(
        [0, 1, 2, 3, 4, 22, 199].map(every),
        [5, 5, 10, 10, 15, 60, 60]
    );
    assert_eq!(queue::look_every(3, 0).as_secs(), 20);
    let now: jiff::Timestamp = "2026-05-04T10:00:00Z".parse().unwrap();
    let leases = [
        waiting("node-c", "2026-05-04T09:02:00Z", "2026-05-04T09:55:00Z"),
        waiting("node-a", "2026-05-04T09:01:00Z", "2026-05-04T09:55:00Z"),
        waiting("node-b", "2026-05-04T09:01:00Z", "2026-05-04T09:55:00Z"),
    ];
    let line = queue::order(&leases, now);
    let ahead = |me: &str| queue::ahead(&line, me).map(|w| w.node.clone());
    assert_eq!(ahead("node-a"), None);
    assert_eq!(ahead("node-b").as_deref(), Some("node-a"));
    assert_eq!(ahead("node-c").as_deref(), Some("node-b"));
    // A node not in line yet is behind its last.
    assert_eq!(ahead("node-z").as_deref(), Some("node-c"));
    assert_eq!(queue::ahead(&[], "node-z"), None);
}

/// A waiting Lease renewed far ahead of this node's clock stays in line only STALE after this
/// process first saw it so: a waiter that wrote such a time and died does not hold the line for
/// ever.
#[tokio::test(start_paused = true)]
async fn a_waiting_lease_renewed_ahead_of_the_clock_leaves_the_line_stale_after_first_seen() {
    let now: jiff::Timestamp = "2026-12-06T20:00:00Z".parse().unwrap();
    let mut ahead = waiting(
        "node-ahead-of-clock",
        "2026-12-06T19:00:00Z",
        "2026-12-07T20:00:00Z",
    );
    ahead.metadata.name = Some("waiting-ahead-of-clock-test".into());
    let in_line = |leases: &[Lease]| queue::order(leases, now).len();
    assert_eq!(in_line(std::slice::from_ref(&ahead)), 1);
    tokio::time::advance(queue::STALE - Duration::from_secs(1)).await;
    assert_eq!(in_line(std::slice::from_ref(&ahead)), 1);
    tokio::time::advance(Duration::from_secs(2)).await;
    assert_eq!(
        in_line(std::slice::from_ref(&ahead)),
        0,
        "stale once seen so for STALE"
    );
    // Written again (another renewal): a new sighting.
    ahead.spec.as_mut().unwrap().renew_time =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
            "2026-12-07T21:00:00Z".parse().unwrap(),
        ));
    assert_eq!(in_line(std::slice::from_ref(&ahead)), 1);
}

/// A node far back looks for the node just ahead in spans of its own wait's last 0.1, 0.4, 1.6
/// ... seconds, then in the whole line ahead; it counts the nodes ahead of it in what it read, the
/// waiters it passed over left out.
#[test]
fn the_line_near_a_node_is_read_in_growing_spans_and_counted() {
    let spans: Vec<Option<u64>> = queue::windows().collect();
    assert_eq!(spans[..4], [Some(100), Some(400), Some(1600), Some(6400)]);
    assert_eq!(spans.last(), Some(&None));
    // The last span reaches back further than a wait lasts (a Lease not renewed for 30 min is
    // out of line; a node waits days at most): before the whole line is read.
    assert!(spans.len() <= 14, "{spans:?}");
    assert!(spans[spans.len() - 2] >= Some(3 * 86_400_000), "{spans:?}");
    let leases = [
        waiting("node-a", "2026-12-02T05:10:00Z", "2026-12-02T05:50:00Z"),
        waiting("node-b", "2026-12-02T05:20:00Z", "2026-12-02T05:50:00Z"),
        waiting("node-d", "2026-12-02T05:30:00Z", "2026-12-02T05:50:00Z"),
    ];
    let now = t("2026-12-02T06:00:00Z");
    let none = |_: &queue::Waiter| false;
    assert_eq!(queue::count_ahead(&leases, "node-d", none, now), 2);
    assert_eq!(queue::count_ahead(&leases, "node-a", none, now), 0);
    // Not in what it read (before its own Lease is written): behind all of it.
    assert_eq!(queue::count_ahead(&leases, "node-c", none, now), 3);
    let a_passed = |w: &queue::Waiter| w.node == "node-a";
    assert_eq!(queue::count_ahead(&leases, "node-d", a_passed, now), 1);
}
