//! A shutdown's work as one value ([`Work`]: which shutdown, which stage, what `[shutdown]` says,
//! by when) and the one place it is spawned and its end awaited ([`Slot`]): prepare and drain at
//! once, or the prepare alone (`[shutdown]` policy "cordon"), each bounded by the deadline plus
//! the release guard, so that a fault in the engine ends the work by the time the lock's guard
//! closes the lock anyway.

use std::sync::Arc;

use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::Instrument;

use super::Daemon;
use crate::config::ShutdownPolicy;
use crate::daemon::access::Access;
use crate::daemon::outcome::{DrainOutcome, Finished};
use crate::daemon::phase::{Event, RebootEnd, Setback};
use crate::daemon::status::Status;
use crate::drain::GraceTo;
use crate::engine::Engine;
use crate::events::Reason as EventReason;
use crate::policy::filters::Action;
use crate::policy::plan::Plan;
use crate::shutdown_kind::ShutdownKind;
use crate::time_limit::RELEASE_GUARD;

/// Which part of a shutdown a work is for: where its deadline comes from and what its drain
/// carries besides.
pub(crate) enum Stage {
    /// logind's window (`StartDrain`): the deadline is what is left of the budget. `unguarded`:
    /// no lock of ours holds logind (the Warning Event's message); `grace_to`: where the
    /// evictions' grace periods end (`None`: at the deadline).
    Window {
        unguarded: Option<String>,
        grace_to: Option<GraceTo>,
    },
    /// Ahead of a scheduled shutdown (`StartEarly`), by its scheduled time.
    Early,
    /// The unit's stop phase (`StartStopStage`): the drain's last time, where its grace periods
    /// end too.
    StopPhase { grace_to: GraceTo },
}

/// One shutdown's work: the shutdown, the stage, what `[shutdown]` says for it, and its end.
pub(crate) struct Work {
    pub kind: ShutdownKind,
    pub stage: Stage,
    pub policy: ShutdownPolicy,
    /// When the work started (its outcome says how long it took from then).
    pub started: Instant,
    pub deadline: Instant,
    /// The reason the marker and the Events give ("reboot of the host", "reboot scheduled for
    /// TIME").
    pub reason: String,
    /// An engine already connected for this shutdown (the early drain's), used if it is for
    /// `kind`.
    pub warm: Option<Arc<Engine>>,
    /// What ended the work before it could start (no time at all, or a budget already spent).
    pub ended_before: Option<DrainOutcome>,
}

impl Work {
    /// Does what `[shutdown]` says, by the deadline.
    async fn run(self, access: Access, status: Status) -> Finished {
        let Work {
            kind,
            stage,
            policy,
            started,
            deadline,
            reason,
            warm,
            ended_before,
        } = self;
        let outcome = match (ended_before, policy) {
            (_, ShutdownPolicy::None) => DrainOutcome::LeftAsIs,
            (Some(outcome), _) => outcome,
            (None, ShutdownPolicy::Cordon) => cordon_node(access, kind, deadline, reason).await,
            (None, ShutdownPolicy::Drain) => {
                let (unguarded, grace_to) = match stage {
                    Stage::Window {
                        unguarded,
                        grace_to,
                    } => (unguarded, grace_to),
                    Stage::Early => (None, None),
                    Stage::StopPhase { grace_to } => (None, Some(grace_to)),
                };
                let ends = Ends { deadline, grace_to };
                drain_node(access, status, kind, ends, reason, unguarded, warm).await
            }
        };
        Finished {
            outcome,
            took: started.elapsed(),
        }
    }
}

/// What runs as the daemon's one work: a shutdown's ([`Work`]), or the node's own reboot (the
/// one procedure of a reboot, `service/reboot.rs`: its slot, its drain, logind).
pub(crate) enum Job {
    Shutdown(Work),
    Reboot(futures::future::BoxFuture<'static, RebootEnd>),
}

/// How a work ended.
pub(super) enum Done {
    Shutdown(Finished),
    Reboot(RebootEnd),
}

/// The daemon's one work: none, running (and which), or a shutdown's over until its end is
/// recorded and said.
#[derive(Default)]
pub(super) enum Slot {
    #[default]
    Empty,
    Running(JoinHandle<Done>, Kind),
    Over(Finished),
}

/// Which work runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Kind {
    Shutdown,
    Reboot,
}

impl Slot {
    /// The running work's end, once it ends, as the table's event: a shutdown's (the slot then
    /// holds how it ended: `Ended`, whether it left pods to drain) or the reboot's
    /// (`RebootEnded`). Never while none runs.
    pub(super) async fn end(&mut self) -> Event {
        let Slot::Running(task, kind) = self else {
            return std::future::pending().await;
        };
        let kind = *kind;
        let done = match task.await {
            Ok(done) => done,
            Err(e) if kind == Kind::Reboot => {
                tracing::warn!("the reboot task ended: {e}");
                Done::Reboot(RebootEnd::GaveUp(Setback::Failed))
            }
            Err(e) => Done::Shutdown(Finished::failed(format!("the drain task ended: {e}"))),
        };
        match done {
            Done::Shutdown(finished) => {
                let left_work = finished.outcome.leaves_work();
                *self = Slot::Over(finished);
                Event::Ended { left_work }
            }
            Done::Reboot(end) => {
                *self = Slot::Empty;
                Event::RebootEnded(end)
            }
        }
    }

    /// Stops the running work of `kind`, and forgets a shutdown's that is over.
    pub(super) fn abort(&mut self, kind: Kind) {
        match std::mem::take(self) {
            Slot::Running(task, running) if running == kind => task.abort(),
            Slot::Over(_) if kind == Kind::Shutdown => {}
            other => *self = other,
        }
    }

    /// How the work ended, if it is over and not yet said.
    pub(super) fn over(&self) -> Option<&Finished> {
        match self {
            Slot::Over(finished) => Some(finished),
            _ => None,
        }
    }

    /// Takes how the work ended, to say it.
    pub(super) fn take_over(&mut self) -> Option<Finished> {
        match std::mem::take(self) {
            Slot::Over(finished) => Some(finished),
            other => {
                *self = other;
                None
            }
        }
    }
}

impl Daemon {
    /// The one place a work starts, as a task beside the loop, in a span named for what it is
    /// for: a shutdown's stage, or the node's own reboot.
    pub(super) fn spawn_work(&mut self, job: Job) {
        let (task, kind) = match job {
            Job::Shutdown(work) => {
                let kind = work.kind;
                let span = match work.stage {
                    Stage::Window { .. } => tracing::info_span!("shutdown", shutdown_kind = %kind),
                    Stage::Early => tracing::info_span!("scheduled", shutdown_kind = %kind),
                    Stage::StopPhase { .. } => {
                        tracing::info_span!("stop_phase", shutdown_kind = %kind)
                    }
                };
                let run = work.run(self.access.clone(), self.out.status.clone());
                let task = async move { Done::Shutdown(run.await) }.instrument(span);
                (tokio::spawn(task), Kind::Shutdown)
            }
            Job::Reboot(reboot) => {
                let span = tracing::info_span!("reboot", shutdown_kind = %ShutdownKind::Reboot);
                let task = async move { Done::Reboot(reboot.await) }.instrument(span);
                (tokio::spawn(task), Kind::Reboot)
            }
        };
        self.tasks.work = Slot::Running(task, kind);
    }
}

/// When a shutdown's drain must be over, and where its evictions' grace periods end.
struct Ends {
    deadline: Instant,
    /// `None`: at `deadline` (a scheduled drain's).
    grace_to: Option<GraceTo>,
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
async fn drain_node(
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
    let engine = match engine_for(&access, kind, warm).await {
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
pub(crate) async fn engine_for(
    access: &Access,
    kind: ShutdownKind,
    warm: Option<Arc<Engine>>,
) -> Result<Arc<Engine>, crate::engine::Error> {
    match warm {
        Some(engine) if engine.shutdown_kind() == Some(kind) => Ok(engine),
        _ => Ok(Arc::new(access.engine().await?.for_shutdown_kind(kind))),
    }
}

/// `[shutdown]` policy "cordon": the prepare alone (marker with the kind, taint, cordon), by
/// `deadline`, and a `DrainSkipped` Event saying why nothing is evicted (posted beside, not
/// awaited). `why` as for [`drain_node`].
#[tracing::instrument(skip_all)]
async fn cordon_node(
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
    let engine = match access.engine().await {
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
