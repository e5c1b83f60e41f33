//! Disruption budgets against the fake API server: a budget that opens mid-drain is followed by
//! the eviction through a watch of the budget (not the retry interval); a budget that never
//! opens cannot stretch the deadline, and the report names it; `on_deadline = "delete"`; a drain
//! dropped while blocked leaves no watch behind; the deadline delete is guarded by the planned UID.

mod engine_support;

use std::sync::Arc;
use std::time::Duration;

use engine_support::*;
use kube_shutdown_drain::engine::Engine;
use kube_shutdown_drain::report::Outcome;
use serde_json::json;
use tokio::time::Instant;

/// The budget opens once the drain watches it; the retry interval (30 s) is longer than the
/// drain's deadline (20 s), so only the budget watch can explain the accepted eviction.
#[tokio::test]
async fn an_eviction_follows_a_budget_opening_through_the_budget_watch() {
    let c = Cluster::start(vec![
        pod(NS, "guarded", NODE),
        pdb(NS, "guarded-pdb", "guarded", 1),
    ])
    .await;
    let engine = Arc::new(Engine::new(c.settings("[drain]\nretry_interval = \"30s\"\n")).unwrap());
    let drain = tokio::spawn({
        let engine = engine.clone();
        async move { engine.drain(Instant::now() + Duration::from_secs(20)).await }
    });
    let is_budget_watch = |r: &fake_apiserver::RecordedRequest| {
        r.method == "GET"
            && r.path == "/apis/policy/v1/namespaces/work/poddisruptionbudgets"
            && r.query_param("watch").as_deref() == Some("true")
            && r.query_param("fieldSelector").as_deref() == Some("metadata.name=guarded-pdb")
    };
    until("a refused eviction and a watch of its budget", || {
        let reqs = c.server.recorder().requests();
        reqs.iter().any(is_budget_watch)
            && reqs
                .iter()
                .any(|r| r.path.ends_with("/guarded/eviction") && r.status == 429)
    })
    .await;
    let before = c.server.recorder().count("POST", "/pods/guarded/eviction");
    c.server
        .store()
        .modify("PodDisruptionBudget", Some(NS), "guarded-pdb", |p| {
            p["spec"]["minAvailable"] = json!(0)
        })
        .unwrap();
    let report = drain.await.unwrap();
    assert!(report.complete, "{}", report.to_text());
    let reqs = c.server.recorder().requests();
    let posts: Vec<_> = reqs
        .iter()
        .filter(|r| r.method == "POST" && r.path.ends_with("/pods/guarded/eviction"))
        .collect();
    assert!(
        posts[..before].iter().all(|r| r.status == 429),
        "refused while the budget was shut"
    );
    assert_eq!(
        posts.len(),
        before + 1,
        "one more attempt after the opening, accepted"
    );
    assert_eq!(posts[before].status, 201);
    // Not a polling loop either: while the budget stayed shut, at most a couple of attempts.
    assert!(before <= 2, "{before} attempts while the budget was shut");
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
        took <= Duration::from_secs(3 + 5),
        "returned by the deadline (a generous bound): {took:?}"
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
    assert!(
        started.elapsed() <= Duration::from_secs(2 + 5),
        "returned by the deadline (a generous bound)"
    );
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
    // The delete came after the budget refused the eviction, never instead of trying it.
    let reqs = c.server.recorder().requests();
    let refused = reqs
        .iter()
        .position(|r| r.path.ends_with("/guarded/eviction") && r.status == 429)
        .expect("the budget refused the eviction");
    let deleted = reqs
        .iter()
        .position(|r| r.method == "DELETE" && r.path.ends_with("/pods/guarded"))
        .unwrap();
    assert!(refused < deleted);
    until("`guarded` deleted", || c.pod(NS, "guarded").is_none()).await;
}

/// A 404 to the delete at the deadline that is not the server's NotFound for the pod (an
/// ingress's page) does not make the pod gone: it is still there, and the report says so.
#[tokio::test]
async fn an_html_404_to_the_delete_at_the_deadline_is_not_gone() {
    let c = Cluster::start(vec![
        pod(NS, "guarded", NODE),
        pdb(NS, "guarded-pdb", "guarded", 1),
    ])
    .await;
    c.server.faults().fail_next_with_body(
        fake_apiserver::Route::new("DELETE", "/pods/guarded"),
        100,
        404,
        None,
        "<html>404 page not found</html>",
    );
    let engine =
        Engine::new(c.settings("[drain]\non_deadline = \"delete\"\ngrace_period = \"1s\"\n"))
            .unwrap();
    let report = engine.drain(Instant::now() + Duration::from_secs(2)).await;
    let guarded = report.pods.iter().find(|p| p.name == "guarded").unwrap();
    assert_ne!(guarded.outcome, Outcome::Gone, "{}", report.to_text());
    assert!(!report.complete, "{}", report.to_text());
    assert!(c.pod(NS, "guarded").is_some());
    assert!(
        !c.server
            .recorder()
            .matching("DELETE", "/pods/guarded")
            .is_empty(),
        "the delete was sent"
    );
}

/// A 429 with Retry-After is retried after that many seconds: not earlier (the gap between the
/// two attempts, a lower bound that load can only lengthen), and not on the 30 s retry interval
/// (the drain completes by its 10 s deadline).
#[tokio::test]
async fn retry_after_is_honoured() {
    let c = Cluster::start(vec![pod(NS, "p", NODE)]).await;
    c.server.faults().fail_next_with_retry_after(
        fake_apiserver::Route::new("POST", "/api/v1/namespaces/work/pods/p/eviction"),
        1,
        429,
        2,
    );
    let engine = Engine::new(c.settings("[drain]\nretry_interval = \"30s\"\n")).unwrap();
    let report = engine.drain(Instant::now() + Duration::from_secs(10)).await;
    assert!(report.complete, "{}", report.to_text());
    let posts = c.server.recorder().matching("POST", "/pods/p/eviction");
    assert_eq!(posts.len(), 2);
    assert_eq!(posts[0].status, 429);
    assert_eq!(posts[0].retry_after.as_deref(), Some("2"));
    assert_eq!(posts[1].status, 201);
    // `elapsed` is the server's monotonic clock at each arrival.
    let gap = posts[1].elapsed - posts[0].elapsed;
    assert!(
        gap >= 2.0 - 0.001,
        "retried {gap:.3} s after a Retry-After of 2 s"
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
    let engine = Arc::new(Engine::new(c.settings("[drain]\nretry_interval = \"1s\"\n")).unwrap());
    let drain = tokio::spawn({
        let engine = engine.clone();
        async move {
            engine
                .drain(Instant::now() + Duration::from_secs(600))
                .await
        }
    });
    // The drain is blocked on the budget and watching it (and the node's pods) when it is
    // dropped.
    until("the drain watching the budget", || {
        c.server
            .recorder()
            .requests()
            .iter()
            .any(|r| r.path.contains("poddisruptionbudgets") && r.query_param("watch").is_some())
    })
    .await;
    assert!(!drain.is_finished(), "the budget never opens");
    drain.abort();
    assert!(drain.await.unwrap_err().is_cancelled());
    // Cut the connections still open, then listen again so that anything left running could
    // reconnect and would be seen. Only requests that arrived after the restart count (a request
    // of before may be recorded late, when its connection ends).
    c.server.stop_listener();
    c.server.start_listener().await.unwrap();
    let restarted = std::time::SystemTime::now();
    // Longer than the retry interval (1 s) and the longest backoff (2 s): anything left running
    // would have sent a request meanwhile.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after: Vec<String> = c
        .server
        .recorder()
        .requests()
        .iter()
        .filter(|r| r.at >= restarted)
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
    let engine = Arc::new(engine);
    let drain = tokio::spawn({
        let engine = engine.clone();
        async move { engine.drain(Instant::now() + Duration::from_secs(6)).await }
    });
    // `guarded` blocks the first group, so `late` is still waiting for its group when it is
    // replaced by a pod of the same name that opts out of draining.
    until("the budget refused `guarded`", || {
        c.server
            .recorder()
            .matching("POST", "/pods/guarded/eviction")
            .iter()
            .any(|r| r.status == 429)
    })
    .await;
    assert_eq!(
        c.evictions_of(NS, "late"),
        0,
        "`late` still waits for its group"
    );
    assert!(!drain.is_finished());
    c.server.store().remove("Pod", Some(NS), "late").unwrap();
    c.server
        .store()
        .upsert(pod_with(
            NS,
            "late",
            NODE,
            json!({"metadata": {"labels": {"cluster.x-k8s.io/drain": "skip"}}}),
        ))
        .unwrap();
    let report = drain.await.unwrap();
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

/// While its budget is watched, a blocked eviction waits for the budget to change, not for the
/// retry interval: a budget that stays closed costs one eviction, not one per interval (issue
/// 23: on a real server 6 tries in 12 s). The kubelet's credentials, which may not watch it,
/// keep the interval (`engine_node::kubelet_credentials_fall_back_to_the_retry_interval_for_budgets`).
#[tokio::test]
async fn a_watched_budget_that_stays_closed_costs_one_eviction() {
    let c = Cluster::start(vec![
        pod(NS, "guarded", NODE),
        pdb(NS, "guarded-pdb", "guarded", 1),
    ])
    .await;
    let engine = Engine::new(c.settings("[drain]\nretry_interval = \"1s\"\n")).unwrap();
    let report = engine.drain(Instant::now() + Duration::from_secs(5)).await;
    assert!(!report.complete, "{}", report.to_text());
    let guarded = report.pods.iter().find(|p| p.name == "guarded").unwrap();
    assert_eq!(guarded.outcome, Outcome::Blocked, "{}", report.to_text());
    assert_eq!(c.evictions_of(NS, "guarded"), 1, "{}", report.to_text());
    assert!(
        !c.server
            .recorder()
            .matching("GET", "poddisruptionbudgets")
            .is_empty(),
        "the budget was watched"
    );
}

/// A budget watch that keeps failing (503) is no watch: its waiters fall back on the retry
/// interval until it answers again.
#[tokio::test]
async fn a_budget_whose_watch_keeps_failing_falls_back_on_the_retry_interval() {
    let c = Cluster::start(vec![
        pod(NS, "guarded", NODE),
        pdb(NS, "guarded-pdb", "guarded", 1),
    ])
    .await;
    c.server.faults().fail_next(
        fake_apiserver::Route::new("GET", "poddisruptionbudgets"),
        100_000,
        503,
    );
    let engine = Engine::new(c.settings("[drain]\nretry_interval = \"1s\"\n")).unwrap();
    let report = engine.drain(Instant::now() + Duration::from_secs(5)).await;
    assert!(!report.complete, "{}", report.to_text());
    let tries = c.evictions_of(NS, "guarded");
    assert!(tries >= 3, "{tries} evictions in 5 s: {}", report.to_text());
}
