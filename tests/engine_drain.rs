//! The engine against the fake API server: each filter end to end, order groups, new pods,
//! replaced pods, and the request shape (one list, one watch, no per-pod polling, no DaemonSet GET).

mod engine_support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use engine_support::*;
use fake_apiserver::Route;
use kube_shutdown_drain::drain::DrainOptions;
use kube_shutdown_drain::engine::Engine;
use kube_shutdown_drain::report::{Outcome, Report};
use serde_json::json;
use tokio::time::Instant;

fn outcomes(r: &Report) -> BTreeMap<String, (String, Outcome)> {
    r.pods
        .iter()
        .map(|p| (p.name.clone(), (p.reason.as_str().to_string(), p.outcome)))
        .collect()
}

/// Every filter end to end on one node: what is evicted is gone, what is skipped stays.
#[tokio::test]
async fn each_filter_end_to_end() {
    let c = Cluster::start(vec![
        pod(NS, "plain", NODE),
        daemonset_pod(NS, "ds-pod", NODE),
        pod_with(NS, "mirror", NODE, json!({"metadata": {"annotations": {"kubernetes.io/config.mirror": "abc"}}})),
        pod_with(NS, "portworx", NODE, json!({"spec": {"tolerations": [
            {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"}]}})),
        pod_with(NS, "capi-skip", NODE, json!({"metadata": {"labels": {"cluster.x-k8s.io/drain": "skip"}}})),
        pod_with(NS, "selected-skip", NODE, json!({"metadata": {"labels": {"drain": "skip"}}})),
        pod("kube-system", "in-skipped-ns", NODE),
        pod_with(NS, "done", NODE, json!({"status": {"phase": "Succeeded", "conditions": []}})),
        pod_with(NS, "scratch", NODE, json!({"spec": {"volumes": [{"name": "s", "emptyDir": {}}]}})),
        bare_pod(NS, "bare", NODE),
        pod(NS, "elsewhere", OTHER_NODE),
        pod_with(NS, "db", NODE, json!({"metadata": {"labels": {"app": "db"}}})),
    ])
    .await;
    c.server.store().upsert(namespace("kube-system")).unwrap();
    let settings = c.settings(
        "[filters]\nskip_selector = \"drain=skip\"\nskip_namespaces = [\"kube-system\"]\n\
         [[rules]]\nselector = \"app=db\"\naction = \"skip\"\n",
    );
    let engine = Engine::new(settings.clone()).unwrap();
    engine.prepare("test").await.unwrap();
    c.server.recorder().clear();
    let report = engine.drain(Instant::now() + Duration::from_secs(20)).await;
    assert!(report.complete, "{}", report.to_text());
    let got = outcomes(&report);
    let want: BTreeMap<String, (String, Outcome)> = [
        ("plain", "default", Outcome::Evicted),
        ("ds-pod", "daemon-set", Outcome::Skipped),
        ("mirror", "mirror", Outcome::Skipped),
        ("portworx", "tolerates-cordon", Outcome::Skipped),
        ("capi-skip", "capi-drain-label", Outcome::Skipped),
        ("selected-skip", "skip-selector", Outcome::Skipped),
        ("in-skipped-ns", "skip-namespace", Outcome::Skipped),
        ("done", "completed", Outcome::Skipped),
        ("scratch", "empty-dir", Outcome::Evicted),
        ("bare", "unreplicated", Outcome::Evicted),
        ("db", "rule", Outcome::Skipped),
    ]
    .into_iter()
    .map(|(n, r, o)| (n.to_string(), (r.to_string(), o)))
    .collect();
    assert_eq!(got, want);
    for gone in ["plain", "scratch", "bare"] {
        assert!(c.pod(NS, gone).is_none(), "{gone} was evicted and is gone");
    }
    for kept in [
        "ds-pod",
        "mirror",
        "portworx",
        "capi-skip",
        "selected-skip",
        "done",
        "db",
    ] {
        assert!(c.pod(NS, kept).is_some(), "{kept} stays");
        assert_eq!(c.evictions_of(NS, kept), 0, "{kept} never evicted");
    }
    assert!(c.pod(NS, "elsewhere").is_some());

    // The request shape: one pod list, pod watches only (no GET of single pods), no DaemonSet GET.
    let reqs = c.server.recorder().requests();
    let lists = reqs
        .iter()
        .filter(|r| {
            r.method == "GET" && r.path == "/api/v1/pods" && r.query_param("watch").is_none()
        })
        .count();
    assert_eq!(lists, 1, "one paged list");
    let watches = reqs
        .iter()
        .filter(|r| {
            r.method == "GET"
                && r.path == "/api/v1/pods"
                && r.query_param("watch").as_deref() == Some("true")
        })
        .collect::<Vec<_>>();
    assert_eq!(watches.len(), 1, "one watch on the node's pods");
    assert_eq!(
        watches[0].query_param("fieldSelector").as_deref(),
        Some("spec.nodeName=node-a")
    );
    assert!(
        reqs.iter().all(|r| !r.path.contains("daemonsets")),
        "no DaemonSet reads"
    );
    let pod_gets = reqs
        .iter()
        .filter(|r| {
            r.method == "GET"
                && r.path.starts_with("/api/v1/namespaces/")
                && r.path.contains("/pods/")
        })
        .count();
    assert_eq!(pod_gets, 0, "no per-pod polling");
    let list = reqs.iter().find(|r| r.path == "/api/v1/pods").unwrap();
    assert_eq!(
        list.query_param("fieldSelector").as_deref(),
        Some("spec.nodeName=node-a")
    );
    assert_eq!(list.query_param("limit").as_deref(), Some("500"));

    // The eviction body: policy/v1 with camelCase deleteOptions and the UID precondition.
    let ev = reqs
        .iter()
        .find(|r| r.path.ends_with("/plain/eviction"))
        .unwrap();
    let body = ev.json().unwrap();
    assert_eq!(body["apiVersion"], "policy/v1");
    assert_eq!(body["kind"], "Eviction");
    assert!(
        body["deleteOptions"]["preconditions"]["uid"]
            .as_str()
            .is_some_and(|u| !u.is_empty()),
        "{body}"
    );

    // The report is stored as the last report.
    let stored = Report::read_last(&settings.state_dir)
        .unwrap()
        .expect("last report written");
    assert_eq!(stored, report);
}

/// Order groups: lower priority first, each group finishes before the next starts; rule orders
/// share the scale.
#[tokio::test]
async fn order_groups_finish_before_the_next_starts() {
    let c = Cluster::start(vec![
        pod_with(NS, "high", NODE, json!({"spec": {"priority": 1000}})),
        merged(
            slow_pod(NS, "low", NODE, 0.5),
            json!({"spec": {"priority": -5}}),
        ),
        slow_pod(NS, "mid-a", NODE, 0.3),
        pod(NS, "mid-b", NODE),
        pod_with(
            NS,
            "ruled",
            NODE,
            json!({"metadata": {"labels": {"tier": "db"}}, "spec": {"priority": -100}}),
        ),
    ])
    .await;
    let settings =
        c.settings("[[rules]]\nselector = \"tier=db\"\naction = \"drain\"\norder = 500\n");
    let engine = Engine::new(settings).unwrap();
    let report = engine.drain(Instant::now() + Duration::from_secs(20)).await;
    assert!(report.complete, "{}", report.to_text());
    let by: BTreeMap<&str, (u64, u64)> = report
        .pods
        .iter()
        .map(|p| {
            (
                p.name.as_str(),
                (p.started_ms.unwrap(), p.finished_ms.unwrap()),
            )
        })
        .collect();
    // -5 (low) < 0 (mid-a, mid-b) < 500 (ruled) < 1000 (high)
    assert!(
        by["low"].1 <= by["mid-a"].0 && by["low"].1 <= by["mid-b"].0,
        "{by:?}"
    );
    assert!(
        by["mid-a"].1 <= by["ruled"].0 && by["mid-b"].1 <= by["ruled"].0,
        "{by:?}"
    );
    assert!(by["ruled"].1 <= by["high"].0, "{by:?}");
    // The POSTs came in that order too.
    let order: Vec<String> = c
        .server
        .recorder()
        .requests()
        .iter()
        .filter(|r| r.path.ends_with("/eviction"))
        .map(|r| r.path.split('/').nth(6).unwrap().to_string())
        .collect();
    assert_eq!(order.first().map(String::as_str), Some("low"));
    assert_eq!(order.last().map(String::as_str), Some("high"));
}

/// A pod replaced by one of the same name (another UID, on another node) before its eviction:
/// the replacement is never evicted.
#[tokio::test]
async fn replaced_pod_is_not_evicted() {
    let c = Cluster::start(vec![
        // `first` (its own, earlier group) terminates only when the test removes it.
        merged(
            slow_pod(NS, "first", NODE, 600.0),
            json!({"spec": {"priority": -1}}),
        ),
        pod(NS, "web-0", NODE),
    ])
    .await;
    let engine = Arc::new(Engine::new(c.settings("")).unwrap());
    let drain = tokio::spawn({
        let engine = engine.clone();
        async move { engine.drain(Instant::now() + Duration::from_secs(30)).await }
    });
    // While `first` terminates, web-0 is replaced: same name, new UID, bound to node-b (as a
    // StatefulSet controller would recreate it). Then `first` goes and web-0's group starts.
    until("the eviction of `first` accepted", || {
        c.server
            .recorder()
            .matching("POST", "/pods/first/eviction")
            .iter()
            .any(|r| r.status == 201)
    })
    .await;
    assert_eq!(c.evictions_of(NS, "web-0"), 0, "web-0 waits for its group");
    c.server.store().remove("Pod", Some(NS), "web-0").unwrap();
    c.server
        .store()
        .upsert(pod(NS, "web-0", OTHER_NODE))
        .unwrap();
    c.server.store().remove("Pod", Some(NS), "first").unwrap();
    let report = drain.await.unwrap();
    assert!(report.complete, "{}", report.to_text());
    let web = report.pods.iter().find(|p| p.name == "web-0").unwrap();
    assert_eq!(web.outcome, Outcome::Gone, "{}", report.to_text());
    assert_eq!(c.evictions_of(NS, "web-0"), 0);
    let now = c.pod(NS, "web-0").expect("the replacement still runs");
    assert_eq!(now["spec"]["nodeName"], OTHER_NODE);
}

/// The engine's UID precondition protects a replacement on the same node: web-0 is replaced
/// (same name, new UID, opting out of draining) while the engine's eviction of the planned pod is
/// held at the server; the eviction arrives with the planned UID, the server refuses it (409),
/// the engine takes the planned pod for gone and the replacement survives, never evicted.
#[tokio::test]
async fn uid_precondition_protects_a_replacement_on_the_same_node() {
    let c = Cluster::start(vec![pod(NS, "web-0", NODE)]).await;
    let planned_uid = c.pod(NS, "web-0").unwrap()["metadata"]["uid"].clone();
    let route = Route::new("POST", "/api/v1/namespaces/work/pods/web-0/eviction");
    c.server.faults().gate(route.clone());
    let engine = Arc::new(Engine::new(c.settings("")).unwrap());
    let drain = tokio::spawn({
        let engine = engine.clone();
        async move { engine.drain(Instant::now() + Duration::from_secs(20)).await }
    });
    c.until_held(&route, 1).await;
    c.server.store().remove("Pod", Some(NS), "web-0").unwrap();
    c.server
        .store()
        .upsert(pod_with(
            NS,
            "web-0",
            NODE,
            json!({"metadata": {"labels": {"cluster.x-k8s.io/drain": "skip"}}}),
        ))
        .unwrap();
    let new_uid = c.pod(NS, "web-0").unwrap()["metadata"]["uid"].clone();
    assert_ne!(planned_uid, new_uid);
    c.server.faults().ungate(&route);
    let report = drain.await.unwrap();
    assert!(report.complete, "{}", report.to_text());

    let posts = c.server.recorder().matching("POST", "/pods/web-0/eviction");
    assert_eq!(posts.len(), 1, "only the held eviction: {posts:#?}");
    let body = posts[0].json().unwrap();
    assert_eq!(body["deleteOptions"]["preconditions"]["uid"], planned_uid);
    assert_eq!(posts[0].status, 409, "{}", posts[0].response);
    let now = c.pod(NS, "web-0").expect("the replacement survives");
    assert_eq!(now["metadata"]["uid"], new_uid);
    assert!(now["metadata"]["deletionTimestamp"].is_null(), "{now}");
    let rows: Vec<Outcome> = report
        .pods
        .iter()
        .filter(|p| p.name == "web-0")
        .map(|p| p.outcome)
        .collect();
    assert!(rows.contains(&Outcome::Gone), "{}", report.to_text());
    assert!(!rows.contains(&Outcome::Evicted), "{}", report.to_text());
}

/// Pods that appear on the node during the drain are planned and handled too.
#[tokio::test]
async fn pods_appearing_during_the_drain_are_handled() {
    let c = Cluster::start(vec![merged(
        // Terminates only when the test removes it.
        slow_pod(NS, "slow", NODE, 600.0),
        json!({"spec": {"priority": -1}}),
    )])
    .await;
    let engine = Arc::new(Engine::new(c.settings("")).unwrap());
    let drain = tokio::spawn({
        let engine = engine.clone();
        async move { engine.drain(Instant::now() + Duration::from_secs(30)).await }
    });
    until("the eviction of `slow` accepted", || {
        c.server
            .recorder()
            .matching("POST", "/pods/slow/eviction")
            .iter()
            .any(|r| r.status == 201)
    })
    .await;
    assert!(
        !drain.is_finished(),
        "the drain still runs when the pods appear"
    );
    c.server.store().upsert(pod(NS, "late", NODE)).unwrap();
    c.server
        .store()
        .upsert(daemonset_pod(NS, "late-ds", NODE))
        .unwrap();
    // Then `slow` goes: its deletion comes after the new pods in the pod watch (resourceVersion
    // order), so the drain has seen them before its last planned pod is gone.
    c.server.store().remove("Pod", Some(NS), "slow").unwrap();
    let report = drain.await.unwrap();
    assert!(report.complete, "{}", report.to_text());
    let got = outcomes(&report);
    assert_eq!(
        got.get("late").map(|x| x.1),
        Some(Outcome::Evicted),
        "{}",
        report.to_text()
    );
    assert_eq!(got.get("late-ds").map(|x| x.1), Some(Outcome::Skipped));
    assert!(c.pod(NS, "late").is_none());
    assert!(c.pod(NS, "late-ds").is_some());
    assert_eq!(c.evictions_of(NS, "late-ds"), 0);
}

/// `wait-completed`: the drain waits for the pod to finish without evicting it.
#[tokio::test]
async fn wait_completed_pods_are_waited_for_not_evicted() {
    let c = Cluster::start(vec![pod_with(
        NS,
        "batch",
        NODE,
        json!({"metadata": {"labels": {"cluster.x-k8s.io/drain": "wait-completed"}}}),
    )])
    .await;
    let engine = Arc::new(Engine::new(c.settings("")).unwrap());
    let drain = tokio::spawn({
        let engine = engine.clone();
        async move { engine.drain(Instant::now() + Duration::from_secs(20)).await }
    });
    // The drain is under way (it watches the node's pods) and has not finished: it waits.
    until("the pod watch", || {
        c.server
            .recorder()
            .requests()
            .iter()
            .any(|r| r.path == "/api/v1/pods" && r.query_param("watch").is_some())
    })
    .await;
    assert!(!drain.is_finished(), "the drain waits for the running pod");
    c.server
        .store()
        .modify("Pod", Some(NS), "batch", |p| {
            p["status"]["phase"] = json!("Succeeded")
        })
        .unwrap();
    let report = drain.await.unwrap();
    assert!(report.complete, "{}", report.to_text());
    assert_eq!(report.pods[0].outcome, Outcome::Completed);
    assert_eq!(c.evictions_of(NS, "batch"), 0);
}

/// `--dry-run` changes nothing and sends no eviction.
#[tokio::test]
async fn dry_run_changes_nothing() {
    let c = Cluster::start(vec![pod(NS, "a", NODE), daemonset_pod(NS, "d", NODE)]).await;
    let engine = Engine::new(c.settings("")).unwrap();
    let report = engine
        .drain_with(
            Instant::now() + Duration::from_secs(10),
            DrainOptions {
                why: "test".into(),
                dry_run: true,
                grace_to: None,
            },
        )
        .await;
    assert!(report.dry_run);
    assert_eq!(outcomes(&report)["a"].1, Outcome::DryRun);
    assert_eq!(outcomes(&report)["d"].1, Outcome::Skipped);
    assert!(c.pod(NS, "a").is_some());
    assert!(
        c.server
            .recorder()
            .requests()
            .iter()
            .all(|r| r.method == "GET"),
        "only reads"
    );
}

/// Evictions in flight are bounded by `drain.concurrency`: every eviction is held at the server
/// and let through one at a time; three are held at once (never more), and each further one
/// arrives only after one of those was answered.
#[tokio::test]
async fn evictions_in_flight_are_bounded() {
    let pods: Vec<_> = (0..9).map(|i| pod(NS, &format!("p{i}"), NODE)).collect();
    let c = Cluster::start(pods).await;
    let route = Route::new("POST", "/eviction");
    c.server.faults().gate(route.clone());
    let engine = Arc::new(Engine::new(c.settings("[drain]\nconcurrency = 3\n")).unwrap());
    let drain = tokio::spawn({
        let engine = engine.clone();
        async move { engine.drain(Instant::now() + Duration::from_secs(30)).await }
    });
    let faults = c.server.faults();
    let mut most = 0;
    for answered in 0..9 {
        let expect = 3.min(9 - answered);
        until(&format!("{expect} evictions held"), || {
            let held = faults.waiting_at(&route);
            most = most.max(held);
            held >= expect
        })
        .await;
        most = most.max(faults.waiting_at(&route));
        faults.pass(&route, 1);
        until("the passed eviction answered", || {
            let held = faults.waiting_at(&route);
            most = most.max(held);
            c.server.recorder().count("POST", "/eviction") == answered + 1
        })
        .await;
    }
    let report = drain.await.unwrap();
    assert!(report.complete, "{}", report.to_text());
    assert_eq!(most, 3, "at most 3 evictions in flight, and 3 were");
    assert_eq!(c.server.recorder().count("POST", "/eviction"), 9);
}

/// The pod list follows `continue` tokens (pages of 500): 1,200 pods, three pages, one plan.
#[tokio::test]
async fn the_pod_list_is_paged() {
    let pods: Vec<_> = (0..1200)
        .map(|i| pod(NS, &format!("p{i:04}"), NODE))
        .collect();
    let c = Cluster::start(pods).await;
    let engine = Engine::new(c.settings("")).unwrap();
    let plan = engine.plan().await.unwrap();
    assert_eq!(plan.pods.len(), 1200);
    let lists = c.server.recorder().matching("GET", "/api/v1/pods?");
    assert_eq!(lists.len(), 3, "three pages");
    assert!(
        lists
            .iter()
            .all(|r| r.query_param("limit").as_deref() == Some("500"))
    );
    assert!(
        lists[1].query_param("continue").is_some() && lists[2].query_param("continue").is_some()
    );
}

/// The three policies turned around, end to end: emptyDir and unreplicated pods stay, a completed
/// pod is evicted.
#[tokio::test]
async fn policies_end_to_end() {
    let c = Cluster::start(vec![
        pod_with(
            NS,
            "scratch",
            NODE,
            json!({"spec": {"volumes": [{"name": "s", "emptyDir": {}}]}}),
        ),
        bare_pod(NS, "bare", NODE),
        pod_with(
            NS,
            "done",
            NODE,
            json!({"status": {"phase": "Failed", "conditions": []}}),
        ),
    ])
    .await;
    let engine = Engine::new(c.settings(
        "[filters]\nemptydir = \"skip\"\nunreplicated = \"skip\"\ncompleted = \"evict\"\n",
    ))
    .unwrap();
    let report = engine.drain(Instant::now() + Duration::from_secs(10)).await;
    assert!(report.complete, "{}", report.to_text());
    let got = outcomes(&report);
    assert_eq!(got["scratch"], ("empty-dir".to_string(), Outcome::Skipped));
    assert_eq!(got["bare"], ("unreplicated".to_string(), Outcome::Skipped));
    assert_eq!(got["done"], ("completed".to_string(), Outcome::Evicted));
    assert!(
        c.pod(NS, "scratch").is_some()
            && c.pod(NS, "bare").is_some()
            && c.pod(NS, "done").is_none()
    );
}
