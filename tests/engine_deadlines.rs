//! The deadline holds under any latency or hang, and watches cost at most about 2 requests a
//! second per watched resource when the server answers 410 in a loop or ends every watch at once.
//! Bounds are generous (seconds); request rates are counted in the fake's recorder over the
//! drain's whole run.

mod engine_support;

use std::sync::Arc;
use std::time::Duration;

use engine_support::*;
use fake_apiserver::Route;
use kube_shutdown_drain::config::Settings;
use kube_shutdown_drain::engine::Engine;
use tokio::time::Instant;

/// `settings` with another request timeout.
fn with_request_timeout(s: Arc<Settings>, t: Duration) -> Arc<Settings> {
    let mut s = (*s).clone();
    s.request_timeout = t;
    Arc::new(s)
}

/// Every request of the cluster waits `latency` (or, for `None`, never gets an answer).
fn slow_everything(c: &Cluster, latency: Option<Duration>) {
    match latency {
        Some(d) => c.server.faults().add_latency(Route::any(""), d),
        None => c.server.faults().hang(Route::any("")),
    }
}

/// Drain, prepare and restore each return by their deadline + 1 s: with 5 s latency on every
/// request, with a hung server, and with a request timeout (30 s) far past the deadline.
#[tokio::test]
async fn drain_prepare_and_restore_return_by_the_deadline_under_latency_and_hangs() {
    let deadline = Duration::from_secs(3);
    let limit = deadline + Duration::from_secs(1);
    let case = |latency: Option<Duration>, request_timeout: Duration| async move {
        let c = Cluster::start(vec![pod(NS, "p", NODE)]).await;
        let settings = with_request_timeout(c.settings(""), request_timeout);
        // A marker to restore, written before the server slows down.
        Engine::new(settings.clone())
            .unwrap()
            .prepare("setup")
            .await
            .unwrap();
        slow_everything(&c, latency);
        let mut took = Vec::new();
        let engine = Engine::new(settings.clone()).unwrap();
        let started = Instant::now();
        let report = engine.drain(started + deadline).await;
        took.push(("drain", started.elapsed()));
        assert!(!report.complete);
        let engine = Engine::new(settings.clone()).unwrap();
        let started = Instant::now();
        assert!(engine.restore_by(started + deadline).await.is_err());
        took.push(("restore", started.elapsed()));
        let engine = Engine::new(settings).unwrap();
        let started = Instant::now();
        let _ = engine.prepare_by("x", started + deadline).await;
        took.push(("prepare", started.elapsed()));
        (latency, request_timeout, took)
    };
    let results = futures::future::join_all([
        case(Some(Duration::from_secs(5)), Duration::from_secs(2)),
        case(None, Duration::from_secs(2)),
        case(None, Duration::from_secs(30)),
        case(Some(Duration::from_secs(5)), Duration::from_secs(30)),
    ])
    .await;
    for (latency, request_timeout, took) in results {
        for (what, t) in took {
            assert!(
                t <= limit,
                "{what} with latency {latency:?} and request_timeout {request_timeout:?} took {t:?} for a {deadline:?} deadline"
            );
        }
    }
}

/// Pod list and watch requests a second during a drain of `seconds` that a budget keeps
/// blocked, with the lists and the watches counted.
async fn pod_requests_per_second(c: &Cluster, seconds: u64) -> (f64, usize, usize) {
    let engine = Engine::new(c.settings("[drain]\nretry_interval = \"1s\"\n")).unwrap();
    let started = Instant::now();
    let report = engine.drain(started + Duration::from_secs(seconds)).await;
    assert!(report.deadline_reached, "{}", report.to_text());
    let took = started.elapsed().as_secs_f64();
    let reqs = c.server.recorder().matching("GET", "/api/v1/pods");
    let watches = reqs
        .iter()
        .filter(|r| r.query_param("watch").as_deref() == Some("true"))
        .count();
    let lists = reqs.len() - watches;
    (reqs.len() as f64 / took, lists, watches)
}

fn blocked_cluster_seed() -> Vec<serde_json::Value> {
    vec![
        pod(NS, "guarded", NODE),
        pdb(NS, "guarded-pdb", "guarded", 1),
    ]
}

/// Every resourceVersion expires at once (the 410 knob, pressed every 20 ms after a write elsewhere, while each watch
/// request waits 100 ms): each watch the pod tracker starts answers 410 and the watcher lists
/// again. The backoff holds the pod
/// requests to about 2 a second.
#[tokio::test]
async fn a_410_loop_costs_about_two_requests_a_second() {
    let c = Cluster::start(blocked_cluster_seed()).await;
    // Each watch waits 100 ms in the server, so the version it starts from has expired by then.
    c.server
        .faults()
        .add_latency(Route::new("GET", "watch=true"), Duration::from_millis(100));
    let store = c.server.store().clone();
    let expire = tokio::spawn(async move {
        for i in 0u64.. {
            // Another object changes (the version moves on), and every older version expires.
            store
                .modify("Node", None, OTHER_NODE, |n| {
                    n["metadata"]["labels"] = serde_json::json!({"tick": i.to_string()})
                })
                .unwrap();
            store.expire_resource_versions();
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    let (rate, lists, watches) = pod_requests_per_second(&c, 8).await;
    expire.abort();
    assert!(
        lists >= 3,
        "the 410 loop happened: {lists} lists, {watches} watches"
    );
    assert!(
        rate <= 3.0,
        "{rate:.1} pod requests a second ({lists} lists, {watches} watches)"
    );
}

/// Every pod watch ends at once without an event (204, an empty stream): the watcher starts
/// the next at once, and the pacing holds it to 2 watches a second.
#[tokio::test]
async fn a_watch_that_ends_at_once_costs_about_two_requests_a_second() {
    let c = Cluster::start(blocked_cluster_seed()).await;
    c.server
        .faults()
        .fail_next(Route::new("GET", "watch=true"), 1_000_000, 204);
    let (rate, lists, watches) = pod_requests_per_second(&c, 6).await;
    assert!(
        watches >= 5,
        "the watch ended and was started again: {watches} watches"
    );
    assert!(
        rate <= 3.0,
        "{rate:.1} pod requests a second ({lists} lists, {watches} watches)"
    );
}

/// The boot's Ready wait on a Node that is not Ready, while every watch ends at once: about 2
/// requests a second until the deadline, which holds.
#[tokio::test]
async fn the_ready_wait_on_a_watch_that_ends_at_once_costs_about_two_requests_a_second() {
    let c = Cluster::start(vec![]).await;
    c.server
        .store()
        .modify("Node", None, NODE, |n| {
            n["status"]["conditions"][0]["status"] = serde_json::json!("False")
        })
        .unwrap();
    c.server
        .faults()
        .fail_next(Route::new("GET", "watch=true"), 1_000_000, 204);
    let engine = Engine::new(c.settings("")).unwrap();
    let started = Instant::now();
    let err = engine
        .wait_ready(started + Duration::from_secs(4))
        .await
        .unwrap_err();
    let took = started.elapsed();
    assert!(err.to_string().contains("not Ready"), "{err}");
    assert!(took <= Duration::from_secs(5), "{took:?}");
    let reqs = c.server.recorder().matching("GET", "/api/v1/nodes");
    let watches = reqs
        .iter()
        .filter(|r| r.query_param("watch").as_deref() == Some("true"))
        .count();
    let rate = reqs.len() as f64 / took.as_secs_f64();
    assert!(
        watches >= 4,
        "the watch ended and was started again: {watches} watches"
    );
    assert!(
        rate <= 3.0,
        "{rate:.1} node requests a second ({} in {took:?})",
        reqs.len()
    );
}
