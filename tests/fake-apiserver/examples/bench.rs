//! Benchmark of the fake API server at the scale the issue asks for: 5,000 pods in the store and
//! a drain of 1,000 of them through a kube 5 client (list, concurrent evictions with PDBs, a
//! watch until every pod is gone). Prints figures; asserts nothing about time.
//!
//! Run: `cargo run --release -p fake-apiserver --example bench` (client and server share the
//! process and its 2 cores, so the figures are an upper bound on the server's cost).

use std::time::{Duration, Instant};

use fake_apiserver::{FakeApiServer, Options};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::Eviction;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use kube::core::Status;
use kube::{Client, Config};
use serde_json::{Value, json};

const PODS: usize = 5_000;
const ON_NODE: usize = 1_000;
const NAMESPACES: usize = 10;
const CONCURRENCY: usize = 32;
const NODE: &str = "bench-node";

fn pod(i: usize) -> Value {
    let ns = format!("ns-{}", i % NAMESPACES);
    let node = if i < ON_NODE {
        NODE.to_string()
    } else {
        format!("node-{}", i % 40)
    };
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": format!("app-{i:05}"), "namespace": ns,
            "labels": {"app": format!("app-{}", i % 50), "tier": "web", "pod-template-hash": "5d8f7c9b6"},
            "annotations": {
                "fake-apiserver.test/termination-seconds": format!("{:.1}", (i % 10) as f64 / 10.0),
                "kubectl.kubernetes.io/default-container": "main"
            },
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": format!("app-{}-5d8f7c9b6", i % 50),
                                  "uid": "00000000-0000-4000-8000-000000000001", "controller": true, "blockOwnerDeletion": true}]
        },
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 30,
            "containers": [{"name": "main", "image": "registry.example/app:1.2.3",
                            "ports": [{"containerPort": 8080, "protocol": "TCP"}],
                            "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                            "volumeMounts": [{"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount", "readOnly": true}]}],
            "volumes": [{"name": "kube-api-access", "projected": {"sources": [{"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}}]}}],
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]
        },
        "status": {
            "phase": "Running", "podIP": format!("10.0.{}.{}", i / 250, i % 250),
            "conditions": [{"type": "Ready", "status": "True"}, {"type": "ContainersReady", "status": "True"}]
        }
    })
}

fn pdb(ns: usize) -> Value {
    json!({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "half", "namespace": format!("ns-{ns}")},
        "spec": {"maxUnavailable": "50%", "selector": {"matchLabels": {"tier": "web"}}}
    })
}

fn rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<f64>().ok())
        })
        .map(|kb| kb / 1024.0)
        .unwrap_or(0.0)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let idx = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[idx.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> String {
    format!("{:.2} ms", d.as_secs_f64() * 1000.0)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let rss_start = rss_mib();
    let mut seed: Vec<Value> = (0..PODS).map(pod).collect();
    // PDBs in half of the namespaces: evictions there hit the budget arithmetic and some 429s.
    seed.extend((0..NAMESPACES / 2).map(pdb));
    let t = Instant::now();
    let server = FakeApiServer::start(Options { port: 0, seed }).await?;
    let seeded = t.elapsed();
    let rss_seeded = rss_mib();

    let mut config = Config::new(server.url().parse()?);
    config.default_retry = false;
    let client = Client::try_from(config)?;
    let all: Api<Pod> = Api::all(client.clone());

    let t = Instant::now();
    let everything = all.list(&ListParams::default()).await?;
    let list_all = t.elapsed();
    assert_eq!(everything.items.len(), PODS, "store holds every pod");

    let t = Instant::now();
    let mut on_node = Vec::new();
    let mut lp = ListParams::default()
        .fields(&format!("spec.nodeName={NODE}"))
        .limit(500);
    let list_rv;
    loop {
        let page = all.list(&lp).await?;
        on_node.extend(page.items);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => lp = lp.continue_token(&c),
            None => {
                list_rv = page.metadata.resource_version.unwrap_or_default();
                break;
            }
        }
    }
    let list_node = t.elapsed();
    assert_eq!(on_node.len(), ON_NODE);

    server.recorder().clear();
    let drain_start = Instant::now();
    // Watch for the pods going away, from the list's version.
    let watch = {
        let all = all.clone();
        let rv = list_rv.clone();
        tokio::spawn(async move {
            let wp = WatchParams::default()
                .fields(&format!("spec.nodeName={NODE}"))
                .timeout(290);
            let mut gone = 0usize;
            let mut stream = all.watch(&wp, &rv).await?.boxed();
            while let Some(event) = stream.try_next().await? {
                if let WatchEvent::Deleted(_) = event {
                    gone += 1;
                    if gone == ON_NODE {
                        break;
                    }
                }
            }
            anyhow::Ok(Instant::now())
        })
    };

    let targets: Vec<(String, String)> = on_node
        .iter()
        .map(|p| {
            (
                p.metadata.namespace.clone().unwrap_or_default(),
                p.metadata.name.clone().unwrap_or_default(),
            )
        })
        .collect();
    let results: Vec<(Vec<Duration>, usize)> = futures::stream::iter(targets)
        .map(|(ns, name)| {
            let client = client.clone();
            async move {
                let pods: Api<Pod> = Api::namespaced(client, &ns);
                let eviction = Eviction {
                    metadata: ObjectMeta {
                        name: Some(name.clone()),
                        namespace: Some(ns.clone()),
                        ..ObjectMeta::default()
                    },
                    ..Eviction::default()
                };
                let mut latencies = Vec::new();
                let mut blocked = 0usize;
                loop {
                    let t = Instant::now();
                    let r = pods
                        .create_subresource::<_, Status>(
                            "eviction",
                            &name,
                            &PostParams::default(),
                            &eviction,
                        )
                        .await;
                    latencies.push(t.elapsed());
                    match r {
                        Ok(_) => break,
                        Err(kube::Error::Api(s)) if s.code == 429 => {
                            blocked += 1;
                            // A short fixed retry (kubectl waits 5 s): stresses the server more.
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                        Err(kube::Error::Api(s)) if s.code == 404 => break,
                        Err(e) => panic!("eviction of {ns}/{name} failed: {e}"),
                    }
                }
                (latencies, blocked)
            }
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    let evictions_done = drain_start.elapsed();
    let all_gone_at = watch.await??;
    let drain_total = all_gone_at - drain_start;
    let rss_drained = rss_mib();

    let mut latencies: Vec<Duration> = results
        .iter()
        .flat_map(|(l, _)| l.iter().copied())
        .collect();
    latencies.sort();
    let blocked: usize = results.iter().map(|(_, b)| b).sum();
    let requests = server.recorder().requests();
    let eviction_posts = requests
        .iter()
        .filter(|r| r.path.ends_with("/eviction"))
        .count();

    // Raw request rate: single-pod GETs from 16 concurrent tasks for 2 s.
    let remaining: Vec<String> = everything
        .items
        .iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) != Some(NODE))
        .take(200)
        .map(|p| {
            format!(
                "{}/{}",
                p.metadata.namespace.clone().unwrap_or_default(),
                p.metadata.name.clone().unwrap_or_default()
            )
        })
        .collect();
    let until = Instant::now() + Duration::from_secs(2);
    let counts: Vec<usize> = futures::future::join_all((0..16).map(|w| {
        let client = client.clone();
        let remaining = remaining.clone();
        async move {
            let mut n = 0usize;
            while Instant::now() < until {
                let (ns, name) = remaining[(w * 13 + n) % remaining.len()]
                    .split_once('/')
                    .unwrap_or(("", ""));
                let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
                if pods.get(name).await.is_ok() {
                    n += 1;
                }
            }
            n
        }
    }))
    .await;
    let gets: usize = counts.iter().sum();

    println!(
        "fake-apiserver bench ({PODS} pods in store, drain of {ON_NODE}, {CONCURRENCY} concurrent evictions, PDBs maxUnavailable 50% in {} namespaces)",
        NAMESPACES / 2
    );
    println!(
        "  seed {PODS} pods + {} PDBs           {}",
        NAMESPACES / 2,
        ms(seeded)
    );
    println!(
        "  list all {PODS} pods (one request)   {}  ({:.1} MiB of JSON)",
        ms(list_all),
        serde_json::to_vec(&everything.items)?.len() as f64 / 1048576.0
    );
    println!(
        "  list {ON_NODE} pods on the node, 2 pages {}",
        ms(list_node)
    );
    println!("  eviction POSTs                        {eviction_posts} ({blocked} answered 429)");
    println!(
        "  eviction latency p50 / p99 / max      {} / {} / {}",
        ms(percentile(&latencies, 0.5)),
        ms(percentile(&latencies, 0.99)),
        ms(latencies.last().copied().unwrap_or_default())
    );
    println!(
        "  all evictions accepted after          {}",
        ms(evictions_done)
    );
    println!(
        "  all {ON_NODE} pods gone (watch) after   {}  (simulated terminations 0-0.9 s)",
        ms(drain_total)
    );
    println!("  API requests during the drain         {}", requests.len());
    println!(
        "  single-pod GETs, 16 concurrent, 2 s   {gets} ({:.0}/s)",
        gets as f64 / 2.0
    );
    println!(
        "  RSS start / seeded / after drain      {rss_start:.1} / {rss_seeded:.1} / {rss_drained:.1} MiB (client and server in one process)"
    );
    Ok(())
}
