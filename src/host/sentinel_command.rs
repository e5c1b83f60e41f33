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

use crate::reboot::need::Need;

/// The command as an error or a log line shows it: its argv, space-separated, in backquotes.
pub fn shown(argv: &[String]) -> String {
    format!("`{}`", argv.join(" "))
}

/// Runs `argv` once (no shell, no stdin, output discarded), killed if it has not exited
/// within `timeout`, and reads its exit status.
pub async fn check(argv: &[String], timeout: Duration) -> Need {
    let Some((program, args)) = argv.split_first() else {
        return Need::Unknown("the reboot sentinel command is empty".to_string());
    };
    let mut child = match tokio::process::Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
    {
        Ok(child) => child,
        Err(e) => return Need::Unknown(format!("cannot run {}: {e}", shown(argv))),
    };
    let status = match tokio::time::timeout(timeout, child.wait()).await {
        Ok(Ok(status)) => status,
        Ok(Err(e)) => {
            return Need::Unknown(format!("cannot wait for {}: {e}", shown(argv)));
        }
        Err(_) => {
            // Dropping the child kills it (kill_on_drop); tokio reaps it in the background.
            return Need::Unknown(format!(
                "{} did not finish within {}; killed",
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

    #[tokio::test]
    async fn a_run_past_its_timeout_is_killed_and_unknown() {
        let need = check(&argv(&["/bin/sleep", "600"]), Duration::from_millis(200)).await;
        assert_eq!(
            need,
            Need::Unknown("`/bin/sleep 600` did not finish within 200ms; killed".into())
        );
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
