//! The command hooks of `[[hook]]`, run for the drains the node decides (its own reboots, the
//! update agent's, `kube-shutdown-drain reboot` by hand; never for a shutdown logind announces,
//! whose budget is not theirs): `pre-drain` ones by the one procedure of a reboot
//! (`super::procedure`) with the drain slot held, before the drain, where the first that fails
//! calls the reboot off; `post-restore` ones by the daemon's restore (`crate::daemon::restore`),
//! where a failure is a Warning Event and nothing else.
//!
//! Each hook runs without a shell, stdin from /dev/null, stdout and stderr into one pipe of
//! which only the last line is kept (bounded, then cut to `text::OUTSIDE_MAX`), in a process
//! group of its own ([`crate::process_group`]): at its `timeout`, or when its caller gives up,
//! the group is killed with everything the hook started. A hook that exits by itself leaves
//! what it put in the background to itself. Its environment is the daemon's, without systemd's
//! notification socket, plus [`ENV_NODE`], [`ENV_REASON`], [`ENV_KIND`] and [`ENV_AT`].
//!
//! A drain whose pre-drain hooks passed leaves a record, [`PENDING_FILE`] in the state
//! directory (its reason and kind), when post-restore hooks are configured: the restore that
//! undoes that drain, in this boot or the next, runs them and removes it ([`take_pending`]). So
//! post-restore hooks follow exactly the drains whose pre-drain hooks ran, and never a shutdown
//! logind announced on its own.

use std::fmt;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use tokio::net::unix::pipe;

use crate::config::hooks::{Hook, HookAt};
use crate::process_group;

/// The node's name.
pub const ENV_NODE: &str = "KSD_NODE";
/// Why the node drains (the marker's reason).
pub const ENV_REASON: &str = "KSD_REASON";
/// The kind of shutdown the drain is for, as `[shutdown]` names it (`reboot`, `poweroff`).
pub const ENV_KIND: &str = "KSD_KIND";
/// When the hook runs: `pre-drain` or `post-restore`.
pub const ENV_AT: &str = "KSD_HOOK_AT";

/// The most bytes of one output line kept while it is read; the rest of that line is dropped.
const LINE_KEPT: usize = 4096;
/// systemd's variables for the daemon alone: a hook must not speak for the service.
const NOT_PASSED: [&str; 3] = ["NOTIFY_SOCKET", "WATCHDOG_PID", "WATCHDOG_USEC"];

/// What a hook's environment says.
#[derive(Debug, Clone, Copy)]
pub struct HookEnv<'a> {
    pub node: &'a str,
    pub reason: &'a str,
    /// As `[shutdown]` names it (`ShutdownKind::config_key`).
    pub kind: &'a str,
}

/// The record of a drain whose pre-drain hooks passed, in the state directory.
pub const PENDING_FILE: &str = "post-restore-hooks.json";

/// What the post-restore hooks of a drain are told about it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Pending {
    pub reason: String,
    pub kind: String,
}

/// Records in `state_dir` that the drain of `env` is to be followed by the post-restore hooks.
pub fn mark_pending(
    state_dir: &Path,
    env: HookEnv<'_>,
) -> Result<(), crate::state_file::JsonError> {
    let pending = Pending {
        reason: env.reason.to_string(),
        kind: env.kind.to_string(),
    };
    crate::state_file::write_json(state_dir, PENDING_FILE, &pending).map(drop)
}

/// The record [`mark_pending`] left, removed as it is read; `None` without one. A record that
/// cannot be read is said and removed: no hook runs for it.
pub fn take_pending(state_dir: &Path, node: &str) -> Option<Pending> {
    let path = state_dir.join(PENDING_FILE);
    let read = crate::state_file::read_json::<Pending>(&path);
    if let Err(e) = std::fs::remove_file(&path)
        && e.kind() != std::io::ErrorKind::NotFound
    {
        tracing::warn!("cannot remove {} of node {node}: {e}", path.display());
    }
    match read {
        Ok(pending) => pending,
        Err(e) => {
            tracing::warn!("no post-restore hook runs for node {node}: {e}");
            None
        }
    }
}

/// How a hook ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum End {
    /// Exit status 0.
    Passed,
    Exited(i32),
    Signalled(i32),
    /// Still running at its timeout: killed with its process group.
    TimedOut(Duration),
    /// It could not be started (or waited for): the error.
    CannotRun(String),
}

/// One run of a hook: which, how it ended and the last line it wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookRun {
    pub at: HookAt,
    /// The command as shown: its argv in backquotes.
    pub hook: String,
    pub end: End,
    /// The last non-empty line of its stdout and stderr, cut to `text::OUTSIDE_MAX`.
    pub last_line: Option<String>,
}

impl HookRun {
    pub fn passed(&self) -> bool {
        self.end == End::Passed
    }
}

impl fmt::Display for HookRun {
    /// "pre-drain hook `/bin/x a` exited 3 (last line: \"...\")".
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} hook {} ", self.at.as_str(), self.hook)?;
        match &self.end {
            End::Passed => f.write_str("passed")?,
            End::Exited(code) => write!(f, "exited {code}")?,
            End::Signalled(signal) => write!(f, "was killed by signal {signal}")?,
            End::TimedOut(t) => write!(
                f,
                "did not finish within {}; killed with the processes it started",
                crate::config::format_duration(*t)
            )?,
            End::CannotRun(e) => write!(f, "could not run: {e}")?,
        }
        match &self.last_line {
            Some(line) => write!(f, " (last line: {:?})", crate::text::escaped(line)),
            None => f.write_str(" (no output)"),
        }
    }
}

/// Runs the `pre-drain` hooks of `hooks` in their order, each after the last passed; the first
/// that does not pass ends the run (`Err`). `Ok`: the runs, all passed.
pub async fn pre_drain(hooks: &[Hook], env: HookEnv<'_>) -> Result<Vec<HookRun>, HookRun> {
    let mut passed = Vec::new();
    for hook in hooks.iter().filter(|h| h.at == HookAt::PreDrain) {
        let ran = run(hook, env).await;
        if !ran.passed() {
            return Err(ran);
        }
        passed.push(ran);
    }
    Ok(passed)
}

/// Runs every `post-restore` hook of `hooks` in their order, whatever the others did.
pub async fn post_restore(hooks: &[Hook], env: HookEnv<'_>) -> Vec<HookRun> {
    let mut runs = Vec::new();
    for hook in hooks.iter().filter(|h| h.at == HookAt::PostRestore) {
        runs.push(run(hook, env).await);
    }
    runs
}

/// Runs one hook within its timeout, in a process group of its own.
pub async fn run(hook: &Hook, env: HookEnv<'_>) -> HookRun {
    let hook_shown = crate::reboot::sentinel_command::shown(&hook.argv);
    let ran = |end, last_line| HookRun {
        at: hook.at,
        hook: hook_shown.clone(),
        end,
        last_line,
    };
    let spawned = spawn(hook, env);
    let (mut child, group, output) = match spawned {
        Ok(spawned) => spawned,
        Err(e) => return ran(End::CannotRun(e.to_string()), None),
    };
    let mut last = LastLine::default();
    let waited = tokio::time::timeout(hook.timeout, async {
        let mut open = true;
        loop {
            tokio::select! {
                status = child.wait() => return status,
                readable = output.readable(), if open => {
                    open = readable.is_ok() && last.read_from(&output);
                }
            }
        }
    })
    .await;
    let end = match waited {
        Ok(Ok(status)) => {
            // Reaped: its process group may be gone and its number free again.
            group.disarm();
            // What it wrote before it exited is in the pipe: read it without waiting for an
            // end of file a background child holding the pipe would keep away.
            last.read_from(&output);
            ended(status)
        }
        Ok(Err(e)) => End::CannotRun(format!("cannot wait for it: {e}")),
        Err(_) => {
            // Dropping the group kills it, the hook and what it forked.
            drop(group);
            last.read_from(&output);
            End::TimedOut(hook.timeout)
        }
    };
    ran(end, last.line())
}

/// Starts `hook` as the leader of a process group, its stdout and stderr into one pipe.
fn spawn(
    hook: &Hook,
    env: HookEnv<'_>,
) -> std::io::Result<(tokio::process::Child, process_group::Group, pipe::Receiver)> {
    let (program, args) = hook
        .argv
        .split_first()
        .ok_or_else(|| std::io::Error::other("the command is empty"))?;
    let (read, write) = nix::unistd::pipe()?;
    let write_too: OwnedFd = write.try_clone()?;
    let mut command = tokio::process::Command::new(program);
    command
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::from(write))
        .stderr(Stdio::from(write_too))
        .env(ENV_NODE, env.node)
        .env(ENV_REASON, env.reason)
        .env(ENV_KIND, env.kind)
        .env(ENV_AT, hook.at.as_str());
    for name in NOT_PASSED {
        command.env_remove(name);
    }
    let (child, group) = process_group::spawn(&mut command)?;
    // The command holds the pipe's write ends; only the hook (and what it starts) may now.
    drop(command);
    let output = pipe::Receiver::from_owned_fd(read)?;
    Ok((child, group, output))
}

fn ended(status: ExitStatus) -> End {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(0), _) => End::Passed,
        (Some(code), _) => End::Exited(code),
        (None, Some(signal)) => End::Signalled(signal),
        (None, None) => End::CannotRun(format!("ended as {status}")),
    }
}

/// The last non-empty line of a stream, read in pieces with bounded memory.
#[derive(Debug, Default)]
struct LastLine {
    /// The line being read (at most [`LINE_KEPT`] bytes of it).
    current: Vec<u8>,
    /// The last complete non-empty line.
    complete: Vec<u8>,
}

impl LastLine {
    /// Reads what `pipe` holds now, without waiting; false at its end or on an error.
    fn read_from(&mut self, pipe: &pipe::Receiver) -> bool {
        let mut buf = [0u8; 4096];
        loop {
            match pipe.try_read(&mut buf) {
                Ok(0) => return false,
                Ok(n) => self.push(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return false,
            }
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        for &b in bytes {
            if b == b'\n' {
                if !self.current.trim_ascii().is_empty() {
                    self.complete = std::mem::take(&mut self.current);
                }
                self.current.clear();
            } else if self.current.len() < LINE_KEPT {
                self.current.push(b);
            }
        }
    }

    /// The last non-empty line: one left without its newline, else the last complete one.
    fn line(&self) -> Option<String> {
        let line = if self.current.trim_ascii().is_empty() {
            &self.complete
        } else {
            &self.current
        };
        let text = String::from_utf8_lossy(line.trim_ascii());
        (!text.is_empty()).then(|| crate::text::outside(&text))
    }
}

#[cfg(test)]
#[path = "hooks_tests.rs"]
mod tests;
