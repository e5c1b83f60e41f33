//! The watch of a slot wait: the group's slot Leases, followed by kube's watcher into a
//! reflector store (a look needs what it has seen).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector;
use kube::runtime::watcher::{self, Event};
use tokio::time::Instant;

use super::Slots;
use crate::api::client::WATCH_SECONDS;
use crate::api::retry;
use crate::fleet::{GROUP_LABEL, holder_of};

/// Resolves at the next change of a watched Lease (written or deleted); never when the watch
/// only lists, or ends. A failing watch yields its errors at the backoff's pace.
async fn next_change(changes: &mut Changes) {
    loop {
        match changes.next().await {
            Some(Ok(Event::Apply(_) | Event::Delete(_))) | Some(Err(_)) => return,
            Some(Ok(_)) => {}
            None => std::future::pending::<()>().await,
        }
    }
}

/// What a watch has seen of its Leases: `None` until it has listed them once.
pub(super) struct Watched {
    store: reflector::Store<Lease>,
    ready: Arc<AtomicBool>,
}

impl Watched {
    /// Whether a Lease seen is held by node `node`.
    pub(super) fn holds(&self, node: &str) -> bool {
        self.leases().is_some_and(|l| {
            l.iter()
                .any(|l| holder_of(l).is_some_and(|h| h.node == node))
        })
    }

    pub(super) fn leases(&self) -> Option<Vec<Arc<Lease>>> {
        self.ready
            .load(Ordering::Relaxed)
            .then(|| self.store.state())
    }
}

/// A watch of one group's slot Leases ([`Slots::changes`]).
pub type Changes = BoxStream<'static, Result<Event<Lease>, watcher::Error>>;

/// Waits for the next look at a group: a change of its Leases, or `every` without one (a
/// holder that went stale, its Node deleted or back in another boot or `hold_max` passed,
/// writes nothing to the Lease), or `until`.
pub async fn next_look(changes: &mut Changes, until: Instant, every: Duration) {
    let look = until.min(Instant::now() + every);
    tokio::select! {
        () = next_change(changes) => {}
        () = tokio::time::sleep_until(look) => {}
    }
}

impl Slots<'_> {
    /// kube's watcher of the Leases of the lease namespace that `config` selects.
    pub(super) fn lease_watch(&self, config: watcher::Config) -> Changes {
        let watched: Api<Lease> = Api::namespaced(
            self.clients.watch.clone(),
            &self.settings.fleet.lease_namespace,
        );
        watcher::watcher(watched, config.timeout(WATCH_SECONDS))
            .backoff(retry::for_watches())
            .boxed()
    }

    /// A watch of this node's namespace's Leases labelled `labels`, and what it has seen.
    pub(super) fn watched(&self, labels: &str) -> (Changes, Watched) {
        let (store, writer) = reflector::store();
        let ready = Arc::new(AtomicBool::new(false));
        let listed = ready.clone();
        let changes = self
            .lease_watch(watcher::Config::default().labels(labels))
            .reflect(writer)
            .inspect(move |e| {
                if matches!(e, Ok(Event::InitDone)) {
                    listed.store(true, Ordering::Relaxed);
                }
            })
            .boxed();
        (changes, Watched { store, ready })
    }

    /// The group's Leases, watched: a slot given back wakes the next look at once
    /// ([`next_look`]).
    pub fn changes(&self, group: &str) -> Changes {
        self.lease_watch(watcher::Config::default().labels(&format!("{GROUP_LABEL}={group}")))
    }
}
