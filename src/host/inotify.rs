//! An inotify instance read on the tokio runtime: the task sleeps until the kernel reports an
//! event, no timer runs. Shared by the watches on logind's schedule directory
//! (`crate::scheduled`) and on the reboot sentinel (`sentinel_file`); each arms its own watches
//! on [`Events::inotify`].

use std::io;
use std::os::fd::{AsFd, AsRawFd, RawFd};

use nix::sys::inotify::{Inotify, InotifyEvent};
use tokio::io::Interest;
use tokio::io::unix::AsyncFd;

/// The inotify instance as tokio's `AsyncFd` wants it.
struct Fd(Inotify);

impl AsRawFd for Fd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_fd().as_raw_fd()
    }
}

/// An inotify instance registered with the runtime's I/O driver.
pub struct Events {
    fd: AsyncFd<Fd>,
}

impl Events {
    /// Registers `inotify` (made with `IN_NONBLOCK`, as the driver needs).
    pub fn register(inotify: Inotify) -> io::Result<Events> {
        // SAFETY: `Fd` owns the inotify descriptor (nix's `Inotify` holds it as an `OwnedFd`)
        // and only hands out its number, so it stays open, and is the same descriptor, until
        // the `AsyncFd` that owns the `Fd` is dropped; nothing else can close or replace it.
        let fd = unsafe { AsyncFd::register_with_interest(Fd(inotify), Interest::READABLE) }?;
        Ok(Events { fd })
    }

    /// The instance, to add and remove watches on.
    pub fn inotify(&self) -> &Inotify {
        &self.fd.get_ref().0
    }

    /// Waits until events are ready and returns them all (at least one).
    pub async fn next(&self) -> io::Result<Vec<InotifyEvent>> {
        loop {
            let mut guard = self.fd.readable().await?;
            match guard.try_io(|fd| fd.get_ref().0.read_events().map_err(io::Error::from)) {
                Ok(read) => return read,
                // Not readable after all: wait again.
                Err(_would_block) => continue,
            }
        }
    }
}
