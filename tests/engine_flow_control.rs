//! Evictions refused by the API server's priority and fairness (429 in plain text with
//! `Retry-After` and the flow-control headers, as the apiserver's filter answers) are not a
//! budget's refusal: the drain waits the Retry-After, tries again within its deadline, and the
//! report counts them as throttled. Budget refusals, which carry the same headers, stay
//! budget refusals.

mod engine_support;

use std::time::Duration;

use engine_support::*;
use fake_apiserver::Route;
use fake_apiserver::flowcontrol::REJECTION_BODY;
use kube_shutdown_drain::engine::Engine;
use kube_shutdown_drain::report::Outcome;
use tokio::time::Instant;

#[tokio::test]
async fn a_drain_throttled_by_priority_and_fairness_completes_after_the_retry_after_and_says_so() {
    let c = Cluster::start(vec![pod(NS, "a", NODE), pod(NS, "b", NODE)]).await;
    // Three rejections of a's eviction, each asking for 1 s; b goes through at once.
    c.server
        .faults()
        .throttle_next(Route::new("POST", "/pods/a/eviction"), 3, 1);
    // A retry interval longer than the deadline: only honouring Retry-After finishes in time.
    let engine = Engine::new(c.settings("[drain]\nretry_interval = \"60s\"\n")).unwrap();
    let report = engine.drain(Instant::now() + Duration::from_secs(20)).await;
    assert!(report.complete, "{}", report.to_text());
    assert_eq!(report.counts.evicted, 2, "{}", report.to_text());
    assert_eq!(
        report.counts.blocked,
        0,
        "not a budget: {}",
        report.to_text()
    );
    assert_eq!(report.throttled, 3, "{}", report.to_text());
    let row = |name: &str| report.pods.iter().find(|p| p.name == name).unwrap();
    assert_eq!((row("a").throttled, row("a").attempts), (3, 4));
    assert_eq!((row("b").throttled, row("b").attempts), (0, 1));
    assert_eq!(row("a").outcome, Outcome::Evicted);
    assert!(
        report
            .summary()
            .contains("3 evictions throttled by the API server"),
        "{}",
        report.summary()
    );
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["throttled"], 3);

    // The server answered as the apiserver's filter does, and each new attempt waited out the
    // Retry-After of the rejection before it.
    let evictions = c.server.recorder().matching("POST", "/pods/a/eviction");
    assert_eq!(evictions.len(), 4);
    for (rejected, next) in evictions.iter().zip(evictions.iter().skip(1)) {
        assert_eq!(rejected.status, 429);
        assert_eq!(rejected.response, REJECTION_BODY);
        assert_eq!(rejected.retry_after.as_deref(), Some("1"));
        let gap = next.elapsed - rejected.elapsed;
        assert!(gap >= 0.95, "retried {gap:.3} s after a Retry-After of 1 s");
    }
    assert_eq!(evictions[3].status, 201);
}

#[tokio::test]
async fn a_retry_after_past_the_deadline_ends_the_drain_by_its_deadline_with_the_pod_pending() {
    let c = Cluster::start(vec![pod(NS, "a", NODE)]).await;
    c.server
        .faults()
        .throttle_next(Route::new("POST", "/eviction"), 1, 60);
    let engine = Engine::new(c.settings("")).unwrap();
    let began = Instant::now();
    let report = engine.drain(began + Duration::from_secs(3)).await;
    assert!(
        began.elapsed() < Duration::from_secs(5),
        "returned by the deadline (+1 s)"
    );
    assert!(!report.complete);
    assert_eq!(report.throttled, 1);
    let a = &report.pods[0];
    assert_eq!(a.outcome, Outcome::Pending, "{}", report.to_text());
    assert!(
        a.detail
            .as_deref()
            .is_some_and(|d| d.contains("throttled by the API server's priority and fairness")),
        "{}",
        report.to_text()
    );
    assert!(c.pod(NS, "a").is_some(), "never evicted");
}

#[tokio::test]
async fn a_budget_refusal_that_carries_the_flow_control_headers_is_still_a_budget_refusal() {
    let c = Cluster::start(vec![
        pod_with(
            NS,
            "a",
            NODE,
            serde_json::json!({"metadata": {"labels": {"app": "web"}}}),
        ),
        pdb(NS, "web-pdb", "web", 1),
    ])
    .await;
    c.server.store().set_pod_ready(NS, "a", true).unwrap();
    let engine = Engine::new(c.settings("")).unwrap();
    let report = engine.drain(Instant::now() + Duration::from_secs(2)).await;
    assert_eq!(report.counts.blocked, 1, "{}", report.to_text());
    assert_eq!(report.throttled, 0);
    assert_eq!(report.pods[0].budget.as_deref(), Some("work/web-pdb"));
    // The refusals were the budget's Status 429s, which (as every answer of a real apiserver,
    // see the fake's tests/flow_control.rs) carried the flow-control headers too.
    let refused = c.server.recorder().matching("POST", "/eviction");
    assert!(!refused.is_empty());
    assert!(
        refused
            .iter()
            .all(|r| r.status == 429 && r.response.contains("\"reason\":\"TooManyRequests\"")),
        "{refused:?}"
    );
}
