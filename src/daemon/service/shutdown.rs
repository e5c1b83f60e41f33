//! The start of one shutdown's work: the budget left (logind's maximum read again, the time
//! counted from logind's announcement), the lock's guard armed for it, and the task that does
//! what `[shutdown]` says for the kind (drain, cordon, nothing) within that budget.

use std::time::Duration;

use tokio::time::Instant;

use super::Daemon;
use super::stop_stage::ASK_SYSTEMD_MAX;
use super::work::{Job, Stage, Work};
use crate::config::ShutdownPolicy;
use crate::daemon::outcome::DrainOutcome;
use crate::host::logind::Logind;
use crate::host::systemd;
use crate::shutdown_kind::ShutdownKind;
use crate::time_limit::{self, RELEASE_GUARD, TimeLimit, seconds};

/// How long the shutdown path waits for logind to say its maximum again; a logind that does
/// not answer by then costs no more of the budget, and the maximum read at connect is used.
const BUDGET_REREAD_MAX: Duration = Duration::from_secs(1);

impl Daemon {
    /// `StartDrain`: counts the budget, arms the guard and starts the work for `kind`.
    pub(super) async fn start_drain(
        &mut self,
        kind: ShutdownKind,
        announced_now: bool,
        logind: Option<&Logind>,
    ) {
        let started = Instant::now();
        let node = self.access.settings.node_name.clone();
        self.abort_restore("a shutdown starts");
        // logind's one timer started when it sent the signal; a shutdown found under way counts
        // from its recorded start.
        let counted_from = self.boot.log.shutdown_started(kind, announced_now);
        let connect_budget = self.watches.time_limit.borrow().clone();
        // Armed at once with what is known, before anything here can wait.
        if let Some(b) = &connect_budget {
            self.inhibitor.release_by(
                (started + left(&node, counted_from, b, kind, false) + RELEASE_GUARD).into_std(),
            );
        }
        // The unit's stop timeout says whether the drain can go on in the stop phase; asked
        // while logind is, so it costs the window nothing more.
        let conn = logind.map(Logind::connection);
        let (limit, stop_timeout) = tokio::join!(
            self.time_limit_now(logind, connect_budget),
            systemd::stop_timeout_within(conn, ASK_SYSTEMD_MAX)
        );
        let left = left(&node, counted_from, &limit, kind, true);
        let deadline = started + left;
        self.inhibitor
            .release_by((deadline + RELEASE_GUARD).into_std());
        let policy = self.access.settings.shutdown.policy(kind);
        let guarded = self.inhibitor.is_held();
        if !announced_now {
            say_under_way(&node, kind, guarded);
        }
        let unguarded = self.what_is_done(kind, policy, &limit, left, guarded);
        let ended_before = no_time(&limit, left);
        let grace_to = (policy == ShutdownPolicy::Drain && ended_before.is_none()).then(|| {
            let window = deadline.saturating_duration_since(Instant::now());
            self.window_grace_to(window, &stop_timeout)
        });
        let work = Work {
            kind,
            stage: Stage::Window {
                unguarded,
                grace_to,
            },
            policy,
            started,
            deadline,
            reason: format!("{} of the host", kind.noun()),
            warm: self.scheduled.warm.take(),
            ended_before,
        };
        self.spawn_work(Job::Shutdown(work));
    }

    /// The budget for this shutdown: logind's maximum read again ([`Daemon::reread_budget`]),
    /// else as read at connect.
    async fn time_limit_now(
        &self,
        logind: Option<&Logind>,
        at_connect: Option<TimeLimit>,
    ) -> TimeLimit {
        match self.reread_time_limit(logind).await {
            Some(limit) => limit,
            None => match at_connect {
                Some(limit) => limit,
                // Never connected (cannot happen: a shutdown is learnt from logind): no time.
                None => time_limit::compute(Duration::ZERO, Duration::ZERO, Duration::ZERO),
            },
        }
    }

    /// logind's maximum read again (an admin may have raised it since the connection), bounded
    /// by [`BUDGET_REREAD_MAX`]; the metrics follow.
    async fn reread_time_limit(&self, logind: Option<&Logind>) -> Option<TimeLimit> {
        let node = &self.access.settings.node_name;
        let read =
            tokio::time::timeout(BUDGET_REREAD_MAX, logind?.time_limit(&self.access.settings))
                .await;
        match read {
            Ok(Ok(limit)) => {
                self.out.metrics.time_limit(limit.drain, limit.logind_max);
                if let Some(warning) = &limit.warning {
                    tracing::error!("{warning}");
                }
                Some(limit)
            }
            Ok(Err(e)) => {
                tracing::warn!("{e}; using logind's maximum read at connect time for node {node}");
                None
            }
            Err(_) => {
                tracing::warn!(
                    "logind did not say its maximum delay within {} ms; using the one read at \
                     connect time for node {node}",
                    BUDGET_REREAD_MAX.as_millis()
                );
                None
            }
        }
    }

    /// Says what is done for the shutdown (log, `STATUS=`); returns the warning for the Node
    /// Event when no inhibitor holds logind for the drain.
    fn what_is_done(
        &self,
        kind: ShutdownKind,
        policy: ShutdownPolicy,
        limit: &TimeLimit,
        left: Duration,
        guarded: bool,
    ) -> Option<String> {
        let node = &self.access.settings.node_name;
        let what = kind.noun();
        let doing = match policy {
            ShutdownPolicy::None => return None,
            ShutdownPolicy::Cordon => "cordoning",
            ShutdownPolicy::Drain => "draining",
        };
        // `left`, not the whole budget: a daemon (re)connected mid-shutdown has only the rest.
        tracing::info!(
            node = %node,
            shutdown_kind = %kind,
            "logind announced a {what}; {doing} node {node} within {} (logind allows {})",
            seconds(left),
            seconds(limit.logind_max)
        );
        if guarded {
            self.out.status.set(format!(
                "{doing} node {node} before the {what} (budget {})",
                seconds(left)
            ));
            return None;
        }
        let unguarded = format!(
            "logind refuses new delay inhibitors while a {what} is under way and this daemon \
             holds none: logind will not wait for this drain of node {node}; draining best \
             effort within {}, the machine may go down first",
            seconds(left)
        );
        tracing::error!("{unguarded}");
        self.out.status.set(format!(
            "draining node {node} without an inhibitor before the {what}: logind will not wait \
             for it (budget {})",
            seconds(left)
        ));
        Some(unguarded)
    }
}

/// What is left of the drain budget: all of it, or, for a shutdown under way at start, the rest
/// counted from the recorded moment logind's timer started. `say`: log how it was counted.
fn left(
    node: &str,
    counted_from: Option<Duration>,
    limit: &TimeLimit,
    kind: ShutdownKind,
    say: bool,
) -> Duration {
    let Some(from) = counted_from else {
        return limit.drain;
    };
    match crate::host::boot_record::boottime_now() {
        Ok(now) => {
            let left = time_limit::remaining(from, now, limit.drain);
            if say {
                tracing::info!(
                    "logind's timer for the {} started {} ago; {} of the {} budget is left for \
                     node {node}",
                    kind.noun(),
                    seconds(now.saturating_sub(from)),
                    seconds(left),
                    seconds(limit.drain)
                );
            }
            left
        }
        Err(e) => {
            if say {
                tracing::warn!(
                    "cannot read CLOCK_BOOTTIME: {e}; counting the drain budget from now for node \
                     {node}"
                );
            }
            limit.drain
        }
    }
}

/// A shutdown found under way at (re)start, drained at once.
fn say_under_way(node: &str, kind: ShutdownKind, guarded: bool) {
    let lock = if guarded {
        // From before a reconnect: logind kept it (its fd never depended on the bus).
        "with the inhibitor held since before the reconnect"
    } else {
        "without an inhibitor"
    };
    tracing::warn!(
        "logind is already preparing a {}; draining node {node} at once {lock}",
        kind.noun()
    );
}

/// What ends a shutdown's work before it starts: no time at all (logind's maximum within the
/// margin), or a budget already spent (by an earlier daemon). Pure.
fn no_time(limit: &TimeLimit, left: Duration) -> Option<DrainOutcome> {
    if limit.drain.is_zero() {
        Some(DrainOutcome::NoTime {
            logind_max: limit.logind_max,
        })
    } else if left.is_zero() {
        Some(DrainOutcome::Spent {
            budget: limit.drain,
        })
    } else {
        None
    }
}
