//! The binary against the fake API server: plan/drain/restore/status/check output and the
//! documented exit codes (0 done, 1 drain incomplete, 2 usage or config error, 3 cluster
//! unreachable or node missing); state files that are symlinks or not regular files are never
//! written through or read, and `check` fails on a state dir it cannot write.

mod engine_support;
mod logind;

use std::os::unix::fs::symlink;
use std::path::Path;
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
    let config = c.config("");
    let r = cli(&config, &["plan", "--output", "json"]).await;
    assert_eq!(r.code, 0, "{}", r.stderr);
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(
        v,
        json!({"node": NODE, "pods": [
            {"namespace": NS, "name": "web", "action": "evict", "reason": "default", "order": 10},
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
    let config = c.config("");

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
        (Some("evict"), Some("default"), Some(0), Some("evicted"))
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
    let admin = c.config("[drain]\ntimeout = \"2s\"\n");
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
    let config = c.config("[drain]\ntimeout = \"2s\"\n");
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

    // 0 and the documentation of all of it, after the summary `-h` shows.
    let r = cli(&config, &["--help"]).await;
    assert_eq!(r.code, 0);
    let short = cli(&config, &["-h"]).await;
    assert_eq!(
        r.stdout.lines().next(),
        short.stdout.lines().next(),
        "--help starts with -h's summary"
    );
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
async fn check_reviews_every_permission_warns_of_an_in_memory_state_dir_and_fails_without_logind() {
    let c = Cluster::start(vec![]).await;
    let config = c.config("[drain]\ntimeout = \"10s\"\n");
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
    // A 1.32+ Node authorizer lets a node list and watch only its own pods (by the field
    // selector the drain sends) and reach its Lease only in kube-node-lease: the reviews ask
    // exactly that, so they are allowed.
    for needle in ["list   pods ", "watch  pods ", "get    leases "] {
        let line = r
            .stdout
            .lines()
            .find(|l| l.starts_with(&format!("permission {needle}")))
            .unwrap_or_else(|| panic!("{needle:?} missing:\n{}", r.stdout));
        assert!(line.contains(" allowed "), "{line}");
    }
    let reviews: Vec<Value> = c
        .server
        .recorder()
        .matching("POST", "selfsubjectaccessreviews")
        .iter()
        .map(|r| serde_json::from_str(&r.body).expect("a JSON review"))
        .collect();
    let asked = |verb: &str, resource: &str| {
        reviews
            .iter()
            .map(|r| &r["spec"]["resourceAttributes"])
            .find(|a| a["verb"] == verb && a["resource"] == resource)
            .cloned()
            .unwrap_or_else(|| panic!("no review of {verb} {resource}: {reviews:?}"))
    };
    for verb in ["list", "watch"] {
        assert_eq!(
            asked(verb, "pods")["fieldSelector"],
            json!({"rawSelector": "spec.nodeName=node-a"})
        );
    }
    let lease = asked("get", "leases");
    assert_eq!(
        (&lease["namespace"], &lease["name"]),
        (&json!("kube-node-lease"), &json!("node-a"))
    );
    assert_eq!(asked("create", "events")["namespace"], "default");

    // `daemonsets = "stop-last"` needs the last stage's taint: a dry run of it passes with the
    // admin's credentials and fails check with the kubelet's, naming what the drain then does.
    let stop_last = "[drain]\ntimeout = \"10s\"\ndaemonsets = \"stop-last\"\n";
    let line = |r: &Run| {
        r.stdout
            .lines()
            .find(|l| {
                l.starts_with(
                    "daemonsets stop-last: taint kube-shutdown-drain/daemonsets:NoSchedule",
                )
            })
            .unwrap_or_else(|| panic!("no daemonsets line:\n{}", r.stdout))
            .to_string()
    };
    let r = cli_on_bus(&c.config(stop_last), &["check"], rig.address()).await;
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(line(&r).contains("allowed"), "{}", line(&r));
    let r = cli_on_bus(
        &c.config_file("system:node:node-a", stop_last),
        &["check"],
        rig.address(),
    )
    .await;
    assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
    assert!(
        line(&r).contains("not allowed to modify taints")
            && line(&r).contains("leaves the DaemonSet pods of node node-a running"),
        "{}",
        line(&r)
    );
    assert!(
        c.node(NODE)["spec"]["taints"].is_null(),
        "the dry runs stored nothing"
    );

    // `[fleet] slots` needs the slot Leases in their namespace: the admin may, the kubelet's
    // credentials may not (leases only in kube-node-lease), which fails check.
    let fleet = "[drain]\ntimeout = \"10s\"\n[fleet]\nslots = 2\n";
    let slot_lines = |r: &Run| -> Vec<String> {
        r.stdout
            .lines()
            .filter(|l| l.contains("leases in kube-shutdown-drain"))
            .map(str::to_string)
            .collect()
    };
    let r = cli_on_bus(&c.config(fleet), &["check"], rig.address()).await;
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let lines = slot_lines(&r);
    assert_eq!(lines.len(), 5, "{}", r.stdout);
    assert!(lines.iter().all(|l| l.contains(" allowed ")), "{lines:?}");
    let r = cli_on_bus(
        &c.config_file("system:node:node-a", fleet),
        &["check"],
        rig.address(),
    )
    .await;
    assert_eq!(r.code, 1, "{}\n{}", r.stdout, r.stderr);
    assert!(
        slot_lines(&r)
            .iter()
            .any(|l| l.contains("patch") && l.contains("DENIED")),
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

    // A state directory in memory: writable, so not a failure, but the boot record would not
    // survive a reboot; check says so.
    let shm = tempfile::tempdir_in("/dev/shm").unwrap();
    let in_memory = c.dir.path().join("in-memory.toml");
    std::fs::write(
        &in_memory,
        std::fs::read_to_string(&config).unwrap().replace(
            &format!("state_dir = \"{}\"", c.dir.path().join("state").display()),
            &format!("state_dir = \"{}\"", shm.path().display()),
        ),
    )
    .unwrap();
    let r = cli_on_bus(&in_memory, &["check"], rig.address()).await;
    assert!(
        r.stdout.contains(&format!(
            "state dir {}: writable; WARNING it is in memory (tmpfs)",
            shm.path().display()
        )),
        "{}",
        r.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_noexecute_taint_is_warned_about_by_check_plan_and_the_daemon() {
    let c = Cluster::start(vec![]).await;
    let config = c.config("[taint]\neffect = \"NoExecute\"\n");
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
    let config = c.config("");
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

/// A config file or kubeconfig that is not a regular file, or over 1 MiB, is a configuration
/// error (exit 2) naming the file, and is refused before it is read: `/dev/zero` would fill
/// memory, a FIFO would block for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_config_files_exit_2_without_reading_them() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let big = dir.path().join("big.toml");
    std::fs::write(&big, vec![b'#'; 1024 * 1024 + 1]).unwrap();
    let cases = [
        (
            Path::new("/dev/zero"),
            "is a character device, not a regular file",
        ),
        (dir.path(), "is a directory, not a regular file"),
        (fifo.as_path(), "is a FIFO, not a regular file"),
        (big.as_path(), "is larger than 1024 KiB"),
    ];
    for (path, needle) in cases {
        // A deadline far above any honest run: the FIFO used to hang here for ever.
        let r = tokio::time::timeout(Duration::from_secs(60), cli(path, &["plan"]))
            .await
            .unwrap_or_else(|_| panic!("{} was read", path.display()));
        assert_eq!(r.code, 2, "{}: {}", path.display(), r.stderr);
        let want = format!("config file {} {needle}", path.display());
        assert!(r.stderr.contains(&want), "{want:?} not in {}", r.stderr);

        // The same limits for the kubeconfig the config names.
        let config = dir.path().join("kc.toml");
        std::fs::write(
            &config,
            format!(
                "node_name = \"{NODE}\"\nkubeconfig = \"{}\"\n",
                path.display()
            ),
        )
        .unwrap();
        let r = tokio::time::timeout(Duration::from_secs(60), cli(&config, &["plan"]))
            .await
            .unwrap_or_else(|_| panic!("kubeconfig {} was read", path.display()));
        assert_eq!(r.code, 2, "{}: {}", path.display(), r.stderr);
        let want = format!("kubeconfig {} {needle}", path.display());
        assert!(r.stderr.contains(&want), "{want:?} not in {}", r.stderr);
    }
}

/// A kubeconfig with a YAML syntax error names the file, line and column, and not one byte of
/// its content: the lines around the error hold the bearer token here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_kubeconfig_is_named_but_never_printed() {
    const TOKEN: &str = "bearer-token-that-must-not-leak";
    let dir = tempfile::tempdir().unwrap();
    let kc = dir.path().join("kubeconfig");
    std::fs::write(
        &kc,
        format!(
            "apiVersion: v1\nusers:\n- name: admin\n  user:\n    token: {TOKEN}\n    \
             client-key-data: KEYDATA\n  oops: [\n"
        ),
    )
    .unwrap();
    let config = dir.path().join("config.toml");
    std::fs::write(
        &config,
        format!(
            "node_name = \"{NODE}\"\nkubeconfig = \"{}\"\n",
            kc.display()
        ),
    )
    .unwrap();
    for command in ["plan", "check", "restore"] {
        let r = cli(&config, &[command]).await;
        assert_eq!(r.code, 2, "{command}: {}", r.stderr);
        let prefix = format!("error: {}:", kc.display());
        assert!(r.stderr.starts_with(&prefix), "{command}: {}", r.stderr);
        assert!(
            r.stderr.contains("kubeconfig is not valid YAML"),
            "{command}: {}",
            r.stderr
        );
        for secret in [TOKEN, "KEYDATA", "token:", "oops"] {
            assert!(
                !r.stderr.contains(secret) && !r.stdout.contains(secret),
                "{command} printed {secret:?}: {}{}",
                r.stdout,
                r.stderr
            );
        }
    }
}

/// `KUBE_SHUTDOWN_DRAIN_CONFIG=` (empty) is a configuration error that names the variable, not
/// the `--config` flag nobody gave.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_empty_config_variable_is_named() {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_kube-shutdown-drain"))
        .arg("plan")
        .env("KUBE_SHUTDOWN_DRAIN_CONFIG", "")
        .env("KUBE_SHUTDOWN_DRAIN_LOG", "warn")
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("KUBE_SHUTDOWN_DRAIN_CONFIG is set but empty")
            && !stderr.contains("--config"),
        "{stderr}"
    );
}

/// A value of any length is echoed in an error cut to ~200 characters, and a bad `--node` is
/// reported like a bad `node_name`, with what is allowed (exit 2).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_echo_at_most_200_characters_of_a_value() {
    let dir = tempfile::tempdir().unwrap();
    let long = "X".repeat(900_000);
    for (name, text) in [
        ("node.toml", format!("node_name = \"{long}\"\n")),
        (
            "selector.toml",
            format!("[filters]\nskip_selector = \"a in ({long}\"\n"),
        ),
        ("key.toml", format!("{long} = 1\n")),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let r = cli(&path, &["plan"]).await;
        assert_eq!(
            r.code,
            2,
            "{name}: {}",
            &r.stderr[..r.stderr.len().min(500)]
        );
        assert!(
            r.stderr.len() < 1_000,
            "{name}: {} bytes of error",
            r.stderr.len()
        );
        assert!(
            r.stderr.contains(&format!("{}:1:", path.display()))
                || r.stderr.contains(&format!("{}:2:", path.display())),
            "{name}: {}",
            r.stderr
        );
    }
    let config = dir.path().join("ok.toml");
    std::fs::write(&config, "node_name = \"node-a\"\n").unwrap();
    for bad in ["node-1/status", "x?y=1", "Bad_Name"] {
        let r = cli(&config, &["--node", bad, "plan"]).await;
        assert_eq!(r.code, 2, "{bad}: {}", r.stderr);
        assert!(
            r.stderr.contains(&format!(
                "--node {bad:?} is not a node name; allowed: a lower-case DNS subdomain"
            )),
            "{bad}: {}",
            r.stderr
        );
    }
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
    let config = c.config("");
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
    let config = c.config("");
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
    let config = c.config("");
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
        line.contains(&blocker.display().to_string()) && line.contains("NOT WRITABLE"),
        "{line}"
    );
    assert!(
        !r.stdout.contains("DENIED"),
        "only the state dir fails: {}",
        r.stdout
    );
}

/// `check` and `status` warn when the kubelet holds its own delay inhibitor for shutdowns,
/// naming its `shutdownGracePeriod` from `[daemon] kubelet_config` (issue 11, item 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_and_status_warn_about_a_kubelet_shutdown_lock_with_its_grace() {
    let Some(rig) = logind::Rig::start(logind::LogindOptions::default()).await else {
        println!("skipped: dbus-daemon or python3-dbusmock missing");
        return;
    };
    let c = Cluster::start(vec![]).await;
    let kubelet = rig.dir().join("kubelet-config.yaml");
    std::fs::write(
        &kubelet,
        "kind: KubeletConfiguration\nshutdownGracePeriod: 45s\n",
    )
    .unwrap();
    let config = c.config(&format!(
        "[drain]\ntimeout = \"10s\"\n[daemon]\nkubelet_config = \"{}\"\n",
        kubelet.display()
    ));
    let r = cli_on_bus(&config, &["check"], rig.address()).await;
    assert!(
        r.stdout.contains("kubelet: holds no shutdown inhibitor"),
        "{}",
        r.stdout
    );
    let _lock = rig.foreign_lock("kubelet").await;
    for args in [&["check"][..], &["status"][..]] {
        let r = cli_on_bus(&config, args, rig.address()).await;
        assert!(
            r.stdout.contains("kubelet: WARNING")
                && r.stdout.contains("shutdownGracePeriod 45s")
                && r.stdout.contains("shutdownGracePeriod: 0"),
            "{args:?}:\n{}\n{}",
            r.stdout,
            r.stderr
        );
    }
}

/// The kubelet's own credentials (`system:node:node-a`) against a server with the 1.32+ Node
/// authorizer (field selectors, the Lease's namespace, the relationship graph for claims,
/// volumes and attachments): `check` passes, and `plan`, `drain` and `restore` work, a pod with
/// a claim included: its claim and volume are read before its eviction and its attachment is
/// followed by name until it is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubelets_credentials_check_plan_drain_and_restore_a_node_with_a_claim() {
    // `printf %s vol-dbcsi.example.comnode-a | sha256sum`
    let attachment = "csi-438507ffea197264e379d2fbcbd3617fec2225660ea39b965a4a8ea6d97af8c3";
    let db = pod_with(
        NS,
        "db-0",
        NODE,
        json!({"spec": {"volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}}),
    );
    let c = Cluster::start(vec![
        db,
        pod(NS, "web", NODE),
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
               "metadata": {"name": "data", "namespace": NS}, "spec": {"volumeName": "pv-db"}}),
        json!({"apiVersion": "v1", "kind": "PersistentVolume", "metadata": {"name": "pv-db"},
               "spec": {"csi": {"driver": "csi.example.com", "volumeHandle": "vol-db"}}}),
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttachment",
               "metadata": {"name": attachment},
               "spec": {"attacher": "csi.example.com", "nodeName": NODE,
                        "source": {"persistentVolumeName": "pv-db"}}}),
    ])
    .await;
    let kubelet = c.config_file("system:node:node-a", "[drain]\ntimeout = \"10s\"\n");
    match logind::Rig::start(logind::LogindOptions::default()).await {
        Some(rig) => {
            let r = cli_on_bus(&kubelet, &["check"], rig.address()).await;
            assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
            assert!(!r.stdout.contains("DENIED"), "{}", r.stdout);
        }
        None => println!("skipped check: dbus-daemon or python3-dbusmock missing"),
    }
    let r = cli(&kubelet, &["plan"]).await;
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains("work/db-0") && r.stdout.contains("work/web"),
        "{}",
        r.stdout
    );
    let r = cli(&kubelet, &["drain", "--output", "json"]).await;
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let report: Value = serde_json::from_str(&r.stdout).expect("a JSON report");
    assert_eq!(report["complete"], true, "{report:#}");
    assert_eq!(report["volumes"][0]["attachment"], attachment, "{report:#}");
    assert!(report["volumes"][0]["detached_ms"].is_u64(), "{report:#}");
    assert!(
        c.server
            .store()
            .get("VolumeAttachment", None, attachment)
            .is_none()
    );
    assert!(unschedulable(&c.node(NODE)));
    // Refused: the taint patch, the attachment list, and the attachment by name once it is
    // gone (a node sees a deleted attachment as "no relationship found"); check's forecast
    // line asks for the budgets, which a node may not list (RBAC's system:node role).
    let requests = c.server.recorder().requests();
    let refused: Vec<_> = requests
        .iter()
        .filter(|r| {
            r.status == 403
                && !r.path.ends_with("/nodes/node-a")
                && r.path != "/apis/policy/v1/poddisruptionbudgets"
        })
        .collect();
    let list = "/apis/storage.k8s.io/v1/volumeattachments";
    assert!(
        refused.iter().any(|r| r.path == list)
            && refused.iter().all(|r| r.path == list
                || (r.path == format!("{list}/{attachment}")
                    && r.response.contains("no relationship found"))),
        "{refused:#?}"
    );
    let r = cli(&kubelet, &["restore"]).await;
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(!unschedulable(&c.node(NODE)), "{}", r.stdout);
}

/// `check` fails when someone else can write what the daemon trusts as root (the config file,
/// the kubeconfig or the directory holding either, the state directory), naming the file and
/// why, and warns when others can read a kubeconfig that holds credentials (issue 23).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_fails_when_others_can_write_the_files_the_daemon_trusts() {
    use std::os::unix::fs::PermissionsExt;
    let Some(rig) = logind::Rig::start(logind::LogindOptions::default()).await else {
        println!("skipped: dbus-daemon or python3-dbusmock missing");
        return;
    };
    let c = Cluster::start(vec![]).await;
    let config = c.config("[drain]\ntimeout = \"10s\"\n");
    let kubeconfig = c.kubeconfig(IDENTITY);
    let state = c.dir.path().join("state");
    let chmod = |p: &Path, mode: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    chmod(&kubeconfig, 0o600);
    let r = cli_on_bus(&config, &["check"], rig.address()).await;
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stdout
            .contains("files: config, kubeconfig and state dir writable only by their owner"),
        "{}",
        r.stdout
    );
    assert!(
        !r.stdout.contains("WARNING it holds credentials"),
        "{}",
        r.stdout
    );

    // Readable by others, with a token inside: a warning, not a failure.
    chmod(&kubeconfig, 0o644);
    let r = cli_on_bus(&config, &["check"], rig.address()).await;
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stdout.contains(&format!(
            "kubeconfig {}: WARNING it holds credentials and its group or others can read it",
            kubeconfig.display()
        )),
        "{}",
        r.stdout
    );
    chmod(&kubeconfig, 0o600);

    let cases: [(&str, &Path, u32, u32, &str); 4] = [
        (
            "config",
            &config,
            0o666,
            0o644,
            "file {}: anyone can write it (mode 0666)",
        ),
        (
            "kubeconfig",
            &kubeconfig,
            0o620,
            0o600,
            "file {}: its group can write it (mode 0620)",
        ),
        (
            "state dir",
            &state,
            0o777,
            0o700,
            "directory {}: anyone can write it (mode 0777)",
        ),
        (
            "config",
            c.dir.path(),
            0o770,
            0o700,
            "its directory {}: its group can write it (mode 0770)",
        ),
    ];
    for (what, path, bad, good, why) in cases {
        chmod(path, bad);
        let r = cli_on_bus(&config, &["check"], rig.address()).await;
        chmod(path, good);
        assert_eq!(r.code, 1, "{what} {bad:o}: {}\n{}", r.stdout, r.stderr);
        let why = why.replace("{}", &path.display().to_string());
        let line = r
            .stdout
            .lines()
            .find(|l| l.contains("UNSAFE"))
            .unwrap_or_else(|| panic!("{what} {bad:o}: no UNSAFE line:\n{}", r.stdout));
        assert!(line.starts_with(what) && line.contains(&why), "{line}");
    }
}

/// `status` prints what the Node and the state files say with their control characters
/// escaped: a marker or a boot record cannot clear the admin's screen or retitle their terminal
/// (issue 23). The JSON output escapes them by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_escapes_control_characters_from_the_node_and_the_state_files() {
    let c = Cluster::start(vec![]).await;
    let hostile = "\u{1b}]0;owned\u{7}\u{1b}[2J\u{202e}";
    let marker = json!({
        "was_unschedulable": false, "taint_was_present": false,
        "boot_id": "0b0e1d00-0000-4000-8000-0000000000ff", "time": "2026-11-29T10:00:00Z",
        "why": format!("drain{hostile}"), "cordoned": false, "version": 1,
        "taints": [{"key": format!("kube-shutdown-drain/x{hostile}"), "effect": "NoSchedule"}]
    });
    c.server
        .store()
        .modify("Node", None, NODE, |n| {
            n["metadata"]["annotations"] =
                json!({"kube-shutdown-drain/marker": marker.to_string()});
        })
        .unwrap();
    let state = c.dir.path().join("state");
    std::fs::create_dir_all(&state).unwrap();
    let record = json!({
        "boot_id": "0b0e1d00-0000-4000-8000-0000000000aa", "since": "2026-11-29T10:00:00Z",
        "previous": {"boot_id": "0b0e1d00-0000-4000-8000-0000000000bb",
            "unclean": "DrainIncomplete", "message": format!("boot ended{hostile}"),
            "event_posted": true}
    });
    std::fs::write(state.join("boot-record"), record.to_string()).unwrap();
    let config = c.config("");
    let r = cli(&config, &["status"]).await;
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    for c in ['\u{1b}', '\u{7}', '\u{202e}'] {
        assert!(
            !r.stdout.contains(c),
            "{c:?} printed raw:\n{}",
            r.stdout.escape_debug()
        );
    }
    assert!(
        r.stdout.contains("(drain\\u{1b}]0;owned\\u{7}"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("kube-shutdown-drain/x\\u{1b}"),
        "{}",
        r.stdout
    );
    assert!(r.stdout.contains("boot ended\\u{1b}"), "{}", r.stdout);
    let r = cli(&config, &["status", "--output", "json"]).await;
    assert!(!r.stdout.contains('\u{1b}'), "{}", r.stdout.escape_debug());
    let v: Value = serde_json::from_str(&r.stdout).unwrap();
    assert_eq!(
        v["marker"]["why"],
        json!(format!("drain{hostile}")),
        "the value itself is kept"
    );
}

/// `plan` against a server that does not answer says so in one line: kube's client logs an
/// ERROR line per failed attempt, which is not ours to show (issue 23: ten of them came first).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_server_is_one_error_line() {
    let c = Cluster::start(vec![]).await;
    let config = c.config("");
    c.server.stop_listener();
    for log in [None, Some("info"), Some("debug")] {
        let r = cli_with_log(&config, &["plan"], NO_BUS, log).await;
        assert_eq!(r.code, 3, "{log:?}: {}", r.stderr);
        let lines: Vec<&str> = r
            .stderr
            .lines()
            .filter(|l| l.contains("ERROR") || l.starts_with("error:") || l.contains("WARN"))
            .collect();
        assert_eq!(lines.len(), 1, "{log:?}: {}", r.stderr);
        assert!(
            lines[0].starts_with("error: cannot read node node-a: API server"),
            "{}",
            lines[0]
        );
        assert!(
            !r.stderr.contains("client error (Connect)"),
            "{log:?}: {}",
            r.stderr
        );
    }
}

/// A `KUBE_SHUTDOWN_DRAIN_LOG` that is not a filter is a warning naming the variable, and the
/// default level applies (a lone word is a target for EnvFilter: `degub` would have silenced
/// every line).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_log_filter_is_a_warning_naming_the_variable() {
    let c = Cluster::start(vec![]).await;
    let config = c.config("");
    let r = cli_with_log(&config, &["plan"], NO_BUS, Some("degub")).await;
    assert_eq!(r.code, 0, "{}", r.stderr);
    let warning = r.stderr.lines().next().unwrap_or_default();
    assert!(
        warning.contains(
            "WARN environment variable KUBE_SHUTDOWN_DRAIN_LOG=\"degub\" is not a log filter"
        ) && warning.contains("logging at the default, info"),
        "{}",
        r.stderr
    );
}

/// A budget these credentials may not watch (the kubelet's: 403) is said once, in our words:
/// kube's watcher logs the refusal as a Debug dump of its error, which never reaches the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_budget_watch_is_one_line_without_a_debug_dump() {
    let c = Cluster::start(vec![
        pod(NS, "guarded", NODE),
        pdb(NS, "guarded-pdb", "guarded", 1),
    ])
    .await;
    let config = c.config_file(
        "system:node:node-a",
        "[drain]\ntimeout = \"3s\"\nretry_interval = \"1s\"\n",
    );
    let r = cli_with_log(&config, &["drain"], NO_BUS, None).await;
    assert_eq!(r.code, 1, "the budget holds the pod: {}", r.stderr);
    assert!(
        r.stderr
            .contains("cannot watch poddisruptionbudget work/guarded-pdb"),
        "{}",
        r.stderr
    );
    for dump in ["Status {", "Api(", "ErrorResponse", "Some(\""] {
        assert!(!r.stderr.contains(dump), "{dump:?} in:\n{}", r.stderr);
    }
}

/// `check` with `[fleetlock]` says whether the unit's user namespace maps the update agent, in
/// the daemon's words: `PrivateUsers=self` (the shipped unit) and a systemd older than 257 with
/// `PrivateUsers=yes` do not, and check fails; `identity` (the FleetLock drop-in) and `no` do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_says_whether_the_units_namespace_maps_the_update_agent() {
    // A system user every Debian or Fedora has, with a uid of its own below 65536.
    let Some((user, uid)) = ["daemon", "bin", "adm"].iter().find_map(|name| {
        let u = nix::unistd::User::from_name(name).ok().flatten()?;
        let uid = u.uid.as_raw();
        (uid != 0 && uid < 65534).then(|| (name.to_string(), uid))
    }) else {
        println!("skipped: no system user daemon, bin or adm");
        return;
    };
    let c = Cluster::start(vec![]).await;
    let config = c.config(&format!(
        "[drain]\ntimeout = \"10s\"\n[fleetlock]\nlisten = \"127.0.0.1:9753\"\n\
         agent_user = \"{user}\"\n"
    ));
    let Some(mut rig) = logind::Rig::start(logind::LogindOptions::default()).await else {
        println!("skipped: dbus-daemon or python3-dbusmock missing");
        return;
    };
    rig.start_systemd("running", Duration::from_secs(30)).await;
    for (word, seen) in [
        ("self", false),
        ("", false),
        ("identity", true),
        ("no", true),
    ] {
        rig.set_private_users(word).await;
        let r = cli_on_bus(&config, &["check"], rig.address()).await;
        let line = r
            .stdout
            .lines()
            .find(|l| l.starts_with("fleetlock: "))
            .unwrap_or_else(|| panic!("PrivateUsers={word:?}: no fleetlock line:\n{}", r.stdout));
        if seen {
            assert_eq!(r.code, 0, "{word}: {}\n{}", r.stdout, r.stderr);
            assert_eq!(
                line,
                format!(
                    "fleetlock: the update agent, user {user} (uid {uid}), is seen by the daemon \
                     (kube-shutdown-drain.service has PrivateUsers={word}); answering on \
                     http://127.0.0.1:9753/"
                )
            );
        } else {
            assert_eq!(r.code, 1, "{word:?}: {}\n{}", r.stdout, r.stderr);
            let want = format!(
                "fleetlock: CANNOT ANSWER the update agent: the update agent's user {user} (uid \
                 {uid}) is not mapped in the daemon's user namespace (kube-shutdown-drain.service \
                 has PrivateUsers=self: 0 0 1): "
            );
            assert!(line.starts_with(&want), "{word:?}: {line}");
            assert!(
                line.contains("zincati/kube-shutdown-drain.service.d/50-fleetlock.conf"),
                "{line}"
            );
        }
    }
}
