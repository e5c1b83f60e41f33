//! The plan: every pod on the node with its verdict, in the order the drain acts on them.
//! Printed by `plan`, acted on by `drain`; built by one pure function.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use k8s_openapi::api::core::v1::Pod;
use serde::Serialize;

use crate::config::Settings;
use crate::policy::filters::{Action, Reason, last_stage_order, verdict};

/// The API's default `terminationGracePeriodSeconds`.
pub const DEFAULT_GRACE_SECONDS: i64 = 30;

/// One pod and what the drain does with it. The JSON shape is part of the CLI contract.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlannedPod {
    pub namespace: String,
    pub name: String,
    /// The UID the plan was made for; an eviction never targets another UID.
    #[serde(skip)]
    pub uid: String,
    pub action: Action,
    pub reason: Reason,
    /// The order group of an evicted pod (lower first); `null` otherwise.
    pub order: Option<i32>,
    /// A DaemonSet pod the drain stops in its last stage, in this order group (lower first;
    /// `[drain] daemonsets = "stop-last"`, [`last_stage_order`]); absent otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub last: Option<i32>,
    /// The PersistentVolumeClaims (in the pod's namespace) its volumes mount, a generic
    /// ephemeral volume's claim (`POD-VOLUME`) included; the drain waits for their volumes to
    /// detach.
    #[serde(skip)]
    pub claims: Vec<String>,
    /// The pod's own grace period (`spec.terminationGracePeriodSeconds`, default 30).
    #[serde(skip)]
    pub grace_seconds: i64,
    /// The pod's labels: which disruption budgets cover it, for the settling after the restore
    /// ([`crate::drain::settle`]).
    #[serde(skip)]
    pub labels: std::collections::BTreeMap<String, String>,
}

impl PlannedPod {
    /// Plans one pod. Pure.
    pub fn for_pod(settings: &Settings, pod: &Pod) -> PlannedPod {
        let v = verdict(settings, pod);
        PlannedPod {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            action: v.action,
            reason: v.reason,
            order: v.order,
            last: last_stage_order(settings, pod, &v),
            claims: claims_of(pod),
            grace_seconds: pod
                .spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds)
                .unwrap_or(DEFAULT_GRACE_SECONDS),
            labels: pod.metadata.labels.clone().unwrap_or_default(),
        }
    }

    /// `namespace/name`, as logs and the text output show it.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// The claims `pod` mounts: its `persistentVolumeClaim` volumes and the claims of its generic
/// ephemeral volumes, named `POD-VOLUME` (kubernetes `component-helpers/storage/ephemeral`,
/// `VolumeClaimName`). Pure.
fn claims_of(pod: &Pod) -> Vec<String> {
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| match (&v.persistent_volume_claim, &v.ephemeral) {
            (Some(c), _) => Some(c.claim_name.clone()),
            (None, Some(_)) => Some(format!("{name}-{}", v.name)),
            (None, None) => None,
        })
        .collect()
}

/// The width of the POD column: the longest `namespace/name`, at least the header's.
pub(crate) fn key_width(keys: impl Iterator<Item = String>) -> usize {
    keys.map(|k| k.len()).max().unwrap_or(0).max("POD".len())
}

/// What a drain of `node` would do now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Plan {
    pub node: String,
    pub pods: Vec<PlannedPod>,
}

impl Plan {
    /// Plans every pod. Evicted pods come first by order group, then waits, then the DaemonSet
    /// pods of the last stage by their group, then skips; within a class by namespace and name,
    /// so the output is stable.
    pub fn build(settings: &Settings, pods: &[Pod]) -> Plan {
        let mut planned: Vec<PlannedPod> = pods
            .iter()
            .map(|p| PlannedPod::for_pod(settings, p))
            .collect();
        planned.sort_by(|a, b| {
            let class = |p: &PlannedPod| match (p.action, p.last) {
                (Action::Evict, _) => 0,
                (Action::Wait, _) => 1,
                (Action::Skip, Some(_)) => 2,
                (Action::Skip, None) => 3,
            };
            (class(a), a.order, a.last, &a.namespace, &a.name).cmp(&(
                class(b),
                b.order,
                b.last,
                &b.namespace,
                &b.name,
            ))
        });
        Plan {
            node: settings.node_name.clone(),
            pods: planned,
        }
    }

    /// The evicted pods by order group, lowest group first.
    pub fn groups(&self) -> BTreeMap<i32, Vec<&PlannedPod>> {
        let mut groups: BTreeMap<i32, Vec<&PlannedPod>> = BTreeMap::new();
        for p in &self.pods {
            if let (Action::Evict, Some(order)) = (p.action, p.order) {
                groups.entry(order).or_default().push(p);
            }
        }
        groups
    }

    /// How many pods get each action.
    pub fn count(&self, action: Action) -> usize {
        self.pods.iter().filter(|p| p.action == action).count()
    }

    /// How many DaemonSet pods the last stage stops.
    pub fn count_last(&self) -> usize {
        self.pods.iter().filter(|p| p.last.is_some()).count()
    }

    /// A table for people. A pod of the last stage shows `last` as its action and its group as
    /// its order (`critical` for [`crate::policy::filters::NODE_CRITICAL_CLASS`]).
    pub fn to_text(&self) -> String {
        let last = match self.count_last() {
            0 => String::new(),
            n => format!(" ({n} of them stopped last)"),
        };
        let mut out = format!(
            "node {}: {} to evict, {} to wait for, {} skipped{last}\n",
            self.node,
            self.count(Action::Evict),
            self.count(Action::Wait),
            self.count(Action::Skip)
        );
        let width = key_width(self.pods.iter().map(PlannedPod::key));
        let _ = writeln!(
            out,
            "{:<width$}  {:<6}  {:>11}  REASON",
            "POD", "ACTION", "ORDER"
        );
        for p in &self.pods {
            let (action, order) = match p.last {
                Some(i32::MAX) => ("last", "critical".to_string()),
                Some(o) => ("last", o.to_string()),
                None => (
                    p.action.as_str(),
                    p.order.map_or("-".to_string(), |o| o.to_string()),
                ),
            };
            let _ = writeln!(
                out,
                "{:<width$}  {:<6}  {:>11}  {}",
                p.key(),
                action,
                order,
                p.reason.as_str()
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn pod(ns: &str, name: &str, priority: i32, extra: serde_json::Value) -> Pod {
        let mut v = serde_json::json!({
            "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{name}"),
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "r", "controller": true}]},
            "spec": {"containers": [{"name": "c"}], "priority": priority},
        });
        if let (Some(m), serde_json::Value::Object(e)) = (v["metadata"].as_object_mut(), extra) {
            m.extend(e);
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_pods_claims_include_its_generic_ephemeral_volumes_claims() {
        let p: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "db-0", "namespace": "a"},
            "spec": {"containers": [{"name": "c"}], "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "data-db-0"}},
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                {"name": "tmp", "emptyDir": {}},
            ]},
        }))
        .unwrap();
        assert_eq!(claims_of(&p), ["data-db-0", "db-0-scratch"]);
    }

    #[test]
    fn groups_by_priority_lowest_first_and_json_shape() {
        let s = Settings::from_str_at(
            Path::new("/t.toml"),
            "node_name = \"n1\"\n[[rules]]\nselector = \"app=db\"\naction = \"drain\"\norder = 5\n",
        )
        .unwrap();
        let pods = vec![
            pod("b", "high", 1000, serde_json::json!({})),
            pod("a", "low", -10, serde_json::json!({})),
            pod("a", "db", 0, serde_json::json!({"labels": {"app": "db"}})),
            pod("a", "zero", 0, serde_json::json!({})),
            pod(
                "a",
                "mirror",
                0,
                serde_json::json!({"annotations": {"kubernetes.io/config.mirror": "x"}}),
            ),
        ];
        let plan = Plan::build(&s, &pods);
        let groups: Vec<(i32, Vec<String>)> = plan
            .groups()
            .into_iter()
            .map(|(o, ps)| (o, ps.iter().map(|p| p.key()).collect()))
            .collect();
        assert_eq!(
            groups,
            vec![
                (-10, vec!["a/low".to_string()]),
                (0, vec!["a/zero".to_string()]),
                (5, vec!["a/db".to_string()]),
                (1000, vec!["b/high".to_string()]),
            ]
        );
        let json = serde_json::to_value(&plan).unwrap();
        assert_eq!(json["node"], "n1");
        assert_eq!(
            json["pods"][0],
            serde_json::json!({"namespace": "a", "name": "low", "action": "evict", "reason": "default", "order": -10})
        );
        assert_eq!(
            json["pods"][4],
            serde_json::json!({"namespace": "a", "name": "mirror", "action": "skip", "reason": "mirror", "order": null})
        );
        let text = plan.to_text();
        assert!(
            text.starts_with("node n1: 4 to evict, 0 to wait for, 1 skipped\n"),
            "{text}"
        );
        assert!(text.contains("a/mirror") && text.contains("skip"), "{text}");
    }
}
