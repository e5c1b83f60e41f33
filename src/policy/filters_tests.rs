//! Tests of the pod filters (`filters.rs`): one verdict per pod, in the documented order.

use super::*;
use crate::config::Settings;
use std::path::Path;

fn settings(extra: &str) -> Settings {
    let text = format!("node_name = \"n\"\n{extra}");
    Settings::from_str_at(Path::new("/t.toml"), &text).unwrap()
}

fn pod(json: serde_json::Value) -> Pod {
    let mut base = serde_json::json!({
        "metadata": {"name": "p", "namespace": "work", "uid": "u1",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "r", "controller": true}]},
        "spec": {"nodeName": "n", "containers": [{"name": "c"}]},
        "status": {"phase": "Running"}
    });
    merge(&mut base, json);
    serde_json::from_value(base).unwrap()
}

fn merge(a: &mut serde_json::Value, b: serde_json::Value) {
    match (a, b) {
        (serde_json::Value::Object(a), serde_json::Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(serde_json::Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

fn tol(
    key: Option<&str>,
    op: Option<&str>,
    value: Option<&str>,
    effect: Option<&str>,
) -> Toleration {
    Toleration {
        key: key.map(Into::into),
        operator: op.map(Into::into),
        value: value.map(Into::into),
        effect: effect.map(Into::into),
        toleration_seconds: None,
    }
}

#[test]
fn toleration_semantics() {
    let k = Some(CORDON_TAINT_KEY);
    let cases = [
        (
            "exact Exists",
            tol(k, Some("Exists"), None, Some("NoSchedule")),
            true,
        ),
        (
            "Exists any effect",
            tol(k, Some("Exists"), None, None),
            true,
        ),
        (
            "empty effect string",
            tol(k, Some("Exists"), None, Some("")),
            true,
        ),
        (
            "empty key Exists tolerates everything",
            tol(None, Some("Exists"), None, None),
            true,
        ),
        (
            "empty key Exists, other effect",
            tol(None, Some("Exists"), None, Some("NoExecute")),
            false,
        ),
        (
            "other effect",
            tol(k, Some("Exists"), None, Some("NoExecute")),
            false,
        ),
        (
            "other key",
            tol(
                Some("node.kubernetes.io/not-ready"),
                Some("Exists"),
                None,
                None,
            ),
            false,
        ),
        (
            "Equal with empty value",
            tol(k, Some("Equal"), Some(""), Some("NoSchedule")),
            true,
        ),
        (
            "no operator means Equal",
            tol(k, None, None, Some("NoSchedule")),
            true,
        ),
        (
            "Equal needs the value",
            tol(k, Some("Equal"), Some("true"), Some("NoSchedule")),
            false,
        ),
        ("unknown operator", tol(k, Some("Gt"), None, None), false),
    ];
    for (what, t, want) in cases {
        assert_eq!(
            tolerates(&t, CORDON_TAINT_KEY, "", "NoSchedule"),
            want,
            "{what}"
        );
    }
    // `Equal` compares with the taint's value.
    assert!(tolerates(
        &tol(Some("k"), Some("Equal"), Some("v"), None),
        "k",
        "v",
        "NoSchedule"
    ));
}

/// A pod without an owner: unreplicated.
fn no_owner() -> serde_json::Value {
    serde_json::json!({"metadata": {"ownerReferences": []}})
}

/// The tolerations Portworx gives its pods: they tolerate the cordon.
fn portworx_tolerations() -> serde_json::Value {
    serde_json::json!({"spec": {"tolerations": [
        {"effect": "NoExecute", "key": "node.kubernetes.io/not-ready", "operator": "Exists"},
        {"effect": "NoSchedule", "key": "node.kubernetes.io/unschedulable", "operator": "Exists"}
    ]}})
}

/// A pod with an emptyDir volume.
fn emptydir() -> serde_json::Value {
    serde_json::json!({"spec": {"volumes": [{"name": "scratch", "emptyDir": {}}]}})
}

/// Three rules: app=db drains at order 50, app=batch waits to complete, namespace monitoring
/// is skipped.
const RULES: &str = "[[rules]]\nselector = \"app=db\"\naction = \"drain\"\norder = 50\n\
                     [[rules]]\nselector = \"app=batch\"\naction = \"wait-completed\"\n\
                     [[rules]]\nnamespaces = [\"monitoring\"]\naction = \"skip\"\n";

/// A row of the verdict tables: what, the pod's patch, the config, the expected action, reason
/// and order.
type Row<'a> = (
    &'a str,
    serde_json::Value,
    &'a str,
    Action,
    Reason,
    Option<i32>,
);

/// One row per kind of pod the filters know before any setting: replicated, by priority, terminating, a DaemonSet's, a mirror pod.
#[test]
fn what_a_pod_is_decides_its_verdict_first() {
    use serde_json::json;
    verdicts_as_each_row_says(vec![
        (
            "plain replicated pod",
            json!({}),
            "",
            Action::Evict,
            Reason::Default,
            Some(0),
        ),
        (
            "priority orders",
            json!({"spec": {"priority": 1000}}),
            "",
            Action::Evict,
            Reason::Default,
            Some(1000),
        ),
        (
            "terminating",
            json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}),
            "",
            Action::Wait,
            Reason::Terminating,
            None,
        ),
        (
            "terminating beats daemonset",
            json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z", "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "d", "controller": true}]}}),
            "",
            Action::Wait,
            Reason::Terminating,
            None,
        ),
        (
            "daemonset",
            json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "d", "controller": true}]}}),
            "",
            Action::Skip,
            Reason::DaemonSet,
            None,
        ),
        (
            "daemonset owner that is not the controller",
            json!({"metadata": {"ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "d"}]}}),
            "",
            Action::Evict,
            Reason::Unreplicated,
            Some(0),
        ),
        (
            "mirror",
            json!({"metadata": {"annotations": {MIRROR_ANNOTATION: "abc"}, "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "x", "controller": true}]}}),
            "",
            Action::Skip,
            Reason::Mirror,
            None,
        ),
    ]);
}

/// One row per skip the settings and the pod's labels ask for.
#[test]
fn tolerations_namespaces_selectors_and_the_capi_label_skip_or_wait() {
    use serde_json::json;
    verdicts_as_each_row_says(vec![
        (
            "tolerates cordon (Portworx)",
            portworx_tolerations(),
            "",
            Action::Skip,
            Reason::ToleratesCordon,
            None,
        ),
        (
            "tolerates cordon, filter off",
            portworx_tolerations(),
            "[filters]\nskip_tolerating_cordon = false",
            Action::Evict,
            Reason::Default,
            Some(0),
        ),
        (
            "tolerates everything",
            json!({"spec": {"tolerations": [{"operator": "Exists"}]}}),
            "",
            Action::Skip,
            Reason::ToleratesCordon,
            None,
        ),
        (
            "skip namespace",
            json!({}),
            "[filters]\nskip_namespaces = [\"work\"]",
            Action::Skip,
            Reason::SkipNamespace,
            None,
        ),
        (
            "skip selector",
            json!({"metadata": {"labels": {"drain": "skip"}}}),
            "[filters]\nskip_selector = \"drain=skip\"",
            Action::Skip,
            Reason::SkipSelector,
            None,
        ),
        (
            "skip selector no match",
            json!({"metadata": {"labels": {"drain": "yes"}}}),
            "[filters]\nskip_selector = \"drain=skip\"",
            Action::Evict,
            Reason::Default,
            Some(0),
        ),
        (
            "capi skip",
            json!({"metadata": {"labels": {CAPI_DRAIN_LABEL: "skip"}}}),
            "",
            Action::Skip,
            Reason::CapiDrainLabel,
            None,
        ),
        (
            "capi wait-completed",
            json!({"metadata": {"labels": {CAPI_DRAIN_LABEL: "wait-completed"}}}),
            "",
            Action::Wait,
            Reason::CapiDrainLabel,
            None,
        ),
        (
            "capi label ignored when off",
            json!({"metadata": {"labels": {CAPI_DRAIN_LABEL: "skip"}}}),
            "[filters]\nhonour_capi_drain_label = false",
            Action::Evict,
            Reason::Default,
            Some(0),
        ),
    ]);
}

/// One row per rule case: order, action, the namespace a rule names, and none matching.
#[test]
fn rules_decide_before_the_pod_policies() {
    use serde_json::json;
    let rule_and_unreplicated_skip = format!("{RULES}[filters]\nunreplicated = \"skip\"");
    verdicts_as_each_row_says(vec![
        (
            "rule drain order",
            json!({"metadata": {"labels": {"app": "db"}}}),
            RULES,
            Action::Evict,
            Reason::Rule,
            Some(50),
        ),
        (
            "rule drain beats unreplicated skip",
            json!({"metadata": {"labels": {"app": "db"}, "ownerReferences": []}}),
            &rule_and_unreplicated_skip,
            Action::Evict,
            Reason::Rule,
            Some(50),
        ),
        (
            "rule wait-completed",
            json!({"metadata": {"labels": {"app": "batch"}}}),
            RULES,
            Action::Wait,
            Reason::Rule,
            None,
        ),
        (
            "rule skip by namespace",
            json!({"metadata": {"namespace": "monitoring"}}),
            RULES,
            Action::Skip,
            Reason::Rule,
            None,
        ),
        (
            "no rule matches",
            json!({"metadata": {"labels": {"app": "web"}}}),
            RULES,
            Action::Evict,
            Reason::Default,
            Some(0),
        ),
    ]);
}

/// One row per pod policy: completed, emptyDir and unreplicated pods, by default and as set.
#[test]
fn completed_emptydir_and_unreplicated_pods_follow_their_policies() {
    use serde_json::json;
    verdicts_as_each_row_says(vec![
        (
            "completed",
            json!({"status": {"phase": "Succeeded"}}),
            "",
            Action::Skip,
            Reason::Completed,
            None,
        ),
        (
            "failed counts as completed",
            json!({"status": {"phase": "Failed"}}),
            "",
            Action::Skip,
            Reason::Completed,
            None,
        ),
        (
            "completed, policy evict",
            json!({"status": {"phase": "Succeeded"}}),
            "[filters]\ncompleted = \"evict\"",
            Action::Evict,
            Reason::Completed,
            Some(0),
        ),
        (
            "emptydir evicts by default",
            emptydir(),
            "",
            Action::Evict,
            Reason::EmptyDir,
            Some(0),
        ),
        (
            "emptydir skip",
            emptydir(),
            "[filters]\nemptydir = \"skip\"",
            Action::Skip,
            Reason::EmptyDir,
            None,
        ),
        (
            "unreplicated evicts by default",
            no_owner(),
            "",
            Action::Evict,
            Reason::Unreplicated,
            Some(0),
        ),
        (
            "unreplicated skip",
            no_owner(),
            "[filters]\nunreplicated = \"skip\"",
            Action::Skip,
            Reason::Unreplicated,
            None,
        ),
        (
            "emptydir and unreplicated, unreplicated skip",
            {
                let mut v = emptydir();
                merge(&mut v, no_owner());
                v
            },
            "[filters]\nunreplicated = \"skip\"",
            Action::Skip,
            Reason::Unreplicated,
            None,
        ),
    ]);
}

/// Checks each row's verdict.
fn verdicts_as_each_row_says(cases: Vec<Row>) {
    for (what, patch, config, action, reason, order) in cases {
        let v = verdict(&settings(config), &pod(patch));
        assert_eq!(
            v,
            Verdict {
                action,
                reason,
                order
            },
            "{what}"
        );
    }
}

/// The last stage's order (`daemonsets = "stop-last"`): DaemonSet pods by priority, the
/// node-critical class last whatever its resolved priority; none for pods it leaves.
#[test]
fn the_last_stage_orders_daemonset_pods_and_leaves_what_would_run_on() {
    let stop_last = settings("[drain]\ndaemonsets = \"stop-last\"\n");
    let ds = |spec: serde_json::Value| {
        let mut p = pod(serde_json::json!({"spec": spec}));
        p.metadata.owner_references.as_mut().unwrap()[0].kind = "DaemonSet".into();
        p
    };
    let order = |s: &Settings, p: &Pod| last_stage_order(s, p, &verdict(s, p));
    let cordon_only = serde_json::json!([{"key": CORDON_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}]);
    assert_eq!(
        order(
            &stop_last,
            &ds(serde_json::json!({"tolerations": cordon_only}))
        ),
        Some(0)
    );
    assert_eq!(
        order(&stop_last, &ds(serde_json::json!({"priority": 1000}))),
        Some(1000)
    );
    assert_eq!(
        order(
            &stop_last,
            &ds(serde_json::json!({"priorityClassName": "system-node-critical"}))
        ),
        Some(i32::MAX)
    );
    // Tolerating every taint, or ours by key, or every NoSchedule taint: it stays.
    for t in [
        serde_json::json!([{"operator": "Exists"}]),
        serde_json::json!([{"key": "kube-shutdown-drain/daemonsets", "operator": "Exists"}]),
        serde_json::json!([{"operator": "Exists", "effect": "NoSchedule"}]),
    ] {
        assert_eq!(
            order(&stop_last, &ds(serde_json::json!({"tolerations": t}))),
            None
        );
    }
    // Not a DaemonSet pod, a terminating one, a mirror one, or DaemonSets left: none.
    assert_eq!(order(&stop_last, &pod(serde_json::json!({}))), None);
    let mut terminating = ds(serde_json::json!({}));
    terminating.metadata.deletion_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default()),
    );
    assert_eq!(order(&stop_last, &terminating), None);
    let mut mirror = ds(serde_json::json!({}));
    mirror.metadata.annotations = Some([(MIRROR_ANNOTATION.to_string(), "x".to_string())].into());
    assert_eq!(order(&stop_last, &mirror), None);
    assert_eq!(order(&settings(""), &ds(serde_json::json!({}))), None);
}
