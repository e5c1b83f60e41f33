//! Holding the cordon while the node drains: what another writer took away from a prepared node
//! (an uncordon by a controller or a script, our taint removed), and who, as far as the Node
//! tells. Pure: reads a Node, sends nothing; the engine watches the Node and writes the prepare
//! again ([`crate::engine::Engine::prepare_and_drain`]).
//!
//! The cordon is held whoever set it: a node going down must not be given pods, and a cordon
//! put back by our write is recorded in the marker as ours by the prepare's own rule (so the
//! next boot's restore uncordons it, as the writer who uncordoned wanted). Our taint is held
//! only while the marker lists it as ours.

use k8s_openapi::api::core::v1::{Node, Taint};

use super::marker::{MarkerRead, MarkerTaint, is_unschedulable, read_marker, taints};
use super::ownership::{cordon_owners, taint_owners};

/// What another writer took away from a node we prepared.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lost {
    /// The node is schedulable again.
    pub cordon: bool,
    /// Our taint, listed in the marker, is gone.
    pub taint: Option<MarkerTaint>,
}

/// What of this boot's prepare is gone from `node`; `None` when everything holds, and when the
/// node carries no marker of this boot (cleared by someone, e.g. an admin's `restore`: not ours
/// to fight over). `taint` is the configured taint (`None`: disabled).
pub fn lost(node: &Node, boot_id: &str, taint: Option<&Taint>) -> Option<Lost> {
    let MarkerRead::Ours(marker) = read_marker(node) else {
        return None;
    };
    if marker.boot_id != boot_id {
        return None;
    }
    let current = taints(node);
    let taint = taint
        .map(|t| MarkerTaint {
            key: t.key.clone(),
            effect: t.effect.clone(),
        })
        .filter(|t| marker.taints.contains(t))
        .filter(|t| {
            !current
                .iter()
                .any(|x| x.key == t.key && x.effect == t.effect)
        });
    let cordon = !is_unschedulable(node);
    (cordon || taint.is_some()).then_some(Lost { cordon, taint })
}

/// For the log and the `CordonRemovedDuringDrain` Event: what was taken and by whom, from
/// managedFields where they tell (an uncordon that removed the field leaves no owner to name).
pub fn describe(node: &Node, name: &str, lost: &Lost) -> String {
    let by = |owners: Vec<String>| match owners.as_slice() {
        [] => String::new(),
        _ => format!(" (field manager {})", owners.join(", ")),
    };
    let mut parts = Vec::new();
    if lost.cordon {
        let who = by(cordon_owners(node));
        let who = if who.is_empty() {
            " (by a writer managedFields cannot name: the field was removed)".to_string()
        } else {
            who
        };
        parts.push(format!("uncordoned{who}"));
    }
    if let Some(t) = &lost.taint {
        parts.push(format!(
            "its taint {t} was removed{}",
            by(taint_owners(node))
        ));
    }
    format!("node {name} was {} during the drain", parts.join(" and "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const BOOT: &str = "0b0e1d00-0000-4000-8000-000000000001";

    fn node(unschedulable: bool, taints: serde_json::Value, marker_boot: Option<&str>) -> Node {
        let mut n = json!({
            "metadata": {"name": "node-a", "annotations": {}},
            "spec": {"unschedulable": unschedulable, "taints": taints},
        });
        if let Some(boot) = marker_boot {
            let marker = json!({
                "was_unschedulable": false, "boot_id": boot, "time": "2026-12-02T00:00:00Z",
                "why": "reboot", "cordoned": true, "version": 1,
                "taints": [{"key": "kube-shutdown-drain/shutdown", "effect": "PreferNoSchedule"}],
            });
            n["metadata"]["annotations"]["kube-shutdown-drain/marker"] = json!(marker.to_string());
        }
        serde_json::from_value(n).unwrap()
    }

    fn ours() -> Taint {
        Taint {
            key: "kube-shutdown-drain/shutdown".into(),
            effect: "PreferNoSchedule".into(),
            ..Taint::default()
        }
    }

    fn our_taint_json() -> serde_json::Value {
        json!([{"key": "kube-shutdown-drain/shutdown", "effect": "PreferNoSchedule"}])
    }

    #[test]
    fn a_prepared_node_that_holds_has_lost_nothing() {
        let n = node(true, our_taint_json(), Some(BOOT));
        assert_eq!(lost(&n, BOOT, Some(&ours())), None);
    }

    #[test]
    fn an_uncordon_and_a_removed_taint_are_seen() {
        let n = node(false, json!([]), Some(BOOT));
        let l = lost(&n, BOOT, Some(&ours())).expect("lost");
        assert!(l.cordon);
        assert_eq!(
            l.taint.map(|t| t.to_string()).as_deref(),
            Some("kube-shutdown-drain/shutdown:PreferNoSchedule")
        );
        let text = describe(&n, "node-a", &lost(&n, BOOT, Some(&ours())).unwrap());
        assert!(text.starts_with("node node-a was uncordoned"), "{text}");
        assert!(text.contains("cannot name"), "{text}");
    }

    #[test]
    fn an_uncordon_alone_leaves_the_taint_out() {
        let n = node(false, our_taint_json(), Some(BOOT));
        let l = lost(&n, BOOT, Some(&ours())).expect("lost");
        assert_eq!(
            l,
            Lost {
                cordon: true,
                taint: None
            }
        );
    }

    #[test]
    fn a_taint_the_marker_does_not_list_is_not_held() {
        let n = node(true, json!([]), Some(BOOT));
        let other = Taint {
            key: "kube-shutdown-drain/other".into(),
            effect: "NoSchedule".into(),
            ..Taint::default()
        };
        assert_eq!(lost(&n, BOOT, Some(&other)), None);
        assert_eq!(lost(&n, BOOT, None), None);
    }

    #[test]
    fn without_a_marker_of_this_boot_nothing_is_held() {
        assert_eq!(
            lost(&node(false, json!([]), None), BOOT, Some(&ours())),
            None
        );
        let old = node(
            false,
            json!([]),
            Some("0b0e1d00-0000-4000-8000-000000000002"),
        );
        assert_eq!(lost(&old, BOOT, Some(&ours())), None);
    }

    #[test]
    fn the_writer_that_set_the_cordon_false_is_named() {
        let mut n = node(false, our_taint_json(), Some(BOOT));
        n.metadata.managed_fields = Some(vec![
            serde_json::from_value(json!({
                "manager": "node-controller-x", "operation": "Update", "apiVersion": "v1",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:unschedulable": {}}},
            }))
            .unwrap(),
        ]);
        let text = describe(&n, "node-a", &lost(&n, BOOT, Some(&ours())).unwrap());
        assert_eq!(
            text,
            "node node-a was uncordoned (field manager node-controller-x) during the drain"
        );
    }
}
