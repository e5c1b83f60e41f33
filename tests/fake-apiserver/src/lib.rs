//! A fake Kubernetes API server for tests: the library that starts it and hands tests its
//! store, request recorder and fault knobs.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use fake_apiserver::{FakeApiServer, Options};
//! let server = FakeApiServer::start(Options::default()).await?;
//! server.write_kubeconfig(std::path::Path::new("/tmp/kubeconfig"), "admin")?;
//! server.store().set_pod_ready("work", "guarded", true)?;
//! # Ok(()) }
//! ```

pub mod auth;
mod control;
pub mod discovery;
pub mod faults;
pub mod flowcontrol;
pub mod managed;
pub mod node_graph;
pub mod patch;
pub mod pdb;
mod proto;
pub mod rbac;
pub mod recorder;
pub mod resources;
pub mod seed;
pub mod selector;
mod server;
pub mod sim;
pub mod store;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use serde_json::Value;

pub use faults::{FaultState, Faults, Route};
pub use rbac::{Denial, Policy, RbacError};
pub use recorder::{RecordedRequest, Recorder, WatchCounts};
pub use seed::{SeedError, load_file as load_seed_file, parse_documents};
pub use sim::{KUBELET_ANNOTATION, PHASE_ANNOTATION, Timings};
pub use store::{Store, StoreError, TERMINATION_ANNOTATION};

/// How to start the server.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// TCP port on 127.0.0.1; 0 picks a free one.
    pub port: u16,
    /// Objects to load before the first request (see `load_seed_file`).
    pub seed: Vec<Value>,
}

/// A running fake API server. Dropping it stops the listener and every connection.
pub struct FakeApiServer {
    app: Arc<server::App>,
}

impl FakeApiServer {
    /// Loads the seed and starts listening on 127.0.0.1. Must run inside a tokio runtime.
    pub async fn start(options: Options) -> anyhow::Result<FakeApiServer> {
        let store = Store::new(tokio::runtime::Handle::current());
        for (i, object) in options.seed.into_iter().enumerate() {
            let what = format!(
                "seed object {i} ({} {} {}{})",
                object["apiVersion"].as_str().unwrap_or("?"),
                object["kind"].as_str().unwrap_or("?"),
                object["metadata"]["namespace"]
                    .as_str()
                    .map(|n| format!("{n}/"))
                    .unwrap_or_default(),
                object["metadata"]["name"].as_str().unwrap_or("?"),
            );
            store
                .upsert(object)
                .with_context(|| format!("{what} could not be stored"))?;
        }
        // Every running kubelet posts its status once, so seeded nodes start with a fresh
        // heartbeat and Lease (a node annotated `fake-apiserver.test/kubelet: stopped` keeps
        // its seeded, stale one).
        store.heartbeat_all();
        // Bind once, learn the port, then hand the bound socket to the app that knows it.
        let listener = std::net::TcpListener::bind(("127.0.0.1", options.port))
            .with_context(|| format!("cannot bind 127.0.0.1:{}", options.port))?;
        let port = listener.local_addr()?.port();
        let app = Arc::new(server::App {
            store,
            recorder: Recorder::new(),
            faults: Faults::new(),
            port,
            listener: Mutex::new(server::ListenerState::new()),
            // ServiceAccounts may only review their access until `set_rbac`.
            rbac: Mutex::new(Arc::new(Policy::default())),
            denials: Mutex::new(Vec::new()),
        });
        server::serve_listener(&app, listener)
            .with_context(|| format!("cannot listen on 127.0.0.1:{port}"))?;
        tracing::info!("fake apiserver listening on {}", app.url());
        Ok(FakeApiServer { app })
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        self.app.url()
    }

    pub fn port(&self) -> u16 {
        self.app.port
    }

    /// Writes a kubeconfig for this server with a bearer `token` (`system:node:NAME` acts as
    /// that node's kubelet, `system:serviceaccount:NS:NAME` as that ServiceAccount under the
    /// server's RBAC; both are also written as `as:` because kubectl sends no token to an
    /// `http://` server; anything else is an admin).
    pub fn write_kubeconfig(&self, path: &Path, token: &str) -> anyhow::Result<()> {
        std::fs::write(path, kubeconfig(&self.url(), token))
            .with_context(|| format!("cannot write kubeconfig {}", path.display()))
    }

    pub fn store(&self) -> &Store {
        &self.app.store
    }

    pub fn recorder(&self) -> &Recorder {
        &self.app.recorder
    }

    pub fn faults(&self) -> &Faults {
        &self.app.faults
    }

    /// Replaces the RBAC objects ServiceAccount tokens (`system:serviceaccount:NS:NAME`) are
    /// authorized by, e.g. `Policy::load` of the shipped rbac.yaml. Until the first call they
    /// may only review their access.
    pub fn set_rbac(&self, policy: Policy) {
        *self.app.rbac.lock().unwrap_or_else(|e| e.into_inner()) = Arc::new(policy);
    }

    /// Every request (answered 403) and access review (answered `allowed: false`) that RBAC
    /// denied a ServiceAccount so far, in order.
    pub fn denials(&self) -> Vec<Denial> {
        self.app
            .denials
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Forgets the denials so far.
    pub fn clear_denials(&self) {
        self.app
            .denials
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }

    /// The simulated kubelets: `stop(node)`, `start(node)`, `is_running(node)`.
    pub fn kubelets(&self) -> Kubelets<'_> {
        Kubelets(&self.app.store)
    }

    /// The simulated controllers' knobs (`Timings`).
    pub fn controllers(&self) -> Controllers<'_> {
        Controllers(&self.app.store)
    }

    /// Closes the listening socket and drops every open connection, watches included.
    pub fn stop_listener(&self) {
        server::stop_listener(&self.app);
    }

    /// Listens again on the same port.
    /// While it was closed, the port may have been taken as the local end of another test's
    /// outgoing connection (an ephemeral port: the suite runs test binaries side by side), so
    /// a bind that finds it in use is tried again for up to 10 s, until that connection ends.
    pub async fn start_listener(&self) -> anyhow::Result<()> {
        let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            match server::start_listener(&self.app, self.app.port) {
                Ok(_) => return Ok(()),
                Err(e)
                    if e.kind() == std::io::ErrorKind::AddrInUse
                        && std::time::Instant::now() < until =>
                {
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
                Err(e) => {
                    return Err(e).with_context(|| {
                        format!("cannot listen again on 127.0.0.1:{}", self.app.port)
                    });
                }
            }
        }
    }
}

/// The simulated kubelets of a running server (see `sim`).
pub struct Kubelets<'a>(&'a Store);

impl Kubelets<'_> {
    /// Stops `node`'s kubelet: Ready stays True with a stale `lastHeartbeatTime` (and Lease
    /// `renewTime`) until `Timings::node_monitor_grace`, then Unknown with the unreachable
    /// taints; its terminating pods wait.
    pub fn stop(&self, node: &str) -> Result<(), StoreError> {
        self.0.stop_kubelet(node)
    }

    /// As a fast reboot leaves `node`: the kubelet stopped, Ready still True, but its last
    /// heartbeat and Lease renewal long ago (2020), from before any boot a test runs in.
    pub fn stop_leaving_stale_ready(&self, node: &str) -> Result<(), StoreError> {
        self.stop(node)?;
        self.0.modify("Node", None, node, |n| {
            if let Some(conditions) = n["status"]["conditions"].as_array_mut() {
                for c in conditions {
                    c["lastHeartbeatTime"] = serde_json::json!("2020-01-01T00:00:00Z");
                }
            }
        })?;
        self.0.modify("Lease", Some("kube-node-lease"), node, |l| {
            l["spec"]["renewTime"] = serde_json::json!("2020-01-01T00:00:00.000000Z");
        })?;
        Ok(())
    }

    /// Starts it again: a fresh heartbeat at once, then every `Timings::heartbeat_period`.
    pub fn start(&self, node: &str) -> Result<(), StoreError> {
        self.0.start_kubelet(node)
    }

    pub fn is_running(&self, node: &str) -> bool {
        self.0.kubelet_running(node)
    }

    /// Sets how often running kubelets heartbeat and how long a stopped one's node stays
    /// Ready (applies to timers started from now on).
    pub fn set_timing(&self, heartbeat_period: Duration, node_monitor_grace: Duration) {
        let mut t = self.0.timings();
        t.heartbeat_period = heartbeat_period;
        t.node_monitor_grace = node_monitor_grace;
        self.0.set_timings(t);
    }
}

/// The simulated controllers' knobs of a running server.
pub struct Controllers<'a>(&'a Store);

impl Controllers<'_> {
    pub fn timings(&self) -> Timings {
        self.0.timings()
    }

    pub fn set_timings(&self, timings: Timings) {
        self.0.set_timings(timings);
    }

    /// How long a replacement pod takes from creation to Ready.
    pub fn set_replacement_ready(&self, delay: Duration) {
        let mut t = self.0.timings();
        t.replacement_ready = delay;
        self.0.set_timings(t);
    }

    /// How long until a released volume's VolumeAttachment goes; `None`: never.
    pub fn set_detach_after(&self, delay: Option<Duration>) {
        let mut t = self.0.timings();
        t.detach_after = delay;
        self.0.set_timings(t);
    }

    /// Stops (false) or starts (true) the disruption controller: stopped, new or changed
    /// budgets stay unobserved and evictions under them get the "still being processed" 429.
    pub fn set_disruption_controller(&self, running: bool) {
        let mut t = self.0.timings();
        t.disruption_controller = running;
        self.0.set_timings(t);
    }
}

impl Drop for FakeApiServer {
    fn drop(&mut self) {
        server::stop_listener(&self.app);
    }
}

/// A kubeconfig with one cluster (`fake`), one user with a bearer token, one context.
pub fn kubeconfig(url: &str, token: &str) -> String {
    // kubectl sends no bearer token over plain HTTP; `as:` (Impersonate-User) carries a node's
    // or ServiceAccount's identity to it, and kube-rs sends both.
    let impersonate = if auth::Identity::from_user(token) != auth::Identity::Admin {
        format!(
            "\n    as: {}",
            serde_json::to_string(token).unwrap_or_default()
        )
    } else {
        String::new()
    };
    let token = serde_json::to_string(token).unwrap_or_else(|_| "\"\"".into());
    format!(
        "apiVersion: v1
kind: Config
clusters:
- name: fake
  cluster:
    server: {url}
users:
- name: fake
  user:
    token: {token}{impersonate}
contexts:
- name: fake
  context:
    cluster: fake
    user: fake
    namespace: default
current-context: fake
"
    )
}
