//! The Node side of a drain: the marker annotation, the guarded taint, cordon, restore, and
//! waiting for the Node to be Ready.
//!
//! Rule: record on the Node what we are about to change before changing it, and undo only that.
//! The marker is written with a resourceVersion precondition, so what it records is what was
//! there when it was written. Taint edits are JSON patches whose first operation `test`s the whole
//! taint list we read (kured's guard), so a concurrent writer's taint is never lost: on a failed
//! test (422) or conflict (409) we read the Node again and retry.

use std::path::Path;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Taint};
use kube::api::{Api, Patch, PatchParams, WatchEvent, WatchParams};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tokio::time::Instant;

use crate::client::{ApiError, Clients, WATCH_GRACE, WATCH_SECONDS};
use crate::config::{Settings, TaintSettings};

/// The annotation holding the marker JSON.
pub const MARKER_ANNOTATION: &str = "kube-shutdown-drain/marker";
/// Read-modify-write attempts before a guarded write gives up.
const GUARDED_ATTEMPTS: usize = 10;
/// Pause between attempts of a guarded write, so a busy writer can finish.
const GUARDED_PAUSE: Duration = Duration::from_millis(50);
/// The field manager name on our patches.
pub const FIELD_MANAGER: &str = "kube-shutdown-drain";

/// What prepare is about to change, stored on the Node before the change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Marker {
    /// The node was already cordoned: restore leaves it cordoned.
    pub was_unschedulable: bool,
    /// Our taint was already there: restore leaves it.
    pub taint_was_present: bool,
    /// The boot that wrote the marker (`/proc/sys/kernel/random/boot_id`).
    pub boot_id: String,
    /// RFC 3339.
    pub time: String,
    pub why: String,
    /// The taint this marker refers to (key and effect), so restore removes exactly it even if
    /// the configuration changed in between.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taint_key: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub taint_effect: Option<String>,
}

/// A Node operation failed. Every variant names the node.
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("node {node} does not exist")]
    Missing { node: String },
    #[error("cannot read node {node}: {source}")]
    Get { node: String, source: ApiError },
    #[error("cannot write the marker on node {node}: {source}")]
    WriteMarker { node: String, source: ApiError },
    #[error("the marker annotation on node {node} is not valid: {source}")]
    BadMarker {
        node: String,
        source: serde_json::Error,
    },
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
    /// The API server could not be reached (as opposed to answering).
    pub fn is_unreachable(&self) -> bool {
        match self {
            NodeError::Get { source, .. }
            | NodeError::WriteMarker { source, .. }
            | NodeError::Patch { source, .. } => source.is_unreachable(),
            _ => false,
        }
    }
}

/// The result of prepare.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrepareOutcome {
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

/// Reads the marker from a Node object.
pub fn marker_of(node: &Node, name: &str) -> Result<Option<Marker>, NodeError> {
    match node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(MARKER_ANNOTATION))
    {
        None => Ok(None),
        Some(text) => serde_json::from_str(text)
            .map(Some)
            .map_err(|source| NodeError::BadMarker {
                node: name.to_string(),
                source,
            }),
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

    /// GETs the Node; 404 is [`NodeError::Missing`].
    pub async fn get(&self) -> Result<Node, NodeError> {
        let name = self.name().to_string();
        self.clients
            .timed(self.api().get(&name))
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

    async fn patch(&self, patch: &Patch<serde_json::Value>) -> Result<Node, ApiError> {
        let pp = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..PatchParams::default()
        };
        self.clients
            .timed(self.api().patch(self.name(), &pp, patch))
            .await
    }

    /// Writes the marker, then the taint, then the cordon.
    #[tracing::instrument(skip(self), fields(node = %self.settings.node_name))]
    pub async fn prepare(&self, why: &str, boot_id: &str) -> Result<PrepareOutcome, NodeError> {
        let node_name = self.name().to_string();
        let t = &self.settings.taint;
        let mut node = self.get().await?;

        // 1. The marker, guarded by the resourceVersion we read it with.
        let mut attempts = 0;
        let marker = loop {
            attempts += 1;
            let existing = marker_of(&node, &node_name)?;
            let present = taints(&node)
                .iter()
                .any(|x| is_ours(x, &t.key, t.effect.as_str()));
            let marker = match existing {
                // An earlier prepare that was not restored: what it recorded is still the truth
                // about the node before we touched it.
                Some(m) => Marker {
                    boot_id: boot_id.to_string(),
                    time: now_rfc3339(),
                    why: why.to_string(),
                    ..m
                },
                None => Marker {
                    was_unschedulable: is_unschedulable(&node),
                    taint_was_present: !t.enabled || present,
                    boot_id: boot_id.to_string(),
                    time: now_rfc3339(),
                    why: why.to_string(),
                    taint_key: t.enabled.then(|| t.key.clone()),
                    taint_effect: t.enabled.then(|| t.effect.as_str().to_string()),
                },
            };
            let text = serde_json::to_string(&marker).map_err(|source| NodeError::BuildPatch {
                node: node_name.clone(),
                what: "marker",
                source,
            })?;
            let patch = json!({"metadata": {
                "resourceVersion": node.metadata.resource_version,
                "annotations": {MARKER_ANNOTATION: text},
            }});
            match self.patch(&Patch::Merge(patch)).await {
                Ok(n) => {
                    node = n;
                    break marker;
                }
                Err(e) if e.is_conflict() && attempts < GUARDED_ATTEMPTS => {
                    tracing::debug!(node = %node_name, "marker write conflicted; reading node again");
                    tokio::time::sleep(GUARDED_PAUSE).await;
                    node = self.get().await?;
                }
                Err(e) if e.is_conflict() => {
                    return Err(NodeError::Contended {
                        node: node_name,
                        what: "writing the marker",
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
        tracing::info!(node = %node_name, was_unschedulable = marker.was_unschedulable, taint_was_present = marker.taint_was_present, "wrote marker on node {node_name}");

        // 2. The taint.
        let (mut tainted, mut taint_forbidden) = (false, false);
        if t.enabled {
            match self.add_taint(node.clone(), t).await {
                Ok((n, added)) => {
                    node = n;
                    tainted = added;
                }
                Err(NodeError::Patch { source, .. }) if source.is_forbidden() => {
                    tracing::warn!(node = %node_name, "may not taint node {node_name} (403; kubelet credentials?); cordoning without the taint");
                    taint_forbidden = true;
                }
                Err(e) => return Err(e),
            }
        }

        // 3. The cordon.
        let mut cordoned = false;
        if !is_unschedulable(&node) {
            self.patch(&Patch::Merge(json!({"spec": {"unschedulable": true}})))
                .await
                .map_err(|source| NodeError::Patch {
                    node: node_name.clone(),
                    what: "cordon",
                    source,
                })?;
            cordoned = true;
            tracing::info!(node = %node_name, "cordoned node {node_name}");
        } else {
            tracing::info!(node = %node_name, "node {node_name} is already cordoned");
        }
        Ok(PrepareOutcome {
            marker,
            tainted,
            taint_forbidden,
            cordoned,
        })
    }

    /// Adds our taint unless present. Returns the Node after the write and whether we added it.
    async fn add_taint(&self, node: Node, t: &TaintSettings) -> Result<(Node, bool), NodeError> {
        let ours = Taint {
            key: t.key.clone(),
            value: t.value.clone(),
            effect: t.effect.as_str().to_string(),
            time_added: None,
        };
        self.edit_taints(node, TaintEdit::Add(ours)).await
    }

    /// Removes our taint (exactly key + effect) if present.
    async fn remove_taint(
        &self,
        node: Node,
        key: &str,
        effect: &str,
    ) -> Result<(Node, bool), NodeError> {
        let ours = Taint {
            key: key.to_string(),
            effect: effect.to_string(),
            ..Taint::default()
        };
        self.edit_taints(node, TaintEdit::Remove(ours)).await
    }

    /// One guarded taint edit: build the patch from the Node as read, send it, and on a failed
    /// guard (another writer changed the taints) read the Node again and retry.
    async fn edit_taints(
        &self,
        mut node: Node,
        edit: TaintEdit,
    ) -> Result<(Node, bool), NodeError> {
        let node_name = self.name().to_string();
        let what = edit.verb();
        for _ in 0..GUARDED_ATTEMPTS {
            let Some(patch) = edit.patch(&node) else {
                return Ok((node, false));
            };
            let patch: json_patch::Patch =
                serde_json::from_value(patch).map_err(|source| NodeError::BuildPatch {
                    node: node_name.clone(),
                    what,
                    source,
                })?;
            match self.patch_json(patch).await {
                Ok(n) => {
                    tracing::info!(node = %node_name, "{}", edit.done(&node_name));
                    return Ok((n, true));
                }
                Err(e) if is_guard_failure(&e) => {
                    tracing::debug!(node = %node_name, "taints of node {node_name} changed under us; retrying");
                    tokio::time::sleep(GUARDED_PAUSE).await;
                    node = self.get().await?;
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

    async fn patch_json(&self, patch: json_patch::Patch) -> Result<Node, ApiError> {
        let pp = PatchParams {
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..PatchParams::default()
        };
        self.clients
            .timed(
                self.api()
                    .patch(self.name(), &pp, &Patch::<()>::Json(patch)),
            )
            .await
    }

    /// Undoes what the marker says we did, then clears the marker. Idempotent.
    #[tracing::instrument(skip(self), fields(node = %self.settings.node_name))]
    pub async fn restore(&self) -> Result<RestoreOutcome, NodeError> {
        let node_name = self.name().to_string();
        let mut node = self.get().await?;
        let Some(marker) = marker_of(&node, &node_name)? else {
            tracing::info!(node = %node_name, "no marker on node {node_name}; nothing to restore");
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
        if !marker.taint_was_present
            && let (Some(key), Some(effect)) = (&marker.taint_key, &marker.taint_effect)
        {
            match self.remove_taint(node.clone(), key, effect).await {
                Ok((n, removed)) => {
                    node = n;
                    out.untainted = removed;
                }
                Err(NodeError::Patch { source, .. }) if source.is_forbidden() => {
                    tracing::warn!(node = %node_name, "may not remove the taint from node {node_name} (403)");
                }
                Err(e) => return Err(e),
            }
        }
        if !marker.was_unschedulable {
            if is_unschedulable(&node) {
                self.patch(&Patch::Merge(json!({"spec": {"unschedulable": null}})))
                    .await
                    .map_err(|source| NodeError::Patch {
                        node: node_name.clone(),
                        what: "uncordon",
                        source,
                    })?;
                out.uncordoned = true;
                tracing::info!(node = %node_name, "uncordoned node {node_name}");
            } else {
                out.left_cordon_alone = true;
            }
        } else {
            tracing::info!(node = %node_name, "node {node_name} was cordoned before us; leaving it cordoned");
        }
        self.patch(&Patch::Merge(
            json!({"metadata": {"annotations": {MARKER_ANNOTATION: null}}}),
        ))
        .await
        .map_err(|source| NodeError::Patch {
            node: node_name.clone(),
            what: "clear the marker on",
            source,
        })?;
        tracing::info!(node = %node_name, "cleared marker on node {node_name}");
        Ok(out)
    }

    /// Waits until the Node's Ready condition is True, by a watch, until `deadline`.
    #[tracing::instrument(skip(self), fields(node = %self.settings.node_name))]
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

/// A change to our one taint (matched by key and effect), as a guarded JSON patch.
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

    /// The JSON patch for `node` as read, or `None` when there is nothing to do. Its first
    /// operation `test`s the whole taint list (kured's guard), so the patch fails (422) if any
    /// other writer changed a taint meanwhile; with no list yet, the resourceVersion is tested
    /// instead, since "add" of the whole list would overwrite one created meanwhile.
    fn patch(&self, node: &Node) -> Option<serde_json::Value> {
        let current = taints(node);
        let t = self.taint();
        let index = current.iter().position(|x| is_ours(x, &t.key, &t.effect));
        match (self, index) {
            (TaintEdit::Add(_), Some(_)) | (TaintEdit::Remove(_), None) => None,
            (TaintEdit::Add(t), None) => {
                if node.spec.as_ref().and_then(|s| s.taints.as_ref()).is_some() {
                    Some(json!([
                        {"op": "test", "path": "/spec/taints", "value": current},
                        {"op": "add", "path": "/spec/taints/-", "value": t},
                    ]))
                } else {
                    Some(json!([
                        {"op": "test", "path": "/metadata/resourceVersion", "value": node.metadata.resource_version},
                        {"op": "add", "path": "/spec/taints", "value": [t]},
                    ]))
                }
            }
            (TaintEdit::Remove(_), Some(i)) => Some(json!([
                {"op": "test", "path": "/spec/taints", "value": current},
                {"op": "remove", "path": format!("/spec/taints/{i}")},
            ])),
        }
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
                    serde_json::from_value::<json_patch::Patch>(p).unwrap();
                }
            }
        }
    }
}
