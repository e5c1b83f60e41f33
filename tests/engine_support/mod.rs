//! Shared setup for the engine, CLI and differential tests: a fake API server with a seeded
//! cluster, settings pointing at it, and builders for the objects a drain meets.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use fake_apiserver::store::set_pod_ready_in;
use fake_apiserver::{FakeApiServer, Options, TERMINATION_ANNOTATION};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use kube_shutdown_drain::config::Settings;
use serde_json::{Value, json};

pub const NODE: &str = "node-a";
pub const OTHER_NODE: &str = "node-b";
pub const NS: &str = "work";

/// The identity the product ships: `node-a`'s own ServiceAccount in the namespace of
/// packaging/manifests/rbac.yaml, as packaging/make-node-kubeconfig creates it. The fake
/// authorizes it by the shipped RBAC objects alone.
pub const IDENTITY: &str = "system:serviceaccount:kube-shutdown-drain:node-a";

/// The shipped identity of `node` (its ServiceAccount, named like the Node).
pub fn identity_of(node: &str) -> String {
    format!("system:serviceaccount:kube-shutdown-drain:{node}")
}

/// The RBAC objects the product ships (packaging/manifests/rbac.yaml).
pub fn shipped_rbac() -> fake_apiserver::Policy {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/manifests/rbac.yaml");
    fake_apiserver::Policy::load(&path).unwrap_or_else(|e| panic!("{e}"))
}

/// A running fake API server and a scratch directory (kubeconfigs, boot id, state).
///
/// The server authorizes [`IDENTITY`] by the shipped rbac.yaml, and dropping the cluster fails
/// the test when RBAC denied that identity anything (a request the manifests do not allow),
/// unless the test called [`Cluster::expect_denials`].
pub struct Cluster {
    pub server: FakeApiServer,
    pub dir: tempfile::TempDir,
    expect_denials: std::sync::atomic::AtomicBool,
}

/// The marker annotation's text on `node`, if any.
pub fn marker_text(node: &Value) -> Option<String> {
    node.pointer("/metadata/annotations")
        .and_then(|a| a.get(kube_shutdown_drain::node::MARKER_ANNOTATION))
        .and_then(Value::as_str)
        .map(str::to_string)
}

/// The marker on `node`, parsed; panics on text that is not JSON.
pub fn stored_marker(node: &Value) -> Option<Value> {
    marker_text(node).map(|t| serde_json::from_str(&t).expect("the marker is JSON"))
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let denials = self.server.denials();
        if std::thread::panicking()
            || self
                .expect_denials
                .load(std::sync::atomic::Ordering::Relaxed)
            || denials.is_empty()
        {
            return;
        }
        let list: Vec<String> = denials.iter().map(ToString::to_string).collect();
        panic!(
            "the shipped rbac.yaml does not allow what the product asked:\n  {}",
            list.join("\n  ")
        );
    }
}

impl Cluster {
    /// Starts the server with `node-a`, `node-b`, namespace `work` and `objects`.
    pub async fn start(objects: Vec<Value>) -> Cluster {
        let mut seed = vec![node(NODE), node(OTHER_NODE), namespace(NS)];
        seed.extend(objects);
        // FakeApiServer::start probes a free port, drops it and binds again; another process can
        // take the port in between, so a failed start is tried again on a new port.
        let mut attempt = 0;
        let server = loop {
            attempt += 1;
            match FakeApiServer::start(Options {
                port: 0,
                seed: seed.clone(),
            })
            .await
            {
                Ok(s) => break s,
                Err(e) if attempt < 5 => {
                    eprintln!("fake API server did not start ({e:#}); retrying")
                }
                Err(e) => panic!("the fake API server starts: {e:#}"),
            }
        };
        server.set_rbac(shipped_rbac());
        let dir = tempfile::tempdir().expect("a temp dir");
        std::fs::write(
            dir.path().join("boot_id"),
            "0b0e1d00-0000-4000-8000-000000000001\n",
        )
        .unwrap();
        Cluster {
            server,
            dir,
            expect_denials: false.into(),
        }
    }

    /// Declares that this test provokes RBAC denials of a ServiceAccount on purpose.
    pub fn expect_denials(&self) {
        self.expect_denials
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// A kubeconfig for `token` ([`IDENTITY`], `admin`, or `system:node:NAME` for kubelet
    /// credentials).
    pub fn kubeconfig(&self, token: &str) -> PathBuf {
        let path = self
            .dir
            .path()
            .join(format!("kubeconfig-{}", token.replace(':', "-")));
        self.server
            .write_kubeconfig(&path, token)
            .expect("kubeconfig written");
        path
    }

    /// Settings for `node-a` with its shipped identity ([`IDENTITY`]), plus `extra` TOML.
    pub fn settings(&self, extra: &str) -> Arc<Settings> {
        self.settings_as(IDENTITY, extra)
    }

    pub fn settings_as(&self, token: &str, extra: &str) -> Arc<Settings> {
        let kc = self.kubeconfig(token);
        let text = format!(
            "node_name = \"{NODE}\"\nkubeconfig = \"{}\"\nstate_dir = \"{}\"\nrequest_timeout = \"2s\"\n{extra}",
            kc.display(),
            self.dir.path().join("state").display()
        );
        let mut s = Settings::from_str_at(Path::new("/test/config.toml"), &text)
            .unwrap_or_else(|e| panic!("test settings are valid: {e}"));
        s.boot_id_path = self.dir.path().join("boot_id");
        Arc::new(s)
    }

    /// A config file for the binary: `node-a` with `token`'s credentials, plus `extra` TOML.
    pub fn config_file(&self, token: &str, extra: &str) -> PathBuf {
        let path = self
            .dir
            .path()
            .join(format!("config-{}.toml", token.replace(':', "-")));
        let text = format!(
            "node_name = \"{NODE}\"\nkubeconfig = \"{}\"\nstate_dir = \"{}\"\nrequest_timeout = \"2s\"\n{extra}",
            self.kubeconfig(token).display(),
            self.dir.path().join("state").display()
        );
        std::fs::write(&path, text).unwrap();
        path
    }

    /// A config file for the binary: `node-a` with its shipped identity ([`IDENTITY`]), plus
    /// `extra` TOML.
    pub fn config(&self, extra: &str) -> PathBuf {
        self.config_file(IDENTITY, extra)
    }

    /// Adds `{key, effect}` to `node-a`'s taints, as another writer would.
    pub fn add_taint(&self, key: &str, effect: &str) {
        self.server
            .store()
            .set_node_taint(NODE, json!({"key": key, "effect": effect}))
            .unwrap();
    }

    /// Cordons `node-a` as an admin would (not through us).
    pub fn cordon_as_admin(&self) {
        cordon_as_admin(self.server.store());
    }

    pub fn pod(&self, ns: &str, name: &str) -> Option<Value> {
        self.server.store().get("Pod", Some(ns), name)
    }

    pub fn node(&self, name: &str) -> Value {
        self.server
            .store()
            .get("Node", None, name)
            .expect("node exists")
    }

    /// Waits until `n` requests are held at the gate of `route` (see `Faults::gate`).
    pub async fn until_held(&self, route: &fake_apiserver::Route, n: usize) {
        let faults = self.server.faults();
        until(&format!("{n} request(s) held at {route:?}"), || {
            faults.waiting_at(route) >= n
        })
        .await;
        assert_eq!(
            faults.waiting_at(route),
            n,
            "exactly {n} request(s) held at {route:?}"
        );
    }

    /// The marker annotation on `node-a`, as stored (its text).
    pub fn marker_text(&self) -> Option<String> {
        marker_text(&self.node(NODE))
    }

    /// Evictions POSTed for `ns/name`.
    pub fn evictions_of(&self, ns: &str, name: &str) -> usize {
        self.server
            .recorder()
            .requests()
            .iter()
            .filter(|r| {
                r.method == "POST"
                    && r.path == format!("/api/v1/namespaces/{ns}/pods/{name}/eviction")
            })
            .count()
    }
}

/// Cordons `node-a` in `store` as an admin would (not through us).
pub fn cordon_as_admin(store: &fake_apiserver::Store) {
    store
        .modify("Node", None, NODE, |n| {
            n["spec"]["unschedulable"] = json!(true)
        })
        .unwrap();
}

/// What the binary printed and how it exited.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

/// Runs the binary with `config` and `args`, never against the machine's logind (`check` and
/// `status` read its InhibitDelayMaxUSec).
pub async fn cli(config: &Path, args: &[&str]) -> Run {
    cli_on_bus(config, args, NO_BUS).await
}

/// A system bus address where nothing listens: logind is unreachable.
pub const NO_BUS: &str = "unix:path=/nonexistent/kube-shutdown-drain-test-bus";

/// [`cli`] with logind on the bus at `bus` (a test's private bus).
pub async fn cli_on_bus(config: &Path, args: &[&str], bus: &str) -> Run {
    cli_with_log(config, args, bus, Some("warn")).await
}

/// [`cli_on_bus`] with `KUBE_SHUTDOWN_DRAIN_LOG` as given (`None`: unset).
pub async fn cli_with_log(config: &Path, args: &[&str], bus: &str, log: Option<&str>) -> Run {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_kube-shutdown-drain"));
    command
        .arg("--config")
        .arg(config)
        .args(args)
        .env_remove("JOURNAL_STREAM")
        .env_remove("KUBE_SHUTDOWN_DRAIN_LOG")
        // A run that outlives its test (a timeout around `cli`) is killed, not left running.
        .kill_on_drop(true)
        .env("DBUS_SYSTEM_BUS_ADDRESS", bus);
    if let Some(log) = log {
        command.env("KUBE_SHUTDOWN_DRAIN_LOG", log);
    }
    let out = command.output().await.expect("the binary runs");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

pub fn node(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}
    })
}

pub fn namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}

/// A Running, Ready pod owned by ReplicaSet `rs1`, bound to `node`.
pub fn pod(ns: &str, name: &str, node: &str) -> Value {
    let mut p = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": {"app": name},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs1", "uid": "rs1-uid", "controller": true}]},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}], "terminationGracePeriodSeconds": 30},
    });
    set_pod_ready_in(&mut p, true);
    p
}

/// Merges `patch` into `base` (objects recursively, everything else replaced).
pub fn merged(mut base: Value, patch: Value) -> Value {
    fn merge(a: &mut Value, b: Value) {
        match (a, b) {
            (Value::Object(a), Value::Object(b)) => {
                for (k, v) in b {
                    if v.is_null() {
                        a.remove(&k);
                    } else {
                        merge(a.entry(k).or_insert(Value::Null), v);
                    }
                }
            }
            (a, b) => *a = b,
        }
    }
    merge(&mut base, patch);
    base
}

pub fn pod_with(ns: &str, name: &str, node: &str, patch: Value) -> Value {
    merged(pod(ns, name, node), patch)
}

/// A pod whose simulated kubelet takes `seconds` to stop it after the eviction.
pub fn slow_pod(ns: &str, name: &str, node: &str, seconds: f64) -> Value {
    pod_with(
        ns,
        name,
        node,
        json!({"metadata": {"annotations": {TERMINATION_ANNOTATION: seconds.to_string()}}}),
    )
}

pub fn daemonset_pod(ns: &str, name: &str, node: &str) -> Value {
    let mut p = pod(ns, name, node);
    p["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds1", "uid": "ds1-uid", "controller": true}]);
    p
}

pub fn bare_pod(ns: &str, name: &str, node: &str) -> Value {
    let mut p = pod(ns, name, node);
    p["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("ownerReferences");
    p
}

/// A PDB over `app=<app>` with `minAvailable`.
pub fn pdb(ns: &str, name: &str, app: &str, min_available: i64) -> Value {
    json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": app}}}
    })
}

/// Polls `f` until true or `limit`; for test setup only, never for the behaviour under test.
pub async fn eventually(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = tokio::time::Instant::now() + limit;
    while tokio::time::Instant::now() < end {
        if f() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    f()
}

/// Waits until `f` holds, for staging a test (never to judge the behaviour under test); the
/// limit is generous so that a loaded machine cannot fail it, and running out is a failure
/// naming `what`.
pub async fn until(what: &str, f: impl FnMut() -> bool) {
    assert!(
        eventually(Duration::from_secs(30), f).await,
        "gave up waiting for {what}"
    );
}

/// Taints on a node object, as (key, effect) pairs.
pub fn taints(node: &Value) -> Vec<(String, String)> {
    node.pointer("/spec/taints")
        .and_then(Value::as_array)
        .map(|ts| {
            ts.iter()
                .map(|t| {
                    (
                        t["key"].as_str().unwrap_or_default().to_string(),
                        t["effect"].as_str().unwrap_or_default().to_string(),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

pub fn unschedulable(node: &Value) -> bool {
    node.pointer("/spec/unschedulable")
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// Whether the test may skip when something it needs is missing (never under CI=true).
pub fn skip_or_fail(why: &str) -> bool {
    if std::env::var("CI").as_deref() == Ok("true") {
        panic!("{why} (CI=true: a missing dependency is a failure)");
    }
    eprintln!("SKIPPED: {why}");
    true
}

/// Requests kubectl makes once per cache directory for API discovery (and then caches).
pub fn is_discovery(r: &fake_apiserver::RecordedRequest) -> bool {
    r.path == "/api"
        || r.path == "/apis"
        || r.path.starts_with("/openapi")
        || (r.path.starts_with("/apis/") && r.path.matches('/').count() == 3)
        || (r.path == "/api/v1" && r.query_param("timeout").is_some())
}

/// The fixed `kubectl.1.32` next to the machine's kubectl dispatcher (never the dispatcher).
pub fn kubectl_132() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    let dispatcher = std::env::split_paths(&path)
        .map(|d| d.join("kubectl"))
        .find(|p| p.is_file())?;
    let fixed = std::fs::canonicalize(dispatcher)
        .ok()?
        .parent()?
        .join("kubectl.1.32");
    fixed.exists().then_some(fixed)
}
/// A node API as an admin's kubectl writes it (field manager `kubectl`).
pub async fn kubectl_api(c: &Cluster) -> Api<Node> {
    let kubeconfig = kube::config::Kubeconfig::read_from(c.kubeconfig("admin")).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    Api::all(kube::Client::try_from(config).unwrap())
}

pub fn as_kubectl() -> PatchParams {
    PatchParams {
        field_manager: Some("kubectl".into()),
        ..PatchParams::default()
    }
}

/// `kubectl uncordon` and `kubectl taint node-a kube-shutdown-drain/shutdown-`, by hand.
pub async fn admin_uncordons_and_removes_our_taint(c: &Cluster) {
    let api = kubectl_api(c).await;
    api.patch(
        NODE,
        &as_kubectl(),
        &Patch::Strategic(json!({"spec": {"unschedulable": null}})),
    )
    .await
    .unwrap();
    let left: Vec<Value> = c.node(NODE)["spec"]["taints"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t["key"] != json!("kube-shutdown-drain/shutdown"))
        .collect();
    api.patch(
        NODE,
        &as_kubectl(),
        &Patch::Merge(json!({"spec": {"taints": left}})),
    )
    .await
    .unwrap();
}

/// A config file `name` in the scratch dir for `node-a` using `kubeconfig`, with a 2 s
/// request timeout.
pub fn config_with(c: &Cluster, name: &str, kubeconfig: &Path) -> PathBuf {
    let path = c.dir.path().join(name);
    let text = format!(
        "node_name = \"{NODE}\"\nkubeconfig = \"{}\"\nstate_dir = \"{}\"\nrequest_timeout = \"2s\"\n",
        kubeconfig.display(),
        c.dir.path().join("state").display()
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// The identities of the requests the fake got.
pub fn users(c: &Cluster) -> Vec<String> {
    c.server
        .recorder()
        .requests()
        .into_iter()
        .map(|r| r.user)
        .collect()
}
