//! `[reboot] sentinel_command`: a program run without a shell, every `check_interval`, within
//! `command_timeout`, whose exit status says whether the node needs a reboot. The statuses are
//! those of dnf's `needs-restarting -r` (dnf-plugins-core: exit 1 when a reboot is needed, 0
//! when not): 1 is needed, 0 is not needed, and anything else (another status, a signal, a
//! program that cannot be started, a run past its timeout) is unknown, said naming the command,
//! and never counts as needed (kured issue 976: a missing command rebooted nodes in a loop).
//! Run by the daemon's reboot follower (`crate::daemon::reboot`).

use std::process::Stdio;
use std::time::Duration;

use tokio::sync::watch;

use crate::process_group;
use crate::reboot::need::Need;

/// The command as an error or a log line shows it: its argv, space-separated, in backquotes.
pub fn shown(argv: &[String]) -> String {
    format!("`{}`", argv.join(" "))
}

/// Runs `argv` once (no shell, no stdin, output discarded) in a process group of its own,
/// which is killed, with everything the command started, if it has not exited within `timeout`
/// or when this future is dropped ([`crate::process_group`]), and reads its exit status.
pub async fn check(argv: &[String], timeout: Duration) -> Need {
    let Some((program, args)) = argv.split_first() else {
        return Need::Unknown("the reboot sentinel command is empty".to_string());
    };
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let (mut child, group) = match process_group::spawn(&mut command) {
        Ok(spawned) => spawned,
        Err(e) => return Need::Unknown(format!("cannot run {}: {e}", shown(argv))),
    };
    let status = match tokio::time::timeout(timeout, child.wait()).await {
        Ok(Ok(status)) => {
            // Reaped: its process group may be gone and its number free again.
            group.disarm();
            status
        }
        Ok(Err(e)) => {
            return Need::Unknown(format!("cannot wait for {}: {e}", shown(argv)));
        }
        Err(_) => {
            // Dropping the group kills it, the command and what it forked; tokio reaps the
            // command in the background.
            drop(group);
            return Need::Unknown(format!(
                "{} did not finish within {}; killed with the processes it started",
                shown(argv),
                crate::config::format_duration(timeout)
            ));
        }
    };
    match status.code() {
        Some(1) => Need::Needed(format!("{} exited 1", shown(argv))),
        Some(0) => Need::NotNeeded(format!("{} exited 0", shown(argv))),
        Some(code) => Need::Unknown(format!(
            "{} exited {code}; only 1 (needed) and 0 (not needed) are understood",
            shown(argv)
        )),
        None => {
            use std::os::unix::process::ExitStatusExt;
            let signal = status.signal().map_or("?".to_string(), |s| s.to_string());
            Need::Unknown(format!("{} was killed by signal {signal}", shown(argv)))
        }
    }
}

/// Runs [`check`] now and then every `interval` (a run that overruns delays the next, none is
/// skipped into a burst), publishing each answer on `tx`; returns when every receiver is gone.
pub async fn run_every(
    argv: Vec<String>,
    interval: Duration,
    timeout: Duration,
    tx: watch::Sender<Need>,
) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = ticks.tick() => {}
            () = tx.closed() => return,
        }
        let need = check(&argv, timeout).await;
        if tx.send(need).is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(args: &[&str]) -> Vec<String> {
        args.iter().map(|a| a.to_string()).collect()
    }

    const LONG: Duration = Duration::from_secs(60);

    #[tokio::test]
    async fn exit_1_is_needed_0_not_needed_and_anything_else_unknown_naming_the_command() {
        let cases = [
            (
                argv(&["/bin/sh", "-c", "exit 1"]),
                Need::Needed("`/bin/sh -c exit 1` exited 1".into()),
            ),
            (
                argv(&["/bin/sh", "-c", "exit 0"]),
                Need::NotNeeded("`/bin/sh -c exit 0` exited 0".into()),
            ),
            (
                argv(&["/bin/sh", "-c", "exit 2"]),
                Need::Unknown(
                    "`/bin/sh -c exit 2` exited 2; only 1 (needed) and 0 (not needed) are \
                     understood"
                        .into(),
                ),
            ),
            (
                argv(&["/bin/sh", "-c", "exit 255"]),
                Need::Unknown(
                    "`/bin/sh -c exit 255` exited 255; only 1 (needed) and 0 (not needed) are \
                     understood"
                        .into(),
                ),
            ),
            (
                argv(&["/bin/sh", "-c", "kill -9 $$"]),
                Need::Unknown("`/bin/sh -c kill -9 $$` was killed by signal 9".into()),
            ),
        ];
        for (command, expected) in cases {
            assert_eq!(check(&command, LONG).await, expected);
        }
    }

    /// kured issue 976: a sentinel command that is missing must not read as "needed".
    #[tokio::test]
    async fn a_missing_program_is_unknown_never_needed() {
        let need = check(&argv(&["/nonexistent/needs-restarting", "-r"]), LONG).await;
        let Need::Unknown(why) = &need else {
            panic!("{need:?}");
        };
        assert!(
            why.starts_with("cannot run `/nonexistent/needs-restarting -r`: "),
            "{why}"
        );
    }

    /// A deadline only against a hang (a timeout that does not work), never a timed assertion.
    const HANG_GUARD: Duration = Duration::from_secs(60);

    #[tokio::test]
    async fn a_run_past_its_timeout_is_killed_and_unknown() {
        let sleep = argv(&["/bin/sleep", "600"]);
        let run = check(&sleep, Duration::from_millis(200));
        let need = tokio::time::timeout(HANG_GUARD, run)
            .await
            .expect("the command outlived its timeout (hang guard)");
        assert_eq!(
            need,
            Need::Unknown(
                "`/bin/sleep 600` did not finish within 200ms; killed with the processes it \
                 started"
                    .into()
            )
        );
    }

    /// Whether process `pid` has ended (gone, or a zombie its new parent has not reaped yet).
    fn ended(pid: i32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => true,
            // The state follows the command's name in parentheses: `PID (COMM) S ...`.
            Ok(stat) => stat
                .rsplit_once(") ")
                .is_some_and(|(_, rest)| rest.starts_with('Z') || rest.starts_with('X')),
        }
    }

    /// A command that forks a child and hangs: at the timeout the child goes with it, not only
    /// the command (issue 40 item 12: one stray process per `check_interval`).
    #[tokio::test]
    async fn a_run_past_its_timeout_ends_the_children_it_forked_too() {
        let dir = tempfile::tempdir().unwrap();
        let pid_file = dir.path().join("child.pid");
        let script = format!("sleep 600 & echo $! > {}; wait", pid_file.display());
        let command = argv(&["/bin/sh", "-c", &script]);
        let run = check(&command, Duration::from_secs(2));
        let need = tokio::time::timeout(HANG_GUARD, run)
            .await
            .expect("the command outlived its timeout (hang guard)");
        assert!(
            matches!(&need, Need::Unknown(why) if why.contains("did not finish")),
            "{need:?}"
        );
        let pid: i32 = std::fs::read_to_string(&pid_file)
            .expect("the command wrote its child's pid")
            .trim()
            .parse()
            .unwrap();
        let gone = async {
            while !ended(pid) {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        let killed = tokio::time::timeout(Duration::from_secs(10), gone).await;
        if killed.is_err() {
            // Do not leave it behind for the rest of the suite.
            let pid = nix::unistd::Pid::from_raw(pid);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGKILL);
            panic!("the child {pid} the command forked outlived the command's timeout");
        }
    }

    #[tokio::test]
    async fn run_every_publishes_each_answer_and_stops_when_nobody_listens() {
        let (tx, mut rx) = watch::channel(Need::Unknown("not run yet".into()));
        let task = tokio::spawn(run_every(
            argv(&["/bin/sh", "-c", "exit 1"]),
            Duration::from_secs(3600),
            LONG,
            tx,
        ));
        tokio::time::timeout(LONG, rx.changed())
            .await
            .expect("no answer (hang guard)")
            .unwrap();
        assert!(rx.borrow().is_needed());
        drop(rx);
        tokio::time::timeout(LONG, task)
            .await
            .expect("run_every kept running without receivers (hang guard)")
            .unwrap();
    }
}
