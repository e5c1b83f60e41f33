//! The commands and the drain slots (`[fleet] slots`, issue 29) against the fake API server:
//! `drain` by hand waits for a slot as `reboot` does (two nodes draining at once with one slot
//! take turns; `--no-slot` goes without), `restore` with the kubelet's credentials completes
//! holding no slot, and every command's `--help` says what it does with slots.

mod engine_support;

use engine_support::*;
use serde_json::json;

const SLOTS: &str = "[drain]\ntimeout = \"10s\"\n[fleet]\nslots = 1\n";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-shutdown-drain/leases";
const SLOT: &str = "kube-shutdown-drain-slot-0";

fn holder(c: &Cluster) -> Option<String> {
    c.server
        .store()
        .get("Lease", Some("kube-shutdown-drain"), SLOT)
        .and_then(|l| l["spec"]["holderIdentity"].as_str().map(str::to_string))
}

/// The Lease writes (creates and patches) the server answered with success.
fn lease_writes(c: &Cluster) -> usize {
    c.server
        .recorder()
        .requests()
        .iter()
        .filter(|r| matches!(r.method.as_str(), "POST" | "PATCH"))
        .filter(|r| r.path.starts_with(LEASES) && r.status < 300)
        .count()
}

#[tokio::test]
async fn two_nodes_draining_by_hand_at_once_with_one_slot_take_turns() {
    let c = Cluster::start(vec![
        slow_pod(NS, "web-a", NODE, 0.2),
        slow_pod(NS, "web-b", OTHER_NODE, 0.2),
    ])
    .await;
    let config = c.config_file("admin", SLOTS);
    let (a, b) = tokio::join!(
        cli(&config, &["drain", "--slot-timeout", "2s"]),
        cli(
            &config,
            &["--node", OTHER_NODE, "drain", "--slot-timeout", "2s"]
        ),
    );
    let runs = [(NODE, &a, "web-a"), (OTHER_NODE, &b, "web-b")];
    let (won, lost): (Vec<_>, Vec<_>) = runs.iter().partition(|(_, r, _)| r.code == 0);
    assert_eq!(
        (won.len(), lost.len()),
        (1, 1),
        "one drains, one waits: {}\n{}\n{}\n{}",
        a.stdout,
        a.stderr,
        b.stdout,
        b.stderr
    );
    let (winner, _, winner_pod) = won[0];
    let (loser, run, loser_pod) = lost[0];
    assert_eq!(run.code, 1);
    // The holder as the loser saw it: the winner, "just taken" when both created the slot at
    // once and the loser's create got the 409.
    let held_by = format!("no drain slot for node {loser} within 2 s: held by {winner}/");
    assert!(
        run.stderr.contains(&held_by) && run.stderr.contains("nothing changed, not draining"),
        "{}",
        run.stderr
    );
    assert_eq!(c.evictions_of(NS, winner_pod), 1);
    assert_eq!(
        c.evictions_of(NS, loser_pod),
        0,
        "only the slot's holder evicts"
    );
    assert!(unschedulable(&c.node(winner)) && !unschedulable(&c.node(loser)));
    assert!(holder(&c).is_some_and(|h| h.starts_with(&format!("{winner}/"))));
    assert_eq!(lease_writes(&c), 1, "one write for the one take");
    let report: serde_json::Value = {
        let r = cli(&config, &["--node", winner, "status", "--output", "json"]).await;
        serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {}", r.stdout))
    };
    assert_eq!(
        report["last_report"]["slot"]["slot"],
        json!(SLOT),
        "the report names the slot: {report}"
    );

    // The winner's restore gives the slot back; the other node's drain takes it.
    let r = cli(&config, &["--node", winner, "restore"]).await;
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(holder(&c), None);
    let r = cli(&config, &["--node", loser, "drain", "--slot-timeout", "2s"]).await;
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stderr
            .contains(&format!("node {loser} holds drain slot {SLOT}")),
        "{}",
        r.stderr
    );
    assert_eq!(c.evictions_of(NS, loser_pod), 1);
}

#[tokio::test]
async fn drain_no_slot_drains_while_every_slot_is_held_and_writes_no_lease() {
    let c = Cluster::start(vec![slow_pod(NS, "web", NODE, 0.2)]).await;
    c.server
        .store()
        .upsert(
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": SLOT, "namespace": "kube-shutdown-drain",
                         "labels": {"kube-shutdown-drain/slot-group": "all"}},
            "spec": {"holderIdentity": "node-b/0b0e1d00-0000-4000-8000-0000000000b2",
                     "renewTime": jiff::Timestamp::now().to_string()}}),
        )
        .unwrap();
    let config = c.config_file("admin", SLOTS);
    let r = cli(&config, &["drain", "--no-slot", "--slot-timeout", "5s"]).await;
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stderr
            .contains("--no-slot: node node-a drains without a drain slot"),
        "{}",
        r.stderr
    );
    assert_eq!(c.evictions_of(NS, "web"), 1);
    assert_eq!(lease_writes(&c), 0);
    assert_eq!(
        holder(&c).as_deref(),
        Some("node-b/0b0e1d00-0000-4000-8000-0000000000b2")
    );
}

/// The kubelet's credentials may not list the slot Leases (403, the Node authorizer's lease
/// rule): `restore` completes, exits 0 and says once why no slot was looked at, with a marker
/// and without one (issue 29 item 1).
#[tokio::test]
async fn restore_with_the_kubelets_credentials_completes_and_says_once_why_no_slot_was_looked_at() {
    let c = Cluster::start(vec![slow_pod(NS, "web", NODE, 0.2)]).await;
    let config = c.config_file(&format!("system:node:{NODE}"), SLOTS);
    let r = cli(&config, &["restore"]).await;
    assert_eq!(r.code, 0, "no marker: {}\n{}", r.stdout, r.stderr);
    let r = cli(&config, &["drain", "--no-slot"]).await;
    assert!(unschedulable(&c.node(NODE)), "{}\n{}", r.stdout, r.stderr);
    let r = cli(&config, &["restore"]).await;
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(!unschedulable(&c.node(NODE)));
    let said = "node node-a holds no drain slot it could give back";
    assert_eq!(r.stderr.matches(said).count(), 1, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("drain slot leases in namespace kube-shutdown-drain")
            && r.stderr.contains("403"),
        "{}",
        r.stderr
    );
}

/// `status` with the kubelet's credentials and `[fleet] slots`: the slot Leases answer 403 (as a
/// real API server answers `system:node:NAME` outside `kube-node-lease`), and `status` still
/// shows what it knows (the cordon, the marker, the last report, the previous boot) and says why
/// the slots could not be read, naming the 403; it exits 0 (issue 40 item 7: it exited 1 and
/// printed the 403 alone).
#[tokio::test]
async fn status_with_the_kubelets_credentials_shows_the_node_and_why_the_slots_cannot_be_read() {
    let c = Cluster::start(vec![slow_pod(NS, "web", NODE, 0.2)]).await;
    let sentinel = c.dir.path().join("reboot-required");
    std::fs::write(&sentinel, "").unwrap();
    let reboot = format!("[reboot]\nsentinel_file = \"{}\"\n", sentinel.display());
    let config = c.config_file(&format!("system:node:{NODE}"), &format!("{SLOTS}{reboot}"));
    let r = cli(&config, &["drain", "--no-slot"]).await;
    assert!(unschedulable(&c.node(NODE)), "{}\n{}", r.stdout, r.stderr);
    let r = cli(&config, &["status"]).await;
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    for line in [
        "node node-a",
        "  cordoned:      yes",
        "  marker:        written ",
        "  last report:   ",
        "  previous boot: ",
        "  reboot:        needed: ",
        "  drain slots:   cannot be read: ",
    ] {
        assert!(r.stdout.contains(line), "{line:?} missing:\n{}", r.stdout);
    }
    let slots = r
        .stdout
        .lines()
        .find(|l| l.starts_with("  drain slots:"))
        .unwrap();
    assert!(
        slots.contains("403")
            && slots.contains("kube-shutdown-drain-slot-0")
            && slots.contains(
                "the slot Leases in namespace kube-shutdown-drain need the node's own identity"
            ),
        "{slots}"
    );
    let r = cli(&config, &["status", "--output", "json"]).await;
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let status: serde_json::Value =
        serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("{e}: {}", r.stdout));
    assert_eq!(status["cordoned"], json!(true));
    assert!(
        status["marker"].is_object() && status["last_report"].is_object(),
        "{status}"
    );
    assert!(status.get("drain_slots").is_none(), "{status}");
    assert!(
        status["drain_slots_error"]
            .as_str()
            .is_some_and(|e| e.contains("403")),
        "{status}"
    );
}

/// A slot held with a `renewTime` a day ahead of this node's clock is shown as renewed in the
/// future, not "since" a time to come (issue 40 item 7).
#[tokio::test]
async fn status_says_a_slot_renewed_in_the_future_is_so() {
    let c = Cluster::start(vec![]).await;
    let tomorrow = jiff::Timestamp::now() + jiff::SignedDuration::from_hours(24);
    c.server
        .store()
        .upsert(
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": SLOT, "namespace": "kube-shutdown-drain",
                         "labels": {"kube-shutdown-drain/slot-group": "all"}},
            "spec": {"holderIdentity": "node-b/0b0e1d00-0000-4000-8000-0000000000b2",
                     "renewTime": tomorrow.to_string()}}),
        )
        .unwrap();
    let config = c.config_file("admin", SLOTS);
    let r = cli(&config, &["status"]).await;
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let slots = r
        .stdout
        .lines()
        .find(|l| l.starts_with("  drain slots:"))
        .unwrap_or_default();
    assert!(
        slots.contains("held by node-b/0b0e1d00-0000-4000-8000-0000000000b2 renewed at ")
            && slots.contains("in the future of this node's clock (clock skew?)")
            && !slots.contains(" since "),
        "{}",
        r.stdout
    );
}

/// Every command that touches the slots says in its `--help` what it does with them.
#[tokio::test]
async fn every_commands_help_says_what_it_does_with_drain_slots() {
    let c = Cluster::start(vec![]).await;
    let config = c.config_file("admin", "");
    for (command, says) in [
        ("drain", "waits for a drain slot"),
        ("drain", "holds it until `restore` gives it back"),
        ("drain", "--no-slot drains without one"),
        ("restore", "gives back every drain slot"),
        ("reboot", "waits for a drain slot"),
        ("reboot", "held until the restore after the reboot"),
        ("run", "waits for a drain slot"),
        ("status", "shows every drain slot"),
        ("check", "permissions on the slot Leases"),
    ] {
        let r = cli(&config, &[command, "--help"]).await;
        assert_eq!(r.code, 0, "{command}: {}", r.stderr);
        let text = r.stdout.split_whitespace().collect::<Vec<_>>().join(" ");
        assert!(
            text.contains(says),
            "{command} --help lacks {says:?}:\n{}",
            r.stdout
        );
    }
}
