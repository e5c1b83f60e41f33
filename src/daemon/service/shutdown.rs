//! One shutdown, from logind's announcement to the lock's release and what follows it: the
//! `[shutdown]` policy of its kind, the budget left, the drain (or cordon) bounded by it, the
//! record of how it ended, then waiting for the end of the machine or a cancel.

use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use super::{Daemon, Flow, Origin};
use crate::config::ShutdownPolicy;
use crate::daemon::boot_record::EndOutcome;
use crate::daemon::budget::{self, Budget, seconds};
use crate::daemon::drain::{self, drain_node};
use crate::daemon::logind::{Logind, LogindError, ShutdownKind, ShutdownSignal, ShutdownSignals};
use crate::daemon::outcome;
use crate::daemon::restore::Trigger;
use crate::daemon::shutdown_start;

impl Daemon {
    /// `PrepareForShutdown(true)`: prepare and drain within the budget, release the lock, then
    /// wait for the end (SIGTERM) or a cancel (restore, lock again).
    pub(super) async fn shutdown(
        &mut self,
        logind: &Logind,
        signals: &mut ShutdownSignals,
        kind: Option<ShutdownKind>,
        connect_budget: &Budget,
        origin: Origin,
    ) -> Result<Flow, LogindError> {
        // logind's one timer started when it sent the signal: count from here, and record the
        // moment for a daemon that restarts before the shutdown ends. Under way at start: count
        // from the recorded moment.
        let started = Instant::now();
        let counted_from = shutdown_start::counted_from(&self.settings, origin == Origin::Signal);
        let node = self.settings.node_name.clone();
        self.quiet.send_replace(false);
        self.abort_restore("a shutdown starts");
        // Read again: an admin may have raised InhibitDelayMaxSec since the start.
        let budget = match self.budget(logind).await {
            Ok(budget) => budget,
            Err(e) => {
                tracing::warn!("{e}; using logind's maximum read at connect time");
                connect_budget.clone()
            }
        };
        let what = kind
            .as_ref()
            .map_or_else(|| "shutdown".to_owned(), ShutdownKind::to_string);
        let kind_name = drain::kind_name(kind.as_ref());
        let (key, policy) = drain::policy_for(&self.settings.shutdown, kind.as_ref());
        self.boot_log
            .shutdown_started(&kind_name, origin == Origin::Signal);
        if policy == ShutdownPolicy::None {
            self.leave_as_is(&what, key, kind_name);
            return self.after_release(logind, signals, &what, &budget).await;
        }
        let left = budget::left(&node, counted_from, &budget, &what);
        let held = self.lock.is_some();
        if left.is_zero() {
            self.budget_spent(&what, &budget);
            return self.after_release(logind, signals, &what, &budget).await;
        }
        let deadline = started + left;
        let doing = if policy == ShutdownPolicy::Cordon {
            "cordoning"
        } else {
            "draining"
        };
        let unguarded = self.announce(&what, doing, left, held, &budget);
        let why = format!("{what} of the host");
        let settings = self.settings.clone();
        let status = self.status.clone();
        let drain = async move {
            if policy == ShutdownPolicy::Cordon {
                tracing::info!(
                    "[shutdown] {key} = \"cordon\": tainting and cordoning node {}, evicting no \
                     pods",
                    settings.node_name
                );
                drain::cordon_node(settings, why, kind_name, key, deadline).await
            } else {
                drain_node(settings, status, why, kind_name, deadline, unguarded).await
            }
        }
        .instrument(tracing::info_span!("shutdown", shutdown_kind = %what));
        tokio::pin!(drain);
        let mut bus_alive = true;
        let outcome = loop {
            tokio::select! {
                outcome = &mut drain => break outcome,
                signal = signals.next(), if bus_alive => match signal {
                    Ok(ShutdownSignal::Cancelled) => {
                        tracing::info!(
                            "logind cancelled the {what} during the drain of node {node}; \
                             stopping the drain and restoring the node"
                        );
                        // The lock is still held: only the node needs undoing.
                        self.shutdown_over("the shutdown was cancelled");
                        self.spawn_restore(Trigger::Cancel);
                        self.set_waiting(&budget);
                        return Ok(Flow::Continue);
                    }
                    Ok(ShutdownSignal::Started { .. }) => {}
                    Err(e) => {
                        // The lock's fd does not depend on the bus: keep draining.
                        tracing::warn!("{e} during the drain of node {node}; the drain goes on");
                        bus_alive = false;
                    }
                },
                name = self.stop.recv() => {
                    tracing::warn!(
                        "{name} during the drain of node {node}; stopping the drain and releasing \
                         the inhibitor (the node stays cordoned until it is restored)"
                    );
                    return Ok(Flow::Stop);
                }
            }
        };
        // The boot record first (one small write, like the report the drain has just stored):
        // the machine may go down the moment the lock goes. Then the release: logind must not
        // wait for our logging or events.
        let (end, detail) = outcome::end_of(&outcome);
        self.boot_log
            .shutdown_ended_by(deadline + drain::DRAIN_OVERRUN_GUARD, end, detail)
            .await;
        self.release("released the inhibitor");
        let took = started.elapsed();
        outcome::log_outcome(
            &self.settings,
            &self.status,
            &self.metrics,
            &what,
            outcome,
            took,
            held,
        );
        if !bus_alive {
            return Err(LogindError::Disconnected {
                address: logind.address().to_owned(),
            });
        }
        self.after_release(logind, signals, &what, &budget).await
    }

    /// `[shutdown] KIND = "none"`: the inhibitor goes at once, the node is left as it is.
    fn leave_as_is(&mut self, what: &str, key: &'static str, kind_name: String) {
        let node = self.settings.node_name.clone();
        self.boot_log
            .shutdown_ended(EndOutcome::LeftAsIs, format!("[shutdown] {key} = \"none\""));
        let released = self.release("released the inhibitor at once");
        tracing::info!(
            node = %node,
            shutdown_kind = %what,
            "logind announced a {what}; [shutdown] {key} = \"none\": leaving node {node} as \
             it is; {released}"
        );
        self.status.set(format!(
            "{what} announced; [shutdown] {key} = \"none\": node {node} left as it is; \
             {released}"
        ));
        tokio::spawn(drain::post_skipped(self.settings.clone(), kind_name, key));
    }

    /// The budget ran out while the daemon was away: hold logind no longer.
    fn budget_spent(&mut self, what: &str, budget: &Budget) {
        let node = self.settings.node_name.clone();
        self.boot_log.shutdown_ended_unless_recorded(
            EndOutcome::Failed,
            format!(
                "its {} budget was already spent when the daemon started",
                seconds(budget.drain)
            ),
        );
        let released = self.release("released the inhibitor");
        tracing::warn!(
            "the {} budget for the {what} is already spent; {released} for node {node} \
             without draining (the node stays as the last drain left it)",
            seconds(budget.drain)
        );
        self.status.set(format!(
            "budget for the {what} already spent when the daemon started; {released} without \
             draining node {node}"
        ));
    }

    /// Says the drain starts (log, `STATUS=`); without an inhibitor, loudly. Returns the warning
    /// that goes into a Node Event when no inhibitor is held.
    /// `doing`: "draining", or "cordoning" under the `[shutdown]` policy "cordon".
    fn announce(
        &self,
        what: &str,
        doing: &str,
        left: Duration,
        held: bool,
        budget: &Budget,
    ) -> Option<String> {
        let node = &self.settings.node_name;
        // `left`, not the whole budget: a daemon (re)connected mid-shutdown has only the rest.
        tracing::info!(
            node = %node,
            shutdown_kind = %what,
            "logind announced a {what}; {doing} node {node} within {} (logind allows {})",
            seconds(left),
            seconds(budget.logind_max)
        );
        let unguarded = (!held).then(|| {
            format!(
                "logind refuses new delay inhibitors while a {what} is under way and this daemon \
                 holds none: logind will not wait for this drain of node {node}; draining best \
                 effort within {}, the machine may go down first",
                seconds(left)
            )
        });
        match &unguarded {
            Some(why) => {
                tracing::error!("{why}");
                self.status.set(format!(
                    "draining node {node} without an inhibitor before the {what}: logind will \
                     not wait for it (budget {})",
                    seconds(left)
                ));
            }
            None => self.status.set(format!(
                "{doing} node {node} before the {what} (budget {})",
                seconds(left)
            )),
        }
        unguarded
    }

    /// The lock is released: wait for the end (SIGTERM) or a cancel (restore, lock again).
    async fn after_release(
        &mut self,
        logind: &Logind,
        signals: &mut ShutdownSignals,
        what: &str,
        budget: &Budget,
    ) -> Result<Flow, LogindError> {
        let node = self.settings.node_name.clone();
        loop {
            tokio::select! {
                name = self.stop.recv() => {
                    tracing::info!("{name} after the drain of node {node}; stopping");
                    return Ok(Flow::Stop);
                }
                signal = signals.next() => match signal? {
                    ShutdownSignal::Cancelled => {
                        tracing::info!(
                            "logind cancelled the {what}; restoring node {node} and taking the \
                             inhibitor again"
                        );
                        self.shutdown_over("the shutdown was cancelled");
                        self.spawn_restore(Trigger::Cancel);
                        match logind.take_lock(&node).await {
                            Ok(lock) => {
                                self.lock = Some(lock);
                                self.metrics.lock_held(true);
                            }
                            // Another shutdown began right after the cancel: its signal is
                            // queued behind this one and starts a drain without the lock.
                            Err(e @ LogindError::ShutdownUnderWay { .. }) => {
                                tracing::warn!("{e}; a new shutdown started after the cancel");
                            }
                            Err(e) => return Err(e),
                        }
                        self.set_waiting(budget);
                        return Ok(Flow::Continue);
                    }
                    ShutdownSignal::Started { .. } => tracing::info!(
                        "logind announced another shutdown; node {node} is already drained"
                    ),
                },
            }
        }
    }
}
