//! The stop phase's second stage: SIGTERM while the system shuts down. systemd stops the unit
//! before the kubelet, the container runtime and the network (the unit is ordered after them),
//! so what the window's drain left, or a shutdown that never went through logind
//! (`systemctl start reboot.target`, SIGRTMIN+5 to PID 1), is drained here, within the unit's
//! own stop timeout ([`crate::host::systemd`]) and what is left of `[drain] timeout`: that is
//! the drain's one time across both stages, so a drain that had all of it in logind's window
//! (the shipped drop-in allows more than the default timeout) has no second stage. A plain `systemctl stop` or `restart` while the
//! system runs stops at once, as before.
//!
//! Because a drain logind's window cuts goes on here, the window's evictions fit their grace
//! periods to the end of this stage when it can be counted on ([`grace_end`], decided at the
//! shutdown's start from the unit's `TimeoutStopSec`), so a pod is not killed at the window's end
//! to make room for a deadline that is not the drain's last.

use std::time::Duration;

use tokio::time::Instant;

use super::Daemon;
use super::work::{Job, Stage, Work};
use crate::daemon::phase::{Event, STAGE_MIN, StageSaid, StopSignal, SystemSaid};
use crate::drain::GraceTo;
use crate::host::boot_record;
use crate::host::logind::Logind;
use crate::host::systemd::{self, AskError};
use crate::report::GraceEnd;
use crate::shutdown_kind::ShutdownKind;
use crate::time_limit::seconds;

/// How long SIGTERM's handling waits for systemd to say whether the system shuts down and how
/// long the unit may take; no answer by then is a plain stop. Also how long a shutdown's start
/// waits for the unit's `TimeoutStopSec` (beside logind's maximum, read again meanwhile).
pub(super) const ASK_SYSTEMD_MAX: Duration = Duration::from_secs(1);

impl Daemon {
    /// `AskSystemd`, for SIGTERM or SIGINT (`signal`) when work may be left: what systemd says
    /// of the system (shutting down, with the unit's stop timeout) and what is left of the
    /// drain's time, for the table to decide (`Event::SystemSaid`). A systemd that cannot say is
    /// a system that runs on (said here).
    pub(super) async fn stop_answer(
        &mut self,
        signal: StopSignal,
        logind: Option<&Logind>,
    ) -> Event {
        let node = self.access.settings.node_name.clone();
        let runs = Event::SystemSaid {
            signal,
            said: SystemSaid::Runs,
        };
        let Some(conn) = logind.map(Logind::connection) else {
            return runs;
        };
        let asked = async {
            if !systemd::shutting_down(conn).await? {
                return Ok(None);
            }
            systemd::stop_timeout(conn).await.map(Some)
        };
        let stop_timeout = match tokio::time::timeout(ASK_SYSTEMD_MAX, asked).await {
            Ok(Ok(Some(timeout))) => timeout,
            Ok(Ok(None)) => return runs,
            // Without systemd (the demo, the tests) a stop is only ever a plain one.
            Ok(Err(AskError::NotOnBus)) => return runs,
            Ok(Err(e)) => {
                tracing::info!(
                    "cannot ask systemd whether the system shuts down ({e}); stopping the daemon \
                     of node {node} at once"
                );
                return runs;
            }
            Err(_) => {
                tracing::warn!(
                    "systemd did not say within {} ms whether the system shuts down; stopping \
                     the daemon of node {node} at once",
                    ASK_SYSTEMD_MAX.as_millis()
                );
                return runs;
            }
        };
        Event::SystemSaid {
            signal,
            said: SystemSaid::ShutsDown {
                stop_timeout,
                drain_left: self.drain_time_left(),
                margin: self.access.settings.daemon.release_margin,
            },
        }
    }

    /// `SayStopStage`: whether the stop phase has a second stage, and why.
    pub(super) fn say_stop_stage(&self, stage: StageSaid) {
        let node = &self.access.settings.node_name;
        match stage {
            StageSaid::NoTimeLeft { left } => tracing::info!(
                "the system shuts down and the drain of node {node} has had its [drain] timeout \
                 ({}) but for {}: no second stage; stopping at once",
                seconds(self.access.settings.drain.timeout),
                seconds(left)
            ),
            StageSaid::NoRoom {
                stop_timeout,
                margin,
            } => tracing::warn!(
                "the system shuts down, but the unit's TimeoutStopSec ({}) leaves nothing after \
                 the {} margin; stopping the daemon of node {node} at once",
                stop_timeout.map_or_else(|| "infinity".to_owned(), seconds),
                seconds(margin)
            ),
            StageSaid::Draining { within } => tracing::warn!(
                "systemd stops the daemon of node {node} while the system shuts down (the kubelet \
                 and the network still run); draining what is left in the stop phase, within {}",
                seconds(within)
            ),
        }
    }

    /// What is left of `[drain] timeout` for this shutdown: the drain's one time across both
    /// stages, counted from the shutdown's recorded start (logind's announcement); all of it for
    /// a shutdown that never went through logind (none recorded).
    pub(super) fn drain_time_left(&self) -> Duration {
        let timeout = self.access.settings.drain.timeout;
        let started = self
            .boot
            .log
            .record()
            .and_then(|r| r.shutdown)
            .and_then(|s| s.boottime_ns)
            .map(Duration::from_nanos);
        match (started, boot_record::boottime_now()) {
            (Some(from), Ok(now)) => crate::time_limit::remaining(from, now, timeout),
            _ => timeout,
        }
    }

    /// Where the grace periods of a drain in logind's window end, `window` from now, with the
    /// unit's `TimeoutStopSec` as systemd said it ([`grace_end`]); logged with the node.
    pub(super) fn window_grace_to(
        &self,
        window: Duration,
        stop_timeout: &Result<Option<Duration>, AskError>,
    ) -> GraceTo {
        let node = &self.access.settings.node_name;
        let margin = self.access.settings.daemon.release_margin;
        let (after, end, why) = grace_end(window, self.drain_time_left(), stop_timeout, margin);
        tracing::info!(
            "evictions from node {node} get grace periods up to {}, {} from now: {why}",
            end.phrase(),
            seconds(after)
        );
        GraceTo {
            at: Instant::now() + after,
            end,
            why,
        }
    }

    /// `StartStopStage`: the boot record gets the shutdown (kept if the window recorded it),
    /// and what `[shutdown]` says for `kind` runs within `stage`. No lock, no guard.
    pub(super) fn start_stop_stage(&mut self, kind: ShutdownKind, stage: Duration) {
        let started = Instant::now();
        let node = self.access.settings.node_name.clone();
        self.abort_restore("the system shuts down");
        let _ = self.boot.log.shutdown_started(kind, false);
        let deadline = started + stage;
        let policy = self.access.settings.shutdown.policy(kind);
        let what = kind.noun();
        self.out.status.set(format!(
            "draining node {node} in the stop phase of the {what} (budget {})",
            seconds(stage)
        ));
        // Nothing comes after the stop phase: its end is the drain's.
        let grace_to = GraceTo {
            at: deadline,
            end: GraceEnd::StopPhase,
            why: format!(
                "the stop phase is the drain's last time: {} from systemd's SIGTERM (the unit's \
                 TimeoutStopSec less [daemon] release_margin, within what is left of [drain] \
                 timeout)",
                seconds(stage)
            ),
        };
        self.spawn_work(Job::Shutdown(Work {
            kind,
            stage: Stage::StopPhase { grace_to },
            policy,
            started,
            deadline,
            reason: format!("{what} of the host, stop phase"),
            warm: None,
            ended_before: None,
        }));
    }
}

/// Where the grace periods of a drain in logind's window end, as a time from now, which end
/// that is, and why. `window`: the time left to the window's deadline; `drain_left`: what is
/// left of `[drain] timeout`; `stop_timeout`: the unit's `TimeoutStopSec` as systemd said it.
///
/// The drain goes on in the stop phase when it is cut at the window's end ([`Daemon::stop_answer`]):
/// systemd stops the unit no earlier than the lock goes, and gives the stage
/// [`systemd::stage_time`] of what is left of `[drain] timeout` then, so the stage ends no earlier
/// than the window's end plus that time counted at the window's end. When that is at least
/// [`STAGE_MIN`], the stop phase can be counted on and its end is where graces end; otherwise
/// (systemd did not say, the unit's timeout or what is left of `[drain] timeout` leaves no stage
/// worth starting) the window's end, as for any drain. Pure.
pub(super) fn grace_end(
    window: Duration,
    drain_left: Duration,
    stop_timeout: &Result<Option<Duration>, AskError>,
    margin: Duration,
) -> (Duration, GraceEnd, String) {
    let in_window = |why: String| (window, GraceEnd::LogindWindow, why);
    let timeout = match stop_timeout {
        Ok(timeout) => *timeout,
        Err(e) => return in_window(format!("no second stage can be counted on: {e}")),
    };
    let after_window = drain_left.saturating_sub(window);
    let unit = timeout.map_or_else(|| "infinity".to_owned(), seconds);
    if after_window < STAGE_MIN {
        return in_window(format!(
            "logind's window holds [drain] timeout but for {}, less than the {} a second stage \
             needs",
            seconds(after_window),
            seconds(STAGE_MIN)
        ));
    }
    match systemd::stage_time(timeout, margin, after_window) {
        Some(stage) if stage >= STAGE_MIN => (
            window + stage,
            GraceEnd::StopPhase,
            format!(
                "the drain goes on in the unit's stop phase for {} after logind's window (the \
                 unit's TimeoutStopSec {unit} less the {} release margin, within the {} left of \
                 [drain] timeout)",
                seconds(stage),
                seconds(margin),
                seconds(after_window)
            ),
        ),
        _ => in_window(format!(
            "the unit's TimeoutStopSec ({unit}) less the {} release margin leaves a second stage \
             less than the {} it needs",
            seconds(margin),
            seconds(STAGE_MIN)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    #[test]
    fn graces_end_with_the_stop_phase_only_when_it_can_be_counted_on() {
        let margin = s(5);
        // The machine: a 5 s window, 60 s of [drain] timeout, TimeoutStopSec 125 s: the
        // stop phase has the 55 s the window left.
        let (after, end, why) = grace_end(s(5), s(60), &Ok(Some(s(125))), margin);
        assert_eq!((after, end), (s(60), GraceEnd::StopPhase), "{why}");
        assert!(why.contains("TimeoutStopSec 125 s"), "{why}");
        // The unit's timeout is the shorter: the stage is it less the margin.
        let (after, end, _) = grace_end(s(5), s(60), &Ok(Some(s(30))), margin);
        assert_eq!((after, end), (s(30), GraceEnd::StopPhase));
        // TimeoutStopSec=infinity: what is left of [drain] timeout.
        let (after, end, _) = grace_end(s(5), s(60), &Ok(None), margin);
        assert_eq!((after, end), (s(60), GraceEnd::StopPhase));
        // A unit timeout that leaves less than a stage: the window.
        let (after, end, why) = grace_end(s(5), s(60), &Ok(Some(s(9))), margin);
        assert_eq!((after, end), (s(5), GraceEnd::LogindWindow), "{why}");
        assert!(why.contains("TimeoutStopSec (9 s)"), "{why}");
        // The window holds (nearly) all of [drain] timeout: the window.
        let (after, end, why) = grace_end(s(5), s(8), &Ok(Some(s(125))), margin);
        assert_eq!((after, end), (s(5), GraceEnd::LogindWindow), "{why}");
        assert!(why.contains("but for 3 s"), "{why}");
        // systemd did not say: the window, with why.
        let unasked = Err(AskError::NoAnswer(ASK_SYSTEMD_MAX));
        let (after, end, why) = grace_end(s(5), s(60), &unasked, margin);
        assert_eq!((after, end), (s(5), GraceEnd::LogindWindow));
        assert!(why.contains("did not answer within 1000 ms"), "{why}");
    }
}
