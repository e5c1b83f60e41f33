//! The Node lifecycle conditions of KEP-5683 (alpha in Kubernetes 1.37, feature gate
//! `NodeLifecycleConditions`), written with `[node] lifecycle_conditions = true`:
//! `MaintenancePlanned` while a reboot the node asked for is needed, `DrainInProgress` while a
//! drain of ours runs, `Drained` once one completed; each set back to `False` at the restore.
//! Storage operators, dashboards and controllers read one signal instead of our annotation.
//!
//! One strategic merge patch of `status.conditions` on the `nodes/status` subresource: the
//! list's merge key is `type` (`NodeStatus.conditions`, `patchMergeKey:"type"` in
//! k8s.io/api/core/v1/types.go), so the kubelet's conditions (Ready, MemoryPressure, ...) are
//! left as they are. The kubelet's credentials may patch their own Node's status
//! (NodeRestriction); the dedicated identity needs `patch` on `nodes/status` (the shipped
//! ClusterRole). Like Events, a failed write is said and never fails a drain or a restore.

use k8s_openapi::api::core::v1::{Node, NodeCondition};
use kube::api::{Api, Patch, PatchParams};
use serde_json::json;
use tokio::time::Instant;

use crate::api::guarded::FIELD_MANAGER;
use crate::api::{ApiError, Clients};

/// The condition types, as KEP-5683 names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Type {
    MaintenancePlanned,
    DrainInProgress,
    Drained,
}

impl Type {
    pub fn as_str(self) -> &'static str {
        match self {
            Type::MaintenancePlanned => "MaintenancePlanned",
            Type::DrainInProgress => "DrainInProgress",
            Type::Drained => "Drained",
        }
    }
}

/// One condition to write: its type, whether it holds, a CamelCase reason and a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Condition {
    pub kind: Type,
    pub status: bool,
    pub reason: &'static str,
    pub message: String,
}

/// The patch body for `conditions` written at `now` over the Node's `current` conditions. A
/// condition whose status does not change keeps its `lastTransitionTime` (left out of the patch,
/// which merges each element by `type`): the API conventions have it change only with the
/// status (`metav1.Condition`: "the last time the condition transitioned from one status to
/// another"). Pure.
pub fn patch(
    conditions: &[Condition],
    now: jiff::Timestamp,
    current: &[NodeCondition],
) -> serde_json::Value {
    let time = now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let list: Vec<_> = conditions
        .iter()
        .map(|c| {
            let status = if c.status { "True" } else { "False" };
            let mut written = json!({
                "type": c.kind.as_str(),
                "status": status,
                "reason": c.reason,
                "message": crate::text::clean(&c.message, crate::text::EVENT_MESSAGE_MAX),
                "lastHeartbeatTime": time,
            });
            let unchanged = current
                .iter()
                .any(|now| now.type_ == c.kind.as_str() && now.status == status);
            if !unchanged {
                written["lastTransitionTime"] = json!(time);
            }
            written
        })
        .collect();
    json!({"status": {"conditions": list}})
}

/// Writes `conditions` on node `node`'s status by `deadline`.
pub async fn write(
    clients: &Clients,
    node: &str,
    conditions: &[Condition],
    deadline: Instant,
) -> Result<(), ApiError> {
    let nodes: Api<Node> = Api::all(clients.api.clone());
    let object = format!("the status of node {node}");
    // The conditions as they are, for their transition times (read from the Node: the
    // ClusterRole grants `get` on nodes, `patch` only on nodes/status); a race with another writer of
    // the same type costs at most one transition time.
    let read = clients.retry(deadline, &object, || nodes.get(node)).await?;
    let current = read.status.and_then(|s| s.conditions).unwrap_or_default();
    let body = patch(conditions, jiff::Timestamp::now(), &current);
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    };
    let patch = Patch::Strategic(&body);
    clients
        .retry(deadline, &object, || {
            nodes.patch_status(node, &params, &patch)
        })
        .await
        .map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_patch_merges_by_type_and_says_true_or_false() {
        let now: jiff::Timestamp = "2026-12-04T10:00:00Z".parse().unwrap();
        let body = patch(
            &[
                Condition {
                    kind: Type::DrainInProgress,
                    status: false,
                    reason: "DrainCompleted",
                    message: "node n1 drained".into(),
                },
                Condition {
                    kind: Type::Drained,
                    status: true,
                    reason: "DrainCompleted",
                    message: "node n1 drained".into(),
                },
            ],
            now,
            &[],
        );
        let list = body["status"]["conditions"].as_array().unwrap();
        assert_eq!(list.len(), 2);
        assert_eq!(list[0]["type"], "DrainInProgress");
        assert_eq!(list[0]["status"], "False");
        assert_eq!(list[1]["type"], "Drained");
        assert_eq!(list[1]["status"], "True");
        assert_eq!(list[1]["lastTransitionTime"], "2026-12-04T10:00:00Z");
        assert_eq!(body.as_object().unwrap().len(), 1, "only status.conditions");
    }

    /// The transition time moves with the status only: a condition written again with the
    /// status it has keeps its time (left out of the merge), one whose status changes or that
    /// is new gets the write's.
    #[test]
    fn the_transition_time_changes_only_with_the_status() {
        let now: jiff::Timestamp = "2026-12-04T10:00:00Z".parse().unwrap();
        let had = |kind: &str, status: &str| NodeCondition {
            type_: kind.into(),
            status: status.into(),
            ..NodeCondition::default()
        };
        let cond = |kind, status| Condition {
            kind,
            status,
            reason: "DrainCompleted",
            message: "node n1 drained: 3 evicted in 4.1 s".into(),
        };
        let body = patch(
            &[
                cond(Type::Drained, true),
                cond(Type::DrainInProgress, false),
                cond(Type::MaintenancePlanned, true),
            ],
            now,
            &[had("Drained", "True"), had("DrainInProgress", "True")],
        );
        let list = body["status"]["conditions"].as_array().unwrap();
        assert_eq!(
            list[0]["lastTransitionTime"],
            json!(null),
            "Drained stays True"
        );
        assert_eq!(list[0]["lastHeartbeatTime"], "2026-12-04T10:00:00Z");
        assert_eq!(
            list[1]["lastTransitionTime"], "2026-12-04T10:00:00Z",
            "True to False"
        );
        assert_eq!(list[2]["lastTransitionTime"], "2026-12-04T10:00:00Z", "new");
    }
}
