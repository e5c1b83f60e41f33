//! One drain run's shared state and its per-pod tasks: evict a pod and wait for it to go, wait
//! for a `wait` pod, delete a remaining pod at the deadline. Each task keeps its report row
//! current, so a task stopped at the deadline leaves an accurate row behind. Rows are keyed by
//! the pod's UID (the tracker hands on only pods that have one), so no pod gets two rows.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams};
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::budgets::Budgets;
use super::evict::{self, Answer};
use super::gone::{self, Seen};
use super::health::ServerHealth;
use super::tracker::{Finished, Tracker};
use crate::api::Clients;
use crate::api::path::segment;
use crate::backoff::Backoff;
use crate::config::Settings;
use crate::events::{NodeEvents, Reason as EventReason};
use crate::policy::filters::Action;
use crate::policy::plan::PlannedPod;
use crate::report::{GraceEnd, Outcome, PodReport};
use crate::words::plural;

/// A row of the report: the planned pod and what happened to it.
#[derive(Debug, Clone)]
pub struct Row {
    pub plan: PlannedPod,
    pub report: PodReport,
}

/// The index of a row.
pub type RowId = usize;

#[derive(Default)]
struct Rows {
    list: Vec<Row>,
    by_uid: HashMap<String, RowId>,
}

/// The state every task of one drain shares.
pub struct Run {
    pub clients: Clients,
    pub settings: Arc<Settings>,
    pub events: NodeEvents,
    pub tracker: Arc<Tracker>,
    pub budgets: Budgets,
    pub health: Arc<ServerHealth>,
    /// Bounds the requests in flight (`drain.concurrency`).
    requests: Semaphore,
    started: Instant,
    /// Where the work stops (the deadline less the reserve for the deadline action).
    work_deadline: Instant,
    /// Where the evictions' grace periods end by, and which end that is: the work deadline, or
    /// later when the drain goes on in the stop phase ([`super::grace_deadline`]).
    grace_deadline: (Instant, GraceEnd),
    rows: Mutex<Rows>,
    blocked_announced: Mutex<HashSet<String>>,
    /// Event posts under way; the caller gives what is left a bounded time, then drops them.
    event_posts: Mutex<JoinSet<()>>,
}

/// How to wait before the next eviction attempt.
enum Pause {
    For(Duration),
    Budget(String),
}

impl Run {
    pub fn new(
        clients: &Clients,
        settings: Arc<Settings>,
        events: NodeEvents,
        tracker: Arc<Tracker>,
        health: Arc<ServerHealth>,
        started: Instant,
        work_deadline: Instant,
    ) -> Run {
        Run {
            clients: clients.clone(),
            requests: Semaphore::new(settings.drain.concurrency),
            settings,
            events,
            tracker,
            budgets: Budgets::new(clients.clone()),
            health,
            started,
            work_deadline,
            grace_deadline: (work_deadline, GraceEnd::Drain),
            rows: Mutex::default(),
            blocked_announced: Mutex::default(),
            event_posts: Mutex::new(JoinSet::new()),
        }
    }

    /// The same run, its evictions' grace periods fitted to `by` (`end` says which end that
    /// is) rather than to the work deadline.
    pub fn fitting_grace_to(mut self, by: Instant, end: GraceEnd) -> Run {
        self.grace_deadline = (by, end);
        self
    }

    fn rows(&self) -> std::sync::MutexGuard<'_, Rows> {
        // Each update is one row at a time: a poisoned lock still holds consistent rows.
        self.rows.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Adds a row for a planned pod; `None` when the pod (by UID) has one already.
    pub fn add(&self, planned: &PlannedPod) -> Option<RowId> {
        let outcome = if planned.action == Action::Skip {
            Outcome::Skipped
        } else {
            Outcome::Pending
        };
        let mut rows = self.rows();
        if rows.by_uid.contains_key(&planned.uid) {
            return None;
        }
        let id = rows.list.len();
        rows.by_uid.insert(planned.uid.clone(), id);
        rows.list.push(Row {
            plan: planned.clone(),
            report: PodReport::from_plan(planned, outcome),
        });
        Some(id)
    }

    /// Gives row `id` a new plan (a DaemonSet pod of the last stage, now to be evicted): its
    /// report row starts again as pending under that plan.
    pub fn replan(&self, id: RowId, planned: &PlannedPod) {
        if let Some(r) = self.rows().list.get_mut(id) {
            r.plan = planned.clone();
            r.report = PodReport::from_plan(planned, Outcome::Pending);
        }
    }

    /// A copy of every row.
    pub fn snapshot(&self) -> Vec<Row> {
        self.rows().list.clone()
    }

    /// The report rows, taken out at the end.
    pub fn take_reports(&self) -> Vec<PodReport> {
        std::mem::take(&mut self.rows().list)
            .into_iter()
            .map(|r| r.report)
            .collect()
    }

    fn update(&self, id: RowId, f: impl FnOnce(&mut PodReport)) {
        if let Some(r) = self.rows().list.get_mut(id) {
            f(&mut r.report);
        }
    }

    /// Marks a row done. A pod deleted at the deadline keeps the budget that blocked it.
    fn finish(&self, id: RowId, outcome: Outcome) {
        let ms = self.ms();
        self.update(id, |p| {
            p.outcome = outcome;
            p.finished_ms = Some(ms);
            if outcome.is_done() && outcome != Outcome::Deleted {
                p.detail = None;
                p.budget = None;
            }
        });
    }

    fn announce_blocked(&self, budget: &str, pod: &str, message: &str) {
        let first = self
            .blocked_announced
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(budget.to_string());
        if first {
            let msg = format!("pod {pod} blocked by disruption budget {budget}: {message}");
            self.post_event(EventReason::DrainBlocked, msg);
        }
    }

    /// Posts a Node Event in the background.
    pub fn post_event(&self, reason: EventReason, message: String) {
        let events = self.events.clone();
        self.event_posts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .spawn(async move { events.emit(reason, &message).await });
    }

    /// The Event posts still under way.
    pub fn take_event_posts(&self) -> JoinSet<()> {
        std::mem::take(&mut *self.event_posts.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// Evicts one pod and waits for it to go.
    #[tracing::instrument(skip(self, id, pod), fields(pod = %pod.key()))]
    pub async fn evict(self: Arc<Self>, id: RowId, pod: PlannedPod) {
        let key = pod.key();
        self.update(id, |p| p.started_ms = Some(self.ms()));
        let mut backoff = Backoff::new();
        loop {
            if self.tracker.is_gone(&pod.uid) {
                tracing::info!(outcome = "gone", "pod {key} left before we evicted it");
                return self.finish(id, Outcome::Gone);
            }
            if Instant::now() >= self.work_deadline {
                // No time left for an attempt: one sent now would time out at once and read as
                // a server outage. The row keeps what the last answer said (e.g. its budget).
                return;
            }
            let answer = {
                let Ok(_permit) = self.requests.acquire().await else {
                    return;
                };
                let drain = &self.settings.drain;
                let (grace_by, end) = self.grace_deadline;
                let left = grace_by.saturating_duration_since(Instant::now());
                let (grace, fit) = evict::fitted_grace(
                    drain.grace_period,
                    pod.grace_seconds,
                    left,
                    drain.fit_grace_to_deadline,
                );
                if let Some(f) = fit {
                    tracing::info!(
                        "evicting pod {key} with a grace period of {} s instead of {} s: {} s left before {}",
                        f.to_seconds,
                        f.from_seconds,
                        f.to_seconds,
                        end.phrase()
                    );
                }
                self.update(id, |p| p.grace_fit = fit);
                evict::post(&self.clients, &pod, grace, self.work_deadline).await
            };
            self.health.record(&answer);
            self.update(id, |p| p.attempts += 1);
            let pause = match answer {
                Ok(Answer::Accepted) => break,
                Ok(Answer::Gone) => match self.confirm_gone(id, &pod, self.work_deadline).await {
                    true => {
                        tracing::info!(
                            outcome = "gone",
                            "pod {key} is already gone (or replaced by another uid)"
                        );
                        return self.finish(id, Outcome::Gone);
                    }
                    false => Pause::For(backoff.next_pause()),
                },
                Ok(answer) => self
                    .refused(id, &pod, answer, &mut backoff)
                    .unwrap_or(Pause::For(self.settings.drain.retry_interval)),
                Err(e) if e.is_permanent() => {
                    // Every try would be refused the same way (the server's certificate): the
                    // pod stays, failed, and the drain does not wait for it.
                    tracing::error!("eviction failed for good: {e}");
                    let ms = self.ms();
                    return self.update(id, |p| {
                        p.outcome = Outcome::Failed;
                        p.detail = Some(e.problem());
                        p.finished_ms = Some(ms);
                    });
                }
                Err(e) => {
                    tracing::warn!("eviction failed: {e}");
                    let transient = e.is_transient();
                    self.update(id, |p| {
                        if !transient {
                            p.outcome = Outcome::Failed;
                        }
                        p.detail = Some(e.problem());
                    });
                    match (transient, e.retry_after()) {
                        (true, Some(d)) => Pause::For(d),
                        (true, None) => Pause::For(backoff.next_pause()),
                        (false, _) => Pause::For(self.settings.drain.retry_interval),
                    }
                }
            };
            self.pause(pause, &pod.uid).await;
        }
        tracing::info!("evicted pod {key}; waiting for it to go");
        self.update(id, |p| {
            p.outcome = Outcome::Pending;
            p.detail = Some("evicted, terminating".into());
            p.budget = None;
        });
        self.tracker.wait(&pod.uid, false).await;
        tracing::info!(outcome = "evicted", "pod {key} is gone");
        self.finish(id, Outcome::Evicted);
    }

    /// Records a refused eviction in the row; the pause it calls for (`None`: the retry
    /// interval, after a budget's refusal without a name or Retry-After, or another refusal).
    fn refused(
        &self,
        id: RowId,
        pod: &PlannedPod,
        answer: Answer,
        backoff: &mut Backoff,
    ) -> Option<Pause> {
        let key = pod.key();
        match answer {
            Answer::Conflict(message) => {
                tracing::info!("eviction of pod {key} conflicted (409), retrying: {message}");
                Some(Pause::For(backoff.next_pause()))
            }
            Answer::TooMany {
                retry_after,
                budget,
                message,
            } => {
                let budget = budget.map(|b| format!("{}/{b}", pod.namespace));
                tracing::info!(
                    budget = budget.as_deref().unwrap_or("-"),
                    "eviction of pod {key} refused (429): {message}"
                );
                self.update(id, |p| {
                    p.outcome = Outcome::Blocked;
                    p.detail = Some(message.clone());
                    p.budget.clone_from(&budget);
                });
                if let Some(b) = &budget {
                    self.announce_blocked(b, &key, &message);
                }
                backoff.reset();
                match (retry_after, budget) {
                    (Some(d), _) => Some(Pause::For(d)),
                    (None, Some(b)) => Some(Pause::Budget(b)),
                    (None, None) => None,
                }
            }
            Answer::Throttled {
                retry_after,
                priority_level,
                flow_schema,
            } => {
                let wait = retry_after.unwrap_or_else(|| backoff.next_pause());
                tracing::info!(
                    "eviction of pod {key} throttled by the API server's flow control (429, priority level uid {}, flow schema uid {}): retrying in {:.1} s",
                    priority_level.as_deref().unwrap_or("-"),
                    flow_schema.as_deref().unwrap_or("-"),
                    wait.as_secs_f64()
                );
                self.update(id, |p| {
                    p.throttled += 1;
                    p.outcome = Outcome::Pending;
                    p.detail = Some(format!(
                        "throttled by the API server's priority and fairness (429), {}",
                        plural(p.throttled, "time", "times")
                    ));
                });
                // A wait past the deadline is cut by it, the row left as it is.
                Some(Pause::For(wait))
            }
            Answer::Refused { code, message } => {
                tracing::warn!(
                    outcome = "failed",
                    "eviction of pod {key} refused ({code}): {message}"
                );
                self.update(id, |p| {
                    p.outcome = Outcome::Failed;
                    p.detail = Some(format!("{code}: {message}"));
                });
                None
            }
            Answer::Accepted | Answer::Gone => None,
        }
    }

    /// Whether a pod an answer called gone is gone: the pod watch saw it go, or one GET shows
    /// the server's NotFound for it or another UID ([`gone`]). Otherwise the row says why not and
    /// the caller tries again.
    async fn confirm_gone(&self, id: RowId, pod: &PlannedPod, deadline: Instant) -> bool {
        let seen = tokio::select! {
            _ = self.tracker.wait(&pod.uid, false) => return true,
            seen = gone::get(&self.clients, pod, deadline) => seen,
        };
        let detail = match seen {
            Ok(Seen::Gone) => return true,
            Ok(Seen::Present) => "the server said the pod is gone, but it is still there".into(),
            Err(e) => format!(
                "the server said the pod is gone; cannot confirm it: {}",
                e.problem()
            ),
        };
        tracing::warn!("pod {}: {detail}", pod.key());
        self.update(id, |p| p.detail = Some(detail));
        false
    }

    /// Sleeps before the next attempt; returns early when the pod goes.
    async fn pause(&self, pause: Pause, uid: &str) {
        let fallback = self.settings.drain.retry_interval;
        let wait = async {
            match pause {
                Pause::For(d) => tokio::time::sleep(d).await,
                // The budget's change, alone while it is watched; else the retry interval too.
                Pause::Budget(b) => {
                    let (ns, name) = b.split_once('/').unwrap_or(("", b.as_str()));
                    let gate = self.budgets.gate(ns, name);
                    // Listening before looking: a watch that fails right after the look wakes
                    // this waiter, which then takes the timer.
                    let notified = gate.notify.notified();
                    let mut notified = std::pin::pin!(notified);
                    notified.as_mut().enable();
                    if gate.is_watched() {
                        notified.await;
                    } else {
                        tokio::select! {
                            _ = notified => {}
                            _ = tokio::time::sleep(fallback) => {}
                        }
                    }
                }
            }
        };
        tokio::select! {
            _ = wait => {}
            _ = self.tracker.wait(uid, false) => {}
        }
    }

    /// Waits for a `wait` pod to complete or go.
    pub async fn wait_for(self: Arc<Self>, id: RowId, pod: PlannedPod) {
        self.update(id, |p| p.started_ms = Some(self.ms()));
        let outcome = match self.tracker.wait(&pod.uid, true).await {
            Finished::Gone => Outcome::Gone,
            Finished::Completed => Outcome::Completed,
        };
        tracing::info!(
            outcome = outcome.as_str(),
            "pod {} finished waiting: {}",
            pod.key(),
            outcome.as_str()
        );
        self.finish(id, outcome);
    }

    /// Deletes one remaining pod at the deadline, ignoring its budget, guarded by the planned
    /// UID (a replacement of the same name is never touched). Transient failures are retried
    /// until `deadline`.
    pub async fn delete(self: Arc<Self>, id: RowId, pod: PlannedPod, deadline: Instant) {
        let (Ok(namespace), Ok(name)) = (segment(&pod.namespace), segment(&pod.name)) else {
            // The tracker hands on only pods whose names can be ones (`missing_part`).
            return;
        };
        let api: Api<Pod> = Api::namespaced(self.clients.api.clone(), &namespace);
        let dp = DeleteParams {
            // The config bounds the grace period to whole seconds up to a day.
            grace_period_seconds: self
                .settings
                .drain
                .grace_period
                .map(|g| u32::try_from(g.as_secs()).unwrap_or(u32::MAX)),
            preconditions: Some(kube::api::Preconditions {
                uid: Some(pod.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let Ok(_permit) = self.requests.acquire().await else {
            return;
        };
        let object = format!("pod {}", pod.key());
        let result = self
            .clients
            .retry(deadline, &object, || api.delete(&name, &dp))
            .await;
        self.health.record(&result);
        match result {
            Ok(_) => {
                tracing::warn!(
                    outcome = "deleted",
                    "deleted pod {} at the deadline, ignoring its budget",
                    pod.key()
                );
                self.finish(id, Outcome::Deleted);
            }
            Err(e) if e.is_not_found() || e.is_conflict() => {
                if self.confirm_gone(id, &pod, deadline).await {
                    self.finish(id, Outcome::Gone)
                }
            }
            Err(e) => {
                tracing::warn!("cannot delete {e} at the deadline");
                self.update(id, |p| {
                    p.detail = Some(format!("delete at deadline failed: {}", e.problem()))
                });
            }
        }
    }
}
