//! The loop's side of the reboots the node asks for (`daemon::reboot`): the follower's verdict
//! turned into the table's `Reboot` events, and the daemon's own reboot, started and stopped as
//! the table's effects say (`StartReboot`, `AbortReboot`, `RebootLater`), its end the
//! `RebootEnded` event.
//!
//! The reboot is what `kube-shutdown-drain reboot` does, inside the daemon: a drain slot (with
//! `[fleet] slots`, waited for as long as it takes), the drain within `[drain] timeout`, the
//! holds judged again (they may have changed during the drain: a hold set, a window closed),
//! then logind's `Reboot`. logind's announcement then starts the usual drain of its window,
//! which finds the node drained. A drain that did not complete reboots nothing: the table
//! restores the node and the follower tries again after a pause.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::Daemon;
use super::agent::{Agent, SlotWait};
use crate::daemon::access::Access;
use crate::daemon::phase::{Ask, HoldsSeen, RebootEnd, Seen, Setback};
use crate::daemon::reboot::{self as follower, Look, OWN_REBOOT_WHY};
use crate::engine::Engine;
use crate::events::Reason as EventReason;
use crate::fleet::slots::Taken;
use crate::forecast::Forecast;
use crate::host::logind::Logind;
use crate::node::conditions::{Condition, Type as ConditionType};
use crate::reboot::holds_read::Weighed;
use crate::reboot::need::Need;
use crate::reboot::window::Windows;
use crate::shutdown_kind::ShutdownKind;

/// How long one wait for a drain slot lasts before it is said again and renewed.
const SLOT_WAIT: Duration = Duration::from_secs(600);

/// The reboots as the loop holds them: the followers' channels and the running reboot. What
/// they mean is the table's (`daemon::phase::verdict`).
pub(crate) struct Reboot {
    enabled: bool,
    /// What the followers saw, for the table.
    pub(super) seen: mpsc::Receiver<Seen>,
    seen_tx: mpsc::Sender<Seen>,
    /// How the table wants the holds looked at, for the looker.
    looks: watch::Sender<Look>,
    /// The daemon's own reboot while it runs: its end says whether logind was asked.
    pub(super) task: Option<JoinHandle<Ended>>,
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
            task: None,
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
        let work = reboot(
            self.access.clone(),
            self.reboot.logind.subscribe(),
            self.reboot.slot_wait.clone(),
            by_agent,
            self.watches.forecast.subscribe(),
        );
        self.reboot.task = Some(tokio::spawn(work));
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
        if let Some(task) = self.reboot.task.take() {
            task.abort();
        }
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

/// How the daemon's own reboot task ended: its end, and when it took its drain slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Ended {
    pub(super) end: RebootEnd,
    slot_since: Option<Instant>,
}

impl Ended {
    fn gave_up(setback: Setback, slot_since: Option<Instant>) -> Ended {
        Ended {
            end: RebootEnd::GaveUp(setback),
            slot_since,
        }
    }
}

/// The end of the running reboot, once it ends. Never while none runs.
pub(super) async fn ended(task: &mut Option<JoinHandle<Ended>>) -> Ended {
    let Some(running) = task else {
        return std::future::pending().await;
    };
    let ended = match running.await {
        Ok(ended) => ended,
        Err(e) => {
            tracing::warn!("the reboot task ended: {e}");
            Ended::gave_up(Setback::Failed, None)
        }
    };
    *task = None;
    ended
}

/// The daemon's own reboot: a slot, the holds again, the drain, the holds once more, logind's
/// `Reboot`. Whether logind was asked, or why not; every way it gives up is said, naming the
/// node, and the table then restores the node (the slot goes back with the restore).
///
/// The update agent's reboot (`by_agent`) ends drained instead: the agent is answered 200 and
/// reboots through systemd itself. `slot_wait` is true while it waits for a slot. Without logind
/// nothing starts: no reboot could be asked for, seen or held for the drain.
async fn reboot(
    access: Access,
    logind: watch::Receiver<Option<Logind>>,
    slot_wait: SlotWait,
    by_agent: bool,
    forecast: watch::Receiver<Option<Arc<Forecast>>>,
) -> Ended {
    let settings = access.settings.clone();
    let node = settings.node_name.clone();
    if logind.borrow().is_none() {
        tracing::warn!("not rebooting node {node}: logind is not reachable now");
        return Ended::gave_up(Setback::Failed, None);
    }
    let Some((engine, slot_since)) = engine_with_slot(&access, &slot_wait).await else {
        return Ended::gave_up(Setback::Failed, None);
    };
    let gave_up = |setback| Ended::gave_up(setback, slot_since);
    let windows = Windows::of(&settings);
    // The wait for the slot may have outlasted a window or met a hold.
    // The forecast and the drain's estimated length weigh before the drain, not after it.
    let last = forecast.borrow().clone();
    let before = Weighed {
        forecast: last.as_deref(),
        drain_to_come: true,
    };
    if !clear(&access, &windows, before, "before its drain").await {
        return gave_up(Setback::Held);
    }
    let deadline = Instant::now() + settings.drain.timeout;
    let (prepared, report) = engine
        .prepare_and_drain(OWN_REBOOT_WHY, deadline, |_| {})
        .await;
    if let Err(e) = prepared {
        tracing::warn!("not rebooting node {node}: its prepare failed: {e}");
        return gave_up(Setback::Failed);
    }
    if !report.complete {
        tracing::warn!(
            "not rebooting node {node}: its drain did not complete within {}; the node is \
             restored\n{}",
            crate::time_limit::seconds(settings.drain.timeout),
            report.to_text()
        );
        return gave_up(Setback::DrainIncomplete);
    }
    tracing::info!("node {node} drained for its reboot\n{}", report.to_text());
    // A hold set, or a window closed, during the drain: no reboot now.
    if !clear(&access, &windows, Weighed::default(), "after its drain").await {
        return gave_up(Setback::Held);
    }
    let asked = Ended {
        end: RebootEnd::Asked { slot_since },
        slot_since,
    };
    if by_agent {
        tracing::info!(
            node = %node,
            "node {node} is drained for the update agent's reboot: its next FleetLock \
             pre-reboot is answered 200"
        );
        return asked;
    }
    let Some(logind) = logind.borrow().clone() else {
        tracing::warn!("not rebooting node {node}: logind is not reachable now");
        return gave_up(Setback::Failed);
    };
    if ask_logind(&node, &logind).await {
        asked
    } else {
        gave_up(Setback::Failed)
    }
}

/// The reboot's last step: another program's block lock on shutdowns is honoured (logind before
/// 257 lets root past it), then logind is asked. Whether it was asked.
async fn ask_logind(node: &str, logind: &Logind) -> bool {
    match logind.list_inhibitors().await {
        Ok(locks) => {
            let theirs = crate::host::logind::foreign_blocks(&locks);
            if !theirs.is_empty() {
                tracing::warn!(
                    "not rebooting node {node}: another program blocks shutdowns ({}); the node \
                     is restored",
                    theirs.join("; ")
                );
                return false;
            }
        }
        Err(e) => tracing::warn!(
            "cannot list logind's inhibitors before the reboot of node {node} ({e}); asking \
             for it anyway (logind itself refuses what a block lock binds)"
        ),
    }
    // Said before the call: logind's announcement may stop this task before the call returns.
    tracing::info!(node = %node, "asking logind to reboot node {node}");
    match logind.shut_down(false).await {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!("not rebooting node {node}: {e}");
            false
        }
    }
}

/// The reboot's engine, holding a drain slot with `[fleet] slots` (waited for as long as it
/// takes, `slot_wait` true meanwhile), and when it took it; `None` when there is no engine or
/// no slot (said).
async fn engine_with_slot(
    access: &Access,
    slot_wait: &SlotWait,
) -> Option<(Engine, Option<Instant>)> {
    let engine = match access.engine().await {
        Ok(engine) => engine.for_shutdown_kind(ShutdownKind::Reboot),
        Err(e) => {
            let node = &access.settings.node_name;
            tracing::warn!("cannot reboot node {node}: {e}");
            return None;
        }
    };
    if access.settings.fleet.slots == 0 {
        return Some((engine, None));
    }
    // Back to false however the wait ends, an abort of the task included.
    let _waiting = WaitFlag::raise(slot_wait);
    let engine = take_slot(engine).await?;
    Some((engine, Some(Instant::now())))
}

/// Waits for a drain slot as long as it takes, said once per wait; `None` when the slots cannot
/// be read (said).
async fn take_slot(engine: Engine) -> Option<Engine> {
    let node = engine.settings().node_name.clone();
    let started = Instant::now();
    loop {
        match engine.wait_for_slot(Instant::now() + SLOT_WAIT).await {
            Ok(Taken::Slot(name) | Taken::Kept(name)) => {
                tracing::info!(node = %node, "node {node} holds drain slot {name} for its reboot");
                return Some(engine.holding_slot(name, started.elapsed()));
            }
            Ok(Taken::Full(holders)) => tracing::info!(
                node = %node,
                "the reboot of node {node} waits for a drain slot: held by {}",
                crate::text::escaped(&holders.join(", "))
            ),
            Err(e) => {
                tracing::warn!("not rebooting node {node}: cannot take a drain slot: {e}");
                return None;
            }
        }
    }
}

/// Whether nothing holds the node now (`when`: where in the reboot); what holds it is said.
async fn clear(access: &Access, windows: &Windows, weighed: Weighed<'_>, when: &str) -> bool {
    let holds = follower::judge(access, windows, weighed).await;
    if !holds.may_go() {
        tracing::warn!(
            node = %holds.node,
            "not rebooting node {} now: {holds} (looked at {when})",
            holds.node
        );
    }
    holds.may_go()
}

/// True on its watch while it lives.
struct WaitFlag<'a>(&'a SlotWait);

impl<'a> WaitFlag<'a> {
    fn raise(flag: &'a SlotWait) -> WaitFlag<'a> {
        flag.send_replace(true);
        WaitFlag(flag)
    }
}

impl Drop for WaitFlag<'_> {
    fn drop(&mut self) {
        self.0.send_replace(false);
    }
}
