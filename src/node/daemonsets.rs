//! The taint of the drain's last stage (`[drain] daemonsets = "stop-last"`): once every other
//! planned pod is gone, [`DAEMONSETS_TAINT_KEY`]`:NoSchedule` goes on the Node, recorded in the
//! marker by the same write, and the DaemonSet pods that do not tolerate it are stopped.
//!
//! The DaemonSet controller decides per node with the pod template's tolerations against the
//! node's taints (kubernetes `pkg/controller/daemon`, `NodeShouldRunDaemonPod`): a NoSchedule
//! taint the template does not tolerate means no new pod there, while a running one may stay
//! (only NoExecute evicts). The tolerations the controller adds to every template are for the
//! `node.kubernetes.io/*` condition taints and the cordon (`util.AddOrUpdateDaemonPodTolerations`),
//! never for a key of ours, so a stopped pod is not created again until the taint goes; a pod
//! that tolerates every taint (`operator: Exists` without a key: CNI, kube-proxy, most CSI node
//! plugins) is left running. Without the taint the controller replaces each stopped pod at
//! once (the race of the kubelet's Graceful Node Shutdown, kubernetes issue 122912).
//!
//! The builders are pure; the calls are `NodeOps::taint_for_daemonsets` and
//! `NodeOps::untaint_daemonsets` (here).

use k8s_openapi::api::core::v1::{Node, Taint};
use serde_json::json;
use tokio::time::Instant;

use super::marker::{
    Marker, MarkerRead, MarkerTaint, OUR_TAINT_PREFIX, build_error, guard, marker_op, read_marker,
    taints,
};
use super::{NodeError, NodeOps};
use crate::api::guarded::patch_of;

/// The key of the last stage's taint (under [`OUR_TAINT_PREFIX`], so restore removes it as
/// ours).
pub const DAEMONSETS_TAINT_KEY: &str = "kube-shutdown-drain/daemonsets";
/// Its effect: the DaemonSet controller places no new pod where it is not tolerated.
pub const DAEMONSETS_TAINT_EFFECT: &str = "NoSchedule";

const _: () = assert!(DAEMONSETS_TAINT_KEY.len() > OUR_TAINT_PREFIX.len());

/// The last stage's taint.
pub fn taint() -> Taint {
    Taint {
        key: DAEMONSETS_TAINT_KEY.to_string(),
        effect: DAEMONSETS_TAINT_EFFECT.to_string(),
        value: None,
        time_added: None,
    }
}

fn is_it(t: &Taint) -> bool {
    t.key == DAEMONSETS_TAINT_KEY && t.effect == DAEMONSETS_TAINT_EFFECT
}

fn is_record(t: &MarkerTaint) -> bool {
    t.key == DAEMONSETS_TAINT_KEY && t.effect == DAEMONSETS_TAINT_EFFECT
}

fn listed(m: &Marker) -> bool {
    m.taints.iter().any(is_record)
}

/// The write adding the taint to `node` as read and recording it in the marker, or `None` when
/// the node has it already (recorded by an earlier write of ours, or put there by someone else:
/// it keeps the DaemonSet pods off either way, and only one we added is recorded). Refused
/// unless the node carries our marker of boot `boot_id`: a taint no marker lists would never be
/// removed.
pub fn add_patch(
    node: &Node,
    name: &str,
    boot_id: &str,
) -> Result<Option<(json_patch::Patch, ())>, NodeError> {
    let unrecorded = |why: String| NodeError::Unrecorded {
        node: name.to_string(),
        what: "the DaemonSet taint",
        why,
    };
    let mut marker = match read_marker(node) {
        MarkerRead::Ours(m) if m.boot_id == boot_id => m,
        MarkerRead::Ours(m) => {
            return Err(unrecorded(format!(
                "its marker is from boot {}, not this one",
                m.boot_id
            )));
        }
        MarkerRead::Absent => return Err(unrecorded("it carries no marker".to_string())),
        MarkerRead::Foreign(why) => {
            return Err(unrecorded(format!(
                "its marker is not one we wrote ({why})"
            )));
        }
    };
    if taints(node).iter().any(is_it) {
        return Ok(None);
    }
    let t = taint();
    marker.taints.push(MarkerTaint {
        key: t.key.clone(),
        effect: t.effect.clone(),
    });
    let has_list = node.spec.as_ref().and_then(|s| s.taints.as_ref()).is_some();
    let mut ops = vec![guard(node)];
    if node.spec.is_none() {
        ops.push(json!({"op": "add", "path": "/spec", "value": {}}));
    }
    ops.push(marker_op(node, name, Some(&marker))?);
    ops.push(if has_list {
        json!({"op": "add", "path": "/spec/taints/-", "value": t})
    } else {
        json!({"op": "add", "path": "/spec/taints", "value": [t]})
    });
    let patch = patch_of(ops).map_err(build_error(name, "DaemonSet taint"))?;
    Ok(Some((patch, ())))
}

/// The write removing the taint from `node` as read, and from its marker, or `None` when the
/// marker does not list it or it is gone (what restore would undo anyway, ahead of the rest).
pub fn remove_patch(node: &Node, name: &str) -> Result<Option<(json_patch::Patch, ())>, NodeError> {
    let MarkerRead::Ours(mut marker) = read_marker(node) else {
        return Ok(None);
    };
    let Some(index) = taints(node)
        .iter()
        .position(is_it)
        .filter(|_| listed(&marker))
    else {
        return Ok(None);
    };
    marker.taints.retain(|t| !is_record(t));
    let ops = vec![
        guard(node),
        json!({"op": "remove", "path": format!("/spec/taints/{index}")}),
        marker_op(node, name, Some(&marker))?,
    ];
    let patch = patch_of(ops).map_err(build_error(name, "DaemonSet untaint"))?;
    Ok(Some((patch, ())))
}

/// Whether `node`'s marker lists the taint and the node still has it.
pub fn is_held(node: &Node) -> bool {
    matches!(read_marker(node), MarkerRead::Ours(m) if listed(&m)) && taints(node).iter().any(is_it)
}

impl NodeOps<'_> {
    /// Adds the last stage's taint, recorded in the marker of boot `boot_id` by the same guarded
    /// write; `Ok(true)` when this call added it, `Ok(false)` when the node had it.
    pub async fn taint_for_daemonsets(
        &self,
        boot_id: &str,
        deadline: Instant,
    ) -> Result<bool, NodeError> {
        let name = self.settings.node_name.as_str();
        let node = self.get_by(deadline).await?;
        let written = self
            .write(&node, deadline, |n| add_patch(n, name, boot_id))
            .await
            .map_err(|e| self.failed("taint", e))?;
        Ok(written.applied.is_some())
    }

    /// Removes the last stage's taint ahead of the rest of the restore, so the DaemonSet
    /// controller brings the node's agents back while the node is still cordoned; `Ok(true)`
    /// when this call removed it.
    pub async fn untaint_daemonsets(&self, deadline: Instant) -> Result<bool, NodeError> {
        let name = self.settings.node_name.as_str();
        let node = self.get_by(deadline).await?;
        let written = self
            .write(&node, deadline, |n| remove_patch(n, name))
            .await
            .map_err(|e| self.failed("untaint", e))?;
        Ok(written.applied.is_some())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BOOT: &str = "0b2f5a52-2a53-4c7c-9d3e-2b1c1e0e7c11";

    fn node(taints: serde_json::Value, marker: Option<serde_json::Value>) -> Node {
        let annotations = marker.map(|m| json!({"kube-shutdown-drain/marker": m.to_string()}));
        serde_json::from_value(json!({
            "metadata": {"name": "n1", "resourceVersion": "7", "annotations": annotations},
            "spec": {"unschedulable": true, "taints": taints},
        }))
        .unwrap()
    }

    fn marker(taints: serde_json::Value) -> serde_json::Value {
        json!({"was_unschedulable": false, "boot_id": BOOT, "time": "2026-12-02T05:00:00Z",
               "why": "reboot", "cordoned": true, "taints": taints})
    }

    fn apply(n: &Node, patch: json_patch::Patch) -> Node {
        let mut v = serde_json::to_value(n).unwrap();
        json_patch::patch(&mut v, &patch).unwrap();
        serde_json::from_value(v).unwrap()
    }

    fn recorded(n: &Node) -> Vec<String> {
        match read_marker(n) {
            MarkerRead::Ours(m) => m.taints.iter().map(|t| t.to_string()).collect(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_taint_goes_on_with_its_record_and_comes_off_with_it() {
        let ours = json!({"key": "kube-shutdown-drain/shutdown", "effect": "PreferNoSchedule"});
        let admin = json!({"key": "dedicated", "value": "db", "effect": "NoSchedule"});
        let n = node(
            json!([ours, admin]),
            Some(marker(
                json!([{"key": "kube-shutdown-drain/shutdown", "effect": "PreferNoSchedule"}]),
            )),
        );
        let (patch, ()) = add_patch(&n, "n1", BOOT).unwrap().expect("a write");
        let tainted = apply(&n, patch);
        assert_eq!(
            recorded(&tainted),
            [
                "kube-shutdown-drain/shutdown:PreferNoSchedule",
                "kube-shutdown-drain/daemonsets:NoSchedule"
            ]
        );
        assert!(is_held(&tainted));
        assert_eq!(taints(&tainted).len(), 3);
        // Once on, nothing more to add.
        assert!(add_patch(&tainted, "n1", BOOT).unwrap().is_none());
        // Removal takes exactly it and its record: the admin's taint and our first stay.
        let (patch, ()) = remove_patch(&tainted, "n1").unwrap().expect("a write");
        let back = apply(&tainted, patch);
        assert_eq!(taints(&back), taints(&n));
        assert_eq!(
            recorded(&back),
            ["kube-shutdown-drain/shutdown:PreferNoSchedule"]
        );
        assert!(!is_held(&back));
        assert!(remove_patch(&back, "n1").unwrap().is_none());
    }

    #[test]
    fn without_a_marker_of_this_boot_the_taint_is_refused() {
        let bare = node(json!(null), None);
        let e = add_patch(&bare, "n1", BOOT).unwrap_err().to_string();
        assert!(e.contains("node n1") && e.contains("no marker"), "{e}");
        let old = node(json!(null), Some(marker(json!([]))));
        let other = "1b2f5a52-2a53-4c7c-9d3e-2b1c1e0e7c11";
        let e = add_patch(&old, "n1", other).unwrap_err().to_string();
        assert!(e.contains(BOOT) && e.contains("not this one"), "{e}");
        let foreign = node(json!(null), Some(json!("garbage")));
        assert!(add_patch(&foreign, "n1", BOOT).is_err());
        // A node with no taint list gets one.
        let (patch, ()) = add_patch(&old, "n1", BOOT).unwrap().unwrap();
        assert!(is_held(&apply(&old, patch)));
    }

    #[test]
    fn a_taint_of_our_key_that_no_marker_lists_is_neither_recorded_nor_removed() {
        let n = node(
            json!([{"key": DAEMONSETS_TAINT_KEY, "effect": "NoSchedule"}]),
            Some(marker(json!([]))),
        );
        assert!(add_patch(&n, "n1", BOOT).unwrap().is_none());
        assert!(remove_patch(&n, "n1").unwrap().is_none());
        assert!(!is_held(&n));
    }
}
