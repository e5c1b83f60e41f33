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
//! | Rebooting, not asked | RebootEnded, not asked | Waiting | ForgetShutdown + restore, ShowWaiting (then RebootLater: the need stands) |
//! | Rebooting, asked | Overdue (no announcement within the window of a fired schedule) | Waiting | ForgetShutdown + restore, ShowWaiting (then RebootLater) |
//! | Rebooting | Announced, or Connected with one under way | Draining | AbortReboot, Quiet(false), StartDrain |
//! | Rebooting | Connected with none under way, Cancelled, Scheduled, Unscheduled | unchanged | |
//! | Rebooting | Ended, Due; Overdue before logind was asked | refused | |
//! | any but Rebooting (not asked) | RebootEnded | refused | (no reboot of ours runs) |
//!
//! Back in Waiting from any other phase while the verdict is Go, [`super::State::on`] adds
//! `RebootLater`: the follower says Go again after a pause, and only then does a reboot start.
//! A stop in Rebooting stops the reboot first (`AbortReboot`, then as from Waiting); the
//! node's prepare stays until the next start, whose restore tells the own reboot's marker (its
//! reason, `crate::daemon::reboot::OWN_REBOOT_WHY`) from a shutdown's and undoes it.

use super::{Ask, Effect, Event, Part, Phase, Undo};

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
        match (self, event) {
            (Phase::Stopped, Event::Reboot(_) | Event::RebootEnded { .. }) => Part::Refused,
            (Phase::Waiting, Event::Reboot(Ask::Go)) => Part::Step(RUNS, vec![StartReboot]),
            (Phase::Rebooting { .. }, Event::Reboot(Ask::NotNeeded)) => restored(&[AbortReboot]),
            (Phase::Waiting, Event::Reboot(_)) => Part::Step(Phase::Waiting, vec![ShowWaiting]),
            (_, Event::Reboot(_)) => Part::Step(self.clone(), vec![]),
            (&RUNS, Event::RebootEnded { asked: true }) => Part::Step(ASKED, vec![]),
            (&RUNS, Event::RebootEnded { asked: false }) | (&ASKED, Event::Overdue) => {
                restored(&[])
            }
            (_, Event::RebootEnded { .. }) => Part::Refused,
            (Phase::Rebooting { .. }, Event::Announced { kind, locked })
            | (
                Phase::Rebooting { .. },
                Event::Connected {
                    under_way: Some(kind),
                    locked,
                },
            ) => {
                let announced_now = matches!(event, Event::Announced { .. });
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
