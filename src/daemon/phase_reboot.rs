//! The reboots the node asks for (`[reboot]`), as a part of the phase table: the follower's
//! verdicts (`Reboot`), the end of the daemon's own reboot (`RebootEnded`), and every event
//! while it runs (`Rebooting`).
//!
//! | from | event | to | effects |
//! |---|---|---|---|
//! | Waiting | Reboot(Go) | Rebooting (not asked) | StartReboot |
//! | Waiting | Reboot(NotNeeded, Waits) | Waiting | ShowWaiting (with what the reboot waits for) |
//! | Starting, Scheduled, Early, Ready, Draining, Released | Reboot(any) | unchanged | (a schedule or logind's window owns the node; at the first connection a standing Go starts the reboot, [`super::State::on`]) |
//! | Rebooting | Reboot(NotNeeded) | Waiting | AbortReboot, ForgetShutdown + restore, ShowWaiting |
//! | Rebooting | Reboot(Waits, Go) | unchanged | (the holds are looked at again before the reboot) |
//! | Rebooting, not asked | RebootEnded, asked | Rebooting, asked | (logind announces the reboot; its timer, `Overdue`, runs) |
//! | Rebooting, not asked | RebootEnded, gave up | Waiting | ForgetShutdown + restore, ShowWaiting (then RebootLater after its setback: the need stands) |
//! | Rebooting, asked | Overdue (no announcement within the window of a fired schedule, or the agent's hand-over) | Waiting | ForgetShutdown + restore, ShowWaiting (then RebootLater after `Overdue`) |
//! | Rebooting | Announced, or Connected with one under way | Draining | AbortReboot, Quiet(false), StartDrain |
//! | Rebooting | Connected with none under way, Cancelled, Scheduled, Unscheduled | unchanged | |
//! | Rebooting | Ended, Due; Overdue before logind was asked | refused | |
//! | any but Rebooting (not asked) | RebootEnded | refused | (no reboot of ours runs) |
//! | any but Stopped | Seen, AgentAsked, Tick | unchanged | (the verdict's: `phase_verdict.rs`; a changed verdict is the table's own `Reboot` event) |
//!
//! Back in Waiting from any other phase while the verdict is Go, [`super::State::on`] adds
//! `RebootLater` with what ended it ([`Setback`]: the reboot's own, `Overdue`, else `Cancelled`):
//! the verdict says Go again after a pause, and only then does a reboot start.
//! A stop in Rebooting stops the reboot first (`AbortReboot`, then as from Waiting); the
//! node's prepare stays until the next start, whose restore tells the own reboot's marker (its
//! reason, `crate::daemon::reboot::OWN_REBOOT_WHY`) from a shutdown's and undoes it.
//!
//! The update agent's FleetLock requests are answered from the state the request moved the
//! table to ([`Phase::answer_agent`], through `State::answer_agent`), in the loop's same turn:
//!
//! | request | phase | answer |
//! |---|---|---|
//! | pre-reboot | Rebooting, asked, by the agent, the verdict Go | 200: drained, its slot held, inside a window, not held |
//! | pre-reboot | Rebooting, asked, by the agent, the verdict Waits | 409 as for Waiting below (the table restores the node when the agent's time is up) |
//! | pre-reboot | Rebooting, not asked | 409 `failed_lock_semaphore_full` while it waits for a slot, else `drain_in_progress` |
//! | pre-reboot | Waiting, the verdict Waits | 409 `outside_maintenance_window`, `unready_nodes` or `alerts_firing` when every hold is of that kind, else `reboot_held`; in the pause after a reboot that ended without one, what ended it: `drain_incomplete`, `reboot_held`, `reboot_overdue`, `reboot_cancelled`, `reboot_failed` |
//! | pre-reboot | Waiting, any other verdict | 409 `reboot_pending` (the need has not stood yet, or its holds are being looked at) |
//! | pre-reboot | a shutdown scheduled or under way, or logind asked by the daemon | 409 `drain_in_progress` |
//! | steady-state | Waiting, no restore running | 200: restored, no slot held |
//! | steady-state | Waiting with a restore running, Rebooting | 409 `restore_in_progress` |
//! | steady-state | a shutdown scheduled or under way | 409 `drain_in_progress` |
//! | either | Starting, Stopped, or logind not connected | 503 `no_answer` |

use tokio::time::Instant;

use super::{Ask, Effect, Event, Part, Phase, Undo};
use crate::reboot::fleetlock::{Kind, Operation};
use crate::reboot::holds::Key;
use crate::reboot::server::Answer;

/// Why a reboot the node asked for ended without one. The pause before the next try follows it
/// (`RebootLater`), and the update agent is told it meanwhile, as its own `kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setback {
    /// The drain did not complete within its timeout.
    DrainIncomplete,
    /// A hold was found at the look before or after the drain (an annotation, the pause, a
    /// blocking pod, a window that closed).
    Held,
    /// The reboot did not come in its time: logind announced none after it was asked, or the
    /// update agent did not reboot within its hand-over.
    Overdue,
    /// The shutdown was cancelled (`shutdown -c`, logind's `PrepareForShutdown(false)`).
    Cancelled,
    /// Something failed: the slots or the API could not be read, the prepare failed, logind
    /// refused or was not reachable, another program blocks shutdowns.
    Failed,
}

impl Setback {
    /// The FleetLock `kind` the update agent is told during the pause after it.
    pub fn kind(self) -> Kind {
        match self {
            Setback::DrainIncomplete => Kind::DrainIncomplete,
            Setback::Held => Kind::Held,
            Setback::Overdue => Kind::Overdue,
            Setback::Cancelled => Kind::Cancelled,
            Setback::Failed => Kind::Failed,
        }
    }

    /// What happened, for the journal, the status line and the agent.
    pub fn says(self) -> &'static str {
        match self {
            Setback::DrainIncomplete => "its drain did not complete",
            Setback::Held => "a hold came before its reboot",
            Setback::Overdue => "the reboot did not come in its time",
            Setback::Cancelled => "its shutdown was cancelled",
            Setback::Failed => "a step of it failed, as the journal says",
        }
    }
}

/// How the daemon's own reboot ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RebootEnd {
    /// logind was asked to reboot, or the node is drained and handed over to the update agent;
    /// `slot_since`: when it took its drain slot (the agent's hand-over ends by `hold_max`).
    Asked { slot_since: Option<Instant> },
    /// It gave up, and said why.
    GaveUp(Setback),
}

/// What the loop knows of the world when the update agent asks (`[fleetlock]`): the request,
/// and the facts its answer is made of besides the table's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AgentFacts {
    pub operation: Operation,
    /// The running reboot waits for a drain slot.
    pub slot_wait: bool,
    /// A restore runs (with `[fleet] release_delay`, its slot is kept until it ends).
    pub restoring: bool,
    /// The daemon is connected to logind.
    pub connected: bool,
}

/// What the loop knows, besides the phase, when the update agent asks (`[fleetlock]`).
#[derive(Debug, Clone, Copy)]
pub struct AgentAsk<'a> {
    pub operation: Operation,
    pub node: &'a str,
    /// The follower's last verdict: what it asks, why, and what holds the node when it waits
    /// for the holds (none when it waits out the pause after a reboot that ended without one).
    pub ask: Ask,
    pub why: &'a str,
    pub keys: &'a [Key],
    /// The running reboot waits for a drain slot.
    pub slot_wait: bool,
    /// The reboot of `Rebooting` is the agent's: it ends drained and handed over, not with
    /// logind's `Reboot`.
    pub by_agent: bool,
    /// A restore runs (with `[fleet] release_delay`, its slot is kept until it ends).
    pub restoring: bool,
    /// While the verdict waits out the pause after a reboot that ended without one: why it
    /// ended.
    pub setback: Option<Setback>,
    /// The daemon is connected to logind: without it no reboot could be seen, nor delayed for
    /// a drain.
    pub connected: bool,
}

impl Phase {
    /// The answer to the update agent's FleetLock request (`crate::reboot::server`), as the
    /// module doc's last table says; it changes nothing: the request itself was the table's
    /// `AgentAsked` event (pre-reboot: a need; steady-state: none), applied before.
    pub fn answer_agent(&self, a: &AgentAsk<'_>) -> Answer {
        if matches!(self, Phase::Starting | Phase::Stopped) || !a.connected {
            return Answer::Unavailable(format!(
                "the daemon of node {} is not connected to logind now, so a reboot could be \
                 neither seen nor held for a drain; ask again later",
                a.node
            ));
        }
        match a.operation {
            Operation::SteadyState => self.answer_steady_state(a),
            Operation::PreReboot => self.answer_pre_reboot(a),
        }
    }

    /// The answer to a steady-state: 200 once restored with no slot held.
    fn answer_steady_state(&self, a: &AgentAsk<'_>) -> Answer {
        let node = a.node;
        match self {
            Phase::Rebooting { .. } if a.by_agent => refused(
                Kind::Restoring,
                format!("the reboot of node {node} is called off and the node restored; ask again"),
            ),
            Phase::Rebooting { .. } => refused(
                Kind::Draining,
                format!("node {node} reboots as its own trigger asks ([reboot]); ask again"),
            ),
            Phase::Waiting if a.restoring => refused(
                Kind::Restoring,
                format!(
                    "node {node} is being restored; its drain slot goes back once the cluster has \
                     settled (release_delay, then the disruption budgets of the pods it evicted \
                     healthy again, at most settle_max; `kube-shutdown-drain status` names them); \
                     ask again"
                ),
            ),
            Phase::Waiting => Answer::Released,
            _ => shutdown_under_way(node),
        }
    }

    /// The answer to a pre-reboot: 200 once drained for the agent's reboot, else what it waits
    /// for.
    fn answer_pre_reboot(&self, a: &AgentAsk<'_>) -> Answer {
        let node = a.node;
        match self {
            Phase::Rebooting { asked: true } if a.by_agent => match a.ask {
                Ask::Go => Answer::Granted,
                _ => waits(a).unwrap_or_else(|| shutdown_under_way(node)),
            },
            Phase::Rebooting { asked: false } if a.slot_wait => refused(
                Kind::SemaphoreFull,
                format!("node {node} waits for a drain slot: every slot of its group is held"),
            ),
            Phase::Rebooting { asked: false } => refused(
                Kind::Draining,
                format!("node {node} is draining for its reboot; ask again"),
            ),
            Phase::Waiting => waits(a).unwrap_or_else(|| {
                refused(
                    Kind::Pending,
                    format!(
                        "the reboot of node {node} is asked for: its holds are judged, and its \
                         drain starts when they allow; ask again"
                    ),
                )
            }),
            _ => shutdown_under_way(node),
        }
    }
}

/// A refusal of `kind`, saying `why`.
fn refused(kind: Kind, why: String) -> Answer {
    Answer::Refused { kind, why }
}

/// The refusal while a shutdown of `node` is scheduled or under way.
fn shutdown_under_way(node: &str) -> Answer {
    refused(
        Kind::Draining,
        format!("a shutdown of node {node} is scheduled or under way; ask again"),
    )
}

/// The FleetLock kind of one hold: a window, the group's unready nodes and the alerts have
/// their own, every other reason is `reboot_held`.
fn hold_kind(key: Key) -> Kind {
    match key {
        Key::OutsideWindow => Kind::OutsideWindow,
        Key::UnreadyNodes => Kind::UnreadyNodes,
        Key::AlertsFiring => Kind::AlertsFiring,
        _ => Kind::Held,
    }
}

/// What the verdict waits for, as the agent is told: the holds' kind (the one every reason
/// shares, else `reboot_held`), or what ended the last reboot during the pause after it; `None`
/// unless it waits for either.
fn waits(a: &AgentAsk<'_>) -> Option<Answer> {
    let why = a.why.to_owned();
    match (a.ask, a.keys.first(), a.setback) {
        (Ask::Waits, Some(first), _) => {
            let kind = hold_kind(*first);
            let shared = a.keys.iter().all(|k| hold_kind(*k) == kind);
            Some(refused(if shared { kind } else { Kind::Held }, why))
        }
        (Ask::Waits, None, Some(setback)) => Some(refused(setback.kind(), why)),
        _ => None,
    }
}

impl Phase {
    /// The reboot part of the table: its own events in every phase, every event in Rebooting
    /// but the stops (which the rest of the table says).
    pub(super) fn on_reboot(&self, event: Event) -> Part {
        use Effect::*;
        let restored = |first: &[Effect]| {
            let mut effects = first.to_vec();
            effects.extend([ForgetShutdown { undo: Undo::Heard }, ShowWaiting]);
            Part::Step(Phase::Waiting, effects)
        };
        const RUNS: Phase = Phase::Rebooting { asked: false };
        const ASKED: Phase = Phase::Rebooting { asked: true };
        let announced_now = matches!(event, Event::Announced { .. });
        match (self, event) {
            (Phase::Stopped, Event::Reboot(_) | Event::RebootEnded(_)) => Part::Refused,
            (Phase::Stopped, Event::Seen(_) | Event::AgentAsked(_) | Event::Tick) => Part::Refused,
            (_, Event::Seen(_) | Event::AgentAsked(_) | Event::Tick) => {
                Part::Step(self.clone(), vec![])
            }
            (Phase::Waiting, Event::Reboot(Ask::Go)) => Part::Step(RUNS, vec![StartReboot]),
            (Phase::Rebooting { .. }, Event::Reboot(Ask::NotNeeded)) => restored(&[AbortReboot]),
            (Phase::Waiting, Event::Reboot(_)) => Part::Step(Phase::Waiting, vec![ShowWaiting]),
            (_, Event::Reboot(_)) => Part::Step(self.clone(), vec![]),
            (&RUNS, Event::RebootEnded(RebootEnd::Asked { .. })) => Part::Step(ASKED, vec![]),
            (&RUNS, Event::RebootEnded(RebootEnd::GaveUp(_))) | (&ASKED, Event::Overdue) => {
                restored(&[])
            }
            (_, Event::RebootEnded(_)) => Part::Refused,
            (Phase::Rebooting { .. }, Event::Announced { kind, locked })
            | (
                Phase::Rebooting { .. },
                Event::Connected {
                    under_way: Some(kind),
                    locked,
                },
            ) => {
                let draining = Phase::Draining(super::Shutdown {
                    kind,
                    guarded: locked,
                });
                let effects = vec![
                    AbortReboot,
                    Quiet(false),
                    StartDrain {
                        kind,
                        announced_now,
                    },
                ];
                Part::Step(draining, effects)
            }
            (
                Phase::Rebooting { .. },
                Event::Connected { .. }
                | Event::Cancelled
                | Event::Scheduled { .. }
                | Event::Unscheduled { .. },
            ) => Part::Step(self.clone(), vec![]),
            (Phase::Rebooting { .. }, Event::Ended { .. } | Event::Due | Event::Overdue) => {
                Part::Refused
            }
            _ => Part::NotMine,
        }
    }
}

#[cfg(test)]
#[path = "phase_reboot_tests.rs"]
mod tests;
