//! Prints docs/benchmarks.md's fleet figures (issue 20): 20 nodes of one fake API server reboot
//! together, each a machine of its own: the real `kube-shutdown-drain run` daemon on a private
//! bus with the fake logind (`tests/logind`), a boot ID and a state directory. One `web`
//! ReplicaSet has a pod on every node, under one budget (`maxUnavailable: 2`) that spans them
//! all. Three runs, the reboots asked for within one second (and a fifth, below):
//!
//! - `[fleet] slots = 2`, each node rebooted with `kube-shutdown-drain reboot` (wait for a drain
//!   slot, drain, ask logind; the daemon finds the node drained and lets the shutdown go);
//! - the fleet off, the same command with `--force` (a drain cut at its timeout reboots anyway,
//!   as every node's shutdown would);
//! - `[fleet] slots = 2` with a plain `systemctl reboot` on every node (logind announces at
//!   once; the daemons wait half their budget for a slot, then `on_no_slot = "cordon"`).
//!
//! A reboot is the fake logind's shutdown ending, the daemon killed (the machine going down), a
//! new boot ID, a pause, the daemon started again: its boot restore uncordons the node and gives
//! the slot back. Every figure comes from the API server's own record of requests: the most
//! nodes cordoned at once (each node's prepare PATCH to its restore PATCH), the most nodes
//! drained at once (each node's first accepted eviction, told apart by the User-Agent that names
//! the node, to its restore PATCH), evictions the budget refused (429), the time until every node was restored, and
//! the slot hand-off (a slot given back to the next node's take of it).
//!
//! A fourth run, the herd at a hand-off (issue 31), needs no machines: 200 slot takers
//! ([`Slots::take`], each with its own node name and client) on one runtime against the fake API
//! server wait for `[fleet] slots = 2`, held by two more takers. Each taker that gets a slot holds
//! it 100 ms and gives it back; after 20 hand-offs the run stops. From the server's record: the
//! Lease writes per hand-off (slot takes accepted and refused, give-backs, any other Lease write)
//! and the hand-off latency (a slot given back to the next accepted take of it).
//!
//! A fifth run (issue 31): the reboots the nodes ask for. Every node's daemon watches a sentinel
//! file (`[reboot] sentinel_file`), `[fleet] slots = 2`, `release_delay = "2s"`; the 20 files
//! appear within one second, and each daemon waits for a slot, drains, asks its logind to
//! reboot, and after the boot keeps its slot 2 s more. Besides the figures above, the time from
//! each node's restore to its slot's give-back. A sixth run (issue 42) is the fifth with a
//! budget that heals after a set time: after each restore three `web` replicas fall behind for
//! 4 s, so each slot waits for the budget's health (`[fleet] settle_max`) past its 2 s delay.
//!
//! Run: `cargo bench --bench fleet-figures` (a release build), or
//! `cargo test --bench fleet-figures -- --bench` (debug); add `herd` after `--` (or after
//! `--bench`) for the herd run alone, `sentinel` for the sentinel run alone. Figures, never assertions. Under `cargo test --all-targets`
//! (no `--bench` argument) it only says how to run it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::time::Instant;

#[path = "../tests/daemon_support/mod.rs"]
mod daemon_support;
#[path = "../tests/engine_support/mod.rs"]
mod engine_support;
#[path = "../tests/logind/mod.rs"]
mod logind;

use daemon_support::spawn_run;
use engine_support::*;

#[path = "../tests/fleet_support/taker.rs"]
mod taker;
use logind::{LogindOptions, Rig};
use taker::Taker;

const NODES: usize = 20;
/// How long a machine is down between its shutdown and its next boot.
const REBOOT: Duration = Duration::from_secs(1);

fn name(i: usize) -> String {
    format!("fleet-{i:02}")
}

/// How the nodes are rebooted.
#[derive(Clone, Copy, PartialEq)]
enum How {
    /// `kube-shutdown-drain reboot`, with `--force` when the flag is set.
    Command { force: bool },
    /// logind's `Reboot`, as `systemctl reboot` calls it.
    Systemctl,
    /// The node asks for it (`[reboot] sentinel_file`, as unattended-upgrades leaves
    /// `/run/reboot-required`): the daemon takes a slot, drains, then calls logind's `Reboot`;
    /// after the restore the slot is kept for `[fleet] release_delay`.
    Sentinel,
    /// As [`How::Sentinel`], and after each node's restore three `web` replicas on other nodes
    /// fall behind for [`HEAL`] (a storage rebuild catching up): the budget is short, so the
    /// slot waits for its health (`[fleet] settle_max`).
    Healing,
}

impl How {
    /// The node asks for its reboot (`[reboot] sentinel_file`).
    fn by_sentinel(self) -> bool {
        matches!(self, How::Sentinel | How::Healing)
    }
}

/// How long the `web` budget stays short after each restore in the [`How::Healing`] run.
const HEAL: Duration = Duration::from_secs(4);
/// How many `web` replicas fall behind then: one more than the budget's `maxUnavailable`.
const BEHIND: usize = 3;

/// `[fleet] release_delay` of the sentinel run.
const RELEASE_DELAY: Duration = Duration::from_secs(2);

/// One node's machine: its bus and fake logind, its files, its daemon.
struct Machine {
    name: String,
    rig: Rig,
    dir: tempfile::TempDir,
    daemon: Option<Child>,
    boots: usize,
}

impl Machine {
    async fn start(kubeconfig: &Path, i: usize, slots: u32, how: How) -> Option<Machine> {
        let rig = Rig::start(LogindOptions::default()).await?;
        let dir = tempfile::Builder::new()
            .prefix("ksd-fleet-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .expect("a machine's directory");
        let name = name(i);
        let sentinel = if how.by_sentinel() {
            format!(
                "release_delay = \"{}s\"\n[reboot]\nsentinel_file = \"{}\"\n",
                RELEASE_DELAY.as_secs(),
                dir.path().join("reboot-required").display()
            )
        } else {
            String::new()
        };
        let config = format!(
            "node_name = \"{name}\"\nkubeconfig = \"{}\"\nstate_dir = \"{}\"\n\
             request_timeout = \"5s\"\n\
             [drain]\ntimeout = \"10s\"\nretry_interval = \"1s\"\n\
             [daemon]\nrestore_ready_timeout = \"20s\"\n\
             [fleet]\nslots = {slots}\n{sentinel}",
            kubeconfig.display(),
            dir.path().join("state").display()
        );
        std::fs::write(dir.path().join("config.toml"), config).expect("write the config");
        std::fs::create_dir_all(dir.path().join("shutdown")).expect("the schedule dir");
        // The first boot is this machine's own: `reboot` (the CLI) reads the kernel's boot ID,
        // and the daemon must find the node drained by its boot.
        let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id").expect("boot_id");
        std::fs::write(dir.path().join("boot_id"), boot).expect("write the boot id");
        let mut m = Machine {
            name,
            rig,
            dir,
            daemon: None,
            boots: 0,
        };
        m.spawn_daemon();
        Some(m)
    }

    fn config(&self) -> PathBuf {
        self.dir.path().join("config.toml")
    }

    fn log(&self) -> PathBuf {
        self.dir.path().join(format!("daemon-{}.log", self.boots))
    }

    fn spawn_daemon(&mut self) {
        self.boots += 1;
        let log = std::fs::File::create(self.log()).expect("a log file");
        let mut command = Command::new(env!("CARGO_BIN_EXE_kube-shutdown-drain"));
        command
            .env_remove("JOURNAL_STREAM")
            .env_remove("NOTIFY_SOCKET");
        let child = spawn_run(
            command,
            &self.config(),
            self.rig.address(),
            &self.dir.path().join("boot_id"),
            &self.dir.path().join("shutdown"),
            log,
        );
        self.daemon = Some(child);
    }

    fn kill_daemon(&mut self) {
        if let Some(mut child) = self.daemon.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Waits until the daemon holds its delay lock.
    async fn wait_lock(&self) {
        if !self.rig.wait_locks(1, Duration::from_secs(30)).await {
            panic!("{}: the daemon took no lock; {}", self.name, self.tail());
        }
    }

    fn tail(&self) -> String {
        let log = std::fs::read_to_string(self.log()).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        format!(
            "log {}:\n{}",
            self.log().display(),
            lines[lines.len().saturating_sub(15)..].join("\n")
        )
    }

    /// The shutdown asked for `how`, its end at logind, and the next boot.
    async fn reboot(mut self, how: How, after: Duration) -> Machine {
        tokio::time::sleep(after).await;
        match how {
            How::Command { force } => {
                let mut args = vec!["reboot", "--slot-timeout", "10m"];
                if force {
                    args.push("--force");
                }
                let r = cli_on_bus(&self.config(), &args, self.rig.address()).await;
                assert_eq!(
                    r.code, 0,
                    "{}: reboot failed\n{}\n{}",
                    self.name, r.stdout, r.stderr
                );
            }
            How::Systemctl => self.rig.reboot().await,
            How::Sentinel | How::Healing => {
                std::fs::write(self.dir.path().join("reboot-required"), "").expect("the sentinel")
            }
        }
        // A node that asks waits for its turn: up to every other node's drain and delay.
        let turn = if how.by_sentinel() { 300 } else { 60 };
        match self.rig.wait_outcome(0, Duration::from_secs(turn)).await {
            Some(o) if o.what == "released" => {}
            other => panic!(
                "{}: logind's shutdown: {other:?}; {}",
                self.name,
                self.tail()
            ),
        }
        self.kill_daemon();
        // /run is new after a reboot: the sentinel is gone.
        let _ = std::fs::remove_file(self.dir.path().join("reboot-required"));
        self.rig.simulate_boot().await;
        let boot = format!(
            "0f1ee700-0000-4000-8000-{:012x}",
            jiff::Timestamp::now().as_nanosecond() & 0xffff_ffff_ffff
        );
        std::fs::write(self.dir.path().join("boot_id"), boot).expect("a new boot id");
        tokio::time::sleep(REBOOT).await;
        self.spawn_daemon();
        self
    }
}

impl Drop for Machine {
    fn drop(&mut self) {
        self.kill_daemon();
    }
}

async fn cluster() -> Cluster {
    let mut objects = vec![
        json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
               "metadata": {"name": "rs1", "namespace": NS, "uid": "rs1-uid"},
               "spec": {"replicas": NODES, "selector": {"matchLabels": {"app": "web"}},
                        "template": {"metadata": {"labels": {"app": "web"}},
                                     "spec": {"containers": [{"name": "c", "image": "web"}]}}}}),
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
               "metadata": {"name": "web", "namespace": NS},
               "spec": {"maxUnavailable": 2, "selector": {"matchLabels": {"app": "web"}}}}),
    ];
    for i in 0..NODES {
        objects.push(node(&name(i)));
        let mut p = slow_pod(NS, &format!("web-{i:02}"), &name(i), 0.5);
        p["metadata"]["labels"] = json!({"app": "web"});
        objects.push(p);
    }
    Cluster::start(objects).await
}

/// Whether every node is restored: no marker, not cordoned, and no slot Lease held (the
/// kubelets' Leases in `kube-node-lease` are not slots).
fn all_restored(c: &Cluster) -> bool {
    let store = c.server.store();
    let nodes_back = (0..NODES).all(|i| {
        let n = c.node(&name(i));
        marker_text(&n).is_none() && !unschedulable(&n)
    });
    let slots_free = store
        .list("Lease", Some("kube-shutdown-drain"))
        .iter()
        .all(|l| {
            l.pointer("/spec/holderIdentity")
                .and_then(Value::as_str)
                .is_none_or(str::is_empty)
        });
    nodes_back && slots_free
}

struct Figures {
    max_cordoned: usize,
    /// The most nodes out at once after evicting: from a first eviction to the restore.
    max_drained: usize,
    /// Nodes with at least one eviction accepted.
    drained: usize,
    refused: usize,
    evictions: usize,
    total: Duration,
    handoffs: Vec<f64>,
    /// From each node's restore to its slot's give-back, in s (`release_delay`).
    settle: Vec<f64>,
}

/// The most intervals open at once; an interval ends after one that starts at the same time.
fn most_at_once(mut edges: Vec<(f64, i32)>) -> usize {
    edges.sort_by(|a, b| a.0.total_cmp(&b.0).then(b.1.cmp(&a.1)));
    let (mut now, mut most) = (0i32, 0i32);
    for (_, d) in edges {
        now += d;
        most = most.max(now);
    }
    usize::try_from(most).unwrap_or(0)
}

/// The node a request of ours names in its User-Agent (`...; node NAME)`).
fn node_of(r: &fake_apiserver::RecordedRequest) -> Option<&str> {
    let ua = r.user_agent.as_deref()?;
    ua.rsplit_once("; node ")?.1.strip_suffix(')')
}

fn figures(c: &Cluster, total: Duration) -> Figures {
    let requests = c.server.recorder().requests();
    // Each node's cordoned interval: prepare PATCH to restore PATCH.
    let mut cordons: Vec<(f64, i32)> = Vec::new();
    let mut restored: std::collections::BTreeMap<&str, Vec<f64>> = Default::default();
    for r in &requests {
        if r.method != "PATCH" || r.status >= 300 {
            continue;
        }
        let Some(node) = r.path.strip_prefix("/api/v1/nodes/") else {
            continue;
        };
        if r.body
            .contains("\"path\":\"/spec/unschedulable\",\"value\":true")
        {
            cordons.push((r.elapsed, 1));
        } else if r
            .body
            .contains("\"op\":\"remove\",\"path\":\"/spec/unschedulable\"")
        {
            cordons.push((r.elapsed, -1));
            restored.entry(node).or_default().push(r.elapsed);
        }
    }
    let evictions: Vec<_> = requests
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/eviction"))
        .collect();
    // Each drained node's time out of the fleet: its first eviction (the User-Agent names the
    // node) to its restore, what a slot is held for.
    let mut first: std::collections::BTreeMap<&str, f64> = Default::default();
    for r in evictions.iter().filter(|r| r.status < 300) {
        if let Some(node) = node_of(r) {
            first.entry(node).or_insert(r.elapsed);
        }
    }
    let out = first
        .iter()
        .flat_map(|(node, &from)| {
            let to = restored
                .get(node)
                .and_then(|t| t.iter().copied().find(|&t| t > from))
                .unwrap_or(f64::INFINITY);
            [(from, 1), (to, -1)]
        })
        .collect();
    // Hand-offs: a slot Lease given back (a patch without a holder) to its next take.
    let mut handoffs = Vec::new();
    let leases: Vec<_> = requests
        .iter()
        .filter(|r| r.path.contains("/leases/kube-shutdown-drain-slot-") && r.status < 300)
        .filter(|r| r.method == "PATCH")
        .collect();
    for (i, r) in leases.iter().enumerate() {
        if r.body.contains("holderIdentity") {
            continue;
        }
        if let Some(next) = leases[i + 1..]
            .iter()
            .find(|n| n.path == r.path && n.body.contains("holderIdentity"))
        {
            handoffs.push((next.elapsed - r.elapsed) * 1000.0);
        }
    }
    // Each node's restore to its own give-back (a slot patch without a holder, sent by it).
    let settle = restored
        .iter()
        .flat_map(|(node, times)| times.iter().map(move |&t| (*node, t)))
        .filter_map(|(node, t)| {
            requests
                .iter()
                .filter(|r| r.method == "PATCH" && r.status < 300 && r.elapsed >= t)
                .filter(|r| r.path.contains("/leases/kube-shutdown-drain-slot-"))
                .find(|r| !r.body.contains("holderIdentity") && node_of(r) == Some(node))
                .map(|r| r.elapsed - t)
        })
        .collect();
    Figures {
        settle,
        max_cordoned: most_at_once(cordons),
        max_drained: most_at_once(out),
        drained: first.len(),
        refused: evictions.iter().filter(|r| r.status == 429).count(),
        evictions: evictions.len(),
        total,
        handoffs,
    }
}

async fn run(slots: u32, how: How) -> Option<Figures> {
    let c = Arc::new(cluster().await);
    // Written once: every machine reads it.
    let kubeconfig = c.kubeconfig("admin");
    let mut starting = tokio::task::JoinSet::new();
    for i in 0..NODES {
        let kubeconfig = kubeconfig.clone();
        starting.spawn(async move { Machine::start(&kubeconfig, i, slots, how).await });
    }
    let mut machines = Vec::new();
    while let Some(m) = starting.join_next().await {
        machines.push(m.expect("a machine starts")?);
    }
    for m in &machines {
        m.wait_lock().await;
    }
    c.server.recorder().clear();
    let healing =
        (how == How::Healing).then(|| tokio::spawn(fall_behind_at_each_restore(c.clone())));
    let started = Instant::now();
    let mut all = tokio::task::JoinSet::new();
    for (i, m) in machines.into_iter().enumerate() {
        // Asked for within one second, in no particular order.
        let after = Duration::from_millis(((i * 7919) % NODES) as u64 * 50);
        all.spawn(m.reboot(how, after));
    }
    let mut machines = Vec::new();
    while let Some(m) = all.join_next().await {
        machines.push(m.expect("a node's reboot"));
    }
    let deadline = Instant::now() + Duration::from_secs(180);
    while !all_restored(&c) {
        if Instant::now() > deadline {
            let logs: Vec<String> = machines.iter().map(Machine::tail).collect();
            panic!("not every node was restored in 180 s\n{}", logs.join("\n"));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let total = started.elapsed();
    if let Some(task) = healing {
        task.abort();
    }
    Some(figures(&c, total))
}

/// At each node's restore (seen cordoned, then not), [`BEHIND`] Ready `web` replicas on nodes
/// not cordoned now go unready for [`HEAL`], then Ready again.
async fn fall_behind_at_each_restore(c: Arc<Cluster>) {
    let mut was = vec![false; NODES];
    loop {
        let now: Vec<bool> = (0..NODES)
            .map(|i| unschedulable(&c.node(&name(i))))
            .collect();
        let restored = (0..NODES).any(|i| was[i] && !now[i]);
        if restored {
            let store = c.server.store();
            let behind: Vec<String> = store
                .list("Pod", Some(NS))
                .iter()
                .filter(|p| {
                    p["status"]["conditions"].as_array().is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c["type"] == "Ready" && c["status"] == "True")
                    })
                })
                .filter(|p| {
                    let node = p["spec"]["nodeName"].as_str().unwrap_or_default();
                    (0..NODES).any(|i| name(i) == node && !now[i])
                })
                .filter_map(|p| p["metadata"]["name"].as_str().map(str::to_string))
                .take(BEHIND)
                .collect();
            for pod in &behind {
                let _ = store.set_pod_ready(NS, pod, false);
            }
            let c = c.clone();
            tokio::spawn(async move {
                tokio::time::sleep(HEAL).await;
                for pod in &behind {
                    let _ = c.server.store().set_pod_ready(NS, pod, true);
                }
            });
        }
        was = now;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn line(label: &str, f: &Figures) {
    let mut h = f.handoffs.clone();
    h.sort_by(f64::total_cmp);
    let handoff = if h.is_empty() {
        "-".to_string()
    } else {
        format!(
            "median {:.0} ms (min {:.0}, max {:.0}, {} hand-offs)",
            h[h.len() / 2],
            h[0],
            h[h.len() - 1],
            h.len()
        )
    };
    let mut s = f.settle.clone();
    s.sort_by(f64::total_cmp);
    let settle = if s.is_empty() {
        String::new()
    } else {
        format!(
            "; a restore to its slot's give-back: min {:.1} s, median {:.1} s, max {:.1} s",
            s[0],
            s[s.len() / 2],
            s[s.len() - 1]
        )
    };
    println!(
        "{label}: at most {} nodes cordoned and {} drained at once (first eviction to restore); \
         {} of {NODES} nodes drained; \
         {} of {} evictions refused by the budget; all {NODES} restored after {:.1} s; slot \
         hand-off {handoff}{settle}",
        f.max_cordoned,
        f.max_drained,
        f.drained,
        f.refused,
        f.evictions,
        f.total.as_secs_f64()
    );
}

/// Waiting slot takers in the herd run.
const TAKERS: usize = 200;
/// Hand-offs measured in the herd run.
const HANDOFFS: usize = 20;
/// How long a taker holds the slot it got.
const HOLD: Duration = Duration::from_millis(100);

/// What the server saw of the herd run's Lease requests.
struct Herd {
    /// Slot takes the server accepted: the hand-offs.
    taken: usize,
    /// Slot takes refused (409 or 422: another node got there first).
    lost: usize,
    given_back: usize,
    /// Every other Lease write (none without a queue).
    other_writes: usize,
    /// GETs and LISTs of Leases and Nodes.
    reads: usize,
    /// Slot given back to the next accepted take of it, ms.
    handoffs: Vec<f64>,
}

fn herd_figures(c: &Cluster) -> Herd {
    let requests = c.server.recorder().requests();
    let leases = "/apis/coordination.k8s.io/v1/namespaces/kube-shutdown-drain/leases";
    let writes: Vec<_> = requests
        .iter()
        .filter(|r| r.path.starts_with(leases) && r.method != "GET")
        .collect();
    let slot = |r: &&&fake_apiserver::RecordedRequest| r.path.contains("-slot-");
    let take = |r: &&&fake_apiserver::RecordedRequest| {
        slot(r) && (r.method == "POST" || r.body.contains("holderIdentity"))
    };
    let mut handoffs = Vec::new();
    let accepted: Vec<_> = writes
        .iter()
        .filter(|r| slot(r) && r.status < 300)
        .collect();
    for (i, r) in accepted.iter().enumerate() {
        if take(r) {
            continue;
        }
        if let Some(next) = accepted[i + 1..]
            .iter()
            .find(|n| n.path == r.path && take(n))
        {
            handoffs.push((next.elapsed - r.elapsed) * 1000.0);
        }
    }
    let takes: Vec<_> = writes.iter().filter(take).collect();
    Herd {
        taken: takes.iter().filter(|r| r.status < 300).count(),
        lost: takes.iter().filter(|r| r.status >= 300).count(),
        given_back: writes.iter().filter(|r| slot(r) && !take(r)).count(),
        other_writes: writes.iter().filter(|r| !slot(r)).count(),
        reads: requests
            .iter()
            .filter(|r| r.method == "GET" && !r.query.contains("watch=true"))
            .count(),
        handoffs,
    }
}

/// The herd run: `TAKERS` takers wait on two held slots; `HANDOFFS` hand-offs are measured.
async fn herd() {
    let names: Vec<String> = (0..TAKERS + 2).map(|i| format!("herd-{i:03}")).collect();
    let c = Arc::new(Cluster::start(names.iter().map(|n| node(n)).collect()).await);
    let mut takers = Vec::new();
    for name in &names {
        takers.push(Arc::new(Taker::new(&c, name, 2, "5s").await));
    }
    // The first two hold both slots before anyone waits.
    let holders: Vec<Arc<Taker>> = takers.drain(..2).collect();
    for h in &holders {
        h.take(Duration::from_secs(600)).await.expect("a free slot");
    }
    let (done_tx, mut done) = tokio::sync::mpsc::unbounded_channel();
    let mut waiting = tokio::task::JoinSet::new();
    for t in takers {
        let done_tx = done_tx.clone();
        waiting.spawn(async move {
            if t.take(Duration::from_secs(600)).await.is_some() {
                let _ = done_tx.send(());
                tokio::time::sleep(HOLD).await;
                t.give_back().await;
            }
        });
    }
    // Every taker has looked and found both slots held, and has waited long enough to join a
    // line if there is one (a node joins after 5 s, at its next look: at most 10 s).
    tokio::time::sleep(Duration::from_secs(12)).await;
    // With a line, until every taker is in it (a loaded server answers late).
    let in_line = || {
        c.server
            .store()
            .list("Lease", Some("kube-shutdown-drain"))
            .iter()
            .filter(|l| {
                l.pointer("/metadata/labels/kube-shutdown-drain~1waiting-in")
                    .is_some()
            })
            .filter(|l| l.pointer("/spec/holderIdentity").is_some_and(|h| h != ""))
            .count()
    };
    if in_line() > 0 {
        let deadline = Instant::now() + Duration::from_secs(60);
        while in_line() < TAKERS && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        println!("herd: {} of {TAKERS} takers in line", in_line());
    }
    c.server.recorder().clear();
    let started = Instant::now();
    for h in &holders {
        h.give_back().await;
    }
    for _ in 0..HANDOFFS {
        done.recv().await.expect("a taker got a slot");
    }
    let took = started.elapsed();
    // The last hand-off's losers, if any, answered.
    tokio::time::sleep(Duration::from_secs(1)).await;
    waiting.abort_all();
    let h = herd_figures(&c);
    let mut ms = h.handoffs.clone();
    ms.sort_by(f64::total_cmp);
    let per = |n: usize| n as f64 / h.taken.max(1) as f64;
    println!(
        "herd: {TAKERS} takers on 2 slots, {} hand-offs in {:.1} s: {:.1} Lease writes per \
         hand-off ({:.1} slot takes refused, {:.1} give-backs, {:.1} other Lease writes), {:.0} \
         reads per hand-off; hand-off median {:.0} ms (min {:.0}, max {:.0})",
        h.taken,
        took.as_secs_f64(),
        per(h.taken + h.lost + h.given_back + h.other_writes),
        per(h.lost),
        per(h.given_back),
        per(h.other_writes),
        per(h.reads),
        ms.get(ms.len() / 2).copied().unwrap_or(f64::NAN),
        ms.first().copied().unwrap_or(f64::NAN),
        ms.last().copied().unwrap_or(f64::NAN),
    );
}

#[tokio::main]
async fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("run with: cargo bench --bench fleet-figures");
        return;
    }
    let only_sentinel = std::env::args().any(|a| a == "sentinel");
    if !only_sentinel {
        herd().await;
    }
    if std::env::args().any(|a| a == "herd") {
        return;
    }
    let runs = [
        (
            "[fleet] slots = 2, kube-shutdown-drain reboot",
            2,
            How::Command { force: false },
        ),
        (
            "fleet off, kube-shutdown-drain reboot --force",
            0,
            How::Command { force: true },
        ),
        ("[fleet] slots = 2, systemctl reboot", 2, How::Systemctl),
        (
            "[fleet] slots = 2, release_delay = 2s, a sentinel file on every node",
            2,
            How::Sentinel,
        ),
        (
            "the same, and the budget short for 4 s after each restore (3 replicas behind)",
            2,
            How::Healing,
        ),
    ];
    for (label, slots, how) in runs {
        if only_sentinel && !how.by_sentinel() {
            continue;
        }
        let Some(f) = run(slots, how).await else {
            println!("the fake logind cannot run here (python3-dbusmock, dbus-daemon)");
            return;
        };
        line(label, &f);
    }
}
