//! Grace fit (`drain.fit_grace_to_deadline`) against the fake API server, read from the
//! recorded Eviction bodies: a pod whose grace period is longer than the time left is evicted
//! with the time left (and marked in the report); one that fits is evicted with its own; off,
//! nothing is cut.

mod engine_support;

use std::time::Duration;

use engine_support::*;
use kube_shutdown_drain::engine::Engine;
use kube_shutdown_drain::report::{GraceFit, Report};
use serde_json::{Value, json};
use tokio::time::Instant;

/// `long` (terminationGracePeriodSeconds 600) and `short` (5) on the node.
async fn cluster() -> Cluster {
    Cluster::start(vec![
        pod_with(
            NS,
            "long",
            NODE,
            json!({"spec": {"terminationGracePeriodSeconds": 600}}),
        ),
        pod_with(
            NS,
            "short",
            NODE,
            json!({"spec": {"terminationGracePeriodSeconds": 5}}),
        ),
    ])
    .await
}

/// The `deleteOptions` of every eviction of `name`.
fn delete_options(c: &Cluster, name: &str) -> Vec<Value> {
    c.server
        .recorder()
        .matching("POST", &format!("/pods/{name}/eviction"))
        .iter()
        .map(|r| r.json().expect("a JSON body")["deleteOptions"].clone())
        .collect()
}

fn fit_of(report: &Report, name: &str) -> Option<GraceFit> {
    report
        .pods
        .iter()
        .find(|p| p.name == name)
        .unwrap()
        .grace_fit
}

#[tokio::test]
async fn a_grace_period_longer_than_the_time_left_is_cut_to_it() {
    let c = cluster().await;
    let engine = Engine::new(c.settings("")).unwrap();
    engine.prepare("test").await.unwrap();
    let report = engine.drain(Instant::now() + Duration::from_secs(20)).await;
    let text = report.to_text();
    assert!(report.complete, "{text}");
    let long = delete_options(&c, "long");
    assert_eq!(long.len(), 1, "{long:?}");
    let sent = long[0]["gracePeriodSeconds"]
        .as_i64()
        .expect("a grace period was sent");
    // Exactly the time left to the work deadline when it was sent, in whole seconds: 20 s less
    // the kept-back 500 ms, less the time from the drain's start to the eviction (the report's
    // `started_ms`), rounded down.
    let row = report.pods.iter().find(|p| p.name == "long").unwrap();
    let started = row.started_ms.expect("the eviction's time") as f64 / 1000.0;
    let left = 20.0 - 0.5 - started;
    assert!(
        (sent as f64 - left.floor()).abs() <= 1.0,
        "sent {sent} s with {left:.2} s left to the work deadline"
    );
    assert_eq!(
        fit_of(&report, "long"),
        Some(GraceFit {
            from_seconds: 600,
            to_seconds: sent
        })
    );
    assert!(
        text.contains(&format!(
            "(grace period cut from 600 s to {sent} s to fit the deadline)"
        )),
        "{text}"
    );
    // The pod that fits keeps its own period: none is sent.
    let short = delete_options(&c, "short");
    assert_eq!(short.len(), 1);
    assert!(short[0].get("gracePeriodSeconds").is_none(), "{short:?}");
    assert_eq!(fit_of(&report, "short"), None);
    let json = serde_json::to_value(&report).unwrap();
    let long_row = json["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "long")
        .unwrap();
    assert_eq!(long_row["grace_fit"]["from_seconds"], 600);
}

#[tokio::test]
async fn fit_grace_to_deadline_false_sends_the_pods_own() {
    let c = cluster().await;
    let engine = Engine::new(c.settings("[drain]\nfit_grace_to_deadline = false\n")).unwrap();
    engine.prepare("test").await.unwrap();
    let report = engine.drain(Instant::now() + Duration::from_secs(20)).await;
    assert!(report.complete, "{}", report.to_text());
    let long = delete_options(&c, "long");
    assert_eq!(long.len(), 1);
    assert!(long[0].get("gracePeriodSeconds").is_none(), "{long:?}");
    assert_eq!(fit_of(&report, "long"), None);
}
