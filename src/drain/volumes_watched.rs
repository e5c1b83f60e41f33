//! The attachments followed by one watch: kube's watcher into a reflector store, in a task that
//! publishes what it saw ([`Seen`]), waited on until the volumes' attachments are gone.

use std::collections::BTreeMap;

use futures::StreamExt;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, reflector};
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;
use tokio::time::Instant;

use super::{Tracked, Volume, reports_of, say_detached, still_attached};
use crate::api::client::WATCH_SECONDS;
use crate::api::{ApiError, Clients, retry};
use crate::drain::tracker::watch_error;
use crate::report::VolumeReport;

/// What the watch saw, published by its task.
#[derive(Debug, Clone, Default)]
pub(super) struct Seen {
    /// The first complete list is in.
    pub(super) listed: bool,
    /// When it came (ms after the drain started).
    pub(super) listed_ms: u64,
    /// Every attachment of interest seen on this node, by name.
    pub(super) tracked: BTreeMap<String, Tracked>,
    /// The last error; `fatal` when it ended the watch before its first list.
    pub(super) error: Option<ApiError>,
    pub(super) fatal: bool,
}

/// Starts the watch of the attachments (kube's watcher into a reflector store) in a task that
/// publishes every attachment on `node` it sees, and when each goes.
pub(super) fn spawn_watch(
    clients: &Clients,
    node: &str,
    started: Instant,
) -> (watch::Receiver<Seen>, tokio::task::JoinHandle<()>) {
    let (tx, rx) = watch::channel(Seen::default());
    let api: Api<VolumeAttachment> = Api::all(clients.watch.clone());
    let object = format!("volumeattachments of node {node}");
    let config = watcher::Config::default().timeout(WATCH_SECONDS);
    let (store, writer) = reflector::store();
    let stream = reflector(
        writer,
        watcher::watcher(api, config).backoff(retry::for_watches()),
    );
    let (clients, node) = (clients.clone(), node.to_owned());
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            let ms = started.elapsed().as_millis() as u64;
            match event {
                Ok(Event::InitDone) => tx.send_modify(|s| {
                    if !s.listed {
                        s.listed = true;
                        s.listed_ms = ms;
                    }
                }),
                Ok(_) => {}
                Err(e) => {
                    let e = watch_error(&clients, &object, e);
                    tracing::debug!(node = %node, "volumeattachment watch: {e}");
                    // Before the first list, a final answer (403, ...) ends the watch.
                    let fatal = !tx.borrow().listed && !e.is_transient() && e.code() != Some(410);
                    tx.send_modify(|s| {
                        s.error = Some(e);
                        s.fatal = fatal;
                    });
                    if fatal {
                        return;
                    }
                    continue;
                }
            }
            if !tx.borrow().listed {
                continue;
            }
            let now: BTreeMap<String, String> = store
                .state()
                .iter()
                .filter(|va| va.spec.node_name == node)
                .filter_map(|va| {
                    let pv = va.spec.source.persistent_volume_name.clone()?;
                    Some((va.metadata.name.clone()?, pv))
                })
                .collect();
            tx.send_if_modified(|s| track(&mut s.tracked, &now, ms));
        }
    });
    (rx, task)
}

/// Adds the attachments in `now` to `tracked` and marks those no longer there gone at `ms`;
/// whether anything changed. Pure.
fn track(tracked: &mut BTreeMap<String, Tracked>, now: &BTreeMap<String, String>, ms: u64) -> bool {
    let mut changed = false;
    for (name, pv) in now {
        if !tracked.contains_key(name) {
            tracked.insert(
                name.clone(),
                Tracked {
                    volume: pv.clone(),
                    gone_ms: None,
                },
            );
            changed = true;
        }
    }
    for (name, t) in tracked.iter_mut() {
        if t.gone_ms.is_none() && !now.contains_key(name) {
            t.gone_ms = Some(ms);
            changed = true;
        }
    }
    changed
}

/// Waits by `by` for the watch's first list or its final error; what it saw then (`None`: it
/// had not listed by then).
pub(super) async fn first_look(mut seen: watch::Receiver<Seen>, by: Instant) -> Option<Seen> {
    let done = tokio::time::timeout_at(by, seen.wait_for(|s| s.listed || s.fatal)).await;
    match done {
        Ok(Ok(s)) => Some(s.clone()),
        _ => None,
    }
}

/// Volumes whose attachment a look after the pods went did not find, though nothing had looked
/// before the evictions: reported as detached by that look (the pod's deletion and the
/// attachment's absence), not left out.
fn absent_at_first_look(
    reports: &mut Vec<VolumeReport>,
    volumes: &BTreeMap<String, Volume>,
    at_ms: u64,
    node: &str,
) {
    for (pv, v) in volumes {
        if reports.iter().any(|r| &r.volume == pv) {
            continue;
        }
        let attachment = v.attachment.clone().unwrap_or_default();
        tracing::info!(
            "volume {pv} (claim {}/{}) detached from node {node} before the first look at its \
             attachments",
            v.claim.0,
            v.claim.1
        );
        reports.push(VolumeReport {
            volume: pv.clone(),
            claim: format!("{}/{}", v.claim.0, v.claim.1),
            attachment,
            detached_ms: Some(at_ms),
        });
    }
}

/// The wait on the watch: until every attachment seen of `volumes` is gone, or `deadline`.
/// `Err`: the watch's first list was refused (403), so the caller follows by name.
pub(super) async fn watch_until_gone(
    mut seen: watch::Receiver<Seen>,
    node: &str,
    volumes: &BTreeMap<String, Volume>,
    deadline: Instant,
    errors: &mut Vec<String>,
) -> Result<Vec<VolumeReport>, ApiError> {
    let listed_before = seen.borrow().listed;
    let object = format!("volumeattachments of node {node}");
    let mut announced = false;
    loop {
        let now = seen.borrow_and_update().clone();
        // The deadline passed, or the watch's task ended (its error, if any, is in `now`).
        let last = Instant::now() >= deadline || seen.has_changed().is_err();
        if now.listed {
            let mut reports = reports_of(&now.tracked, volumes);
            if !listed_before {
                absent_at_first_look(&mut reports, volumes, now.listed_ms, node);
            }
            if !announced {
                announced = true;
                let waiting = still_attached(&reports);
                if !waiting.is_empty() {
                    tracing::info!(
                        "waiting for {} of the evicted pods to detach from node {node}: {}",
                        crate::words::count(waiting.len(), "volume", "volumes"),
                        waiting.join(", ")
                    );
                }
            }
            if last || reports.iter().all(|r| r.detached_ms.is_some()) {
                say_detached(&reports, node);
                return Ok(reports);
            }
        } else if now.fatal || last {
            if let Some(e) = now.error.clone().filter(|e| now.fatal && e.is_forbidden()) {
                return Err(e);
            }
            let why = now.error.map_or_else(
                || format!("{object}: no complete list before the drain deadline"),
                |e| e.to_string(),
            );
            let message =
                format!("cannot list {why}; the detach of the evicted pods' volumes is not known");
            tracing::warn!("{message}");
            errors.push(message);
            return Ok(Vec::new());
        }
        // A change, the deadline, or the task's end: each leads to one more pass.
        let _ = tokio::time::timeout_at(deadline, seen.changed()).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracking_adds_what_appears_and_times_what_goes() {
        let mut tracked = BTreeMap::new();
        let one = BTreeMap::from([("va-1".to_string(), "pv-1".to_string())]);
        assert!(track(&mut tracked, &one, 5));
        assert!(!track(&mut tracked, &one, 6), "nothing new");
        assert!(track(&mut tracked, &BTreeMap::new(), 40));
        assert_eq!(tracked["va-1"].gone_ms, Some(40));
        assert!(!track(&mut tracked, &BTreeMap::new(), 50), "gone once");
        assert_eq!(tracked["va-1"].gone_ms, Some(40));
    }
}
