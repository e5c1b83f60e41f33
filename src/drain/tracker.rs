//! What the node's pods are doing, from one watch (kube's watcher: relists after 410, backs off
//! after errors, watch requests paced): every waiter learns when its pod has gone (deleted,
//! replaced by another UID, or bound elsewhere) or completed, and pods that appear during the
//! drain are handed to the scheduler. Pods the API returns without a name, namespace, UID or
//! spec are never tracked (they can be neither evicted safely nor declared gone); the scheduler
//! reports them as errors.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::sync::{Notify, mpsc};

use super::health::ServerHealth;
use crate::api::client::WATCH_SECONDS;
use crate::api::error::Kind;
use crate::api::retry;
use crate::api::{ApiError, Clients};
use crate::policy::filters::is_completed;

pub fn field_selector(node: &str) -> String {
    format!("spec.nodeName={node}")
}

/// What a pod from the API lacks for the drain to act on it, if anything: a name or namespace
/// that can be one ([`crate::api::path::segment`]: `../../x` cannot), a UID, a spec.
pub fn missing_part(pod: &Pod) -> Option<&'static str> {
    let m = &pod.metadata;
    let invalid = |v: &Option<String>| {
        v.as_deref()
            .is_some_and(|n| crate::api::path::segment(n).is_err())
    };
    if m.name.as_deref().is_none_or(str::is_empty) {
        Some("metadata.name")
    } else if m.namespace.as_deref().is_none_or(str::is_empty) {
        Some("metadata.namespace")
    } else if invalid(&m.name) {
        Some("a valid metadata.name")
    } else if invalid(&m.namespace) {
        Some("a valid metadata.namespace")
    } else if m.uid.as_deref().is_none_or(str::is_empty) {
        Some("metadata.uid")
    } else if pod.spec.is_none() {
        Some("spec")
    } else {
        None
    }
}

/// The report line for a pod the API returned without `part`.
pub fn malformed_message(pod: &Pod, part: &str) -> String {
    let shown = |v: &Option<String>| match v.as_deref() {
        None | Some("") => "?".to_string(),
        Some(v) => crate::text::escaped(&v.chars().take(100).collect::<String>()),
    };
    format!(
        "the API server returned pod {}/{} without {part}; it was not drained",
        shown(&pod.metadata.namespace),
        shown(&pod.metadata.name),
    )
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

#[derive(Default)]
struct TrackState {
    /// Pods on the node now, by UID: (namespace/name, completed).
    present: HashMap<String, (String, bool)>,
    /// The UID currently holding each name.
    by_key: HashMap<String, String>,
    /// Every UID ever seen, so a new pod is recognised once.
    known: HashSet<String>,
    /// Malformed pods already handed on, by their message.
    malformed: HashSet<String>,
    /// Every UID seen Succeeded or Failed: a pod that completed and then went counts as
    /// completed, even when its deletion arrived before its waiter looked.
    completed: HashSet<String>,
    notify: HashMap<String, Arc<Notify>>,
}

/// How a waited-for pod finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finished {
    /// Deleted, replaced by another UID, or bound elsewhere, without being seen completed.
    Gone,
    /// Seen Succeeded or Failed (only when waited for with `or_completed`).
    Completed,
}

/// What the pod watch knows about the node's pods.
pub struct Tracker {
    node: String,
    state: Mutex<TrackState>,
}

impl Tracker {
    pub fn new(node: &str, pods: &[Pod]) -> Arc<Tracker> {
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
        // Each update is one insert/remove: a poisoned lock still holds consistent maps.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wake(s: &mut TrackState, uid: &str) {
        if let Some(n) = s.notify.get(uid) {
            n.notify_waiters();
        }
    }

    /// Records an Added/Modified pod. `true` when it is new to us (a malformed pod once).
    pub fn observe(&self, pod: &Pod) -> bool {
        if let Some(part) = missing_part(pod) {
            let message = malformed_message(pod, part);
            return self.lock().malformed.insert(message);
        }
        let uid = uid_of(pod);
        let on_node =
            pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(self.node.as_str());
        if !on_node {
            self.remove(&uid);
            return false;
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
        if completed {
            s.completed.insert(uid.clone());
        }
        if completed && before.is_none_or(|(_, c)| !c) {
            Self::wake(&mut s, &uid);
        }
        s.known.insert(uid)
    }

    pub fn remove(&self, uid: &str) {
        let mut s = self.lock();
        if let Some((key, _)) = s.present.remove(uid) {
            if s.by_key.get(&key).is_some_and(|u| u == uid) {
                s.by_key.remove(&key);
            }
            Self::wake(&mut s, uid);
        }
    }

    /// Replaces the state with a fresh list. Returns the indices of the pods new to us.
    pub fn resync(&self, pods: &[Pod]) -> Vec<usize> {
        // A listed pod that is malformed now is not known to have left.
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
        (0..pods.len())
            .filter(|&i| self.observe(&pods[i]))
            .collect()
    }

    pub fn is_gone(&self, uid: &str) -> bool {
        !self.lock().present.contains_key(uid)
    }

    /// How the pod finished, if it has: with `or_completed`, a pod ever seen Succeeded or
    /// Failed is `Completed` (gone since or not), else one no longer on the node is `Gone`.
    fn finished(&self, uid: &str, or_completed: bool) -> Option<Finished> {
        let s = self.lock();
        if or_completed && s.completed.contains(uid) {
            Some(Finished::Completed)
        } else if s.present.contains_key(uid) {
            None
        } else {
            Some(Finished::Gone)
        }
    }

    fn notify_for(&self, uid: &str) -> Arc<Notify> {
        self.lock()
            .notify
            .entry(uid.to_string())
            .or_default()
            .clone()
    }

    /// Resolves when the pod has gone (or, with `or_completed`, reached Succeeded/Failed), saying
    /// which.
    pub async fn wait(&self, uid: &str, or_completed: bool) -> Finished {
        loop {
            let notify = self.notify_for(uid);
            let notified = notify.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            if let Some(finished) = self.finished(uid, or_completed) {
                return finished;
            }
            notified.await;
        }
    }
}

/// An error of the watcher as an [`ApiError`] for the server's health record.
pub fn watch_error(clients: &Clients, object: &str, e: watcher::Error) -> ApiError {
    match e {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => clients.error(object, e),
        watcher::Error::WatchError(s) => clients.error(object, kube::Error::Api(s)),
        other => ApiError::new(object, &clients.server, Kind::Other(other.to_string())),
    }
}

/// The first complete list of the node's pods (or the final error that prevented it).
pub type FirstList = tokio::sync::oneshot::Sender<Result<Vec<Pod>, ApiError>>;

/// Keeps the tracker current until aborted. The watcher's first list goes to `first` (it is the
/// drain's list: one list per drain); pods new to the tracker after it go to `new_pods`.
pub async fn follow(
    clients: Clients,
    tracker: Arc<Tracker>,
    first: FirstList,
    new_pods: mpsc::UnboundedSender<Pod>,
    health: Arc<ServerHealth>,
) {
    let node = tracker.node.clone();
    let object = format!("pods of node {node}");
    let api: Api<Pod> = Api::all(clients.watch.clone());
    let config = watcher::Config::default()
        .fields(&field_selector(&node))
        .timeout(WATCH_SECONDS);
    let stream = watcher::watcher(api, config).backoff(retry::for_watches());
    let mut stream = std::pin::pin!(stream);
    let mut first = Some(first);
    let mut listed = Vec::new();
    while let Some(event) = stream.next().await {
        if event.is_ok() {
            // Any event is an answer: an outage is over even when only deletions follow it.
            health.answered();
        }
        match event {
            Ok(Event::Init) => listed.clear(),
            Ok(Event::InitApply(p)) => listed.push(p),
            Ok(Event::InitDone) => {
                let new = tracker.resync(&listed);
                match first.take() {
                    Some(first) => {
                        let _ = first.send(Ok(std::mem::take(&mut listed)));
                    }
                    None => new.into_iter().for_each(|i| {
                        let _ = new_pods.send(listed[i].clone());
                    }),
                }
                listed.clear();
            }
            Ok(Event::Apply(p)) => {
                if tracker.observe(&p) {
                    let _ = new_pods.send(p);
                }
            }
            Ok(Event::Delete(p)) => tracker.remove(&uid_of(&p)),
            Err(e) => {
                let e = watch_error(&clients, &object, e);
                tracing::debug!(node = %node, "pod watch: {e}");
                health.failed(&e);
                // Before the first list, a final answer (403, ...) ends the drain at once.
                if !e.is_transient() && first.is_some() && !matches!(e.code(), Some(410)) {
                    if let Some(first) = first.take() {
                        let _ = first.send(Err(e));
                    }
                    return;
                }
                // After it, a refused certificate ends the watch: no retry would pass.
                if e.is_permanent() {
                    tracing::error!(node = %node, "the pod watch of node {node} stops: {e}");
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, uid: &str, node: &str, phase: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "w", "uid": uid},
            "spec": {"nodeName": node, "containers": []},
            "status": {"phase": phase}
        }))
        .unwrap()
    }

    /// Under load the pod watch may deliver a pod's completion and its deletion before the
    /// waiter runs: it still counts as completed (the terminating pod of the fake's replay of
    /// real-server scenario S1, `tests/real_server_replay.rs` p1, went "gone" so under load); a
    /// pod deleted without completing is gone.
    #[tokio::test(start_paused = true)]
    async fn a_pod_that_completed_then_went_before_its_waiter_looked_counts_as_completed() {
        let t = Tracker::new(
            "n1",
            &[
                pod("a", "ua", "n1", "Running"),
                pod("b", "ub", "n1", "Running"),
            ],
        );
        t.observe(&pod("a", "ua", "n1", "Succeeded"));
        t.remove("ua");
        t.remove("ub");
        assert_eq!(t.wait("ua", true).await, Finished::Completed);
        assert_eq!(t.wait("ub", true).await, Finished::Gone);
        assert_eq!(
            t.wait("ua", false).await,
            Finished::Gone,
            "waited for going only"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn tracker_wakes_waiters_on_delete_replacement_and_completion() {
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
        assert!(t.observe(&pod("a", "ua2", "n1", "Running")));
        // Completion finishes a `wait` pod but not an evicted one.
        assert!(!t.observe(&pod("b", "ub", "n1", "Succeeded")));
        // Bound elsewhere counts as gone.
        t.observe(&pod("c", "uc", "n2", "Running"));
        tokio::time::timeout(std::time::Duration::from_secs(1), async {
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

    #[test]
    fn a_malformed_pod_is_handed_on_once_and_never_makes_another_gone() {
        let t = Tracker::new("n1", &[pod("a", "ua", "n1", "Running")]);
        let mut no_spec = pod("a", "ua", "n1", "Running");
        no_spec.spec = None;
        assert_eq!(missing_part(&no_spec), Some("spec"));
        assert!(t.observe(&no_spec));
        assert!(!t.observe(&no_spec), "once");
        assert!(
            !t.is_gone("ua"),
            "a pod without spec is not a pod that left"
        );
        let no_uid = pod("x", "", "n1", "Running");
        assert_eq!(missing_part(&no_uid), Some("metadata.uid"));
        assert!(
            malformed_message(&no_uid, "metadata.uid").contains("pod w/x without metadata.uid")
        );
    }
}
