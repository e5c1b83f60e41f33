//! The loop's side of the reboot gate (`daemon::gate`): the block lock's fd, the verdict the
//! follower on the engine runtime sends, the pass SIGUSR1 opens, and the one place that makes
//! the lock agree with them and with the phase ([`Daemon::follow_gate`]).

use std::os::fd::OwnedFd;

use tokio::sync::watch;
use tokio::time::Instant;

use super::Daemon;
use crate::daemon::gate;
use crate::daemon::logind::Logind;

/// The gate as the loop holds it.
pub(crate) struct Gate {
    enabled: bool,
    /// The block lock, while held, and the reason it carries.
    lock: Option<(OwnedFd, String)>,
    /// Until then the gate stays open (SIGUSR1 from `kube-shutdown-drain reboot`).
    pub(super) pass_until: Option<Instant>,
    /// The follower's verdict: `Some(reason)` while it should be closed.
    pub(super) verdict: watch::Receiver<Option<String>>,
    verdict_tx: watch::Sender<Option<String>>,
    /// Whether the follower should look (the phase may hold the gate).
    wanted: watch::Sender<bool>,
    /// The forecast's "a drain would block", for the follower.
    pub(super) forecast_blocked: watch::Sender<Option<String>>,
    /// The systemd version was said (once, at the first connection).
    said_binding: bool,
}

impl Gate {
    pub(crate) fn new(enabled: bool) -> Gate {
        let (verdict_tx, verdict) = watch::channel(None);
        Gate {
            enabled,
            lock: None,
            pass_until: None,
            verdict,
            verdict_tx,
            wanted: watch::Sender::new(false),
            forecast_blocked: watch::Sender::new(None),
            said_binding: false,
        }
    }

    pub(super) fn enabled(&self) -> bool {
        self.enabled
    }
}

impl Daemon {
    /// Starts the follower on the engine runtime (with `[fleet] gate`).
    pub(super) fn spawn_gate(&self) {
        if !self.gate.enabled {
            return;
        }
        self.engine.spawn(gate::follow(
            self.access.clone(),
            self.gate.wanted.subscribe(),
            self.gate.forecast_blocked.subscribe(),
            self.gate.verdict_tx.clone(),
        ));
    }

    /// SIGUSR1: the gate opens for [`gate::PASS`], whatever the slots say.
    pub(super) fn pass_gate(&mut self) {
        let node = &self.settings.node_name;
        if !self.gate.enabled {
            tracing::info!("sigusr1: node {node} has no reboot gate ([fleet] gate is off)");
            return;
        }
        self.gate.pass_until = Some(Instant::now() + gate::PASS);
        tracing::info!(
            "sigusr1: the reboot gate of node {node} opens for {} s (kube-shutdown-drain reboot)",
            gate::PASS.as_secs()
        );
    }

    /// Makes the block lock agree with the phase, the pass and the follower's verdict: held
    /// with the verdict's reason while the phase may gate, no pass runs and the verdict says
    /// closed; dropped otherwise (a drop is only a close: it needs no bus).
    pub(super) async fn follow_gate(&mut self, logind: Option<&Logind>) {
        if !self.gate.enabled {
            return;
        }
        let node = self.settings.node_name.clone();
        let may = self.phase.may_gate();
        self.gate
            .wanted
            .send_if_modified(|w| std::mem::replace(w, may) != may);
        if self
            .gate
            .pass_until
            .is_some_and(|until| Instant::now() >= until)
        {
            self.gate.pass_until = None;
        }
        let want = match (may, self.gate.pass_until) {
            (true, None) => self.gate.verdict.borrow_and_update().clone(),
            _ => None,
        };
        let held = self.gate.lock.as_ref().map(|(_, why)| why.clone());
        if want == held {
            return;
        }
        let Some(why) = want else {
            self.gate.lock = None;
            self.metrics.gate_closed(false);
            let because = if !may {
                "the daemon no longer waits (a shutdown, a drain or the stop)"
            } else if self.gate.pass_until.is_some() {
                "kube-shutdown-drain reboot asked (sigusr1)"
            } else {
                "a drain slot is open to it"
            };
            tracing::info!(node = %node, "the reboot gate of node {node} is open: {because}");
            return;
        };
        let Some(logind) = logind else {
            return;
        };
        self.say_binding(logind).await;
        match logind.take_block(&node, &why).await {
            Ok(fd) => {
                // The new lock is held before the old one (another reason) goes.
                self.gate.lock = Some((fd, why.clone()));
                self.metrics.gate_closed(true);
                tracing::warn!(node = %node, "{why}");
            }
            Err(e) => tracing::warn!(node = %node, "{e}; node {node} stays ungated"),
        }
    }

    /// Says once what the gate binds on this systemd.
    async fn say_binding(&mut self, logind: &Logind) {
        if std::mem::replace(&mut self.gate.said_binding, true) {
            return;
        }
        let version = crate::daemon::systemd::version(logind.connection()).await;
        if let Err(e) = &version {
            tracing::warn!("cannot read the systemd version for the reboot gate: {e}");
        }
        tracing::info!(
            node = %self.settings.node_name,
            "reboot gate of node {}: {}",
            self.settings.node_name,
            gate::binding_line(version.as_deref().ok())
        );
    }
}
