//! The daemon's drain of its node within one deadline: prepare and drain at once, with a guard
//! that stops an engine drain overrunning its deadline, so the inhibitor cannot outlive the
//! budget.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::config::{Settings, ShutdownPolicy, ShutdownSettings};
use crate::daemon::logind::ShutdownKind;
use crate::daemon::status::Status;
use crate::engine::{Engine, Error as EngineError};
use crate::events::Reason as EventReason;
use crate::filters::Action;
use crate::node::PrepareOutcome;
use crate::plan::Plan;
use crate::report::Report;

/// How a drain ended.
pub(crate) enum DrainOutcome {
    /// The engine ran; the report says how far it got.
    Drained(Box<Report>),
    /// No drain ran (no client, or the prepare used the whole budget).
    Failed(String),
    /// `[shutdown]` said "cordon": the node was prepared (tainted, cordoned), nothing evicted.
    Cordoned,
}

/// The kind's name as the marker, the report and `[shutdown]` read it: logind's `type`, or
/// "unknown" where logind sent none.
pub(crate) fn kind_name(kind: Option<&ShutdownKind>) -> String {
    kind.map_or_else(|| "unknown".to_owned(), ShutdownKind::to_string)
}

/// The `[shutdown]` key and its policy for a kind. A logind that names no kind, or one
/// systemd does not document (`ShutdownKind::Other`), gets the `unknown` policy.
pub(crate) fn policy_for(
    shutdown: &ShutdownSettings,
    kind: Option<&ShutdownKind>,
) -> (&'static str, ShutdownPolicy) {
    match kind {
        Some(ShutdownKind::Reboot) => ("reboot", shutdown.reboot),
        Some(ShutdownKind::PowerOff) => ("poweroff", shutdown.poweroff),
        Some(ShutdownKind::Halt) => ("halt", shutdown.halt),
        Some(ShutdownKind::Kexec) => ("kexec", shutdown.kexec),
        Some(ShutdownKind::SoftReboot) => ("soft_reboot", shutdown.soft_reboot),
        Some(ShutdownKind::Other(_)) | None => ("unknown", shutdown.unknown),
    }
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
    kind: String,
    deadline: Instant,
    unguarded: Option<String>,
) -> DrainOutcome {
    let node = settings.node_name.clone();
    let engine = match Engine::new(settings) {
        Ok(engine) => engine.for_shutdown_kind(&kind),
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
    let work = async { tokio::join!(engine.prepare_and_drain(&why, deadline, on_plan), event).0 };
    match tokio::time::timeout_at(deadline + DRAIN_OVERRUN_GUARD, work).await {
        Ok((prepared, report)) => {
            if let Err(e) = log_prepared(&node, &prepared) {
                tracing::error!(node = %node, "preparing node {node} failed: {e}; drained it anyway");
            }
            DrainOutcome::Drained(Box::new(report))
        }
        Err(_) => DrainOutcome::Failed(format!(
            "the drain of node {node} overran its deadline by {} ms and was stopped",
            DRAIN_OVERRUN_GUARD.as_millis()
        )),
    }
}

/// `[shutdown]` policy "cordon": the prepare alone (marker with the kind, taint, cordon), by
/// `deadline`, and a `DrainSkipped` Event saying why nothing is evicted (posted beside, not
/// awaited).
#[tracing::instrument(skip_all)]
pub(crate) async fn cordon_node(
    settings: Arc<Settings>,
    why: String,
    kind: String,
    key: &'static str,
    deadline: Instant,
) -> DrainOutcome {
    let node = settings.node_name.clone();
    let engine = match Engine::new(settings.clone()) {
        Ok(engine) => engine.for_shutdown_kind(&kind),
        Err(e) => return DrainOutcome::Failed(e.to_string()),
    };
    let prepared = tokio::time::timeout_at(
        deadline + DRAIN_OVERRUN_GUARD,
        engine.prepare_by(&why, deadline),
    )
    .await;
    // The Event in its own task: the inhibitor is not held for it.
    let message = format!(
        "the {kind} of the host: [shutdown] {key} = \"cordon\": tainted and cordoned node \
         {node}, evicting no pods"
    );
    tokio::spawn(post_event(settings, EventReason::DrainSkipped, message));
    match prepared {
        Ok(prepared) => match log_prepared(&node, &prepared) {
            Ok(()) => DrainOutcome::Cordoned,
            Err(e) => DrainOutcome::Failed(format!("preparing node {node} failed: {e}")),
        },
        Err(_) => DrainOutcome::Failed(format!(
            "the prepare of node {node} overran its deadline by {} ms and was stopped",
            DRAIN_OVERRUN_GUARD.as_millis()
        )),
    }
}

/// `[shutdown]` policy "none": a `DrainSkipped` Event, bounded by the request timeout; posted
/// after the inhibitor is released.
pub(crate) async fn post_skipped(settings: Arc<Settings>, kind: String, key: &'static str) {
    let message = format!(
        "the {kind} of the host: [shutdown] {key} = \"none\": left node {} as it is and \
         released the inhibitor at once",
        settings.node_name
    );
    post_event(settings, EventReason::DrainSkipped, message).await;
}

/// One Node Event, bounded by the request timeout; a failure is only logged (by the engine).
pub(crate) async fn post_event(settings: Arc<Settings>, reason: EventReason, message: String) {
    let within = settings.request_timeout;
    let Ok(engine) = Engine::new(settings) else {
        return;
    };
    let _ = tokio::time::timeout(within, engine.event(reason, &message)).await;
}

/// Logs what the prepare changed; the error when it failed.
fn log_prepared<'e>(
    node: &str,
    prepared: &'e Result<PrepareOutcome, EngineError>,
) -> Result<(), &'e EngineError> {
    let outcome = prepared.as_ref()?;
    tracing::info!(
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
    );
    Ok(())
}

/// How long past its deadline the daemon lets `Engine::drain` run before dropping it. Within
/// the release margin, so the lock still goes before logind's own timer fires.
pub(crate) const DRAIN_OVERRUN_GUARD: Duration = Duration::from_millis(500);
