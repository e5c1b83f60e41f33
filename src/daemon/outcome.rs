//! What the daemon says once a shutdown's work is over and the inhibitor released: one log line
//! per outcome (with the blocking budgets of an incomplete drain), `STATUS=`, the metrics, the
//! Event of a `[shutdown]` policy "none".

use std::sync::Arc;
use std::time::Duration;

use crate::config::Settings;
use crate::daemon::metrics::Metrics;
use crate::daemon::status::Status;
use crate::engine::Engine;
use crate::events::Reason as EventReason;
use crate::host::boot_record::EndOutcome;
use crate::report::Report;
use crate::shutdown_kind::ShutdownKind;
use crate::time_limit::seconds;

/// How a shutdown's work ended.
pub(crate) enum DrainOutcome {
    /// The engine ran; the report says how far it got.
    Drained(Box<Report>),
    /// No drain ran (no client, or the prepare used the whole budget).
    Failed(String),
    /// `[shutdown]` said "cordon": the node was prepared (tainted, cordoned), nothing evicted.
    Cordoned,
    /// `[shutdown]` said "none": the node was left as it is.
    LeftAsIs,
    /// The budget of a shutdown under way at (re)start was already spent: nothing ran.
    Spent { budget: Duration },
    /// logind's maximum does not exceed the release margin: there is no time to drain at all.
    NoTime { logind_max: Duration },
}

impl DrainOutcome {
    /// Whether pods may be left to drain: an incomplete drain, or none that ran.
    pub(crate) fn leaves_work(&self) -> bool {
        match self {
            DrainOutcome::Drained(report) => !report.complete,
            DrainOutcome::Failed(_) | DrainOutcome::Spent { .. } | DrainOutcome::NoTime { .. } => {
                true
            }
            DrainOutcome::Cordoned | DrainOutcome::LeftAsIs => false,
        }
    }

    /// Whether nothing ran because an earlier daemon had this shutdown's whole budget.
    pub(crate) fn is_spent(&self) -> bool {
        matches!(self, DrainOutcome::Spent { .. })
    }
}

/// A shutdown's work, once it is over.
pub(crate) struct Finished {
    pub(crate) outcome: DrainOutcome,
    /// How long it took, from the announcement.
    pub(crate) took: Duration,
}

impl Finished {
    pub(crate) fn failed(why: String) -> Finished {
        Finished {
            outcome: DrainOutcome::Failed(why),
            took: Duration::ZERO,
        }
    }
}

/// How the drain ended, for the boot record: the outcome and the report's summary (or why no
/// drain ran).
pub(crate) fn end_of(outcome: &DrainOutcome) -> (EndOutcome, String) {
    match outcome {
        DrainOutcome::Drained(report) if report.complete => (EndOutcome::Drained, report.summary()),
        DrainOutcome::Drained(report) => (EndOutcome::Incomplete, report.summary()),
        DrainOutcome::Cordoned => (
            EndOutcome::Cordoned,
            "[shutdown] policy \"cordon\"".to_owned(),
        ),
        DrainOutcome::LeftAsIs => (
            EndOutcome::LeftAsIs,
            "[shutdown] policy \"none\"".to_owned(),
        ),
        DrainOutcome::Failed(why) => (EndOutcome::Failed, why.clone()),
        DrainOutcome::Spent { budget } => (
            EndOutcome::Failed,
            format!(
                "its {} budget was already spent when the daemon started",
                seconds(*budget)
            ),
        ),
        DrainOutcome::NoTime { logind_max } => (
            EndOutcome::Failed,
            format!(
                "logind's InhibitDelayMaxSec ({}) leaves nothing after the release margin",
                seconds(*logind_max)
            ),
        ),
    }
}

/// Logs the outcome and updates the status line. Runs after the release; an Event to post is
/// its own task. The engine has already stored the report in the state directory and posted
/// the Node Events. `held`: an inhibitor was held during the drain (and is released now).
pub(crate) fn say(
    settings: &std::sync::Arc<Settings>,
    status: &Status,
    metrics: &Metrics,
    kind: ShutdownKind,
    finished: Finished,
    held: bool,
) {
    let node = &settings.node_name;
    let ms = finished.took.as_millis();
    let released = if held {
        "inhibitor released"
    } else {
        "no inhibitor was held"
    };
    match finished.outcome {
        DrainOutcome::Drained(report) => {
            metrics.drained(&report);
            say_drained(status, node, kind, ms, released, &report);
        }
        DrainOutcome::Cordoned => say_cordoned(status, node, kind, ms, released),
        DrainOutcome::LeftAsIs => {
            say_left_as_is(status, node, kind, held);
            tokio::spawn(post_skipped(settings.clone(), kind));
        }
        DrainOutcome::Spent { budget } => say_spent(status, node, kind, budget, held),
        DrainOutcome::NoTime { logind_max } => {
            let margin = settings.daemon.release_margin;
            say_no_time(status, node, kind, logind_max, margin, released);
        }
        DrainOutcome::Failed(why) => say_failed(status, node, kind, ms, released, &why),
    }
}

/// `[shutdown]` policy "cordon": the node was tainted and cordoned, no pod evicted.
fn say_cordoned(status: &Status, node: &str, kind: ShutdownKind, ms: u128, released: &str) {
    let what = kind.noun();
    tracing::info!(
        node = %node,
        shutdown_kind = %kind,
        outcome = "cordoned",
        "tainted and cordoned node {node} for the {what} in {ms} ms, evicting no pods \
         ([shutdown] policy \"cordon\"); {released}"
    );
    status.set(format!(
        "node {node} cordoned for the {what} without a drain; {released}"
    ));
}

/// An earlier daemon had this shutdown's whole `budget`: nothing ran.
fn say_spent(status: &Status, node: &str, kind: ShutdownKind, budget: Duration, held: bool) {
    let what = kind.noun();
    let released = if held {
        "released the inhibitor"
    } else {
        "holding no inhibitor"
    };
    tracing::warn!(
        "the {} budget for the {what} is already spent; {released} for node {node} \
         without draining (the node stays as the last drain left it)",
        seconds(budget)
    );
    status.set(format!(
        "budget for the {what} already spent when the daemon started; {released} without \
         draining node {node}"
    ));
}

/// logind's maximum does not exceed the release margin: there was no time to drain at all.
fn say_no_time(
    status: &Status,
    node: &str,
    kind: ShutdownKind,
    logind_max: Duration,
    release_margin: Duration,
    released: &str,
) {
    let what = kind.noun();
    tracing::error!(
        "logind's InhibitDelayMaxSec ({}) does not exceed [daemon] release_margin ({}): \
         no time is left to drain node {node} for the {what}; {released} at once",
        seconds(logind_max),
        seconds(release_margin)
    );
    status.set(format!(
        "no time to drain node {node}: logind allows {}, the release margin is {}",
        seconds(logind_max),
        seconds(release_margin)
    ));
}

/// No drain ran, and `why`.
fn say_failed(
    status: &Status,
    node: &str,
    kind: ShutdownKind,
    ms: u128,
    released: &str,
    why: &str,
) {
    let what = kind.noun();
    tracing::error!(
        "the drain of node {node} for the {what} failed after {ms} ms; {released}: \
         {why}"
    );
    status.set(format!(
        "the drain of node {node} failed; {released}: {why}"
    ));
}

/// A drain's end: complete or not, its errors, and the budgets that kept pods.
fn say_drained(
    status: &Status,
    node: &str,
    kind: ShutdownKind,
    ms: u128,
    released: &str,
    report: &Report,
) {
    let what = kind.noun();
    if report.complete {
        tracing::info!(
            node = %node,
            shutdown_kind = %kind,
            outcome = "drained",
            "drained node {node} for the {what} in {ms} ms; {released}: {}",
            report.summary()
        );
    } else {
        tracing::error!(
            node = %node,
            shutdown_kind = %kind,
            outcome = "incomplete",
            "the drain of node {node} for the {what} ended incomplete after {ms} ms; \
             {released}: {}",
            report.summary()
        );
    }
    for error in &report.errors {
        tracing::error!("drain of node {node}: {error}");
    }
    // The one thing an admin must act on after an incomplete drain: which budget kept which
    // pods (the whole table is in the report file).
    for b in &report.blocked_by {
        tracing::warn!(
            budget = %b.budget,
            "drain of node {node}: blocked by budget {}: {} ({})",
            b.budget,
            b.pods.join(", "),
            b.message
        );
    }
    status.set(format!(
        "node {node} drained for the {what}; {released}: {}",
        report.summary()
    ));
}

/// `[shutdown]` policy "none": the node was left as it is.
fn say_left_as_is(status: &Status, node: &str, kind: ShutdownKind, held: bool) {
    let (what, key) = (kind.noun(), kind.config_key());
    let released = if held {
        "released the inhibitor at once"
    } else {
        "holding no inhibitor"
    };
    tracing::info!(
        node = %node,
        shutdown_kind = %kind,
        "logind announced a {what}; [shutdown] {key} = \"none\": leaving node {node} as it is; \
         {released}"
    );
    status.set(format!(
        "{what} announced; [shutdown] {key} = \"none\": node {node} left as it is; {released}"
    ));
}

/// `[shutdown]` policy "none": a `DrainSkipped` Event, bounded by the request timeout; posted
/// after the inhibitor is released.
pub(crate) async fn post_skipped(settings: Arc<Settings>, kind: ShutdownKind) {
    let message = format!(
        "the {} of the host: [shutdown] {} = \"none\": left node {} as it is and released the \
         inhibitor at once",
        kind.noun(),
        kind.config_key(),
        settings.node_name
    );
    Engine::post_event(settings, EventReason::DrainSkipped, message).await;
}
