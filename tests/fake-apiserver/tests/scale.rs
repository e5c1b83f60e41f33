//! The store at the scale: 5,000 pods listed in pages, 1,000 selected by node, 200
//! evicted concurrently with a PDB in the way. Counts only; the timings are the bench's job
//! (`cargo run --release -p fake-apiserver --example bench`).

use fake_apiserver::{FakeApiServer, Options};
use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::{Eviction, PodDisruptionBudget};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ListParams, PostParams};
use kube::core::Status;
use kube::{Client, Config};
use serde_json::{Value, json};

fn pod(i: usize) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("p-{i:05}"), "namespace": format!("ns-{}", i % 5),
                     "labels": {"app": format!("a{}", i % 7)}},
        "spec": {"nodeName": if i.is_multiple_of(5) { "big".to_string() } else { format!("n{}", i % 13) }},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_thousand_pods_page_select_and_evict() {
    let mut seed: Vec<Value> = (0..5_000).map(pod).collect();
    seed.push(
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "most", "namespace": "ns-0"},
        // Controller-less pods: an integer minAvailable counts them (under maxUnavailable the
        // disruption controller would expect none and allow nothing, as a real one does).
        "spec": {"minAvailable": 850, "selector": {}}}),
    );
    let server = FakeApiServer::start(Options { port: 0, seed })
        .await
        .expect("server starts");
    let mut config = Config::new(server.url().parse().expect("url"));
    config.default_retry = false;
    let client = Client::try_from(config).expect("client");
    let pods: Api<Pod> = Api::all(client.clone());

    let mut lp = ListParams::default().limit(500);
    let (mut seen, mut pages) = (0, 0);
    loop {
        let page = pods.list(&lp).await.expect("page");
        pages += 1;
        seen += page.items.len();
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => lp = lp.continue_token(&c),
            None => break,
        }
    }
    assert_eq!((seen, pages), (5_000, 10));

    let on_big = pods
        .list(&ListParams::default().fields("spec.nodeName=big"))
        .await
        .expect("list");
    assert_eq!(on_big.items.len(), 1_000);

    // Namespace ns-0 holds all 1,000 pods of node big; the PDB lets 150 go at a time.
    let ns0: Api<Pod> = Api::namespaced(client.clone(), "ns-0");
    let outcomes: Vec<u16> = futures::stream::iter(on_big.items.iter().take(200))
        .map(|p| {
            let ns0 = ns0.clone();
            let name = p.metadata.name.clone().unwrap_or_default();
            async move {
                let eviction = Eviction {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        namespace: Some("ns-0".into()),
                        ..ObjectMeta::default()
                    },
                    ..Eviction::default()
                };
                match ns0
                    .create_subresource::<_, Status>(
                        "eviction",
                        &name,
                        &PostParams::default(),
                        &eviction,
                    )
                    .await
                {
                    Ok(s) => s.code,
                    Err(kube::Error::Api(s)) => s.code,
                    Err(e) => panic!("eviction of {name}: {e}"),
                }
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    let accepted = outcomes.iter().filter(|c| **c == 201).count();
    let blocked = outcomes.iter().filter(|c| **c == 429).count();
    // 1,000 healthy, 850 needed: exactly 150 evictions pass, the other 50 get 429.
    assert_eq!(accepted + blocked, 200, "{outcomes:?}");
    assert_eq!(accepted, 150, "{accepted} accepted");
    // The simulated kubelet removes each evicted pod right after; the PDB status follows.
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client, "ns-0");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let status = pdbs.get("most").await.expect("pdb").status.expect("status");
        if status.expected_pods == 1_000 - accepted as i32 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "PDB status stuck at {status:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}
