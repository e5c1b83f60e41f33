//! What the daemon tells systemd (`READY=1`, a one-line `STATUS=`) and the journal about its state.
//!
//! `systemctl status kube-shutdown-drain` shows the `STATUS=` line; it is kept current at every
//! state change (waiting, draining, restoring, degraded), never on a timer.
//!
//! `STATUS=` is sent without waiting (`sd_notify(3)`'s datagram, `MSG_DONTWAIT`): a service
//! manager that does not read its notify socket costs a status line, never a stalled drain.
//! `READY=1` is sent once at start and may wait: without it systemd never sees the unit started.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::sync::{Arc, Mutex};

use sd_notify::NotifyState;

/// The daemon's current status line, shared by the main loop and the restore task.
#[derive(Clone, Default)]
pub struct Status {
    inner: Arc<Mutex<StatusInner>>,
}

#[derive(Default)]
struct StatusInner {
    /// The main loop's state ("waiting for a shutdown ...").
    main: String,
    /// The restore task's state while it runs.
    restore: Option<String>,
    /// Why the daemon is degraded (logind's maximum too short, bus lost), if it is.
    degraded: Option<String>,
}

impl Status {
    /// Tells systemd the daemon is ready: called once, right after the lock is first held (or,
    /// started during a shutdown, once it knows it must drain without one).
    pub fn ready(&self) {
        if let Err(e) = sd_notify::notify(&[NotifyState::Ready]) {
            tracing::warn!("cannot send READY=1 to systemd: {e}");
        }
    }

    /// Sets the main state and sends the line.
    pub fn set(&self, main: impl Into<String>) {
        self.update(|s| s.main = main.into());
    }

    /// Sets or clears the restore task's part of the line.
    pub fn set_restore(&self, restore: Option<String>) {
        self.update(|s| s.restore = restore);
    }

    /// Sets or clears the degraded reason.
    pub fn set_degraded(&self, why: Option<String>) {
        self.update(|s| s.degraded = why);
    }

    /// The line as systemd sees it.
    pub fn line(&self) -> String {
        match self.inner.lock() {
            Ok(s) => compose(&s),
            Err(poisoned) => compose(&poisoned.into_inner()),
        }
    }

    fn update(&self, change: impl FnOnce(&mut StatusInner)) {
        let line = {
            let mut guard = match self.inner.lock() {
                Ok(guard) => guard,
                Err(poisoned) => poisoned.into_inner(),
            };
            change(&mut guard);
            compose(&guard)
        };
        if let Err(e) = send_now(&format!("STATUS={line}\n")) {
            tracing::warn!("cannot send STATUS= to systemd: {e}");
        }
    }
}

/// Sends one notification to `NOTIFY_SOCKET` without waiting; nothing when it is unset. A full
/// queue drops the message (`WouldBlock` is not reported: the next state change sends again).
fn send_now(message: &str) -> std::io::Result<()> {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return Ok(());
    };
    let bytes = path.as_encoded_bytes();
    // A leading `@` names a socket in the abstract namespace (sd_notify(3)).
    let address = match bytes.strip_prefix(b"@") {
        Some(name) => SocketAddr::from_abstract_name(name)?,
        None => SocketAddr::from_pathname(&path)?,
    };
    let socket = UnixDatagram::unbound()?;
    socket.set_nonblocking(true)?;
    match socket.send_to_addr(message.as_bytes(), &address) {
        Ok(_) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => Ok(()),
        Err(e) => Err(e),
    }
}

/// One line: "degraded: WHY; MAIN; RESTORE".
fn compose(s: &StatusInner) -> String {
    let mut parts = Vec::with_capacity(3);
    if let Some(why) = &s.degraded {
        parts.push(format!("degraded: {why}"));
    }
    if !s.main.is_empty() {
        parts.push(s.main.clone());
    }
    if let Some(restore) = &s.restore {
        parts.push(restore.clone());
    }
    // systemd reads one line per field; a newline would end STATUS= early.
    parts.join("; ").replace('\n', " ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_puts_degraded_first_and_stays_one_line() {
        let status = Status::default();
        status.set("waiting for a shutdown of node a (budget 120 s)");
        assert_eq!(
            status.line(),
            "waiting for a shutdown of node a (budget 120 s)"
        );
        status.set_degraded(Some("logind allows 5 s\nsee the journal".to_owned()));
        status.set_restore(Some("restoring node a".to_owned()));
        assert_eq!(
            status.line(),
            "degraded: logind allows 5 s see the journal; waiting for a shutdown of node a \
             (budget 120 s); restoring node a"
        );
        status.set_degraded(None);
        status.set_restore(None);
        assert_eq!(
            status.line(),
            "waiting for a shutdown of node a (budget 120 s)"
        );
    }
}
