//! The settling after a restore (`[fleet] settle_max`): the node keeps its drain slot until the
//! cluster is whole again, that is until every PodDisruptionBudget that covered a pod its drain
//! evicted is healthy: `status.currentHealthy >= status.desiredHealthy` as the disruption
//! controller computed it for the budget's current generation (`status.observedGeneration`;
//! kubernetes `pkg/controller/disruption/disruption.go`, `updatePdbStatus`). A budget deleted
//! meanwhile has nothing to wait for. The budgets are watched (kube's watcher, one watch per
//! namespace), so the slot goes back within one watch event of the last one healing.

use std::collections::{BTreeMap, BTreeSet};

use futures::StreamExt;
use futures::stream::{self, BoxStream};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::time::Instant;

use super::{Engine, Error};
use crate::api::client::WATCH_SECONDS;
use crate::api::path::segment;
use crate::api::retry;
use crate::drain::tracker::watch_error;
use crate::node::Marker;
use crate::report::Covering;

/// How long before its marker a drain of that marker may have started (the drain and its
/// prepare start together; the prepare's write lands within the request timeout).
const MARKER_SLACK: jiff::SignedDuration = jiff::SignedDuration::from_secs(60);

/// How the wait for the budgets ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    /// Every budget is healthy again (or gone).
    Healthy,
    /// The ceiling came first: each budget still short, `namespace/name: why`.
    Short(Vec<String>),
    /// The budgets cannot be watched with these credentials (403, 404): nothing to wait for.
    Unreadable(String),
}

/// Why budget `b` is not healthy again; `None`: it is.
pub fn shortfall(b: &PodDisruptionBudget) -> Option<String> {
    let generation = b.metadata.generation.unwrap_or(1);
    let Some(status) = &b.status else {
        return Some("the disruption controller has written no status yet".to_string());
    };
    let observed = status.observed_generation.unwrap_or(0);
    if observed < generation {
        return Some(format!(
            "its status is of generation {observed}, the budget is at {generation}"
        ));
    }
    (status.current_healthy < status.desired_healthy).then(|| {
        format!(
            "{} healthy pods of the {} it needs",
            status.current_healthy, status.desired_healthy
        )
    })
}

/// What is known of one namespace's budgets: their shortfalls, once its watch listed them.
#[derive(Debug, Default)]
struct Seen {
    listed: bool,
    budgets: BTreeMap<String, Option<String>>,
}

/// The budgets still short (`namespace/name: why`), or `None` while a namespace is not listed
/// yet. `wanted` names the budgets per namespace; `None` there: every budget of it. Pure.
fn still_short(
    wanted: &BTreeMap<String, Option<BTreeSet<String>>>,
    seen: &BTreeMap<String, Seen>,
) -> Option<Vec<String>> {
    let mut short = Vec::new();
    for (namespace, names) in wanted {
        let s = seen.get(namespace).filter(|s| s.listed)?;
        for (name, why) in &s.budgets {
            let counts = names.as_ref().is_none_or(|n| n.contains(name));
            if let (true, Some(why)) = (counts, why) {
                short.push(format!("{namespace}/{name}: {why}"));
            }
        }
    }
    Some(short)
}

/// The namespaces to watch and the budgets that count in each.
fn wanted_of(covering: &Covering) -> BTreeMap<String, Option<BTreeSet<String>>> {
    let mut wanted: BTreeMap<String, Option<BTreeSet<String>>> = BTreeMap::new();
    match covering {
        Covering::Budgets(names) => {
            for (namespace, name) in names.iter().filter_map(|n| n.split_once('/')) {
                wanted
                    .entry(namespace.to_string())
                    .or_insert_with(|| Some(BTreeSet::new()))
                    .get_or_insert_with(BTreeSet::new)
                    .insert(name.to_string());
            }
        }
        Covering::Namespaces(namespaces) => {
            wanted.extend(namespaces.iter().map(|ns| (ns.clone(), None)));
        }
    }
    wanted
}

impl Engine {
    /// What the slot waits for after the restore of `marker`'s drain: the last report's record,
    /// when that report is of this node and of the drain the marker was written for (started
    /// after it, or at most [`MARKER_SLACK`] before: the prepare that writes the marker runs
    /// while the drain lists the pods); none without one.
    pub fn settle_record(&self, marker: &Marker) -> Option<Covering> {
        if self.settings.fleet.slots == 0 || self.settings.fleet.settle_max.is_zero() {
            return None;
        }
        let report = match self.last_report() {
            Ok(report) => report?,
            Err(e) => {
                tracing::warn!(
                    "node {}: cannot read the last drain's report ({e}); its drain slot does not \
                     wait for the disruption budgets of the pods it evicted",
                    self.settings.node_name
                );
                return None;
            }
        };
        let of_marker = report.node == self.settings.node_name
            && matches!(
                (report.started_at.parse::<jiff::Timestamp>(), marker.time.parse::<jiff::Timestamp>()),
                (Ok(drain), Ok(written)) if drain + MARKER_SLACK >= written
            );
        of_marker.then_some(report.settle).flatten()
    }

    /// What `status` says of a slot kept after the restore: the budgets of the last drain's
    /// record still short now (`namespace/name: why`), from one list per namespace.
    pub async fn settle_now(&self, covering: &Covering) -> Result<Vec<String>, Error> {
        let deadline = Instant::now() + self.settings.request_timeout;
        let clients = self.clients_by(deadline).await?;
        let wanted = wanted_of(covering);
        let mut seen = BTreeMap::new();
        for namespace in wanted.keys() {
            let Ok(path_namespace) = segment(namespace) else {
                continue;
            };
            let api: Api<PodDisruptionBudget> =
                Api::namespaced(clients.api.clone(), &path_namespace);
            let object = format!("the PodDisruptionBudgets of namespace {namespace}");
            let lp = kube::api::ListParams::default();
            let list = clients
                .retry(deadline, &object, || api.list(&lp))
                .await
                .map_err(|source| Error::Slot {
                    node: self.settings.node_name.clone(),
                    source,
                })?;
            let budgets = list
                .items
                .iter()
                .map(|b| (b.metadata.name.clone().unwrap_or_default(), shortfall(b)))
                .collect();
            seen.insert(
                namespace.clone(),
                Seen {
                    listed: true,
                    budgets,
                },
            );
        }
        Ok(still_short(&wanted, &seen).unwrap_or_default())
    }

    /// Waits until every budget of `covering` is healthy again, or `until`.
    pub async fn settle(&self, covering: &Covering, until: Instant) -> Result<Settled, Error> {
        let clients = self.clients_by(until).await?.clone();
        let wanted = wanted_of(covering);
        let mut watches: Vec<BoxStream<'static, (String, _)>> = Vec::new();
        for namespace in wanted.keys() {
            let Ok(path_namespace) = segment(namespace) else {
                continue;
            };
            let api: Api<PodDisruptionBudget> =
                Api::namespaced(clients.watch.clone(), &path_namespace);
            let config = watcher::Config::default().timeout(WATCH_SECONDS);
            let ns = namespace.clone();
            let events = watcher::watcher(api, config)
                .backoff(retry::for_watches())
                .map(move |e| (ns.clone(), e));
            watches.push(events.boxed());
        }
        let mut events = stream::select_all(watches);
        let mut seen: BTreeMap<String, Seen> = BTreeMap::new();
        let mut short = vec!["not listed yet".to_string()];
        loop {
            let event = match tokio::time::timeout_at(until, events.next()).await {
                Ok(Some(event)) => event,
                Ok(None) => return Ok(Settled::Healthy),
                Err(_) => return Ok(Settled::Short(short)),
            };
            let (namespace, event) = event;
            let s = seen.entry(namespace.clone()).or_default();
            match event {
                Ok(Event::Init) => *s = Seen::default(),
                Ok(Event::InitApply(b) | Event::Apply(b)) => {
                    let name = b.metadata.name.clone().unwrap_or_default();
                    s.budgets.insert(name, shortfall(&b));
                }
                Ok(Event::InitDone) => s.listed = true,
                Ok(Event::Delete(b)) => {
                    s.budgets
                        .remove(b.metadata.name.as_deref().unwrap_or_default());
                }
                Err(e) => {
                    let object = format!("the PodDisruptionBudgets of namespace {namespace}");
                    let e = watch_error(&clients, &object, e);
                    if e.is_forbidden() || e.is_not_found() {
                        return Ok(Settled::Unreadable(e.to_string()));
                    }
                    tracing::debug!("watch of {e}");
                }
            }
            match still_short(&wanted, &seen) {
                Some(now) if now.is_empty() => return Ok(Settled::Healthy),
                Some(now) => short = now,
                None => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn budget(generation: i64, status: serde_json::Value) -> PodDisruptionBudget {
        serde_json::from_value(json!({
            "metadata": {"namespace": "shop", "name": "web", "generation": generation},
            "spec": {"minAvailable": 2},
            "status": status,
        }))
        .unwrap()
    }

    fn status(observed: i64, current: i32, desired: i32) -> serde_json::Value {
        json!({"observedGeneration": observed, "currentHealthy": current,
               "desiredHealthy": desired, "disruptionsAllowed": 0, "expectedPods": 3})
    }

    #[test]
    fn a_budget_is_healthy_with_its_healthy_pods_counted_for_its_generation() {
        assert_eq!(shortfall(&budget(1, status(1, 2, 2))), None);
        assert_eq!(shortfall(&budget(1, status(1, 3, 2))), None);
        assert_eq!(
            shortfall(&budget(1, status(1, 1, 2))).as_deref(),
            Some("1 healthy pods of the 2 it needs")
        );
        // Counted for an older spec: not yet known.
        assert!(
            shortfall(&budget(2, status(1, 3, 2)))
                .unwrap()
                .contains("generation 1")
        );
        let mut unset = budget(1, json!({}));
        unset.status = None;
        assert!(shortfall(&unset).unwrap().contains("no status"));
    }

    #[test]
    fn only_the_recorded_budgets_count_and_only_once_their_namespace_is_listed() {
        let wanted = wanted_of(&Covering::Budgets(vec!["shop/web".into()]));
        let mut seen = BTreeMap::new();
        assert_eq!(still_short(&wanted, &seen), None);
        seen.insert(
            "shop".to_string(),
            Seen {
                listed: true,
                budgets: BTreeMap::from([
                    ("web".to_string(), Some("1 of 2".to_string())),
                    ("other".to_string(), Some("0 of 1".to_string())),
                ]),
            },
        );
        assert_eq!(
            still_short(&wanted, &seen),
            Some(vec!["shop/web: 1 of 2".to_string()])
        );
        // Every budget of a namespace recorded as a whole.
        let whole = wanted_of(&Covering::Namespaces(vec!["shop".into()]));
        assert_eq!(still_short(&whole, &seen).unwrap().len(), 2);
        // Healed, or deleted: nothing left.
        seen.get_mut("shop").unwrap().budgets.remove("web");
        assert_eq!(still_short(&wanted, &seen), Some(vec![]));
    }
}
