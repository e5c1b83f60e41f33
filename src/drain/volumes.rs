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

use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::{self, reflector};
use kube::runtime::watcher::{self, Event};
use tokio::sync::watch;
use tokio::time::Instant;

use super::run::Row;
use super::tracker::watch_error;
use crate::api::client::WATCH_SECONDS;
use crate::api::{ApiError, Clients, retry};
use crate::policy::filters::Action;
use crate::policy::plan::Plan;
use crate::report::{Outcome, VolumeReport};

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

/// What the watch saw, published by its task.
#[derive(Debug, Clone, Default)]
struct Seen {
    /// The first complete list is in.
    listed: bool,
    /// When it came (ms after the drain started).
    listed_ms: u64,
    /// Every attachment of interest seen on this node, by name.
    tracked: BTreeMap<String, Tracked>,
    /// The last error; `fatal` when it ended the watch before its first list.
    error: Option<ApiError>,
    fatal: bool,
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

/// Starts the watch of the attachments (kube's watcher into a reflector store) in a task that
/// publishes every attachment on `node` it sees, and when each goes.
fn spawn_watch(
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
async fn first_look(mut seen: watch::Receiver<Seen>, by: Instant) -> Option<Seen> {
    let done = tokio::time::timeout_at(by, seen.wait_for(|s| s.listed || s.fatal)).await;
    match done {
        Ok(Ok(s)) => Some(s.clone()),
        _ => None,
    }
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
async fn watch_until_gone(
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

/// The wait by name: each attachment read every [`BY_NAME_POLL`] until gone, or `deadline`.
/// `tracked`: the attachments found before the evictions (`None`: not looked at then, so the
/// first read decides, and one already gone is reported as detached by that read).
async fn poll_until_gone(
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
async fn get_by_name(
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
