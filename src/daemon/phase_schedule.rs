//! The scheduled shutdowns' part of the phase table (`phase.rs`'s module doc holds its rows):
//! a schedule's events in the phases of a scheduled shutdown (Scheduled, Early, Ready) and while
//! waiting.

use super::{During, Effect, Event, Part, Phase, Planned, Shutdown, Undo};
use crate::config::ShutdownPolicy;

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
        use Effect::*;
        let (scheduled, early) = (
            matches!(self, Phase::Scheduled(_)),
            matches!(self, Phase::Early(_)),
        );
        // The early drain stops first whenever the phase is left.
        let then = |phase: Phase, effects: &[Effect]| {
            let mut all = if early { vec![AbortDrain] } else { vec![] };
            all.extend_from_slice(effects);
            (phase, all)
        };
        let restored = || {
            then(
                Phase::Waiting,
                &[ForgetShutdown { undo: Undo::Heard }, ShowWaiting],
            )
        };
        let shutdown = |kind, guarded, announced_now| {
            let draining = Phase::Draining(Shutdown { kind, guarded });
            then(
                draining,
                &[
                    Quiet(false),
                    StartDrain {
                        kind,
                        announced_now,
                    },
                ],
            )
        };
        Some(match event {
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
            Event::Unscheduled { fired: false } => restored(),
            Event::Overdue if planned.fired => restored(),
            Event::Ended { .. } if early => (Phase::Ready(planned), vec![SayEarly]),
            Event::Due
            | Event::Overdue
            | Event::Ended { .. }
            | Event::StopInShutdown { .. }
            | Event::StopAsked { .. }
            | Event::SystemSaid { .. }
            | Event::RebootEnded(_) => {
                return None;
            }
            // The reboot part answers first (`phase_reboot.rs`); the same answer here.
            Event::Reboot(_) | Event::Seen(_) | Event::AgentAsked(_) | Event::Tick => {
                (self.clone(), vec![])
            }
            Event::SlotsFull | Event::SlotsOpen | Event::PassGiven | Event::PassExpired => {
                (self.clone(), vec![])
            }
            Event::Announced { kind, locked } => shutdown(kind, locked, true),
            Event::Connected {
                under_way: Some(kind),
                locked,
            } => shutdown(kind, locked, false),
            Event::Scheduled { .. } | Event::Connected { .. } | Event::Cancelled => {
                (self.clone(), vec![])
            }
            Event::Stop { signal } => {
                let (phase, effects) = then(Phase::Stopped, &[RecordStopped, ReleaseLock]);
                let during = During::Waiting;
                let mut said = vec![SayStop { signal, during }];
                said.extend(effects);
                (phase, said)
            }
        })
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
