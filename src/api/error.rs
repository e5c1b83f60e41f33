//! [`ApiError`]: a failed request, classified once where it failed, by the types of the errors
//! it is made of (kube's, hyper-util's, hyper's, `std::io`'s, rustls'), and rendered by one
//! `Display` that names the object and, without an answer, the server.
//!
//! - An answer: the API server's `Status` ([`Kind::Status`]: 429 and 5xx are transient, the
//!   rest final), or one that is not the API's ([`Kind::Answer`]).
//! - No answer ([`Kind::Transport`] with its [`Cause`], [`Kind::Timeout`]): transient, the next
//!   try may get one (a server restarting, a connection the server closed, DNS not answering
//!   yet, a TLS alert).
//! - The server's certificate refused ([`Kind::Untrusted`]): permanent. rustls checked the
//!   certificate the server sent against the trust the kubeconfig gives and found it wrong (its
//!   issuer, its names, its validity); every try gets the same verdict until a person changes
//!   the kubeconfig, the server's certificate or the node's clock. So nothing retries it (as
//!   kubectl does not), and the error names what rustls found and the kubeconfig.

use std::error::Error as StdError;
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use super::answers::NotApiAnswer;
use super::credentials::CredentialError;

/// The longest API message quoted in an error line; a hostile or broken server cannot flood the
/// log or the report.
const MESSAGE_MAX: usize = 300;

/// Why a request got no answer. Each is transient: the next try may get one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cause {
    /// Nothing listens at the server's address and port.
    ConnectionRefused,
    /// The server's host name did not resolve (the resolver's words).
    NameResolution(String),
    /// The TLS handshake failed other than on the server's certificate: an alert the server
    /// sent, an answer that is not TLS (rustls' words).
    Tls(String),
    /// Connecting (TCP and TLS) took longer than the request's time.
    ConnectTimeout,
    /// The connection was closed or reset while it was being made.
    ClosedWhileConnecting,
    /// The connection died before an answer (often a kept-alive connection the server closed).
    ConnectionClosed,
    /// The answer did not come, or stopped coming, within the read timeout.
    AnswerTimeout,
    Other(String),
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cause::ConnectionRefused => f.write_str("connection refused"),
            Cause::NameResolution(s) => write!(f, "name resolution failed ({s})"),
            Cause::Tls(s) => write!(f, "TLS handshake failed: {s}"),
            Cause::ConnectTimeout => f.write_str("connect timed out"),
            Cause::ClosedWhileConnecting => f.write_str("connection closed while connecting"),
            Cause::ConnectionClosed => f.write_str("connection closed before an answer"),
            Cause::AnswerTimeout => f.write_str("the answer timed out"),
            Cause::Other(s) => f.write_str(s),
        }
    }
}

/// What rustls found wrong with the server's certificate: its `CertificateError`, under the
/// name rustls gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// `UnknownIssuer`: no authority the client trusts signed it.
    UnknownIssuer,
    /// `BadSignature`: an authority the client trusts bears the name of its issuer but did not
    /// sign it (two clusters' authorities of one name, as kubeadm's `kubernetes`).
    BadSignature,
    /// `NotValidForName`: it does not carry the name checked (`expected`); `presented`: the
    /// names it carries, as rustls lists them (`DnsName("api.test")`).
    NotValidForName {
        expected: Option<String>,
        presented: Vec<String>,
    },
    /// `Expired`: valid until `not_after`, checked at `now` (the node's clock).
    Expired {
        not_after: Option<jiff::Timestamp>,
        now: Option<jiff::Timestamp>,
    },
    /// `NotValidYet`: valid from `not_before`, checked at `now` (the node's clock).
    NotValidYet {
        not_before: Option<jiff::Timestamp>,
        now: Option<jiff::Timestamp>,
    },
    /// Anything else (`BadSignature`, `InvalidPurpose`, `Revoked`, ...): rustls' words.
    Other(String),
}

impl Refusal {
    /// rustls' verdict as a refusal.
    pub fn of(e: &rustls::CertificateError) -> Refusal {
        use rustls::CertificateError as C;
        let at = |t: &rustls::pki_types::UnixTime| {
            i64::try_from(t.as_secs())
                .ok()
                .and_then(|s| jiff::Timestamp::from_second(s).ok())
        };
        match e {
            C::UnknownIssuer => Refusal::UnknownIssuer,
            C::BadSignature => Refusal::BadSignature,
            C::NotValidForName => Refusal::NotValidForName {
                expected: None,
                presented: Vec::new(),
            },
            C::NotValidForNameContext {
                expected,
                presented,
            } => Refusal::NotValidForName {
                expected: Some(expected.to_str().into_owned()),
                presented: presented.clone(),
            },
            C::Expired => Refusal::Expired {
                not_after: None,
                now: None,
            },
            C::ExpiredContext { time, not_after } => Refusal::Expired {
                not_after: at(not_after),
                now: at(time),
            },
            C::NotValidYet => Refusal::NotValidYet {
                not_before: None,
                now: None,
            },
            C::NotValidYetContext { time, not_before } => Refusal::NotValidYet {
                not_before: at(not_before),
                now: at(time),
            },
            // A verifier's own error (webpki's through the platform verifier): its words, not
            // rustls' `Other(OtherError(..))` around them.
            C::Other(other) => Refusal::Other(other.to_string()),
            other => Refusal::Other(other.to_string()),
        }
    }
}

/// What checks the server's certificate, as the kubeconfig says: named in a refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trust {
    pub kubeconfig: PathBuf,
    /// The cluster names a certificate authority (`certificate-authority` or its `-data`);
    /// without one the system's trust store checks.
    pub authority: bool,
    /// `tls-server-name`: the name checked instead of the server URL's host.
    pub server_name: Option<String>,
}

/// The server's certificate, refused by the kubeconfig's trust.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Untrusted {
    pub refusal: Refusal,
    pub trust: Trust,
}

impl fmt::Display for Untrusted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kubeconfig = self.trust.kubeconfig.display();
        match &self.refusal {
            Refusal::UnknownIssuer | Refusal::BadSignature => self.issuer(f),
            Refusal::NotValidForName {
                expected,
                presented,
            } => {
                let checked = match &self.trust.server_name {
                    Some(_) => "its tls-server-name",
                    None => "the host of its server URL",
                };
                write!(
                    f,
                    "certificate refused (NotValidForName): not valid for {}, {checked} in \
                     kubeconfig {kubeconfig}",
                    expected.as_deref().unwrap_or("the name checked")
                )?;
                if !presented.is_empty() {
                    write!(f, "; it is valid for {}", presented.join(", "))?;
                }
                Ok(())
            }
            Refusal::Expired { not_after, now } => {
                f.write_str("certificate refused (Expired): ")?;
                match not_after {
                    Some(t) => write!(f, "not valid after {t}")?,
                    None => f.write_str("it has expired")?,
                }
                self.clock(f, *now, "")
            }
            Refusal::NotValidYet { not_before, now } => {
                f.write_str("certificate refused (NotValidYet): ")?;
                match not_before {
                    Some(t) => write!(f, "not valid before {t}")?,
                    None => f.write_str("not valid yet")?,
                }
                self.clock(f, *now, " (is it right?)")
            }
            Refusal::Other(s) => write!(f, "certificate refused: {s}; kubeconfig {kubeconfig}"),
        }
    }
}

impl Untrusted {
    /// An issuer refused: by the kubeconfig's certificate authority, or by the system's trust
    /// store when it names none.
    fn issuer(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kubeconfig = self.trust.kubeconfig.display();
        let unknown = self.refusal == Refusal::UnknownIssuer;
        match (unknown, self.trust.authority) {
            (true, true) => write!(
                f,
                "certificate refused (UnknownIssuer): not signed by the certificate-authority \
                 of kubeconfig {kubeconfig}"
            ),
            (true, false) => write!(
                f,
                "certificate refused (UnknownIssuer): kubeconfig {kubeconfig} names no \
                 certificate-authority, and no authority of the system's trust store signed it"
            ),
            (false, true) => write!(
                f,
                "certificate refused (BadSignature): not signed by the certificate-authority of \
                 kubeconfig {kubeconfig}, though that authority bears its issuer's name (another \
                 cluster's authority of the same name?)"
            ),
            (false, false) => write!(
                f,
                "certificate refused (BadSignature): not signed by the authority of the system's \
                 trust store that bears its issuer's name; kubeconfig {kubeconfig} names no \
                 certificate-authority"
            ),
        }
    }

    /// The end of a validity refusal: the node's clock at the check (with `doubt`, when the
    /// clock may be the fault), and the kubeconfig.
    fn clock(
        &self,
        f: &mut fmt::Formatter<'_>,
        now: Option<jiff::Timestamp>,
        doubt: &str,
    ) -> fmt::Result {
        if let Some(now) = now {
            write!(f, ", and the node's clock says {now}{doubt}")?;
        }
        write!(f, "; kubeconfig {}", self.trust.kubeconfig.display())
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
    /// The server's certificate was refused: permanent (see the module's doc).
    Untrusted(Untrusted),
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

    /// From kube's error, classified by the types it is made of ([`failure`]); `trust` is what
    /// checked the server's certificate, named when it was refused.
    pub fn from_kube(object: &str, server: &str, trust: &Trust, e: kube::Error) -> ApiError {
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
                match failure(&e) {
                    Failure::Transport(cause) => Kind::Transport(cause),
                    Failure::Refused(refusal) => Kind::Untrusted(Untrusted {
                        refusal,
                        trust: trust.clone(),
                    }),
                }
            }
            kube::Error::SerdeError(e) => Kind::Other(format!("answer does not decode: {e}")),
            other => Kind::Other(
                chain(&other)
                    .last()
                    .map_or_else(String::new, |e| e.to_string()),
            ),
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
        let server = &self.0.server;
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
                    "API server {server} unreachable: {}",
                    one_line(&cause.to_string())
                )
            }
            Kind::Timeout(d) => format!("no answer from API server {server} within {d:?}"),
            Kind::Answer(answer) => format!("API server {server}: {answer}"),
            Kind::Untrusted(untrusted) => {
                format!("API server {server}: {}", one_line(&untrusted.to_string()))
            }
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

    /// Worth retrying soon: no answer, a broken connection, 429 or a 5xx. Never a refused
    /// certificate ([`ApiError::is_permanent`]).
    pub fn is_transient(&self) -> bool {
        match self.code() {
            Some(c) => c == 429 || c >= 500,
            None => matches!(self.0.kind, Kind::Transport(_) | Kind::Timeout(_)),
        }
    }

    /// No request can pass until a person changes something (the kubeconfig, the server's
    /// certificate, the node's clock): the server's certificate was refused. A configuration
    /// problem (exit 2 in the CLI), not an unreachable server.
    pub fn is_permanent(&self) -> bool {
        matches!(self.0.kind, Kind::Untrusted(_))
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

/// A request without an answer: why, or the certificate's refusal.
#[derive(Debug, PartialEq, Eq)]
enum Failure {
    Transport(Cause),
    Refused(Refusal),
}

/// The errors `e` is made of, outermost first: its `source()` chain, looking inside each
/// `std::io::Error` that wraps another (tokio-rustls wraps rustls' error in one, hyper-rustls
/// wraps that in another with `io::Error::other`, and an `io::Error`'s `source()` skips the error
/// it wraps).
fn chain<'a>(
    e: &'a (dyn StdError + 'static),
) -> impl Iterator<Item = &'a (dyn StdError + 'static)> {
    std::iter::successors(Some(e), |&e: &&'a (dyn StdError + 'static)| match e
        .downcast_ref::<std::io::Error>()
    {
        Some(io) => io.get_ref().map(|inner| inner as &(dyn StdError + 'static)),
        None => e.source(),
    })
}

/// Why a request got no answer, from the types in `e`'s chain: hyper-util's client error says
/// whether it failed while connecting (TCP, TLS) or after it sent the request; rustls' error
/// says what the handshake found (a refused certificate is [`Failure::Refused`]); hyper's and
/// `std::io`'s kinds say closed, reset, refused or timed out.
fn failure(e: &(dyn StdError + 'static)) -> Failure {
    let mut connecting = false;
    let mut sent = false;
    let mut dns = false;
    let mut last = String::new();
    for err in chain(e) {
        last = err.to_string();
        if let Some(client) = err.downcast_ref::<hyper_util::client::legacy::Error>() {
            connecting |= client.is_connect();
            sent |= !client.is_connect();
        } else if let Some(tls) = err.downcast_ref::<rustls::Error>() {
            return tls_failure(tls);
        } else if let Some(h) = err.downcast_ref::<hyper::Error>() {
            if h.is_timeout() {
                return Failure::Transport(Cause::AnswerTimeout);
            }
            if h.is_incomplete_message() || h.is_closed() || h.is_canceled() {
                return Failure::Transport(Cause::ConnectionClosed);
            }
        } else if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if let Some(cause) = io_cause(io.kind(), connecting) {
                return Failure::Transport(cause);
            }
        } else if err.is::<tokio::time::error::Elapsed>() {
            return Failure::Transport(timed_out(connecting));
        } else {
            dns |= is_dns_error(err);
        }
    }
    Failure::Transport(if dns {
        Cause::NameResolution(last)
    } else if sent {
        // Sent on a connection that then failed in a way no type above names: dead before an
        // answer, as a kept-alive connection the server closed (see [`super::retry`]).
        Cause::ConnectionClosed
    } else {
        Cause::Other(last)
    })
}

/// What an `std::io` error kind says, if anything: `connecting` while the connection was being
/// made (TCP or TLS handshake), else after the request went.
fn io_cause(kind: std::io::ErrorKind, connecting: bool) -> Option<Cause> {
    use std::io::ErrorKind as K;
    match kind {
        K::ConnectionRefused => Some(Cause::ConnectionRefused),
        K::TimedOut => Some(timed_out(connecting)),
        K::ConnectionReset
        | K::ConnectionAborted
        | K::BrokenPipe
        | K::UnexpectedEof
        | K::NotConnected => Some(if connecting {
            Cause::ClosedWhileConnecting
        } else {
            Cause::ConnectionClosed
        }),
        _ => None,
    }
}

fn timed_out(connecting: bool) -> Cause {
    if connecting {
        Cause::ConnectTimeout
    } else {
        Cause::AnswerTimeout
    }
}

/// A TLS failure: the server's certificate refused, or the handshake failed otherwise.
fn tls_failure(e: &rustls::Error) -> Failure {
    match e {
        rustls::Error::InvalidCertificate(c) => Failure::Refused(Refusal::of(c)),
        // rustls' words do not say TLS: a plain-HTTP server behind an https:// URL.
        rustls::Error::InvalidMessage(rustls::InvalidMessage::InvalidContentType) => {
            Failure::Transport(Cause::Tls(format!(
                "{e}: the server did not answer in TLS (a plain-HTTP server behind an https:// URL?)"
            )))
        }
        other => Failure::Transport(Cause::Tls(other.to_string())),
    }
}

/// The one failure told by its words: a failed name lookup. hyper-util 0.1.21 wraps it in its
/// connector's `ConnectError` (`client/legacy/connect/http.rs`, `ConnectError::dns`), a type it
/// does not export, and the resolver's `std::io::Error` from getaddrinfo has the unstable kind
/// `Uncategorized`, which cannot be matched. Its message, exactly "dns error", is all there is;
/// should a later version reword it, a failed lookup is named by the resolver's own words as
/// [`Cause::Other`], still transient.
fn is_dns_error(e: &(dyn StdError + 'static)) -> bool {
    e.to_string() == "dns error"
}

#[cfg(test)]
#[path = "error_tests.rs"]
mod tests;
