//! The logind delay inhibitor as the daemon holds it. The lock is a file descriptor: logind keeps
//! the shutdown waiting while any copy of it is open (`INHIBITOR_LOCKS.md`), so closing it is the
//! release. The fd lives in [`Inhibitor`], whose own small thread closes it at the shutdown's
//! release deadline whatever the rest of the process is doing: a journald that stopped reading,
//! a frozen disk, a hung credential plugin or a runtime whose workers are all blocked cannot
//! hold a shutdown past the budget. The thread does nothing but wait on a condition variable and
//! close the fd (no logging, no allocation, no I/O), so nothing it waits for can block it.

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

/// A delay lock logind granted, as the fd that holds it. Dropping it closes the fd, which
/// releases the lock at once; every path out of a scope that owns it (return, `?`, panic
/// unwinding) releases it.
#[derive(Debug)]
pub struct InhibitorLock {
    fd: OwnedFd,
}

impl InhibitorLock {
    /// Takes the fd logind sent and marks it close-on-exec: zbus receives fds without
    /// `MSG_CMSG_CLOEXEC` (zbus 6 `fd_recvmsg`), so a program this process runs (an exec
    /// credential plugin, a sentinel command) would otherwise inherit the lock, and it, or a
    /// child it leaves behind, would hold the shutdown up after the daemon released it.
    pub(crate) fn new(fd: OwnedFd) -> InhibitorLock {
        use nix::fcntl::{F_GETFD, F_SETFD, FdFlag, fcntl};
        let flags = fcntl(&fd, F_GETFD).map_or(FdFlag::empty(), FdFlag::from_bits_truncate);
        if let Err(e) = fcntl(&fd, F_SETFD(flags | FdFlag::FD_CLOEXEC)) {
            tracing::warn!(
                "cannot mark the inhibitor lock's fd {} close-on-exec: {e}; a program the \
                 daemon runs may inherit it",
                fd.as_raw_fd()
            );
        }
        InhibitorLock { fd }
    }

    /// The lock's fd number, for log lines.
    pub fn raw_fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// Releases the lock now; the same as dropping it, but reads better at the call site.
    pub fn release(self) {
        drop(self);
    }
}

/// The daemon's one inhibitor slot and the thread that releases it at the deadline.
pub struct Inhibitor {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    changed: Condvar,
}

#[derive(Default)]
struct State {
    lock: Option<InhibitorLock>,
    /// When the thread closes the lock (a shutdown's release deadline); `None`: never on its own.
    release_at: Option<Instant>,
    /// The thread closed the lock at `release_at` (read and reset by [`Inhibitor::guard_fired`]).
    fired: bool,
    /// The daemon is gone: the thread ends.
    done: bool,
}

/// What [`Inhibitor::release`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// A lock was held and is closed now.
    Now,
    /// The guard thread had already closed it at the release deadline.
    AtDeadline,
    /// None was held.
    NoneHeld,
}

impl Inhibitor {
    /// Starts the guard thread; it sleeps until a release deadline is set.
    pub fn start() -> std::io::Result<Inhibitor> {
        let shared = Arc::new(Shared {
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        });
        let theirs = shared.clone();
        std::thread::Builder::new()
            .name("inhibitor-guard".to_owned())
            .spawn(move || guard(&theirs))?;
        Ok(Inhibitor { shared })
    }

    /// Holds `lock`; a lock held before (from before a bus reconnect) is closed right after the
    /// new one is in place, so logind never sees a moment without one.
    pub fn hold(&self, lock: InhibitorLock) {
        let old = self.state().lock.replace(lock);
        drop(old);
    }

    /// Whether a lock is held.
    pub fn is_held(&self) -> bool {
        self.state().lock.is_some()
    }

    /// Arms the guard: the lock is closed at `at` unless released before. A later call moves
    /// the deadline (logind's maximum read again at the shutdown).
    pub fn release_by(&self, at: Instant) {
        self.state().release_at = Some(at);
        self.shared.changed.notify_all();
    }

    /// Disarms the guard (a cancelled shutdown: the lock stays for the next one).
    pub fn disarm(&self) {
        self.state().release_at = None;
        self.shared.changed.notify_all();
    }

    /// Closes the lock now and disarms the guard.
    pub fn release(&self) -> Released {
        let (lock, fired) = {
            let mut state = self.state();
            state.release_at = None;
            (state.lock.take(), std::mem::take(&mut state.fired))
        };
        match (lock, fired) {
            (Some(lock), _) => {
                lock.release();
                Released::Now
            }
            (None, true) => Released::AtDeadline,
            (None, false) => Released::NoneHeld,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        lock_state(&self.shared)
    }
}

impl Drop for Inhibitor {
    fn drop(&mut self) {
        let lock = {
            let mut state = self.state();
            state.done = true;
            state.lock.take()
        };
        drop(lock);
        self.shared.changed.notify_all();
    }
}

/// A poisoned mutex still guards a valid `State` (no code under the lock can leave it half
/// changed): use it.
fn lock_state(shared: &Shared) -> MutexGuard<'_, State> {
    shared.state.lock().unwrap_or_else(|p| p.into_inner())
}

/// The guard thread: waits for a release deadline and closes the lock when it passes.
fn guard(shared: &Shared) {
    let mut state = lock_state(shared);
    loop {
        if state.done {
            return;
        }
        state = match state.release_at {
            None => shared
                .changed
                .wait(state)
                .unwrap_or_else(|p| p.into_inner()),
            Some(at) => {
                let now = Instant::now();
                if now >= at {
                    state.release_at = None;
                    if let Some(lock) = state.lock.take() {
                        state.fired = true;
                        lock.release();
                    }
                    continue;
                }
                shared
                    .changed
                    .wait_timeout(state, at - now)
                    .unwrap_or_else(|p| p.into_inner())
                    .0
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A lock whose release the test can see: the read end of a pipe reports hang-up once the
    /// write end (the "lock") is closed, as logind sees it.
    fn pipe_lock() -> (InhibitorLock, OwnedFd) {
        // Close-on-exec: a child another unit test of this process starts (the sentinel
        // command's tests run programs) must not inherit the write end and keep the pipe open
        // past the lock's close.
        let (read, write) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).expect("pipe");
        (InhibitorLock::new(write), read)
    }

    #[test]
    fn a_lock_is_not_inherited_by_the_programs_the_daemon_runs() {
        // In a process of its own: until InhibitorLock::new marks it, the pipe's write end is
        // inheritable, and a program another test of this binary starts in that moment (a
        // sentinel command, a credential plugin) would keep it open past the release.
        const ALONE: &str = "KUBE_SHUTDOWN_DRAIN_TEST_LOCK_ALONE";
        if std::env::var_os(ALONE).is_none() {
            let name = "host::lock::tests::a_lock_is_not_inherited_by_the_programs_the_daemon_runs";
            let run = std::process::Command::new(std::env::current_exe().expect("test binary"))
                .args([name, "--exact", "--test-threads=1"])
                .env(ALONE, "1")
                .output()
                .expect("the test binary again");
            let said = String::from_utf8_lossy(&run.stdout);
            assert!(
                run.status.success() && said.contains("1 passed"),
                "alone: {said}{}",
                String::from_utf8_lossy(&run.stderr)
            );
            return;
        }
        // A pipe made without O_CLOEXEC, as zbus hands logind's fd over.
        let (read, write) = nix::unistd::pipe().expect("pipe");
        let lock = InhibitorLock::new(write);
        let flags = nix::fcntl::fcntl(&lock.fd, nix::fcntl::F_GETFD).expect("F_GETFD");
        assert!(
            nix::fcntl::FdFlag::from_bits_truncate(flags).contains(nix::fcntl::FdFlag::FD_CLOEXEC),
            "the lock's fd would pass to a child across exec"
        );
        // And a child started now does not keep the lock open once it is released.
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .expect("sleep");
        lock.release();
        let closed = hung_up(&read);
        child.kill().ok();
        child.wait().ok();
        assert!(closed, "a child kept the released lock open");
    }

    fn hung_up(read: &OwnedFd) -> bool {
        use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
        use std::os::fd::AsFd;
        let mut fds = [PollFd::new(read.as_fd(), PollFlags::empty())];
        poll(&mut fds, PollTimeout::ZERO).expect("poll");
        fds[0]
            .revents()
            .is_some_and(|r| r.contains(PollFlags::POLLHUP))
    }

    fn wait_hung_up(read: &OwnedFd, within: Duration) -> bool {
        let until = Instant::now() + within;
        while Instant::now() < until {
            if hung_up(read) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        hung_up(read)
    }

    #[test]
    fn the_guard_closes_the_lock_at_its_deadline_while_the_holder_is_blocked() {
        let inhibitor = Inhibitor::start().expect("thread");
        let (lock, read) = pipe_lock();
        inhibitor.hold(lock);
        inhibitor.release_by(Instant::now() + Duration::from_millis(50));
        // The holder is "blocked": it does nothing until long after the deadline.
        assert!(!hung_up(&read), "released before its deadline");
        assert!(
            wait_hung_up(&read, Duration::from_secs(5)),
            "the guard thread did not release the lock"
        );
        assert!(!inhibitor.is_held());
        assert_eq!(inhibitor.release(), Released::AtDeadline);
        assert_eq!(inhibitor.release(), Released::NoneHeld);
    }

    #[test]
    fn a_release_before_the_deadline_disarms_the_guard() {
        let inhibitor = Inhibitor::start().expect("thread");
        let (lock, read) = pipe_lock();
        inhibitor.hold(lock);
        inhibitor.release_by(Instant::now() + Duration::from_millis(30));
        assert_eq!(inhibitor.release(), Released::Now);
        assert!(hung_up(&read));
        // The next lock, taken after a cancel, is not closed by the old deadline.
        let (next, next_read) = pipe_lock();
        inhibitor.hold(next);
        std::thread::sleep(Duration::from_millis(80));
        assert!(
            !hung_up(&next_read),
            "a stale deadline released the next lock"
        );
        assert!(inhibitor.is_held());
    }

    #[test]
    fn disarming_keeps_the_lock_and_holding_a_new_one_closes_the_old() {
        let inhibitor = Inhibitor::start().expect("thread");
        let (lock, read) = pipe_lock();
        inhibitor.hold(lock);
        inhibitor.release_by(Instant::now() + Duration::from_millis(30));
        inhibitor.disarm();
        std::thread::sleep(Duration::from_millis(80));
        assert!(!hung_up(&read), "a disarmed guard released the lock");
        let (new, new_read) = pipe_lock();
        inhibitor.hold(new);
        assert!(
            hung_up(&read),
            "the old lock stays open after the new one is held"
        );
        assert!(!hung_up(&new_read));
        drop(inhibitor);
        assert!(
            hung_up(&new_read),
            "dropping the inhibitor releases its lock"
        );
    }
}
