//! Real kubectl (the machine image's `kubectl.1.32` and `kubectl.1.27`) as the oracle of the
//! fake's fidelity: drains with a PDB that opens and one that never does, and the node commands
//! (cordon, uncordon, taint, annotate, label, patch) leaving the Node as the reference describes.
//!
//! Without kubectl these tests print why and pass; with `CI=true` a missing kubectl fails them.

use std::path::Path;
use std::time::Duration;

use fake_apiserver::{FakeApiServer, Options, load_seed_file};
use serde_json::{Value, json};

mod support;
use support::{Kubectl, evictions, kubectl};

const SCENARIO: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/drain-scenario.yaml"
);

async fn scenario() -> FakeApiServer {
    let seed = load_seed_file(Path::new(SCENARIO)).expect("scenario seed loads");
    FakeApiServer::start(Options { port: 0, seed })
        .await
        .expect("server starts")
}

const DRAIN: &[&str] = &[
    "drain",
    "node-a",
    "--ignore-daemonsets",
    "--delete-emptydir-data",
    "--force",
    "--pod-selector=drain!=skip",
];

async fn drain_with_budget_that_opens(version: &str) {
    let Some(bin) = kubectl(version) else { return };
    let server = scenario().await;
    let k = Kubectl::new(bin, &server, "admin");
    let mut args = DRAIN.to_vec();
    args.push("--timeout=60s");
    let drain = k.run(&args);
    let opener = async {
        // Wait for the first 429 on the guarded pod, then bring up a Ready replacement elsewhere.
        for _ in 0..300 {
            if evictions(&server)
                .iter()
                .any(|(n, s)| n == "guarded" && *s == 429)
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        server
            .store()
            .upsert(json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "guarded-2", "namespace": "work", "labels": {"app": "guarded"}},
                "spec": {"nodeName": "node-b", "containers": [{"name": "c", "image": "busybox"}]}
            }))
            .expect("replacement stored");
        server
            .store()
            .set_pod_ready("work", "guarded-2", true)
            .expect("replacement ready");
    };
    let (out, ()) = tokio::join!(drain, opener);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "drain failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        stdout.trim_end().lines().last(),
        Some("node/node-a drained")
    );

    let attempts = evictions(&server);
    let mut accepted: Vec<&str> = attempts
        .iter()
        .filter(|(_, s)| *s == 201)
        .map(|(n, _)| n.as_str())
        .collect();
    accepted.sort();
    assert_eq!(
        accepted,
        ["bare-pod", "guarded", "rs1-emptydir", "rs1-plain"]
    );
    assert!(
        attempts.iter().any(|(n, s)| n == "guarded" && *s == 429),
        "the budget never blocked: {attempts:?}"
    );
    assert!(
        attempts
            .iter()
            .all(|(n, s)| *s == 201 || (n == "guarded" && *s == 429)),
        "{attempts:?}"
    );

    let mut left: Vec<String> = server
        .store()
        .list("Pod", Some("work"))
        .iter()
        .filter_map(|p| {
            p.pointer("/metadata/name")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .collect();
    left.sort();
    // The ReplicaSet rs1 (3 replicas) replaced its three evicted pods on node-b, the one Ready,
    // uncordoned node.
    let (replacements, left): (Vec<String>, Vec<String>) = left
        .into_iter()
        .partition(|n| n.starts_with("rs1-") && !n.starts_with("rs1-plain") && n != "rs1-emptydir");
    assert_eq!(left, ["ds1-xyz", "guarded-2", "other-node", "skipped"]);
    assert_eq!(replacements.len(), 3, "{replacements:?}");
    for name in &replacements {
        let pod = server
            .store()
            .get("Pod", Some("work"), name)
            .expect("replacement");
        assert_eq!(pod.pointer("/spec/nodeName"), Some(&json!("node-b")));
    }
    let node = server.store().get("Node", None, "node-a").expect("node-a");
    assert_eq!(node.pointer("/spec/unschedulable"), Some(&json!(true)));
    // kubectl used the eviction API found in discovery, never a plain DELETE.
    assert_eq!(server.recorder().count("DELETE", "/pods/"), 0);
}

async fn drain_with_budget_that_never_opens(version: &str) {
    let Some(bin) = kubectl(version) else { return };
    let server = scenario().await;
    let k = Kubectl::new(bin, &server, "admin");
    let mut args = DRAIN.to_vec();
    args.push("--timeout=10s");
    let out = k.run(&args).await;
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("global timeout reached: 10s"), "{stderr}");
    let guarded = server
        .store()
        .get("Pod", Some("work"), "guarded")
        .expect("guarded pod still there");
    assert!(guarded.pointer("/metadata/deletionTimestamp").is_none());
    let blocked = evictions(&server)
        .iter()
        .filter(|(n, s)| n == "guarded" && *s == 429)
        .count();
    assert!(blocked >= 2, "expected retries every 5 s, saw {blocked}");
    // Every 429 is the real apiserver's body, byte for byte, without Retry-After.
    let reference = r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Cannot evict pod as it would violate the pod's disruption budget.","reason":"TooManyRequests","details":{"causes":[{"reason":"DisruptionBudget","message":"The disruption budget guarded-pdb needs 1 healthy pods and has 1 currently"}]},"code":429}"#;
    for r in server.recorder().matching("POST", "/guarded/eviction") {
        assert_eq!(r.response, reference);
        assert_eq!(r.retry_after, None);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_1_32_drains_once_the_budget_opens() {
    drain_with_budget_that_opens("1.32").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_1_27_drains_once_the_budget_opens() {
    drain_with_budget_that_opens("1.27").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_1_32_gives_up_when_the_budget_never_opens() {
    drain_with_budget_that_never_opens("1.32").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_1_27_gives_up_when_the_budget_never_opens() {
    drain_with_budget_that_never_opens("1.27").await;
}

fn taints(server: &FakeApiServer) -> Vec<Value> {
    server
        .store()
        .get("Node", None, "node-a")
        .and_then(|n| n.pointer("/spec/taints").cloned())
        .and_then(|t| t.as_array().cloned())
        .unwrap_or_default()
}

async fn node_commands(version: &str) {
    let Some(bin) = kubectl(version) else { return };
    let server = scenario().await;
    let k = Kubectl::new(bin, &server, "admin");
    let node = |s: &FakeApiServer| s.store().get("Node", None, "node-a").expect("node-a");
    let not_ready = json!({"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"});

    assert!(
        k.ok(&["cordon", "node-a"])
            .await
            .contains("node/node-a cordoned")
    );
    assert_eq!(
        node(&server).pointer("/spec/unschedulable"),
        Some(&json!(true))
    );
    let patches = server.recorder().count("PATCH", "/nodes/node-a");
    assert!(
        k.ok(&["cordon", "node-a"])
            .await
            .contains("already cordoned")
    );
    assert_eq!(
        server.recorder().count("PATCH", "/nodes/node-a"),
        patches,
        "no PATCH when already cordoned"
    );
    k.ok(&["uncordon", "node-a"]).await;
    assert_eq!(node(&server).pointer("/spec/unschedulable"), None);

    k.ok(&[
        "taint",
        "nodes",
        "node-a",
        "example.com/shutdown=true:NoSchedule",
    ])
    .await;
    assert_eq!(
        taints(&server),
        [
            json!({"key": "example.com/shutdown", "value": "true", "effect": "NoSchedule"}),
            not_ready.clone()
        ]
    );
    let taint_patch = server
        .recorder()
        .matching("PATCH", "fieldManager=kubectl-taint");
    assert_eq!(
        taint_patch
            .last()
            .and_then(|r| r.content_type.clone())
            .as_deref(),
        Some("application/strategic-merge-patch+json")
    );
    k.ok(&["taint", "nodes", "node-a", "example.com/drain=:NoExecute"])
        .await;
    assert_eq!(taints(&server).len(), 3);
    k.ok(&[
        "taint",
        "nodes",
        "node-a",
        "example.com/shutdown=later:NoSchedule",
        "--overwrite",
    ])
    .await;
    assert!(taints(&server).contains(
        &json!({"key": "example.com/shutdown", "value": "later", "effect": "NoSchedule"})
    ));
    assert_eq!(taints(&server).len(), 3);
    k.ok(&[
        "taint",
        "nodes",
        "node-a",
        "example.com/shutdown:NoSchedule-",
    ])
    .await;
    assert_eq!(
        taints(&server),
        [
            json!({"key": "example.com/drain", "effect": "NoExecute"}),
            not_ready.clone()
        ]
    );
    k.ok(&["taint", "nodes", "node-a", "example.com/drain-"])
        .await;
    assert_eq!(taints(&server), std::slice::from_ref(&not_ready));

    k.ok(&[
        "annotate",
        "node",
        "node-a",
        "example.com/drained-at=2026-01-01T00:00:00Z",
    ])
    .await;
    assert_eq!(
        node(&server).pointer("/metadata/annotations/example.com~1drained-at"),
        Some(&json!("2026-01-01T00:00:00Z"))
    );
    k.ok(&["annotate", "node", "node-a", "example.com/drained-at-"])
        .await;
    assert_eq!(
        node(&server).pointer("/metadata/annotations/example.com~1drained-at"),
        None
    );
    k.ok(&["label", "node", "node-a", "example.com/state=draining"])
        .await;
    assert_eq!(
        node(&server).pointer("/metadata/labels/example.com~1state"),
        Some(&json!("draining"))
    );
    assert_eq!(
        node(&server).pointer("/metadata/labels/kubernetes.io~1hostname"),
        Some(&json!("node-a"))
    );
    k.ok(&["label", "node", "node-a", "example.com/state-"])
        .await;
    assert_eq!(
        node(&server).pointer("/metadata/labels/example.com~1state"),
        None
    );

    k.ok(&[
        "patch",
        "node",
        "node-a",
        "--type=json",
        "-p",
        r#"[{"op":"add","path":"/spec/taints","value":[{"effect":"NoSchedule","key":"k"}]}]"#,
    ])
    .await;
    assert_eq!(
        taints(&server),
        [json!({"key": "k", "effect": "NoSchedule"})]
    );
    // A failed JSON-patch test answers 422 and changes nothing.
    let out = k
        .run(&["patch", "node", "node-a", "--type=json", "-p", r#"[{"op":"test","path":"/spec/taints/0/key","value":"other"},{"op":"remove","path":"/spec/taints"}]"#])
        .await;
    assert!(!out.status.success());
    assert_eq!(
        server
            .recorder()
            .matching("PATCH", "kubectl-patch")
            .last()
            .map(|r| r.status),
        Some(422)
    );
    assert_eq!(taints(&server).len(), 1);
    k.ok(&[
        "patch",
        "node",
        "node-a",
        "--type=merge",
        "-p",
        r#"{"spec":{"taints":null}}"#,
    ])
    .await;
    assert!(taints(&server).is_empty());
    k.ok(&[
        "patch",
        "node",
        "node-a",
        "--type=strategic",
        "-p",
        r#"{"spec":{"unschedulable":true}}"#,
    ])
    .await;
    assert_eq!(
        node(&server).pointer("/spec/unschedulable"),
        Some(&json!(true))
    );
    let ct: Vec<Option<String>> = server
        .recorder()
        .matching("PATCH", "fieldManager=kubectl-patch")
        .into_iter()
        .map(|r| r.content_type)
        .collect();
    assert_eq!(
        ct.iter()
            .map(|c| c.as_deref().unwrap_or(""))
            .collect::<Vec<_>>(),
        [
            "application/json-patch+json",
            "application/json-patch+json",
            "application/merge-patch+json",
            "application/strategic-merge-patch+json"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_1_32_node_commands_leave_the_node_as_the_reference_says() {
    node_commands("1.32").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_1_27_node_commands_leave_the_node_as_the_reference_says() {
    node_commands("1.27").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_as_a_kubelet_may_cordon_but_not_taint_or_read_daemonsets() {
    let Some(bin) = kubectl("1.32") else { return };
    let server = scenario().await;
    let k = Kubectl::new(bin, &server, "system:node:node-a");
    k.ok(&["cordon", "node-a"]).await;
    let out = k
        .run(&[
            "taint",
            "nodes",
            "node-a",
            "example.com/shutdown=true:NoSchedule",
        ])
        .await;
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("node \"node-a\" is not allowed to modify taints")
    );
    // The seeded not-ready taint and the node-lifecycle controller's cordon taint; not ours.
    assert_eq!(taints(&server).len(), 2);
    // kubectl cordon prints the error but exits 0 (kubectl 1.32 behaviour).
    let out = k.run(&["cordon", "node-b"]).await;
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("node \"node-a\" is not allowed to modify node \"node-b\"")
    );
    let node_b = server.store().get("Node", None, "node-b").expect("node-b");
    assert_eq!(node_b.pointer("/spec/unschedulable"), None);
    let out = k.run(&["get", "daemonsets", "-n", "work", "ds1"]).await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("forbidden"));
    let allowed = k
        .ok(&["auth", "can-i", "create", "pods/eviction", "-n", "work"])
        .await;
    assert_eq!(allowed.trim(), "yes");
    let out = k
        .run(&["auth", "can-i", "get", "daemonsets", "-n", "work"])
        .await;
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("no"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_deletes_a_pod_and_waits_through_a_watch_and_reads_events() {
    let Some(bin) = kubectl("1.32") else { return };
    let server = scenario().await;
    server
        .store()
        .modify("Pod", Some("work"), "bare-pod", |p| {
            p["metadata"]["annotations"] = json!({fake_apiserver::TERMINATION_ANNOTATION: "1"});
        })
        .expect("annotated");
    let k = Kubectl::new(bin, &server, "admin");
    let out = k.ok(&["delete", "pod", "-n", "work", "bare-pod"]).await;
    assert!(out.contains("pod \"bare-pod\" deleted"), "{out}");
    assert!(
        server
            .store()
            .get("Pod", Some("work"), "bare-pod")
            .is_none()
    );
    assert!(
        server.recorder().count("GET", "watch=true") >= 1,
        "kubectl waited by a watch"
    );

    let event = k.dir.path().join("event.yaml");
    std::fs::write(
        &event,
        "apiVersion: v1\nkind: Event\nmetadata: {name: node-a.drain.1, namespace: default}\n\
         involvedObject: {apiVersion: v1, kind: Node, name: node-a}\nreason: NodeDrainStarted\n\
         message: shutdown drain started\ntype: Normal\nsource: {component: shutdown-drainer, host: node-a}\n",
    )
    .expect("event file");
    k.ok(&[
        "create",
        "--validate=false",
        "-f",
        event.to_str().expect("utf-8 path"),
    ])
    .await;
    let listed = k
        .ok(&[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=node-a",
            "-o",
            "name",
        ])
        .await;
    assert_eq!(listed.trim(), "event/node-a.drain.1");
    let none = k
        .ok(&[
            "get",
            "events",
            "--field-selector",
            "involvedObject.name=node-b",
            "-o",
            "name",
        ])
        .await;
    assert_eq!(none.trim(), "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_drain_with_disable_eviction_deletes_with_protobuf_bodies() {
    let Some(bin) = kubectl("1.32") else { return };
    let server = scenario().await;
    let k = Kubectl::new(bin, &server, "admin");
    let mut args = DRAIN.to_vec();
    args.extend(["--disable-eviction", "--timeout=30s"]);
    let out = k.ok(&args).await;
    assert_eq!(out.trim_end().lines().last(), Some("node/node-a drained"));
    let deletes = server
        .recorder()
        .matching("DELETE", "/api/v1/namespaces/work/pods/");
    let mut deleted: Vec<String> = deletes
        .iter()
        .map(|r| r.path.rsplit('/').next().unwrap_or("").to_string())
        .collect();
    deleted.sort();
    assert_eq!(
        deleted,
        ["bare-pod", "guarded", "rs1-emptydir", "rs1-plain"]
    );
    for r in &deletes {
        assert_eq!(
            r.content_type.as_deref(),
            Some("application/vnd.kubernetes.protobuf")
        );
        assert!(r.body.starts_with("k8s\0"), "a protobuf DeleteOptions body");
        assert_eq!(r.status, 200);
    }
    assert_eq!(server.recorder().count("POST", "/eviction"), 0);
    assert!(server.store().get("Pod", Some("work"), "guarded").is_none());
}
