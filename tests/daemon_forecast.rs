//! `kube-shutdown-drain run` with `[daemon] forecast_interval` set (issue 19; the reboots it holds,
//! issue 31): the forecast's
//! verdict in the metrics textfile, one `DrainWouldBlock` Event when it turns to blocked (the
//! demo's `web` budget, minAvailable 2 over its 2 replicas), one `DrainWouldComplete` once it
//! clears, and a shutdown that never waits for a forecast in flight.

mod daemon_support;
mod logind;

use std::time::Duration;

use daemon_support::{NODE, Setup, World, demo_seed, open_seed};
use fake_apiserver::faults::Route;
use logind::LogindOptions;

/// A world whose daemon forecasts every second and writes its metrics to `metrics.prom`.
async fn forecasting(seed: Vec<serde_json::Value>) -> Option<World> {
    // logind allows 150 s (the package's drop-in): the demo's 30 s grace periods fit the drain's
    // 120 s once the web budget is open.
    let mut world = World::start(Setup {
        seed,
        logind: LogindOptions {
            delay_max: Duration::from_secs(150),
            ..LogindOptions::default()
        },
        config: "[daemon]\nrelease_margin = \"2s\"\nrestore_ready_timeout = \"5s\"\n\
                 forecast_interval = \"1s\"\n"
            .to_owned(),
        ..Setup::default()
    })
    .await?;
    let textfile = world.dir().join("metrics.prom");
    let mut config = std::fs::read_to_string(world.config_path()).expect("the config");
    config.push_str(&format!(
        "[metrics]\ntextfile = \"{}\"\n",
        textfile.display()
    ));
    std::fs::write(world.config_path(), config).expect("write the config");
    world.spawn_daemon();
    world.wait_ready().await;
    Some(world)
}

fn metrics(world: &World) -> String {
    std::fs::read_to_string(world.dir().join("metrics.prom")).unwrap_or_default()
}

#[tokio::test]
async fn the_forecast_warns_once_when_a_drain_would_block_and_says_once_when_it_would_complete() {
    let Some(world) = forecasting(demo_seed()).await else {
        return;
    };
    world
        .expect_until(
            Duration::from_secs(10),
            |w| !w.node_events("DrainWouldBlock").is_empty(),
            "a DrainWouldBlock Event once the forecast sees the web budget",
        )
        .await;
    let said = world.node_events("DrainWouldBlock");
    let message = said[0]["message"].as_str().unwrap_or_default().to_owned();
    assert!(
        message.contains(&format!("node {NODE}")) && message.contains("shop/web"),
        "the Event names the node and the budget: {message}"
    );
    assert_eq!(said[0]["type"], "Warning");
    world
        .expect_until(
            Duration::from_secs(5),
            |w| {
                let m = metrics(w);
                m.contains(&format!(
                    "kube_shutdown_drain_forecast_verdict{{node=\"{NODE}\",verdict=\"blocked\"}} 1"
                )) && m.contains("kube_shutdown_drain_forecast_blocked_pods{")
                    && m.contains("kube_shutdown_drain_forecast_budget_seconds{")
            },
            "the metrics say the verdict and the blocking budget",
        )
        .await;
    // Two more runs: still one warning.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        world.node_events("DrainWouldBlock").len(),
        1,
        "{}",
        world.log()
    );
    world.open_web_budget();
    world
        .expect_until(
            Duration::from_secs(10),
            |w| !w.node_events("DrainWouldComplete").is_empty(),
            "a DrainWouldComplete Event once the budget opens",
        )
        .await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(
        world.node_events("DrainWouldComplete").len(),
        1,
        "{}",
        world.log()
    );
    assert_eq!(
        world.node_events("DrainWouldBlock").len(),
        1,
        "{}",
        world.log()
    );
    assert!(
        metrics(&world).contains(&format!(
            "kube_shutdown_drain_forecast_verdict{{node=\"{NODE}\",verdict=\"completes\"}} 1"
        )),
        "{}",
        metrics(&world)
    );
}

#[tokio::test]
async fn a_shutdown_stops_a_forecast_in_flight_and_drains_as_usual() {
    let Some(world) = forecasting(open_seed()).await else {
        return;
    };
    // The forecast's budget list never answers: a forecast is in flight from its first run.
    let budgets = Route::any("poddisruptionbudgets");
    world.api.faults().gate(budgets.clone());
    world
        .expect_until(
            Duration::from_secs(5),
            |w| w.api.faults().waiting_at(&budgets) > 0,
            "a forecast lists the budgets",
        )
        .await;
    world.rig.reboot().await;
    world.expect_released(Duration::from_secs(20)).await;
    world
        .expect_log(
            "the forecast in flight is stopped",
            Duration::from_secs(5),
            "the shutdown stopped the forecast",
        )
        .await;
    assert!(world.is_drained(), "drained; log:\n{}", world.log());
}

/// The reboots the node asks for weigh the standing forecast (issue 31): with the web budget
/// blocking, a sentinel file makes the reboot wait with the reason `forecast_blocks`, and the
/// node is neither cordoned nor rebooted.
#[tokio::test]
async fn a_forecast_that_says_the_drain_would_block_holds_the_nodes_own_reboot() {
    let dir = tempfile::tempdir().unwrap();
    let sentinel = dir.path().join("reboot-required");
    let Some(mut world) = World::start(Setup {
        seed: demo_seed(),
        config: format!(
            "[daemon]\nforecast_interval = \"1s\"\n[reboot]\nsentinel_file = \"{}\"\n",
            sentinel.display()
        ),
        ..Setup::default()
    })
    .await
    else {
        return;
    };
    world.spawn_daemon();
    world.wait_ready().await;
    world
        .expect_until(
            Duration::from_secs(10),
            |w| !w.node_events("DrainWouldBlock").is_empty(),
            "the forecast sees the web budget",
        )
        .await;
    std::fs::write(&sentinel, "").unwrap();
    world
        .expect_log(
            &format!("the reboot of node {NODE} waits (forecast_blocks)"),
            Duration::from_secs(10),
            "the blocking forecast holds the reboot",
        )
        .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!world.is_cordoned(), "{}", world.log());
    assert!(
        world.rig.outcomes().is_empty(),
        "no reboot: {}",
        world.log()
    );
}
