//! The drain forecast: if the node shut down now, would its drain complete within the budget,
//! and if not, what holds it and what would fix it. A pure function ([`forecast`]) over what a
//! plan reads (the node's pods and their verdicts), the PodDisruptionBudgets of their
//! namespaces, the other nodes (where a replacement must run), the shutdown budget
//! (`time_limit::compute`) and the last report's timings; [`read`] gathers those (four
//! lists, nothing written) and [`text`] renders the result.
//!
//! Per pod the drain would evict or wait for, a verdict:
//! - `blocked`: it would still be there at the deadline because the Eviction API keeps
//!   refusing it ([`budgets`]: several budgets, a budget at 0, one that never allows a
//!   disruption, one that counts no pods, no replacement can come up elsewhere, an unhealthy pod
//!   under `IfHealthyBudget`, a budget the disruption controller has not processed);
//! - `cut at the deadline`: it would go, but not within the budget: its grace period (or the
//!   time it took in the last drain) is longer than the time left when its eviction starts, it
//!   waits behind a blocked pod of an earlier order group, it waits for replacements past the
//!   deadline, its volumes would still be attached, it is a `wait` pod still running, or it is
//!   blocked and `on_deadline = "delete"` deletes it at the deadline;
//! - `completes` otherwise.
//!
//! The node's verdict is the worst of its pods'. The time model follows the drain: order groups
//! one after another (a group is done when its last pod is gone), the pods of a group at once,
//! a pod's time its measured time from the last report (same namespace and name, or the same
//! `generateName`) or else its grace period (the most the kubelet waits before it kills it),
//! a budget round (a replacement becoming Ready elsewhere) and a volume detach taken as
//! [`ASSUMED_REPLACEMENT_READY`] and [`ASSUMED_DETACH`] unless the last report measured them.

pub mod budgets;
pub mod read;
mod schedule;
pub mod text;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde::Serialize;

use self::budgets::{Block, Judgement, budget_name};
use crate::config::{OnDeadline, Settings};
use crate::policy::filters::Action;
use crate::policy::plan::{Plan, PlannedPod};
use crate::report::{Outcome, Report};
use crate::time_limit::{self as time_limit, TimeLimit};

/// A replacement's scheduling, start and readiness, per budget round, when nothing measured it.
pub const ASSUMED_REPLACEMENT_READY: Duration = Duration::from_secs(10);
/// The detach of the evicted pods' volumes after they are gone, when the last report did not
/// measure it.
pub const ASSUMED_DETACH: Duration = Duration::from_secs(10);

/// The verdict for a pod or the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    Completes,
    CutAtDeadline,
    Blocked,
}

impl Verdict {
    /// The words of the text output.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Completes => "completes",
            Verdict::CutAtDeadline => "cut at the deadline",
            Verdict::Blocked => "blocked",
        }
    }
}

/// Where logind's maximum delay came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Logind {
    /// Read from logind's `InhibitDelayMaxUSec`.
    Read,
    /// logind could not be read (why); the budget assumes it allows the drain timeout plus the
    /// release margin.
    Assumed(String),
}

/// What the forecast is computed from.
pub struct Inputs<'a> {
    pub settings: &'a Settings,
    pub plan: &'a Plan,
    /// The node's pods, as the plan was built from them.
    pub pods: &'a [Pod],
    /// The budgets of (at least) the namespaces of the node's pods.
    pub budgets: &'a [PodDisruptionBudget],
    /// Every node (where a replacement could run); `None` when not read.
    pub nodes: Option<&'a [Node]>,
    /// The shutdown's time limit the forecast judges against.
    pub time_limit: &'a TimeLimit,
    pub logind: Logind,
    pub last: Option<&'a Report>,
    pub now: jiff::Timestamp,
}

/// One pod's forecast. The JSON shape is part of the CLI contract.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PodForecast {
    pub namespace: String,
    pub name: String,
    pub action: Action,
    pub verdict: Verdict,
    /// What decided the verdict, one word (`budget-at-zero`, `grace-longer-than-time-left`, ...).
    pub reason: &'static str,
    /// The reason in words.
    pub detail: String,
    /// What would let it complete (not set when it completes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
    /// The budgets that select it (`namespace/name`).
    pub budgets: Vec<String>,
    /// When its eviction would start, seconds after the drain's start.
    pub starts_seconds: f64,
    /// How long it would take once evicted (measured, or its grace period).
    pub takes_seconds: f64,
}

/// A budget that keeps pods on the node.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BlockingBudget {
    /// `namespace/name`.
    pub budget: String,
    pub disruptions_allowed: i32,
    pub current_healthy: i32,
    pub desired_healthy: i32,
    pub expected_pods: i32,
    /// The pods it keeps (`namespace/name`).
    pub pods: Vec<String>,
    pub why: String,
    pub fix: String,
}

/// The shutdown's time limit the forecast judges against, as `forecast` shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TimeLimitView {
    pub drain_seconds: f64,
    pub drain_timeout_seconds: f64,
    pub logind_max_seconds: f64,
    pub release_margin_seconds: f64,
    /// "read from logind", or what was assumed and why.
    pub logind: String,
}

/// The forecast for the node.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Forecast {
    pub node: String,
    pub verdict: Verdict,
    /// One line for `check`, `status` and logs.
    pub summary: String,
    /// Under the JSON key `budget`, as before the time limit had its own name.
    #[serde(rename = "budget")]
    pub time_limit: TimeLimitView,
    /// When the drain would be done, seconds after its start; `None` when blocked pods hold it
    /// until the deadline.
    pub estimate_seconds: Option<f64>,
    pub pods: Vec<PodForecast>,
    pub blocking_budgets: Vec<BlockingBudget>,
    /// `namespace/claim` of the evicted pods' volumes the drain waits to detach.
    pub volumes: Vec<String>,
    /// What would fix the node as a whole (a longer budget, with the values).
    pub fixes: Vec<String>,
    /// Figures taken without a measurement, and inputs that could not be read.
    pub assumptions: Vec<String>,
}

impl Forecast {
    /// Pods kept per blocking budget (for metrics).
    pub fn blocked_per_budget(&self) -> BTreeMap<String, usize> {
        self.blocking_budgets
            .iter()
            .map(|b| (b.budget.clone(), b.pods.len()))
            .collect()
    }
}

fn secs(d: Duration) -> f64 {
    d.as_secs_f64()
}

/// The time a pod took in the last drain: the longest evicted row of the same namespace and
/// name, or of a name made from the pod's `generateName` (a ReplicaSet's pods get new names).
fn measured(last: Option<&Report>, pod: &Pod) -> Option<Duration> {
    let ns = pod.metadata.namespace.as_deref()?;
    let name = pod.metadata.name.as_deref()?;
    let generate = pod
        .metadata
        .generate_name
        .as_deref()
        .filter(|g| !g.is_empty());
    last?
        .pods
        .iter()
        .filter(|r| r.namespace == ns && r.outcome == Outcome::Evicted)
        .filter(|r| r.name == name || generate.is_some_and(|g| r.name.starts_with(g)))
        .filter_map(|r| Some(r.finished_ms?.saturating_sub(r.started_ms?)))
        .max()
        .map(Duration::from_millis)
}

/// How long the last drain's volumes took to detach after its evicted pods were gone.
fn measured_detach(last: Option<&Report>) -> Option<Duration> {
    let r = last?;
    if r.volumes.is_empty() {
        return None;
    }
    let detached = r
        .volumes
        .iter()
        .map(|v| v.detached_ms)
        .collect::<Option<Vec<u64>>>()?;
    let pods_done = r
        .pods
        .iter()
        .filter(|p| p.outcome == Outcome::Evicted)
        .filter_map(|p| p.finished_ms)
        .max()
        .unwrap_or(0);
    let last_detach = detached.into_iter().max().unwrap_or(0);
    Some(Duration::from_millis(last_detach.saturating_sub(pods_done)))
}

/// The claims of evicted pods that no pod staying on the node mounts (those the drain waits to
/// detach), as `namespace/claim`.
fn detached_claims(plan: &Plan) -> Vec<String> {
    let key = |p: &PlannedPod, c: &String| format!("{}/{c}", p.namespace);
    let kept: Vec<String> = plan
        .pods
        .iter()
        .filter(|p| p.action != Action::Evict)
        .flat_map(|p| p.claims.iter().map(move |c| key(p, c)))
        .collect();
    let mut claims: Vec<String> = plan
        .pods
        .iter()
        .filter(|p| p.action == Action::Evict)
        .flat_map(|p| p.claims.iter().map(move |c| key(p, c)))
        .filter(|c| !kept.contains(c))
        .collect();
    claims.sort();
    claims.dedup();
    claims
}

/// The per-pod state while the forecast is built.
struct Row<'a> {
    planned: &'a PlannedPod,
    pod: Option<&'a Pod>,
    budgets: Vec<String>,
    /// A budget's block, with the names of the budgets that hold it (more than one: the pod is
    /// selected by several).
    block: Option<(Vec<String>, Block)>,
    /// A reason it goes anyway or how (for completes).
    goes: String,
    round: u32,
    starts: Duration,
    takes: Duration,
    measured: bool,
    cut: Option<(&'static str, String, String)>,
}

/// The forecast. Pure.
pub fn forecast(inputs: &Inputs<'_>) -> Forecast {
    let s = inputs.settings;
    let by_uid: BTreeMap<&str, &Pod> = inputs
        .pods
        .iter()
        .filter_map(|p| Some((p.metadata.uid.as_deref()?, p)))
        .collect();
    let mut rows: Vec<Row> = inputs
        .plan
        .pods
        .iter()
        .filter(|p| p.action != Action::Skip)
        .map(|p| {
            let pod = by_uid.get(p.uid.as_str()).copied();
            let grace = s
                .drain
                .grace_period
                .map_or(p.grace_seconds.max(0) as u64, |g| g.as_secs());
            let m = pod.and_then(|pod| measured(inputs.last, pod));
            Row {
                planned: p,
                pod,
                budgets: Vec::new(),
                block: None,
                goes: "no budget selects it".to_owned(),
                round: 0,
                starts: Duration::ZERO,
                takes: m.unwrap_or(Duration::from_secs(grace)),
                measured: m.is_some(),
                cut: None,
            }
        })
        .collect();
    let mut assumptions = Vec::new();
    judge_budgets(inputs, &mut rows, &mut assumptions);

    let total = crate::drain::work_time(inputs.time_limit.drain);
    let end = schedule::schedule(inputs, &mut rows, total);
    let claims = detached_claims(inputs.plan);
    let mut estimate = end;
    if let (Some(done), false) = (end, claims.is_empty() || !s.drain.wait_for_detach) {
        let detach = measured_detach(inputs.last).unwrap_or_else(|| {
            assumptions.push(format!(
                "volumes detach {} after their pods are gone (not measured: the last report has no detach \
                 times)",
                time_limit::seconds(ASSUMED_DETACH)
            ));
            ASSUMED_DETACH
        });
        let detached = done + detach;
        estimate = Some(detached);
        if detached > total {
            for r in rows.iter_mut().filter(|r| {
                r.planned.action == Action::Evict && !r.planned.claims.is_empty() && r.cut.is_none()
            }) {
                r.cut = Some((
                    "detach-past-deadline",
                    format!(
                        "its volumes ({}) would detach at about {} after the drain's start, past the {} budget; \
                         the replacement waits on a Multi-Attach error until the volume is force-detached",
                        r.planned.claims.join(", "),
                        time_limit::seconds(detached),
                        time_limit::seconds(total)
                    ),
                    "give the drain more time (below), or set [drain] wait_for_detach = false if the storage \
                     tolerates it"
                        .to_owned(),
                ));
            }
        }
    }
    if inputs.nodes.is_none() && rows.iter().any(|r| r.block.is_none() && r.round > 0) {
        assumptions.push(
            "the other nodes could not be read: replacements are assumed to find a node".to_owned(),
        );
    }
    if rows.iter().any(|r| r.round > 0) {
        assumptions.push(format!(
            "a replacement is Ready {} after an eviction (per budget round; not measured)",
            time_limit::seconds(ASSUMED_REPLACEMENT_READY)
        ));
    }
    if let Logind::Assumed(why) = &inputs.logind {
        assumptions.push(format!(
            "logind could not be read ({why}): assumed its InhibitDelayMaxSec allows drain.timeout plus \
             release_margin"
        ));
    }
    finish(inputs, rows, total, estimate, claims, assumptions)
}

/// The budgets by `namespace/name` (the first of a name, as a search of the list would find).
fn by_name(all: &[PodDisruptionBudget]) -> BTreeMap<String, &PodDisruptionBudget> {
    let mut map = BTreeMap::new();
    for b in all {
        map.entry(budget_name(b)).or_insert(b);
    }
    map
}

/// Each budget's judgement of the pods it selects, into the rows.
fn judge_budgets(inputs: &Inputs<'_>, rows: &mut [Row<'_>], assumptions: &mut Vec<String>) {
    let node = &inputs.settings.node_name;
    for r in rows.iter_mut() {
        let Some(pod) = r.pod else { continue };
        r.budgets = inputs
            .budgets
            .iter()
            .filter(|b| budgets::selects(b, pod))
            .map(budget_name)
            .collect();
    }
    for b in inputs.budgets {
        if let Some(sel) = b.spec.as_ref().and_then(|s| s.selector.as_ref())
            && let Err(e) = crate::config::selector::Selector::from_label_selector(sel)
        {
            assumptions.push(format!(
                "budget {} has an invalid selector ({e}): it guards no pod",
                budget_name(b)
            ));
        }
    }
    // Pods that go through the Eviction API's budget check, one budget each, in plan order.
    let mut per_budget: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for (i, r) in rows.iter_mut().enumerate() {
        let Some(pod) = r.pod else { continue };
        if r.planned.action != Action::Evict {
            continue;
        }
        if budgets::ignores_budgets(pod) {
            r.goes = "the Eviction API deletes a Pending, Succeeded or Failed pod without a budget check"
                .to_owned();
            continue;
        }
        match r.budgets.len() {
            0 => {}
            1 => per_budget.entry(r.budgets[0].clone()).or_default().push(i),
            _ => r.block = Some((r.budgets.clone(), budgets::several(&r.budgets))),
        }
    }
    let by_name = by_name(inputs.budgets);
    for (name, idx) in per_budget {
        let Some(&b) = by_name.get(&name) else {
            continue;
        };
        let pods: Vec<&Pod> = idx.iter().filter_map(|&i| rows[i].pod).collect();
        let judged = budgets::judge(b, &pods, |k| {
            budgets::no_replacement(pods[k], node, inputs.nodes)
        });
        let allowed = budgets::numbers(b).allowed;
        for (&i, j) in idx.iter().zip(judged) {
            let r = &mut rows[i];
            match j {
                Judgement::Free(why) => r.goes = format!("budget {name}: {why}"),
                Judgement::Allowed { round: 0 } => {
                    r.goes = format!("budget {name} allows {allowed} disruption(s) now")
                }
                Judgement::Allowed { round } => {
                    r.round = round;
                    r.goes = format!(
                        "budget {name} lets it go once {round} replacement(s) are Ready elsewhere"
                    );
                }
                Judgement::Blocked(block) => r.block = Some((vec![name.clone()], block)),
            }
        }
    }
}

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
fn finish(
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

#[cfg(test)]
mod tests;
