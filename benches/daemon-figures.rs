//! Prints docs/benchmarks.md's figures for issue 19's daemon side: how soon the lock goes after
//! `PrepareForShutdown(true)` for a node an early drain (a scheduled shutdown) has drained
//! already, against a normal drain of the same node; and what the idle daemon costs, with no
//! schedule and the forecast at its default (off), the same without the schedule's watch, and
//! with a forecast every 10 s for the cost of one run: RSS, wake-ups (context switches of all its threads) per minute, API requests.
//! The real binary, the fake logind on a private bus, the fake API server (`tests/daemon_support`).
//!
//! Run: `cargo bench --bench daemon-figures` (a release build), or on a machine where only debug
//! builds are wanted `cargo test --bench daemon-figures -- --bench`. Figures, never assertions:
//! the release latency is the fake logind's own measure from its signal to the lock's close.
//! Under `cargo test --all-targets` (no `--bench` argument) it only says how to run it.

use std::time::Duration;

#[path = "../tests/daemon_support/mod.rs"]
mod daemon_support;
#[path = "../tests/logind/mod.rs"]
mod logind;

use daemon_support::{Setup, World, open_seed, started};
use logind::LogindOptions;

/// How many shutdowns each latency figure is made of.
const RUNS: usize = 5;
/// How long the idle daemon is watched.
const IDLE: Duration = Duration::from_secs(60);

fn setup(config: &str) -> Setup {
    Setup {
        seed: open_seed(),
        logind: LogindOptions {
            delay_max: Duration::from_secs(30),
            ..LogindOptions::default()
        },
        config: format!(
            "[drain]\ntimeout = \"15s\"\nretry_interval = \"1s\"\n\
             [daemon]\nrelease_margin = \"2s\"\nrestore_ready_timeout = \"5s\"\n{config}\n"
        ),
        ..Setup::default()
    }
}

/// Seconds from the signal to the release, one shutdown; `early`: drained ahead first.
async fn release(early: bool) -> Option<f64> {
    let world = started(setup("")).await?;
    if early {
        world.schedule("reboot", Duration::from_secs(12));
        world
            .expect_log(
                "drained node demo-node-1 ahead of the reboot",
                Duration::from_secs(15),
                "the early drain ends",
            )
            .await;
    }
    world.rig.reboot().await;
    Some(world.expect_released(Duration::from_secs(30)).await.elapsed)
}

/// Context switches (voluntary and not) of every thread of `pid`, and its RSS in KiB.
fn proc_figures(pid: u32) -> (u64, u64) {
    let field = |text: &str, key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    let mut switches = 0;
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for task in tasks.flatten() {
            let text = std::fs::read_to_string(task.path().join("status")).unwrap_or_default();
            switches += field(&text, "voluntary_ctxt_switches:")
                + field(&text, "nonvoluntary_ctxt_switches:");
        }
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    (switches, field(&status, "VmRSS:"))
}

/// The idle daemon over [`IDLE`]: RSS (KiB), wake-ups per minute, API requests in the window.
async fn idle(config: &str) -> Option<(u64, f64, usize)> {
    let world: World = started(setup(config)).await?;
    // The start's own work (boot restore, kubelet check) settles first, and the blocking
    // threads it used end (tokio keeps an idle one 10 s).
    tokio::time::sleep(Duration::from_secs(15)).await;
    world.api.recorder().clear();
    let (before, _) = proc_figures(world.pid());
    tokio::time::sleep(IDLE).await;
    let (after, rss) = proc_figures(world.pid());
    let per_minute = (after - before) as f64 * 60.0 / IDLE.as_secs_f64();
    Some((rss, per_minute, world.api.recorder().requests().len()))
}

fn stats(mut v: Vec<f64>) -> String {
    v.sort_by(f64::total_cmp);
    let ms = |s: f64| s * 1000.0;
    format!(
        "median {:.0} ms, min {:.0} ms, max {:.0} ms over {} shutdowns",
        ms(v[v.len() / 2]),
        ms(v[0]),
        ms(v[v.len() - 1]),
        v.len()
    )
}

#[tokio::main]
async fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("run with: cargo bench --bench daemon-figures");
        return;
    }
    let (mut early, mut normal) = (Vec::new(), Vec::new());
    for _ in 0..RUNS {
        let (Some(e), Some(n)) = (release(true).await, release(false).await) else {
            println!("the fake logind cannot run here (python3-dbusmock, dbus-daemon)");
            return;
        };
        early.push(e);
        normal.push(n);
    }
    println!(
        "lock release after PrepareForShutdown, node drained ahead: {}",
        stats(early)
    );
    println!(
        "lock release after PrepareForShutdown, normal drain:      {}",
        stats(normal)
    );
    let (quiet, unwatched, forecasting) = tokio::join!(
        idle(""),
        idle("drain_when_scheduled = false"),
        idle("forecast_interval = \"10s\"")
    );
    if let Some((rss, wakeups, requests)) = unwatched {
        println!(
            "idle, drain_when_scheduled = false (no schedule watch): RSS {rss} KiB, {wakeups:.1} \
             wake-ups a minute, {requests} API requests in {} s",
            IDLE.as_secs()
        );
    }
    if let Some((rss, wakeups, requests)) = quiet {
        println!(
            "idle, no schedule, forecast off (the defaults): RSS {rss} KiB, {wakeups:.1} wake-ups \
             a minute, {requests} API requests in {} s",
            IDLE.as_secs()
        );
    }
    if let Some((rss, wakeups, requests)) = forecasting {
        let runs = IDLE.as_secs() / 10;
        println!(
            "idle, forecast every 10 s: RSS {rss} KiB, {wakeups:.1} wake-ups a minute, {requests} \
             API requests in {} s (about {:.1} a forecast)",
            IDLE.as_secs(),
            requests as f64 / runs as f64
        );
    }
}
