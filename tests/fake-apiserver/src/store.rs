//! The object store: every object by resource, namespace and name, one global resourceVersion
//! counter, the change history watches replay, PDB status upkeep and the simulated kubelet that
//! finishes graceful pod deletions.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::sync::broadcast;

use crate::patch::{self, PatchError, PatchType};
use crate::pdb::{self, PdbError};
use crate::resources::{self, ResourceType};
use crate::selector::{FieldSelector, LabelSelector};

/// Pod annotation read only by the fake: seconds (float) the simulated kubelet takes to stop
/// the pod after a graceful delete. The pod disappears after min(grace period, this); default 0.
pub const TERMINATION_ANNOTATION: &str = "fake-apiserver.test/termination-seconds";

/// How many changes the store keeps for watches that start from a resourceVersion; older
/// versions answer 410 Gone, as after an etcd compaction.
const HISTORY_LIMIT: usize = 20_000;

/// Default `terminationGracePeriodSeconds`, as the API defaults it.
const DEFAULT_GRACE_SECONDS: i64 = 30;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error(
        "no resource of kind {kind:?} is served by the fake; it serves: {}",
        resources::served_kinds()
    )]
    UnknownKind { kind: String },
    #[error("{resource} \"{name}\" not found")]
    NotFound { resource: String, name: String },
    #[error("{resource} \"{name}\" already exists")]
    AlreadyExists { resource: String, name: String },
    #[error("Operation cannot be fulfilled on {resource} \"{name}\": {message}")]
    Conflict {
        resource: String,
        name: String,
        message: String,
    },
    #[error("{resource} \"{name}\" is invalid: {message}")]
    Invalid {
        resource: String,
        name: String,
        message: String,
    },
    #[error("{resource} \"{name}\" is forbidden: {message}")]
    Forbidden {
        resource: String,
        name: String,
        message: String,
    },
    #[error("{message}")]
    BadRequest { message: String },
    /// 410: the version a list continues from is older than the history holds.
    #[error("{message}")]
    Expired { message: String },
    #[error("{resource} \"{name}\": {source}")]
    Patch {
        resource: String,
        name: String,
        source: PatchError,
    },
    #[error(transparent)]
    Pdb(#[from] PdbError),
}

/// What happened to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    Added,
    Modified,
    Deleted,
}

/// One write, as watches see it. `new` is the object after the write (for a delete: the final
/// object, carrying the deletion's resourceVersion).
#[derive(Debug)]
pub struct Change {
    pub rv: u64,
    pub resource: &'static str,
    pub kind: ChangeKind,
    pub old: Option<Arc<Value>>,
    pub new: Arc<Value>,
}

/// What a watch starts with.
pub enum WatchStart {
    /// Replay these changes (all newer than the requested version), then follow `live`.
    Replay {
        backlog: Vec<Arc<Change>>,
        live: broadcast::Receiver<Arc<Change>>,
    },
    /// The current objects as ADDED events, then follow `live`.
    Snapshot {
        objects: Vec<Arc<Value>>,
        /// The resourceVersion the snapshot is at.
        rv: u64,
        live: broadcast::Receiver<Arc<Change>>,
    },
    /// The requested version is older than the history holds (410).
    Expired { requested: u64, oldest: u64 },
}

/// Options of a delete (from DeleteOptions and the query).
#[derive(Debug, Clone, Default)]
pub struct DeleteOptions {
    /// `dryRun: ["All"]` in the body (the query form is handled by the server).
    pub dry_run: bool,
    pub grace_period_seconds: Option<i64>,
    pub uid: Option<String>,
    pub resource_version: Option<String>,
}

/// A page of a list.
pub struct ListPage {
    pub items: Vec<Arc<Value>>,
    pub resource_version: u64,
    pub continue_token: Option<String>,
    pub remaining: Option<usize>,
}

/// A list request's filters.
#[derive(Default)]
pub struct ListQuery<'a> {
    pub namespace: Option<&'a str>,
    pub labels: Option<&'a LabelSelector>,
    pub fields: Option<&'a FieldSelector>,
    pub limit: Option<usize>,
    pub continue_token: Option<&'a str>,
}

/// The result of an eviction attempt.
#[derive(Debug)]
pub enum EvictOutcome {
    Evicted,
    Blocked {
        pdb: String,
        desired_healthy: i64,
        current_healthy: i64,
    },
    TooManyBudgets,
    /// The PDB's status is behind its generation (the controller has not observed it).
    Lagging {
        pdb: String,
    },
}

pub(crate) type Key = (String, String);

/// Something the simulated kubelets and controllers do later, after `delay`.
pub(crate) struct Timer {
    pub delay: Duration,
    pub action: crate::sim::Action,
}

pub(crate) struct State {
    pub rv: u64,
    pub tables: HashMap<&'static str, BTreeMap<Key, Arc<Value>>>,
    history: VecDeque<Arc<Change>>,
    /// Versions below this answer 410 (the 410 knob and history trimming raise it).
    expired_below: u64,
    pub timers: Vec<Timer>,
    /// Set while a dry-run request runs: commit changes nothing.
    pub dry_run: bool,
    /// Committed changes the simulated controllers have not looked at yet.
    pub reactions: VecDeque<Arc<Change>>,
    /// Kubelets, controller knobs and what they remember.
    pub sim: crate::sim::SimState,
}

pub(crate) struct Shared {
    state: Mutex<State>,
    pub live: broadcast::Sender<Arc<Change>>,
    pub runtime: tokio::runtime::Handle,
    uid_seq: AtomicU64,
    uid_base: u64,
}

/// The object store. Cheap to clone; all clones share one state.
#[derive(Clone)]
pub struct Store {
    pub(crate) shared: Arc<Shared>,
    /// `?dryRun=All`: every check runs, nothing is written.
    dry_run: bool,
    /// The field manager writes are attributed to (managedFields of Nodes); None: the
    /// library's own writes (`fake-apiserver`).
    manager: Option<Arc<str>>,
    /// `?force=true` on a server-side apply: take the fields it changes from their owners
    /// instead of answering 409.
    force: bool,
}

/// RFC 3339 UTC time with seconds precision, as metav1.Time serialises.
pub fn timestamp(offset: Duration) -> String {
    let now = jiff::Timestamp::now() + offset;
    now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

pub(crate) fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

/// `v` as an object, after replacing anything else with an empty one.
pub(crate) fn object_mut(v: &mut Value) -> &mut Map<String, Value> {
    match v {
        Value::Object(m) => m,
        other => {
            *other = Value::Object(Map::new());
            object_mut(other)
        }
    }
}

/// The object at `map[key]`, created (or replacing a non-object) when needed.
pub(crate) fn child_object_mut<'a>(
    map: &'a mut Map<String, Value>,
    key: &str,
) -> &'a mut Map<String, Value> {
    object_mut(map.entry(key).or_insert_with(|| Value::Object(Map::new())))
}

pub(crate) fn meta_mut(obj: &mut Value) -> &mut Map<String, Value> {
    child_object_mut(object_mut(obj), "metadata")
}

pub(crate) fn resolve(kind: &str) -> Result<&'static ResourceType, StoreError> {
    resources::by_kind(kind).ok_or_else(|| StoreError::UnknownKind {
        kind: kind.to_string(),
    })
}

pub(crate) fn key_of(rt: &ResourceType, namespace: Option<&str>, name: &str) -> Key {
    let ns = if rt.namespaced {
        namespace.unwrap_or("default")
    } else {
        ""
    };
    (ns.to_string(), name.to_string())
}

fn not_found(rt: &ResourceType, name: &str) -> StoreError {
    StoreError::NotFound {
        resource: rt.qualified(),
        name: name.to_string(),
    }
}

fn stale(rt: &ResourceType, name: &str) -> StoreError {
    StoreError::Conflict {
        resource: rt.qualified(),
        name: name.to_string(),
        message: "the object has been modified; please apply your changes to the latest version and try again".to_string(),
    }
}

pub(crate) fn termination_delay(pod: &Value, grace: i64) -> Duration {
    let simulated = str_at(
        pod,
        &format!(
            "/metadata/annotations/{}",
            TERMINATION_ANNOTATION.replace('/', "~1")
        ),
    )
    .and_then(|s| s.trim().parse::<f64>().ok())
    .filter(|s| s.is_finite() && *s >= 0.0)
    .unwrap_or(0.0);
    Duration::from_secs_f64(simulated.min(grace as f64))
}

/// Core and events.k8s.io Events share one table, as in the real apiserver (one storage,
/// two representations). Field names that differ, core first (from the conversion functions of
/// kubernetes pkg/apis/events/v1).
const EVENT_FIELD_NAMES: [(&str, &str); 7] = [
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

fn is_new_event(rt: &ResourceType) -> bool {
    rt.key == "events.events.k8s.io"
}

/// The resource whose table holds `rt`'s objects.
pub(crate) fn storage_of(rt: &'static ResourceType) -> &'static ResourceType {
    if is_new_event(rt) {
        resources::by_kind("Event").unwrap_or(rt)
    } else {
        rt
    }
}

fn rename_fields(obj: &mut Value, from_new: bool, api_version: &str) {
    if let Value::Object(m) = obj {
        for (core, new) in EVENT_FIELD_NAMES {
            let (from, to) = if from_new { (new, core) } else { (core, new) };
            if let Some(v) = m.remove(from) {
                m.insert(to.to_string(), v);
            }
        }
        m.insert("apiVersion".into(), Value::String(api_version.into()));
        m.insert("kind".into(), Value::String("Event".into()));
    }
}

/// An object as `view` stores it.
fn to_storage(view: &ResourceType, mut obj: Value) -> Value {
    if is_new_event(view) {
        rename_fields(&mut obj, true, "v1");
    }
    obj
}

/// A stored object as `view` shows it.
pub(crate) fn present(view: &ResourceType, obj: &Arc<Value>) -> Arc<Value> {
    if is_new_event(view) {
        let mut out = (**obj).clone();
        rename_fields(&mut out, false, &view.api_version());
        Arc::new(out)
    } else {
        obj.clone()
    }
}

impl State {
    fn table(&mut self, rt: &ResourceType) -> &mut BTreeMap<Key, Arc<Value>> {
        self.tables.entry(rt.key).or_default()
    }

    pub(crate) fn get(&self, rt: &ResourceType, key: &Key) -> Option<Arc<Value>> {
        self.tables.get(rt.key).and_then(|t| t.get(key)).cloned()
    }

    /// Writes `new` (or removes the object when `kind` is Deleted), stamping the next
    /// resourceVersion, recording the change and telling the watches.
    pub(crate) fn commit(
        &mut self,
        live: &broadcast::Sender<Arc<Change>>,
        rt: &'static ResourceType,
        key: Key,
        mut new: Value,
        kind: ChangeKind,
    ) -> Arc<Value> {
        if self.dry_run {
            // What the write would store, under the version the object has now.
            return Arc::new(new);
        }
        self.rv += 1;
        let rv = self.rv;
        meta_mut(&mut new).insert("resourceVersion".into(), Value::String(rv.to_string()));
        let new = Arc::new(new);
        let old = if kind == ChangeKind::Deleted {
            self.table(rt).remove(&key)
        } else {
            self.table(rt).insert(key.clone(), new.clone())
        };
        let change = Arc::new(Change {
            rv,
            resource: rt.key,
            kind,
            old: old.clone(),
            new: new.clone(),
        });
        self.history.push_back(change.clone());
        while self.history.len() > HISTORY_LIMIT {
            if let Some(dropped) = self.history.pop_front() {
                self.expired_below = self.expired_below.max(dropped.rv);
            }
        }
        // No receivers is fine: nobody is watching.
        let _ = live.send(change.clone());
        if crate::sim::reacts_to(rt.key) {
            self.reactions.push_back(change);
        }
        if rt.key == "pods" {
            self.refresh_pdbs(live, &key.0, old.as_deref(), Some(&new), None);
        } else if rt.key == "poddisruptionbudgets.policy" && kind != ChangeKind::Deleted {
            let spec_changed = old
                .as_ref()
                .is_none_or(|o| o.get("spec") != new.get("spec") || o.get("status").is_none());
            if spec_changed {
                self.refresh_pdbs(live, &key.0, None, None, Some(&key.1));
            }
        }
        new
    }

    /// Recomputes the status of the PDBs in `namespace` that cover the changed pod (old or new
    /// version), or only the PDB named `only`. Writes the status when it changed.
    pub(crate) fn refresh_pdbs(
        &mut self,
        live: &broadcast::Sender<Arc<Change>>,
        namespace: &str,
        pod_old: Option<&Value>,
        pod_new: Option<&Value>,
        only: Option<&str>,
    ) {
        if !self.sim.timings.disruption_controller {
            // The controller is down: statuses stay as they are (and new budgets unobserved).
            return;
        }
        let Some(pdb_rt) = resources::by_kind("PodDisruptionBudget") else {
            return;
        };
        let Some(pod_rt) = resources::by_kind("Pod") else {
            return;
        };
        let candidates: Vec<Arc<Value>> = self
            .tables
            .get(pdb_rt.key)
            .map(|t| {
                t.range((namespace.to_string(), String::new())..)
                    .take_while(|((ns, _), _)| ns == namespace)
                    .filter(|((_, name), _)| only.is_none_or(|o| o == name))
                    .map(|(_, v)| v.clone())
                    .collect()
            })
            .unwrap_or_default();
        for pdb_obj in candidates {
            let relevant = only.is_some()
                || [pod_old, pod_new]
                    .into_iter()
                    .flatten()
                    .any(|p| pdb::covers(&pdb_obj, p).unwrap_or(false));
            if !relevant {
                continue;
            }
            let Ok(Some(sel)) = pdb::selector(&pdb_obj) else {
                continue;
            };
            let pods: Vec<Arc<Value>> = self
                .tables
                .get(pod_rt.key)
                .map(|t| {
                    t.range((namespace.to_string(), String::new())..)
                        .take_while(|((ns, _), _)| ns == namespace)
                        .filter(|(_, p)| sel.matches_object(p))
                        .map(|(_, p)| p.clone())
                        .collect()
                })
                .unwrap_or_default();
            let refs: Vec<&Value> = pods.iter().map(|p| p.as_ref()).collect();
            let (scale, unmanaged) = if pdb::uses_scale(&pdb_obj) {
                crate::sim::expected_scale(self, &pods)
            } else {
                (0, Vec::new())
            };
            let Ok(budget) = pdb::compute_with(&pdb_obj, &refs, scale) else {
                continue;
            };
            if !unmanaged.is_empty() {
                crate::sim::warn_unmanaged(self, live, &pdb_obj);
            }
            let mut status = pdb::status(&pdb_obj, &budget);
            // The condition's lastTransitionTime moves only when its status flips.
            let old_condition = pdb_obj.pointer("/status/conditions/0");
            let same = old_condition.and_then(|c| c.get("status"))
                == status.pointer("/conditions/0/status");
            let since = old_condition
                .filter(|_| same)
                .and_then(|c| c.get("lastTransitionTime"))
                .cloned()
                .unwrap_or_else(|| Value::String(timestamp(Duration::ZERO)));
            if let Some(t) = status.pointer_mut("/conditions/0/lastTransitionTime") {
                *t = since;
            }
            if pdb_obj.get("status") == Some(&status) {
                continue;
            }
            let mut updated = (*pdb_obj).clone();
            if let Value::Object(m) = &mut updated {
                m.insert("status".into(), status);
            }
            let key = (
                namespace.to_string(),
                str_at(&pdb_obj, "/metadata/name").unwrap_or("").to_string(),
            );
            // Status-only change: commit does not recurse into refresh for it.
            self.commit(live, pdb_rt, key, updated, ChangeKind::Modified);
        }
    }
}

impl Store {
    pub(crate) fn new(runtime: tokio::runtime::Handle) -> Self {
        let (live, _) = broadcast::channel(65_536);
        let uid_base = jiff::Timestamp::now().as_nanosecond() as u64;
        Store {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    rv: 1000,
                    tables: HashMap::new(),
                    history: VecDeque::new(),
                    expired_below: 0,
                    timers: Vec::new(),
                    dry_run: false,
                    reactions: VecDeque::new(),
                    sim: crate::sim::SimState::default(),
                }),
                live,
                runtime,

                uid_seq: AtomicU64::new(1),
                uid_base,
            }),
            dry_run: false,
            manager: None,
            force: false,
        }
    }

    /// This store for one `?dryRun=All` request: same state, writes only checked.
    pub(crate) fn dry_run(&self) -> Store {
        Store {
            shared: self.shared.clone(),
            dry_run: true,
            manager: self.manager.clone(),
            force: self.force,
        }
    }

    /// Whether Nodes carry managedFields from now on (default true). Off, every Node write
    /// drops them, as an answer from a server (or a proxy) that sends none.
    pub fn set_managed_fields(&self, on: bool) {
        self.lock().sim.no_managed_fields = !on;
    }

    /// This store for one request whose writes `manager` makes (managedFields).
    pub(crate) fn as_manager(&self, manager: String) -> Store {
        Store {
            shared: self.shared.clone(),
            dry_run: self.dry_run,
            manager: Some(manager.into()),
            force: self.force,
        }
    }

    /// This store for a server-side apply sent with `?force=true`.
    pub(crate) fn forcing(&self) -> Store {
        Store {
            force: true,
            ..self.clone()
        }
    }

    fn manager_name(&self) -> &str {
        self.manager.as_deref().unwrap_or("fake-apiserver")
    }

    /// Keeps a Node's managedFields for a write by this store's manager (`old` None: create).
    fn track(&self, rt: &ResourceType, old: Option<&Value>, new: &mut Value) {
        if rt.key == "nodes" {
            crate::managed::track(old, new, self.manager_name());
        }
    }

    /// Keeps a Node's managedFields for a server-side apply of `body` by this store's manager;
    /// a conflict with another manager is the apiserver's 409.
    fn track_apply(
        &self,
        rt: &ResourceType,
        name: &str,
        old: Option<&Value>,
        new: &mut Value,
        body: &[u8],
    ) -> Result<(), StoreError> {
        if rt.key != "nodes" {
            return Ok(());
        }
        let applied: Value = serde_yaml::from_slice(body).unwrap_or(Value::Null);
        crate::managed::track_apply(old, new, self.manager_name(), &applied, self.force).map_err(
            |message| StoreError::Conflict {
                resource: rt.qualified(),
                name: name.to_string(),
                message,
            },
        )
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves consistent maps (every write is one insert),
        // so a poisoned lock is still usable.
        self.shared.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `f` on the state, then starts the kubelet timers it queued.
    pub(crate) fn write<R>(
        &self,
        f: impl FnOnce(&mut State, &broadcast::Sender<Arc<Change>>) -> R,
    ) -> R {
        let mut state = self.lock();
        state.dry_run = self.dry_run;
        let out = f(&mut state, &self.shared.live);
        state.dry_run = false;
        // The simulated controllers see every committed change, in order, under the same lock
        // (so a test reads their effect as soon as the write returns).
        while let Some(change) = state.reactions.pop_front() {
            self.react(&mut state, &self.shared.live, &change);
        }
        let timers = std::mem::take(&mut state.timers);
        drop(state);
        for timer in timers {
            let store = self.clone();
            // The clock starts now, not when the task first runs.
            let deadline = tokio::time::Instant::now() + timer.delay;
            self.shared.runtime.spawn(async move {
                tokio::time::sleep_until(deadline).await;
                store.fire(timer.action);
            });
        }
        out
    }

    pub(crate) fn new_uid(&self) -> String {
        let n = self.shared.uid_seq.fetch_add(1, Ordering::Relaxed);
        let mixed = self.shared.uid_base ^ n.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        format!(
            "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
            (mixed >> 32) as u32,
            (mixed >> 16) as u16,
            (mixed & 0xfff) as u16,
            (n >> 48) as u16 & 0xfff,
            n & 0xffff_ffff_ffff
        )
    }

    /// Fills what the apiserver sets on create: kind, apiVersion, namespace, uid,
    /// creationTimestamp, generation, and the Pod defaults the fake relies on.
    pub(crate) fn prepare_new(&self, rt: &ResourceType, namespace: Option<&str>, obj: &mut Value) {
        if let Value::Object(m) = obj {
            m.insert("kind".into(), Value::String(rt.kind.into()));
            m.insert("apiVersion".into(), Value::String(rt.api_version()));
        }
        let uid = self.new_uid();
        let meta = meta_mut(obj);
        if rt.namespaced {
            let ns = namespace
                .map(str::to_string)
                .or_else(|| {
                    meta.get("namespace")
                        .and_then(Value::as_str)
                        .map(str::to_string)
                })
                .unwrap_or_else(|| "default".into());
            meta.insert("namespace".into(), Value::String(ns));
        } else {
            meta.remove("namespace");
        }
        if meta
            .get("name")
            .and_then(Value::as_str)
            .is_none_or(str::is_empty)
            && let Some(prefix) = meta.get("generateName").and_then(Value::as_str)
        {
            let suffix: String = uid
                .chars()
                .filter(char::is_ascii_alphanumeric)
                .take(5)
                .collect();
            let name = format!("{prefix}{suffix}");
            meta.insert("name".into(), Value::String(name));
        }
        meta.entry("uid").or_insert(Value::String(uid));
        meta.entry("creationTimestamp")
            .or_insert_with(|| Value::String(timestamp(Duration::ZERO)));
        meta.entry("generation").or_insert(json!(1));
        if rt.kind == "Pod"
            && rt.group.is_empty()
            && let Value::Object(m) = obj
        {
            let spec = m.entry("spec").or_insert_with(|| json!({}));
            if let Value::Object(spec) = spec {
                spec.entry("terminationGracePeriodSeconds")
                    .or_insert(json!(DEFAULT_GRACE_SECONDS));
            }
            let status = m.entry("status").or_insert_with(|| json!({}));
            if let Value::Object(status) = status {
                status.entry("phase").or_insert(json!("Pending"));
            }
        }
        if rt.kind == "PodDisruptionBudget"
            && let Value::Object(m) = obj
        {
            // What the API defaults before the disruption controller has seen the budget.
            m.entry("status").or_insert_with(|| {
                json!({"currentHealthy": 0, "desiredHealthy": 0, "disruptionsAllowed": 0, "expectedPods": 0})
            });
        }
    }

    // ---------------------------------------------------------------- library API for tests

    /// Creates or replaces an object (found by its apiVersion and kind), without any
    /// precondition, as a test or another writer would. Returns the stored object.
    pub fn upsert(&self, object: Value) -> Result<Value, StoreError> {
        let api_version = str_at(&object, "/apiVersion").unwrap_or("");
        let kind = str_at(&object, "/kind").unwrap_or("");
        let rt = resources::by_api_version(api_version, kind).ok_or_else(|| {
            StoreError::UnknownKind {
                kind: format!("{api_version} {kind}"),
            }
        })?;
        let name = str_at(&object, "/metadata/name").unwrap_or("").to_string();
        if name.is_empty() {
            return Err(StoreError::Invalid {
                resource: rt.qualified(),
                name,
                message: "metadata.name: Required value".into(),
            });
        }
        let namespace = str_at(&object, "/metadata/namespace").map(str::to_string);
        let key = key_of(rt, namespace.as_deref(), &name);
        let view = rt;
        let rt = storage_of(rt);
        let mut object = to_storage(view, object);
        self.write(|st, live| {
            let old = st.get(rt, &key);
            match old {
                None => {
                    self.prepare_new(rt, namespace.as_deref(), &mut object);
                    self.track(rt, None, &mut object);
                    let stored = st.commit(live, rt, key, object, ChangeKind::Added);
                    Ok((*present(view, &stored)).clone())
                }
                Some(old) => {
                    keep_identity(&old, &mut object);
                    self.track(rt, Some(&old), &mut object);
                    let stored = commit_update(st, live, rt, key, object);
                    Ok((*present(view, &stored)).clone())
                }
            }
        })
    }

    /// One object by kind (`Pod`, `Node`, `Event.events.k8s.io`, ...), namespace and name.
    pub fn get(&self, kind: &str, namespace: Option<&str>, name: &str) -> Option<Value> {
        let view = resources::by_kind(kind)?;
        let rt = storage_of(view);
        self.lock()
            .get(rt, &key_of(rt, namespace, name))
            .map(|v| (*present(view, &v)).clone())
    }

    /// All objects of a kind, in one namespace or (None) in all.
    pub fn list(&self, kind: &str, namespace: Option<&str>) -> Vec<Value> {
        let Some(view) = resources::by_kind(kind) else {
            return Vec::new();
        };
        let rt = storage_of(view);
        let state = self.lock();
        state
            .tables
            .get(rt.key)
            .map(|t| {
                t.iter()
                    .filter(|((ns, _), _)| namespace.is_none_or(|n| n == ns))
                    .map(|(_, v)| (*present(view, v)).clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Changes an object in place with `f` (a MODIFIED event, a new resourceVersion).
    pub fn modify(
        &self,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
        f: impl FnOnce(&mut Value),
    ) -> Result<Value, StoreError> {
        let view = resolve(kind)?;
        let rt = storage_of(view);
        let key = key_of(rt, namespace, name);
        self.write(|st, live| {
            let old = st.get(rt, &key).ok_or_else(|| not_found(view, name))?;
            let mut new = (*present(view, &old)).clone();
            f(&mut new);
            let mut new = to_storage(view, new);
            keep_identity(&old, &mut new);
            self.track(rt, Some(&old), &mut new);
            let stored = commit_update(st, live, rt, key, new);
            Ok((*present(view, &stored)).clone())
        })
    }

    /// Removes an object at once (no grace period), as a force delete does.
    pub fn remove(
        &self,
        kind: &str,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Value, StoreError> {
        let view = resolve(kind)?;
        let rt = storage_of(view);
        let key = key_of(rt, namespace, name);
        self.write(|st, live| {
            let old = st.get(rt, &key).ok_or_else(|| not_found(view, name))?;
            let gone = st.commit(live, rt, key, (*old).clone(), ChangeKind::Deleted);
            Ok((*present(view, &gone)).clone())
        })
    }

    /// Marks a pod Running with Ready=True (or Ready=False), as its kubelet would report.
    pub fn set_pod_ready(
        &self,
        namespace: &str,
        name: &str,
        ready: bool,
    ) -> Result<Value, StoreError> {
        self.modify("Pod", Some(namespace), name, |pod| {
            set_pod_ready_in(pod, ready);
        })
    }

    /// Adds or replaces (same key and effect) a taint on a node, as another writer would.
    pub fn set_node_taint(&self, node: &str, taint: Value) -> Result<Value, StoreError> {
        let key = str_at(&taint, "/key").unwrap_or("").to_string();
        let effect = str_at(&taint, "/effect").unwrap_or("").to_string();
        if key.is_empty() || effect.is_empty() {
            return Err(StoreError::Invalid {
                resource: "nodes".into(),
                name: node.into(),
                message: format!("a taint needs key and effect, got {taint}"),
            });
        }
        self.modify("Node", None, node, |n| {
            let taints = taints_mut(n);
            taints.retain(|t| {
                !(str_at(t, "/key") == Some(key.as_str())
                    && str_at(t, "/effect") == Some(effect.as_str()))
            });
            taints.push(taint);
        })
    }

    /// Removes the taints with `key` (and `effect`, when given) from a node.
    pub fn remove_node_taint(
        &self,
        node: &str,
        key: &str,
        effect: Option<&str>,
    ) -> Result<Value, StoreError> {
        self.modify("Node", None, node, |n| {
            let taints = taints_mut(n);
            taints.retain(|t| {
                !(str_at(t, "/key") == Some(key)
                    && effect.is_none_or(|e| str_at(t, "/effect") == Some(e)))
            });
            if taints.is_empty()
                && let Some(spec) = n.get_mut("spec").and_then(Value::as_object_mut)
            {
                spec.remove("taints");
            }
        })
    }

    /// The current global resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.lock().rv
    }

    /// The 410 knob, as an etcd compaction at the current version: every older resourceVersion
    /// becomes too old to watch or list from; watching from the current one still works.
    pub fn expire_resource_versions(&self) {
        let mut st = self.lock();
        st.expired_below = st.rv;
    }

    // ---------------------------------------------------------------- the verbs the server uses

    pub(crate) fn get_rt(
        &self,
        view: &'static ResourceType,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Arc<Value>, StoreError> {
        let rt = storage_of(view);
        self.lock()
            .get(rt, &key_of(rt, namespace, name))
            .map(|v| present(view, &v))
            .ok_or_else(|| not_found(view, name))
    }

    pub(crate) fn list_rt(
        &self,
        view: &'static ResourceType,
        q: &ListQuery<'_>,
    ) -> Result<ListPage, StoreError> {
        let rt = storage_of(view);
        let state = self.lock();
        let rv = state.rv;
        let start: Key = match q.continue_token {
            Some(token) => {
                let (token_rv, key) =
                    decode_continue(token).ok_or_else(|| StoreError::BadRequest {
                        message: format!("continue key is not valid: {token}"),
                    })?;
                if token_rv < state.expired_below {
                    // The apiserver's words for a continue token past the compaction.
                    return Err(StoreError::Expired {
                        message: "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.".into(),
                    });
                }
                key
            }
            None => (String::new(), String::new()),
        };
        let Some(table) = state.tables.get(rt.key) else {
            return Ok(ListPage {
                items: Vec::new(),
                resource_version: rv,
                continue_token: None,
                remaining: None,
            });
        };
        let exclusive = q.continue_token.is_some();
        let mut items = Vec::new();
        let mut last: Option<&Key> = None;
        let mut more = 0usize;
        // The table is ordered by namespace, then name: a list of one namespace reads only its
        // keys, and of one name (`fieldSelector=metadata.name=`, as kube's watcher of one object
        // lists) only that key; the rest of the table is not looked at.
        let name = q.fields.and_then(|f| f.required("metadata.name"));
        let from = match q.namespace {
            Some(ns) if start.0.as_str() < ns => (ns.to_string(), name.unwrap_or("").to_string()),
            _ => start.clone(),
        };
        for (key, obj) in table.range(from..) {
            if exclusive && *key == start {
                continue;
            }
            if let Some(ns) = q.namespace
                && (ns != key.0 || name.is_some_and(|name| key.1.as_str() > name))
            {
                break;
            }
            let obj = &present(view, obj);
            if q.fields.is_some_and(|f| !f.matches(obj))
                || q.labels.is_some_and(|l| !l.matches_object(obj))
            {
                continue;
            }
            if q.limit.is_some_and(|l| items.len() >= l) {
                more += 1;
                continue;
            }
            last = Some(key);
            items.push(obj.clone());
        }
        let continue_token = if more > 0 {
            last.map(|key| encode_continue(rv, key))
        } else {
            None
        };
        Ok(ListPage {
            items,
            resource_version: rv,
            remaining: continue_token.as_ref().map(|_| more),
            continue_token,
        })
    }

    pub(crate) fn create_rt(
        &self,
        view: &'static ResourceType,
        namespace: Option<&str>,
        obj: Value,
    ) -> Result<Arc<Value>, StoreError> {
        let rt = storage_of(view);
        let mut obj = to_storage(view, obj);
        self.prepare_new(rt, namespace, &mut obj);
        let name = str_at(&obj, "/metadata/name").unwrap_or("").to_string();
        if name.is_empty() {
            return Err(StoreError::Invalid {
                resource: rt.qualified(),
                name,
                message: "metadata.name: Required value: name or generateName is required".into(),
            });
        }
        if let Some(rv) = obj.pointer("/metadata/resourceVersion")
            && !rv.is_null()
            && rv.as_str() != Some("")
        {
            return Err(StoreError::BadRequest {
                message: "resourceVersion should not be set on objects to be created".into(),
            });
        }
        let ns = str_at(&obj, "/metadata/namespace").map(str::to_string);
        let key = key_of(rt, ns.as_deref(), &name);
        self.write(|st, live| {
            if st.get(rt, &key).is_some() {
                return Err(StoreError::AlreadyExists {
                    resource: view.qualified(),
                    name: name.clone(),
                });
            }
            let mut obj = obj;
            self.track(rt, None, &mut obj);
            Ok(present(
                view,
                &st.commit(live, rt, key, obj, ChangeKind::Added),
            ))
        })
    }

    /// PUT: the body's resourceVersion must be the current one (409 otherwise).
    pub(crate) fn replace_rt(
        &self,
        view: &'static ResourceType,
        namespace: Option<&str>,
        name: &str,
        status_only: bool,
        obj: Value,
        check: &dyn Fn(&Value, &Value) -> Result<(), StoreError>,
    ) -> Result<Arc<Value>, StoreError> {
        let rt = storage_of(view);
        let mut obj = to_storage(view, obj);
        let key = key_of(rt, namespace, name);
        if str_at(&obj, "/metadata/name").is_some_and(|n| n != name) {
            return Err(StoreError::BadRequest {
                message: "the name of the object does not match the name on the URL".into(),
            });
        }
        self.write(|st, live| {
            let old = st.get(rt, &key).ok_or_else(|| not_found(rt, name))?;
            match str_at(&obj, "/metadata/resourceVersion") {
                None | Some("") => {
                    return Err(StoreError::Invalid {
                        resource: rt.qualified(),
                        name: name.into(),
                        message: "metadata.resourceVersion: Invalid value: 0x0: must be specified for an update".into(),
                    });
                }
                Some(rv) if Some(rv) != str_at(&old, "/metadata/resourceVersion") => {
                    return Err(stale(rt, name));
                }
                Some(_) => {}
            }
            if let Value::Object(m) = &mut obj {
                m.insert("kind".into(), Value::String(rt.kind.into()));
                m.insert("apiVersion".into(), Value::String(rt.api_version()));
            }
            keep_identity(&old, &mut obj);
            split_status(rt, &old, &mut obj, status_only);
            bump_generation(&old, &mut obj);
            check(&old, &obj)?;
            keep_managed(&old, &mut obj);
            if !status_only {
                self.track(rt, Some(&old), &mut obj);
            }
            Ok(present(view, &commit_update(st, live, rt, key, obj)))
        })
    }

    /// PATCH of any of the four types. A resourceVersion in the patched object is a
    /// precondition (409 when stale). Apply creates a missing object.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn patch_rt(
        &self,
        view: &'static ResourceType,
        namespace: Option<&str>,
        name: &str,
        status_only: bool,
        patch_type: PatchType,
        body: &[u8],
        check: &dyn Fn(&Value, &Value) -> Result<(), StoreError>,
    ) -> Result<Arc<Value>, StoreError> {
        let rt = storage_of(view);
        let key = key_of(rt, namespace, name);
        let patch_err = |source| StoreError::Patch {
            resource: rt.qualified(),
            name: name.to_string(),
            source,
        };
        self.write(|st, live| {
            let old = match st.get(rt, &key) {
                Some(old) => old,
                None if patch_type == PatchType::Apply && !status_only => {
                    let obj =
                        patch::apply_patch(&json!({}), patch_type, body).map_err(patch_err)?;
                    let mut obj = to_storage(view, obj);
                    meta_mut(&mut obj).insert("name".into(), Value::String(name.into()));
                    self.prepare_new(rt, namespace, &mut obj);
                    check(&Value::Null, &obj)?;
                    self.track_apply(rt, name, None, &mut obj, body)?;
                    return Ok(present(
                        view,
                        &st.commit(live, rt, key, obj, ChangeKind::Added),
                    ));
                }
                None => return Err(not_found(rt, name)),
            };
            let new =
                patch::apply_patch(&present(view, &old), patch_type, body).map_err(patch_err)?;
            let mut new = to_storage(view, new);
            let old_rv = str_at(&old, "/metadata/resourceVersion");
            if let Some(rv) = new.pointer("/metadata/resourceVersion")
                && !rv.is_null()
                && rv.as_str() != old_rv
            {
                return Err(stale(rt, name));
            }
            if let Value::Object(m) = &mut new {
                m.insert("kind".into(), Value::String(rt.kind.into()));
                m.insert("apiVersion".into(), Value::String(rt.api_version()));
            }
            keep_identity(&old, &mut new);
            split_status(rt, &old, &mut new, status_only);
            bump_generation(&old, &mut new);
            check(&old, &new)?;
            keep_managed(&old, &mut new);
            match patch_type {
                _ if status_only => {}
                PatchType::Apply => self.track_apply(rt, name, Some(&old), &mut new, body)?,
                _ => self.track(rt, Some(&old), &mut new),
            }
            if strip_rv(&old) == strip_rv(&new) {
                // A no-op patch writes nothing, as the real apiserver.
                return Ok(present(view, &old));
            }
            Ok(present(view, &commit_update(st, live, rt, key, new)))
        })
    }

    /// DELETE. Pods bound to a node and not finished get a grace period (the simulated kubelet
    /// removes them later); everything else goes at once. Returns the object as the answer
    /// shows it, and whether it is gone already.
    pub(crate) fn delete_rt(
        &self,
        view: &'static ResourceType,
        namespace: Option<&str>,
        name: &str,
        opts: &DeleteOptions,
        check: &dyn Fn(&Value) -> Result<(), StoreError>,
    ) -> Result<(Arc<Value>, bool), StoreError> {
        let rt = storage_of(view);
        let key = key_of(rt, namespace, name);
        self.write(|st, live| {
            let old = st.get(rt, &key).ok_or_else(|| not_found(rt, name))?;
            check(&old)?;
            if let Some(uid) = &opts.uid {
                let actual = str_at(&old, "/metadata/uid").unwrap_or("");
                if uid != actual {
                    return Err(StoreError::Conflict {
                        resource: rt.qualified(),
                        name: name.into(),
                        message: format!("Precondition failed: UID in precondition: {uid}, UID in object meta: {actual}"),
                    });
                }
            }
            if let Some(rv) = &opts.resource_version {
                let actual = str_at(&old, "/metadata/resourceVersion").unwrap_or("");
                if rv != actual {
                    return Err(StoreError::Conflict {
                        resource: rt.qualified(),
                        name: name.into(),
                        message: format!("Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {actual}"),
                    });
                }
            }
            if rt.key == "pods" {
                Ok(delete_pod(st, live, rt, key, &old, opts.grace_period_seconds))
            } else {
                let (out, gone) = remove_or_finalize(st, live, rt, key, &old);
                Ok((present(view, &out), gone))
            }
        })
    }

    /// The eviction subresource: PDB check and graceful delete in one step.
    pub(crate) fn evict(
        &self,
        namespace: &str,
        name: &str,
        grace: Option<i64>,
        check: &dyn Fn(&Value) -> Result<(), StoreError>,
    ) -> Result<EvictOutcome, StoreError> {
        let pod_rt = resolve("Pod")?;
        let pdb_rt = resolve("PodDisruptionBudget")?;
        let key = key_of(pod_rt, Some(namespace), name);
        self.write(|st, live| {
            let pod = st
                .get(pod_rt, &key)
                .ok_or_else(|| not_found(pod_rt, name))?;
            check(&pod)?;
            let pdbs: Vec<Arc<Value>> = st
                .tables
                .get(pdb_rt.key)
                .map(|t| {
                    t.range((namespace.to_string(), String::new())..)
                        .take_while(|((ns, _), _)| ns == namespace)
                        .map(|(_, v)| v.clone())
                        .collect()
                })
                .unwrap_or_default();
            let mut covering = Vec::new();
            for p in &pdbs {
                if pdb::covers(p, &pod)? {
                    covering.push(p.clone());
                }
            }
            // The handler reads each budget's stored status, which the simulated disruption
            // controller keeps current on every pod write (unless it is stopped).
            let budgets: Vec<(&Value, pdb::Budget)> = covering
                .iter()
                .map(|p| (p.as_ref(), pdb::from_status(p)))
                .collect();
            match pdb::verdict(&pod, &budgets) {
                pdb::Verdict::Evict => {
                    delete_pod(st, live, pod_rt, key, &pod, grace);
                    Ok(EvictOutcome::Evicted)
                }
                pdb::Verdict::Blocked {
                    pdb,
                    desired_healthy,
                    current_healthy,
                } => Ok(EvictOutcome::Blocked {
                    pdb,
                    desired_healthy,
                    current_healthy,
                }),
                pdb::Verdict::TooManyBudgets => Ok(EvictOutcome::TooManyBudgets),
                pdb::Verdict::Lagging { pdb } => Ok(EvictOutcome::Lagging { pdb }),
            }
        })
    }

    /// Where a watch of `rt` from `rv` starts (None or 0: the current state).
    pub(crate) fn watch_from(&self, view: &'static ResourceType, rv: Option<u64>) -> WatchStart {
        let rt = storage_of(view);
        let st = self.lock();
        let live = self.shared.live.subscribe();
        match rv {
            None | Some(0) => WatchStart::Snapshot {
                rv: st.rv,
                objects: st
                    .tables
                    .get(rt.key)
                    .map(|t| t.values().cloned().collect())
                    .unwrap_or_default(),
                live,
            },
            Some(rv) => {
                if rv < st.expired_below {
                    return WatchStart::Expired {
                        requested: rv,
                        oldest: st.expired_below,
                    };
                }
                let backlog = st
                    .history
                    .iter()
                    .filter(|c| c.rv > rv && c.resource == rt.key)
                    .cloned()
                    .collect();
                WatchStart::Replay { backlog, live }
            }
        }
    }

    /// Whether `rv` is too old to list or watch from (the 410 knob).
    pub(crate) fn is_expired(&self, rv: u64) -> Option<u64> {
        let st = self.lock();
        (rv != 0 && rv < st.expired_below).then_some(st.expired_below)
    }
}

pub(crate) fn has_finalizers(obj: &Value) -> bool {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .is_some_and(|f| !f.is_empty())
}

/// Deletes the object now or, while finalizers remain, marks it deleted (deletionTimestamp,
/// deletionGracePeriodSeconds 0) and leaves it to the finalizers' owners, as the generic
/// registry does. Returns the object and whether it is gone.
pub(crate) fn remove_or_finalize(
    st: &mut State,
    live: &broadcast::Sender<Arc<Change>>,
    rt: &'static ResourceType,
    key: Key,
    obj: &Arc<Value>,
) -> (Arc<Value>, bool) {
    if !has_finalizers(obj) {
        return (
            st.commit(live, rt, key, (**obj).clone(), ChangeKind::Deleted),
            true,
        );
    }
    let mut new = (**obj).clone();
    let meta = meta_mut(&mut new);
    meta.entry("deletionTimestamp")
        .or_insert_with(|| Value::String(timestamp(Duration::ZERO)));
    meta.insert("deletionGracePeriodSeconds".into(), json!(0));
    if new == **obj {
        return (obj.clone(), false);
    }
    (st.commit(live, rt, key, new, ChangeKind::Modified), false)
}

/// Writes an update; an object marked deleted (grace period over) whose last finalizer this
/// update removes is deleted instead (the registry's "should delete during update").
pub(crate) fn commit_update(
    st: &mut State,
    live: &broadcast::Sender<Arc<Change>>,
    rt: &'static ResourceType,
    key: Key,
    mut new: Value,
) -> Arc<Value> {
    if rt.key == "nodes"
        && st.sim.no_managed_fields
        && let Some(meta) = new.get_mut("metadata").and_then(Value::as_object_mut)
    {
        meta.remove("managedFields");
    }
    let grace_over = new
        .pointer("/metadata/deletionGracePeriodSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(0)
        == 0;
    let done = pdb::is_terminating(&new) && grace_over && !has_finalizers(&new);
    let kind = if done {
        ChangeKind::Deleted
    } else {
        ChangeKind::Modified
    };
    st.commit(live, rt, key, new, kind)
}

/// Graceful delete of a pod: the grace period comes from the request, else the pod's
/// `terminationGracePeriodSeconds`; unbound or finished pods go at once (the pod registry
/// strategy does the same). Returns the object and whether it is gone.
fn delete_pod(
    st: &mut State,
    live: &broadcast::Sender<Arc<Change>>,
    rt: &'static ResourceType,
    key: Key,
    pod: &Arc<Value>,
    grace: Option<i64>,
) -> (Arc<Value>, bool) {
    let spec_grace = pod
        .pointer("/spec/terminationGracePeriodSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(DEFAULT_GRACE_SECONDS);
    let mut grace = grace.unwrap_or(spec_grace).max(0);
    let unbound = str_at(pod, "/spec/nodeName").is_none_or(str::is_empty);
    if unbound || matches!(pdb::phase(pod), "Succeeded" | "Failed") {
        grace = 0;
    }
    if grace == 0 {
        return remove_or_finalize(st, live, rt, key, pod);
    }
    if pdb::is_terminating(pod) {
        // Already terminating: the running timer finishes it.
        return (pod.clone(), false);
    }
    let mut new = (**pod).clone();
    let meta = meta_mut(&mut new);
    meta.insert(
        "deletionTimestamp".into(),
        Value::String(timestamp(Duration::from_secs(grace as u64))),
    );
    meta.insert("deletionGracePeriodSeconds".into(), json!(grace));
    let uid = str_at(pod, "/metadata/uid").unwrap_or("").to_string();
    let delay = termination_delay(pod, grace);
    let out = st.commit(live, rt, key.clone(), new, ChangeKind::Modified);
    if st.dry_run {
        return (out, false);
    }
    st.timers.push(Timer {
        delay,
        action: crate::sim::Action::FinishPod { key, uid },
    });
    (out, false)
}

/// Keeps what a client cannot change: name, namespace, uid, creationTimestamp,
/// deletionTimestamp and deletionGracePeriodSeconds.
fn keep_identity(old: &Value, new: &mut Value) {
    let old_meta = old
        .get("metadata")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let meta = meta_mut(new);
    for field in [
        "name",
        "namespace",
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
    ] {
        match old_meta.get(field) {
            Some(v) => {
                meta.insert(field.into(), v.clone());
            }
            None => {
                meta.remove(field);
            }
        }
    }
    if let (Some(kind), Value::Object(m)) = (old.get("kind"), &mut *new) {
        m.insert("kind".into(), kind.clone());
        if let Some(av) = old.get("apiVersion") {
            m.insert("apiVersion".into(), av.clone());
        }
    }
}

/// Main-resource writes keep the old status; `/status` writes keep everything else but the
/// status (labels, annotations and the rest of metadata included).
fn split_status(rt: &ResourceType, old: &Value, new: &mut Value, status_only: bool) {
    if !rt.has_status {
        return;
    }
    let Value::Object(m) = new else { return };
    if status_only {
        let status = m.remove("status");
        let mut out = old.clone();
        if let Value::Object(o) = &mut out {
            match status {
                Some(s) => {
                    o.insert("status".into(), s);
                }
                None => {
                    o.remove("status");
                }
            }
        }
        *new = out;
    } else {
        match old.get("status") {
            Some(s) => {
                m.insert("status".into(), s.clone());
            }
            None => {
                m.remove("status");
            }
        }
    }
}

/// Clients cannot write managedFields by Update or Patch here: the old ones stay (the
/// tracker then updates them).
fn keep_managed(old: &Value, new: &mut Value) {
    let kept = old.pointer("/metadata/managedFields").cloned();
    let meta = meta_mut(new);
    match kept {
        Some(m) => {
            meta.insert("managedFields".into(), m);
        }
        None => {
            meta.remove("managedFields");
        }
    }
}

fn bump_generation(old: &Value, new: &mut Value) {
    if old.get("spec") != new.get("spec") {
        let generation = old
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(1);
        meta_mut(new).insert("generation".into(), json!(generation + 1));
    }
}

fn strip_rv(v: &Value) -> Value {
    let mut v = v.clone();
    meta_mut(&mut v).remove("resourceVersion");
    v
}

/// `v` as an array, after replacing anything else with an empty one.
fn array_mut(v: &mut Value) -> &mut Vec<Value> {
    match v {
        Value::Array(a) => a,
        other => {
            *other = Value::Array(Vec::new());
            array_mut(other)
        }
    }
}

pub(crate) fn taints_mut(node: &mut Value) -> &mut Vec<Value> {
    let spec = child_object_mut(object_mut(node), "spec");
    array_mut(spec.entry("taints").or_insert_with(|| json!([])))
}

/// Sets phase Running and the Ready and ContainersReady conditions of a pod object.
pub fn set_pod_ready_in(pod: &mut Value, ready: bool) {
    if !pod.is_object() {
        return;
    }
    let Value::Object(m) = pod else { return };
    let status = m.entry("status").or_insert_with(|| json!({}));
    if !status.is_object() {
        *status = json!({});
    }
    let Value::Object(status) = status else {
        return;
    };
    status.insert("phase".into(), json!("Running"));
    let now = timestamp(Duration::ZERO);
    let flag = if ready { "True" } else { "False" };
    let conditions = status.entry("conditions").or_insert_with(|| json!([]));
    if !conditions.is_array() {
        *conditions = json!([]);
    }
    if let Value::Array(cs) = conditions {
        for t in ["Ready", "ContainersReady"] {
            cs.retain(|c| c.get("type").and_then(Value::as_str) != Some(t));
            cs.push(json!({"type": t, "status": flag, "lastTransitionTime": now}));
        }
    }
}

/// Continue tokens: hex of `rv/namespace/name` (list version and last item returned).
fn encode_continue(rv: u64, key: &Key) -> String {
    format!("{rv}/{}/{}", key.0, key.1)
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn decode_continue(token: &str) -> Option<(u64, Key)> {
    if !token.len().is_multiple_of(2) {
        return None;
    }
    let bytes: Option<Vec<u8>> = (0..token.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(token.get(i..i + 2)?, 16).ok())
        .collect();
    let text = String::from_utf8(bytes?).ok()?;
    let mut parts = text.splitn(3, '/');
    let rv = parts.next()?.parse().ok()?;
    let (ns, name) = (parts.next()?, parts.next()?);
    Some((rv, (ns.to_string(), name.to_string())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, termination: Option<&str>, grace: Option<i64>) -> Value {
        let mut p = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "work", "labels": {"app": "web"}},
            "spec": {"nodeName": "node-a"},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        });
        if let Some(t) = termination {
            p["metadata"]["annotations"] = json!({TERMINATION_ANNOTATION: t});
        }
        if let Some(g) = grace {
            p["spec"]["terminationGracePeriodSeconds"] = json!(g);
        }
        p
    }

    fn pods() -> &'static ResourceType {
        resources::by_kind("Pod").expect("pods served")
    }

    fn exists(store: &Store, name: &str) -> bool {
        store.get("Pod", Some("work"), name).is_some()
    }

    async fn advance(d: Duration) {
        tokio::time::advance(d).await;
        // Let the timer task run and take the store lock.
        tokio::task::yield_now().await;
        tokio::task::yield_now().await;
    }

    /// A list of one namespace holds all of it and nothing of the namespaces around it, in
    /// pages; one by `metadata.name` holds that object alone (the table is read by key range).
    #[tokio::test]
    async fn a_list_of_one_namespace_or_one_name_holds_exactly_those() {
        let store = Store::new(tokio::runtime::Handle::current());
        for (ns, name) in [
            ("a", "p1"),
            ("work", "p0"),
            ("work", "p1"),
            ("work", "p2"),
            ("x", "p1"),
        ] {
            let mut p = pod(name, None, None);
            p["metadata"]["namespace"] = json!(ns);
            store.upsert(p).expect("stored");
        }
        let names = |page: &ListPage| {
            page.items
                .iter()
                .map(|o| {
                    let m = &o["metadata"];
                    format!(
                        "{}/{}",
                        m["namespace"].as_str().unwrap_or(""),
                        m["name"].as_str().unwrap_or("")
                    )
                })
                .collect::<Vec<_>>()
        };
        let list = |namespace, fields: Option<&FieldSelector>, limit, token: Option<&str>| {
            store
                .list_rt(
                    pods(),
                    &ListQuery {
                        namespace,
                        labels: None,
                        fields,
                        limit,
                        continue_token: token,
                    },
                )
                .expect("a list")
        };
        let first = list(Some("work"), None, Some(2), None);
        assert_eq!(names(&first), ["work/p0", "work/p1"]);
        let rest = list(Some("work"), None, Some(2), first.continue_token.as_deref());
        assert_eq!(names(&rest), ["work/p2"]);
        assert!(rest.continue_token.is_none());
        let one = FieldSelector::parse("metadata.name=p1", |_| true).expect("a selector");
        assert_eq!(
            names(&list(Some("work"), Some(&one), None, None)),
            ["work/p1"]
        );
        assert_eq!(names(&list(Some("x"), Some(&one), None, None)), ["x/p1"]);
        assert_eq!(
            names(&list(None, Some(&one), None, None)),
            ["a/p1", "work/p1", "x/p1"]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_graceful_delete_ends_after_the_simulated_termination() {
        let store = Store::new(tokio::runtime::Handle::current());
        store
            .upsert(pod("slow", Some("3"), Some(30)))
            .expect("stored");
        let (obj, gone) = store
            .delete_rt(
                pods(),
                Some("work"),
                "slow",
                &DeleteOptions::default(),
                &|_| Ok(()),
            )
            .expect("deleted");
        assert!(!gone);
        assert_eq!(
            obj.pointer("/metadata/deletionGracePeriodSeconds"),
            Some(&json!(30))
        );
        assert!(obj.pointer("/metadata/deletionTimestamp").is_some());
        advance(Duration::from_millis(2900)).await;
        assert!(exists(&store, "slow"), "still terminating at 2.9 s");
        advance(Duration::from_millis(200)).await;
        assert!(!exists(&store, "slow"), "gone after 3 s");
    }

    #[tokio::test(start_paused = true)]
    async fn the_grace_period_caps_the_simulated_termination() {
        let store = Store::new(tokio::runtime::Handle::current());
        store
            .upsert(pod("stubborn", Some("100"), Some(30)))
            .expect("stored");
        let opts = DeleteOptions {
            grace_period_seconds: Some(5),
            ..DeleteOptions::default()
        };
        store
            .delete_rt(pods(), Some("work"), "stubborn", &opts, &|_| Ok(()))
            .expect("deleted");
        advance(Duration::from_millis(4900)).await;
        assert!(exists(&store, "stubborn"));
        advance(Duration::from_millis(200)).await;
        assert!(!exists(&store, "stubborn"), "gone at the 5 s grace period");
    }

    #[tokio::test(start_paused = true)]
    async fn zero_grace_and_unbound_pods_go_at_once_and_watches_see_the_order() {
        let store = Store::new(tokio::runtime::Handle::current());
        store.upsert(pod("now", Some("10"), None)).expect("stored");
        let mut unbound = pod("unbound", Some("10"), None);
        unbound["spec"] = json!({});
        store.upsert(unbound).expect("stored");
        let WatchStart::Replay { mut live, .. } =
            store.watch_from(pods(), Some(store.resource_version()))
        else {
            panic!("expected a replay start");
        };
        let opts = DeleteOptions {
            grace_period_seconds: Some(0),
            ..DeleteOptions::default()
        };
        let (_, gone) = store
            .delete_rt(pods(), Some("work"), "now", &opts, &|_| Ok(()))
            .expect("deleted");
        assert!(gone);
        let (_, gone) = store
            .delete_rt(
                pods(),
                Some("work"),
                "unbound",
                &DeleteOptions::default(),
                &|_| Ok(()),
            )
            .expect("deleted");
        assert!(gone);
        let a = live.recv().await.expect("event");
        let b = live.recv().await.expect("event");
        assert_eq!((a.kind, b.kind), (ChangeKind::Deleted, ChangeKind::Deleted));
        assert!(b.rv > a.rv, "one global counter");
        assert_eq!(
            a.new.pointer("/metadata/resourceVersion"),
            Some(&json!(a.rv.to_string()))
        );
    }

    fn owned(name: &str, termination: &str) -> Value {
        let mut p = pod(name, Some(termination), None);
        p["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet",
            "name": "web", "uid": "rs-uid", "controller": true}]);
        p
    }

    fn seed_replicaset(store: &Store, budget: Value) {
        store
            .upsert(json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": {"name": "web", "namespace": "work", "uid": "rs-uid"},
                "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "web"}},
                         "template": {"metadata": {"labels": {"app": "web"}},
                                      "spec": {"containers": [{"name": "c", "image": "x"}]}}}}))
            .expect("replicaset");
        store
            .upsert(
                json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": "b", "namespace": "work"},
                "spec": budget}),
            )
            .expect("pdb");
        for name in ["a", "b", "c"] {
            store.upsert(owned(name, "2")).expect("pod");
        }
    }

    fn allowed(s: &Store) -> Option<i64> {
        s.get("PodDisruptionBudget", Some("work"), "b")
            .and_then(|p| {
                p.pointer("/status/disruptionsAllowed")
                    .and_then(Value::as_i64)
            })
    }

    fn node(name: &str, extra: Value) -> Value {
        let mut n = json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        if let (Value::Object(n), Value::Object(extra)) = (&mut n, extra) {
            for (k, v) in extra {
                n.insert(k, v);
            }
        }
        n
    }

    #[tokio::test(start_paused = true)]
    async fn a_budget_reopens_when_the_replacement_on_another_node_is_ready() {
        let store = Store::new(tokio::runtime::Handle::current());
        store
            .upsert(node("node-a", json!({"spec": {"unschedulable": true}})))
            .expect("node");
        store.upsert(node("node-b", json!({}))).expect("node");
        seed_replicaset(
            &store,
            json!({"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}),
        );
        assert_eq!(allowed(&store), Some(1));
        let ok = |_: &Value| Ok(());
        assert!(matches!(
            store.evict("work", "a", None, &ok),
            Ok(EvictOutcome::Evicted)
        ));
        assert_eq!(allowed(&store), Some(0));
        assert!(matches!(
            store.evict("work", "b", None, &ok),
            Ok(EvictOutcome::Blocked {
                desired_healthy: 2,
                current_healthy: 2,
                ..
            })
        ));
        // The ReplicaSet controller made a replacement, bound to node-b (node-a is cordoned).
        let replacements: Vec<Value> = store
            .list("Pod", Some("work"))
            .into_iter()
            .filter(|p| !["a", "b", "c"].contains(&p["metadata"]["name"].as_str().unwrap_or("")))
            .collect();
        assert_eq!(replacements.len(), 1, "{replacements:?}");
        assert_eq!(replacements[0]["spec"]["nodeName"], json!("node-b"));
        let pdb = store
            .get("PodDisruptionBudget", Some("work"), "b")
            .expect("pdb");
        assert_eq!(
            pdb["status"]["expectedPods"],
            json!(3),
            "the owner's scale: {pdb}"
        );
        // Ready after the 0.5 s knob: the budget opens again, before `a` is even gone.
        advance(Duration::from_millis(600)).await;
        assert!(exists(&store, "a"));
        assert_eq!(allowed(&store), Some(1));
        advance(Duration::from_millis(1500)).await;
        assert!(!exists(&store, "a"));
        assert!(matches!(
            store.evict("work", "nope", None, &ok),
            Err(StoreError::NotFound { .. })
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn with_no_other_schedulable_node_the_budget_stays_closed() {
        let store = Store::new(tokio::runtime::Handle::current());
        store
            .upsert(node("node-a", json!({"spec": {"unschedulable": true}})))
            .expect("node");
        store
            .upsert(node(
                "node-b",
                json!({"spec": {"taints": [{"key": "dedicated", "effect": "NoSchedule"}]}}),
            ))
            .expect("node");
        seed_replicaset(
            &store,
            json!({"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}),
        );
        let ok = |_: &Value| Ok(());
        assert!(matches!(
            store.evict("work", "a", None, &ok),
            Ok(EvictOutcome::Evicted)
        ));
        advance(Duration::from_secs(5)).await;
        assert!(!exists(&store, "a"), "the kubelet finished it");
        let pending: Vec<Value> = store
            .list("Pod", Some("work"))
            .into_iter()
            .filter(|p| p["spec"]["nodeName"].is_null())
            .collect();
        assert_eq!(pending.len(), 1, "one unbound replacement");
        assert_eq!(allowed(&store), Some(0), "3 expected, 2 healthy, 2 needed");
        // Uncordoning node-a lets the scheduler bind it there; Ready reopens the budget.
        store
            .modify("Node", None, "node-a", |n| n["spec"] = json!({}))
            .expect("uncordon");
        advance(Duration::from_millis(600)).await;
        assert_eq!(allowed(&store), Some(1));
    }

    #[tokio::test(start_paused = true)]
    async fn a_bare_pod_under_max_unavailable_is_held_at_zero_with_an_event() {
        let store = Store::new(tokio::runtime::Handle::current());
        store
            .upsert(
                json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": "b", "namespace": "work"},
                "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}}),
            )
            .expect("pdb");
        store.upsert(pod("lonely", None, None)).expect("pod");
        let pdb = store
            .get("PodDisruptionBudget", Some("work"), "b")
            .expect("pdb");
        assert_eq!(
            (
                &pdb["status"]["expectedPods"],
                &pdb["status"]["desiredHealthy"],
                &pdb["status"]["currentHealthy"],
                &pdb["status"]["disruptionsAllowed"]
            ),
            (&json!(0), &json!(0), &json!(1), &json!(0))
        );
        assert!(matches!(
            store.evict("work", "lonely", None, &|_| Ok(())),
            Ok(EvictOutcome::Blocked {
                desired_healthy: 0,
                current_healthy: 1,
                ..
            })
        ));
        let events = store.list("Event", Some("work"));
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0]["reason"], json!("UnmanagedPods"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_stopped_disruption_controller_leaves_new_budgets_unobserved() {
        let store = Store::new(tokio::runtime::Handle::current());
        let mut t = store.timings();
        t.disruption_controller = false;
        store.set_timings(t.clone());
        store.upsert(pod("p", None, None)).expect("pod");
        store
            .upsert(
                json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": "lagging", "namespace": "work"},
                "spec": {"minAvailable": 0, "selector": {"matchLabels": {"app": "web"}}}}),
            )
            .expect("pdb");
        let pdb = store
            .get("PodDisruptionBudget", Some("work"), "lagging")
            .expect("pdb");
        assert_eq!(
            pdb["status"],
            json!({"currentHealthy": 0, "desiredHealthy": 0, "disruptionsAllowed": 0, "expectedPods": 0})
        );
        assert!(matches!(
            store.evict("work", "p", None, &|_| Ok(())),
            Ok(EvictOutcome::Lagging { .. })
        ));
        t.disruption_controller = true;
        store.set_timings(t);
        assert!(matches!(
            store.evict("work", "p", None, &|_| Ok(())),
            Ok(EvictOutcome::Evicted)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn finalizers_hold_a_deleted_object_until_an_update_removes_them() {
        let store = Store::new(tokio::runtime::Handle::current());
        let mut held = pod("held", Some("1"), None);
        held["metadata"]["finalizers"] = json!(["example.com/hold"]);
        store.upsert(held).expect("stored");
        let ok = |_: &Value| Ok(());
        assert!(matches!(
            store.evict("work", "held", None, &ok),
            Ok(EvictOutcome::Evicted)
        ));
        advance(Duration::from_millis(1100)).await;
        let after = store.get("Pod", Some("work"), "held").expect("still there");
        assert_eq!(
            after.pointer("/metadata/deletionGracePeriodSeconds"),
            Some(&json!(0))
        );
        let WatchStart::Replay { mut live, .. } =
            store.watch_from(pods(), Some(store.resource_version()))
        else {
            panic!("expected a replay start");
        };
        store
            .patch_rt(
                pods(),
                Some("work"),
                "held",
                false,
                PatchType::Merge,
                br#"{"metadata":{"finalizers":null}}"#,
                &|_, _| Ok(()),
            )
            .expect("patched");
        assert!(!exists(&store, "held"), "gone once the finalizer is");
        let change = live.recv().await.expect("event");
        assert_eq!(change.kind, ChangeKind::Deleted);

        // Other kinds: a delete with finalizers only marks the object.
        store
            .upsert(
                json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": "l", "namespace": "work", "finalizers": ["x"]}}),
            )
            .expect("lease");
        let leases = resources::by_kind("Lease").expect("leases");
        let (obj, gone) = store
            .delete_rt(
                leases,
                Some("work"),
                "l",
                &DeleteOptions::default(),
                &|_| Ok(()),
            )
            .expect("deleted");
        assert!(!gone);
        assert!(obj.pointer("/metadata/deletionTimestamp").is_some());
        store
            .modify("Lease", Some("work"), "l", |l| {
                l["metadata"]["finalizers"] = json!([]);
            })
            .expect("modified");
        assert!(store.get("Lease", Some("work"), "l").is_none());
    }

    #[test]
    fn continue_tokens_round_trip_and_reject_garbage() {
        let key = ("work".to_string(), "pod-1".to_string());
        assert_eq!(decode_continue(&encode_continue(7, &key)), Some((7, key)));
        assert_eq!(decode_continue("zz"), None);
        assert_eq!(decode_continue("abc"), None);
    }
}
