//! Test support for the daemon: the real `kube-shutdown-drain run` binary started against a
//! private bus with the fake logind, the fake API server seeded with the demo's node, a boot-ID
//! file the test can change, and a `NOTIFY_SOCKET`; everything is torn down on drop.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fake_apiserver::{FakeApiServer, Options};
use serde_json::Value;

use crate::logind::{LogindOptions, NotifySocket, Outcome, Rig};

/// The node the demo seed describes.
pub const NODE: &str = "demo-node-1";
/// The identity the product ships for [`NODE`]: its own ServiceAccount in the namespace of
/// packaging/manifests/rbac.yaml (packaging/make-node-kubeconfig), authorized by the fake with
/// the shipped RBAC objects alone.
pub const IDENTITY: &str = "system:serviceaccount:kube-shutdown-drain:demo-node-1";
/// The environment variable `kube-shutdown-drain run` reads the boot-ID file from (tests only).
pub const BOOT_ID_ENV: &str = "KUBE_SHUTDOWN_DRAIN_BOOT_ID_FILE";
/// The environment variable naming the directory `run` watches for logind's schedule file
/// (tests only): every test's daemon watches its own, never the host's.
pub const SCHEDULE_DIR_ENV: &str = "KUBE_SHUTDOWN_DRAIN_SCHEDULE_DIR";

/// The first drain slot of group `all` (`[fleet] slots`).
pub const SLOT: &str = "kube-shutdown-drain-slot-0";
/// The demo's other node.
pub const OTHER: &str = "demo-node-2";

/// The slot Lease [`SLOT`] held by `holder` (none: given back), renewed now for an hour.
pub fn slot_lease(holder: Option<&str>) -> Value {
    let now = jiff::Timestamp::now().to_string();
    serde_json::json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
           "metadata": {"name": SLOT, "namespace": "kube-shutdown-drain",
                        "labels": {"kube-shutdown-drain/slot-group": "all"}},
           "spec": {"holderIdentity": holder, "acquireTime": now, "renewTime": now,
                    "leaseDurationSeconds": 3600}})
}

/// The demo's seed: a realistic node with every kind of pod the filters know.
pub fn demo_seed() -> Vec<Value> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("demo/seed.json");
    let text = std::fs::read_to_string(&path).expect("read demo/seed.json");
    let list: Value = serde_json::from_str(&text).expect("demo/seed.json is JSON");
    list["items"]
        .as_array()
        .cloned()
        .expect("demo/seed.json is a List with items")
}

/// A third replica of the demo's `web` app, Ready on the other node: with it the `web`
/// budget (minAvailable 2) allows one disruption.
pub fn third_web_replica() -> Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-6d4cf56db6-p7m2c",
            "namespace": "shop",
            "labels": {"app": "web", "pod-template-hash": "6d4cf56db6"},
            "ownerReferences": [{
                "apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-6d4cf56db6",
                "uid": "5e000000-0000-4000-8000-00000000a001", "controller": true
            }]
        },
        "spec": {"nodeName": "demo-node-2", "containers": [{"name": "web", "image": "nginx:1.27"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    })
}

/// Pods the demo node keeps through a drain: DaemonSet pods, the kube-proxy mirror pod, the
/// storage agent that tolerates the cordon, and the completed Job pod (sorted).
pub const STAYING: [&str; 5] = [
    "batch/nightly-report-29112000-xk2vd",
    "kube-system/kube-flannel-ds-7xk2p",
    "kube-system/kube-proxy-demo-node-1",
    "monitoring/node-exporter-q8w3d",
    "portworx/px-cluster-0c2b9d1e-4kq7w",
];

/// Pods a drain of the demo node evicts once the `web` budget is open (sorted).
pub const EVICTED: [&str; 4] = [
    "default/debug-shell",
    "shop/cart-7f9b8c6d5-x2k4f",
    "shop/orders-db-0",
    "shop/web-6d4cf56db6-2xk9p",
];

/// The demo seed with the `web` budget open (see [`third_web_replica`]).
pub fn open_seed() -> Vec<Value> {
    let mut seed = demo_seed();
    seed.push(third_web_replica());
    seed
}

/// Starts `command` (the binary) as `run` for a test machine: its config, the bus its logind is
/// on, its boot-ID file and schedule directory; stderr to `log`.
pub fn spawn_run(
    mut command: Command,
    config: &Path,
    bus: &str,
    boot_id: &Path,
    schedule_dir: &Path,
    log: std::fs::File,
) -> Child {
    command
        .arg("run")
        .env("KUBE_SHUTDOWN_DRAIN_CONFIG", config)
        .env("DBUS_SYSTEM_BUS_ADDRESS", bus)
        .env(BOOT_ID_ENV, boot_id)
        .env(SCHEDULE_DIR_ENV, schedule_dir)
        .env("RUST_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("start kube-shutdown-drain run")
}

/// How a test's world starts.
pub struct Setup {
    pub logind: LogindOptions,
    pub seed: Vec<Value>,
    /// TOML appended to the generated config (e.g. `[drain]\ntimeout = "3s"`).
    pub config: String,
    /// The daemon's state directory; `None`: a fresh one on the target's disk.
    pub state_dir: Option<PathBuf>,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            logind: LogindOptions::default(),
            seed: demo_seed(),
            config: String::new(),
            state_dir: None,
        }
    }
}

/// The fake world and the daemon under test.
/// Builds the command that runs the binary (first argument), given its log file.
pub type Wrap<'a> = dyn Fn(&Path, &std::fs::File) -> Command + 'a;

pub struct World {
    pub rig: Rig,
    pub api: FakeApiServer,
    pub notify: std::sync::Arc<NotifySocket>,
    /// Keeps `notify` drained (see [`NotifySocket::keep_drained`]).
    notify_drain: tokio::task::JoinHandle<()>,
    dir: tempfile::TempDir,
    state: tempfile::TempDir,
    state_dir: PathBuf,
    daemon: Option<Child>,
    runs: usize,
}

/// A world with the daemon started and READY=1 sent; `None` when tools are missing.
pub async fn started(setup: Setup) -> Option<World> {
    let mut world = World::start(setup).await?;
    world.spawn_daemon();
    world.wait_ready().await;
    Some(world)
}

impl World {
    /// Starts the bus, the fake logind and the fake API server; `None` when tools are missing.
    pub async fn start(setup: Setup) -> Option<World> {
        let rig = Rig::start(setup.logind).await?;
        let api = FakeApiServer::start(Options {
            port: 0,
            seed: setup.seed,
        })
        .await
        .expect("start the fake API server");
        let rbac = Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/manifests/rbac.yaml");
        api.set_rbac(fake_apiserver::Policy::load(&rbac).unwrap_or_else(|e| panic!("{e}")));
        let dir = tempfile::Builder::new()
            .prefix("ksd-daemon-")
            .tempdir()
            .expect("a temp dir");
        let kubeconfig = dir.path().join("kubeconfig");
        api.write_kubeconfig(&kubeconfig, IDENTITY)
            .expect("write the kubeconfig");
        // The state directory on the target's disk, never a tmpfs /tmp: on a tmpfs the daemon
        // warns that its boot record will not survive a reboot, which is right there and noise
        // here.
        let state = tempfile::Builder::new()
            .prefix("ksd-state-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .expect("a state dir");
        let state_dir = setup
            .state_dir
            .unwrap_or_else(|| state.path().to_path_buf());
        let config = format!(
            "node_name = \"{NODE}\"\nkubeconfig = \"{}\"\nstate_dir = \"{}\"\n{}\n",
            kubeconfig.display(),
            state_dir.display(),
            setup.config
        );
        std::fs::write(dir.path().join("config.toml"), config).expect("write the config");
        let notify = std::sync::Arc::new(NotifySocket::bind(dir.path()));
        let notify_drain = notify.keep_drained();
        let world = World {
            rig,
            api,
            notify,
            notify_drain,
            dir,
            state,
            state_dir,
            daemon: None,
            runs: 0,
        };
        world.new_boot();
        std::fs::create_dir_all(world.schedule_dir()).expect("the schedule dir");
        Some(world)
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The daemon's state directory (`state_dir`).
    pub fn state_dir(&self) -> PathBuf {
        self.state_dir.clone()
    }

    pub fn config_path(&self) -> PathBuf {
        self.dir.path().join("config.toml")
    }

    /// The directory the daemon watches for logind's schedule file (created with the world).
    pub fn schedule_dir(&self) -> PathBuf {
        self.dir.path().join("shutdown")
    }

    /// Writes logind's schedule file as logind does (a temporary file renamed over it): a
    /// shutdown of `mode` (`reboot`, `poweroff`, ...) `in_` from now.
    pub fn schedule(&self, mode: &str, in_: Duration) {
        let at = std::time::SystemTime::now() + in_;
        let usec = at
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after the epoch")
            .as_micros();
        self.write_schedule(&format!("USEC={usec}\nWARN_WALL=1\nMODE={mode}\nUID=0\n"));
    }

    /// Writes `text` as the schedule file (temporary file, then rename).
    pub fn write_schedule(&self, text: &str) {
        let tmp = self.schedule_dir().join(".#scheduledXXXX");
        std::fs::write(&tmp, text).expect("write the schedule");
        std::fs::rename(&tmp, self.schedule_dir().join("scheduled")).expect("rename the schedule");
    }

    /// Removes the schedule file, as `shutdown -c` does.
    pub fn cancel_schedule(&self) {
        std::fs::remove_file(self.schedule_dir().join("scheduled")).expect("remove the schedule");
    }

    pub fn boot_id_path(&self) -> PathBuf {
        self.dir.path().join("boot_id")
    }

    /// Writes a fresh boot ID, as a reboot would.
    pub fn new_boot(&self) -> String {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let id = format!(
            "{:08x}-0000-4000-8000-{:012x}",
            std::process::id(),
            nanos & 0xffff_ffff_ffff
        );
        std::fs::write(self.boot_id_path(), format!("{id}\n")).expect("write the boot id");
        id
    }

    /// The current run's log (stderr of the daemon).
    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join(format!("daemon-{}.log", self.runs))
    }

    /// Starts `kube-shutdown-drain run` (the real binary).
    pub fn spawn_daemon(&mut self) {
        self.spawn_daemon_into(None);
    }

    /// Starts the daemon; `wrap` builds the command around the binary from the log file it
    /// writes to (`tests/journal`'s `Journal::command`: the daemon logs to a test's journal).
    pub fn spawn_daemon_into(&mut self, wrap: Option<&Wrap<'_>>) {
        assert!(self.daemon.is_none(), "a daemon is already running");
        self.runs += 1;
        let log = std::fs::File::create(self.log_path()).expect("a log file");
        let bin = Path::new(env!("CARGO_BIN_EXE_kube-shutdown-drain"));
        let mut command = match wrap {
            None => {
                let mut c = Command::new(bin);
                c.env_remove("JOURNAL_STREAM");
                c
            }
            Some(wrap) => wrap(bin, &log),
        };
        command.env("NOTIFY_SOCKET", self.notify.path());
        let child = spawn_run(
            command,
            &self.config_path(),
            self.rig.address(),
            &self.boot_id_path(),
            &self.schedule_dir(),
            log,
        );
        self.daemon = Some(child);
    }

    pub fn pid(&self) -> u32 {
        self.daemon.as_ref().expect("a running daemon").id()
    }

    /// Sends `signal` to the daemon.
    pub fn signal(&self, signal: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(self.pid() as i32);
        nix::sys::signal::kill(pid, signal).expect("signal the daemon");
    }

    /// Waits for the daemon to exit, up to `within`; its exit code, or None if still running.
    pub fn wait_exit(&mut self, within: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + within;
        let child = self.daemon.as_mut().expect("a daemon");
        loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                self.daemon = None;
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGKILL and reap.
    pub fn kill_daemon(&mut self) {
        if let Some(mut child) = self.daemon.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The current run's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    /// Waits until the current run's log contains `needle`.
    pub async fn wait_log(&self, needle: &str, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        loop {
            if self.log().contains(needle) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Waits for `READY=1` and asserts the lock was visible to logind by then.
    /// The machine goes down and comes back: the daemon killed, logind's boot simulated, a new
    /// boot ID, the daemon started again and READY=1 awaited.
    pub async fn boot_again(&mut self) {
        self.kill_daemon();
        // The READY=1 awaited is the new daemon's, not the last one's.
        self.notify.clear();
        self.rig.simulate_boot().await;
        self.new_boot();
        self.spawn_daemon();
        self.wait_ready().await;
    }

    pub async fn wait_ready(&mut self) {
        let ready = self
            .notify
            .wait_for("READY=1", Duration::from_secs(20))
            .await;
        assert!(
            ready.is_some(),
            "no READY=1 within 20 s; daemon log:\n{}",
            self.log()
        );
    }

    /// The Node object from the fake API server.
    pub fn node(&self) -> Value {
        self.api
            .store()
            .get("Node", None, NODE)
            .expect("the node exists")
    }

    /// Pods on the node, as `namespace/name`.
    pub fn pods_on_node(&self) -> Vec<String> {
        self.api
            .store()
            .list("Pod", None)
            .into_iter()
            .filter(|p| p.pointer("/spec/nodeName").and_then(Value::as_str) == Some(NODE))
            .map(|p| {
                format!(
                    "{}/{}",
                    p.pointer("/metadata/namespace")
                        .and_then(Value::as_str)
                        .unwrap_or_default(),
                    p.pointer("/metadata/name")
                        .and_then(Value::as_str)
                        .unwrap_or_default()
                )
            })
            .collect()
    }

    /// The marker annotation's text on the node, if any.
    pub fn marker_text(&self) -> Option<String> {
        self.node()["metadata"]["annotations"][kube_shutdown_drain::node::MARKER_ANNOTATION]
            .as_str()
            .map(str::to_string)
    }

    /// The marker on the node, parsed; panics on text that is not JSON.
    pub fn marker(&self) -> Option<Value> {
        let text = self.marker_text()?;
        Some(serde_json::from_str(&text).expect("the marker is JSON"))
    }

    pub fn is_cordoned(&self) -> bool {
        self.node().pointer("/spec/unschedulable") == Some(&Value::Bool(true))
    }

    pub fn is_tainted(&self) -> bool {
        self.node()
            .pointer("/spec/taints")
            .and_then(Value::as_array)
            .is_some_and(|taints| {
                taints.iter().any(|t| {
                    t.get("key").and_then(Value::as_str) == Some("kube-shutdown-drain/shutdown")
                })
            })
    }

    /// The daemon's boot record (`boot-record` in the state directory).
    pub fn boot_record_path(&self) -> PathBuf {
        self.state_dir().join("boot-record")
    }

    /// The shutdown the boot record holds (announced and not cancelled), if any.
    pub fn recorded_shutdown(&self) -> Option<Value> {
        let bytes = std::fs::read(self.boot_record_path()).ok()?;
        let record: Value = serde_json::from_slice(&bytes).expect("the boot record is JSON");
        Some(record["shutdown"].clone()).filter(|s| !s.is_null())
    }

    /// Waits until the boot record holds a shutdown (`true`) or none (`false`): it is written
    /// off the daemon's shutdown path, a moment after the change.
    pub async fn expect_recorded_shutdown(&self, recorded: bool, why: &str) {
        self.expect_until(
            Duration::from_secs(5),
            |w| w.recorded_shutdown().is_some() == recorded,
            why,
        )
        .await;
    }

    /// Waits until the boot record holds the end of its shutdown: the daemon records it off the
    /// shutdown path, and the lock may go before a slow disk finished the write
    /// (`budget::WRITE_ALLOWANCE`); a machine that went down before then ended "during the
    /// drain", which a test of what comes after an ended drain does not want.
    pub async fn expect_recorded_end(&self, why: &str) {
        self.expect_until(
            Duration::from_secs(10),
            |w| w.recorded_shutdown().is_some_and(|s| !s["end"].is_null()),
            why,
        )
        .await;
    }

    /// Kills the daemon (SIGKILL) and starts it again at once, as systemd's restart would.
    pub fn restart_daemon(&mut self) {
        self.kill_daemon();
        self.spawn_daemon();
    }

    /// Adds a third `web` replica on the other node: the `web` budget opens.
    pub fn open_web_budget(&self) {
        self.api
            .store()
            .upsert(third_web_replica())
            .expect("open the budget");
    }

    /// Only the pods a drain keeps ([`STAYING`]) are left on the node.
    pub fn is_drained(&self) -> bool {
        let mut pods = self.pods_on_node();
        pods.sort();
        pods == STAYING
    }

    /// Neither cordoned nor tainted by us.
    pub fn is_restored(&self) -> bool {
        !self.is_cordoned() && !self.is_tainted()
    }

    /// Asserts the current run's log comes to contain `needle` within `within`; the failure
    /// message is `why` and the log.
    pub async fn expect_log(&self, needle: &str, within: Duration, why: &str) {
        assert!(
            self.wait_log(needle, within).await,
            "{why} (no {needle:?} within {within:?}); log:\n{}",
            self.log()
        );
    }

    /// Asserts `check` comes to hold within `within`; the failure message is `why` and the log.
    pub async fn expect_until(
        &self,
        within: Duration,
        check: impl FnMut(&World) -> bool,
        why: &str,
    ) {
        assert!(
            self.wait_until(within, check).await,
            "{why}; log:\n{}",
            self.log()
        );
    }

    /// Called right after the bus comes back: asserts the new fake logind granted the daemon a
    /// lock within 5 s, and that then exactly one lock of ours is held (logind keeps locks across
    /// a bus restart, so an old lock the daemon did not close would still count); prints how
    /// long it took after `what`.
    pub async fn expect_lock_back(&self, why: &str, what: &str) {
        let since = Instant::now();
        let deadline = since + Duration::from_secs(5);
        while self.rig.our_grants().await == 0 {
            assert!(Instant::now() < deadline, "{why}; log:\n{}", self.log());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        println!("lock back {} ms after {what}", since.elapsed().as_millis());
        self.expect_locks(
            1,
            Duration::from_secs(5),
            "two locks of ours after the reconnect: the old one was never closed",
        )
        .await;
        // And it stays one: the old lock is closed, not merely not counted yet.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            self.rig.our_locks().await,
            1,
            "the daemon holds more than one lock after the reconnect; log:\n{}",
            self.log()
        );
    }

    /// Asserts only the pods a drain keeps are left on the node within `within`.
    pub async fn expect_drained(&self, within: Duration, why: &str) {
        self.expect_until(within, World::is_drained, why).await;
    }

    /// Asserts the node comes to be neither cordoned nor tainted within `within`.
    pub async fn expect_restored(&self, within: Duration, why: &str) {
        self.expect_until(within, World::is_restored, why).await;
    }

    /// Asserts logind counts `want` locks of ours within `within`.
    pub async fn expect_locks(&self, want: usize, within: Duration, why: &str) {
        assert!(
            self.rig.wait_locks(want, within).await,
            "{why}; log:\n{}",
            self.log()
        );
    }

    /// Asks logind for a reboot and asserts the drain comes to wait on the `web` budget.
    pub async fn reboot_until_stuck_on_the_budget(&self) {
        self.rig.reboot().await;
        self.expect_log(
            "refused (429)",
            Duration::from_secs(10),
            "the drain waits on the web budget",
        )
        .await;
    }

    /// Asserts logind's first outcome comes within `within` and is a release; returns it.
    pub async fn expect_released(&self, within: Duration) -> Outcome {
        let outcome = self
            .rig
            .wait_outcome(0, within)
            .await
            .unwrap_or_else(|| panic!("no logind outcome; log:\n{}", self.log()));
        assert_eq!(
            outcome.what,
            "released",
            "{}; log:\n{}",
            outcome.line,
            self.log()
        );
        outcome
    }

    /// The fake API server's request log as evidence of a drain of the node: a cordon
    /// (`unschedulable: true`), our taint added, and an accepted eviction of each of `evicted`
    /// (`namespace/name`). `Err` names what is missing.
    pub fn drain_requests(&self, evicted: &[&str]) -> Result<(), String> {
        let node_path = format!("/api/v1/nodes/{NODE}");
        let patches: Vec<_> = self
            .api
            .recorder()
            .matching("PATCH", &node_path)
            .into_iter()
            .filter(|r| r.status < 300)
            .collect();
        let mut missing = Vec::new();
        if !patches.iter().any(|r| sets_unschedulable(&r.body)) {
            missing.push("no accepted cordon PATCH".to_owned());
        }
        if !patches
            .iter()
            .any(|r| r.body.contains("kube-shutdown-drain/shutdown"))
        {
            missing.push("no accepted PATCH adding our taint".to_owned());
        }
        for pod in evicted {
            let (namespace, name) = pod.split_once('/').expect("namespace/name");
            let path = format!("/namespaces/{namespace}/pods/{name}/eviction");
            if !self
                .api
                .recorder()
                .matching("POST", &path)
                .iter()
                .any(|r| r.status < 300)
            {
                missing.push(format!("no accepted eviction of {pod}"));
            }
        }
        if missing.is_empty() {
            Ok(())
        } else {
            Err(missing.join("; "))
        }
    }

    /// Asserts the request log shows the node cordoned, tainted and `evicted` evicted.
    pub fn assert_drain_requests(&self, evicted: &[&str]) {
        if let Err(missing) = self.drain_requests(evicted) {
            panic!(
                "the request log shows no drain: {missing}; log:\n{}",
                self.log()
            );
        }
    }

    /// Asserts logind never granted our daemon a lock and never refused it one: the daemon did
    /// not ask during the shutdown, so nothing waited on a lock of ours.
    pub async fn assert_never_asked_for_a_lock(&self, why: &str) {
        let granted = self.rig.granted().await;
        let refused = self.rig.refused().await;
        assert!(
            self.rig.our_grants().await == 0 && self.rig.our_refusals().await == 0,
            "{why}: granted {granted:?}, refused {refused:?}; log:\n{}",
            self.log()
        );
    }

    /// `kube-shutdown-drain status --output json` as an admin runs it on the node (a child the
    /// test's runtime awaits, so the fake API server in it can answer).
    pub async fn status_json(&self) -> Value {
        status_json(
            &self.config_path(),
            &self.boot_id_path(),
            self.rig.address(),
        )
        .await
    }

    /// Who holds the first drain slot of group `all`, if anyone.
    pub fn slot_holder(&self) -> Option<String> {
        self.api
            .store()
            .get("Lease", Some("kube-shutdown-drain"), SLOT)
            .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_string))
    }

    /// `demo-node-2` in the boot its Node reports: a slot holder that is not stale.
    pub fn other_holder(&self) -> String {
        let node = self
            .api
            .store()
            .get("Node", None, OTHER)
            .expect("the demo seed has demo-node-2");
        let boot = node["status"]["nodeInfo"]["bootID"]
            .as_str()
            .filter(|b| !b.is_empty())
            .unwrap_or("0b0e1d00-0000-4000-8000-0000000000b2");
        format!("{OTHER}/{boot}")
    }

    /// The Events the fake API server stores about the node with this reason.
    pub fn node_events(&self, reason: &str) -> Vec<Value> {
        self.api
            .store()
            .list("Event", None)
            .into_iter()
            .filter(|e| {
                e.pointer("/involvedObject/name").and_then(Value::as_str) == Some(NODE)
                    && e.get("reason").and_then(Value::as_str) == Some(reason)
            })
            .collect()
    }

    /// The last report the daemon wrote to its state directory, as JSON.
    pub fn last_report(&self) -> Option<Value> {
        let text = std::fs::read_to_string(self.state_dir().join("last-report.json")).ok()?;
        Some(serde_json::from_str(&text).expect("last-report.json is JSON"))
    }

    /// The last report, once the daemon wrote it: the report file is written off the shutdown
    /// path, and the lock may go before a slow disk finished it (`budget::WRITE_ALLOWANCE`).
    pub async fn expect_report(&self, why: &str) -> Value {
        self.expect_until(Duration::from_secs(10), |w| w.last_report().is_some(), why)
            .await;
        self.last_report().expect("the report just seen")
    }

    /// Waits for `check` to hold, polling every 20 ms.
    pub async fn wait_until(
        &self,
        within: Duration,
        mut check: impl FnMut(&World) -> bool,
    ) -> bool {
        let deadline = Instant::now() + within;
        loop {
            if check(self) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for World {
    fn drop(&mut self) {
        self.notify_drain.abort();
        self.kill_daemon();
        // A request the shipped rbac.yaml does not allow fails the test (unless the test
        // provoked it and cleared the record: `world.api.clear_denials()`).
        let denials = self.api.denials();
        if !std::thread::panicking() && !denials.is_empty() {
            let list: Vec<String> = denials.iter().map(ToString::to_string).collect();
            panic!(
                "the shipped rbac.yaml does not allow what the daemon of node {NODE} asked:\n  {}",
                list.join("\n  ")
            );
        }
    }
}

/// Whether a PATCH body cordons: a JSON patch with an op setting `/spec/unschedulable` to true,
/// or a merge/strategic patch with `spec.unschedulable: true`.
fn sets_unschedulable(body: &str) -> bool {
    match serde_json::from_str::<serde_json::Value>(body) {
        Ok(serde_json::Value::Array(ops)) => ops.iter().any(|op| {
            matches!(op["op"].as_str(), Some("add" | "replace"))
                && op["path"] == "/spec/unschedulable"
                && op["value"] == true
        }),
        Ok(patch) => patch["spec"]["unschedulable"] == true,
        Err(_) => false,
    }
}

/// `kube-shutdown-drain status --output json` with `config`, the boot-ID file `boot_id` and the
/// system bus at `bus`.
pub async fn status_json(config: &Path, boot_id: &Path, bus: &str) -> Value {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_kube-shutdown-drain"))
        .args(["status", "--output", "json"])
        .env("KUBE_SHUTDOWN_DRAIN_CONFIG", config)
        .env(BOOT_ID_ENV, boot_id)
        .env("DBUS_SYSTEM_BUS_ADDRESS", bus)
        .output()
        .await
        .expect("run status");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("status JSON")
}
