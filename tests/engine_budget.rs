//! Disruption budgets against the fake API server: a budget that opens mid-drain is followed by
//! the eviction within about 100 ms (a PDB watch, not a fixed 5 s tick); a budget that never
//! opens cannot stretch the deadline, and the report names it; `on_deadline = "delete"`; a drain
//! dropped while blocked leaves no watch behind; the deadline delete is guarded by the planned UID.

mod engine_support;

use std::time::{Duration, SystemTime};

use engine_support::*;
use kube_shutdown_drain::engine::Engine;
use kube_shutdown_drain::report::Outcome;
use serde_json::json;
use tokio::time::Instant;

/// The budget opens 1.5 s into the drain; the retry interval is 30 s, so only the PDB watch can
/// explain an eviction soon after the opening.
#[tokio::test]
async fn eviction_follows_a_budget_opening_within_100ms() {
    let c = Cluster::start(vec![
        pod(NS, "guarded", NODE),
        pdb(NS, "guarded-pdb", "guarded", 1),
    ])
    .await;
    let engine = Engine::new(c.settings("[drain]\nretry_interval = \"30s\"\n")).unwrap();
    let store = c.server.store().clone();
    let opener = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        let opened_at = SystemTime::now();
        store
            .modify("PodDisruptionBudget", Some(NS), "guarded-pdb", |p| {
                p["spec"]["minAvailable"] = json!(0)
            })
            .unwrap();
        opened_at
    });
    let report = engine.drain(Instant::now() + Duration::from_secs(20)).await;
    let opened_at = opener.await.unwrap();
    assert!(report.complete, "{}", report.to_text());
    let posts = c
        .server
        .recorder()
        .matching("POST", "/pods/guarded/eviction");
    assert!(posts.len() >= 2, "a 429 first, then the accepted eviction");
    assert_eq!(posts[0].status, 429);
    let accepted = posts
        .iter()
        .find(|r| r.status == 201)
        .expect("accepted eviction");
    let lag = accepted.at.duration_since(opened_at).unwrap_or_default();
    println!(
        "eviction followed the budget opening after {} ms",
        lag.as_millis()
    );
    assert!(
        lag < Duration::from_millis(500),
        "eviction {} ms after the opening",
        lag.as_millis()
    );
    // Not a polling loop either: at most a couple of attempts while the budget stayed shut.
    assert!(posts.len() <= 4, "{} eviction attempts", posts.len());
}

/// A budget that never opens: the drain returns by the deadline, reports the budget and its
/// message, leaves the pod, and writes a deadline Event.
#[tokio::test]
async fn a_budget_that_never_opens_cannot_stretch_the_deadline() {
    let c = Cluster::start(vec![
        pod(NS, "guarded", NODE),
        pod(NS, "free", NODE),
        pdb(NS, "guarded-pdb", "guarded", 1),
    ])
    .await;
    let engine = Engine::new(c.settings("[drain]\nretry_interval = \"1s\"\n")).unwrap();
    let started = Instant::now();
    let deadline = started + Duration::from_secs(3);
    let report = engine.drain(deadline).await;
    let took = started.elapsed();
    assert!(
        took <= Duration::from_millis(4000),
        "returned after {took:?}"
    );
    assert!(!report.complete);
    assert!(report.deadline_reached);
    let guarded = report.pods.iter().find(|p| p.name == "guarded").unwrap();
    assert_eq!(guarded.outcome, Outcome::Blocked);
    assert_eq!(guarded.budget.as_deref(), Some("work/guarded-pdb"));
    assert!(
        guarded
            .detail
            .as_deref()
            .unwrap_or("")
            .contains("guarded-pdb"),
        "{guarded:?}"
    );
    assert_eq!(report.blocked_by.len(), 1);
    assert_eq!(report.blocked_by[0].budget, "work/guarded-pdb");
    assert_eq!(report.blocked_by[0].pods, vec!["work/guarded".to_string()]);
    assert!(c.pod(NS, "guarded").is_some());
    assert!(c.pod(NS, "free").is_none());
    // Events: started, blocked (with the budget's message), deadline, finished.
    let events = c.server.store().list("Event", Some("default"));
    let reasons: Vec<&str> = events.iter().filter_map(|e| e["reason"].as_str()).collect();
    for r in [
        "DrainStarted",
        "DrainBlockedByBudget",
        "DrainDeadlineReached",
        "DrainFinished",
    ] {
        assert!(reasons.contains(&r), "{r} missing from {reasons:?}");
    }
    let blocked = events
        .iter()
        .find(|e| e["reason"] == "DrainBlockedByBudget")
        .unwrap();
    assert!(
        blocked["message"].as_str().unwrap().contains("guarded-pdb"),
        "{blocked}"
    );
    assert_eq!(blocked["involvedObject"]["kind"], "Node");
    assert_eq!(blocked["involvedObject"]["name"], NODE);
    let finished = events
        .iter()
        .find(|e| e["reason"] == "DrainFinished")
        .unwrap();
    assert!(
        finished["message"].as_str().unwrap().contains("1 evicted"),
        "{finished}"
    );
}

/// `on_deadline = "delete"`: the pods left at the deadline are deleted, ignoring their budget;
/// the report keeps that budget for each deleted pod.
#[tokio::test]
async fn on_deadline_delete_removes_the_blocked_pods() {
    let c = Cluster::start(vec![
        pod(NS, "guarded", NODE),
        pdb(NS, "guarded-pdb", "guarded", 1),
    ])
    .await;
    let engine =
        Engine::new(c.settings("[drain]\non_deadline = \"delete\"\ngrace_period = \"1s\"\n"))
            .unwrap();
    let started = Instant::now();
    let report = engine.drain(started + Duration::from_secs(2)).await;
    assert!(started.elapsed() <= Duration::from_millis(3000));
    let guarded = report.pods.iter().find(|p| p.name == "guarded").unwrap();
    assert_eq!(guarded.outcome, Outcome::Deleted, "{}", report.to_text());
    assert_eq!(
        guarded.budget.as_deref(),
        Some("work/guarded-pdb"),
        "the deleted pod keeps the budget that blocked it"
    );
    assert_eq!(report.blocked_by.len(), 1, "{}", report.to_text());
    assert_eq!(report.blocked_by[0].budget, "work/guarded-pdb");
    assert_eq!(report.blocked_by[0].pods, vec!["work/guarded".to_string()]);
    assert!(report.deadline_reached);
    let deletes = c.server.recorder().matching("DELETE", "/pods/guarded");
    assert_eq!(deletes.len(), 1);
    assert!(eventually(Duration::from_secs(2), || c.pod(NS, "guarded").is_none()).await);
}

/// A 429 with Retry-After is retried after that many seconds (not earlier).
#[tokio::test]
async fn retry_after_is_honoured() {
    let c = Cluster::start(vec![pod(NS, "p", NODE)]).await;
    c.server.faults().fail_next_with_retry_after(
        fake_apiserver::Route::new("POST", "/api/v1/namespaces/work/pods/p/eviction"),
        1,
        429,
        1,
    );
    let engine = Engine::new(c.settings("[drain]\nretry_interval = \"30s\"\n")).unwrap();
    let report = engine.drain(Instant::now() + Duration::from_secs(10)).await;
    assert!(report.complete, "{}", report.to_text());
    let posts = c.server.recorder().matching("POST", "/pods/p/eviction");
    assert_eq!(posts.len(), 2);
    let gap = posts[1].at.duration_since(posts[0].at).unwrap();
    assert!(
        gap >= Duration::from_millis(950) && gap < Duration::from_secs(5),
        "{gap:?}"
    );
}

/// Dropping the drain future (the daemon does on a cancel or when its overrun guard fires) stops
/// every task the drain started: once the connections that were open are gone, no watch, list or
/// any other request arrives any more.
#[tokio::test]
async fn a_dropped_drain_leaves_no_task_behind() {
    let c = Cluster::start(vec![
        pod(NS, "guarded", NODE),
        pdb(NS, "guarded-pdb", "guarded", 1),
    ])
    .await;
    let engine = Engine::new(c.settings("[drain]\nretry_interval = \"1s\"\n")).unwrap();
    let far = Instant::now() + Duration::from_secs(600);
    let dropped = tokio::time::timeout(Duration::from_secs(2), engine.drain(far)).await;
    assert!(
        dropped.is_err(),
        "the drain cannot finish: the budget never opens"
    );
    assert!(
        c.server.recorder().count("GET", "watch=") >= 1,
        "the drain was watching when it was dropped: {:?}",
        c.server.recorder().requests()
    );
    // Cut the connections still open (the server records a watch when it ends), then listen again
    // so that anything left running could reconnect and would be seen.
    tokio::time::sleep(Duration::from_millis(300)).await;
    c.server.stop_listener();
    tokio::time::sleep(Duration::from_millis(300)).await;
    c.server.start_listener().await.unwrap();
    c.server.recorder().clear();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let after: Vec<String> = c
        .server
        .recorder()
        .requests()
        .iter()
        .map(|r| format!("{} {}", r.method, r.uri()))
        .collect();
    assert!(after.is_empty(), "requests after the drop: {after:#?}");
}

/// `on_deadline = "delete"` deletes the pod that was planned, by its UID: a same-name
/// replacement (here one the drain itself skips, on this node, while the planned pod still
/// waited for its order group) is never deleted.
#[tokio::test]
async fn the_deadline_delete_never_touches_a_same_name_replacement() {
    let c = Cluster::start(vec![
        pod(NS, "guarded", NODE),
        pdb(NS, "guarded-pdb", "guarded", 1),
        pod_with(
            NS,
            "late",
            NODE,
            json!({"metadata": {"labels": {"group": "late"}}}),
        ),
    ])
    .await;
    let planned_uid = c.pod(NS, "late").unwrap()["metadata"]["uid"].clone();
    let engine = Engine::new(c.settings(
        "[[rules]]\nselector = \"group=late\"\naction = \"drain\"\norder = 100\n\
         [drain]\non_deadline = \"delete\"\ngrace_period = \"1s\"\nretry_interval = \"1s\"\n",
    ))
    .unwrap();
    let store = c.server.store().clone();
    // `guarded` blocks the first group, so `late` is still waiting for its group when it is
    // replaced by a pod of the same name that opts out of draining.
    let replacer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        store.remove("Pod", Some(NS), "late").unwrap();
        store
            .upsert(pod_with(
                NS,
                "late",
                NODE,
                json!({"metadata": {"labels": {"cluster.x-k8s.io/drain": "skip"}}}),
            ))
            .unwrap();
    });
    let report = engine.drain(Instant::now() + Duration::from_secs(3)).await;
    replacer.await.unwrap();
    assert!(report.deadline_reached, "{}", report.to_text());
    let guarded = report.pods.iter().find(|p| p.name == "guarded").unwrap();
    assert_eq!(guarded.outcome, Outcome::Deleted, "{}", report.to_text());

    let now = c.pod(NS, "late").expect("the replacement is not deleted");
    assert_ne!(
        now["metadata"]["uid"], planned_uid,
        "this is the replacement"
    );
    assert!(now["metadata"]["deletionTimestamp"].is_null(), "{now}");
    let deletes = c.server.recorder().matching("DELETE", "/pods/late");
    assert!(
        !deletes.is_empty(),
        "the planned `late` was left at the deadline"
    );
    for d in deletes {
        let body = d.json().unwrap_or_default();
        assert_eq!(
            body["preconditions"]["uid"], planned_uid,
            "a delete of `late` is guarded by the planned UID: {body}"
        );
    }
    let lates: Vec<Outcome> = report
        .pods
        .iter()
        .filter(|p| p.name == "late")
        .map(|p| p.outcome)
        .collect();
    assert!(lates.contains(&Outcome::Skipped), "{}", report.to_text());
    assert!(!lates.contains(&Outcome::Deleted), "{}", report.to_text());
}
