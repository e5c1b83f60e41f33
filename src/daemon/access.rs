//! What the daemon's API work is built from: the settings and the process's one credential
//! cache (`api::Credentials`). Every engine the daemon makes (drains, restores, the boot
//! record's Event) shares that cache, which is fetched once the daemon is ready and fetched
//! again before it expires ([`Access::keep_fresh`]): a shutdown then finds a live credential and
//! does not run an exec credential plugin on its way, where a slow one would cost the drain its
//! budget (the plugin is still bounded and killed at the request timeout when it must run).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::api::{ClientError, Credentials};
use crate::backoff::Backoff;
use crate::config::Settings;
use crate::engine::{Engine, Error};

/// First wait after a failed fetch; doubled up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_secs(5);
/// Longest wait between failed fetches: a plugin that fails is run at most twice a minute.
const RETRY_MAX: Duration = Duration::from_secs(30);

/// The settings and the credential cache, cheap to clone.
#[derive(Clone)]
pub(crate) struct Access {
    pub(crate) settings: Arc<Settings>,
    /// `None` while the kubeconfig cannot be read: each engine then reads it itself and says
    /// why it cannot.
    credentials: Option<Credentials>,
}

impl Access {
    /// Reads the kubeconfig once for the credential cache; no credential is fetched yet.
    pub(crate) fn new(settings: Arc<Settings>) -> Access {
        let credentials = Engine::new(settings.clone())
            .ok()
            .map(|engine| engine.credentials().clone());
        Access {
            settings,
            credentials,
        }
    }

    /// [`Access::engine_now`] with the kubeconfig read on tokio's blocking pool, within the
    /// request timeout: a frozen file system holds a pool thread, never the one thread that runs
    /// the daemon's loop and its tasks.
    pub(crate) async fn engine(&self) -> Result<Engine, Error> {
        let access = self.clone();
        let path = self.settings.kubeconfig.clone();
        let not_read = |why: String| Error::Client(ClientError::NotRead { path, why });
        let read = tokio::task::spawn_blocking(move || access.engine_now());
        match tokio::time::timeout(self.settings.request_timeout, read).await {
            Ok(Ok(built)) => built,
            Ok(Err(e)) => Err(not_read(e.to_string())),
            Err(_) => Err(not_read(format!(
                "no answer from its file system within {} s",
                self.settings.request_timeout.as_secs()
            ))),
        }
    }

    /// An engine on the shared cache (a kubeconfig changed since to name another credential
    /// gets a cache of its own, `Credentials::for_kubeconfig`), the kubeconfig read on this
    /// thread.
    pub(crate) fn engine_now(&self) -> Result<Engine, Error> {
        match &self.credentials {
            Some(credentials) => Engine::with_credentials(self.settings.clone(), credentials),
            None => Engine::new(self.settings.clone()),
        }
    }

    /// Keeps the credential fetched: at once, then again `within` before it expires, so a
    /// shutdown (which may take `within`) never waits for a fetch. Sleeps between fetches with
    /// no timer at all when the credential names no expiry (a token file is read again when
    /// used, at most once a minute; the kubeconfig holds other kinds as they are). Runs until aborted.
    pub(crate) async fn keep_fresh(self, within: Duration) {
        let Some(credentials) = self.credentials.filter(Credentials::is_fetched) else {
            return;
        };
        let node = &self.settings.node_name;
        let mut backoff = Backoff::between(RETRY_FIRST, RETRY_MAX);
        loop {
            let deadline = Instant::now() + credentials.limit();
            match credentials
                .refresh_if_expiring_within(within, deadline)
                .await
            {
                Ok(fetched) => {
                    if fetched {
                        tracing::debug!("fetched the {} for node {node}", credentials.describe());
                    }
                    backoff = Backoff::between(RETRY_FIRST, RETRY_MAX);
                }
                Err(e) => {
                    let wait = backoff.next_pause();
                    tracing::warn!(
                        "cannot fetch the credential of node {node} ahead of a shutdown: {e}; \
                         trying again in {} s",
                        wait.as_secs()
                    );
                    tokio::time::sleep(wait).await;
                    continue;
                }
            }
            let Some(expires) = credentials.expires_at() else {
                return;
            };
            tokio::time::sleep(until_refresh(jiff::Timestamp::now(), expires, within)).await;
        }
    }
}

/// How long to sleep before fetching a credential that expires at `expires` anew, `within`
/// before it does; at least a second, so a credential that comes back already expiring is not
/// fetched in a tight loop. Pure.
fn until_refresh(now: jiff::Timestamp, expires: jiff::Timestamp, within: Duration) -> Duration {
    let left = expires
        .duration_since(now)
        .try_into()
        .unwrap_or(Duration::ZERO);
    left.saturating_sub(within).max(Duration::from_secs(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refresh_comes_within_before_the_expiry_and_never_in_a_tight_loop() {
        let now: jiff::Timestamp = "2026-12-01T10:00:00Z".parse().unwrap();
        let expires: jiff::Timestamp = "2026-12-01T11:00:00Z".parse().unwrap();
        let within = Duration::from_secs(150);
        assert_eq!(
            until_refresh(now, expires, within),
            Duration::from_secs(3600 - 150)
        );
        // Already inside the window, or expired: a second, not zero.
        let soon: jiff::Timestamp = "2026-12-01T10:01:00Z".parse().unwrap();
        assert_eq!(until_refresh(now, soon, within), Duration::from_secs(1));
        let past: jiff::Timestamp = "2026-12-01T09:00:00Z".parse().unwrap();
        assert_eq!(until_refresh(now, past, within), Duration::from_secs(1));
    }
}
