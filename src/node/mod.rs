//! The Node side of a drain: the marker protocol, prepare, restore and the Ready wait.
//!
//! Rule: record on the Node what we are about to change before changing it, and undo only that.
//! Every change we make is recorded in the marker by the same write that makes it: prepare is
//! one JSON patch (marker, taint, cordon) and restore is one JSON patch (taints, uncordon,
//! marker), each guarded by a `test` of the resourceVersion read ([`crate::api::guarded`]). So a
//! concurrent writer's taint is never lost, an admin's cordon is never taken for ours, and
//! restore undoes exactly what the marker lists. Credentials that may not change taints (403,
//! the kubelet's under NodeRestriction) get the same write without the taint. Transient failures
//! are retried ([`crate::api::retry`]) until the caller's deadline.
//!
//! - [`marker`]: the marker and the pure patch builders.
//! - [`ops`]: the calls (read, restore, wait for Ready).
//! - `prepare`: the prepare call (one guarded patch, tried again until its deadline).
//! - [`agents`]: the boot restore's wait for the node's own agents (pods, conditions).
//! - [`daemonsets`]: the taint of the drain's last stage, which stops DaemonSet pods.
//! - [`hold`]: what another writer took from a prepared node while it drains.

pub mod agents;
pub mod conditions;
pub mod daemonsets;
pub mod hold;
pub mod hooks;
pub mod marker;
pub mod ops;
pub mod ownership;
mod prepare;

use std::path::Path;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;

use crate::api::ApiError;

pub use daemonsets::DAEMONSETS_TAINT_KEY;
pub use marker::{
    EXCLUDE_LB_LABEL, ForeignMarker, MARKER_ANNOTATION, Marker, MarkerRead, MarkerTaint, Unproven,
    cordon_is_ours, is_our_taint_key, lb_label, lb_label_is_ours, marker_of, read_marker,
};
pub use ops::{NODE_LEASE_NAMESPACE, NodeOps};

/// A Node operation failed. Every variant names the node (an [`ApiError`] names its object).
#[derive(Debug, thiserror::Error)]
pub enum NodeError {
    #[error("node {node} does not exist")]
    Missing { node: String },
    #[error("cannot read {0}")]
    Get(ApiError),
    #[error("cannot write the marker on {0}; nothing else was changed")]
    WriteMarker(ApiError),
    #[error("the marker annotation on node {node} is not one we wrote ({reason})")]
    BadMarker {
        node: String,
        reason: marker::ForeignMarker,
    },
    #[error("not adding {what} to node {node}: {why}, so no marker would record it")]
    Unrecorded {
        node: String,
        what: &'static str,
        why: String,
    },
    #[error("cannot build the {what} patch for node {node}: {source}")]
    BuildPatch {
        node: String,
        what: &'static str,
        source: serde_json::Error,
    },
    #[error("cannot {what} {source}")]
    Patch {
        what: &'static str,
        source: ApiError,
    },
    #[error(
        "left taint {taint} on node {node}: these credentials may not remove it ({}); the \
         marker still lists it, so a restore with credentials that may change taints removes it",
        source.problem()
    )]
    TaintLeft {
        node: String,
        /// `key:effect`.
        taint: String,
        source: ApiError,
    },
    #[error("node {node} kept changing; gave up the {what} after {attempts} attempts")]
    Contended {
        node: String,
        what: &'static str,
        attempts: usize,
    },
    #[error("node {node} has no live kubelet reporting Ready after waiting {waited:?} ({state})")]
    NotReady {
        node: String,
        waited: Duration,
        /// What was last seen, e.g. a Ready=True with a heartbeat from before this boot.
        state: String,
    },
    #[error("the agents of node {node} do not run after waiting {waited:?} ({state})")]
    AgentsNotReady {
        node: String,
        waited: Duration,
        /// What was still waited for.
        state: String,
    },
    #[error("cannot tell when this boot began: {0}")]
    BootTime(String),
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
            NodeError::Get(source)
            | NodeError::WriteMarker(source)
            | NodeError::Patch { source, .. } => source.is_server_trouble(),
            _ => false,
        }
    }

    /// The API error that ended the operation, if one did.
    pub fn api(&self) -> Option<&ApiError> {
        match self {
            NodeError::Get(source)
            | NodeError::WriteMarker(source)
            | NodeError::Patch { source, .. }
            | NodeError::TaintLeft { source, .. } => Some(source),
            _ => None,
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
    /// The marker found was foreign (why); prepare replaced it.
    pub replaced_foreign: Option<String>,
    /// The Node carried our marker of this boot already: an earlier drain of this boot prepared
    /// it (the node's own reboot, a scheduled shutdown's early drain, a `drain` by hand).
    pub again: bool,
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
    /// The marker said we cordoned, but the cordon is not provably ours (why): left in place.
    pub cordon_kept: Option<String>,
    /// The marker was foreign (why): cleared, nothing undone.
    pub foreign_marker: Option<String>,
    /// Taints the marker listed under keys that are not ours (`key:effect`): never removed.
    pub refused_taints: Vec<String>,
    /// We removed the load-balancer exclusion label we had added.
    pub lb_label_removed: bool,
    /// The marker said we added the label, but it is not provably ours (why): left in place.
    pub lb_label_kept: Option<String>,
    /// The taints removed (`key:effect`).
    pub removed_taints: Vec<String>,
    /// No marker: what of ours the node still shows but managedFields do not prove ours, left
    /// in place (each with the command that removes it).
    pub unproven: Vec<marker::Unproven>,
}

impl RestoreOutcome {
    fn nothing(marker: Option<Marker>) -> RestoreOutcome {
        RestoreOutcome {
            marker,
            uncordoned: false,
            untainted: false,
            left_cordon_alone: false,
            cordon_kept: None,
            foreign_marker: None,
            refused_taints: Vec::new(),
            lb_label_removed: false,
            lb_label_kept: None,
            removed_taints: Vec::new(),
            unproven: Vec::new(),
        }
    }
}

/// Reads the current boot ID.
pub fn read_boot_id(path: &Path) -> Result<String, NodeError> {
    crate::host::boot_id(path).map_err(|source| NodeError::BootId {
        path: path.to_path_buf(),
        source,
    })
}

/// When this boot began: `btime` of `/proc/stat`, else now minus `CLOCK_BOOTTIME`.
pub fn boot_started() -> Result<jiff::Timestamp, NodeError> {
    let from_stat = std::fs::read_to_string("/proc/stat")
        .map_err(|e| format!("/proc/stat: {e}"))
        .and_then(|text| btime(&text).ok_or_else(|| "/proc/stat has no btime line".to_string()));
    match from_stat {
        Ok(t) => Ok(t),
        Err(stat) => {
            let up = nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME)
                .map_err(|e| NodeError::BootTime(format!("{stat}; CLOCK_BOOTTIME: {e}")))?;
            let up = jiff::SignedDuration::new(up.tv_sec(), up.tv_nsec() as i32);
            jiff::Timestamp::now()
                .checked_sub(up)
                .map_err(|e| NodeError::BootTime(format!("{stat}; CLOCK_BOOTTIME: {e}")))
        }
    }
}

/// The `btime` line of `/proc/stat` (seconds since the epoch).
fn btime(stat: &str) -> Option<jiff::Timestamp> {
    let secs = stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))?
        .trim()
        .parse::<i64>()
        .ok()?;
    jiff::Timestamp::from_second(secs).ok()
}

/// Whether a Node's Ready condition is True.
pub fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}
