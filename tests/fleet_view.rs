//! `fleet` end to end (issue 43): the binary reads the Nodes, the Leases of the lease namespace
//! and the Events about Nodes from the fake API server and prints the view (text, wide, JSON);
//! `--watch` draws it again after a change (the latency printed) and ends on Ctrl-C; the kubectl
//! plugin, a symbolic link named `kubectl-shutdown_drain`, is found by real kubectl's `plugin
//! list` and runs as `kubectl shutdown-drain fleet`. The states themselves are the pure view's
//! (`fleet::view`'s unit tests); here each of the three reads shows in the output.

mod engine_support;
mod fleet_admin_support;

use std::time::{Duration, Instant};

use engine_support::*;
use fleet_admin_support::{ADMIN, LEASE_NS, cluster, fleet, fleet_command};
use serde_json::{Value, json};
use tokio::io::AsyncReadExt;

const SLOT: &str = "kube-shutdown-drain-slot-0";
const BOOT: &str = "0b0e1d00-0000-4000-8000-000000000002";

/// node-a held, node-b holding the slot, node-c without any trace of the daemon, node-d known
/// from its Event alone; the fleet paused.
fn seed() -> Vec<Value> {
    let now = jiff::Timestamp::now().to_string();
    vec![
        node("node-c"),
        node("node-d"),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": LEASE_NS}}),
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": SLOT, "namespace": LEASE_NS,
                         "labels": {"kube-shutdown-drain/slot-group": "all"}},
            "spec": {"holderIdentity": format!("node-b/{BOOT}"), "acquireTime": now,
                     "renewTime": now, "leaseDurationSeconds": 3600}}),
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "kube-shutdown-drain-pause", "namespace": LEASE_NS,
                         "annotations": {"kube-shutdown-drain/reason": "change freeze"}},
            "spec": {"holderIdentity": "ops"}}),
        json!({"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "node-d.drain", "namespace": "default"},
            "involvedObject": {"kind": "Node", "name": "node-d", "apiVersion": "v1"},
            "reason": "DrainFinished", "message": "node node-d drained: 2 evicted in 1.2 s",
            "type": "Normal", "source": {"component": "kube-shutdown-drain"},
            "reportingComponent": "kube-shutdown-drain",
            "firstTimestamp": now, "lastTimestamp": now, "count": 1}),
        // About a pod, not a Node: the view's read leaves it out (its field selector).
        json!({"apiVersion": "v1", "kind": "Event",
            "metadata": {"name": "node-e.pod", "namespace": NS},
            "involvedObject": {"kind": "Pod", "name": "node-e", "namespace": NS},
            "reason": "DrainFinished", "message": "x", "type": "Normal",
            "source": {"component": "kube-shutdown-drain"},
            "reportingComponent": "kube-shutdown-drain",
            "firstTimestamp": now, "lastTimestamp": now, "count": 1}),
    ]
}

async fn seeded() -> Cluster {
    let c = cluster(seed()).await;
    c.server
        .store()
        .modify("Node", None, NODE, |n| {
            n["metadata"]["annotations"] = json!({"kube-shutdown-drain/hold": "disk swap"})
        })
        .unwrap();
    c
}

/// The row of `node` in a JSON view.
fn row<'a>(view: &'a Value, node: &str) -> Option<&'a Value> {
    view["nodes"]
        .as_array()?
        .iter()
        .find(|r| r["node"] == json!(node))
}

#[tokio::test]
async fn json_shows_what_the_nodes_the_leases_and_the_node_events_say() {
    let c = seeded().await;
    let r = fleet(&c, ADMIN, &["-o", "json"]).await;
    assert_eq!(r.code, 0, "{}", r.stderr);
    let view: Value = serde_json::from_str(&r.stdout).expect("one JSON document");
    assert_eq!(view["version"], json!(1), "{view:#}");
    assert_eq!(view["namespace"], json!(LEASE_NS));
    // The Node: its hold.
    let a = row(&view, NODE).expect("node-a has a row");
    assert_eq!(
        (&a["state"], &a["hold"]["value"]),
        (&json!("held"), &json!("disk swap")),
        "{a:#}"
    );
    // The slot Lease: its holder.
    let b = row(&view, OTHER_NODE).expect("node-b has a row");
    assert_eq!(b["slot"], json!(SLOT), "{b:#}");
    let slot = &view["slots"][0];
    assert_eq!(
        (&slot["slot"], &slot["node"]),
        (&json!(SLOT), &json!(OTHER_NODE))
    );
    // The pause Lease and its reason.
    assert_eq!(view["pause"]["reason"], json!("change freeze"), "{view:#}");
    // The Event about node-d, its only trace.
    let d = row(&view, "node-d").expect("node-d has a row");
    assert_eq!(d["traces"], json!(["events"]), "{d:#}");
    assert_eq!(d["lastDrain"]["outcome"], json!("complete"), "{d:#}");
    // No trace: no row, unless --all; the Event about a pod makes none.
    assert!(row(&view, "node-c").is_none() && row(&view, "node-e").is_none());
    let all = fleet(&c, ADMIN, &["-o", "json", "--all"]).await;
    let all: Value = serde_json::from_str(&all.stdout).expect("one JSON document");
    assert_eq!(row(&all, "node-c").unwrap()["state"], json!("untraced"));
    // What was asked: three lists, nothing written.
    let asked: Vec<String> = c
        .server
        .recorder()
        .requests()
        .iter()
        .filter(|r| {
            r.user_agent
                .as_deref()
                .is_some_and(|u| u.starts_with("kubectl-shutdown-drain/"))
        })
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert!(asked.iter().all(|a| a.starts_with("GET ")), "{asked:?}");
}

#[tokio::test]
async fn text_and_wide_name_every_traced_node_with_its_state_and_the_pause() {
    let c = seeded().await;
    let text = fleet(&c, ADMIN, &[]).await;
    assert_eq!(text.code, 0, "{}", text.stderr);
    let line = |out: &str, node: &str| {
        out.lines()
            .find(|l| l.split_whitespace().next() == Some(node))
            .unwrap_or_else(|| panic!("no line for {node}:\n{out}"))
            .to_string()
    };
    assert!(line(&text.stdout, NODE).contains("held"), "{}", text.stdout);
    line(&text.stdout, OTHER_NODE);
    line(&text.stdout, "node-d");
    assert!(!text.stdout.contains("node-c"), "{}", text.stdout);
    assert!(text.stdout.contains("change freeze"), "{}", text.stdout);
    let wide = fleet(&c, ADMIN, &["-o", "wide"]).await;
    assert_eq!(wide.code, 0, "{}", wide.stderr);
    assert!(line(&wide.stdout, NODE).len() > line(&text.stdout, NODE).len());
    println!("{}", text.stdout);
}

/// Reads `child`'s stdout until `done` holds for what was read, or `limit` passes.
async fn read_until(
    out: &mut tokio::process::ChildStdout,
    seen: &mut String,
    limit: Duration,
    done: impl Fn(&str) -> bool,
) -> bool {
    let deadline = tokio::time::Instant::now() + limit;
    let mut buf = [0u8; 4096];
    while !done(seen) {
        match tokio::time::timeout_at(deadline, out.read(&mut buf)).await {
            Ok(Ok(n)) if n > 0 => seen.push_str(&String::from_utf8_lossy(&buf[..n])),
            _ => return false,
        }
    }
    true
}

/// The last complete drawing of a `--watch` output that is not a terminal: the text after the
/// last `--- TIME` line, ending with the progress line.
fn last_drawing(out: &str) -> &str {
    out.rsplit("--- ").next().unwrap_or_default()
}

#[tokio::test]
async fn watch_draws_again_after_a_change_and_ends_on_ctrl_c() {
    let c = seeded().await;
    let mut child = fleet_command(&c, ADMIN, &["--watch"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("fleet --watch runs");
    let mut out = child.stdout.take().unwrap();
    let mut seen = String::new();
    let node_b_held = |s: &str| {
        last_drawing(s)
            .lines()
            .any(|l| l.split_whitespace().next() == Some(OTHER_NODE) && l.contains("held"))
    };
    // The first drawing, then the watchers' first lists.
    assert!(
        read_until(&mut out, &mut seen, Duration::from_secs(20), |s| {
            s.matches("--- ").count() >= 2
        })
        .await,
        "{seen}"
    );
    assert!(!node_b_held(&seen), "{seen}");
    let changed = Instant::now();
    c.server
        .store()
        .modify("Node", None, OTHER_NODE, |n| {
            n["metadata"]["annotations"] = json!({"kube-shutdown-drain/hold": "bios update"})
        })
        .unwrap();
    assert!(
        read_until(&mut out, &mut seen, Duration::from_secs(20), node_b_held).await,
        "no drawing showed node-b held:\n{seen}"
    );
    println!(
        "fleet --watch drew the change {} ms after it",
        changed.elapsed().as_millis()
    );
    let pid = nix::unistd::Pid::from_raw(child.id().unwrap() as i32);
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGINT).unwrap();
    let status = tokio::time::timeout(Duration::from_secs(10), child.wait())
        .await
        .expect("fleet --watch ends on SIGINT")
        .unwrap();
    assert_eq!(status.code(), Some(0));
}

/// Real kubectl finds the plugin where the packages put it (a symbolic link named
/// `kubectl-shutdown_drain` on the PATH) and runs it as `kubectl shutdown-drain`.
#[tokio::test]
async fn kubectl_finds_the_plugin_and_runs_the_fleet_view_with_it() {
    let Some(kubectl) = kubectl_132() else {
        if skip_or_fail("kubectl.1.32 not found next to the kubectl dispatcher") {
            return;
        }
        unreachable!()
    };
    let c = seeded().await;
    let bin = c.dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::os::unix::fs::symlink(
        env!("CARGO_BIN_EXE_kube-shutdown-drain"),
        bin.join("kubectl-shutdown_drain"),
    )
    .unwrap();
    let path = format!("{}:/usr/bin:/bin", bin.display());
    let kubeconfig = c.kubeconfig(ADMIN);
    // On tokio's process API: the fake API server answers on this test's runtime.
    let kubectl_run = async |args: &[&str]| {
        tokio::process::Command::new(&kubectl)
            .args(args)
            .env("PATH", &path)
            .env("HOME", c.dir.path())
            .env_remove("KUBECONFIG")
            .env("KUBE_SHUTDOWN_DRAIN_LOG", "warn")
            .kill_on_drop(true)
            .output()
            .await
            .expect("kubectl runs")
    };
    let listed = kubectl_run(&["plugin", "list"]).await;
    let listed_out = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed_out
            .lines()
            .any(|l| l.trim() == bin.join("kubectl-shutdown_drain").display().to_string()),
        "{listed_out}{}",
        String::from_utf8_lossy(&listed.stderr)
    );
    let ran = kubectl_run(&[
        "shutdown-drain",
        "fleet",
        "-o",
        "json",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
    ])
    .await;
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    let view: Value = serde_json::from_slice(&ran.stdout).expect("the view as JSON");
    assert_eq!(row(&view, NODE).unwrap()["state"], json!("held"));
    // The fake's SelfSubjectReview, which `fleet hold` and `pause` ask who the admin is, answers
    // kubectl's `auth whoami` as a real server does.
    let whoami = kubectl_run(&[
        "auth",
        "whoami",
        "-o",
        "jsonpath={.status.userInfo.username}",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
    ])
    .await;
    assert_eq!(
        String::from_utf8_lossy(&whoami.stdout),
        ADMIN,
        "{}",
        String::from_utf8_lossy(&whoami.stderr)
    );
    // Its usage names the command the user typed.
    let usage = kubectl_run(&["shutdown-drain", "fleet", "hold"]).await;
    assert_eq!(usage.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&usage.stderr).contains("Usage: kubectl shutdown-drain fleet hold"),
        "{}",
        String::from_utf8_lossy(&usage.stderr)
    );
}
