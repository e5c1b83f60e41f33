//! The daemon's standing forecast (`[daemon] forecast_interval`, off by default): every interval,
//! while no drain runs, the forecast the CLI's `forecast` makes, its verdict into the metrics, and
//! one Node Event when it turns to blocked (`DrainWouldBlock`) and one when it clears
//! (`DrainWouldComplete`). It runs as a task beside the loop beside the loop and never on the lock's
//! path: a drain that starts (a shutdown, a scheduled drain) stops a forecast in flight, and the
//! next one waits until the daemon is idle again.
//!
//! A fleet's daemons started together (a package upgrade) would forecast together: the first run
//! waits a fraction of the interval that depends on the node's name, spreading them over it.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::daemon::access::Access;
use crate::daemon::metrics::{ForecastFacts, Metrics};
use crate::events::Reason;
use crate::forecast::{self, Forecast, Verdict};
use crate::time_limit::TimeLimit;

/// The Event a forecast with `verdict` posts, given the last one posted (`None`: none yet):
/// one when the verdict turns to blocked, one when it comes back to completes. Pure.
pub fn event_for(last_posted: Option<Reason>, verdict: Verdict) -> Option<Reason> {
    let blocked_said = last_posted == Some(Reason::DrainWouldBlock);
    match verdict {
        Verdict::Blocked if !blocked_said => Some(Reason::DrainWouldBlock),
        Verdict::Completes if blocked_said => Some(Reason::DrainWouldComplete),
        _ => None,
    }
}

/// How long the first forecast waits: a fraction of `interval` fixed by the node's name (FNV-1a),
/// so a fleet started at once spreads its forecasts over the interval. Pure.
pub fn first_wait(node: &str, interval: Duration) -> Duration {
    let hash = node.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    interval.mul_f64((hash % 1000) as f64 / 1000.0)
}

/// The Event's message (it names the node and each blocking budget with its fix).
fn message(reason: Reason, f: &Forecast) -> String {
    match reason {
        Reason::DrainWouldBlock => {
            let budgets: Vec<String> = f
                .blocking_budgets
                .iter()
                .map(|b| format!("{} ({}; {})", b.budget, b.why, b.fix))
                .collect();
            format!(
                "a drain of node {} now would be blocked: {}; blocking: {}",
                f.node,
                f.summary,
                budgets.join("; ")
            )
        }
        _ => format!(
            "a drain of node {} now would complete: {}",
            f.node, f.summary
        ),
    }
}

/// Runs until the daemon ends: a forecast every `interval` while `idle` is true. `budget`: the
/// budget as last read from logind (no forecast before the first read). `blocked`: the last
/// forecast's message while it says a drain would block (the reboot gate closes on it). `last`:
/// the last forecast (the reboot follower weighs it).
pub(crate) async fn run_every(
    access: Access,
    interval: Duration,
    metrics: Metrics,
    mut idle: watch::Receiver<bool>,
    budget: watch::Receiver<Option<TimeLimit>>,
    blocked: watch::Sender<Option<String>>,
    last: watch::Sender<Option<Arc<Forecast>>>,
) {
    let node = access.settings.node_name.clone();
    let mut last_posted = None;
    tokio::time::sleep(first_wait(&node, interval)).await;
    loop {
        if idle.wait_for(|i| *i).await.is_err() {
            return;
        }
        let read = budget.borrow().clone();
        if let Some(budget) = read {
            tokio::select! {
                made = once(&access, &budget, &metrics, last_posted, &blocked, &last) => {
                    last_posted = made.or(last_posted);
                }
                _ = idle.wait_for(|i| !*i) => tracing::info!(
                    "a drain of node {node} starts; the forecast in flight is stopped"
                ),
            }
        }
        tokio::time::sleep(interval).await;
    }
}

/// One forecast: the metrics, and the Event when the verdict turned. The Event posted, if any.
async fn once(
    access: &Access,
    budget: &TimeLimit,
    metrics: &Metrics,
    last_posted: Option<Reason>,
    blocked: &watch::Sender<Option<String>>,
    last: &watch::Sender<Option<Arc<Forecast>>>,
) -> Option<Reason> {
    let node = &access.settings.node_name;
    let engine = match access.engine().await {
        Ok(engine) => engine,
        Err(e) => {
            tracing::warn!("no forecast for node {node}: {e}");
            return None;
        }
    };
    let made = forecast::read::gather(&engine, budget, forecast::Logind::Read).await;
    let f = match made {
        Ok(f) => f,
        Err(e) => {
            tracing::warn!("no forecast for node {node}: {e}");
            return None;
        }
    };
    metrics.forecast(ForecastFacts::of(&f));
    let now_blocked = (f.verdict == Verdict::Blocked).then(|| message(Reason::DrainWouldBlock, &f));
    blocked.send_if_modified(|b| {
        let changed = *b != now_blocked;
        *b = now_blocked;
        changed
    });
    tracing::debug!("forecast for node {node}: {}", f.summary);
    // The reboot follower weighs it (`forecast_blocks`, and its estimate against a window).
    let f = Arc::new(f);
    last.send_replace(Some(f.clone()));
    let reason = event_for(last_posted, f.verdict)?;
    let text = message(reason, &f);
    if reason == Reason::DrainWouldBlock {
        tracing::warn!("{text}");
    } else {
        tracing::info!("{text}");
    }
    engine.event(reason, &text).await;
    Some(reason)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_event_goes_once_when_the_verdict_turns_to_blocked_and_once_when_it_completes_again() {
        use Reason::{DrainWouldBlock as Block, DrainWouldComplete as Complete};
        use Verdict::*;
        let cases = [
            (None, Completes, None),
            (None, CutAtDeadline, None),
            (None, Blocked, Some(Block)),
            (Some(Block), Blocked, None),
            // Cut is not cleared: the warning stands until a drain would complete.
            (Some(Block), CutAtDeadline, None),
            (Some(Block), Completes, Some(Complete)),
            (Some(Complete), Completes, None),
            (Some(Complete), Blocked, Some(Block)),
        ];
        for (last, verdict, want) in cases {
            assert_eq!(event_for(last, verdict), want, "{last:?} then {verdict:?}");
        }
    }

    #[test]
    fn the_first_forecast_waits_a_part_of_the_interval_fixed_by_the_node_name() {
        let hour = Duration::from_secs(3600);
        let a = first_wait("worker-1", hour);
        assert!(a < hour);
        assert_eq!(a, first_wait("worker-1", hour));
        assert_ne!(a, first_wait("worker-2", hour));
    }
}
