//! `kube-shutdown-drain run` against the fake logind sending each kind of shutdown in
//! `PrepareForShutdownWithMetadata`: the `[shutdown]` policy per kind (drain, cordon, none,
//! unknown for a logind that names no kind), the kind in the marker, the report and the Events,
//! and the restore after a soft-reboot, which keeps the boot ID (issue 11, item 2).

mod daemon_support;
mod logind;

use std::time::Duration;

use daemon_support::{EVICTED, NODE, STAYING, Setup, World, demo_seed, open_seed, started};
use logind::LogindOptions;
use serde_json::Value;

/// Every pod on the demo node before any drain (sorted).
fn all_pods() -> Vec<String> {
    let mut pods: Vec<String> = demo_seed()
        .iter()
        .filter(|o| o.get("kind").and_then(Value::as_str) == Some("Pod"))
        .filter(|p| p.pointer("/spec/nodeName").and_then(Value::as_str) == Some(NODE))
        .map(|p| {
            format!(
                "{}/{}",
                p.pointer("/metadata/namespace")
                    .and_then(Value::as_str)
                    .unwrap_or_default(),
                p.pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
            )
        })
        .collect();
    pods.sort();
    pods
}

fn setup(shutdown: &str) -> Setup {
    Setup {
        seed: open_seed(),
        config: format!(
            "[drain]\ntimeout = \"15s\"\nretry_interval = \"1s\"\n\
             [daemon]\nrelease_margin = \"2s\"\nrestore_ready_timeout = \"5s\"\n\
             [shutdown]\n{shutdown}\n"
        ),
        ..Setup::default()
    }
}

/// The marker annotation on the node, parsed; `None` when there is none.
/// Accepted eviction requests the fake API server recorded.
fn evictions(world: &World) -> usize {
    world
        .api
        .recorder()
        .matching("POST", "/eviction")
        .iter()
        .filter(|r| r.status < 300)
        .count()
}

/// Accepted PATCHes of the node.
fn node_patches(world: &World) -> usize {
    world
        .api
        .recorder()
        .matching("PATCH", &format!("/api/v1/nodes/{NODE}"))
        .iter()
        .filter(|r| r.status < 300)
        .count()
}

fn messages(world: &World, reason: &str) -> Vec<String> {
    world
        .node_events(reason)
        .iter()
        .filter_map(|e| e.get("message").and_then(Value::as_str).map(str::to_owned))
        .collect()
}

#[tokio::test]
async fn policy_none_for_a_halt_releases_at_once_and_leaves_the_node_alone() {
    let Some(world) = started(setup("halt = \"none\"")).await else {
        return;
    };
    world.rig.start_shutdown("halt").await;
    let outcome = world.expect_released(Duration::from_secs(5)).await;
    assert!(outcome.line.contains("kind=halt"), "{}", outcome.line);
    world
        .expect_until(
            Duration::from_secs(5),
            |w| !w.node_events("DrainSkipped").is_empty(),
            "a DrainSkipped Event says why nothing was done",
        )
        .await;
    let said = messages(&world, "DrainSkipped");
    assert!(
        said.iter()
            .any(|m| m.contains("halt") && m.contains("\"none\"")),
        "{said:?}"
    );
    assert_eq!(node_patches(&world), 0, "the node was never written");
    assert_eq!(evictions(&world), 0, "nothing was evicted");
    assert!(!world.is_cordoned() && !world.is_tainted() && world.marker().is_none());
    let mut pods = world.pods_on_node();
    pods.sort();
    assert_eq!(pods, all_pods());
    assert!(
        world.log().contains("[shutdown] halt = \"none\""),
        "the log names the policy:\n{}",
        world.log()
    );
}

#[tokio::test]
async fn policy_cordon_for_a_power_off_taints_and_cordons_but_evicts_nothing() {
    let Some(world) = started(setup("poweroff = \"cordon\"")).await else {
        return;
    };
    world.rig.power_off().await;
    world.expect_released(Duration::from_secs(10)).await;
    assert!(
        world.is_cordoned() && world.is_tainted(),
        "cordoned and tainted; log:\n{}",
        world.log()
    );
    assert_eq!(evictions(&world), 0, "nothing was evicted");
    let mut pods = world.pods_on_node();
    pods.sort();
    assert_eq!(pods, all_pods());
    let m = world.marker().expect("the marker records the prepare");
    assert_eq!(m["kind"], "power-off", "{m}");
    assert_eq!(m["cordoned"], true, "{m}");
    world
        .expect_until(
            Duration::from_secs(5),
            |w| !w.node_events("DrainSkipped").is_empty(),
            "a DrainSkipped Event",
        )
        .await;
    let said = messages(&world, "DrainSkipped");
    assert!(
        said.iter()
            .any(|m| m.contains("power-off") && m.contains("\"cordon\"")),
        "{said:?}"
    );
    assert!(
        world.node_events("DrainStarted").is_empty(),
        "no drain started"
    );
    assert!(
        world
            .log()
            .contains("logind announced a power-off; cordoning node demo-node-1"),
        "{}",
        world.log()
    );
}

#[tokio::test]
async fn policy_drain_for_a_kexec_records_the_kind_in_marker_report_and_events() {
    // The other kinds say "none": only the kexec's own key can have led to this drain.
    let Some(world) = started(setup(
        "reboot = \"none\"\npoweroff = \"none\"\nhalt = \"none\"\nsoft_reboot = \"none\"\n\
         unknown = \"none\"",
    ))
    .await
    else {
        return;
    };
    world.rig.start_shutdown("kexec").await;
    world.expect_released(Duration::from_secs(15)).await;
    let mut pods = world.pods_on_node();
    pods.sort();
    assert_eq!(pods, STAYING, "log:\n{}", world.log());
    world.assert_drain_requests(&EVICTED);
    assert_eq!(world.marker().expect("a marker")["kind"], "kexec");
    let report = world.expect_report("a report").await;
    assert_eq!(report["kind"], "kexec", "{report}");
    let said = messages(&world, "DrainStarted");
    assert!(said.iter().any(|m| m.contains("kexec")), "{said:?}");
    assert!(world.node_events("DrainSkipped").is_empty());
}

#[tokio::test]
async fn a_logind_that_names_no_kind_gets_the_unknown_policy() {
    let Some(world) = started(Setup {
        logind: LogindOptions {
            metadata: false,
            ..LogindOptions::default()
        },
        ..setup("reboot = \"drain\"\nunknown = \"cordon\"")
    })
    .await
    else {
        return;
    };
    // A reboot, but without the metadata signal: the daemon cannot know it is one.
    world.rig.reboot().await;
    world.expect_released(Duration::from_secs(10)).await;
    assert!(world.is_cordoned(), "log:\n{}", world.log());
    assert_eq!(evictions(&world), 0, "the unknown policy (cordon) applied");
    assert_eq!(world.marker().expect("a marker")["kind"], "unknown");
    assert!(
        world.log().contains("[shutdown] unknown = \"cordon\""),
        "{}",
        world.log()
    );
}

#[tokio::test]
async fn after_a_soft_reboot_the_same_boot_id_still_gets_the_node_restored() {
    let Some(mut world) = started(setup("")).await else {
        return;
    };
    world.rig.start_shutdown("soft-reboot").await;
    world.expect_released(Duration::from_secs(15)).await;
    assert!(world.is_cordoned() && world.is_drained(), "{}", world.log());
    assert_eq!(world.marker().expect("a marker")["kind"], "soft-reboot");
    // The soft-reboot stops userspace and starts it again: logind forgets the shutdown, the
    // kernel and so the boot ID stay. The boot record of this boot holds the soft-reboot: it is
    // judged as the end of a userspace, not taken for a cancel missed while away, so only the
    // marker's kind leads to the restore.
    world.kill_daemon();
    assert!(
        world.recorded_shutdown().is_some(),
        "the shutdown was recorded"
    );
    world.rig.simulate_boot().await;
    let userspace_started = jiff::Timestamp::now();
    world.spawn_daemon();
    world.wait_ready().await;
    // Restored only on a heartbeat of this userspace (the fake's kubelet beats every 10 s): the
    // old kubelet's Ready and heartbeats are newer than the kernel's boot time.
    world
        .expect_until(
            Duration::from_secs(30),
            |w| w.is_restored() && w.marker().is_none(),
            "restored after the soft-reboot (uncordoned, untainted, marker removed)",
        )
        .await;
    let log = world.log();
    let since = log
        .lines()
        .find_map(|l| l.split("after this boot began at ").nth(1))
        .and_then(|t| t.trim().parse::<jiff::Timestamp>().ok())
        .unwrap_or_else(|| panic!("no live-kubelet line:\n{log}"));
    assert!(
        since >= userspace_started,
        "the Ready wait counted from {since}, before this userspace started at \
         {userspace_started}:\n{log}"
    );
    world
        .expect_log(
            "from a soft-reboot of this boot",
            Duration::from_secs(5),
            "the log says why a marker of this boot is restored",
        )
        .await;
    // The boot record judges the userspace before the soft-reboot like a boot: its drain was
    // complete, so no Warning Event.
    let boot = std::fs::read_to_string(world.boot_id_path()).unwrap();
    world
        .expect_log(
            &format!(
                "the userspace of boot {} ended after a complete drain of node demo-node-1 for \
                 the soft-reboot",
                boot.trim()
            ),
            Duration::from_secs(5),
            "the soft-reboot is judged as the end of a userspace",
        )
        .await;
    assert!(
        world.node_events("DrainIncomplete").is_empty()
            && world.node_events("ShutdownWithoutDrain").is_empty()
    );
}

#[tokio::test]
async fn a_reboot_marker_of_this_boot_is_left_alone_at_start() {
    // The contrast to the soft-reboot: the same steps after a reboot's drain (the daemon
    // restarted in the same boot, no boot record, as where the state directory is not
    // writable) restore nothing: a reboot's marker of this boot is the shutdown's.
    let Some(mut world) = started(setup("")).await else {
        return;
    };
    world.rig.reboot().await;
    world.expect_released(Duration::from_secs(15)).await;
    assert_eq!(world.marker().expect("a marker")["kind"], "reboot");
    world.kill_daemon();
    std::fs::remove_file(world.boot_record_path()).expect("the shutdown was recorded");
    world.rig.simulate_boot().await;
    world.spawn_daemon();
    world.wait_ready().await;
    world
        .expect_log(
            "left for the shutdown that wrote it",
            Duration::from_secs(10),
            "the boot restore leaves a this-boot reboot marker",
        )
        .await;
    assert!(world.is_cordoned() && world.marker().is_some());
}
