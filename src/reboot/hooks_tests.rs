//! The command hooks as real processes: one that passes (and sees its environment), one that
//! fails (its last line kept), one that hangs (killed at its timeout with the child it forked),
//! one that forks a child and exits (not waited for); the order and the stop of the pre-drain
//! hooks, and the post-restore hooks all run.

use std::path::Path;
use std::time::Duration;

use super::*;

/// A deadline only against a hang (a timeout that does not work), never a timed assertion.
const HANG_GUARD: Duration = Duration::from_secs(60);

const ENV: HookEnv<'static> = HookEnv {
    node: "node-1",
    reason: "reboot the node asked for ([reboot])",
    kind: "reboot",
};

fn hook(at: HookAt, script: &str, timeout: Duration) -> Hook {
    Hook {
        at,
        argv: vec!["/bin/sh".into(), "-c".into(), script.into()],
        timeout,
    }
}

async fn guarded<T>(run: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(HANG_GUARD, run)
        .await
        .expect("the hook outlived its timeout (hang guard)")
}

/// Whether process `pid` has ended (gone, or a zombie its new parent has not reaped yet).
fn ended(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
    }
}

fn pid_in(file: &Path) -> i32 {
    std::fs::read_to_string(file)
        .expect("the hook wrote its child's pid")
        .trim()
        .parse()
        .unwrap()
}

fn kill(pid: i32) {
    let pid = nix::unistd::Pid::from_raw(pid);
    let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
}

#[tokio::test]
async fn a_hook_that_exits_0_passes_and_sees_the_node_the_reason_the_kind_and_when() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("env");
    let script = format!(
        "echo \"$KSD_NODE|$KSD_REASON|$KSD_KIND|$KSD_HOOK_AT|${{NOTIFY_SOCKET:-none}}\" > {}; \
         echo first; echo '  the last line  '; echo",
        out.display()
    );
    let ran = guarded(run(&hook(HookAt::PreDrain, &script, HANG_GUARD), ENV)).await;
    assert!(ran.passed(), "{ran}");
    assert_eq!(ran.last_line.as_deref(), Some("the last line"));
    assert_eq!(
        std::fs::read_to_string(&out).unwrap(),
        "node-1|reboot the node asked for ([reboot])|reboot|pre-drain|none\n"
    );
}

#[tokio::test]
async fn a_hook_that_fails_says_its_status_and_its_last_line_from_stdout_or_stderr() {
    let ran = guarded(run(
        &hook(
            HookAt::PreDrain,
            "echo starting; echo 'replica not moved: volume busy' >&2; exit 3",
            HANG_GUARD,
        ),
        ENV,
    ))
    .await;
    assert_eq!(ran.end, End::Exited(3));
    assert_eq!(
        ran.to_string(),
        "pre-drain hook `/bin/sh -c echo starting; echo 'replica not moved: volume busy' >&2; \
         exit 3` exited 3 (last line: \"replica not moved: volume busy\")"
    );
    let missing = Hook {
        at: HookAt::PostRestore,
        argv: vec!["/nonexistent/hook".into()],
        timeout: HANG_GUARD,
    };
    let ran = guarded(run(&missing, ENV)).await;
    assert!(matches!(ran.end, End::CannotRun(_)), "{ran}");
    assert!(
        ran.to_string()
            .starts_with("post-restore hook `/nonexistent/hook` could not run: "),
        "{ran}"
    );
}

/// A long line is kept only to its first bytes: the output cannot grow the daemon.
#[tokio::test]
async fn the_last_line_is_cut_however_long_the_output() {
    let ran = guarded(run(
        &hook(
            HookAt::PreDrain,
            "head -c 100000 /dev/zero | tr '\\0' x; exit 1",
            HANG_GUARD,
        ),
        ENV,
    ))
    .await;
    let line = ran.last_line.expect("a line");
    assert!(line.len() <= crate::text::OUTSIDE_MAX, "{}", line.len());
    assert!(line.starts_with("xxxx"), "{line}");
}

/// A hook that hangs is killed at its timeout with the child it forked, which holds its
/// output pipe too: the run ends at the timeout, not when the child would.
#[tokio::test]
async fn a_hook_past_its_timeout_is_killed_with_the_children_it_forked() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("child.pid");
    let script = format!(
        "sleep 600 & echo $! > {}; echo waiting for the replica; wait",
        pid_file.display()
    );
    let ran = guarded(run(
        &hook(HookAt::PreDrain, &script, Duration::from_secs(2)),
        ENV,
    ))
    .await;
    assert_eq!(ran.end, End::TimedOut(Duration::from_secs(2)));
    assert_eq!(ran.last_line.as_deref(), Some("waiting for the replica"));
    assert!(
        ran.to_string().contains("did not finish within 2s"),
        "{ran}"
    );
    let pid = pid_in(&pid_file);
    let gone = async {
        while !ended(pid) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    if tokio::time::timeout(Duration::from_secs(10), gone)
        .await
        .is_err()
    {
        kill(pid);
        panic!("the child {pid} the hook forked outlived the hook's timeout");
    }
}

/// A hook that forks a child into the background and exits passes at once: the child holds
/// the output pipe open, and the run does not wait for it (nor kill it).
#[tokio::test]
async fn a_hook_that_forks_and_exits_passes_without_waiting_for_its_child() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("child.pid");
    let script = format!(
        "sleep 600 & echo $! > {}; echo handed over",
        pid_file.display()
    );
    let started = std::time::Instant::now();
    let ran = guarded(run(&hook(HookAt::PreDrain, &script, HANG_GUARD), ENV)).await;
    let pid = pid_in(&pid_file);
    let alive = !ended(pid);
    kill(pid);
    assert!(ran.passed(), "{ran}");
    assert_eq!(ran.last_line.as_deref(), Some("handed over"));
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the run waited for the forked child"
    );
    assert!(
        alive,
        "the child of a hook that exited by itself was killed"
    );
}

/// The pre-drain hooks run in their order and stop at the first that fails; the post-restore
/// ones are left out there, and all run after the restore whatever each does.
#[tokio::test]
async fn pre_drain_hooks_stop_at_the_first_failure_and_post_restore_hooks_all_run() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("log");
    let step = |at, name: &str, status: u8| {
        hook(
            at,
            &format!("echo {name} >> {}; exit {status}", log.display()),
            HANG_GUARD,
        )
    };
    let hooks = [
        step(HookAt::PreDrain, "a", 0),
        step(HookAt::PostRestore, "p1", 1),
        step(HookAt::PreDrain, "b", 2),
        step(HookAt::PreDrain, "c", 0),
        step(HookAt::PostRestore, "p2", 0),
    ];
    let failed = guarded(pre_drain(&hooks, ENV)).await.unwrap_err();
    assert_eq!(failed.end, End::Exited(2));
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "a\nb\n");
    std::fs::remove_file(&log).unwrap();
    let runs = guarded(post_restore(&hooks, ENV)).await;
    let ends: Vec<_> = runs.iter().map(|r| r.end.clone()).collect();
    assert_eq!(ends, [End::Exited(1), End::Passed]);
    assert_eq!(std::fs::read_to_string(&log).unwrap(), "p1\np2\n");
    let passed = guarded(pre_drain(&hooks[..1], ENV)).await.unwrap();
    assert_eq!(passed.len(), 1);
}

#[test]
fn the_pending_record_is_read_once_and_gone_after() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(take_pending(dir.path(), "node-1"), None);
    mark_pending(dir.path(), ENV).unwrap();
    let pending = take_pending(dir.path(), "node-1").expect("the record");
    assert_eq!(pending.reason, ENV.reason);
    assert_eq!(pending.kind, "reboot");
    assert_eq!(take_pending(dir.path(), "node-1"), None);
}
