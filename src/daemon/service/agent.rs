//! The update agent's FleetLock requests (`[fleetlock]`, `crate::reboot::server`), as the loop
//! holds them: the server started with the daemon, each request passed on to the reboot
//! follower as a trigger (pre-reboot: a need; steady-state: none), and answered from the phase
//! table (`Phase::answer_agent`). The reboot a pre-reboot starts ends drained and handed over:
//! zincati finalizes its update and reboots through systemd, and logind's announcement then
//! finds the node drained.

use std::path::PathBuf;

use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use super::Daemon;
use crate::config::Settings;
use crate::daemon::phase::{AgentFacts, Event};
use crate::reboot::server::{self, Identity, Limits, Question, Server, StartError};
use crate::reboot::userns;
use crate::reboot::zincati_id::{self, MACHINE_ID_PATH, MachineIdError};

/// Names a file to read the machine id from instead of `/etc/machine-id`. Only the tests set it.
pub const MACHINE_ID_FILE_ENV: &str = "KUBE_SHUTDOWN_DRAIN_MACHINE_ID_FILE";

/// Names a file to read the daemon's uid map from instead of `/proc/self/uid_map` (the tests:
/// the unit's `PrivateUsers=` without the unit).
pub const UID_MAP_FILE_ENV: &str = "KUBE_SHUTDOWN_DRAIN_UID_MAP_FILE";

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

/// The server's side the loop holds: its questions, and the one being answered.
pub(crate) struct Agent {
    questions: mpsc::Receiver<Question>,
    /// The request the loop's turn applies, whose answer is sent once the table moved.
    pub(super) answering: Option<(AgentFacts, Question)>,
}

/// Starts the FleetLock server with `[fleetlock]`. Nothing without `[fleetlock]`.
pub(crate) async fn start(settings: &Settings) -> Result<Option<Agent>, AgentError> {
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
    Ok(Some(Agent {
        questions,
        answering: None,
    }))
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
    /// A request of the agent: the event for the table, with the facts its answer is made of;
    /// the question waits for the table's turn ([`Daemon::answer_agent`]). Two hops in all:
    /// the server's connection to this loop, and the answer back.
    pub(super) fn agent_asked(&mut self, question: Question) -> Event {
        let restoring = self
            .tasks
            .restore
            .as_ref()
            .is_some_and(|r| !r.is_finished());
        let facts = AgentFacts {
            operation: question.request.operation,
            slot_wait: *self.reboot.slot_wait.borrow(),
            restoring,
            connected: self.reboot.logind.borrow().is_some(),
        };
        if let Some(agent) = &mut self.reboot.agent {
            agent.answering = Some((facts, question));
        }
        Event::AgentAsked(facts)
    }

    /// After the table's turn: the answer to the request it applied, from the state it moved to.
    pub(super) fn answer_agent(&mut self) {
        let Some((facts, question)) = self.reboot.agent.as_mut().and_then(|a| a.answering.take())
        else {
            return;
        };
        let node = &self.access.settings.node_name;
        let answer = self.state.answer_agent(facts, node, Instant::now());
        let _ = question.answer.send(answer);
    }
}

/// The running reboot's wait for a slot, for the answers: true while it waits.
pub(super) type SlotWait = watch::Sender<bool>;
