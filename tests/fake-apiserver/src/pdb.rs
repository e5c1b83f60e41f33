//! PodDisruptionBudget arithmetic and the eviction verdict.
//!
//! Follows the disruption controller (`pkg/controller/disruption`) and the eviction REST handler
//! (`pkg/registry/core/pod/storage/eviction.go`) of kubernetes/kubernetes:
//! - healthy = Running with condition Ready=True and no deletionTimestamp, so pods already
//!   terminating count as disrupted;
//! - `minAvailable: N` needs N healthy; `minAvailable: P%` needs ceil(P% of expected);
//!   `maxUnavailable: N|P%` needs expected - N (percent rounded up); expected = the pods the
//!   selector matches for an integer `minAvailable`, else the sum of the pods' controllers'
//!   scale (`compute_with`; controller-less pods add nothing);
//! - disruptionsAllowed = max(0, healthy - needed), and 0 while nothing is expected;
//! - the eviction handler reads the stored status: a status behind the PDB's generation is the
//!   "still being processed" 429;
//! - a pod that is Pending, Succeeded, Failed or already terminating is evicted without a
//!   budget check; an unhealthy pod is evicted when the budget is currently met (policy
//!   `IfHealthyBudget`, the default) or always (`AlwaysAllow`).

use serde_json::{Value, json};

use crate::selector::{LabelSelector, SelectorError};

#[derive(Debug, thiserror::Error)]
pub enum PdbError {
    #[error("poddisruptionbudget {pdb}: {field} is neither an integer nor a percentage: {value}")]
    IntOrPercent {
        pdb: String,
        field: &'static str,
        value: String,
    },
    #[error("poddisruptionbudget {pdb}: invalid selector: {source}")]
    Selector { pdb: String, source: SelectorError },
}

/// The numbers a PDB's status reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    pub expected_pods: i64,
    pub desired_healthy: i64,
    pub current_healthy: i64,
    pub disruptions_allowed: i64,
}

fn name_of(pdb: &Value) -> String {
    let ns = pdb
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or("");
    let name = pdb
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    format!("{ns}/{name}")
}

/// A PDB's selector; `None` when it has none (a nil selector matches no pod in policy/v1,
/// an empty one matches every pod in the namespace).
pub fn selector(pdb: &Value) -> Result<Option<LabelSelector>, PdbError> {
    match pdb.pointer("/spec/selector") {
        None | Some(Value::Null) => Ok(None),
        Some(sel) => {
            LabelSelector::from_object(sel)
                .map(Some)
                .map_err(|source| PdbError::Selector {
                    pdb: name_of(pdb),
                    source,
                })
        }
    }
}

/// Whether `pod` is covered by `pdb` (same namespace, selector matches).
pub fn covers(pdb: &Value, pod: &Value) -> Result<bool, PdbError> {
    let ns = |o: &Value| {
        o.pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    if ns(pdb) != ns(pod) {
        return Ok(false);
    }
    Ok(selector(pdb)?.is_some_and(|s| s.matches_object(pod)))
}

pub fn is_terminating(pod: &Value) -> bool {
    pod.pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

pub fn phase(pod: &Value) -> &str {
    pod.pointer("/status/phase")
        .and_then(Value::as_str)
        .unwrap_or("")
}

pub fn is_ready(pod: &Value) -> bool {
    pod.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.get("type").and_then(Value::as_str) == Some("Ready")
                    && c.get("status").and_then(Value::as_str) == Some("True")
            })
        })
}

/// Running, Ready=True and not terminating.
pub fn is_healthy(pod: &Value) -> bool {
    !is_terminating(pod) && phase(pod) == "Running" && is_ready(pod)
}

/// An IntOrString scaled against `total`: integers as is, `P%` as P% of total, rounded up or down.
pub fn scaled(
    pdb: &Value,
    field: &'static str,
    value: &Value,
    total: i64,
    round_up: bool,
) -> Result<i64, PdbError> {
    let bad = || PdbError::IntOrPercent {
        pdb: name_of(pdb),
        field,
        value: value.to_string(),
    };
    match value {
        Value::Number(n) => n.as_i64().ok_or_else(bad),
        Value::String(s) => {
            if let Some(p) = s.strip_suffix('%') {
                let p: i64 = p.trim().parse().map_err(|_| bad())?;
                let product = p * total;
                Ok(if round_up {
                    (product + 99) / 100
                } else {
                    product / 100
                })
            } else {
                s.trim().parse().map_err(|_| bad())
            }
        }
        _ => Err(bad()),
    }
}

/// The budget of `pdb` over `pods` (the pods it covers), every pod counted as expected.
pub fn compute(pdb: &Value, pods: &[&Value]) -> Result<Budget, PdbError> {
    compute_with(pdb, pods, pods.len() as i64)
}

/// Whether the controller takes the expected count from the pods' controllers (their scale)
/// rather than from the matching pods: `maxUnavailable`, or a percentage `minAvailable`
/// (disruption.go getExpectedPodCount).
pub fn uses_scale(pdb: &Value) -> bool {
    match pdb.pointer("/spec/minAvailable").filter(|v| !v.is_null()) {
        Some(min) => min.is_string(),
        None => pdb
            .pointer("/spec/maxUnavailable")
            .is_some_and(|v| !v.is_null()),
    }
}

/// The budget of `pdb` over `pods` when its controllers' scale adds up to `scale` (used only
/// where `uses_scale` says so; an integer `minAvailable` counts the matching pods).
pub fn compute_with(pdb: &Value, pods: &[&Value], scale: i64) -> Result<Budget, PdbError> {
    let healthy = pods.iter().filter(|p| is_healthy(p)).count() as i64;
    let mut expected = pods.len() as i64;
    let desired = if let Some(min) = pdb.pointer("/spec/minAvailable").filter(|v| !v.is_null()) {
        if min.is_string() {
            expected = scale;
        }
        scaled(pdb, "spec.minAvailable", min, expected, true)?
    } else if let Some(max) = pdb.pointer("/spec/maxUnavailable").filter(|v| !v.is_null()) {
        expected = scale;
        (expected - scaled(pdb, "spec.maxUnavailable", max, expected, true)?).max(0)
    } else {
        // Neither set: the API defaults minAvailable to 1.
        1
    };
    // updatePdbStatus: no disruption while nothing is expected, so a budget whose first pods
    // appear before the controller counted them is safe.
    let allowed = if expected <= 0 {
        0
    } else {
        (healthy - desired).max(0)
    };
    Ok(Budget {
        expected_pods: expected,
        desired_healthy: desired,
        current_healthy: healthy,
        disruptions_allowed: allowed,
    })
}

/// The budget as the PDB's stored status says (what the eviction handler reads).
pub fn from_status(pdb: &Value) -> Budget {
    let n = |f: &str| {
        pdb.pointer(&format!("/status/{f}"))
            .and_then(Value::as_i64)
            .unwrap_or(0)
    };
    Budget {
        expected_pods: n("expectedPods"),
        desired_healthy: n("desiredHealthy"),
        current_healthy: n("currentHealthy"),
        disruptions_allowed: n("disruptionsAllowed"),
    }
}

/// Whether the disruption controller has not yet written a status for the PDB's current
/// generation (`status.observedGeneration` absent or behind `metadata.generation`).
pub fn is_lagging(pdb: &Value) -> bool {
    let generation = pdb
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    pdb.pointer("/status/observedGeneration")
        .and_then(Value::as_i64)
        .unwrap_or(0)
        < generation
}

/// The status object the fake keeps on a PDB (the store sets the condition's
/// lastTransitionTime).
pub fn status(pdb: &Value, budget: &Budget) -> Value {
    let generation = pdb
        .pointer("/metadata/generation")
        .and_then(Value::as_i64)
        .unwrap_or(1);
    let allowed = budget.disruptions_allowed > 0;
    json!({
        "observedGeneration": generation,
        "disruptionsAllowed": budget.disruptions_allowed,
        "currentHealthy": budget.current_healthy,
        "desiredHealthy": budget.desired_healthy,
        "expectedPods": budget.expected_pods,
        "conditions": [{
            "type": "DisruptionAllowed",
            "status": if allowed { "True" } else { "False" },
            "reason": if allowed { "SufficientPods" } else { "InsufficientPods" },
            "message": "",
            "observedGeneration": generation,
            "lastTransitionTime": "1970-01-01T00:00:00Z",
        }],
    })
}

/// What the eviction subresource does with a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Delete the pod (201).
    Evict,
    /// 429: the budget allows no disruption.
    Blocked {
        pdb: String,
        desired_healthy: i64,
        current_healthy: i64,
    },
    /// 500: more than one PDB covers the pod.
    TooManyBudgets,
    /// 429 with Retry-After 10: the controller has not observed the PDB's generation yet.
    Lagging { pdb: String },
}

/// The eviction verdict for `pod`, given the PDBs that cover it and their budgets.
pub fn verdict(pod: &Value, budgets: &[(&Value, Budget)]) -> Verdict {
    if is_terminating(pod) || matches!(phase(pod), "Pending" | "Succeeded" | "Failed") {
        return Verdict::Evict;
    }
    let (pdb, budget) = match budgets {
        [] => return Verdict::Evict,
        [one] => one,
        _ => return Verdict::TooManyBudgets,
    };
    let blocked = || Verdict::Blocked {
        pdb: pdb
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string(),
        desired_healthy: budget.desired_healthy,
        current_healthy: budget.current_healthy,
    };
    if !is_ready(pod) {
        let policy = pdb
            .pointer("/spec/unhealthyPodEvictionPolicy")
            .and_then(Value::as_str);
        // eviction.go: an unready pod goes without touching the budget when the policy says
        // AlwaysAllow, or the budget is met and asks for at least one healthy pod.
        if policy == Some("AlwaysAllow")
            || (budget.current_healthy >= budget.desired_healthy && budget.desired_healthy > 0)
        {
            return Verdict::Evict;
        }
    }
    // checkAndDecrement: an unobserved budget first, then the count.
    if is_lagging(pdb) {
        return Verdict::Lagging {
            pdb: pdb
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
        };
    }
    if budget.disruptions_allowed > 0 {
        Verdict::Evict
    } else {
        blocked()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, phase: &str, ready: bool, terminating: bool) -> Value {
        let mut p = json!({
            "metadata": {"name": name, "namespace": "work", "labels": {"app": "web"}},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}
        });
        if terminating {
            p["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        p
    }

    fn budget(spec: Value, pods: &[Value]) -> Budget {
        let pdb = json!({"metadata": {"name": "b", "namespace": "work"}, "spec": spec});
        let refs: Vec<&Value> = pods.iter().collect();
        compute(&pdb, &refs).expect("valid pdb")
    }

    fn healthy(n: usize) -> Vec<Value> {
        (0..n)
            .map(|i| pod(&format!("p{i}"), "Running", true, false))
            .collect()
    }

    #[test]
    fn min_available_integer_and_percentage() {
        let b = budget(json!({"minAvailable": 2}), &healthy(3));
        assert_eq!(
            (b.desired_healthy, b.current_healthy, b.disruptions_allowed),
            (2, 3, 1)
        );
        let b = budget(json!({"minAvailable": 3}), &healthy(3));
        assert_eq!(b.disruptions_allowed, 0);
        // 50% of 3 rounds up to 2.
        let b = budget(json!({"minAvailable": "50%"}), &healthy(3));
        assert_eq!((b.desired_healthy, b.disruptions_allowed), (2, 1));
        let b = budget(json!({"minAvailable": "100%"}), &healthy(4));
        assert_eq!(b.disruptions_allowed, 0);
    }

    #[test]
    fn max_unavailable_integer_and_percentage() {
        let b = budget(json!({"maxUnavailable": 1}), &healthy(4));
        assert_eq!(
            (b.expected_pods, b.desired_healthy, b.disruptions_allowed),
            (4, 3, 1)
        );
        // 30% of 4 = 1.2 rounds up to 2 unavailable: 2 needed healthy.
        let b = budget(json!({"maxUnavailable": "30%"}), &healthy(4));
        assert_eq!((b.desired_healthy, b.disruptions_allowed), (2, 2));
        let b = budget(json!({"maxUnavailable": 0}), &healthy(2));
        assert_eq!(b.disruptions_allowed, 0);
        assert!(matches!(
            compute(
                &json!({"metadata": {"name": "b"}, "spec": {"maxUnavailable": "lots"}}),
                &[]
            ),
            Err(PdbError::IntOrPercent {
                field: "spec.maxUnavailable",
                ..
            })
        ));
    }

    #[test]
    fn unready_pending_and_terminating_pods_are_not_healthy() {
        let pods = vec![
            pod("a", "Running", true, false),
            pod("b", "Running", false, false),
            pod("c", "Pending", false, false),
            pod("d", "Running", true, true),
        ];
        let b = budget(json!({"minAvailable": 1}), &pods);
        assert_eq!(
            (b.expected_pods, b.current_healthy, b.disruptions_allowed),
            (4, 1, 0)
        );
    }

    #[test]
    fn verdicts_follow_the_eviction_handler() {
        let pdb = json!({"metadata": {"name": "guarded-pdb", "namespace": "work", "generation": 1},
                         "spec": {"minAvailable": 1}, "status": {"observedGeneration": 1}});
        let one = healthy(1);
        let b = budget(json!({"minAvailable": 1}), &one);
        assert_eq!(
            verdict(&one[0], &[(&pdb, b)]),
            Verdict::Blocked {
                pdb: "guarded-pdb".into(),
                desired_healthy: 1,
                current_healthy: 1
            }
        );
        let two = healthy(2);
        let b2 = budget(json!({"minAvailable": 1}), &two);
        assert_eq!(verdict(&two[0], &[(&pdb, b2)]), Verdict::Evict);
        assert_eq!(
            verdict(&two[0], &[(&pdb, b2), (&pdb, b2)]),
            Verdict::TooManyBudgets
        );
        assert_eq!(verdict(&two[0], &[]), Verdict::Evict);
        // Terminating and pending pods skip the budget.
        assert_eq!(
            verdict(&pod("t", "Running", true, true), &[(&pdb, b)]),
            Verdict::Evict
        );
        assert_eq!(
            verdict(&pod("p", "Pending", false, false), &[(&pdb, b)]),
            Verdict::Evict
        );
        // An unready running pod goes when the budget is met, not when it is short.
        let unready = pod("u", "Running", false, false);
        assert_eq!(verdict(&unready, &[(&pdb, b)]), Verdict::Evict);
        let short = budget(json!({"minAvailable": 2}), &one);
        assert!(matches!(
            verdict(&unready, &[(&pdb, short)]),
            Verdict::Blocked { .. }
        ));
        let always = json!({"metadata": {"name": "x"}, "spec": {"unhealthyPodEvictionPolicy": "AlwaysAllow"}});
        assert_eq!(verdict(&unready, &[(&always, short)]), Verdict::Evict);
    }

    #[test]
    fn an_unobserved_budget_is_still_being_processed() {
        let pdb = json!({"metadata": {"name": "lagging", "namespace": "work", "generation": 2},
                         "spec": {"minAvailable": 1}, "status": {"observedGeneration": 1}});
        let two = healthy(2);
        let b = budget(json!({"minAvailable": 1}), &two);
        assert_eq!(
            verdict(&two[0], &[(&pdb, b)]),
            Verdict::Lagging {
                pdb: "lagging".into()
            }
        );
        // A terminating pod never reaches the budget check.
        assert_eq!(
            verdict(&pod("t", "Running", true, true), &[(&pdb, b)]),
            Verdict::Evict
        );
    }

    #[test]
    fn scale_sets_the_expected_count_for_max_unavailable_and_percentages() {
        // Three replicas, one evicted and gone, no replacement yet: still 3 expected.
        let pods = healthy(2);
        let refs: Vec<&Value> = pods.iter().collect();
        let pdb = |spec: Value| json!({"metadata": {"name": "b"}, "spec": spec});
        let b = compute_with(&pdb(json!({"maxUnavailable": 1})), &refs, 3).expect("valid");
        assert_eq!(
            (b.expected_pods, b.desired_healthy, b.disruptions_allowed),
            (3, 2, 0)
        );
        let b = compute_with(&pdb(json!({"minAvailable": "50%"})), &refs, 3).expect("valid");
        assert_eq!((b.expected_pods, b.desired_healthy), (3, 2));
        // An integer minAvailable counts the matching pods.
        let b = compute_with(&pdb(json!({"minAvailable": 1})), &refs, 3).expect("valid");
        assert_eq!((b.expected_pods, b.disruptions_allowed), (2, 1));
        // Nothing expected (controller-less pods only): nothing allowed.
        let b = compute_with(&pdb(json!({"maxUnavailable": 1})), &refs, 0).expect("valid");
        assert_eq!(
            (
                b.expected_pods,
                b.desired_healthy,
                b.current_healthy,
                b.disruptions_allowed
            ),
            (0, 0, 2, 0)
        );
        assert!(uses_scale(&pdb(json!({"maxUnavailable": 1}))));
        assert!(!uses_scale(&pdb(json!({"minAvailable": 2}))));
    }

    #[test]
    fn selectors_scope_to_the_namespace_and_nil_matches_nothing() {
        let p = pod("a", "Running", true, false);
        let pdb = |ns: &str, sel: Value| json!({"metadata": {"name": "b", "namespace": ns}, "spec": {"selector": sel}});
        assert!(covers(&pdb("work", json!({"matchLabels": {"app": "web"}})), &p).expect("valid"));
        assert!(!covers(&pdb("other", json!({"matchLabels": {"app": "web"}})), &p).expect("valid"));
        assert!(covers(&pdb("work", json!({})), &p).expect("valid"));
        assert!(!covers(&pdb("work", Value::Null), &p).expect("valid"));
    }
}
