//! Grace fit (`drain.fit_grace_to_deadline`) against the fake API server, read from the
//! recorded Eviction bodies: a pod whose grace period is longer than the time left is evicted
//! with the time left (and marked in the report); one that fits is evicted with its own; off,
//! nothing is cut. A drain that goes on past its deadline (the stop phase after logind's
//! window) fits graces to that later end, and the report says which end and why.

mod engine_support;

use std::time::Duration;

use engine_support::*;
use kube_shutdown_drain::drain::GraceTo;
use kube_shutdown_drain::engine::Engine;
use kube_shutdown_drain::report::{GraceEnd, GraceFit, Report};
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

/// How far apart the test's two clock reads (its `Instant` and `wall`) and the drain's two (its
/// start and the report's `started_at`) may be: each pair is read back to back.
const SLACK_MS: i64 = 250;

/// How long after `wall` (the test's wall clock, read beside its `Instant`) the drain of
/// `report` started, in ms: the report's `started_at` is the drain's start.
fn drain_start_after(report: &Report, wall: jiff::Timestamp) -> i64 {
    let start: jiff::Timestamp = report.started_at.parse().expect("started_at is RFC 3339");
    start.duration_since(wall).as_millis() as i64
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

/// A deadline past the drain's (the end of the stop phase a drain of logind's window goes on
/// in): graces are fitted to it, not to the drain's deadline, and the report says which end and
/// why, in the JSON and the text.
#[tokio::test]
async fn graces_are_fitted_to_a_later_end_when_the_drain_goes_on_there() {
    let c = cluster().await;
    let engine = Engine::new(c.settings("")).unwrap();
    let started = Instant::now();
    let wall = jiff::Timestamp::now();
    let grace_to = GraceTo {
        at: started + Duration::from_secs(120),
        end: GraceEnd::StopPhase,
        why: "the drain goes on in the unit's stop phase".to_owned(),
    };
    // The drain itself ends in 3 s; `short` (5 s) is gone within it, `long` (600 s) is not.
    let (prepared, report) = engine
        .prepare_and_drain_fitting(
            "reboot",
            started + Duration::from_secs(3),
            Some(grace_to),
            |_| {},
        )
        .await;
    prepared.unwrap();
    let text = report.to_text();
    let long = delete_options(&c, "long");
    assert_eq!(long.len(), 1, "{long:?}");
    let sent = long[0]["gracePeriodSeconds"]
        .as_i64()
        .expect("a grace period was sent");
    // The time left to the later end (120 s less the kept-back 500 ms), not to the drain's 3 s.
    assert!((110..=119).contains(&sent), "sent {sent} s; {text}");
    assert_eq!(
        fit_of(&report, "long"),
        Some(GraceFit {
            from_seconds: 600,
            to_seconds: sent
        })
    );
    // `short` fits the later end: its own grace period, none sent.
    let short = delete_options(&c, "short");
    assert!(short[0].get("gracePeriodSeconds").is_none(), "{short:?}");
    let fitted = report.grace_fitted_to.clone().expect("the report says");
    assert_eq!(fitted.end, GraceEnd::StopPhase);
    // The later end less the kept-back 500 ms, counted from the drain's own start (a moment
    // after `started`, longer on a loaded machine: the report's start says how long).
    let from_started = fitted.after_ms as i64 + drain_start_after(&report, wall);
    assert!(
        (119_500 - SLACK_MS..=119_500 + SLACK_MS).contains(&from_started),
        "{from_started} ms after the test's start: {fitted:?}"
    );
    let line = format!(
        "grace periods fitted to the end of the stop phase, {:.1} s after the start: the drain \
         goes on in the unit's stop phase",
        fitted.after_ms as f64 / 1000.0
    );
    assert!(text.contains(&line), "{text}");
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["grace_fitted_to"]["end"], "stop-phase", "{json}");
}

/// An end before the drain's own deadline never shortens graces below the drain's time; a
/// drain by hand says it fits to its own deadline.
#[tokio::test]
async fn graces_are_never_fitted_to_an_end_before_the_drains_deadline() {
    let c = cluster().await;
    let engine = Engine::new(c.settings("")).unwrap();
    let started = Instant::now();
    let wall = jiff::Timestamp::now();
    let grace_to = GraceTo {
        at: started + Duration::from_secs(2),
        end: GraceEnd::LogindWindow,
        why: "no stop phase can be counted on".to_owned(),
    };
    let (_, report) = engine
        .prepare_and_drain_fitting(
            "reboot",
            started + Duration::from_secs(20),
            Some(grace_to),
            |_| {},
        )
        .await;
    let sent = delete_options(&c, "long")[0]["gracePeriodSeconds"]
        .as_i64()
        .expect("a grace period was sent");
    assert!(sent >= 15, "sent {sent} s for a 20 s drain");
    let fitted = report.grace_fitted_to.clone().expect("the report says");
    assert_eq!(fitted.end, GraceEnd::LogindWindow);
    // The drain's own work deadline: 20 s less the kept-back 500 ms from the test's start.
    let from_started = fitted.after_ms as i64 + drain_start_after(&report, wall);
    assert!(
        (19_500 - SLACK_MS..=19_500 + SLACK_MS).contains(&from_started),
        "{from_started} ms after the test's start: {fitted:?}"
    );

    let by_hand = engine.drain(Instant::now() + Duration::from_secs(2)).await;
    let fitted = by_hand.grace_fitted_to.expect("the report says");
    assert_eq!(fitted.end, GraceEnd::Drain);
    assert_eq!(fitted.why, "the drain's own deadline");
}
