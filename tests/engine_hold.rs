//! The cordon held while the node drains (issue 21): an uncordon, and the removal of our taint,
//! by another field manager during a drain are put back at the next watch event by the
//! prepare's guarded write, with a `CordonRemovedDuringDrain` Event; once the drain has ended
//! nothing is put back. The drain is held open by a budget that allows no disruption
//! until the test opens it.

mod engine_support;

use std::sync::Arc;
use std::time::Duration;

use engine_support::*;
use kube_shutdown_drain::engine::{Engine, Error as EngineError, PrepareOutcome};
use kube_shutdown_drain::report::Report;
use serde_json::{Value, json};
use tokio::time::Instant;

const OUR_TAINT: (&str, &str) = ("kube-shutdown-drain/shutdown", "PreferNoSchedule");

fn has_our_taint(node: &Value) -> bool {
    taints(node).contains(&(OUR_TAINT.0.to_string(), OUR_TAINT.1.to_string()))
}

fn hold_events(c: &Cluster) -> Vec<Value> {
    c.server
        .store()
        .list("Event", Some("default"))
        .into_iter()
        .filter(|e| e["reason"] == json!("CordonRemovedDuringDrain"))
        .collect()
}

/// `kubectl uncordon` and the removal of our taint in one merge patch by field manager `kubectl`,
/// so the drain sees both in one watch event.
async fn uncordon_and_untaint_in_one_write(c: &Cluster) {
    let left: Vec<Value> = c.node(NODE)["spec"]["taints"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t["key"] != json!(OUR_TAINT.0))
        .collect();
    let patch = json!({"spec": {"unschedulable": null, "taints": left}});
    kubectl_api(c)
        .await
        .patch(NODE, &as_kubectl(), &kube::api::Patch::Merge(patch))
        .await
        .unwrap();
}

/// A cluster whose one pod on node-a sits behind a budget that never lets it go.
async fn blocked_drain() -> Cluster {
    Cluster::start(vec![
        pod_with(
            NS,
            "db-0",
            NODE,
            json!({"metadata": {"labels": {"app": "db"}}}),
        ),
        pdb(NS, "db", "db", 1),
    ])
    .await
}

type Drained = (Result<PrepareOutcome, EngineError>, Report);

/// The daemon's path (prepare and drain at once) on node-a, deadline `within` from now.
fn start_drain(c: &Cluster, within: Duration) -> tokio::task::JoinHandle<Drained> {
    let engine = Arc::new(Engine::new(c.settings("")).unwrap());
    let deadline = Instant::now() + within;
    tokio::spawn(async move { engine.prepare_and_drain("reboot", deadline, |_| {}).await })
}

#[tokio::test]
async fn an_uncordon_by_another_manager_during_the_drain_is_undone_and_said() {
    let c = blocked_drain().await;
    // Far away: the drain ends when the budget opens, long before it.
    let drain = start_drain(&c, Duration::from_secs(60));
    until("node-a prepared", || {
        let n = c.node(NODE);
        unschedulable(&n) && has_our_taint(&n) && marker_text(&n).is_some()
    })
    .await;
    uncordon_and_untaint_in_one_write(&c).await;

    until("node-a cordoned and tainted again", || {
        let n = c.node(NODE);
        unschedulable(&n) && has_our_taint(&n)
    })
    .await;
    until("a CordonRemovedDuringDrain Event", || {
        !hold_events(&c).is_empty()
    })
    .await;
    let event = &hold_events(&c)[0];
    assert_eq!(event["type"], json!("Warning"), "{event}");
    let message = event["message"].as_str().unwrap();
    assert!(
        message.starts_with("node node-a was uncordoned")
            && message
                .contains("its taint kube-shutdown-drain/shutdown:PreferNoSchedule was removed")
            && message.ends_with("cordoning and tainting it again: done"),
        "{message}"
    );
    // The cordon put back is recorded as ours, so the next boot's restore can undo it.
    let marker: Value = serde_json::from_str(&c.marker_text().unwrap()).unwrap();
    assert_eq!(marker["cordoned"], json!(true), "{marker}");

    c.server
        .store()
        .modify("PodDisruptionBudget", Some(NS), "db", |p| {
            p["spec"]["minAvailable"] = json!(0)
        })
        .unwrap();
    let (prepared, report) = drain.await.unwrap();
    prepared.expect("the first prepare landed");
    assert!(report.complete, "{}", report.to_text());

    // After the drain (its deadline still far): an uncordon stays.
    admin_uncordons_and_removes_our_taint(&c).await;
    let recordoned = eventually(Duration::from_secs(2), || unschedulable(&c.node(NODE))).await;
    assert!(
        !recordoned,
        "the node was cordoned again after the drain had ended"
    );
    assert_eq!(hold_events(&c).len(), 1);
}

#[tokio::test]
async fn a_writer_that_sets_unschedulable_false_is_named_in_the_event() {
    let c = blocked_drain().await;
    let drain = start_drain(&c, Duration::from_secs(6));
    until("node-a prepared", || unschedulable(&c.node(NODE))).await;
    let params = kube::api::PatchParams {
        field_manager: Some("rebalancer".into()),
        ..Default::default()
    };
    kubectl_api(&c)
        .await
        .patch(
            NODE,
            &params,
            &kube::api::Patch::Merge(json!({"spec": {"unschedulable": false}})),
        )
        .await
        .unwrap();
    until("a CordonRemovedDuringDrain Event", || {
        !hold_events(&c).is_empty()
    })
    .await;
    let message = hold_events(&c)[0]["message"].as_str().unwrap().to_string();
    assert_eq!(
        message,
        "node node-a was uncordoned (field manager rebalancer) during the drain; cordoning it again: done"
    );
    assert!(unschedulable(&c.node(NODE)));
    drain.abort();
}

/// The PATCHes of `node-a` sent as our field manager that cordon it (the prepare and every
/// answer of the hold), from the fake's request record.
fn our_cordon_writes(c: &Cluster) -> usize {
    c.server
        .recorder()
        .matching("PATCH", "/api/v1/nodes/node-a")
        .iter()
        .filter(|r| r.query_param("fieldManager").as_deref() == Some("kube-shutdown-drain"))
        .filter(|r| {
            r.json().is_some_and(|ops| {
                ops.as_array().is_some_and(|ops| {
                    ops.iter().any(|o| {
                        o["path"] == json!("/spec/unschedulable") && o["value"] == json!(true)
                    })
                })
            })
        })
        .count()
}

/// Issue 29 item 9: removing only our taint during the drain gives an Event that reads as a
/// sentence ("node node-a was its taint ... was removed" before), naming the writer.
#[tokio::test]
async fn a_removed_taint_alone_is_said_in_a_sentence_naming_the_writer() {
    let c = blocked_drain().await;
    let drain = start_drain(&c, Duration::from_secs(60));
    until("node-a prepared", || {
        let n = c.node(NODE);
        unschedulable(&n) && has_our_taint(&n) && marker_text(&n).is_some()
    })
    .await;
    let left: Vec<Value> = c.node(NODE)["spec"]["taints"]
        .as_array()
        .cloned()
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t["key"] != json!(OUR_TAINT.0))
        .collect();
    let params = kube::api::PatchParams {
        field_manager: Some("kubectl-taint".into()),
        ..Default::default()
    };
    kubectl_api(&c)
        .await
        .patch(
            NODE,
            &params,
            &kube::api::Patch::Merge(json!({"spec": {"taints": left}})),
        )
        .await
        .unwrap();
    until("a CordonRemovedDuringDrain Event", || {
        !hold_events(&c).is_empty()
    })
    .await;
    let message = hold_events(&c)[0]["message"].as_str().unwrap().to_string();
    assert_eq!(
        message,
        "node node-a had its taint kube-shutdown-drain/shutdown:PreferNoSchedule removed \
         (field manager kubectl-taint) during the drain; tainting it again: done"
    );
    assert!(has_our_taint(&c.node(NODE)));
    drain.abort();
}

/// Issue 29: the hold keeps its pace ([`kube_shutdown_drain::engine::HOLD_PACE`]) against a
/// writer that uncordons again and again: 120 uncordons 50 ms apart (6 s at least) get the first
/// answer at once and then answers no faster than the pace allows (pauses of 0.5 s doubling,
/// jittered down by at most a fifth: nine answers need 36 s), where an unpaced hold answers as
/// fast as it can watch and write (9 answers to 60 uncordons on a loaded 2-core machine, so
/// twice that here). Counted in the fake's request record.
#[tokio::test]
async fn the_hold_keeps_its_pace_against_a_writer_that_uncordons_again_and_again() {
    const UNCORDONS: usize = 120;
    let c = blocked_drain().await;
    let drain = start_drain(&c, Duration::from_secs(120));
    until("node-a prepared", || {
        let n = c.node(NODE);
        unschedulable(&n) && marker_text(&n).is_some()
    })
    .await;
    assert_eq!(our_cordon_writes(&c), 1, "the prepare's one write");
    let api = kubectl_api(&c).await;
    let params = kube::api::PatchParams {
        field_manager: Some("rebalancer".into()),
        ..Default::default()
    };
    let uncordon = kube::api::Patch::Merge(json!({"spec": {"unschedulable": null}}));
    for _ in 0..UNCORDONS {
        api.patch(NODE, &params, &uncordon).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    until("node-a cordoned again after the writer stopped", || {
        unschedulable(&c.node(NODE))
    })
    .await;
    let answers = our_cordon_writes(&c) - 1;
    eprintln!("hold: {answers} answers to {UNCORDONS} uncordons");
    assert!(
        (1..=8).contains(&answers),
        "{answers} answers to {UNCORDONS} uncordons: the hold lost its pace"
    );
    assert!(hold_events(&c).len() <= 3, "at most HOLD_EVENTS_MAX Events");
    drain.abort();
}
