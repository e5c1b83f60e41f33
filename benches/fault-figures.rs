//! Prints docs/benchmarks.md's "Under a hostile API server" table: the fake API server's fault
//! knobs (latency, hang, the 410 knob, empty watches) against `drain`, `restore` and the daemon's
//! shutdown path (`Engine::prepare_and_drain`, what `run` calls on PrepareForShutdown). Every
//! scenario runs at once on its own fake server; the whole run takes about 15 s.
//!
//! Run: `cargo bench --bench fault-figures` (a release build; figures, never assertions). Under
//! `cargo test --all-targets` (no `--bench` argument) it only says how to run it.

use std::sync::Arc;
use std::time::Duration;

use fake_apiserver::Route;
use kube_shutdown_drain::config::Settings;
use kube_shutdown_drain::engine::Engine;
use tokio::time::Instant;

#[path = "../tests/engine_support/mod.rs"]
mod engine_support;
use engine_support::*;

fn settings(c: &Cluster, timeout: u64, request_timeout: u64) -> Arc<Settings> {
    let mut s = (*c.settings(&format!("[drain]\ntimeout = \"{timeout}s\"\n"))).clone();
    s.request_timeout = Duration::from_secs(request_timeout);
    Arc::new(s)
}

fn seconds(d: Duration) -> String {
    format!("{:.1} s", d.as_secs_f64())
}

/// `drain` (prepare, then drain, as the CLI does) with every request slowed by `latency` or
/// hung (`None`).
async fn drain(latency: Option<u64>, timeout: u64, request_timeout: u64) -> String {
    let c = Cluster::start(vec![pod(NS, "a", NODE), pod(NS, "b", NODE)]).await;
    match latency {
        Some(s) => c
            .server
            .faults()
            .add_latency(Route::any(""), Duration::from_secs(s)),
        None => c.server.faults().hang(Route::any("")),
    }
    let engine = Engine::new(settings(&c, timeout, request_timeout)).unwrap();
    let started = Instant::now();
    let deadline = started + Duration::from_secs(timeout);
    let _ = engine.prepare_by("drain by hand", deadline).await;
    let report = engine.drain(deadline).await;
    format!(
        "{} for a {timeout} s deadline ({} evicted)",
        seconds(started.elapsed()),
        report.counts.evicted
    )
}

/// `restore` with every request slowed by `latency`.
async fn restore(latency: u64, timeout: u64) -> String {
    let c = Cluster::start(vec![]).await;
    let s = settings(&c, timeout, 10);
    Engine::new(s.clone()).unwrap().prepare("x").await.unwrap();
    c.server
        .faults()
        .add_latency(Route::any(""), Duration::from_secs(latency));
    let engine = Engine::new(s).unwrap();
    let started = Instant::now();
    let r = engine
        .restore_by(started + Duration::from_secs(timeout))
        .await;
    format!(
        "{} for a {timeout} s deadline ({})",
        seconds(started.elapsed()),
        if r.is_ok() {
            "restored"
        } else {
            "not restored"
        }
    )
}

/// Pod list + watch requests a second during a 10 s drain a budget keeps blocked.
async fn watch_rate(kind: &str) -> String {
    let c = Cluster::start(vec![
        pod(NS, "guarded", NODE),
        pdb(NS, "guarded-pdb", "guarded", 1),
    ])
    .await;
    let store = c.server.store().clone();
    let ticker = match kind {
        "410" => {
            c.server
                .faults()
                .add_latency(Route::new("GET", "watch=true"), Duration::from_millis(100));
            Some(tokio::spawn(async move {
                for i in 0u64.. {
                    let _ = store.modify("Node", None, OTHER_NODE, |n| {
                        n["metadata"]["labels"] = serde_json::json!({"tick": i.to_string()})
                    });
                    store.expire_resource_versions();
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }))
        }
        _ => {
            c.server
                .faults()
                .fail_next(Route::new("GET", "watch=true"), 1_000_000, 204);
            None
        }
    };
    let engine = Engine::new(settings(&c, 10, 10)).unwrap();
    let started = Instant::now();
    engine.drain(started + Duration::from_secs(10)).await;
    let took = started.elapsed().as_secs_f64();
    if let Some(t) = ticker {
        t.abort();
    }
    let n = c.server.recorder().matching("GET", "/api/v1/pods").len();
    format!("{:.1} requests/s ({n} in {took:.1} s)", n as f64 / took)
}

/// The daemon's shutdown path under 3 s latency and a 10 s budget: when the node was cordoned,
/// when the first eviction reached the server, and how many pods had gone when it returned.
async fn daemon_prepare() -> String {
    let c = Cluster::start(vec![
        pod(NS, "a", NODE),
        pod(NS, "b", NODE),
        pod(NS, "c", NODE),
    ])
    .await;
    c.server
        .faults()
        .add_latency(Route::any(""), Duration::from_secs(3));
    let engine = Engine::new(settings(&c, 10, 10)).unwrap();
    let started = Instant::now();
    let wall = std::time::SystemTime::now();
    let store = c.server.store().clone();
    let cordoned = tokio::spawn(async move {
        loop {
            let node = store.get("Node", None, NODE).unwrap();
            if node["spec"]["unschedulable"] == true {
                return Instant::now();
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    let (_, report) = engine
        .prepare_and_drain(
            "reboot of the host",
            started + Duration::from_secs(10),
            |_| {},
        )
        .await;
    let took = started.elapsed();
    let cordoned_at = tokio::time::timeout(Duration::from_millis(10), cordoned)
        .await
        .ok()
        .and_then(|r| r.ok())
        .map_or("never".to_string(), |t| seconds(t - started));
    let first_eviction = c
        .server
        .recorder()
        .matching("POST", "/eviction")
        .iter()
        .filter_map(|r| r.at.duration_since(wall).ok())
        .min()
        .map_or("none".to_string(), seconds);
    let gone = ["a", "b", "c"]
        .iter()
        .filter(|p| c.pod(NS, p).is_none())
        .count();
    format!(
        "cordoned at {cordoned_at}, first eviction at the server at {first_eviction}, {gone} of 3 \
         pods gone at the return ({} s; report: {} evicted, {} pending on their eviction's answer)",
        took.as_secs(),
        report.counts.evicted,
        report.counts.pending
    )
}

#[tokio::main]
async fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("run with: cargo bench --bench fault-figures");
        return;
    }
    let rows = [
        "`drain`, 3 s latency on every request, `drain.timeout = 10s`",
        "`drain`, 5 s latency on every request, `drain.timeout = 10s`",
        "`drain`, hung server, `drain.timeout = 5s`",
        "`drain`, hung server, `request_timeout = 30s`, `drain.timeout = 5s`",
        "`drain`, hung server, `request_timeout = 30s`, `drain.timeout = 10s`",
        "`restore`, 5 s latency on every request, 10 s deadline",
        "pod watch answering 410 in a loop (10 s drain)",
        "pod watch ending at once, empty (10 s drain)",
        "daemon shutdown path, 3 s latency, 10 s budget",
    ];
    let figures = tokio::join!(
        drain(Some(3), 10, 10),
        drain(Some(5), 10, 10),
        drain(None, 5, 10),
        drain(None, 5, 30),
        drain(None, 10, 30),
        restore(5, 10),
        watch_rate("410"),
        watch_rate("empty"),
        daemon_prepare(),
    );
    let figures = [
        figures.0, figures.1, figures.2, figures.3, figures.4, figures.5, figures.6, figures.7,
        figures.8,
    ];
    println!("| case | result |");
    println!("|---|---|");
    for (row, figure) in rows.iter().zip(figures) {
        println!("| {row} | {figure} |");
    }
}
