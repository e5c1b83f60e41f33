//! What a drain records for the settling after the node's restore (`[fleet] settle_max`): the
//! PodDisruptionBudgets that covered the pods it evicted. Their pods are gone by the drain's end
//! and their replacements carry other names, so the budgets are matched while the evicted pods'
//! labels are still known, from one list of every budget taken beside the drain (no time of the
//! drain's own). The record goes into the report (`last-report.json` in the state directory),
//! which the next boot's restore reads.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, ListParams};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::run::Run;
use crate::api::{ApiError, Clients};
use crate::config::Settings;
use crate::policy::budgets::{budget_name, selects_labels};
use crate::report::{Covering, Outcome, Report};

/// How long past the drain's end its record waits for the list of budgets (taken from the
/// drain's start, it is in long before in all but a failing cluster).
const LIST_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// The list of budgets taken beside the drain; nothing without slots or with `settle_max = 0`.
pub struct Recording {
    list: Option<JoinSet<Result<Vec<PodDisruptionBudget>, ApiError>>>,
}

impl Recording {
    /// Starts listing every budget (retried until `deadline`), when the settling needs them.
    pub fn start(clients: &Clients, settings: &Settings, deadline: Instant) -> Recording {
        if settings.fleet.slots == 0 || settings.fleet.settle_max.is_zero() {
            return Recording { list: None };
        }
        let clients = clients.clone();
        let mut list = JoinSet::new();
        list.spawn(async move {
            let api: Api<PodDisruptionBudget> = Api::all(clients.api.clone());
            let lp = ListParams::default();
            let page = clients
                .retry(deadline, "PodDisruptionBudgets", || api.list(&lp))
                .await?;
            Ok(page.items)
        });
        Recording { list: Some(list) }
    }

    /// What the settling waits for, from the pods `run` evicted (or deleted): none when nothing
    /// was evicted or nothing is recorded; the pods' namespaces when the list failed, or had
    /// not come [`LIST_WAIT`] after the drain's end (or by `deadline`): a drain that is over
    /// must not hold logind's lock for a record.
    pub async fn finish(self, run: &Run, deadline: Instant) -> Option<Covering> {
        let mut list = self.list?;
        let evicted: Vec<(String, BTreeMap<String, String>)> = run
            .snapshot()
            .into_iter()
            .filter(|r| matches!(r.report.outcome, Outcome::Evicted | Outcome::Deleted))
            .map(|r| (r.plan.namespace, r.plan.labels))
            .collect();
        if evicted.is_empty() {
            return None;
        }
        let node = &run.settings.node_name;
        let by = deadline.min(Instant::now() + LIST_WAIT);
        let error = match tokio::time::timeout_at(by, list.join_next()).await {
            Ok(Some(Ok(Ok(budgets)))) => {
                return Some(Covering::Budgets(covering(&budgets, &evicted)));
            }
            Ok(Some(Ok(Err(e)))) => e.to_string(),
            Ok(Some(Err(e))) => e.to_string(),
            Ok(None) => "no list".to_string(),
            Err(_) => "no answer by the drain's end".to_string(),
        };
        let namespaces: BTreeSet<String> = evicted.into_iter().map(|(ns, _)| ns).collect();
        let namespaces: Vec<String> = namespaces.into_iter().collect();
        tracing::warn!(
            "cannot list the PodDisruptionBudgets that covered the pods evicted from node {node} \
             ({error}); after its restore its drain slot waits for every budget in {}",
            namespaces.join(", ")
        );
        Some(Covering::Namespaces(namespaces))
    }
}

/// The record a new report of this node keeps: its own and, when `previous` (the last report)
/// is of a drain of this boot (started after `boot_began`), the previous one's too. The drain
/// at logind's announcement after the node's own reboot finds the node empty and evicts
/// nothing; what the first drain evicted is what the restore waits for. Pure.
pub fn carried(
    new: Option<Covering>,
    previous: Option<&Report>,
    node: &str,
    boot_began: jiff::Timestamp,
) -> Option<Covering> {
    let earlier = previous
        .filter(|p| p.node == node)
        .filter(|p| {
            p.started_at
                .parse::<jiff::Timestamp>()
                .is_ok_and(|t| t >= boot_began)
        })
        .and_then(|p| p.settle.clone());
    match (new, earlier) {
        (Some(Covering::Budgets(mut a)), Some(Covering::Budgets(b))) => {
            a.extend(b);
            a.sort();
            a.dedup();
            Some(Covering::Budgets(a))
        }
        (Some(a), Some(b)) => {
            let namespaces: BTreeSet<String> = [a, b]
                .into_iter()
                .flat_map(|c| match c {
                    Covering::Budgets(names) => names
                        .iter()
                        .filter_map(|n| n.split_once('/').map(|(ns, _)| ns.to_string()))
                        .collect(),
                    Covering::Namespaces(ns) => ns,
                })
                .collect();
            Some(Covering::Namespaces(namespaces.into_iter().collect()))
        }
        (new, earlier) => new.or(earlier),
    }
}

/// The budgets (`namespace/name`, sorted, once each) that select any of the `evicted` pods,
/// each known by its namespace and labels. Pure.
pub fn covering(
    budgets: &[PodDisruptionBudget],
    evicted: &[(String, BTreeMap<String, String>)],
) -> Vec<String> {
    let names: BTreeSet<String> = budgets
        .iter()
        .filter(|b| {
            evicted
                .iter()
                .any(|(ns, labels)| selects_labels(b, ns, labels))
        })
        .map(budget_name)
        .collect();
    names.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn budget(namespace: &str, name: &str, selector: serde_json::Value) -> PodDisruptionBudget {
        serde_json::from_value(json!({
            "metadata": {"namespace": namespace, "name": name},
            "spec": {"selector": selector, "minAvailable": 1},
        }))
        .unwrap()
    }

    fn pod(namespace: &str, labels: &[(&str, &str)]) -> (String, BTreeMap<String, String>) {
        let labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        (namespace.to_string(), labels)
    }

    #[test]
    fn the_budgets_that_select_an_evicted_pod_in_its_namespace_are_recorded_once() {
        let budgets = [
            budget("shop", "web", json!({"matchLabels": {"app": "web"}})),
            budget("shop", "db", json!({"matchLabels": {"app": "db"}})),
            // Same labels, another namespace: not the pod's budget.
            budget("other", "web", json!({"matchLabels": {"app": "web"}})),
            // An empty selector selects every pod of its namespace.
            budget("shop", "all", json!({})),
        ];
        let evicted = [
            pod("shop", &[("app", "web")]),
            pod("shop", &[("app", "web"), ("tier", "front")]),
        ];
        assert_eq!(covering(&budgets, &evicted), ["shop/all", "shop/web"]);
        assert!(covering(&budgets, &[pod("empty", &[("app", "web")])]).is_empty());
    }

    #[test]
    fn a_later_drain_of_the_same_boot_keeps_what_the_first_one_recorded() {
        let boot: jiff::Timestamp = "2026-12-06T10:00:00Z".parse().unwrap();
        let report = |node: &str, at: &str, settle: Option<Covering>| {
            let mut r: Report = serde_json::from_value(json!({
                "node": node, "why": "reboot", "started_at": at, "duration_ms": 1,
                "complete": true, "deadline_reached": false, "dry_run": false,
                "counts": {"evicted": 0, "deleted": 0, "gone": 0, "completed": 0, "skipped": 0,
                           "blocked": 0, "failed": 0, "pending": 0},
                "pods": []}))
            .unwrap();
            r.settle = settle;
            r
        };
        let web = || Some(Covering::Budgets(vec!["shop/web".into()]));
        let first = report("a", "2026-12-06T11:00:00Z", web());
        // The drain at logind's announcement evicted nothing: the first record stands.
        assert_eq!(carried(None, Some(&first), "a", boot), web());
        // Both recorded: the union.
        let db = Some(Covering::Budgets(vec!["shop/db".into(), "shop/web".into()]));
        assert_eq!(carried(db.clone(), Some(&first), "a", boot), db);
        let ns = Some(Covering::Namespaces(vec!["other".into()]));
        assert_eq!(
            carried(ns, Some(&first), "a", boot),
            Some(Covering::Namespaces(vec!["other".into(), "shop".into()]))
        );
        // Of an earlier boot, or another node: not this drain's.
        let old = report("a", "2026-12-06T09:00:00Z", web());
        assert_eq!(carried(None, Some(&old), "a", boot), None);
        assert_eq!(carried(None, Some(&first), "b", boot), None);
    }
}
