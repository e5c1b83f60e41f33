//! Hooks (issue 42 items 3 and 4): `kube-shutdown-drain run` against the fake API server and a
//! fake logind on a private bus. A reboot the node asks for runs its pre-drain command hook with
//! the slot held, then waits for an operator's pre-drain hook annotation (the test plays the
//! controller) and drains only once it is gone; the boot after runs the post-restore hook. A
//! failing command or an annotation past `[fleet] hook_timeout` calls the reboot off and gives
//! the slot back. On logind's path no command hook runs, and the annotation holds the evictions
//! until half of the budget.

mod daemon_support;
mod logind;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use daemon_support::{NODE, Setup, World, open_seed};
use serde_json::{Value, json};

const HOOK: &str = "pre-drain.hook.kube-shutdown-drain.io/rook";

/// A sentinel file and the hooks' output, in one temporary directory.
fn scratch() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::Builder::new()
        .prefix("ksd-hooks-")
        .tempdir()
        .expect("a temp dir");
    let sentinel = dir.path().join("reboot-required");
    (dir, sentinel)
}

/// A `[[hook]]` entry running `script` under /bin/sh.
fn hook(at: &str, script: &str) -> String {
    format!(
        "[[hook]]\nat = \"{at}\"\ncommand = [\"/bin/sh\", \"-c\", {}]\ntimeout = \"10s\"\n",
        json!(script)
    )
}

/// A hook that writes its environment to `file` and says `line` last.
fn writes_env(at: &str, file: &Path, line: &str) -> String {
    hook(
        at,
        &format!(
            "echo \"$KSD_NODE|$KSD_KIND|$KSD_HOOK_AT|$KSD_REASON\" > {}; echo {line}",
            file.display()
        ),
    )
}

/// The daemon with `config`; a reboot called off before its drain is restored as a cancel,
/// whose wait for a prepare that lands late lasts 3 s here instead of the minute.
async fn world(config: String) -> Option<World> {
    let mut w = World::start(Setup {
        seed: open_seed(),
        config,
        ..Setup::default()
    })
    .await?;
    let wrap = |bin: &Path, _log: &std::fs::File| {
        let mut c = std::process::Command::new(bin);
        c.env_remove("JOURNAL_STREAM")
            .env("KUBE_SHUTDOWN_DRAIN_LANDING_WINDOW", "3s");
        c
    };
    w.spawn_daemon_into(Some(&wrap));
    w.wait_ready().await;
    Some(w)
}

fn annotate(w: &World) {
    w.api
        .store()
        .modify("Node", None, NODE, |n| {
            n["metadata"]["annotations"][HOOK] = json!("moving the osd replicas")
        })
        .unwrap();
}

fn evictions(w: &World) -> usize {
    w.api.recorder().count("POST", "/eviction")
}

fn condition(w: &World, kind: &str) -> Option<Value> {
    w.node()["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == kind)
        .cloned()
}

#[tokio::test]
async fn a_reboot_runs_its_pre_drain_hook_and_drains_only_once_the_operators_hook_is_removed() {
    let (dir, sentinel) = scratch();
    let pre = dir.path().join("pre");
    let post = dir.path().join("post");
    let config = format!(
        "[reboot]\nsentinel_file = \"{}\"\n[fleet]\nslots = 1\n[node]\n\
         lifecycle_conditions = true\n{}{}",
        sentinel.display(),
        writes_env("pre-drain", &pre, "replicas moved"),
        writes_env("post-restore", &post, "replicas back"),
    );
    let Some(mut w) = world(config).await else {
        return;
    };
    annotate(&w);
    std::fs::write(&sentinel, "").unwrap();
    w.expect_log(
        &format!("node {NODE} waits for its pre-drain hooks (rook) to be removed before it drains"),
        Duration::from_secs(30),
        "the annotation holds the drain, said",
    )
    .await;
    // The command hook ran first, with the slot held and its environment.
    assert_eq!(
        std::fs::read_to_string(&pre).unwrap_or_default(),
        format!("{NODE}|reboot|pre-drain|reboot the node asked for ([reboot])\n"),
        "{}",
        w.log()
    );
    assert!(w.slot_holder().is_some_and(|h| h.starts_with(NODE)));
    let log = w.log();
    assert!(
        log.contains("pre-drain hook `/bin/sh -c echo")
            && log.contains("(last line: \"replicas moved\")"),
        "{log}"
    );
    // Said on the Node too, beside the wait.
    let said = |w: &World| {
        w.node_events("WaitingForHooks").len() == 1
            && condition(w, "MaintenancePlanned").is_some_and(|c| c["reason"] == "WaitingForHooks")
    };
    assert!(
        w.wait_until(Duration::from_secs(10), said).await,
        "no WaitingForHooks Event or condition: {log}"
    );
    // The controller takes 3 s; nothing is drained, or cordoned, meanwhile.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(evictions(&w), 0, "{}", w.log());
    assert!(!w.is_cordoned(), "{}", w.log());
    w.api
        .store()
        .modify("Node", None, NODE, |n| {
            n["metadata"]["annotations"]
                .as_object_mut()
                .unwrap()
                .remove(HOOK);
        })
        .unwrap();
    let outcome = w
        .rig
        .wait_outcome(0, Duration::from_secs(40))
        .await
        .unwrap_or_else(|| panic!("logind never rebooted; log:\n{}", w.log()));
    assert_eq!(outcome.what, "released", "{}", outcome.line);
    assert!(w.is_drained() && evictions(&w) > 0, "{}", w.log());
    assert!(!post.exists(), "no post-restore hook before the restore");
    // The boot after: restored, then the post-restore hook, told the drain's reason.
    std::fs::remove_file(&sentinel).unwrap();
    w.boot_again().await;
    w.expect_restored(Duration::from_secs(20), "the boot after restores the node")
        .await;
    assert!(
        w.wait_until(Duration::from_secs(20), |_| post.exists())
            .await,
        "the post-restore hook never ran: {}",
        w.log()
    );
    assert_eq!(
        std::fs::read_to_string(&post).unwrap(),
        format!("{NODE}|reboot|post-restore|reboot the node asked for ([reboot])\n")
    );
}

#[tokio::test]
async fn a_failing_pre_drain_hook_calls_the_reboot_off_naming_it_and_its_last_line() {
    let (_dir, sentinel) = scratch();
    let config = format!(
        "[reboot]\nsentinel_file = \"{}\"\n[fleet]\nslots = 1\n{}",
        sentinel.display(),
        hook(
            "pre-drain",
            "echo checking; echo 'volume pvc-1 busy' >&2; exit 3"
        ),
    );
    let Some(w) = world(config).await else {
        return;
    };
    std::fs::write(&sentinel, "").unwrap();
    w.expect_log(
        &format!(
            "not rebooting node {NODE} now: the reboot of node {NODE} is called off: its \
             pre-drain hook `/bin/sh -c echo checking; echo 'volume pvc-1 busy' >&2; exit 3` \
             exited 3 (last line: \"volume pvc-1 busy\")"
        ),
        Duration::from_secs(30),
        "the failed hook calls the reboot off, named with its last line",
    )
    .await;
    assert_eq!(w.node_events("PreDrainHookFailed").len(), 1, "{}", w.log());
    assert!(
        w.wait_until(Duration::from_secs(15), |w| w.slot_holder().is_none())
            .await,
        "the slot never went back: {}",
        w.log()
    );
    assert_eq!(evictions(&w), 0, "{}", w.log());
    assert!(
        !w.is_cordoned() && w.rig.outcomes().is_empty(),
        "{}",
        w.log()
    );
}

#[tokio::test]
async fn an_operators_hook_left_past_hook_timeout_calls_the_reboot_off_and_the_slot_goes_back() {
    let (_dir, sentinel) = scratch();
    let config = format!(
        "[reboot]\nsentinel_file = \"{}\"\n[fleet]\nslots = 1\nhook_timeout = \"2s\"\n",
        sentinel.display(),
    );
    let Some(w) = world(config).await else {
        return;
    };
    annotate(&w);
    std::fs::write(&sentinel, "").unwrap();
    w.expect_log(
        &format!(
            "the reboot of node {NODE} is called off: its pre-drain hooks (rook) were still \
             there after [fleet] hook_timeout (2s)"
        ),
        Duration::from_secs(30),
        "the annotation past hook_timeout calls the reboot off",
    )
    .await;
    assert!(
        w.wait_until(Duration::from_secs(15), |w| w.slot_holder().is_none())
            .await,
        "the slot never went back: {}",
        w.log()
    );
    assert_eq!(evictions(&w), 0, "{}", w.log());
    assert!(
        !w.is_cordoned() && w.rig.outcomes().is_empty(),
        "{}",
        w.log()
    );
    assert_eq!(w.node_events("PreDrainHookFailed").len(), 1, "{}", w.log());
}

/// logind's budget is not the hooks': no command runs, and the annotation holds the evictions
/// only until half of the budget (6 s here), as a prepare that cannot cordon does.
#[tokio::test]
async fn on_loginds_path_no_command_runs_and_the_annotation_holds_the_drain_until_half_the_budget()
{
    let (dir, _) = scratch();
    let pre = dir.path().join("pre");
    let config = format!(
        "[drain]\ntimeout = \"6s\"\n[daemon]\nrelease_margin = \"1s\"\n{}",
        writes_env("pre-drain", &pre, "never"),
    );
    let Some(w) = world(config).await else {
        return;
    };
    annotate(&w);
    w.rig.reboot().await;
    let asked = Instant::now();
    let mut first_eviction = None;
    while asked.elapsed() < Duration::from_secs(15) && first_eviction.is_none() {
        if evictions(&w) > 0 {
            first_eviction = Some(asked.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let after = first_eviction.unwrap_or_else(|| panic!("no eviction; log:\n{}", w.log()));
    assert!(
        after >= Duration::from_millis(2500),
        "evicted {after:?} after the announcement, before half the budget: {}",
        w.log()
    );
    w.rig
        .wait_outcome(0, Duration::from_secs(20))
        .await
        .unwrap_or_else(|| panic!("logind never rebooted; log:\n{}", w.log()));
    let log = w.log();
    assert!(
        log.contains(&format!(
            "half of the drain's time of node {NODE} is gone and its pre-drain hooks (rook) are \
             still there; draining without them"
        )),
        "{log}"
    );
    assert!(!pre.exists(), "a command hook ran on logind's path: {log}");
    assert_eq!(w.node_events("WaitingForHooks").len(), 1, "{log}");
}
