//! The report of one drain: every pod with its action, reason, outcome and timings, the budgets
//! that blocked pods, and whether the drain completed. Printed as text or JSON and written to the
//! state directory as the last report.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::policy::filters::{Action, Reason};
use crate::policy::plan::PlannedPod;
use crate::shutdown_kind::ShutdownKind;

/// The file name of the last report inside the state directory.
pub const LAST_REPORT_FILE: &str = "last-report.json";

/// What finally happened to a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Outcome {
    /// Evicted, and it has left the node.
    Evicted,
    /// Deleted at the deadline (`on_deadline = "delete"`), ignoring its budget.
    Deleted,
    /// Left the node (or was replaced by another UID) without us evicting it.
    Gone,
    /// A `wait` pod that reached Succeeded or Failed.
    Completed,
    /// Left alone by the plan.
    Skipped,
    /// Still there at the deadline because a disruption budget refused the eviction.
    Blocked,
    /// An eviction error other than a budget; see `detail`.
    Failed,
    /// Still there at the deadline (eviction accepted but the pod had not gone, or not started).
    Pending,
    /// `--dry-run`: nothing was done.
    DryRun,
}

impl Outcome {
    /// The JSON and text spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Evicted => "evicted",
            Outcome::Deleted => "deleted",
            Outcome::Gone => "gone",
            Outcome::Completed => "completed",
            Outcome::Skipped => "skipped",
            Outcome::Blocked => "blocked",
            Outcome::Failed => "failed",
            Outcome::Pending => "pending",
            Outcome::DryRun => "dry-run",
        }
    }

    /// Whether the pod no longer holds up the drain.
    pub fn is_done(self) -> bool {
        matches!(
            self,
            Outcome::Evicted
                | Outcome::Deleted
                | Outcome::Gone
                | Outcome::Completed
                | Outcome::Skipped
                | Outcome::DryRun
        )
    }
}

/// One pod in the report: the plan's fields plus what happened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodReport {
    pub namespace: String,
    pub name: String,
    pub action: Action,
    pub reason: Reason,
    pub order: Option<i32>,
    pub outcome: Outcome,
    /// The budget's message or the error, when there is one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// The disruption budget that last refused an eviction of this pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budget: Option<String>,
    /// Eviction requests sent for this pod.
    #[serde(default)]
    pub attempts: u32,
    /// Of those, the ones the API server's flow control refused (a 429 of priority and fairness,
    /// not of a budget).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub throttled: u32,
    /// Milliseconds after the drain started at which we started acting on the pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_ms: Option<u64>,
    /// Milliseconds after the drain started at which the pod was done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_ms: Option<u64>,
    /// Set when the eviction's grace period was shortened to fit the deadline
    /// (`drain.fit_grace_to_deadline`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_fit: Option<GraceFit>,
}

/// A grace period shortened to the time left before the deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct GraceFit {
    /// The grace period the pod would have had (its own, or `drain.grace_period`).
    pub from_seconds: i64,
    /// The grace period the (last) eviction asked for.
    pub to_seconds: i64,
}

impl PodReport {
    /// A report entry for a planned pod that has not been acted on yet.
    pub fn from_plan(p: &PlannedPod, outcome: Outcome) -> PodReport {
        PodReport {
            namespace: p.namespace.clone(),
            name: p.name.clone(),
            action: p.action,
            reason: p.reason,
            order: p.order,
            outcome,
            detail: None,
            budget: None,
            attempts: 0,
            throttled: 0,
            started_ms: None,
            finished_ms: None,
            grace_fit: None,
        }
    }

    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// A disruption budget that held pods on the node at the end.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockedBudget {
    /// `namespace/name` of the PodDisruptionBudget.
    pub budget: String,
    /// The API server's message, e.g. "The disruption budget web needs 2 healthy pods and has 2 currently".
    pub message: String,
    pub pods: Vec<String>,
}

/// A persistent volume of an evicted pod that was attached to the node when its pods were gone,
/// and when it was detached (its VolumeAttachment gone).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeReport {
    /// The PersistentVolume.
    pub volume: String,
    /// `namespace/name` of the claim the evicted pod mounted it through.
    pub claim: String,
    /// The VolumeAttachment that was waited for.
    pub attachment: String,
    /// Milliseconds after the drain started at which the attachment was seen gone; `null`: still
    /// attached at the deadline.
    pub detached_ms: Option<u64>,
}

impl VolumeReport {
    /// The text form of the detach time.
    pub fn state(&self) -> String {
        match self.detached_ms {
            Some(ms) => format!("detached at {:.2} s", ms as f64 / 1000.0),
            None => "still attached at the deadline".to_string(),
        }
    }
}

/// Counts for the finished event and the text summary.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Counts {
    pub evicted: usize,
    pub deleted: usize,
    pub gone: usize,
    pub completed: usize,
    pub skipped: usize,
    pub blocked: usize,
    pub failed: usize,
    pub pending: usize,
}

/// The report of one drain run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Report {
    pub node: String,
    /// Why the drain ran ("shutdown", "drain by hand", ...).
    pub why: String,
    /// RFC 3339 time the drain started.
    pub started_at: String,
    pub duration_ms: u64,
    /// Every pod that had to go went (or completed) and nothing failed.
    pub complete: bool,
    pub deadline_reached: bool,
    pub dry_run: bool,
    pub counts: Counts,
    /// Eviction requests the API server's flow control refused (429 of priority and fairness),
    /// all pods together; each was retried after its Retry-After.
    #[serde(default)]
    pub throttled: u32,
    pub pods: Vec<PodReport>,
    #[serde(default)]
    pub blocked_by: Vec<BlockedBudget>,
    /// The evicted pods' volumes whose detach the drain waited for (`drain.wait_for_detach`).
    #[serde(default)]
    pub volumes: Vec<VolumeReport>,
    /// Errors that concern the run rather than one pod (e.g. the pod list failed).
    #[serde(default)]
    pub errors: Vec<String>,
    /// The kind of shutdown the drain ran for ("reboot", "power-off", "soft-reboot", ...,
    /// "unknown"); absent for a drain by hand.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<ShutdownKind>,
    /// With `[fleet] slots`: the drain slot this drain waited for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slot: Option<SlotReport>,
    /// With `drain.fit_grace_to_deadline`: the deadline the evictions' grace periods were fitted
    /// to, and why that one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grace_fitted_to: Option<GraceDeadline>,
    /// With `[fleet] slots` and `settle_max`: what the node's slot waits for after its restore.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settle: Option<Covering>,
}

/// The budgets (`namespace/name`) that covered the pods a drain evicted, or, when they could
/// not be listed, those pods' namespaces (every budget there is waited for).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Covering {
    Budgets(Vec<String>),
    Namespaces(Vec<String>),
}

/// Which end of the drain's time a grace period is fitted to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GraceEnd {
    /// The drain's own deadline: a drain by hand, a scheduled drain.
    Drain,
    /// The end of logind's window: no stop phase can be counted on after it.
    LogindWindow,
    /// The end of the unit's stop phase, where a drain of logind's window goes on.
    StopPhase,
}

impl GraceEnd {
    /// The JSON spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            GraceEnd::Drain => "drain",
            GraceEnd::LogindWindow => "logind-window",
            GraceEnd::StopPhase => "stop-phase",
        }
    }

    /// In words: "the drain deadline", "the end of logind's window", "the end of the stop
    /// phase".
    pub fn phrase(self) -> &'static str {
        match self {
            GraceEnd::Drain => "the drain deadline",
            GraceEnd::LogindWindow => "the end of logind's window",
            GraceEnd::StopPhase => "the end of the stop phase",
        }
    }
}

/// The deadline the evictions' grace periods were fitted to (`drain.fit_grace_to_deadline`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GraceDeadline {
    /// Which end.
    pub end: GraceEnd,
    /// Milliseconds after the drain started at which the evictions' time ends there (that end
    /// less the time kept back for the deadline action).
    pub after_ms: u64,
    /// Why this end: the stop phase the drain goes on in, or why none can be counted on.
    pub why: String,
}

/// The wait for a drain slot before a drain (`crate::fleet`); it counts against the drain's
/// time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SlotReport {
    /// The slot Lease taken; `None`: none came in time.
    pub slot: Option<String>,
    /// How long the wait took.
    pub waited_ms: u64,
    /// Who held the slots when none came (`NODE/BOOT_ID`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub holders: Vec<String>,
    /// Why no slot could be asked for (an API error), if so.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The report could not be stored or read (the error names the file).
pub type ReportError = crate::state_file::JsonError;

impl Report {
    /// Recomputes `counts`, `blocked_by` and `complete` from the pods. Called once at the end.
    pub fn finish(&mut self) {
        let mut c = Counts::default();
        let mut budgets: Vec<BlockedBudget> = Vec::new();
        for p in &self.pods {
            match p.outcome {
                Outcome::Evicted => c.evicted += 1,
                Outcome::Deleted => c.deleted += 1,
                Outcome::Gone => c.gone += 1,
                Outcome::Completed => c.completed += 1,
                Outcome::Skipped | Outcome::DryRun => c.skipped += 1,
                Outcome::Blocked => c.blocked += 1,
                Outcome::Failed => c.failed += 1,
                Outcome::Pending => c.pending += 1,
            }
            // A pod deleted at the deadline was held by its budget until then.
            if matches!(p.outcome, Outcome::Blocked | Outcome::Deleted)
                && let Some(b) = &p.budget
            {
                match budgets.iter_mut().find(|x| &x.budget == b) {
                    Some(x) => x.pods.push(p.key()),
                    None => budgets.push(BlockedBudget {
                        budget: b.clone(),
                        message: p.detail.clone().unwrap_or_default(),
                        pods: vec![p.key()],
                    }),
                }
            }
        }
        if self.dry_run {
            c.skipped = self
                .pods
                .iter()
                .filter(|p| p.action == Action::Skip)
                .count();
        }
        self.counts = c;
        self.throttled = self.pods.iter().map(|p| p.throttled).sum();
        self.blocked_by = budgets;
        self.complete = self.errors.is_empty()
            && self.pods.iter().all(|p| p.outcome.is_done())
            && self.volumes.iter().all(|v| v.detached_ms.is_some());
    }

    /// The path of the last report in a state directory.
    pub fn path_in(state_dir: &Path) -> PathBuf {
        state_dir.join(LAST_REPORT_FILE)
    }

    /// Writes the report as the last report (atomically, never through a symlink: see
    /// [`crate::state_file::write`]).
    pub fn write_to(&self, state_dir: &Path) -> Result<PathBuf, ReportError> {
        crate::state_file::write_json(state_dir, LAST_REPORT_FILE, self)
    }

    /// Reads the last report, `None` when there is none yet; refuses anything but a regular file
    /// of at most 1 MiB (see [`crate::state_file::read`]).
    pub fn read_last(state_dir: &Path) -> Result<Option<Report>, ReportError> {
        crate::state_file::read_json(&Report::path_in(state_dir))
    }

    /// One line for logs and events: the evicted count, then every other count that is not zero.
    /// A dry run says what a drain would do, in `plan`'s words.
    pub fn summary(&self) -> String {
        if self.dry_run {
            let count = |a: Action| self.pods.iter().filter(|p| p.action == a).count();
            return format!(
                "node {} dry run, nothing changed: {} to evict, {} to wait for, {} skipped",
                self.node,
                count(Action::Evict),
                count(Action::Wait),
                count(Action::Skip)
            );
        }
        let c = &self.counts;
        let mut parts = vec![format!("{} evicted", c.evicted)];
        let attached = self
            .volumes
            .iter()
            .filter(|v| v.detached_ms.is_none())
            .count();
        let throttled = usize::try_from(self.throttled).unwrap_or(usize::MAX);
        for (n, one, many) in [
            (
                self.volumes.len() - attached,
                "volume detached",
                "volumes detached",
            ),
            (attached, "volume still attached", "volumes still attached"),
            (c.deleted, "deleted", "deleted"),
            (c.gone, "gone", "gone"),
            (c.completed, "completed", "completed"),
            (c.skipped, "skipped", "skipped"),
            (c.blocked, "blocked", "blocked"),
            (c.failed, "failed", "failed"),
            (c.pending, "pending", "pending"),
            (
                throttled,
                "eviction throttled by the API server",
                "evictions throttled by the API server",
            ),
        ] {
            if n > 0 {
                parts.push(crate::words::count(n, one, many));
            }
        }
        format!(
            "node {} {}: {} in {:.1} s",
            self.node,
            if self.complete {
                "drained"
            } else {
                "not drained"
            },
            parts.join(", "),
            self.duration_ms as f64 / 1000.0
        )
    }

    /// A table for people.
    pub fn to_text(&self) -> String {
        let mut out = self.summary();
        out.push('\n');
        if let Some(s) = &self.slot {
            let waited = s.waited_ms as f64 / 1000.0;
            let _ = match (&s.slot, &s.error) {
                (Some(name), _) => writeln!(out, "drain slot {name}, after {waited:.1} s"),
                (None, Some(e)) => writeln!(out, "no drain slot ({e}), after {waited:.1} s"),
                (None, None) => writeln!(
                    out,
                    "no drain slot after {waited:.1} s: held by {}",
                    s.holders.join(", ")
                ),
            };
        }
        if let Some(g) = &self.grace_fitted_to {
            let _ = writeln!(
                out,
                "grace periods fitted to {}, {:.1} s after the start: {}",
                g.end.phrase(),
                g.after_ms as f64 / 1000.0,
                g.why
            );
        }
        let width = crate::policy::plan::key_width(self.pods.iter().map(PodReport::key));
        let _ = writeln!(
            out,
            "{:<width$}  {:<6}  {:<9}  {:>9}  REASON / DETAIL",
            "POD", "ACTION", "OUTCOME", "SECONDS"
        );
        for p in &self.pods {
            let (action, outcome) = (p.action.as_str(), p.outcome.as_str());
            let secs = p
                .finished_ms
                .map_or("-".to_string(), |ms| format!("{:.2}", ms as f64 / 1000.0));
            let mut why = p.reason.as_str().to_string();
            if let Some(d) = &p.detail {
                let _ = write!(why, ": {d}");
            }
            if p.throttled > 0 && p.detail.is_none() {
                let _ = write!(
                    why,
                    " (throttled by the API server {} first)",
                    crate::words::plural(p.throttled, "time", "times")
                );
            }
            if let Some(g) = &p.grace_fit {
                let _ = write!(
                    why,
                    " (grace period cut from {} s to {} s to fit the deadline)",
                    g.from_seconds, g.to_seconds
                );
            }
            let _ = writeln!(
                out,
                "{:<width$}  {:<6}  {:<9}  {:>9}  {}",
                p.key(),
                action,
                outcome,
                secs,
                why
            );
        }
        for b in &self.blocked_by {
            let _ = writeln!(
                out,
                "blocked by budget {}: {} (pods: {})",
                b.budget,
                b.message,
                b.pods.join(", ")
            );
        }
        for v in &self.volumes {
            let _ = writeln!(
                out,
                "volume {} (claim {}, attachment {}): {}",
                v.volume,
                v.claim,
                v.attachment,
                v.state()
            );
        }
        for e in &self.errors {
            let _ = writeln!(out, "error: {e}");
        }
        out
    }
}

#[cfg(test)]
#[path = "report_tests.rs"]
mod tests;
