//! The simulated kubelets and controllers: a kubelet per node (heartbeat, Lease, finishing
//! terminating pods through phase Succeeded/Failed, stop/start), the node-lifecycle controller
//! (cordon taint, unreachable after a stopped kubelet's grace), the ReplicaSet and StatefulSet
//! controllers with a minimal scheduler (replacements on another Ready, schedulable node), the
//! DaemonSet controller (a pod of a DaemonSet that left its node comes back there while the
//! node's taints allow it, or once they do), the
//! disruption controller's expected scale, and the attach-detach controller (VolumeAttachments
//! deleted after the last pod using the volume on that node is gone).
//!
//! Facts: measured on kube-apiserver and kube-controller-manager v1.29.7 (the drain scenarios
//! S1, S2, S3, S6 and S7 that `tests/fidelity.rs` replays). The controllers react to every
//! committed change under the store's lock, so a test sees their effect as soon as the write
//! that caused it returns; what takes time on a real cluster (terminations, a replacement
//! becoming Ready, node-monitor grace, detach) runs on timers with knobs (`Timings`).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::broadcast;

use crate::managed;
use crate::pdb;
use crate::resources::{self, ResourceType};
use crate::store::{
    Change, ChangeKind, Key, State, Store, StoreError, Timer, commit_update, key_of,
    remove_or_finalize, set_pod_ready_in, str_at, taints_mut, termination_delay, timestamp,
};

/// Node annotation read only by the fake: `stopped` starts that node's kubelet stopped, so the
/// seeded Ready condition (and its `lastHeartbeatTime`) stays as seeded until the node-monitor
/// grace runs out (a stale Ready=True from a previous boot).
pub const KUBELET_ANNOTATION: &str = "fake-apiserver.test/kubelet";

/// Pod annotation read only by the fake: `Failed` makes the simulated kubelet finish the pod in
/// phase Failed (default Succeeded).
pub const PHASE_ANNOTATION: &str = "fake-apiserver.test/phase";

/// The manager the simulated controllers write as (managedFields).
pub const CONTROLLER_MANAGER: &str = "kube-controller-manager";

const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";
/// The tolerations the DaemonSet controller adds to every pod it creates (kubernetes
/// `pkg/controller/daemon/util`, `AddOrUpdateDaemonPodTolerations`; network-unavailable only
/// for host-network pods).
const DAEMON_TOLERATIONS: &[(&str, &str)] = &[
    ("node.kubernetes.io/not-ready", "NoExecute"),
    ("node.kubernetes.io/unreachable", "NoExecute"),
    ("node.kubernetes.io/disk-pressure", "NoSchedule"),
    ("node.kubernetes.io/memory-pressure", "NoSchedule"),
    ("node.kubernetes.io/pid-pressure", "NoSchedule"),
    ("node.kubernetes.io/unschedulable", "NoSchedule"),
];
const UNREACHABLE_TAINT: &str = "node.kubernetes.io/unreachable";

/// How long the simulated components take. Defaults are a real cluster's.
#[derive(Debug, Clone, PartialEq)]
pub struct Timings {
    /// How often a running kubelet renews its Ready condition's `lastHeartbeatTime` and its
    /// Lease in `kube-node-lease` (real: ~10 s).
    pub heartbeat_period: Duration,
    /// How long after a kubelet stops the node-lifecycle controller sets Ready=Unknown and adds
    /// `node.kubernetes.io/unreachable:NoSchedule` (real: node-monitor-grace-period, 40-45 s).
    pub node_monitor_grace: Duration,
    /// Then how long until `node.kubernetes.io/unreachable:NoExecute` (real: ~5 s).
    pub noexecute_after: Duration,
    /// How long a replacement pod takes from being bound to Ready (real: 0.5-1 s).
    pub replacement_ready: Duration,
    /// How long after the last pod using a volume on a node is gone its VolumeAttachment is
    /// deleted; `None`: never (a detach that hangs).
    pub detach_after: Option<Duration>,
    /// Whether the disruption controller runs. Stopped, PDB statuses stay as they are and a new
    /// or changed budget is "still being processed" (429 with Retry-After: 10).
    pub disruption_controller: bool,
}

impl Default for Timings {
    fn default() -> Self {
        Timings {
            heartbeat_period: Duration::from_secs(10),
            node_monitor_grace: Duration::from_secs(40),
            noexecute_after: Duration::from_secs(5),
            replacement_ready: Duration::from_millis(500),
            detach_after: Some(Duration::from_secs(1)),
            disruption_controller: true,
        }
    }
}

impl Timings {
    /// As the control endpoint shows it (seconds as numbers, `detach_seconds: null` = never).
    pub fn to_json(&self) -> Value {
        json!({
            "heartbeat_seconds": self.heartbeat_period.as_secs_f64(),
            "node_monitor_grace_seconds": self.node_monitor_grace.as_secs_f64(),
            "noexecute_after_seconds": self.noexecute_after.as_secs_f64(),
            "replacement_ready_seconds": self.replacement_ready.as_secs_f64(),
            "detach_seconds": self.detach_after.map(|d| d.as_secs_f64()),
            "disruption_controller": self.disruption_controller,
        })
    }

    /// Applies the fields `body` names (the others keep their value).
    pub fn merge_json(&mut self, body: &Value) -> Result<(), String> {
        let Some(m) = body.as_object() else {
            return Err(format!("expected a JSON object, got {body}"));
        };
        let secs = |key: &str, v: &Value| -> Result<Duration, String> {
            v.as_f64()
                .filter(|s| s.is_finite() && *s >= 0.0 && *s <= 86_400.0)
                .map(Duration::from_secs_f64)
                .ok_or_else(|| format!("{key}: expected seconds in 0..=86400, got {v}"))
        };
        for (key, v) in m {
            match key.as_str() {
                "heartbeat_seconds" => {
                    self.heartbeat_period = secs(key, v)?.max(Duration::from_millis(10))
                }
                "node_monitor_grace_seconds" => self.node_monitor_grace = secs(key, v)?,
                "noexecute_after_seconds" => self.noexecute_after = secs(key, v)?,
                "replacement_ready_seconds" => self.replacement_ready = secs(key, v)?,
                "detach_seconds" if v.is_null() => self.detach_after = None,
                "detach_seconds" => self.detach_after = Some(secs(key, v)?),
                "disruption_controller" => {
                    self.disruption_controller = v
                        .as_bool()
                        .ok_or_else(|| format!("{key}: expected true or false, got {v}"))?
                }
                other => {
                    return Err(format!(
                        "unknown field {other:?}; allowed: heartbeat_seconds, node_monitor_grace_seconds, noexecute_after_seconds, replacement_ready_seconds, detach_seconds, disruption_controller"
                    ));
                }
            }
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Copy)]
struct Kubelet {
    running: bool,
    /// Bumped on every stop and start, so timers of an older run do nothing.
    epoch: u64,
}

/// What the simulation remembers, kept in the store's state (one lock).
#[derive(Default)]
pub(crate) struct SimState {
    pub timings: Timings,
    /// Nodes are stored without managedFields (`Store::set_managed_fields(false)`).
    pub no_managed_fields: bool,
    kubelets: HashMap<String, Kubelet>,
    /// Pods the node-lifecycle controller marked Ready=False when their node went Unknown.
    unready_by_controller: HashSet<Key>,
    /// Terminations that came due while their node's kubelet was stopped.
    due: HashMap<String, Vec<(Key, String)>>,
    /// Pods a controller created that no node could take yet.
    unscheduled: BTreeSet<Key>,
    /// PDBs that already got their UnmanagedPods Warning event.
    warned_unmanaged: HashSet<Key>,
    /// DaemonSets (namespace, name) whose pod left a node (the third) whose taints it does not
    /// tolerate: created there again once they change.
    daemons_held: BTreeSet<(String, String, String)>,
}

/// What a timer does when it fires.
pub(crate) enum Action {
    /// The kubelet is done stopping a pod (phase, then the final delete).
    FinishPod { key: Key, uid: String },
    /// A replacement pod's kubelet reports it Running and Ready.
    PodReady { key: Key, uid: String },
    /// A running kubelet's next heartbeat.
    Heartbeat { node: String, epoch: u64 },
    /// The node-monitor grace of a stopped kubelet ran out.
    NodeUnknown { node: String, epoch: u64 },
    /// The NoExecute unreachable taint follows the NoSchedule one.
    NoExecute { node: String, epoch: u64 },
    /// The attach-detach controller detaches `pv` from `node` if nothing there uses it.
    Detach { node: String, pv: String },
}

/// Whether changes of this store table interest a controller.
pub(crate) fn reacts_to(resource: &str) -> bool {
    matches!(
        resource,
        "pods" | "nodes" | "replicasets.apps" | "statefulsets.apps" | "deployments.apps"
    )
}

fn rt(kind: &str) -> &'static ResourceType {
    resources::by_kind(kind).unwrap_or_else(|| panic!("the fake serves {kind}"))
}

fn annotation<'a>(obj: &'a Value, name: &str) -> Option<&'a str> {
    obj.pointer("/metadata/annotations")
        .and_then(|a| a.get(name))
        .and_then(Value::as_str)
}

fn name_of(obj: &Value) -> &str {
    str_at(obj, "/metadata/name").unwrap_or("")
}

fn namespace_of(obj: &Value) -> &str {
    str_at(obj, "/metadata/namespace").unwrap_or("")
}

fn node_of(pod: &Value) -> Option<&str> {
    str_at(pod, "/spec/nodeName").filter(|n| !n.is_empty())
}

fn is_unschedulable(node: &Value) -> bool {
    node.pointer("/spec/unschedulable")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

fn condition_status<'a>(node: &'a Value, kind: &str) -> Option<&'a str> {
    node.pointer("/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|c| c.get("type").and_then(Value::as_str) == Some(kind))?
        .get("status")
        .and_then(Value::as_str)
}

/// Pods that are neither terminating nor finished.
fn is_active(pod: &Value) -> bool {
    !pdb::is_terminating(pod) && !matches!(pdb::phase(pod), "Succeeded" | "Failed")
}

/// The controller owner reference of an object.
fn controller_ref(obj: &Value) -> Option<&Value> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)?
        .iter()
        .find(|r| r.get("controller").and_then(Value::as_bool) == Some(true))
}

/// The owner object `reference` names in `namespace`, if the store holds it (same uid when
/// both carry one).
fn owner(st: &State, namespace: &str, reference: &Value) -> Option<Arc<Value>> {
    let kind = str_at(reference, "/kind")?;
    let owner_rt = match kind {
        "ReplicaSet" | "StatefulSet" | "Deployment" | "DaemonSet" | "Job" | "CronJob" => {
            resources::by_kind(kind)?
        }
        _ => return None,
    };
    let obj = st.get(
        owner_rt,
        &key_of(owner_rt, Some(namespace), str_at(reference, "/name")?),
    )?;
    match (str_at(reference, "/uid"), str_at(&obj, "/metadata/uid")) {
        (Some(a), Some(b)) if a != b => None,
        _ => Some(obj),
    }
}

fn replicas(obj: &Value) -> i64 {
    obj.pointer("/spec/replicas")
        .and_then(Value::as_i64)
        .unwrap_or(1)
}

fn same_owner(pod: &Value, owner: &Value) -> bool {
    controller_ref(pod).is_some_and(|r| {
        str_at(r, "/kind") == str_at(owner, "/kind")
            && str_at(r, "/name") == Some(name_of(owner))
            && match (str_at(r, "/uid"), str_at(owner, "/metadata/uid")) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            }
    })
}

/// A controller reference: namespace, kind, name, uid.
type OwnerRef<'a> = (&'a str, &'a str, &'a str, &'a str);

/// The disruption controller's expected count for `pods` (getExpectedScale): the sum of the
/// scale of their controllers (a ReplicaSet under a Deployment counts the Deployment's
/// replicas), and the names of controller-less pods, which add nothing. A controller the store
/// does not hold counts one per pod (a real controller would fail the sync; the fake keeps
/// seeds that name owners they do not carry working).
pub(crate) fn expected_scale(st: &State, pods: &[Arc<Value>]) -> (i64, Vec<String>) {
    let mut scales: HashMap<String, i64> = HashMap::new();
    let mut unmanaged = Vec::new();
    let mut unknown = 0;
    // One lookup per controller, not per pod (the budget is recomputed on every pod write).
    let mut seen: HashMap<OwnerRef<'_>, Option<(String, i64)>> = HashMap::new();
    for pod in pods {
        let ns = namespace_of(pod);
        let Some(reference) = controller_ref(pod) else {
            unmanaged.push(name_of(pod).to_string());
            continue;
        };
        let id = (
            ns,
            str_at(reference, "/kind").unwrap_or(""),
            str_at(reference, "/name").unwrap_or(""),
            str_at(reference, "/uid").unwrap_or(""),
        );
        let found = seen
            .entry(id)
            .or_insert_with(|| controller_scale(st, ns, reference))
            .clone();
        match found {
            Some((id, n)) => {
                scales.insert(id, n);
            }
            None => unknown += 1,
        }
    }
    (scales.values().sum::<i64>() + unknown, unmanaged)
}

/// The scale the disruption controller's finders give for one controller reference.
fn controller_scale(st: &State, ns: &str, reference: &Value) -> Option<(String, i64)> {
    {
        owner(st, ns, reference).and_then(|o| {
            let kind = str_at(&o, "/kind").unwrap_or("");
            match kind {
                "ReplicaSet" => {
                    let deployment = controller_ref(&o)
                        .filter(|r| str_at(r, "/kind") == Some("Deployment"))
                        .and_then(|r| owner(st, ns, r));
                    let scaled = deployment.unwrap_or(o);
                    Some((scale_id(&scaled), replicas(&scaled)))
                }
                "StatefulSet" | "Deployment" => Some((scale_id(&o), replicas(&o))),
                _ => None,
            }
        })
    }
}

fn scale_id(obj: &Value) -> String {
    format!(
        "{}/{}/{}",
        str_at(obj, "/kind").unwrap_or(""),
        namespace_of(obj),
        name_of(obj)
    )
}

/// The disruption controller's Warning event for a budget over controller-less pods, once
/// per PDB (S3 records it verbatim).
pub(crate) fn warn_unmanaged(st: &mut State, live: &broadcast::Sender<Arc<Change>>, pdb: &Value) {
    let key = (namespace_of(pdb).to_string(), name_of(pdb).to_string());
    if st.dry_run || !st.sim.warned_unmanaged.insert(key.clone()) {
        return;
    }
    let selector = pdb
        .pointer("/spec/selector/matchLabels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}: {},", v.as_str().unwrap_or("")))
                .collect::<Vec<_>>()
                .join(" ")
        })
        .unwrap_or_default();
    let now = timestamp(Duration::ZERO);
    let event = json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": format!("{}.{:x}", key.1, st.rv), "namespace": key.0,
                     "uid": format!("event-{}", st.rv), "creationTimestamp": now},
        "involvedObject": {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                           "name": key.1, "namespace": key.0,
                           "uid": str_at(pdb, "/metadata/uid").unwrap_or(""),
                           "resourceVersion": str_at(pdb, "/metadata/resourceVersion").unwrap_or("")},
        "type": "Warning",
        "reason": "UnmanagedPods",
        "message": format!("Pods selected by this PodDisruptionBudget (selector: &LabelSelector{{MatchLabels:map[string]string{{{selector}}},MatchExpressions:[]LabelSelectorRequirement{{}},}}) were found to be unmanaged. As a result, the status of the PDB cannot be calculated correctly, which may result in undefined behavior. To account for these pods please set \".spec.minAvailable\" field of the PDB to an integer value."),
        "source": {"component": "controllermanager"},
        "reportingComponent": "controllermanager",
        "reportingInstance": "",
        "firstTimestamp": now, "lastTimestamp": now, "count": 1, "eventTime": null,
    });
    let events = rt("Event");
    let ekey = key_of(events, Some(&key.0), name_of(&event));
    st.commit(live, events, ekey, event, ChangeKind::Added);
}

/// The tolerations of a pod the DaemonSet controller makes from `ds`: its template's, and
/// [`DAEMON_TOLERATIONS`] where the template has none for that key and effect.
fn daemon_tolerations(ds: &Value) -> Value {
    let mut all: Vec<Value> = ds
        .pointer("/spec/template/spec/tolerations")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (key, effect) in DAEMON_TOLERATIONS {
        let has = all.iter().any(|t| {
            str_at(t, "/key") == Some(*key) && str_at(t, "/effect").is_none_or(|e| e == *effect)
        });
        if !has {
            all.push(json!({"key": key, "operator": "Exists", "effect": effect}));
        }
    }
    Value::Array(all)
}

/// Whether `pod` tolerates `taint` (key, operator Exists/Equal, value, effect).
fn tolerates(pod: &Value, taint: &Value) -> bool {
    let Some(tolerations) = pod.pointer("/spec/tolerations").and_then(Value::as_array) else {
        return false;
    };
    tolerations.iter().any(|t| {
        let key = str_at(t, "/key").unwrap_or("");
        let exists = str_at(t, "/operator") == Some("Exists");
        let effect = str_at(t, "/effect").unwrap_or("");
        (key.is_empty() && exists || key == str_at(taint, "/key").unwrap_or(""))
            && (exists
                || str_at(t, "/value").unwrap_or("") == str_at(taint, "/value").unwrap_or(""))
            && (effect.is_empty() || Some(effect) == str_at(taint, "/effect"))
    })
}

/// The minimal scheduler: a Ready node, not cordoned, whose NoSchedule/NoExecute taints the
/// pod tolerates and whose labels fit its nodeSelector; the one with the fewest pods.
fn pick_node(st: &State, pod: &Value) -> Option<String> {
    let nodes = st.tables.get(rt("Node").key)?;
    let selector = pod.pointer("/spec/nodeSelector").and_then(Value::as_object);
    let fits = |node: &Value| {
        condition_status(node, "Ready") == Some("True")
            && node
                .pointer("/spec/taints")
                .and_then(Value::as_array)
                .is_none_or(|ts| {
                    ts.iter().all(|t| {
                        !matches!(str_at(t, "/effect"), Some("NoSchedule" | "NoExecute"))
                            || tolerates(pod, t)
                    })
                })
            && (!is_unschedulable(node)
                || tolerates(
                    pod,
                    &json!({"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule"}),
                ))
            && selector.is_none_or(|sel| {
                sel.iter().all(|(k, v)| {
                    node.pointer("/metadata/labels")
                        .and_then(|l| l.get(k))
                        .is_some_and(|l| l == v)
                })
            })
    };
    let candidates: Vec<&str> = nodes
        .values()
        .filter(|n| fits(n))
        .map(|n| name_of(n))
        .collect();
    if candidates.len() <= 1 {
        return candidates.first().map(|s| s.to_string());
    }
    let mut load: HashMap<&str, usize> = candidates.iter().map(|n| (*n, 0)).collect();
    if let Some(pods) = st.tables.get(rt("Pod").key) {
        for p in pods.values() {
            if let Some(n) = node_of(p).and_then(|n| load.get_mut(n)) {
                *n += 1;
            }
        }
    }
    candidates
        .into_iter()
        .min_by_key(|n| (load.get(n).copied().unwrap_or(0), n.to_string()))
        .map(str::to_string)
}

/// The Ready condition as a kubelet posts it.
fn kubelet_ready_condition(now: &str) -> Value {
    json!({"type": "Ready", "status": "True", "reason": "KubeletReady",
           "message": "kubelet is posting ready status",
           "lastHeartbeatTime": now, "lastTransitionTime": now})
}

impl Store {
    /// Runs the controllers on one committed change (called under the lock, in commit order).
    pub(crate) fn react(
        &self,
        st: &mut State,
        live: &broadcast::Sender<Arc<Change>>,
        change: &Change,
    ) {
        match change.resource {
            "pods" => self.react_pod(st, live, change),
            "nodes" => self.react_node(st, live, change),
            _ => {
                // A controller's scale changed: budgets counting it recompute.
                let scale_changed = change.kind == ChangeKind::Deleted
                    || change.old.as_ref().is_none_or(|o| {
                        o.pointer("/spec/replicas") != change.new.pointer("/spec/replicas")
                    });
                if scale_changed {
                    refresh_namespace(st, live, namespace_of(&change.new));
                }
            }
        }
    }

    fn react_pod(&self, st: &mut State, live: &broadcast::Sender<Arc<Change>>, change: &Change) {
        let pod = &change.new;
        let key = (namespace_of(pod).to_string(), name_of(pod).to_string());
        // A pod stored already terminating (a seed): its kubelet finishes it after its
        // termination time, capped by the time left until its deletionTimestamp.
        if change.kind == ChangeKind::Added && pdb::is_terminating(pod) && node_of(pod).is_some() {
            let left = str_at(pod, "/metadata/deletionTimestamp")
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .map(|t| (t - jiff::Timestamp::now()).get_seconds().max(0))
                .unwrap_or(0);
            st.timers.push(Timer {
                delay: termination_delay(pod, left),
                action: Action::FinishPod {
                    key: key.clone(),
                    uid: str_at(pod, "/metadata/uid").unwrap_or("").to_string(),
                },
            });
        }
        let was_active = change.old.as_deref().is_some_and(is_active);
        let left_the_set = was_active && (change.kind == ChangeKind::Deleted || !is_active(pod));
        // A ReplicaSet replaces a pod once it stops being active; a StatefulSet once it is
        // gone (both recount, so a second look changes nothing).
        if left_the_set || change.kind == ChangeKind::Deleted {
            self.replace_pod(st, live, pod, change.kind == ChangeKind::Deleted);
        }
        if change.kind == ChangeKind::Deleted {
            self.replace_daemon_pod(st, live, pod);
            st.sim.unscheduled.remove(&key);
            st.sim.unready_by_controller.remove(&key);
            if let Some(old) = &change.old {
                self.volumes_released(st, old);
            }
        }
    }

    /// The ReplicaSet / StatefulSet controller: a pod of theirs left the active set.
    fn replace_pod(
        &self,
        st: &mut State,
        live: &broadcast::Sender<Arc<Change>>,
        pod: &Value,
        deleted: bool,
    ) {
        let ns = namespace_of(pod).to_string();
        let Some(owner) = controller_ref(pod).and_then(|r| owner(st, &ns, r)) else {
            return;
        };
        if pdb::is_terminating(&owner) {
            return;
        }
        let pods = rt("Pod");
        let active = st
            .tables
            .get(pods.key)
            .map(|t| {
                t.range((ns.clone(), String::new())..)
                    .take_while(|((n, _), _)| *n == ns)
                    .filter(|(_, p)| is_active(p) && same_owner(p, &owner))
                    .count() as i64
            })
            .unwrap_or(0);
        let missing = replicas(&owner) - active;
        match str_at(&owner, "/kind") {
            Some("ReplicaSet") => {
                for _ in 0..missing.max(0) {
                    self.create_replacement(st, live, &owner, None, None);
                }
            }
            // A StatefulSet recreates a pod under the same name once the old one is gone.
            Some("StatefulSet") if deleted && missing > 0 => {
                self.create_replacement(st, live, &owner, Some(name_of(pod)), None);
            }
            _ => {}
        }
    }

    /// The DaemonSet controller: a pod of a DaemonSet left its node.
    fn replace_daemon_pod(
        &self,
        st: &mut State,
        live: &broadcast::Sender<Arc<Change>>,
        pod: &Value,
    ) {
        let (Some(node), Some(reference)) = (node_of(pod), controller_ref(pod)) else {
            return;
        };
        if str_at(reference, "/kind") != Some("DaemonSet") {
            return;
        }
        let Some(ds) = owner(st, namespace_of(pod), reference) else {
            return;
        };
        if !pdb::is_terminating(&ds) {
            self.run_daemon_pod(st, live, &ds, node);
        }
    }

    /// Creates `ds`'s pod on `node` unless one runs there, when the node's NoSchedule and
    /// NoExecute taints are all tolerated by the pod as the controller makes it
    /// (`NodeShouldRunDaemonPod`); else remembers it for when the node's taints change.
    fn run_daemon_pod(
        &self,
        st: &mut State,
        live: &broadcast::Sender<Arc<Change>>,
        ds: &Value,
        node: &str,
    ) {
        let ns = namespace_of(ds).to_string();
        let held = (ns.clone(), name_of(ds).to_string(), node.to_string());
        let running = st.tables.get(rt("Pod").key).is_some_and(|t| {
            t.range((ns.clone(), String::new())..)
                .take_while(|((n, _), _)| *n == ns)
                .any(|(_, p)| is_active(p) && same_owner(p, ds) && node_of(p) == Some(node))
        });
        let Some(node_obj) = st.get(rt("Node"), &key_of(rt("Node"), None, node)) else {
            st.sim.daemons_held.remove(&held);
            return;
        };
        if running {
            st.sim.daemons_held.remove(&held);
            return;
        }
        let probe = json!({"spec": {"tolerations": daemon_tolerations(ds)}});
        let fits = node_obj
            .pointer("/spec/taints")
            .and_then(Value::as_array)
            .is_none_or(|ts| {
                ts.iter().all(|t| {
                    !matches!(str_at(t, "/effect"), Some("NoSchedule" | "NoExecute"))
                        || tolerates(&probe, t)
                })
            });
        if fits {
            st.sim.daemons_held.remove(&held);
            tracing::debug!(
                "daemonset controller creates a pod of {}/{} on node {node}",
                held.0,
                held.1
            );
            self.create_replacement(st, live, ds, None, Some(node));
        } else {
            st.sim.daemons_held.insert(held);
        }
    }

    /// The DaemonSet controller on a node whose taints changed: the pods it held back there.
    fn daemons_on_node(
        &self,
        st: &mut State,
        live: &broadcast::Sender<Arc<Change>>,
        change: &Change,
        name: &str,
    ) {
        let taints_of = |n: &Value| n.pointer("/spec/taints").cloned();
        if change.old.as_deref().map(taints_of) == Some(taints_of(&change.new)) {
            return;
        }
        let held: Vec<_> = st
            .sim
            .daemons_held
            .iter()
            .filter(|(_, _, n)| n == name)
            .cloned()
            .collect();
        for (ns, ds, node) in held {
            let found = st.get(rt("DaemonSet"), &key_of(rt("DaemonSet"), Some(&ns), &ds));
            match found {
                Some(obj) if !pdb::is_terminating(&obj) => {
                    self.run_daemon_pod(st, live, &obj, &node)
                }
                _ => {
                    st.sim.daemons_held.remove(&(ns, ds, node));
                }
            }
        }
    }

    /// A controller's new pod from `owner`'s template: named `name` or generated, bound to
    /// `on` (a DaemonSet's node) or to the node the minimal scheduler picks.
    fn create_replacement(
        &self,
        st: &mut State,
        live: &broadcast::Sender<Arc<Change>>,
        owner: &Value,
        name: Option<&str>,
        on: Option<&str>,
    ) {
        let ns = namespace_of(owner);
        let template = owner
            .pointer("/spec/template")
            .cloned()
            .unwrap_or(json!({}));
        let mut metadata = template.get("metadata").cloned().unwrap_or(json!({}));
        let m = crate::store::object_mut(&mut metadata);
        match name {
            Some(n) => {
                m.insert("name".into(), json!(n));
            }
            None => {
                m.insert("generateName".into(), json!(format!("{}-", name_of(owner))));
            }
        }
        m.insert("namespace".into(), json!(ns));
        m.insert(
            "ownerReferences".into(),
            json!([{"apiVersion": str_at(owner, "/apiVersion").unwrap_or("apps/v1"),
                    "kind": str_at(owner, "/kind").unwrap_or(""),
                    "name": name_of(owner),
                    "uid": str_at(owner, "/metadata/uid").unwrap_or(""),
                    "controller": true, "blockOwnerDeletion": true}]),
        );
        let mut pod = json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": metadata,
            "spec": template.get("spec").cloned().unwrap_or(json!({})),
            "status": {"phase": "Pending"},
        });
        if str_at(owner, "/kind") == Some("DaemonSet") {
            pod["spec"]["tolerations"] = daemon_tolerations(owner);
        }
        let pods = rt("Pod");
        self.prepare_new(pods, Some(ns), &mut pod);
        let key = key_of(pods, Some(ns), name_of(&pod));
        if st.get(pods, &key).is_some() {
            return;
        }
        match on.map(str::to_string).or_else(|| pick_node(st, &pod)) {
            Some(node) => {
                pod["spec"]["nodeName"] = json!(node);
                st.timers.push(Timer {
                    delay: st.sim.timings.replacement_ready,
                    action: Action::PodReady {
                        key: key.clone(),
                        uid: str_at(&pod, "/metadata/uid").unwrap_or("").to_string(),
                    },
                });
            }
            None => {
                st.sim.unscheduled.insert(key.clone());
            }
        }
        tracing::debug!("replicaset controller created pod {}/{}", key.0, key.1);
        st.commit(live, pods, key, pod, ChangeKind::Added);
    }

    /// Binds the controller-made pods that are still waiting, where a node now fits.
    fn schedule_waiting(&self, st: &mut State, live: &broadcast::Sender<Arc<Change>>) {
        let pods = rt("Pod");
        let waiting: Vec<Key> = st.sim.unscheduled.iter().cloned().collect();
        for key in waiting {
            let Some(pod) = st.get(pods, &key) else {
                st.sim.unscheduled.remove(&key);
                continue;
            };
            if node_of(&pod).is_some() || pdb::is_terminating(&pod) {
                st.sim.unscheduled.remove(&key);
                continue;
            }
            let Some(node) = pick_node(st, &pod) else {
                continue;
            };
            st.sim.unscheduled.remove(&key);
            let mut bound = (*pod).clone();
            bound["spec"]["nodeName"] = json!(node);
            st.timers.push(Timer {
                delay: st.sim.timings.replacement_ready,
                action: Action::PodReady {
                    key: key.clone(),
                    uid: str_at(&pod, "/metadata/uid").unwrap_or("").to_string(),
                },
            });
            commit_update(st, live, pods, key, bound);
        }
    }

    fn react_node(&self, st: &mut State, live: &broadcast::Sender<Arc<Change>>, change: &Change) {
        let node = &change.new;
        let name = name_of(node).to_string();
        if change.kind == ChangeKind::Deleted {
            if let Some(k) = st.sim.kubelets.get_mut(&name) {
                k.epoch += 1;
            }
            st.sim.kubelets.remove(&name);
            return;
        }
        if change.kind == ChangeKind::Added && !st.sim.kubelets.contains_key(&name) {
            let stopped = annotation(node, KUBELET_ANNOTATION) == Some("stopped");
            st.sim.kubelets.insert(
                name.clone(),
                Kubelet {
                    running: !stopped,
                    epoch: 0,
                },
            );
            st.timers.push(Timer {
                delay: if stopped {
                    st.sim.timings.node_monitor_grace
                } else {
                    st.sim.timings.heartbeat_period
                },
                action: if stopped {
                    Action::NodeUnknown {
                        node: name.clone(),
                        epoch: 0,
                    }
                } else {
                    Action::Heartbeat {
                        node: name.clone(),
                        epoch: 0,
                    }
                },
            });
        }
        if !st.sim.daemons_held.is_empty() {
            self.daemons_on_node(st, live, change, &name);
        }
        // The node-lifecycle controller: the cordon taint follows spec.unschedulable (a new
        // timeAdded on every cordon).
        let cordoned = is_unschedulable(node);
        let has_taint = node
            .pointer("/spec/taints")
            .and_then(Value::as_array)
            .is_some_and(|ts| {
                ts.iter().any(|t| {
                    str_at(t, "/key") == Some(UNSCHEDULABLE_TAINT)
                        && str_at(t, "/effect") == Some("NoSchedule")
                })
            });
        if cordoned != has_taint {
            let nodes = rt("Node");
            let mut new = (**node).clone();
            let old = new.clone();
            let taints = taints_mut(&mut new);
            if cordoned {
                taints.push(json!({"key": UNSCHEDULABLE_TAINT, "effect": "NoSchedule",
                                   "timeAdded": timestamp(Duration::ZERO)}));
            } else {
                taints.retain(|t| str_at(t, "/key") != Some(UNSCHEDULABLE_TAINT));
                drop_empty_taints(&mut new);
            }
            managed::track(Some(&old), &mut new, CONTROLLER_MANAGER);
            commit_update(st, live, nodes, (String::new(), name.clone()), new);
            return;
        }
        if !st.sim.unscheduled.is_empty() {
            self.schedule_waiting(st, live);
        }
    }

    /// The attach-detach controller: a pod left its node; detach each of its persistent
    /// volumes that no other pod on that node uses, after `detach_after`.
    fn volumes_released(&self, st: &mut State, pod: &Value) {
        let Some(node) = node_of(pod) else { return };
        let Some(delay) = st.sim.timings.detach_after else {
            return;
        };
        for pv in pod_volumes(st, pod) {
            st.timers.push(Timer {
                delay,
                action: Action::Detach {
                    node: node.to_string(),
                    pv,
                },
            });
        }
    }

    /// A timer fired.
    pub(crate) fn fire(&self, action: Action) {
        self.write(|st, live| match action {
            Action::FinishPod { key, uid } => finish_pod(st, live, key, &uid),
            Action::PodReady { key, uid } => {
                let pods = rt("Pod");
                let Some(pod) = st.get(pods, &key) else {
                    return;
                };
                if str_at(&pod, "/metadata/uid") != Some(uid.as_str())
                    || pdb::is_terminating(&pod)
                    || !kubelet_running(st, node_of(&pod))
                {
                    return;
                }
                let mut new = (*pod).clone();
                set_pod_ready_in(&mut new, true);
                commit_update(st, live, pods, key, new);
            }
            Action::Heartbeat { node, epoch } => {
                let current = st.sim.kubelets.get(&node).copied();
                if current.is_none_or(|k| !k.running || k.epoch != epoch) {
                    return;
                }
                heartbeat(self, st, live, &node);
                st.timers.push(Timer {
                    delay: st.sim.timings.heartbeat_period,
                    action: Action::Heartbeat { node, epoch },
                });
            }
            Action::NodeUnknown { node, epoch } => {
                let current = st.sim.kubelets.get(&node).copied();
                if current.is_none_or(|k| k.running || k.epoch != epoch) {
                    return;
                }
                node_unknown(st, live, &node);
                st.timers.push(Timer {
                    delay: st.sim.timings.noexecute_after,
                    action: Action::NoExecute { node, epoch },
                });
            }
            Action::NoExecute { node, epoch } => {
                let current = st.sim.kubelets.get(&node).copied();
                if current.is_none_or(|k| k.running || k.epoch != epoch) {
                    return;
                }
                let taint = json!({"key": UNREACHABLE_TAINT, "effect": "NoExecute",
                                   "timeAdded": timestamp(Duration::ZERO)});
                add_taint(st, live, &node, taint);
            }
            Action::Detach { node, pv } => detach(st, live, &node, &pv),
        });
    }

    // ------------------------------------------------------------ library API (knobs)

    /// The simulation's timings.
    pub fn timings(&self) -> Timings {
        self.lock().sim.timings.clone()
    }

    /// Replaces the simulation's timings (running timers keep their old delay). Starting the
    /// disruption controller recomputes every budget at once.
    pub fn set_timings(&self, timings: Timings) {
        self.write(|st, live| {
            let restart = timings.disruption_controller && !st.sim.timings.disruption_controller;
            st.sim.timings = timings;
            if restart {
                let namespaces: BTreeSet<String> = st
                    .tables
                    .get(rt("PodDisruptionBudget").key)
                    .map(|t| t.keys().map(|(ns, _)| ns.clone()).collect())
                    .unwrap_or_default();
                for ns in namespaces {
                    refresh_namespace(st, live, &ns);
                }
            }
        });
    }

    /// Whether `node`'s simulated kubelet runs (nodes without one count as running).
    pub fn kubelet_running(&self, node: &str) -> bool {
        kubelet_running(&self.lock(), Some(node))
    }

    /// Stops `node`'s kubelet: no heartbeats or Lease renewals, terminating pods stay; after
    /// the node-monitor grace, Ready=Unknown and the unreachable taints.
    pub fn stop_kubelet(&self, node: &str) -> Result<(), StoreError> {
        self.write(|st, _| {
            node_exists(st, node)?;
            let k = st.sim.kubelets.entry(node.to_string()).or_insert(Kubelet {
                running: true,
                epoch: 0,
            });
            if !k.running {
                return Ok(());
            }
            k.running = false;
            k.epoch += 1;
            let epoch = k.epoch;
            tracing::debug!("simulated kubelet of node {node} stopped");
            st.timers.push(Timer {
                delay: st.sim.timings.node_monitor_grace,
                action: Action::NodeUnknown {
                    node: node.to_string(),
                    epoch,
                },
            });
            Ok(())
        })
    }

    /// Starts `node`'s kubelet again: a fresh heartbeat (Ready=True) and Lease at once, the
    /// unreachable taints removed, its pods Ready again, overdue terminations finished.
    pub fn start_kubelet(&self, node: &str) -> Result<(), StoreError> {
        self.write(|st, live| {
            node_exists(st, node)?;
            let k = st.sim.kubelets.entry(node.to_string()).or_insert(Kubelet {
                running: false,
                epoch: 0,
            });
            if k.running {
                return Ok(());
            }
            k.running = true;
            k.epoch += 1;
            let epoch = k.epoch;
            tracing::debug!("simulated kubelet of node {node} started");
            heartbeat(self, st, live, node);
            remove_unreachable(st, live, node);
            let pods = rt("Pod");
            let marked: Vec<Key> = st.sim.unready_by_controller.iter().cloned().collect();
            for key in marked {
                let Some(pod) = st.get(pods, &key) else {
                    st.sim.unready_by_controller.remove(&key);
                    continue;
                };
                if node_of(&pod) == Some(node) {
                    st.sim.unready_by_controller.remove(&key);
                    if is_active(&pod) {
                        let mut new = (*pod).clone();
                        set_pod_ready_in(&mut new, true);
                        commit_update(st, live, pods, key, new);
                    }
                }
            }
            for (key, uid) in st.sim.due.remove(node).unwrap_or_default() {
                finish_pod(st, live, key, &uid);
            }
            st.timers.push(Timer {
                delay: st.sim.timings.heartbeat_period,
                action: Action::Heartbeat {
                    node: node.to_string(),
                    epoch,
                },
            });
            Ok(())
        })
    }

    /// One heartbeat of every running kubelet now (the server does this once at start, so
    /// seeded nodes carry a fresh `lastHeartbeatTime` and Lease).
    pub fn heartbeat_all(&self) {
        self.write(|st, live| {
            let running: Vec<String> = st
                .sim
                .kubelets
                .iter()
                .filter(|(_, k)| k.running)
                .map(|(n, _)| n.clone())
                .collect();
            for node in running {
                heartbeat(self, st, live, &node);
            }
        });
    }
}

fn node_exists(st: &State, node: &str) -> Result<(), StoreError> {
    let nodes = rt("Node");
    st.get(nodes, &key_of(nodes, None, node))
        .map(|_| ())
        .ok_or_else(|| StoreError::NotFound {
            resource: "nodes".into(),
            name: node.into(),
        })
}

fn kubelet_running(st: &State, node: Option<&str>) -> bool {
    node.and_then(|n| st.sim.kubelets.get(n))
        .is_none_or(|k| k.running)
}

fn refresh_namespace(st: &mut State, live: &broadcast::Sender<Arc<Change>>, ns: &str) {
    let pdbs = rt("PodDisruptionBudget");
    let names: Vec<String> = st
        .tables
        .get(pdbs.key)
        .map(|t| {
            t.range((ns.to_string(), String::new())..)
                .take_while(|((n, _), _)| n == ns)
                .map(|((_, name), _)| name.clone())
                .collect()
        })
        .unwrap_or_default();
    for name in names {
        st.refresh_pdbs(live, ns, None, None, Some(&name));
    }
}

fn drop_empty_taints(node: &mut Value) {
    let empty = node
        .pointer("/spec/taints")
        .and_then(Value::as_array)
        .is_some_and(Vec::is_empty);
    if empty && let Some(spec) = node.get_mut("spec").and_then(Value::as_object_mut) {
        spec.remove("taints");
    }
}

fn add_taint(st: &mut State, live: &broadcast::Sender<Arc<Change>>, node: &str, taint: Value) {
    let nodes = rt("Node");
    let key = key_of(nodes, None, node);
    let Some(obj) = st.get(nodes, &key) else {
        return;
    };
    let mut new = (*obj).clone();
    let taints = taints_mut(&mut new);
    if taints.iter().any(|t| {
        str_at(t, "/key") == str_at(&taint, "/key")
            && str_at(t, "/effect") == str_at(&taint, "/effect")
    }) {
        return;
    }
    taints.push(taint);
    managed::track(Some(&obj), &mut new, CONTROLLER_MANAGER);
    commit_update(st, live, nodes, key, new);
}

fn remove_unreachable(st: &mut State, live: &broadcast::Sender<Arc<Change>>, node: &str) {
    let nodes = rt("Node");
    let key = key_of(nodes, None, node);
    let Some(obj) = st.get(nodes, &key) else {
        return;
    };
    let mut new = (*obj).clone();
    taints_mut(&mut new).retain(|t| str_at(t, "/key") != Some(UNREACHABLE_TAINT));
    drop_empty_taints(&mut new);
    if new.pointer("/spec/taints") == obj.pointer("/spec/taints") {
        return;
    }
    managed::track(Some(&obj), &mut new, CONTROLLER_MANAGER);
    commit_update(st, live, nodes, key, new);
}

/// A kubelet's status post and Lease renewal.
fn heartbeat(store: &Store, st: &mut State, live: &broadcast::Sender<Arc<Change>>, node: &str) {
    let nodes = rt("Node");
    let key = key_of(nodes, None, node);
    let Some(obj) = st.get(nodes, &key) else {
        return;
    };
    let now = timestamp(Duration::ZERO);
    let mut new = (*obj).clone();
    if let Some(conditions) = new
        .pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut)
    {
        for c in conditions.iter_mut() {
            let is_ready = c.get("type").and_then(Value::as_str) == Some("Ready");
            if c.get("status").and_then(Value::as_str) == Some("Unknown") {
                // Back from Unknown: Ready is True again, the pressure conditions False.
                if is_ready {
                    *c = kubelet_ready_condition(&now);
                } else {
                    c["status"] = json!("False");
                    c["lastTransitionTime"] = json!(now);
                    c["reason"] = json!(format!(
                        "KubeletHasNo{}",
                        c.get("type").and_then(Value::as_str).unwrap_or("")
                    ));
                }
            }
            c["lastHeartbeatTime"] = json!(now);
        }
    }
    if new != *obj {
        commit_update(st, live, nodes, key, new);
    }
    // The node's Lease in kube-node-lease (leaseDurationSeconds 40, renewTime in microseconds).
    let leases = rt("Lease");
    let lkey = key_of(leases, Some("kube-node-lease"), node);
    let renew = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%S.%6fZ")
        .to_string();
    match st.get(leases, &lkey) {
        Some(lease) => {
            let mut new = (*lease).clone();
            new["spec"]["renewTime"] = json!(renew);
            commit_update(st, live, leases, lkey, new);
        }
        None => {
            let mut lease = json!({
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": node, "namespace": "kube-node-lease",
                             "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": node,
                                                  "uid": str_at(&obj, "/metadata/uid").unwrap_or("")}]},
                "spec": {"holderIdentity": node, "leaseDurationSeconds": 40, "renewTime": renew},
            });
            store.prepare_new(leases, Some("kube-node-lease"), &mut lease);
            st.commit(live, leases, lkey, lease, ChangeKind::Added);
        }
    }
}

/// The node-lifecycle controller after the grace: conditions Unknown, the NoSchedule
/// unreachable taint, the node's pods Ready=False (S7).
fn node_unknown(st: &mut State, live: &broadcast::Sender<Arc<Change>>, node: &str) {
    let nodes = rt("Node");
    let key = key_of(nodes, None, node);
    let Some(obj) = st.get(nodes, &key) else {
        return;
    };
    let now = timestamp(Duration::ZERO);
    let mut new = (*obj).clone();
    if let Some(conditions) = new
        .pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut)
    {
        for c in conditions.iter_mut() {
            c["status"] = json!("Unknown");
            c["reason"] = json!("NodeStatusUnknown");
            c["message"] = json!("Kubelet stopped posting node status.");
            c["lastTransitionTime"] = json!(now);
        }
    }
    tracing::debug!("node {node} went Unknown: its simulated kubelet is stopped");
    commit_update(st, live, nodes, key, new);
    add_taint(
        st,
        live,
        node,
        json!({"key": UNREACHABLE_TAINT, "effect": "NoSchedule", "timeAdded": now}),
    );
    let pods = rt("Pod");
    let on_node: Vec<(Key, Arc<Value>)> = st
        .tables
        .get(pods.key)
        .map(|t| {
            t.iter()
                .filter(|(_, p)| node_of(p) == Some(node) && pdb::is_ready(p))
                .map(|(k, p)| (k.clone(), p.clone()))
                .collect()
        })
        .unwrap_or_default();
    for (key, pod) in on_node {
        let mut new = (*pod).clone();
        if let Some(cs) = new
            .pointer_mut("/status/conditions")
            .and_then(Value::as_array_mut)
        {
            for c in cs.iter_mut() {
                if c.get("type").and_then(Value::as_str) == Some("Ready") {
                    c["status"] = json!("False");
                    c["lastTransitionTime"] = json!(now);
                }
            }
        }
        st.sim.unready_by_controller.insert(key.clone());
        commit_update(st, live, pods, key, new);
    }
}

/// The kubelet finishes a terminating pod: phase Succeeded (or Failed), then the final delete
/// (grace 0). A stopped kubelet leaves it for when it starts again.
fn finish_pod(st: &mut State, live: &broadcast::Sender<Arc<Change>>, key: Key, uid: &str) {
    let pods = rt("Pod");
    let Some(pod) = st.get(pods, &key) else {
        return;
    };
    if str_at(&pod, "/metadata/uid") != Some(uid) || !pdb::is_terminating(&pod) {
        return;
    }
    if let Some(node) = node_of(&pod)
        && !kubelet_running(st, Some(node))
    {
        st.sim
            .due
            .entry(node.to_string())
            .or_default()
            .push((key, uid.to_string()));
        return;
    }
    let mut current = pod.clone();
    if !matches!(pdb::phase(&pod), "Succeeded" | "Failed") {
        let phase = if annotation(&pod, PHASE_ANNOTATION) == Some("Failed") {
            "Failed"
        } else {
            "Succeeded"
        };
        let mut new = (*pod).clone();
        new["status"]["phase"] = json!(phase);
        if let Some(cs) = new
            .pointer_mut("/status/conditions")
            .and_then(Value::as_array_mut)
        {
            for c in cs.iter_mut() {
                if matches!(
                    c.get("type").and_then(Value::as_str),
                    Some("Ready" | "ContainersReady")
                ) {
                    c["status"] = json!("False");
                }
            }
        }
        current = commit_update(st, live, pods, key.clone(), new);
    }
    tracing::debug!("simulated kubelet stopped pod {}/{}", key.0, key.1);
    remove_or_finalize(st, live, pods, key, &current);
}

/// The PersistentVolumes a pod mounts through its claims.
fn pod_volumes(st: &State, pod: &Value) -> Vec<String> {
    let claims = rt("PersistentVolumeClaim");
    let ns = namespace_of(pod);
    pod.pointer("/spec/volumes")
        .and_then(Value::as_array)
        .map(|vs| {
            vs.iter()
                .filter_map(|v| str_at(v, "/persistentVolumeClaim/claimName"))
                .filter_map(|c| st.get(claims, &key_of(claims, Some(ns), c)))
                .filter_map(|c| str_at(&c, "/spec/volumeName").map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn detach(st: &mut State, live: &broadcast::Sender<Arc<Change>>, node: &str, pv: &str) {
    let pods = rt("Pod");
    let in_use = st
        .tables
        .get(pods.key)
        .map(|t| {
            t.values()
                .filter(|p| node_of(p) == Some(node))
                .any(|p| pod_volumes(st, p).iter().any(|v| v == pv))
        })
        .unwrap_or(false);
    if in_use {
        return;
    }
    let attachments = rt("VolumeAttachment");
    let gone: Vec<(Key, Arc<Value>)> = st
        .tables
        .get(attachments.key)
        .map(|t| {
            t.iter()
                .filter(|(_, va)| {
                    str_at(va, "/spec/nodeName") == Some(node)
                        && str_at(va, "/spec/source/persistentVolumeName") == Some(pv)
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default();
    for (key, va) in gone {
        tracing::debug!("attach-detach controller detached volume {pv} from node {node}");
        remove_or_finalize(st, live, attachments, key, &va);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::WatchStart;

    async fn advance(d: Duration) {
        tokio::time::advance(d).await;
        for _ in 0..4 {
            tokio::task::yield_now().await;
        }
    }

    fn node(name: &str, annotations: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Node",
               "metadata": {"name": name, "annotations": annotations},
               "status": {"conditions": [
                   {"type": "Ready", "status": "True", "reason": "KubeletReady",
                    "lastHeartbeatTime": "2020-01-01T00:00:00Z",
                    "lastTransitionTime": "2020-01-01T00:00:00Z"}]}})
    }

    fn pod_on(name: &str, node: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": "work"},
               "spec": {"nodeName": node, "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]},
               "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})
    }

    fn ready(store: &Store, node: &str) -> (String, String) {
        let n = store.get("Node", None, node).expect("node");
        let c = n["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "Ready"))
            .cloned()
            .expect("Ready condition");
        (
            c["status"].as_str().unwrap_or("").to_string(),
            c["lastHeartbeatTime"].as_str().unwrap_or("").to_string(),
        )
    }

    fn taint_keys(store: &Store, node: &str) -> Vec<String> {
        store.get("Node", None, node).expect("node")["spec"]["taints"]
            .as_array()
            .map(|ts| {
                ts.iter()
                    .map(|t| {
                        format!(
                            "{}:{}",
                            t["key"].as_str().unwrap_or(""),
                            t["effect"].as_str().unwrap_or("")
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    #[tokio::test(start_paused = true)]
    async fn a_stopped_kubelet_leaves_ready_stale_then_unknown_with_unreachable_taints() {
        let store = Store::new(tokio::runtime::Handle::current());
        store.upsert(node("node-a", json!({}))).expect("node");
        store.upsert(pod_on("p", "node-a")).expect("pod");
        store.heartbeat_all();
        let (status, beat) = ready(&store, "node-a");
        assert_eq!(status, "True");
        assert_ne!(beat, "2020-01-01T00:00:00Z", "the first heartbeat is fresh");
        let lease = store
            .get("Lease", Some("kube-node-lease"), "node-a")
            .expect("lease");
        let renewed = lease["spec"]["renewTime"].clone();
        let mut t = store.timings();
        t.node_monitor_grace = Duration::from_secs(4);
        t.noexecute_after = Duration::from_secs(2);
        store.set_timings(t);
        store.stop_kubelet("node-a").expect("stopped");
        assert!(!store.kubelet_running("node-a"));
        advance(Duration::from_secs(3)).await;
        assert_eq!(
            ready(&store, "node-a"),
            (status.clone(), beat.clone()),
            "stale Ready=True"
        );
        assert!(taint_keys(&store, "node-a").is_empty());
        advance(Duration::from_millis(1500)).await;
        let (status, stale) = ready(&store, "node-a");
        assert_eq!(
            (status.as_str(), stale.as_str()),
            ("Unknown", beat.as_str())
        );
        assert_eq!(
            taint_keys(&store, "node-a"),
            vec!["node.kubernetes.io/unreachable:NoSchedule"]
        );
        assert!(!pdb::is_ready(&Value::clone(
            &store.get("Pod", Some("work"), "p").expect("pod")
        )));
        advance(Duration::from_secs(2)).await;
        assert_eq!(
            taint_keys(&store, "node-a"),
            vec![
                "node.kubernetes.io/unreachable:NoSchedule",
                "node.kubernetes.io/unreachable:NoExecute"
            ]
        );
        let lease = store
            .get("Lease", Some("kube-node-lease"), "node-a")
            .expect("lease");
        assert_eq!(
            lease["spec"]["renewTime"], renewed,
            "no renewal while stopped"
        );
        // Back: Ready at once, taints gone, the pod Ready again.
        store.start_kubelet("node-a").expect("started");
        assert_eq!(ready(&store, "node-a").0, "True");
        assert!(taint_keys(&store, "node-a").is_empty());
        assert!(pdb::is_ready(
            &store.get("Pod", Some("work"), "p").expect("pod")
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_node_seeded_with_a_stopped_kubelet_keeps_its_stale_heartbeat() {
        let store = Store::new(tokio::runtime::Handle::current());
        store
            .upsert(node("node-a", json!({KUBELET_ANNOTATION: "stopped"})))
            .expect("node");
        store.heartbeat_all();
        assert_eq!(
            ready(&store, "node-a"),
            ("True".into(), "2020-01-01T00:00:00Z".into())
        );
        assert!(
            store
                .get("Lease", Some("kube-node-lease"), "node-a")
                .is_none()
        );
        store.start_kubelet("node-a").expect("started");
        assert_ne!(ready(&store, "node-a").1, "2020-01-01T00:00:00Z");
        assert!(
            store
                .get("Lease", Some("kube-node-lease"), "node-a")
                .is_some()
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_running_kubelet_renews_its_heartbeat_every_period() {
        let store = Store::new(tokio::runtime::Handle::current());
        let mut t = store.timings();
        t.heartbeat_period = Duration::from_secs(2);
        store.set_timings(t);
        store.upsert(node("node-a", json!({}))).expect("node");
        let before = store.get("Lease", Some("kube-node-lease"), "node-a");
        assert!(before.is_none(), "no beat before the first period");
        advance(Duration::from_millis(2100)).await;
        let first = store
            .get("Lease", Some("kube-node-lease"), "node-a")
            .expect("lease");
        advance(Duration::from_millis(2100)).await;
        let second = store
            .get("Lease", Some("kube-node-lease"), "node-a")
            .expect("lease");
        assert_ne!(first["spec"]["renewTime"], second["spec"]["renewTime"]);
    }

    #[tokio::test(start_paused = true)]
    async fn cordon_adds_the_unschedulable_taint_with_a_new_time_added_each_time() {
        let store = Store::new(tokio::runtime::Handle::current());
        store.upsert(node("node-a", json!({}))).expect("node");
        store
            .modify("Node", None, "node-a", |n| {
                n["spec"]["unschedulable"] = json!(true)
            })
            .expect("cordon");
        let n = store.get("Node", None, "node-a").expect("node");
        assert_eq!(n["spec"]["taints"][0]["key"], json!(UNSCHEDULABLE_TAINT));
        assert!(n["spec"]["taints"][0]["timeAdded"].is_string());
        let owners: Vec<&str> = n["metadata"]["managedFields"]
            .as_array()
            .expect("managedFields")
            .iter()
            .filter_map(|e| e["manager"].as_str())
            .collect();
        assert!(owners.contains(&CONTROLLER_MANAGER), "{owners:?}");
        store
            .modify("Node", None, "node-a", |n| n["spec"] = json!({}))
            .expect("uncordon");
        assert!(taint_keys(&store, "node-a").is_empty());
        let rv = store.resource_version();
        store
            .modify("Node", None, "node-a", |n| {
                n["spec"]["unschedulable"] = json!(true)
            })
            .expect("cordon again");
        let n = store.get("Node", None, "node-a").expect("node");
        let taint_rv: u64 = n["metadata"]["resourceVersion"]
            .as_str()
            .unwrap_or("0")
            .parse()
            .unwrap_or(0);
        assert_eq!(
            taint_rv,
            rv + 2,
            "the cordon, then the controller's taint write"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_kubelet_reports_a_terminal_phase_before_the_final_delete() {
        let store = Store::new(tokio::runtime::Handle::current());
        store.upsert(node("node-a", json!({}))).expect("node");
        let mut seeded = pod_on("seeded", "node-a");
        seeded["metadata"]["deletionTimestamp"] = json!(timestamp(Duration::from_secs(60)));
        seeded["metadata"]["deletionGracePeriodSeconds"] = json!(60);
        seeded["metadata"]["annotations"] =
            json!({crate::TERMINATION_ANNOTATION: "3", PHASE_ANNOTATION: "Failed"});
        let pods = rt("Pod");
        let WatchStart::Replay { mut live, .. } =
            store.watch_from(pods, Some(store.resource_version()))
        else {
            panic!("expected a replay start");
        };
        store.upsert(seeded).expect("pod");
        advance(Duration::from_millis(2900)).await;
        assert!(store.get("Pod", Some("work"), "seeded").is_some());
        advance(Duration::from_millis(200)).await;
        assert!(
            store.get("Pod", Some("work"), "seeded").is_none(),
            "finished after 3 s"
        );
        let mut seen = Vec::new();
        while let Ok(c) = live.try_recv() {
            if c.resource == "pods" {
                seen.push((
                    c.kind,
                    c.new["status"]["phase"].as_str().unwrap_or("").to_string(),
                ));
            }
        }
        assert_eq!(
            seen,
            vec![
                (ChangeKind::Added, "Running".to_string()),
                (ChangeKind::Modified, "Failed".to_string()),
                (ChangeKind::Deleted, "Failed".to_string())
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_stopped_kubelet_finishes_nothing_until_it_starts() {
        let store = Store::new(tokio::runtime::Handle::current());
        store.upsert(node("node-a", json!({}))).expect("node");
        store.upsert(pod_on("p", "node-a")).expect("pod");
        store.stop_kubelet("node-a").expect("stopped");
        let pods = rt("Pod");
        store
            .delete_rt(pods, Some("work"), "p", &Default::default(), &|_| Ok(()))
            .expect("deleted");
        advance(Duration::from_secs(31)).await;
        assert!(
            store.get("Pod", Some("work"), "p").is_some(),
            "still terminating"
        );
        store.start_kubelet("node-a").expect("started");
        assert!(store.get("Pod", Some("work"), "p").is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_volume_attachment_goes_after_the_last_pod_using_it_on_that_node() {
        let store = Store::new(tokio::runtime::Handle::current());
        store.upsert(node("node-a", json!({}))).expect("node");
        store
            .upsert(json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                "metadata": {"name": "data", "namespace": "work"}, "spec": {"volumeName": "pv-1"}}))
            .expect("pvc");
        store
            .upsert(json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-1"}, "spec": {}}))
            .expect("pv");
        store
            .upsert(
                json!({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
                "metadata": {"name": "va-1"},
                "spec": {"attacher": "csi.example.com", "nodeName": "node-a",
                         "source": {"persistentVolumeName": "pv-1"}}}),
            )
            .expect("va");
        store.upsert(pod_on("one", "node-a")).expect("pod");
        store.upsert(pod_on("two", "node-a")).expect("pod");
        let mut t = store.timings();
        t.detach_after = Some(Duration::from_secs(2));
        store.set_timings(t.clone());
        store.remove("Pod", Some("work"), "one").expect("gone");
        advance(Duration::from_secs(3)).await;
        assert!(
            store.get("VolumeAttachment", None, "va-1").is_some(),
            "two still uses it"
        );
        store.remove("Pod", Some("work"), "two").expect("gone");
        advance(Duration::from_millis(1900)).await;
        assert!(store.get("VolumeAttachment", None, "va-1").is_some());
        advance(Duration::from_millis(200)).await;
        assert!(
            store.get("VolumeAttachment", None, "va-1").is_none(),
            "detached after 2 s"
        );
        // Never: the knob off.
        t.detach_after = None;
        store.set_timings(t);
        store
            .upsert(
                json!({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
                "metadata": {"name": "va-2"},
                "spec": {"attacher": "csi.example.com", "nodeName": "node-a",
                         "source": {"persistentVolumeName": "pv-1"}}}),
            )
            .expect("va");
        store.upsert(pod_on("three", "node-a")).expect("pod");
        store.remove("Pod", Some("work"), "three").expect("gone");
        advance(Duration::from_secs(60)).await;
        assert!(store.get("VolumeAttachment", None, "va-2").is_some());
    }

    fn owned_by(name: &str, kind: &str, owner: &str) -> Value {
        let mut p = pod_on(name, "node-a");
        p["metadata"]["labels"] = json!({"app": "web"});
        p["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": kind,
            "name": owner, "uid": format!("{owner}-uid"), "controller": true}]);
        p["spec"] = json!({"nodeName": "node-a"});
        p
    }

    #[tokio::test(start_paused = true)]
    async fn a_deployment_sets_the_expected_count_of_its_replicasets_pods() {
        let store = Store::new(tokio::runtime::Handle::current());
        store
            .upsert(json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "web", "namespace": "work", "uid": "web-uid"},
                "spec": {"replicas": 4}}))
            .expect("deployment");
        store
            .upsert(json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": {"name": "web-5d8f", "namespace": "work", "uid": "web-5d8f-uid",
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                                         "uid": "web-uid", "controller": true}]},
                "spec": {"replicas": 3}}))
            .expect("replicaset");
        store
            .upsert(
                json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": "b", "namespace": "work"},
                "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}}),
            )
            .expect("pdb");
        for name in ["a", "b", "c"] {
            store
                .upsert(owned_by(name, "ReplicaSet", "web-5d8f"))
                .expect("pod");
        }
        let status = |s: &Store| {
            s.get("PodDisruptionBudget", Some("work"), "b")
                .expect("pdb")["status"]
                .clone()
        };
        // Three pods of the four the Deployment wants: 3 needed, 0 allowed yet.
        assert_eq!(status(&store)["expectedPods"], json!(4));
        assert_eq!(status(&store)["disruptionsAllowed"], json!(0));
        // Scaling the Deployment down to 3 recomputes the budget at once.
        store
            .modify("Deployment", Some("work"), "web", |d| {
                d["spec"]["replicas"] = json!(3)
            })
            .expect("scaled");
        assert_eq!(status(&store)["expectedPods"], json!(3));
        assert_eq!(status(&store)["disruptionsAllowed"], json!(1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_statefulset_recreates_its_pod_under_the_same_name_once_it_is_gone() {
        let store = Store::new(tokio::runtime::Handle::current());
        store.upsert(node("node-a", json!({}))).expect("node");
        store.upsert(node("node-b", json!({}))).expect("node");
        store
            .upsert(json!({"apiVersion": "apps/v1", "kind": "StatefulSet",
                "metadata": {"name": "db", "namespace": "work", "uid": "db-uid"},
                "spec": {"replicas": 1, "template": {"metadata": {"labels": {"app": "db"}},
                                                     "spec": {"containers": [{"name": "c", "image": "x"}]}}}}))
            .expect("statefulset");
        let mut p = owned_by("db-0", "StatefulSet", "db");
        p["metadata"]["annotations"] = json!({crate::TERMINATION_ANNOTATION: "1"});
        store.upsert(p).expect("pod");
        store
            .modify("Node", None, "node-a", |n| {
                n["spec"] = json!({"unschedulable": true})
            })
            .expect("cordon");
        let old_uid =
            store.get("Pod", Some("work"), "db-0").expect("pod")["metadata"]["uid"].clone();
        store
            .delete_rt(
                rt("Pod"),
                Some("work"),
                "db-0",
                &Default::default(),
                &|_| Ok(()),
            )
            .expect("deleted");
        // While the old pod terminates, no second db-0.
        assert_eq!(
            store.get("Pod", Some("work"), "db-0").expect("pod")["metadata"]["uid"],
            old_uid
        );
        advance(Duration::from_millis(1100)).await;
        let again = store.get("Pod", Some("work"), "db-0").expect("recreated");
        assert_ne!(again["metadata"]["uid"], old_uid);
        assert_eq!(again["spec"]["nodeName"], json!("node-b"));
        advance(Duration::from_millis(600)).await;
        assert!(pdb::is_ready(
            &store.get("Pod", Some("work"), "db-0").expect("pod")
        ));
    }

    /// The DaemonSet controller: a deleted pod comes back on its node while the node's taints
    /// allow it (the cordon does: the controller tolerates it); under a NoSchedule taint the
    /// template does not tolerate it does not, until the taint goes; a template tolerating every
    /// taint comes back under it.
    #[tokio::test(start_paused = true)]
    async fn a_daemonset_recreates_its_pod_on_its_node_unless_a_taint_keeps_it_off() {
        let store = Store::new(tokio::runtime::Handle::current());
        store.upsert(node("node-a", json!({}))).expect("node");
        store.upsert(node("node-b", json!({}))).expect("node");
        for (ds, tolerations) in [
            ("logs", json!([])),
            ("cni", json!([{"operator": "Exists"}])),
        ] {
            store
                .upsert(json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
                    "metadata": {"name": ds, "namespace": "work", "uid": format!("{ds}-uid")},
                    "spec": {"template": {"metadata": {"labels": {"app": ds}},
                             "spec": {"containers": [{"name": "c", "image": "x"}],
                                      "tolerations": tolerations}}}}))
                .expect("daemonset");
            store
                .upsert(owned_by(&format!("{ds}-1"), "DaemonSet", ds))
                .expect("pod");
        }
        let on_a = |s: &Store, app: &str| -> Vec<String> {
            s.list("Pod", Some("work"))
                .into_iter()
                .filter(|p| p["spec"]["nodeName"] == "node-a")
                .filter(|p| {
                    p["metadata"]["labels"]["app"] == app
                        || p["metadata"]["name"]
                            .as_str()
                            .is_some_and(|n| n.starts_with(app))
                })
                .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
                .map(|p| p["metadata"]["name"].as_str().unwrap_or("").to_string())
                .collect()
        };
        let delete = |s: &Store, name: &str| {
            s.remove("Pod", Some("work"), name).expect("deleted");
        };
        // Cordoned: the controller's own toleration lets the pod come back.
        store
            .modify("Node", None, "node-a", |n| {
                n["spec"] = json!({"unschedulable": true})
            })
            .expect("cordon");
        delete(&store, "logs-1");
        let back = on_a(&store, "logs");
        assert_eq!(back.len(), 1, "{back:?}");
        assert!(back[0].starts_with("logs-"), "{back:?}");
        let made = store.get("Pod", Some("work"), &back[0]).expect("pod");
        assert!(
            made["spec"]["tolerations"]
                .as_array()
                .is_some_and(|ts| ts.iter().any(|t| t["key"] == UNSCHEDULABLE_TAINT)),
            "{made}"
        );
        // Under a NoSchedule taint of another key: not again, and not on another node.
        store
            .modify(
                "Node",
                None,
                "node-a",
                |n| {
                    n["spec"]["taints"] =
                        json!([{"key": "kube-shutdown-drain/daemonsets", "effect": "NoSchedule"}])
                },
            )
            .expect("taint");
        delete(&store, &back[0]);
        delete(&store, "cni-1");
        advance(Duration::from_secs(5)).await;
        assert!(on_a(&store, "logs").is_empty());
        let all_logs = store
            .list("Pod", Some("work"))
            .into_iter()
            .filter(|p| {
                p["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("logs"))
            })
            .count();
        assert_eq!(all_logs, 0, "no logs pod anywhere");
        assert_eq!(
            on_a(&store, "cni").len(),
            1,
            "the tolerate-all pod comes back"
        );
        // A PreferNoSchedule taint change keeps it off too (the NoSchedule one is still there).
        store
            .modify("Node", None, "node-a", |n| {
                n["spec"]["taints"]
                    .as_array_mut()
                    .unwrap()
                    .push(json!({"key": "soft", "effect": "PreferNoSchedule"}))
            })
            .expect("taint");
        assert!(on_a(&store, "logs").is_empty());
        // The taint goes: the pod is created there again, and it turns Ready.
        store
            .modify("Node", None, "node-a", |n| n["spec"]["taints"] = json!([]))
            .expect("untaint");
        let again = on_a(&store, "logs");
        assert_eq!(again.len(), 1, "{again:?}");
        advance(Duration::from_secs(5)).await;
        assert!(pdb::is_ready(
            &store.get("Pod", Some("work"), &again[0]).expect("pod")
        ));
    }
}
