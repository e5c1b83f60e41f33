//! The drain scenarios recorded on a real control plane (S1-S7: objects in,
//! request sequences, budget status and outcomes out, kube-apiserver + controllers v1.29.7)
//! replayed against the fake by real `kubectl.1.32` and `kubectl.1.27`, asserting the
//! outcomes the recordings show: which pods are left, which evictions got 429 (and with what
//! cause and Retry-After), the order of the requests, the exit code.
//!
//! Without kubectl these tests print why and pass; with `CI=true` a missing kubectl fails them.

use std::process::Output;
use std::time::Duration;

use fake_apiserver::{FakeApiServer, Options, RecordedRequest, parse_documents};
use serde_json::{Value, json};

mod support;
use support::{Kubectl, evictions, kubectl};

async fn start(seed: &str) -> FakeApiServer {
    let seed = parse_documents(seed, "scenario").expect("scenario parses");
    FakeApiServer::start(Options { port: 0, seed })
        .await
        .expect("server starts")
}

/// The requests kubectl sent for objects: discovery left out (the recordings drop `/api` and
/// `/apis`; the fake serves no aggregated discovery, so kubectl also reads each group version,
/// and `/api/v1`, which S1 lists as the eviction-support lookup, is among them).
fn api_requests(server: &FakeApiServer) -> Vec<RecordedRequest> {
    server
        .recorder()
        .requests()
        .into_iter()
        .filter(|r| {
            let depth = r.path.split('/').filter(|s| !s.is_empty()).count();
            let discovery = match r.path.split('/').nth(1) {
                Some("api") => depth <= 2,
                Some("apis") => depth <= 3,
                _ => true,
            };
            !discovery
        })
        .collect()
}

fn pods_on(server: &FakeApiServer, node: &str) -> Vec<String> {
    let mut names: Vec<String> = server
        .store()
        .list("Pod", None)
        .into_iter()
        .filter(|p| p["spec"]["nodeName"] == json!(node))
        .map(|p| p["metadata"]["name"].as_str().unwrap_or("").to_string())
        .collect();
    names.sort();
    names
}

const NODES: &str = r#"
apiVersion: v1
kind: Node
metadata: {name: node-a, labels: {kubernetes.io/hostname: node-a}, uid: 0000000a-0000-4000-8000-00000000000a}
spec: {}
status:
  conditions: [{type: Ready, status: "True", reason: KubeletReady}]
---
apiVersion: v1
kind: Node
metadata: {name: node-b, labels: {kubernetes.io/hostname: node-b}}
spec: {}
status:
  conditions: [{type: Ready, status: "True", reason: KubeletReady}]
"#;

/// S1 (every kind of pod a drain sorts, one already terminating) plus S2's budget dynamics
/// (a ReplicaSet of 3 under `minAvailable: 2` whose replacements land on node-b).
fn mixed_node() -> String {
    // Deleted 0.8 s before the drain with a 60 s grace; the kubelet takes 3 s (S1: 8 s).
    let deletion = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(59);
    let ds_tolerations = r#"[{key: node.kubernetes.io/not-ready, operator: Exists, effect: NoExecute},
        {key: node.kubernetes.io/unreachable, operator: Exists, effect: NoExecute},
        {key: node.kubernetes.io/unschedulable, operator: Exists, effect: NoSchedule}]"#;
    let running = r#"{phase: Running, conditions: [{type: Ready, status: "True"}]}"#;
    let mut docs = vec![NODES.to_string()];
    docs.push(format!(
        r#"
apiVersion: apps/v1
kind: DaemonSet
metadata: {{name: ds1, namespace: s1, uid: ds1-uid}}
spec:
  selector: {{matchLabels: {{app: ds1}}}}
  template:
    metadata: {{labels: {{app: ds1}}}}
    spec: {{containers: [{{name: c, image: pause}}], tolerations: {ds_tolerations}}}
---
apiVersion: apps/v1
kind: ReplicaSet
metadata: {{name: web, namespace: s1, uid: web-uid}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec: {{nodeSelector: {{kubernetes.io/hostname: node-a}}, containers: [{{name: c, image: pause}}]}}
---
apiVersion: apps/v1
kind: ReplicaSet
metadata: {{name: scratch, namespace: s1, uid: scratch-uid}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: scratch}}}}
  template:
    metadata: {{labels: {{app: scratch}}}}
    spec:
      nodeSelector: {{kubernetes.io/hostname: node-a}}
      containers: [{{name: c, image: pause, volumeMounts: [{{name: tmp, mountPath: /scratch}}]}}]
      volumes: [{{name: tmp, emptyDir: {{}}}}]
---
apiVersion: batch/v1
kind: Job
metadata: {{name: done, namespace: s1, uid: done-uid}}
spec:
  completions: 1
  template:
    spec: {{restartPolicy: Never, containers: [{{name: c, image: pause}}]}}
status: {{succeeded: 1}}
---
apiVersion: apps/v1
kind: ReplicaSet
metadata: {{name: guarded, namespace: s1, uid: guarded-uid}}
spec:
  replicas: 3
  selector: {{matchLabels: {{app: guarded}}}}
  template:
    metadata: {{labels: {{app: guarded}}}}
    spec: {{containers: [{{name: c, image: pause}}]}}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {{name: guarded, namespace: s1}}
spec:
  minAvailable: 2
  selector: {{matchLabels: {{app: guarded}}}}
---
apiVersion: v1
kind: Pod
metadata:
  name: ds1-a
  namespace: s1
  labels: {{app: ds1}}
  ownerReferences: [{{apiVersion: apps/v1, kind: DaemonSet, name: ds1, uid: ds1-uid, controller: true}}]
spec: {{nodeName: node-a, containers: [{{name: c, image: pause}}], tolerations: {ds_tolerations}}}
status: {running}
---
apiVersion: v1
kind: Pod
metadata:
  name: ds1-b
  namespace: s1
  labels: {{app: ds1}}
  ownerReferences: [{{apiVersion: apps/v1, kind: DaemonSet, name: ds1, uid: ds1-uid, controller: true}}]
spec: {{nodeName: node-b, containers: [{{name: c, image: pause}}], tolerations: {ds_tolerations}}}
status: {running}
---
apiVersion: v1
kind: Pod
metadata:
  name: web-hpdw9
  namespace: s1
  labels: {{app: web}}
  annotations: {{fake-apiserver.test/termination-seconds: "0.5"}}
  ownerReferences: [{{apiVersion: apps/v1, kind: ReplicaSet, name: web, uid: web-uid, controller: true}}]
spec: {{nodeName: node-a, nodeSelector: {{kubernetes.io/hostname: node-a}}, containers: [{{name: c, image: pause}}]}}
status: {running}
---
apiVersion: v1
kind: Pod
metadata:
  name: scratch-mvwz5
  namespace: s1
  labels: {{app: scratch}}
  annotations: {{fake-apiserver.test/termination-seconds: "0.5"}}
  ownerReferences: [{{apiVersion: apps/v1, kind: ReplicaSet, name: scratch, uid: scratch-uid, controller: true}}]
spec:
  nodeName: node-a
  nodeSelector: {{kubernetes.io/hostname: node-a}}
  containers: [{{name: c, image: pause, volumeMounts: [{{name: tmp, mountPath: /scratch}}]}}]
  volumes: [{{name: tmp, emptyDir: {{}}}}]
status: {running}
---
apiVersion: v1
kind: Pod
metadata:
  name: done-svd8n
  namespace: s1
  ownerReferences: [{{apiVersion: batch/v1, kind: Job, name: done, uid: done-uid, controller: true}}]
spec: {{nodeName: node-a, restartPolicy: Never, containers: [{{name: c, image: pause}}]}}
status: {{phase: Succeeded, conditions: [{{type: Ready, status: "False"}}]}}
---
apiVersion: v1
kind: Pod
metadata: {{name: bare, namespace: s1, annotations: {{fake-apiserver.test/termination-seconds: "0.5"}}}}
spec: {{nodeName: node-a, containers: [{{name: c, image: pause}}]}}
status: {running}
---
apiVersion: v1
kind: Pod
metadata:
  name: static-web-node-a
  namespace: s1
  labels: {{app: static-web}}
  annotations:
    kubernetes.io/config.mirror: 9f2c6b1e0d4a7c3b5e8f1a2d4c6b8e0f
    kubernetes.io/config.hash: 9f2c6b1e0d4a7c3b5e8f1a2d4c6b8e0f
    kubernetes.io/config.source: file
  ownerReferences: [{{apiVersion: v1, kind: Node, name: node-a, uid: 0000000a-0000-4000-8000-00000000000a, controller: true}}]
spec: {{nodeName: node-a, containers: [{{name: c, image: pause}}]}}
status: {running}
---
apiVersion: v1
kind: Pod
metadata:
  name: terminating
  namespace: s1
  annotations: {{fake-apiserver.test/termination-seconds: "3"}}
  deletionTimestamp: "{deletion}"
  deletionGracePeriodSeconds: 60
spec: {{nodeName: node-a, containers: [{{name: c, image: pause}}]}}
status: {running}
"#,
        deletion = deletion.strftime("%Y-%m-%dT%H:%M:%SZ")
    ));
    for i in 1..=3 {
        docs.push(format!(
            r#"
apiVersion: v1
kind: Pod
metadata:
  name: guarded-{i}
  namespace: s1
  labels: {{app: guarded}}
  annotations: {{fake-apiserver.test/termination-seconds: "0.5"}}
  ownerReferences: [{{apiVersion: apps/v1, kind: ReplicaSet, name: guarded, uid: guarded-uid, controller: true}}]
spec: {{nodeName: node-a, containers: [{{name: c, image: pause}}]}}
status: {running}
"#
        ));
    }
    docs.join("\n---\n")
}

/// S1 + S2 with one kubectl: exit 0; the DaemonSet and mirror pods stay; every other pod of
/// node-a is evicted (the terminating one and the Succeeded Job pod included); the budget
/// throttles the guarded pods with 429s naming the budget, until replacements on node-b are
/// Ready; the request order of S1.
async fn mixed_node_drain(version: &str) {
    let Some(bin) = kubectl(version) else { return };
    let server = start(&mixed_node()).await;
    let k = Kubectl::new(bin, &server, "admin");
    let out = k
        .run(&[
            "drain",
            "node-a",
            "--ignore-daemonsets",
            "--delete-emptydir-data",
            "--force",
            "--timeout=90s",
        ])
        .await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "kubectl {version} drain exits 0"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("node/node-a drained"), "{stdout}");

    // Left on node-a: what S1 left (the DaemonSet pod, the mirror pod).
    assert_eq!(
        pods_on(&server, "node-a"),
        vec!["ds1-a", "static-web-node-a"]
    );

    // S1's order: GET node, PATCH node (cordon), GET pods by node, GET the DaemonSet, then
    // evictions.
    let reqs = api_requests(&server);
    let head: Vec<String> = reqs
        .iter()
        .take(4)
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert_eq!(
        head,
        vec![
            "GET /api/v1/nodes/node-a",
            "PATCH /api/v1/nodes/node-a",
            "GET /api/v1/pods",
            "GET /apis/apps/v1/namespaces/s1/daemonsets/ds1",
        ]
    );
    assert!(
        reqs[2]
            .query
            .contains("fieldSelector=spec.nodeName%3Dnode-a"),
        "{}",
        reqs[2].query
    );

    // Evictions: everything but the DaemonSet and mirror pods, each finally 201; 429 only for
    // the guarded pods, with S2's cause and no Retry-After.
    let ev = evictions(&server);
    let mut accepted: Vec<&str> = ev
        .iter()
        .filter(|(_, s)| *s == 201)
        .map(|(n, _)| n.as_str())
        .collect();
    accepted.sort();
    assert_eq!(
        accepted,
        vec![
            "bare",
            "done-svd8n",
            "guarded-1",
            "guarded-2",
            "guarded-3",
            "scratch-mvwz5",
            "terminating",
            "web-hpdw9"
        ]
    );
    let refused: Vec<RecordedRequest> = server
        .recorder()
        .matching("POST", "/eviction")
        .into_iter()
        .filter(|r| r.status == 429)
        .collect();
    assert!(!refused.is_empty(), "the budget throttled the guarded pods");
    for r in &refused {
        assert!(
            r.path.contains("/pods/guarded-"),
            "only guarded pods wait: {}",
            r.path
        );
        assert_eq!(
            r.retry_after, None,
            "a used-up budget carries no Retry-After"
        );
        let body: Value = serde_json::from_str(&r.response).expect("429 body");
        assert_eq!(
            body["message"],
            json!("Cannot evict pod as it would violate the pod's disruption budget.")
        );
        let cause = body["details"]["causes"][0]["message"]
            .as_str()
            .unwrap_or("");
        assert!(
            cause.starts_with("The disruption budget guarded needs 2 healthy pods and has "),
            "{cause}"
        );
    }
    assert!(
        ev.iter()
            .all(|(n, s)| *s == 201 || n.starts_with("guarded-"))
    );

    // The guarded replacements run on node-b; web and scratch replacements wait unbound
    // (their nodeSelector allows only the cordoned node-a); the Job pod is not replaced.
    let pods = server.store().list("Pod", Some("s1"));
    let of = |app: &str| -> Vec<&Value> {
        pods.iter()
            .filter(|p| p["metadata"]["labels"]["app"] == json!(app))
            .collect()
    };
    let guarded = of("guarded");
    assert_eq!(guarded.len(), 3);
    assert!(
        guarded
            .iter()
            .all(|p| p["spec"]["nodeName"] == json!("node-b"))
    );
    for app in ["web", "scratch"] {
        let waiting = of(app);
        assert_eq!(waiting.len(), 1, "{app}: {waiting:?}");
        assert!(
            waiting[0]["spec"]["nodeName"].is_null(),
            "{app} stays Pending"
        );
    }
    let pdb = server
        .store()
        .get("PodDisruptionBudget", Some("s1"), "guarded")
        .expect("pdb");
    assert_eq!(pdb["status"]["expectedPods"], json!(3));
    assert_eq!(pdb["status"]["disruptionsAllowed"], json!(1));

    // batch/v1 and the storage kinds are served (discovery, list).
    let listed = k
        .run(&["get", "jobs,cronjobs", "-n", "s1", "-o", "name"])
        .await;
    assert_eq!(
        String::from_utf8_lossy(&listed.stdout).trim(),
        "job.batch/done"
    );
    let storage = k
        .run(&["get", "volumeattachments,persistentvolumes", "-o", "name"])
        .await;
    assert_eq!(storage.status.code(), Some(0));

    // The cordon brought the node-lifecycle taint, with timeAdded.
    let node = server.store().get("Node", None, "node-a").expect("node");
    assert_eq!(node["spec"]["unschedulable"], json!(true));
    let taints = node["spec"]["taints"].as_array().expect("taints");
    assert_eq!(taints.len(), 1, "{taints:?}");
    assert_eq!(taints[0]["key"], json!("node.kubernetes.io/unschedulable"));
    assert!(taints[0]["timeAdded"].is_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s1_s2_mixed_node_drains_with_kubectl_1_32() {
    mixed_node_drain("1.32").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s1_s2_mixed_node_drains_with_kubectl_1_27() {
    mixed_node_drain("1.27").await;
}

const S3: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: lonely, namespace: s3, labels: {app: lonely}}
spec: {nodeName: node-a, containers: [{name: c, image: pause}]}
status: {phase: Running, conditions: [{type: Ready, status: "True"}]}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: lonely, namespace: s3}
spec:
  maxUnavailable: 1
  selector: {matchLabels: {app: lonely}}
"#;

/// S3: a bare pod under `maxUnavailable: 1` is never evicted: expectedPods 0, every eviction
/// 429 "needs 0 healthy pods and has 1 currently" without Retry-After, kubectl exits 1 at its
/// timeout, the UnmanagedPods Warning event exists.
async fn unmanaged_pod(version: &str) {
    let Some(bin) = kubectl(version) else { return };
    let server = start(&format!("{NODES}\n---\n{S3}")).await;
    let status = server
        .store()
        .get("PodDisruptionBudget", Some("s3"), "lonely")
        .expect("pdb")["status"]
        .clone();
    for (field, value) in [
        ("expectedPods", 0),
        ("desiredHealthy", 0),
        ("currentHealthy", 1),
        ("disruptionsAllowed", 0),
    ] {
        assert_eq!(status[field], json!(value), "{field}: {status}");
    }
    let k = Kubectl::new(bin, &server, "admin");
    let out = k.run(&["drain", "node-a", "--force", "--timeout=7s"]).await;
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("global timeout reached: 7s"), "{stderr}");
    let refused = server.recorder().matching("POST", "/eviction");
    assert!(refused.len() >= 2, "kubectl retried after 5 s: {refused:?}");
    for r in &refused {
        assert_eq!((r.status, r.retry_after.as_deref()), (429, None));
        assert!(
            r.response
                .contains("The disruption budget lonely needs 0 healthy pods and has 1 currently"),
            "{}",
            r.response
        );
    }
    assert_eq!(pods_on(&server, "node-a"), vec!["lonely"]);
    let events = server.store().list("Event", Some("s3"));
    assert!(
        events.iter().any(|e| e["reason"] == json!("UnmanagedPods")
            && e["involvedObject"]["name"] == json!("lonely")),
        "{events:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_unmanaged_pod_is_never_evicted_with_kubectl_1_32() {
    unmanaged_pod("1.32").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s3_unmanaged_pod_is_never_evicted_with_kubectl_1_27() {
    unmanaged_pod("1.27").await;
}

const S4: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: shared, namespace: s4, labels: {app: shared, tier: front}}
spec: {nodeName: node-b, containers: [{name: c, image: pause}]}
status: {phase: Running, conditions: [{type: Ready, status: "True"}]}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: by-app, namespace: s4}
spec: {minAvailable: 0, selector: {matchLabels: {app: shared}}}
---
apiVersion: policy/v1
kind: PodDisruptionBudget
metadata: {name: by-tier, namespace: s4}
spec: {minAvailable: 0, selector: {matchLabels: {tier: front}}}
"#;

/// S4: two budgets over one pod: one eviction, HTTP 500 with S4's body verbatim, exit 1.
async fn two_budgets(version: &str) {
    let Some(bin) = kubectl(version) else { return };
    let server = start(&format!("{NODES}\n---\n{S4}")).await;
    let k = Kubectl::new(bin, &server, "admin");
    let out = k
        .run(&[
            "drain",
            "node-b",
            "--ignore-daemonsets",
            "--force",
            "--timeout=15s",
        ])
        .await;
    assert_eq!(out.status.code(), Some(1));
    let ev = server.recorder().matching("POST", "/eviction");
    assert_eq!(ev.len(), 1, "kubectl does not retry a 500");
    assert_eq!(ev[0].status, 500);
    assert_eq!(
        ev[0].response,
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"This pod has more than one PodDisruptionBudget, which the eviction subresource does not support.","code":500}"#
    );
    assert_eq!(pods_on(&server, "node-b"), vec!["shared"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_two_budgets_fail_the_drain_at_once_with_kubectl_1_32() {
    two_budgets("1.32").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s4_two_budgets_fail_the_drain_at_once_with_kubectl_1_27() {
    two_budgets("1.27").await;
}

const S5: &str = r#"
apiVersion: v1
kind: Pod
metadata: {name: on-a, namespace: s5, labels: {app: s5}}
spec: {nodeName: node-a, containers: [{name: c, image: pause}]}
status: {phase: Running, conditions: [{type: Ready, status: "True"}]}
---
apiVersion: v1
kind: Pod
metadata: {name: on-b, namespace: s5, labels: {app: s5}}
spec: {nodeName: node-b, containers: [{name: c, image: pause}]}
status: {phase: Running, conditions: [{type: Ready, status: "True"}]}
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: ds5, namespace: s5}
spec:
  selector: {matchLabels: {app: ds5}}
  template:
    metadata: {labels: {app: ds5}}
    spec: {containers: [{name: c, image: pause}]}
"#;

/// S5 with the node-list rule of 1.31+: what node-a's own credentials may do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_node_identity_answers_as_the_recording() {
    let Some(bin) = kubectl("1.32") else { return };
    let server = start(&format!("{NODES}\n---\n{S5}")).await;
    let k = Kubectl::new(bin, &server, "system:node:node-a");
    let stderr = |o: &Output| String::from_utf8_lossy(&o.stderr).into_owned();

    let cordon = k.run(&["cordon", "node-a"]).await;
    assert_eq!(cordon.status.code(), Some(0), "{}", stderr(&cordon));
    let taint = k
        .run(&[
            "taint",
            "nodes",
            "node-a",
            "example.com/maint=true:NoSchedule",
        ])
        .await;
    assert!(
        stderr(&taint).contains(
            r#"nodes "node-a" is forbidden: node "node-a" is not allowed to modify taints"#
        ),
        "{}",
        stderr(&taint)
    );
    let dry = k
        .run(&[
            "patch",
            "node",
            "node-a",
            "--type=json",
            "-p",
            r#"[{"op":"add","path":"/spec/taints/-","value":{"key":"example.com/maint","value":"true","effect":"NoSchedule"}}]"#,
            "--dry-run=server",
        ])
        .await;
    assert!(
        stderr(&dry).contains("is not allowed to modify taints"),
        "{}",
        stderr(&dry)
    );
    let other = k
        .run(&[
            "patch",
            "node",
            "node-b",
            "-p",
            r#"{"spec":{"unschedulable":true}}"#,
        ])
        .await;
    assert!(
        stderr(&other).contains(r#"node "node-a" is not allowed to modify node "node-b""#),
        "{}",
        stderr(&other)
    );
    // 1.31+ (selector-aware Node authorizer): only its own pods, by field selector.
    let all = k.run(&["get", "pods", "-A"]).await;
    assert_eq!(all.status.code(), Some(1));
    assert!(
        stderr(&all).contains("can only list/watch pods with spec.nodeName field selector"),
        "{}",
        stderr(&all)
    );
    let own = k
        .run(&[
            "get",
            "pods",
            "-A",
            "--field-selector",
            "spec.nodeName=node-a",
            "-o",
            "name",
        ])
        .await;
    assert_eq!(String::from_utf8_lossy(&own.stdout).trim(), "pod/on-a");
    let ds = k.run(&["get", "daemonset", "-n", "s5", "ds5"]).await;
    assert!(
        stderr(&ds).contains(r#"User "system:node:node-a" cannot get resource "daemonsets" in API group "apps" in the namespace "s5""#),
        "{}",
        stderr(&ds)
    );
    let pdbs = k.run(&["get", "pdb", "-A"]).await;
    assert!(
        stderr(&pdbs).contains(r#"cannot list resource "poddisruptionbudgets" in API group "policy" at the cluster scope"#),
        "{}",
        stderr(&pdbs)
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let body = dir.path().join("eviction.json");
    std::fs::write(
        &body,
        r#"{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"on-b","namespace":"s5"}}"#,
    )
    .expect("body written");
    let body = body.to_string_lossy().into_owned();
    let evict_b = k
        .run(&[
            "create",
            "--raw",
            "/api/v1/namespaces/s5/pods/on-b/eviction",
            "-f",
            &body,
        ])
        .await;
    assert!(
        stderr(&evict_b)
            .contains("node node-a can only evict pods with spec.nodeName set to itself"),
        "{}",
        stderr(&evict_b)
    );
    // State afterwards: cordoned with the lifecycle taint, no example.com taint, on-b stays.
    let node = server.store().get("Node", None, "node-a").expect("node");
    assert_eq!(
        node["spec"]["taints"]
            .as_array()
            .map(|t| t.iter().map(|t| t["key"].clone()).collect::<Vec<_>>()),
        Some(vec![json!("node.kubernetes.io/unschedulable")])
    );
    assert_eq!(pods_on(&server, "node-b"), vec!["on-b"]);
}

const S6: &str = r#"
apiVersion: apps/v1
kind: ReplicaSet
metadata: {name: web, namespace: s6, uid: web-uid}
spec:
  replicas: 2
  selector: {matchLabels: {app: web}}
  template:
    metadata: {labels: {app: web}}
    spec: {nodeSelector: {kubernetes.io/hostname: node-a}, containers: [{name: c, image: pause}]}
---
apiVersion: v1
kind: Pod
metadata:
  name: web-m992w
  namespace: s6
  labels: {app: web}
  ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: web, uid: web-uid, controller: true}]
spec: {nodeName: node-a, containers: [{name: c, image: pause}]}
status: {phase: Running, conditions: [{type: Ready, status: "True"}]}
---
apiVersion: v1
kind: Pod
metadata:
  name: web-pskg5
  namespace: s6
  labels: {app: web}
  ownerReferences: [{apiVersion: apps/v1, kind: ReplicaSet, name: web, uid: web-uid, controller: true}]
spec: {nodeName: node-a, containers: [{name: c, image: pause}]}
status: {phase: Running, conditions: [{type: Ready, status: "True"}]}
"#;

/// S6: with the disruption controller stopped, a new budget is never observed; every eviction
/// is 429 "still being processed" with `Retry-After: 10` (which kubectl's client honours by
/// itself, so the drain does not get through in its 12 s); nothing is evicted.
async fn lagging_budget(version: &str) {
    let Some(bin) = kubectl(version) else { return };
    let server = start(&format!("{NODES}\n---\n{S6}")).await;
    server.controllers().set_disruption_controller(false);
    server
        .store()
        .upsert(
            json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "lagging", "namespace": "s6"},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}}),
        )
        .expect("pdb");
    let pdb = server
        .store()
        .get("PodDisruptionBudget", Some("s6"), "lagging")
        .expect("pdb");
    assert_eq!(
        pdb["status"],
        json!({"currentHealthy": 0, "desiredHealthy": 0, "disruptionsAllowed": 0, "expectedPods": 0})
    );
    let k = Kubectl::new(bin, &server, "admin");
    let mut drain = k
        .command(&["drain", "node-a", "--ignore-daemonsets", "--timeout=12s"])
        .spawn()
        .expect("kubectl starts");
    // kubectl 1.29 ran 105 s here (client-go retries Retry-After 10 s ten times); stop it once
    // each pod has had its first retry.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    while server.recorder().count("POST", "/eviction") < 4 && tokio::time::Instant::now() < deadline
    {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let still_running = drain.try_wait().expect("kubectl status").is_none();
    drain.kill().await.ok();
    assert!(still_running, "kubectl was still retrying the 429s itself");
    let ev = server.recorder().matching("POST", "/eviction");
    assert!(ev.len() >= 4, "two attempts per pod: {ev:?}");
    for r in &ev {
        assert_eq!((r.status, r.retry_after.as_deref()), (429, Some("10")));
        let body: Value = serde_json::from_str(&r.response).expect("429 body");
        assert_eq!(
            body["details"],
            json!({"causes": [{"reason": "DisruptionBudget",
                "message": "The disruption budget lagging is still being processed by the server."}],
                "retryAfterSeconds": 10})
        );
    }
    assert_eq!(pods_on(&server, "node-a"), vec!["web-m992w", "web-pskg5"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_lagging_budget_answers_retry_after_with_kubectl_1_32() {
    lagging_budget("1.32").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s6_lagging_budget_answers_retry_after_with_kubectl_1_27() {
    lagging_budget("1.27").await;
}

/// S7 (grace shortened): a stopped kubelet's node keeps Ready=True with its last heartbeat,
/// then goes Unknown/NodeStatusUnknown with the unreachable taints; its pod goes Ready=False;
/// the Lease stops; starting the kubelet again brings a fresh heartbeat.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s7_kubelet_stop_makes_the_node_unknown_after_the_grace() {
    let Some(bin) = kubectl("1.32") else { return };
    let server = start(&format!(
        "{NODES}\n---\n{}",
        r#"
apiVersion: v1
kind: Pod
metadata: {name: web-1, namespace: s7, labels: {app: web}}
spec: {nodeName: node-a, containers: [{name: c, image: pause}]}
status: {phase: Running, conditions: [{type: Ready, status: "True"}]}
"#
    ))
    .await;
    let mut t = server.controllers().timings();
    t.node_monitor_grace = Duration::from_secs(2);
    t.noexecute_after = Duration::from_secs(1);
    server.controllers().set_timings(t);
    let k = Kubectl::new(bin, &server, "admin");
    let ready = |n: &Value| {
        n["status"]["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == json!("Ready")).cloned())
            .unwrap_or(Value::Null)
    };
    let get_node = || async {
        let out = k.run(&["get", "node", "node-a", "-o", "json"]).await;
        serde_json::from_slice::<Value>(&out.stdout).expect("node json")
    };
    let before = ready(&get_node().await);
    assert_eq!(before["status"], json!("True"));
    let lease = server
        .store()
        .get("Lease", Some("kube-node-lease"), "node-a")
        .expect("lease")["spec"]["renewTime"]
        .clone();
    server.kubelets().stop("node-a").expect("stopped");
    let stale = ready(&get_node().await);
    assert_eq!(
        (&stale["status"], &stale["lastHeartbeatTime"]),
        (&json!("True"), &before["lastHeartbeatTime"]),
        "Ready stays True with the last heartbeat"
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let node = loop {
        let n = get_node().await;
        if n["spec"]["taints"].as_array().is_some_and(|t| t.len() == 2)
            || tokio::time::Instant::now() > deadline
        {
            break n;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    };
    let unknown = ready(&node);
    assert_eq!(unknown["status"], json!("Unknown"));
    assert_eq!(unknown["reason"], json!("NodeStatusUnknown"));
    assert_eq!(
        unknown["message"],
        json!("Kubelet stopped posting node status.")
    );
    assert_eq!(unknown["lastHeartbeatTime"], before["lastHeartbeatTime"]);
    let taints: Vec<(Value, Value)> = node["spec"]["taints"]
        .as_array()
        .expect("taints")
        .iter()
        .map(|t| (t["key"].clone(), t["effect"].clone()))
        .collect();
    assert_eq!(
        taints,
        vec![
            (json!("node.kubernetes.io/unreachable"), json!("NoSchedule")),
            (json!("node.kubernetes.io/unreachable"), json!("NoExecute"))
        ]
    );
    assert!(node["spec"]["unschedulable"].is_null(), "never cordoned");
    let pod = server.store().get("Pod", Some("s7"), "web-1").expect("pod");
    assert_eq!(pod["status"]["phase"], json!("Running"));
    assert!(
        pod["status"]["conditions"]
            .as_array()
            .expect("conditions")
            .iter()
            .any(|c| c["type"] == json!("Ready") && c["status"] == json!("False"))
    );
    assert_eq!(
        server
            .store()
            .get("Lease", Some("kube-node-lease"), "node-a")
            .expect("lease")["spec"]["renewTime"],
        lease,
        "no renewal while stopped"
    );
    // Started again: a fresh heartbeat, Ready=True, the unreachable taints gone.
    server.kubelets().start("node-a").expect("started");
    assert_eq!(ready(&get_node().await)["status"], json!("True"));
    assert!(get_node().await["spec"]["taints"].is_null());
}

/// Section 5's field ownership with real kubectl: a JSON patch with `?fieldManager=` owns
/// `f:spec.f:unschedulable`; `kubectl uncordon` (another manager) removes that entry; a later
/// `kubectl cordon` (no fieldManager: the manager is kubectl's binary name, from its
/// User-Agent) owns it; the node-lifecycle controller's taint write owns `f:spec.f:taints`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cordon_ownership_follows_the_last_writer() {
    let Some(bin) = kubectl("1.32") else { return };
    let binary = bin
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let server = start(NODES).await;
    let k = Kubectl::new(bin, &server, "admin");
    let owners = |server: &FakeApiServer| -> Vec<(String, Value)> {
        server.store().get("Node", None, "node-a").expect("node")["metadata"]["managedFields"]
            .as_array()
            .map(|es| {
                es.iter()
                    .map(|e| {
                        (
                            e["manager"].as_str().unwrap_or("").to_string(),
                            e["fieldsV1"].clone(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    };
    let cordon_field = json!({"f:spec": {"f:unschedulable": {}}});
    let out = k
        .run(&[
            "patch",
            "node",
            "node-a",
            "--type=json",
            "--field-manager=kube-shutdown-drain",
            "-p",
            r#"[{"op":"add","path":"/spec/unschedulable","value":true}]"#,
        ])
        .await;
    assert_eq!(out.status.code(), Some(0));
    let after_ours = owners(&server);
    assert!(
        after_ours.contains(&("kube-shutdown-drain".to_string(), cordon_field.clone())),
        "{after_ours:?}"
    );
    assert!(
        after_ours.contains(&(
            "kube-controller-manager".to_string(),
            json!({"f:spec": {"f:taints": {}}})
        )),
        "{after_ours:?}"
    );
    assert_eq!(k.run(&["uncordon", "node-a"]).await.status.code(), Some(0));
    let after_uncordon = owners(&server);
    assert!(
        after_uncordon
            .iter()
            .all(|(m, _)| m != "kube-shutdown-drain"),
        "{after_uncordon:?}"
    );
    assert_eq!(k.run(&["cordon", "node-a"]).await.status.code(), Some(0));
    let after_cordon = owners(&server);
    assert!(
        after_cordon.contains(&(binary.clone(), cordon_field)),
        "{binary}: {after_cordon:?}"
    );
    let patch = server
        .recorder()
        .matching("PATCH", "/api/v1/nodes/node-a")
        .into_iter()
        .last()
        .expect("cordon patch");
    assert!(!patch.query.contains("fieldManager"), "{}", patch.query);
}
