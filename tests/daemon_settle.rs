//! The slot settles by health, not by clock (`[fleet] settle_max`): two daemons on one drain
//! slot against one fake API server with its disruption controller. Node A's drain evicts a pod
//! of the budget `default/web` (its other pod runs on a third node); then that other pod goes
//! unready, so the budget is short when A is restored. A keeps its slot until the budget is
//! healthy again, and node B, waiting for the slot, is cordoned only after that; when the
//! budget never heals, the slot goes back at `settle_max` with a Warning Event naming it.

mod daemon_support;
mod fleet_support;
mod logind;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use fake_apiserver::FakeApiServer;
use fleet_support::{Machine, cordoned, machine, node};
use serde_json::{Value, json};
use tokio::time::Instant;

/// How long the budget stays short after A's restore in the test where it heals.
const SHORT_FOR: Duration = Duration::from_secs(10);

/// A Ready pod of the `web` ReplicaSet on `node`.
fn web_pod(name: &str, node: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": "web"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web",
                                 "uid": "rs-web", "controller": true}]},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})
}

/// A pod of its own on `node` (no budget covers it).
fn own_pod(node: &str) -> Value {
    let mut pod = web_pod(&format!("app-{node}"), node);
    pod["metadata"]["labels"] = json!({"app": node});
    pod
}

/// The cluster, and machines A and B with `fleet` in their `[fleet]` tables; `None` (after a
/// printed reason, or a failure under CI=true) without dbus-daemon or python3-dbusmock.
async fn fleet(fleet: &str) -> Option<(Arc<FakeApiServer>, Machine, Machine)> {
    let mut seed = vec![json!({"apiVersion": "v1", "kind": "Namespace",
                               "metadata": {"name": "default"}})];
    seed.extend([node("settle-a"), node("settle-b"), node("settle-c")]);
    seed.extend([
        web_pod("web-a", "settle-a"),
        web_pod("web-c", "settle-c"),
        own_pod("settle-b"),
    ]);
    seed.push(
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "web", "namespace": "default", "generation": 1},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}}),
    );
    let api = fleet_support::cluster(seed).await;
    let (Some(a), Some(b)) = (
        machine(&api, "settle-a", fleet).await,
        machine(&api, "settle-b", fleet).await,
    ) else {
        logind::require(false, "dbus-daemon or python3-dbusmock");
        return None;
    };
    Some((Arc::new(api), a, b))
}

/// Runs both daemons, reboots A for its sentinel (its `web-a` evicted), makes `web-c` unready
/// while A is down, asks B's reboot too, and boots A again. Returns when A says it keeps its
/// slot for the budget, with the moment it said so.
async fn reboot_a_while_web_degrades(api: &FakeApiServer, a: &mut Machine, b: &mut Machine) {
    a.spawn();
    b.spawn();
    for m in [&*a, &*b] {
        m.wait_log(
            &format!("node {} needs no reboot", m.name),
            Duration::from_secs(20),
        )
        .await;
    }
    std::fs::write(a.sentinel(), "").unwrap();
    let outcome = a.rig.wait_outcome(0, Duration::from_secs(60)).await;
    assert_eq!(
        outcome.map(|o| o.what),
        Some("released".to_string()),
        "A's reboot; log:\n{}",
        a.log()
    );
    assert!(
        api.store().get("Pod", Some("default"), "web-a").is_none(),
        "A's web pod was evicted; log:\n{}",
        a.log()
    );
    // The other replica falls behind (a storage rebuild, a database catching up).
    api.store()
        .set_pod_ready("default", "web-c", false)
        .unwrap();
    std::fs::write(b.sentinel(), "").unwrap();
    eprintln!(
        "REPORT {}",
        std::fs::read_to_string(a.path("state/last-report.json")).unwrap_or_default()
    );
    a.kill();
    api.kubelets().stop(a.name).unwrap();
    std::fs::remove_file(a.sentinel()).unwrap();
    a.rig.simulate_boot().await;
    a.new_boot(1);
    api.kubelets().start(a.name).unwrap();
    a.spawn();
    a.wait_log(
        "until the cluster has settled: PodDisruptionBudgets default/web healthy again",
        Duration::from_secs(30),
    )
    .await;
}

/// Samples when B is first seen cordoned, every 5 ms.
fn watch_cordon(api: &Arc<FakeApiServer>) -> Arc<Mutex<Option<Instant>>> {
    let seen: Arc<Mutex<Option<Instant>>> = Arc::default();
    tokio::spawn({
        let (api, seen) = (api.clone(), seen.clone());
        async move {
            while !cordoned(&api, "settle-b") {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            *seen.lock().unwrap() = Some(Instant::now());
        }
    });
    seen
}

async fn wait_cordoned(seen: &Mutex<Option<Instant>>, within: Duration, logs: &str) -> Instant {
    let deadline = Instant::now() + within;
    loop {
        if let Some(at) = *seen.lock().unwrap() {
            return at;
        }
        assert!(Instant::now() < deadline, "B never cordoned; logs:\n{logs}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn the_next_node_drains_only_once_the_budget_of_the_evicted_pod_is_healthy_again() {
    let Some((api, mut a, mut b)) = fleet("settle_max = \"5m\"").await else {
        return;
    };
    reboot_a_while_web_degrades(&api, &mut a, &mut b).await;
    let b_cordoned = watch_cordon(&api);
    // `status` on A names what its slot waits for.
    let status = status_json(&a).await;
    assert_eq!(
        status["settling"],
        "its slot waits for the budgets of its evicted pods: default/web: 0 healthy pods of the \
         1 it needs",
        "{status}"
    );
    tokio::time::sleep(SHORT_FOR).await;
    assert!(
        b_cordoned.lock().unwrap().is_none(),
        "B was cordoned while the budget default/web was short; A:\n{}\nB:\n{}",
        a.log(),
        b.log()
    );
    let healed = Instant::now();
    api.store().set_pod_ready("default", "web-c", true).unwrap();
    a.wait_log(
        "PodDisruptionBudgets default/web healthy again after",
        Duration::from_secs(10),
    )
    .await;
    let logs = format!("A:\n{}\nB:\n{}", a.log(), b.log());
    let at = wait_cordoned(&b_cordoned, Duration::from_secs(30), &logs).await;
    assert!(at >= healed, "B cordoned before the budget healed; {logs}");
    println!(
        "B cordoned {:.2} s after the budget healed",
        (at - healed).as_secs_f64()
    );
    assert!(
        !a.log().contains("DrainSlotUnsettled") && events(&api, "DrainSlotUnsettled").is_empty(),
        "a healed budget is no Warning; {logs}"
    );
}

#[tokio::test]
async fn a_budget_that_never_heals_holds_the_slot_until_settle_max_and_is_named() {
    const SETTLE_MAX: Duration = Duration::from_secs(6);
    let config = format!("settle_max = \"{}s\"", SETTLE_MAX.as_secs());
    let Some((api, mut a, mut b)) = fleet(&config).await else {
        return;
    };
    reboot_a_while_web_degrades(&api, &mut a, &mut b).await;
    let said = Instant::now();
    let b_cordoned = watch_cordon(&api);
    let logs = || format!("A:\n{}\nB:\n{}", a.log(), b.log());
    let at = wait_cordoned(&b_cordoned, Duration::from_secs(40), &logs()).await;
    // The ceiling runs from the restore, which ended just before A said it keeps its slot;
    // less a margin for a late sample.
    assert!(
        at - said >= SETTLE_MAX - Duration::from_millis(500),
        "B cordoned {:?} after A kept its slot, before settle_max ({SETTLE_MAX:?}); {}",
        at - said,
        logs()
    );
    let warnings = events(&api, "DrainSlotUnsettled");
    assert_eq!(warnings.len(), 1, "one Warning Event: {warnings:?}");
    let message = warnings[0]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("default/web: 0 healthy pods of the 1 it needs")
            && message.contains("settle_max"),
        "the Event names the budget still short: {message}"
    );
    assert_eq!(warnings[0]["type"], "Warning");
}

/// The Events about node A with `reason`.
fn events(api: &FakeApiServer, reason: &str) -> Vec<Value> {
    api.store()
        .list("Event", Some("default"))
        .into_iter()
        .filter(|e| e["reason"] == reason && e["involvedObject"]["name"] == "settle-a")
        .collect()
}

/// `kube-shutdown-drain status --output json` on machine `m`.
async fn status_json(m: &Machine) -> Value {
    daemon_support::status_json(&m.path("config.toml"), &m.path("boot_id"), m.rig.address()).await
}
