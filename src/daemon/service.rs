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

use crate::daemon::metrics::Metrics;

use crate::daemon::signals::StopSignals;

mod shutdown;
use tokio::task::JoinHandle;

use crate::api::retry::Backoff;
use crate::config::Settings;
use crate::daemon::boot_record::{self, BootLog};
use crate::daemon::budget::{self, Budget, seconds};
use crate::daemon::kubelet;
use crate::daemon::logind::{
    InhibitorLock, Logind, LogindError, ShutdownKind, ShutdownSignal, UnderWay,
};
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
            // Beside the loop: a slow ListInhibitors must not delay a shutdown signal.
            let (settings, logind) = (self.settings.clone(), logind.clone());
            tokio::spawn(async move { kubelet::check(&settings, &logind).await });
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
            self.shutdown_over("no shutdown is under way");
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
                        self.shutdown_over("the shutdown was cancelled");
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

    /// The shutdown is over without a reboot (cancelled, heard or missed): both records of it
    /// go, the shutdown start and this boot's record of it.
    fn shutdown_over(&self, why: &str) {
        shutdown_start::clear_logged(&self.settings, why);
        self.boot_log.shutdown_cancelled();
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

    /// Releases the inhibitor if one is held; returns `released`, or says none was held.
    fn release(&mut self, released: &'static str) -> &'static str {
        // The lock first: the metrics file is rewritten after, never while logind waits.
        let said = match self.lock.take() {
            Some(lock) => {
                lock.release();
                released
            }
            None => "holding no inhibitor",
        };
        self.metrics.lock_held(false);
        said
    }
}
