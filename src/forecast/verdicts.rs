//! The forecast's last step ([`finish`]): from the rows to each pod's verdict with its reason
//! and fix, the blocking budgets in the order the drain meets them, the node's verdict, the fixes
//! that give the drain the time it needs, the summary line.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use super::budgets::{self, Block};
use super::{
    BlockingBudget, Forecast, Inputs, Logind, PodForecast, Row, TimeLimitView, Verdict, by_name,
    secs,
};
use crate::config::{OnDeadline, Settings};
use crate::time_limit::{self as time_limit, TimeLimit};

/// The blocking budgets, collected in the order the drain meets their pods: one entry per
/// budget, found by name (a forecast over a thousand budgets stays linear).
struct Blocking<'a> {
    budgets: BTreeMap<String, &'a PodDisruptionBudget>,
    list: Vec<BlockingBudget>,
    at: BTreeMap<String, usize>,
}

impl<'a> Blocking<'a> {
    fn new(all: &'a [PodDisruptionBudget]) -> Self {
        Blocking {
            budgets: by_name(all),
            list: Vec::new(),
            at: BTreeMap::new(),
        }
    }

    /// Pod `key` kept by the budgets `names` for `block`. A budget that keeps it together with
    /// others gets its own words ([`budgets::shared`]), not the pod's finding.
    fn add(&mut self, names: &[String], block: &Block, key: &str) {
        for name in names {
            if let Some(&i) = self.at.get(name) {
                self.list[i].pods.push(key.to_owned());
                continue;
            }
            let own = if names.len() > 1 {
                budgets::shared(name)
            } else {
                block.clone()
            };
            let n = self.budgets.get(name).map(|b| budgets::numbers(b));
            self.at.insert(name.clone(), self.list.len());
            self.list.push(BlockingBudget {
                budget: name.clone(),
                disruptions_allowed: n.map_or(0, |n| n.allowed),
                current_healthy: n.map_or(0, |n| n.current),
                desired_healthy: n.map_or(0, |n| n.desired),
                expected_pods: n.map_or(0, |n| n.expected),
                pods: vec![key.to_owned()],
                why: own.why,
                fix: own.fix,
            });
        }
    }
}

/// A row's verdict, reason, detail and fix. A cut that more time would help raises `needed` to
/// the time the pod would need.
fn verdict_of(
    r: &Row<'_>,
    delete: bool,
    needed: &mut Duration,
) -> (Verdict, &'static str, String, Option<String>) {
    match (&r.block, &r.cut) {
        (Some((_, b)), _) if delete => (
            Verdict::CutAtDeadline,
            "deleted-at-deadline",
            format!(
                "{}; on_deadline = \"delete\" deletes it at the deadline, ignoring the budget",
                b.why
            ),
            Some(b.fix.clone()),
        ),
        (Some((_, b)), _) => (Verdict::Blocked, b.kind, b.why.clone(), Some(b.fix.clone())),
        (None, Some((kind, why, fix))) => {
            if *kind != "waits-for-completion" && *kind != "behind-blocked-group" {
                *needed = (*needed).max(r.starts + r.takes);
            }
            (
                Verdict::CutAtDeadline,
                *kind,
                why.clone(),
                Some(fix.clone()),
            )
        }
        (None, None) => (Verdict::Completes, "completes", r.goes.clone(), None),
    }
}

/// The one line for `check`, `status` and logs.
fn summary(
    node: &str,
    verdict: Verdict,
    pods: &[PodForecast],
    blocking: &[BlockingBudget],
    estimate: Option<Duration>,
    drain: Duration,
) -> String {
    let count = |v: Verdict| pods.iter().filter(|p| p.verdict == v).count();
    if verdict == Verdict::Completes {
        return format!(
            "node {node}: the drain completes: {} pod{} in about {} of the {} budget",
            pods.len(),
            if pods.len() == 1 { "" } else { "s" },
            time_limit::seconds(estimate.unwrap_or_default()),
            time_limit::seconds(drain)
        );
    }
    let names: Vec<String> = blocking.iter().map(|b| b.budget.clone()).collect();
    format!(
        "node {node}: the drain is {}: {} blocked, {} cut at the deadline, {} complete{}",
        if verdict == Verdict::Blocked {
            "blocked"
        } else {
            "cut at the deadline"
        },
        count(Verdict::Blocked),
        count(Verdict::CutAtDeadline),
        count(Verdict::Completes),
        if names.is_empty() {
            String::new()
        } else {
            format!("; budgets: {}", budgets::listed(&names, ", "))
        }
    )
}

/// The shutdown's time limit as the output shows it.
fn time_limit_view(inputs: &Inputs<'_>) -> TimeLimitView {
    let s = inputs.settings;
    TimeLimitView {
        drain_seconds: secs(inputs.time_limit.drain),
        drain_timeout_seconds: secs(s.drain.timeout),
        logind_max_seconds: secs(inputs.time_limit.logind_max),
        release_margin_seconds: secs(s.daemon.release_margin),
        logind: match &inputs.logind {
            Logind::Read => "read from logind".to_owned(),
            Logind::Assumed(_) => "assumed, logind not read".to_owned(),
        },
    }
}

/// The verdicts, the blocking budgets, the node-level fixes, the summary.
pub(super) fn finish(
    inputs: &Inputs<'_>,
    rows: Vec<Row<'_>>,
    total: Duration,
    estimate: Option<Duration>,
    volumes: Vec<String>,
    assumptions: Vec<String>,
) -> Forecast {
    let s = inputs.settings;
    let delete = s.drain.on_deadline == OnDeadline::Delete;
    let mut blocking = Blocking::new(inputs.budgets);
    let mut needed = Duration::ZERO;
    let mut pods = Vec::with_capacity(rows.len());
    for r in rows {
        if let Some((names, b)) = &r.block {
            blocking.add(names, b, &r.planned.key());
        }
        let (verdict, reason, detail, fix) = verdict_of(&r, delete, &mut needed);
        pods.push(PodForecast {
            namespace: r.planned.namespace.clone(),
            name: r.planned.name.clone(),
            action: r.planned.action,
            verdict,
            reason,
            detail,
            fix,
            budgets: r.budgets,
            starts_seconds: secs(r.starts),
            takes_seconds: secs(r.takes),
        });
    }
    if let Some(e) = estimate
        && e > total
    {
        needed = needed.max(e);
    }
    let mut fixes = Vec::new();
    if needed > Duration::ZERO {
        fixes.extend(longer_time_limit(s, inputs.time_limit, needed));
    }
    let verdict = pods
        .iter()
        .map(|p| p.verdict)
        .max()
        .unwrap_or(Verdict::Completes);
    let blocking = blocking.list;
    Forecast {
        node: s.node_name.clone(),
        verdict,
        summary: summary(
            &s.node_name,
            verdict,
            &pods,
            &blocking,
            estimate,
            inputs.time_limit.drain,
        ),
        time_limit: time_limit_view(inputs),
        estimate_seconds: estimate.map(secs),
        pods,
        blocking_budgets: blocking,
        volumes,
        fixes,
        assumptions,
    }
}

/// What gives the drain `needed` (whole seconds, rounded up, plus the time the drain keeps back
/// at the deadline): a longer `[drain] timeout` and, where logind would cut it, the
/// `InhibitDelayMaxSec` that fits (the time limit's own warning text).
fn longer_time_limit(s: &Settings, limit: &TimeLimit, needed: Duration) -> Vec<String> {
    let whole = Duration::from_secs(needed.as_secs() + 1);
    let mut fixes = Vec::new();
    let timeout = whole.max(s.drain.timeout);
    if whole > s.drain.timeout {
        fixes.push(format!(
            "set [drain] timeout = \"{}s\" in {} (the drain needs about {})",
            whole.as_secs(),
            s.source
                .as_ref()
                .map_or("the config file".into(), |p| p.display().to_string()),
            time_limit::seconds(needed)
        ));
    }
    if let Some(w) = time_limit::compute(timeout, limit.logind_max, s.daemon.release_margin).warning
    {
        fixes.push(w.to_string());
    }
    fixes
}
