//! The credentials the program fetches itself instead of leaving them to kube: the current
//! user's `tokenFile` and exec credential plugin ([`super::exec`]). kube reads a token file with
//! an unbounded `read_to_string` (a FIFO hangs it, `/dev/zero` fills memory) and keeps its
//! trailing newline, which makes the header invalid; here the file is read like every other
//! file we read (`config::file::read_text`: regular, at most 1 MiB, opened without blocking,
//! fstat-checked) and trimmed of surrounding whitespace, as client-go's `fileTokenSource` does
//! (`transport/token_source.go`), and read again at most once a minute like there.
//!
//! [`Credentials`] is a cache shared by every request of a [`super::Clients`] (the
//! `Authorization` header is set per request, [`super::authorized`]) and, if the caller keeps
//! it, by later clients too: a long-lived process (the daemon) fetches early with
//! [`Credentials::prefetch`] and refreshes before expiry with
//! [`Credentials::refresh_if_expiring_within`], so a shutdown does not wait for a plugin. A 401
//! answer marks a plugin's credential stale, and the next request runs the plugin again (as
//! client-go's exec authenticator does). The credentials the kubeconfig holds as they are go on
//! each request the same way: an inline token, a user name and password (basic auth), an `oidc`
//! auth provider's `id-token` (used as it is, unrefreshed, as kube did without its `oidc`
//! feature). Other auth providers (`gcp`, `azure`: kubectl dropped both in 1.26 for their exec
//! plugins) are refused with the plugin to use. Client certificates are the TLS connection's
//! ([`super::tls`]). Which credential applies follows kube's precedence (auth provider, user
//! name and password, token, token file, exec).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::HeaderValue;
use kube::config::{AuthInfo, AuthProviderConfig, Kubeconfig};
use secrecy::{ExposeSecret, SecretString};
use tokio::time::Instant;

use super::exec::{ExecError, ExecPlugin, Issued};
use crate::config::file::{FileError, read_text};
use crate::config::kubeconfig::current_user;

/// How long a token read from a file is used before the file is read again (client-go's
/// `fileTokenSource` period).
const TOKEN_FILE_PERIOD: Duration = Duration::from_secs(60);
/// A plugin's token is fetched anew this long before it expires, so no request is sent with a
/// token that expires on the way.
const EXPIRY_LEEWAY: Duration = Duration::from_secs(10);

/// A credential could not be fetched. Names the file or the command, never a secret.
#[derive(Debug, thiserror::Error)]
pub enum CredentialError {
    #[error(transparent)]
    Exec(#[from] ExecError),
    #[error("{0}")]
    TokenFile(FileError),
    #[error("token file {path} (kubeconfig {kubeconfig}) holds no token")]
    EmptyTokenFile { path: PathBuf, kubeconfig: PathBuf },
    #[error(
        "the token of {0} holds characters an HTTP header may not carry (not shown: it is a secret)"
    )]
    BadToken(String),
    #[error("no credential from {0} before the deadline")]
    Deadline(String),
    /// The kubeconfig's credential cannot be used; the whole reason.
    #[error("{0}")]
    Refused(String),
}

/// Where the current user's credential comes from.
#[derive(Debug, Clone, PartialEq)]
enum Source {
    /// No header: no credential, or only the client certificate of the TLS connection.
    None,
    /// A header the kubeconfig holds as it is (marked sensitive: never printed), and what it is.
    Fixed {
        header: HeaderValue,
        what: String,
    },
    /// A credential this program cannot use, and why.
    Refused(String),
    TokenFile {
        path: PathBuf,
        kubeconfig: PathBuf,
    },
    Exec(ExecPlugin),
}

impl Source {
    /// The source for `user`, by kube's precedence.
    fn of(user: Option<&AuthInfo>, kubeconfig: &Kubeconfig, path: &Path) -> Source {
        let Some(user) = user else {
            return Source::None;
        };
        if let Some(provider) = &user.auth_provider {
            return Source::provider(provider, path);
        }
        if let (Some(name), Some(password)) = (&user.username, &user.password) {
            use base64::Engine as _;
            let pair = format!("{name}:{}", password.expose_secret());
            let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
            return Source::fixed(format!("Basic {encoded}"), "user name and password", path);
        }
        if let Some(token) = &user.token {
            let bearer = format!("Bearer {}", token.expose_secret());
            return Source::fixed(bearer, "token", path);
        }
        if let Some(file) = &user.token_file {
            return Source::TokenFile {
                path: PathBuf::from(file),
                kubeconfig: path.to_path_buf(),
            };
        }
        ExecPlugin::of(user, kubeconfig, path).map_or(Source::None, Source::Exec)
    }

    /// An `Authorization` header the kubeconfig at `path` holds (`what`), or why it is unusable.
    fn fixed(value: String, what: &str, path: &Path) -> Source {
        let what = format!("the {what} of kubeconfig {}", path.display());
        match HeaderValue::try_from(value) {
            Ok(mut header) => {
                header.set_sensitive(true);
                Source::Fixed { header, what }
            }
            Err(_) => Source::Refused(CredentialError::BadToken(what).to_string()),
        }
    }

    /// An auth provider's credential: `oidc`'s `id-token` as it is, else refused (kube's
    /// `token_from_provider` does the same without its `oidc` and `oauth` features; its `gcp`
    /// branch ran `cmd-path` on the calling thread).
    fn provider(provider: &AuthProviderConfig, path: &Path) -> Source {
        let file = path.display();
        let plugin = match provider.name.as_str() {
            "oidc" => {
                return match provider.config.get("id-token") {
                    Some(token) => Source::fixed(format!("Bearer {token}"), "oidc id-token", path),
                    None => Source::Refused(format!(
                        "kubeconfig {file}: the oidc auth provider has no id-token"
                    )),
                };
            }
            "gcp" => "gke-gcloud-auth-plugin",
            "azure" => "kubelogin",
            _ => "the provider's",
        };
        Source::Refused(format!(
            "kubeconfig {file}: auth provider `{}` is not supported (kubectl dropped its auth \
             providers but oidc in 1.26); use {plugin} exec credential plugin",
            provider.name
        ))
    }

    /// What it is, for messages: `exec credential plugin CMD`, `token file PATH`.
    fn describe(&self) -> String {
        match self {
            Source::None => "the kubeconfig".to_owned(),
            Source::Fixed { what, .. } => what.clone(),
            Source::Refused(why) => why.clone(),
            Source::TokenFile { path, .. } => format!("token file {}", path.display()),
            Source::Exec(plugin) => format!("exec credential plugin {}", plugin.command()),
        }
    }
}

/// A credential held, and when it was fetched.
#[derive(Clone)]
struct Held {
    issued: Issued,
    fetched: Instant,
}

/// The cache. Cheap to clone (shared).
#[derive(Clone)]
pub struct Credentials {
    inner: Arc<Inner>,
}

struct Inner {
    source: Source,
    /// The longest a plugin may run (the request timeout), unless the caller's deadline is
    /// nearer.
    limit: Duration,
    held: Mutex<Option<Held>>,
    /// A 401 answered a request that carried the held credential.
    stale: AtomicBool,
    /// One fetch at a time; the others wait for its result.
    fetching: tokio::sync::Mutex<()>,
}

impl Credentials {
    /// The cache for the current user of `kubeconfig` (read from `path`). No I/O.
    pub fn new(kubeconfig: &Kubeconfig, path: &Path, limit: Duration) -> Credentials {
        Credentials {
            inner: Arc::new(Inner {
                source: Source::of(current_user(kubeconfig), kubeconfig, path),
                limit,
                held: Mutex::new(None),
                stale: AtomicBool::new(false),
                fetching: tokio::sync::Mutex::new(()),
            }),
        }
    }

    /// This cache when `kubeconfig` still names the same token file or plugin, else a new one
    /// for it (the kubeconfig changed since).
    pub fn for_kubeconfig(&self, kubeconfig: &Kubeconfig, path: &Path) -> Credentials {
        let source = Source::of(current_user(kubeconfig), kubeconfig, path);
        if source == self.inner.source {
            self.clone()
        } else {
            Credentials::new(kubeconfig, path, self.inner.limit)
        }
    }

    /// Whether the program fetches these credentials (a token file or an exec plugin) rather than
    /// finding them in the kubeconfig as they are.
    pub fn is_fetched(&self) -> bool {
        matches!(
            self.inner.source,
            Source::TokenFile { .. } | Source::Exec(_)
        )
    }

    /// What they are, for messages (`exec credential plugin /usr/bin/x`, `token file /p`).
    pub fn describe(&self) -> String {
        self.inner.source.describe()
    }

    /// The longest one fetch may take (the request timeout).
    pub fn limit(&self) -> Duration {
        self.inner.limit
    }

    /// When the held credential expires, if it says (a plugin's `expirationTimestamp`).
    pub fn expires_at(&self) -> Option<jiff::Timestamp> {
        self.held().and_then(|h| h.issued.expires_at)
    }

    /// Fetches the credential now unless a usable one is held; by `deadline`.
    pub async fn prefetch(&self, deadline: Instant) -> Result<(), CredentialError> {
        self.refresh_if_expiring_within(EXPIRY_LEEWAY, deadline)
            .await
            .map(|_| ())
    }

    /// Fetches the credential anew (a plugin run, a file read) when none is held, a 401 made it
    /// stale, it expires within `within`, or (a token file) it was read more than a minute ago;
    /// by `deadline`. Returns whether it fetched.
    pub async fn refresh_if_expiring_within(
        &self,
        within: Duration,
        deadline: Instant,
    ) -> Result<bool, CredentialError> {
        if let Source::Refused(why) = &self.inner.source {
            return Err(CredentialError::Refused(why.clone()));
        }
        if !self.needs_fetch(within) {
            return Ok(false);
        }
        let _one = match tokio::time::timeout_at(deadline, self.inner.fetching.lock()).await {
            Ok(guard) => guard,
            Err(_) => return Err(CredentialError::Deadline(self.describe())),
        };
        // Another caller may have fetched while this one waited.
        if !self.needs_fetch(within) {
            return Ok(false);
        }
        let issued = match self.fetch(deadline).await {
            Ok(issued) => issued,
            // client-go and kube keep the last token when a file cannot be read again
            // (kubernetes#68164: files made available at start and removed later).
            Err(
                e @ (CredentialError::TokenFile(_)
                | CredentialError::EmptyTokenFile { .. }
                | CredentialError::Deadline(_)),
            ) => match self.held() {
                Some(held) => {
                    tracing::warn!("{e}; keeping the token read before");
                    self.store(Held {
                        fetched: Instant::now(),
                        ..held
                    });
                    return Ok(false);
                }
                None => return Err(e),
            },
            Err(e) => return Err(e),
        };
        self.store(Held {
            issued,
            fetched: Instant::now(),
        });
        Ok(true)
    }

    /// The `Authorization` header for a request, fetching first when needed (bounded by the
    /// request timeout; the request's own deadline drops it sooner). `None`: no credential, or
    /// only a client certificate.
    pub(crate) async fn header(&self) -> Result<Option<HeaderValue>, CredentialError> {
        match &self.inner.source {
            Source::None => return Ok(None),
            Source::Fixed { header, .. } => return Ok(Some(header.clone())),
            Source::Refused(why) => return Err(CredentialError::Refused(why.clone())),
            Source::TokenFile { .. } | Source::Exec(_) => {}
        }
        self.prefetch(Instant::now() + self.inner.limit).await?;
        let Some(token) = self.held().and_then(|h| h.issued.token) else {
            return Ok(None);
        };
        let mut value = HeaderValue::try_from(format!("Bearer {}", token.expose_secret()))
            .map_err(|_| CredentialError::BadToken(self.describe()))?;
        value.set_sensitive(true);
        Ok(Some(value))
    }

    /// A request with the held credential was answered 401: fetch anew before the next one.
    pub(crate) fn unauthorized(&self) {
        if self.is_fetched() {
            self.inner.stale.store(true, Ordering::Relaxed);
        }
    }

    /// The client certificate and key a plugin gave (PEM), once fetched: the TLS connection's
    /// identity when the client is built ([`super::tls`]).
    pub(crate) fn identity(&self) -> Option<(String, SecretString)> {
        self.held().and_then(|h| h.issued.identity)
    }

    fn held(&self) -> Option<Held> {
        self.inner
            .held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    fn store(&self, held: Held) {
        *self.inner.held.lock().unwrap_or_else(|p| p.into_inner()) = Some(held);
        self.inner.stale.store(false, Ordering::Relaxed);
    }

    /// Whether the held credential will not do for `within` from now.
    fn needs_fetch(&self, within: Duration) -> bool {
        if !self.is_fetched() {
            return false;
        }
        let Some(held) = self.held() else {
            return true;
        };
        if self.inner.stale.load(Ordering::Relaxed) {
            return true;
        }
        match &self.inner.source {
            Source::TokenFile { .. } => held.fetched.elapsed() >= TOKEN_FILE_PERIOD,
            _ => held.issued.expires_at.is_some_and(|at| {
                let within = jiff::SignedDuration::try_from(within.max(EXPIRY_LEEWAY))
                    .unwrap_or(jiff::SignedDuration::MAX);
                !matches!(jiff::Timestamp::now().checked_add(within), Ok(then) if then < at)
            }),
        }
    }

    /// One fetch from the source, by `deadline` and within the limit.
    async fn fetch(&self, deadline: Instant) -> Result<Issued, CredentialError> {
        match &self.inner.source {
            // Nothing to fetch (never asked: `needs_fetch` is false for these).
            Source::None | Source::Fixed { .. } | Source::Refused(_) => Ok(Issued::default()),
            Source::TokenFile { path, kubeconfig } => {
                // On tokio's blocking pool, by the deadline: a frozen file system holds a pool
                // thread, not the runtime's one thread.
                let (path, kubeconfig) = (path.clone(), kubeconfig.clone());
                let read = tokio::task::spawn_blocking(move || read_token_file(&path, &kubeconfig));
                match tokio::time::timeout_at(deadline, read).await {
                    Ok(Ok(read)) => read,
                    Ok(Err(e)) => Err(CredentialError::Refused(format!(
                        "{}: the read stopped: {e}",
                        self.describe()
                    ))),
                    Err(_) => Err(CredentialError::Deadline(self.describe())),
                }
            }
            Source::Exec(plugin) => {
                let limit = self
                    .inner
                    .limit
                    .min(deadline.saturating_duration_since(Instant::now()));
                Ok(plugin.run(limit).await?)
            }
        }
    }
}

/// Reads a token file within the file limits, trimmed of surrounding whitespace.
fn read_token_file(path: &Path, kubeconfig: &Path) -> Result<Issued, CredentialError> {
    let text = read_text(path, "token file").map_err(CredentialError::TokenFile)?;
    let token = text.trim();
    if token.is_empty() {
        return Err(CredentialError::EmptyTokenFile {
            path: path.to_path_buf(),
            kubeconfig: kubeconfig.to_path_buf(),
        });
    }
    Ok(Issued {
        token: Some(SecretString::from(token.to_owned())),
        identity: None,
        expires_at: None,
    })
}
