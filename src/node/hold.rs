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

use super::NodeError;
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

/// What another writer took from a prepared node and who, as far as managedFields tell, for the
/// log and the `CordonRemovedDuringDrain` Event. Rendered once, here ([`std::fmt::Display`]):
/// "node N was uncordoned (field manager M) during the drain", "node N had its taint K:E removed
/// (field manager M) during the drain", or both joined by "and".
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taken {
    pub node: String,
    /// The node was uncordoned; the managers that own `spec.unschedulable` now (none when the
    /// uncordon removed the field).
    pub cordon: Option<Vec<String>>,
    /// Our taint was removed; the managers that own `spec.taints` now.
    pub taint: Option<(MarkerTaint, Vec<String>)>,
}

impl Taken {
    /// What `lost` took from `node` (named `name`), with the writers managedFields name.
    pub fn of(node: &Node, name: &str, lost: &Lost) -> Taken {
        Taken {
            node: name.to_string(),
            cordon: lost.cordon.then(|| cordon_owners(node)),
            taint: lost.taint.clone().map(|t| (t, taint_owners(node))),
        }
    }

    /// What putting it back does, for people: "cordoning it again", "tainting it again", ...
    pub fn again(&self) -> &'static str {
        match (self.cordon.is_some(), self.taint.is_some()) {
            (true, true) => "cordoning and tainting it again",
            (true, false) => "cordoning it again",
            _ => "tainting it again",
        }
    }
}

/// " (field manager A, B)", or nothing when managedFields name no one.
fn by(owners: &[String]) -> String {
    match owners {
        [] => String::new(),
        _ => format!(" (field manager {})", owners.join(", ")),
    }
}

impl std::fmt::Display for Taken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let node = &self.node;
        let taint = |t: &MarkerTaint, owners: &[String]| format!("{t} removed{}", by(owners));
        match (&self.cordon, &self.taint) {
            (Some(owners), taken) => {
                let who = match owners.as_slice() {
                    [] => " (by a writer managedFields cannot name: the field was removed)"
                        .to_string(),
                    owners => by(owners),
                };
                write!(f, "node {node} was uncordoned{who}")?;
                if let Some((t, owners)) = taken {
                    write!(f, " and its taint {t} was removed{}", by(owners))?;
                }
            }
            (None, Some((t, owners))) => {
                write!(f, "node {node} had its taint {}", taint(t, owners))?
            }
            (None, None) => write!(f, "node {node} lost nothing")?,
        }
        write!(f, " during the drain")
    }
}

/// The hold's answer to [`Taken`], rendered once here: "WHAT; cordoning it again" before the
/// write, then ": done" or " failed: ERROR".
#[derive(Debug)]
pub enum PutBack<'a> {
    Trying(&'a Taken),
    Done(&'a Taken),
    Failed(&'a Taken, &'a NodeError),
}

impl std::fmt::Display for PutBack<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PutBack::Trying(t) => write!(f, "{t}; {}", t.again()),
            PutBack::Done(t) => write!(f, "{t}; {}: done", t.again()),
            PutBack::Failed(t, e) => write!(f, "{t}; {} failed: {e}", t.again()),
        }
    }
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
        let text = Taken::of(&n, "node-a", &lost(&n, BOOT, Some(&ours())).unwrap()).to_string();
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
        let text = Taken::of(&n, "node-a", &lost(&n, BOOT, Some(&ours())).unwrap()).to_string();
        assert_eq!(
            text,
            "node node-a was uncordoned (field manager node-controller-x) during the drain"
        );
    }

    #[test]
    fn a_removed_taint_alone_reads_as_a_sentence_with_its_answer() {
        let mut n = node(true, json!([]), Some(BOOT));
        n.metadata.managed_fields = Some(vec![
            serde_json::from_value(json!({
                "manager": "kubectl-taint", "operation": "Update", "apiVersion": "v1",
                "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:taints": {}}},
            }))
            .unwrap(),
        ]);
        let taken = Taken::of(&n, "node-b", &lost(&n, BOOT, Some(&ours())).unwrap());
        assert_eq!(
            PutBack::Done(&taken).to_string(),
            "node node-b had its taint kube-shutdown-drain/shutdown:PreferNoSchedule removed \
             (field manager kubectl-taint) during the drain; tainting it again: done"
        );
        let e = NodeError::Missing {
            node: "node-b".into(),
        };
        assert_eq!(
            PutBack::Failed(&taken, &e).to_string(),
            "node node-b had its taint kube-shutdown-drain/shutdown:PreferNoSchedule removed \
             (field manager kubectl-taint) during the drain; tainting it again failed: node \
             node-b does not exist"
        );
    }
}
