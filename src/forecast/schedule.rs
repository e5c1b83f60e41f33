//! When each pod of a forecast starts and ends in the drain's order groups, and the cuts that
//! follow from time: a pod waited for that would not be gone in time, a group behind a blocked
//! pod, an eviction that would end past the deadline.

use std::collections::BTreeMap;
use std::time::Duration;

use super::{ASSUMED_REPLACEMENT_READY, Inputs, Row};
use crate::config::Settings;
use crate::policy::filters::{Action, Reason as PlanReason};
use crate::time_limit;

/// Starts and ends per the drain's order groups; the cuts that follow from time. Returns when
/// the evicted and waited-for pods would be done, `None` when a blocked pod holds the drain.
pub(super) fn schedule(
    inputs: &Inputs<'_>,
    rows: &mut [Row<'_>],
    total: Duration,
) -> Option<Duration> {
    let mut groups: BTreeMap<i32, Vec<usize>> = BTreeMap::new();
    let mut done = Duration::ZERO;
    for (i, r) in rows.iter_mut().enumerate() {
        match (r.planned.action, r.planned.order) {
            (Action::Evict, Some(order)) => groups.entry(order).or_default().push(i),
            // A `wait` pod, from the drain's start.
            _ => done = done.max(waited(inputs, r, total)),
        }
    }
    let mut start = Duration::ZERO;
    let mut held_by: Option<(i32, String)> = None;
    for (order, idx) in groups {
        if let Some((g, pod)) = &held_by {
            for &i in &idx {
                behind_blocked(&mut rows[i], order, *g, pod, total);
            }
            continue;
        }
        let mut end = start;
        for &i in &idx {
            let r = &mut rows[i];
            r.starts = start + ASSUMED_REPLACEMENT_READY * r.round;
            if r.block.is_some() {
                held_by.get_or_insert((order, r.planned.key()));
                continue;
            }
            let finish = r.starts + r.takes;
            end = end.max(finish);
            if finish > total {
                r.cut = Some(past_deadline(inputs.settings, r, total));
            }
        }
        start = end;
    }
    if held_by.is_some() {
        return None;
    }
    Some(done.max(start))
}

/// A pod the drain does not evict but waits for: when it would be gone (zero when that cannot
/// be forecast), and its cut when it would not be gone within `total`.
fn waited(inputs: &Inputs<'_>, r: &mut Row<'_>, total: Duration) -> Duration {
    let Some(pod) = r.pod else {
        return Duration::ZERO;
    };
    if crate::policy::filters::is_completed(pod) {
        r.takes = Duration::ZERO;
        r.goes = "it has completed".to_owned();
        return Duration::ZERO;
    }
    if let Some(ts) = &pod.metadata.deletion_timestamp {
        let left = Duration::try_from(ts.0.duration_since(inputs.now)).unwrap_or(Duration::ZERO);
        r.takes = left;
        r.goes = format!(
            "already terminating; gone within {}",
            time_limit::seconds(left)
        );
        if left > total {
            r.cut = Some((
                "terminating-past-deadline",
                format!(
                    "already terminating, and its deletion allows it {} more, past the {} budget",
                    time_limit::seconds(left),
                    time_limit::seconds(total)
                ),
                "wait for it to end before the shutdown".to_owned(),
            ));
        }
        return left;
    }
    let what = match r.planned.reason {
        PlanReason::Rule => "a wait-completed rule",
        _ => "its label cluster.x-k8s.io/drain: wait-completed",
    };
    r.cut = Some((
        "waits-for-completion",
        format!(
            "the drain waits for it to complete ({what}) and it is still running; when it ends \
             cannot be forecast, and the drain is cut if it has not within {}",
            time_limit::seconds(total)
        ),
        "let it finish before the shutdown, or drop the wait-completed rule or label".to_owned(),
    ));
    Duration::ZERO
}

/// A pod of order group `order`, which starts only after group `g`, held by blocked `pod`.
fn behind_blocked(r: &mut Row<'_>, order: i32, g: i32, pod: &str, total: Duration) {
    r.starts = total;
    if r.block.is_none() {
        r.cut = Some((
            "behind-blocked-group",
            format!(
                "its order group {order} starts only when group {g} is done, and {pod} of group {g} \
                 is blocked until the deadline"
            ),
            format!("fix what blocks {pod} (above), or give {pod} a later order"),
        ));
    }
}

/// Why pod row `r`, which would end past `total`, is cut: it waits for replacements too long,
/// or its grace (or its last drain's time) is longer than the time left when it starts.
fn past_deadline(s: &Settings, r: &Row<'_>, total: Duration) -> (&'static str, String, String) {
    let left = total.saturating_sub(r.starts);
    let fit = if s.drain.fit_grace_to_deadline {
        format!(
            "its eviction asks for {} instead (fit_grace_to_deadline), so it is stopped before it is done",
            time_limit::seconds(Duration::from_secs(left.as_secs().max(1)))
        )
    } else {
        "the power-off cuts it".to_owned()
    };
    if r.round > 0 && r.starts >= total {
        (
                "replacements-past-deadline",
                format!(
                    "it waits for {} replacement(s) to be Ready elsewhere first, past the {} budget",
                    r.round,
                    time_limit::seconds(total)
                ),
                "loosen its budget so that its pods can go at once, or give the drain more time (below)"
                    .to_owned(),
            )
    } else {
        let (kind, what, fix) = if r.measured {
            (
                "slow-in-last-drain",
                format!("it took {} in the last drain", time_limit::seconds(r.takes)),
                "make it stop faster on SIGTERM, or give the drain more time (below)".to_owned(),
            )
        } else {
            (
                "grace-longer-than-time-left",
                format!("its grace period is {}", time_limit::seconds(r.takes)),
                format!(
                    "lower its terminationGracePeriodSeconds to {} or less, or give the drain more time \
                     (below)",
                    left.as_secs()
                ),
            )
        };
        let detail = format!(
            "{what}, longer than the {} left when its eviction starts at {}; {fit}",
            time_limit::seconds(left),
            time_limit::seconds(r.starts)
        );
        (kind, detail, fix)
    }
}
