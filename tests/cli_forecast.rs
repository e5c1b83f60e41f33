//! `forecast` against the fake API server (which computes the budgets' status as the disruption
//! controller does): a budget at 0, a structurally blocked budget, a 600 s grace period, a
//! volume; a node that completes; kubelet credentials that may not read budgets; the line in
//! `check` and `status`; the budget read from logind on a private bus.

mod engine_support;
mod logind;

use engine_support::*;

use serde_json::{Value, json};

/// The seeded objects: on node-a `web-1` (budget `web`, minAvailable 2 of 3 pods, one of them
/// not Ready on node-b: at 0), `db-0` (budget `db`, maxUnavailable 0: never), `slow` (600 s
/// grace) and `data` (a claim).
fn troubled_node() -> Vec<Value> {
    let mut unready = web_pod("web-3", OTHER_NODE);
    fake_apiserver::store::set_pod_ready_in(&mut unready, false);
    vec![
        web_pod("web-1", NODE),
        web_pod("web-2", OTHER_NODE),
        unready,
        pdb(NS, "web", "web", 2),
        pod(NS, "db-0", NODE),
        json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "db", "namespace": NS},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "db-0"}}}
        }),
        pod_with(
            NS,
            "slow",
            NODE,
            json!({"spec": {"terminationGracePeriodSeconds": 600}}),
        ),
        pod_with(
            NS,
            "data",
            NODE,
            json!({"spec": {"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data-0"}}]}}),
        ),
        daemonset_pod(NS, "ds", NODE),
    ]
}

/// A ReplicaSet pod `name` on `node` labelled app=web.
fn web_pod(name: &str, node: &str) -> Value {
    pod_with(
        NS,
        name,
        node,
        json!({"metadata": {"labels": {"app": "web"}}}),
    )
}

/// The lists of every Node the forecast made.
fn node_lists(c: &Cluster) -> usize {
    c.server
        .recorder()
        .requests()
        .iter()
        .filter(|r| r.method == "GET" && r.path == "/api/v1/nodes")
        .count()
}

fn verdict_of<'a>(v: &'a Value, name: &str) -> (&'a str, &'a str) {
    let p = v["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == name)
        .unwrap_or_else(|| panic!("pod {name} in {v:#}"));
    (
        p["verdict"].as_str().unwrap(),
        p["reason"].as_str().unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forecast_names_every_blocking_budget_the_long_grace_and_the_volume() {
    let c = Cluster::start(troubled_node()).await;
    let config = c.config("");
    let r = cli(&config, &["forecast", "--output", "json"]).await;
    assert_eq!(
        r.code, 1,
        "not a complete drain: {}\n{}",
        r.stdout, r.stderr
    );
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(v["verdict"], "blocked", "{v:#}");
    assert_eq!(verdict_of(&v, "web-1"), ("blocked", "budget-at-zero"));
    assert_eq!(verdict_of(&v, "db-0"), ("blocked", "budget-never-allows"));
    assert_eq!(
        verdict_of(&v, "slow"),
        ("cut-at-deadline", "grace-longer-than-time-left")
    );
    assert_eq!(verdict_of(&v, "data").0, "completes");
    assert_eq!(v["volumes"], json!(["work/data-0"]));
    assert!(
        v["pods"]
            .as_array()
            .unwrap()
            .iter()
            .all(|p| p["name"] != "ds"),
        "skipped pods are not forecast: {v:#}"
    );
    let budgets: Vec<&str> = v["blocking_budgets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["budget"].as_str().unwrap())
        .collect();
    assert_eq!(
        budgets,
        ["work/db", "work/web"],
        "in the order the drain evicts their pods"
    );
    // logind is not on the test's bus: the forecast says what it assumed.
    assert!(
        v["budget"]["logind"]
            .as_str()
            .unwrap()
            .starts_with("assumed"),
        "{v:#}"
    );

    let text = cli(&config, &["forecast"]).await;
    assert_eq!(text.code, 1);
    for needle in [
        "node node-a: the drain is blocked: 2 blocked, 1 cut at the deadline, 1 complete",
        "budget work/web allows 0 disruptions now: it needs 2 healthy pods and has 2 (of 3 expected)",
        "set minAvailable to 1 or less on work/web",
        "work/db lets none of its 1 expected pods be unavailable (maxUnavailable 0)",
        "set maxUnavailable to 1 or more on work/db",
        "its grace period is 600 s, longer than the 119.5 s left",
        "lower its terminationGracePeriodSeconds",
        "set [drain] timeout = \"601s\"",
        "volumes to detach: work/data-0",
        "assumed: logind could not be read",
    ] {
        assert!(
            text.stdout.contains(needle),
            "{needle:?} missing:\n{}",
            text.stdout
        );
    }
    // It changes nothing.
    let writes: Vec<_> = c
        .server
        .recorder()
        .requests()
        .into_iter()
        .filter(|r| r.method != "GET")
        .collect();
    assert!(writes.is_empty(), "{writes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_drains_in_time_exits_0_and_check_and_status_say_it() {
    let c = Cluster::start(vec![
        pod(NS, "web-1", NODE),
        pod(NS, "web-2", OTHER_NODE),
        pdb(NS, "web", "web-1", 0),
    ])
    .await;
    let config = c.config("");
    let r = cli(&config, &["forecast"]).await;
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stdout.starts_with(
            "node node-a: the drain completes: 1 pod in about 30 s of the 120 s budget"
        ),
        "{}",
        r.stdout
    );
    // No budget lets pods go one round at a time: the other nodes are not read.
    assert_eq!(node_lists(&c), 0);

    let status = cli(&config, &["status"]).await;
    assert!(
        status
            .stdout
            .contains("  forecast: node node-a: the drain completes"),
        "{}",
        status.stdout
    );
    let check = cli(&config, &["check"]).await;
    assert!(
        check
            .stdout
            .contains("forecast: node node-a: the drain completes"),
        "{}",
        check.stdout
    );

    // A blocked forecast is a WARNING line, never the reason check fails.
    c.server.store().upsert(pdb(NS, "web", "web-1", 1)).unwrap();
    let check = cli(&config, &["check"]).await;
    assert!(
        check
            .stdout
            .contains("forecast: WARNING node node-a: the drain is blocked"),
        "{}",
        check.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_replica_on_this_node_with_the_other_node_cordoned_is_blocked() {
    let c = Cluster::start(vec![
        web_pod("web-1", NODE),
        web_pod("web-2", NODE),
        pdb(NS, "web", "web", 1),
    ])
    .await;
    c.server
        .store()
        .modify("Node", None, OTHER_NODE, |n| {
            n["spec"]["unschedulable"] = json!(true)
        })
        .unwrap();
    let config = c.config("");
    let r = cli(&config, &["forecast", "--output", "json"]).await;
    assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(verdict_of(&v, "web-1"), ("completes", "completes"));
    assert_eq!(verdict_of(&v, "web-2"), ("blocked", "no-replacement"));
    let detail = v["pods"][1]["detail"].as_str().unwrap();
    assert!(detail.contains("node-b: cordoned"), "{detail}");
    assert_eq!(node_lists(&c), 1, "one node list");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_credentials_may_not_read_budgets_and_the_forecast_says_so() {
    let c = Cluster::start(vec![pod(NS, "web-1", NODE)]).await;
    let config = c.config_file("system:node:node-a", "");
    let r = cli(&config, &["forecast"]).await;
    assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stderr
            .contains("cannot list poddisruptionbudgets of all namespaces")
            && r.stderr.contains("403")
            && r.stderr.contains("the forecast needs it"),
        "{}",
        r.stderr
    );
    // A missing node is exit 3, as for the other commands.
    let other = c.config("");
    let text = std::fs::read_to_string(&other)
        .unwrap()
        .replace("node_name = \"node-a\"", "node_name = \"node-z\"");
    std::fs::write(&other, text).unwrap();
    let r = cli(&other, &["forecast"]).await;
    assert_eq!(r.code, 3, "{}", r.stderr);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_budget_comes_from_logind_when_it_answers() {
    let Some(rig) = logind::Rig::start(logind::LogindOptions {
        delay_max: std::time::Duration::from_secs(5),
        ..logind::LogindOptions::default()
    })
    .await
    else {
        if skip_or_fail("dbus-daemon or python3-dbusmock missing") {
            return;
        }
        unreachable!()
    };
    let c = Cluster::start(vec![pod(NS, "web-1", NODE)]).await;
    let config = c.config("");
    let r = cli_on_bus(&config, &["forecast"], rig.address()).await;
    assert_eq!(
        r.code, 1,
        "a 30 s grace period in a 4 s budget: {}",
        r.stdout
    );
    for needle in [
        "logind InhibitDelayMaxSec 5 s, read from logind",
        "cut at the deadline",
        "InhibitDelayMaxSec=125",
    ] {
        assert!(
            r.stdout.contains(needle),
            "{needle:?} missing:\n{}",
            r.stdout
        );
    }
}

/// Issue 29: a forecast that cannot reach the API server exits 3, as the README's exit codes say
/// (cluster unreachable), not 1 (a drain that would not complete), and says which server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forecast_that_cannot_reach_the_cluster_exits_3() {
    let c = Cluster::start(vec![pod(NS, "web-1", NODE)]).await;
    let config = c.config_file("admin", "");
    c.server.stop_listener();
    for args in [&["forecast"][..], &["forecast", "--output", "json"]] {
        let r = cli(&config, args).await;
        assert_eq!(r.code, 3, "{args:?}: {}\n{}", r.stdout, r.stderr);
        assert!(
            r.stderr
                .contains(&format!("API server {} unreachable", c.server.url())),
            "{args:?}: {}",
            r.stderr
        );
        assert!(r.stdout.is_empty(), "{args:?}: {}", r.stdout);
    }
    c.server.start_listener().await.unwrap();

    // The Node reads, then every list of the budgets gets a 503 until the (short) deadline: no
    // usable answer from the API server, as the Node read counts it.
    let short = c.config_file("admin", "[drain]\ntimeout = \"2s\"\n");
    c.server.faults().fail_next(
        fake_apiserver::Route::new("GET", "/poddisruptionbudgets"),
        1000,
        503,
    );
    let r = cli(&short, &["forecast"]).await;
    assert_eq!(r.code, 3, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stderr
            .contains("cannot list poddisruptionbudgets of all namespaces")
            && r.stderr.contains("503"),
        "{}",
        r.stderr
    );
}
