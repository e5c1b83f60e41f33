//! Waiting for detach (`drain.wait_for_detach`): once the evicted pods are gone, the drain holds
//! until the VolumeAttachments (`storage.k8s.io/v1`) on this node of their persistent volumes
//! (pod volume -> PersistentVolumeClaim in the pod's namespace -> its bound volume,
//! `spec.volumeName` -> attachment `spec.source.persistentVolumeName`) are gone, i.e. the
//! attach-detach controller has detached them, or until the deadline. Without this a machine
//! that powers off first leaves the volume attached until the controller force-detaches it
//! (about 6 minutes, its maxWaitForUnmountDuration) and the replacement pod hangs on a
//! Multi-Attach error (aws-ebs-csi-driver FAQ). Claims still mounted by a pod left on the node
//! (a storage DaemonSet, a skipped pod) are not waited for: their attachment stays.
//!
//! The attachments are followed with one watch into kube's reflector store (the watcher: relists
//! after 410, the project's backoff after errors, watch requests paced), so the lock is released
//! the moment the last attachment is deleted rather than at the next poll. There is no
//! field selector on `spec.nodeName` for VolumeAttachments; the watch covers all of them and
//! keeps only this node's attachments of the claims' volumes.

use std::collections::{BTreeMap, BTreeSet};

use futures::StreamExt;
use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, reflector};
use kube::runtime::watcher::{self, Event};
use tokio::time::Instant;

use super::run::Row;
use super::tracker::watch_error;
use crate::api::client::WATCH_SECONDS;
use crate::api::{ApiError, Clients, retry};
use crate::policy::filters::Action;
use crate::report::{Outcome, VolumeReport};

/// The claims (`(namespace, name)`) of the evicted pods that have gone, less the claims a pod
/// still on the node mounts. Pure.
pub fn claims_to_wait_for(rows: &[Row]) -> BTreeSet<(String, String)> {
    let left = |r: &Row| {
        r.plan.action == Action::Evict
            && matches!(r.report.outcome, Outcome::Evicted | Outcome::Gone)
    };
    let claims = |r: &Row| {
        r.plan
            .claims
            .iter()
            .map(|c| (r.plan.namespace.clone(), c.clone()))
            .collect::<Vec<_>>()
    };
    let kept: BTreeSet<_> = rows.iter().filter(|r| !left(r)).flat_map(claims).collect();
    rows.iter()
        .filter(|r| left(r))
        .flat_map(claims)
        .filter(|c| !kept.contains(c))
        .collect()
}

/// The attachments in `store` of `volumes` on `node`: attachment name -> volume.
fn attached(
    store: &reflector::Store<VolumeAttachment>,
    node: &str,
    volumes: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    store
        .state()
        .iter()
        .filter_map(|va| of_interest(va, node, volumes))
        .collect()
}

/// `va` when it attaches one of `volumes` to `node`: (attachment name, volume).
fn of_interest(
    va: &VolumeAttachment,
    node: &str,
    volumes: &BTreeMap<String, String>,
) -> Option<(String, String)> {
    if va.spec.node_name != node {
        return None;
    }
    let pv = va.spec.source.persistent_volume_name.as_ref()?;
    let name = va.metadata.name.clone()?;
    volumes.contains_key(pv).then(|| (name, pv.clone()))
}

/// Waits until the attachments on `node` of `claims`' volumes are gone or `deadline`; each
/// attachment seen on the first list is reported with its detach time (ms after `started`).
/// Claims and attachments that cannot be read by the deadline become `errors`.
pub async fn wait_for_detach(
    clients: &Clients,
    node: &str,
    claims: &BTreeSet<(String, String)>,
    started: Instant,
    deadline: Instant,
    errors: &mut Vec<String>,
) -> Vec<VolumeReport> {
    // volume -> the claim that mounts it, as `namespace/name`.
    let mut volumes = BTreeMap::new();
    for (ns, name) in claims {
        let api: Api<PersistentVolumeClaim> = Api::namespaced(clients.api.clone(), ns);
        let object = format!("persistentvolumeclaim {ns}/{name}");
        match clients.retry(deadline, &object, || api.get_opt(name)).await {
            Ok(Some(pvc)) => {
                if let Some(pv) = pvc
                    .spec
                    .and_then(|s| s.volume_name)
                    .filter(|v| !v.is_empty())
                {
                    volumes.insert(pv, format!("{ns}/{name}"));
                }
            }
            // A claim deleted with its pod has no attachment left to wait for.
            Ok(None) => {}
            Err(e) => {
                let message = format!("cannot read {e}; its volume's detach was not waited for");
                tracing::warn!("{message}");
                errors.push(message);
            }
        }
    }
    if volumes.is_empty() {
        return Vec::new();
    }
    let api: Api<VolumeAttachment> = Api::all(clients.watch.clone());
    let object = format!("volumeattachments of node {node}");
    let config = watcher::Config::default().timeout(WATCH_SECONDS);
    let (store, writer) = reflector::store();
    let stream = reflector(
        writer,
        watcher::watcher(api, config).backoff(retry::for_watches()),
    );
    let mut stream = std::pin::pin!(stream);
    // The attachments of interest as the first complete list found them, each with its detach
    // time once it is gone; `None` until that list is in.
    let mut reports: Option<Vec<VolumeReport>> = None;
    let mut last_error: Option<ApiError> = None;
    // The watcher never ends by itself: only the deadline or the last detach end the wait.
    while let Ok(Some(event)) = tokio::time::timeout_at(deadline, stream.next()).await {
        match event {
            // The store holds the complete list from here on.
            Ok(Event::InitDone) if reports.is_none() => {
                reports = Some(first_reports(
                    node,
                    &attached(&store, node, &volumes),
                    &volumes,
                ));
            }
            Ok(_) => {}
            Err(e) => {
                let e = watch_error(clients, &object, e);
                tracing::debug!(node = %node, "volumeattachment watch: {e}");
                // Before the first list, a final answer (403, ...) ends the wait at once.
                let fatal = reports.is_none() && !e.is_transient() && e.code() != Some(410);
                last_error = Some(e);
                if fatal {
                    break;
                }
                continue;
            }
        }
        let Some(reports) = reports.as_mut() else {
            continue;
        };
        let attached = attached(&store, node, &volumes);
        let ms = started.elapsed().as_millis() as u64;
        for r in reports.iter_mut().filter(|r| r.detached_ms.is_none()) {
            if !attached.contains_key(&r.attachment) {
                tracing::info!(
                    "volume {} (claim {}) detached from node {node}: volumeattachment {} is gone",
                    r.volume,
                    r.claim,
                    r.attachment
                );
                r.detached_ms = Some(ms);
            }
        }
        if reports.iter().all(|r| r.detached_ms.is_some()) {
            return std::mem::take(reports);
        }
    }
    let Some(reports) = reports else {
        let why = last_error.map_or_else(
            || format!("{object}: no complete list before the drain deadline"),
            |e| e.to_string(),
        );
        let message =
            format!("cannot list {why}; the detach of the evicted pods' volumes is not known");
        tracing::warn!("{message}");
        errors.push(message);
        return Vec::new();
    };
    let still: Vec<&str> = reports
        .iter()
        .filter(|r| r.detached_ms.is_none())
        .map(|r| r.volume.as_str())
        .collect();
    tracing::warn!(
        "volumes still attached to node {node} at the drain deadline: {}",
        still.join(", ")
    );
    reports
}

/// The reports of the attachments the first list found, each still attached; logged.
fn first_reports(
    node: &str,
    attached: &BTreeMap<String, String>,
    volumes: &BTreeMap<String, String>,
) -> Vec<VolumeReport> {
    let reports: Vec<VolumeReport> = attached
        .iter()
        .map(|(va, pv)| VolumeReport {
            volume: pv.clone(),
            claim: volumes[pv].clone(),
            attachment: va.clone(),
            detached_ms: None,
        })
        .collect();
    if !reports.is_empty() {
        let names: Vec<&str> = reports.iter().map(|r| r.volume.as_str()).collect();
        tracing::info!(
            "waiting for {} of the evicted pods to detach from node {node}: {}",
            crate::words::count(names.len(), "volume", "volumes"),
            names.join(", ")
        );
    }
    reports
}
