//! A kube 5 client against the fake: list (selectors, paging), watch, the four patch types,
//! PUT conflicts, eviction (hand-built policy/v1 and kube's own), Events in both groups,
//! Leases, SelfSubjectAccessReview, identities, and the fault knobs.

use std::path::Path;
use std::time::Duration;

use fake_apiserver::{FakeApiServer, Options, Route, load_seed_file};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Node, ObjectReference, Pod};
use k8s_openapi::api::events::v1::Event as NewEvent;
use k8s_openapi::api::policy::v1::{Eviction, PodDisruptionBudget};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{
    Api, DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::core::Status;
use kube::{Client, Config};
use serde_json::{Value, json};

const SCENARIO: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/drain-scenario.yaml"
);

async fn scenario() -> FakeApiServer {
    let seed = load_seed_file(Path::new(SCENARIO)).expect("scenario seed loads");
    FakeApiServer::start(Options { port: 0, seed })
        .await
        .expect("server starts")
}

/// A client built from the kubeconfig the server writes, built-in retries off.
async fn client(server: &FakeApiServer, token: &str) -> Client {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("kubeconfig");
    server.write_kubeconfig(&path, token).expect("kubeconfig");
    let kubeconfig = Kubeconfig::read_from(&path).expect("kubeconfig parses");
    let mut config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .expect("config");
    config.default_retry = false;
    config.read_timeout = Some(Duration::from_secs(10));
    Client::try_from(config).expect("client")
}

fn api_status(err: kube::Error) -> Status {
    match err {
        kube::Error::Api(status) => *status,
        other => panic!("expected an API error, got {other:?}"),
    }
}

fn names<K: kube::Resource>(items: &[K]) -> Vec<String> {
    let mut v: Vec<String> = items
        .iter()
        .map(|o| o.meta().name.clone().unwrap_or_default())
        .collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_with_selectors_and_pages() {
    let server = scenario().await;
    let pods: Api<Pod> = Api::all(client(&server, "admin").await);
    let on_a = pods
        .list(&ListParams::default().fields("spec.nodeName=node-a"))
        .await
        .expect("list");
    assert_eq!(
        names(&on_a.items),
        [
            "bare-pod",
            "ds1-xyz",
            "guarded",
            "rs1-emptydir",
            "rs1-plain",
            "skipped"
        ]
    );
    let picked = pods
        .list(
            &ListParams::default()
                .fields("spec.nodeName==node-a,metadata.name!=guarded")
                .labels("drain!=skip,app in (rs1,guarded,bare)"),
        )
        .await
        .expect("list");
    assert_eq!(
        names(&picked.items),
        ["bare-pod", "rs1-emptydir", "rs1-plain"]
    );

    let mut seen = Vec::new();
    let mut lp = ListParams::default().limit(3);
    let mut pages = 0;
    loop {
        let page = pods.list(&lp).await.expect("page");
        pages += 1;
        assert!(page.items.len() <= 3);
        seen.extend(page.items);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => lp = lp.continue_token(&token),
            None => break,
        }
    }
    assert_eq!(pages, 3);
    assert_eq!(seen.len(), 7);

    let err = pods
        .list(&ListParams::default().fields("spec.bogus=1"))
        .await
        .expect_err("unsupported field");
    let status = api_status(err);
    assert_eq!(status.code, 400);
    assert!(
        status
            .message
            .contains("field label not supported: spec.bogus")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_from_a_version_and_sees_graceful_deletion() {
    let server = scenario().await;
    let client = client(&server, "admin").await;
    let pods: Api<Pod> = Api::namespaced(client, "work");
    let list = pods
        .list(&ListParams::default().fields("spec.nodeName=node-a"))
        .await
        .expect("list");
    let rv = list.metadata.resource_version.expect("list rv");
    let wp = WatchParams::default()
        .fields("spec.nodeName=node-a")
        .timeout(20);
    let mut stream = pods.watch(&wp, &rv).await.expect("watch").boxed();

    server
        .store()
        .modify("Pod", Some("work"), "rs1-plain", |p| {
            p["metadata"]["annotations"]["fake-apiserver.test/termination-seconds"] = json!("0.3");
        })
        .expect("annotate");
    // Not on node-a: the watch must not see it.
    server
        .store()
        .set_pod_ready("work", "other-node", false)
        .expect("other pod");
    let eviction = Eviction {
        metadata: ObjectMeta {
            name: Some("rs1-plain".into()),
            namespace: Some("work".into()),
            ..ObjectMeta::default()
        },
        ..Eviction::default()
    };
    let status: Status = pods
        .create_subresource("eviction", "rs1-plain", &PostParams::default(), &eviction)
        .await
        .expect("evicted");
    assert_eq!(status.code, 201);

    let mut kinds = Vec::new();
    while let Some(event) = tokio::time::timeout(Duration::from_secs(5), stream.try_next())
        .await
        .expect("event in time")
        .expect("stream ok")
    {
        match event {
            WatchEvent::Modified(p) => {
                let terminating = p.metadata.deletion_timestamp.is_some();
                let phase = p.status.and_then(|s| s.phase).unwrap_or_default();
                kinds.push(format!(
                    "MODIFIED {} {terminating} {phase}",
                    p.metadata.name.unwrap_or_default()
                ));
            }
            WatchEvent::Deleted(p) => {
                assert!(p.metadata.deletion_timestamp.is_some(), "final object");
                kinds.push(format!("DELETED {}", p.metadata.name.unwrap_or_default()));
                break;
            }
            other => kinds.push(format!("{other:?}")),
        }
    }
    assert_eq!(
        kinds,
        [
            "MODIFIED rs1-plain false Running",
            "MODIFIED rs1-plain true Running",
            // Kubelets >= 1.27 report the terminal phase before the final delete.
            "MODIFIED rs1-plain true Succeeded",
            "DELETED rs1-plain"
        ]
    );
    assert!(pods.get_opt("rs1-plain").await.expect("get").is_none());

    // A watch without a version starts with the current objects as ADDED.
    let mut fresh = pods
        .watch(
            &WatchParams::default().labels("app=guarded").timeout(1),
            "0",
        )
        .await
        .expect("watch")
        .boxed();
    match fresh.try_next().await.expect("ok") {
        Some(WatchEvent::Added(p)) => assert_eq!(p.metadata.name.as_deref(), Some("guarded")),
        other => panic!("expected ADDED guarded, got {other:?}"),
    }
    // timeoutSeconds=1 ends the stream.
    let end = tokio::time::timeout(Duration::from_secs(5), fresh.try_next()).await;
    assert!(matches!(end, Ok(Ok(None))), "{end:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_four_patch_types_and_put_conflicts() {
    let server = scenario().await;
    let nodes: Api<Node> = Api::all(client(&server, "admin").await);

    let node = nodes
        .patch(
            "node-a",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .expect("strategic");
    assert_eq!(node.spec.as_ref().and_then(|s| s.unschedulable), Some(true));
    let node = nodes
        .patch(
            "node-a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"example.com/marker": "x"}}})),
        )
        .await
        .expect("merge");
    assert_eq!(
        node.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get("example.com/marker"))
            .map(String::as_str),
        Some("x")
    );

    // The cordon brought the node-lifecycle controller's taint next to the seeded one, so the
    // guarded patch tests the list as it is now.
    let taints_now = nodes
        .get("node-a")
        .await
        .expect("get")
        .spec
        .and_then(|s| s.taints);
    let keys: Vec<String> = taints_now.iter().flatten().map(|t| t.key.clone()).collect();
    assert_eq!(
        keys,
        [
            "node.kubernetes.io/not-ready",
            "node.kubernetes.io/unschedulable"
        ]
    );
    let guarded: json_patch::Patch = serde_json::from_value(json!([
        {"op": "test", "path": "/spec/taints", "value": taints_now},
        {"op": "add", "path": "/spec/taints/-", "value": {"key": "example.com/shutdown", "effect": "NoSchedule"}}
    ]))
    .expect("patch");
    let node = nodes
        .patch(
            "node-a",
            &PatchParams::default(),
            &Patch::Json::<()>(guarded.clone()),
        )
        .await
        .expect("json patch");
    assert_eq!(
        node.spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .map(Vec::len),
        Some(3)
    );
    // The same guarded patch again: its test fails now, 422.
    let err = nodes
        .patch(
            "node-a",
            &PatchParams::default(),
            &Patch::Json::<()>(guarded),
        )
        .await
        .expect_err("test op fails");
    assert_eq!(api_status(err).code, 422);

    let node = nodes
        .patch(
            "node-a",
            &PatchParams::apply("drain-test"),
            &Patch::Apply(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a", "labels": {"applied": "yes"}}})),
        )
        .await
        .expect("apply");
    assert_eq!(
        node.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("applied"))
            .map(String::as_str),
        Some("yes")
    );
    assert_eq!(
        node.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("kubernetes.io/hostname"))
            .map(String::as_str),
        Some("node-a")
    );

    // A resourceVersion in a patch is a precondition.
    let err = nodes
        .patch(
            "node-a",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"resourceVersion": "1"}, "spec": {"unschedulable": null}}),
            ),
        )
        .await
        .expect_err("stale patch");
    assert!(api_status(err).is_conflict());

    // PUT with the current version works, with the old one answers 409.
    let mut current = nodes.get("node-a").await.expect("get");
    let stale = current.clone();
    current
        .metadata
        .labels
        .get_or_insert_default()
        .insert("put".into(), "1".into());
    nodes
        .replace("node-a", &PostParams::default(), &current)
        .await
        .expect("put");
    let err = nodes
        .replace("node-a", &PostParams::default(), &stale)
        .await
        .expect_err("stale put");
    let status = api_status(err);
    assert_eq!(status.code, 409);
    assert_eq!(
        status.message,
        "Operation cannot be fulfilled on nodes \"node-a\": the object has been modified; please apply your changes to the latest version and try again"
    );
    let err = nodes.get("node-zzz").await.expect_err("missing");
    assert!(api_status(err).is_not_found());

    // The bodies of the reference (A.4), byte for byte.
    let stale_put = server.recorder().matching("PUT", "/nodes/node-a");
    assert_eq!(
        stale_put.last().map(|r| r.response.as_str()),
        Some(
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Operation cannot be fulfilled on nodes \"node-a\": the object has been modified; please apply your changes to the latest version and try again","reason":"Conflict","details":{"name":"node-a","kind":"nodes"},"code":409}"#
        )
    );
    server
        .store()
        .remove("Pod", Some("work"), "guarded")
        .expect("removed");
    let pods: Api<Pod> = Api::namespaced(nodes.into_client(), "work");
    assert!(
        pods.get_opt("guarded")
            .await
            .expect("404 is None")
            .is_none()
    );
    let gone = server.recorder().matching("GET", "/pods/guarded");
    assert_eq!(
        gone.last().map(|r| r.response.as_str()),
        Some(
            r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"pods \"guarded\" not found","reason":"NotFound","details":{"name":"guarded","kind":"pods"},"code":404}"#
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn evictions_follow_the_budget() {
    let server = scenario().await;
    let client = client(&server, "admin").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "work");
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client, "work");

    let pdb = pdbs.get("guarded-pdb").await.expect("pdb");
    let status = pdb.status.expect("status kept current");
    assert_eq!(
        (
            status.disruptions_allowed,
            status.current_healthy,
            status.desired_healthy,
            status.expected_pods
        ),
        (0, 1, 1, 1)
    );

    let eviction = |name: &str| Eviction {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("work".into()),
            ..ObjectMeta::default()
        },
        ..Eviction::default()
    };
    let err = pods
        .create_subresource::<_, Status>(
            "eviction",
            "guarded",
            &PostParams::default(),
            &eviction("guarded"),
        )
        .await
        .expect_err("blocked");
    let status = api_status(err);
    assert_eq!(
        (status.code, status.reason.as_str()),
        (429, "TooManyRequests")
    );
    let recorded = server.recorder().matching("POST", "/guarded/eviction");
    assert_eq!(recorded.last().and_then(|r| r.retry_after.clone()), None);

    // The Retry-After knob.
    server.faults().set_eviction_retry_after(Some(10));
    let _ = pods
        .create_subresource::<_, Status>(
            "eviction",
            "guarded",
            &PostParams::default(),
            &eviction("guarded"),
        )
        .await;
    let recorded = server.recorder().matching("POST", "/guarded/eviction");
    let last = recorded.last().expect("recorded");
    assert_eq!(last.retry_after.as_deref(), Some("10"));
    assert_eq!(
        last.response,
        r#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Cannot evict pod as it would violate the pod's disruption budget.","reason":"TooManyRequests","details":{"causes":[{"reason":"DisruptionBudget","message":"The disruption budget guarded-pdb is still being processed by the server."}],"retryAfterSeconds":10},"code":429}"#
    );
    server.faults().set_eviction_retry_after(None);

    // A Ready replacement opens the budget.
    let mut replacement: Pod = serde_json::from_value(json!({
        "metadata": {"name": "guarded-2", "labels": {"app": "guarded"}},
        "spec": {"nodeName": "node-b", "containers": [{"name": "c", "image": "busybox"}]}
    }))
    .expect("pod");
    replacement.metadata.namespace = Some("work".into());
    pods.create(&PostParams::default(), &replacement)
        .await
        .expect("created");
    server
        .store()
        .set_pod_ready("work", "guarded-2", true)
        .expect("ready");
    let allowed = pdbs
        .get("guarded-pdb")
        .await
        .expect("pdb")
        .status
        .map(|s| s.disruptions_allowed);
    assert_eq!(allowed, Some(1));
    // kube's own evict() (its deleteOptions are dropped, as on the real server) works too.
    let status = pods
        .evict("guarded", &EvictParams::default())
        .await
        .expect("evicted");
    assert_eq!(status.code, 201);
    let allowed = pdbs
        .get("guarded-pdb")
        .await
        .expect("pdb")
        .status
        .map(|s| s.disruptions_allowed);
    assert_eq!(allowed, Some(0), "the terminating pod counts as disrupted");

    // Two budgets over one pod: 500. A gone pod: 404.
    pdbs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": "second", "namespace": "work"},
            "spec": {"maxUnavailable": "50%", "selector": {"matchLabels": {"app": "rs1"}}}
        }))
        .expect("pdb"),
    )
    .await
    .expect("second pdb");
    pdbs.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "metadata": {"name": "third", "namespace": "work"},
            "spec": {"minAvailable": 0, "selector": {"matchExpressions": [{"key": "app", "operator": "In", "values": ["rs1"]}]}}
        }))
        .expect("pdb"),
    )
    .await
    .expect("third pdb");
    let err = pods
        .create_subresource::<_, Status>(
            "eviction",
            "rs1-plain",
            &PostParams::default(),
            &eviction("rs1-plain"),
        )
        .await
        .expect_err("two budgets");
    assert_eq!(api_status(err).code, 500);
    let err = pods
        .create_subresource::<_, Status>(
            "eviction",
            "nope",
            &PostParams::default(),
            &eviction("nope"),
        )
        .await
        .expect_err("gone");
    assert_eq!(api_status(err).code, 404);
    // A DELETE with a wrong UID precondition: 409.
    let err = pods
        .delete(
            "bare-pod",
            &DeleteParams {
                preconditions: Some(kube::api::Preconditions {
                    uid: Some("wrong".into()),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            },
        )
        .await
        .expect_err("precondition");
    assert_eq!(api_status(err).code, 409);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_leases_and_access_reviews() {
    let server = scenario().await;
    let client = client(&server, "admin").await;
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let event = Event {
        metadata: ObjectMeta {
            name: Some("node-a.drain.1".into()),
            ..ObjectMeta::default()
        },
        involved_object: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some("node-a".into()),
            ..ObjectReference::default()
        },
        reason: Some("NodeDrainStarted".into()),
        message: Some("shutdown drain started".into()),
        type_: Some("Normal".into()),
        ..Event::default()
    };
    events
        .create(&PostParams::default(), &event)
        .await
        .expect("core event");
    let found = events
        .list(&ListParams::default().fields("involvedObject.name=node-a"))
        .await
        .expect("list");
    assert_eq!(names(&found.items), ["node-a.drain.1"]);
    let none = events
        .list(&ListParams::default().fields("involvedObject.name=node-b"))
        .await
        .expect("list");
    assert!(none.items.is_empty());

    let new_events: Api<NewEvent> = Api::namespaced(client.clone(), "default");
    let created = new_events
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({
                "metadata": {"name": "node-a.drain.2"},
                "eventTime": "2026-01-01T00:00:00.000000Z",
                "reportingController": "example.com/shutdown-drain",
                "reportingInstance": "node-a",
                "action": "Drain",
                "reason": "NodeDrainFinished",
                "regarding": {"apiVersion": "v1", "kind": "Node", "name": "node-a"},
                "type": "Normal"
            }))
            .expect("event"),
        )
        .await
        .expect("events.k8s.io event");
    assert!(created.metadata.uid.is_some());
    // One storage, two representations, as on the real apiserver.
    let both = events
        .list(&ListParams::default().fields("involvedObject.name=node-a"))
        .await
        .expect("list");
    assert_eq!(names(&both.items), ["node-a.drain.1", "node-a.drain.2"]);
    let as_core = events.get("node-a.drain.2").await.expect("core view");
    assert_eq!(as_core.reason.as_deref(), Some("NodeDrainFinished"));
    assert_eq!(as_core.involved_object.name.as_deref(), Some("node-a"));
    assert_eq!(
        as_core.reporting_component.as_deref(),
        Some("example.com/shutdown-drain")
    );
    let as_new = new_events.get("node-a.drain.1").await.expect("new view");
    assert_eq!(as_new.note.as_deref(), Some("shutdown drain started"));
    assert_eq!(
        as_new.regarding.as_ref().and_then(|r| r.kind.as_deref()),
        Some("Node")
    );
    let regarding = new_events
        .list(&ListParams::default().fields("regarding.name=node-a"))
        .await
        .expect("list");
    assert_eq!(regarding.items.len(), 2);

    // (kube-node-lease/node-a is the simulated kubelet's own Lease.)
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let lease: Lease = serde_json::from_value(json!({
        "metadata": {"name": "node-a-drain"},
        "spec": {"holderIdentity": "node-a", "leaseDurationSeconds": 40}
    }))
    .expect("lease");
    let created = leases
        .create(&PostParams::default(), &lease)
        .await
        .expect("lease created");
    let err = leases
        .create(&PostParams::default(), &lease)
        .await
        .expect_err("exists");
    assert!(api_status(err).is_already_exists());
    let mut renewed = created.clone();
    renewed.spec.get_or_insert_default().lease_duration_seconds = Some(41);
    leases
        .replace("node-a-drain", &PostParams::default(), &renewed)
        .await
        .expect("renewed");
    let err = leases
        .replace("node-a-drain", &PostParams::default(), &created)
        .await
        .expect_err("stale");
    assert!(api_status(err).is_conflict());
    leases
        .delete("node-a-drain", &DeleteParams::default())
        .await
        .expect("deleted");
    assert!(leases.get_opt("node-a-drain").await.expect("get").is_none());

    let review = |verb: &str, group: &str, resource: &str, name: &str| SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                group: Some(group.into()),
                resource: Some(resource.into()),
                name: (!name.is_empty()).then(|| name.into()),
                namespace: Some("work".into()),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let ask = |api: Api<SelfSubjectAccessReview>, r: SelfSubjectAccessReview| async move {
        api.create(&PostParams::default(), &r)
            .await
            .expect("review")
            .status
            .map(|s| s.allowed)
    };
    let admin: Api<SelfSubjectAccessReview> = Api::all(client);
    assert_eq!(
        ask(admin, review("get", "apps", "daemonsets", "")).await,
        Some(true)
    );
    let kubelet: Api<SelfSubjectAccessReview> = Api::all(kubelet_client(&server).await);
    assert_eq!(
        ask(kubelet.clone(), review("get", "apps", "daemonsets", "")).await,
        Some(false)
    );
    // Without the spec.nodeName field selector (1.32+ servers; see the next test).
    assert_eq!(
        ask(kubelet.clone(), review("list", "", "pods", "")).await,
        Some(false)
    );
    assert_eq!(
        ask(kubelet, review("patch", "", "nodes", "node-a")).await,
        Some(true)
    );
}

async fn kubelet_client(server: &FakeApiServer) -> Client {
    client(server, "system:node:node-a").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_identity_is_held_to_node_restriction() {
    let server = scenario().await;
    let kubelet = kubelet_client(&server).await;
    let nodes: Api<Node> = Api::all(kubelet.clone());
    nodes
        .patch(
            "node-a",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .expect("own node cordon");
    let err = nodes
        .patch(
            "node-a",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"taints": []}})),
        )
        .await
        .expect_err("taints");
    let status = api_status(err);
    assert_eq!(status.code, 403);
    assert!(
        status
            .message
            .ends_with("node \"node-a\" is not allowed to modify taints"),
        "{}",
        status.message
    );
    let err = nodes
        .patch(
            "node-b",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"x": "y"}}})),
        )
        .await
        .expect_err("other node");
    assert!(api_status(err).is_forbidden());
    let ds: Api<k8s_openapi::api::apps::v1::DaemonSet> = Api::namespaced(kubelet.clone(), "work");
    assert!(api_status(ds.get("ds1").await.expect_err("no daemonsets")).is_forbidden());
    let pods: Api<Pod> = Api::namespaced(kubelet, "work");
    let err = pods
        .evict("other-node", &EvictParams::default())
        .await
        .expect_err("not bound here");
    assert!(api_status(err).is_forbidden());
    let status = pods
        .evict("rs1-plain", &EvictParams::default())
        .await
        .expect("own pod");
    assert_eq!(status.code, 201);
    let users: Vec<String> = server
        .recorder()
        .requests()
        .into_iter()
        .map(|r| r.user)
        .collect();
    assert!(users.iter().all(|u| u == "system:node:node-a"), "{users:?}");
}

/// The access reviews a node's credentials get from a 1.36 server (authorization.k8s.io/v1
/// `resourceAttributes.fieldSelector`, the Lease's namespace), verbatim from the recording.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_identity_is_reviewed_as_a_1_36_node_authorizer_answers() {
    let server = scenario().await;
    let kubelet: Api<SelfSubjectAccessReview> = Api::all(kubelet_client(&server).await);
    let ask = |attributes: Value| {
        let api = kubelet.clone();
        async move {
            let review: SelfSubjectAccessReview =
                serde_json::from_value(json!({"spec": {"resourceAttributes": attributes}}))
                    .expect("a review");
            let status = api
                .create(&PostParams::default(), &review)
                .await
                .expect("review")
                .status
                .expect("a status");
            (status.allowed, status.reason.unwrap_or_default())
        }
    };
    let pods = ask(json!({"verb": "list", "resource": "pods"})).await;
    assert_eq!(
        pods,
        (
            false,
            "can only list/watch pods with spec.nodeName field selector".into()
        )
    );
    let watch = ask(json!({"verb": "watch", "resource": "pods"})).await;
    assert_eq!(watch, pods);
    let lease = ask(json!({"verb": "get", "group": "coordination.k8s.io",
                           "resource": "leases", "name": "node-a"}))
    .await;
    assert_eq!(
        lease,
        (
            false,
            "can only access leases in the \"kube-node-lease\" system namespace".into()
        )
    );
    let listed = ask(
        json!({"verb": "list", "resource": "pods", "fieldSelector": {
        "requirements": [{"key": "spec.nodeName", "operator": "In", "values": ["node-a"]}]}}),
    )
    .await;
    assert!(listed.0, "{listed:?}");
    let watched = ask(json!({"verb": "watch", "resource": "pods",
                             "fieldSelector": {"rawSelector": "spec.nodeName=node-a"}}))
    .await;
    assert!(watched.0, "{watched:?}");
    let other = ask(json!({"verb": "watch", "resource": "pods",
                           "fieldSelector": {"rawSelector": "spec.nodeName=node-b"}}))
    .await;
    assert!(!other.0, "{other:?}");
    let own_lease = ask(json!({"namespace": "kube-node-lease", "verb": "get",
                               "group": "coordination.k8s.io", "resource": "leases",
                               "name": "node-a"}))
    .await;
    assert!(own_lease.0, "{own_lease:?}");
}

/// The Node authorizer's graph: a node may get a claim, its volume and its attachment while a
/// pod bound to the node references the claim, never list them, and nothing once the pod is
/// gone ("no relationship found"), as the 1.36 recording shows 3 ms after the pod went.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_identity_reads_claims_only_while_its_pod_references_them() {
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
    use k8s_openapi::api::storage::v1::VolumeAttachment;
    let seed = vec![
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a"}}),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "work"}}),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "db-0", "namespace": "work"},
               "spec": {"nodeName": "node-a", "containers": [{"name": "c", "image": "i"}],
                        "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}},
                                    {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]}}),
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
               "metadata": {"name": "data", "namespace": "work"}, "spec": {"volumeName": "pv-data"}}),
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
               "metadata": {"name": "db-0-scratch", "namespace": "work"}, "spec": {}}),
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
               "metadata": {"name": "unrelated", "namespace": "work"}, "spec": {"volumeName": "pv-x"}}),
        json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-data"}, "spec": {}}),
        json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-x"}, "spec": {}}),
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment", "metadata": {"name": "csi-a"},
               "spec": {"attacher": "d", "nodeName": "node-a", "source": {"persistentVolumeName": "pv-data"}}}),
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment", "metadata": {"name": "csi-b"},
               "spec": {"attacher": "d", "nodeName": "node-b", "source": {"persistentVolumeName": "pv-x"}}}),
    ];
    let server = FakeApiServer::start(Options { port: 0, seed })
        .await
        .expect("server starts");
    let kubelet = kubelet_client(&server).await;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(kubelet.clone(), "work");
    let volumes: Api<PersistentVolume> = Api::all(kubelet.clone());
    let attachments: Api<VolumeAttachment> = Api::all(kubelet.clone());
    claims.get("data").await.expect("the pod's claim");
    claims
        .get("db-0-scratch")
        .await
        .expect("the pod's ephemeral claim");
    volumes.get("pv-data").await.expect("the claim's volume");
    attachments
        .get("csi-a")
        .await
        .expect("an attachment to this node");
    let no_relationship = "no relationship found between node 'node-a' and this object";
    for err in [
        claims
            .get("unrelated")
            .await
            .expect_err("no pod of the node"),
        volumes.get("pv-x").await.expect_err("no claim of the node"),
        attachments.get("csi-b").await.expect_err("another node's"),
    ] {
        let status = api_status(err);
        assert_eq!(status.code, 403);
        assert!(
            status.message.ends_with(no_relationship),
            "{}",
            status.message
        );
    }
    let err = attachments
        .list(&ListParams::default())
        .await
        .expect_err("never a list");
    assert_eq!(
        api_status(err).message,
        "volumeattachments.storage.k8s.io is forbidden: User \"system:node:node-a\" cannot list \
         resource \"volumeattachments\" in API group \"storage.k8s.io\" at the cluster scope: \
         can only get individual resources of this type"
    );
    server
        .store()
        .remove("Pod", Some("work"), "db-0")
        .expect("pod removed");
    let status = api_status(claims.get("data").await.expect_err("the pod went"));
    assert_eq!(
        status.message,
        format!(
            "persistentvolumeclaims \"data\" is forbidden: User \"system:node:node-a\" cannot get \
             resource \"persistentvolumeclaims\" in API group \"\" in the namespace \"work\": {no_relationship}"
        )
    );
    assert!(api_status(volumes.get("pv-data").await.expect_err("the pod went")).is_forbidden());
    attachments
        .get("csi-a")
        .await
        .expect("still attached to the node");
    server
        .store()
        .remove("VolumeAttachment", None, "csi-a")
        .expect("detached");
    let status = api_status(attachments.get("csi-a").await.expect_err("detached"));
    assert!(
        status.message.ends_with(no_relationship),
        "{}",
        status.message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_whose_client_gave_up_lands_only_with_finish_abandoned() {
    let server = scenario().await;
    let client = client(&server, "admin").await;
    let nodes: Api<Node> = Api::all(client);
    let label = |n: &Node| {
        n.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("late"))
            .cloned()
    };
    let slow = Route::new("PATCH", "/nodes/node-a");
    server
        .faults()
        .add_latency(slow.clone(), Duration::from_millis(400));
    for (finish, value) in [(false, "dropped"), (true, "landed")] {
        server.faults().set_finish_abandoned(finish);
        // The client gives up after 100 ms, long before the server would answer.
        let patch = Patch::Merge(json!({"metadata": {"labels": {"late": value}}}));
        let params = PatchParams::default();
        let sent = nodes.patch("node-a", &params, &patch);
        assert!(
            tokio::time::timeout(Duration::from_millis(100), sent)
                .await
                .is_err(),
            "answered before the latency"
        );
        tokio::time::sleep(Duration::from_millis(800)).await;
        let node = nodes.get("node-a").await.expect("node");
        let want = finish.then(|| value.to_owned());
        assert_eq!(label(&node), want, "finish_abandoned = {finish}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_knobs_fail_close_delay_hang_and_take_the_listener_down() {
    let server = scenario().await;
    let client = client(&server, "admin").await;
    let nodes: Api<Node> = Api::all(client.clone());

    server
        .faults()
        .fail_next(Route::new("GET", "/nodes/node-a"), 2, 503);
    for _ in 0..2 {
        assert_eq!(
            api_status(nodes.get("node-a").await.expect_err("503")).code,
            503
        );
    }
    nodes.get("node-a").await.expect("third works");
    server
        .faults()
        .fail_next_with_retry_after(Route::any("/nodes/node-b"), 1, 429, 3);
    assert_eq!(
        api_status(nodes.get("node-b").await.expect_err("429")).code,
        429
    );
    let last = server.recorder().matching("GET", "/nodes/node-b");
    assert_eq!(
        last.last().and_then(|r| r.retry_after.clone()).as_deref(),
        Some("3")
    );

    server.faults().close_next(Route::any("/nodes/node-a"), 1);
    let err = nodes.get("node-a").await.expect_err("closed");
    assert!(!matches!(err, kube::Error::Api(_)), "{err:?}");
    nodes.get("node-a").await.expect("next works");

    server.faults().add_latency(
        Route::new("GET", "/nodes/node-b"),
        Duration::from_millis(300),
    );
    let t = std::time::Instant::now();
    nodes.get("node-b").await.expect("slow");
    assert!(t.elapsed() >= Duration::from_millis(300));
    server.faults().clear();

    let hang = Route::any("/nodes/node-a");
    server.faults().hang(hang.clone());
    let slow = tokio::time::timeout(Duration::from_millis(500), nodes.get("node-a")).await;
    assert!(slow.is_err(), "a hung request is not answered");
    let pending = tokio::spawn({
        let nodes = nodes.clone();
        async move { nodes.get("node-a").await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    server.faults().unhang(&hang);
    pending
        .await
        .expect("joined")
        .expect("answered once released");

    server.stop_listener();
    assert!(
        tokio::net::TcpStream::connect(("127.0.0.1", server.port()))
            .await
            .is_err(),
        "port closed"
    );
    assert!(nodes.get("node-a").await.is_err());
    server.start_listener().await.expect("listener back");
    nodes
        .get("node-a")
        .await
        .expect("works again on the same port");
    for _ in 0..20 {
        server.stop_listener();
        assert!(
            std::net::TcpStream::connect(("127.0.0.1", server.port())).is_err(),
            "port closed right after stop_listener"
        );
        server
            .start_listener()
            .await
            .expect("listener back at once");
    }
    // A new client: the old one's kept-alive connection died with the first stop, and a
    // request on it may fail before any answer (ECONNRESET), which says nothing of the server.
    let fresh: Api<Node> = Api::all(crate::client(&server, "admin").await);
    fresh.get("node-a").await.expect("still serving");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_versions_answer_410_when_expired() {
    let server = scenario().await;
    let pods: Api<Pod> = Api::namespaced(client(&server, "admin").await, "work");
    let rv = pods
        .list(&ListParams::default())
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("rv");
    // A write after the list, then a compaction: the list's version is now too old.
    server
        .store()
        .set_pod_ready("work", "bare-pod", true)
        .expect("modify");
    server.store().expire_resource_versions();
    let mut stream = pods
        .watch(&WatchParams::default(), &rv)
        .await
        .expect("watch")
        .boxed();
    match stream.next().await {
        Some(Ok(WatchEvent::Error(e))) => assert_eq!(e.code, 410),
        other => panic!("expected a 410 ERROR event, got {other:?}"),
    }
    let fresh = server.store().resource_version().to_string();
    let mut stream = pods
        .watch(&WatchParams::default().timeout(1), &fresh)
        .await
        .expect("watch")
        .boxed();
    server
        .store()
        .set_pod_ready("work", "guarded", false)
        .expect("modify");
    match stream.next().await {
        Some(Ok(WatchEvent::Modified(p))) => {
            assert_eq!(p.metadata.name.as_deref(), Some("guarded"))
        }
        other => panic!("expected MODIFIED, got {other:?}"),
    }
    let stored: Value = server
        .store()
        .get("Pod", Some("work"), "guarded")
        .expect("pod");
    assert_eq!(stored["status"]["conditions"][0]["status"], json!("False"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kube_runtime_watchers_sync_with_list_watch_and_streaming_lists() {
    use kube::runtime::watcher;
    let server = scenario().await;
    let pods: Api<Pod> = Api::namespaced(client(&server, "admin").await, "work");
    for config in [
        watcher::Config::default().fields("spec.nodeName=node-a"),
        watcher::Config::default()
            .fields("spec.nodeName=node-a")
            .streaming_lists(),
    ] {
        let mut stream = watcher(pods.clone(), config).boxed();
        let mut initial = Vec::new();
        loop {
            let event = tokio::time::timeout(Duration::from_secs(5), stream.try_next())
                .await
                .expect("in time")
                .expect("ok")
                .expect("open");
            match event {
                watcher::Event::Init => {}
                watcher::Event::InitApply(p) => initial.push(p),
                watcher::Event::InitDone => break,
                other => panic!("unexpected {other:?}"),
            }
        }
        assert_eq!(initial.len(), 6);
        server
            .store()
            .set_pod_ready("work", "skipped", false)
            .expect("modify");
        let event = tokio::time::timeout(Duration::from_secs(5), stream.try_next())
            .await
            .expect("in time")
            .expect("ok")
            .expect("open");
        assert!(
            matches!(&event, watcher::Event::Apply(p) if p.metadata.name.as_deref() == Some("skipped")),
            "{event:?}"
        );
    }
    assert_eq!(server.recorder().count("GET", "sendInitialEvents=true"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_continue_token_from_before_the_expiry_answers_410() {
    let server = scenario().await;
    let pods: Api<Pod> = Api::all(client(&server, "admin").await);
    let first = pods
        .list(&ListParams::default().limit(2))
        .await
        .expect("page");
    let token = first.metadata.continue_.expect("more pages");
    server
        .store()
        .set_pod_ready("work", "guarded", true)
        .expect("write");
    server.store().expire_resource_versions();
    let err = pods
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await
        .expect_err("expired");
    let status = api_status(err);
    assert_eq!((status.code, status.reason.as_str()), (410, "Expired"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_requests_check_everything_and_store_nothing() {
    let server = scenario().await;
    let client = client(&server, "admin").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "work");
    let nodes: Api<Node> = Api::all(client);
    let rv = server.store().resource_version();
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    let eviction = |name: &str| Eviction {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("work".into()),
            ..ObjectMeta::default()
        },
        ..Eviction::default()
    };
    let status: Status = pods
        .create_subresource("eviction", "rs1-plain", &dry, &eviction("rs1-plain"))
        .await
        .expect("dry eviction");
    assert_eq!(status.code, 201);
    let err = pods
        .create_subresource::<_, Status>("eviction", "guarded", &dry, &eviction("guarded"))
        .await
        .expect_err("the budget still answers");
    assert_eq!(api_status(err).code, 429);
    let node = nodes
        .patch(
            "node-a",
            &PatchParams::default().dry_run(),
            &Patch::Strategic(json!({"spec": {"unschedulable": true}})),
        )
        .await
        .expect("dry patch");
    assert_eq!(node.spec.and_then(|s| s.unschedulable), Some(true));
    pods.delete("bare-pod", &DeleteParams::default().dry_run())
        .await
        .expect("dry delete");
    assert_eq!(server.store().resource_version(), rv, "nothing written");
    let stored = server
        .store()
        .get("Pod", Some("work"), "rs1-plain")
        .expect("pod");
    assert!(stored.pointer("/metadata/deletionTimestamp").is_none());
    assert!(
        server
            .store()
            .get("Pod", Some("work"), "bare-pod")
            .is_some()
    );
    let node = server.store().get("Node", None, "node-a").expect("node");
    assert_eq!(node.pointer("/spec/unschedulable"), None);
}

fn lease(name: &str) -> Lease {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"holderIdentity": name, "leaseDurationSeconds": 40}
    }))
    .expect("lease")
}

/// NodeRestriction's `admitLease`: the Node authorizer lets a node create a Lease of any name
/// in kube-node-lease (a create names no object), admission reads the name from the object.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_may_create_only_its_own_node_lease() {
    let server = scenario().await;
    let node_c: Api<Lease> = Api::namespaced(
        client(&server, "system:node:node-c").await,
        "kube-node-lease",
    );
    let status = api_status(
        node_c
            .create(&PostParams::default(), &lease("node-z"))
            .await
            .expect_err("another node's Lease"),
    );
    assert_eq!(status.code, 403, "{status:?}");
    assert_eq!(status.reason, "Forbidden");
    assert_eq!(
        status.message,
        "leases.coordination.k8s.io \"node-z\" is forbidden: can only access node lease with \
         the same name as the requesting node"
    );
    assert!(
        server
            .store()
            .get("Lease", Some("kube-node-lease"), "node-z")
            .is_none()
    );
    node_c
        .create(&PostParams::default(), &lease("node-c"))
        .await
        .expect("its own Lease");
}

/// A ServiceAccount under the shipped rbac.yaml: what its ClusterRole and the slots Role allow
/// passes, anything else is 403 with the RBAC authorizer's message and recorded as a denial;
/// its access reviews answer from the same rules.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_account_is_authorized_by_the_loaded_rbac() {
    const SA: &str = "system:serviceaccount:kube-shutdown-drain:node-a";
    let server = scenario().await;
    let admin = client(&server, "admin").await;
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(admin);
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": "kube-shutdown-drain"}}))
                .expect("namespace"),
        )
        .await
        .expect("namespace created");
    let sa = client(&server, SA).await;
    let pods: Api<Pod> = Api::all(sa.clone());
    let daemonsets: Api<k8s_openapi::api::apps::v1::DaemonSet> =
        Api::namespaced(sa.clone(), "work");
    let slots: Api<Lease> = Api::namespaced(sa.clone(), "kube-shutdown-drain");

    // No RBAC loaded: nothing but reviews.
    let status = api_status(
        pods.list(&ListParams::default().fields("spec.nodeName=node-a"))
            .await
            .expect_err("no rules yet"),
    );
    assert_eq!(status.code, 403);
    assert_eq!(server.denials().len(), 1);
    server.clear_denials();

    let rbac = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../packaging/manifests/rbac.yaml");
    server.set_rbac(fake_apiserver::Policy::load(&rbac).expect("rbac.yaml loads"));
    pods.list(&ListParams::default().fields("spec.nodeName=node-a"))
        .await
        .expect("the ClusterRole lists pods");
    slots
        .create(&PostParams::default(), &lease("kube-shutdown-drain-slot-0"))
        .await
        .expect("the slots Role creates Leases in its namespace");
    assert!(server.denials().is_empty(), "{:?}", server.denials());

    let status = api_status(
        daemonsets
            .list(&ListParams::default())
            .await
            .expect_err("no rule"),
    );
    assert_eq!(status.code, 403);
    assert_eq!(
        status.message,
        format!(
            "daemonsets.apps is forbidden: User \"{SA}\" cannot list resource \"daemonsets\" in \
             API group \"apps\" in the namespace \"work\""
        )
    );
    let elsewhere: Api<Lease> = Api::namespaced(sa.clone(), "default");
    let status = api_status(
        elsewhere
            .create(&PostParams::default(), &lease("kube-shutdown-drain-slot-0"))
            .await
            .expect_err("the Role binds only in its namespace"),
    );
    assert_eq!(status.code, 403);
    assert!(
        status.message.ends_with("cannot create resource \"leases\" in API group \"coordination.k8s.io\" in the namespace \"default\""),
        "{}",
        status.message
    );
    let denials: Vec<String> = server.denials().iter().map(ToString::to_string).collect();
    assert_eq!(denials.len(), 2, "{denials:?}");
    assert!(denials.iter().all(|d| d.contains(SA)), "{denials:?}");

    let reviews: Api<SelfSubjectAccessReview> = Api::all(sa);
    let ask = |verb: &str, group: &str, resource: &str, sub: &str| SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.into()),
                group: Some(group.into()),
                resource: Some(resource.into()),
                subresource: (!sub.is_empty()).then(|| sub.into()),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let evict = reviews
        .create(
            &PostParams::default(),
            &ask("create", "", "pods", "eviction"),
        )
        .await
        .expect("review")
        .status
        .expect("a status");
    assert!(evict.allowed, "{evict:?}");
    assert_eq!(
        evict.reason.as_deref(),
        Some(
            "RBAC: allowed by ClusterRoleBinding \"kube-shutdown-drain\" of ClusterRole \
             \"kube-shutdown-drain\" to Group \"system:serviceaccounts:kube-shutdown-drain\""
        )
    );
    let get_daemonsets = reviews
        .create(
            &PostParams::default(),
            &ask("get", "apps", "daemonsets", ""),
        )
        .await
        .expect("review")
        .status
        .expect("a status");
    assert!(!get_daemonsets.allowed, "{get_daemonsets:?}");
    assert_eq!(server.denials().len(), 3);
    assert_eq!(server.denials()[2].kind, "review");
}

/// A watch that asked for bookmarks gets one 2 s before its deadline, at the version it has
/// caught up to (changes of other resources included), as kube-apiserver's watch cache sends
/// it; so a client that saw no event watches again from there, not from its first list.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_with_bookmarks_gets_one_before_its_deadline() {
    let server = scenario().await;
    let pods: Api<Pod> = Api::namespaced(client(&server, "admin").await, "work");
    let start = server.store().resource_version().to_string();
    let mut stream = pods
        .watch(
            &WatchParams::default().labels("app=none").timeout(3),
            &start,
        )
        .await
        .expect("watch")
        .boxed();
    // A change of another resource only: no event for this watch, but a newer version.
    server
        .store()
        .upsert(json!({"apiVersion": "v1", "kind": "Node",
                       "metadata": {"name": "bookmarked"}, "spec": {}}))
        .expect("a node");
    let now = server.store().resource_version().to_string();
    assert_ne!(now, start);
    match tokio::time::timeout(Duration::from_secs(5), stream.try_next()).await {
        Ok(Ok(Some(WatchEvent::Bookmark(b)))) => assert_eq!(b.metadata.resource_version, now),
        other => panic!("expected a BOOKMARK at {now}, got {other:?}"),
    }
    let end = tokio::time::timeout(Duration::from_secs(5), stream.try_next()).await;
    assert!(matches!(end, Ok(Ok(None))), "{end:?}");
}
