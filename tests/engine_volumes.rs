//! The engine against the fake API server's attach-detach controller: with `wait_for_detach`
//! the drain returns only once the VolumeAttachments of the evicted pods' volumes on the node
//! are gone (or at the deadline, reported as still attached); volumes of pods left on the node
//! are not waited for; `wait_for_detach = false` does not look at attachments at all.

mod engine_support;

use std::time::Duration;

use engine_support::*;
use kube_shutdown_drain::engine::Engine;
use kube_shutdown_drain::report::Outcome;
use serde_json::{Value, json};
use tokio::time::Instant;

/// A claim `claim` in `NS` bound to `pv`, the volume, and its attachment `va` on `NODE`.
fn volume(claim: &str, pv: &str, va: &str) -> Vec<Value> {
    vec![
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim, "namespace": NS}, "spec": {"volumeName": pv}}),
        json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": pv}, "spec": {}}),
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
            "metadata": {"name": va},
            "spec": {"attacher": "csi.example.com", "nodeName": NODE,
                     "source": {"persistentVolumeName": pv}}}),
    ]
}

/// `pod` mounting `claim`.
fn mounting(pod: Value, claim: &str) -> Value {
    merged(
        pod,
        json!({"spec": {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]}}),
    )
}

/// A StatefulSet pod `db-0` with claim `data-db-0` (pv-db, va-db), and a storage DaemonSet pod
/// `agent` on the node with claim `agent` (pv-agent, va-agent).
async fn cluster(detach_after: Option<Duration>) -> Cluster {
    let mut db = mounting(pod(NS, "db-0", NODE), "data-db-0");
    db["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "StatefulSet",
        "name": "db", "uid": "db-uid", "controller": true}]);
    let mut objects = vec![db, mounting(daemonset_pod(NS, "agent", NODE), "agent")];
    objects.extend(volume("data-db-0", "pv-db", "va-db"));
    objects.extend(volume("agent", "pv-agent", "va-agent"));
    let c = Cluster::start(objects).await;
    let mut t = c.server.controllers().timings();
    t.detach_after = detach_after;
    c.server.controllers().set_timings(t);
    c
}

fn attached(c: &Cluster, va: &str) -> bool {
    c.server.store().get("VolumeAttachment", None, va).is_some()
}

/// The drain does not return before the evicted pod's attachment is gone; the storage agent's
/// attachment (its pod stays) is neither waited for nor reported.
#[tokio::test]
async fn the_drain_returns_only_after_the_evicted_pods_volume_detached() {
    let c = cluster(Some(Duration::from_secs(2))).await;
    let engine = Engine::new(c.settings("")).unwrap();
    engine.prepare("test").await.unwrap();
    c.server.recorder().clear();
    let report = engine.drain(Instant::now() + Duration::from_secs(30)).await;
    // Read at once: the controller detaches 2 s after the pod went, so a drain that returned
    // when the pod went would still find the attachment.
    assert!(!attached(&c, "va-db"), "{}", report.to_text());
    assert!(report.complete, "{}", report.to_text());
    assert!(!report.deadline_reached);
    assert!(
        attached(&c, "va-agent"),
        "the agent's volume stays attached"
    );
    let db = report.pods.iter().find(|p| p.name == "db-0").unwrap();
    assert_eq!(db.outcome, Outcome::Evicted);
    assert_eq!(report.volumes.len(), 1, "{:?}", report.volumes);
    let v = &report.volumes[0];
    assert_eq!(
        (v.volume.as_str(), v.claim.as_str(), v.attachment.as_str()),
        ("pv-db", "work/data-db-0", "va-db")
    );
    let detached = v.detached_ms.expect("a detach time");
    assert!(detached >= db.finished_ms.unwrap(), "{detached} ms");
    let text = report.to_text();
    assert!(
        text.contains("volume pv-db (claim work/data-db-0, attachment va-db): detached at"),
        "{text}"
    );
    assert!(report.summary().contains("1 volume detached"), "{text}");
    // The attachments were listed once, after the claim was read, then watched (no polling);
    // the agent's claim was not read.
    let requests = c.server.recorder().requests();
    let claim = requests
        .iter()
        .position(|r| r.uri().contains("/persistentvolumeclaims/data-db-0"))
        .expect("the claim was read");
    let (watches, lists): (Vec<_>, Vec<_>) = requests
        .iter()
        .filter(|r| r.uri().contains("/volumeattachments"))
        .partition(|r| r.uri().contains("watch=true"));
    assert_eq!(lists.len(), 1, "one list, then the watch: {lists:?}");
    assert!(!watches.is_empty(), "the detach is seen on the watch");
    assert!(
        requests[claim..]
            .iter()
            .any(|r| r.uri().contains("/volumeattachments"))
    );
    assert!(
        !requests
            .iter()
            .any(|r| r.uri().contains("/persistentvolumeclaims/agent")),
        "the kept pod's claim is not looked up"
    );
}

/// A detach that never comes ends the drain at the deadline, incomplete, with the volume
/// reported as still attached.
#[tokio::test]
async fn a_volume_that_never_detaches_ends_the_drain_at_the_deadline() {
    let c = cluster(None).await;
    let engine = Engine::new(c.settings("")).unwrap();
    engine.prepare("test").await.unwrap();
    let report = engine.drain(Instant::now() + Duration::from_secs(6)).await;
    let text = report.to_text();
    assert_eq!(
        report
            .pods
            .iter()
            .find(|p| p.name == "db-0")
            .unwrap()
            .outcome,
        Outcome::Evicted,
        "{text}"
    );
    assert!(!report.complete, "{text}");
    assert!(report.deadline_reached, "{text}");
    assert_eq!(report.volumes.len(), 1, "{text}");
    assert_eq!(report.volumes[0].detached_ms, None);
    assert!(
        text.contains(
            "volume pv-db (claim work/data-db-0, attachment va-db): still attached at the deadline"
        ),
        "{text}"
    );
    assert!(text.contains("not drained"), "{text}");
    assert!(attached(&c, "va-db"));
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["volumes"][0]["detached_ms"], Value::Null);
}

/// Credentials that may not list VolumeAttachments (403): the drain does not wait for the
/// deadline; the report names what could not be read and is not complete.
#[tokio::test]
async fn attachments_that_cannot_be_listed_end_the_wait_at_once_with_an_error() {
    let c = cluster(None).await;
    c.server.faults().fail_next(
        fake_apiserver::faults::Route::new("GET", "/volumeattachments"),
        1,
        403,
    );
    let engine = Engine::new(c.settings("")).unwrap();
    engine.prepare("test").await.unwrap();
    let report = engine.drain(Instant::now() + Duration::from_secs(20)).await;
    let text = report.to_text();
    // Not held to the deadline by attachments it may not see.
    assert!(!report.complete && !report.deadline_reached, "{text}");
    assert!(report.volumes.is_empty(), "{text}");
    // The volume is no CSI volume, so its attachment's name is not known either.
    assert!(
        report.errors.iter().any(|e| e.contains(
            "cannot wait for the detach of volume pv-db (claim work/data-db-0) from node node-a: \
             these credentials may not list volumeattachments"
        ) && e.contains("not a CSI volume")),
        "{:?}",
        report.errors
    );
}

/// The attach-detach controller may delete an attachment a few milliseconds after its pod went
/// (36 ms on a 1.36 server), before any list made after the pod's deletion: the attachment is
/// followed from before the first eviction, so its detach is reported, not lost.
#[tokio::test]
async fn an_attachment_deleted_at_once_after_its_pod_went_is_reported() {
    let c = cluster(Some(Duration::ZERO)).await;
    let engine = Engine::new(c.settings("")).unwrap();
    engine.prepare("test").await.unwrap();
    c.server.recorder().clear();
    let report = engine.drain(Instant::now() + Duration::from_secs(30)).await;
    let text = report.to_text();
    assert!(report.complete, "{text}");
    assert!(!attached(&c, "va-db"));
    assert_eq!(report.volumes.len(), 1, "{text}");
    let v = &report.volumes[0];
    assert_eq!(
        (v.volume.as_str(), v.claim.as_str(), v.attachment.as_str()),
        ("pv-db", "work/data-db-0", "va-db")
    );
    let db = report.pods.iter().find(|p| p.name == "db-0").unwrap();
    assert!(
        v.detached_ms.expect("a detach time") >= db.started_ms.unwrap(),
        "{text}"
    );
    // The attachments were listed before the eviction.
    let requests = c.server.recorder().requests();
    let listed = requests
        .iter()
        .position(|r| r.uri().contains("/volumeattachments") && !r.uri().contains("watch=true"))
        .expect("a list");
    let evicted = requests
        .iter()
        .position(|r| r.method == "POST" && r.path.ends_with("/db-0/eviction"))
        .expect("an eviction");
    assert!(listed < evicted, "the list came first");
}

/// `printf %s vol-dbcsi.example.comnode-a | sha256sum`: the name the attach-detach controller
/// gives the attachment of volume handle `vol-db` of driver `csi.example.com` on `node-a`.
const DB_ATTACHMENT: &str = "csi-438507ffea197264e379d2fbcbd3617fec2225660ea39b965a4a8ea6d97af8c3";

/// The cluster of [`cluster`] with `pv-db` a CSI volume and its attachment named as the
/// attach-detach controller names it.
async fn csi_cluster(detach_after: Option<Duration>) -> Cluster {
    let c = cluster(detach_after).await;
    let store = c.server.store();
    store
        .modify("PersistentVolume", None, "pv-db", |pv| {
            pv["spec"]["csi"] = json!({"driver": "csi.example.com", "volumeHandle": "vol-db"})
        })
        .unwrap();
    let mut va = store.get("VolumeAttachment", None, "va-db").unwrap();
    store.remove("VolumeAttachment", None, "va-db").unwrap();
    va["metadata"] = json!({"name": DB_ATTACHMENT});
    store.upsert(va).unwrap();
    c
}

/// A node's own credentials may read a claim only while a pod on the node references it, and
/// may get an attachment by name but never list one (the Node authorizer): the claim and its
/// volume are read before the eviction, and the attachment is followed by the name derived
/// from the volume, until it is gone.
#[tokio::test]
async fn the_kubelets_credentials_follow_the_attachment_by_its_name() {
    let c = csi_cluster(Some(Duration::from_secs(2))).await;
    let engine = Engine::new(c.settings_as("system:node:node-a", "")).unwrap();
    engine.prepare("test").await.unwrap();
    c.server.recorder().clear();
    let report = engine.drain(Instant::now() + Duration::from_secs(30)).await;
    let text = report.to_text();
    assert!(
        c.server
            .store()
            .get("VolumeAttachment", None, DB_ATTACHMENT)
            .is_none(),
        "returned only after the detach: {text}"
    );
    assert!(report.complete, "{text}\n{:?}", report.errors);
    assert_eq!(report.volumes.len(), 1, "{text}");
    let v = &report.volumes[0];
    assert_eq!(
        (v.volume.as_str(), v.claim.as_str(), v.attachment.as_str()),
        ("pv-db", "work/data-db-0", DB_ATTACHMENT)
    );
    let db = report.pods.iter().find(|p| p.name == "db-0").unwrap();
    assert!(v.detached_ms.unwrap() >= db.finished_ms.unwrap(), "{text}");
    let requests = c.server.recorder().requests();
    let at = |what: &str, f: &dyn Fn(&fake_apiserver::RecordedRequest) -> bool| {
        requests
            .iter()
            .position(f)
            .unwrap_or_else(|| panic!("no {what}: {requests:#?}"))
    };
    let claim = at("claim read", &|r| {
        r.path.ends_with("/persistentvolumeclaims/data-db-0")
    });
    let volume = at("volume read", &|r| {
        r.path.ends_with("/persistentvolumes/pv-db")
    });
    let evicted = at("eviction", &|r| r.path.ends_with("/db-0/eviction"));
    assert!(
        claim < evicted && volume < evicted,
        "read while the pod was there"
    );
    assert!(
        requests
            .iter()
            .filter(|r| r.path.contains("persistentvolume"))
            .all(|r| r.status == 200),
        "no claim or volume read was refused"
    );
    let by_name = requests
        .iter()
        .filter(|r| {
            r.path
                .ends_with(&format!("/volumeattachments/{DB_ATTACHMENT}"))
        })
        .count();
    assert!(by_name >= 2, "followed by name: {by_name} reads");
}

/// With a node's credentials an attachment the controller deleted before the first read after
/// the pod went reads as 403 "no relationship found": reported as detached, not as an error.
#[tokio::test]
async fn the_kubelets_credentials_report_an_attachment_deleted_at_once() {
    let c = csi_cluster(Some(Duration::ZERO)).await;
    let engine = Engine::new(c.settings_as("system:node:node-a", "")).unwrap();
    engine.prepare("test").await.unwrap();
    let report = engine.drain(Instant::now() + Duration::from_secs(30)).await;
    let text = report.to_text();
    assert!(report.complete, "{text}\n{:?}", report.errors);
    assert_eq!(report.volumes.len(), 1, "{text}");
    assert_eq!(report.volumes[0].attachment, DB_ATTACHMENT);
    assert!(report.volumes[0].detached_ms.is_some(), "{text}");
}

/// `wait_for_detach = false`: no claim is read, no attachment listed, no volume reported.
#[tokio::test]
async fn wait_for_detach_false_does_not_wait() {
    let c = cluster(None).await;
    let engine = Engine::new(c.settings("[drain]\nwait_for_detach = false\n")).unwrap();
    engine.prepare("test").await.unwrap();
    c.server.recorder().clear();
    let report = engine.drain(Instant::now() + Duration::from_secs(20)).await;
    assert!(report.complete, "{}", report.to_text());
    assert!(report.volumes.is_empty());
    assert!(
        attached(&c, "va-db"),
        "never detaches, and was not waited for"
    );
    let requests = c.server.recorder().requests();
    assert!(
        !requests
            .iter()
            .any(|r| r.uri().contains("persistentvolumeclaims")
                || r.uri().contains("volumeattachments")),
        "no volume requests"
    );
}

/// A CSI volume that was never attached (no VolumeAttachment when the drain began: a driver
/// without attach) is not reported as detached, with a node's credentials either: the look
/// before the evictions found nothing to wait for.
#[tokio::test]
async fn the_kubelets_credentials_do_not_report_a_volume_never_attached() {
    let c = csi_cluster(None).await;
    c.server
        .store()
        .remove("VolumeAttachment", None, DB_ATTACHMENT)
        .unwrap();
    let engine = Engine::new(c.settings_as("system:node:node-a", "")).unwrap();
    engine.prepare("test").await.unwrap();
    let report = engine.drain(Instant::now() + Duration::from_secs(30)).await;
    let text = report.to_text();
    assert!(report.complete, "{text}\n{:?}", report.errors);
    assert!(report.volumes.is_empty(), "{text}");
}
