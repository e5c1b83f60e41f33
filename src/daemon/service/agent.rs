//! The update agent's FleetLock requests (`[fleetlock]`, `crate::reboot::server`), as the loop
//! holds them: the server started with the daemon, each request passed on to the reboot
//! follower as a trigger (pre-reboot: a need; steady-state: none), and answered from the phase
//! table (`Phase::answer_agent`). The reboot a pre-reboot starts ends drained and handed over:
//! zincati finalizes its update and reboots through systemd, and logind's announcement then
//! finds the node drained.

use std::path::PathBuf;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::Daemon;
use crate::config::Settings;
use crate::daemon::phase::AgentAsk;
use crate::daemon::reboot::AGENT_ASKS_WITHIN;
use crate::reboot::fleetlock::Operation;
use crate::reboot::server::{self, Answer, Identity, Limits, Question, Server, StartError};
use crate::reboot::userns;
use crate::reboot::zincati_id::{self, MACHINE_ID_PATH, MachineIdError};

/// Names a file to read the machine id from instead of `/etc/machine-id`. Only the tests set it.
pub const MACHINE_ID_FILE_ENV: &str = "KUBE_SHUTDOWN_DRAIN_MACHINE_ID_FILE";

/// Names a file to read the daemon's uid map from instead of `/proc/self/uid_map` (the tests:
/// the unit's `PrivateUsers=` without the unit).
pub const UID_MAP_FILE_ENV: &str = "KUBE_SHUTDOWN_DRAIN_UID_MAP_FILE";

/// The longest the node stays drained, holding its slot, for the update agent's reboot once the
/// drain for it ended. The agent's own pace sets the hand-over: each pre-reboot keeps its need
/// standing (`crate::daemon::reboot::AGENT_ASKS_WITHIN`, four of zincati's ticks), so a
/// steady-state or a silence ends it; zincati that postpones its reboot while a user is logged
/// in (up to 10 times 60 s, asking again each time) keeps it. Past this the node is restored
/// whatever the agent asks, and told `reboot_overdue`.
pub const AGENT_HOLD_MAX: Duration = Duration::from_secs(2 * 3600);

/// The shortest hand-over, whatever `hold_max` leaves: two of zincati's 5-minute ticks (its 200
/// at the next one, its reboot in it, another try in the one after).
pub const AGENT_HOLD_MIN: Duration = Duration::from_secs(600);

/// When the hand-over to the update agent ends, its drain having ended at `drained_at`:
/// [`AGENT_HOLD_MAX`] later, but with a drain slot taken at `slot_since` no later than half of
/// `[fleet] hold_max` after the take (the other half is the reboot's and the next boot's
/// restore, before the other nodes may judge the slot stale); never sooner than
/// [`AGENT_HOLD_MIN`] after the drain. Pure.
pub fn handover_ends(
    drained_at: Instant,
    slot_since: Option<Instant>,
    hold_max: Duration,
) -> Instant {
    let most = drained_at + AGENT_HOLD_MAX;
    let by_slot = slot_since.map_or(most, |taken| taken + hold_max / 2);
    most.min(by_slot).max(drained_at + AGENT_HOLD_MIN)
}

/// Why the FleetLock server could not start: the daemon does not start either (an admin who set
/// `[fleetlock]` would otherwise believe zincati's reboots wait for a drain).
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("[fleetlock] of node {node}: {source}")]
    Start { node: String, source: StartError },
    #[error("[fleetlock] of node {node}: zincati's id for this machine: {source}")]
    MachineId {
        node: String,
        source: MachineIdError,
    },
}

impl AgentError {
    /// An error of the system's or the unit's configuration, which a restart cannot fix (the
    /// agent's user, the namespace that does not map it): the daemon exits 2.
    pub fn is_config(&self) -> bool {
        matches!(self, AgentError::Start { source, .. } if source.is_config())
    }
}

/// The server's side the loop holds.
pub(crate) struct Agent {
    questions: mpsc::Receiver<Question>,
    /// Each request, to the follower (its agent trigger).
    asks: mpsc::UnboundedSender<Operation>,
    /// When the agent last asked pre-reboot (none since a steady-state).
    asked: Option<Instant>,
}

impl Agent {
    /// Whether the agent's pre-reboot stands (asked within [`AGENT_ASKS_WITHIN`]).
    pub(super) fn wants_reboot(&self) -> bool {
        self.asked
            .is_some_and(|at| at.elapsed() < AGENT_ASKS_WITHIN)
    }
}

/// A started server: the loop's side, and the follower's receiver of the requests.
pub(crate) type Started = (Agent, mpsc::UnboundedReceiver<Operation>);

/// Starts the FleetLock server with `[fleetlock]`. Nothing without `[fleetlock]`.
pub(crate) async fn start(settings: &Settings) -> Result<Option<Started>, AgentError> {
    let Some(fleetlock) = &settings.fleetlock else {
        return Ok(None);
    };
    let node = settings.node_name.clone();
    let machine_id = std::env::var_os(MACHINE_ID_FILE_ENV)
        .map_or_else(|| PathBuf::from(MACHINE_ID_PATH), PathBuf::from);
    let node_id = zincati_id::read(&machine_id).map_err(|source| AgentError::MachineId {
        node: node.clone(),
        source,
    })?;
    let start = |source| AgentError::Start {
        node: node.clone(),
        source,
    };
    let agent_uid = server::agent_uid(&fleetlock.agent_user).map_err(start)?;
    // The socket table shows the agent's uid only where this process's namespace maps it.
    let uid_map = std::env::var_os(UID_MAP_FILE_ENV)
        .map_or_else(|| PathBuf::from(userns::UID_MAP), PathBuf::from);
    userns::judge_self(&uid_map, &fleetlock.agent_user, agent_uid)
        .map_err(|e| start(StartError::Unseen(e)))?;
    let identity = Identity {
        node_id: node_id.clone(),
        agent_uid,
        agent_user: fleetlock.agent_user.clone(),
    };
    let (questions_tx, questions) = mpsc::channel(1);
    let bound = Server::bind(fleetlock.listen, identity, Limits::default(), questions_tx)
        .await
        .map_err(start)?;
    tracing::info!(
        node = %node,
        "answering FleetLock requests of {} (user {}) for node {node} (zincati id {node_id}) on \
         http://{}/",
        fleetlock.agent_user,
        fleetlock.agent_user,
        fleetlock.listen
    );
    tokio::spawn(bound.run());
    let (asks, follower) = mpsc::unbounded_channel();
    Ok(Some((
        Agent {
            questions,
            asks,
            asked: None,
        },
        follower,
    )))
}

/// The next request, once one comes; never without a server.
pub(super) async fn next_question(agent: &mut Option<Agent>) -> Question {
    match agent {
        Some(a) => match a.questions.recv().await {
            Some(q) => q,
            None => std::future::pending().await,
        },
        None => std::future::pending().await,
    }
}

impl Daemon {
    /// Answers one request from the table, and passes it on to the follower unless the daemon
    /// cannot act on it now (503: not connected to logind, which would neither announce the
    /// agent's reboot nor wait for a drain).
    pub(super) fn answer_agent(&mut self, question: Question) {
        let operation = question.request.operation;
        let slot_wait = *self.reboot.slot_wait.borrow();
        let connected = self.reboot.logind.borrow().is_some();
        let restoring = self
            .tasks
            .restore
            .as_ref()
            .is_some_and(|r| !r.is_finished());
        let verdict = self.reboot.verdict.borrow().clone();
        let answer = self.state.phase.answer_agent(&AgentAsk {
            operation,
            node: &self.access.settings.node_name,
            ask: verdict.ask,
            why: &verdict.why,
            keys: &verdict.keys,
            slot_wait,
            by_agent: self.reboot.by_agent,
            restoring,
            setback: verdict.setback,
            connected,
        });
        let Some(agent) = &mut self.reboot.agent else {
            return;
        };
        if !matches!(answer, Answer::Unavailable(_)) {
            agent.asked = match operation {
                Operation::PreReboot => Some(Instant::now()),
                Operation::SteadyState => None,
            };
            let _ = agent.asks.send(operation);
        }
        let _ = question.answer.send(answer);
    }
}

/// The running reboot's wait for a slot, for the answers: true while it waits.
pub(super) type SlotWait = watch::Sender<bool>;
