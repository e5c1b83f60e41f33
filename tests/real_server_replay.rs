//! The product's `drain` on the setups recorded against a real control plane
//! (P1-P3, on kube-apiserver v1.29.7 with its controllers), replayed against the
//! fake: the same verdicts and outcomes, the same budget refusals.

mod engine_support;

use std::time::Duration;

use engine_support::*;
use serde_json::{Value, json};

fn running(mut p: Value) -> Value {
    fake_apiserver::store::set_pod_ready_in(&mut p, true);
    p
}

fn owned(ns: &str, name: &str, kind: &str, owner: &str, extra: Value) -> Value {
    let api = if kind == "Job" { "batch/v1" } else { "apps/v1" };
    merged(
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns,
                "annotations": {"fake-apiserver.test/termination-seconds": "0.5"},
                "ownerReferences": [{"apiVersion": api, "kind": kind, "name": owner,
                                     "uid": format!("{owner}-uid"), "controller": true}]},
            "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "pause"}]}}),
        extra,
    )
}

fn replicaset(ns: &str, name: &str, replicas: i64, template_spec: Value) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": name, "namespace": ns, "uid": format!("{name}-uid")},
        "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}}, "spec": template_spec}}})
}

fn verdicts(report: &Value) -> Vec<(String, String, String)> {
    let mut v: Vec<(String, String, String)> = report["pods"]
        .as_array()
        .expect("pods")
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap_or("").to_string(),
                p["action"].as_str().unwrap_or("").to_string(),
                p["outcome"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    v.sort();
    v
}

/// P1 (the S1 node): three pods evicted, the terminating one waited for until it completed,
/// the Succeeded Job pod, the DaemonSet pod and the mirror pod skipped; exit 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p1_mixed_node() {
    let ns = "s1";
    let deletion = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(59);
    let on_a = json!({"nodeSelector": {"kubernetes.io/hostname": NODE},
                      "containers": [{"name": "c", "image": "pause"}]});
    let c = Cluster::start(vec![
        replicaset(ns, "web", 1, on_a.clone()),
        replicaset(ns, "scratch", 1, on_a),
        json!({"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": "done", "namespace": ns, "uid": "done-uid"},
               "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "c", "image": "pause"}]}}}}),
        json!({"apiVersion": "apps/v1", "kind": "DaemonSet",
               "metadata": {"name": "ds1", "namespace": ns, "uid": "ds1-uid"},
               "spec": {"selector": {"matchLabels": {"app": "ds1"}},
                        "template": {"metadata": {"labels": {"app": "ds1"}},
                                     "spec": {"containers": [{"name": "c", "image": "pause"}]}}}}),
        running(owned(ns, "ds1-a", "DaemonSet", "ds1", json!({"metadata": {"labels": {"app": "ds1"}}}))),
        running(owned(ns, "web-hpdw9", "ReplicaSet", "web", json!({"metadata": {"labels": {"app": "web"}}}))),
        running(owned(
            ns,
            "scratch-mvwz5",
            "ReplicaSet",
            "scratch",
            json!({"metadata": {"labels": {"app": "scratch"}},
                   "spec": {"volumes": [{"name": "tmp", "emptyDir": {}}]}}),
        )),
        owned(
            ns,
            "done-svd8n",
            "Job",
            "done",
            json!({"status": {"phase": "Succeeded"}}),
        ),
        running(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "bare", "namespace": ns,
                         "annotations": {"fake-apiserver.test/termination-seconds": "0.5"}},
            "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "pause"}]}})),
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "static-web-node-a", "namespace": ns,
                "annotations": {"kubernetes.io/config.mirror": "9f2c", "kubernetes.io/config.hash": "9f2c",
                                "kubernetes.io/config.source": "file"},
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": "node-a-uid", "controller": true}]},
            "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "pause"}]},
            "status": {"phase": "Pending"}}),
        running(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "terminating", "namespace": ns,
                "annotations": {"fake-apiserver.test/termination-seconds": "2"},
                "deletionTimestamp": deletion.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
                "deletionGracePeriodSeconds": 60},
            "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "pause"}]}})),
    ])
    .await;
    let config = c.config_file("admin", "[drain]\ntimeout = \"60s\"\n");
    let r = cli(&config, &["drain", "--output", "json"]).await;
    assert_eq!(r.code, 0, "{}", r.stderr);
    let report: Value = serde_json::from_str(&r.stdout).expect("report");
    let v = verdicts(&report);
    let outcome = |name: &str| {
        v.iter()
            .find(|(n, _, _)| n == name)
            .map(|(_, a, o)| (a.as_str(), o.as_str()))
            .unwrap_or_else(|| panic!("{name} in the report: {v:?}"))
    };
    assert_eq!(outcome("bare"), ("evict", "evicted"));
    assert_eq!(outcome("scratch-mvwz5"), ("evict", "evicted"));
    assert_eq!(outcome("web-hpdw9"), ("evict", "evicted"));
    assert_eq!(outcome("terminating"), ("wait", "completed"));
    assert_eq!(outcome("done-svd8n"), ("skip", "skipped"));
    assert_eq!(outcome("ds1-a"), ("skip", "skipped"));
    assert_eq!(outcome("static-web-node-a"), ("skip", "skipped"));
    assert_eq!(c.evictions_of(ns, "terminating"), 0, "never evicted");
    // The Succeeded Job pod stayed on node-a, as on the real server.
    assert!(c.pod(ns, "done-svd8n").is_some());
    // The product's taint and the controller's cordon taint (with timeAdded), as recorded.
    let node = c.node(NODE);
    let keys: Vec<(String, String)> = taints(&node);
    assert!(keys.contains(&(
        "node.kubernetes.io/unschedulable".into(),
        "NoSchedule".into()
    )));
    assert!(keys.contains(&(
        "kube-shutdown-drain/shutdown".into(),
        "PreferNoSchedule".into()
    )));
}

/// P2 (S2: a ReplicaSet of 3 under `minAvailable: 2`, room on node-b): all three evicted, the
/// later ones after 429s naming the budget.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p2_budget_dynamics() {
    let ns = "s2";
    let mut objects = vec![
        replicaset(
            ns,
            "web",
            3,
            json!({"containers": [{"name": "c", "image": "pause"}]}),
        ),
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
               "metadata": {"name": "web", "namespace": ns},
               "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}}),
    ];
    for i in 1..=3 {
        objects.push(running(owned(
            ns,
            &format!("web-{i}"),
            "ReplicaSet",
            "web",
            json!({"metadata": {"labels": {"app": "web"}}}),
        )));
    }
    let c = Cluster::start(objects).await;
    let config = c.config_file("admin", "[drain]\ntimeout = \"60s\"\n");
    let r = cli(&config, &["drain", "--output", "json"]).await;
    assert_eq!(r.code, 0, "{}", r.stderr);
    let report: Value = serde_json::from_str(&r.stdout).expect("report");
    assert_eq!(report["complete"], json!(true));
    let v = verdicts(&report);
    assert_eq!(
        v.iter().map(|(_, _, o)| o.as_str()).collect::<Vec<_>>(),
        ["evicted", "evicted", "evicted"]
    );
    let refused: Vec<fake_apiserver::RecordedRequest> = c
        .server
        .recorder()
        .matching("POST", "/eviction")
        .into_iter()
        .filter(|r| r.status == 429)
        .collect();
    assert!(!refused.is_empty(), "the budget throttled the drain");
    for r in &refused {
        assert!(
            r.response
                .contains("The disruption budget web needs 2 healthy pods and has "),
            "{}",
            r.response
        );
        assert_eq!(r.retry_after, None);
    }
    // The replacements run on node-b.
    let replicas: Vec<Value> = c
        .server
        .store()
        .list("Pod", Some(ns))
        .into_iter()
        .filter(|p| p["spec"]["nodeName"] == json!(OTHER_NODE))
        .collect();
    assert_eq!(replicas.len(), 3);
}

/// P3 (S6 with the disruption controller stopped): every eviction is the "still being
/// processed" 429 with Retry-After 10; the product retries after 10 s and reports both pods
/// blocked by that budget at its deadline (exit 1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn p3_lagging_budget() {
    let ns = "s6";
    let mut objects = vec![replicaset(
        ns,
        "web",
        2,
        json!({"nodeSelector": {"kubernetes.io/hostname": NODE}, "containers": [{"name": "c", "image": "pause"}]}),
    )];
    for i in 1..=2 {
        objects.push(running(owned(
            ns,
            &format!("web-{i}"),
            "ReplicaSet",
            "web",
            json!({"metadata": {"labels": {"app": "web"}}}),
        )));
    }
    let c = Cluster::start(objects).await;
    c.server.controllers().set_disruption_controller(false);
    c.server
        .store()
        .upsert(
            json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": {"name": "lagging", "namespace": ns},
            "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}}),
        )
        .expect("pdb");
    let config = c.config_file("admin", "[drain]\ntimeout = \"13s\"\n");
    let r = cli(&config, &["drain", "--output", "json"]).await;
    assert_eq!(r.code, 1, "{}", r.stderr);
    let report: Value = serde_json::from_str(&r.stdout).expect("report");
    assert_eq!(
        (&report["complete"], &report["deadline_reached"]),
        (&json!(false), &json!(true))
    );
    for p in report["pods"].as_array().expect("pods") {
        assert_eq!(p["outcome"], json!("blocked"), "{p}");
        assert_eq!(p["budget"], json!("s6/lagging"), "{p}");
        assert_eq!(p["attempts"], json!(2), "{p}");
    }
    assert_eq!(
        report["blocked_by"][0]["message"],
        json!("The disruption budget lagging is still being processed by the server.")
    );
    let ev = c.server.recorder().matching("POST", "/eviction");
    assert!(
        ev.iter()
            .all(|r| r.status == 429 && r.retry_after.as_deref() == Some("10")),
        "{ev:?}"
    );
    assert!(
        eventually(Duration::from_secs(1), || c.pod(ns, "web-1").is_some()
            && c.pod(ns, "web-2").is_some())
        .await
    );
}
