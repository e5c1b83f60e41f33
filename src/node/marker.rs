//! The marker annotation and the pure builders of the two Node writes: the prepare patch
//! (marker, taint, cordon) and the restore patch (taints, uncordon, marker). Each builder reads
//! the Node as it was read and returns one JSON patch whose first operation `test`s the
//! resourceVersion read, plus what the patch does; it sends nothing. The restore builders are
//! in `marker_restore.rs` (the child module `restore`, re-exported here).
//!
//! What restore will never undo (docs/restore.md): a cordon whose
//! `spec.unschedulable` our field manager does not own alone ([`cordon_is_ours`]), a taint whose key
//! is not ours ([`is_our_taint_key`]) unless a marker our manager alone wrote lists it
//! ([`marker_is_ours`]), without a marker anything managedFields do not prove ours
//! ([`unrecorded_patch`]), anything at all for a marker we cannot have written
//! ([`read_marker`]: unparsable, wrong shape, over [`MARKER_MAX_BYTES`], an impossible boot ID
//! or version).

use k8s_openapi::api::core::v1::{Node, Taint};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::NodeError;
use crate::api::guarded::patch_of;
use crate::shutdown_kind::ShutdownKind;

pub use super::ownership::{
    cordon_is_ours, is_our_taint_key, lb_label, lb_label_is_ours, marker_is_ours, taints_are_ours,
};

#[path = "marker_restore.rs"]
mod restore;
pub use restore::{RestorePlan, Unproven, clear_foreign_patch, restore_patch, unrecorded_patch};

/// The annotation holding the marker JSON.
pub const MARKER_ANNOTATION: &str = "kube-shutdown-drain/marker";
/// [`MARKER_ANNOTATION`] as a JSON pointer (RFC 6901: `/` is written `~1`).
const MARKER_POINTER: &str = "/metadata/annotations/kube-shutdown-drain~1marker";
/// A marker text longer than this is not one we wrote (ours are a few hundred bytes).
pub const MARKER_MAX_BYTES: usize = 4096;
/// The marker format this build writes; a marker naming another one is foreign.
pub const MARKER_VERSION: u32 = 1;
pub use super::ownership::{EXCLUDE_LB_LABEL, OUR_TAINT_PREFIX};
/// [`EXCLUDE_LB_LABEL`] as a JSON pointer under `/metadata/labels` (RFC 6901: `/` is `~1`).
const EXCLUDE_LB_POINTER: &str =
    "/metadata/labels/node.kubernetes.io~1exclude-from-external-load-balancers";
/// What prepare is about to change and what it changed, stored on the Node by the same write
/// that changes it.
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
    /// We cordoned the node: set by the same write that cordoned it.
    #[serde(default)]
    pub cordoned: bool,
    /// RFC 3339: when we cordoned (for `status` and people; proof that the cordon is still ours
    /// comes only from managedFields, [`cordon_is_ours`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cordoned_at: Option<String>,
    /// The marker format ([`MARKER_VERSION`]); markers older than the field are version 1.
    #[serde(default = "first_version")]
    pub version: u32,
    /// The taints we added, each recorded by the same write that added it; restore removes
    /// exactly these, even if the configuration changed in between.
    #[serde(default)]
    pub taints: Vec<MarkerTaint>,
    /// The kind of shutdown the prepare was for, as logind named it ("reboot", "soft-reboot",
    /// ...; "unknown" where logind named none); absent for a prepare by hand and in markers of
    /// older builds. Optional, so the format stays version 1: older builds ignore it, and this
    /// build reads their markers as kind unknown. A soft-reboot keeps the boot ID: this field
    /// is how the next start tells that the node must still be restored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<ShutdownKind>,
    /// We added [`EXCLUDE_LB_LABEL`]: set by the same write that added it. Absent in markers of
    /// older builds (read as false: restore removes no label for them).
    #[serde(default)]
    pub excluded_from_load_balancers: bool,
}

fn first_version() -> u32 {
    1
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

impl MarkerTaint {
    fn of(t: &Taint) -> MarkerTaint {
        MarkerTaint {
            key: t.key.clone(),
            effect: t.effect.clone(),
        }
    }

    fn matches(&self, t: &Taint) -> bool {
        t.key == self.key && t.effect == self.effect
    }
}

pub(crate) fn taints(node: &Node) -> Vec<Taint> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
}

pub(crate) fn is_unschedulable(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
}

/// The marker annotation as read from a Node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MarkerRead {
    /// No marker.
    Absent,
    /// A marker we can have written.
    Ours(Marker),
    /// Something in our annotation we cannot have written, and why; it is never acted on.
    Foreign(ForeignMarker),
}

/// Reads and checks the marker of a Node: too large, not JSON, the wrong shape, an unknown
/// version, a boot ID that is not one, or a time that is not one make it [`MarkerRead::Foreign`].
pub fn read_marker(node: &Node) -> MarkerRead {
    let text = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(MARKER_ANNOTATION));
    match text {
        None => MarkerRead::Absent,
        Some(text) => match check_marker(text) {
            Ok(m) => MarkerRead::Ours(m),
            Err(why) => MarkerRead::Foreign(why),
        },
    }
}

/// Why a marker annotation is not one we can have written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ForeignMarker {
    #[error("{bytes} bytes, more than the {MARKER_MAX_BYTES} a marker of ours can have")]
    TooLarge { bytes: usize },
    /// Not JSON, or not a marker's shape: serde_json's message.
    #[error("not a marker of ours: {0}")]
    NotAMarker(String),
    #[error(
        "marker version {0}, which this kube-shutdown-drain never writes (it writes {MARKER_VERSION})"
    )]
    Version(u32),
    #[error("boot ID {0:?} is not a boot ID")]
    BootId(String),
    #[error("time {0:?} is not an RFC 3339 time")]
    Time(String),
    #[error("cordoned_at {0:?} is not an RFC 3339 time")]
    CordonedAt(String),
}

/// Parses a marker text and checks it is one we can have written.
pub fn check_marker(text: &str) -> Result<Marker, ForeignMarker> {
    if text.len() > MARKER_MAX_BYTES {
        return Err(ForeignMarker::TooLarge { bytes: text.len() });
    }
    let m: Marker =
        serde_json::from_str(text).map_err(|e| ForeignMarker::NotAMarker(e.to_string()))?;
    if m.version != MARKER_VERSION {
        return Err(ForeignMarker::Version(m.version));
    }
    if !is_boot_id(&m.boot_id) {
        return Err(ForeignMarker::BootId(m.boot_id));
    }
    if m.time.parse::<jiff::Timestamp>().is_err() {
        return Err(ForeignMarker::Time(m.time));
    }
    if let Some(t) = &m.cordoned_at
        && t.parse::<jiff::Timestamp>().is_err()
    {
        return Err(ForeignMarker::CordonedAt(t.clone()));
    }
    Ok(m)
}

/// A boot ID as the kernel writes it (`/proc/sys/kernel/random/boot_id`): a UUID, 36 lowercase
/// hex digits and dashes.
fn is_boot_id(s: &str) -> bool {
    s.len() == 36
        && s.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_digit() || ('a'..='f').contains(&c),
        })
}

/// Reads the marker from a Node object; a foreign one is [`NodeError::BadMarker`].
pub fn marker_of(node: &Node, name: &str) -> Result<Option<Marker>, NodeError> {
    match read_marker(node) {
        MarkerRead::Absent => Ok(None),
        MarkerRead::Ours(m) => Ok(Some(m)),
        MarkerRead::Foreign(reason) => Err(NodeError::BadMarker {
            node: name.to_string(),
            reason,
        }),
    }
}

pub(super) fn build_error<'a>(
    name: &'a str,
    what: &'static str,
) -> impl Fn(serde_json::Error) -> NodeError + 'a {
    move |source| NodeError::BuildPatch {
        node: name.to_string(),
        what,
        source,
    }
}

/// The guard every Node write starts with: the resourceVersion we read. Any change by another
/// writer in between (a taint, a cordon, the marker) fails it with 422 and we read again.
pub(super) fn guard(node: &Node) -> Value {
    json!({"op": "test", "path": "/metadata/resourceVersion", "value": node.metadata.resource_version})
}

/// The operation storing `marker` (or removing it, for `None`).
pub(super) fn marker_op(
    node: &Node,
    name: &str,
    marker: Option<&Marker>,
) -> Result<Value, NodeError> {
    let Some(marker) = marker else {
        return Ok(json!({"op": "remove", "path": MARKER_POINTER}));
    };
    let text = serde_json::to_string(marker).map_err(build_error(name, "marker"))?;
    Ok(if node.metadata.annotations.is_some() {
        // `add` on an existing member replaces it (RFC 6902 4.1).
        json!({"op": "add", "path": MARKER_POINTER, "value": text})
    } else {
        json!({"op": "add", "path": "/metadata/annotations", "value": {MARKER_ANNOTATION: text}})
    })
}

/// The inputs of a prepare write that do not come from the Node.
#[derive(Debug, Clone)]
pub struct PrepareInput {
    pub why: String,
    pub boot_id: String,
    /// RFC 3339.
    pub time: String,
    /// The configured taint, when `[taint] enabled`.
    pub taint: Option<Taint>,
    /// The configured `[taint] key`, enabled or not (an earlier prepare's taint under it is
    /// ours).
    pub taint_key: String,
    /// Add the taint in this write (false: these credentials may not change taints).
    pub add_taint: bool,
    /// The kind of shutdown, for the marker (`None`: a prepare by hand).
    pub kind: Option<ShutdownKind>,
    /// Add [`EXCLUDE_LB_LABEL`] unless the node has it (`[drain] exclude_from_load_balancers`).
    pub exclude_from_load_balancers: bool,
}

/// What a prepare write does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PreparePlan {
    /// The marker as the write stores it.
    pub marker: Marker,
    /// The write cordons the node.
    pub cordons: bool,
    /// The write adds the configured taint.
    pub taints: bool,
    /// The write adds [`EXCLUDE_LB_LABEL`].
    pub excludes: bool,
    /// The marker found was foreign (why): this write replaces it.
    pub replaced_foreign: Option<String>,
}

/// The prepare write for `node` as read. The marker is rebuilt from the Node as it is now: of
/// an earlier prepare's record only what is still true is kept (its cordon while our field
/// manager still owns it, its taints of ours still on the node), so an earlier "we cordoned"
/// never applies to a later cordon by someone else. A foreign marker is replaced. Then the
/// configured taint unless present, and the cordon unless cordoned, each recorded in the marker
/// by this same patch. An admin's cordon or taint found here is never recorded as ours.
pub fn prepare_patch(
    node: &Node,
    name: &str,
    input: &PrepareInput,
) -> Result<(json_patch::Patch, PreparePlan), NodeError> {
    let present = input
        .taint
        .as_ref()
        .is_some_and(|t| taints(node).iter().any(|x| MarkerTaint::of(t).matches(x)));
    let unschedulable = is_unschedulable(node);
    let (earlier, replaced_foreign) = match read_marker(node) {
        MarkerRead::Absent => (None, None),
        MarkerRead::Ours(m) => (Some(m), None),
        MarkerRead::Foreign(why) => (None, Some(why.to_string())),
    };
    let current = taints(node);
    // What of the earlier record is still true now.
    let kept_cordon = earlier
        .as_ref()
        .filter(|m| m.cordoned && unschedulable && cordon_is_ours(node).is_ok());
    let kept_taints: Vec<MarkerTaint> = earlier
        .as_ref()
        .map(|m| {
            m.taints
                .iter()
                .filter(|t| listed_is_ours(node, t, &input.taint_key))
                .filter(|t| current.iter().any(|x| t.matches(x)))
                .cloned()
                .collect()
        })
        .unwrap_or_default();
    let configured_kept = input
        .taint
        .as_ref()
        .is_some_and(|t| kept_taints.contains(&MarkerTaint::of(t)));
    let cordons = !unschedulable;
    let mut marker = Marker {
        was_unschedulable: match kept_cordon {
            Some(m) => m.was_unschedulable,
            None => unschedulable,
        },
        taint_was_present: match &earlier {
            Some(m) if configured_kept => m.taint_was_present,
            _ => present,
        },
        boot_id: input.boot_id.clone(),
        time: input.time.clone(),
        why: input.why.clone(),
        cordoned: cordons || kept_cordon.is_some(),
        cordoned_at: if cordons {
            Some(input.time.clone())
        } else {
            kept_cordon.and_then(|m| m.cordoned_at.clone())
        },
        version: MARKER_VERSION,
        taints: kept_taints,
        kind: input.kind,
        excluded_from_load_balancers: false,
    };
    // The label: an earlier prepare's stays ours while our field manager still owns it; one
    // found otherwise (an admin's, any value) is never recorded as ours.
    let labelled = lb_label(node).is_some();
    let kept_label = earlier.as_ref().is_some_and(|m| {
        m.excluded_from_load_balancers && labelled && lb_label_is_ours(node).is_ok()
    });
    let excludes = input.exclude_from_load_balancers && !labelled;
    marker.excluded_from_load_balancers = excludes || kept_label;
    let add = input.taint.as_ref().filter(|_| input.add_taint && !present);
    if let Some(t) = add
        && !marker.taints.contains(&MarkerTaint::of(t))
    {
        marker.taints.push(MarkerTaint::of(t));
    }
    let ops = prepare_ops(node, name, &marker, add, cordons, excludes)?;
    let patch = patch_of(ops).map_err(build_error(name, "prepare"))?;
    Ok((
        patch,
        PreparePlan {
            marker,
            cordons,
            taints: add.is_some(),
            excludes,
            replaced_foreign,
        },
    ))
}

/// The operations of a prepare write, after the guard: the marker, the taint `add` (if any),
/// the cordon (if `cordons`) and the load-balancer label (if `excludes`), each added to what
/// `node` already has.
fn prepare_ops(
    node: &Node,
    name: &str,
    marker: &Marker,
    add: Option<&Taint>,
    cordons: bool,
    excludes: bool,
) -> Result<Vec<Value>, NodeError> {
    let mut ops = vec![guard(node)];
    if node.spec.is_none() {
        ops.push(json!({"op": "add", "path": "/spec", "value": {}}));
    }
    ops.push(marker_op(node, name, Some(marker))?);
    if let Some(t) = add {
        let has_list = node.spec.as_ref().and_then(|s| s.taints.as_ref()).is_some();
        ops.push(if has_list {
            json!({"op": "add", "path": "/spec/taints/-", "value": t})
        } else {
            json!({"op": "add", "path": "/spec/taints", "value": [t]})
        });
    }
    if cordons {
        ops.push(json!({"op": "add", "path": "/spec/unschedulable", "value": true}));
    }
    if excludes {
        ops.push(if node.metadata.labels.is_some() {
            json!({"op": "add", "path": EXCLUDE_LB_POINTER, "value": "true"})
        } else {
            json!({"op": "add", "path": "/metadata/labels", "value": {EXCLUDE_LB_LABEL: "true"}})
        });
    }
    Ok(ops)
}

/// Whether restore may remove `t`, a taint `marker` lists, from `node`: its key is ours by
/// today's configuration ([`is_our_taint_key`]), or the marker is one our field manager alone
/// wrote ([`marker_is_ours`]), whose record of what it added holds even after `[taint] key`
/// changed. A marker anyone else wrote never widens the keys.
fn listed_is_ours(node: &Node, t: &MarkerTaint, configured: &str) -> bool {
    is_our_taint_key(&t.key, configured) || marker_is_ours(node).is_ok()
}

#[cfg(test)]
#[path = "marker_tests.rs"]
mod tests;
