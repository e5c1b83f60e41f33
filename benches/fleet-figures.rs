//! Prints the README's fleet figures (issue 20): 20 nodes of one fake API server reboot
//! together, each the way `kube-shutdown-drain reboot` does (wait for a drain slot, prepare and
//! drain, reboot: here a pause, then the boot's restore, which gives the slot back), announced
//! within one second. One `web` ReplicaSet has a pod on every node, under one budget
//! (`maxUnavailable: 2`) that spans them all. The same run with `[fleet] slots = 2` and with the
//! fleet off. Every figure comes from the API server's own record of requests: the most nodes
//! cordoned at once (from each node's prepare PATCH to its restore PATCH), evictions the budget
//! refused (429), the time until every node was drained and restored, and the slot hand-off
//! (a slot given back to the next node's take of it).
//!
//! The nodes are engines on one runtime (what the daemon and the CLI run), not 20 daemons with
//! their own buses: the slot protocol is the engine's, and logind has no part in a `reboot`'s
//! drain.
//!
//! Run: `cargo bench --bench fleet-figures` (figures, never assertions). Under
//! `cargo test --all-targets` (no `--bench` argument) it only says how to run it.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kube_shutdown_drain::config::Settings;
use kube_shutdown_drain::engine::Engine;
use kube_shutdown_drain::fleet::slots::Taken;
use serde_json::json;
use tokio::time::Instant;

#[path = "../tests/engine_support/mod.rs"]
mod engine_support;
use engine_support::*;

const NODES: usize = 20;
/// What a node's reboot takes here, between its drain and its restore.
const REBOOT: Duration = Duration::from_secs(1);
/// Each node's drain timeout (`--drain-timeout`).
const DRAIN: Duration = Duration::from_secs(10);

fn name(i: usize) -> String {
    format!("fleet-{i:02}")
}

fn settings_for(c: &Cluster, kubeconfig: &Path, node: &str, slots: u32) -> Arc<Settings> {
    let text = format!(
        "node_name = \"{node}\"\nkubeconfig = \"{}\"\nstate_dir = \"{}\"\nrequest_timeout = \"5s\"\n\
         [drain]\nretry_interval = \"1s\"\n[fleet]\nslots = {slots}\n",
        kubeconfig.display(),
        c.dir.path().join(format!("state-{node}")).display()
    );
    let mut s = Settings::from_str_at(Path::new("/bench/config.toml"), &text).expect("settings");
    s.boot_id_path = c.dir.path().join("boot_id");
    Arc::new(s)
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

/// One node's reboot: slot, drain, the reboot's pause, restore.
async fn reboot(settings: Arc<Settings>, after: Duration) {
    tokio::time::sleep(after).await;
    let engine = Engine::new(settings).expect("engine");
    if engine.settings().fleet.slots > 0 {
        let until = Instant::now() + Duration::from_secs(600);
        match engine.wait_for_slot(until).await {
            Ok(Taken::Slot(_)) => {}
            other => panic!("no slot: {other:?}"),
        }
    }
    let (prepared, _report) = engine
        .prepare_and_drain("reboot", Instant::now() + DRAIN, |_| {})
        .await;
    prepared.expect("prepared");
    tokio::time::sleep(REBOOT).await;
    engine.restore().await.expect("restored");
}

struct Figures {
    max_cordoned: usize,
    refused: usize,
    evictions: usize,
    total: Duration,
    handoffs: Vec<f64>,
}

fn figures(c: &Cluster, total: Duration) -> Figures {
    let requests = c.server.recorder().requests();
    // Each node's cordoned interval, from the server's record: prepare PATCH to restore PATCH.
    let mut edges: Vec<(f64, i32)> = Vec::new();
    for r in &requests {
        if r.method != "PATCH" || !r.path.starts_with("/api/v1/nodes/") || r.status >= 300 {
            continue;
        }
        if r.body
            .contains("\"path\":\"/spec/unschedulable\",\"value\":true")
        {
            edges.push((r.elapsed, 1));
        } else if r
            .body
            .contains("\"op\":\"remove\",\"path\":\"/spec/unschedulable\"")
        {
            edges.push((r.elapsed, -1));
        }
    }
    edges.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let (mut now, mut max_cordoned) = (0i32, 0i32);
    for (_, d) in edges {
        now += d;
        max_cordoned = max_cordoned.max(now);
    }
    let evictions: Vec<_> = requests
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/eviction"))
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
    Figures {
        max_cordoned: usize::try_from(max_cordoned).unwrap_or(0),
        refused: evictions.iter().filter(|r| r.status == 429).count(),
        evictions: evictions.len(),
        total,
        handoffs,
    }
}

async fn run(slots: u32) -> Figures {
    let c = cluster().await;
    // Written once: every node reads it while the others start.
    let kubeconfig = c.kubeconfig("admin");
    let started = Instant::now();
    let mut all = tokio::task::JoinSet::new();
    for i in 0..NODES {
        // Announced within one second, in no particular order.
        let after = Duration::from_millis(((i * 7919) % NODES) as u64 * 50);
        all.spawn(reboot(
            settings_for(&c, &kubeconfig, &name(i), slots),
            after,
        ));
    }
    while let Some(done) = all.join_next().await {
        done.expect("a node's reboot");
    }
    figures(&c, started.elapsed())
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
    println!(
        "{label}: at most {} nodes cordoned at once; {} of {} evictions refused by the budget; \
         all {NODES} drained and restored in {:.1} s; slot hand-off {handoff}",
        f.max_cordoned,
        f.refused,
        f.evictions,
        f.total.as_secs_f64()
    );
}

#[tokio::main]
async fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("run with: cargo bench --bench fleet-figures");
        return;
    }
    let slots = run(2).await;
    line("[fleet] slots = 2", &slots);
    let off = run(0).await;
    line("fleet off       ", &off);
}
