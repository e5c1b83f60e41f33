//! The stop phase's second stage: SIGTERM while the system shuts down. systemd stops the unit
//! before the kubelet, the container runtime and the network (the unit is ordered after them),
//! so what the window's drain left, or a shutdown that never went through logind
//! (`systemctl start reboot.target`, SIGRTMIN+5 to PID 1), is drained here, within the unit's
//! own stop timeout ([`crate::daemon::systemd`]) and what is left of `[drain] timeout`: that is
//! the drain's one time across both stages, so a drain that had all of it in logind's window
//! (the shipped drop-in allows more than the default timeout) has no second stage. A plain `systemctl stop` or `restart` while the
//! system runs stops at once, as before.

use std::time::Duration;

use tokio::time::Instant;
use tracing::Instrument;

use super::work;
use super::{Daemon, Running};
use crate::budget::seconds;
use crate::config::ShutdownPolicy;
use crate::daemon::boot_record;
use crate::daemon::logind::Logind;
use crate::daemon::outcome::{DrainOutcome, Finished};
use crate::daemon::phase::{Event, Phase};
use crate::daemon::systemd;
use crate::shutdown_kind::ShutdownKind;

/// How long SIGTERM's handling waits for systemd to say whether the system shuts down and how
/// long the unit may take; no answer by then is a plain stop.
const ASK_SYSTEMD_MAX: Duration = Duration::from_secs(1);
/// The shortest stage worth starting: a list, an eviction and a pod's stop take seconds, and a
/// stage that cannot finish one would only replace the window's report with an emptier one.
const STAGE_MIN: Duration = Duration::from_secs(5);

impl Daemon {
    /// The event for SIGTERM or SIGINT: the second stage when the system shuts down and this
    /// shutdown is not drained yet, else a plain stop.
    pub(super) async fn stop_event(&mut self, logind: Option<&Logind>) -> Event {
        let node = self.settings.node_name.clone();
        let drained = match self.phase {
            Phase::Released(_) | Phase::Ready(_) => !self.left_work,
            Phase::Stopped | Phase::Stopping(_) => return Event::Stop,
            _ => false,
        };
        if drained {
            return Event::Stop;
        }
        let Some(conn) = logind.map(Logind::connection) else {
            return Event::Stop;
        };
        let asked = async {
            if !systemd::shutting_down(conn).await? {
                return Ok(None);
            }
            systemd::stop_timeout(conn).await.map(Some)
        };
        let timeout = match tokio::time::timeout(ASK_SYSTEMD_MAX, asked).await {
            Ok(Ok(Some(timeout))) => timeout,
            Ok(Ok(None)) => return Event::Stop,
            Ok(Err(e)) => {
                tracing::info!(
                    "cannot ask systemd whether the system shuts down ({e}); stopping the daemon \
                     of node {node} at once"
                );
                return Event::Stop;
            }
            Err(_) => {
                tracing::warn!(
                    "systemd did not say within {} ms whether the system shuts down; stopping \
                     the daemon of node {node} at once",
                    ASK_SYSTEMD_MAX.as_millis()
                );
                return Event::Stop;
            }
        };
        let margin = self.settings.daemon.release_margin;
        let left = self.drain_time_left();
        if left < STAGE_MIN {
            tracing::info!(
                "the system shuts down and the drain of node {node} has had its [drain] timeout \
                 ({}) but for {}: no second stage; stopping at once",
                seconds(self.settings.drain.timeout),
                seconds(left)
            );
            return Event::Stop;
        }
        let Some(stage) = systemd::stage_time(timeout, margin, left) else {
            tracing::warn!(
                "the system shuts down, but the unit's TimeoutStopSec ({}) leaves nothing after \
                 the {} margin; stopping the daemon of node {node} at once",
                timeout.map_or_else(|| "infinity".to_owned(), seconds),
                seconds(margin)
            );
            return Event::Stop;
        };
        tracing::warn!(
            "systemd stops the daemon of node {node} while the system shuts down (the kubelet \
             and the network still run); draining what is left in the stop phase, within {}",
            seconds(stage)
        );
        Event::StopInShutdown { within: stage }
    }

    /// What is left of `[drain] timeout` for this shutdown: the drain's one time across both
    /// stages, counted from the shutdown's recorded start (logind's announcement); all of it for
    /// a shutdown that never went through logind (none recorded).
    fn drain_time_left(&self) -> Duration {
        let timeout = self.settings.drain.timeout;
        let started = self
            .boot_log
            .record()
            .and_then(|r| r.shutdown)
            .and_then(|s| s.boottime_ns)
            .map(Duration::from_nanos);
        match (started, boot_record::boottime_now()) {
            (Some(from), Ok(now)) => crate::budget::remaining(from, now, timeout),
            _ => timeout,
        }
    }

    /// `StartStopStage`: the boot record gets the shutdown (kept if the window recorded it),
    /// and what `[shutdown]` says for `kind` runs within `stage`. No lock, no guard.
    pub(super) fn start_stop_stage(&mut self, kind: ShutdownKind, stage: Duration) {
        let started = Instant::now();
        let node = self.settings.node_name.clone();
        self.abort_restore("the system shuts down");
        let _ = self.boot_log.shutdown_started(kind, false);
        let deadline = started + stage;
        let policy = self.settings.shutdown.policy(kind);
        let what = kind.noun();
        self.status.set(format!(
            "draining node {node} in the stop phase of the {what} (budget {})",
            seconds(stage)
        ));
        let reason = format!("{what} of the host, stop phase");
        let (access, status) = (self.access.clone(), self.status.clone());
        let task = async move {
            let outcome = match policy {
                ShutdownPolicy::None => DrainOutcome::LeftAsIs,
                ShutdownPolicy::Cordon => work::cordon_node(access, kind, deadline, reason).await,
                ShutdownPolicy::Drain => {
                    work::drain_node(access, status, kind, deadline, reason, None, None).await
                }
            };
            Finished {
                outcome,
                took: started.elapsed(),
            }
        }
        .instrument(tracing::info_span!("stop_phase", shutdown_kind = %kind));
        self.drain = Some(Running {
            task: self.engine.spawn(task),
        });
    }
}
