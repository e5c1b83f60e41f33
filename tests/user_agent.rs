//! Every request of ours names the program, its version, the platform and the node in its
//! User-Agent (`kube-shutdown-drain/VERSION (linux/ARCH; node NODE)`), so an operator finds the
//! drain in the API server's audit log: the engine's, the CLI's and the daemon's requests alike,
//! as the fake API server records them.

mod daemon_support;
mod engine_support;
mod logind;

use std::time::Duration;

use fake_apiserver::RecordedRequest;
use kube_shutdown_drain::engine::Engine;
use tokio::time::Instant;

/// The User-Agent the build under test must send for `node`, written out independently of
/// the code that builds it.
fn expected(node: &str) -> String {
    let arch = if cfg!(target_arch = "aarch64") {
        "arm64"
    } else if cfg!(target_arch = "x86_64") {
        "amd64"
    } else {
        std::env::consts::ARCH
    };
    format!(
        "kube-shutdown-drain/{} (linux/{arch}; node {node})",
        env!("CARGO_PKG_VERSION")
    )
}

/// Asserts that there were requests and that each one carried `agent`.
fn assert_all_carry(requests: &[RecordedRequest], agent: &str, who: &str) {
    assert!(!requests.is_empty(), "{who}: no request was recorded");
    let without: Vec<String> = requests
        .iter()
        .filter(|r| r.user_agent.as_deref() != Some(agent))
        .map(|r| format!("{} {} -> {:?}", r.method, r.uri(), r.user_agent))
        .collect();
    assert!(
        without.is_empty(),
        "{who}: {} of {} requests without User-Agent {agent:?}:\n{}",
        without.len(),
        requests.len(),
        without.join("\n")
    );
}

#[tokio::test]
async fn every_request_of_the_engine_carries_the_user_agent() {
    use engine_support::*;
    let c = Cluster::start(vec![pod(NS, "a", NODE), slow_pod(NS, "b", NODE, 0.5)]).await;
    let engine = Engine::new(c.settings("")).unwrap();
    engine.plan().await.unwrap();
    engine.prepare("maintenance by hand").await.unwrap();
    let report = engine.drain(Instant::now() + Duration::from_secs(20)).await;
    assert!(report.complete, "{}", report.to_text());
    engine.restore().await.unwrap();
    let requests = c.server.recorder().requests();
    // Reads, the guarded Node writes, evictions, the pod watch and the Events are all there.
    for (method, needle) in [
        ("GET", "/nodes/node-a"),
        ("PATCH", "/nodes/node-a"),
        ("POST", "/eviction"),
        ("GET", "watch=true"),
        ("POST", "/events"),
    ] {
        assert!(
            requests
                .iter()
                .any(|r| r.method == method && r.uri().contains(needle)),
            "no {method} {needle} among the requests"
        );
    }
    assert_all_carry(&requests, &expected(NODE), "engine");
}

#[tokio::test]
async fn every_request_of_the_cli_carries_the_user_agent() {
    use engine_support::*;
    let c = Cluster::start(vec![pod(NS, "a", NODE)]).await;
    let config = c.config_file("admin", "");
    for args in [
        &["plan"][..],
        &["drain"],
        &["status"],
        &["restore"],
        &["check"],
        &["--node", OTHER_NODE, "plan"],
    ] {
        c.server.recorder().clear();
        let run = cli(&config, args).await;
        // `check` fails without logind (1); everything else succeeds.
        assert!(
            run.code == 0 || args == ["check"],
            "{args:?} exited {}: {}",
            run.code,
            run.stderr
        );
        let node = if args.contains(&OTHER_NODE) {
            OTHER_NODE
        } else {
            NODE
        };
        assert_all_carry(
            &c.server.recorder().requests(),
            &expected(node),
            &format!("{args:?}"),
        );
    }
}

#[tokio::test]
async fn every_request_of_the_daemon_carries_the_user_agent() {
    use daemon_support::*;
    let setup = Setup {
        seed: open_seed(),
        config: "[drain]\ntimeout = \"15s\"\n[daemon]\nrelease_margin = \"2s\"\n".into(),
        ..Setup::default()
    };
    let Some(mut world) = started(setup).await else {
        return;
    };
    world.rig.reboot().await;
    world.expect_released(Duration::from_secs(25)).await;
    // The next boot: the daemon restores the node.
    world.kill_daemon();
    world.new_boot();
    world.rig.simulate_boot().await;
    world.spawn_daemon();
    world
        .expect_restored(Duration::from_secs(30), "the next boot restores the node")
        .await;
    let requests = world.api.recorder().requests();
    assert!(
        requests.iter().any(|r| r.uri().contains("/eviction")),
        "the daemon evicted"
    );
    assert_all_carry(&requests, &expected(NODE), "daemon");
}
