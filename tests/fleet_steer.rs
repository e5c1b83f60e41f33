//! `fleet hold`, `release`, `pause` and `resume` (issue 43), the binary against the fake API
//! server: each changes exactly what it says (the objects read back, the rest unchanged), says
//! what it changed, refuses clearly without the rights, and a node held by `fleet hold` is held
//! by the daemon's own judgement (`reboot::holds`). The admin is a ServiceAccount bound to the
//! shipped `kube-shutdown-drain-fleet-admin` roles as rbac.yaml's comment shows, so a request
//! those roles do not allow fails the test (`Cluster`'s drop).

mod engine_support;
mod fleet_admin_support;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use engine_support::*;
use fleet_admin_support::{ADMIN, LEASE_NS, NOBODY, cluster, fleet};
use kube_shutdown_drain::config::reboot::from_toml;
use kube_shutdown_drain::config::{Settings, Source};
use kube_shutdown_drain::engine::Engine;
use kube_shutdown_drain::reboot::holds::{Context, Holds, Key, PAUSE_LEASE};
use kube_shutdown_drain::reboot::holds_read::holds;
use kube_shutdown_drain::reboot::window::Windows;
use serde_json::{Value, json};

const HOLD: &str = "kube-shutdown-drain/hold";

/// Every object of the store but `changed`, for "the rest unchanged": what a person or the
/// daemon writes (annotations, labels, spec), not what the fake's kubelets renew every few
/// seconds (Node status, the node Leases in kube-node-lease).
fn others(c: &Cluster, changed: &[(&str, &str)]) -> Vec<Value> {
    let mut all = Vec::new();
    for kind in ["Node", "Lease", "Pod", "Namespace"] {
        for o in c.server.store().list(kind, None) {
            let name = o["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            let ns = o["metadata"]["namespace"].as_str().unwrap_or_default();
            let renewed = kind == "Lease" && ns == "kube-node-lease";
            if !renewed && !changed.iter().any(|(k, n)| *k == kind && *n == name) {
                let m = &o["metadata"];
                all.push(json!([
                    kind,
                    ns,
                    name,
                    m["annotations"],
                    m["labels"],
                    o["spec"]
                ]));
            }
        }
    }
    all
}

fn annotations(node: &Value) -> Value {
    node["metadata"]["annotations"].clone()
}

#[tokio::test]
async fn hold_sets_the_annotation_on_exactly_the_nodes_named_saying_why_who_and_when() {
    let c = cluster(vec![node("node-c")]).await;
    let before = others(&c, &[("Node", NODE), ("Node", "node-c")]);
    let r = fleet(
        &c,
        ADMIN,
        &["hold", NODE, "node-c", "--reason", "db migration"],
    )
    .await;
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    for name in [NODE, "node-c"] {
        let value = c.node(name)["metadata"]["annotations"][HOLD]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(
            value.starts_with(&format!("db migration (by {ADMIN}, ")) && value.ends_with("Z)"),
            "{name}: {value}"
        );
        assert!(
            r.stdout
                .contains(&format!("node {name}: held: {HOLD}={value:?}")),
            "{}",
            r.stdout
        );
        // The daemon's judge names who set it from managedFields: the admin's field manager.
        let managers: Vec<String> = c.node(name)["metadata"]["managedFields"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e.pointer("/fieldsV1/f:metadata/f:annotations").is_some())
            .filter_map(|e| e["manager"].as_str().map(str::to_owned))
            .collect();
        assert_eq!(managers, ["kubectl-shutdown-drain"], "{name}");
    }
    assert_eq!(r.stdout.lines().count(), 2, "{}", r.stdout);
    assert_eq!(others(&c, &[("Node", NODE), ("Node", "node-c")]), before);
    // Held already: its hold stays as it is, and is said.
    let held = c.node(NODE);
    let again = fleet(&c, ADMIN, &["hold", NODE, "--reason", "other"]).await;
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(
        again.stdout.contains("node node-a: held already") && again.stdout.contains("unchanged"),
        "{}",
        again.stdout
    );
    assert_eq!(annotations(&c.node(NODE)), annotations(&held));
}

#[tokio::test]
async fn a_missing_node_is_an_error_naming_it_and_nothing_is_held() {
    let c = cluster(vec![]).await;
    let before = others(&c, &[]);
    let r = fleet(&c, ADMIN, &["hold", NODE, "node-x", "--reason", "r"]).await;
    assert_eq!(r.code, 3, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains("node node-x does not exist") && r.stderr.contains("nothing was changed"),
        "{}",
        r.stderr
    );
    assert_eq!(r.stdout, "");
    assert_eq!(others(&c, &[]), before);
}

#[tokio::test]
async fn release_removes_the_hold_and_says_what_it_removed_and_a_node_not_held_is_said() {
    let c = cluster(vec![]).await;
    c.server
        .store()
        .modify("Node", None, NODE, |n| {
            n["metadata"]["annotations"] = json!({HOLD: "by hand", "keep": "me"})
        })
        .unwrap();
    let before = others(&c, &[("Node", NODE)]);
    let r = fleet(&c, ADMIN, &["release", NODE, OTHER_NODE]).await;
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert_eq!(annotations(&c.node(NODE)), json!({"keep": "me"}));
    assert_eq!(
        r.stdout,
        format!(
            "node {NODE}: released: removed {HOLD}=\"by hand\"\nnode {OTHER_NODE}: not held \
             ({HOLD} absent): unchanged\n"
        )
    );
    assert_eq!(others(&c, &[("Node", NODE)]), before);
}

#[tokio::test]
async fn pause_creates_the_pause_lease_once_and_resume_deletes_it() {
    let c = cluster(vec![]).await;
    let before = others(&c, &[]);
    let r = fleet(&c, ADMIN, &["pause", "--reason", "network upgrade"]).await;
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    let lease = c
        .server
        .store()
        .get("Lease", Some(LEASE_NS), PAUSE_LEASE)
        .expect("the pause Lease exists");
    assert_eq!(lease["spec"]["holderIdentity"], json!(ADMIN));
    assert_eq!(
        lease["metadata"]["annotations"],
        json!({"kube-shutdown-drain/reason": "network upgrade"})
    );
    assert!(
        r.stdout.starts_with(&format!(
            "paused the fleet: created Lease {LEASE_NS}/{PAUSE_LEASE}, by {ADMIN} since "
        )) && r.stdout.trim_end().ends_with(": network upgrade"),
        "{}",
        r.stdout
    );
    assert_eq!(others(&c, &[("Lease", PAUSE_LEASE)]), before);
    // Paused already: said by whom and since when; nothing changes.
    let again = fleet(&c, ADMIN, &["pause", "--reason", "other"]).await;
    assert_eq!(again.code, 0, "{}", again.stderr);
    assert!(
        again.stdout.starts_with(&format!(
            "the fleet is paused already (Lease {LEASE_NS}/{PAUSE_LEASE}), by {ADMIN} since "
        )) && again.stdout.contains("network upgrade: unchanged"),
        "{}",
        again.stdout
    );
    assert_eq!(
        c.server.store().get("Lease", Some(LEASE_NS), PAUSE_LEASE),
        Some(lease)
    );
    let r = fleet(&c, ADMIN, &["resume"]).await;
    assert_eq!(r.code, 0, "{}{}", r.stdout, r.stderr);
    assert!(
        r.stdout.starts_with(&format!(
            "resumed the fleet: deleted Lease {LEASE_NS}/{PAUSE_LEASE}, paused by {ADMIN} since "
        )),
        "{}",
        r.stdout
    );
    assert_eq!(
        c.server.store().get("Lease", Some(LEASE_NS), PAUSE_LEASE),
        None
    );
    assert_eq!(others(&c, &[]), before);
    let r = fleet(&c, ADMIN, &["resume"]).await;
    assert_eq!(
        (r.code, r.stdout.as_str()),
        (
            0,
            "the fleet is not paused (no Lease kube-shutdown-drain/kube-shutdown-drain-pause): \
             unchanged\n"
        )
    );
}

/// Without the roles: a refusal that says which verb on which resource, and which role grants
/// it; exit 1, as every refusal; nothing changed.
#[tokio::test]
async fn without_the_rights_each_command_is_refused_clearly_and_changes_nothing() {
    let c = cluster(vec![]).await;
    c.expect_denials();
    let before = others(&c, &[]);
    let cases: [(&[&str], &str); 4] = [
        (
            &["hold", NODE, "--reason", "r"],
            "cannot get Node node-a: nodes \"node-a\" is forbidden: User \
             \"system:serviceaccount:ops:bob\" cannot get resource \"nodes\"",
        ),
        (
            &["release", NODE],
            "get on nodes was refused: the ClusterRole kube-shutdown-drain-fleet-admin",
        ),
        (
            &["pause", "--reason", "r"],
            "cannot create Lease kube-shutdown-drain/kube-shutdown-drain-pause: ",
        ),
        (
            &["resume"],
            "get on leases was refused: the Role kube-shutdown-drain-fleet-admin in the lease namespace",
        ),
    ];
    for (args, want) in cases {
        let r = fleet(&c, NOBODY, args).await;
        assert_eq!(r.code, 1, "{args:?}: {}{}", r.stdout, r.stderr);
        assert!(r.stderr.contains(want), "{args:?}: {}", r.stderr);
        assert!(r.stderr.contains("forbidden"), "{args:?}: {}", r.stderr);
        assert_eq!(r.stdout, "", "{args:?}");
    }
    assert_eq!(others(&c, &[]), before);
}

/// What holds `node-a` now, as its daemon asks, with its shipped identity.
async fn daemon_holds(c: &Cluster) -> Holds {
    let settings: Arc<Settings> = c.settings("");
    let reboot = from_toml(&Source {
        path: Path::new("/test/config.toml"),
        text: "[reboot]\nupdate_engine = true\n",
    })
    .unwrap();
    let engine = Engine::new(settings.clone()).unwrap();
    let clients = engine.clients().await.unwrap();
    let windows = Windows::any_time();
    let cx = Context::new(&settings, &reboot, &windows, None, None);
    holds(
        clients,
        &cx,
        tokio::time::Instant::now() + Duration::from_secs(5),
    )
    .await
}

#[tokio::test]
async fn a_node_held_by_fleet_hold_is_held_for_its_daemon_and_released_by_fleet_release() {
    let c = cluster(vec![]).await;
    assert!(daemon_holds(&c).await.may_go());
    let r = fleet(&c, ADMIN, &["hold", NODE, "--reason", "kernel bisect"]).await;
    assert_eq!(r.code, 0, "{}", r.stderr);
    let h = daemon_holds(&c).await;
    assert_eq!(h.keys(), [Key::Held], "{h}");
    assert_eq!(
        h.reasons[0].message,
        "node node-a is held by its annotation kube-shutdown-drain/hold (set by field manager \
         kubectl-shutdown-drain): remove the annotation to let it reboot"
    );
    let r = fleet(&c, ADMIN, &["pause", "--reason", "freeze"]).await;
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(daemon_holds(&c).await.keys(), [Key::Held, Key::Paused]);
    for args in [&["release", NODE][..], &["resume"][..]] {
        let r = fleet(&c, ADMIN, args).await;
        assert_eq!(r.code, 0, "{}", r.stderr);
    }
    let h = daemon_holds(&c).await;
    assert!(h.may_go(), "{h}");
}

/// The kubeconfig as kubectl finds it: `--kubeconfig` over `KUBECONFIG`, `--context` over the
/// current context; a context that does not exist is a configuration error naming it.
#[tokio::test]
async fn the_kubeconfig_and_context_are_found_as_kubectl_finds_them() {
    let c = cluster(vec![]).await;
    c.expect_denials();
    let alice: PathBuf = c.kubeconfig(ADMIN);
    // KUBECONFIG names bob (refused); --kubeconfig names alice: alice's rights apply.
    let r = fleet(
        &c,
        NOBODY,
        &["release", NODE, "--kubeconfig", alice.to_str().unwrap()],
    )
    .await;
    assert_eq!(r.code, 0, "{}", r.stderr);
    // The view's flags are not the steering's: a usage error, before any request.
    let r = fleet(&c, ADMIN, &["--watch", "release", NODE]).await;
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("fleet release: -o, --watch and --all are for the view"),
        "{}",
        r.stderr
    );
    let r = fleet(&c, ADMIN, &["release", NODE, "--context", "staging"]).await;
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains(&format!(
            "kubeconfig {} has no context \"staging\" (contexts: fake)",
            alice.display()
        )),
        "{}",
        r.stderr
    );
}
