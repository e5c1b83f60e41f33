//! What the daemon says once a shutdown's drain is over and the inhibitor released: one log line
//! per outcome (with the blocking budgets of an incomplete drain), `STATUS=`, the metrics.

use std::time::Duration;

use crate::config::Settings;
use crate::daemon::boot_record::EndOutcome;
use crate::daemon::drain::DrainOutcome;
use crate::daemon::metrics::Metrics;
use crate::daemon::status::Status;

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
        DrainOutcome::Failed(why) => (EndOutcome::Failed, why.clone()),
    }
}

/// Logs the report and updates the status line. Runs after the release. The engine has
/// already stored the report in the state directory and posted the Node Events. `held`: an
/// inhibitor was held during the drain (and is released now).
pub(crate) fn log_outcome(
    settings: &Settings,
    status: &Status,
    metrics: &Metrics,
    what: &str,
    outcome: DrainOutcome,
    took: Duration,
    held: bool,
) {
    let node = &settings.node_name;
    let ms = took.as_millis();
    let released = if held {
        "inhibitor released"
    } else {
        "no inhibitor was held"
    };
    match outcome {
        DrainOutcome::Drained(report) => {
            metrics.drained(&report);
            if report.complete {
                tracing::info!(
                    node = %node,
                    shutdown_kind = %what,
                    outcome = "drained",
                    "drained node {node} for the {what} in {ms} ms; {released}: {}",
                    report.summary()
                );
            } else {
                tracing::error!(
                    node = %node,
                    shutdown_kind = %what,
                    outcome = "incomplete",
                    "the drain of node {node} for the {what} ended incomplete after {ms} ms; \
                     {released}: {}",
                    report.summary()
                );
            }
            for error in &report.errors {
                tracing::error!("drain of node {node}: {error}");
            }
            // The one thing an admin must act on after an incomplete drain: which budget
            // kept which pods (the whole table is in the report file).
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
        DrainOutcome::Cordoned => {
            tracing::info!(
                node = %node,
                shutdown_kind = %what,
                outcome = "cordoned",
                "tainted and cordoned node {node} for the {what} in {ms} ms, evicting no pods \
                 ([shutdown] policy \"cordon\"); {released}"
            );
            status.set(format!(
                "node {node} cordoned for the {what} without a drain; {released}"
            ));
        }
        DrainOutcome::Failed(why) => {
            tracing::error!(
                "the drain of node {node} for the {what} failed after {ms} ms; {released}: \
                 {why}"
            );
            status.set(format!(
                "the drain of node {node} failed; {released}: {why}"
            ));
        }
    }
}
