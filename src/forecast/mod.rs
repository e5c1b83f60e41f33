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
mod verdicts;

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use serde::Serialize;

use self::budgets::{Block, Judgement, budget_name};
use self::verdicts::finish;
use crate::config::Settings;
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

#[cfg(test)]
mod tests;
