//! Tests of the marker and the patch builders (`marker.rs`): each built patch applied to a node.

use super::*;
use crate::api::guarded::FIELD_MANAGER;
use crate::shutdown_kind::ShutdownKind;

const BOOT: &str = "0b0e1d00-0000-4000-8000-000000000001";
const T0: &str = "2026-11-30T07:00:00Z";

/// A node; cordoned ones have `spec.unschedulable` owned by our field manager.
fn node(taints: Value, unschedulable: bool, marker: Option<&Marker>) -> Node {
    node_cordoned_by(taints, unschedulable.then_some(FIELD_MANAGER), marker)
}

fn owner_entry(manager: &str) -> Value {
    json!({"manager": manager, "operation": "Update", "apiVersion": "v1",
           "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:unschedulable": {}}}})
}

/// A node cordoned by `manager` (per its managedFields), or not cordoned.
fn node_cordoned_by(taints: Value, manager: Option<&str>, marker: Option<&Marker>) -> Node {
    let mut n = json!({"metadata": {"name": "n", "resourceVersion": "7"}, "spec": {}});
    if !taints.is_null() {
        n["spec"]["taints"] = taints;
    }
    if let Some(manager) = manager {
        n["spec"]["unschedulable"] = json!(true);
        n["metadata"]["managedFields"] = json!([owner_entry(manager)]);
    }
    if let Some(m) = marker {
        n["metadata"]["annotations"] =
            json!({MARKER_ANNOTATION: serde_json::to_string(m).unwrap()});
    }
    serde_json::from_value(n).unwrap()
}

fn ours() -> Taint {
    Taint {
        key: "k/shutdown".into(),
        value: Some("true".into()),
        effect: "PreferNoSchedule".into(),
        time_added: None,
    }
}

fn input(add_taint: bool) -> PrepareInput {
    PrepareInput {
        why: "w".into(),
        boot_id: BOOT.into(),
        time: T0.into(),
        taint: Some(ours()),
        taint_key: "k/shutdown".into(),
        add_taint,
        kind: None,
        exclude_from_load_balancers: false,
    }
}

/// A marker of ours as written at [`T0`] by [`BOOT`].
fn marker(cordoned: bool, taints: Vec<MarkerTaint>) -> Marker {
    Marker {
        was_unschedulable: false,
        taint_was_present: false,
        boot_id: BOOT.into(),
        time: T0.into(),
        why: "w".into(),
        cordoned,
        cordoned_at: cordoned.then(|| T0.into()),
        version: MARKER_VERSION,
        taints,
        kind: None,
        excluded_from_load_balancers: false,
    }
}

fn with_annotation(text: &str) -> Node {
    let mut n = node(Value::Null, false, None);
    n.metadata.annotations = Some([(MARKER_ANNOTATION.to_string(), text.to_string())].into());
    n
}

fn ops(p: &json_patch::Patch) -> Vec<Value> {
    serde_json::to_value(p).unwrap().as_array().unwrap().clone()
}

/// Applies a patch as the server would (the `test` included).
fn apply(n: &Node, p: &json_patch::Patch) -> Node {
    let mut v = serde_json::to_value(n).unwrap();
    json_patch::patch(&mut v, p).expect("the patch applies to the node it was built from");
    serde_json::from_value(v).unwrap()
}

#[test]
fn the_prepare_patch_is_guarded_and_records_each_change_it_makes() {
    let other = json!({"key": "other", "effect": "NoSchedule"});
    let n = node(json!([other]), false, None);
    let (p, plan) = prepare_patch(&n, "n", &input(true)).unwrap();
    let o = ops(&p);
    assert_eq!(
        o[0],
        json!({"op": "test", "path": "/metadata/resourceVersion", "value": "7"})
    );
    assert!(plan.cordons && plan.taints);
    assert!(plan.marker.cordoned && !plan.marker.was_unschedulable);
    assert_eq!(plan.marker.taints, vec![MarkerTaint::of(&ours())]);
    let after = apply(&n, &p);
    assert!(is_unschedulable(&after));
    assert_eq!(taints(&after).len(), 2, "appended; the other taint stays");
    assert_eq!(marker_of(&after, "n").unwrap(), Some(plan.marker));
    // The guard holds: a node changed since (another resourceVersion) refuses the patch.
    let mut changed = serde_json::to_value(&n).unwrap();
    changed["metadata"]["resourceVersion"] = json!("8");
    assert!(json_patch::patch(&mut changed, &p).is_err());
}

#[test]
fn an_admin_cordon_or_taint_is_never_recorded_as_ours() {
    let n = node(
        json!([{"key": "k/shutdown", "effect": "PreferNoSchedule", "value": "admin"}]),
        true,
        None,
    );
    let (p, plan) = prepare_patch(&n, "n", &input(true)).unwrap();
    assert!(!plan.cordons && !plan.taints);
    assert!(!plan.marker.cordoned && plan.marker.taints.is_empty());
    assert!(plan.marker.was_unschedulable && plan.marker.taint_was_present);
    assert_eq!(ops(&p).len(), 2, "the guard and the marker only");
}

#[test]
fn without_taint_rights_the_patch_cordons_and_records_no_taint() {
    let n = node(Value::Null, false, None);
    let (p, plan) = prepare_patch(&n, "n", &input(false)).unwrap();
    assert!(plan.cordons && !plan.taints && plan.marker.taints.is_empty());
    assert!(!serde_json::to_string(&p).unwrap().contains("/spec/taints"));
    assert!(is_unschedulable(&apply(&n, &p)));
}

#[test]
fn a_second_prepare_keeps_the_first_record_and_adds_a_new_taint() {
    let first = Marker {
        boot_id: "0b0e1d00-0000-4000-8000-0000000000aa".into(),
        why: "drain".into(),
        taints: vec![MarkerTaint {
            key: "kube-shutdown-drain/old".into(),
            effect: "NoSchedule".into(),
        }],
        ..marker(true, vec![])
    };
    let n = node(
        json!([{"key": "kube-shutdown-drain/old", "effect": "NoSchedule"}]),
        true,
        Some(&first),
    );
    let (p, plan) = prepare_patch(&n, "n", &input(true)).unwrap();
    assert!(plan.marker.cordoned, "still ours");
    assert_eq!(plan.marker.boot_id, BOOT);
    assert_eq!(plan.marker.taints.len(), 2);
    let after = apply(&n, &p);
    assert_eq!(taints(&after).len(), 2);
}

#[test]
fn the_restore_patch_undoes_exactly_what_the_marker_lists() {
    let marker = marker(true, vec![MarkerTaint::of(&ours())]);
    let mine = serde_json::to_value(ours()).unwrap();
    let same_key_other_effect = json!({"key": "k/shutdown", "effect": "NoExecute"});
    let other = json!({"key": "other", "effect": "NoSchedule"});
    let n = node(
        json!([same_key_other_effect, mine, other]),
        true,
        Some(&marker),
    );
    let (p, plan) = restore_patch(&n, "n", &marker, "k/shutdown", true).unwrap();
    assert!(plan.uncordons && plan.keeps.is_empty() && plan.removes.len() == 1);
    assert_eq!(
        ops(&p)[1],
        json!({"op": "remove", "path": "/spec/taints/1"})
    );
    let after = apply(&n, &p);
    assert!(!is_unschedulable(&after));
    assert_eq!(taints(&after).len(), 2, "only our key and effect went");
    assert_eq!(marker_of(&after, "n").unwrap(), None);

    // Without taint rights: the cordon part done, the taint kept in the marker.
    let (p, plan) = restore_patch(&n, "n", &marker, "k/shutdown", false).unwrap();
    assert!(plan.uncordons && plan.keeps.len() == 1);
    let after = apply(&n, &p);
    let left = marker_of(&after, "n").unwrap().unwrap();
    assert!(!left.cordoned && left.taints == vec![MarkerTaint::of(&ours())]);

    // Someone else uncordoned: the cordon is left alone.
    let n = node(Value::Null, false, Some(&marker));
    let (_, plan) = restore_patch(&n, "n", &marker, "k/shutdown", true).unwrap();
    assert!(!plan.uncordons && plan.left_cordon_alone && plan.removes.is_empty());
}

#[test]
fn an_old_marker_reads_as_nothing_of_ours() {
    let old = r#"{"was_unschedulable":false,"taint_was_present":false,"boot_id":"b","time":"t","why":"w","taint_key":"k","taint_effect":"NoSchedule"}"#;
    let m: Marker = serde_json::from_str(old).unwrap();
    assert!(!m.cordoned && m.taints.is_empty());
    assert!(!m.excluded_from_load_balancers && m.kind.is_none());
}

#[test]
fn unparsable_oversized_misshapen_or_impossible_markers_are_foreign() {
    let good = serde_json::to_string(&marker(true, vec![])).unwrap();
    assert_eq!(
        read_marker(&with_annotation(&good)),
        MarkerRead::Ours(marker(true, vec![]))
    );
    let huge = format!(
        "{},\"pad\":\"{}\"}}",
        &good[..good.len() - 1],
        "x".repeat(5000)
    );
    let version = good.replace("\"version\":1", "\"version\":7");
    let boot = good.replace(BOOT, "../../etc");
    let cases = [
        ("{not json", "not a marker of ours"),
        ("[1,2]", "not a marker of ours"),
        (r#"{"cordoned":true}"#, "not a marker of ours"),
        (huge.as_str(), "more than the 4096"),
        (version.as_str(), "marker version 7"),
        (boot.as_str(), "is not a boot ID"),
    ];
    for (text, why) in cases {
        match read_marker(&with_annotation(text)) {
            MarkerRead::Foreign(reason) => {
                let reason = reason.to_string();
                assert!(reason.contains(why), "{text:.40}: {reason}")
            }
            other => panic!("{text:.40} read as {other:?}"),
        }
        assert!(marker_of(&with_annotation(text), "n").is_err());
    }
}

#[test]
fn prepare_replaces_a_foreign_marker_and_still_taints_and_cordons() {
    let n = with_annotation("{not json");
    let (p, plan) = prepare_patch(&n, "n", &input(true)).unwrap();
    assert!(plan.cordons && plan.taints);
    assert!(
        plan.replaced_foreign
            .unwrap()
            .contains("not a marker of ours")
    );
    let after = apply(&n, &p);
    assert!(is_unschedulable(&after));
    assert_eq!(marker_of(&after, "n").unwrap(), Some(plan.marker));
}

#[test]
fn clearing_a_foreign_marker_removes_only_the_annotation() {
    let mut n = with_annotation("{not json");
    n.spec.as_mut().unwrap().unschedulable = Some(true);
    n.spec.as_mut().unwrap().taints = Some(vec![ours()]);
    let (p, plan) = clear_foreign_patch(&n, "n", "garbage").unwrap();
    assert_eq!(plan.foreign.as_deref(), Some("garbage"));
    assert_eq!(ops(&p).len(), 2, "the guard and the annotation's removal");
    let after = apply(&n, &p);
    assert!(is_unschedulable(&after) && taints(&after).len() == 1);
    assert_eq!(read_marker(&after), MarkerRead::Absent);
}

#[test]
fn restore_never_removes_a_taint_key_that_is_not_ours() {
    let listed = vec![
        MarkerTaint {
            key: "admin/maintenance".into(),
            effect: "NoExecute".into(),
        },
        MarkerTaint {
            key: "node.kubernetes.io/unreachable".into(),
            effect: "NoSchedule".into(),
        },
        MarkerTaint {
            key: "kube-shutdown-drain/extra".into(),
            effect: "NoSchedule".into(),
        },
    ];
    let m = marker(false, listed);
    let n = node(
        json!([
            {"key": "admin/maintenance", "effect": "NoExecute"},
            {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule"},
            {"key": "kube-shutdown-drain/extra", "effect": "NoSchedule"}
        ]),
        false,
        Some(&m),
    );
    let (p, plan) = restore_patch(&n, "n", &m, "k/shutdown", true).unwrap();
    assert_eq!(plan.refused.len(), 2);
    assert_eq!(plan.removes, vec![m.taints[2].clone()]);
    let left: Vec<String> = taints(&apply(&n, &p)).into_iter().map(|t| t.key).collect();
    assert_eq!(
        left,
        ["admin/maintenance", "node.kubernetes.io/unreachable"]
    );
}

#[test]
fn a_cordon_is_ours_only_while_our_field_manager_owns_it() {
    let m = marker(true, vec![]);
    let n = node_cordoned_by(Value::Null, Some(FIELD_MANAGER), Some(&m));
    assert_eq!(cordon_is_ours(&n), Ok(()));
    let n = node_cordoned_by(Value::Null, Some("kubectl"), Some(&m));
    let why = cordon_is_ours(&n).unwrap_err().to_string();
    assert!(why.contains("owned by field manager kubectl"), "{why}");
    let (_, plan) = restore_patch(&n, "n", &m, "k/shutdown", true).unwrap();
    assert!(!plan.uncordons && plan.cordon_kept.is_some());
}

#[test]
fn a_cordon_we_share_with_another_manager_is_not_ours_alone() {
    let m = marker(true, vec![]);
    let mut n = node_cordoned_by(Value::Null, Some(FIELD_MANAGER), Some(&m));
    let field = json!({"f:spec": {"f:unschedulable": {}}});
    n.metadata.managed_fields.get_or_insert_default().push(
        serde_json::from_value(json!({"manager": "kubectl", "operation": "Apply",
            "fieldsType": "FieldsV1", "fieldsV1": field}))
        .unwrap(),
    );
    let why = cordon_is_ours(&n).unwrap_err().to_string();
    assert!(
        why.contains("also owned by field manager kubectl (Apply)"),
        "{why}"
    );
    let (_, plan) = restore_patch(&n, "n", &m, "k/shutdown", true).unwrap();
    assert!(!plan.uncordons && plan.cordon_kept == Some(why));
    // An entry of another operation under our name is not ours either.
    let mut n = node_cordoned_by(Value::Null, Some("kubectl"), Some(&m));
    for e in n.metadata.managed_fields.as_mut().unwrap() {
        e.manager = Some(FIELD_MANAGER.into());
        e.operation = Some("Apply".into());
    }
    assert!(cordon_is_ours(&n).is_err());
}

#[test]
fn without_managed_fields_no_cordon_is_ours_whatever_the_lifecycle_taint_says() {
    // A marker whose `cordoned_at` equals the lifecycle taint's `timeAdded` is what anyone who
    // reads the Node can write: it proves nothing.
    let m = marker(true, vec![]);
    let at = m.cordoned_at.clone().unwrap();
    let mut n = node(
        json!([{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule", "timeAdded": at}]),
        true,
        Some(&m),
    );
    n.metadata.managed_fields = None;
    let why = cordon_is_ours(&n).unwrap_err().to_string();
    assert!(why.contains("cannot be told"), "{why}");
    let (_, plan) = restore_patch(&n, "n", &m, "k/shutdown", true).unwrap();
    assert!(!plan.uncordons && plan.cordon_kept.is_some());
}

#[test]
fn prepare_drops_an_earlier_cordon_that_is_no_longer_ours() {
    // Drained once; an admin uncordoned and removed our taint by hand; days later kubectl
    // cordons: the next prepare must not carry "we cordoned" over to that cordon.
    let stale = marker(true, vec![MarkerTaint::of(&ours())]);
    let n = node_cordoned_by(Value::Null, Some("kubectl"), Some(&stale));
    let (_, plan) = prepare_patch(&n, "n", &input(true)).unwrap();
    assert!(!plan.cordons && !plan.marker.cordoned && plan.marker.cordoned_at.is_none());
    assert!(plan.marker.was_unschedulable);
    assert_eq!(
        plan.marker.taints,
        vec![MarkerTaint::of(&ours())],
        "added anew"
    );
}

#[test]
fn the_boot_start_is_the_btime_line_of_proc_stat() {
    let stat = "cpu  1 2 3\nintr 5\nbtime 1764480000\nprocesses 9\n";
    assert_eq!(
        super::super::btime(stat),
        Some(jiff::Timestamp::from_second(1_764_480_000).unwrap())
    );
    assert_eq!(super::super::btime("cpu 1\n"), None);
    assert!(super::super::boot_started().unwrap() < jiff::Timestamp::now());
}

#[test]
fn the_kind_of_shutdown_is_recorded_and_markers_without_it_stay_readable() {
    let soft = PrepareInput {
        kind: Some(ShutdownKind::SoftReboot),
        ..input(true)
    };
    let (p, plan) = prepare_patch(&node(json!([]), false, None), "n", &soft).unwrap();
    assert_eq!(plan.marker.kind, Some(ShutdownKind::SoftReboot));
    let written = marker_of(&apply(&node(json!([]), false, None), &p), "n")
        .unwrap()
        .expect("a marker");
    assert_eq!(written.kind, Some(ShutdownKind::SoftReboot));
    // Written as earlier versions wrote it, so their markers and this one read alike.
    let text = serde_json::to_string(&written).unwrap();
    assert!(text.contains(r#""kind":"soft-reboot""#), "{text}");
    let power_off: Marker =
        serde_json::from_str(&text.replace("soft-reboot", "power-off")).unwrap();
    assert_eq!(power_off.kind, Some(ShutdownKind::PowerOff));
    assert_eq!(
        written.version, MARKER_VERSION,
        "an optional field: still version 1"
    );
    // A marker of an earlier build has no `kind`: read as ours, kind not recorded.
    let old = serde_json::to_value(marker(true, vec![])).unwrap();
    assert!(old.get("kind").is_none(), "an absent kind is not written");
    let read = check_marker(&old.to_string()).unwrap();
    assert_eq!(read.kind, None);
    assert!(read.cordoned);
    // A prepare by hand records no kind.
    let (_, plan) = prepare_patch(&node(json!([]), false, None), "n", &input(true)).unwrap();
    assert_eq!(plan.marker.kind, None);
}

/// A managedFields entry of `manager` (operation Update) owning `fields`.
fn entry(
    manager: &str,
    fields: Value,
) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::ManagedFieldsEntry {
    serde_json::from_value(
        json!({"manager": manager, "operation": "Update", "apiVersion": "v1",
        "fieldsType": "FieldsV1", "fieldsV1": fields}),
    )
    .unwrap()
}

fn owned_by(n: &mut Node, manager: &str, fields: Value) {
    n.metadata
        .managed_fields
        .get_or_insert_default()
        .push(entry(manager, fields));
}

/// The marker's annotation as managedFields name it.
fn marker_field() -> Value {
    json!({"f:metadata": {"f:annotations": {"f:kube-shutdown-drain/marker": {}}}})
}

#[test]
fn restore_removes_every_copy_of_a_listed_taint() {
    let m = marker(false, vec![MarkerTaint::of(&ours())]);
    let copy =
        |value: &str| json!({"key": "k/shutdown", "effect": "PreferNoSchedule", "value": value});
    let other = json!({"key": "other", "effect": "NoSchedule"});
    let n = node(json!([copy("a"), other, copy("b")]), false, Some(&m));
    let (p, plan) = restore_patch(&n, "n", &m, "k/shutdown", true).unwrap();
    assert_eq!(plan.removes, vec![MarkerTaint::of(&ours())]);
    let left: Vec<String> = taints(&apply(&n, &p)).into_iter().map(|t| t.key).collect();
    assert_eq!(left, ["other"], "both copies went");

    // A marker listing the taint twice removes it once, and nothing else.
    let twice = marker(
        false,
        vec![MarkerTaint::of(&ours()), MarkerTaint::of(&ours())],
    );
    let n = node(json!([copy("a"), other]), false, Some(&twice));
    let (p, plan) = restore_patch(&n, "n", &twice, "k/shutdown", true).unwrap();
    assert_eq!(plan.removes.len(), 1);
    let left: Vec<String> = taints(&apply(&n, &p)).into_iter().map(|t| t.key).collect();
    assert_eq!(left, ["other"]);
}

#[test]
fn a_marker_our_manager_wrote_says_which_taints_go_after_the_key_changed() {
    // Prepared with `[taint] key = "example.com/maintenance"`; the key is changed before the
    // restore. The marker, written by our field manager alone, lists the old key's taint.
    let old = MarkerTaint {
        key: "example.com/maintenance".into(),
        effect: "NoSchedule".into(),
    };
    let m = marker(false, vec![old.clone()]);
    let mut n = node(
        json!([{"key": "example.com/maintenance", "effect": "NoSchedule"}]),
        false,
        Some(&m),
    );
    owned_by(&mut n, FIELD_MANAGER, marker_field());
    assert_eq!(marker_is_ours(&n), Ok(()));
    let (p, plan) = restore_patch(&n, "n", &m, "k/shutdown", true).unwrap();
    assert_eq!(plan.removes, vec![old.clone()]);
    assert!(plan.refused.is_empty());
    let after = apply(&n, &p);
    assert!(taints(&after).is_empty() && marker_of(&after, "n").unwrap().is_none());
    // A later prepare under the new key keeps the old record while the taint is there.
    let (_, plan) = prepare_patch(&n, "n", &input(true)).unwrap();
    assert!(
        plan.marker.taints.contains(&old),
        "{:?}",
        plan.marker.taints
    );

    // The same marker rewritten by someone else (`kubectl annotate`): today's keys only.
    let mut n = node(
        json!([{"key": "example.com/maintenance", "effect": "NoSchedule"}]),
        false,
        Some(&m),
    );
    owned_by(&mut n, FIELD_MANAGER, marker_field());
    owned_by(&mut n, "kubectl-annotate", marker_field());
    let why = marker_is_ours(&n).unwrap_err().to_string();
    assert!(why.contains("kubectl-annotate"), "{why}");
    let (_, plan) = restore_patch(&n, "n", &m, "k/shutdown", true).unwrap();
    assert_eq!(plan.refused, vec![old.clone()]);
    assert!(plan.removes.is_empty());
    let (_, plan) = prepare_patch(&n, "n", &input(true)).unwrap();
    assert!(!plan.marker.taints.contains(&old));
}

/// A node with no marker: cordoned and tainted, the cordon owned by `cordon`, the taint list by
/// `taints` (our key's taint, an admin's, the lifecycle controller's).
fn unmarked(cordon: Option<&str>, taints: &str) -> Node {
    let mut n = node_cordoned_by(
        json!([
            {"key": "admin/maintenance", "effect": "NoSchedule"},
            {"key": "k/shutdown", "effect": "PreferNoSchedule"},
            {"key": "kube-shutdown-drain/daemonsets", "effect": "NoSchedule"}
        ]),
        cordon,
        None,
    );
    owned_by(&mut n, taints, json!({"f:spec": {"f:taints": {}}}));
    n
}

#[test]
fn without_a_marker_restore_undoes_what_managed_fields_prove_ours() {
    let n = unmarked(Some(FIELD_MANAGER), FIELD_MANAGER);
    let (p, plan) = unrecorded_patch(&n, "node-a", "k/shutdown").unwrap();
    let p = p.expect("a write");
    assert!(plan.uncordons && plan.unproven.is_empty(), "{plan:?}");
    assert_eq!(
        plan.removes
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        [
            "k/shutdown:PreferNoSchedule",
            "kube-shutdown-drain/daemonsets:NoSchedule"
        ]
    );
    assert_eq!(ops(&p)[0]["op"], "test", "guarded");
    let after = apply(&n, &p);
    assert!(!is_unschedulable(&after));
    let left: Vec<String> = taints(&after).into_iter().map(|t| t.key).collect();
    assert_eq!(left, ["admin/maintenance"], "only our keys went");
}

#[test]
fn without_a_marker_an_admin_cordon_stays_and_unproven_taints_are_named_with_the_command() {
    // kubectl cordoned; kubectl-taint wrote the taint list last.
    let n = unmarked(Some("kubectl"), "kubectl-taint");
    let (p, plan) = unrecorded_patch(&n, "node-a", "k/shutdown").unwrap();
    assert!(p.is_none(), "nothing is provably ours: no write");
    assert!(!plan.uncordons && plan.removes.is_empty());
    let said: Vec<String> = plan.unproven.iter().map(ToString::to_string).collect();
    assert_eq!(
        said.len(),
        2,
        "our two keys, not the admin's cordon: {said:?}"
    );
    assert!(
        said[0].starts_with("taint k/shutdown:PreferNoSchedule stays on node node-a (")
            && said[0].contains("kubectl-taint")
            && said[0].ends_with(
                "remove it with `kubectl taint nodes node-a k/shutdown:PreferNoSchedule-`"
            ),
        "{}",
        said[0]
    );
    // The cordon we share with an admin's apply stays, and is said with its command.
    let mut n = unmarked(Some(FIELD_MANAGER), FIELD_MANAGER);
    owned_by(
        &mut n,
        "kubectl",
        json!({"f:spec": {"f:unschedulable": {}}}),
    );
    let (p, plan) = unrecorded_patch(&n, "node-a", "k/shutdown").unwrap();
    let after = apply(&n, &p.expect("the taints go"));
    assert!(is_unschedulable(&after) && !plan.uncordons);
    assert_eq!(plan.unproven.len(), 1);
    assert_eq!(plan.unproven[0].what, "the cordon");
    assert_eq!(plan.unproven[0].command, "kubectl uncordon node-a");
    // A clean node: nothing to write, nothing to say.
    let (p, plan) =
        unrecorded_patch(&node(json!([]), false, None), "node-a", "k/shutdown").unwrap();
    assert!(p.is_none() && plan == RestorePlan::default());
}
