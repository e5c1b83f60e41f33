//! The daemon's main loop: connect to logind, hold the delay lock, drain on
//! `PrepareForShutdown(true)` within the one budget, release the lock the moment the drain ends,
//! restore on cancel and after boot, reconnect when the bus goes away, stop on SIGTERM.
//!
//! While waiting the loop sleeps on three things only: logind's signals, the bus connection and
//! the stop signals. No timer runs unless a reconnect or a restore is pending.

use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;

use crate::daemon::metrics::Metrics;

use tokio::signal::unix::{Signal, SignalKind, signal};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::config::Settings;
use crate::daemon::budget::{self, Budget, seconds};
use crate::daemon::logind::{
    InhibitorLock, Logind, LogindError, ShutdownKind, ShutdownSignal, ShutdownSignals, UnderWay,
};
use crate::daemon::restore::{self, Trigger};
use crate::daemon::shutdown_start::{self, ShutdownStart};
use crate::daemon::status::Status;
use crate::engine::Engine;
use crate::filters::Action;
use crate::report::Report;

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
    /// `PreparingForShutdown` was already true at (re)connect: the budget counts from the
    /// recorded start of this boot's shutdown, else from now.
    UnderWay,
}

/// SIGTERM or SIGINT: the service manager (or a terminal) wants the daemon gone.
struct StopSignals {
    term: Signal,
    int: Signal,
}

impl StopSignals {
    fn install() -> Result<StopSignals, DaemonError> {
        let term =
            signal(SignalKind::terminate()).map_err(|source| DaemonError::Signals { source })?;
        let int =
            signal(SignalKind::interrupt()).map_err(|source| DaemonError::Signals { source })?;
        Ok(StopSignals { term, int })
    }

    /// Resolves with the signal's name.
    async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "sigterm",
            _ = self.int.recv() => "sigint",
        }
    }
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
}

/// Runs the daemon until SIGTERM/SIGINT. `bus_address` is the system bus
/// (`logind::system_bus_address()` in production).
pub async fn run(settings: Arc<Settings>, bus_address: String) -> Result<(), DaemonError> {
    let stop = StopSignals::install()?;
    let status = Status::default();
    let node = settings.node_name.clone();
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
        let mut retry = RETRY_FIRST;
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
                        retry = RETRY_FIRST;
                    } else {
                        // Not a lost connection: logind answered badly; do not spin.
                        tokio::select! {
                            _ = tokio::time::sleep(retry) => {}
                            name = self.stop.recv() => {
                                tracing::info!(
                                    "{name} while logind was unreachable; stopping (node {node})"
                                );
                                return Ok(());
                            }
                        }
                        retry = (retry * 2).min(RETRY_MAX);
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
        let lock = logind.take_lock(&node).await?;
        // Only now is an old lock (from before a reconnect) released.
        self.lock = Some(lock);
        self.metrics.lock_held(true);
        self.status.set_degraded(budget.warning.as_ref().map(|w| {
            format!(
                "logind allows {}, the drain timeout needs {} (drains cut to {}); see the journal",
                seconds(w.logind_max),
                seconds(w.needed),
                seconds(w.clamped_to)
            )
        }));
        // Read before READY=1: once systemd (or a test) sees READY, every later shutdown reaches
        // us as a signal.
        let under_way = logind.shutdown_under_way().await?;
        self.set_waiting(&budget);
        if !self.ready_sent {
            self.status.ready();
            self.ready_sent = true;
        }
        if let Some(UnderWay { kind }) = under_way {
            let what = kind
                .as_ref()
                .map_or_else(|| "shutdown".to_owned(), ShutdownKind::to_string);
            tracing::warn!("logind is already preparing a {what}; draining node {node} at once");
            if let Flow::Stop = self
                .shutdown(logind, &mut signals, kind, &budget, Origin::UnderWay)
                .await?
            {
                return Ok(());
            }
        } else {
            // A record of this boot means a shutdown was cancelled while the daemon was away (bus
            // down, daemon restarting): its signal was lost, so undo the prepare as on a cancel.
            let cancelled_while_away = self.record_of_this_boot();
            self.clear_start("no shutdown is under way");
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
                        self.clear_start("the shutdown was cancelled");
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

    /// Records when logind's timer started (now) for a daemon restarted mid-shutdown. Never
    /// fails the drain: a clock, boot ID or state directory problem is logged and passed over.
    fn record_start(&self) {
        let node = &self.settings.node_name;
        let state_dir = &self.settings.state_dir;
        let start = crate::node::read_boot_id(&self.settings.boot_id_path)
            .map_err(|e| e.to_string())
            .and_then(|boot_id| {
                let now = shutdown_start::boottime_now().map_err(|e| e.to_string())?;
                Ok(ShutdownStart {
                    boot_id,
                    boottime_ns: u64::try_from(now.as_nanos()).unwrap_or(u64::MAX),
                })
            })
            .and_then(|start| shutdown_start::write(state_dir, &start).map_err(|e| e.to_string()));
        if let Err(e) = start {
            tracing::warn!(
                "{e}; the drain of node {node} goes on, but a daemon restarted during this \
                 shutdown will count its budget from its own start"
            );
        }
    }

    /// The CLOCK_BOOTTIME moment this boot's shutdown started, from the record; `None` (and a
    /// log line saying why) when the budget must count from now instead.
    fn recorded_start(&self) -> Option<std::time::Duration> {
        let node = &self.settings.node_name;
        let from_now = "counting the drain budget from now";
        let record = match shutdown_start::read(&self.settings.state_dir) {
            Ok(Some(record)) => record,
            Ok(None) => {
                tracing::warn!(
                    "no record of when this shutdown started in {}; {from_now} for node {node}",
                    shutdown_start::path_in(&self.settings.state_dir).display()
                );
                return None;
            }
            Err(e) => {
                tracing::warn!("{e}; {from_now} for node {node}");
                return None;
            }
        };
        match crate::node::read_boot_id(&self.settings.boot_id_path) {
            Ok(boot_id) if boot_id == record.boot_id => Some(record.at()),
            Ok(boot_id) => {
                tracing::warn!(
                    "the recorded shutdown start in {} is from boot {}, not this boot {boot_id}; \
                     {from_now} for node {node}",
                    shutdown_start::path_in(&self.settings.state_dir).display(),
                    record.boot_id
                );
                None
            }
            Err(e) => {
                tracing::warn!("{e}; {from_now} for node {node}");
                None
            }
        }
    }

    /// Whether the state directory holds a shutdown record of this boot. A record or boot ID
    /// that cannot be read counts as none (logged): a cancel cannot then be told from a reboot.
    fn record_of_this_boot(&self) -> bool {
        let record = match shutdown_start::read(&self.settings.state_dir) {
            Ok(Some(record)) => record,
            Ok(None) => return false,
            Err(e) => {
                tracing::warn!("{e}; not restoring node {}", self.settings.node_name);
                return false;
            }
        };
        match crate::node::read_boot_id(&self.settings.boot_id_path) {
            Ok(boot_id) => boot_id == record.boot_id,
            Err(e) => {
                tracing::warn!("{e}; not restoring node {}", self.settings.node_name);
                false
            }
        }
    }

    /// Removes the record of a shutdown that is over without a reboot (cancelled, or gone while
    /// the daemon was away). A failure is only logged: a record of another boot is ignored, and
    /// a stale one of this boot can only make a restarted daemon release sooner, never later.
    fn clear_start(&self, why: &str) {
        match shutdown_start::clear(&self.settings.state_dir) {
            Ok(true) => tracing::info!(
                "removed the recorded shutdown start for node {}: {why}",
                self.settings.node_name
            ),
            Ok(false) => {}
            Err(e) => tracing::warn!("{e} ({why})"),
        }
    }

    fn spawn_restore(&mut self, trigger: Trigger) {
        self.abort_restore("a new restore starts");
        self.restore = Some(tokio::spawn(restore::restore_until_done(
            self.settings.clone(),
            self.status.clone(),
            self.metrics.clone(),
            trigger,
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
        let counted_from = match origin {
            Origin::Signal => {
                self.record_start();
                None
            }
            Origin::UnderWay => self.recorded_start(),
        };
        let node = self.settings.node_name.clone();
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
        let left = match counted_from.map(|from| (from, shutdown_start::boottime_now())) {
            None => budget.drain,
            Some((from, Ok(now))) => {
                let left = budget::remaining(from, now, budget.drain);
                tracing::info!(
                    "logind's timer for the {what} started {} ago; {} of the {} budget is left \
                     for node {node}",
                    seconds(now.saturating_sub(from)),
                    seconds(left),
                    seconds(budget.drain)
                );
                left
            }
            Some((_, Err(e))) => {
                tracing::warn!("{e}; counting the drain budget from now for node {node}");
                budget.drain
            }
        };
        if left.is_zero() {
            // The budget ran out while the daemon was away: hold logind no longer.
            if let Some(lock) = self.lock.take() {
                lock.release();
            }
            self.metrics.lock_held(false);
            tracing::warn!(
                "the {} budget for the {what} is already spent; released the inhibitor for node \
                 {node} at once without draining (the node stays as the last drain left it)",
                seconds(budget.drain)
            );
            self.status.set(format!(
                "budget for the {what} already spent when the daemon started; inhibitor \
                 released without draining node {node}"
            ));
            return self.after_release(logind, signals, &what, &budget).await;
        }
        let deadline = started + left;
        // `left`, not the whole budget: a daemon (re)connected mid-shutdown has only the rest.
        tracing::info!(
            node = %node,
            shutdown_kind = %what,
            "logind announced a {what}; draining node {node} within {} (logind allows {})",
            seconds(left),
            seconds(budget.logind_max)
        );
        self.status.set(format!(
            "draining node {node} before the {what} (budget {})",
            seconds(left)
        ));

        let drain = drain_node(
            self.settings.clone(),
            self.status.clone(),
            format!("{what} of the host"),
            deadline,
        )
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
                        self.clear_start("the shutdown was cancelled");
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
        // Release first: logind must not wait for our logging, report or events.
        if let Some(lock) = self.lock.take() {
            lock.release();
        }
        self.metrics.lock_held(false);
        let took = started.elapsed();
        self.finish_drain(&what, outcome, took);
        if !bus_alive {
            return Err(LogindError::Disconnected {
                address: logind.address().to_owned(),
            });
        }
        self.after_release(logind, signals, &what, &budget).await
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
                        self.clear_start("the shutdown was cancelled");
                        self.spawn_restore(Trigger::Cancel);
                        let lock = logind.take_lock(&node).await?;
                        self.lock = Some(lock);
                        self.metrics.lock_held(true);
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

    /// Logs the report and updates the status line. Runs after the release. The engine has
    /// already stored the report in the state directory and posted the Node Events.
    fn finish_drain(&self, what: &str, outcome: DrainOutcome, took: Duration) {
        let node = &self.settings.node_name;
        let ms = took.as_millis();
        match outcome {
            DrainOutcome::Drained(report) => {
                self.metrics.drained(&report);
                if report.complete {
                    tracing::info!(
                        node = %node,
                        shutdown_kind = %what,
                        outcome = "drained",
                        "drained node {node} for the {what} in {ms} ms; inhibitor released: {}",
                        report.summary()
                    );
                } else {
                    tracing::error!(
                        node = %node,
                        shutdown_kind = %what,
                        outcome = "incomplete",
                        "the drain of node {node} for the {what} ended incomplete after {ms} ms; \
                         inhibitor released: {}",
                        report.summary()
                    );
                }
                for error in &report.errors {
                    tracing::error!("drain of node {node}: {error}");
                }
                self.status.set(format!(
                    "node {node} drained for the {what}; inhibitor released: {}",
                    report.summary()
                ));
            }
            DrainOutcome::Failed(why) => {
                tracing::error!(
                    "the drain of node {node} for the {what} failed after {ms} ms; inhibitor \
                     released: {why}"
                );
                self.status.set(format!(
                    "the drain of node {node} failed; inhibitor released: {why}"
                ));
            }
        }
    }
}

/// How a drain ended.
enum DrainOutcome {
    /// The engine ran; the report says how far it got.
    Drained(Report),
    /// No drain ran (no client, or the prepare used the whole budget).
    Failed(String),
}

/// Prepare, then drain, both by `deadline`. Never outlives the deadline by more than the
/// engine's own bound (`Engine::drain` returns by its deadline).
// The node field comes from the spans of the prepare and the drain inside; the shutdown kind
// from the caller's `shutdown` span.
#[tracing::instrument(skip_all)]
async fn drain_node(
    settings: Arc<Settings>,
    status: Status,
    why: String,
    deadline: Instant,
) -> DrainOutcome {
    let node = settings.node_name.clone();
    let engine = match Engine::new(settings) {
        Ok(engine) => engine,
        Err(e) => return DrainOutcome::Failed(e.to_string()),
    };
    // The plan for the status line is read beside the prepare: it costs the drain no time.
    let (prepared, plan) = tokio::join!(
        tokio::time::timeout_at(deadline, engine.prepare_by(&why, deadline)),
        tokio::time::timeout_at(deadline, engine.plan()),
    );
    match prepared {
        Ok(Ok(outcome)) => tracing::info!(
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
        ),
        Ok(Err(e)) => {
            tracing::error!(node = %node, "preparing node {node} failed: {e}; draining it anyway")
        }
        Err(_) => {
            return DrainOutcome::Failed(format!(
                "preparing node {node} did not finish within the budget"
            ));
        }
    }
    if let Ok(Ok(plan)) = plan {
        status.set(format!(
            "draining {} pods from node {node} (waiting for {} more, {} left alone)",
            plan.count(Action::Evict),
            plan.count(Action::Wait),
            plan.count(Action::Skip)
        ));
    }
    // `Engine::drain` returns by its deadline; this guard makes that a property of the daemon
    // too, so a fault in the engine cannot hold the lock past the budget.
    match tokio::time::timeout_at(deadline + DRAIN_OVERRUN_GUARD, engine.drain(deadline)).await {
        Ok(report) => DrainOutcome::Drained(report),
        Err(_) => DrainOutcome::Failed(format!(
            "the drain of node {node} overran its deadline by {} ms and was stopped",
            DRAIN_OVERRUN_GUARD.as_millis()
        )),
    }
}

/// How long past its deadline the daemon lets `Engine::drain` run before dropping it. Within
/// the release margin, so the lock still goes before logind's own timer fires.
const DRAIN_OVERRUN_GUARD: Duration = Duration::from_millis(500);
