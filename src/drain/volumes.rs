//! Waiting for detach (`drain.wait_for_detach`): once the evicted pods are gone, the drain holds
//! until the VolumeAttachments (`storage.k8s.io/v1`) on this node of their persistent volumes
//! are gone, i.e. the attach-detach controller has detached them, or until the deadline.
//! Without this a machine that powers off first leaves the volume attached until the controller
//! force-detaches it (about 6 minutes, its maxWaitForUnmountDuration) and the replacement pod
//! hangs on a Multi-Attach error (aws-ebs-csi-driver FAQ). Claims still mounted by a pod left on
//! the node (a storage DaemonSet, a skipped pod) are not waited for: their attachment stays.
//!
//! Everything about a volume is read before the first eviction ([`Detach::start`]): pod volume
//! -> PersistentVolumeClaim (`spec.volumeName`) -> PersistentVolume (`spec.csi`: driver and
//! volume handle, which name its attachment), and the attachments as they are then. A node's own
//! credentials may read a claim and its volume only while a pod on the node references the
//! claim (the Node authorizer's graph: 403 three milliseconds after the pod went, on a 1.36
//! server), and the attach-detach controller may delete an attachment within tens of
//! milliseconds of the pod's deletion, before any list made after it.
//!
//! The attachments are followed with one watch into kube's reflector store (the watcher: relists
//! after 410, the project's backoff after errors, watch requests paced), started before the
//! evictions, so the lock is released the moment the last attachment is deleted and no deletion
//! is missed. There is no field selector on `spec.nodeName` for VolumeAttachments; the watch
//! covers all of them and keeps only this node's attachments of the claims' volumes. Credentials
//! that may not list them (a node's: "can only get individual resources of this type") follow
//! each attachment by its name instead, read every [`BY_NAME_POLL`]; a volume whose attachment
//! name is not known (not a CSI volume) then cannot be waited for, and the report says so.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::Api;
use tokio::sync::watch;
use tokio::time::Instant;

use super::run::Row;
use crate::api::{ApiError, Clients};
use crate::policy::filters::Action;
use crate::policy::plan::Plan;
use crate::report::{Outcome, VolumeReport};

#[path = "volumes_watched.rs"]
mod watched;
use watched::{Seen, first_look, spawn_watch, watch_until_gone};

#[path = "volumes_by_name.rs"]
mod by_name;
use by_name::{get_by_name, poll_until_gone};

/// How often an attachment followed by name is read again: the lock goes at most this long
/// after the detach.
pub const BY_NAME_POLL: Duration = Duration::from_millis(250);
/// The longest the reads before the first eviction may hold it: a quarter of the time left, at
/// most the request timeout.
const START_SHARE: u32 = 4;

/// A claim (`(namespace, name)`).
type Claim = (String, String);

/// The name of the VolumeAttachment of a CSI volume on a node: `csi-` and the hex SHA-256 of
/// the volume handle, the driver name and the node name, concatenated (kubernetes
/// `pkg/volume/csi/csi_attacher.go`, `getAttachmentName`). Pure.
pub fn attachment_name(volume_handle: &str, driver: &str, node: &str) -> String {
    let input = format!("{volume_handle}{driver}{node}");
    let digest = ring::digest::digest(&ring::digest::SHA256, input.as_bytes());
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("csi-{hex}")
}

/// The claims (`(namespace, name)`) of the evicted pods that have gone, less the claims a pod
/// still on the node mounts. Pure.
pub fn claims_to_wait_for(rows: &[Row]) -> BTreeSet<Claim> {
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

/// The claims of the pods the plan evicts, less those a pod it leaves mounts: what may need
/// waiting for once the evictions are over. Pure.
pub fn claims_to_read(plan: &Plan) -> BTreeSet<Claim> {
    let claims = |evict: bool| {
        plan.pods
            .iter()
            .filter(move |p| (p.action == Action::Evict) == evict)
            .flat_map(|p| p.claims.iter().map(|c| (p.namespace.clone(), c.clone())))
    };
    let kept: BTreeSet<Claim> = claims(false).collect();
    claims(true).filter(|c| !kept.contains(c)).collect()
}

/// A claim's volume as read before the evictions.
#[derive(Debug, Clone)]
struct Volume {
    /// `namespace/name`.
    claim: (String, String),
    /// The name of its attachment on this node, when the volume is a CSI volume.
    attachment: Option<String>,
}

/// One attachment followed: its volume and when it was seen gone (ms after the drain started).
#[derive(Debug, Clone)]
struct Tracked {
    volume: String,
    gone_ms: Option<u64>,
}

/// How the attachments are followed.
enum Follow {
    /// kube's watcher in a task (aborted on drop), publishing what it saw.
    Watch {
        seen: watch::Receiver<Seen>,
        _task: AbortOnDrop,
    },
    /// By name, for credentials that may not list: the attachments found by the look before
    /// the evictions (`None`: that look did not finish).
    ByName {
        tracked: Option<BTreeMap<String, Tracked>>,
    },
    /// No volume to follow.
    Nothing,
}

/// Aborts a task when dropped.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The detach wait of one drain, started before its first eviction.
pub struct Detach {
    node: String,
    started: Instant,
    /// volume -> what was read about it.
    volumes: BTreeMap<String, Volume>,
    follow: Follow,
    /// What could not be read; reported with the volumes.
    errors: Vec<String>,
}

impl Detach {
    /// Reads the claims and volumes of the pods `plan` evicts and takes the first look at their
    /// attachments, before the first eviction: by `deadline`, and for no longer than a quarter
    /// of the time left or the request timeout. `started`: the drain's start (report times).
    pub async fn start(
        clients: &Clients,
        node: &str,
        plan: &Plan,
        started: Instant,
        deadline: Instant,
    ) -> Detach {
        let mut detach = Detach {
            node: node.to_owned(),
            started,
            volumes: BTreeMap::new(),
            follow: Follow::Nothing,
            errors: Vec::new(),
        };
        let claims = claims_to_read(plan);
        if claims.is_empty() {
            return detach;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        let by = Instant::now() + (left / START_SHARE).min(clients.request_timeout);
        let (seen, task) = spawn_watch(clients, node, started);
        let task = AbortOnDrop(task);
        let reads = futures::future::join_all(
            claims
                .iter()
                .map(|claim| read_volume(clients, node, claim, by)),
        );
        let (reads, listed) = tokio::join!(reads, first_look(seen.clone(), by));
        for read in reads {
            match read {
                Ok(Some((pv, volume))) => {
                    detach.volumes.insert(pv, volume);
                }
                Ok(None) => {}
                Err(e) => {
                    let message = e.to_string();
                    tracing::warn!(node = %node, "{message}");
                    detach.errors.push(message);
                }
            }
        }
        if detach.volumes.is_empty() {
            return detach;
        }
        // The watch's volumes of interest are known only now: it keeps what it saw of all the
        // node's attachments and the wait filters them.
        let refused = listed
            .as_ref()
            .and_then(|s| s.fatal.then(|| s.error.clone()).flatten())
            .filter(ApiError::is_forbidden);
        detach.follow = match refused {
            None => Follow::Watch { seen, _task: task },
            Some(e) => {
                drop(task);
                detach.by_name(clients, &e, by).await
            }
        };
        detach
    }

    /// Drops the volumes whose attachment name is not known (not CSI volumes) with an error
    /// each: credentials that may not list attachments (`refusal`) cannot wait for them.
    fn drop_unnamed(
        node: &str,
        volumes: &mut BTreeMap<String, Volume>,
        refusal: &ApiError,
        errors: &mut Vec<String>,
    ) {
        volumes.retain(|pv, v| {
            if v.attachment.is_some() {
                return true;
            }
            let message = format!(
                "cannot wait for the detach of volume {pv} (claim {}/{}) from node {node}: these \
                 credentials may not list volumeattachments ({}) and the volume is not a CSI \
                 volume, so its attachment's name is not known",
                v.claim.0,
                v.claim.1,
                refusal.problem()
            );
            tracing::warn!(node = %node, "{message}");
            errors.push(message);
            false
        });
    }

    /// The follower for credentials that may not list attachments: each known name read once
    /// now (by `by`).
    async fn by_name(&mut self, clients: &Clients, refusal: &ApiError, by: Instant) -> Follow {
        Detach::drop_unnamed(&self.node, &mut self.volumes, refusal, &mut self.errors);
        if self.volumes.is_empty() {
            return Follow::Nothing;
        }
        let mut tracked = BTreeMap::new();
        for (pv, v) in &self.volumes {
            let Some(name) = &v.attachment else { continue };
            match get_by_name(clients, name, &self.node, by).await {
                Ok(true) => {
                    tracked.insert(
                        name.clone(),
                        Tracked {
                            volume: pv.clone(),
                            gone_ms: None,
                        },
                    );
                }
                Ok(false) => {}
                // Not known before the evictions; the wait's first read decides.
                Err(_) => return Follow::ByName { tracked: None },
            }
        }
        Follow::ByName {
            tracked: Some(tracked),
        }
    }

    /// Waits until the attachments on the node of `claims`' volumes (the claims of the evicted
    /// pods that went, [`claims_to_wait_for`]) are gone, or `deadline`; each is reported with
    /// the time it went (ms after the drain started), or as still attached. What could not be
    /// read goes to `errors`.
    pub async fn wait(
        self,
        clients: &Clients,
        claims: &BTreeSet<Claim>,
        deadline: Instant,
        errors: &mut Vec<String>,
    ) -> Vec<VolumeReport> {
        let Detach {
            node,
            started,
            mut volumes,
            follow,
            errors: found,
        } = self;
        errors.extend(found);
        volumes.retain(|_, v| claims.contains(&v.claim));
        if volumes.is_empty() {
            return Vec::new();
        }
        let reports = match follow {
            Follow::Nothing => return Vec::new(),
            Follow::Watch { seen, _task } => {
                match watch_until_gone(seen, &node, &volumes, deadline, errors).await {
                    Ok(reports) => reports,
                    // Refused only after the evictions began: by name from here, each first
                    // read deciding.
                    Err(refusal) => {
                        drop(_task);
                        Detach::drop_unnamed(&node, &mut volumes, &refusal, errors);
                        poll_until_gone(clients, &node, &volumes, None, started, deadline, errors)
                            .await
                    }
                }
            }
            Follow::ByName { tracked } => {
                poll_until_gone(clients, &node, &volumes, tracked, started, deadline, errors).await
            }
        };
        let still = still_attached(&reports);
        if !still.is_empty() {
            tracing::warn!(
                "volumes still attached to node {node} at the drain deadline: {}",
                still.join(", ")
            );
        }
        reports
    }
}

/// A claim could not be read before its pods' eviction (the API error names the claim).
#[derive(Debug, thiserror::Error)]
#[error("cannot read {0} before the eviction of its pods; its volume's detach is not waited for")]
struct ClaimNotRead(ApiError);

/// Reads `claim`'s bound volume and, for a CSI volume, the name of its attachment on `node`;
/// by `by`. `Ok(None)`: the claim is gone or not bound (no attachment to wait for).
async fn read_volume(
    clients: &Clients,
    node: &str,
    (ns, name): &Claim,
    by: Instant,
) -> Result<Option<(String, Volume)>, ClaimNotRead> {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(clients.api.clone(), ns);
    let object = format!("persistentvolumeclaim {ns}/{name}");
    let pvc = clients
        .retry(by, &object, || claims.get_opt(name))
        .await
        .map_err(ClaimNotRead)?;
    let Some(pv) = pvc
        .and_then(|c| c.spec)
        .and_then(|s| s.volume_name)
        .filter(|v| !v.is_empty())
    else {
        return Ok(None);
    };
    let volumes: Api<PersistentVolume> = Api::all(clients.api.clone());
    let object = format!("persistentvolume {pv}");
    // The volume names the attachment; without it a watch can still match the attachment by
    // its volume, so a refusal here is not an error yet.
    let attachment = match clients.retry(by, &object, || volumes.get_opt(&pv)).await {
        Ok(v) => v
            .and_then(|v| v.spec)
            .and_then(|s| s.csi)
            .map(|csi| attachment_name(&csi.volume_handle, &csi.driver, node)),
        Err(e) => {
            tracing::debug!(node = %node, "cannot read {e}");
            None
        }
    };
    Ok(Some((
        pv,
        Volume {
            claim: (ns.clone(), name.clone()),
            attachment,
        },
    )))
}

/// The reports of `tracked` for `volumes`: every attachment of those volumes seen, with the
/// time it went. Pure.
fn reports_of(
    tracked: &BTreeMap<String, Tracked>,
    volumes: &BTreeMap<String, Volume>,
) -> Vec<VolumeReport> {
    tracked
        .iter()
        .filter_map(|(name, t)| {
            let v = volumes.get(&t.volume)?;
            Some(VolumeReport {
                volume: t.volume.clone(),
                claim: format!("{}/{}", v.claim.0, v.claim.1),
                attachment: name.clone(),
                detached_ms: t.gone_ms,
            })
        })
        .collect()
}

/// The volumes of `reports` still attached.
fn still_attached(reports: &[VolumeReport]) -> Vec<&str> {
    reports
        .iter()
        .filter(|r| r.detached_ms.is_none())
        .map(|r| r.volume.as_str())
        .collect()
}

/// Logs each detach.
fn say_detached(reports: &[VolumeReport], node: &str) {
    for r in reports.iter().filter(|r| r.detached_ms.is_some()) {
        tracing::info!(
            "volume {} (claim {}) detached from node {node}: volumeattachment {} is gone",
            r.volume,
            r.claim,
            r.attachment
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Against `printf %s HANDLE DRIVER NODE | sha256sum`, computed outside the program.
    #[test]
    fn the_attachment_name_is_csi_and_the_sha256_of_handle_driver_and_node() {
        assert_eq!(
            attachment_name("vol-0123", "ebs.csi.aws.com", "node-a"),
            "csi-75ca382fa280a2856eb71379f0b86ec93393f4c0275616e3d8d803542c2f3d83"
        );
    }
}
