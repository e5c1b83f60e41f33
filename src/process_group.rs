//! A child process that leads a process group of its own, so that ending it ends what it started
//! too: the one way this program runs a command it may have to stop (exec credential plugins,
//! `crate::api::exec`; the reboot sentinel command, `crate::reboot::sentinel_command`).
//!
//! [`spawn`] starts the command with `setpgid(0, 0)` (tokio's `process_group(0)`) and returns a
//! [`Group`] beside the child. Dropping the `Group` sends SIGKILL to the whole group
//! (`killpg(2)`), the command's own children included (a shell's pipeline or `&` job); the child
//! itself is also `kill_on_drop`. A caller that has reaped the command (`wait` returned) calls
//! [`Group::disarm`] first: once the leader is reaped and the last member of its group is gone,
//! the kernel may hand the number to a new process, which the signal must not reach. So a
//! command that exits by itself leaves whatever it put in the background to itself; one that
//! runs past its time, or whose caller gives up on it, is ended with everything it started.

use std::io;

use tokio::process::{Child, Command};

/// Starts `command` as the leader of a new process group, killed when its caller stops waiting
/// (`kill_on_drop`): the child, and the [`Group`] whose drop kills the group.
pub fn spawn(command: &mut Command) -> io::Result<(Child, Group)> {
    let child = command.process_group(0).kill_on_drop(true).spawn()?;
    let group = Group(child.id());
    Ok((child, group))
}

/// A running command's process group (the command leads it): killed on drop unless disarmed.
#[derive(Debug)]
#[must_use = "dropping the group kills the command and everything it started"]
pub struct Group(Option<u32>);

impl Group {
    /// Forgets the group: the command was reaped, its number may name another process soon.
    pub fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        let Some(pid) = self.0.and_then(|p| i32::try_from(p).ok()) else {
            return;
        };
        // The leader is not reaped yet (a zombie at worst), so its number still names this group.
        let _ = nix::sys::signal::killpg(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}
