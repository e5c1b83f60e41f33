//! The scheduled shutdowns' part of the phase table (`phase.rs`'s module doc holds its rows):
//! a schedule's events in the phases of a scheduled shutdown (Scheduled, Early, Ready) and while
//! waiting.

use std::time::Duration;

use super::{During, Effect, Event, Part, Phase, Planned, Shutdown, Undo};
use crate::config::ShutdownPolicy;

/// A schedule file that goes less than this before its time went because it fired (logind's
/// timer and our clock reading are not the same instant).
pub const FIRE_SLACK: Duration = Duration::from_secs(2);

/// Whether logind's schedule file, gone `left` before its time, went because the schedule
/// fired (logind starts the shutdown and removes the file) rather than because it was cancelled
/// (`shutdown -c`): logind removes it both ways. Pure.
pub fn fired(left: Duration) -> bool {
    left <= FIRE_SLACK
}

impl Phase {
    /// The transitions of the phases and events of a scheduled shutdown.
    pub(super) fn on_schedule(&self, event: Event) -> Part {
        let schedule_event = matches!(
            event,
            Event::Scheduled { .. } | Event::Due | Event::Unscheduled { .. } | Event::Overdue
        );
        match self {
            Phase::Scheduled(p) | Phase::Early(p) | Phase::Ready(p) => {
                match self.planned_on(*p, event) {
                    Some((phase, effects)) => Part::Step(phase, effects),
                    None => Part::Refused,
                }
            }
            Phase::Starting | Phase::Stopped if schedule_event => Part::Refused,
            Phase::Draining(_) | Phase::Released(_) if schedule_event => {
                Part::Step(self.clone(), vec![])
            }
            Phase::Waiting => self.waiting_on_schedule(event),
            _ => Part::NotMine,
        }
    }

    /// Any event in a phase of a scheduled shutdown (`planned`); `None`: refused.
    fn planned_on(&self, planned: Planned, event: Event) -> Option<(Phase, Vec<Effect>)> {
        let step = PlannedStep {
            phase: self,
            planned,
            scheduled: matches!(self, Phase::Scheduled(_)),
            early: matches!(self, Phase::Early(_)),
        };
        match step.file_or_drain(&event) {
            Part::Step(phase, effects) => Some((phase, effects)),
            Part::Refused => None,
            Part::NotMine => Some(step.other(event)),
        }
    }

    /// A schedule's events while waiting.
    fn waiting_on_schedule(&self, event: Event) -> Part {
        match event {
            Event::Scheduled {
                policy: ShutdownPolicy::None,
                ..
            } => Part::Step(Phase::Waiting, vec![Effect::ShowScheduled]),
            Event::Scheduled { kind, .. } => Part::Step(
                Phase::Scheduled(Planned { kind, fired: false }),
                vec![Effect::ShowScheduled],
            ),
            Event::Unscheduled { .. } => Part::Step(Phase::Waiting, vec![]),
            Event::Due | Event::Overdue => Part::Refused,
            _ => Part::NotMine,
        }
    }
}

/// A step in a phase of a scheduled shutdown.
struct PlannedStep<'a> {
    phase: &'a Phase,
    planned: Planned,
    /// The phase is `Scheduled` (no early drain yet).
    scheduled: bool,
    /// The phase is `Early` (the early drain runs).
    early: bool,
}

impl PlannedStep<'_> {
    /// To `phase` with `effects`, the early drain stopped first whenever the phase is left.
    fn then(&self, phase: Phase, effects: &[Effect]) -> (Phase, Vec<Effect>) {
        let mut all = if self.early {
            vec![Effect::AbortDrain]
        } else {
            vec![]
        };
        all.extend_from_slice(effects);
        (phase, all)
    }

    /// Back to waiting, the node restored.
    fn restored(&self) -> (Phase, Vec<Effect>) {
        let forget = Effect::ForgetShutdown { undo: Undo::Heard };
        self.then(Phase::Waiting, &[forget, Effect::ShowWaiting])
    }

    /// The schedule file's events and the early drain's end.
    fn file_or_drain(&self, event: &Event) -> Part {
        use Effect::*;
        let (planned, scheduled, early) = (self.planned, self.scheduled, self.early);
        let (phase, effects) = match *event {
            Event::Scheduled { policy, .. } if scheduled && policy == ShutdownPolicy::None => {
                (Phase::Waiting, vec![ShowScheduled])
            }
            Event::Scheduled { kind, .. } if scheduled => (
                Phase::Scheduled(Planned { kind, fired: false }),
                vec![ShowScheduled],
            ),
            Event::Due if scheduled => (
                Phase::Early(planned),
                vec![StartEarly { kind: planned.kind }],
            ),
            Event::Unscheduled { .. } if scheduled => (Phase::Waiting, vec![ShowWaiting]),
            Event::Unscheduled { fired: true } => {
                let fired = Planned {
                    fired: true,
                    ..planned
                };
                let phase = if early {
                    Phase::Early(fired)
                } else {
                    Phase::Ready(fired)
                };
                (phase, vec![])
            }
            Event::Unscheduled { fired: false } => self.restored(),
            Event::Overdue if planned.fired => self.restored(),
            Event::Ended { .. } if early => (Phase::Ready(planned), vec![SayEarly]),
            Event::Due
            | Event::Overdue
            | Event::Ended { .. }
            | Event::StopInShutdown { .. }
            | Event::StopAsked { .. }
            | Event::SystemSaid { .. }
            | Event::RebootEnded(_) => return Part::Refused,
            _ => return Part::NotMine,
        };
        Part::Step(phase, effects)
    }

    /// logind's events, the gate's, the reboots' and a stop.
    fn other(&self, event: Event) -> (Phase, Vec<Effect>) {
        use Effect::*;
        let shutdown = |kind, guarded, announced_now| {
            let draining = Phase::Draining(Shutdown { kind, guarded });
            let start = StartDrain {
                kind,
                announced_now,
            };
            self.then(draining, &[Quiet(false), start])
        };
        match event {
            Event::Announced { kind, locked } => shutdown(kind, locked, true),
            Event::Connected {
                under_way: Some(kind),
                locked,
            } => shutdown(kind, locked, false),
            Event::Stop { signal } => {
                let (phase, effects) = self.then(Phase::Stopped, &[RecordStopped, ReleaseLock]);
                let during = During::Waiting;
                let mut said = vec![SayStop { signal, during }];
                said.extend(effects);
                (phase, said)
            }
            // The reboot part answers first (`phase_reboot.rs`); the same answer here. The
            // gate's events, a schedule moved, a connection with none under way, a cancel: the
            // schedule stands.
            _ => (self.phase.clone(), vec![]),
        }
    }
}
