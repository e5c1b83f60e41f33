//! Benchmark: drain a node with many pods on the fake API server, with our binary and with
//! `kubectl.1.32 drain`, and PRINT wall time, API requests and peak memory. Numbers, never
//! assertions: the machine is shared and noisy.
//!
//! Run: `cargo bench --bench bench-drain -- [--pods N] [--no-kubectl] [--no-pdb]` (default 1000
//! pods, with a PodDisruptionBudget over 40 of them).
//! Under `cargo test --all-targets` (no `--bench` argument) it only says how to run it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fake_apiserver::store::set_pod_ready_in;
use fake_apiserver::{FakeApiServer, Options, RecordedRequest, TERMINATION_ANNOTATION};
use serde_json::{Value, json};

#[path = "../tests/engine_support/mod.rs"]
mod engine_support;
use engine_support::{is_discovery, kubectl_132};

const NODE: &str = "node-a";

/// The scenario: `n` ReplicaSet pods in 4 namespaces, each taking 0-2 s to terminate
/// (deterministic), 1 in 50 with an emptyDir, and in namespace `ns-0` a PDB with
/// `maxUnavailable: 2` over the first 40 pods, so evictions queue behind the budget.
fn seed(n: usize, with_pdb: bool) -> Vec<Value> {
    let mut objects = vec![
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE}, "spec": {},
               "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-b"}, "spec": {},
               "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
               "metadata": {"name": "budget", "namespace": "ns-0"},
               "spec": {"maxUnavailable": 2, "selector": {"matchLabels": {"budget": "yes"}}}}),
    ];
    for ns in 0..4 {
        objects.push(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": format!("ns-{ns}")}}));
    }
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    for i in 0..n {
        // xorshift: a fixed pseudo-random termination time per pod.
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let termination = (x % 2001) as f64 / 1000.0;
        let ns = format!("ns-{}", i % 4);
        let mut labels = json!({"app": format!("app-{}", i % 25)});
        if with_pdb && ns == "ns-0" && i < 160 {
            labels["budget"] = json!("yes");
        }
        let mut pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("pod-{i:05}"), "namespace": ns, "labels": labels,
                "annotations": {TERMINATION_ANNOTATION: termination.to_string()},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "rs-uid", "controller": true}]},
            "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "busybox"}], "terminationGracePeriodSeconds": 30},
        });
        if i % 50 == 7 {
            pod["spec"]["volumes"] = json!([{"name": "scratch", "emptyDir": {}}]);
        }
        set_pod_ready_in(&mut pod, true);
        objects.push(pod);
    }
    objects
}

struct Measured {
    wall: Duration,
    requests: Vec<RecordedRequest>,
    max_rss_kb: Option<u64>,
    ok: bool,
}

/// Runs `program args` under /usr/bin/time (for the peak RSS) when it exists.
async fn measure(
    server: &FakeApiServer,
    program: &Path,
    args: &[String],
    scratch: &Path,
) -> Measured {
    let time = Path::new("/usr/bin/time");
    let rss_file = scratch.join("rss");
    let mut cmd = if time.exists() {
        let mut c = tokio::process::Command::new(time);
        c.arg("-f").arg("%M").arg("-o").arg(&rss_file).arg(program);
        c
    } else {
        tokio::process::Command::new(program)
    };
    cmd.args(args)
        .env("KUBE_SHUTDOWN_DRAIN_LOG", "error")
        .env_remove("JOURNAL_STREAM")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    server.recorder().clear();
    let started = Instant::now();
    let out = cmd.output().await.expect("the program runs");
    let wall = started.elapsed();
    if !out.status.success() {
        eprintln!(
            "{} exited with {}: {}",
            program.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let max_rss_kb = std::fs::read_to_string(&rss_file)
        .ok()
        .and_then(|s| s.trim().lines().last()?.trim().parse().ok());
    Measured {
        wall,
        requests: server.recorder().requests(),
        max_rss_kb,
        ok: out.status.success(),
    }
}

fn row(name: &str, m: &Measured) {
    let evictions = m
        .requests
        .iter()
        .filter(|r| r.path.ends_with("/eviction"))
        .count();
    let refused = m
        .requests
        .iter()
        .filter(|r| r.path.ends_with("/eviction") && r.status == 429)
        .count();
    let pod_gets = m
        .requests
        .iter()
        .filter(|r| r.method == "GET" && r.path.contains("/pods/"))
        .count();
    let discovery = m.requests.iter().filter(|r| is_discovery(r)).count();
    println!(
        "| {name:<22} | {:>8.2} | {:>8} | {:>9} | {:>9} | {:>8} | {:>9} | {:>10} | {:>3} |",
        m.wall.as_secs_f64(),
        m.requests.len(),
        discovery,
        evictions,
        refused,
        pod_gets,
        m.max_rss_kb
            .map_or("-".to_string(), |k| format!("{:.1}", k as f64 / 1024.0)),
        if m.ok { "ok" } else { "ERR" }
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if !args.iter().any(|a| a == "--bench") {
        println!(
            "bench-drain: run with `cargo bench --bench bench-drain -- [--pods N] [--no-kubectl] [--no-pdb]`"
        );
        return;
    }
    let pods = args
        .iter()
        .position(|a| a == "--pods")
        .and_then(|i| args.get(i + 1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(1000usize);
    let with_kubectl = !args.iter().any(|a| a == "--no-kubectl");
    let with_pdb = !args.iter().any(|a| a == "--no-pdb");
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(async move {
        let scratch = tempfile::tempdir().expect("a temp dir");
        let budget = if with_pdb { format!("a PDB maxUnavailable=2 over {} pods", pods.min(160) / 4) } else { "no PDB".to_string() };
        println!("drain of {pods} pods (terminations 0-2 s, {budget}) on the fake API server");
        println!("| {:<22} | {:>8} | {:>8} | {:>9} | {:>9} | {:>8} | {:>9} | {:>10} | {:>3} |", "program", "wall s", "requests", "discovery", "evictions", "429s", "pod GETs", "max RSS MiB", "rc");
        println!("|{}|", "-".repeat(110));

        let ours = FakeApiServer::start(Options { port: 0, seed: seed(pods, with_pdb) }).await.expect("fake server");
        let kc = scratch.path().join("kubeconfig");
        ours.write_kubeconfig(&kc, "admin").expect("kubeconfig");
        let config = scratch.path().join("config.toml");
        std::fs::write(
            &config,
            format!(
                "node_name = \"{NODE}\"\nkubeconfig = \"{}\"\nstate_dir = \"{}\"\n[drain]\ntimeout = \"10m\"\n",
                kc.display(),
                scratch.path().join("state").display()
            ),
        )
        .expect("config");
        let bin = PathBuf::from(env!("CARGO_BIN_EXE_kube-shutdown-drain"));
        let args = vec!["--config".to_string(), config.display().to_string(), "drain".into(), "--output".into(), "json".into()];
        let m = measure(&ours, &bin, &args, scratch.path()).await;
        row("kube-shutdown-drain", &m);
        drop(ours);

        if !with_kubectl {
            return;
        }
        let Some(kubectl) = kubectl_132() else {
            println!("kubectl.1.32 not found; no comparison");
            return;
        };
        let theirs = FakeApiServer::start(Options { port: 0, seed: seed(pods, with_pdb) }).await.expect("fake server");
        let kc = scratch.path().join("kubeconfig-kubectl");
        theirs.write_kubeconfig(&kc, "admin").expect("kubeconfig");
        let args: Vec<String> = [
            "--kubeconfig", &kc.display().to_string(), "--cache-dir", &scratch.path().join("cache").display().to_string(),
            "drain", NODE, "--ignore-daemonsets", "--delete-emptydir-data", "--force", "--timeout=10m",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let m = measure(&theirs, &kubectl, &args, scratch.path()).await;
        row("kubectl.1.32 drain", &m);
    });
}
