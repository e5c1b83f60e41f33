//! TLS and kubeconfig credentials end to end through the real binary, as kube builds the client
//! today: a test CA (rcgen) signs the certificate of a TLS front (tokio-rustls, on 127.0.0.1)
//! that forwards to the plain-HTTP fake API server, optionally requiring a client certificate
//! from the same CA, and keeps what clients sent so the tests can read their `Authorization`
//! headers. Each test runs `plan` (it reads the Node, exit 0 on success) and pins one case: the
//! cluster's CA inline or as a file relative to the kubeconfig, no CA, insecure-skip-tls-verify,
//! tls-server-name, client certificates (inline, files, an exec plugin's) and which of a user's
//! credentials the request carries.

mod engine_support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use base64::Engine as _;
use engine_support::*;
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
const KUBELET: &str = "system:node:node-a";

/// Base64, as kubeconfig `*-data` fields hold PEM.
fn b64(text: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// A certificate and its key, in PEM and DER.
struct Issued {
    cert: String,
    der: CertificateDer<'static>,
    key: KeyPair,
}

impl Issued {
    fn key_pem(&self) -> String {
        self.key.serialize_pem()
    }
}

/// A test certificate authority.
struct Ca {
    /// The CA's own certificate, PEM.
    pem: String,
    der: CertificateDer<'static>,
    issuer: Issuer<'static, KeyPair>,
}

impl Ca {
    fn new() -> Ca {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "kube-shutdown-drain test CA");
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

    /// A leaf certificate named `cn` for `names` (DNS names or IP addresses) and `usage`.
    fn issue(&self, cn: &str, names: &[&str], usage: ExtendedKeyUsagePurpose) -> Issued {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let mut params = CertificateParams::new(names).unwrap();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        params.extended_key_usages = vec![usage];
        let key = KeyPair::generate().unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        Issued {
            cert: cert.pem(),
            der: cert.der().clone(),
            key,
        }
    }

    /// A server certificate for `names`.
    fn server(&self, names: &[&str]) -> Issued {
        self.issue("api", names, ExtendedKeyUsagePurpose::ServerAuth)
    }

    /// A client certificate (no names: the API server reads the subject).
    fn client(&self) -> Issued {
        self.issue(KUBELET, &[], ExtendedKeyUsagePurpose::ClientAuth)
    }
}

/// ring, given to rustls by hand: the test never relies on a process-default provider.
fn ring() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// The front's TLS: `server` as its certificate; with `clients_of`, a client certificate signed
/// by that CA is required.
fn server_tls(server: &Issued, clients_of: Option<&Ca>) -> rustls::ServerConfig {
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
/// plaintext each connection sent and the handshakes it refused.
struct Front {
    url: String,
    sent: Arc<Mutex<Vec<Sent>>>,
    refused: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Front {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Front {
    async fn start(c: &Cluster, tls: rustls::ServerConfig) -> Front {
        let upstream = c.server.url().trim_start_matches("http://").to_string();
        assert!(upstream.starts_with("127.0.0.1:"), "{upstream}");
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}", listener.local_addr().unwrap());
        let acceptor = TlsAcceptor::from(Arc::new(tls));
        let sent: Arc<Mutex<Vec<Sent>>> = Arc::default();
        let refused: Arc<Mutex<Vec<String>>> = Arc::default();
        let (log, errors) = (sent.clone(), refused.clone());
        let task = tokio::spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, upstream) = (acceptor.clone(), upstream.clone());
                let (log, errors) = (log.clone(), errors.clone());
                tokio::spawn(async move {
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
            }
        });
        Front {
            url,
            sent,
            refused,
            task,
        }
    }

    /// The port, for URLs that name the host differently.
    fn port(&self) -> &str {
        self.url.rsplit(':').next().unwrap()
    }

    /// The `Authorization` header of every request sent through the front (HTTP/1.1 heads).
    fn authorizations(&self) -> Vec<String> {
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
    fn requests(&self) -> usize {
        let logs = self.sent.lock().unwrap().clone();
        logs.iter()
            .map(|log| {
                let text = String::from_utf8_lossy(&log.lock().unwrap()).into_owned();
                text.lines().filter(|l| l.ends_with(" HTTP/1.1")).count()
            })
            .sum()
    }

    fn refused(&self) -> Vec<String> {
        self.refused.lock().unwrap().clone()
    }
}

/// A kubeconfig `name` in `dir` whose cluster and user are the given YAML lines (under
/// `cluster:` and `user:`, four spaces in).
fn kubeconfig_with(dir: &Path, name: &str, cluster: &str, user: &str) -> PathBuf {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join(name);
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: front\n  cluster:\n{cluster}\
         users:\n- name: u\n  user:\n{user}contexts:\n- name: front\n  context:\n    \
         cluster: front\n    user: u\ncurrent-context: front\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// The kubeconfig's directory: a subdirectory of the scratch dir, not the binary's working
/// directory, so a relative path resolves only against it.
fn kube_dir(c: &Cluster) -> PathBuf {
    c.dir.path().join("kube")
}

/// `plan` with a kubeconfig (in [`kube_dir`]) of `cluster` and `user` lines.
async fn plan(c: &Cluster, cluster: &str, user: &str) -> Run {
    let kc = kubeconfig_with(&kube_dir(c), "kubeconfig", cluster, user);
    cli(&config_with(c, "config.toml", &kc), &["plan"]).await
}

/// The cluster lines for `server` trusting `ca` inline.
fn trusting(server: &str, ca: &Ca) -> String {
    format!(
        "    server: {server}\n    certificate-authority-data: {}\n",
        b64(&ca.pem)
    )
}

/// The user lines of a bearer token.
fn token(t: &str) -> String {
    format!("    token: {t}\n")
}

/// `plan` succeeded, and every request reached the fake as `user`.
fn succeeded_as(c: &Cluster, r: &Run, user: &str) {
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let users = users(c);
    assert!(!users.is_empty(), "the fake got the requests");
    assert!(users.iter().all(|u| u == user), "{user} on each: {users:?}");
}

/// `plan` failed as the server unreachable in TLS: exit 3, stderr naming `url` and the TLS
/// handshake, and the fake got nothing.
fn failed_in_tls(c: &Cluster, r: &Run, url: &str) {
    assert_eq!(r.code, 3, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains(&format!(
            "node node-a: API server {url} unreachable: TLS handshake failed: "
        )),
        "{}",
        r.stderr
    );
    assert!(users(c).is_empty(), "nothing reached the fake");
}

/// An executable shell script `name` in `dir`.
fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// The certificate authority inline (`certificate-authority-data`, base64 of the PEM): the
/// server is trusted, and the token's user reaches the API server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ca_inline_verifies_the_server() {
    let c = Cluster::start(vec![pod(NS, "web", NODE)]).await;
    let ca = Ca::new();
    let front = Front::start(&c, server_tls(&ca.server(&["127.0.0.1"]), None)).await;
    let r = plan(&c, &trusting(&front.url, &ca), &token(IDENTITY)).await;
    succeeded_as(&c, &r, IDENTITY);
    assert!(r.stdout.contains("work/web"), "{}", r.stdout);
}

/// `certificate-authority` as a path relative to the kubeconfig's directory (not the working
/// directory): read from there, and the server is trusted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ca_file_relative_to_the_kubeconfig_verifies_the_server() {
    let c = Cluster::start(vec![]).await;
    let ca = Ca::new();
    let front = Front::start(&c, server_tls(&ca.server(&["127.0.0.1"]), None)).await;
    let certs = kube_dir(&c).join("certs");
    std::fs::create_dir_all(&certs).unwrap();
    std::fs::write(certs.join("ca.crt"), &ca.pem).unwrap();
    assert!(
        !Path::new("certs/ca.crt").exists(),
        "not in the working directory"
    );
    let cluster = format!(
        "    server: {}\n    certificate-authority: certs/ca.crt\n",
        front.url
    );
    let r = plan(&c, &cluster, &token(IDENTITY)).await;
    succeeded_as(&c, &r, IDENTITY);
}

/// No CA in the kubeconfig: the system's roots do not know the test CA, so the handshake fails
/// (unknown issuer); exit 3, stderr names the server and the TLS failure, once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_ca_an_unknown_issuer_fails_the_handshake() {
    let c = Cluster::start(vec![]).await;
    let ca = Ca::new();
    let front = Front::start(&c, server_tls(&ca.server(&["127.0.0.1"]), None)).await;
    let r = plan(
        &c,
        &format!("    server: {}\n", front.url),
        &token(IDENTITY),
    )
    .await;
    failed_in_tls(&c, &r, &front.url);
    assert!(
        r.stderr
            .contains("TLS handshake failed: invalid peer certificate: UnknownIssuer"),
        "{}",
        r.stderr
    );
    // Said once, by us: not again by the platform verifier, with its source path.
    assert!(
        !r.stderr.contains("failed to verify TLS certificate"),
        "{}",
        r.stderr
    );
}

/// `insecure-skip-tls-verify: true` and no CA: the server is not verified, and it works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insecure_skip_tls_verify_accepts_an_unknown_issuer() {
    let c = Cluster::start(vec![]).await;
    let ca = Ca::new();
    let front = Front::start(&c, server_tls(&ca.server(&["127.0.0.1"]), None)).await;
    let cluster = format!(
        "    server: {}\n    insecure-skip-tls-verify: true\n",
        front.url
    );
    let r = plan(&c, &cluster, &token(IDENTITY)).await;
    succeeded_as(&c, &r, IDENTITY);
}

/// A server certificate for the DNS name `api.test` only, reached at `https://127.0.0.1:PORT`:
/// without `tls-server-name` the name does not match and the handshake fails; with
/// `tls-server-name: api.test` the certificate is checked against that name and it works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_server_name_is_the_name_the_certificate_is_checked_against() {
    let c = Cluster::start(vec![]).await;
    let ca = Ca::new();
    let front = Front::start(&c, server_tls(&ca.server(&["api.test"]), None)).await;
    let url = format!("https://127.0.0.1:{}", front.port());
    let r = plan(&c, &trusting(&url, &ca), &token(IDENTITY)).await;
    failed_in_tls(&c, &r, &url);
    assert!(
        r.stderr
            .contains("invalid peer certificate: certificate not valid for name \"127.0.0.1\""),
        "{}",
        r.stderr
    );
    let named = format!("{}    tls-server-name: api.test\n", trusting(&url, &ca));
    let r = plan(&c, &named, &token(IDENTITY)).await;
    succeeded_as(&c, &r, IDENTITY);
}

/// A front that requires a client certificate of the CA: `client-certificate-data` and
/// `client-key-data` (base64 of PEM) are presented, and so are `client-certificate` and
/// `client-key` as paths relative to the kubeconfig's directory; the user's bearer token rides
/// along in both. Without a client certificate the server refuses the handshake: exit 3, TLS
/// named, nothing reaches the API server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_inline_or_in_files_passes_mutual_tls() {
    let c = Cluster::start(vec![]).await;
    let ca = Ca::new();
    let front = Front::start(&c, server_tls(&ca.server(&["127.0.0.1"]), Some(&ca))).await;
    let cluster = trusting(&front.url, &ca);
    let client = ca.client();

    let r = plan(&c, &cluster, &token(IDENTITY)).await;
    failed_in_tls(&c, &r, &front.url);
    assert!(
        r.stderr
            .contains("received fatal alert: CertificateRequired"),
        "{}",
        r.stderr
    );
    let refused = front.refused();
    assert!(
        refused
            .iter()
            .any(|e| e.contains("peer sent no certificates")),
        "{refused:?}"
    );

    let inline = format!(
        "    client-certificate-data: {}\n    client-key-data: {}\n{}",
        b64(&client.cert),
        b64(&client.key_pem()),
        token(IDENTITY)
    );
    let r = plan(&c, &cluster, &inline).await;
    succeeded_as(&c, &r, IDENTITY);

    c.server.recorder().clear();
    let pki = kube_dir(&c).join("pki");
    std::fs::create_dir_all(&pki).unwrap();
    std::fs::write(pki.join("client.crt"), &client.cert).unwrap();
    std::fs::write(pki.join("client.key"), client.key_pem()).unwrap();
    let files = format!(
        "    client-certificate: pki/client.crt\n    client-key: pki/client.key\n{}",
        token(IDENTITY)
    );
    let r = plan(&c, &cluster, &files).await;
    succeeded_as(&c, &r, IDENTITY);
}

/// An exec credential plugin whose ExecCredential has `clientCertificateData` and
/// `clientKeyData` (PEM text) and a token: its certificate passes mutual TLS, and its token
/// reaches the API server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exec_plugins_client_certificate_passes_mutual_tls() {
    let c = Cluster::start(vec![]).await;
    let ca = Ca::new();
    let front = Front::start(&c, server_tls(&ca.server(&["127.0.0.1"]), Some(&ca))).await;
    let client = ca.client();
    let credential = serde_json::json!({
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {
            "token": IDENTITY,
            "clientCertificateData": client.cert,
            "clientKeyData": client.key_pem(),
        },
    });
    let plugin = script(
        c.dir.path(),
        "plugin-cert",
        &format!("cat <<'EOF'\n{credential}\nEOF"),
    );
    let user = format!(
        "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: {}\n      \
         interactiveMode: Never\n",
        plugin.display()
    );
    let r = plan(&c, &trusting(&front.url, &ca), &user).await;
    succeeded_as(&c, &r, IDENTITY);
    assert!(front.refused().is_empty(), "{:?}", front.refused());
}

/// `plan` through a front trusted inline, with `user`: what it printed, and the
/// `Authorization` header of each request (at least one, all alike).
async fn authorization_of(c: &Cluster, user: &str) -> (Run, String) {
    let ca = Ca::new();
    let front = Front::start(c, server_tls(&ca.server(&["127.0.0.1"]), None)).await;
    let r = plan(c, &trusting(&front.url, &ca), user).await;
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let seen = front.authorizations();
    assert!(
        !seen.is_empty() && seen.len() == front.requests(),
        "one header a request: {seen:?}, {} requests",
        front.requests()
    );
    assert!(seen.iter().all(|h| *h == seen[0]), "{seen:?}");
    (r, seen[0].clone())
}

/// An inline `token:` is sent as `Authorization: Bearer TOKEN`, and the API server sees its
/// user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_token_is_sent_as_a_bearer_token() {
    let c = Cluster::start(vec![]).await;
    let (r, header) = authorization_of(&c, &token(IDENTITY)).await;
    assert_eq!(header, format!("Bearer {IDENTITY}"));
    succeeded_as(&c, &r, IDENTITY);
}

/// `username:` and `password:` are sent as `Authorization: Basic base64(user:pass)`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_name_and_password_are_sent_as_basic_auth() {
    let c = Cluster::start(vec![]).await;
    let user = "    username: alice\n    password: pa55-word\n";
    let (_, header) = authorization_of(&c, user).await;
    assert_eq!(header, format!("Basic {}", b64("alice:pa55-word")));
}

/// An `auth-provider` named `oidc` with `id-token: X` is sent as `Authorization: Bearer X`
/// (kube without its oidc feature: the id-token as it is, never refreshed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oidc_auth_providers_id_token_is_sent_as_a_bearer_token() {
    let c = Cluster::start(vec![]).await;
    let user = format!(
        "    auth-provider:\n      name: oidc\n      config:\n        id-token: {IDENTITY}\n"
    );
    let (r, header) = authorization_of(&c, &user).await;
    assert_eq!(header, format!("Bearer {IDENTITY}"));
    succeeded_as(&c, &r, IDENTITY);
}

/// A user with both a token and a user name and password: basic auth wins (kube's precedence:
/// auth provider, user name and password, token, token file, exec).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_auth_wins_over_a_token() {
    let c = Cluster::start(vec![]).await;
    let user = format!(
        "    username: alice\n    password: pa55-word\n{}",
        token(KUBELET)
    );
    let (_, header) = authorization_of(&c, &user).await;
    assert_eq!(header, format!("Basic {}", b64("alice:pa55-word")));
    assert!(users(&c).iter().all(|u| u != KUBELET), "{:?}", users(&c));
}

/// A user with both an oidc auth provider and a token: the provider's id-token wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oidc_id_token_wins_over_a_token() {
    let c = Cluster::start(vec![]).await;
    let user = format!(
        "    auth-provider:\n      name: oidc\n      config:\n        id-token: {IDENTITY}\n{}",
        token(KUBELET)
    );
    let (r, header) = authorization_of(&c, &user).await;
    assert_eq!(header, format!("Bearer {IDENTITY}"));
    succeeded_as(&c, &r, IDENTITY);
}
