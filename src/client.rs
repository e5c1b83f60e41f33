//! The kube client: built from the configured kubeconfig, kube's hidden retries off
//! (`default_retry = false`: it would retry a 429 up to 15 times and blow any shutdown deadline),
//! and a timeout on every request. Watches use a second client without a read timeout; their
//! length is bounded by the server-side `timeoutSeconds` and a local timer instead.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::time::Duration;

use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// How long the server keeps a watch open before we start a new one.
pub const WATCH_SECONDS: u32 = 60;
/// Extra local time on top of [`WATCH_SECONDS`] before a silent watch counts as hung.
pub const WATCH_GRACE: Duration = Duration::from_secs(5);

/// The kubeconfig or the client built from it is unusable.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The file itself: missing, unreadable. kube's own text for this repeats the path in Debug
    /// quotes, so the I/O error is kept alone.
    #[error("cannot read kubeconfig {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot read kubeconfig {path}: {source}")]
    Kubeconfig {
        path: PathBuf,
        source: kube::config::KubeconfigError,
    },
    #[error("kubeconfig {path} cannot be used: {source}")]
    Build { path: PathBuf, source: kube::Error },
}

/// A failed request: the server's answer, a transport error, or our own timeout.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("no answer within {0:?}")]
    Timeout(Duration),
    #[error(transparent)]
    Kube(#[from] kube::Error),
}

impl ApiError {
    /// The HTTP status code, when the server answered.
    pub fn code(&self) -> Option<u16> {
        match self {
            ApiError::Kube(kube::Error::Api(s)) => Some(s.code),
            _ => None,
        }
    }

    pub fn is_not_found(&self) -> bool {
        self.code() == Some(404)
    }

    pub fn is_forbidden(&self) -> bool {
        self.code() == Some(403)
    }

    pub fn is_conflict(&self) -> bool {
        self.code() == Some(409)
    }

    /// Worth retrying soon: no answer, a broken connection, 429 or a 5xx.
    pub fn is_transient(&self) -> bool {
        match self.code() {
            Some(c) => c == 429 || c >= 500,
            None => matches!(
                self,
                ApiError::Timeout(_)
                    | ApiError::Kube(
                        kube::Error::HyperError(_)
                            | kube::Error::Service(_)
                            | kube::Error::ReadEvents(_)
                    )
            ),
        }
    }

    /// The server could not be reached at all (as opposed to answering with an error).
    pub fn is_unreachable(&self) -> bool {
        self.code().is_none() && self.is_transient()
    }
}

/// The two clients the engine uses.
#[derive(Clone)]
pub struct Clients {
    /// Every ordinary request; each is wrapped in [`Clients::timed`].
    pub api: Client,
    /// Watches only.
    pub watch: Client,
    pub request_timeout: Duration,
}

impl Clients {
    /// Runs one request with the configured timeout.
    pub async fn timed<T>(
        &self,
        request: impl Future<Output = kube::Result<T>>,
    ) -> Result<T, ApiError> {
        match tokio::time::timeout(self.request_timeout, request).await {
            Ok(r) => r.map_err(ApiError::Kube),
            Err(_) => Err(ApiError::Timeout(self.request_timeout)),
        }
    }
}

/// Reads and parses a kubeconfig file (no network I/O).
pub fn read_kubeconfig(path: &Path) -> Result<Kubeconfig, ClientError> {
    Kubeconfig::read_from(path).map_err(|source| match source {
        kube::config::KubeconfigError::ReadConfig(source, _) => ClientError::Read {
            path: path.to_path_buf(),
            source,
        },
        source => ClientError::Kubeconfig {
            path: path.to_path_buf(),
            source,
        },
    })
}

/// Builds the clients from a parsed kubeconfig (its current context).
pub async fn connect(
    kubeconfig: Kubeconfig,
    path: &Path,
    request_timeout: Duration,
) -> Result<Clients, ClientError> {
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
            .await
            .map_err(|source| ClientError::Kubeconfig {
                path: path.to_path_buf(),
                source,
            })?;
    config.default_retry = false;
    config.connect_timeout = Some(request_timeout);
    config.write_timeout = Some(request_timeout);
    let mut watch_config = config.clone();
    config.read_timeout = Some(request_timeout);
    watch_config.read_timeout = None;
    let build = |c: kube::Config| {
        Client::try_from(c).map_err(|source| ClientError::Build {
            path: path.to_path_buf(),
            source,
        })
    };
    Ok(Clients {
        api: build(config)?,
        watch: build(watch_config)?,
        request_timeout,
    })
}
