//! The engine's side of the KEP-5683 Node conditions (`[node] lifecycle_conditions`,
//! [`crate::node::conditions`]).

use super::*;

impl Engine {
    /// With `[node] lifecycle_conditions`, writes `conditions` on the Node's status by `by`; a
    /// failure is said, never returned (as an Event's).
    pub async fn set_conditions(&self, conditions: &[Condition], by: Instant) {
        if !self.settings.lifecycle_conditions {
            return;
        }
        let node = &self.settings.node_name;
        let written = match self.clients_by(by).await {
            Ok(clients) => node::conditions::write(clients, node, conditions, by)
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = written {
            let types: Vec<&str> = conditions.iter().map(|c| c.kind.as_str()).collect();
            tracing::warn!(node = %node, "cannot write the conditions {} of node {node}: {e}", types.join(", "));
        }
    }
}

/// The conditions a drain's end writes: `DrainInProgress` false, `Drained` as the report says.
pub(super) fn drain_ended(node: &str, report: &Report) -> [Condition; 2] {
    let (reason, message) = if report.complete {
        (
            "DrainCompleted",
            format!("node {node} drained: {}", report.summary()),
        )
    } else {
        (
            "DrainIncomplete",
            format!(
                "the drain of node {node} did not complete: {}",
                report.summary()
            ),
        )
    };
    [
        Condition {
            kind: ConditionType::DrainInProgress,
            status: false,
            reason,
            message: message.clone(),
        },
        Condition {
            kind: ConditionType::Drained,
            status: report.complete,
            reason,
            message,
        },
    ]
}
