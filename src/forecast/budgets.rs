//! Whether each PodDisruptionBudget lets the node's pods go, by the rules of the Eviction API
//! (kubernetes `pkg/registry/core/pod/storage/eviction.go`) over the numbers the disruption
//! controller keeps in the budget's status (`pkg/controller/disruption/disruption.go`):
//!
//! - a pod the drain evicts while it is Pending, Succeeded, Failed or terminating is deleted
//!   without a budget check (`canIgnorePDB`);
//! - a pod more than one budget selects is refused with HTTP 500, whatever each budget allows;
//! - a pod that is not Ready goes without touching the budget when the budget's
//!   `unhealthyPodEvictionPolicy` is `AlwaysAllow`, or (`IfHealthyBudget`, the default) while
//!   `currentHealthy >= desiredHealthy > 0`; otherwise it needs a disruption like a Ready pod;
//! - a disruption needs `status.observedGeneration` to have caught up with the budget's
//!   generation (else 429 "still being processed") and `disruptionsAllowed > 0`; each accepted
//!   eviction takes one, and the controller gives it back once a replacement is Ready;
//! - `disruptionsAllowed = currentHealthy - desiredHealthy`, and 0 while `expectedPods` is 0
//!   (`updatePdbStatus`); `expectedPods` is the pods the selector matches for an integer
//!   `minAvailable`, else the sum of the pods' controllers' scale, which has nothing for a pod
//!   without a controller (`getExpectedScale`, the `UnmanagedPods` Event); percentages round up
//!   (`GetScaledValueFromIntOrPercent(..., true)`) for both `minAvailable` and `maxUnavailable`.
//!
//! So a budget whose `desiredHealthy` reaches its `expectedPods` (an integer `minAvailable`
//! equal to the replicas, `maxUnavailable: 0`, `minAvailable: 100%`) never allows a disruption,
//! and one that allows `A` lets `A` of the node's pods go at once and each further one only when
//! the replacement of an earlier one is Ready on another node.

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::policy::filters::tolerates;

pub use crate::policy::budgets::budget_name;

/// Whether `b` selects `pod`: same namespace and its selector matches. A budget without a
/// selector selects nothing in policy/v1; an empty one selects every pod in its namespace; one
/// that does not parse selects nothing (eviction.go skips it).
pub fn selects(b: &PodDisruptionBudget, pod: &Pod) -> bool {
    let labels = pod.metadata.labels.clone().unwrap_or_default();
    selects_labels(
        b,
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        &labels,
    )
}

pub use crate::policy::budgets::selects_labels;

/// Condition Ready=True (`podutil.IsPodReady`, the Eviction API's "healthy").
pub fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Evicted without a budget check (`canIgnorePDB`): Pending, Succeeded, Failed or terminating.
pub fn ignores_budgets(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
        || matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Pending" | "Succeeded" | "Failed")
        )
}

/// A budget's numbers as its status says them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Numbers {
    pub allowed: i32,
    pub current: i32,
    pub desired: i32,
    pub expected: i32,
    /// The controller has seen the budget's current generation.
    pub observed: bool,
}

pub fn numbers(b: &PodDisruptionBudget) -> Numbers {
    let generation = b.metadata.generation.unwrap_or(1);
    match &b.status {
        None => Numbers {
            allowed: 0,
            current: 0,
            desired: 0,
            expected: 0,
            observed: false,
        },
        Some(s) => Numbers {
            allowed: s.disruptions_allowed.max(0),
            current: s.current_healthy,
            desired: s.desired_healthy,
            expected: s.expected_pods,
            observed: s.observed_generation.unwrap_or(0) >= generation,
        },
    }
}

fn always_allow(b: &PodDisruptionBudget) -> bool {
    b.spec
        .as_ref()
        .and_then(|s| s.unhealthy_pod_eviction_policy.as_deref())
        == Some("AlwaysAllow")
}

/// How a budget's spec says what it needs.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Form {
    MinAvailable(i32),
    MinAvailablePercent(i32),
    MaxUnavailable(i32),
    MaxUnavailablePercent(i32),
    /// Neither set (the API defaults minAvailable to 1) or a value that does not parse.
    Other,
}

fn int_or_percent(v: &IntOrString) -> Option<Result<i32, i32>> {
    match v {
        IntOrString::Int(i) => Some(Ok(*i)),
        IntOrString::String(s) => s.strip_suffix('%')?.trim().parse().ok().map(Err),
    }
}

fn form(b: &PodDisruptionBudget) -> Form {
    let spec = b.spec.as_ref();
    if let Some(v) = spec.and_then(|s| s.min_available.as_ref()) {
        return match int_or_percent(v) {
            Some(Ok(n)) => Form::MinAvailable(n),
            Some(Err(p)) => Form::MinAvailablePercent(p),
            None => Form::Other,
        };
    }
    match spec
        .and_then(|s| s.max_unavailable.as_ref())
        .and_then(int_or_percent)
    {
        Some(Ok(n)) => Form::MaxUnavailable(n),
        Some(Err(p)) => Form::MaxUnavailablePercent(p),
        None => Form::Other,
    }
}

/// The spec change that lets `k` disruptions happen at once with `current` healthy of
/// `expected` pods, in the budget's own form; `None` when no value can (no pod is healthy).
fn loosen(b: &PodDisruptionBudget, n: Numbers, k: i32) -> Option<String> {
    let name = budget_name(b);
    if n.current < k {
        return None;
    }
    let e = n.expected.max(1);
    Some(match form(b) {
        Form::MinAvailable(_) => format!("set minAvailable to {} or less on {name}", n.current - k),
        Form::MinAvailablePercent(_) => format!(
            "set minAvailable to {}% or less on {name} (percentages round up)",
            100 * (n.current - k) / e
        ),
        Form::MaxUnavailable(_) => format!(
            "set maxUnavailable to {} or more on {name}",
            n.expected - n.current + k
        ),
        Form::MaxUnavailablePercent(_) => format!(
            "set maxUnavailable to {}% or more on {name}",
            100 * (n.expected - n.current + k - 1) / e + 1
        ),
        Form::Other => format!("set maxUnavailable: {k} on {name}"),
    })
}

/// What one budget does with one of the node's pods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judgement {
    /// It goes without taking a disruption (not Ready, and the policy or the budget's health
    /// lets it).
    Free(&'static str),
    /// It takes a disruption in `round`: 0 at once, 1 after one replacement is Ready, ...
    Allowed {
        round: u32,
    },
    Blocked(Block),
}

/// Why a budget keeps a pod: the kind (JSON), the reason and the fix, in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Block {
    pub kind: &'static str,
    pub why: String,
    pub fix: String,
}

/// Why no replacement of `pod` can become Ready elsewhere, or `None` when one can. `nodes`
/// `None`: not read (assumed one can).
pub fn no_replacement(pod: &Pod, this_node: &str, nodes: Option<&[Node]>) -> Option<String> {
    let controlled = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true));
    if !controlled {
        return Some("it has no controller to create a replacement".to_owned());
    }
    let nodes = nodes?;
    let mut refusals = Vec::new();
    for n in nodes {
        let name = n.metadata.name.as_deref().unwrap_or_default();
        if name == this_node {
            continue;
        }
        match unfit(pod, n) {
            None => return None,
            Some(why) => refusals.push(format!("{name}: {why}")),
        }
    }
    if refusals.is_empty() {
        return Some("there is no other node".to_owned());
    }
    let more = refusals.len().saturating_sub(5);
    refusals.truncate(5);
    let mut text = format!("no other node can run it ({}", refusals.join("; "));
    if more > 0 {
        text.push_str(&format!("; {more} more"));
    }
    text.push(')');
    Some(text)
}

/// Why node `n` cannot run a replacement of `pod`: not Ready, cordoned, a NoSchedule or
/// NoExecute taint it does not tolerate, a nodeSelector label it lacks. (Affinity, spread and
/// resources are not looked at.)
fn unfit(pod: &Pod, n: &Node) -> Option<String> {
    if !crate::node::is_ready(n) {
        return Some("not Ready".to_owned());
    }
    let spec = n.spec.clone().unwrap_or_default();
    if spec.unschedulable == Some(true) {
        return Some("cordoned".to_owned());
    }
    let tolerations = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.clone())
        .unwrap_or_default();
    for t in spec.taints.iter().flatten() {
        if matches!(t.effect.as_str(), "NoSchedule" | "NoExecute")
            && !tolerations
                .iter()
                .any(|tol| tolerates(tol, &t.key, t.value.as_deref().unwrap_or(""), &t.effect))
        {
            return Some(format!("taint {}:{}", t.key, t.effect));
        }
    }
    let labels = n.metadata.labels.clone().unwrap_or_default();
    for (k, v) in pod
        .spec
        .as_ref()
        .and_then(|s| s.node_selector.as_ref())
        .into_iter()
        .flatten()
    {
        if labels.get(k) != Some(v) {
            return Some(format!("no label {k}={v} (nodeSelector)"));
        }
    }
    None
}

/// Judges the node's pods that budget `b` alone selects, in the order the drain evicts them.
/// `replacement(i)` says why pod `i` gets no replacement elsewhere (`None`: it does).
pub fn judge(
    b: &PodDisruptionBudget,
    pods: &[&Pod],
    replacement: impl Fn(usize) -> Option<String>,
) -> Vec<Judgement> {
    let n = numbers(b);
    let name = budget_name(b);
    let mut out = Vec::with_capacity(pods.len());
    // The pods that take a disruption, in order (index into `pods`).
    let mut takers: Vec<usize> = Vec::new();
    let needing = pods
        .iter()
        .filter(|p| is_ready(p) || !(always_allow(b) || (n.current >= n.desired && n.desired > 0)))
        .count() as i32;
    for (i, pod) in pods.iter().enumerate() {
        let ready = is_ready(pod);
        if let Some(why) = goes_unhealthy(b, n, ready) {
            out.push(Judgement::Free(why));
            continue;
        }
        let j = takers.len();
        if let Some(block) = refused(b, n, &name, ready, j, needing) {
            out.push(Judgement::Blocked(block));
            continue;
        }
        let a = n.allowed as usize;
        if j < a {
            takers.push(i);
            out.push(Judgement::Allowed { round: 0 });
            continue;
        }
        // The slot comes back when the replacement of the pod `a` places earlier is Ready.
        let earlier = takers[j - a];
        match replacement(earlier) {
            None => {
                takers.push(i);
                out.push(Judgement::Allowed {
                    round: (j / a) as u32,
                });
            }
            Some(why) => {
                let earlier_name = pods[earlier].metadata.name.as_deref().unwrap_or_default();
                out.push(Judgement::Blocked(replacement_missing(
                    b,
                    n,
                    &name,
                    needing,
                    earlier_name,
                    &why,
                )));
            }
        }
    }
    out
}

/// Why a pod that is not Ready (`ready` false) goes without taking a disruption: the budget's
/// policy lets it, or the budget has all the healthy pods it needs. `None`: it does take one.
fn goes_unhealthy(b: &PodDisruptionBudget, n: Numbers, ready: bool) -> Option<&'static str> {
    if ready {
        return None;
    }
    if always_allow(b) {
        return Some("not Ready; unhealthyPodEvictionPolicy AlwaysAllow lets it go");
    }
    if n.current >= n.desired && n.desired > 0 {
        return Some(
            "not Ready; its budget has all the healthy pods it needs, so it goes without a disruption",
        );
    }
    None
}

/// Why budget `b` (named `name`) refuses the eviction of a pod that would take disruption number
/// `taken` (from 0), whatever happens elsewhere; `None` when it allows it now or later.
fn refused(
    b: &PodDisruptionBudget,
    n: Numbers,
    name: &str,
    ready: bool,
    taken: usize,
    needing: i32,
) -> Option<Block> {
    if !n.observed {
        return Some(not_observed(name));
    }
    if !ready && n.allowed == 0 {
        return Some(unhealthy_if_healthy(n, name));
    }
    if n.expected <= 0 {
        return Some(counts_no_pods(n, name));
    }
    if n.desired >= n.expected && taken as i32 >= n.allowed {
        return Some(never_allows(b, n, name, needing));
    }
    if n.allowed == 0 {
        return Some(at_zero(b, n, name));
    }
    None
}

/// The disruption controller has not caught up with the budget's spec.
fn not_observed(name: &str) -> Block {
    Block {
        kind: "budget-not-observed",
        why: format!(
            "the disruption controller has not processed budget {name} yet (status.observedGeneration \
             behind its generation): the Eviction API answers 429 until it has"
        ),
        fix: "check that kube-controller-manager and its disruption controller run".to_owned(),
    }
}

/// An unhealthy pod under the default policy while the budget allows nothing.
fn unhealthy_if_healthy(n: Numbers, name: &str) -> Block {
    Block {
        kind: "unhealthy-if-healthy-budget",
        why: format!(
            "it is not Ready, and budget {name} (unhealthyPodEvictionPolicy IfHealthyBudget, the default) \
             lets an unhealthy pod go only while it has the {} healthy pods it needs (it has {}) or \
             allows a disruption (it allows 0)",
            n.desired, n.current
        ),
        fix: format!(
            "set spec.unhealthyPodEvictionPolicy: AlwaysAllow on {name}, or make the pod Ready"
        ),
    }
}

/// A budget that expects no pods, so allows no disruption.
fn counts_no_pods(n: Numbers, name: &str) -> Block {
    Block {
        kind: "budget-counts-no-pods",
        why: format!(
            "budget {name} counts 0 expected pods: with maxUnavailable or a percentage minAvailable the \
             disruption controller counts its pods' controllers' replicas, a pod without a controller \
             counts for nothing, and with nothing expected it allows no disruption"
        ),
        fix: format!(
            "set an integer minAvailable on {name} (below its {} healthy pods), or run the pods under a \
             controller (Deployment, StatefulSet)",
            n.current
        ),
    }
}

/// A budget that needs every expected pod healthy: it never allows a disruption. The why and
/// the fix speak the form the budget is written in.
fn never_allows(b: &PodDisruptionBudget, n: Numbers, name: &str, needing: i32) -> Block {
    let why = match form(b) {
        Form::MinAvailable(m) => format!(
            "budget {name} has minAvailable {m}, not less than its {} expected pods: it never allows a \
             disruption",
            n.expected
        ),
        Form::MinAvailablePercent(p) => format!(
            "budget {name} has minAvailable {p}%, which of its {} expected pods rounds up to {} \
             (percentages round up): it never allows a disruption",
            n.expected, n.desired
        ),
        Form::MaxUnavailable(_) | Form::MaxUnavailablePercent(_) => format!(
            "budget {name} lets none of its {} expected pods be unavailable (maxUnavailable 0): it never \
             allows a disruption",
            n.expected
        ),
        Form::Other => format!(
            "budget {name} needs {} healthy pods of its {} expected: it never allows a disruption",
            n.desired, n.expected
        ),
    };
    let mut fix = match form(b) {
        Form::MinAvailable(m) => format!(
            "set minAvailable to {} or less on {name}, or run more than {m} replicas",
            n.expected - 1
        ),
        Form::MinAvailablePercent(_) => format!(
            "set minAvailable to {}% or less on {name}, or use maxUnavailable: 1",
            100 * (n.expected - 1) / n.expected.max(1)
        ),
        _ => format!("set maxUnavailable to 1 or more on {name}"),
    };
    if needing > 1 {
        fix.push_str(&format!(" ({needing} of its pods are on this node)"));
    }
    Block {
        kind: "budget-never-allows",
        why,
        fix,
    }
}

/// A budget that allows no disruption now, though it could with more healthy pods.
fn at_zero(b: &PodDisruptionBudget, n: Numbers, name: &str) -> Block {
    let fix = match loosen(b, n, 1) {
        Some(l) => format!(
            "make more of {name}'s pods Ready ({} of {} expected are healthy), or {l}",
            n.current, n.expected
        ),
        None => format!(
            "make {name}'s pods Ready: none of its {} expected pods is",
            n.expected
        ),
    };
    Block {
        kind: "budget-at-zero",
        why: format!(
            "budget {name} allows 0 disruptions now: it needs {} healthy pods and has {} (of {} expected)",
            n.desired, n.current, n.expected
        ),
        fix,
    }
}

/// The pod's disruption comes back only when the replacement of `earlier_name` (placed before it)
/// is Ready, and that pod gets none elsewhere (`why`).
fn replacement_missing(
    b: &PodDisruptionBudget,
    n: Numbers,
    name: &str,
    needing: i32,
    earlier_name: &str,
    why: &str,
) -> Block {
    let mut fix = match loosen(b, n, needing) {
        Some(l) => {
            format!("{l}, so that all {needing} of its pods here can go at once")
        }
        None => String::new(),
    };
    let place = if why.starts_with("it has no controller") {
        format!("run {earlier_name} under a controller")
    } else {
        format!("uncordon or add a node that {earlier_name} can run on")
    };
    fix = if fix.is_empty() {
        place
    } else {
        format!("{place}, or {fix}")
    };
    Block {
        kind: "no-replacement",
        why: format!(
            "budget {name} allows {} disruption(s): {} of its {needing} pods here go at once, the \
             others only when a replacement is Ready elsewhere, and {earlier_name} gets none: {why}",
            n.allowed, n.allowed
        ),
        fix,
    }
}

/// The most budget names a line of words lists; past it the line names the first ones and
/// counts the rest (the pod's `budgets` in the JSON lists every one). Keeps a pod that a
/// thousand budgets select one readable finding, not a thousand names in each of its lines.
pub const NAMED_MAX: usize = 5;

/// `names` in words, `last` between the last two; past [`NAMED_MAX`], the first of them and
/// how many more.
pub fn listed(names: &[String], last: &str) -> String {
    match names {
        [] => String::new(),
        [one] => one.clone(),
        _ if names.len() > NAMED_MAX => format!(
            "{} and {} more",
            names[..NAMED_MAX].join(", "),
            names.len() - NAMED_MAX
        ),
        [head @ .., tail] => format!("{}{last}{tail}", head.join(", ")),
    }
}

/// The block of a pod several budgets select: one finding for the pod, naming the budgets
/// (at most [`NAMED_MAX`] of them in words), whose size does not grow with each budget's
/// neighbours.
pub fn several(names: &[String]) -> Block {
    let (who, these) = if names.len() > NAMED_MAX {
        (
            format!(
                "{} budgets ({}; the JSON output lists them all)",
                names.len(),
                listed(names, ", ")
            ),
            format!("these {} budgets", names.len()),
        )
    } else {
        (
            format!("budgets {}", listed(names, " and ")),
            names.join(", "),
        )
    };
    Block {
        kind: "several-budgets",
        why: format!(
            "{who} all select it, and the Eviction API refuses a pod that more than one \
             PodDisruptionBudget selects (HTTP 500), whatever each allows"
        ),
        fix: format!(
            "narrow the selectors of {these} so that only one selects it, or delete all but one"
        ),
    }
}

/// What budget `name` does where it selects a pod with other budgets: said of the budget alone
/// (each pod's finding names the others), so a list of such budgets grows by one line each.
pub fn shared(name: &str) -> Block {
    Block {
        kind: "several-budgets",
        why: format!(
            "budget {name} selects pods that other budgets select too (each pod's line names them), and \
             the Eviction API refuses a pod that more than one PodDisruptionBudget selects (HTTP 500)"
        ),
        fix: format!(
            "narrow the selector of {name}, or of the others, so that one budget alone selects each of \
             these pods, or delete all but one"
        ),
    }
}
