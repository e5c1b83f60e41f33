//! The marker annotation and the pure builders of the two Node writes: the prepare patch
//! (marker, taint, cordon) and the restore patch (taints, uncordon, marker). Each builder reads
//! the Node as it was read and returns one JSON patch whose first operation `test`s the
//! resourceVersion read, plus what the patch does; it sends nothing.

use k8s_openapi::api::core::v1::{Node, Taint};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::NodeError;
use crate::api::guarded::patch_of;

/// The annotation holding the marker JSON.
pub const MARKER_ANNOTATION: &str = "kube-shutdown-drain/marker";
/// [`MARKER_ANNOTATION`] as a JSON pointer (RFC 6901: `/` is written `~1`).
const MARKER_POINTER: &str = "/metadata/annotations/kube-shutdown-drain~1marker";

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
    /// The taints we added, each recorded by the same write that added it; restore removes
    /// exactly these, even if the configuration changed in between.
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

/// Reads the marker from a Node object.
pub fn marker_of(node: &Node, name: &str) -> Result<Option<Marker>, NodeError> {
    let text = node
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(MARKER_ANNOTATION));
    match text {
        None => Ok(None),
        Some(text) => serde_json::from_str(text)
            .map(Some)
            .map_err(|source| NodeError::BadMarker {
                node: name.to_string(),
                source,
            }),
    }
}

fn build_error<'a>(
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
fn guard(node: &Node) -> Value {
    json!({"op": "test", "path": "/metadata/resourceVersion", "value": node.metadata.resource_version})
}

/// The operation storing `marker` (or removing it, for `None`).
fn marker_op(node: &Node, name: &str, marker: Option<&Marker>) -> Result<Value, NodeError> {
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
    /// Add the taint in this write (false: these credentials may not change taints).
    pub add_taint: bool,
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
}

/// The prepare write for `node` as read: the marker (an earlier prepare's record kept, its
/// boot ID, time and reason refreshed), the configured taint unless present, and the cordon
/// unless cordoned, each recorded in the marker by this same patch. An admin's cordon or taint
/// found here is never recorded as ours.
pub fn prepare_patch(
    node: &Node,
    name: &str,
    input: &PrepareInput,
) -> Result<(json_patch::Patch, PreparePlan), NodeError> {
    let present = input
        .taint
        .as_ref()
        .is_some_and(|t| taints(node).iter().any(|x| MarkerTaint::of(t).matches(x)));
    let mut marker = match marker_of(node, name)? {
        // An earlier prepare that was not restored: what it recorded is still the truth.
        Some(m) => Marker {
            boot_id: input.boot_id.clone(),
            time: input.time.clone(),
            why: input.why.clone(),
            ..m
        },
        None => Marker {
            was_unschedulable: is_unschedulable(node),
            taint_was_present: present,
            boot_id: input.boot_id.clone(),
            time: input.time.clone(),
            why: input.why.clone(),
            cordoned: false,
            taints: Vec::new(),
        },
    };
    let cordons = !is_unschedulable(node);
    marker.cordoned |= cordons;
    let add = input.taint.as_ref().filter(|_| input.add_taint && !present);
    if let Some(t) = add
        && !marker.taints.contains(&MarkerTaint::of(t))
    {
        marker.taints.push(MarkerTaint::of(t));
    }
    let mut ops = vec![guard(node)];
    if node.spec.is_none() {
        ops.push(json!({"op": "add", "path": "/spec", "value": {}}));
    }
    ops.push(marker_op(node, name, Some(&marker))?);
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
    let patch = patch_of(ops).map_err(build_error(name, "prepare"))?;
    Ok((
        patch,
        PreparePlan {
            marker,
            cordons,
            taints: add.is_some(),
        },
    ))
}

/// What a restore write does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestorePlan {
    pub uncordons: bool,
    /// Taints of ours the write removes.
    pub removes: Vec<MarkerTaint>,
    /// Taints of ours left on the node (not removed by this write), still listed in the marker.
    pub keeps: Vec<MarkerTaint>,
    /// The marker says we cordoned, but the node is no longer cordoned.
    pub left_cordon_alone: bool,
}

/// The restore write for `node` as read and its `marker`: remove the listed taints still there
/// (unless `remove_taints` is false), uncordon if the marker says we cordoned and the node is
/// still cordoned, and clear the marker, or keep in it only the taints left on the node.
pub fn restore_patch(
    node: &Node,
    name: &str,
    marker: &Marker,
    remove_taints: bool,
) -> Result<(json_patch::Patch, RestorePlan), NodeError> {
    let current = taints(node);
    let mut indices = Vec::new();
    let (mut removes, mut keeps) = (Vec::new(), Vec::new());
    for t in &marker.taints {
        match current.iter().position(|x| t.matches(x)) {
            Some(i) if remove_taints => {
                indices.push(i);
                removes.push(t.clone());
            }
            Some(_) => keeps.push(t.clone()),
            None => {}
        }
    }
    // Highest index first, so each removal leaves the next index valid.
    indices.sort_unstable_by(|a, b| b.cmp(a));
    let unschedulable = is_unschedulable(node);
    let plan = RestorePlan {
        uncordons: marker.cordoned && unschedulable,
        removes,
        keeps,
        left_cordon_alone: marker.cordoned && !unschedulable,
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
    let rest = Marker {
        cordoned: false,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn node(taints: Value, unschedulable: bool, marker: Option<&Marker>) -> Node {
        let mut n = json!({"metadata": {"name": "n", "resourceVersion": "7"}, "spec": {}});
        if !taints.is_null() {
            n["spec"]["taints"] = taints;
        }
        if unschedulable {
            n["spec"]["unschedulable"] = json!(true);
        }
        if let Some(m) = marker {
            n["metadata"]["annotations"] =
                json!({MARKER_ANNOTATION: serde_json::to_string(m).unwrap()});
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

    fn input(add_taint: bool) -> PrepareInput {
        PrepareInput {
            why: "w".into(),
            boot_id: "b".into(),
            time: "t".into(),
            taint: Some(ours()),
            add_taint,
        }
    }

    fn ops(p: &json_patch::Patch) -> Vec<Value> {
        serde_json::to_value(p).unwrap().as_array().unwrap().clone()
    }

    /// Applies a patch as the server would (the `test` included).
    fn apply(n: &Node, p: &json_patch::Patch) -> Node {
        let mut v = serde_json::to_value(n).unwrap();
        json_patch::patch(&mut v, p).expect("the patch applies to the node it was built from");
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn the_prepare_patch_is_guarded_and_records_each_change_it_makes() {
        let other = json!({"key": "other", "effect": "NoSchedule"});
        let n = node(json!([other]), false, None);
        let (p, plan) = prepare_patch(&n, "n", &input(true)).unwrap();
        let o = ops(&p);
        assert_eq!(
            o[0],
            json!({"op": "test", "path": "/metadata/resourceVersion", "value": "7"})
        );
        assert!(plan.cordons && plan.taints);
        assert!(plan.marker.cordoned && !plan.marker.was_unschedulable);
        assert_eq!(plan.marker.taints, vec![MarkerTaint::of(&ours())]);
        let after = apply(&n, &p);
        assert!(is_unschedulable(&after));
        assert_eq!(taints(&after).len(), 2, "appended; the other taint stays");
        assert_eq!(marker_of(&after, "n").unwrap(), Some(plan.marker));
        // The guard holds: a node changed since (another resourceVersion) refuses the patch.
        let mut changed = serde_json::to_value(&n).unwrap();
        changed["metadata"]["resourceVersion"] = json!("8");
        assert!(json_patch::patch(&mut changed, &p).is_err());
    }

    #[test]
    fn an_admin_cordon_or_taint_is_never_recorded_as_ours() {
        let n = node(
            json!([{"key": "k/shutdown", "effect": "PreferNoSchedule", "value": "admin"}]),
            true,
            None,
        );
        let (p, plan) = prepare_patch(&n, "n", &input(true)).unwrap();
        assert!(!plan.cordons && !plan.taints);
        assert!(!plan.marker.cordoned && plan.marker.taints.is_empty());
        assert!(plan.marker.was_unschedulable && plan.marker.taint_was_present);
        assert_eq!(ops(&p).len(), 2, "the guard and the marker only");
    }

    #[test]
    fn without_taint_rights_the_patch_cordons_and_records_no_taint() {
        let n = node(Value::Null, false, None);
        let (p, plan) = prepare_patch(&n, "n", &input(false)).unwrap();
        assert!(plan.cordons && !plan.taints && plan.marker.taints.is_empty());
        assert!(!serde_json::to_string(&p).unwrap().contains("/spec/taints"));
        assert!(is_unschedulable(&apply(&n, &p)));
    }

    #[test]
    fn a_second_prepare_keeps_the_first_record_and_adds_a_new_taint() {
        let first = Marker {
            was_unschedulable: false,
            taint_was_present: false,
            boot_id: "old".into(),
            time: "t0".into(),
            why: "drain".into(),
            cordoned: true,
            taints: vec![MarkerTaint {
                key: "old/key".into(),
                effect: "NoSchedule".into(),
            }],
        };
        let n = node(
            json!([{"key": "old/key", "effect": "NoSchedule"}]),
            true,
            Some(&first),
        );
        let (p, plan) = prepare_patch(&n, "n", &input(true)).unwrap();
        assert!(plan.marker.cordoned, "still ours");
        assert_eq!(plan.marker.boot_id, "b");
        assert_eq!(plan.marker.taints.len(), 2);
        let after = apply(&n, &p);
        assert_eq!(taints(&after).len(), 2);
    }

    #[test]
    fn the_restore_patch_undoes_exactly_what_the_marker_lists() {
        let marker = Marker {
            was_unschedulable: false,
            taint_was_present: false,
            boot_id: "b".into(),
            time: "t".into(),
            why: "w".into(),
            cordoned: true,
            taints: vec![MarkerTaint::of(&ours())],
        };
        let mine = serde_json::to_value(ours()).unwrap();
        let same_key_other_effect = json!({"key": "k/shutdown", "effect": "NoExecute"});
        let other = json!({"key": "other", "effect": "NoSchedule"});
        let n = node(
            json!([same_key_other_effect, mine, other]),
            true,
            Some(&marker),
        );
        let (p, plan) = restore_patch(&n, "n", &marker, true).unwrap();
        assert!(plan.uncordons && plan.keeps.is_empty() && plan.removes.len() == 1);
        assert_eq!(
            ops(&p)[1],
            json!({"op": "remove", "path": "/spec/taints/1"})
        );
        let after = apply(&n, &p);
        assert!(!is_unschedulable(&after));
        assert_eq!(taints(&after).len(), 2, "only our key and effect went");
        assert_eq!(marker_of(&after, "n").unwrap(), None);

        // Without taint rights: the cordon part done, the taint kept in the marker.
        let (p, plan) = restore_patch(&n, "n", &marker, false).unwrap();
        assert!(plan.uncordons && plan.keeps.len() == 1);
        let after = apply(&n, &p);
        let left = marker_of(&after, "n").unwrap().unwrap();
        assert!(!left.cordoned && left.taints == vec![MarkerTaint::of(&ours())]);

        // Someone else uncordoned: the cordon is left alone.
        let n = node(Value::Null, false, Some(&marker));
        let (_, plan) = restore_patch(&n, "n", &marker, true).unwrap();
        assert!(!plan.uncordons && plan.left_cordon_alone && plan.removes.is_empty());
    }

    #[test]
    fn an_old_marker_reads_as_nothing_of_ours() {
        let old = r#"{"was_unschedulable":false,"taint_was_present":false,"boot_id":"b","time":"t","why":"w","taint_key":"k","taint_effect":"NoSchedule"}"#;
        let m: Marker = serde_json::from_str(old).unwrap();
        assert!(!m.cordoned && m.taints.is_empty());
    }
}
