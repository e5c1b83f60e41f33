//! Test support: a TLS front for the plain-HTTP fake API server. A test CA (rcgen) signs the
//! front's certificate (valid, or for other names, or expired); the front (tokio-rustls, on
//! 127.0.0.1) does the handshake, optionally requires a client certificate of the same CA, and
//! forwards the bytes to the fake. It counts the connections it accepted (each a handshake the
//! client began), keeps what clients sent (their `Authorization` headers) and the handshakes it
//! refused.
#![allow(dead_code)]

use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use base64::Engine as _;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A token the fake maps to a Node's kubelet, to tell two credentials apart.
pub const KUBELET: &str = "system:node:node-a";

/// Base64, as kubeconfig `*-data` fields hold PEM.
pub fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// A certificate and its key, in PEM and DER.
pub struct Issued {
    pub cert: String,
    pub der: CertificateDer<'static>,
    pub key: KeyPair,
}

impl Issued {
    pub fn key_pem(&self) -> String {
        self.key.serialize_pem()
    }
}

/// A test certificate authority.
pub struct Ca {
    /// The CA's own certificate, PEM.
    pub pem: String,
    pub der: CertificateDer<'static>,
    issuer: Issuer<'static, KeyPair>,
}

impl Default for Ca {
    fn default() -> Self {
        Ca::new()
    }
}

impl Ca {
    pub fn new() -> Ca {
        Ca::named("kube-shutdown-drain test CA")
    }

    /// A CA whose name is `cn`: two of one name are told apart only by their keys (as two
    /// kubeadm clusters' `kubernetes` authorities).
    pub fn named(cn: &str) -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let key = KeyPair::generate().unwrap();
        let cert = params.self_signed(&key).unwrap();
        Ca {
            pem: cert.pem(),
            der: cert.der().clone(),
            issuer: Issuer::new(params, key),
        }
    }

    /// A leaf certificate named `cn` for `names` (DNS names or IP addresses) and `usage`;
    /// `change` sets anything else (its validity).
    fn issue_with(
        &self,
        cn: &str,
        names: &[&str],
        usage: ExtendedKeyUsagePurpose,
        change: impl FnOnce(&mut CertificateParams),
    ) -> Issued {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![usage];
        change(&mut params);
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Issued {
            cert: cert.pem(),
            der: cert.der().clone(),
            key,
        }
    }

    /// A server certificate for `names`.
    pub fn server(&self, names: &[&str]) -> Issued {
        self.issue_with("api", names, ExtendedKeyUsagePurpose::ServerAuth, |_| {})
    }

    /// A server certificate for `names` that was valid only in 2020.
    pub fn expired_server(&self, names: &[&str]) -> Issued {
        self.issue_with("api", names, ExtendedKeyUsagePurpose::ServerAuth, |p| {
            p.not_before = rcgen::date_time_ymd(2020, 1, 1);
            p.not_after = rcgen::date_time_ymd(2021, 1, 1);
        })
    }

    /// A client certificate (no names: the API server reads the subject).
    pub fn client(&self) -> Issued {
        self.issue_with(KUBELET, &[], ExtendedKeyUsagePurpose::ClientAuth, |_| {})
    }
}

/// ring, given to rustls by hand: the test never relies on a process-default provider.
fn ring() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The front's TLS: `server` as its certificate; with `clients_of`, a client certificate signed
/// by that CA is required.
pub fn server_tls(server: &Issued, clients_of: Option<&Ca>) -> rustls::ServerConfig {
    let builder = rustls::ServerConfig::builder_with_provider(ring())
        .with_safe_default_protocol_versions()
        .unwrap();
    let builder = match clients_of {
        Some(ca) => {
            let mut roots = rustls::RootCertStore::empty();
            roots.add(ca.der.clone()).unwrap();
            let verifier =
                rustls::server::WebPkiClientVerifier::builder_with_provider(roots.into(), ring())
                    .build()
                    .unwrap();
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server.key.serialize_der()));
    builder
        .with_single_cert(vec![server.der.clone()], key)
        .unwrap()
}

/// The bytes one connection's client sent.
type Sent = Arc<Mutex<Vec<u8>>>;

/// A stream that copies what is read from it into `log`.
struct Tap<S> {
    inner: S,
    log: Sent,
}

impl<S: AsyncRead + Unpin> AsyncRead for Tap<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let this = &mut *self;
        let poll = Pin::new(&mut this.inner).poll_read(cx, buf);
        if poll.is_ready() {
            let mut log = this.log.lock().unwrap();
            log.extend_from_slice(&buf.filled()[before..]);
        }
        poll
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Tap<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A TLS front on 127.0.0.1 for the fake: the handshake, then bytes both ways. Keeps the
/// plaintext each connection sent, the handshakes it refused and how many connections it took.
pub struct Front {
    pub url: String,
    sent: Arc<Mutex<Vec<Sent>>>,
    refused: Arc<Mutex<Vec<String>>>,
    connections: Arc<AtomicUsize>,
    /// The TLS of the next connections ([`Front::swap`]).
    acceptor: Arc<Mutex<TlsAcceptor>>,
    /// The connections open now, to close at a swap.
    open: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Front {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Front {
    /// A front on a port of its own for the fake at `upstream` (`http://127.0.0.1:PORT`).
    pub async fn start(upstream: &str, tls: rustls::ServerConfig) -> Front {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Front::on(listener, upstream, tls)
    }

    /// A front taking the connections of `listener`.
    pub fn on(listener: TcpListener, upstream: &str, tls: rustls::ServerConfig) -> Front {
        let upstream = upstream.trim_start_matches("http://").to_string();
        assert!(upstream.starts_with("127.0.0.1:"), "{upstream}");
        let url = format!("https://{}", listener.local_addr().unwrap());
        let acceptor = Arc::new(Mutex::new(TlsAcceptor::from(Arc::new(tls))));
        let sent: Arc<Mutex<Vec<Sent>>> = Arc::default();
        let refused: Arc<Mutex<Vec<String>>> = Arc::default();
        let connections: Arc<AtomicUsize> = Arc::default();
        let open: Arc<Mutex<Vec<tokio::task::AbortHandle>>> = Arc::default();
        let (log, errors, count) = (sent.clone(), refused.clone(), connections.clone());
        let (tls, handles) = (acceptor.clone(), open.clone());
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                count.fetch_add(1, Ordering::SeqCst);
                let (acceptor, upstream) = (tls.lock().unwrap().clone(), upstream.clone());
                let (log, errors) = (log.clone(), errors.clone());
                let connection = tokio::spawn(async move {
                    let tls = match acceptor.accept(tcp).await {
                        Ok(tls) => tls,
                        Err(e) => return errors.lock().unwrap().push(e.to_string()),
                    };
                    let Ok(mut api) = TcpStream::connect(&upstream).await else {
                        return;
                    };
                    let mine: Sent = Arc::default();
                    log.lock().unwrap().push(mine.clone());
                    let mut client = Tap {
                        inner: tls,
                        log: mine,
                    };
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut api).await;
                });
                handles.lock().unwrap().push(connection.abort_handle());
            }
        });
        Front {
            url,
            sent,
            refused,
            connections,
            acceptor,
            open,
            task,
        }
    }

    /// From now on the front answers with `tls` (a server whose certificate changed), and the
    /// connections open now are closed, so a client's next request makes a new one.
    pub fn swap(&self, tls: rustls::ServerConfig) {
        *self.acceptor.lock().unwrap() = TlsAcceptor::from(Arc::new(tls));
        for connection in self.open.lock().unwrap().drain(..) {
            connection.abort();
        }
    }

    /// The port, for URLs that name the host differently.
    pub fn port(&self) -> &str {
        self.url.rsplit(':').next().unwrap()
    }

    /// The connections accepted so far: each one a TLS handshake a client began.
    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// The `Authorization` header of every request sent through the front (HTTP/1.1 heads).
    pub fn authorizations(&self) -> Vec<String> {
        let logs = self.sent.lock().unwrap().clone();
        let mut found = Vec::new();
        for log in logs {
            let text = String::from_utf8_lossy(&log.lock().unwrap()).into_owned();
            for line in text.lines() {
                if let Some((name, value)) = line.split_once(':')
                    && name.eq_ignore_ascii_case("authorization")
                {
                    found.push(value.trim().to_string());
                }
            }
        }
        found
    }

    /// The requests sent through the front (request lines), to tell none from some.
    pub fn requests(&self) -> usize {
        let logs = self.sent.lock().unwrap().clone();
        logs.iter()
            .map(|log| {
                let text = String::from_utf8_lossy(&log.lock().unwrap()).into_owned();
                text.lines().filter(|l| l.ends_with(" HTTP/1.1")).count()
            })
            .sum()
    }

    /// What each refused handshake's error said, as the server saw it.
    pub fn refused(&self) -> Vec<String> {
        self.refused.lock().unwrap().clone()
    }
}
