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

/// Whether a drain's end writes the conditions: always, but after a drain of a node this boot
/// drained already (`again`: logind's window after the node's own reboot, after an early drain
/// or a `drain` by hand) that found nothing more to do, which leaves the earlier drain's
/// `Drained` and its message as they are. Pure.
pub(super) fn drain_changes_them(prepared: &PrepareOutcome, report: &Report) -> bool {
    let c = &report.counts;
    !prepared.again || !report.complete || c.evicted + c.deleted > 0
}

/// The conditions a drain's end writes: `DrainInProgress` false, `Drained` as the report says;
/// the message is the report's summary ("node N drained: 3 evicted in 4.1 s").
pub(super) fn drain_ended(report: &Report) -> [Condition; 2] {
    let reason = if report.complete {
        "DrainCompleted"
    } else {
        "DrainIncomplete"
    };
    let message = report.summary();
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
