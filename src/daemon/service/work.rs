//! A shutdown's work within one deadline: prepare and drain at once, or the prepare alone
//! (`[shutdown]` policy "cordon"), each bounded by the deadline plus the release guard, so that a
//! fault in the engine ends the work by the time the lock's guard closes the lock anyway.

use std::sync::Arc;

use tokio::time::Instant;

use crate::daemon::access::Access;
use crate::daemon::outcome::DrainOutcome;
use crate::daemon::status::Status;
use crate::drain::GraceTo;
use crate::engine::Engine;
use crate::events::Reason as EventReason;
use crate::policy::filters::Action;
use crate::policy::plan::Plan;
use crate::shutdown_kind::ShutdownKind;
use crate::time_limit::RELEASE_GUARD;

/// When a shutdown's drain must be over, and where its evictions' grace periods end.
pub(crate) struct Ends {
    pub deadline: Instant,
    /// `None`: at `deadline` (a scheduled drain's).
    pub grace_to: Option<GraceTo>,
}

impl Ends {
    /// Both at `deadline`.
    pub fn at(deadline: Instant) -> Ends {
        Ends {
            deadline,
            grace_to: None,
        }
    }
}

/// Prepare and drain, both by `ends.deadline` (the drain lists while the prepare cordons, and
/// evicts once it is over), grace periods fitted to `ends.grace_to`. Never outlives the deadline
/// by more than [`RELEASE_GUARD`].
/// `why`: the reason the marker and the Events give ("reboot of the host", "reboot scheduled
/// for TIME"). `unguarded`: no inhibitor is held; the message goes into a Warning Event on the
/// Node beside the prepare.
// The node field comes from the spans of the prepare and the drain inside; the shutdown kind
// from the caller's `shutdown` span.
#[tracing::instrument(skip_all)]
pub(crate) async fn drain_node(
    access: Access,
    status: Status,
    kind: ShutdownKind,
    ends: Ends,
    why: String,
    unguarded: Option<String>,
    warm: Option<Arc<Engine>>,
) -> DrainOutcome {
    let Ends { deadline, grace_to } = ends;
    let node = access.settings.node_name.clone();
    let engine = match engine_for(&access, kind, warm) {
        Ok(engine) => engine,
        Err(e) => return DrainOutcome::Failed(e.to_string()),
    };
    // The status line comes from the drain's own plan (no second list of the pods); the Event is
    // sent beside the prepare: neither costs the drain time.
    let on_plan = |plan: &Plan| {
        status.set(format!(
            "draining {} pods from node {node} (waiting for {} more, {} left alone)",
            plan.count(Action::Evict),
            plan.count(Action::Wait),
            plan.count(Action::Skip)
        ));
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
    let work = async {
        let drain = engine.prepare_and_drain_fitting(&why, deadline, grace_to, on_plan);
        tokio::join!(drain, event).0
    };
    match tokio::time::timeout_at(deadline + RELEASE_GUARD, work).await {
        Ok((prepared, report)) => {
            // What the prepare changed is logged where it lands (`NodeOps::prepare`).
            if let Err(e) = &prepared {
                tracing::error!(node = %node, "preparing node {node} failed: {e}; drained it anyway");
            }
            DrainOutcome::Drained(Box::new(report))
        }
        Err(_) => DrainOutcome::Failed(format!(
            "the drain of node {node} overran its deadline by {} ms and was stopped",
            RELEASE_GUARD.as_millis()
        )),
    }
}

/// The engine for a shutdown's work: `warm` when it is for `kind`, else a new one.
pub(crate) fn engine_for(
    access: &Access,
    kind: ShutdownKind,
    warm: Option<Arc<Engine>>,
) -> Result<Arc<Engine>, crate::engine::Error> {
    match warm {
        Some(engine) if engine.shutdown_kind() == Some(kind) => Ok(engine),
        _ => Ok(Arc::new(access.engine()?.for_shutdown_kind(kind))),
    }
}

/// `[shutdown]` policy "cordon": the prepare alone (marker with the kind, taint, cordon), by
/// `deadline`, and a `DrainSkipped` Event saying why nothing is evicted (posted beside, not
/// awaited). `why` as for [`drain_node`].
#[tracing::instrument(skip_all)]
pub(crate) async fn cordon_node(
    access: Access,
    kind: ShutdownKind,
    deadline: Instant,
    why: String,
) -> DrainOutcome {
    let settings = access.settings.clone();
    let node = settings.node_name.clone();
    let key = kind.config_key();
    tracing::info!(
        "[shutdown] {key} = \"cordon\": tainting and cordoning node {node}, evicting no pods"
    );
    let engine = match access.engine() {
        Ok(engine) => engine.for_shutdown_kind(kind),
        Err(e) => return DrainOutcome::Failed(e.to_string()),
    };
    let prepared =
        tokio::time::timeout_at(deadline + RELEASE_GUARD, engine.prepare_by(&why, deadline)).await;
    // The Event in its own task: the inhibitor is not held for it.
    let message = format!(
        "{why}: [shutdown] {key} = \"cordon\": tainted and cordoned node {node}, evicting no pods"
    );
    tokio::spawn(Engine::post_event(
        settings,
        EventReason::DrainSkipped,
        message,
    ));
    match prepared {
        Ok(Ok(_)) => DrainOutcome::Cordoned,
        Ok(Err(e)) => DrainOutcome::Failed(format!("preparing node {node} failed: {e}")),
        Err(_) => DrainOutcome::Failed(format!(
            "the prepare of node {node} overran its deadline by {} ms and was stopped",
            RELEASE_GUARD.as_millis()
        )),
    }
}
