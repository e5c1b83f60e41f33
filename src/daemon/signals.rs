//! The signals the daemon acts on: SIGTERM and SIGINT (the service manager, or a terminal, wants
//! it gone), SIGHUP, and SIGUSR1, which opens the reboot gate for a while (`daemon::gate`; sent
//! by `kube-shutdown-drain reboot`; without a gate it changes nothing).
//!
//! SIGHUP is logged and otherwise ignored: the daemon re-reads logind's `InhibitDelayMaxUSec`
//! at every shutdown, and its own configuration only at start, because a configuration changed
//! under a drain in progress could change what the drain already recorded on the Node (the taint
//! key, the marker's rules). `systemctl restart kube-shutdown-drain` applies a changed config.
//! Without a handler SIGHUP's default action would kill the daemon and with it the lock.

use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::daemon::phase::StopSignal;

/// What a signal asks of the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Asked {
    /// SIGTERM or SIGINT.
    Stop(StopSignal),
    /// SIGHUP.
    Hangup,
    /// SIGUSR1: `kube-shutdown-drain reboot` asks the reboot gate to open (`daemon::gate`).
    Pass,
}

/// The installed handlers.
pub(crate) struct Signals {
    term: Signal,
    int: Signal,
    hup: Signal,
    usr1: Signal,
}

impl Signals {
    pub(crate) fn install() -> std::io::Result<Signals> {
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
            usr1: signal(SignalKind::user_defined1())?,
        })
    }

    /// The next signal.
    pub(crate) async fn recv(&mut self) -> Asked {
        tokio::select! {
            _ = self.term.recv() => Asked::Stop(StopSignal::Term),
            _ = self.int.recv() => Asked::Stop(StopSignal::Int),
            _ = self.hup.recv() => Asked::Hangup,
            _ = self.usr1.recv() => Asked::Pass,
        }
    }
}
