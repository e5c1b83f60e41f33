//! The daemon's main loop: connect to logind, hold the delay lock, drain on
//! `PrepareForShutdown(true)` within the one budget, release the lock the moment the drain ends,
//! restore on cancel and after boot, reconnect when the bus goes away, stop on SIGTERM.
//!
//! logind refuses a delay lock while the shutdown it would delay is already under way
//! (`OperationInProgress`), so a daemon (re)started or reconnected then reads
//! `PreparingForShutdown` first and drains at once without a lock: best effort, and says so.
//!
//! While waiting the loop sleeps on three things only: logind's signals, the bus connection and
//! the stop signals. No timer runs unless a reconnect or a restore is pending.

use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

use crate::daemon::metrics::Metrics;

use crate::daemon::signals::StopSignals;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::api::retry::Backoff;
use crate::config::{Settings, ShutdownPolicy};
use crate::daemon::boot_record::{self, BootLog, EndOutcome};
use crate::daemon::budget::{self, Budget, seconds};
use crate::daemon::drain::{self, drain_node};
use crate::daemon::kubelet;
use crate::daemon::logind::{
    InhibitorLock, Logind, LogindError, ShutdownKind, ShutdownSignal, ShutdownSignals, UnderWay,
};
use crate::daemon::outcome;
use crate::daemon::restore::{self, Trigger};
use crate::daemon::shutdown_start;
use crate::daemon::status::Status;

/// First wait before trying logind again after a failure that was not a lost connection
/// (logind absent, lock refused); doubled up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(250);
/// Longest wait between attempts to get the lock back.
const RETRY_MAX: Duration = Duration::from_secs(2);

/// The daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("cannot install the SIGTERM/SIGINT handlers: {source}")]
    Signals { source: std::io::Error },
}

/// Whether the loop goes on after a step.
enum Flow {
    Continue,
    Stop,
}

/// How the daemon learnt of a shutdown, which decides where its budget is counted from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Origin {
    /// `PrepareForShutdown(true)` arrived: logind's one timer starts now; the moment is recorded.
    Signal,
    /// `PreparingForShutdown` was already true at (re)connect, or logind refused the lock with
    /// `OperationInProgress`: the budget counts from the recorded start of this boot's shutdown,
    /// else from now (and now is recorded).
    UnderWay,
}

/// The loop's state across bus connections.
struct Daemon {
    settings: Arc<Settings>,
    bus_address: String,
    status: Status,
    stop: StopSignals,
    /// The lock. Replaced (new one first, then the old one dropped) after a reconnect; taken
    /// out and dropped the moment a drain ends.
    lock: Option<InhibitorLock>,
    /// The running restore, aborted when a shutdown starts.
    restore: Option<JoinHandle<()>>,
    /// The node_exporter textfile (`[metrics] textfile`; a no-op when off).
    metrics: Metrics,
    ready_sent: bool,
    /// True while logind, as last read or heard, prepares no shutdown; the boot restore of a
    /// soft-reboot's marker waits for it (`restore::attempt`).
    quiet: tokio::sync::watch::Sender<bool>,
    /// This boot's record (`boot-record`), opened at the first connection to logind.
    boot_log: BootLog,
    boot_log_opened: bool,
}

/// Runs the daemon until SIGTERM/SIGINT. `bus_address` is the system bus
/// (`logind::system_bus_address()` in production).
pub async fn run(settings: Arc<Settings>, bus_address: String) -> Result<(), DaemonError> {
    let stop = StopSignals::install()?;
    let status = Status::default();
    let node = settings.node_name.clone();
    if let Err(e) = crate::state_file::check_writable(&settings.state_dir) {
        tracing::warn!(
            "state dir {} is not writable ({e}); the last report and the shutdown start will not be kept",
            settings.state_dir.display()
        );
    } else if crate::state_file::is_volatile(&settings.state_dir) {
        tracing::warn!(
            "state dir {} is in memory (tmpfs): the boot record of node {node} is lost at every \
             reboot, so the next boot cannot tell whether this one ended with a drain",
            settings.state_dir.display()
        );
    }
    status.set(format!(
        "starting: taking the logind inhibitor for node {node}"
    ));
    let metrics = Metrics::start(
        settings.metrics.textfile.clone(),
        &node,
        &settings.state_dir,
    );
    let mut daemon = Daemon {
        restore: None,
        metrics,
        settings,
        bus_address,
        status,
        stop,
        lock: None,
        ready_sent: false,
        quiet: tokio::sync::watch::Sender::new(false),
        boot_log: BootLog::default(),
        boot_log_opened: false,
    };
    // The boot restore runs beside the lock, never before it.
    daemon.spawn_restore(Trigger::Boot);
    let result = daemon.run().await;
    daemon.abort_restore("the daemon stops");
    if let Some(lock) = daemon.lock.take() {
        lock.release();
    }
    daemon.metrics.lock_held(false);
    tracing::info!("stopped (node {node})");
    result
}

impl Daemon {
    async fn run(&mut self) -> Result<(), DaemonError> {
        let mut retry = Backoff::between(RETRY_FIRST, RETRY_MAX);
        loop {
            let address = self.bus_address.clone();
            let logind = tokio::select! {
                logind = Logind::connect_with_backoff(&address) => logind,
                name = self.stop.recv() => {
                    tracing::info!(
                        "{name} before logind was reached; stopping (node {})",
                        self.settings.node_name
                    );
                    return Ok(());
                }
            };
            match self.serve(&logind).await {
                // `serve` returns only to stop, or with the error that ended the connection.
                Ok(()) => return Ok(()),
                Err(e) => {
                    let node = &self.settings.node_name;
                    let held = if self.lock.is_some() {
                        "the old inhibitor is kept until a new one is held"
                    } else {
                        "no inhibitor is held"
                    };
                    tracing::warn!("{e}; reconnecting to logind for node {node} ({held})");
                    self.status
                        .set_degraded(Some(format!("logind unreachable: {e}")));
                    if matches!(e, LogindError::Disconnected { .. }) {
                        retry.reset();
                    } else {
                        // Not a lost connection: logind answered badly; do not spin.
                        tokio::select! {
                            _ = tokio::time::sleep(retry.next_pause()) => {}
                            name = self.stop.recv() => {
                                tracing::info!(
                                    "{name} while logind was unreachable; stopping (node {node})"
                                );
                                return Ok(());
                            }
                        }
                    }
                }
            }
        }
    }

    /// One bus connection's life: budget, subscribe, lock, then wait for logind. Returns `Ok`
    /// when the daemon is to stop, or the error that ended the connection.
    async fn serve(&mut self, logind: &Logind) -> Result<(), LogindError> {
        let node = self.settings.node_name.clone();
        let budget = self.budget(logind).await?;
        // Subscribe first: a shutdown that starts between the lock and the subscription would
        // otherwise hold the node's shutdown for logind's whole timer.
        let mut signals = logind.subscribe().await?;
        // Read before asking for the lock: logind refuses delay locks while a shutdown is under
        // way, and a daemon that kept asking would never drain (issue 13).
        let mut under_way = logind.shutdown_under_way().await?;
        if under_way.is_none() {
            match logind.take_lock(&node).await {
                // Only now is an old lock (from before a reconnect) released.
                Ok(lock) => {
                    self.lock = Some(lock);
                    self.metrics.lock_held(true);
                }
                Err(e @ LogindError::ShutdownUnderWay { .. }) => {
                    // The shutdown started between the read and the call: the same as a
                    // shutdown under way at start, never "logind unavailable".
                    tracing::warn!("{e}; the shutdown started after it was checked");
                    under_way = Some(
                        logind
                            .shutdown_under_way()
                            .await?
                            .unwrap_or(UnderWay { kind: None }),
                    );
                }
                Err(e) => return Err(e),
            }
        }
        self.status.set_degraded(budget.warning.as_ref().map(|w| {
            format!(
                "logind allows {}, the drain timeout needs {} (drains cut to {}); see the journal",
                seconds(w.logind_max),
                seconds(w.needed),
                seconds(w.clamped_to)
            )
        }));
        // The previous boot is judged (and this boot's record started) before READY=1.
        if !self.boot_log_opened {
            self.boot_log_opened = true;
            self.open_boot_log(under_way.is_some());
        }
        // The shutdown state was read before READY=1: once systemd (or a test) sees READY, every
        // later shutdown reaches us as a signal.
        self.set_waiting(&budget);
        if !self.ready_sent {
            self.status.ready();
            self.ready_sent = true;
            kubelet::check(&self.settings, logind).await;
        }
        self.quiet.send_replace(under_way.is_none());
        if let Some(UnderWay { kind }) = under_way {
            let what = kind
                .as_ref()
                .map_or_else(|| "shutdown".to_owned(), ShutdownKind::to_string);
            let lock = if self.lock.is_some() {
                // From before a reconnect: logind kept it (its fd never depended on the bus).
                "with the inhibitor held since before the reconnect"
            } else {
                "without an inhibitor"
            };
            tracing::warn!(
                "logind is already preparing a {what}; draining node {node} at once {lock}"
            );
            if let Flow::Stop = self
                .shutdown(logind, &mut signals, kind, &budget, Origin::UnderWay)
                .await?
            {
                return Ok(());
            }
        } else {
            // A record of this boot means a shutdown was cancelled while the daemon was away (bus
            // down, daemon restarting): its signal was lost, so undo the prepare as on a cancel.
            let cancelled_while_away = shutdown_start::of_this_boot(&self.settings);
            shutdown_start::clear_logged(&self.settings, "no shutdown is under way");
            self.boot_log.shutdown_cancelled();
            if cancelled_while_away {
                tracing::info!(
                    "the recorded shutdown of node {node} ended without a reboot while the daemon \
                     was away; restoring the node"
                );
                self.spawn_restore(Trigger::Cancel);
            }
        }
        loop {
            tokio::select! {
                name = self.stop.recv() => {
                    tracing::info!(
                        "{name} while waiting for a shutdown; releasing the inhibitor for node {node}"
                    );
                    self.boot_log.stopped();
                    return Ok(());
                }
                signal = signals.next() => match signal? {
                    ShutdownSignal::Started { kind } => {
                        if let Flow::Stop = self
                            .shutdown(logind, &mut signals, kind, &budget, Origin::Signal)
                            .await?
                        {
                            return Ok(());
                        }
                    }
                    ShutdownSignal::Cancelled => {
                        tracing::info!(
                            "logind cancelled a shutdown that never started here; nothing to undo on node {node}"
                        );
                        shutdown_start::clear_logged(&self.settings, "the shutdown was cancelled");
                    }
                },
            }
        }
    }

    /// Reads logind's maximum delay and computes the budget; says so loudly when clamped.
    async fn budget(&self, logind: &Logind) -> Result<Budget, LogindError> {
        let budget = budget::read(logind, &self.settings).await?;
        self.metrics.budget(budget.drain, budget.logind_max);
        if let Some(warning) = &budget.warning {
            tracing::error!("{warning}");
        }
        Ok(budget)
    }

    fn set_waiting(&self, budget: &Budget) {
        self.status.set(format!(
            "waiting for a shutdown of node {} (drain budget {}, logind allows {})",
            self.settings.node_name,
            seconds(budget.drain),
            seconds(budget.logind_max)
        ));
    }

    /// Reads the record of the previous boot, starts this boot's, and posts the Event about an
    /// unclean end (retried in its own task until written).
    fn open_boot_log(&mut self, under_way: bool) {
        if let Some(previous) = self.boot_log.open(&self.settings, under_way) {
            tokio::spawn(boot_record::post_until_done(
                self.settings.clone(),
                self.boot_log.clone(),
                previous,
            ));
        }
        if let Some(record) = self.boot_log.record() {
            self.metrics.unclean(record.unclean);
        }
    }

    fn spawn_restore(&mut self, trigger: Trigger) {
        self.abort_restore("a new restore starts");
        self.restore = Some(tokio::spawn(restore::restore_until_done(
            self.settings.clone(),
            self.status.clone(),
            self.metrics.clone(),
            trigger,
            self.quiet.subscribe(),
        )));
    }

    fn abort_restore(&mut self, why: &str) {
        if let Some(task) = self.restore.take()
            && !task.is_finished()
        {
            task.abort();
            tracing::info!(
                "stopped the restore of node {}: {why}",
                self.settings.node_name
            );
            self.status.set_restore(None);
        }
    }

    /// `PrepareForShutdown(true)`: prepare and drain within the budget, release the lock, then
    /// wait for the end (SIGTERM) or a cancel (restore, lock again).
    async fn shutdown(
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
                        shutdown_start::clear_logged(&self.settings, "the shutdown was cancelled");
                        self.boot_log.shutdown_cancelled();
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
        self.boot_log.shutdown_ended(end, detail);
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

    /// Releases the inhibitor if one is held; returns `released`, or says none was held.
    fn release(&mut self, released: &'static str) -> &'static str {
        self.metrics.lock_held(false);
        match self.lock.take() {
            Some(lock) => {
                lock.release();
                released
            }
            None => "holding no inhibitor",
        }
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
                        shutdown_start::clear_logged(&self.settings, "the shutdown was cancelled");
                        self.boot_log.shutdown_cancelled();
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
