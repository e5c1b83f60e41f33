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
//! The attachments are polled with bounded lists paced by the project's one backoff
//! ([`crate::api::retry::Backoff`], at most 2 s apart): a handful of requests during the seconds
//! a detach takes, and no watch to keep alive at the end of the drain.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::{Api, ListParams};
use tokio::time::Instant;

use super::run::Row;
use crate::api::Clients;
use crate::api::retry::Backoff;
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

/// The attachments on `node` of `volumes` in an attachment list: name -> volume.
fn attachments_of(
    list: &[VolumeAttachment],
    node: &str,
    volumes: &BTreeMap<String, String>,
) -> BTreeMap<String, String> {
    list.iter()
        .filter(|va| va.spec.node_name == node)
        .filter_map(|va| {
            let pv = va.spec.source.persistent_volume_name.as_ref()?;
            let name = va.metadata.name.clone()?;
            volumes.contains_key(pv).then(|| (name, pv.clone()))
        })
        .collect()
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
    let api: Api<VolumeAttachment> = Api::all(clients.api.clone());
    let object = format!("volumeattachments of node {node}");
    let mut backoff = Backoff::new();
    let mut reports: Vec<VolumeReport> = Vec::new();
    let mut first = true;
    let lp = ListParams::default();
    loop {
        let list = match clients.retry(deadline, &object, || api.list(&lp)).await {
            Ok(list) => list.items,
            Err(e) => {
                let message = format!(
                    "cannot list {e}; the detach of the evicted pods' volumes is not known"
                );
                tracing::warn!("{message}");
                errors.push(message);
                return reports;
            }
        };
        let attached = attachments_of(&list, node, &volumes);
        if first {
            first = false;
            reports = attached
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
                    "waiting for {} volumes of the evicted pods to detach from node {node}: {}",
                    names.len(),
                    names.join(", ")
                );
            }
        }
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
            return reports;
        }
        let wake = (Instant::now() + backoff.next_pause()).min(deadline);
        tokio::time::sleep_until(wake).await;
        if wake >= deadline {
            let still: Vec<&str> = reports
                .iter()
                .filter(|r| r.detached_ms.is_none())
                .map(|r| r.volume.as_str())
                .collect();
            tracing::warn!(
                "volumes still attached to node {node} at the drain deadline: {}",
                still.join(", ")
            );
            return reports;
        }
    }
}
