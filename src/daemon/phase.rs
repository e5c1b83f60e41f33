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
//! | Draining | Cancelled (heard), or Connected with none under way (missed) | Waiting | AbortDrain, ForgetShutdown + restore, TakeLock if none is held, ShowWaiting |
//! | Released | Cancelled (heard), or Connected with none under way (missed) | Waiting | ForgetShutdown + restore, TakeLock (unless one is held), ShowWaiting |
//! | Waiting | Cancelled | Waiting | ForgetShutdown (nothing to undo) |
//! | Draining | Connected, a shutdown under way | Draining | (the drain went on while the bus was away) |
//! | Draining, Released | Announced | unchanged | (logind announces once per shutdown) |
//! | Starting, Waiting | Stop | Stopped | RecordStopped, ReleaseLock |
//! | Draining | Stop | Stopped | AbortDrain, ReleaseLock |
//! | Released | Stop | Stopped | (the lock is already gone) |
//!
//! Anything else is refused ([`Refused`]): a drain ending while none runs, an event after the
//! stop. The daemon logs a refusal and stays where it was.

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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// logind was reached (at start or after the bus came back). `under_way`: the shutdown
    /// logind is preparing now (no lock was asked for then); `locked`: a lock of ours is held.
    Connected {
        under_way: Option<ShutdownKind>,
        locked: bool,
    },
    /// `PrepareForShutdown(true)`; `locked`: a lock of ours is held.
    Announced { kind: ShutdownKind, locked: bool },
    /// The drain (or the cordon, or nothing, as `[shutdown]` says) for the shutdown ended.
    Ended,
    /// `PrepareForShutdown(false)`.
    Cancelled,
    /// SIGTERM or SIGINT.
    Stop,
}

/// What the daemon does on a transition, in the order given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
        use Effect::*;
        let refused = || Refused {
            phase: self.clone(),
            event,
        };
        let to_waiting = |drained: Option<Shutdown>, undo: Undo| {
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
        };
        let start = |kind, guarded, announced_now| {
            (
                Phase::Draining(Shutdown { kind, guarded }),
                vec![
                    Quiet(false),
                    StartDrain {
                        kind,
                        announced_now,
                    },
                ],
            )
        };
        Ok(match (self, event) {
            (Phase::Stopped, _) => return Err(refused()),
            (_, Event::Stop) => match self {
                Phase::Starting | Phase::Waiting => {
                    (Phase::Stopped, vec![RecordStopped, ReleaseLock])
                }
                Phase::Draining(_) => (Phase::Stopped, vec![AbortDrain, ReleaseLock]),
                _ => (Phase::Stopped, vec![]),
            },
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
            (Phase::Draining(s), Event::Ended) => (
                Phase::Released(*s),
                vec![RecordEnd, ReleaseLock, SayOutcome],
            ),
            (Phase::Draining(s), Event::Cancelled) => to_waiting(Some(*s), Undo::Heard),
            (
                Phase::Draining(s),
                Event::Connected {
                    under_way: None, ..
                },
            ) => to_waiting(Some(*s), Undo::Missed),
            (Phase::Released(_), Event::Cancelled) => to_waiting(None, Undo::Heard),
            (
                Phase::Released(_),
                Event::Connected {
                    under_way: None, ..
                },
            ) => to_waiting(None, Undo::Missed),
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
            _ => return Err(refused()),
        })
    }

    /// The shutdown being drained or drained, if any.
    pub fn shutdown(&self) -> Option<Shutdown> {
        match self {
            Phase::Draining(s) | Phase::Released(s) => Some(*s),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Effect::*;
    use super::*;

    const REBOOT: ShutdownKind = ShutdownKind::Reboot;

    fn connected(under_way: Option<ShutdownKind>, locked: bool) -> Event {
        Event::Connected { under_way, locked }
    }

    fn draining(guarded: bool) -> Phase {
        Phase::Draining(Shutdown {
            kind: REBOOT,
            guarded,
        })
    }

    fn released(guarded: bool) -> Phase {
        Phase::Released(Shutdown {
            kind: REBOOT,
            guarded,
        })
    }

    fn step(from: Phase, event: Event) -> (Phase, Vec<Effect>) {
        from.on(event).unwrap_or_else(|e| panic!("refused: {e}"))
    }

    #[test]
    fn every_allowed_transition_leads_where_the_table_says_with_its_effects() {
        let announced = Event::Announced {
            kind: REBOOT,
            locked: true,
        };
        let start_now = StartDrain {
            kind: REBOOT,
            announced_now: true,
        };
        let start_under_way = StartDrain {
            kind: REBOOT,
            announced_now: false,
        };
        let cases: Vec<(Phase, Event, Phase, Vec<Effect>)> = vec![
            (
                Phase::Starting,
                connected(None, true),
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
                Phase::Waiting,
                connected(None, true),
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
                Phase::Starting,
                connected(Some(REBOOT), false),
                draining(false),
                vec![Quiet(false), start_under_way],
            ),
            (
                released(true),
                connected(Some(REBOOT), false),
                draining(false),
                vec![Quiet(false), start_under_way],
            ),
            (
                Phase::Waiting,
                announced,
                draining(true),
                vec![Quiet(false), start_now],
            ),
            (
                draining(true),
                Event::Ended,
                released(true),
                vec![RecordEnd, ReleaseLock, SayOutcome],
            ),
            (
                draining(true),
                Event::Cancelled,
                Phase::Waiting,
                vec![
                    AbortDrain,
                    Quiet(true),
                    ForgetShutdown { undo: Undo::Heard },
                    ShowWaiting,
                ],
            ),
            // A lockless drain cancelled: the lock is asked for again.
            (
                draining(false),
                Event::Cancelled,
                Phase::Waiting,
                vec![
                    AbortDrain,
                    Quiet(true),
                    ForgetShutdown { undo: Undo::Heard },
                    TakeLock,
                    ShowWaiting,
                ],
            ),
            // The cancel was missed while the bus was away.
            (
                draining(true),
                connected(None, true),
                Phase::Waiting,
                vec![
                    AbortDrain,
                    Quiet(true),
                    ForgetShutdown { undo: Undo::Missed },
                    ShowWaiting,
                ],
            ),
            (
                released(true),
                Event::Cancelled,
                Phase::Waiting,
                vec![
                    Quiet(true),
                    ForgetShutdown { undo: Undo::Heard },
                    TakeLock,
                    ShowWaiting,
                ],
            ),
            (
                Phase::Waiting,
                Event::Cancelled,
                Phase::Waiting,
                vec![ForgetShutdown {
                    undo: Undo::Nothing,
                }],
            ),
            (
                draining(true),
                connected(Some(REBOOT), false),
                draining(true),
                vec![],
            ),
            (
                released(true),
                connected(None, true),
                Phase::Waiting,
                vec![
                    Quiet(true),
                    ForgetShutdown { undo: Undo::Missed },
                    TakeLock,
                    ShowWaiting,
                ],
            ),
            (draining(true), announced, draining(true), vec![]),
            (released(true), announced, released(true), vec![]),
            (
                Phase::Waiting,
                Event::Stop,
                Phase::Stopped,
                vec![RecordStopped, ReleaseLock],
            ),
            (
                Phase::Starting,
                Event::Stop,
                Phase::Stopped,
                vec![RecordStopped, ReleaseLock],
            ),
            (
                draining(true),
                Event::Stop,
                Phase::Stopped,
                vec![AbortDrain, ReleaseLock],
            ),
            (released(true), Event::Stop, Phase::Stopped, vec![]),
        ];
        for (from, event, to, effects) in cases {
            let (next, did) = step(from.clone(), event);
            assert_eq!((&next, &did), (&to, &effects), "{from:?} on {event:?}");
        }
    }

    #[test]
    fn events_a_phase_does_not_expect_are_refused_and_change_nothing() {
        let refused = [
            (Phase::Starting, Event::Ended),
            (Phase::Waiting, Event::Ended),
            (released(true), Event::Ended),
            (Phase::Starting, Event::Cancelled),
            (
                Phase::Starting,
                Event::Announced {
                    kind: REBOOT,
                    locked: true,
                },
            ),
            (Phase::Stopped, Event::Stop),
            (Phase::Stopped, connected(None, true)),
        ];
        for (from, event) in refused {
            let err = from.on(event).expect_err("refused");
            assert_eq!((err.phase, err.event), (from, event));
        }
    }

    #[test]
    fn the_lock_goes_exactly_once_per_shutdown_and_after_its_end_is_recorded() {
        // A whole life: start, a reboot drained, cancelled, a second reboot, stopped.
        let script = [
            connected(None, true),
            Event::Announced {
                kind: REBOOT,
                locked: true,
            },
            Event::Ended,
            Event::Cancelled,
            Event::Announced {
                kind: ShutdownKind::PowerOff,
                locked: true,
            },
            Event::Ended,
            Event::Stop,
        ];
        let mut phase = Phase::Starting;
        let mut all = Vec::new();
        for event in script {
            let (next, effects) = step(phase, event);
            all.extend(effects);
            phase = next;
        }
        assert_eq!(phase, Phase::Stopped);
        let releases: Vec<usize> = all
            .iter()
            .enumerate()
            .filter(|(_, e)| **e == ReleaseLock)
            .map(|(i, _)| i)
            .collect();
        assert_eq!(releases.len(), 2, "{all:?}");
        for i in releases {
            assert_eq!(all[i - 1], RecordEnd, "the end is recorded first: {all:?}");
            assert_eq!(all[i + 1], SayOutcome, "and said after: {all:?}");
        }
        assert_eq!(
            all.iter().filter(|e| **e == TakeLock).count(),
            1,
            "the lock is taken again after the cancel only: {all:?}"
        );
    }
}
