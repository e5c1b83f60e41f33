//! Reboots three nodes ask for at once, on one drain slot (issue 31): three daemons
//! (`kube-shutdown-drain run`, each with its own fake logind on a private bus) against one fake
//! API server, `[fleet] slots = 1`, a sentinel file each. The three files appear together; the
//! nodes reboot one at a time: at no moment are two nodes cordoned, each node's pod is evicted
//! before its logind is asked to reboot, and the next node drains only after the previous one
//! booted again, was restored, and kept its slot for `[fleet] release_delay` (carried into its
//! new boot meanwhile, so no other node reads it as stale).

mod daemon_support;
mod fleet_support;
mod logind;

use daemon_support::SLOT;
use fleet_support::{cordoned, machine, node};

use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

const NODES: [&str; 3] = ["fleet-a", "fleet-b", "fleet-c"];
/// `[fleet] release_delay` of every node.
const RELEASE_DELAY: Duration = Duration::from_secs(3);

/// A Ready pod of a ReplicaSet on `node`, named after it.
fn pod(node: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("app-{node}"), "namespace": "default",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "app",
                                 "uid": "rs-app", "controller": true}]},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}})
}

/// A node seen cordoned (true) or uncordoned, and when.
type Change = (tokio::time::Instant, &'static str, bool);

#[tokio::test]
async fn three_sentinels_at_once_on_one_slot_reboot_the_nodes_one_after_another() {
    let mut seed = vec![json!({"apiVersion": "v1", "kind": "Namespace",
                               "metadata": {"name": "default"}})];
    for name in NODES {
        seed.extend([node(name), pod(name)]);
    }
    let api = fleet_support::cluster(seed).await;
    let mut machines = Vec::new();
    for name in NODES {
        match machine(
            &api,
            name,
            &format!("release_delay = \"{}s\"", RELEASE_DELAY.as_secs()),
        )
        .await
        {
            Some(m) => machines.push(m),
            // Skips with a printed reason, or fails under CI=true.
            None => {
                logind::require(false, "dbus-daemon or python3-dbusmock");
                return;
            }
        }
    }
    for m in &mut machines {
        m.spawn();
    }
    for m in &machines {
        m.wait_log(
            &format!("node {} needs no reboot", m.name),
            Duration::from_secs(20),
        )
        .await;
    }
    // The most nodes cordoned at once, and when each node was cordoned and uncordoned, sampled
    // every 5 ms from now on.
    let most = Arc::new(AtomicUsize::new(0));
    let changes: Arc<Mutex<Vec<Change>>> = Arc::default();
    let api = Arc::new(api);
    let sampler = tokio::spawn({
        let (most, changes, api) = (most.clone(), changes.clone(), api.clone());
        async move {
            let mut was = [false; NODES.len()];
            loop {
                let now: Vec<bool> = NODES.iter().map(|n| cordoned(&api, n)).collect();
                most.fetch_max(now.iter().filter(|c| **c).count(), Ordering::SeqCst);
                for (i, &c) in now.iter().enumerate() {
                    if c != was[i] {
                        let at = tokio::time::Instant::now();
                        changes.lock().unwrap().push((at, NODES[i], c));
                        was[i] = c;
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    });
    for m in &machines {
        std::fs::write(m.sentinel(), "").unwrap();
    }
    let mut order = Vec::new();
    for round in 1..=NODES.len() {
        // The next node to reboot: the one whose logind was asked.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        let i = loop {
            let asked = machines
                .iter()
                .position(|m| !order.contains(&m.name) && !m.rig.outcomes().is_empty());
            if let Some(i) = asked {
                break i;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "round {round}: no node rebooted within 60 s; logs:\n{}",
                machines
                    .iter()
                    .map(|m| format!("--- {}\n{}", m.name, m.log()))
                    .collect::<String>()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let m = &mut machines[i];
        let outcome = m
            .rig
            .wait_outcome(0, Duration::from_secs(10))
            .await
            .unwrap();
        assert_eq!(outcome.what, "released", "{}: {}", m.name, outcome.line);
        assert!(
            api.store()
                .get("Pod", Some("default"), &format!("app-{}", m.name))
                .is_none(),
            "{}'s pod was evicted before its reboot; log:\n{}",
            m.name,
            m.log()
        );
        m.wait_log(
            &format!("node {} drained for its reboot", m.name),
            Duration::from_secs(1),
        )
        .await;
        order.push(m.name);
        // The machine goes down and boots again: /run is new, the kubelet heartbeats again.
        m.kill();
        api.kubelets().stop(m.name).unwrap();
        std::fs::remove_file(m.sentinel()).unwrap();
        m.rig.simulate_boot().await;
        let boot = m.new_boot(round);
        api.kubelets().start(m.name).unwrap();
        m.spawn();
        // Restored, the node keeps its slot for the release delay, held in its new boot.
        m.wait_log(
            &format!("node {} keeps drain slot {SLOT}", m.name),
            Duration::from_secs(20),
        )
        .await;
        let holder = api
            .store()
            .get("Lease", Some("kube-shutdown-drain"), SLOT)
            .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_string));
        assert_eq!(
            holder.as_deref(),
            Some(format!("{}/{boot}", m.name).as_str()),
            "the slot is carried into {}'s new boot before its restore",
            m.name
        );
        // The new boot's triggers: no need, once the file's absence has stood.
        m.wait_log(
            &format!("node {} needs no reboot", m.name),
            Duration::from_secs(20),
        )
        .await;
    }
    // The last one's restore.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while NODES.iter().any(|n| cordoned(&api, n)) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "a node stayed cordoned"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    sampler.abort();
    // Each next node was cordoned only after the previous one's restore and release delay.
    let changes = changes.lock().unwrap().clone();
    let at = |node: &str, cordon: bool| {
        changes
            .iter()
            .find(|(_, n, c)| *n == node && *c == cordon)
            .map(|(t, _, _)| *t)
            .unwrap_or_else(|| panic!("{node} never seen cordon={cordon}: {changes:?}"))
    };
    for pair in order.windows(2) {
        let gap = at(pair[1], true) - at(pair[0], false);
        // Less the sampling's 5 ms, and a margin for a loaded machine's late sample.
        assert!(
            gap >= RELEASE_DELAY - Duration::from_millis(100),
            "{} was cordoned {gap:?} after {}'s restore, within the release delay \
             ({RELEASE_DELAY:?}); changes: {changes:?}",
            pair[1],
            pair[0]
        );
    }
    let mut rebooted = order.clone();
    rebooted.sort();
    assert_eq!(rebooted, NODES, "each node rebooted once: {order:?}");
    assert_eq!(
        most.load(Ordering::SeqCst),
        1,
        "one drain slot: never two nodes cordoned at once (order {order:?})"
    );
    for m in &machines {
        assert_eq!(
            m.rig.outcomes().len(),
            1,
            "{}: one reboot, none after its boot",
            m.name
        );
    }
    println!("reboot order: {order:?}");
}
