//! Which PodDisruptionBudget covers a pod, by the budget's selector alone (kubernetes
//! `pkg/registry/core/pod/storage/eviction.go`, `getPodDisruptionBudgets`): what the forecast
//! and the drain's record for the settling after the restore both ask. Pure.

use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use crate::config::selector::Selector;

/// `namespace/name` of a budget.
pub fn budget_name(b: &PodDisruptionBudget) -> String {
    format!(
        "{}/{}",
        b.metadata.namespace.as_deref().unwrap_or_default(),
        b.metadata.name.as_deref().unwrap_or_default()
    )
}

/// [`selects`] for a pod known by its namespace and labels (one that has gone).
pub fn selects_labels(
    b: &PodDisruptionBudget,
    namespace: &str,
    labels: &std::collections::BTreeMap<String, String>,
) -> bool {
    if b.metadata.namespace.as_deref() != Some(namespace) {
        return false;
    }
    let Some(sel) = b.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
        return false;
    };
    Selector::from_label_selector(sel).is_ok_and(|s| s.matches(labels))
}
