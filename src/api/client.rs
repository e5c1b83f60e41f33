//! The connection to the API server: the kube clients built from the configured kubeconfig
//! (its TLS from [`super::tls`]) without kube's hidden retries (its `default_retry` would retry a
//! 429 up to 15 times and blow any shutdown deadline) or credential layer ([`client_for`]).
//! Every ordinary request goes through [`Clients::once`] (a timeout of min(`request_timeout`,
//! time left to the deadline)) or [`Clients::retry`], and its failure becomes an
//! [`ApiError`] there. Watches use a second client without a read timeout whose watch requests
//! are paced ([`super::pace`]); their length is bounded by the server-side `timeoutSeconds`, the
//! watcher's idle timeout and the caller's deadline.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kube::config::Kubeconfig;
use tokio::time::Instant;

use super::answers::ApiAnswers;
use super::authorized::Authorized;
use super::credentials::{CredentialError, Credentials};
use super::error::{ApiError, Kind, Trust};
use super::pace::Paced;
use super::retry;

/// How long the server keeps a watch open before the watcher starts a new one.
pub const WATCH_SECONDS: u32 = 60;

/// The kubeconfig or the client built from it is unusable.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// The file could not be read or parsed; never shows its content.
    #[error(transparent)]
    KubeconfigFile(#[from] crate::config::kubeconfig::KubeconfigFileError),
    #[error("cannot read kubeconfig {path}: {source}")]
    Kubeconfig {
        path: PathBuf,
        source: kube::config::KubeconfigError,
    },
    #[error("kubeconfig {path} cannot be used: {source}")]
    Build { path: PathBuf, source: kube::Error },
    #[error(transparent)]
    Tls(#[from] super::tls::TlsError),
    #[error("kubeconfig {path} was not read: {why}")]
    NotRead { path: PathBuf, why: String },
    /// kube's client without its `http-proxy` and `socks5` features, which this program never
    /// had, refused these too. kube reads `HTTPS_PROXY` and `https_proxy` when the cluster has no
    /// `proxy-url`.
    #[error(
        "kubeconfig {path}: a proxy (its proxy-url, or HTTPS_PROXY in the environment) is not \
         supported: the node reaches its API server directly"
    )]
    Proxy { path: PathBuf },
    /// The token file or exec plugin gave no credential.
    #[error(transparent)]
    Credentials(#[from] CredentialError),
}

/// The two clients the engine uses, and where they point.
#[derive(Clone)]
pub struct Clients {
    /// Every ordinary request; each is wrapped in [`Clients::once`].
    pub api: Client,
    /// Watches only (paced: at most 2 watch requests a second per watched resource).
    pub watch: Client,
    pub request_timeout: Duration,
    /// The API server URL, for messages (never with a user name or password).
    pub server: Arc<str>,
    /// What checks the server's certificate, named when it is refused.
    pub trust: Arc<Trust>,
    /// The credentials we fetch (token file, exec plugin), shared by both clients.
    pub credentials: Credentials,
}

impl Clients {
    /// An [`ApiError`] for `object` from kube's error.
    pub fn error(&self, object: &str, e: kube::Error) -> ApiError {
        ApiError::from_kube(object, &self.server, &self.trust, e)
    }

    /// A timeout error for `object`.
    pub fn timeout(&self, object: &str, after: Duration) -> ApiError {
        ApiError::new(object, &self.server, Kind::Timeout(after))
    }

    /// The time one request may take: min(`request_timeout`, time left to `deadline`).
    pub fn request_time(&self, deadline: Instant) -> Duration {
        self.request_timeout
            .min(deadline.saturating_duration_since(Instant::now()))
    }

    /// Runs one request about `object`, bounded by min(`request_timeout`, time left).
    pub async fn once<T>(
        &self,
        deadline: Instant,
        object: &str,
        request: impl Future<Output = kube::Result<T>>,
    ) -> Result<T, ApiError> {
        let limit = self.request_time(deadline);
        match tokio::time::timeout(limit, request).await {
            Ok(r) => r.map_err(|e| self.error(object, e)),
            Err(_) => Err(self.timeout(object, limit)),
        }
    }

    /// Runs a request about `object` until it succeeds, fails for good or the deadline
    /// ([`retry::retry_until`]); `make` builds it anew for each attempt.
    pub async fn retry<T, F, Fut>(
        &self,
        deadline: Instant,
        object: &str,
        mut make: F,
    ) -> Result<T, ApiError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = kube::Result<T>>,
    {
        retry::retry_until(deadline, || self.once(deadline, object, make())).await
    }
}

/// Reads and parses a kubeconfig file (no network I/O), within the config file limits.
pub fn read_kubeconfig(path: &Path) -> Result<Kubeconfig, ClientError> {
    Ok(crate::config::kubeconfig::read(path)?)
}

/// The API server URL of the kubeconfig's current context, the one [`connect`] uses (never with
/// a user name or password: [`crate::config::kubeconfig::read`] drops them).
pub fn server_url(kubeconfig: &Kubeconfig) -> String {
    crate::config::kubeconfig::current_cluster(kubeconfig)
        .and_then(|c| c.server.clone())
        .unwrap_or_else(|| "(no server in the kubeconfig's current context)".to_string())
}

/// The User-Agent every request of ours carries, for audit logs and the API server's flow
/// control: `kube-shutdown-drain/VERSION (OS/ARCH; node NODE)`. It follows client-go's
/// `DefaultKubernetesUserAgent` (k8s.io/client-go `rest/config.go`: `kubectl/v1.32.5
/// (linux/amd64) kubernetes/COMMIT`), program and version first, so the apiserver's default
/// field manager for a write without `fieldManager` (the User-Agent up to its first `/`) is
/// `kube-shutdown-drain`, the manager our Node writes name; the comment adds the node the
/// daemon runs for, which the token's identity alone does not say when nodes share one.
pub fn user_agent(node: &str) -> http::HeaderValue {
    let program = concat!("kube-shutdown-drain/", env!("CARGO_PKG_VERSION"));
    let text = format!("{program} ({}; node {node})", platform());
    // A node name is a checked DNS subdomain, always a valid header value; anything else loses
    // only the comment.
    http::HeaderValue::from_str(&text).unwrap_or_else(|_| http::HeaderValue::from_static(program))
}

/// `OS/ARCH` with Go's names, as client-go writes them: amd64 and arm64, not x86_64 and aarch64.
fn platform() -> String {
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    format!("{}/{arch}", std::env::consts::OS)
}

/// The User-Agent of the admin's `fleet` commands: `kubectl-shutdown-drain/VERSION (OS/ARCH;
/// fleet)`, so that the audit log and the apiserver's default field manager tell them from the
/// daemon's ([`user_agent`]); their writes name [`ADMIN_FIELD_MANAGER`] as well.
pub fn admin_user_agent() -> http::HeaderValue {
    let program = concat!("kubectl-shutdown-drain/", env!("CARGO_PKG_VERSION"));
    let text = format!("{program} ({}; fleet)", platform());
    http::HeaderValue::from_str(&text).unwrap_or_else(|_| http::HeaderValue::from_static(program))
}

/// The field manager of the writes an admin makes with `fleet` (the hold annotation, the pause
/// Lease): the daemon's `annotation_owners` names it as who set a hold.
pub const ADMIN_FIELD_MANAGER: &str = "kubectl-shutdown-drain";

/// Builds the clients from a parsed kubeconfig (its current context); every request they send
/// carries `agent` ([`user_agent`] naming the node, or [`admin_user_agent`]). The credentials
/// we fetch (token file, exec plugin) are fetched here unless `credentials` holds them, by
/// `deadline`.
pub async fn connect(
    kubeconfig: Kubeconfig,
    path: &Path,
    request_timeout: Duration,
    agent: http::HeaderValue,
    credentials: &Credentials,
    deadline: Instant,
) -> Result<Clients, ClientError> {
    let server: Arc<str> = server_url(&kubeconfig).into();
    credentials.prefetch(deadline).await?;
    // On tokio's blocking pool: kube reads the CA file, the TLS setup certificate files and the
    // system's trust store, and a frozen file system must hold a pool thread, not the runtime's
    // one thread.
    let issued = credentials.identity();
    let file = path.to_path_buf();
    let (mut config, tls, trust) =
        match tokio::task::spawn_blocking(move || configured(kubeconfig, file, issued)).await {
            Ok(made) => made?,
            Err(e) => {
                return Err(ClientError::NotRead {
                    path: path.to_path_buf(),
                    why: format!("its TLS setup stopped: {e}"),
                });
            }
        };
    config.headers.push((http::header::USER_AGENT, agent));
    config.connect_timeout = Some(request_timeout);
    config.write_timeout = Some(request_timeout);
    let build = |read_timeout| {
        client_for(&config, tls.clone(), read_timeout).map_err(|source| ClientError::Build {
            path: path.to_path_buf(),
            source,
        })
    };
    let watch = build(None)?;
    let api = build(Some(request_timeout))?;
    Ok(Clients {
        api: checked_and_authorized(api, &server, credentials),
        watch: Paced::client(checked_and_authorized(watch, &server, credentials)),
        request_timeout,
        server,
        trust: Arc::new(trust),
        credentials: credentials.clone(),
    })
}

/// kube's reading of `kubeconfig` (its current context; the CA file read), the TLS made from
/// it with the client certificate a plugin `issued`, and what that TLS trusts. Blocking file
/// reads.
fn configured(
    kubeconfig: Kubeconfig,
    path: PathBuf,
    issued: Option<(String, secrecy::SecretString)>,
) -> Result<(kube::Config, super::tls::Made, Trust), ClientError> {
    let config = kube::Config::try_from(kubeconfig).map_err(|source| ClientError::Kubeconfig {
        path: path.clone(),
        source,
    })?;
    if config.proxy_url.is_some() {
        return Err(ClientError::Proxy { path });
    }
    let trust = Trust {
        kubeconfig: path.clone(),
        authority: config.root_cert.is_some(),
        server_name: config.tls_server_name.clone(),
    };
    let tls = super::tls::TlsFrom {
        kubeconfig: path,
        roots: config.root_cert.clone(),
        insecure: config.accept_invalid_certs,
        server_name: config.tls_server_name.clone(),
        user: config.auth_info.clone(),
        issued,
    }
    .config()?;
    Ok((config, tls, trust))
}

/// A kube client for `config` over `tls` (and plain HTTP for an `http://` server), with no
/// credential of its own and none of kube's retries: the stack kube's `Client::try_from` builds
/// (`kube-client`'s `client/builder.rs`: the timeouts, the base URI, the extra headers) without
/// its credential layer, its gzip and its trace spans. `read_timeout` is `None` for watches.
fn client_for(
    config: &kube::Config,
    (tls, server_name): (
        rustls::ClientConfig,
        Option<rustls::pki_types::ServerName<'static>>,
    ),
    read_timeout: Option<Duration>,
) -> Result<Client, kube::Error> {
    use hyper_util::client::legacy::connect::HttpConnector;
    use kube::client::ConfigExt as _;
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    let https = match server_name {
        Some(name) => {
            https.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name))
        }
        None => https,
    };
    let mut connector =
        hyper_timeout::TimeoutConnector::new(https.enable_http1().wrap_connector(http));
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(read_timeout);
    connector.set_write_timeout(config.write_timeout);
    let client: hyper_util::client::legacy::Client<_, kube::client::Body> =
        hyper_util::client::legacy::Builder::new(hyper_util::rt::TokioExecutor::new())
            .build(connector);
    let service = tower::ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .layer(config.extra_headers_layer()?)
        .service(client);
    Ok(Client::new(service, config.default_namespace.clone()))
}

/// `client` behind [`ApiAnswers`] (answers that are not the API's) and [`Authorized`] (our
/// credentials on each request).
fn checked_and_authorized(client: Client, server: &str, credentials: &Credentials) -> Client {
    Authorized::client(ApiAnswers::client(client, server), credentials.clone())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_user_agent_names_the_program_its_version_the_platform_and_the_node() {
        let arch = if cfg!(target_arch = "aarch64") {
            "arm64"
        } else if cfg!(target_arch = "x86_64") {
            "amd64"
        } else {
            std::env::consts::ARCH
        };
        assert_eq!(
            user_agent("node-a.example").to_str().unwrap(),
            format!(
                "kube-shutdown-drain/{} (linux/{arch}; node node-a.example)",
                env!("CARGO_PKG_VERSION")
            )
        );
        assert_eq!(
            user_agent("bad\nname").to_str().unwrap(),
            concat!("kube-shutdown-drain/", env!("CARGO_PKG_VERSION"))
        );
        let admin = admin_user_agent();
        let admin = admin.to_str().unwrap();
        assert!(
            admin.starts_with(&format!("{ADMIN_FIELD_MANAGER}/"))
                && admin.ends_with(&format!("/{arch}; fleet)")),
            "{admin}"
        );
    }
}
