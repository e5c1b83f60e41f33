//! The binary against the fake API server: plan/drain/restore/status/check output and the
//! documented exit codes (0 done, 1 drain incomplete, 2 usage or config error, 3 cluster
//! unreachable or node missing).

mod engine_support;

use engine_support::*;
use serde_json::{Value, json};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_json_is_exactly_the_documented_shape() {
    let c = Cluster::start(vec![
        pod_with(NS, "web", NODE, json!({"spec": {"priority": 10}})),
        daemonset_pod(NS, "ds", NODE),
        pod_with(
            NS,
            "batch",
            NODE,
            json!({"metadata": {"labels": {"cluster.x-k8s.io/drain": "wait-completed"}}}),
        ),
    ])
    .await;
    let config = c.config_file("admin", "");
    let r = cli(&config, &["plan", "--output", "json"]).await;
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(
        v,
        json!({"node": NODE, "pods": [
            {"namespace": NS, "name": "web", "action": "evict", "reason": "priority", "order": 10},
            {"namespace": NS, "name": "batch", "action": "wait", "reason": "capi-drain-label", "order": null},
            {"namespace": NS, "name": "ds", "action": "skip", "reason": "daemon-set", "order": null},
        ]})
    );
    // Changes nothing.
    assert!(
        c.server
            .recorder()
            .requests()
            .iter()
            .all(|r| r.method == "GET")
    );
    // The config path can also come from KUBE_SHUTDOWN_DRAIN_CONFIG.
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_kube-shutdown-drain"))
        .args(["plan", "--output", "json"])
        .env("KUBE_SHUTDOWN_DRAIN_CONFIG", &config)
        .env("KUBE_SHUTDOWN_DRAIN_LOG", "warn")
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(serde_json::from_slice::<Value>(&out.stdout).unwrap(), v);
    let text = cli(&config, &["plan"]).await;
    assert_eq!(text.code, 0);
    assert!(
        text.stdout.contains("1 to evict, 1 to wait for, 1 skipped"),
        "{}",
        text.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_restore_status_by_hand() {
    let c = Cluster::start(vec![pod(NS, "web", NODE), daemonset_pod(NS, "ds", NODE)]).await;
    let config = c.config_file("admin", "");

    let dry = cli(&config, &["drain", "--dry-run", "--output", "json"]).await;
    assert_eq!(dry.code, 0, "{}", dry.stderr);
    assert!(
        c.pod(NS, "web").is_some() && !unschedulable(&c.node(NODE)),
        "dry run changed nothing"
    );

    let r = cli(&config, &["drain", "--output", "json"]).await;
    assert_eq!(r.code, 0, "{}", r.stderr);
    let report: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(report["complete"], true);
    let web = report["pods"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "web")
        .unwrap();
    assert_eq!(
        (
            web["action"].as_str(),
            web["reason"].as_str(),
            web["order"].as_i64(),
            web["outcome"].as_str()
        ),
        (Some("evict"), Some("priority"), Some(0), Some("evicted"))
    );
    assert!(unschedulable(&c.node(NODE)));

    let s = cli(&config, &["status", "--output", "json"]).await;
    assert_eq!(s.code, 0, "{}", s.stderr);
    let status: Value = serde_json::from_str(&s.stdout).unwrap();
    assert_eq!(status["cordoned"], true);
    assert_eq!(status["taint_present"], true);
    assert_eq!(status["marker"]["why"], "drain by hand");
    assert_eq!(status["last_report"]["complete"], true);
    let text = cli(&config, &["status"]).await;
    assert!(
        text.stdout.contains("cordoned:      yes"),
        "{}",
        text.stdout
    );

    let r = cli(&config, &["restore"]).await;
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("uncordoned, taint removed"),
        "{}",
        r.stdout
    );
    assert!(!unschedulable(&c.node(NODE)));
    let r = cli(&config, &["restore"]).await;
    assert_eq!(r.code, 0);
    assert!(r.stdout.contains("nothing to restore"), "{}", r.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exit_codes() {
    let c = Cluster::start(vec![
        pod(NS, "guarded", NODE),
        pdb(NS, "guarded-pdb", "guarded", 1),
    ])
    .await;

    // 1: a drain that cannot finish.
    let config = c.config_file("admin", "[drain]\ntimeout = \"2s\"\n");
    let r = cli(&config, &["drain"]).await;
    assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains("blocked by budget work/guarded-pdb"),
        "{}",
        r.stdout
    );

    // 2: configuration errors, naming file, line, column and key.
    let bad = c.dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "node_name = \"node-a\"\n[drain]\non_deadline = \"shrug\"\n",
    )
    .unwrap();
    let r = cli(&bad, &["plan"]).await;
    assert_eq!(r.code, 2);
    assert!(
        r.stderr.contains(&format!("{}:3:15", bad.display())) && r.stderr.contains("report"),
        "{}",
        r.stderr
    );
    let r = cli(&c.dir.path().join("missing.toml"), &["plan"]).await;
    assert_eq!(r.code, 2, "{}", r.stderr);
    let r = cli(&config, &["plan", "--output", "yaml"]).await;
    assert_eq!(r.code, 2, "usage error");
    let r = cli(&config, &["--node", "Bad_Name", "plan"]).await;
    assert_eq!(r.code, 2, "{}", r.stderr);
    let kc = c.dir.path().join("broken-kubeconfig");
    std::fs::write(&kc, "clusters: {{{").unwrap();
    let broken = c.dir.path().join("broken.toml");
    std::fs::write(
        &broken,
        format!(
            "node_name = \"node-a\"\nkubeconfig = \"{}\"\n",
            kc.display()
        ),
    )
    .unwrap();
    let r = cli(&broken, &["plan"]).await;
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("broken-kubeconfig"), "{}", r.stderr);

    // 3: node missing, server unreachable.
    let r = cli(&config, &["--node", "no-such-node", "plan"]).await;
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(
        r.stderr.contains("node no-such-node does not exist"),
        "{}",
        r.stderr
    );
    c.server.stop_listener();
    let r = cli(&config, &["status"]).await;
    assert_eq!(r.code, 3, "{}", r.stderr);
    c.server.start_listener().await.unwrap();

    // 0 and the documentation of all of it.
    let r = cli(&config, &["--help"]).await;
    assert_eq!(r.code, 0);
    for line in [
        "0  done",
        "1  drain incomplete",
        "2  usage or configuration error",
        "3  cluster unreachable or node missing",
    ] {
        assert!(r.stdout.contains(line), "--help lacks {line:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_reviews_every_permission() {
    let c = Cluster::start(vec![]).await;
    let config = c.config_file("admin", "");
    let r = cli(&config, &["check"]).await;
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    for needle in [
        "config",
        "valid",
        "node node-a: exists",
        "create pods/eviction",
        "patch  nodes",
    ] {
        assert!(
            r.stdout.contains(needle),
            "{needle:?} missing:\n{}",
            r.stdout
        );
    }
    assert!(!r.stdout.contains("DENIED"), "{}", r.stdout);
    assert!(r.stdout.contains("logind: not reachable"), "{}", r.stdout);
    let reviews = c
        .server
        .recorder()
        .matching("POST", "selfsubjectaccessreviews");
    assert!(reviews.len() >= 6);

    // Kubelet credentials: the budget watch is denied but optional, so check passes; it never
    // claims the taint works.
    let config = c.config_file("system:node:node-a", "");
    let r = cli(&config, &["check"]).await;
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("not checkable"), "{}", r.stdout);
    let pdb_line = r
        .stdout
        .lines()
        .find(|l| l.contains("watch  poddisruptionbudgets"))
        .unwrap();
    assert!(pdb_line.contains("denied (optional)"), "{}", r.stdout);
    assert!(
        r.stdout
            .lines()
            .any(|l| l.contains("pods/eviction") && l.contains("allowed")),
        "{}",
        r.stdout
    );
}

/// Runs the binary with stdout a pipe whose reading end is already closed, as `| head -c N`
/// leaves it once `head` has read enough: every write gets EPIPE.
fn run_into_closed_pipe(config: &std::path::Path, args: &[&str]) -> (i32, String) {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kube-shutdown-drain"))
        .arg("--config")
        .arg(config)
        .args(args)
        .env_remove("JOURNAL_STREAM")
        .env(
            "DBUS_SYSTEM_BUS_ADDRESS",
            "unix:path=/nonexistent/kube-shutdown-drain-test-bus",
        )
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_stdout_ends_the_command_quietly_with_its_own_exit_code() {
    let c = Cluster::start(vec![pod(NS, "web", NODE), daemonset_pod(NS, "ds", NODE)]).await;
    let config = c.config_file("admin", "");
    for args in [
        &["plan", "--output", "json"][..],
        &["plan"],
        &["status", "--output", "json"],
        &["drain", "--dry-run"],
        &["check"],
        &["--help"],
    ] {
        let (code, stderr) = run_into_closed_pipe(&config, args);
        assert_eq!(code, 0, "{args:?}: {stderr}");
        assert!(
            !stderr.contains("panicked") && !stderr.contains("Broken pipe"),
            "{args:?}: {stderr}"
        );
    }
    // A failing command keeps its code too: the node is missing (3).
    let (code, _) = run_into_closed_pipe(&config, &["--node", "no-such-node", "plan"]);
    assert_eq!(code, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_kubeconfig_is_named_once_without_debug_quotes() {
    let c = Cluster::start(vec![]).await;
    let missing = c.dir.path().join("no-kubeconfig");
    let config = c.dir.path().join("missing-kubeconfig.toml");
    std::fs::write(
        &config,
        format!(
            "node_name = \"node-a\"\nkubeconfig = \"{}\"\n",
            missing.display()
        ),
    )
    .unwrap();
    let r = cli(&config, &["plan"]).await;
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert_eq!(
        r.stderr.trim(),
        format!(
            "error: cannot read kubeconfig {}: No such file or directory (os error 2)",
            missing.display()
        )
    );
}
