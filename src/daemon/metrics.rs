//! Metrics for node_exporter's textfile collector (`[metrics] textfile`): the daemon's facts as a
//! Prometheus text exposition file, rewritten whole and atomically (a temporary file in the same
//! directory, then a rename, so node_exporter never reads half a file) whenever one changes.
//!
//! Names follow Prometheus' conventions (<https://prometheus.io/docs/practices/naming/>): the
//! `kube_shutdown_drain_` prefix, base units in the name (`_seconds`), `_timestamp_seconds` for
//! Unix times, booleans as 0/1 gauges, and `_total` only on the one counter: the boots that ended
//! without a drain of ours, carried across boots in the state directory's `boot-record`. Every
//! other value is a gauge about the last drain or restore. The last drain is read back from
//! `last-report.json` at start, so the drain before a reboot is still exported after it.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use std::collections::BTreeMap;

use crate::forecast::{Forecast, Verdict};
use crate::host::boot_record::UncleanCounts;
use crate::host::writer::Writer;
use crate::report::{Counts, Report, SlotReport};

const PREFIX: &str = "kube_shutdown_drain";

/// What the file says.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Snapshot {
    pub node: String,
    pub lock_held: bool,
    /// The drain budget and logind's InhibitDelayMaxSec, once logind was read.
    pub budget: Option<(Duration, Duration)>,
    pub last_drain: Option<Report>,
    /// When the last restore finished (Unix seconds) and whether it succeeded.
    pub last_restore: Option<(f64, bool)>,
    /// Boots that ended unclean, once this boot's record is read.
    pub unclean: Option<UncleanCounts>,
    /// The last forecast the daemon made (`[daemon] forecast_interval`).
    pub forecast: Option<ForecastFacts>,
    /// With `[fleet] gate`: whether the reboot gate's block lock is held.
    pub gate_closed: Option<bool>,
    /// With a `[reboot]` trigger: the follower's last look.
    pub reboot: Option<RebootFacts>,
}

/// What the metrics say of the reboots the node asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RebootFacts {
    /// A trigger says a reboot is needed.
    pub required: bool,
    /// The keys of what holds the needed reboot (`crate::reboot::holds::Key`), none when
    /// nothing does or none is needed.
    pub waiting: Vec<crate::reboot::holds::Key>,
    /// A maintenance window is open now (always, without windows).
    pub window_open: bool,
}

/// What the metrics say of a forecast.
#[derive(Debug, Clone, PartialEq)]
pub struct ForecastFacts {
    /// When it was made, Unix seconds.
    pub at: f64,
    pub verdict: Verdict,
    /// Pods each blocking budget keeps.
    pub blocked: BTreeMap<String, usize>,
    /// The drain's estimated time (`None`: blocked pods hold it to the deadline).
    pub estimate_seconds: Option<f64>,
    pub budget_seconds: f64,
}

impl ForecastFacts {
    pub fn of(f: &Forecast) -> ForecastFacts {
        ForecastFacts {
            at: jiff::Timestamp::now().as_millisecond() as f64 / 1000.0,
            verdict: f.verdict,
            blocked: f.blocked_per_budget(),
            estimate_seconds: f.estimate_seconds,
            budget_seconds: f.time_limit.drain_seconds,
        }
    }
}

/// Renders the exposition text. Pure.
pub fn render(s: &Snapshot) -> String {
    let mut out = Exposition {
        text: String::new(),
        node: s.node.clone(),
    };
    daemon(&mut out, s);
    if let Some(reboot) = &s.reboot {
        reboot_need(&mut out, reboot);
    }
    if let Some(budget) = s.budget {
        time_limit(&mut out, budget);
    }
    if let Some(r) = &s.last_drain {
        last_drain(&mut out, r);
    }
    if let Some(u) = s.unclean {
        unclean(&mut out, u);
    }
    if let Some(f) = &s.forecast {
        forecast(&mut out, f);
    }
    if let Some(restore) = s.last_restore {
        last_restore(&mut out, restore);
    }
    out.text
}

/// The families about the daemon itself: its version, its delay lock and the gate's block lock.
fn daemon(out: &mut Exposition, s: &Snapshot) {
    out.family(
        "info",
        "The node this daemon drains, and its version.",
        &[(out.labels(&[("version", env!("CARGO_PKG_VERSION"))]), 1.0)],
    );
    out.family(
        "inhibitor_lock_held",
        "Whether the daemon holds its logind delay inhibitor (1) or not (0).",
        &[(String::new(), bool_value(s.lock_held))],
    );
    if let Some(closed) = s.gate_closed {
        out.family(
            "reboot_gate_closed",
            "With [fleet] gate: whether the daemon holds its logind block lock on shutdowns (1) or not (0).",
            &[(String::new(), bool_value(closed))],
        );
    }
}

/// The families about the reboot a trigger asks for: needed, what it waits for, the window.
fn reboot_need(out: &mut Exposition, reboot: &RebootFacts) {
    out.family(
        "reboot_required",
        "With a [reboot] trigger: whether a trigger says the node needs a reboot (1) or not (0).",
        &[(String::new(), bool_value(reboot.required))],
    );
    let waiting: Vec<(String, f64)> = crate::reboot::holds::Key::ALL
        .iter()
        .map(|k| {
            let on = reboot.waiting.contains(k);
            (out.labels(&[("reason", k.as_str())]), bool_value(on))
        })
        .collect();
    out.family(
        "reboot_waiting",
        "With a [reboot] trigger: 1 for each reason the needed reboot waits (held, paused, blocking_pods, outside_window, forecast_blocks, unready_nodes, alerts_firing, unknown).",
        &waiting,
    );
    out.family(
        "reboot_window_open",
        "With a [reboot] trigger: whether a maintenance window is open now (1; always without windows) or not (0).",
        &[(String::new(), bool_value(reboot.window_open))],
    );
}

/// The families about the drain budget and logind's InhibitDelayMaxSec.
fn time_limit(out: &mut Exposition, (drain, logind_max): (Duration, Duration)) {
    out.family(
        "drain_budget_seconds",
        "How long a shutdown drain may take: min(drain.timeout, InhibitDelayMaxSec - release_margin).",
        &[(String::new(), drain.as_secs_f64())],
    );
    out.family(
        "logind_inhibit_delay_max_seconds",
        "logind's InhibitDelayMaxSec: how long logind waits for delay inhibitors.",
        &[(String::new(), logind_max.as_secs_f64())],
    );
}

/// The counter of boots that ended without a complete drain of ours, by reason.
fn unclean(out: &mut Exposition, u: UncleanCounts) {
    out.family(
        "unclean_shutdowns_total",
        "Boots that ended without a complete drain of ours, by the Node Event's reason: no shutdown announced (ShutdownWithoutDrain), or a drain cut short or incomplete (DrainIncomplete).",
        &[
            (
                out.labels(&[("reason", "ShutdownWithoutDrain")]),
                u.shutdown_without_drain as f64,
            ),
            (
                out.labels(&[("reason", "DrainIncomplete")]),
                u.drain_incomplete as f64,
            ),
        ],
    );
}

/// The families about the last restore: when it finished and whether it succeeded.
fn last_restore(out: &mut Exposition, (at, ok): (f64, bool)) {
    let node = out.labels(&[]);
    out.family(
        "last_restore_timestamp_seconds",
        "When the last restore (uncordon, untaint) finished, Unix time.",
        &[(node.clone(), at)],
    );
    out.family(
        "last_restore_success",
        "Whether the last restore undid everything it had to (1) or failed (0).",
        &[(node, bool_value(ok))],
    );
}

/// The families about the last drain.
fn last_drain(out: &mut Exposition, r: &Report) {
    last_drain_end(out, r);
    last_drain_pods(out, &r.counts);
    let node = out.labels(&[]);
    out.family(
        "last_drain_throttled_evictions",
        "Eviction requests of the last drain that the API server's priority and fairness refused (429, retried after Retry-After).",
        &[(node, f64::from(r.throttled))],
    );
    if let Some(slot) = &r.slot {
        last_drain_slot(out, slot);
    }
    let samples: Vec<_> = r
        .blocked_by
        .iter()
        .map(|b| (out.labels(&[("budget", &b.budget)]), b.pods.len() as f64))
        .collect();
    out.family(
        "last_drain_budget_blocked_pods",
        "Pods the last drain left because a PodDisruptionBudget refused their eviction, by budget.",
        &samples,
    );
}

/// The families about how the last drain went: its start, duration, completeness and deadline.
fn last_drain_end(out: &mut Exposition, r: &Report) {
    let node = out.labels(&[]);
    let started = r
        .started_at
        .parse::<jiff::Timestamp>()
        .map(|t| t.as_millisecond() as f64 / 1000.0)
        .unwrap_or(f64::NAN);
    out.family(
        "last_drain_start_timestamp_seconds",
        "When the last drain started, Unix time.",
        &[(node.clone(), started)],
    );
    out.family(
        "last_drain_duration_seconds",
        "How long the last drain took.",
        &[(node.clone(), r.duration_ms as f64 / 1000.0)],
    );
    out.family(
        "last_drain_complete",
        "Whether every pod of the last drain went and nothing failed (1) or not (0).",
        &[(node.clone(), bool_value(r.complete))],
    );
    out.family(
        "last_drain_deadline_reached",
        "Whether the last drain ran out of its budget (1) or not (0).",
        &[(node, bool_value(r.deadline_reached))],
    );
}

/// The family of the last drain's pods by outcome.
fn last_drain_pods(out: &mut Exposition, c: &Counts) {
    let outcomes = [
        ("evicted", c.evicted),
        ("deleted", c.deleted),
        ("gone", c.gone),
        ("completed", c.completed),
        ("skipped", c.skipped),
        ("blocked", c.blocked),
        ("failed", c.failed),
        ("pending", c.pending),
    ];
    let samples: Vec<_> = outcomes
        .iter()
        .map(|(o, n)| (out.labels(&[("outcome", o)]), *n as f64))
        .collect();
    out.family(
        "last_drain_pods",
        "Pods of the last drain by outcome.",
        &samples,
    );
}

/// The families about the last drain's slot: how long it waited and whether it got one.
fn last_drain_slot(out: &mut Exposition, slot: &SlotReport) {
    let node = out.labels(&[]);
    out.family(
        "last_drain_slot_wait_seconds",
        "How long the last drain waited for a drain slot ([fleet] slots).",
        &[(node.clone(), slot.waited_ms as f64 / 1000.0)],
    );
    out.family(
        "last_drain_slot_taken",
        "1 when the last drain got a drain slot, 0 when none came in time ([fleet] on_no_slot decided).",
        &[(node, if slot.slot.is_some() { 1.0 } else { 0.0 })],
    );
}

/// The families about the last forecast.
fn forecast(out: &mut Exposition, f: &ForecastFacts) {
    let node = out.labels(&[]);
    out.family(
        "forecast_timestamp_seconds",
        "When the daemon last made a forecast of a drain of the node now, Unix time.",
        &[(node.clone(), f.at)],
    );
    let verdicts: Vec<_> = [Verdict::Completes, Verdict::CutAtDeadline, Verdict::Blocked]
        .iter()
        .map(|v| {
            let name = match v {
                Verdict::Completes => "completes",
                Verdict::CutAtDeadline => "cut",
                Verdict::Blocked => "blocked",
            };
            (
                out.labels(&[("verdict", name)]),
                bool_value(*v == f.verdict),
            )
        })
        .collect();
    out.family(
        "forecast_verdict",
        "The last forecast's verdict for a drain of the node now: 1 for the verdict it gave (completes, cut at the deadline, blocked), 0 for the others.",
        &verdicts,
    );
    let blocked: Vec<_> = f
        .blocked
        .iter()
        .map(|(b, n)| (out.labels(&[("budget", b)]), *n as f64))
        .collect();
    out.family(
        "forecast_blocked_pods",
        "Pods the last forecast found a PodDisruptionBudget would keep on the node, by budget.",
        &blocked,
    );
    if let Some(e) = f.estimate_seconds {
        out.family(
            "forecast_estimate_seconds",
            "How long the last forecast estimates a drain of the node now would take.",
            &[(node.clone(), e)],
        );
    }
    out.family(
        "forecast_budget_seconds",
        "The drain budget the last forecast measured its estimate against.",
        &[(node, f.budget_seconds)],
    );
}

/// The text being written, and the node every labelled sample names.
struct Exposition {
    text: String,
    node: String,
}

impl Exposition {
    /// One family: HELP, TYPE (a counter when the name ends in `_total`, else a gauge), samples.
    fn family(&mut self, name: &str, help: &str, samples: &[(String, f64)]) {
        let type_ = if name.ends_with("_total") {
            "counter"
        } else {
            "gauge"
        };
        let _ = writeln!(self.text, "# HELP {PREFIX}_{name} {help}");
        let _ = writeln!(self.text, "# TYPE {PREFIX}_{name} {type_}");
        for (labels, value) in samples {
            let _ = writeln!(self.text, "{PREFIX}_{name}{labels} {value}");
        }
    }

    /// `{node="...",k="v",...}`, values escaped.
    fn labels(&self, more: &[(&str, &str)]) -> String {
        let mut labels = format!("{{node=\"{}\"", escape(&self.node));
        for (k, v) in more {
            let _ = write!(labels, ",{k}=\"{}\"", escape(v));
        }
        labels.push('}');
        labels
    }
}

fn bool_value(b: bool) -> f64 {
    if b { 1.0 } else { 0.0 }
}

/// A label value as the exposition format wants it: `\`, `"` and newlines escaped.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The daemon's handle: a snapshot shared by the service loop and the restore task, handed to
/// the file writer after every change when a textfile is configured (written off the caller's
/// path: a stalled filesystem under the textfile never holds a drain).
#[derive(Clone)]
pub struct Metrics {
    path: Option<PathBuf>,
    snapshot: Arc<Mutex<Snapshot>>,
    writer: Writer,
}

impl Metrics {
    /// Starts from the last report in `state_dir` (if any) and writes the file once.
    pub fn start(path: Option<PathBuf>, node: &str, state_dir: &Path, writer: Writer) -> Metrics {
        let last_drain = match Report::read_last(state_dir) {
            Ok(r) => r,
            Err(e) => {
                if path.is_some() {
                    tracing::info!("metrics start without the last drain: {e}");
                }
                None
            }
        };
        let m = Metrics {
            path,
            writer,
            snapshot: Arc::new(Mutex::new(Snapshot {
                node: node.to_owned(),
                last_drain: last_drain.filter(|r| !r.dry_run),
                ..Snapshot::default()
            })),
        };
        m.update(|_| {});
        m
    }

    /// Changes the snapshot and hands the new file to the writer (mode 0644: node_exporter runs
    /// as its own user). A file that cannot be written is logged by the writer, never an error:
    /// metrics must not delay a drain.
    pub fn update(&self, change: impl FnOnce(&mut Snapshot)) {
        // The snapshot's lock is held while the text is handed over: two updates that rendered
        // in one order reach the writer in that order (the older snapshot never wins).
        let mut s = self.snapshot.lock().unwrap_or_else(|p| p.into_inner());
        change(&mut s);
        if let Some(path) = &self.path {
            self.writer
                .put(path.clone(), render(&s).into_bytes(), 0o644, "metrics file");
        }
    }

    pub fn lock_held(&self, held: bool) {
        self.update(|s| s.lock_held = held);
    }

    pub fn gate_closed(&self, closed: bool) {
        self.update(|s| s.gate_closed = Some(closed));
    }

    pub fn reboot(&self, facts: RebootFacts) {
        self.update(|s| s.reboot = Some(facts));
    }

    pub fn time_limit(&self, drain: Duration, logind_max: Duration) {
        self.update(|s| s.budget = Some((drain, logind_max)));
    }

    pub fn drained(&self, report: &Report) {
        self.update(|s| s.last_drain = Some(report.clone()));
    }

    pub fn unclean(&self, counts: UncleanCounts) {
        self.update(|s| s.unclean = Some(counts));
    }

    pub fn forecast(&self, facts: ForecastFacts) {
        self.update(|s| s.forecast = Some(facts));
    }

    pub fn restored(&self, ok: bool) {
        let now = jiff::Timestamp::now().as_millisecond() as f64 / 1000.0;
        self.update(|s| s.last_restore = Some((now, ok)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> Report {
        serde_json::from_value(serde_json::json!({
            "node": "node-a", "why": "reboot of the host", "started_at": "2026-11-30T07:00:00.5Z",
            "duration_ms": 12500, "complete": false, "deadline_reached": true, "dry_run": false,
            "counts": {"evicted": 3, "deleted": 0, "gone": 1, "completed": 0, "skipped": 5,
                       "blocked": 2, "failed": 0, "pending": 0},
            "throttled": 4,
            "pods": [],
            "blocked_by": [{"budget": "shop/web", "message": "needs 2", "pods": ["shop/a", "shop/b"]}],
            "errors": [],
            "slot": {"slot": null, "waited_ms": 1500, "holders": ["node-b/b00t"]}
        }))
        .unwrap()
    }

    #[test]
    fn the_file_says_every_fact_under_its_conventional_name() {
        let text = render(&Snapshot {
            node: "node-a".into(),
            lock_held: true,
            budget: Some((Duration::from_secs(120), Duration::from_secs(150))),
            last_drain: Some(report()),
            last_restore: Some((1_764_486_000.0, true)),
            unclean: Some(UncleanCounts {
                shutdown_without_drain: 2,
                drain_incomplete: 0,
            }),
            forecast: Some(ForecastFacts {
                at: 1_764_486_100.0,
                verdict: Verdict::Blocked,
                blocked: [("shop/web".to_owned(), 1)].into(),
                estimate_seconds: None,
                budget_seconds: 120.0,
            }),
            gate_closed: Some(true),
            reboot: Some(RebootFacts {
                required: true,
                waiting: vec![crate::reboot::holds::Key::Held],
                window_open: false,
            }),
        });
        for line in [
            "kube_shutdown_drain_reboot_required 1",
            "kube_shutdown_drain_reboot_waiting{node=\"node-a\",reason=\"held\"} 1",
            "kube_shutdown_drain_reboot_waiting{node=\"node-a\",reason=\"outside_window\"} 0",
            "kube_shutdown_drain_reboot_window_open 0",
            "kube_shutdown_drain_forecast_timestamp_seconds{node=\"node-a\"} 1764486100",
            "kube_shutdown_drain_forecast_verdict{node=\"node-a\",verdict=\"blocked\"} 1",
            "kube_shutdown_drain_forecast_verdict{node=\"node-a\",verdict=\"completes\"} 0",
            "kube_shutdown_drain_forecast_verdict{node=\"node-a\",verdict=\"cut\"} 0",
            "kube_shutdown_drain_forecast_blocked_pods{node=\"node-a\",budget=\"shop/web\"} 1",
            "kube_shutdown_drain_forecast_budget_seconds{node=\"node-a\"} 120",
            "kube_shutdown_drain_inhibitor_lock_held 1",
            "kube_shutdown_drain_reboot_gate_closed 1",
            "kube_shutdown_drain_drain_budget_seconds 120",
            "kube_shutdown_drain_logind_inhibit_delay_max_seconds 150",
            "kube_shutdown_drain_last_drain_start_timestamp_seconds{node=\"node-a\"} 1796022000.5",
            "kube_shutdown_drain_last_drain_duration_seconds{node=\"node-a\"} 12.5",
            "kube_shutdown_drain_last_drain_deadline_reached{node=\"node-a\"} 1",
            "kube_shutdown_drain_last_drain_complete{node=\"node-a\"} 0",
            "kube_shutdown_drain_last_drain_pods{node=\"node-a\",outcome=\"evicted\"} 3",
            "kube_shutdown_drain_last_drain_pods{node=\"node-a\",outcome=\"blocked\"} 2",
            "kube_shutdown_drain_last_drain_budget_blocked_pods{node=\"node-a\",budget=\"shop/web\"} 2",
            "kube_shutdown_drain_last_drain_throttled_evictions{node=\"node-a\"} 4",
            "kube_shutdown_drain_last_drain_slot_wait_seconds{node=\"node-a\"} 1.5",
            "kube_shutdown_drain_last_drain_slot_taken{node=\"node-a\"} 0",
            "kube_shutdown_drain_last_restore_timestamp_seconds{node=\"node-a\"} 1764486000",
            "kube_shutdown_drain_last_restore_success{node=\"node-a\"} 1",
            "# TYPE kube_shutdown_drain_last_drain_pods gauge",
            "kube_shutdown_drain_unclean_shutdowns_total{node=\"node-a\",reason=\"ShutdownWithoutDrain\"} 2",
            "kube_shutdown_drain_unclean_shutdowns_total{node=\"node-a\",reason=\"DrainIncomplete\"} 0",
            "# TYPE kube_shutdown_drain_unclean_shutdowns_total counter",
        ] {
            assert!(text.lines().any(|l| l == line), "{line:?} missing:\n{text}");
        }
        // Before anything happened: only what is known.
        let empty = render(&Snapshot::default());
        assert!(empty.contains("kube_shutdown_drain_inhibitor_lock_held 0"));
        assert!(!empty.contains("last_drain"), "{empty}");
        assert!(!empty.contains("forecast"), "{empty}");
        assert!(!empty.contains("reboot_"), "{empty}");
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[tokio::test]
    async fn the_file_is_replaced_whole_and_readable_by_node_exporter() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kube_shutdown_drain.prom");
        let writer = Writer::start().unwrap();
        let m = Metrics::start(Some(path.clone()), "node-a", dir.path(), writer.clone());
        m.lock_held(true);
        let last = writer.put(dir.path().join("other"), vec![], 0o600, "test file");
        let by = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        assert!(writer.written(last, by).await);
        std::fs::remove_file(dir.path().join("other")).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains("kube_shutdown_drain_inhibitor_lock_held 1"),
            "{text}"
        );
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o644);
        // Only the file itself is left in the directory: no temporary files.
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["kube_shutdown_drain.prom"]);
    }
}
