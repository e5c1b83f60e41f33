//! The drain under API trouble: 5xx bursts, dropped connections, a server restart mid-drain
//! (the pod watch breaks), and a server that stops answering (the deadline still holds).

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
    let started = Instant::now();
    let report = engine.drain(started + Duration::from_secs(20)).await;
    assert!(report.complete, "{}", report.to_text());
    // Transient errors are retried on a short backoff, not the 30 s retry interval.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    for p in ["a", "b", "c"] {
        assert!(c.pod(NS, p).is_none(), "{p} is gone");
    }
    let failed = c
        .server
        .recorder()
        .requests()
        .iter()
        .filter(|r| r.status >= 500)
        .count();
    assert!(failed >= 7, "the faults were hit ({failed} 5xx answers)");
}

/// The API server goes away for a second while evicted pods terminate: the pod watch breaks,
/// the tracker re-lists after the restart, and the drain completes.
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
            eventually(Duration::from_secs(5), || server
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
    let lists = c
        .server
        .recorder()
        .requests()
        .iter()
        .filter(|r| {
            r.method == "GET" && r.path == "/api/v1/pods" && r.query_param("watch").is_none()
        })
        .count();
    assert!(lists >= 2, "the tracker re-listed after the restart");
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
        took <= Duration::from_millis(4000),
        "returned after {took:?}"
    );
    assert!(report.deadline_reached && !report.complete);
    assert_eq!(report.counts.pending, 2, "{}", report.to_text());
}

/// A 409 that is not about the UID (the pod changed while the server evicted it) is retried,
/// not taken for "gone".
#[tokio::test]
async fn a_conflict_is_retried() {
    let c = Cluster::start(vec![pod(NS, "a", NODE)]).await;
    c.server
        .faults()
        .fail_next(Route::new("POST", "/pods/a/eviction"), 2, 409);
    let engine = Engine::new(c.settings("[drain]\nretry_interval = \"30s\"\n")).unwrap();
    let started = Instant::now();
    let report = engine.drain(started + Duration::from_secs(10)).await;
    assert!(report.complete, "{}", report.to_text());
    assert_eq!(report.counts.evicted, 1, "{}", report.to_text());
    assert_eq!(c.evictions_of(NS, "a"), 3);
    assert!(c.pod(NS, "a").is_none());
    assert!(started.elapsed() < Duration::from_secs(5));
}
