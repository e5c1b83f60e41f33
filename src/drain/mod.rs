//! The drain: list the node's pods, plan them, schedule evictions group by group with bounded
//! concurrency until every planned pod is gone or the deadline, act at the deadline, report.
//!
//! - [`evict`]: the Eviction body, the POST and the pure classification of its answer: 201 wait
//!   for the pod to go; the pod's own NotFound or 409 (UID precondition) gone already once the
//!   pod watch or a GET confirms it ([`gone`]), any other 404 an error; 429 retried after
//!   Retry-After when given, otherwise as soon as the budget named in the answer changes
//!   ([`budgets`], one watch per budget; `retry_interval` only while the budget cannot be
//!   watched or its watch is failing); other answers are
//!   reported per pod and retried slowly; no answer / 5xx retried with the one backoff.
//! - [`tracker`]: "gone" comes from one watch on the node's pods (kube's watcher): deleted,
//!   replaced by another UID, or bound elsewhere. Pods that appear during the drain are planned
//!   and handled. Pods without name, namespace, UID or spec are errors in the report.
//! - [`run`]: the state the per-pod tasks share and the tasks themselves. Grace periods are
//!   fitted to the drain's deadline, or to a later end the caller names ([`GraceTo`]: the stop
//!   phase a drain of logind's window goes on in); the report says which.
//! - Every request is bounded by min(request timeout, time left) and transient failures are
//!   retried until the deadline and never past it: a control plane that restarts during the
//!   node's shutdown delays the drain instead of cancelling it. When the API server still does
//!   not answer at the deadline, the report says so and names the server and the node.
//! - [`volumes`]: with `wait_for_detach`, once the evicted pods are gone the drain holds until
//!   the VolumeAttachments of their volumes on the node are gone, or the deadline.
//! - [`last`]: with `daemonsets = "stop-last"`, once every other planned pod is gone (and the
//!   volumes detached), the node's DaemonSet pods that do not tolerate our second taint are
//!   evicted under it, by priority, `system-node-critical` last.
//! - At the deadline every task stops; the remaining pods are reported with the budgets that
//!   blocked them, and with `on_deadline = "delete"` deleted, ignoring their budgets (the report
//!   keeps the budget). The final Node Events get at most [`FINAL_EVENTS_MAX`].

pub mod budgets;
pub mod evict;
pub mod gone;
pub mod health;
mod last;
pub mod run;
pub mod settle;
pub mod tracker;
pub mod volumes;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::Instrument;

use self::health::{ServerHealth, outage_message};
use self::run::{RowId, Run};
use self::tracker::{Tracker, field_selector, malformed_message, missing_part};
use crate::api::{ApiError, Clients};
use crate::config::{DaemonSetPolicy, OnDeadline, Settings};
use crate::events::{NodeEvents, Reason as EventReason};
use crate::policy::filters::Action;
use crate::policy::plan::{Plan, PlannedPod};
use crate::report::{Counts, GraceDeadline, GraceEnd, Outcome, PodReport, Report};
use crate::words::count;

/// Page size of the pod list (kubectl's chunk size).
const LIST_PAGE: u32 = 500;
// The time kept back from the deadline for the deadline action and the final Events is short,
// so an eviction sent under a slow server still has its answer counted (3 s latency, 10 s
// time limit); the final Node Events never hold the caller (and the daemon's lock) past the deadline:
// Events are for people, the drain is over. Both bounds live with the time limit.
use crate::time_limit::{DRAIN_RESERVE_MAX as RESERVE_MAX, FINAL_EVENTS_MAX};

/// How much of a drain's `total` time goes to evictions and waits: all but the time kept back
/// for the deadline action and the final Events ([`RESERVE_MAX`], at most a tenth).
pub fn work_time(total: Duration) -> Duration {
    total - (total / 10).min(RESERVE_MAX)
}

/// Options of one drain run.
#[derive(Debug, Clone)]
pub struct DrainOptions {
    pub why: String,
    pub dry_run: bool,
    /// Where the evictions' grace periods end (`drain.fit_grace_to_deadline`); `None`: at the
    /// drain's own deadline.
    pub grace_to: Option<GraceTo>,
}

/// A deadline to fit grace periods to that is not the drain's own: the end of the stop phase a
/// drain of logind's window goes on in (chosen by the daemon, which knows the unit's
/// `TimeoutStopSec`), or the window itself when no stop phase can be counted on.
#[derive(Debug, Clone)]
pub struct GraceTo {
    /// The end; never taken to be before the drain's own deadline.
    pub at: Instant,
    pub end: GraceEnd,
    /// Why this end, for the report.
    pub why: String,
}

/// The moment the evictions' grace periods end by: the work deadline of `to` (its end less the
/// time kept back, as for the drain's own deadline), never before `work_deadline`. Pure.
pub fn grace_deadline(started: Instant, work_deadline: Instant, to: Option<&GraceTo>) -> Instant {
    let Some(to) = to else {
        return work_deadline;
    };
    let total = to.at.saturating_duration_since(started);
    (started + work_time(total)).max(work_deadline)
}

/// A report with no pods yet.
pub(crate) fn empty_report(
    settings: &Settings,
    options: &DrainOptions,
    started_at: jiff::Timestamp,
) -> Report {
    Report {
        node: settings.node_name.clone(),
        why: options.why.clone(),
        started_at: started_at.to_string(),
        duration_ms: 0,
        complete: false,
        deadline_reached: false,
        dry_run: options.dry_run,
        counts: Counts::default(),
        throttled: 0,
        pods: Vec::new(),
        blocked_by: Vec::new(),
        volumes: Vec::new(),
        errors: Vec::new(),
        kind: None,
        slot: None,
        grace_fitted_to: None,
        settle: None,
    }
}

/// Lists the node's pods, following `continue` tokens, each page retried until `deadline`.
pub async fn list_node_pods(
    clients: &Clients,
    node: &str,
    deadline: Instant,
) -> Result<Vec<Pod>, ApiError> {
    let api: Api<Pod> = Api::all(clients.api.clone());
    let object = format!("pods of node {node}");
    let mut lp = ListParams::default()
        .fields(&field_selector(node))
        .limit(LIST_PAGE);
    let mut pods = Vec::new();
    loop {
        let page = clients.retry(deadline, &object, || api.list(&lp)).await?;
        pods.extend(page.items);
        match page.metadata.continue_ {
            Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
            _ => return Ok(pods),
        }
    }
}

/// Splits off the pods the drain cannot act on, as report errors.
fn split_malformed(pods: Vec<Pod>) -> (Vec<Pod>, Vec<String>) {
    let mut errors = Vec::new();
    let pods = pods
        .into_iter()
        .filter(|p| match missing_part(p) {
            Some(part) => {
                errors.push(malformed_message(p, part));
                false
            }
            None => true,
        })
        .collect();
    (pods, errors)
}

/// Plans the node now (one paged list). Changes nothing.
pub async fn plan(clients: &Clients, settings: &Settings) -> Result<Plan, ApiError> {
    let deadline = Instant::now() + settings.drain.timeout;
    let pods = list_node_pods(clients, &settings.node_name, deadline).await?;
    Ok(Plan::build(settings, &split_malformed(pods).0))
}

/// The report line when the pods could not be listed until the deadline: the server's trouble.
fn no_list(node: &str, server: &str, health: &ServerHealth) -> String {
    match health.outage() {
        Some(o) => outage_message(server, node, "cannot list its pods", &o),
        None => format!(
            "no list of the pods of node {node} from API server {server} until the drain deadline"
        ),
    }
}

/// Ends the report: counts, duration, completeness.
fn finished(mut report: Report, started: Instant) -> Report {
    report.duration_ms = started.elapsed().as_millis() as u64;
    report.finish();
    report
}

/// Drains the node: list -> schedule (once `ready`, the caller's prepare, resolves) -> at the
/// deadline -> report. Returns by `deadline`, always (plus at most the time dropping the tasks
/// takes).
#[tracing::instrument(skip_all, fields(node = %settings.node_name))]
pub async fn drain(
    clients: &Clients,
    settings: Arc<Settings>,
    events: NodeEvents,
    options: DrainOptions,
    deadline: Instant,
    ready: impl std::future::Future<Output = ()>,
    on_plan: impl FnOnce(&Plan),
) -> Report {
    let started = Instant::now();
    let node = settings.node_name.clone();
    let mut report = empty_report(&settings, &options, jiff::Timestamp::now());
    let total = deadline.saturating_duration_since(started);
    let work_deadline = deadline - (total - work_time(total));
    let grace_by = grace_deadline(started, work_deadline, options.grace_to.as_ref());
    let grace_end = options.grace_to.as_ref().map_or(GraceEnd::Drain, |g| g.end);
    if settings.drain.fit_grace_to_deadline {
        report.grace_fitted_to = Some(grace_fitted_to(&options, grace_end, grace_by - started));
    }

    // The pod watch's first list is the drain's list; the watch keeps the tracker current.
    let health = Arc::new(ServerHealth::default());
    let tracker = Tracker::new(&node, &[]);
    let (first_tx, first_rx) = tokio::sync::oneshot::channel();
    let (new_tx, mut new_rx) = mpsc::unbounded_channel();
    // Held in a set, not spawned bare: dropping the drain future (a cancel, the daemon's overrun
    // guard) drops the set, which aborts the watch; a detached watch would re-watch forever.
    let mut watch = JoinSet::new();
    watch.spawn(tracker::follow(
        clients.clone(),
        tracker.clone(),
        first_tx,
        new_tx,
        health.clone(),
    ));
    let listed = tokio::time::timeout_at(work_deadline, first_rx).await;
    let pods = match listed {
        Ok(Ok(Ok(pods))) => pods,
        Ok(Ok(Err(e))) => {
            tracing::error!("cannot list {e}");
            report.errors.push(format!("cannot list {e}"));
            return finished(report, started);
        }
        Ok(Err(_)) | Err(_) => {
            let message = no_list(&node, &clients.server, &health);
            tracing::error!("{message}");
            report.deadline_reached = true;
            report.errors.push(message);
            return finished(report, started);
        }
    };
    let (pods, malformed) = split_malformed(pods);
    report.errors.extend(malformed);
    let plan = Plan::build(&settings, &pods);
    // The plan holds what the drain needs; the pods themselves need not stay in memory.
    drop(pods);
    on_plan(&plan);
    if options.dry_run {
        report.pods = dry_run_rows(&plan);
        return finished(report, started);
    }
    let run = Arc::new(
        Run::new(
            clients,
            settings.clone(),
            events,
            tracker,
            health,
            // The drain's own start: every time in the report counts from the same moment.
            started,
            work_deadline,
        )
        .fitting_grace_to(grace_by, grace_end),
    );
    say_started(&run, &node, &options.why, &plan);
    let recording = settle::Recording::start(clients, &settings, work_deadline);
    let (cut, reached) = evict(
        clients,
        &run,
        plan,
        ready,
        &mut new_rx,
        &mut report,
        (started, work_deadline),
    )
    .await;
    run.budgets.stop();
    if cut {
        at_deadline(&run, &mut report, &clients.server, deadline).await;
    }
    watch.abort_all();
    report.settle = recording.finish(&run, work_deadline).await;
    report.pods = run.take_reports();
    report.deadline_reached = reached;
    let report = finished(report, started);
    tracing::info!("{}", report.summary());
    run.post_event(EventReason::DrainFinished, report.summary());
    post_final_events(&run, clients, &node, deadline).await;
    report
}

/// Where the evictions' grace periods end, for the report: `after` the drain's start.
fn grace_fitted_to(options: &DrainOptions, end: GraceEnd, after: Duration) -> GraceDeadline {
    GraceDeadline {
        end,
        after_ms: after.as_millis() as u64,
        why: options
            .grace_to
            .as_ref()
            .map_or_else(|| "the drain's own deadline".to_owned(), |g| g.why.clone()),
    }
}

/// Says (journal and Node Event) that the drain of `node` started, why, and what it plans.
fn say_started(run: &Run, node: &str, why: &str, plan: &Plan) {
    let started_msg = format!(
        "drain of node {node} started ({why}): {} to evict, {} to wait for, {} skipped",
        count(plan.count(Action::Evict), "pod", "pods"),
        plan.count(Action::Wait),
        plan.count(Action::Skip)
    );
    tracing::info!("{started_msg}");
    run.post_event(EventReason::DrainStarted, started_msg);
}

/// Evicts the plan's pods once `ready` (the caller's prepare) resolves, in the drain's order,
/// then waits for their volumes to detach and stops the DaemonSet pods last, as configured.
/// Returns (cut: pods remain at the deadline, reached: the deadline came first, pods or
/// volumes). `(started, work_deadline)`: the drain's start and its deadline for this work.
async fn evict(
    clients: &Clients,
    run: &Arc<Run>,
    plan: Plan,
    ready: impl std::future::Future<Output = ()>,
    new_rx: &mut mpsc::UnboundedReceiver<Pod>,
    report: &mut Report,
    (started, work_deadline): (Instant, Instant),
) -> (bool, bool) {
    let settings = &run.settings;
    let node = &settings.node_name;
    // The caller's prepare (cordon) must be over before the first eviction, and so must the
    // reads of the evicted pods' claims and volumes (readable with a node's credentials only
    // while the pods are there).
    let detach = async {
        if settings.drain.wait_for_detach {
            Some(volumes::Detach::start(clients, node, &plan, started, work_deadline).await)
        } else {
            None
        }
    };
    let (prepared, detach) = tokio::join!(tokio::time::timeout_at(work_deadline, ready), detach);
    if prepared.is_err() {
        tracing::warn!("the prepare of node {node} was not over by the drain deadline");
    }
    let mut schedule = Schedule::default();
    for p in plan.pods {
        schedule.place(run, p);
    }
    // Cut: pods remain at the deadline (the deadline action follows); reached: the deadline
    // came first, pods or volumes.
    let mut cut = schedule
        .run(run, new_rx, &mut report.errors, work_deadline)
        .await;
    drop(schedule);
    let mut reached = cut;
    if let Some(detach) = detach.filter(|_| !reached) {
        reached = wait_for_volumes(clients, run, detach, report, work_deadline).await;
    }
    // The DaemonSet pods go last: after the volumes, whose unmount may need a node plugin.
    if !reached && settings.drain.daemonsets == DaemonSetPolicy::StopLast {
        cut = last::stop(run, new_rx, &mut report.errors, work_deadline).await;
        reached = cut;
    }
    (cut, reached)
}

/// The rows of a dry run: what each planned pod would get, nothing sent.
fn dry_run_rows(plan: &Plan) -> Vec<PodReport> {
    plan.pods
        .iter()
        .map(|p| {
            let outcome = match p.action {
                Action::Skip => Outcome::Skipped,
                _ => Outcome::DryRun,
            };
            PodReport::from_plan(p, outcome)
        })
        .collect()
}

/// Waits (until `work_deadline`) for the VolumeAttachments of the evicted pods' volumes on the
/// node to go, into `report.volumes`; returns whether one was still attached at the deadline.
async fn wait_for_volumes(
    clients: &Clients,
    run: &Run,
    detach: volumes::Detach,
    report: &mut Report,
    work_deadline: Instant,
) -> bool {
    let claims = volumes::claims_to_wait_for(&run.snapshot());
    report.volumes = detach
        .wait(clients, &claims, work_deadline, &mut report.errors)
        .await;
    report.volumes.iter().any(|v| v.detached_ms.is_none())
}

/// Waits for the Node Events still being posted, at most [`FINAL_EVENTS_MAX`] and never past
/// `deadline`; dropping the set then aborts the posts still waiting.
async fn post_final_events(run: &Run, clients: &Clients, node: &str, deadline: Instant) {
    let mut posts = run.take_event_posts();
    let until = deadline.min(Instant::now() + FINAL_EVENTS_MAX);
    let posted =
        tokio::time::timeout_at(until, async { while posts.join_next().await.is_some() {} }).await;
    if posted.is_err() {
        tracing::warn!(
            "gave up on {} node events of node {node}: no answer from {} in time",
            posts.len(),
            clients.server
        );
    }
}

/// The evictions waiting for their order group, the group under way, and the `wait` pods.
#[derive(Default)]
struct Schedule {
    pending: BTreeMap<i32, Vec<(RowId, PlannedPod)>>,
    current: Option<(i32, JoinSet<()>)>,
    waits: JoinSet<()>,
}

enum Step {
    Progress,
    NewPod(Box<Pod>),
    Deadline,
}

impl Schedule {
    /// Files a planned pod: into the running group when its order has come, else into its
    /// group. A pod that has a row already (same UID) is not filed again.
    fn place(&mut self, run: &Arc<Run>, p: PlannedPod) {
        if let Some(id) = run.add(&p) {
            self.file(run, id, p);
        }
    }

    /// Files the pod of row `id` by its plan.
    fn file(&mut self, run: &Arc<Run>, id: RowId, p: PlannedPod) {
        match (p.action, p.order) {
            (Action::Evict, Some(order)) => match self.current.as_mut() {
                Some((cur, set)) if order <= *cur => {
                    set.spawn(run.clone().evict(id, p).in_current_span());
                }
                _ => self.pending.entry(order).or_default().push((id, p)),
            },
            (Action::Wait, _) => {
                self.waits
                    .spawn(run.clone().wait_for(id, p).in_current_span());
            }
            _ => {}
        }
    }

    /// A pod that appeared during the drain: planned and filed, or an error when malformed.
    fn appeared(&mut self, run: &Arc<Run>, pod: &Pod, errors: &mut Vec<String>) {
        let node = &run.settings.node_name;
        if let Some(part) = missing_part(pod) {
            let message = malformed_message(pod, part);
            tracing::error!("{message}");
            errors.push(message);
            return;
        }
        let p = PlannedPod::for_pod(&run.settings, pod);
        tracing::info!(
            "pod {} appeared on node {node} during the drain: {}",
            p.key(),
            p.action.as_str()
        );
        self.place(run, p);
    }

    /// Starts the next order group when the current one is done; `false` when nothing is left
    /// to start.
    fn next_group(&mut self, run: &Arc<Run>) -> bool {
        let Some((order, pods)) = self.pending.pop_first() else {
            self.current = None;
            return false;
        };
        let node = &run.settings.node_name;
        tracing::info!(
            "evicting order group {order} ({}) from node {node}",
            count(pods.len(), "pod", "pods")
        );
        let mut set = JoinSet::new();
        for (id, p) in pods {
            set.spawn(run.clone().evict(id, p).in_current_span());
        }
        self.current = Some((order, set));
        true
    }

    /// Runs until every planned pod is done (`false`) or the work deadline (`true`).
    async fn run(
        &mut self,
        run: &Arc<Run>,
        new_pods: &mut mpsc::UnboundedReceiver<Pod>,
        errors: &mut Vec<String>,
        work_deadline: Instant,
    ) -> bool {
        loop {
            if self.current.as_ref().is_none_or(|(_, s)| s.is_empty()) {
                if self.next_group(run) {
                    continue;
                }
                if self.waits.is_empty() {
                    // Everything planned is done; take pods that appeared meanwhile, then stop.
                    match new_pods.try_recv() {
                        Ok(pod) => {
                            self.appeared(run, &pod, errors);
                            continue;
                        }
                        Err(_) => return false,
                    }
                }
            }
            let current = self.current.as_mut();
            let step = tokio::select! {
                Some(_) = async { match current { Some((_, s)) => s.join_next().await, None => None } } => Step::Progress,
                Some(_) = self.waits.join_next(), if !self.waits.is_empty() => Step::Progress,
                Some(pod) = new_pods.recv() => Step::NewPod(Box::new(pod)),
                _ = tokio::time::sleep_until(work_deadline) => Step::Deadline,
            };
            match step {
                Step::Progress => {}
                Step::NewPod(pod) => self.appeared(run, &pod, errors),
                Step::Deadline => return true,
            }
        }
    }
}

/// At the deadline: names the remaining pods and their budgets, deletes them with
/// `on_deadline = "delete"`, and names an API server that stopped answering.
async fn at_deadline(run: &Arc<Run>, report: &mut Report, server: &str, deadline: Instant) {
    let node = &run.settings.node_name;
    let remaining: Vec<_> = run
        .snapshot()
        .into_iter()
        .enumerate()
        .filter(|(_, r)| !r.report.outcome.is_done())
        .collect();
    let names: Vec<String> = remaining.iter().map(|(_, r)| r.report.key()).collect();
    tracing::warn!(
        "drain deadline reached on node {node}; {} remain: {}",
        count(names.len(), "pod", "pods"),
        names.join(", ")
    );
    let budgets: Vec<String> = remaining
        .iter()
        .filter(|(_, r)| r.report.outcome == Outcome::Blocked)
        .filter_map(|(_, r)| {
            let p = &r.report;
            Some(format!(
                "{} ({}: {})",
                p.key(),
                p.budget.clone()?,
                p.detail.clone().unwrap_or_default()
            ))
        })
        .collect();
    if run.settings.drain.on_deadline == OnDeadline::Delete {
        let mut deletes = JoinSet::new();
        for (id, r) in remaining {
            if r.plan.action == Action::Evict {
                deletes.spawn(run.clone().delete(id, r.plan, deadline).in_current_span());
            }
        }
        let _ = tokio::time::timeout_at(deadline, async {
            while deletes.join_next().await.is_some() {}
        })
        .await;
    }
    let msg = format!(
        "drain deadline reached on node {node}; remaining pods: {}{}",
        names.join(", "),
        if budgets.is_empty() {
            String::new()
        } else {
            format!("; blocked by budgets: {}", budgets.join("; "))
        }
    );
    run.post_event(EventReason::DrainDeadline, msg);
    // Pods remain; when the server stopped answering, that is the reason to name.
    if let Some(o) = run.health.outage() {
        let message = outage_message(
            server,
            node,
            &format!("{} remain", count(names.len(), "pod", "pods")),
            &o,
        );
        tracing::error!("{message}");
        report.errors.push(message);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_pods_are_report_errors_naming_what_is_missing() {
        let pod = |v: serde_json::Value| -> Pod { serde_json::from_value(v).unwrap() };
        let good = pod(
            serde_json::json!({"metadata": {"name": "a", "namespace": "w", "uid": "u"},
            "spec": {"containers": []}}),
        );
        let pods = vec![
            good.clone(),
            pod(serde_json::json!({"metadata": {"name": "b", "namespace": "w", "uid": "u2"}})),
            pod(
                serde_json::json!({"metadata": {"name": "c", "namespace": "w"}, "spec": {"containers": []}}),
            ),
            pod(serde_json::json!({"metadata": {"name": "d"}, "spec": {"containers": []}})),
        ];
        let (kept, errors) = split_malformed(pods);
        assert_eq!(kept, vec![good]);
        assert_eq!(errors.len(), 3);
        assert!(errors[0].contains("pod w/b without spec"), "{errors:?}");
        assert!(
            errors[1].contains("pod w/c without metadata.uid"),
            "{errors:?}"
        );
        assert!(
            errors[2].contains("pod ?/d without metadata.namespace"),
            "{errors:?}"
        );
        // Errors make the report incomplete (exit 1), never "gone".
        let settings =
            Settings::from_str_at(std::path::Path::new("/t.toml"), "node_name = \"n\"\n").unwrap();
        let options = DrainOptions {
            why: "w".into(),
            dry_run: false,
            grace_to: None,
        };
        let mut report = empty_report(&settings, &options, jiff::Timestamp::now());
        report.errors = errors;
        report.finish();
        assert!(!report.complete && report.counts.gone == 0);
    }
}
