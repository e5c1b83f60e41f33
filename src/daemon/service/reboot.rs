//! The loop's side of the reboots the node asks for: what the followers (`daemon::reboot`) saw,
//! for the table (`Seen`), the looker told how to look, the effects of the verdict said and
//! posted, and the node's own reboot, started and stopped as the table's effects say
//! (`StartReboot`, `AbortReboot`) as the daemon's one work, its end the `RebootEnded` event.
//!
//! The reboot is the one procedure of a reboot (`reboot::procedure`), as `kube-shutdown-drain
//! reboot` runs it: a drain slot (with `[fleet] slots`, waited for as long as it takes), the
//! holds, the drain within `[drain] timeout`, the holds judged again (a hold set, a window
//! closed during the drain), another program's block lock, then logind's `Reboot`. logind's
//! announcement then starts the usual drain of its window, which finds the node drained. A
//! drain that did not complete reboots nothing: the table restores the node and says go again
//! after a pause.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::Daemon;
use super::agent::{Agent, SlotWait};
use super::work::{Job, Kind};
use crate::daemon::access::Access;
use crate::daemon::phase::{Ask, HoldsSeen, RebootEnd, Seen, Setback};
use crate::daemon::reboot::{self as follower, Look, OWN_REBOOT_WHY};
use crate::engine::Engine;
use crate::events::Reason as EventReason;
use crate::forecast::Forecast;
use crate::host::logind::Logind;
use crate::node::conditions::{Condition, Type as ConditionType};
use crate::reboot::need::Need;
use crate::reboot::procedure::{
    self, BlockLocks, GaveUp, HoldsPlan, LogindAt, Outcome, Plan, SlotPlan, Step,
};
use crate::reboot::window::Windows;
use crate::shutdown_kind::ShutdownKind;

/// The reboots as the loop holds them: the followers' channels and the running reboot. What
/// they mean is the table's (`daemon::phase::verdict`).
pub(crate) struct Reboot {
    enabled: bool,
    /// What the followers saw, for the table.
    pub(super) seen: mpsc::Receiver<Seen>,
    seen_tx: mpsc::Sender<Seen>,
    /// How the table wants the holds looked at, for the looker.
    looks: watch::Sender<Look>,
    /// logind as the loop is connected to it now (none while the bus is away): the reboot's
    /// last step asks the connection of that moment, not the one of its start.
    pub(super) logind: watch::Sender<Option<Logind>>,
    /// The update agent's FleetLock requests (`[fleetlock]`).
    pub(super) agent: Option<Agent>,
    /// True while the running reboot waits for a drain slot.
    pub(super) slot_wait: SlotWait,
}

impl Reboot {
    /// `enabled`: a `[reboot]` trigger is set; `agent`: the FleetLock server's side, with
    /// `[fleetlock]` (which enables the reboots too).
    pub(crate) fn new(enabled: bool, agent: Option<Agent>) -> Reboot {
        let (seen_tx, seen) = mpsc::channel(16);
        Reboot {
            enabled: enabled || agent.is_some(),
            seen,
            seen_tx,
            looks: watch::Sender::new(Look::default()),
            logind: watch::Sender::new(None),
            agent,
            slot_wait: SlotWait::new(false),
        }
    }

    pub(super) fn enabled(&self) -> bool {
        self.enabled
    }

    /// `LookAtHolds` / `StopLooking`: tells the looker.
    pub(super) fn look(&self, wanted: bool, drain_to_come: bool) {
        self.looks.send_modify(|look| {
            look.wanted = wanted;
            look.drain_to_come = drain_to_come;
            look.asked += 1;
        });
    }
}

/// What a follower saw next; never once none follows.
pub(super) async fn next_seen(seen: &mut mpsc::Receiver<Seen>) -> Seen {
    match seen.recv().await {
        Some(seen) => seen,
        None => std::future::pending().await,
    }
}

impl Daemon {
    /// Starts the followers as tasks beside the loop (with a `[reboot]` trigger or
    /// `[fleetlock]`): the triggers' (with a trigger) and the looker at the holds (run in the
    /// gate's task, `spawn_gate`).
    pub(super) fn spawn_reboot_follower(&mut self, bus_address: &str) {
        if !self.reboot.enabled {
            return;
        }
        tracing::info!(
            "node {} reboots when it needs to ([reboot]), as its windows and holds allow",
            self.access.settings.node_name
        );
        if self.access.settings.reboot.enabled() {
            tokio::spawn(follower::follow_triggers(
                self.access.settings.reboot.clone(),
                bus_address.to_owned(),
                self.reboot.seen_tx.clone(),
            ));
        }
    }

    /// The looker at the holds, to run in the cluster's task beside the gate's follower;
    /// nothing without reboots.
    pub(super) fn looker(&self) -> Option<impl std::future::Future<Output = ()> + use<>> {
        self.reboot.enabled.then(|| {
            follower::look(
                self.access.clone(),
                self.reboot.looks.subscribe(),
                self.watches.forecast.subscribe(),
                self.reboot.seen_tx.clone(),
            )
        })
    }

    /// `StartReboot`: a running restore stops, the reboot runs as a task beside the loop; the
    /// table said whose it is.
    pub(super) fn start_reboot(&mut self) {
        let node = self.access.settings.node_name.clone();
        let why = self.state.reboots.verdict(Instant::now()).why;
        let by_agent = self.state.reboots.by_agent();
        let last = if by_agent {
            "then the update agent's reboot (FleetLock pre-reboot answered 200)"
        } else {
            "then logind's Reboot"
        };
        self.abort_restore("the node's reboot starts");
        self.out.status.set(format!(
            "rebooting node {node}: {why}; a drain slot, the drain, {last}"
        ));
        tracing::info!(node = %node, "rebooting node {node} ({why}): draining it first");
        tokio::spawn(crate::engine::Engine::post_event(
            self.access.settings.clone(),
            crate::events::Reason::RebootStarted,
            format!("rebooting node {node} ({why}): a drain slot, the drain, {last}"),
        ));
        self.spawn_work(Job::Reboot(Box::pin(reboot(
            self.access.clone(),
            self.reboot.logind.subscribe(),
            self.reboot.slot_wait.clone(),
            by_agent,
            self.watches.forecast.subscribe(),
        ))));
    }

    /// What the status line adds while a reboot is needed and waits: "; reboot needed, waits:
    /// REASONS". Nothing otherwise.
    pub(super) fn reboot_status(&self) -> String {
        let verdict = self.state.reboots.verdict(Instant::now());
        match verdict.ask {
            Ask::Waits if self.reboot.enabled => {
                format!("; reboot needed, waits: {}", verdict.why)
            }
            _ => String::new(),
        }
    }

    /// `AbortReboot`: silent, as what stops it says itself (the need gone, logind's
    /// announcement, the stop); an abort after its call to logind loses nothing.
    pub(super) fn abort_reboot(&mut self) {
        self.tasks.work.abort(Kind::Reboot);
    }

    /// `SayNeed`: the journal's line of the need that counts now.
    pub(super) fn say_need(&self, need: &Need) {
        let node = &self.access.settings.node_name;
        match need {
            Need::Needed(why) => tracing::info!(node = %node, "node {node} needs a reboot: {why}"),
            Need::NotNeeded(why) => {
                tracing::info!(node = %node, "node {node} needs no reboot: {why}")
            }
            Need::Unknown(why) => tracing::warn!(
                node = %node,
                "cannot tell whether node {node} needs a reboot ({why}); no reboot starts until a \
                 trigger says so"
            ),
        }
    }

    /// `PostRequired`: `RebootRequired`, and `MaintenancePlanned` true.
    pub(super) fn post_required(&self, need: &Need) {
        let message = format!("node {} {need}", self.access.settings.node_name);
        self.post(EventReason::RebootRequired, message.clone());
        self.planned(true, message);
    }

    /// `NotPlanned`: `MaintenancePlanned` false.
    pub(super) fn not_planned(&self, need: &Need) {
        self.planned(
            false,
            format!("node {} {need}", self.access.settings.node_name),
        );
    }

    /// `PostWaiting`: `RebootWaiting` with what holds the reboot.
    pub(super) fn post_waiting(&self, text: String) {
        self.post(EventReason::RebootWaiting, text);
    }

    /// `SayHolds`: the journal's line of what holds the reboot (`why`: the need's words).
    pub(super) fn say_holds(&self, holds: &HoldsSeen, why: &str) {
        let node = &self.access.settings.node_name;
        if holds.keys.is_empty() {
            tracing::info!(node = %node, "nothing holds the reboot of node {node} ({why}): starting it");
        } else {
            let keys: Vec<&str> = holds.keys.iter().map(|k| k.as_str()).collect();
            tracing::info!(
                node = %node,
                "the reboot of node {node} waits ({}): {}",
                keys.join(", "),
                holds.text
            );
        }
    }

    /// One Event on the Node, off the loop's way (a failure is only logged).
    fn post(&self, reason: EventReason, message: String) {
        tokio::spawn(Engine::post_event(
            self.access.settings.clone(),
            reason,
            message,
        ));
    }

    /// With `[node] lifecycle_conditions`, the Node condition `MaintenancePlanned` (KEP-5683):
    /// true while a reboot is needed, false once not; off the loop's way (a failure is only
    /// logged).
    fn planned(&self, status: bool, message: String) {
        let settings = self.access.settings.clone();
        if !settings.lifecycle_conditions {
            return;
        }
        tokio::spawn(async move {
            let Ok(engine) = Engine::new(settings.clone()) else {
                return;
            };
            let condition = Condition {
                kind: ConditionType::MaintenancePlanned,
                status,
                reason: if status {
                    "RebootNeeded"
                } else {
                    "RebootNotNeeded"
                },
                message,
            };
            let by = Instant::now() + settings.request_timeout;
            engine.set_conditions(&[condition], by).await;
        });
    }

    /// `RebootLater`: says the pause the table set before the next try, and what ended the last.
    pub(super) fn say_later(&self, after: Setback, pause: Duration) {
        tracing::info!(
            node = %self.access.settings.node_name,
            "node {} still needs a reboot ({}); trying again in {}",
            self.access.settings.node_name,
            after.says(),
            crate::time_limit::seconds(pause)
        );
    }
}

/// The daemon's own reboot, by the one procedure of a reboot (`reboot::procedure`): a slot
/// (waited for as long as it takes, `slot_wait` true meanwhile), the holds, the drain, the holds
/// once more, another program's block lock, logind's `Reboot`. Whether logind was asked, or what
/// ended it; every way it gives up is said, naming the node, and the table then restores the
/// node (the slot goes back with the restore).
///
/// The update agent's reboot (`by_agent`) ends drained instead: the agent is answered 200 and
/// reboots through systemd itself. Without logind nothing starts: no reboot could be asked for,
/// seen or held for the drain.
async fn reboot(
    access: Access,
    logind: watch::Receiver<Option<Logind>>,
    slot_wait: SlotWait,
    by_agent: bool,
    forecast: watch::Receiver<Option<Arc<Forecast>>>,
) -> RebootEnd {
    let settings = access.settings.clone();
    let node = settings.node_name.clone();
    let engine = match access.engine().await {
        Ok(engine) => engine.for_shutdown_kind(ShutdownKind::Reboot),
        Err(e) => {
            tracing::warn!("cannot reboot node {node}: {e}");
            return RebootEnd::GaveUp(Setback::Failed);
        }
    };
    let windows = Windows::of(&settings);
    let last = forecast.borrow().clone();
    let plan = Plan {
        why: OWN_REBOOT_WHY,
        slot: match settings.fleet.slots {
            0 => SlotPlan::None,
            _ => SlotPlan::Wait(None),
        },
        slot_wait: Some(&slot_wait),
        drain_timeout: settings.drain.timeout,
        holds: Some(HoldsPlan {
            windows: &windows,
            forecast: last.as_deref(),
        }),
        force: false,
        hand_over: by_agent,
        poweroff: false,
        block_locks: BlockLocks::RefuseForeign,
        logind: LogindAt::Watch(&logind),
    };
    let mut say = |step: Step<'_>| say(&node, settings.drain.timeout, step);
    match procedure::run(engine, plan, &mut say).await {
        Outcome::Asked { slot_since } => RebootEnd::Asked { slot_since },
        Outcome::HandedOver { slot_since } => {
            tracing::info!(
                node = %node,
                "node {node} is drained for the update agent's reboot: its next FleetLock \
                 pre-reboot is answered 200"
            );
            RebootEnd::Asked { slot_since }
        }
        Outcome::GaveUp { why, .. } => RebootEnd::GaveUp(gave_up(&node, why)),
    }
}

/// A step of the node's own reboot, in the journal.
fn say(node: &str, timeout: Duration, step: Step<'_>) {
    match step {
        Step::SlotHeld(name) => {
            tracing::info!(node = %node, "node {node} holds drain slot {name} for its reboot")
        }
        Step::SlotStillFull(holders) => tracing::info!(
            node = %node,
            "the reboot of node {node} waits for a drain slot: held by {}",
            crate::text::escaped(&holders.join(", "))
        ),
        Step::HookPassed(run) => {
            tracing::info!(node = %node, "{run} for the reboot of node {node}")
        }
        Step::Drained(report) if report.complete => {
            tracing::info!("node {node} drained for its reboot\n{}", report.to_text())
        }
        Step::Drained(report) => tracing::warn!(
            "not rebooting node {node}: its drain did not complete within {}; the node is \
             restored\n{}",
            crate::time_limit::seconds(timeout),
            report.to_text()
        ),
        Step::AskingLogind => tracing::info!(node = %node, "asking logind to reboot node {node}"),
        Step::SlotWait(_) | Step::SlotNotWaited | Step::GateAsked(_) => {}
    }
}

/// What ended the node's own reboot, said, as the table's setback.
fn gave_up(node: &str, why: GaveUp) -> Setback {
    match why {
        GaveUp::Held { holds, when } => {
            tracing::warn!(
                node = %holds.node,
                "not rebooting node {} now: {holds} (looked at {when})",
                holds.node
            );
            Setback::Held
        }
        // Said with the drain's report.
        GaveUp::Incomplete(_) => Setback::DrainIncomplete,
        GaveUp::NoLogind(why) | GaveUp::Logind(why) => {
            tracing::warn!("not rebooting node {node}: {why}");
            Setback::Failed
        }
        GaveUp::Slots(e) => {
            tracing::warn!("not rebooting node {node}: cannot take a drain slot: {e}");
            Setback::Failed
        }
        GaveUp::Prepare(e) => {
            tracing::warn!("not rebooting node {node}: its prepare failed: {e}");
            Setback::Failed
        }
        GaveUp::Overran(why) => {
            tracing::warn!("not rebooting node {node}: {why}");
            Setback::Failed
        }
        GaveUp::ForeignBlock(theirs) => {
            tracing::warn!(
                "not rebooting node {node}: another program blocks shutdowns ({}); the node \
                 is restored",
                theirs.join("; ")
            );
            Setback::Failed
        }
        // The daemon's reboots wait for their slot as long as it takes.
        GaveUp::NoSlot(_) => Setback::Failed,
    }
}
