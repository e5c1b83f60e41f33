//! The pure pod filters: each pod on the node gets one verdict (evict, skip or wait) with a reason.
//!
//! Filters run in a fixed order and the first one that decides wins:
//! 1. already terminating -> wait for it to go (it is leaving anyway);
//! 2. owned by a DaemonSet (controller ownerReference kind only; the DaemonSet itself is never read,
//!    because kubelet credentials may not) -> skip: the DaemonSet controller would recreate it;
//! 3. mirror pod (`kubernetes.io/config.mirror`) -> skip: the API cannot delete a static pod;
//! 4. tolerates the cordon taint `node.kubernetes.io/unschedulable:NoSchedule` -> skip: it would be
//!    rescheduled onto this very node (the Portworx case in Cluster API's drain discussion);
//! 5. configured skips: namespaces, label selector, the Cluster API label `cluster.x-k8s.io/drain`
//!    (`skip`, `wait-completed`), then the first matching `[[rules]]` entry. A `drain` rule only sets
//!    the order group and exempts the pod from the emptyDir and unreplicated policies;
//! 6. completed (Succeeded/Failed) -> policy, default skip: it holds nothing to drain;
//! 7. emptyDir volume -> policy, default evict;
//! 8. no controller -> policy, default evict: the shutdown would kill it anyway.
//!
//! Evicted pods without a rule are grouped by pod priority, lowest first, the order the kubelet's
//! Graceful Node Shutdown uses; a rule's `order` lives on the same scale.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, Toleration};
use serde::{Deserialize, Serialize};

use crate::config::{FilterSettings, Policy, Rule, RuleAction, Settings};

/// The taint key `kubectl cordon` stands for (the node lifecycle controller adds it to cordoned
/// nodes, and the scheduler treats `spec.unschedulable` as this taint).
pub const CORDON_TAINT_KEY: &str = "node.kubernetes.io/unschedulable";
/// Set by the kubelet on the API mirror of a static pod.
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// Cluster API's per-pod drain opt-out label (values `skip`, `wait-completed`).
pub const CAPI_DRAIN_LABEL: &str = "cluster.x-k8s.io/drain";

/// What the drain does with a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Action {
    /// Evict it through the Eviction API.
    Evict,
    /// Leave it alone.
    Skip,
    /// Do not evict it; the drain waits until it completes or goes.
    Wait,
}

impl Action {
    /// The JSON and text spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Evict => "evict",
            Action::Skip => "skip",
            Action::Wait => "wait",
        }
    }
}

/// Which filter decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Reason {
    Terminating,
    DaemonSet,
    Mirror,
    ToleratesCordon,
    SkipNamespace,
    SkipSelector,
    CapiDrainLabel,
    Rule,
    Completed,
    EmptyDir,
    Unreplicated,
    Priority,
}

impl Reason {
    /// The JSON and text spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Terminating => "terminating",
            Reason::DaemonSet => "daemon-set",
            Reason::Mirror => "mirror",
            Reason::ToleratesCordon => "tolerates-cordon",
            Reason::SkipNamespace => "skip-namespace",
            Reason::SkipSelector => "skip-selector",
            Reason::CapiDrainLabel => "capi-drain-label",
            Reason::Rule => "rule",
            Reason::Completed => "completed",
            Reason::EmptyDir => "empty-dir",
            Reason::Unreplicated => "unreplicated",
            Reason::Priority => "priority",
        }
    }
}

/// A pod's verdict. `order` is set for evicted pods only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Verdict {
    pub action: Action,
    pub reason: Reason,
    pub order: Option<i32>,
}

impl Verdict {
    fn skip(reason: Reason) -> Verdict {
        Verdict {
            action: Action::Skip,
            reason,
            order: None,
        }
    }
    fn wait(reason: Reason) -> Verdict {
        Verdict {
            action: Action::Wait,
            reason,
            order: None,
        }
    }
    fn evict(reason: Reason, order: i32) -> Verdict {
        Verdict {
            action: Action::Evict,
            reason,
            order: Some(order),
        }
    }
}

/// Whether a toleration tolerates a taint, with the API's own semantics
/// (k8s.io/api core/v1 `Toleration.ToleratesTaint`): an empty effect matches every effect, an
/// empty key matches every key, `Exists` ignores the value, `Equal` (or no operator) needs the
/// same value, any other operator matches nothing.
pub fn tolerates(t: &Toleration, key: &str, value: &str, effect: &str) -> bool {
    if let Some(e) = t.effect.as_deref()
        && !e.is_empty()
        && e != effect
    {
        return false;
    }
    if let Some(k) = t.key.as_deref()
        && !k.is_empty()
        && k != key
    {
        return false;
    }
    match t.operator.as_deref().unwrap_or("") {
        "" | "Equal" => t.value.as_deref().unwrap_or("") == value,
        "Exists" => true,
        _ => false,
    }
}

fn controller_kind(pod: &Pod) -> Option<&str> {
    pod.metadata
        .owner_references
        .as_deref()?
        .iter()
        .find(|o| o.controller == Some(true))
        .map(|o| o.kind.as_str())
}

fn empty_labels() -> &'static BTreeMap<String, String> {
    static EMPTY: BTreeMap<String, String> = BTreeMap::new();
    &EMPTY
}

fn labels(pod: &Pod) -> &BTreeMap<String, String> {
    pod.metadata.labels.as_ref().unwrap_or(empty_labels())
}

fn namespace(pod: &Pod) -> &str {
    pod.metadata.namespace.as_deref().unwrap_or("default")
}

fn is_completed(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

fn has_empty_dir(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .is_some_and(|vs| vs.iter().any(|v| v.empty_dir.is_some()))
}

fn priority(pod: &Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

fn tolerates_cordon(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.tolerations.as_ref())
        .is_some_and(|ts| {
            ts.iter()
                .any(|t| tolerates(t, CORDON_TAINT_KEY, "", "NoSchedule"))
        })
}

fn rule_for<'a>(rules: &'a [Rule], pod: &Pod) -> Option<&'a Rule> {
    let ns = namespace(pod);
    rules.iter().find(|r| {
        (r.namespaces.is_empty() || r.namespaces.iter().any(|n| n == ns))
            && r.selector.matches(labels(pod))
    })
}

/// Steps 5: skips and rules. `Ok(Some(order))` means a drain rule matched.
fn configured(f: &FilterSettings, rules: &[Rule], pod: &Pod) -> Result<Option<i32>, Verdict> {
    if f.skip_namespaces.contains(namespace(pod)) {
        return Err(Verdict::skip(Reason::SkipNamespace));
    }
    if let Some(sel) = &f.skip_selector
        && sel.matches(labels(pod))
    {
        return Err(Verdict::skip(Reason::SkipSelector));
    }
    if f.honour_capi_drain_label {
        match labels(pod).get(CAPI_DRAIN_LABEL).map(String::as_str) {
            Some("skip") => return Err(Verdict::skip(Reason::CapiDrainLabel)),
            Some("wait-completed") => return Err(Verdict::wait(Reason::CapiDrainLabel)),
            _ => {}
        }
    }
    match rule_for(rules, pod).map(|r| r.action) {
        Some(RuleAction::Skip) => Err(Verdict::skip(Reason::Rule)),
        Some(RuleAction::WaitCompleted) => Err(Verdict::wait(Reason::Rule)),
        Some(RuleAction::Drain { order }) => Ok(Some(order)),
        None => Ok(None),
    }
}

/// The verdict for one pod. Pure: no API calls.
pub fn verdict(settings: &Settings, pod: &Pod) -> Verdict {
    let f = &settings.filters;
    if pod.metadata.deletion_timestamp.is_some() {
        return Verdict::wait(Reason::Terminating);
    }
    if controller_kind(pod) == Some("DaemonSet") {
        return Verdict::skip(Reason::DaemonSet);
    }
    if pod
        .metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(MIRROR_ANNOTATION))
    {
        return Verdict::skip(Reason::Mirror);
    }
    if f.skip_tolerating_cordon && tolerates_cordon(pod) {
        return Verdict::skip(Reason::ToleratesCordon);
    }
    let rule_order = match configured(f, &settings.rules, pod) {
        Err(v) => return v,
        Ok(o) => o,
    };
    if is_completed(pod) && f.completed == Policy::Skip {
        return Verdict::skip(Reason::Completed);
    }
    if let Some(order) = rule_order {
        return Verdict::evict(Reason::Rule, order);
    }
    let order = priority(pod);
    if has_empty_dir(pod) {
        if f.emptydir == Policy::Skip {
            return Verdict::skip(Reason::EmptyDir);
        }
        if controller_kind(pod).is_none() && f.unreplicated == Policy::Skip {
            return Verdict::skip(Reason::Unreplicated);
        }
        return Verdict::evict(Reason::EmptyDir, order);
    }
    if controller_kind(pod).is_none() {
        if f.unreplicated == Policy::Skip {
            return Verdict::skip(Reason::Unreplicated);
        }
        return Verdict::evict(Reason::Unreplicated, order);
    }
    if is_completed(pod) {
        return Verdict::evict(Reason::Completed, order);
    }
    Verdict::evict(Reason::Priority, order)
}

#[cfg(test)]
mod tests {
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

    /// One row per filter and policy: the pod, the settings, the expected verdict.
    #[test]
    fn verdict_table() {
        use serde_json::json;
        let no_owner = json!({"metadata": {"ownerReferences": []}});
        let portworx_tolerations = json!({"spec": {"tolerations": [
            {"effect": "NoExecute", "key": "node.kubernetes.io/not-ready", "operator": "Exists"},
            {"effect": "NoSchedule", "key": "node.kubernetes.io/unschedulable", "operator": "Exists"}
        ]}});
        let emptydir = json!({"spec": {"volumes": [{"name": "scratch", "emptyDir": {}}]}});
        let rules = "[[rules]]\nselector = \"app=db\"\naction = \"drain\"\norder = 50\n\
                     [[rules]]\nselector = \"app=batch\"\naction = \"wait-completed\"\n\
                     [[rules]]\nnamespaces = [\"monitoring\"]\naction = \"skip\"\n";
        let rule_and_unreplicated_skip = format!("{rules}[filters]\nunreplicated = \"skip\"");
        type Row<'a> = (
            &'a str,
            serde_json::Value,
            &'a str,
            Action,
            Reason,
            Option<i32>,
        );
        let cases: Vec<Row> = vec![
            (
                "plain replicated pod",
                json!({}),
                "",
                Action::Evict,
                Reason::Priority,
                Some(0),
            ),
            (
                "priority orders",
                json!({"spec": {"priority": 1000}}),
                "",
                Action::Evict,
                Reason::Priority,
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
            (
                "tolerates cordon (Portworx)",
                portworx_tolerations.clone(),
                "",
                Action::Skip,
                Reason::ToleratesCordon,
                None,
            ),
            (
                "tolerates cordon, filter off",
                portworx_tolerations,
                "[filters]\nskip_tolerating_cordon = false",
                Action::Evict,
                Reason::Priority,
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
                Reason::Priority,
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
                Reason::Priority,
                Some(0),
            ),
            (
                "rule drain order",
                json!({"metadata": {"labels": {"app": "db"}}}),
                rules,
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
                rules,
                Action::Wait,
                Reason::Rule,
                None,
            ),
            (
                "rule skip by namespace",
                json!({"metadata": {"namespace": "monitoring"}}),
                rules,
                Action::Skip,
                Reason::Rule,
                None,
            ),
            (
                "no rule matches",
                json!({"metadata": {"labels": {"app": "web"}}}),
                rules,
                Action::Evict,
                Reason::Priority,
                Some(0),
            ),
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
                emptydir.clone(),
                "",
                Action::Evict,
                Reason::EmptyDir,
                Some(0),
            ),
            (
                "emptydir skip",
                emptydir.clone(),
                "[filters]\nemptydir = \"skip\"",
                Action::Skip,
                Reason::EmptyDir,
                None,
            ),
            (
                "unreplicated evicts by default",
                no_owner.clone(),
                "",
                Action::Evict,
                Reason::Unreplicated,
                Some(0),
            ),
            (
                "unreplicated skip",
                no_owner.clone(),
                "[filters]\nunreplicated = \"skip\"",
                Action::Skip,
                Reason::Unreplicated,
                None,
            ),
            (
                "emptydir and unreplicated, unreplicated skip",
                {
                    let mut v = emptydir.clone();
                    merge(&mut v, no_owner.clone());
                    v
                },
                "[filters]\nunreplicated = \"skip\"",
                Action::Skip,
                Reason::Unreplicated,
                None,
            ),
        ];
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
}
