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
