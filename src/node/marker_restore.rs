//! The pure builders of the restore writes: from our marker ([`restore_patch`]: taints,
//! uncordon, marker), for a foreign one ([`clear_foreign_patch`]), without one
//! ([`unrecorded_patch`]: only what managedFields prove ours). Each reads the Node as it was
//! read and returns one guarded JSON patch plus what it does ([`RestorePlan`]); it sends nothing.

use k8s_openapi::api::core::v1::Node;
use serde_json::json;

use super::{
    EXCLUDE_LB_LABEL, EXCLUDE_LB_POINTER, Marker, MarkerTaint, build_error, cordon_is_ours, guard,
    is_our_taint_key, is_unschedulable, lb_label, lb_label_is_ours, listed_is_ours, marker_op,
    taints, taints_are_ours,
};
use crate::api::guarded::patch_of;
use crate::node::NodeError;
use crate::node::ownership::{cordon_may_be_ours, lb_label_owned_by_us};

/// What a restore write does.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RestorePlan {
    pub uncordons: bool,
    /// Taints of ours the write removes.
    pub removes: Vec<MarkerTaint>,
    /// Taints of ours left on the node (not removed by this write), still listed in the marker.
    pub keeps: Vec<MarkerTaint>,
    /// Taints the marker lists under keys that are not ours: never removed.
    pub refused: Vec<MarkerTaint>,
    /// The marker says we cordoned, but the node is no longer cordoned.
    pub left_cordon_alone: bool,
    /// The marker says we cordoned and the node is cordoned, but the cordon is not provably
    /// ours ([`cordon_is_ours`]): it stays, for this reason.
    pub cordon_kept: Option<String>,
    /// The marker was foreign (why): the write only removes it.
    pub foreign: Option<String>,
    /// The write removes [`EXCLUDE_LB_LABEL`] (ours, still owned by us).
    pub includes: bool,
    /// The marker says we added the label and it is there, but it is not provably ours (why):
    /// it stays.
    pub label_kept: Option<String>,
    /// Without a marker ([`unrecorded_patch`]): what of ours the node still shows but
    /// managedFields do not prove ours, left in place.
    pub unproven: Vec<Unproven>,
}

/// Something of ours that a restore without a marker sees on the node but cannot prove ours, so
/// leaves; said with the command that removes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unproven {
    /// The node.
    pub node: String,
    /// What stays: "taint KEY:EFFECT", "the cordon".
    pub what: String,
    /// Why it is not provably ours.
    pub why: String,
    /// The command that removes it.
    pub command: String,
}

impl std::fmt::Display for Unproven {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} stays on node {} ({}); if it is ours, remove it with `{}`",
            self.what, self.node, self.why, self.command
        )
    }
}

/// The write clearing a foreign marker and nothing else.
pub fn clear_foreign_patch(
    node: &Node,
    name: &str,
    why: &str,
) -> Result<(json_patch::Patch, RestorePlan), NodeError> {
    let ops = vec![guard(node), marker_op(node, name, None)?];
    let patch = patch_of(ops).map_err(build_error(name, "restore"))?;
    Ok((
        patch,
        RestorePlan {
            foreign: Some(why.to_string()),
            ..RestorePlan::default()
        },
    ))
}

/// The restore write for `node` as read and its `marker`: remove every copy of the listed
/// taints of ours ([`listed_is_ours`]) still there (unless `remove_taints` is false), uncordon
/// if the marker says we cordoned, the node is still cordoned and the cordon is still ours
/// ([`cordon_is_ours`]), and clear the marker, or keep in it only the taints left on the node.
pub fn restore_patch(
    node: &Node,
    name: &str,
    marker: &Marker,
    taint_key: &str,
    remove_taints: bool,
) -> Result<(json_patch::Patch, RestorePlan), NodeError> {
    let current = taints(node);
    let mut indices = Vec::new();
    let (mut removes, mut keeps, mut refused) = (Vec::new(), Vec::new(), Vec::new());
    for t in &marker.taints {
        if removes.contains(t) || keeps.contains(t) || refused.contains(t) {
            continue;
        }
        if !listed_is_ours(node, t, taint_key) {
            refused.push(t.clone());
            continue;
        }
        // Every copy: a node may carry the same key and effect twice (another value).
        let copies: Vec<usize> = (0..current.len())
            .filter(|&i| t.matches(&current[i]))
            .collect();
        if copies.is_empty() {
            continue;
        }
        if remove_taints {
            indices.extend(copies);
            removes.push(t.clone());
        } else {
            keeps.push(t.clone());
        }
    }
    // Highest index first, so each removal leaves the next index valid.
    indices.sort_unstable_by(|a, b| b.cmp(a));
    indices.dedup();
    let unschedulable = is_unschedulable(node);
    let cordon_kept = if marker.cordoned && unschedulable {
        cordon_is_ours(node).err().map(|e| e.to_string())
    } else {
        None
    };
    let labelled = marker.excluded_from_load_balancers && lb_label(node).is_some();
    let label_kept = if labelled {
        lb_label_is_ours(node).err().map(|e| e.to_string())
    } else {
        None
    };
    let plan = RestorePlan {
        uncordons: marker.cordoned && unschedulable && cordon_kept.is_none(),
        removes,
        keeps,
        refused,
        left_cordon_alone: marker.cordoned && !unschedulable,
        cordon_kept,
        foreign: None,
        includes: labelled && label_kept.is_none(),
        label_kept,
        unproven: Vec::new(),
    };
    let mut ops = vec![guard(node)];
    ops.extend(
        indices
            .iter()
            .map(|i| json!({"op": "remove", "path": format!("/spec/taints/{i}")})),
    );
    if plan.uncordons {
        ops.push(json!({"op": "remove", "path": "/spec/unschedulable"}));
    }
    if plan.includes {
        ops.push(json!({"op": "remove", "path": EXCLUDE_LB_POINTER}));
    }
    let rest = Marker {
        cordoned: false,
        cordoned_at: None,
        excluded_from_load_balancers: false,
        taints: plan.keeps.clone(),
        ..marker.clone()
    };
    ops.push(marker_op(
        node,
        name,
        (!rest.taints.is_empty()).then_some(&rest),
    )?);
    let patch = patch_of(ops).map_err(build_error(name, "restore"))?;
    Ok((patch, plan))
}

/// The restore write for `node` as read when it carries no marker (someone removed it while our
/// taint and cordon stayed): only what managedFields prove ours goes. The cordon while our
/// field manager alone owns it ([`cordon_is_ours`]; an admin's cordon never), every taint with
/// a key of ours ([`is_our_taint_key`]) while our manager alone owns the taint list
/// ([`taints_are_ours`]), the load-balancer label while our manager alone owns it
/// ([`lb_label_is_ours`]). What of ours stays unproven is listed with the command that removes
/// it ([`Unproven`]): taints with a key of ours, a cordon our manager shares or whose owner
/// cannot be told, a label our manager shares. The patch is `None` when there is nothing to
/// write.
pub fn unrecorded_patch(
    node: &Node,
    name: &str,
    taint_key: &str,
) -> Result<(Option<json_patch::Patch>, RestorePlan), NodeError> {
    let unproven = |what: String, why: String, command: String| Unproven {
        node: name.to_string(),
        what,
        why,
        command,
    };
    let mut plan = RestorePlan::default();
    let mut ops = vec![guard(node)];
    let current = taints(node);
    let list = taints_are_ours(node);
    let mut indices = Vec::new();
    for (i, t) in current.iter().enumerate() {
        if !is_our_taint_key(&t.key, taint_key) {
            continue;
        }
        let listed = MarkerTaint::of(t);
        match &list {
            Ok(()) => {
                indices.push(i);
                if !plan.removes.contains(&listed) {
                    plan.removes.push(listed);
                }
            }
            Err(why) => {
                let p = unproven(
                    format!("taint {listed}"),
                    why.to_string(),
                    format!("kubectl taint nodes {name} {listed}-"),
                );
                if !plan.unproven.contains(&p) {
                    plan.unproven.push(p);
                }
            }
        }
    }
    ops.extend(
        indices
            .iter()
            .rev()
            .map(|i| json!({"op": "remove", "path": format!("/spec/taints/{i}")})),
    );
    if is_unschedulable(node) {
        match cordon_is_ours(node) {
            Ok(()) => plan.uncordons = true,
            Err(why) if cordon_may_be_ours(node) => plan.unproven.push(unproven(
                "the cordon".into(),
                why.to_string(),
                format!("kubectl uncordon {name}"),
            )),
            Err(_) => {}
        }
    }
    if plan.uncordons {
        ops.push(json!({"op": "remove", "path": "/spec/unschedulable"}));
    }
    if lb_label(node).is_some() {
        match lb_label_is_ours(node) {
            Ok(()) => plan.includes = true,
            Err(why) if lb_label_owned_by_us(node) => plan.unproven.push(unproven(
                format!("label {EXCLUDE_LB_LABEL}"),
                why.to_string(),
                format!("kubectl label node {name} {EXCLUDE_LB_LABEL}-"),
            )),
            Err(_) => {}
        }
    }
    if plan.includes {
        ops.push(json!({"op": "remove", "path": EXCLUDE_LB_POINTER}));
    }
    if ops.len() == 1 {
        return Ok((None, plan));
    }
    let patch = patch_of(ops).map_err(build_error(name, "restore"))?;
    Ok((Some(patch), plan))
}
