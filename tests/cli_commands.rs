//! The binary against the fake API server: plan/drain/restore/status/check output and the
//! documented exit codes (0 done, 1 drain incomplete, 2 usage or config error, 3 cluster
//! unreachable or node missing).

mod engine_support;
mod logind;

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
    assert!(r.stdout.contains("nothing left to undo"), "{}", r.stdout);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_and_restore_say_what_they_would_do_and_did() {
    let c = Cluster::start(vec![
        pod(NS, "web", NODE),
        pod(NS, "api", NODE),
        daemonset_pod(NS, "ds", NODE),
        pod_with(
            NS,
            "batch",
            NODE,
            json!({"metadata": {"labels": {"cluster.x-k8s.io/drain": "wait-completed"}}}),
        ),
    ])
    .await;
    // Short drains: `batch` waits to complete and never does.
    let admin = c.config_file("admin", "[drain]\ntimeout = \"2s\"\n");
    // The dry run counts what plan counts, in plan's words.
    let plan = cli(&admin, &["plan"]).await;
    let dry = cli(&admin, &["drain", "--dry-run"]).await;
    assert_eq!(dry.code, 0, "{}", dry.stderr);
    let counts = "2 to evict, 1 to wait for, 1 skipped";
    assert!(plan.stdout.contains(counts), "{}", plan.stdout);
    assert!(
        dry.stdout
            .lines()
            .next()
            .is_some_and(|l| l.contains("dry run, nothing changed") && l.contains(counts)),
        "{}",
        dry.stdout
    );
    assert!(!dry.stdout.contains("evicted"), "{}", dry.stdout);

    // Drained by us, restored with kubelet credentials: the cordon is undone, our taint may not
    // be removed (403) and stays in the marker.
    let r = cli(&admin, &["drain", "--output", "json"]).await;
    assert_eq!(r.code, 1, "batch waits to complete: {}", r.stderr);
    let kubelet = c.config_file("system:node:node-a", "");
    let r = cli(&kubelet, &["restore"]).await;
    assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
    assert!(!unschedulable(&c.node(NODE)));
    // The next restore has only the taint left: it says the cordon was already undone, not
    // that the cordon was never ours.
    let r = cli(&admin, &["restore"]).await;
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(
        r.stdout.trim(),
        "node node-a: no cordon of ours left to undo, taint removed, marker cleared"
    );
    let r = cli(&admin, &["restore"]).await;
    assert_eq!(
        r.stdout.trim(),
        "node node-a: no marker of ours; nothing left to undo"
    );

    // An admin's cordon from before the drain is named as such.
    cordon_as_admin(c.server.store());
    let r = cli(&admin, &["drain", "--output", "json"]).await;
    assert_eq!(r.code, 1, "{}", r.stderr);
    let r = cli(&admin, &["restore"]).await;
    assert!(
        r.stdout
            .contains("cordon left alone (the node was cordoned before the drain), taint removed"),
        "{}",
        r.stdout
    );
    assert!(unschedulable(&c.node(NODE)));
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
async fn check_reviews_every_permission_and_fails_without_logind() {
    let c = Cluster::start(vec![]).await;
    let config = c.config_file("admin", "[drain]\ntimeout = \"10s\"\n");
    // No logind on the bus: the daemon could not work, so check fails.
    let r = cli(&config, &["check"]).await;
    assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
    for needle in [
        "config",
        "valid",
        "node node-a: exists",
        "create pods/eviction",
        "patch  nodes",
        "logind: NOT REACHABLE",
    ] {
        assert!(
            r.stdout.contains(needle),
            "{needle:?} missing:\n{}",
            r.stdout
        );
    }
    assert!(!r.stdout.contains("DENIED"), "{}", r.stdout);
    let reviews = c
        .server
        .recorder()
        .matching("POST", "selfsubjectaccessreviews");
    assert!(reviews.len() >= 6);

    let Some(rig) = logind::Rig::start(logind::LogindOptions::default()).await else {
        println!("skipped the part with logind: dbus-daemon or python3-dbusmock missing");
        return;
    };
    // Admin credentials, logind with a budget that fits: everything passes, and the taint is
    // answered by a dry-run patch that leaves the node as it was.
    c.server.recorder().clear();
    let r = cli_on_bus(&config, &["check"], rig.address()).await;
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stdout
            .contains("taint kube-shutdown-drain/shutdown:PreferNoSchedule: allowed"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("state dir"), "{}", r.stdout);
    assert!(
        r.stdout.contains("logind: InhibitDelayMaxSec 20 s"),
        "{}",
        r.stdout
    );
    let patches = c.server.recorder().matching("PATCH", "/nodes/node-a");
    assert_eq!(patches.len(), 1, "{patches:?}");
    assert!(patches[0].query.contains("dryRun=All"), "{:?}", patches[0]);
    assert_eq!(patches[0].status, 200);
    assert!(
        c.node(NODE)["spec"]["taints"].is_null(),
        "the dry run stored nothing: {}",
        c.node(NODE)
    );

    // Kubelet credentials: NodeRestriction refuses the dry-run taint patch as it would the real
    // one; the taint and the budget watch are optional, so check still passes.
    let kubelet = c.config_file("system:node:node-a", "[drain]\ntimeout = \"10s\"\n");
    c.server.recorder().clear();
    let r = cli_on_bus(&kubelet, &["check"], rig.address()).await;
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let taint_line = r
        .stdout
        .lines()
        .find(|l| l.starts_with("taint kube-shutdown-drain/shutdown"))
        .unwrap_or_else(|| panic!("{}", r.stdout));
    assert!(
        taint_line.contains("denied (optional)")
            && taint_line.contains("not allowed to modify taints"),
        "{taint_line}"
    );
    let patches = c.server.recorder().matching("PATCH", "/nodes/node-a");
    assert_eq!(
        patches
            .iter()
            .map(|p| (p.query.contains("dryRun=All"), p.status))
            .collect::<Vec<_>>(),
        [(true, 403)]
    );
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

    // A state directory that cannot be written (its parent is a file): exit 1, named.
    let file = c.dir.path().join("a-file");
    std::fs::write(&file, "").unwrap();
    let unwritable = c.dir.path().join("unwritable.toml");
    std::fs::write(
        &unwritable,
        std::fs::read_to_string(&config).unwrap().replace(
            &format!("state_dir = \"{}\"", c.dir.path().join("state").display()),
            &format!("state_dir = \"{}\"", file.join("state").display()),
        ),
    )
    .unwrap();
    let r = cli_on_bus(&unwritable, &["check"], rig.address()).await;
    assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains(&format!(
            "state dir {}: NOT WRITABLE",
            file.join("state").display()
        )),
        "{}",
        r.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_noexecute_taint_is_warned_about_by_check_plan_and_the_daemon() {
    let c = Cluster::start(vec![]).await;
    let config = c.config_file("admin", "[taint]\neffect = \"NoExecute\"\n");
    let warning = "[taint] effect = \"NoExecute\"";
    let r = cli(&config, &["check"]).await;
    assert!(
        r.stdout.contains(&format!("taint: WARNING {warning}")),
        "{}",
        r.stdout
    );
    let r = cli(&config, &["plan", "--output", "json"]).await;
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stderr.contains(&format!("warning: {warning}"))
            && r.stderr.contains("PodDisruptionBudgets"),
        "{}",
        r.stderr
    );
    serde_json::from_str::<Value>(&r.stdout).expect("stdout stays JSON");
    // The daemon says it at start (it then stops: no logind here; SIGTERM is not needed).
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_kube-shutdown-drain"))
        .args(["--config".as_ref(), config.as_os_str(), "run".as_ref()])
        .env_remove("JOURNAL_STREAM")
        .env("DBUS_SYSTEM_BUS_ADDRESS", NO_BUS)
        .kill_on_drop(true)
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = out.stderr.unwrap();
    let mut lines = tokio::io::BufReader::new(stderr);
    let mut seen = String::new();
    let found = tokio::time::timeout(std::time::Duration::from_secs(20), async {
        use tokio::io::AsyncBufReadExt;
        let mut line = String::new();
        while lines.read_line(&mut line).await.unwrap_or(0) > 0 {
            seen.push_str(&line);
            if line.contains(" WARN ") && line.contains(warning) {
                return true;
            }
            line.clear();
        }
        false
    })
    .await;
    assert_eq!(found, Ok(true), "{seen}");
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
        // check exits 1 here (no logind on the test's bus), as it does with a reader.
        let want = if args[0] == "check" { 1 } else { 0 };
        assert_eq!(code, want, "{args:?}: {stderr}");
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
