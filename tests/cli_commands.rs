//! The binary against the fake API server: plan/drain/restore/status/check output and the
//! documented exit codes (0 done, 1 drain incomplete, 2 usage or config error, 3 cluster
//! unreachable or node missing); state files that are symlinks or not regular files are never
//! written through or read, and `check` fails on a state dir it cannot write.

mod engine_support;

use std::os::unix::fs::symlink;
use std::time::Duration;

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

/// `drain` never writes its report through a symlink: with `.last-report.json.tmp` and
/// `last-report.json` in the state dir both symlinks to someone else's files, those files stay
/// as they were, and the report is a regular file of its own that `status` reads back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_never_writes_its_report_through_a_symlink() {
    let c = Cluster::start(vec![pod(NS, "p", NODE)]).await;
    let state = c.dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    let victims = [
        (c.dir.path().join("victim-of-tmp"), ".last-report.json.tmp"),
        (c.dir.path().join("victim-of-report"), "last-report.json"),
    ];
    for (victim, name) in &victims {
        std::fs::write(victim, "precious").unwrap();
        symlink(victim, state.join(name)).unwrap();
    }
    let config = c.config_file("admin", "");
    let r = cli(&config, &["drain"]).await;
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    for (victim, name) in &victims {
        assert_eq!(
            std::fs::read_to_string(victim).unwrap(),
            "precious",
            "the file {name} pointed to is untouched"
        );
    }
    let report = state.join("last-report.json");
    assert!(
        std::fs::symlink_metadata(&report).unwrap().is_file(),
        "the symlink was replaced by the report"
    );
    let stored: Value = serde_json::from_slice(&std::fs::read(&report).unwrap()).unwrap();
    assert_eq!(stored["node"], NODE);
    let r = cli(&config, &["status", "--output", "json"]).await;
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let status: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(status["last_report"], stored);
}

/// `last-report.json` pointing to /dev/zero: `status` refuses it at once (a generous bound; it
/// would otherwise read until memory runs out), exits 1 and names the file and why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_refuses_a_last_report_that_is_not_a_regular_file() {
    let c = Cluster::start(vec![]).await;
    let state = c.dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    let report = state.join("last-report.json");
    symlink("/dev/zero", &report).unwrap();
    let config = c.config_file("admin", "");
    let r = tokio::time::timeout(Duration::from_secs(30), cli(&config, &["status"]))
        .await
        .expect("status returns instead of reading /dev/zero");
    assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains(&report.display().to_string()) && r.stderr.contains("symbolic link"),
        "{}",
        r.stderr
    );
}

/// A state dir that cannot be written (a file where the directory should be; the tests run as
/// root, which mode bits would not stop): `check` exits 1 and names it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_fails_on_a_state_dir_it_cannot_write() {
    let c = Cluster::start(vec![]).await;
    let blocker = c.dir.path().join("not-a-dir");
    std::fs::write(&blocker, "").unwrap();
    let config = c.config_file("admin", "");
    let text = std::fs::read_to_string(&config).unwrap();
    let state = c.dir.path().join("state").display().to_string();
    assert!(text.contains(&state));
    std::fs::write(
        &config,
        text.replace(&state, &blocker.display().to_string()),
    )
    .unwrap();
    let r = cli(&config, &["check"]).await;
    assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
    let line = r
        .stdout
        .lines()
        .find(|l| l.starts_with("state dir"))
        .unwrap_or_else(|| panic!("no state dir line:\n{}", r.stdout));
    assert!(
        line.contains(&blocker.display().to_string()) && line.contains("NOT writable"),
        "{line}"
    );
    assert!(
        !r.stdout.contains("DENIED"),
        "only the state dir fails: {}",
        r.stdout
    );
}
