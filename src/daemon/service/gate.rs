//! The loop's side of the reboot gate (`daemon::gate`): the block lock's fd, the verdict the
//! follower as a task beside the loop sends and the pass SIGUSR1 opens (said once per pass), turned
//! into the table's gate events; the table (`daemon::phase`) decides when the gate closes and
//! opens, this file holds and drops the lock as its effects say.

use std::os::fd::OwnedFd;

use tokio::sync::watch;
use tokio::time::Instant;

use tokio::task::JoinHandle;

use super::Daemon;
use crate::daemon::gate::{self, GateReason};
use crate::daemon::phase::{Event, GateOpened};
use crate::host::logind::{Logind, LogindError};

/// The gate as the loop holds it.
pub(crate) struct Gate {
    enabled: bool,
    /// The block lock, while held, and the reason it carries.
    lock: Option<(OwnedFd, GateReason)>,
    /// Until then the gate stays open (SIGUSR1 from `kube-shutdown-drain reboot`).
    pub(super) pass_until: Option<Instant>,
    /// The follower's verdict: `Some(reason)` while it should be closed.
    pub(super) verdict: watch::Receiver<Option<GateReason>>,
    /// The verdict's reason as last read: the one the lock carries when held.
    reason: Option<GateReason>,
    verdict_tx: watch::Sender<Option<GateReason>>,
    /// Whether the follower should look (the phase may hold the gate).
    wanted: watch::Sender<bool>,
    /// The forecast's "a drain would block", for the follower.
    pub(super) forecast_blocked: watch::Sender<Option<String>>,
    /// The systemd version was said (once, at the first lock).
    said_binding: bool,
    /// A SIGUSR1 without a gate was said (once).
    said_no_pass: bool,
    /// The ask for a block lock under way, and the reason it carries.
    pub(super) asking: Option<(GateReason, AbortOnDrop)>,
    /// The reason logind last refused a lock for: not asked again until the reason changes.
    refused: Option<GateReason>,
}

impl Gate {
    pub(crate) fn new(enabled: bool) -> Gate {
        let (verdict_tx, verdict) = watch::channel(None);
        Gate {
            enabled,
            lock: None,
            pass_until: None,
            verdict,
            reason: None,
            verdict_tx,
            wanted: watch::Sender::new(false),
            forecast_blocked: watch::Sender::new(None),
            said_binding: false,
            said_no_pass: false,
            asking: None,
            refused: None,
        }
    }

    pub(super) fn enabled(&self) -> bool {
        self.enabled
    }

    /// Tells the follower whether to look (the phase may hold the gate).
    pub(super) fn want(&self, may: bool) {
        self.wanted
            .send_if_modified(|w| std::mem::replace(w, may) != may);
    }
}

impl Daemon {
    /// Starts the cluster's follower as one task beside the loop: the gate's follower (with
    /// `[fleet] gate`) and the looker at the reboot's holds (with reboots), each a future of
    /// it; none without either.
    pub(super) fn spawn_cluster_follower(&self) {
        let gate = self.gate.enabled.then(|| {
            gate::follow(
                self.access.clone(),
                self.gate.wanted.subscribe(),
                self.gate.forecast_blocked.subscribe(),
                self.gate.verdict_tx.clone(),
            )
        });
        let looker = self.looker();
        if gate.is_none() && looker.is_none() {
            return;
        }
        tokio::spawn(async move {
            let gate = async {
                if let Some(gate) = gate {
                    gate.await;
                }
            };
            let looker = async {
                if let Some(looker) = looker {
                    looker.await;
                }
            };
            tokio::join!(gate, looker);
        });
    }

    /// SIGUSR1: the gate opens for `gate_pass` ([`crate::config::DEFAULT_GATE_PASS`] outside
    /// tests), whatever the slots say ([`Event::PassGiven`], `None` without a gate). A signal
    /// during a pass makes it start again, silently: one line per pass, however many signals
    /// come (each `kube-shutdown-drain reboot` sends one, a loop may send hundreds).
    pub(super) fn pass_gate(&mut self) -> Option<Event> {
        let node = &self.access.settings.node_name;
        if !self.gate.enabled {
            if !std::mem::replace(&mut self.gate.said_no_pass, true) {
                tracing::info!("sigusr1: node {node} has no reboot gate ([fleet] gate is off)");
            }
            return None;
        }
        let now = Instant::now();
        let passing = self.gate.pass_until.is_some_and(|until| now < until);
        self.gate.pass_until = Some(now + self.access.settings.gate_pass);
        if !passing {
            tracing::info!(
                "sigusr1: the reboot gate of node {node} opens for {} (kube-shutdown-drain reboot)",
                crate::time_limit::seconds(self.access.settings.gate_pass)
            );
        }
        Some(Event::PassGiven)
    }

    /// The follower's verdict changed: its reason kept for the lock, the event for the table.
    pub(super) fn gate_verdict(&mut self) -> Event {
        self.gate.reason = self.gate.verdict.borrow_and_update().clone();
        match self.gate.reason {
            Some(_) => Event::SlotsFull,
            None => Event::SlotsOpen,
        }
    }

    /// The pass's end, for the table.
    pub(super) fn pass_expired(&mut self) -> Event {
        self.gate.pass_until = None;
        Event::PassExpired
    }

    /// `SayPassEnded`.
    pub(super) fn say_pass_ended(&self) {
        let node = &self.access.settings.node_name;
        tracing::info!(
            node = %node,
            "the pass of the reboot gate of node {node} ended: no shutdown came within {} of the \
             last sigusr1",
            crate::time_limit::seconds(self.access.settings.gate_pass)
        );
    }

    /// `DropGate`: the block lock and any ask for one go; said if a lock was held.
    pub(super) fn drop_gate(&mut self, because: GateOpened) {
        let node = &self.access.settings.node_name;
        self.gate.asking = None;
        if self.gate.lock.take().is_none() {
            return;
        }
        self.out.metrics.gate_closed(false);
        let because = match because {
            GateOpened::NoLongerWaits => {
                "the daemon no longer waits (a shutdown, a drain or the stop)"
            }
            GateOpened::Pass => "kube-shutdown-drain reboot asked (sigusr1)",
            // The follower's verdict is open both when a slot is open and when the slots
            // cannot be read (it says so itself): claim neither alone.
            GateOpened::SlotOpen => {
                "a drain slot is open to it, or its drain slots cannot be read (then said above)"
            }
        };
        tracing::info!(node = %node, "the reboot gate of node {node} is open: {because}");
    }

    /// `HoldGate`: the block lock held with the follower's reason. Nothing here waits on the
    /// bus: the lock is asked for on a task of its own ([`taking`]), so an announcement that
    /// comes meanwhile is handled at once (the drain's clock starts when it is). Without a
    /// connection the next one asks (`Connected` holds the gate again).
    pub(super) fn hold_gate(&mut self, logind: Option<&Logind>) {
        let Some(why) = self.gate.reason.clone() else {
            return;
        };
        let held = self.gate.lock.as_ref().map(|(_, held)| held);
        if held == Some(&why) {
            self.gate.asking = None;
            return;
        }
        let asked = self.gate.asking.as_ref().map(|(w, _)| w);
        let refused = self.gate.refused.as_ref();
        let Some(logind) = logind.filter(|_| asked != Some(&why) && refused != Some(&why)) else {
            return;
        };
        let node = self.access.settings.node_name.clone();
        let logind = logind.clone();
        let say_binding = !std::mem::replace(&mut self.gate.said_binding, true);
        let reason = why.to_string();
        let task = tokio::spawn(async move {
            if say_binding {
                say_binding_of(&logind, &node).await;
            }
            logind.take_block(&node, &reason).await
        });
        // Replacing a task still asking aborts it (its fd, if logind answers, is closed).
        self.gate.asking = Some((why, AbortOnDrop(task)));
    }

    /// The block lock logind granted (or refused) for `why`: held if it is still wanted.
    pub(super) fn gate_taken(&mut self, why: GateReason, taken: Result<OwnedFd, LogindError>) {
        let node = self.access.settings.node_name.clone();
        match taken {
            Ok(fd) => {
                // The new lock is held before the old one (another reason) goes; it was asked
                // for the gate's reason now (a later reason or a drop aborts the ask).
                self.gate.lock = Some((fd, why.clone()));
                self.gate.refused = None;
                self.out.metrics.gate_closed(true);
                tracing::warn!(node = %node, "{why}");
            }
            Err(e) => {
                tracing::warn!(node = %node, "{e}; node {node} stays ungated until the gate's reason changes");
                self.gate.refused = Some(why);
            }
        }
    }
}

/// Says once what the gate binds on this systemd.
async fn say_binding_of(logind: &Logind, node: &str) {
    let version = crate::host::systemd::version(logind.connection()).await;
    if let Err(e) = &version {
        tracing::warn!("cannot read the systemd version for the reboot gate: {e}");
    }
    tracing::info!(
        node = %node,
        "reboot gate of node {node}: {}",
        crate::host::systemd::binding_line(version.as_deref().ok())
    );
}

/// A task aborted when dropped.
pub(crate) struct AbortOnDrop(JoinHandle<Result<OwnedFd, LogindError>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The end of the ask for a block lock (`asking`), once it ends; never while none runs.
pub(super) async fn taking(
    asking: &mut Option<(GateReason, AbortOnDrop)>,
) -> (GateReason, Result<OwnedFd, LogindError>) {
    let Some((why, task)) = asking else {
        return std::future::pending().await;
    };
    let taken = match (&mut task.0).await {
        Ok(taken) => taken,
        Err(e) => Err(LogindError::GateTask {
            message: e.to_string(),
        }),
    };
    let why = why.clone();
    *asking = None;
    (why, taken)
}
