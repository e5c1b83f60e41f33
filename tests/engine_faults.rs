//! The drain under API trouble: 5xx bursts, dropped connections, a server restart mid-drain
//! (the pod watch breaks), a server that is down when the drain starts (retried until the
//! deadline), a server that stops answering (the deadline still holds and the report names the
//! server), and a hung Event API (the final Events cannot hold the drain).

mod engine_support;

use std::time::Duration;

use engine_support::*;
use fake_apiserver::Route;
use kube_shutdown_drain::engine::Engine;
use tokio::time::Instant;

#[tokio::test]
async fn the_drain_completes_through_5xx_bursts_and_dropped_connections() {
    let c = Cluster::start(vec![
        pod(NS, "a", NODE),
        pod(NS, "b", NODE),
        pod(NS, "c", NODE),
    ])
    .await;
    let f = c.server.faults();
    f.fail_next(Route::new("GET", "/api/v1/pods"), 3, 503);
    f.fail_next(Route::new("POST", "/eviction"), 4, 500);
    f.fail_next(Route::new("POST", "/pods/b/eviction"), 2, 504);
    f.close_next(Route::new("POST", "/pods/c/eviction"), 2);
    let engine = Engine::new(c.settings("[drain]\nretry_interval = \"30s\"\n")).unwrap();
    // Transient errors are retried on a short backoff: the drain completes by a deadline (20 s)
    // shorter than the retry interval (30 s).
    let report = engine.drain(Instant::now() + Duration::from_secs(20)).await;
    assert!(report.complete, "{}", report.to_text());
    for p in ["a", "b", "c"] {
        assert!(c.pod(NS, p).is_none(), "{p} is gone");
    }
    // Every fault was hit: each pod is accepted only once no fault matches it any more.
    let reqs = c.server.recorder().requests();
    let answered = |status: u16, path: &str| {
        reqs.iter()
            .filter(|r| r.status == status && r.uri().contains(path))
            .count()
    };
    assert_eq!(answered(503, "/api/v1/pods"), 3);
    assert_eq!(answered(500, "/eviction"), 4);
    assert_eq!(answered(504, "/pods/b/eviction"), 2);
    assert_eq!(answered(0, "/pods/c/eviction"), 2, "two connections closed");
}

/// The API server goes away for a second while evicted pods terminate: the pod watch breaks,
/// the tracker watches again after the restart, and the drain completes.
#[tokio::test]
async fn the_drain_completes_across_a_server_restart() {
    let c = Cluster::start(vec![
        slow_pod(NS, "a", NODE, 1.0),
        slow_pod(NS, "b", NODE, 1.5),
        pod(NS, "c", NODE),
    ])
    .await;
    let engine = Engine::new(c.settings("")).unwrap();
    let server = &c.server;
    let drain = engine.drain(Instant::now() + Duration::from_secs(20));
    let restart = async {
        // Wait until the evictions were accepted, then drop every connection for a second.
        assert!(
            eventually(Duration::from_secs(30), || server
                .recorder()
                .matching("POST", "/eviction")
                .len()
                >= 3)
            .await
        );
        server.stop_listener();
        tokio::time::sleep(Duration::from_millis(1000)).await;
        server.start_listener().await.unwrap();
    };
    let (report, ()) = tokio::join!(drain, restart);
    assert!(report.complete, "{}", report.to_text());
    assert_eq!(report.counts.evicted, 3, "{}", report.to_text());
    // kube's watcher resumes from the last resourceVersion it saw (a real server that compacted
    // it meanwhile answers 410 and the watcher lists again).
    let watches = c
        .server
        .recorder()
        .requests()
        .iter()
        .filter(|r| {
            r.method == "GET"
                && r.path == "/api/v1/pods"
                && r.query_param("watch").as_deref() == Some("true")
        })
        .count();
    assert!(watches >= 2, "the tracker watched again after the restart");
}

/// Requests that never get an answer: each has a timeout and the drain returns by its deadline.
#[tokio::test]
async fn a_hanging_server_cannot_stretch_the_deadline() {
    let c = Cluster::start(vec![pod(NS, "a", NODE), pod(NS, "b", NODE)]).await;
    c.server.faults().hang(Route::new("POST", "/eviction"));
    let engine = Engine::new(c.settings("")).unwrap();
    let started = Instant::now();
    let report = engine.drain(started + Duration::from_secs(3)).await;
    let took = started.elapsed();
    assert!(
        took <= Duration::from_secs(3 + 5),
        "returned by the deadline (a generous bound): {took:?}"
    );
    assert!(report.deadline_reached && !report.complete);
    assert_eq!(report.counts.pending, 2, "{}", report.to_text());
}

/// A 409 that is not about the UID (the pod changed while the server evicted it) is retried on a
/// short backoff (the drain completes by a deadline shorter than the retry interval), not taken
/// for "gone".
#[tokio::test]
async fn a_conflict_is_retried() {
    let c = Cluster::start(vec![pod(NS, "a", NODE)]).await;
    c.server
        .faults()
        .fail_next(Route::new("POST", "/pods/a/eviction"), 2, 409);
    let engine = Engine::new(c.settings("[drain]\nretry_interval = \"30s\"\n")).unwrap();
    let report = engine.drain(Instant::now() + Duration::from_secs(10)).await;
    assert!(report.complete, "{}", report.to_text());
    assert_eq!(report.counts.evicted, 1, "{}", report.to_text());
    let posts = c.server.recorder().matching("POST", "/pods/a/eviction");
    let statuses: Vec<u16> = posts.iter().map(|r| r.status).collect();
    assert_eq!(statuses, [409, 409, 201]);
    assert!(c.pod(NS, "a").is_none());
}

/// The API server is down when the drain starts (a control plane restarting during the node's
/// shutdown) and back 3 s later: the drain keeps trying and completes.
#[tokio::test]
async fn the_drain_waits_for_a_server_that_is_down_at_the_start() {
    let c = Cluster::start(vec![
        pod(NS, "a", NODE),
        pod(NS, "b", NODE),
        daemonset_pod(NS, "ds", NODE),
    ])
    .await;
    c.server.stop_listener();
    let engine = Engine::new(c.settings("")).unwrap();
    let server = &c.server;
    let started = Instant::now();
    let drain = engine.drain(started + Duration::from_secs(30));
    let back = async {
        tokio::time::sleep(Duration::from_secs(3)).await;
        server.start_listener().await.unwrap();
    };
    let (report, ()) = tokio::join!(drain, back);
    assert!(report.complete, "{}", report.to_text());
    assert!(!report.deadline_reached, "{}", report.to_text());
    assert_eq!(report.counts.evicted, 2, "{}", report.to_text());
    assert_eq!(report.counts.skipped, 1, "{}", report.to_text());
    assert!(report.errors.is_empty(), "{}", report.to_text());
    assert!(c.pod(NS, "a").is_none() && c.pod(NS, "b").is_none());
    assert!(c.pod(NS, "ds").is_some(), "the DaemonSet pod stays");
}

/// The API server never comes back: the drain returns by its deadline and the report says the
/// server was unreachable, naming it and the node.
#[tokio::test]
async fn a_server_that_stays_down_is_named_in_the_report() {
    let c = Cluster::start(vec![pod(NS, "a", NODE)]).await;
    c.server.stop_listener();
    let engine = Engine::new(c.settings("")).unwrap();
    let started = Instant::now();
    let deadline = Duration::from_secs(5);
    let report = engine.drain(started + deadline).await;
    let took = started.elapsed();
    assert!(
        took <= deadline + Duration::from_secs(5),
        "returned after {took:?}"
    );
    // It kept trying until the deadline (minus the time kept back for the deadline action, at
    // most 1 s) instead of giving up after a few attempts.
    assert!(
        took >= deadline - Duration::from_secs(1),
        "gave up after {took:?}"
    );
    assert!(
        report.deadline_reached && !report.complete,
        "{}",
        report.to_text()
    );
    let text = report.to_text();
    let url = c.server.url();
    assert!(
        report
            .errors
            .iter()
            .any(|e| e.contains(&url) && e.contains("unreachable") && e.contains(NODE)),
        "the report names the unreachable server {url} and node {NODE}:\n{text}"
    );
    // The report file says the same, once written: the drain waits for the write only briefly
    // (`budget::WRITE_ALLOWANCE`), and a loaded machine's disk can take longer.
    until("the report file of node-a", || {
        engine.last_report().is_ok_and(|r| r.is_some())
    })
    .await;
    let stored = engine.last_report().unwrap().expect("a stored report");
    assert_eq!(stored.errors, report.errors);
}

/// The API server goes away after the evictions were accepted and does not come back: the pods
/// cannot be seen to go, the drain returns by its deadline and the report names the server.
#[tokio::test]
async fn a_server_lost_mid_drain_is_named_in_the_report() {
    let c = Cluster::start(vec![
        // Their termination outlasts the drain: only the lost server can hide their going.
        slow_pod(NS, "a", NODE, 600.0),
        slow_pod(NS, "b", NODE, 600.0),
    ])
    .await;
    let engine = Engine::new(c.settings("")).unwrap();
    let server = &c.server;
    let started = Instant::now();
    let deadline = Duration::from_secs(8);
    let drain = engine.drain(started + deadline);
    let lose = async {
        assert!(
            eventually(Duration::from_secs(30), || server
                .recorder()
                .matching("POST", "/eviction")
                .len()
                >= 2)
            .await
        );
        server.stop_listener();
    };
    let (report, ()) = tokio::join!(drain, lose);
    let took = started.elapsed();
    assert!(
        took <= deadline + Duration::from_secs(5),
        "returned after {took:?}"
    );
    assert!(
        report.deadline_reached && !report.complete,
        "{}",
        report.to_text()
    );
    assert_eq!(report.counts.pending, 2, "{}", report.to_text());
    let url = server.url();
    assert!(
        report
            .errors
            .iter()
            .any(|e| e.contains(&url) && e.contains("unreachable") && e.contains(NODE)),
        "the report names the unreachable server {url} and node {NODE}:\n{}",
        report.to_text()
    );
}

/// Event creation hangs (every Event POST is held at the server, never answered) and the request
/// timeout is long: the drain still returns soon after its last pod has gone (its final Events
/// get 1 s), far sooner than the request timeout (30 s); the bound is generous.
#[tokio::test]
async fn a_hung_event_api_cannot_hold_the_drain() {
    let c = Cluster::start(vec![pod(NS, "a", NODE), pod(NS, "b", NODE)]).await;
    let events = Route::new("POST", "/events");
    c.server.faults().gate(events.clone());
    let mut settings = (*c.settings("")).clone();
    settings.request_timeout = Duration::from_secs(30);
    let engine = Engine::new(std::sync::Arc::new(settings)).unwrap();
    let drain = engine.drain(Instant::now() + Duration::from_secs(60));
    let gone = async {
        until("the pods go", || {
            c.pod(NS, "a").is_none() && c.pod(NS, "b").is_none()
        })
        .await;
        Instant::now()
    };
    let (report, gone_at) = tokio::join!(drain, gone);
    let after = gone_at.elapsed();
    assert!(report.complete, "{}", report.to_text());
    assert_eq!(report.counts.evicted, 2, "{}", report.to_text());
    assert!(
        after <= Duration::from_secs(10),
        "returned {after:?} after the last pod went"
    );
    // The race happened: Event POSTs reached the server and were held there, and none was
    // answered or reached the store.
    assert!(
        c.server.faults().arrived_at(&events) >= 1,
        "the drain sent Events, and they were held"
    );
    assert_eq!(c.server.recorder().count("POST", "/events"), 0);
    assert!(
        c.server.store().list("Event", Some("default")).is_empty(),
        "no Event was written while the Event API hung"
    );
    // With the API answering again, Events are written as before (the hang was the only cause).
    c.server.faults().ungate(&events);
    let report = engine.drain(Instant::now() + Duration::from_secs(10)).await;
    assert!(report.complete, "{}", report.to_text());
    assert!(
        !c.server.store().list("Event", Some("default")).is_empty(),
        "Events are written once the Event API answers"
    );
}

/// An Eviction answered 404 that is not the API server's NotFound for the pod (an ingress's
/// HTML page, a server without the eviction subresource, a Status about something else) says
/// nothing about the pod: the pod is not counted gone, the row says why, and the drain is not
/// complete while the pod runs. Once the eviction is answered for real, it is evicted.
#[tokio::test]
async fn an_eviction_404_that_is_not_the_pods_notfound_is_an_error_not_gone() {
    let c = Cluster::start(vec![pod(NS, "a", NODE), pod(NS, "b", NODE)]).await;
    let f = c.server.faults();
    f.fail_next_with_body(
        Route::new("POST", "/pods/a/eviction"),
        1_000,
        404,
        None,
        "<html><body><h1>404 Not Found</h1>nginx</body></html>",
    );
    f.fail_next(Route::new("POST", "/pods/b/eviction"), 1_000, 404);
    let engine = Engine::new(c.settings("[drain]\nretry_interval = \"1s\"\n")).unwrap();
    let report = engine.drain(Instant::now() + Duration::from_secs(3)).await;
    assert!(!report.complete, "{}", report.to_text());
    assert_eq!(report.counts.gone, 0, "{}", report.to_text());
    for p in ["a", "b"] {
        assert!(c.pod(NS, p).is_some(), "{p} still runs");
        let row = report.pods.iter().find(|r| r.name == p).unwrap();
        // Named as an answer that is not the API's (api::answers), by status and path; the
        // page itself is not quoted.
        let said = format!("the server answered 404 for /api/v1/namespaces/{NS}/pods/{p}/eviction");
        assert!(
            row.detail.as_deref().is_some_and(|d| d.contains(&said)),
            "{row:?}"
        );
        assert!(
            !row.detail.as_deref().unwrap_or_default().contains("<html>"),
            "{row:?}"
        );
    }
    f.clear();
    let report = engine.drain(Instant::now() + Duration::from_secs(10)).await;
    assert!(report.complete, "{}", report.to_text());
    assert_eq!(report.counts.evicted, 2, "{}", report.to_text());
}

/// Even the pod's own NotFound Status is only what the eviction endpoint said: the pod counts as
/// gone once the pod watch or a GET shows it, and a pod still there is evicted for real.
#[tokio::test]
async fn a_notfound_for_a_pod_that_is_still_there_does_not_make_it_gone() {
    let c = Cluster::start(vec![pod(NS, "a", NODE)]).await;
    let lie = serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": "pods \"a\" not found", "reason": "NotFound",
        "details": {"name": "a", "kind": "pods"}, "code": 404});
    c.server.faults().fail_next_with_body(
        Route::new("POST", "/pods/a/eviction"),
        1,
        404,
        Some("application/json"),
        &lie.to_string(),
    );
    let engine = Engine::new(c.settings("")).unwrap();
    let report = engine.drain(Instant::now() + Duration::from_secs(10)).await;
    assert!(report.complete, "{}", report.to_text());
    assert_eq!(report.counts.evicted, 1, "{}", report.to_text());
    assert_eq!(report.counts.gone, 0, "{}", report.to_text());
    assert!(
        !c.server
            .recorder()
            .matching("GET", "/namespaces/work/pods/a")
            .is_empty(),
        "the claim was checked with a GET"
    );
    assert!(c.pod(NS, "a").is_none());
}

/// Names from the API server's answers go into request paths only when they can be names: a pod
/// called `../../x` is an error in the report, never a request path (nor gone).
#[tokio::test]
async fn a_pod_name_that_cannot_be_one_never_reaches_a_request_path() {
    let c = Cluster::start(vec![pod(NS, "a", NODE)]).await;
    for name in ["../../../api/v1/nodes/node-a", "x?dryRun=All"] {
        let mut p = pod(NS, "placeholder", NODE);
        p["metadata"]["name"] = serde_json::json!(name);
        c.server.store().upsert(p).unwrap();
    }
    let engine = Engine::new(c.settings("")).unwrap();
    let report = engine.drain(Instant::now() + Duration::from_secs(10)).await;
    assert_eq!(report.counts.evicted, 2, "{}", report.to_text());
    assert!(
        report.errors.iter().any(
            |e| e.contains("../../../api/v1/nodes/node-a") && e.contains("valid metadata.name")
        ),
        "{:?}",
        report.errors
    );
    assert!(!report.complete, "an error makes the drain incomplete");
    for r in c.server.recorder().requests() {
        assert!(!r.path.contains(".."), "{} {}", r.method, r.uri());
        assert!(!r.query.contains("dryRun=All"), "{} {}", r.method, r.uri());
    }
    let sent: Vec<String> = c
        .server
        .recorder()
        .matching("POST", "/eviction")
        .iter()
        .map(|r| r.path.clone())
        .collect();
    assert!(
        sent.iter().any(|p| p.contains("x%3FdryRun%3DAll")),
        "{sent:?}"
    );
}
