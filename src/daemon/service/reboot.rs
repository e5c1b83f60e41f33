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
use super::agent::{Agent, SlotWait, handover_ends};
use super::scheduled::ANNOUNCE_WINDOW;
use crate::daemon::access::Access;
use crate::daemon::phase::{Ask, Event, RebootEnd, Setback};
use crate::daemon::reboot::{self as follower, OWN_REBOOT_WHY, Verdict};
use crate::engine::Engine;
use crate::fleet::slots::Taken;
use crate::forecast::Forecast;
use crate::host::logind::Logind;
use crate::reboot::fleetlock::Operation;
use crate::reboot::holds_read::Weighed;
use crate::reboot::window::Windows;
use crate::shutdown_kind::ShutdownKind;

/// How long one wait for a drain slot lasts before it is said again and renewed.
const SLOT_WAIT: Duration = Duration::from_secs(600);

/// The reboots as the loop holds them.
pub(crate) struct Reboot {
    enabled: bool,
    /// The follower's verdict.
    pub(super) verdict: watch::Receiver<Verdict>,
    verdict_tx: watch::Sender<Verdict>,
    /// The table's pause after a reboot that ended without one (`RebootLater`), and what ended
    /// it.
    not_before: watch::Sender<Option<(Instant, Setback)>>,
    /// The daemon's own reboot while it runs: its end says whether logind was asked.
    pub(super) task: Option<JoinHandle<Ended>>,
    /// logind as the loop is connected to it now (none while the bus is away): the reboot's
    /// last step asks the connection of that moment, not the one of its start.
    pub(super) logind: watch::Sender<Option<Logind>>,
    /// Reboots of ours that ended without one, in a row: each doubles the pause before the next.
    failures: u32,
    /// When the running reboot last asked logind, or was handed over to the update agent: the
    /// announcement is due within the window of a fired schedule, or by the hand-over's end
    /// ([`handover_ends`]).
    pub(super) asked_at: Option<Instant>,
    /// When the running reboot took its drain slot (none without `[fleet] slots`).
    pub(super) slot_since: Option<Instant>,
    /// The update agent's FleetLock requests (`[fleetlock]`).
    pub(super) agent: Option<Agent>,
    /// The follower's end of them, until the follower starts.
    agent_asks: Option<mpsc::UnboundedReceiver<Operation>>,
    /// The running reboot is the agent's: it ends drained and handed over.
    pub(super) by_agent: bool,
    /// True while the running reboot waits for a drain slot.
    pub(super) slot_wait: SlotWait,
    /// True while the phase is `Rebooting { asked: true }`: the node is drained for its reboot
    /// (logind asked, or handed over to the agent), and the follower no longer weighs a drain
    /// to come against the window. Set from the phase after every step.
    pub(super) drained: watch::Sender<bool>,
}

impl Reboot {
    /// `enabled`: a `[reboot]` trigger is set; `agent`: the FleetLock server's side, with
    /// `[fleetlock]` (which enables the reboots too).
    pub(crate) fn new(enabled: bool, agent: Option<super::agent::Started>) -> Reboot {
        let (agent, agent_asks) = agent.unzip();
        let (verdict_tx, verdict) = watch::channel(Verdict {
            ask: Ask::NotNeeded,
            why: "not looked at yet".into(),
            keys: Vec::new(),
            setback: None,
        });
        Reboot {
            verdict,
            verdict_tx,
            not_before: watch::Sender::new(None),
            task: None,
            logind: watch::Sender::new(None),
            failures: 0,
            asked_at: None,
            slot_since: None,
            enabled: enabled || agent.is_some(),
            agent,
            agent_asks,
            by_agent: false,
            slot_wait: SlotWait::new(false),
            drained: watch::Sender::new(false),
        }
    }

    pub(super) fn enabled(&self) -> bool {
        self.enabled
    }

    /// When logind's announcement of the running reboot is due: [`ANNOUNCE_WINDOW`] after the
    /// daemon asked logind; for the update agent's reboot, at the end of its hand-over
    /// ([`handover_ends`], from the end of its drain; `hold_max`: `[fleet] hold_max`).
    pub(super) fn announce_due(&self, hold_max: Duration) -> Option<Instant> {
        let at = self.asked_at?;
        Some(if self.by_agent {
            handover_ends(at, self.slot_since, hold_max)
        } else {
            at + ANNOUNCE_WINDOW
        })
    }
}

impl Daemon {
    /// Starts the follower as a task beside the loop (with a `[reboot]` trigger).
    pub(super) fn spawn_reboot_follower(&mut self, bus_address: &str) {
        if !self.reboot.enabled {
            return;
        }
        tracing::info!(
            "node {} reboots when it needs to ([reboot]), as its windows and holds allow",
            self.access.settings.node_name
        );
        let from_loop = follower::FromLoop {
            not_before: self.reboot.not_before.subscribe(),
            agent: self.reboot.agent_asks.take(),
            forecast: self.watches.forecast.subscribe(),
            drained: self.reboot.drained.subscribe(),
        };
        tokio::spawn(follower::follow(
            self.access.clone(),
            bus_address.to_owned(),
            from_loop,
            self.reboot.verdict_tx.clone(),
            self.out.metrics.clone(),
        ));
    }

    /// The follower's verdict, for the table.
    pub(super) fn reboot_verdict(&mut self) -> Event {
        let ask = self.reboot.verdict.borrow_and_update().ask;
        if ask == Ask::NotNeeded {
            self.reboot.failures = 0;
        }
        Event::Reboot(ask)
    }

    /// `StartReboot`: a running restore stops, the reboot runs as a task beside the loop.
    pub(super) fn start_reboot(&mut self) {
        let node = self.access.settings.node_name.clone();
        let why = self.reboot.verdict.borrow().why.clone();
        let by_agent = self.reboot.agent.as_ref().is_some_and(Agent::wants_reboot);
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
        self.reboot.by_agent = by_agent;
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
        let verdict = self.reboot.verdict.borrow();
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

    /// `RebootLater`: the follower says go again only after the pause, doubled for each reboot
    /// of ours in a row that ended without one (`follower::retry_pause`); `after`: what ended it.
    pub(super) fn reboot_later(&mut self, after: Setback) {
        let pause = follower::retry_pause(self.reboot.failures);
        self.reboot.failures += 1;
        tracing::info!(
            node = %self.access.settings.node_name,
            "node {} still needs a reboot ({}); trying again in {}",
            self.access.settings.node_name,
            after.says(),
            crate::time_limit::seconds(pause)
        );
        self.reboot
            .not_before
            .send_replace(Some((Instant::now() + pause, after)));
    }
}

/// How the daemon's own reboot task ended: its end, and when it took its drain slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Ended {
    end: RebootEnd,
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

impl Daemon {
    /// The running reboot ended: when logind was asked (or the node handed over) and when the
    /// slot was taken are kept for the announcement's timer; the table's event.
    pub(super) fn reboot_ended(&mut self, ended: Ended) -> Event {
        let asked = ended.end == RebootEnd::Asked;
        self.reboot.asked_at = asked.then(Instant::now);
        self.reboot.slot_since = ended.slot_since;
        Event::RebootEnded(ended.end)
    }
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
        end: RebootEnd::Asked,
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

#[cfg(test)]
mod tests {
    use super::*;

    /// logind announces the daemon's own reboot at once; zincati reboots on its own clock after
    /// the 200 it got, so its hand-over lasts as long as it keeps asking, up to
    /// [`super::super::agent::AGENT_HOLD_MAX`] after the drain, and half of `hold_max` after the
    /// slot's take, never less than [`super::super::agent::AGENT_HOLD_MIN`].
    #[test]
    fn the_announcement_is_due_sooner_for_our_reboot_than_for_the_agents() {
        use super::super::agent::{AGENT_HOLD_MAX, AGENT_HOLD_MIN};
        let hour = Duration::from_secs(3600);
        let mut reboot = Reboot::new(true, None);
        assert_eq!(reboot.announce_due(hour), None, "nothing asked yet");
        let at = Instant::now();
        reboot.asked_at = Some(at);
        assert_eq!(reboot.announce_due(hour), Some(at + ANNOUNCE_WINDOW));
        reboot.by_agent = true;
        assert_eq!(reboot.announce_due(hour), Some(at + AGENT_HOLD_MAX));
        assert_eq!(AGENT_HOLD_MAX, 2 * hour);
        // A slot taken 5 minutes before the drain's end, hold_max 1 h: 25 minutes more.
        reboot.slot_since = Some(at - Duration::from_secs(300));
        assert_eq!(
            reboot.announce_due(hour),
            Some(at + Duration::from_secs(1500))
        );
        assert_eq!(reboot.announce_due(10 * hour), Some(at + AGENT_HOLD_MAX));
        // A drain that took most of hold_max still leaves the agent two of its ticks.
        reboot.slot_since = Some(at - Duration::from_secs(1790));
        assert_eq!(reboot.announce_due(hour), Some(at + AGENT_HOLD_MIN));
        assert!(ANNOUNCE_WINDOW < AGENT_HOLD_MIN);
    }
}
