//! The stop's part of the phase table (`phase.rs`'s module doc holds its rows): a plain stop
//! in each phase, the stop phase's second stage, and whether systemd's answer makes one worth
//! starting.

use super::{During, Effect, Event, Phase, Shutdown, StopSignal};
use crate::shutdown_kind::ShutdownKind;

/// What systemd said when the daemon was asked to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SystemSaid {
    /// The system runs on (a plain `systemctl stop` or restart), or systemd could not say
    /// (the loop said why): a plain stop.
    Runs,
    /// The system shuts down: the unit's stop timeout (`None`: infinity), what is left of the
    /// drain's `[drain] timeout` for this shutdown, and `[daemon] release_margin`.
    ShutsDown {
        stop_timeout: Option<std::time::Duration>,
        drain_left: std::time::Duration,
        margin: std::time::Duration,
    },
}

/// Why the stop phase has, or has no, second stage, for the journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StageSaid {
    /// The drain had its whole `[drain] timeout` but for `left` (below [`STAGE_MIN`]).
    NoTimeLeft { left: std::time::Duration },
    /// The unit's stop timeout leaves nothing after the margin.
    NoRoom {
        stop_timeout: Option<std::time::Duration>,
        margin: std::time::Duration,
    },
    /// The second stage drains what is left, within this long.
    Draining { within: std::time::Duration },
}

/// The shortest second stage worth starting: a list, an eviction and a pod's stop take seconds,
/// and a stage that cannot finish one would only replace the window's report with an emptier
/// one.
pub const STAGE_MIN: std::time::Duration = std::time::Duration::from_secs(5);

/// Whether a second stage is worth starting when systemd says the system shuts down, and for how
/// long (`[daemon] release_margin` off the unit's stop timeout, at most what is left of the
/// drain's time; none below [`STAGE_MIN`] left, or when nothing is left after the margin). Pure.
pub fn stop_stage(
    stop_timeout: Option<std::time::Duration>,
    drain_left: std::time::Duration,
    margin: std::time::Duration,
) -> StageSaid {
    if drain_left < STAGE_MIN {
        return StageSaid::NoTimeLeft { left: drain_left };
    }
    match crate::host::systemd::stage_time(stop_timeout, margin, drain_left) {
        Some(within) => StageSaid::Draining { within },
        None => StageSaid::NoRoom {
            stop_timeout,
            margin,
        },
    }
}

/// Any event in the stop phase: its end and a second stop end it; nothing else matters.
pub(super) fn stopping_on(s: Shutdown, event: Event) -> (Phase, Vec<Effect>) {
    use Effect::*;
    match event {
        Event::Ended { .. } => (Phase::Stopped, vec![RecordEnd, SayOutcome]),
        Event::Stop { signal } => {
            let during = During::Waiting;
            (Phase::Stopped, vec![SayStop { signal, during }, AbortDrain])
        }
        _ => (Phase::Stopping(s), vec![]),
    }
}

impl Phase {
    /// A plain stop on `signal`, said first.
    pub(super) fn stopped(&self, signal: StopSignal) -> (Phase, Vec<Effect>) {
        use Effect::*;
        let (during, then): (During, &[Effect]) = match self {
            Phase::Draining(_) => (During::Drain, &[AbortDrain, ReleaseLock]),
            Phase::Released(_) => (During::AfterDrain, &[]),
            Phase::Rebooting { .. } => {
                (During::Waiting, &[AbortReboot, RecordStopped, ReleaseLock])
            }
            _ => (During::Waiting, &[RecordStopped, ReleaseLock]),
        };
        let mut effects = vec![SayStop { signal, during }];
        effects.extend_from_slice(then);
        (Phase::Stopped, effects)
    }

    /// SIGTERM while the system shuts down: the second stage, after whatever ran; `None`:
    /// refused (after the stop).
    pub(super) fn on_stop_in_shutdown(
        &self,
        within: std::time::Duration,
    ) -> Option<(Phase, Vec<Effect>)> {
        use Effect::*;
        let stage = |kind, before: &[Effect]| {
            let mut effects = before.to_vec();
            effects.push(StartStopStage { kind, within });
            let stopping = Phase::Stopping(Shutdown {
                kind,
                guarded: false,
            });
            Some((stopping, effects))
        };
        match self {
            Phase::Stopped => None,
            Phase::Stopping(_) => Some((self.clone(), vec![])),
            Phase::Starting | Phase::Waiting => {
                stage(ShutdownKind::Unknown, &[Quiet(false), ReleaseLock])
            }
            Phase::Scheduled(p) | Phase::Ready(p) => stage(p.kind, &[Quiet(false), ReleaseLock]),
            Phase::Early(p) => stage(p.kind, &[AbortDrain, Quiet(false), ReleaseLock]),
            Phase::Rebooting { .. } => stage(
                ShutdownKind::Reboot,
                &[AbortReboot, Quiet(false), ReleaseLock],
            ),
            Phase::Draining(s) => stage(s.kind, &[AbortDrain, ReleaseLock]),
            Phase::Released(s) => stage(s.kind, &[]),
        }
    }
}
