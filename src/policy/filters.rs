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

use crate::config::{DaemonSetPolicy, FilterSettings, Policy, Rule, RuleAction, Settings};
use crate::node::daemonsets::{DAEMONSETS_TAINT_EFFECT, DAEMONSETS_TAINT_KEY};

/// The taint key `kubectl cordon` stands for (the node lifecycle controller adds it to cordoned
/// nodes, and the scheduler treats `spec.unschedulable` as this taint).
pub const CORDON_TAINT_KEY: &str = "node.kubernetes.io/unschedulable";
/// Set by the kubelet on the API mirror of a static pod.
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// The priority class of the node's own agents, stopped after every other DaemonSet pod
/// (its value, 2000001000, is the highest a pod can have; the class name decides here even when
/// a pod's `spec.priority` was never resolved).
pub const NODE_CRITICAL_CLASS: &str = "system-node-critical";
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
    /// No filter, policy or rule singled the pod out: evicted, in priority order. Reports of
    /// older builds spell it `priority`.
    #[serde(alias = "priority")]
    Default,
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
            Reason::Default => "default",
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

/// Phase Succeeded or Failed: the pod has ended (also what the drain's pod tracker counts as
/// "completed").
pub(crate) fn is_completed(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// The kubelet's API mirror of a static pod (the API cannot delete the pod itself).
fn is_mirror(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(MIRROR_ANNOTATION))
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
    if is_mirror(pod) {
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
    Verdict::evict(Reason::Default, order)
}

/// The order group of a DaemonSet pod in the drain's last stage (`[drain] daemonsets =
/// "stop-last"`, [`crate::node::daemonsets`]): its priority, lowest first, and
/// [`NODE_CRITICAL_CLASS`] pods after all others. `None` when the drain leaves it: DaemonSets
/// left, not a DaemonSet pod the drain skipped (a terminating one is waited for), a mirror pod,
/// or a pod that tolerates the stage's taint (it would run on under it: CNI, kube-proxy and
/// most CSI node plugins tolerate every taint). Pure.
pub fn last_stage_order(settings: &Settings, pod: &Pod, verdict: &Verdict) -> Option<i32> {
    if settings.drain.daemonsets != DaemonSetPolicy::StopLast
        || verdict.reason != Reason::DaemonSet
        || verdict.action != Action::Skip
    {
        return None;
    }
    let spec = pod.spec.as_ref()?;
    let mirror = is_mirror(pod);
    let tolerated = spec
        .tolerations
        .iter()
        .flatten()
        .any(|t| tolerates(t, DAEMONSETS_TAINT_KEY, "", DAEMONSETS_TAINT_EFFECT));
    if mirror || tolerated {
        return None;
    }
    Some(
        if spec.priority_class_name.as_deref() == Some(NODE_CRITICAL_CLASS) {
            i32::MAX
        } else {
            priority(pod)
        },
    )
}

#[cfg(test)]
#[path = "filters_tests.rs"]
mod tests;
