//! The daemon's loop: turns what happens (logind's signals, a connection made or lost, the end
//! of a drain, the stop signals) into [`Event`]s for the pure phase machine (`daemon::phase`) and
//! carries out the effects it names (`effects.rs`). One loop, one `select!`: while waiting it
//! sleeps on logind's signals, the bus connection and the signals only; no timer runs unless a
//! reconnect or a restore is pending.
//!
//! logind refuses a delay lock while the shutdown it would delay is already under way
//! (`OperationInProgress`), so a daemon (re)started or reconnected then reads
//! `PreparingForShutdown` first and drains at once without a lock: best effort, and says so.
//! A drain goes on while the bus is away (the lock's fd does not depend on the bus).
//!
//! Everything that talks to the API server (drains, restores, Events) runs as tasks of its own
//! (`tokio::spawn` on the one current-thread runtime of `main.rs`), never inside this loop, and
//! nothing of the program blocks that thread (the kubeconfig, the TLS setup and a token file are
//! read on tokio's blocking pool); the lock's guard thread (`host::lock`) releases the inhibitor
//! at its deadline whatever the runtime does. The long-lived tasks beside the loop, and what
//! each reads and sends, are listed in docs/design.md ("The daemon's tasks").

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::backoff::Backoff;
use crate::config::Settings;
use crate::daemon::access::Access;
use crate::daemon::metrics::Metrics;
use crate::daemon::phase::{During, Event, Phase, Reboots, State, StopSignal};
use crate::daemon::restore::Trigger;
use crate::daemon::signals::{Asked, Signals};
use crate::daemon::status::Status;
use crate::host::boot_record::BootLog;
use crate::host::lock::Inhibitor;
use crate::host::logind::{InhibitorLock, Logind, LogindError, ShutdownSignal, ShutdownSignals};
use crate::host::writer::Writer;
use crate::shutdown_kind::ShutdownKind;
use crate::time_limit::TimeLimit;

mod agent;
mod effects;
mod gate;
mod reboot;
mod scheduled;
mod shutdown;
mod stop_stage;
mod work;

/// First wait before trying logind again after a failure; doubled up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(250);
/// Longest wait between attempts: the kubelet retries every 1 s (`dbusReconnectPeriod`); 2 s
/// keeps a restarted bus picked up within a few seconds.
const RETRY_MAX: Duration = Duration::from_secs(2);

/// How long the exit waits for the files still being written.
const EXIT_WRITE_WAIT: Duration = Duration::from_secs(1);

/// The daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error("cannot install the SIGTERM/SIGINT/SIGHUP handlers: {source}")]
    Signals { source: std::io::Error },
    #[error("cannot start the {what} thread: {source}")]
    Thread {
        what: &'static str,
        source: std::io::Error,
    },
    #[error(transparent)]
    Agent(#[from] agent::AgentError),
}

impl DaemonError {
    /// A configuration error that a restart cannot fix (the daemon exits 2).
    pub fn is_config(&self) -> bool {
        matches!(self, DaemonError::Agent(e) if e.is_config())
    }
}

/// A connection to logind, set up: the signals subscribed, the budget read, the shutdown state
/// read, and the lock taken unless a shutdown is under way.
struct Connection {
    logind: Logind,
    signals: ShutdownSignals,
    limit: TimeLimit,
    under_way: Option<ShutdownKind>,
    lock: Option<InhibitorLock>,
}

/// The loop's state across bus connections.
pub(crate) struct Daemon {
    /// The settings and the credential cache every API call of the daemon shares.
    access: Access,
    /// The phase and the reboot gate, as the table (`daemon::phase`) moves them.
    state: State,
    /// What the daemon shows outside its log: systemd's status line and the metrics.
    out: Out,
    inhibitor: Inhibitor,
    /// This boot's record and the start's once-only steps.
    boot: Boot,
    /// The shutdown's work and the restore, the tasks beside the loop that end a phase.
    tasks: Tasks,
    /// What the tasks beside the loop follow.
    watches: Watches,
    /// logind's schedule file and the timer it needs.
    scheduled: scheduled::Tracked,
    /// The reboot gate (`[fleet] gate`).
    gate: gate::Gate,
    /// The reboots the node asks for (`[reboot]`).
    reboot: reboot::Reboot,
}

/// What the daemon shows outside its log.
struct Out {
    /// systemd's `STATUS=` line and `status`'s view of it.
    status: Status,
    metrics: Metrics,
}

/// The tasks beside the loop whose end is an event of the table.
struct Tasks {
    /// The shutdown's work: while it runs, then how it ended until that is recorded and said.
    work: work::Slot,
    /// The running restore, aborted when a shutdown starts.
    restore: Option<JoinHandle<()>>,
}

/// This boot's record (`boot-record`), opened at the first connection to logind, and READY=1,
/// sent once after it.
struct Boot {
    log: BootLog,
    opened: bool,
    ready_sent: bool,
}

/// The values the tasks as a task beside the loop follow.
struct Watches {
    /// True while logind, as last read or heard, prepares no shutdown; the boot restore of a
    /// soft-reboot's marker waits for it (`restore::attempt`).
    quiet: watch::Sender<bool>,
    /// True while no drain runs and none is due: the forecast runs only then.
    idle: watch::Sender<bool>,
    /// logind's budget as last read (at the last connection): the forecast's, and the one a
    /// shutdown uses when logind does not say it again.
    time_limit: watch::Sender<Option<TimeLimit>>,
    /// The last forecast (`[daemon] forecast_interval`): the reboots weigh it.
    forecast: watch::Sender<Option<Arc<crate::forecast::Forecast>>>,
}

/// Runs the daemon until SIGTERM/SIGINT. `bus_address` is the system bus
/// (`logind::system_bus_address()` in production).
pub async fn run(settings: Arc<Settings>, bus_address: String) -> Result<(), DaemonError> {
    let mut signals = Signals::install().map_err(|source| DaemonError::Signals { source })?;
    let thread = |what| move |source| DaemonError::Thread { what, source };
    let inhibitor = Inhibitor::start().map_err(thread("inhibitor guard"))?;
    let writer = Writer::start().map_err(thread("file writer"))?;
    let node = settings.node_name.clone();
    let agent = agent::start(&settings).await?;
    warn_about_the_state_dir(&settings);
    let mut daemon = Daemon::new(settings, inhibitor, &writer, agent);
    daemon.spawn_forecast();
    daemon.spawn_cluster_follower();
    daemon.spawn_reboot_follower(&bus_address);
    // The boot restore runs beside the lock, never before it.
    daemon.spawn_restore(Trigger::Boot);
    daemon.run(&bus_address, &mut signals).await;
    daemon.abort_restore("the daemon stops");
    daemon.release();
    daemon.out.metrics.lock_held(false);
    // The lock is gone; what is still to be written (the boot record's stop, the metrics) gets
    // a moment before the process, and the writer thread with it, ends.
    if !writer
        .settled(tokio::time::Instant::now() + EXIT_WRITE_WAIT)
        .await
    {
        tracing::warn!(
            "the state files of node {node} were not all written within {} s of the stop",
            EXIT_WRITE_WAIT.as_secs()
        );
    }
    tracing::info!("stopped (node {node})");
    Ok(())
}

impl Daemon {
    /// The daemon at start: no phase yet, nothing running, the status saying so.
    fn new(
        settings: Arc<Settings>,
        inhibitor: Inhibitor,
        writer: &Writer,
        agent: Option<agent::Agent>,
    ) -> Daemon {
        let node = &settings.node_name;
        let status = Status::default();
        status.set(format!(
            "starting: taking the logind inhibitor for node {node}"
        ));
        let metrics = Metrics::start(
            settings.metrics.textfile.clone(),
            node,
            &settings.state_dir,
            writer.clone(),
        );
        Daemon {
            state: State::starting_with(Reboots::new(
                settings.reboot.enabled(),
                agent.is_some(),
                settings.fleet.hold_max,
            )),
            out: Out { status, metrics },
            inhibitor,
            boot: Boot {
                log: BootLog::with_writer(writer.clone()),
                opened: false,
                ready_sent: false,
            },
            tasks: Tasks {
                work: work::Slot::Empty,
                restore: None,
            },
            watches: Watches {
                quiet: watch::Sender::new(false),
                idle: watch::Sender::new(true),
                time_limit: watch::Sender::new(None),
                forecast: watch::Sender::new(None),
            },
            scheduled: scheduled::Tracked::open(&settings),
            gate: gate::Gate::new(settings.fleet.gate),
            reboot: reboot::Reboot::new(settings.reboot.enabled(), agent),
            access: Access::new(settings),
        }
    }

    /// The standing forecast, as a task beside the loop, when `[daemon] forecast_interval` is set.
    fn spawn_forecast(&self) {
        let Some(interval) = self.access.settings.daemon.forecast_interval else {
            return;
        };
        tracing::info!(
            "forecasting a drain of node {} every {}",
            self.access.settings.node_name,
            crate::config::format_duration(interval)
        );
        tokio::spawn(crate::daemon::forecast::run_every(
            self.access.clone(),
            interval,
            self.out.metrics.clone(),
            self.watches.idle.subscribe(),
            self.watches.time_limit.subscribe(),
            self.gate.forecast_blocked.clone(),
            self.watches.forecast.clone(),
        ));
    }
}

/// Says once at start when the state directory cannot keep the boot record.
fn warn_about_the_state_dir(settings: &Settings) {
    let node = &settings.node_name;
    let dir = settings.state_dir.display();
    if let Err(e) = crate::state_file::check_writable(&settings.state_dir) {
        tracing::warn!(
            "state dir {dir} is not writable ({e}); the last report and the boot record of node \
             {node} will not be kept"
        );
    } else if crate::state_file::is_volatile(&settings.state_dir) {
        tracing::warn!(
            "state dir {dir} is in memory (tmpfs): the boot record of node {node} is lost at \
             every reboot, so the next boot cannot tell whether this one ended with a drain"
        );
    }
}

impl Daemon {
    /// The loop: one event at a time, until the phase machine says stop.
    async fn run(&mut self, bus_address: &str, signals: &mut Signals) {
        let mut connection: Option<Connection> = None;
        while !self.state.done() {
            let Some(event) = self.next_event(bus_address, signals, &mut connection).await else {
                continue;
            };
            let logind = connection.as_ref().map(|c| &c.logind);
            let connected = matches!(event, Event::Connected { .. });
            self.apply(event, logind).await;
            self.answer_agent();
            if connected {
                self.ready_once(logind).await;
            }
        }
    }

    /// What happens next, as the table's event: a signal, logind's schedule file, a timer of the
    /// table's, the gate's verdict, a work's end, what a follower saw, the update agent's
    /// request, a connection made or logind's signal on it. `None`: what came needs no step of
    /// the table (a lost connection, a lock the gate's ask took).
    async fn next_event(
        &mut self,
        bus_address: &str,
        signals: &mut Signals,
        connection: &mut Option<Connection>,
    ) -> Option<Event> {
        let (at, timed) = self
            .timer()
            .map_or((None, Event::Due), |(at, e)| (Some(at), e));
        Some(tokio::select! {
            asked = signals.recv() => return self.asked(asked),
            // Read once logind was: a schedule there at start waits for the first connection.
            read = scheduled::next_schedule(&mut self.scheduled), if self.state.phase != Phase::Starting => {
                return self.schedule_read(read);
            }
            _ = sleep_until(at), if at.is_some() => timed,
            _ = self.gate.verdict.changed(), if self.gate.enabled() => self.gate_verdict(),
            _ = sleep_until(self.gate.pass_until), if self.gate.pass_until.is_some() => {
                self.pass_expired()
            }
            // The end of an ask the gate's effect started: the lock it asked for is held.
            (why, taken) = gate::taking(&mut self.gate.asking) => {
                self.gate_taken(why, taken);
                return None;
            }
            ended = self.tasks.work.end() => ended,
            seen = reboot::next_seen(&mut self.reboot.seen), if self.reboot.enabled() => {
                Event::Seen(seen)
            }
            question = agent::next_question(&mut self.reboot.agent) => self.agent_asked(question),
            mut made = connect(bus_address, &self.access.settings), if connection.is_none() => {
                let event = self.connected(&mut made);
                *connection = Some(made);
                event
            }
            signal = next_signal(connection), if connection.is_some() => match signal {
                Ok(ShutdownSignal::Started { kind }) => Event::Announced {
                    kind,
                    locked: self.inhibitor.is_held(),
                },
                Ok(ShutdownSignal::Cancelled) => Event::Cancelled,
                Err(e) => {
                    self.lost(&e);
                    *connection = None;
                    return None;
                }
            },
        })
    }

    /// What a signal asks of the table, if anything.
    fn asked(&mut self, asked: Asked) -> Option<Event> {
        match asked {
            Asked::Stop(signal) => Some(Event::StopAsked { signal }),
            Asked::Pass => self.pass_gate(),
            Asked::Hangup => {
                tracing::info!(
                    "sighup: ignored; node {} keeps its configuration until the unit restarts \
                     (logind's maximum is read again at every shutdown)",
                    self.access.settings.node_name
                );
                None
            }
        }
    }

    /// A connection is made: the lock it took is held (an old one from before a reconnect is
    /// closed after), the boot record opened once, READY=1 sent once. The event to apply.
    fn connected(&mut self, made: &mut Connection) -> Event {
        if let Some(lock) = made.lock.take() {
            // Only now is an old lock (from before a reconnect) released.
            self.inhibitor.hold(lock);
        }
        self.reboot.logind.send_replace(Some(made.logind.clone()));
        self.watches
            .time_limit
            .send_replace(Some(made.limit.clone()));
        self.out
            .metrics
            .time_limit(made.limit.drain, made.limit.logind_max);
        self.out
            .status
            .set_degraded(made.limit.warning.as_ref().map(|w| {
            format!(
                "logind allows {}, the drain timeout needs {} (drains cut to {}); see the journal",
                crate::time_limit::seconds(w.logind_max),
                crate::time_limit::seconds(w.needed),
                crate::time_limit::seconds(w.clamped_to)
            )
        }));
        // The previous boot is judged (and this boot's record started) before READY=1.
        if !self.boot.opened {
            self.boot.opened = true;
            self.open_boot_log(made.under_way.is_some());
        }
        Event::Connected {
            under_way: made.under_way,
            locked: self.inhibitor.is_held(),
        }
    }

    /// The bus connection is gone; the lock (if held) stays: logind keeps it.
    fn lost(&self, e: &LogindError) {
        self.reboot.logind.send_replace(None);
        let node = &self.access.settings.node_name;
        let what = match &self.state.phase {
            // The lock's fd does not depend on the bus: the drain goes on.
            Phase::Draining(_) => format!(" during the drain of node {node}; the drain goes on;"),
            _ => ";".to_owned(),
        };
        let held = if self.inhibitor.is_held() {
            "the inhibitor is kept until a new one is held"
        } else {
            "no inhibitor is held"
        };
        tracing::warn!("{e}{what} reconnecting to logind for node {node} ({held})");
        self.out
            .status
            .set_degraded(Some(format!("logind unreachable: {e}")));
    }

    /// `SayCancelled`: logind cancelled the shutdown of `kind`, `during` its drain or after.
    fn say_cancelled(&self, kind: ShutdownKind, during: During) {
        let node = &self.access.settings.node_name;
        match during {
            During::Drain => tracing::info!(
                "logind cancelled the {} during the drain of node {node}; stopping the drain and \
                 restoring the node",
                kind.noun()
            ),
            During::AfterDrain => tracing::info!(
                "logind cancelled the {}; restoring node {node} and taking the inhibitor again",
                kind.noun()
            ),
            During::Waiting => {}
        }
    }

    /// `SayStop`: the daemon stops on `signal`, `during` what.
    fn say_stop(&self, signal: StopSignal, during: During) {
        let node = &self.access.settings.node_name;
        let name = signal.name();
        match during {
            During::Drain => tracing::warn!(
                "{name} during the drain of node {node}; stopping the drain and releasing the \
                 inhibitor (the node stays cordoned until it is restored)"
            ),
            During::AfterDrain => {
                tracing::info!("{name} after the drain of node {node}; stopping")
            }
            During::Waiting => tracing::info!(
                "{name} while waiting for a shutdown; releasing the inhibitor for node {node}"
            ),
        }
    }
}

/// Sleeps until `at` (never without one).
async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The next signal on the connection (never resolves without one).
async fn next_signal(connection: &mut Option<Connection>) -> Result<ShutdownSignal, LogindError> {
    match connection {
        Some(c) => c.signals.next().await,
        None => std::future::pending().await,
    }
}

/// Connects to logind and sets the connection up, retrying with a backoff until it works.
async fn connect(address: &str, settings: &Settings) -> Connection {
    let mut retry = Backoff::between(RETRY_FIRST, RETRY_MAX);
    loop {
        let logind = Logind::connect_with_backoff(address).await;
        match set_up(logind, settings).await {
            Ok(connection) => return connection,
            Err(e) => {
                let wait = retry.next_pause();
                tracing::warn!(
                    "{e}; trying logind again in {} ms for node {}",
                    wait.as_millis(),
                    settings.node_name
                );
                tokio::time::sleep(wait).await;
            }
        }
    }
}

/// One connection's setup: budget, subscribe, read the shutdown state, lock unless one is
/// under way.
async fn set_up(logind: Logind, settings: &Settings) -> Result<Connection, LogindError> {
    let node = &settings.node_name;
    let limit = logind.time_limit(settings).await?;
    if let Some(warning) = &limit.warning {
        tracing::error!("{warning}");
    }
    // Subscribe first: a shutdown that starts between the lock and the subscription would
    // otherwise hold the node's shutdown for logind's whole timer.
    let signals = logind.subscribe().await?;
    // Read before asking for the lock: logind refuses delay locks while a shutdown is under
    // way, and a daemon that kept asking would never drain.
    let mut under_way = logind.shutdown_under_way().await?;
    let mut lock = None;
    if under_way.is_none() {
        match logind.take_lock(node).await {
            Ok(taken) => lock = Some(taken),
            Err(e @ LogindError::ShutdownUnderWay { .. }) => {
                // The shutdown started between the read and the call: the same as a shutdown
                // under way at start, never "logind unavailable".
                tracing::warn!("{e}; the shutdown started after it was checked");
                under_way = Some(
                    logind
                        .shutdown_under_way()
                        .await?
                        .unwrap_or(ShutdownKind::Unknown),
                );
            }
            Err(e) => return Err(e),
        }
    }
    Ok(Connection {
        logind,
        signals,
        limit,
        under_way,
        lock,
    })
}
