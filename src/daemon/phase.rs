//! The daemon's phases and the transitions between them, as a pure type: which event is allowed
//! in which phase, where it leads, and what the daemon must do on the way ([`Effect`]s, in
//! order). The service loop (`service/`) only does I/O: it turns logind's signals, the drain's
//! end and the stop signals into [`Event`]s and carries out the effects; every phase change
//! updates the lock, the boot record, the restore task, `quiet` and the status in one place.
//!
//! | from | event | to | effects |
//! |---|---|---|---|
//! | Starting, Waiting | Connected, none under way | Waiting | Quiet, ForgetShutdown (undo if one is recorded: it was cancelled while the daemon was away), ShowWaiting |
//! | Starting, Waiting, Released | Connected, a shutdown under way | Draining (no lock unless kept from before) | StartDrain (counted from its recorded start) |
//! | Waiting | Announced | Draining | StartDrain (counted from now) |
//! | Draining | Ended | Released | RecordEnd, ReleaseLock, SayOutcome |
//! | Draining | Cancelled (heard), or Connected with none under way (missed) | Waiting | SayCancelled (heard), AbortDrain, ForgetShutdown + restore, TakeLock if none is held, ShowWaiting |
//! | Released | Cancelled (heard), or Connected with none under way (missed) | Waiting | SayCancelled (heard), ForgetShutdown + restore, TakeLock (unless one is held), ShowWaiting |
//! | Waiting | Cancelled | Waiting | ForgetShutdown (nothing to undo) |
//! | Draining | Connected, a shutdown under way | Draining | (the drain went on while the bus was away) |
//! | Draining, Released | Announced | unchanged | (logind announces once per shutdown) |
//! | any but Stopped | StopAsked, nothing left to drain (Stopping; Released, Ready after an Ended that left no pods) | as Stop | as Stop |
//! | any other but Stopped | StopAsked | unchanged | AskSystemd (its answer is the next event: SystemSaid) |
//! | any but Stopped | SystemSaid, the system runs on | as Stop | as Stop |
//! | any but Stopped | SystemSaid, the system shuts down | as StopInShutdown, or as Stop with no stage worth starting (less than STAGE_MIN of the drain's time left, or nothing left after the margin) | SayStopStage, then as that |
//! | Starting, Waiting | Stop | Stopped | SayStop, RecordStopped, ReleaseLock |
//! | Draining | Stop | Stopped | SayStop, AbortDrain, ReleaseLock |
//! | Released | Stop | Stopped | SayStop (the lock is already gone) |
//! | Waiting | Scheduled, policy "none" | Waiting | ShowScheduled (nothing is done for it) |
//! | Waiting, Scheduled | Scheduled, policy "drain"/"cordon" | Scheduled | ShowScheduled (the lead's timer follows the phase) |
//! | Scheduled | Scheduled, policy "none" | Waiting | ShowScheduled |
//! | Scheduled | Due | Early | StartEarly |
//! | Scheduled | Unscheduled | Waiting | ShowWaiting (nothing was done) |
//! | Early | Ended | Ready | SayEarly |
//! | Early, Ready | Unscheduled before its time, or Overdue | Waiting | AbortDrain (Early), ForgetShutdown + restore, ShowWaiting |
//! | Early, Ready | Unscheduled at its time | unchanged, `fired` | (logind starts it now; Overdue if it announces nothing) |
//! | Early, Ready | Scheduled | unchanged | (moved: the node stays drained until it comes or is cancelled) |
//! | Scheduled, Ready | Announced | Draining | Quiet(false), StartDrain (what came back, within the budget) |
//! | Early | Announced | Draining | AbortDrain, Quiet(false), StartDrain |
//! | Scheduled, Early, Ready | Connected, a shutdown under way | Draining | as Announced, counted from its recorded start |
//! | Scheduled, Early, Ready | Connected, none under way; Cancelled | unchanged | (the schedule stands) |
//! | Scheduled, Ready | Stop | Stopped | SayStop, RecordStopped, ReleaseLock |
//! | Early | Stop | Stopped | SayStop, AbortDrain, RecordStopped, ReleaseLock |
//! | Draining, Released | Scheduled, Unscheduled, Due, Overdue | unchanged | (logind's window owns the node) |
//! | Starting, Waiting, Scheduled, Ready | StopInShutdown | Stopping | Quiet(false), ReleaseLock, StartStopStage |
//! | Draining, Early | StopInShutdown | Stopping | AbortDrain, Quiet(false), ReleaseLock, StartStopStage |
//! | Released | StopInShutdown | Stopping | StartStopStage (the lock is already gone) |
//! | Stopping | Ended | Stopped | RecordEnd, SayOutcome |
//! | Stopping | Stop | Stopped | SayStop, AbortDrain |
//! | Stopping | anything else | unchanged | (the system goes down: nothing else matters) |
//! | Waiting | Unscheduled | Waiting | (nothing was scheduled for us) |
//! | any but Stopped | SlotsFull, SlotsOpen, PassGiven, PassExpired | unchanged | (the gate's, below) |
//!
//! The reboot gate (`crate::daemon::gate`) is closed while the phase may gate
//! ([`Phase::may_gate`]: Waiting, Scheduled), the follower says the slots are full and no pass
//! runs; [`State::on`] adds its effects after the phase's, on every event:
//!
//! | gate before | event | gate after | effects |
//! |---|---|---|---|
//! | open | any | closed | HoldGate |
//! | closed | SlotsFull (the reason may have changed), Connected (a lock can be asked for now) | closed | HoldGate |
//! | closed | any | open | DropGate (because the daemon no longer waits, a pass runs, or a slot is open) |
//! | any, the phase may gate | PassExpired | any | SayPassEnded, then as above |
//!
//! A scheduled shutdown's drain ("early") runs outside logind's window: no lock of its own (the
//! one held for the shutdown stays), no boot record (logind's timer has not started), and its
//! deadline is the scheduled time, the moment logind announces the shutdown and the usual drain,
//! within its own budget, takes over whatever is left.
//!
//! The stop phase's second stage ("stopping"): SIGTERM while the system shuts down (systemd's
//! `SystemState` is `stopping`: a shutdown past logind's window, or one that never went through
//! logind) drains what is left within the unit's stop timeout, while the kubelet, the container
//! runtime and the network still run (the unit is ordered after them, so systemd stops it
//! first). It never holds logind: the lock goes at once. SIGTERM or SIGINT is `StopAsked`: a
//! plain stop when nothing is left to drain ([`State::left_work`]: not after a complete drain of
//! this shutdown, nor during the stop phase), else the service asks systemd (`AskSystemd`) and
//! its answer is `StopInShutdown` or `Stop`.
//!
//! Anything else is refused ([`Refused`]): a drain ending while none runs, an event after the
//! stop. The daemon logs a refusal and stays where it was.

use crate::config::ShutdownPolicy;
use crate::daemon::metrics::RebootFacts;
use crate::reboot::need::Need;
use crate::shutdown_kind::ShutdownKind;

/// Where the daemon is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Phase {
    /// Before the first connection to logind.
    Starting,
    /// Connected at least once, no shutdown: the lock is held, waiting for logind's signal.
    Waiting,
    /// A shutdown was announced (or found under way); its drain runs.
    Draining(Shutdown),
    /// The drain is over and the lock released: the machine goes down, or logind cancels.
    Released(Shutdown),
    /// The daemon stops.
    Stopped,
    /// The system shuts down and systemd stops the unit: the second stage drains what is left,
    /// within the unit's stop timeout, without the lock.
    Stopping(Shutdown),
    /// logind has scheduled a shutdown; waiting for its lead (the lock is held).
    Scheduled(Planned),
    /// The scheduled shutdown's drain runs, ahead of logind's window (the lock is held).
    Early(Planned),
    /// The scheduled shutdown's drain is over; waiting for logind to announce it.
    Ready(Planned),
    /// The node asked for a reboot (`[reboot]`) and nothing holds it: the daemon's own reboot
    /// runs (a drain slot, the drain, the holds looked at again, logind's `Reboot`); the lock
    /// is held, logind's announcement takes over. `asked`: the reboot ended asking logind, whose
    /// announcement is due (`Overdue` when it does not come).
    Rebooting { asked: bool },
}

/// A shutdown logind has scheduled, as far as the phases care.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Planned {
    pub kind: ShutdownKind,
    /// Its file went at its time: logind is starting it (an announcement is due).
    pub fired: bool,
}

/// The shutdown a drain is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shutdown {
    pub kind: ShutdownKind,
    /// A delay lock of ours holds logind for the drain (false: logind was already preparing
    /// the shutdown, and refuses new delay locks then).
    pub guarded: bool,
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// logind was reached (at start or after the bus came back). `under_way`: the shutdown
    /// logind is preparing now (no lock was asked for then); `locked`: a lock of ours is held.
    Connected {
        under_way: Option<ShutdownKind>,
        locked: bool,
    },
    /// `PrepareForShutdown(true)`; `locked`: a lock of ours is held.
    Announced { kind: ShutdownKind, locked: bool },
    /// The drain (or the cordon, or nothing, as `[shutdown]` says) for the shutdown ended;
    /// `left_work`: it left pods to drain (incomplete, or none ran).
    Ended { left_work: bool },
    /// `PrepareForShutdown(false)`.
    Cancelled,
    /// SIGTERM or SIGINT was received: the table says whether it is a plain stop or systemd is
    /// asked whether the system shuts down.
    StopAsked { signal: StopSignal },
    /// A plain stop, on `signal`: nothing left to drain, or the system runs on (or systemd could
    /// not say, or leaves no stage worth starting).
    Stop { signal: StopSignal },
    /// SIGTERM while the system shuts down (systemd's `SystemState` is `stopping`) and this
    /// shutdown is not drained yet: the stop phase's second stage, `within` this long (the unit's
    /// stop timeout and what is left of the drain's).
    StopInShutdown { within: std::time::Duration },
    /// The reboot gate's follower says no drain slot is open to the node (or the forecast says
    /// a drain would block): the gate should be closed, with the reason it sent.
    SlotsFull,
    /// The follower says a slot is open (or the slots cannot be read).
    SlotsOpen,
    /// SIGUSR1 (`kube-shutdown-drain reboot`): the gate opens for `gate_pass`.
    PassGiven,
    /// The pass ended with no shutdown.
    PassExpired,
    /// logind's schedule file says a shutdown of `kind` is scheduled (new or changed), and
    /// `[shutdown]` says `policy` for it.
    Scheduled {
        kind: ShutdownKind,
        policy: ShutdownPolicy,
    },
    /// The scheduled shutdown's lead is reached: its drain starts now.
    Due,
    /// The schedule file went: before its time (`shutdown -c`), or at it (`fired`: logind
    /// starts the shutdown and removes the file).
    Unscheduled { fired: bool },
    /// A fired schedule's shutdown was never announced (`scheduled::ANNOUNCE_WINDOW`): it did
    /// not happen.
    Overdue,
    /// The reboot follower's verdict (`crate::daemon::reboot`): no reboot needed, needed and
    /// held, or needed and nothing holds it.
    Reboot(Ask),
    /// The daemon's own reboot ended: logind was asked to reboot (its announcement follows),
    /// or the node was handed over drained to the update agent; else it gave up (no drain, an
    /// incomplete one, a hold, logind refused) and said why.
    RebootEnded(RebootEnd),
    /// A follower saw something about the reboots: the triggers' answer, what holds the node,
    /// a window opening or closing (`phase_verdict.rs`).
    Seen(Seen),
    /// The update agent asked (FleetLock; `[fleetlock]`): the facts its answer is made of.
    AgentAsked(AgentFacts),
    /// The verdict's own time passed: an answer settled, the agent's pre-reboot ran out, a
    /// pause ended ([`State::timer`]).
    Tick,
    /// systemd's answer to `AskSystemd` for SIGTERM or SIGINT (`signal`): the table decides
    /// whether a second stage is worth starting ([`State::step`]: `Stop` or `StopInShutdown`).
    SystemSaid {
        signal: StopSignal,
        said: SystemSaid,
    },
}

/// What the reboot follower says of the node's reboot (`[reboot]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ask {
    /// No trigger says a reboot is needed (or none can tell).
    NotNeeded,
    /// A reboot is needed and something holds it (a hold, a pause, a blocking pod, no window).
    Waits,
    /// A reboot is needed and nothing holds it.
    Go,
}

impl Event {
    /// An event of the reboot gate: it moves no phase.
    pub fn is_gate(&self) -> bool {
        matches!(
            self,
            Event::SlotsFull | Event::SlotsOpen | Event::PassGiven | Event::PassExpired
        )
    }
}

/// The signal that stops the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopSignal {
    Term,
    Int,
}

impl StopSignal {
    /// Its name, as the log says it.
    pub fn name(self) -> &'static str {
        match self {
            StopSignal::Term => "sigterm",
            StopSignal::Int => "sigint",
        }
    }
}

/// Where a shutdown was when it was cancelled or the daemon was stopped, for what is said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum During {
    /// Its drain ran.
    Drain,
    /// Its drain was over and the lock released.
    AfterDrain,
    /// No drain of logind's window ran (the daemon waited, or drained ahead of a schedule, or
    /// was in the stop phase).
    Waiting,
}

/// What the daemon does on a transition, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// logind prepares no shutdown (true) or does (false): the restore of a soft-reboot's
    /// marker waits for true.
    Quiet(bool),
    /// A shutdown starts here: stop a running restore, record the shutdown (`announced_now`:
    /// its timer starts now; else it counts from its recorded start), arm the lock's guard and
    /// start what `[shutdown]` says for the kind.
    StartDrain {
        kind: ShutdownKind,
        announced_now: bool,
    },
    /// Stop the running drain.
    AbortDrain,
    /// Write how the drain ended to the boot record (waited for briefly: the machine may go
    /// down the moment the lock goes).
    RecordEnd,
    /// Close the lock (and disarm its guard).
    ReleaseLock,
    /// Ask logind for the lock again, unless one is held.
    TakeLock,
    /// The shutdown is over without a reboot: forget it in the boot record, and undo its
    /// prepare as `undo` says (the restore acts only on a marker of ours).
    ForgetShutdown { undo: Undo },
    /// Record that the daemon stopped with no shutdown under way.
    RecordStopped,
    /// Say (`STATUS=`) the daemon waits for a shutdown.
    ShowWaiting,
    /// Say how the drain ended (log, `STATUS=`, metrics, Events), after the release.
    SayOutcome,
    /// Say what the daemon does for the schedule (log, `STATUS=`).
    ShowScheduled,
    /// Start the drain (or cordon) of a scheduled shutdown, by its scheduled time: stop a
    /// running restore; no boot record, no lock of its own.
    StartEarly { kind: ShutdownKind },
    /// Say how the early drain ended (log, `STATUS=`, metrics).
    SayEarly,
    /// Start the stop phase's drain (or cordon) for `kind`, within the unit's stop timeout: the
    /// boot record gets the shutdown, no lock is involved.
    StartStopStage {
        kind: ShutdownKind,
        within: std::time::Duration,
    },
    /// Close the reboot gate: hold the block lock with the follower's reason (asked for again
    /// if the reason changed; nothing if it is held or refused for that reason already).
    HoldGate,
    /// Open the reboot gate: drop the block lock (and any ask for one), said with `because`.
    DropGate { because: GateOpened },
    /// Say that the pass of the reboot gate ended with no shutdown.
    SayPassEnded,
    /// Ask systemd whether the system shuts down and how long the unit's stop may take; the
    /// answer is the next event: `StopInShutdown`, or `Stop` on `signal`.
    AskSystemd { signal: StopSignal },
    /// Say the daemon stops on `signal`, `during` what.
    SayStop { signal: StopSignal, during: During },
    /// Say logind cancelled the shutdown of `kind` `during` its drain or after it.
    SayCancelled { kind: ShutdownKind, during: During },
    /// Start the daemon's own reboot (a slot, the drain, the holds again, logind's `Reboot`):
    /// stop a running restore; no boot record (logind's window has not started).
    StartReboot,
    /// Stop the daemon's own reboot.
    AbortReboot,
    /// A reboot is still needed after a shutdown or a reboot of ours ended without one (`after`:
    /// what ended it): the verdict waits `pause` before it says go again.
    RebootLater {
        after: Setback,
        pause: std::time::Duration,
    },
    /// Say the need for a reboot (the journal).
    SayNeed(Need),
    /// A need for a reboot starts an episode: `RebootRequired`, and `MaintenancePlanned` true.
    PostRequired(Need),
    /// The episode's need went: `MaintenancePlanned` false.
    NotPlanned(Need),
    /// Say what holds the reboot (the journal), `why` the verdict's words.
    SayHolds { holds: HoldsSeen, why: String },
    /// `RebootWaiting`, with the holds' messages.
    PostWaiting(String),
    /// The metrics' facts of the reboots.
    RebootFacts(RebootFacts),
    /// The holds are looked at now, and every minute (and at a window's opening) after;
    /// `drain_to_come`: a window that closes before the drain ends holds the node.
    LookAtHolds { drain_to_come: bool },
    /// The holds are no longer looked at (no need, or a pause).
    StopLooking,
    /// Say whether the stop phase has a second stage, and why.
    SayStopStage(StageSaid),
    /// Say that the shutdown due was not announced in its time.
    SayOverdue(Overdue),
}

/// The shutdown whose announcement did not come in its time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overdue {
    /// The update agent did not reboot within its hand-over, this long.
    Agent { handover: std::time::Duration },
    /// logind announced none after the node's own reboot asked for it.
    OwnReboot,
    /// A fired schedule's shutdown of this kind (`None`: not known).
    Schedule { kind: Option<ShutdownKind> },
}

/// The step back to waiting once a shutdown is over: the drain (if `drained` runs) stops, the
/// shutdown is forgotten as `undo` says, and the lock is asked for again unless one is held.
fn to_waiting(drained: Option<Shutdown>, undo: Undo) -> (Phase, Vec<Effect>) {
    use Effect::*;
    let mut effects = Vec::new();
    if drained.is_some() {
        effects.push(AbortDrain);
    }
    effects.extend([Quiet(true), ForgetShutdown { undo }]);
    // A lock is held unless the drain ran without one or it was released after it.
    if drained.is_none_or(|s| !s.guarded) {
        effects.push(TakeLock);
    }
    effects.push(ShowWaiting);
    (Phase::Waiting, effects)
}

/// The step into a drain of logind's window for `kind` (`guarded`: a lock of ours holds it).
fn start(kind: ShutdownKind, guarded: bool, announced_now: bool) -> (Phase, Vec<Effect>) {
    (
        Phase::Draining(Shutdown { kind, guarded }),
        vec![
            Effect::Quiet(false),
            Effect::StartDrain {
                kind,
                announced_now,
            },
        ],
    )
}

/// A step to waiting after a heard cancel, with the cancel said first.
fn said_cancelled(
    kind: ShutdownKind,
    during: During,
    (phase, effects): (Phase, Vec<Effect>),
) -> (Phase, Vec<Effect>) {
    let mut said = vec![Effect::SayCancelled { kind, during }];
    said.extend(effects);
    (phase, said)
}

/// Whether a shutdown that is over gets its prepare undone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Undo {
    /// logind cancelled the shutdown this daemon drained for: restore the node.
    Heard,
    /// The shutdown this daemon drained for is no longer under way after a reconnect: it was
    /// cancelled while the bus was away. Restore the node.
    Missed,
    /// Restore only if the boot record holds a shutdown: one cancelled while the daemon was
    /// away (restarting, or the bus down), whose signal never reached it.
    IfRecorded,
    /// logind cancelled a shutdown that never started here.
    Nothing,
}

/// What one part of the table (a scheduled shutdown's, the reboots the node asks for) says
/// about an event.
pub(super) enum Part {
    /// The step: the next phase and its effects.
    Step(Phase, Vec<Effect>),
    /// The event is refused in this phase.
    Refused,
    /// Not this part's event: the rest of the table decides.
    NotMine,
}

/// An event the phase does not allow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{event:?} is not expected while {phase:?}")]
pub struct Refused {
    pub phase: Phase,
    pub event: Event,
}

impl Phase {
    /// The phase after `event`, and what to do on the way there.
    pub fn on(&self, event: Event) -> Result<(Phase, Vec<Effect>), Refused> {
        let refused = || Refused {
            phase: self.clone(),
            event: event.clone(),
        };
        if event.is_gate() {
            return match self {
                Phase::Stopped => Err(refused()),
                _ => Ok((self.clone(), vec![])),
            };
        }
        if let Event::StopInShutdown { within } = event {
            return self.on_stop_in_shutdown(within).ok_or_else(refused);
        }
        if let Event::StopAsked { .. } = event {
            // Whether anything is left to drain is the state's to say ([`State::on`]).
            return Err(refused());
        }
        if let Phase::Stopping(s) = self {
            return Ok(stop::stopping_on(*s, event.clone()));
        }
        for part in [
            self.on_reboot(event.clone()),
            self.on_schedule(event.clone()),
        ] {
            match part {
                Part::Step(phase, effects) => return Ok((phase, effects)),
                Part::Refused => return Err(refused()),
                Part::NotMine => {}
            }
        }
        match (self, &event) {
            (Phase::Stopped, _) => Err(refused()),
            (_, Event::Stop { signal }) => Ok(self.stopped(*signal)),
            _ => self.window_on(event.clone()).ok_or_else(refused),
        }
    }

    /// logind's events (and a drain's end) in the phases of a shutdown it announces: Starting,
    /// Waiting, Draining, Released. `None`: refused.
    fn window_on(&self, event: Event) -> Option<(Phase, Vec<Effect>)> {
        use Effect::*;
        Some(match (self, event.clone()) {
            (
                Phase::Starting | Phase::Waiting,
                Event::Connected {
                    under_way: None, ..
                },
            ) => (
                Phase::Waiting,
                vec![
                    Quiet(true),
                    ForgetShutdown {
                        undo: Undo::IfRecorded,
                    },
                    ShowWaiting,
                ],
            ),
            (
                Phase::Starting | Phase::Waiting | Phase::Released(_),
                Event::Connected {
                    under_way: Some(kind),
                    locked,
                },
            ) => start(kind, locked, false),
            (Phase::Waiting, Event::Announced { kind, locked }) => start(kind, locked, true),
            (Phase::Draining(s), Event::Ended { .. }) => (
                Phase::Released(*s),
                vec![RecordEnd, ReleaseLock, SayOutcome],
            ),
            (Phase::Waiting, Event::Cancelled) => (
                Phase::Waiting,
                vec![ForgetShutdown {
                    undo: Undo::Nothing,
                }],
            ),
            (
                Phase::Draining(_),
                Event::Connected {
                    under_way: Some(_), ..
                },
            )
            | (Phase::Draining(_) | Phase::Released(_), Event::Announced { .. }) => {
                (self.clone(), vec![])
            }
            (Phase::Draining(_) | Phase::Released(_), _) => return self.shutdown_over(event),
            _ => return None,
        })
    }

    /// A shutdown drained or being drained that is over without a reboot: logind cancelled it
    /// (heard), or a reconnect finds none under way (missed). `None`: refused.
    fn shutdown_over(&self, event: Event) -> Option<(Phase, Vec<Effect>)> {
        let missed = matches!(
            event,
            Event::Connected {
                under_way: None,
                ..
            }
        );
        let heard = event == Event::Cancelled;
        let undo = if heard { Undo::Heard } else { Undo::Missed };
        let (drained, during) = match self {
            Phase::Draining(s) => (Some(*s), During::Drain),
            Phase::Released(_) => (None, During::AfterDrain),
            _ => return None,
        };
        let step = to_waiting(drained, undo);
        match (heard, missed, self.shutdown()) {
            (true, _, Some(s)) => Some(said_cancelled(s.kind, during, step)),
            (false, true, _) => Some(step),
            _ => None,
        }
    }

    /// Whether no drain runs and none is due: the standing forecast runs only then.
    pub fn idle(&self) -> bool {
        matches!(self, Phase::Waiting | Phase::Scheduled(_))
    }

    /// Whether the reboot gate (`crate::daemon::gate`) may be held: only while the daemon waits
    /// for a shutdown (or for a scheduled one's lead), never once one is announced, drains,
    /// is released or the daemon stops.
    pub fn may_gate(&self) -> bool {
        matches!(self, Phase::Waiting | Phase::Scheduled(_))
    }

    /// The timer the phase needs, as the event it sends when it rings: a scheduled shutdown's
    /// lead (`Due`), or the wait for logind's announcement (`Overdue`) once a schedule's file
    /// went at its time or the daemon's own reboot asked logind. No other phase runs a timer.
    pub fn timer(&self) -> Option<Event> {
        match self {
            Phase::Scheduled(_) => Some(Event::Due),
            Phase::Early(p) | Phase::Ready(p) if p.fired => Some(Event::Overdue),
            Phase::Rebooting { asked: true } => Some(Event::Overdue),
            _ => None,
        }
    }

    /// The scheduled shutdown the daemon waits for or drains ahead of, if any.
    pub fn planned(&self) -> Option<Planned> {
        match self {
            Phase::Scheduled(p) | Phase::Early(p) | Phase::Ready(p) => Some(*p),
            _ => None,
        }
    }

    /// The shutdown being drained or drained, if any.
    pub fn shutdown(&self) -> Option<Shutdown> {
        match self {
            Phase::Draining(s) | Phase::Released(s) | Phase::Stopping(s) => Some(*s),
            _ => None,
        }
    }
}

#[cfg(test)]
#[path = "phase_tests.rs"]
mod tests;

#[path = "phase_reboot.rs"]
mod reboot;

#[path = "phase_schedule.rs"]
mod schedule;
pub use schedule::{FIRE_SLACK, fired};

#[path = "phase_stop.rs"]
mod stop;
pub use reboot::{AgentAsk, AgentFacts, RebootEnd, Setback};
pub use stop::{STAGE_MIN, StageSaid, SystemSaid, stop_stage};

#[path = "phase_verdict.rs"]
pub mod verdict;
pub use verdict::{HoldsSeen, Reboots, Seen, Verdict};

#[path = "phase_state.rs"]
mod state;
pub use state::{Gate, GateOpened, State};
