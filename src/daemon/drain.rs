//! The daemon's drain of its node within one deadline: prepare and drain at once, with a guard
//! that stops an engine drain overrunning its deadline, so the inhibitor cannot outlive the
//! budget.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::Settings;
use crate::daemon::status::Status;
use crate::engine::Engine;
use crate::events::Reason as EventReason;
use crate::filters::Action;
use crate::report::Report;

/// How a drain ended.
#[expect(
    clippy::large_enum_variant,
    reason = "one value per shutdown, moved once; boxing the report buys nothing"
)]
pub(crate) enum DrainOutcome {
    /// The engine ran; the report says how far it got.
    Drained(Report),
    /// No drain ran (no client, or the prepare used the whole budget).
    Failed(String),
}

/// Prepare and drain, both by `deadline` (the drain lists while the prepare cordons, and evicts
/// once it is over). Never outlives the deadline by more than [`DRAIN_OVERRUN_GUARD`].
/// `unguarded`: no inhibitor is held; the message goes into a Warning Event on the Node beside
/// the prepare.
// The node field comes from the spans of the prepare and the drain inside; the shutdown kind
// from the caller's `shutdown` span.
#[tracing::instrument(skip_all)]
pub(crate) async fn drain_node(
    settings: Arc<Settings>,
    status: Status,
    why: String,
    deadline: Instant,
    unguarded: Option<String>,
) -> DrainOutcome {
    let node = settings.node_name.clone();
    let engine = match Engine::new(settings) {
        Ok(engine) => engine,
        Err(e) => return DrainOutcome::Failed(e.to_string()),
    };
    // The plan for the status line and the Event are sent beside the prepare and the drain's own
    // list: they cost the drain no time.
    let plan = async {
        if let Ok(Ok(plan)) = tokio::time::timeout_at(deadline, engine.plan()).await {
            status.set(format!(
                "draining {} pods from node {node} (waiting for {} more, {} left alone)",
                plan.count(Action::Evict),
                plan.count(Action::Wait),
                plan.count(Action::Skip)
            ));
        }
    };
    let event = async {
        if let Some(message) = &unguarded {
            let _ =
                tokio::time::timeout_at(deadline, engine.event(EventReason::NoInhibitor, message))
                    .await;
        }
    };
    // Prepare and drain at once: the drain lists while the prepare cordons, and evicts after.
    // `Engine::prepare_and_drain` returns by its deadline; this guard makes that a property of
    // the daemon too, so a fault in the engine cannot hold the lock past the budget.
    let work = async { tokio::join!(engine.prepare_and_drain(&why, deadline), plan, event).0 };
    match tokio::time::timeout_at(deadline + DRAIN_OVERRUN_GUARD, work).await {
        Ok((prepared, report)) => {
            match prepared {
                Ok(outcome) => tracing::info!(
                    node = %node,
                    "prepared node {node}: marker written{}{}",
                    if outcome.tainted {
                        ", tainted"
                    } else if outcome.taint_forbidden {
                        ", taint forbidden for these credentials"
                    } else {
                        ", taint already present or disabled"
                    },
                    if outcome.cordoned {
                        ", cordoned"
                    } else {
                        ", already cordoned"
                    }
                ),
                Err(e) => tracing::error!(
                    node = %node,
                    "preparing node {node} failed: {e}; drained it anyway"
                ),
            }
            DrainOutcome::Drained(report)
        }
        Err(_) => DrainOutcome::Failed(format!(
            "the drain of node {node} overran its deadline by {} ms and was stopped",
            DRAIN_OVERRUN_GUARD.as_millis()
        )),
    }
}

/// How long past its deadline the daemon lets `Engine::drain` run before dropping it. Within
/// the release margin, so the lock still goes before logind's own timer fires.
const DRAIN_OVERRUN_GUARD: Duration = Duration::from_millis(500);
