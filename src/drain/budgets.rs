//! PodDisruptionBudgets that refused an eviction: one watch per budget (kube's watcher), and a
//! gate where the evictions it blocks wait. The watch hands out as many wake-ups as the budget
//! allows disruptions, first come first served (`Notify::notify_one` is FIFO), so an opening
//! wakes a few pods instead of every blocked pod at once. While the budget is watched its
//! waiters wait for it alone (a timer would only resend an eviction the budget still refuses);
//! a budget that cannot be watched (403 with kubelet credentials, 404) or whose watch is failing
//! leaves its waiters on the `retry_interval` timer, and each of those changes wakes them.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::Notify;
use tokio::task::JoinSet;

use super::tracker::watch_error;
use crate::api::Clients;
use crate::api::client::WATCH_SECONDS;
use crate::api::path::segment;
use crate::api::retry;

#[derive(Default)]
pub struct BudgetGate {
    pub notify: Notify,
    /// The budget cannot be watched: waiters use the timer.
    unavailable: AtomicBool,
    /// The watch failed and has not answered since: waiters use the timer meanwhile.
    failing: AtomicBool,
}

impl BudgetGate {
    /// Publishes one observation of the budget.
    fn observed(&self, allowed: Option<i32>) {
        match allowed {
            // Unknown (no status yet) or gone: anyone may try.
            None => self.notify.notify_waiters(),
            Some(a) => {
                for _ in 0..a.max(0) {
                    self.notify.notify_one();
                }
            }
        }
    }

    /// Whether the budget's changes reach the gate: its watch is starting or answering. When
    /// not, waiters need the timer.
    pub fn is_watched(&self) -> bool {
        !self.unavailable.load(Ordering::Relaxed) && !self.failing.load(Ordering::Relaxed)
    }

    /// The watch answered again after failing.
    fn answered(&self) {
        self.failing.store(false, Ordering::Relaxed);
    }

    /// The watch failed: waiters wake and fall back on the timer until it answers again.
    fn failed(&self) {
        if !self.failing.swap(true, Ordering::Relaxed) {
            self.notify.notify_waiters();
        }
    }
}

/// The gates of the budgets met so far, and their watches (aborted with this value).
pub struct Budgets {
    clients: Clients,
    gates: Mutex<HashMap<String, Arc<BudgetGate>>>,
    tasks: Mutex<JoinSet<()>>,
}

impl Budgets {
    pub fn new(clients: Clients) -> Budgets {
        Budgets {
            clients,
            gates: Mutex::default(),
            tasks: Mutex::new(JoinSet::new()),
        }
    }

    /// The gate of a budget; the first call starts its watch.
    pub fn gate(&self, namespace: &str, name: &str) -> Arc<BudgetGate> {
        let key = format!("{namespace}/{name}");
        let mut gates = self.gates.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(g) = gates.get(&key) {
            return g.clone();
        }
        let gate = Arc::new(BudgetGate::default());
        gates.insert(key, gate.clone());
        self.tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .spawn(watch_budget(
                self.clients.clone(),
                namespace.to_string(),
                name.to_string(),
                gate.clone(),
            ));
        gate
    }

    /// Stops every budget watch.
    pub fn stop(&self) {
        self.tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .abort_all();
    }
}

fn allowed_of(pdb: &PodDisruptionBudget) -> Option<i32> {
    pdb.status.as_ref().map(|s| s.disruptions_allowed)
}

async fn watch_budget(clients: Clients, namespace: String, name: String, gate: Arc<BudgetGate>) {
    let object = format!("poddisruptionbudget {namespace}/{name}");
    let Ok(path_namespace) = segment(&namespace) else {
        // Pods with such a namespace are never planned; nothing to watch.
        gate.unavailable.store(true, Ordering::Relaxed);
        gate.notify.notify_waiters();
        return;
    };
    let api: Api<PodDisruptionBudget> = Api::namespaced(clients.watch.clone(), &path_namespace);
    let config = watcher::Config::default()
        .fields(&format!("metadata.name={name}"))
        .timeout(WATCH_SECONDS);
    let stream = watcher::watcher(api, config).backoff(retry::for_watches());
    let mut stream = std::pin::pin!(stream);
    let mut seen = false;
    while let Some(event) = stream.next().await {
        if event.is_ok() {
            gate.answered();
        }
        match event {
            Ok(Event::Init) => seen = false,
            Ok(Event::InitApply(p) | Event::Apply(p)) => {
                seen = true;
                gate.observed(allowed_of(&p));
            }
            Ok(Event::InitDone) if !seen => gate.observed(None),
            Ok(Event::InitDone) => {}
            Ok(Event::Delete(_)) => gate.observed(None),
            Err(e) => {
                let e = watch_error(&clients, &object, e);
                if e.is_forbidden() || e.is_not_found() {
                    tracing::info!("cannot watch {e}; retrying blocked evictions on a timer");
                    gate.unavailable.store(true, Ordering::Relaxed);
                    gate.notify.notify_waiters();
                    return;
                }
                tracing::debug!("watch of {e}");
                gate.failed();
            }
        }
    }
}
