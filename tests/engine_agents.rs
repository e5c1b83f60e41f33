//! The boot restore's wait for the node's agents (issue 21, `[restore] wait_for_pods` and
//! `wait_for_conditions`) against the fake API server: a pod's Ready left by the last boot does
//! not count, one of this boot does; a condition must have its status; the wait says what it
//! waits for as that changes, and at its deadline names what was missing.

mod engine_support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use engine_support::*;
use fake_apiserver::store::set_pod_ready_in;
use kube_shutdown_drain::engine::{Engine, Error as EngineError};
use kube_shutdown_drain::node::NodeError;
use serde_json::json;
use tokio::time::Instant;

const AGENTS: &str = "[restore]\nwait_for_pods = \"app=cni\"\nwait_for_conditions = [\"NetworkUnavailable=False\"]\n";

/// A CNI pod on node-a whose Ready=True is from a boot long gone, one on node-b not Ready, and
/// node-a's route not set up yet.
async fn rebooted_node() -> Cluster {
    let stale = pod_with(
        NS,
        "cni-a",
        NODE,
        json!({"metadata": {"labels": {"app": "cni"}}, "status": {"conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}),
    );
    let mut other = pod_with(
        NS,
        "cni-b",
        OTHER_NODE,
        json!({"metadata": {"labels": {"app": "cni"}}}),
    );
    set_pod_ready_in(&mut other, false);
    let c = Cluster::start(vec![stale, other]).await;
    set_network_unavailable(&c, "True");
    c
}

fn set_network_unavailable(c: &Cluster, status: &str) {
    let status = status.to_string();
    c.server
        .store()
        .modify("Node", None, NODE, move |n| {
            n["status"]["conditions"] = json!([
                {"type": "Ready", "status": "True"},
                {"type": "NetworkUnavailable", "status": status},
            ]);
        })
        .unwrap();
}

fn this_boot() -> jiff::Timestamp {
    jiff::Timestamp::now() - jiff::SignedDuration::from_secs(60)
}

#[tokio::test]
async fn the_restore_waits_for_the_agents_pods_of_this_boot_and_the_conditions() {
    let c = rebooted_node().await;
    let engine = Arc::new(Engine::new(c.settings(AGENTS)).unwrap());
    assert!(engine.waits_for_agents());
    let states = Arc::new(Mutex::new(Vec::<String>::new()));
    let wait = tokio::spawn({
        let (engine, states) = (engine.clone(), states.clone());
        async move {
            let deadline = Instant::now() + Duration::from_secs(30);
            engine
                .wait_for_agents(deadline, this_boot(), |s| {
                    states.lock().unwrap().push(s.into())
                })
                .await
        }
    });
    let said = |needle: &str| states.lock().unwrap().iter().any(|s| s.contains(needle));
    until("the wait names the stale pod", || {
        said("pods matching app=cni not Ready in this boot: work/cni-a")
    })
    .await;
    assert!(said(
        "NetworkUnavailable=True (waiting for NetworkUnavailable=False)"
    ));
    assert!(!said("cni-b"), "{:?}", states.lock().unwrap());

    // The kubelet of this boot reports the pod Ready: only the condition is left.
    c.server
        .store()
        .modify("Pod", Some(NS), "cni-a", |p| set_pod_ready_in(p, true))
        .unwrap();
    until("the pod no longer waited for", || {
        states
            .lock()
            .unwrap()
            .last()
            .is_some_and(|s| s.starts_with("node conditions:"))
    })
    .await;
    assert!(!wait.is_finished(), "the condition still fails");
    set_network_unavailable(&c, "False");
    wait.await.unwrap().expect("the agents run");
}

#[tokio::test]
async fn at_the_deadline_the_wait_names_what_was_missing() {
    let c = rebooted_node().await;
    let engine = Engine::new(c.settings("[restore]\nwait_for_pods = \"app=csi\"\n")).unwrap();
    let deadline = Instant::now() + Duration::from_secs(2);
    let err = engine
        .wait_for_agents(deadline, this_boot(), |_| {})
        .await
        .expect_err("no csi pod on node-a");
    match err {
        EngineError::Node(NodeError::AgentsNotReady { node, state, .. }) => {
            assert_eq!(node, NODE);
            assert_eq!(state, "no pod on the node matches app=csi yet");
        }
        other => panic!("{other}"),
    }
}

#[tokio::test]
async fn without_restore_keys_nothing_is_waited_for() {
    let c = Cluster::start(vec![]).await;
    let engine = Engine::new(c.settings("")).unwrap();
    assert!(!engine.waits_for_agents());
}

#[tokio::test]
async fn status_says_what_a_restore_would_wait_for() {
    let c = rebooted_node().await;
    let config = c.config(AGENTS);
    let run = cli(&config, &["status"]).await;
    assert_eq!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stdout.contains(
            "node agents:   a restore would wait for pods matching app=cni not Ready in this boot: \
             work/cni-a; node conditions: NetworkUnavailable=True (waiting for NetworkUnavailable=False)"
        ),
        "{}",
        run.stdout
    );
    c.server
        .store()
        .modify("Pod", Some(NS), "cni-a", |p| set_pod_ready_in(p, true))
        .unwrap();
    set_network_unavailable(&c, "False");
    let run = cli(&config, &["status", "--output", "json"]).await;
    let json: serde_json::Value = serde_json::from_str(&run.stdout).expect(&run.stdout);
    assert_eq!(json["restore_waits_for"], serde_json::Value::Null, "{json}");
}
