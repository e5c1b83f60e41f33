//! SIGTERM and SIGINT: the service manager (or a terminal) wants the daemon gone.

use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::daemon::service::DaemonError;

/// SIGTERM or SIGINT: the service manager (or a terminal) wants the daemon gone.
pub(crate) struct StopSignals {
    term: Signal,
    int: Signal,
}

impl StopSignals {
    pub(crate) fn install() -> Result<StopSignals, DaemonError> {
        let term =
            signal(SignalKind::terminate()).map_err(|source| DaemonError::Signals { source })?;
        let int =
            signal(SignalKind::interrupt()).map_err(|source| DaemonError::Signals { source })?;
        Ok(StopSignals { term, int })
    }

    /// Resolves with the signal's name.
    pub(crate) async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "sigterm",
            _ = self.int.recv() => "sigint",
        }
    }
}
