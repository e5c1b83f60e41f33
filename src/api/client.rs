//! The kube clients and [`ApiError`]. Built from the configured kubeconfig without kube's hidden
//! retries (its `default_retry` would retry a 429 up to 15 times and blow any shutdown deadline)
//! or credential layer ([`client_for`]). Every ordinary request goes through [`Clients::once`] (a timeout of
//! min(`request_timeout`, time left to the deadline)) or [`Clients::retry`]. Watches use a second
//! client without a read timeout whose watch requests are paced ([`super::pace`]); their length
//! is bounded by the server-side `timeoutSeconds`, the watcher's idle timeout and the caller's
//! deadline.

use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kube::config::Kubeconfig;
use tokio::time::Instant;

use super::answers::{ApiAnswers, NotApiAnswer};
use super::authorized::Authorized;
use super::credentials::{CredentialError, Credentials};
use super::pace::Paced;
use super::retry;

/// How long the server keeps a watch open before the watcher starts a new one.
pub const WATCH_SECONDS: u32 = 60;
/// The longest API message quoted in an error line; a hostile or broken server cannot flood the
/// log or the report.
const MESSAGE_MAX: usize = 300;

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

/// Why a request got no answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cause {
    ConnectionRefused,
    NameResolution(String),
    Tls(String),
    /// Connecting took too long.
    ConnectTimeout,
    /// The connection died before an answer (often a kept-alive connection the server closed).
    ConnectionClosed,
    Other(String),
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cause::ConnectionRefused => f.write_str("connection refused"),
            Cause::NameResolution(s) => write!(f, "name resolution failed ({s})"),
            Cause::Tls(s) => write!(f, "TLS handshake failed: {s}"),
            Cause::ConnectTimeout => f.write_str("connect timed out"),
            Cause::ConnectionClosed => f.write_str("connection closed before an answer"),
            Cause::Other(s) => f.write_str(s),
        }
    }
}

/// What went wrong with a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Kind {
    /// The server answered with an error status.
    Status {
        code: u16,
        reason: String,
        message: String,
        retry_after: Option<Duration>,
    },
    /// No answer: the server could not be reached or the connection broke.
    Transport(Cause),
    /// No answer within the request's time.
    Timeout(Duration),
    /// An error status or redirect whose body is not a Kubernetes `Status`: what answered is
    /// not the API server (a proxy, a wrong path prefix, a TLS port asked in plain HTTP).
    Answer(NotApiAnswer),
    /// The token file or exec credential plugin gave no credential (named, without secrets).
    Credentials(String),
    /// Anything else (an answer that does not decode, a request that cannot be built).
    Other(String),
}

/// A failed request, naming its object (`node n1`, `pod ns/p`) and, for transport errors, the
/// API server. Renders as one line, without kube's type names or Status dumps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError(Box<Inner>);

#[derive(Debug, Clone, PartialEq, Eq)]
struct Inner {
    object: String,
    server: String,
    kind: Kind,
    /// Attempts and time spent, when retried until the deadline.
    retried: Option<(u32, Duration)>,
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.0.object, self.problem())?;
        if let Some((n, d)) = self.0.retried.filter(|(n, _)| *n > 1) {
            write!(f, " ({n} attempts in {:.1} s)", d.as_secs_f64())?;
        }
        Ok(())
    }
}

impl std::error::Error for ApiError {}

/// `text` on one line, at most [`MESSAGE_MAX`] characters.
fn one_line(text: &str) -> String {
    let line = text.split_whitespace().collect::<Vec<_>>().join(" ");
    match line.char_indices().nth(MESSAGE_MAX) {
        Some((i, _)) => format!("{}...", &line[..i]),
        None => line,
    }
}

impl ApiError {
    pub fn new(object: &str, server: &str, kind: Kind) -> ApiError {
        ApiError(Box::new(Inner {
            object: object.to_string(),
            server: server.to_string(),
            kind,
            retried: None,
        }))
    }

    /// From kube's error.
    pub fn from_kube(object: &str, server: &str, e: kube::Error) -> ApiError {
        let kind = match e {
            kube::Error::Api(s) => Kind::Status {
                code: s.code,
                reason: s.reason.clone(),
                message: s.message.clone(),
                retry_after: s
                    .details
                    .as_ref()
                    .map(|d| u64::from(d.retry_after_seconds))
                    .filter(|s| *s > 0)
                    .map(Duration::from_secs),
            },
            kube::Error::Service(ref inner) if inner.is::<NotApiAnswer>() => {
                match inner.downcast_ref::<NotApiAnswer>() {
                    Some(answer) => Kind::Answer(answer.clone()),
                    None => Kind::Other(e.to_string()),
                }
            }
            kube::Error::Service(ref inner) if inner.is::<CredentialError>() => {
                Kind::Credentials(inner.to_string())
            }
            kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => {
                Kind::Transport(cause_of(&e))
            }
            kube::Error::SerdeError(e) => Kind::Other(format!("answer does not decode: {e}")),
            other => Kind::Other(cause_of(&other).to_string()),
        };
        ApiError::new(object, server, kind)
    }

    /// The same error, noting the attempts and the time spent retrying it.
    pub fn after(mut self, attempts: u32, spent: Duration) -> ApiError {
        self.0.retried = Some((attempts, spent));
        self
    }

    pub fn kind(&self) -> &Kind {
        &self.0.kind
    }

    /// What went wrong, without the object: `not found (NotFound, HTTP 404)`.
    pub fn problem(&self) -> String {
        match &self.0.kind {
            Kind::Status {
                code,
                reason,
                message,
                ..
            } => {
                let message = if message.is_empty() {
                    "the API server refused the request".to_string()
                } else {
                    one_line(message)
                };
                if reason.is_empty() {
                    format!("{message} (HTTP {code})")
                } else {
                    format!("{message} ({reason}, HTTP {code})")
                }
            }
            Kind::Transport(cause) => {
                format!(
                    "API server {} unreachable: {}",
                    self.0.server,
                    one_line(&cause.to_string())
                )
            }
            Kind::Timeout(d) => format!("no answer from API server {} within {d:?}", self.0.server),
            Kind::Answer(answer) => format!("API server {}: {answer}", self.0.server),
            Kind::Credentials(s) => one_line(s),
            Kind::Other(s) => one_line(s),
        }
    }

    /// The HTTP status code, when the server answered.
    pub fn code(&self) -> Option<u16> {
        match &self.0.kind {
            Kind::Status { code, .. } => Some(*code),
            Kind::Answer(answer) => Some(answer.code),
            _ => None,
        }
    }

    /// The server asked us to wait this long (429, 503).
    pub fn retry_after(&self) -> Option<Duration> {
        match &self.0.kind {
            Kind::Status { retry_after, .. } => *retry_after,
            Kind::Answer(answer) => answer.retry_after,
            _ => None,
        }
    }

    /// The API server's NotFound: a 404 with a `Status` body. A 404 from something else (a
    /// proxy, a wrong path prefix) says nothing about the object.
    pub fn is_not_found(&self) -> bool {
        matches!(self.0.kind, Kind::Status { code: 404, .. })
    }

    pub fn is_forbidden(&self) -> bool {
        self.code() == Some(403)
    }

    pub fn is_conflict(&self) -> bool {
        self.code() == Some(409)
    }

    /// A guard failed: a JSON-patch `test` (422) or a resourceVersion precondition (409).
    pub fn is_guard_failure(&self) -> bool {
        matches!(self.code(), Some(409 | 422))
    }

    /// Worth retrying soon: no answer, a broken connection, 429 or a 5xx.
    pub fn is_transient(&self) -> bool {
        match self.code() {
            Some(c) => c == 429 || c >= 500,
            None => matches!(self.0.kind, Kind::Transport(_) | Kind::Timeout(_)),
        }
    }

    /// The API server could not be reached at all (as opposed to answering with an error), or
    /// what answered is not an API server.
    pub fn is_unreachable(&self) -> bool {
        matches!(
            self.0.kind,
            Kind::Transport(_) | Kind::Timeout(_) | Kind::Answer(_)
        )
    }

    /// The server itself is in trouble: no answer, or a 5xx.
    pub fn is_server_trouble(&self) -> bool {
        self.is_unreachable() || self.code().is_some_and(|c| c >= 500)
    }

    /// The connection died before any answer: worth one immediate retry on a new connection.
    pub fn is_dead_connection(&self) -> bool {
        self.0.kind == Kind::Transport(Cause::ConnectionClosed)
    }
}

/// Walks an error's causes to name why there was no answer. kube and hyper do not expose their
/// error kinds through one type, so this reads the `std::io::Error` kind where there is one and
/// otherwise the rendering of hyper-util's client error (`client error (Connect)` /
/// `client error (SendRequest)`) and of its connector (`dns error`, `tcp connect error`).
fn cause_of(e: &(dyn std::error::Error + 'static)) -> Cause {
    let mut texts = Vec::new();
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            match io.kind() {
                std::io::ErrorKind::ConnectionRefused => return Cause::ConnectionRefused,
                std::io::ErrorKind::TimedOut => return Cause::ConnectTimeout,
                _ => {}
            }
        }
        if let Some(tls) = rustls_error(err) {
            return Cause::Tls(tls_problem(tls));
        }
        texts.push(err.to_string());
        cur = err.source();
    }
    let all = texts.join(": ").to_lowercase();
    let last = texts.last().cloned().unwrap_or_default();
    if all.contains("dns error") || all.contains("failed to lookup address") {
        Cause::NameResolution(last)
    } else if all.contains("tls") || all.contains("certificate") || all.contains("rustls") {
        Cause::Tls(last)
    } else if all.contains("connection refused") {
        Cause::ConnectionRefused
    } else if all.contains("timed out") || all.contains("deadline has elapsed") {
        Cause::ConnectTimeout
    } else if all.contains("sendrequest")
        || all.contains("connection closed")
        || all.contains("connection reset")
        || all.contains("broken pipe")
        || all.contains("incomplete message")
    {
        Cause::ConnectionClosed
    } else {
        Cause::Other(last)
    }
}

/// The rustls error in `e`: tokio-rustls wraps it in an io::Error and hyper-rustls wraps that in
/// another (`io::Error::other`), and an io::Error's `source()` skips the error it wraps, so this
/// looks inside each by hand. rustls' text does not say TLS ("received corrupt message of type
/// InvalidContentType": a plain-HTTP server behind an https:// URL).
fn rustls_error<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a rustls::Error> {
    if let Some(tls) = e.downcast_ref::<rustls::Error>() {
        return Some(tls);
    }
    let inner = e.downcast_ref::<std::io::Error>()?.get_ref()?;
    rustls_error(inner)
}

/// What a TLS failure means, in words: rustls' text plus, for an answer that is not TLS at all,
/// the likely cause.
fn tls_problem(e: &rustls::Error) -> String {
    match e {
        rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType) => {
            format!(
                "{e}: the server did not answer in TLS (a plain-HTTP server behind an https:// URL?)"
            )
        }
        other => other.to_string(),
    }
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
    /// The credentials we fetch (token file, exec plugin), shared by both clients.
    pub credentials: Credentials,
}

impl Clients {
    /// An [`ApiError`] for `object` from kube's error.
    pub fn error(&self, object: &str, e: kube::Error) -> ApiError {
        ApiError::from_kube(object, &self.server, e)
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
    // Go's names, as client-go writes them: amd64 and arm64, not x86_64 and aarch64.
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let text = format!("{program} ({}/{arch}; node {node})", std::env::consts::OS);
    // A node name is a checked DNS subdomain, always a valid header value; anything else loses
    // only the comment.
    http::HeaderValue::from_str(&text).unwrap_or_else(|_| http::HeaderValue::from_static(program))
}

/// Builds the clients from a parsed kubeconfig (its current context); every request they send
/// names `node` in its [`user_agent`]. The credentials we fetch (token file, exec plugin) are
/// fetched here unless `credentials` holds them, by `deadline`.
pub async fn connect(
    kubeconfig: Kubeconfig,
    path: &Path,
    request_timeout: Duration,
    node: &str,
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
    let (mut config, tls) =
        match tokio::task::spawn_blocking(move || configured(kubeconfig, file, issued)).await {
            Ok(made) => made?,
            Err(e) => {
                return Err(ClientError::NotRead {
                    path: path.to_path_buf(),
                    why: format!("its TLS setup stopped: {e}"),
                });
            }
        };
    config
        .headers
        .push((http::header::USER_AGENT, user_agent(node)));
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
        credentials: credentials.clone(),
    })
}

/// kube's reading of `kubeconfig` (its current context; the CA file read) and the TLS made from
/// it, with the client certificate a plugin `issued`. Blocking file reads.
fn configured(
    kubeconfig: Kubeconfig,
    path: PathBuf,
    issued: Option<(String, secrecy::SecretString)>,
) -> Result<(kube::Config, super::tls::Made), ClientError> {
    let config = kube::Config::try_from(kubeconfig).map_err(|source| ClientError::Kubeconfig {
        path: path.clone(),
        source,
    })?;
    if config.proxy_url.is_some() {
        return Err(ClientError::Proxy { path });
    }
    let tls = super::tls::TlsFrom {
        kubeconfig: path,
        roots: config.root_cert.clone(),
        insecure: config.accept_invalid_certs,
        server_name: config.tls_server_name.clone(),
        user: config.auth_info.clone(),
        issued,
    }
    .config()?;
    Ok((config, tls))
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
    fn api_errors_are_one_line_naming_the_object_without_the_status_dump() {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "code": 503, "reason": "ServiceUnavailable",
            "message": "etcd\nleader changed",
        }))
        .unwrap();
        let e = ApiError::from_kube(
            "node n1",
            "https://s:6443",
            kube::Error::Api(Box::new(status)),
        );
        assert_eq!(
            e.to_string(),
            "node n1: etcd leader changed (ServiceUnavailable, HTTP 503)"
        );
        let bare = ApiError::from_kube(
            "pod a/b",
            "s",
            kube::Error::Api(Box::new(kube::core::Status {
                code: 500,
                ..kube::core::Status::default()
            })),
        );
        assert_eq!(
            bare.to_string(),
            "pod a/b: the API server refused the request (HTTP 500)"
        );
        let t = ApiError::new(
            "node n1",
            "https://s:6443",
            Kind::Timeout(Duration::from_secs(10)),
        );
        assert_eq!(
            t.to_string(),
            "node n1: no answer from API server https://s:6443 within 10s"
        );
        let long = ApiError::new(
            "node n1",
            "s",
            Kind::Status {
                code: 400,
                reason: "BadRequest".into(),
                message: "x".repeat(100_000),
                retry_after: None,
            },
        );
        assert!(long.to_string().len() < 400, "a huge message is cut");
    }

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
    }

    #[test]
    fn transport_causes_are_named() {
        let refused = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let e = ApiError::from_kube(
            "node n1",
            "https://s:6443",
            kube::Error::Service(Box::new(refused)),
        );
        assert_eq!(
            e.to_string(),
            "node n1: API server https://s:6443 unreachable: connection refused"
        );
        assert!(e.is_unreachable() && e.is_transient() && !e.is_dead_connection());
        #[derive(Debug)]
        struct Text(&'static str);
        impl fmt::Display for Text {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.0)
            }
        }
        impl std::error::Error for Text {}
        let dns = kube::Error::Service(Box::new(Text(
            "client error (Connect): dns error: failed to lookup address information",
        )));
        assert!(matches!(
            ApiError::from_kube("x", "s", dns).kind(),
            Kind::Transport(Cause::NameResolution(_))
        ));
        let tls = kube::Error::Service(Box::new(Text("invalid peer certificate: UnknownIssuer")));
        assert!(matches!(
            ApiError::from_kube("x", "s", tls).kind(),
            Kind::Transport(Cause::Tls(_))
        ));
        let sent = kube::Error::Service(Box::new(Text("client error (SendRequest)")));
        assert!(ApiError::from_kube("x", "s", sent).is_dead_connection());
    }
}
