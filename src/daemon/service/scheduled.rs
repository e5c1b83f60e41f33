//! A shutdown logind has scheduled, in the loop: the watch on logind's schedule file turned into
//! [`Event::Scheduled`] / [`Event::Unscheduled`], the one timer a schedule needs (its lead, then,
//! once its file went at its time, the wait for logind's announcement), and the early drain's
//! start and end. Nothing here runs, and no timer is armed, while no shutdown is scheduled.
//!
//! The early drain's deadline is the scheduled time, not `scheduled_lead` after its start: the
//! node may use every moment until logind starts the shutdown, and at that moment the usual
//! drain, inside logind's window and within its own budget, takes over whatever is left (a pod
//! held by its budget keeps being tried, with the lock held).
//!
//! logind removes the file both on `shutdown -c` and when the schedule fires, just before it
//! starts the shutdown: only a file gone before its time (`phase::fired`) is a cancel. A fired
//! schedule whose shutdown logind never announces (a block inhibitor refused it) is over after
//! [`ANNOUNCE_WINDOW`], and the node is restored as for a cancel.

use std::time::Duration;

use tokio::time::Instant;

use super::Daemon;
use super::work::{Job, Stage, Work};
use crate::config::ShutdownPolicy;
use crate::daemon::outcome::DrainOutcome;
use crate::daemon::phase::{Event, Overdue, Phase};
use crate::scheduled::{SCHEDULE_FILE, Schedule, ScheduleWatch, WatchError};
use crate::shutdown_kind::ShutdownKind;
use crate::time_limit::seconds;

pub(super) use crate::daemon::phase::verdict::ANNOUNCE_WINDOW;

/// Where the daemon is with the schedule file.
#[derive(Default)]
pub(super) struct Tracked {
    /// The watch; `None` when `drain_when_scheduled` is off or the watch failed.
    pub(super) watch: Option<ScheduleWatch>,
    /// The schedule the file holds now.
    pub(super) schedule: Option<Schedule>,
    /// When its drain is due (its time less the lead).
    due_at: Option<Instant>,
    /// When its file went at its time.
    gone_at: Option<Instant>,
    /// The early drain's engine, kept for the drain of logind's window for the same shutdown.
    pub(super) warm: Option<std::sync::Arc<crate::engine::Engine>>,
}

impl Tracked {
    /// The watch on `[daemon]`'s schedule directory, unless `drain_when_scheduled` is off.
    pub(super) fn open(settings: &crate::config::Settings) -> Tracked {
        let node = &settings.node_name;
        let watch = if settings.daemon.drain_when_scheduled {
            match ScheduleWatch::new(&settings.schedule_dir) {
                Ok(w) => Some(w),
                Err(e) => {
                    tracing::warn!(
                        "{e}; node {node} is drained only when logind announces a shutdown"
                    );
                    None
                }
            }
        } else {
            None
        };
        Tracked {
            watch,
            ..Tracked::default()
        }
    }
}

/// The schedule file's next state (never resolves without a watch).
pub(super) async fn next_schedule(tracked: &mut Tracked) -> Result<Option<Schedule>, WatchError> {
    match &mut tracked.watch {
        Some(watch) => watch.next().await,
        None => std::future::pending().await,
    }
}

/// The time from now until `at` (zero once it has passed).
fn until(at: jiff::Timestamp) -> Duration {
    Duration::try_from(at.duration_since(jiff::Timestamp::now())).unwrap_or(Duration::ZERO)
}

impl Daemon {
    /// What a read of the schedule file means for the phases, if anything.
    pub(super) fn schedule_read(
        &mut self,
        read: Result<Option<Schedule>, WatchError>,
    ) -> Option<Event> {
        let node = &self.access.settings.node_name;
        let read = match read {
            Ok(read) => read,
            Err(e) => {
                tracing::warn!("{e}; node {node} is drained only when logind announces a shutdown");
                self.scheduled.watch = None;
                return None;
            }
        };
        let Some(schedule) = read else {
            let gone = self.scheduled.schedule.take()?;
            let fired = crate::daemon::phase::fired(until(gone.at));
            self.scheduled.gone_at = fired.then(Instant::now);
            let file = self.access.settings.schedule_dir.join(SCHEDULE_FILE);
            if fired {
                tracing::info!(
                    "logind removed {} at its time: the {} of node {node} is starting",
                    file.display(),
                    gone.reason()
                );
            } else {
                tracing::info!(
                    "the {} of node {node} was cancelled ({} is gone)",
                    gone.reason(),
                    file.display()
                );
            }
            return Some(Event::Unscheduled { fired });
        };
        if until(schedule.at).is_zero() {
            tracing::info!(
                "logind's schedule names a {} whose time has passed; node {node} is drained when \
                 logind announces it",
                schedule.reason()
            );
            return None;
        }
        let lead = self.access.settings.daemon.scheduled_lead;
        let wait = schedule.wait_before_drain(jiff::Timestamp::now(), lead);
        self.scheduled.due_at = Some(Instant::now() + wait);
        self.scheduled.gone_at = None;
        let kind = schedule.kind;
        self.scheduled.schedule = Some(schedule);
        Some(Event::Scheduled {
            kind,
            policy: self.access.settings.shutdown.policy(kind),
        })
    }

    /// When the next timer rings, and its event: the table's ([`State::timer`]: the reboot's
    /// announcement due, the verdict's own time), or a schedule's
    /// ([`crate::daemon::phase::Phase::timer`]: its lead, or the wait for the announcement of
    /// one that fired), whichever comes first.
    pub(super) fn timer(&self) -> Option<(Instant, Event)> {
        let schedule = self.state.phase.timer().and_then(|event| {
            let at = match (&event, &self.state.phase) {
                (Event::Due, _) => self.scheduled.due_at,
                (_, Phase::Rebooting { .. }) => None,
                _ => self.scheduled.gone_at.map(|at| at + ANNOUNCE_WINDOW),
            };
            at.map(|at| (at, event))
        });
        let table = self.state.timer(Instant::now());
        [schedule, table]
            .into_iter()
            .flatten()
            .min_by_key(|(at, _)| *at)
    }

    /// A fired schedule's shutdown was not announced within [`ANNOUNCE_WINDOW`]: says so
    /// before the node is restored.
    pub(super) fn say_overdue(&self, overdue: Overdue) {
        let node = &self.access.settings.node_name;
        let window = seconds(ANNOUNCE_WINDOW);
        match overdue {
            Overdue::Agent { handover } => tracing::warn!(
                node = %node,
                "the update agent did not reboot node {node} within {} of the end of the drain \
                 for it; restoring node {node}",
                seconds(handover)
            ),
            Overdue::OwnReboot => tracing::warn!(
                node = %node,
                "logind announced no reboot within {window} of the node's own reboot asking for \
                 it; restoring node {node}"
            ),
            Overdue::Schedule { kind } => {
                let what = kind.map_or("scheduled shutdown", ShutdownKind::noun);
                tracing::warn!(
                    node = %node,
                    "logind announced no {what} within {window} of its schedule firing (a block \
                     inhibitor may have refused it); restoring node {node}"
                );
            }
        }
    }

    /// `ShowScheduled`: says what is done for the schedule the file holds.
    pub(super) fn show_scheduled(&self) {
        let node = &self.access.settings.node_name;
        let Some(s) = &self.scheduled.schedule else {
            return;
        };
        let reason = s.reason();
        if self.access.settings.shutdown.policy(s.kind) == ShutdownPolicy::None {
            tracing::info!(
                "logind has a {reason}; [shutdown] {} = \"none\": node {node} is left as it is",
                s.kind.config_key()
            );
            return;
        }
        let lead = self.access.settings.daemon.scheduled_lead;
        let wait = s.wait_before_drain(jiff::Timestamp::now(), lead);
        tracing::info!(
            "logind has a {reason}; draining node {node} {} before it (in {})",
            seconds(lead),
            seconds(wait)
        );
        self.out.status.set(format!(
            "{reason}: draining node {node} in {} ({} before it)",
            seconds(wait),
            seconds(lead)
        ));
    }

    /// `StartEarly`: the scheduled shutdown's drain (or cordon), by its scheduled time, with no
    /// lock of its own and nothing in the boot record.
    pub(super) fn start_early(&mut self, kind: ShutdownKind) {
        let node = self.access.settings.node_name.clone();
        let Some((reason, left)) =
            (self.scheduled.schedule.as_ref()).map(|s| (s.reason(), until(s.at)))
        else {
            return;
        };
        self.abort_restore("a scheduled shutdown's drain starts");
        let started = Instant::now();
        let deadline = started + left;
        let policy = self.access.settings.shutdown.policy(kind);
        let doing = if policy == ShutdownPolicy::Cordon {
            "cordoning"
        } else {
            "draining"
        };
        tracing::info!(
            node = %node,
            shutdown_kind = %kind,
            "{reason}: {doing} node {node} ahead of it, within {} (until the scheduled time)",
            seconds(left)
        );
        self.out
            .status
            .set(format!("{doing} node {node} ahead of the {reason}"));
        // Kept for the drain of logind's window: its client is connected by then.
        let warm =
            (self.access.engine_now().ok()).map(|e| std::sync::Arc::new(e.for_shutdown_kind(kind)));
        self.scheduled.warm = warm.clone();
        self.spawn_work(Job::Shutdown(Work {
            kind,
            stage: Stage::Early,
            policy,
            started,
            deadline,
            reason,
            warm,
            ended_before: None,
        }));
    }

    /// `SayEarly`: how the early drain ended; the node waits for logind's announcement.
    pub(super) fn say_early(&mut self) {
        let node = &self.access.settings.node_name;
        let (Some(finished), Some(s)) = (self.tasks.work.take_over(), &self.scheduled.schedule)
        else {
            return;
        };
        let reason = s.reason();
        let ms = finished.took.as_millis();
        match &finished.outcome {
            DrainOutcome::Drained(report) => {
                self.out.metrics.drained(report);
                if report.complete {
                    tracing::info!(
                        node = %node,
                        "drained node {node} ahead of the {reason} in {ms} ms: {}; waiting for \
                         logind to start it",
                        report.summary()
                    );
                } else {
                    tracing::warn!(
                        node = %node,
                        "the drain of node {node} ahead of the {reason} is incomplete after {ms} \
                         ms: {}; logind's window drains what is left",
                        report.summary()
                    );
                }
            }
            DrainOutcome::Cordoned => {
                tracing::info!("cordoned node {node} ahead of the {reason}")
            }
            DrainOutcome::Failed(why) => tracing::error!(
                node = %node,
                "the drain of node {node} ahead of the {reason} failed: {why}; logind's window \
                 drains it"
            ),
            _ => {}
        }
        self.out.status.set(format!(
            "node {node} prepared ahead of the {reason}; waiting for logind to start it"
        ));
    }
}
