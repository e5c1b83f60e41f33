//! Machines of a fleet for the tests that run several daemons against one fake API server:
//! each its own fake logind on a private bus, its files, its daemon (`kube-shutdown-drain run`).

use std::path::PathBuf;
use std::process::Child;
use std::time::Duration;

use fake_apiserver::{FakeApiServer, Options};
use serde_json::{Value, json};

use crate::daemon_support;
use crate::logind;

/// The fake API server with `seed`, the shipped RBAC, and kubelets that heartbeat every 200 ms.
pub async fn cluster(seed: Vec<Value>) -> FakeApiServer {
    let api = FakeApiServer::start(Options { port: 0, seed })
        .await
        .expect("start the fake API server");
    let rbac =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/manifests/rbac.yaml");
    api.set_rbac(fake_apiserver::Policy::load(&rbac).unwrap_or_else(|e| panic!("{e}")));
    api.kubelets()
        .set_timing(Duration::from_millis(200), Duration::from_secs(40));
    api
}

/// A Ready Node named `name`.
pub fn node(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]}})
}

/// One node: its fake logind, its files and its daemon.
pub struct Machine {
    pub name: &'static str,
    pub rig: logind::Rig,
    dir: tempfile::TempDir,
    daemon: Option<Child>,
    runs: usize,
}

impl Machine {
    pub fn path(&self, file: &str) -> PathBuf {
        self.dir.path().join(file)
    }

    pub fn sentinel(&self) -> PathBuf {
        self.path("reboot-required")
    }

    /// Writes a boot ID for boot `n` of this machine; returns it.
    pub fn new_boot(&self, n: usize) -> String {
        let id = format!("0b0e1d00-0000-4000-8000-{:012x}", n * 16 + self.runs);
        std::fs::write(self.path("boot_id"), format!("{id}\n")).unwrap();
        id
    }

    fn log_path(&self) -> PathBuf {
        self.path(&format!("daemon-{}.log", self.runs))
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    pub fn spawn(&mut self) {
        self.runs += 1;
        let log = std::fs::File::create(self.log_path()).unwrap();
        self.daemon = Some(daemon_support::spawn_run(
            std::process::Command::new(env!("CARGO_BIN_EXE_kube-shutdown-drain")),
            &self.path("config.toml"),
            self.rig.address(),
            &self.path("boot_id"),
            &self.path("shutdown"),
            log,
        ));
    }

    pub fn kill(&mut self) {
        if let Some(mut child) = self.daemon.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub async fn wait_log(&self, needle: &str, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        while !self.log().contains(needle) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{}: no {needle:?} within {within:?}; log:\n{}",
                self.name,
                self.log()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A machine for node `name`: `[fleet] slots = 1`, a sentinel file, and `fleet` (more lines
/// of the `[fleet]` table).
pub async fn machine(api: &FakeApiServer, name: &'static str, fleet: &str) -> Option<Machine> {
    let rig = logind::Rig::start(logind::LogindOptions::default()).await?;
    let dir = tempfile::Builder::new()
        .prefix("ksd-fleet-")
        .tempdir()
        .unwrap();
    let m = Machine {
        name,
        rig,
        dir,
        daemon: None,
        runs: 0,
    };
    std::fs::create_dir_all(m.path("shutdown")).unwrap();
    std::fs::create_dir_all(m.path("state")).unwrap();
    api.write_kubeconfig(
        &m.path("kubeconfig"),
        &format!("system:serviceaccount:kube-shutdown-drain:{name}"),
    )
    .unwrap();
    let config = format!(
        "node_name = \"{name}\"\nkubeconfig = \"{}\"\nstate_dir = \"{}\"\n\
         [drain]\ntimeout = \"20s\"\n[fleet]\nslots = 1\n{fleet}\n[reboot]\nsentinel_file = \"{}\"\n",
        m.path("kubeconfig").display(),
        m.path("state").display(),
        m.sentinel().display()
    );
    std::fs::write(m.path("config.toml"), config).unwrap();
    m.new_boot(0);
    Some(m)
}

/// Whether node `name` is cordoned now.
pub fn cordoned(api: &FakeApiServer, name: &str) -> bool {
    api.store()
        .get("Node", None, name)
        .is_some_and(|n| n.pointer("/spec/unschedulable") == Some(&json!(true)))
}
