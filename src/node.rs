//! The Node side of a drain: the marker annotation, the guarded taint, cordon, restore, and
//! waiting for the Node to be Ready.
//!
//! Rule: record on the Node what we are about to change before changing it, and undo only that.
//! The marker is written with a resourceVersion precondition, so what it records is what was
//! there when it was written. Each change we make is recorded in the marker by the same write
//! that makes it: the cordon is a merge patch carrying the resourceVersion we read and the marker
//! with `cordoned: true`; a taint edit is a JSON patch whose first operation `test`s the whole
//! taint list we read (kured's guard) and which also `test`s and rewrites the marker. So a
//! concurrent writer's taint is never lost, an admin's cordon is never taken for ours, and
//! restore undoes exactly what the marker lists. On a failed guard (422 or 409) we read the Node
//! again and retry; transient failures (no answer, 5xx, 429) are retried 100 ms doubling to 2 s
//! until the caller's deadline.

use std::future::Future;
use std::path::Path;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Taint};
use kube::api::{Api, Patch, PatchParams, WatchEvent, WatchParams};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::time::Instant;

use crate::client::{ApiError, Clients, WATCH_GRACE, WATCH_SECONDS};
use crate::config::Settings;

/// The annotation holding the marker JSON.
pub const MARKER_ANNOTATION: &str = "kube-shutdown-drain/marker";
/// [`MARKER_ANNOTATION`] as a JSON pointer (RFC 6901: `/` is written `~1`).
const MARKER_POINTER: &str = "/metadata/annotations/kube-shutdown-drain~1marker";
/// Read-modify-write attempts before a guarded write gives up.
const GUARDED_ATTEMPTS: usize = 10;
/// Pause between attempts of a guarded write, so a busy writer can finish.
const GUARDED_PAUSE: Duration = Duration::from_millis(50);
/// First pause after a transient failure (no answer, 5xx, 429); doubled up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(100);
/// Longest pause between retries of a transient failure (the drain path uses the same curve).
const RETRY_MAX: Duration = Duration::from_secs(2);
/// The field manager name on our patches.
pub const FIELD_MANAGER: &str = "kube-shutdown-drain";

/// What prepare is about to change and what it changed, stored on the Node before the change.
///
/// Markers written by older versions lack `cordoned` and `taints`: they read as "we cordoned
/// nothing and added no taint", so restore changes nothing for them but clearing the marker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Marker {
    /// The node was already cordoned when the first prepare read it (for `status`).
    pub was_unschedulable: bool,
    /// The configured taint was already there when the first prepare read it (for `status`).
    #[serde(default)]
    pub taint_was_present: bool,
    /// The boot that wrote the marker (`/proc/sys/kernel/random/boot_id`).
    pub boot_id: String,
    /// RFC 3339.
    pub time: String,
    pub why: String,
    /// We cordoned the node: set by the same guarded write that cordoned it.
    #[serde(default)]
    pub cordoned: bool,
    /// The taints we added, each recorded by the same guarded write that added it; restore
    /// removes exactly these, even if the configuration changed in between.
    #[serde(default)]
    pub taints: Vec<MarkerTaint>,
}

/// A taint we added, by key and effect (a node holds at most one taint per key and effect).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MarkerTaint {
    pub key: String,
    pub effect: String,
}

impl std::fmt::Display for MarkerTaint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.key, self.effect)
    }
}

/// A Node operation failed. Every variant names the node.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("node {node} does not exist")]
    Missing { node: String },
    #[error("cannot read node {node}: {source}")]
    Get { node: String, source: ApiError },
    #[error("cannot write the marker on node {node}, so nothing else was changed: {source}")]
    WriteMarker { node: String, source: ApiError },
    #[error("the marker annotation on node {node} is not valid: {source}")]
    BadMarker {
        node: String,
        source: serde_json::Error,
    },
    #[error("the marker on node {node} was removed by another writer while we {what} the node")]
    MarkerGone { node: String, what: &'static str },
    #[error("cannot build the {what} patch for node {node}: {source}")]
    BuildPatch {
        node: String,
        what: &'static str,
        source: serde_json::Error,
    },
    #[error("cannot {what} node {node}: {source}")]
    Patch {
        node: String,
        what: &'static str,
        source: ApiError,
    },
    #[error(
        "left taint {taint} on node {node}: these credentials may not remove it ({source}); the \
         marker still lists it, so a restore with credentials that may change taints removes it"
    )]
    TaintLeft {
        node: String,
        /// `key:effect`.
        taint: String,
        source: ApiError,
    },
    #[error("node {node} kept changing; gave up the {what} edit after {attempts} attempts")]
    Contended {
        node: String,
        what: &'static str,
        attempts: usize,
    },
    #[error("node {node} is not Ready after waiting {waited:?}")]
    NotReady { node: String, waited: Duration },
    #[error("cannot read the boot id from {path}: {source}")]
    BootId {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
}

impl NodeError {
    /// No usable answer from the API server until the deadline: no answer at all, a timeout or a
    /// 5xx (each retried first).
    pub fn is_unreachable(&self) -> bool {
        match self {
            NodeError::Get { source, .. }
            | NodeError::WriteMarker { source, .. }
            | NodeError::Patch { source, .. } => {
                source.is_unreachable() || source.code().is_some_and(|c| c >= 500)
            }
            _ => false,
        }
    }
}

/// The result of prepare.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrepareOutcome {
    /// The marker as it is on the Node after prepare.
    pub marker: Marker,
    /// We added the taint now.
    pub tainted: bool,
    /// The taint could not be added because these credentials may not change taints (403, e.g.
    /// the kubelet's own kubeconfig under NodeRestriction); the rest went on.
    pub taint_forbidden: bool,
    /// We cordoned the node now.
    pub cordoned: bool,
}

/// The result of restore.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreOutcome {
    /// The marker that was acted on; `None` when there was nothing to restore.
    pub marker: Option<Marker>,
    pub uncordoned: bool,
    pub untainted: bool,
    /// The marker said we cordoned, but someone else had already uncordoned.
    pub left_cordon_alone: bool,
}

/// Reads the current boot ID.
pub fn read_boot_id(path: &Path) -> Result<String, NodeError> {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .map_err(|source| NodeError::BootId {
            path: path.to_path_buf(),
            source,
        })
}

fn now_rfc3339() -> String {
    jiff::Timestamp::now().to_string()
}

fn taints(node: &Node) -> Vec<Taint> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
}

fn is_unschedulable(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
}

fn is_ours(t: &Taint, key: &str, effect: &str) -> bool {
    t.key == key && t.effect == effect
}

/// The marker annotation's text, as stored.
fn marker_text(node: &Node) -> Option<&String> {
    node.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(MARKER_ANNOTATION))
}

/// Reads the marker from a Node object.
pub fn marker_of(node: &Node, name: &str) -> Result<Option<Marker>, NodeError> {
    match marker_text(node) {
        None => Ok(None),
        Some(text) => serde_json::from_str(text)
            .map(Some)
            .map_err(|source| NodeError::BadMarker {
                node: name.to_string(),
                source,
            }),
    }
}

fn marker_json(marker: &Marker, node: &str) -> Result<String, NodeError> {
    serde_json::to_string(marker).map_err(|source| NodeError::BuildPatch {
        node: node.to_string(),
        what: "marker",
        source,
    })
}

/// Pauses between attempts after transient failures, until a deadline.
struct Backoff {
    next: Duration,
    deadline: Instant,
}

impl Backoff {
    fn new(deadline: Instant) -> Backoff {
        Backoff {
            next: RETRY_FIRST,
            deadline,
        }
    }

    /// Sleeps before the next attempt; `false` (at once) when the deadline leaves no room.
    async fn pause(&mut self) -> bool {
        if Instant::now() + self.next >= self.deadline {
            return false;
        }
        tokio::time::sleep(self.next).await;
        self.next = (self.next * 2).min(RETRY_MAX);
        true
    }
}

/// Node operations for one node.
pub struct NodeOps<'a> {
    pub clients: &'a Clients,
    pub settings: &'a Settings,
}

impl NodeOps<'_> {
    fn name(&self) -> &str {
        &self.settings.node_name
    }

    fn api(&self) -> Api<Node> {
        Api::all(self.clients.api.clone())
    }

    /// Runs one request, again after each transient failure, until `deadline`. Every write we
    /// retry this way is guarded, so one that was applied although its answer was lost fails
    /// its guard on the next attempt instead of applying twice.
    async fn call<T, F, Fut>(&self, deadline: Instant, what: &str, mut f: F) -> Result<T, ApiError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, ApiError>>,
    {
        let mut backoff = Backoff::new(deadline);
        loop {
            match f().await {
                Err(e) if e.is_transient() => {
                    let node = self.name();
                    if !backoff.pause().await {
                        return Err(e);
                    }
                    tracing::debug!("{what} node {node} failed ({e}); retrying");
                }
                r => return r,
            }
        }
    }

    /// GETs the Node; 404 is [`NodeError::Missing`].
    pub async fn get(&self) -> Result<Node, NodeError> {
        self.get_by(Instant::now()).await
    }

    /// GETs the Node, retrying transient failures until `deadline`.
    pub async fn get_by(&self, deadline: Instant) -> Result<Node, NodeError> {
        let name = self.name().to_string();
        let api = self.api();
        self.call(deadline, "reading", || self.clients.timed(api.get(&name)))
            .await
            .map_err(|source| {
                if source.is_not_found() {
                    NodeError::Missing { node: name.clone() }
                } else {
                    NodeError::Get {
                        node: name.clone(),
                        source,
                    }
                }
            })
    }

    /// A merge patch, retried after transient failures until `deadline`.
    async fn merge(
        &self,
        deadline: Instant,
        what: &str,
        patch: serde_json::Value,
    ) -> Result<Node, ApiError> {
        let pp = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..PatchParams::default()
        };
        let patch = Patch::Merge(patch);
        let api = self.api();
        self.call(deadline, what, || {
            self.clients.timed(api.patch(self.name(), &pp, &patch))
        })
        .await
    }

    /// A JSON patch, retried after transient failures until `deadline`.
    async fn patch_json(
        &self,
        deadline: Instant,
        what: &str,
        patch: json_patch::Patch,
    ) -> Result<Node, ApiError> {
        let pp = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..PatchParams::default()
        };
        let patch = Patch::<()>::Json(patch);
        let api = self.api();
        self.call(deadline, what, || {
            self.clients.timed(api.patch(self.name(), &pp, &patch))
        })
        .await
    }

    /// Writes the marker, then the taint, then the cordon; transient failures are retried until
    /// `deadline`. If the marker cannot be written nothing else is changed. The cordon is
    /// attempted even when the taint failed; that failure is returned after it.
    #[tracing::instrument(skip_all, fields(node = %self.settings.node_name, boot_id = %boot_id))]
    pub async fn prepare(
        &self,
        why: &str,
        boot_id: &str,
        deadline: Instant,
    ) -> Result<PrepareOutcome, NodeError> {
        let node_name = self.name().to_string();
        let t = &self.settings.taint;
        let mut node = self.get_by(deadline).await?;

        // 1. The marker, guarded by the resourceVersion we read it with.
        let mut attempts = 0;
        let marker = loop {
            attempts += 1;
            let existing = marker_of(&node, &node_name)?;
            let present = taints(&node)
                .iter()
                .any(|x| is_ours(x, &t.key, t.effect.as_str()));
            let marker = match existing {
                // An earlier prepare that was not restored: what it recorded (what was there
                // before, what it changed) is still the truth.
                Some(m) => Marker {
                    boot_id: boot_id.to_string(),
                    time: now_rfc3339(),
                    why: why.to_string(),
                    ..m
                },
                None => Marker {
                    was_unschedulable: is_unschedulable(&node),
                    taint_was_present: t.enabled && present,
                    boot_id: boot_id.to_string(),
                    time: now_rfc3339(),
                    why: why.to_string(),
                    cordoned: false,
                    taints: Vec::new(),
                },
            };
            let patch = json!({"metadata": {
                "resourceVersion": node.metadata.resource_version,
                "annotations": {MARKER_ANNOTATION: marker_json(&marker, &node_name)?},
            }});
            match self.merge(deadline, "writing the marker on", patch).await {
                Ok(n) => {
                    node = n;
                    break marker;
                }
                Err(e) if e.is_conflict() && attempts < GUARDED_ATTEMPTS => {
                    tracing::debug!(
                        "marker write on node {node_name} conflicted; reading it again"
                    );
                    tokio::time::sleep(GUARDED_PAUSE).await;
                    node = self.get_by(deadline).await?;
                }
                Err(e) if e.is_conflict() => {
                    return Err(NodeError::Contended {
                        node: node_name,
                        what: "marker",
                        attempts,
                    });
                }
                Err(source) => {
                    return Err(NodeError::WriteMarker {
                        node: node_name,
                        source,
                    });
                }
            }
        };
        tracing::info!(
            was_unschedulable = marker.was_unschedulable,
            taint_was_present = marker.taint_was_present,
            "wrote marker on node {node_name}"
        );

        // 2. The taint, recorded in the marker by the same write.
        let (mut tainted, mut taint_forbidden, mut taint_error) = (false, false, None);
        if t.enabled {
            let ours = Taint {
                key: t.key.clone(),
                value: t.value.clone(),
                effect: t.effect.as_str().to_string(),
                time_added: None,
            };
            match self
                .edit_taints(node.clone(), TaintEdit::Add(ours), deadline)
                .await
            {
                Ok((n, added)) => {
                    node = n;
                    tainted = added;
                }
                Err(NodeError::Patch { source, .. }) if source.is_forbidden() => {
                    tracing::warn!(
                        "may not taint node {node_name} (403; kubelet credentials?); cordoning without the taint"
                    );
                    taint_forbidden = true;
                }
                Err(e) => {
                    tracing::error!("{e}; cordoning node {node_name} anyway");
                    taint_error = Some(e);
                }
            }
        }

        // 3. The cordon, recorded in the marker by the same write.
        let cordoned = match self.cordon(node, deadline).await {
            Ok((n, cordoned)) => {
                node = n;
                cordoned
            }
            Err(e) => {
                if let Some(first) = taint_error {
                    tracing::error!("{e}");
                    return Err(first);
                }
                return Err(e);
            }
        };
        if let Some(e) = taint_error {
            return Err(e);
        }
        let marker = marker_of(&node, &node_name)?.unwrap_or(marker);
        Ok(PrepareOutcome {
            marker,
            tainted,
            taint_forbidden,
            cordoned,
        })
    }

    /// Cordons the node unless it is already cordoned, with a merge patch that carries the
    /// resourceVersion we read and the marker with `cordoned: true`. On a conflict the Node is
    /// read again: cordoned meanwhile by someone else, it is left alone and not recorded as ours.
    /// Returns the Node and whether we cordoned it.
    async fn cordon(&self, mut node: Node, deadline: Instant) -> Result<(Node, bool), NodeError> {
        let node_name = self.name().to_string();
        let mut sent = false;
        for _ in 0..GUARDED_ATTEMPTS {
            let mut marker = marker_of(&node, &node_name)?.ok_or(NodeError::MarkerGone {
                node: node_name.clone(),
                what: "cordoned",
            })?;
            if is_unschedulable(&node) {
                // `sent`: a cordon of ours that was applied although its answer was lost.
                let ours_now = sent && marker.cordoned;
                if !ours_now {
                    tracing::info!(
                        recorded_as_ours = marker.cordoned,
                        "node {node_name} is already cordoned"
                    );
                }
                return Ok((node, ours_now));
            }
            marker.cordoned = true;
            let patch = json!({
                "metadata": {
                    "resourceVersion": node.metadata.resource_version,
                    "annotations": {MARKER_ANNOTATION: marker_json(&marker, &node_name)?},
                },
                "spec": {"unschedulable": true},
            });
            sent = true;
            match self.merge(deadline, "cordoning", patch).await {
                Ok(n) => {
                    tracing::info!("cordoned node {node_name}");
                    return Ok((n, true));
                }
                Err(e) if e.is_conflict() => {
                    tracing::debug!("node {node_name} changed before the cordon; reading it again");
                    tokio::time::sleep(GUARDED_PAUSE).await;
                    node = self.get_by(deadline).await?;
                }
                Err(source) => {
                    return Err(NodeError::Patch {
                        node: node_name,
                        what: "cordon",
                        source,
                    });
                }
            }
        }
        Err(NodeError::Contended {
            node: node_name,
            what: "cordon",
            attempts: GUARDED_ATTEMPTS,
        })
    }

    /// One guarded taint edit, recorded in the marker by the same JSON patch: build the patch
    /// from the Node as read, send it, and on a failed guard (another writer changed the taints
    /// or the marker) read the Node again and retry. Returns the Node and whether we wrote.
    async fn edit_taints(
        &self,
        mut node: Node,
        edit: TaintEdit,
        deadline: Instant,
    ) -> Result<(Node, bool), NodeError> {
        let node_name = self.name().to_string();
        let what = edit.verb();
        for _ in 0..GUARDED_ATTEMPTS {
            let Some(mut ops) = edit.patch(&node) else {
                return Ok((node, false));
            };
            ops.extend(edit.record(&node, &node_name)?);
            let patch: json_patch::Patch = serde_json::from_value(serde_json::Value::Array(ops))
                .map_err(|source| NodeError::BuildPatch {
                    node: node_name.clone(),
                    what,
                    source,
                })?;
            match self.patch_json(deadline, what, patch).await {
                Ok(n) => {
                    tracing::info!("{}", edit.done(&node_name));
                    return Ok((n, true));
                }
                Err(e) if is_guard_failure(&e) => {
                    tracing::debug!(
                        "taints or marker of node {node_name} changed under us; retrying"
                    );
                    tokio::time::sleep(GUARDED_PAUSE).await;
                    node = self.get_by(deadline).await?;
                }
                Err(source) => {
                    return Err(NodeError::Patch {
                        node: node_name,
                        what,
                        source,
                    });
                }
            }
        }
        Err(NodeError::Contended {
            node: node_name,
            what,
            attempts: GUARDED_ATTEMPTS,
        })
    }

    /// Undoes what the marker says we did, then clears the marker; transient failures are
    /// retried until `deadline`. Removes exactly the taints the marker lists; uncordons only if
    /// the marker says we cordoned and the node is still cordoned. A taint these credentials may
    /// not remove (403) stays listed in the marker (the cordon part done) and is returned as
    /// [`NodeError::TaintLeft`]. Idempotent.
    // No node field: the caller's span names the node (the daemon's restore task).
    #[tracing::instrument(skip_all)]
    pub async fn restore(&self, deadline: Instant) -> Result<RestoreOutcome, NodeError> {
        let node_name = self.name().to_string();
        let mut node = self.get_by(deadline).await?;
        let Some(marker) = marker_of(&node, &node_name)? else {
            tracing::info!("no marker on node {node_name}; nothing to restore");
            return Ok(RestoreOutcome {
                marker: None,
                uncordoned: false,
                untainted: false,
                left_cordon_alone: false,
            });
        };
        let mut out = RestoreOutcome {
            marker: Some(marker.clone()),
            uncordoned: false,
            untainted: false,
            left_cordon_alone: false,
        };
        if !marker.cordoned && marker.taints.is_empty() {
            tracing::info!(
                "the marker on node {node_name} records no cordon and no taint of ours; only clearing it"
            );
        }

        // 1. Each taint we added, its removal recorded in the marker by the same write.
        let mut left: Vec<(MarkerTaint, ApiError)> = Vec::new();
        for taint in &marker.taints {
            let edit = TaintEdit::Remove(Taint {
                key: taint.key.clone(),
                effect: taint.effect.clone(),
                ..Taint::default()
            });
            match self.edit_taints(node.clone(), edit, deadline).await {
                Ok((n, removed)) => {
                    node = n;
                    out.untainted |= removed;
                }
                Err(NodeError::Patch { source, .. }) if source.is_forbidden() => {
                    tracing::warn!(
                        "may not remove taint {taint} from node {node_name} (403); the marker keeps it"
                    );
                    left.push((taint.clone(), source));
                }
                Err(e) => return Err(e),
            }
        }

        // 2. The cordon, if ours and still there, and the marker: cleared, or rewritten with
        // only the taints left, in one write guarded by the resourceVersion.
        let mut done = false;
        for _ in 0..GUARDED_ATTEMPTS {
            let Some(mut current) = marker_of(&node, &node_name)? else {
                tracing::info!("the marker on node {node_name} was cleared by another writer");
                done = true;
                break;
            };
            let uncordon = current.cordoned && is_unschedulable(&node);
            out.left_cordon_alone = current.cordoned && !is_unschedulable(&node);
            if !current.cordoned && is_unschedulable(&node) {
                tracing::info!("node {node_name} was not cordoned by us; leaving it cordoned");
            }
            current.taints.retain(|t| left.iter().any(|(l, _)| l == t));
            current.cordoned = false;
            let annotation = if current.taints.is_empty() {
                serde_json::Value::Null
            } else {
                json!(marker_json(&current, &node_name)?)
            };
            let mut patch = json!({"metadata": {
                "resourceVersion": node.metadata.resource_version,
                "annotations": {MARKER_ANNOTATION: annotation},
            }});
            if uncordon {
                patch["spec"] = json!({"unschedulable": null});
            }
            let what = if uncordon {
                "uncordon"
            } else {
                "clear the marker on"
            };
            match self.merge(deadline, what, patch).await {
                Ok(_) => {
                    if uncordon {
                        out.uncordoned = true;
                        tracing::info!("uncordoned node {node_name}");
                    }
                    done = true;
                    break;
                }
                Err(e) if e.is_conflict() => {
                    tracing::debug!(
                        "node {node_name} changed before the uncordon; reading it again"
                    );
                    tokio::time::sleep(GUARDED_PAUSE).await;
                    node = self.get_by(deadline).await?;
                }
                Err(source) => {
                    return Err(NodeError::Patch {
                        node: node_name,
                        what,
                        source,
                    });
                }
            }
        }
        if !done {
            return Err(NodeError::Contended {
                node: node_name,
                what: "uncordon",
                attempts: GUARDED_ATTEMPTS,
            });
        }
        if let Some((taint, source)) = left.into_iter().next() {
            return Err(NodeError::TaintLeft {
                node: node_name,
                taint: taint.to_string(),
                source,
            });
        }
        tracing::info!("cleared marker on node {node_name}");
        Ok(out)
    }

    /// Waits until the Node's Ready condition is True, by a watch, until `deadline`.
    #[tracing::instrument(skip_all)]
    pub async fn wait_ready(&self, deadline: Instant) -> Result<(), NodeError> {
        let started = Instant::now();
        let node_name = self.name().to_string();
        let api: Api<Node> = Api::all(self.clients.watch.clone());
        let not_ready = || NodeError::NotReady {
            node: node_name.clone(),
            waited: started.elapsed(),
        };
        loop {
            let node = match tokio::time::timeout_at(deadline, self.get()).await {
                Err(_) => return Err(not_ready()),
                Ok(Ok(n)) => n,
                Ok(Err(e)) if e.is_unreachable() => {
                    tokio::time::sleep_until(deadline.min(Instant::now() + Duration::from_secs(1)))
                        .await;
                    continue;
                }
                Ok(Err(e)) => return Err(e),
            };
            if is_ready(&node) {
                return Ok(());
            }
            let rv = node.metadata.resource_version.clone().unwrap_or_default();
            let wp = WatchParams::default()
                .fields(&format!("metadata.name={node_name}"))
                .timeout(WATCH_SECONDS);
            let Ok(Ok(stream)) = tokio::time::timeout_at(deadline, api.watch(&wp, &rv)).await
            else {
                if Instant::now() >= deadline {
                    return Err(not_ready());
                }
                tokio::time::sleep_until(deadline.min(Instant::now() + Duration::from_secs(1)))
                    .await;
                continue;
            };
            let mut stream = std::pin::pin!(stream);
            loop {
                let limit = deadline
                    .min(Instant::now() + Duration::from_secs(WATCH_SECONDS as u64) + WATCH_GRACE);
                match tokio::time::timeout_at(limit, stream.next()).await {
                    Err(_) if Instant::now() >= deadline => return Err(not_ready()),
                    Ok(Some(Ok(WatchEvent::Added(n) | WatchEvent::Modified(n))))
                        if is_ready(&n) =>
                    {
                        return Ok(());
                    }
                    Ok(Some(Ok(
                        WatchEvent::Added(_) | WatchEvent::Modified(_) | WatchEvent::Bookmark(_),
                    ))) => {}
                    // Deleted, an error event, end of stream or a silent watch: start over.
                    _ => break,
                }
            }
        }
    }
}

/// A change to one taint (matched by key and effect), as a guarded JSON patch.
#[derive(Debug, Clone)]
enum TaintEdit {
    Add(Taint),
    Remove(Taint),
}

impl TaintEdit {
    fn verb(&self) -> &'static str {
        match self {
            TaintEdit::Add(_) => "taint",
            TaintEdit::Remove(_) => "untaint",
        }
    }

    /// The log line for a successful edit.
    fn done(&self, node: &str) -> String {
        match self {
            TaintEdit::Add(t) => format!("tainted node {node} with {}:{}", t.key, t.effect),
            TaintEdit::Remove(t) => {
                format!("removed taint {}:{} from node {node}", t.key, t.effect)
            }
        }
    }

    fn taint(&self) -> &Taint {
        match self {
            TaintEdit::Add(t) | TaintEdit::Remove(t) => t,
        }
    }

    /// The JSON patch operations for `node` as read, or `None` when there is nothing to do.
    /// The first operation `test`s the whole taint list (kured's guard), so the patch fails
    /// (422) if any other writer changed a taint meanwhile; with no list yet, the resourceVersion
    /// is tested instead, since "add" of the whole list would overwrite one created meanwhile.
    fn patch(&self, node: &Node) -> Option<Vec<serde_json::Value>> {
        let current = taints(node);
        let t = self.taint();
        let index = current.iter().position(|x| is_ours(x, &t.key, &t.effect));
        match (self, index) {
            (TaintEdit::Add(_), Some(_)) | (TaintEdit::Remove(_), None) => None,
            (TaintEdit::Add(t), None) => {
                if node.spec.as_ref().and_then(|s| s.taints.as_ref()).is_some() {
                    Some(vec![
                        json!({"op": "test", "path": "/spec/taints", "value": current}),
                        json!({"op": "add", "path": "/spec/taints/-", "value": t}),
                    ])
                } else {
                    Some(vec![
                        json!({"op": "test", "path": "/metadata/resourceVersion", "value": node.metadata.resource_version}),
                        json!({"op": "add", "path": "/spec/taints", "value": [t]}),
                    ])
                }
            }
            (TaintEdit::Remove(_), Some(i)) => Some(vec![
                json!({"op": "test", "path": "/spec/taints", "value": current}),
                json!({"op": "remove", "path": format!("/spec/taints/{i}")}),
            ]),
        }
    }

    /// The operations that record the edit in the marker: `test` the marker as read, then
    /// replace it with the taint added to (or removed from) its list.
    fn record(&self, node: &Node, name: &str) -> Result<Vec<serde_json::Value>, NodeError> {
        let gone = || NodeError::MarkerGone {
            node: name.to_string(),
            what: match self {
                TaintEdit::Add(_) => "tainted",
                TaintEdit::Remove(_) => "untainted",
            },
        };
        let text = marker_text(node).ok_or_else(gone)?;
        let mut marker = marker_of(node, name)?.ok_or_else(gone)?;
        let t = self.taint();
        let entry = MarkerTaint {
            key: t.key.clone(),
            effect: t.effect.clone(),
        };
        match self {
            TaintEdit::Add(_) => {
                if !marker.taints.contains(&entry) {
                    marker.taints.push(entry);
                }
            }
            TaintEdit::Remove(_) => marker.taints.retain(|x| x != &entry),
        }
        Ok(vec![
            json!({"op": "test", "path": MARKER_POINTER, "value": text}),
            json!({"op": "replace", "path": MARKER_POINTER, "value": marker_json(&marker, name)?}),
        ])
    }
}

/// A failed JSON-patch `test` (422) or a resourceVersion conflict (409).
fn is_guard_failure(e: &ApiError) -> bool {
    matches!(e.code(), Some(409 | 422))
}

/// Whether a Node's Ready condition is True.
pub fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(taints: serde_json::Value) -> Node {
        let mut n = json!({"metadata": {"name": "n", "resourceVersion": "7"}, "spec": {}});
        if !taints.is_null() {
            n["spec"]["taints"] = taints;
        }
        serde_json::from_value(n).unwrap()
    }

    fn ours() -> Taint {
        Taint {
            key: "k/shutdown".into(),
            value: Some("true".into()),
            effect: "PreferNoSchedule".into(),
            time_added: None,
        }
    }

    #[test]
    fn taint_patches_are_guarded_and_touch_only_our_taint() {
        let other = json!({"key": "other", "effect": "NoSchedule"});
        let mine = json!({"key": "k/shutdown", "value": "true", "effect": "PreferNoSchedule"});
        let same_key_other_effect = json!({"key": "k/shutdown", "effect": "NoExecute"});

        // No list yet: guarded by the resourceVersion.
        let p = TaintEdit::Add(ours())
            .patch(&node(serde_json::Value::Null))
            .unwrap();
        assert_eq!(
            p[0],
            json!({"op": "test", "path": "/metadata/resourceVersion", "value": "7"})
        );
        assert_eq!(p[1]["path"], "/spec/taints");
        // A list: guarded by the whole list, appended to.
        let p = TaintEdit::Add(ours())
            .patch(&node(json!([other, same_key_other_effect])))
            .unwrap();
        assert_eq!(
            p[0],
            json!({"op": "test", "path": "/spec/taints", "value": [other, same_key_other_effect]})
        );
        assert_eq!(
            p[1],
            json!({"op": "add", "path": "/spec/taints/-", "value": mine})
        );
        // Already there: nothing to do.
        assert!(TaintEdit::Add(ours()).patch(&node(json!([mine]))).is_none());
        // Remove: exactly our key and effect, at its index, guarded.
        let p = TaintEdit::Remove(ours())
            .patch(&node(json!([same_key_other_effect, mine, other])))
            .unwrap();
        assert_eq!(p[0]["op"], "test");
        assert_eq!(p[1], json!({"op": "remove", "path": "/spec/taints/1"}));
        assert!(
            TaintEdit::Remove(ours())
                .patch(&node(json!([same_key_other_effect, other])))
                .is_none()
        );
        // Every patch parses as a JSON patch.
        for t in [json!([other]), json!([mine])] {
            for e in [TaintEdit::Add(ours()), TaintEdit::Remove(ours())] {
                if let Some(p) = e.patch(&node(t.clone())) {
                    serde_json::from_value::<json_patch::Patch>(serde_json::Value::Array(p))
                        .unwrap();
                }
            }
        }
    }

    #[test]
    fn the_marker_records_taint_edits_in_the_same_patch() {
        let marker = json!({"was_unschedulable": false, "taint_was_present": false,
            "boot_id": "b", "time": "t", "why": "w", "cordoned": false, "taints": []})
        .to_string();
        let mut n = node(serde_json::Value::Null);
        n.metadata.annotations = Some([(MARKER_ANNOTATION.to_string(), marker.clone())].into());
        let ops = TaintEdit::Add(ours()).record(&n, "n").unwrap();
        assert_eq!(
            ops[0],
            json!({"op": "test", "path": MARKER_POINTER, "value": marker})
        );
        let new: Marker = serde_json::from_str(ops[1]["value"].as_str().unwrap()).unwrap();
        assert_eq!(
            new.taints,
            vec![MarkerTaint {
                key: "k/shutdown".into(),
                effect: "PreferNoSchedule".into()
            }]
        );
        // Without a marker there is nothing to record into: an error naming the node.
        let err = TaintEdit::Add(ours())
            .record(&node(serde_json::Value::Null), "n")
            .unwrap_err();
        assert!(err.to_string().contains("node n"), "{err}");
    }

    #[test]
    fn an_old_marker_reads_as_nothing_of_ours() {
        let old = r#"{"was_unschedulable":false,"taint_was_present":false,"boot_id":"b","time":"t","why":"w","taint_key":"k","taint_effect":"NoSchedule"}"#;
        let m: Marker = serde_json::from_str(old).unwrap();
        assert!(!m.cordoned && m.taints.is_empty());
    }
}
