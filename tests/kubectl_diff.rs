//! Differential test against real kubectl: `kubectl.1.32 drain --ignore-daemonsets
//! --delete-emptydir-data --force` and our drain, each on a fresh fake API server seeded with the
//! same scenario, must evict the same set of pods once our extra filters (tolerates-cordon, the
//! Cluster API label, leave completed pods) are turned off; and we must send fewer requests.
//! Without kubectl the test prints why and skips (fails under CI=true).

mod engine_support;

use std::collections::BTreeSet;
use std::time::Duration;

use engine_support::*;
use fake_apiserver::RecordedRequest;
use kube_shutdown_drain::engine::Engine;
use serde_json::{Value, json};
use tokio::time::Instant;

/// How long each evicted pod takes to terminate: long enough that kubectl's 1 s polling shows.
const TERMINATION: f64 = 2.5;

/// The reference scenario (a DaemonSet pod, ReplicaSet pods with and without emptyDir, a bare
/// pod, a PDB-covered pod whose budget allows one disruption, a mirror pod), plus pods only our
/// extra filters would leave: one tolerating the cordon, one with the Cluster API skip label, a
/// completed pod. All but the mirror and DaemonSet pods take TERMINATION seconds to go.
fn scenario() -> Vec<Value> {
    let slow = |p: Value| {
        merged(
            p,
            json!({"metadata": {"annotations": {fake_apiserver::TERMINATION_ANNOTATION: TERMINATION.to_string()}}}),
        )
    };
    vec![
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "ds1", "namespace": NS, "uid": "ds1-uid"},
               "spec": {"selector": {"matchLabels": {"app": "ds1"}}, "template": {"metadata": {"labels": {"app": "ds1"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}),
        json!({"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {"name": "rs1", "namespace": NS, "uid": "rs1-uid"},
               "spec": {"selector": {"matchLabels": {"app": "rs1"}}, "template": {"metadata": {"labels": {"app": "rs1"}}, "spec": {"containers": [{"name": "c", "image": "busybox"}]}}}}),
        daemonset_pod(NS, "ds1-xyz", NODE),
        slow(pod(NS, "rs1-plain", NODE)),
        slow(pod_with(
            NS,
            "rs1-emptydir",
            NODE,
            json!({"spec": {"volumes": [{"name": "s", "emptyDir": {}}]}}),
        )),
        slow(bare_pod(NS, "bare-pod", NODE)),
        slow(pod(NS, "guarded", NODE)),
        pdb(NS, "guarded-pdb", "guarded", 0),
        pod_with(
            NS,
            "static-web",
            NODE,
            json!({"metadata": {"annotations": {"kubernetes.io/config.mirror": "hash"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": "node-uid", "controller": true}]}}),
        ),
        slow(pod_with(
            NS,
            "portworx",
            NODE,
            json!({"spec": {"tolerations": [
            {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]}}),
        )),
        slow(pod_with(
            NS,
            "capi-skip",
            NODE,
            json!({"metadata": {"labels": {"cluster.x-k8s.io/drain": "skip"}}}),
        )),
        pod_with(
            NS,
            "finished",
            NODE,
            json!({"status": {"phase": "Succeeded", "conditions": []}}),
        ),
        pod(NS, "elsewhere", OTHER_NODE),
    ]
}

fn evicted(reqs: &[RecordedRequest]) -> BTreeSet<String> {
    reqs.iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/eviction") && r.status == 201)
        .map(|r| r.path.split('/').nth(6).unwrap_or_default().to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_evictions_as_kubectl_drain_with_fewer_requests() {
    let Some(kubectl) = kubectl_132() else {
        if skip_or_fail("kubectl.1.32 not found next to the kubectl dispatcher") {
            return;
        }
        unreachable!()
    };

    // kubectl.
    let theirs = Cluster::start(scenario()).await;
    let kubeconfig = theirs.kubeconfig("admin");
    let started = Instant::now();
    let out = tokio::process::Command::new(&kubectl)
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .arg("--cache-dir")
        .arg(theirs.dir.path().join("kubectl-cache"))
        .args([
            "drain",
            NODE,
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--force",
            "--timeout=60s",
        ])
        .output()
        .await
        .expect("kubectl runs");
    let kubectl_wall = started.elapsed();
    assert!(
        out.status.success(),
        "kubectl drain failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let kubectl_reqs = theirs.server.recorder().requests();

    // Ours, extra filters off.
    let ours = Cluster::start(scenario()).await;
    let settings = ours.settings(
        "[filters]\nskip_tolerating_cordon = false\nhonour_capi_drain_label = false\ncompleted = \"evict\"\n",
    );
    let engine = Engine::new(settings).unwrap();
    let started = Instant::now();
    engine.prepare("differential test").await.unwrap();
    let report = engine.drain(Instant::now() + Duration::from_secs(60)).await;
    let our_wall = started.elapsed();
    assert!(report.complete, "{}", report.to_text());
    let our_reqs = ours.server.recorder().requests();

    let want: BTreeSet<String> = [
        "rs1-plain",
        "rs1-emptydir",
        "bare-pod",
        "guarded",
        "portworx",
        "capi-skip",
        "finished",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(evicted(&kubectl_reqs), want, "kubectl's evictions");
    assert_eq!(evicted(&our_reqs), want, "our evictions");

    let kubectl_work = kubectl_reqs.iter().filter(|r| !is_discovery(r)).count();
    println!(
        "kubectl.1.32 drain: {} requests ({} without discovery) in {:.2} s; kube-shutdown-drain: {} requests in {:.2} s",
        kubectl_reqs.len(),
        kubectl_work,
        kubectl_wall.as_secs_f64(),
        our_reqs.len(),
        our_wall.as_secs_f64()
    );
    assert!(
        our_reqs.len() < kubectl_work,
        "we sent {} requests, kubectl {} (without its discovery)",
        our_reqs.len(),
        kubectl_work
    );
    // kubectl reads what we wrote: the Node Events and our taint.
    let kubectl_get = |args: Vec<String>| {
        let kubeconfig = ours.kubeconfig("admin");
        let cache = ours.dir.path().join("kubectl-cache");
        let kubectl = kubectl.clone();
        async move {
            let out = tokio::process::Command::new(&kubectl)
                .arg("--kubeconfig")
                .arg(&kubeconfig)
                .arg("--cache-dir")
                .arg(&cache)
                .args(&args)
                .output()
                .await
                .expect("kubectl runs");
            assert!(
                out.status.success(),
                "kubectl {args:?}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            String::from_utf8_lossy(&out.stdout).into_owned()
        }
    };
    let events = kubectl_get(
        [
            "get",
            "events",
            "-n",
            "default",
            "--field-selector",
            "involvedObject.name=node-a",
            "-o",
            "json",
        ]
        .map(String::from)
        .to_vec(),
    )
    .await;
    let events: Value = serde_json::from_str(&events).unwrap();
    let reasons: BTreeSet<&str> = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["reason"].as_str())
        .collect();
    assert!(
        reasons.contains("DrainStarted") && reasons.contains("DrainFinished"),
        "{reasons:?}"
    );
    let taints = kubectl_get(
        ["get", "node", NODE, "-o", "jsonpath={.spec.taints[*].key}"]
            .map(String::from)
            .to_vec(),
    )
    .await;
    assert!(
        taints
            .split_whitespace()
            .any(|k| k == "kube-shutdown-drain/shutdown"),
        "{taints}"
    );

    // Both left the node cordoned, and the other pods alone.
    assert!(unschedulable(&theirs.node(NODE)) && unschedulable(&ours.node(NODE)));
    for c in [&theirs, &ours] {
        assert!(
            c.pod(NS, "ds1-xyz").is_some()
                && c.pod(NS, "static-web").is_some()
                && c.pod(NS, "elsewhere").is_some()
        );
    }
}

/// With our filters on (the defaults), the tolerating, opted-out and completed pods stay.
#[tokio::test]
async fn our_extra_filters_leave_more_pods() {
    let c = Cluster::start(scenario()).await;
    let engine = Engine::new(c.settings("")).unwrap();
    let report = engine.drain(Instant::now() + Duration::from_secs(60)).await;
    assert!(report.complete, "{}", report.to_text());
    let want: BTreeSet<String> = ["rs1-plain", "rs1-emptydir", "bare-pod", "guarded"]
        .into_iter()
        .map(String::from)
        .collect();
    assert_eq!(evicted(&c.server.recorder().requests()), want);
}
