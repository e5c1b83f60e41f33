//! The drain: one paged list of the node's pods, the plan, then evictions group by group with
//! bounded concurrency, until every planned pod is gone or the deadline.
//!
//! - Evictions are policy/v1 Eviction bodies we build ourselves (kube 5's `evict` drops
//!   `deleteOptions`), with `preconditions.uid` so a replacement pod of the same name is never
//!   evicted, and the configured grace period.
//! - 201: wait for the pod to go. 404 or 409 (UID precondition): it is gone already.
//!   429: retried after Retry-After when given, otherwise as soon as the PodDisruptionBudget named
//!   in the answer changes (one shared watch per budget), with `retry_interval` as a fallback
//!   when the budget cannot be watched. Other answers are reported per pod and retried slowly.
//!   No answer / 5xx: retried with a short backoff.
//! - Every transient failure (no answer, a broken connection, 5xx, 429 on a list) is retried,
//!   100 ms doubling to 2 s, until the deadline and never past it: a control plane that restarts
//!   during the node's shutdown delays the drain instead of cancelling it. When the API server
//!   still does not answer at the deadline, the report says so and names the server and the node.
//! - The final Node Events get at most [`FINAL_EVENTS_MAX`] (never past the deadline); a hung
//!   Event API cannot hold the caller longer.
//! - "Gone" comes from one watch on the node's pods (no per-pod polling): deleted, replaced by
//!   another UID, or bound elsewhere. Pods that appear during the drain are planned and handled.
//! - At the deadline every task stops; the remaining pods are reported with the budgets that
//!   blocked them, and with `on_deadline = "delete"` deleted, ignoring their budgets.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::Instrument;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::{Eviction, PodDisruptionBudget};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{DeleteOptions, ObjectMeta, Preconditions};
use kube::api::{Api, DeleteParams, ListParams, WatchEvent, WatchParams};
use tokio::sync::{Notify, Semaphore, mpsc};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::client::{ApiError, Clients, WATCH_GRACE, WATCH_SECONDS};
use crate::config::{OnDeadline, Settings};
use crate::events::{NodeEvents, Reason as EventReason};
use crate::filters::Action;
use crate::plan::{Plan, PlannedPod};
use crate::report::{Counts, Outcome, PodReport, Report};

/// Page size of the pod list (kubectl's chunk size).
const LIST_PAGE: u32 = 500;
/// First pause after a transient error (no answer, 5xx); doubles up to [`BACKOFF_MAX`].
const BACKOFF_START: Duration = Duration::from_millis(100);
const BACKOFF_MAX: Duration = Duration::from_secs(2);
/// Time kept back from the deadline for the deadline action and the final Events.
const RESERVE_MAX: Duration = Duration::from_secs(1);
/// How long the drain waits for its Node Events once the work is over (never past the
/// deadline). A hung server must not hold the caller (and the daemon's inhibitor lock) longer:
/// Events are for people, the drain is over.
const FINAL_EVENTS_MAX: Duration = Duration::from_secs(1);

fn field_selector(node: &str) -> String {
    format!("spec.nodeName={node}")
}

fn key_of(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

fn uid_of(pod: &Pod) -> String {
    pod.metadata.uid.clone().unwrap_or_default()
}

fn is_completed(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// A doubling pause for transient errors.
struct Backoff(Duration);

impl Backoff {
    fn new() -> Backoff {
        Backoff(BACKOFF_START)
    }
    fn next(&mut self) -> Duration {
        let d = self.0;
        self.0 = (self.0 * 2).min(BACKOFF_MAX);
        d
    }
    fn reset(&mut self) {
        self.0 = BACKOFF_START;
    }
}

/// Lists the node's pods, following `continue` tokens. Returns the pods and the list's
/// resourceVersion (where the watch starts).
pub async fn list_node_pods(clients: &Clients, node: &str) -> Result<(Vec<Pod>, String), ApiError> {
    let api: Api<Pod> = Api::all(clients.api.clone());
    let mut lp = ListParams::default()
        .fields(&field_selector(node))
        .limit(LIST_PAGE);
    let mut pods = Vec::new();
    let mut rv = None;
    loop {
        let page = clients.timed(api.list(&lp)).await?;
        if rv.is_none() {
            rv = page.metadata.resource_version.clone();
        }
        pods.extend(page.items);
        match page.metadata.continue_ {
            Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
            _ => break,
        }
    }
    Ok((pods, rv.unwrap_or_default()))
}

/// Why [`with_retries`] stopped without a result.
#[derive(Debug)]
enum GaveUp {
    /// A final answer (403, 404, a bad request, ...): repeating it would not help.
    Final(ApiError),
    /// Only transient failures until the deadline. `last` is `None` when the first attempt was
    /// still waiting for an answer at the deadline.
    Deadline {
        attempts: u32,
        last: Option<ApiError>,
    },
}

/// Runs `op` until it succeeds, fails for good, or the deadline. Transient failures (no answer,
/// a broken connection, 429, 5xx) are retried after a pause of [`BACKOFF_START`] doubling to
/// [`BACKOFF_MAX`]; no attempt and no pause runs past `deadline`.
async fn with_retries<T, F, Fut>(deadline: Instant, what: &str, mut op: F) -> Result<T, GaveUp>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, ApiError>>,
{
    let mut backoff = Backoff::new();
    let mut attempts = 0;
    let mut last = None;
    while Instant::now() < deadline {
        attempts += 1;
        match tokio::time::timeout_at(deadline, op()).await {
            Ok(Err(e)) if e.is_transient() => {
                let pause = backoff.next();
                let left = deadline.saturating_duration_since(Instant::now());
                if pause < left {
                    tracing::warn!(
                        "{what} failed (attempt {attempts}), retrying in {pause:?}: {}",
                        said(&e)
                    );
                } else {
                    tracing::warn!(
                        "{what} failed (attempt {attempts}), no time left to retry: {}",
                        said(&e)
                    );
                }
                last = Some(e);
                tokio::time::sleep(pause.min(left)).await;
            }
            Ok(Err(e)) => return Err(GaveUp::Final(e)),
            Ok(Ok(v)) => {
                if attempts > 1 {
                    tracing::info!("{what} succeeded after {attempts} attempts");
                }
                return Ok(v);
            }
            // The attempt was still waiting at the deadline.
            Err(_) => break,
        }
    }
    Err(GaveUp::Deadline { attempts, last })
}

/// A failure that says the API server itself is in trouble (no answer, or a 5xx), as opposed to
/// an answer about the request.
fn is_server_trouble(e: &ApiError) -> bool {
    e.is_unreachable() || e.code().is_some_and(|c| c >= 500)
}

/// What the drain's requests have seen of the API server since its last answer: when the
/// trouble began and the latest error. Read at the deadline, so the report can say the server
/// was unreachable rather than only that pods remained.
#[derive(Default)]
struct ServerHealth {
    outage: Mutex<Option<Outage>>,
}

#[derive(Clone)]
struct Outage {
    since: Instant,
    last: String,
    unreachable: bool,
}

impl ServerHealth {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Outage>> {
        // One Option, replaced whole: a poisoned lock still holds a consistent value.
        self.outage.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The server answered (any answer, even a refusal).
    fn answered(&self) {
        *self.lock() = None;
    }

    /// A request failed; only server trouble counts.
    fn failed(&self, e: &ApiError) {
        if !is_server_trouble(e) {
            return;
        }
        let mut outage = self.lock();
        let since = outage.as_ref().map_or_else(Instant::now, |o| o.since);
        *outage = Some(Outage {
            since,
            last: said(e),
            unreachable: e.is_unreachable(),
        });
    }

    fn outage(&self) -> Option<Outage> {
        self.lock().clone()
    }
}

/// An API server's refusal as one line: `nodes "x" not found (NotFound, HTTP 404)`. kube's own
/// rendering of an API error appends a dump of the whole Status object.
pub(crate) fn status_line(status: &kube::core::Status) -> String {
    let message = if status.message.is_empty() {
        "the API server refused the request"
    } else {
        status.message.as_str()
    };
    let line = if status.reason.is_empty() {
        format!("{message} (HTTP {})", status.code)
    } else {
        format!("{message} ({}, HTTP {})", status.reason, status.code)
    };
    line.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// An API error as one line for the report and the log.
pub(crate) fn said(e: &ApiError) -> String {
    match e {
        ApiError::Kube(kube::Error::Api(s)) => status_line(s),
        e => e.to_string(),
    }
}

/// The report line for an API server that did not answer: names the server and the node.
fn outage_message(
    server: &str,
    node: &str,
    what: &str,
    for_: Duration,
    last: &str,
    unreachable: bool,
) -> String {
    format!(
        "API server {server} {} for node {node} for {:.1} s, until the drain deadline; {what}: {last}",
        if unreachable {
            "was unreachable"
        } else {
            "answered only server errors"
        },
        for_.as_secs_f64()
    )
}

// ---------------------------------------------------------------------------------------------
// The tracker: one watch on the node's pods tells every waiter when its pod has gone.

#[derive(Default)]
struct TrackState {
    /// Pods on the node now, by UID: (namespace/name, completed).
    present: HashMap<String, (String, bool)>,
    /// The UID currently holding each name.
    by_key: HashMap<String, String>,
    /// Every UID ever seen, so a new pod is recognised once.
    known: HashSet<String>,
    notify: HashMap<String, Arc<Notify>>,
}

/// What the pod watch knows about the node's pods.
pub struct Tracker {
    node: String,
    state: Mutex<TrackState>,
}

impl Tracker {
    fn new(node: &str, pods: &[Pod]) -> Arc<Tracker> {
        let t = Arc::new(Tracker {
            node: node.to_string(),
            state: Mutex::new(TrackState::default()),
        });
        for p in pods {
            t.observe(p);
        }
        t
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TrackState> {
        // A panic while holding this lock cannot leave the maps half-updated in a way that
        // matters (each update is one insert/remove), so a poisoned lock is still usable.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wake(s: &mut TrackState, uid: &str) {
        if let Some(n) = s.notify.get(uid) {
            n.notify_waiters();
        }
    }

    /// Records an Added/Modified pod. Returns it when it is new to us.
    fn observe(&self, pod: &Pod) -> Option<Pod> {
        let uid = uid_of(pod);
        let on_node =
            pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(self.node.as_str());
        if !on_node {
            self.remove(&uid);
            return None;
        }
        let key = key_of(pod);
        let completed = is_completed(pod);
        let mut s = self.lock();
        if let Some(old) = s.by_key.insert(key.clone(), uid.clone())
            && old != uid
        {
            // Names are unique: a new UID under the same name means the old pod is gone.
            s.present.remove(&old);
            Self::wake(&mut s, &old);
        }
        let before = s.present.insert(uid.clone(), (key, completed));
        if completed && before.is_none_or(|(_, c)| !c) {
            Self::wake(&mut s, &uid);
        }
        s.known.insert(uid).then(|| pod.clone())
    }

    fn remove(&self, uid: &str) {
        let mut s = self.lock();
        if let Some((key, _)) = s.present.remove(uid) {
            if s.by_key.get(&key).is_some_and(|u| u == uid) {
                s.by_key.remove(&key);
            }
            Self::wake(&mut s, uid);
        }
    }

    /// Replaces the state with a fresh list. Returns the pods new to us.
    fn resync(&self, pods: &[Pod]) -> Vec<Pod> {
        let fresh: HashSet<String> = pods.iter().map(uid_of).collect();
        let stale: Vec<String> = {
            let s = self.lock();
            s.present
                .keys()
                .filter(|u| !fresh.contains(*u))
                .cloned()
                .collect()
        };
        for uid in stale {
            self.remove(&uid);
        }
        pods.iter().filter_map(|p| self.observe(p)).collect()
    }

    pub fn is_gone(&self, uid: &str) -> bool {
        !self.lock().present.contains_key(uid)
    }

    fn is_finished(&self, uid: &str, or_completed: bool) -> bool {
        match self.lock().present.get(uid) {
            None => true,
            Some((_, completed)) => or_completed && *completed,
        }
    }

    fn notify_for(&self, uid: &str) -> Arc<Notify> {
        self.lock()
            .notify
            .entry(uid.to_string())
            .or_default()
            .clone()
    }

    /// Resolves when the pod has gone (or, with `or_completed`, reached Succeeded/Failed).
    pub async fn wait(&self, uid: &str, or_completed: bool) {
        loop {
            let notify = self.notify_for(uid);
            let notified = notify.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            if self.is_finished(uid, or_completed) {
                return;
            }
            notified.await;
        }
    }
}

/// Keeps the tracker current until aborted: watch from `rv`; re-list after any failure.
async fn watch_pods(
    clients: Clients,
    tracker: Arc<Tracker>,
    mut rv: String,
    new_pods: mpsc::UnboundedSender<Pod>,
    health: Arc<ServerHealth>,
) {
    let api: Api<Pod> = Api::all(clients.watch.clone());
    let node = tracker.node.clone();
    let mut backoff = Backoff::new();
    let mut relist = rv.is_empty();
    loop {
        if relist {
            match list_node_pods(&clients, &node).await {
                Ok((pods, new_rv)) => {
                    health.answered();
                    for p in tracker.resync(&pods) {
                        let _ = new_pods.send(p);
                    }
                    rv = new_rv;
                    relist = false;
                }
                Err(e) => {
                    health.failed(&e);
                    let pause = backoff.next();
                    tracing::warn!(node = %node, "listing pods of node {node} failed, retrying in {pause:?}: {e}");
                    tokio::time::sleep(pause).await;
                    continue;
                }
            }
        }
        let wp = WatchParams::default()
            .fields(&field_selector(&node))
            .timeout(WATCH_SECONDS);
        let stream = match clients.timed(api.watch(&wp, &rv)).await {
            Ok(s) => {
                health.answered();
                s
            }
            Err(e) => {
                health.failed(&e);
                let pause = backoff.next();
                tracing::warn!(node = %node, "watching pods of node {node} failed, retrying in {pause:?}: {e}");
                tokio::time::sleep(pause).await;
                relist = true;
                continue;
            }
        };
        let mut stream = std::pin::pin!(stream);
        loop {
            let limit = Duration::from_secs(u64::from(WATCH_SECONDS)) + WATCH_GRACE;
            match tokio::time::timeout(limit, stream.next()).await {
                Ok(Some(Ok(WatchEvent::Added(p) | WatchEvent::Modified(p)))) => {
                    backoff.reset();
                    if let Some(v) = &p.metadata.resource_version {
                        rv.clone_from(v);
                    }
                    if let Some(new) = tracker.observe(&p) {
                        let _ = new_pods.send(new);
                    }
                }
                Ok(Some(Ok(WatchEvent::Deleted(p)))) => {
                    if let Some(v) = &p.metadata.resource_version {
                        rv.clone_from(v);
                    }
                    tracker.remove(&uid_of(&p));
                }
                Ok(Some(Ok(WatchEvent::Bookmark(b)))) => rv = b.metadata.resource_version,
                Ok(Some(Ok(WatchEvent::Error(status)))) => {
                    tracing::debug!(node = %node, "pod watch of node {node} ended with {}: {}", status.code, status.message);
                    relist = true;
                    break;
                }
                Ok(Some(Err(e))) => {
                    let e = ApiError::Kube(e);
                    health.failed(&e);
                    tracing::warn!(node = %node, "pod watch of node {node} broke: {e}");
                    tokio::time::sleep(backoff.next()).await;
                    relist = true;
                    break;
                }
                // The server closed the watch (timeoutSeconds) or it went silent: watch again.
                Ok(None) | Err(_) => break,
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Budgets: one watch per PodDisruptionBudget that refused an eviction.

/// Where evictions blocked by one budget wait. The budget's watch hands out as many wake-ups as
/// the budget allows disruptions, first come first served (`Notify::notify_one` is FIFO), so an
/// opening wakes a few pods instead of every blocked pod at once.
#[derive(Default)]
struct BudgetGate {
    notify: Notify,
    /// The budget cannot be watched (e.g. 403 with kubelet credentials): waiters use the timer.
    unavailable: AtomicBool,
}

impl BudgetGate {
    /// Publishes one observation of the budget.
    fn observed(&self, allowed: Option<i32>) {
        match allowed {
            // Unknown (no status yet) or gone: anyone may try.
            None => self.notify.notify_waiters(),
            Some(a) => {
                for _ in 0..a.max(0) {
                    self.notify.notify_one();
                }
            }
        }
    }
}

struct Budgets {
    clients: Clients,
    gates: Mutex<HashMap<String, Arc<BudgetGate>>>,
    tasks: Mutex<JoinSet<()>>,
}

impl Budgets {
    /// The gate of a budget; the first call starts its watch.
    fn gate(&self, namespace: &str, name: &str) -> Arc<BudgetGate> {
        let key = format!("{namespace}/{name}");
        let mut gates = self.gates.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(g) = gates.get(&key) {
            return g.clone();
        }
        let gate = Arc::new(BudgetGate::default());
        gates.insert(key, gate.clone());
        self.tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .spawn(watch_budget(
                self.clients.clone(),
                namespace.to_string(),
                name.to_string(),
                gate.clone(),
            ));
        gate
    }
}

fn allowed_of(pdb: &PodDisruptionBudget) -> Option<i32> {
    pdb.status.as_ref().map(|s| s.disruptions_allowed)
}

async fn watch_budget(clients: Clients, namespace: String, name: String, gate: Arc<BudgetGate>) {
    let api: Api<PodDisruptionBudget> = Api::namespaced(clients.api.clone(), &namespace);
    let wapi: Api<PodDisruptionBudget> = Api::namespaced(clients.watch.clone(), &namespace);
    let fields = format!("metadata.name={name}");
    let mut backoff = Backoff::new();
    loop {
        let list = match clients
            .timed(api.list(&ListParams::default().fields(&fields)))
            .await
        {
            Ok(l) => l,
            Err(e) if e.is_forbidden() || e.is_not_found() => {
                tracing::info!(
                    "cannot watch poddisruptionbudget {namespace}/{name} ({}); retrying blocked evictions on a timer",
                    said(&e)
                );
                gate.unavailable.store(true, Ordering::Relaxed);
                gate.notify.notify_waiters();
                return;
            }
            Err(e) => {
                tracing::debug!("listing poddisruptionbudget {namespace}/{name} failed: {e}");
                tokio::time::sleep(backoff.next()).await;
                continue;
            }
        };
        gate.observed(list.items.first().and_then(allowed_of));
        let rv = list.metadata.resource_version.unwrap_or_default();
        let wp = WatchParams::default()
            .fields(&fields)
            .timeout(WATCH_SECONDS);
        let Ok(stream) = clients.timed(wapi.watch(&wp, &rv)).await else {
            tokio::time::sleep(backoff.next()).await;
            continue;
        };
        backoff.reset();
        let mut stream = std::pin::pin!(stream);
        let limit = Duration::from_secs(u64::from(WATCH_SECONDS)) + WATCH_GRACE;
        while let Ok(Some(Ok(ev))) = tokio::time::timeout(limit, stream.next()).await {
            match ev {
                WatchEvent::Added(p) | WatchEvent::Modified(p) => gate.observed(allowed_of(&p)),
                WatchEvent::Deleted(_) => gate.observed(None),
                WatchEvent::Bookmark(_) => {}
                WatchEvent::Error(_) => break,
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// One eviction.

/// The server's answer to an eviction.
#[derive(Debug)]
enum Answer {
    Accepted,
    /// 404: the pod is gone; 409 naming the UID precondition: the name holds another pod.
    Gone,
    /// Another 409 (the pod changed while the server evicted it): try again soon; the pod watch
    /// decides whether it is still the planned pod.
    Conflict(String),
    /// 429.
    TooMany {
        retry_after: Option<Duration>,
        budget: Option<String>,
        message: String,
    },
    /// Anything else (403, 500 for overlapping budgets, ...).
    Refused {
        code: u16,
        message: String,
    },
}

/// "The disruption budget web-pdb needs 2 healthy pods and has 2 currently" -> "web-pdb".
fn budget_name(message: &str) -> Option<String> {
    let rest = message.split("disruption budget ").nth(1)?;
    let name = rest.split_whitespace().next()?;
    Some(name.to_string())
}

fn eviction_body(pod: &PlannedPod, grace: Option<Duration>) -> Eviction {
    Eviction {
        metadata: ObjectMeta {
            name: Some(pod.name.clone()),
            namespace: Some(pod.namespace.clone()),
            ..ObjectMeta::default()
        },
        delete_options: Some(DeleteOptions {
            grace_period_seconds: grace.map(|g| i64::try_from(g.as_secs()).unwrap_or(i64::MAX)),
            preconditions: Some(Preconditions {
                uid: Some(pod.uid.clone()),
                resource_version: None,
            }),
            ..DeleteOptions::default()
        }),
    }
}

/// POSTs the Eviction. Raw, because kube's typed call hides the Retry-After header.
async fn post_eviction(
    clients: &Clients,
    pod: &PlannedPod,
    grace: Option<Duration>,
) -> Result<Answer, ApiError> {
    let body = serde_json::to_vec(&eviction_body(pod, grace))
        .map_err(|e| ApiError::Kube(kube::Error::SerdeError(e)))?;
    let request = http::Request::post(format!(
        "/api/v1/namespaces/{}/pods/{}/eviction",
        pod.namespace, pod.name
    ))
    .header(http::header::CONTENT_TYPE, "application/json")
    .header(http::header::ACCEPT, "application/json")
    .body(kube::client::Body::from(body))
    .map_err(|e| ApiError::Kube(kube::Error::HttpError(e)))?;
    let send = async {
        let response = clients.api.send(request).await?;
        let code = response.status().as_u16();
        let header_retry = response
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<u64>().ok());
        let bytes = response.into_body().collect_bytes().await?;
        Ok((code, header_retry, bytes))
    };
    let (code, header_retry, bytes) = clients.timed(send).await?;
    let status: Option<kube::core::Status> = serde_json::from_slice(&bytes).ok();
    let message = status
        .as_ref()
        .map(|s| s.message.clone())
        .unwrap_or_default();
    Ok(match code {
        200..=299 => Answer::Accepted,
        404 => Answer::Gone,
        409 if message.contains("UID in precondition") => Answer::Gone,
        409 => Answer::Conflict(message),
        429 => {
            let details = status.as_ref().and_then(|s| s.details.as_ref());
            let body_retry = details
                .map(|d| u64::from(d.retry_after_seconds))
                .filter(|s| *s > 0);
            let cause = details
                .and_then(|d| d.causes.iter().find(|c| c.reason == "DisruptionBudget"))
                .map(|c| c.message.clone());
            Answer::TooMany {
                retry_after: header_retry
                    .filter(|s| *s > 0)
                    .or(body_retry)
                    .map(Duration::from_secs),
                budget: cause
                    .as_deref()
                    .and_then(budget_name)
                    .or_else(|| budget_name(&message)),
                message: cause.unwrap_or(message),
            }
        }
        // More than one budget covers the pod: the eviction API cannot help, retry slowly.
        500 if message.contains("PodDisruptionBudget") => Answer::Refused { code, message },
        c if c >= 500 => {
            // The server or a proxy is in trouble; worth a quick retry.
            return Err(ApiError::Kube(kube::Error::Api(Box::new(
                status.unwrap_or_else(|| kube::core::Status {
                    code,
                    message: String::from_utf8_lossy(&bytes).into_owned(),
                    ..kube::core::Status::default()
                }),
            ))));
        }
        code => Answer::Refused {
            code,
            message: if message.is_empty() {
                String::from_utf8_lossy(&bytes).into_owned()
            } else {
                message
            },
        },
    })
}

// ---------------------------------------------------------------------------------------------
// The run.

struct Run {
    clients: Clients,
    settings: Arc<Settings>,
    events: NodeEvents,
    tracker: Arc<Tracker>,
    budgets: Budgets,
    requests: Semaphore,
    started: Instant,
    pods: Mutex<Vec<PodReport>>,
    /// The plan of each pod in `pods`, same index: the UID a deadline delete must be guarded by.
    planned: Mutex<Vec<PlannedPod>>,
    blocked_announced: Mutex<HashSet<String>>,
    health: Arc<ServerHealth>,
    /// Event posts under way; what is left at the end gets [`FINAL_EVENTS_MAX`], then is dropped.
    event_posts: Mutex<JoinSet<()>>,
}

impl Run {
    fn ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    fn update(&self, idx: usize, f: impl FnOnce(&mut PodReport)) {
        let mut pods = self.pods.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(p) = pods.get_mut(idx) {
            f(p);
        }
    }

    fn finish(&self, idx: usize, outcome: Outcome) {
        let ms = self.ms();
        self.update(idx, |p| {
            p.outcome = outcome;
            p.finished_ms = Some(ms);
            if outcome.is_done() {
                p.detail = None;
                p.budget = None;
            }
        });
    }

    fn add(&self, planned: &PlannedPod) -> usize {
        let outcome = if planned.action == Action::Skip {
            Outcome::Skipped
        } else {
            Outcome::Pending
        };
        let mut pods = self.pods.lock().unwrap_or_else(|p| p.into_inner());
        let mut plans = self.planned.lock().unwrap_or_else(|p| p.into_inner());
        pods.push(PodReport::from_plan(planned, outcome));
        plans.push(planned.clone());
        pods.len() - 1
    }

    fn announce_blocked(self: &Arc<Self>, budget: &str, pod: &str, message: &str) {
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
    fn post_event(&self, reason: EventReason, message: String) {
        let events = self.events.clone();
        self.event_posts
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .spawn(async move { events.emit(reason, &message).await });
    }

    /// Evicts one pod and waits for it to go. Keeps its report entry current, so a task stopped
    /// at the deadline leaves an accurate entry behind.
    #[tracing::instrument(skip(self, idx, pod), fields(pod = %pod.key()))]
    async fn evict(self: Arc<Self>, idx: usize, pod: PlannedPod) {
        let key = pod.key();
        self.update(idx, |p| p.started_ms = Some(self.ms()));
        let mut backoff = Backoff::new();
        let retry_interval = self.settings.drain.retry_interval;
        loop {
            if self.tracker.is_gone(&pod.uid) {
                tracing::info!(outcome = "gone", "pod {key} left before we evicted it");
                return self.finish(idx, Outcome::Gone);
            }
            let answer = {
                let Ok(_permit) = self.requests.acquire().await else {
                    return;
                };
                post_eviction(&self.clients, &pod, self.settings.drain.grace_period).await
            };
            match &answer {
                Ok(_) => self.health.answered(),
                Err(e) => self.health.failed(e),
            }
            self.update(idx, |p| p.attempts += 1);
            let pause = match answer {
                Ok(Answer::Accepted) => break,
                Ok(Answer::Gone) => {
                    tracing::info!(
                        outcome = "gone",
                        "pod {key} is already gone (or replaced by another uid)"
                    );
                    return self.finish(idx, Outcome::Gone);
                }
                Ok(Answer::Conflict(message)) => {
                    tracing::info!("eviction of pod {key} conflicted (409), retrying: {message}");
                    Pause::For(backoff.next())
                }
                Ok(Answer::TooMany {
                    retry_after,
                    budget,
                    message,
                }) => {
                    let budget = budget.map(|b| format!("{}/{b}", pod.namespace));
                    tracing::info!(
                        budget = budget.as_deref().unwrap_or("-"),
                        "eviction of pod {key} refused (429): {message}"
                    );
                    self.update(idx, |p| {
                        p.outcome = Outcome::Blocked;
                        p.detail = Some(message.clone());
                        p.budget.clone_from(&budget);
                    });
                    if let Some(b) = &budget {
                        self.announce_blocked(b, &key, &message);
                    }
                    backoff.reset();
                    match (retry_after, &budget) {
                        (Some(d), _) => Pause::For(d),
                        (None, Some(b)) => Pause::Budget(b.clone()),
                        (None, None) => Pause::For(retry_interval),
                    }
                }
                Ok(Answer::Refused { code, message }) => {
                    tracing::warn!(
                        outcome = "failed",
                        "eviction of pod {key} refused ({code}): {message}"
                    );
                    self.update(idx, |p| {
                        p.outcome = Outcome::Failed;
                        p.detail = Some(format!("{code}: {message}"));
                    });
                    Pause::For(retry_interval)
                }
                Err(e) if e.is_transient() => {
                    tracing::warn!("eviction of pod {key} got no answer: {}", said(&e));
                    self.update(idx, |p| p.detail = Some(said(&e)));
                    Pause::For(backoff.next())
                }
                Err(e) => {
                    tracing::warn!("eviction of pod {key} failed: {}", said(&e));
                    self.update(idx, |p| {
                        p.outcome = Outcome::Failed;
                        p.detail = Some(said(&e));
                    });
                    Pause::For(retry_interval)
                }
            };
            self.pause(pause, &pod.uid, retry_interval).await;
        }
        tracing::info!("evicted pod {key}; waiting for it to go");
        self.update(idx, |p| {
            p.outcome = Outcome::Pending;
            p.detail = Some("evicted, terminating".into());
            p.budget = None;
        });
        self.tracker.wait(&pod.uid, false).await;
        tracing::info!(outcome = "evicted", "pod {key} is gone");
        self.finish(idx, Outcome::Evicted);
    }

    /// Sleeps before the next attempt; returns early when the pod goes.
    async fn pause(&self, pause: Pause, uid: &str, fallback: Duration) {
        let wait = async {
            match pause {
                Pause::For(d) => tokio::time::sleep(d).await,
                Pause::Budget(b) => {
                    let (ns, name) = b.split_once('/').unwrap_or(("", b.as_str()));
                    let gate = self.budgets.gate(ns, name);
                    if gate.unavailable.load(Ordering::Relaxed) {
                        tokio::time::sleep(fallback).await;
                    } else {
                        tokio::select! {
                            _ = gate.notify.notified() => {}
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
    async fn wait_for(self: Arc<Self>, idx: usize, pod: PlannedPod) {
        self.update(idx, |p| p.started_ms = Some(self.ms()));
        self.tracker.wait(&pod.uid, true).await;
        let outcome = if self.tracker.is_gone(&pod.uid) {
            Outcome::Gone
        } else {
            Outcome::Completed
        };
        tracing::info!(
            outcome = outcome.as_str(),
            "pod {} finished waiting: {}",
            pod.key(),
            outcome.as_str()
        );
        self.finish(idx, outcome);
    }

    /// Deletes one remaining pod at the deadline, ignoring its budget. Transient failures are
    /// retried until `deadline`.
    async fn delete(self: Arc<Self>, idx: usize, pod: PlannedPod, deadline: Instant) {
        let api: Api<Pod> = Api::namespaced(self.clients.api.clone(), &pod.namespace);
        let dp = DeleteParams {
            // The config bounds the grace period to whole seconds up to a day, so this never saturates.
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
        let what = format!("deleting pod {} at the deadline", pod.key());
        let Ok(_permit) = self.requests.acquire().await else {
            return;
        };
        let result = with_retries(deadline, &what, || async {
            let result = self.clients.timed(api.delete(&pod.name, &dp)).await;
            match &result {
                Ok(_) => self.health.answered(),
                Err(e) => self.health.failed(e),
            }
            result
        })
        .await;
        match result {
            Ok(_) => {
                tracing::warn!(
                    outcome = "deleted",
                    "deleted pod {} at the deadline, ignoring its budget",
                    pod.key()
                );
                self.finish(idx, Outcome::Deleted);
            }
            Err(GaveUp::Final(e)) if e.is_not_found() || e.is_conflict() => {
                self.finish(idx, Outcome::Gone)
            }
            Err(GaveUp::Final(e) | GaveUp::Deadline { last: Some(e), .. }) => {
                tracing::warn!(
                    "cannot delete pod {} at the deadline: {}",
                    pod.key(),
                    said(&e)
                );
                self.update(idx, |p| {
                    p.detail = Some(format!("delete at deadline failed: {}", said(&e)))
                });
            }
            Err(GaveUp::Deadline { last: None, .. }) => {
                tracing::warn!(
                    "no answer to the delete of pod {} before the deadline",
                    pod.key()
                );
                self.update(idx, |p| {
                    p.detail = Some("delete at deadline got no answer".into())
                });
            }
        }
    }
}

enum Pause {
    For(Duration),
    Budget(String),
}

/// Files a planned pod: into the running group when its order has come, else into its group.
fn place(
    run: &Arc<Run>,
    p: PlannedPod,
    pending: &mut BTreeMap<i32, Vec<(usize, PlannedPod)>>,
    waits: &mut JoinSet<()>,
    current: Option<&mut (i32, JoinSet<()>)>,
) {
    let idx = run.add(&p);
    match (p.action, p.order) {
        (Action::Evict, Some(order)) => match current {
            Some((cur, set)) if order <= *cur => {
                set.spawn(run.clone().evict(idx, p).in_current_span());
            }
            _ => pending.entry(order).or_default().push((idx, p)),
        },
        (Action::Wait, _) => {
            waits.spawn(run.clone().wait_for(idx, p).in_current_span());
        }
        _ => {}
    }
}

enum Step {
    Progress,
    NewPod(Box<Pod>),
    Deadline,
}

/// Options of one drain run.
#[derive(Debug, Clone)]
pub struct DrainOptions {
    pub why: String,
    pub dry_run: bool,
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
        pods: Vec::new(),
        blocked_by: Vec::new(),
        errors: Vec::new(),
    }
}

/// Plans the node now (one paged list). Changes nothing.
pub async fn plan(clients: &Clients, settings: &Settings) -> Result<Plan, ApiError> {
    let (pods, _) = list_node_pods(clients, &settings.node_name).await?;
    Ok(Plan::build(settings, &pods))
}

/// Drains the node. Returns by `deadline`, always. `server` (the API server's URL) names the
/// server in the report when it does not answer.
#[tracing::instrument(skip_all, fields(node = %settings.node_name))]
pub async fn drain(
    clients: &Clients,
    server: &str,
    settings: Arc<Settings>,
    events: NodeEvents,
    options: DrainOptions,
    deadline: Instant,
) -> Report {
    let started = Instant::now();
    let started_at = jiff::Timestamp::now();
    let node = settings.node_name.clone();
    let mut report = empty_report(&settings, &options, started_at);
    let total = deadline.saturating_duration_since(started);
    let work_deadline = deadline - (total / 10).min(RESERVE_MAX);

    // A control plane that restarts while the node shuts down is retried until the deadline.
    let listed = with_retries(
        work_deadline,
        &format!("listing pods of node {node} from {server}"),
        || list_node_pods(clients, &node),
    )
    .await;
    let (pods, rv) = match listed {
        Ok(x) => x,
        Err(GaveUp::Final(e)) => {
            report
                .errors
                .push(format!("cannot list the pods of node {node}: {}", said(&e)));
            report.duration_ms = started.elapsed().as_millis() as u64;
            report.finish();
            return report;
        }
        Err(GaveUp::Deadline { attempts, last }) => {
            let what = format!("cannot list the pods of node {node} ({attempts} attempts)");
            let message = match &last {
                Some(e) => outage_message(
                    server,
                    &node,
                    &what,
                    started.elapsed(),
                    &e.to_string(),
                    e.is_unreachable(),
                ),
                None => outage_message(server, &node, &what, started.elapsed(), "no answer", true),
            };
            tracing::error!("{message}");
            report.errors.push(message);
            report.deadline_reached = true;
            report.duration_ms = started.elapsed().as_millis() as u64;
            report.finish();
            return report;
        }
    };
    let plan = Plan::build(&settings, &pods);
    if options.dry_run {
        report.pods = plan
            .pods
            .iter()
            .map(|p| {
                PodReport::from_plan(
                    p,
                    if p.action == Action::Skip {
                        Outcome::Skipped
                    } else {
                        Outcome::DryRun
                    },
                )
            })
            .collect();
        report.duration_ms = started.elapsed().as_millis() as u64;
        report.finish();
        return report;
    }

    let tracker = Tracker::new(&node, &pods);
    let health = Arc::new(ServerHealth::default());
    let (new_tx, mut new_rx) = mpsc::unbounded_channel();
    // Held in a set, not spawned bare: dropping the drain future (a cancel, the daemon's overrun
    // guard) drops the set, which aborts the watch; a detached watch would re-watch forever.
    let mut watcher = JoinSet::new();
    watcher.spawn(watch_pods(
        clients.clone(),
        tracker.clone(),
        rv,
        new_tx,
        health.clone(),
    ));
    let run = Arc::new(Run {
        clients: clients.clone(),
        settings: settings.clone(),
        events,
        tracker,
        budgets: Budgets {
            clients: clients.clone(),
            gates: Mutex::new(HashMap::new()),
            tasks: Mutex::new(JoinSet::new()),
        },
        requests: Semaphore::new(settings.drain.concurrency),
        started,
        pods: Mutex::new(Vec::new()),
        planned: Mutex::new(Vec::new()),
        blocked_announced: Mutex::new(HashSet::new()),
        health: health.clone(),
        event_posts: Mutex::new(JoinSet::new()),
    });
    let started_msg = format!(
        "drain of node {node} started ({}): {} pods to evict, {} to wait for, {} skipped",
        options.why,
        plan.count(Action::Evict),
        plan.count(Action::Wait),
        plan.count(Action::Skip)
    );
    tracing::info!("{started_msg}");
    run.post_event(EventReason::DrainStarted, started_msg);

    // Index every planned pod in the report; group the evictions.
    let mut pending: BTreeMap<i32, Vec<(usize, PlannedPod)>> = BTreeMap::new();
    let mut waits = JoinSet::new();
    for p in plan.pods {
        place(&run, p, &mut pending, &mut waits, None);
    }

    let mut current: Option<(i32, JoinSet<()>)> = None;
    let mut deadline_reached = false;
    loop {
        if current.as_ref().is_none_or(|(_, s)| s.is_empty()) {
            if let Some((order, pods)) = pending.pop_first() {
                tracing::info!(
                    "evicting order group {order} ({} pods) from node {node}",
                    pods.len()
                );
                let mut set = JoinSet::new();
                for (idx, p) in pods {
                    set.spawn(run.clone().evict(idx, p).in_current_span());
                }
                current = Some((order, set));
                continue;
            }
            current = None;
            if waits.is_empty() {
                // Everything planned is done; take pods that appeared meanwhile, then stop.
                match new_rx.try_recv() {
                    Ok(pod) => {
                        let p = PlannedPod::for_pod(&settings, &pod);
                        tracing::info!(
                            "pod {} appeared on node {node} during the drain: {}",
                            p.key(),
                            p.action.as_str()
                        );
                        place(&run, p, &mut pending, &mut waits, None);
                        continue;
                    }
                    Err(_) => break,
                }
            }
        }
        let step = tokio::select! {
            Some(_) = async { match current.as_mut() { Some((_, s)) => s.join_next().await, None => None } } => Step::Progress,
            Some(_) = waits.join_next(), if !waits.is_empty() => Step::Progress,
            Some(pod) = new_rx.recv() => Step::NewPod(Box::new(pod)),
            _ = tokio::time::sleep_until(work_deadline) => Step::Deadline,
        };
        match step {
            Step::Progress => {}
            Step::NewPod(pod) => {
                let p = PlannedPod::for_pod(&settings, &pod);
                tracing::info!(
                    "pod {} appeared on node {node} during the drain: {}",
                    p.key(),
                    p.action.as_str()
                );
                place(&run, p, &mut pending, &mut waits, current.as_mut());
            }
            Step::Deadline => {
                deadline_reached = true;
                break;
            }
        }
    }
    drop(current);
    drop(waits);
    // Stop every remaining eviction and watch.
    run.budgets
        .tasks
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .abort_all();

    if deadline_reached {
        let remaining: Vec<(usize, PodReport)> = run
            .pods
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .enumerate()
            .filter(|(_, p)| !p.outcome.is_done())
            .collect();
        let names: Vec<String> = remaining.iter().map(|(_, p)| p.key()).collect();
        tracing::warn!(
            "drain deadline reached on node {node}; {} pods remain: {}",
            names.len(),
            names.join(", ")
        );
        if settings.drain.on_deadline == OnDeadline::Delete {
            // The planned pod, not the current holder of its name: the delete carries the UID
            // that was planned, so a replacement of the same name is never touched.
            let plans = run
                .planned
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            let mut deletes = JoinSet::new();
            for (idx, p) in &remaining {
                if p.action != Action::Evict {
                    continue;
                }
                if let Some(planned) = plans.get(*idx) {
                    deletes.spawn(
                        run.clone()
                            .delete(*idx, planned.clone(), deadline)
                            .in_current_span(),
                    );
                }
            }
            let _ = tokio::time::timeout_at(deadline, async {
                while deletes.join_next().await.is_some() {}
            })
            .await;
        }
        let budgets: Vec<String> = run
            .pods
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|p| p.outcome == Outcome::Blocked)
            .filter_map(|p| {
                Some(format!(
                    "{} ({}: {})",
                    p.key(),
                    p.budget.clone()?,
                    p.detail.clone().unwrap_or_default()
                ))
            })
            .collect();
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
        if let Some(o) = health.outage() {
            let message = outage_message(
                server,
                &node,
                &format!("{} pods remain", names.len()),
                o.since.elapsed(),
                &o.last,
                o.unreachable,
            );
            tracing::error!("{message}");
            report.errors.push(message);
        }
    }
    watcher.abort_all();

    report.pods = std::mem::take(&mut *run.pods.lock().unwrap_or_else(|p| p.into_inner()));
    report.deadline_reached = deadline_reached;
    report.duration_ms = started.elapsed().as_millis() as u64;
    report.finish();
    tracing::info!("{}", report.summary());
    run.post_event(EventReason::DrainFinished, report.summary());
    let mut posts = std::mem::take(&mut *run.event_posts.lock().unwrap_or_else(|p| p.into_inner()));
    let until = deadline.min(Instant::now() + FINAL_EVENTS_MAX);
    let posted =
        tokio::time::timeout_at(until, async { while posts.join_next().await.is_some() {} }).await;
    if posted.is_err() {
        tracing::warn!(
            "gave up on {} node events of node {node}: no answer from {server} in time",
            posts.len()
        );
    }
    // Dropping the set aborts the posts still waiting.
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_errors_in_the_report_are_one_line_without_the_status_dump() {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "code": 503, "reason": "ServiceUnavailable",
            "message": "etcd\nleader changed",
        }))
        .unwrap();
        let e = ApiError::Kube(kube::Error::Api(Box::new(status)));
        assert!(e.to_string().contains("Status {"), "{e}");
        assert_eq!(
            said(&e),
            "etcd leader changed (ServiceUnavailable, HTTP 503)"
        );
        let bare = kube::core::Status {
            code: 500,
            ..kube::core::Status::default()
        };
        assert_eq!(
            status_line(&bare),
            "the API server refused the request (HTTP 500)"
        );
        let timeout = ApiError::Timeout(Duration::from_secs(10));
        assert_eq!(said(&timeout), "no answer within 10s");
    }

    #[test]
    fn budget_name_from_the_api_message() {
        assert_eq!(
            budget_name(
                "The disruption budget guarded-pdb needs 1 healthy pods and has 1 currently"
            )
            .as_deref(),
            Some("guarded-pdb")
        );
        assert_eq!(
            budget_name("Cannot evict pod as it would violate the pod's disruption budget."),
            None
        );
        assert_eq!(budget_name("no budget here"), None);
    }

    #[test]
    fn eviction_body_carries_delete_options_in_camel_case() {
        let pod = PlannedPod {
            namespace: "work".into(),
            name: "web-1".into(),
            uid: "u-1".into(),
            action: Action::Evict,
            reason: crate::filters::Reason::Priority,
            order: Some(0),
        };
        let v = serde_json::to_value(eviction_body(&pod, Some(Duration::from_secs(7)))).unwrap();
        assert_eq!(
            v,
            serde_json::json!({
                "apiVersion": "policy/v1", "kind": "Eviction",
                "metadata": {"name": "web-1", "namespace": "work"},
                "deleteOptions": {"gracePeriodSeconds": 7, "preconditions": {"uid": "u-1"}}
            })
        );
    }

    #[tokio::test(start_paused = true)]
    async fn transient_errors_back_off_doubling_to_the_cap_until_the_deadline() {
        let start = Instant::now();
        let mut calls = Vec::new();
        let result: Result<(), GaveUp> =
            with_retries(start + Duration::from_secs(10), "test", || {
                calls.push(start.elapsed().as_millis());
                async { Err(ApiError::Timeout(Duration::from_secs(1))) }
            })
            .await;
        // Pauses of 100, 200, 400, 800, 1600 ms, then 2 s each; the last pause ends at the
        // deadline, where the retries stop.
        assert_eq!(calls, vec![0, 100, 300, 700, 1500, 3100, 5100, 7100, 9100]);
        assert_eq!(start.elapsed(), Duration::from_secs(10));
        match result {
            Err(GaveUp::Deadline {
                attempts: 9,
                last: Some(ApiError::Timeout(_)),
            }) => {}
            other => panic!("gave up at the deadline after 9 attempts: {other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_that_comes_back_is_used_and_a_final_answer_is_not_retried() {
        let start = Instant::now();
        let back = start + Duration::from_secs(6);
        let result = with_retries(start + Duration::from_secs(60), "test", || async move {
            if Instant::now() < back {
                Err(ApiError::Timeout(Duration::from_secs(1)))
            } else {
                Ok(7)
            }
        })
        .await;
        assert!(matches!(result, Ok(7)), "{result:?}");
        // The first attempt after the server came back (6 s) is at 7.1 s: the pause never grew
        // past 2 s.
        assert_eq!(start.elapsed(), Duration::from_millis(7100));

        // A final answer (404) is not retried.
        let mut n = 0;
        let status = kube::core::Status {
            code: 404,
            ..kube::core::Status::default()
        };
        let result: Result<(), GaveUp> =
            with_retries(Instant::now() + Duration::from_secs(3), "test", || {
                n += 1;
                let e = ApiError::Kube(kube::Error::Api(Box::new(status.clone())));
                async move { Err(e) }
            })
            .await;
        assert!(matches!(result, Err(GaveUp::Final(e)) if e.is_not_found()));
        assert_eq!(n, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn an_attempt_still_waiting_at_the_deadline_is_cut_there() {
        let start = Instant::now();
        let result: Result<(), GaveUp> =
            with_retries(start + Duration::from_secs(3), "test", || {
                std::future::pending::<Result<(), ApiError>>()
            })
            .await;
        assert!(matches!(
            result,
            Err(GaveUp::Deadline {
                attempts: 1,
                last: None
            })
        ));
        assert_eq!(start.elapsed(), Duration::from_secs(3));
    }

    #[test]
    fn server_health_remembers_the_start_of_an_outage_until_an_answer() {
        let h = ServerHealth::default();
        let refused = |code| {
            ApiError::Kube(kube::Error::Api(Box::new(kube::core::Status {
                code,
                ..kube::core::Status::default()
            })))
        };
        h.failed(&refused(403));
        assert!(h.outage().is_none(), "a refusal is an answer");
        h.failed(&ApiError::Timeout(Duration::from_secs(1)));
        let first = h.outage().expect("an outage").since;
        h.failed(&refused(503));
        let o = h.outage().expect("still an outage");
        assert_eq!(o.since, first);
        assert!(!o.unreachable, "a 503 is an answer from something");
        h.answered();
        assert!(h.outage().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn tracker_wakes_waiters_on_delete_replacement_and_completion() {
        let pod = |name: &str, uid: &str, node: &str, phase: &str| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "w", "uid": uid},
                "spec": {"nodeName": node, "containers": []},
                "status": {"phase": phase}
            }))
            .unwrap()
        };
        let t = Tracker::new(
            "n1",
            &[
                pod("a", "ua", "n1", "Running"),
                pod("b", "ub", "n1", "Running"),
                pod("c", "uc", "n1", "Running"),
            ],
        );
        let (t1, t2, t3) = (t.clone(), t.clone(), t.clone());
        let wa = tokio::spawn(async move { t1.wait("ua", false).await });
        let wb = tokio::spawn(async move { t2.wait("ub", true).await });
        let wc = tokio::spawn(async move { t3.wait("uc", false).await });
        tokio::task::yield_now().await;
        // A replacement under the same name: the old UID is gone, the new one is reported new.
        assert!(t.observe(&pod("a", "ua2", "n1", "Running")).is_some());
        // Completion finishes a `wait` pod but not an evicted one.
        assert!(t.observe(&pod("b", "ub", "n1", "Succeeded")).is_none());
        // Bound elsewhere counts as gone.
        t.observe(&pod("c", "uc", "n2", "Running"));
        tokio::time::timeout(Duration::from_secs(1), async {
            wa.await.unwrap();
            wb.await.unwrap();
            wc.await.unwrap();
        })
        .await
        .expect("every waiter woke");
        assert!(t.is_gone("ua") && !t.is_gone("ua2") && !t.is_gone("ub") && t.is_gone("uc"));
        // A resync drops what the fresh list lacks and reports what is new.
        let new = t.resync(&[
            pod("a", "ua2", "n1", "Running"),
            pod("d", "ud", "n1", "Running"),
        ]);
        assert_eq!(new.len(), 1);
        assert!(t.is_gone("ub"));
    }
}
