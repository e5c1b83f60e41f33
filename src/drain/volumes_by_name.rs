//! The attachments followed by name, for credentials that may not list them: each read every
//! [`BY_NAME_POLL`] until it is gone.

use std::collections::BTreeMap;

use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::Api;
use tokio::time::Instant;

use super::{BY_NAME_POLL, Tracked, Volume, reports_of, say_detached};
use crate::api::{ApiError, Clients};
use crate::report::VolumeReport;

/// The wait by name: each attachment read every [`BY_NAME_POLL`] until gone, or `deadline`.
/// `tracked`: the attachments found before the evictions (`None`: not looked at then, so the
/// first read decides, and one already gone is reported as detached by that read).
pub(super) async fn poll_until_gone(
    clients: &Clients,
    node: &str,
    volumes: &BTreeMap<String, Volume>,
    tracked: Option<BTreeMap<String, Tracked>>,
    started: Instant,
    deadline: Instant,
    errors: &mut Vec<String>,
) -> Vec<VolumeReport> {
    let looked_before = tracked.is_some();
    let mut tracked = tracked.unwrap_or_else(|| {
        volumes
            .iter()
            .filter_map(|(pv, v)| {
                let name = v.attachment.clone()?;
                Some((
                    name,
                    Tracked {
                        volume: pv.clone(),
                        gone_ms: None,
                    },
                ))
            })
            .collect()
    });
    tracked.retain(|_, t| volumes.contains_key(&t.volume));
    let mut last_error: BTreeMap<String, ApiError> = BTreeMap::new();
    loop {
        let ms = started.elapsed().as_millis() as u64;
        for (name, t) in tracked.iter_mut().filter(|(_, t)| t.gone_ms.is_none()) {
            match get_by_name(clients, name, node, deadline).await {
                Ok(true) => {}
                Ok(false) => t.gone_ms = Some(ms),
                Err(e) => {
                    last_error.insert(name.clone(), e);
                }
            }
        }
        let reports = reports_of(&tracked, volumes);
        let done = reports.iter().all(|r| r.detached_ms.is_some());
        if done || Instant::now() + BY_NAME_POLL >= deadline {
            for (name, e) in last_error {
                if tracked.get(&name).is_some_and(|t| t.gone_ms.is_none()) {
                    let message = format!(
                        "cannot read {e}; the detach of volume {} is not known",
                        tracked[&name].volume
                    );
                    tracing::warn!("{message}");
                    errors.push(message);
                }
            }
            if !looked_before {
                tracing::debug!(node = %node, "attachments first read after the evictions");
            }
            say_detached(&reports, node);
            return reports;
        }
        tokio::time::sleep(BY_NAME_POLL).await;
    }
}

/// Reads the attachment `name` (by `by`): `true` while it attaches its volume to `node`,
/// `false` once it is gone: 404, or the Node authorizer's 403 for an object it no longer relates
/// to the node ("no relationship found", `node_authorizer.go`), which is how a node's own
/// credentials see a deleted attachment.
pub(super) async fn get_by_name(
    clients: &Clients,
    name: &str,
    node: &str,
    by: Instant,
) -> Result<bool, ApiError> {
    let api: Api<VolumeAttachment> = Api::all(clients.api.clone());
    let object = format!("volumeattachment {name}");
    match clients.retry(by, &object, || api.get_opt(name)).await {
        Ok(va) => Ok(va.is_some_and(|va| va.spec.node_name == node)),
        Err(e) if e.is_forbidden() && e.problem().contains("no relationship found") => Ok(false),
        Err(e) => Err(e),
    }
}
