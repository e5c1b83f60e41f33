//! TLS and kubeconfig credentials end to end through the real binary: a TLS front for the
//! plain-HTTP fake API server (`tls_support`: a test CA, the front counting its handshakes and
//! keeping what clients sent). Each test runs `plan` (it reads the Node, exit 0 on success)
//! and pins one case: the cluster's CA inline or as a file relative to the kubeconfig,
//! insecure-skip-tls-verify, tls-server-name, client certificates (inline, files, an exec
//! plugin's) and which of a user's credentials the request carries; and a certificate that can
//! never pass (a wrong CA, none with the system's store, a name it does not carry, expired),
//! refused at the first handshake by every command, while a refused connection is retried.

mod engine_support;
mod tls_support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use engine_support::*;
use tls_support::*;

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

/// `plan` failed as the server unreachable: exit 3, stderr naming `url`, and the fake got
/// nothing.
fn failed_unreachable(c: &Cluster, r: &Run, url: &str) {
    assert_eq!(r.code, 3, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stderr
            .contains(&format!("node node-a: API server {url} unreachable: ")),
        "{}",
        r.stderr
    );
    assert!(users(c).is_empty(), "nothing reached the fake");
}

/// A run refused the front's certificate at its first handshake and tried no other: exit 2 (a
/// configuration problem), stderr naming the server, `problem` (rustls' name for it and its
/// words) and the kubeconfig, one connection to the front, nothing reached the fake.
fn refused_at_once(c: &Cluster, r: &Run, front: &Front, url: &str, problem: &str) {
    assert_eq!(r.code, 2, "{}\n{}", r.stdout, r.stderr);
    let kubeconfig = kube_dir(c).join("kubeconfig");
    assert!(
        r.stderr.contains(&format!(
            "node node-a: API server {url}: certificate refused ({problem}"
        )) && r.stderr.contains(&kubeconfig.display().to_string()),
        "{}",
        r.stderr
    );
    assert_eq!(
        front.connections(),
        1,
        "one handshake, no retry: {}",
        r.stderr
    );
    assert!(!r.stderr.contains("attempts in"), "{}", r.stderr);
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
    let front = Front::start(
        &c.server.url(),
        server_tls(&ca.server(&["127.0.0.1"]), None),
    )
    .await;
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
    let front = Front::start(
        &c.server.url(),
        server_tls(&ca.server(&["127.0.0.1"]), None),
    )
    .await;
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

/// No CA in the kubeconfig: the system's roots (the platform verifier) do not know the test CA,
/// so the certificate is refused (UnknownIssuer) at the first handshake, for good: exit 2, the
/// kubeconfig named, said once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_ca_the_system_store_refuses_an_unknown_issuer_at_once() {
    let c = Cluster::start(vec![]).await;
    let ca = Ca::new();
    let front = Front::start(
        &c.server.url(),
        server_tls(&ca.server(&["127.0.0.1"]), None),
    )
    .await;
    let r = plan(
        &c,
        &format!("    server: {}\n", front.url),
        &token(IDENTITY),
    )
    .await;
    refused_at_once(&c, &r, &front, &front.url, "UnknownIssuer");
    assert!(
        r.stderr.contains(
            "names no certificate-authority, and no authority of the system's trust store signed it"
        ),
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

/// The kubeconfig trusts another CA than the one that signed the server's certificate: refused
/// at the first handshake, naming the kubeconfig whose certificate-authority did not sign it.
/// An authority of another name is an unknown issuer; one of the same name (two kubeadm
/// clusters' `kubernetes`) a bad signature.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_ca_is_refused_at_once_naming_the_kubeconfig() {
    let c = Cluster::start(vec![]).await;
    let ca = Ca::new();
    let kubeconfig = kube_dir(&c).join("kubeconfig");
    for (other, problem, words) in [
        (
            Ca::named("another cluster's CA"),
            "UnknownIssuer",
            "not signed by the certificate-authority of kubeconfig",
        ),
        (
            Ca::new(),
            "BadSignature",
            "though that authority bears its issuer's name",
        ),
    ] {
        let tls = server_tls(&ca.server(&["127.0.0.1"]), None);
        let front = Front::start(&c.server.url(), tls).await;
        let r = plan(&c, &trusting(&front.url, &other), &token(IDENTITY)).await;
        refused_at_once(&c, &r, &front, &front.url, problem);
        assert!(
            r.stderr.contains(words) && r.stderr.contains(&kubeconfig.display().to_string()),
            "{}",
            r.stderr
        );
    }
}

/// A server certificate valid only in 2020: refused at the first handshake (Expired), naming
/// when it expired and the node's clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_certificate_is_refused_at_once_naming_its_validity() {
    let c = Cluster::start(vec![]).await;
    let ca = Ca::new();
    let expired = ca.expired_server(&["127.0.0.1"]);
    let front = Front::start(&c.server.url(), server_tls(&expired, None)).await;
    let r = plan(&c, &trusting(&front.url, &ca), &token(IDENTITY)).await;
    refused_at_once(&c, &r, &front, &front.url, "Expired");
    assert!(
        r.stderr.contains(
            "certificate refused (Expired): not valid after 2021-01-01T00:00:00Z, and the \
             node's clock says "
        ),
        "{}",
        r.stderr
    );
}

/// `insecure-skip-tls-verify: true` and no CA: the server is not verified, and it works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insecure_skip_tls_verify_accepts_an_unknown_issuer() {
    let c = Cluster::start(vec![]).await;
    let ca = Ca::new();
    let front = Front::start(
        &c.server.url(),
        server_tls(&ca.server(&["127.0.0.1"]), None),
    )
    .await;
    let cluster = format!(
        "    server: {}\n    insecure-skip-tls-verify: true\n",
        front.url
    );
    let r = plan(&c, &cluster, &token(IDENTITY)).await;
    succeeded_as(&c, &r, IDENTITY);
}

/// A server certificate for the DNS name `api.test` only, reached at `https://127.0.0.1:PORT`:
/// without `tls-server-name` the name does not match and the certificate is refused at the
/// first handshake (NotValidForName, the URL's host named); with a `tls-server-name` it does
/// not carry, the same, that name named; with `tls-server-name: api.test` the certificate is
/// checked against that name and it works.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_server_name_is_the_name_the_certificate_is_checked_against() {
    let c = Cluster::start(vec![]).await;
    let ca = Ca::new();
    let tls = || server_tls(&ca.server(&["api.test"]), None);
    let front = Front::start(&c.server.url(), tls()).await;
    let url = format!("https://127.0.0.1:{}", front.port());
    let r = plan(&c, &trusting(&url, &ca), &token(IDENTITY)).await;
    refused_at_once(&c, &r, &front, &url, "NotValidForName");
    assert!(
        r.stderr
            .contains("not valid for 127.0.0.1, the host of its server URL in kubeconfig")
            && r.stderr.contains("it is valid for DnsName(\"api.test\")"),
        "{}",
        r.stderr
    );
    let front = Front::start(&c.server.url(), tls()).await;
    let url = format!("https://127.0.0.1:{}", front.port());
    let other = format!("{}    tls-server-name: api.other\n", trusting(&url, &ca));
    let r = plan(&c, &other, &token(IDENTITY)).await;
    refused_at_once(&c, &r, &front, &url, "NotValidForName");
    assert!(
        r.stderr
            .contains("not valid for api.other, its tls-server-name in kubeconfig"),
        "{}",
        r.stderr
    );
    let named = format!("{}    tls-server-name: api.test\n", trusting(&url, &ca));
    let r = plan(&c, &named, &token(IDENTITY)).await;
    succeeded_as(&c, &r, IDENTITY);
}

/// Every command that reads the cluster (`check`, `plan`, `drain`, `forecast`, `reboot`,
/// `status`; `drain` and `reboot` also waiting for a drain slot) ends at once on a refused
/// certificate: exit 2, the problem and the kubeconfig
/// named, one handshake per request it sends at once (`reboot`: the prepare's read, the drain's
/// list and the watch that holds the cordon), none sent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_ends_at_once_on_a_refused_certificate() {
    let c = Cluster::start(vec![pod(NS, "web", NODE)]).await;
    let (ca, other) = (Ca::new(), Ca::named("another cluster's CA"));
    let front = Front::start(
        &c.server.url(),
        server_tls(&ca.server(&["127.0.0.1"]), None),
    )
    .await;
    let kc = kubeconfig_with(
        &kube_dir(&c),
        "kubeconfig",
        &trusting(&front.url, &other),
        &token(IDENTITY),
    );
    let config = config_with(&c, "config.toml", &kc);
    // A mutant that retries would stop at the drain's deadline, not run for two minutes.
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, format!("{text}[drain]\ntimeout = \"5s\"\n")).unwrap();
    // With drain slots, `drain` and `reboot` wait for one first (its reads, not the node's).
    let slots = c.dir.path().join("slots.toml");
    std::fs::write(
        &slots,
        format!("{text}[drain]\ntimeout = \"5s\"\n[fleet]\nslots = 1\n"),
    )
    .unwrap();
    let waiting: &[&str] = &["--slot-timeout", "5s"];
    let runs = ["check", "plan", "drain", "forecast", "reboot", "status"]
        .map(|command| (command, &config, &[][..]))
        .into_iter()
        .chain([("drain", &slots, waiting), ("reboot", &slots, waiting)]);
    for (command, config, more) in runs {
        let before = front.connections();
        let args: Vec<&str> = std::iter::once(command)
            .chain(more.iter().copied())
            .collect();
        let r = cli(config, &args).await;
        assert_eq!(r.code, 2, "{command}: {}\n{}", r.stdout, r.stderr);
        assert!(
            r.stderr.contains("certificate refused (UnknownIssuer)")
                && r.stderr.contains(&kc.display().to_string()),
            "{command}: {}",
            r.stderr
        );
        let sent = front.connections() - before;
        assert!(
            (1..=3).contains(&sent),
            "{command}: {sent} handshakes: {}",
            r.stderr
        );
    }
    assert!(users(&c).is_empty(), "nothing reached the fake");
}

/// The server's certificate changes during a drain to one the kubeconfig does not trust (its
/// connections closed): the eviction the budget keeps refusing is not tried again once its
/// certificate is refused; the pod is failed, naming the refusal, and the drain ends before its
/// deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_refused_during_the_drain_fails_the_eviction_at_once() {
    let c = Cluster::start(vec![
        pod(NS, "guarded", NODE),
        pdb(NS, "guarded-pdb", "guarded", 1),
    ])
    .await;
    let ca = Ca::new();
    let front = Front::start(
        &c.server.url(),
        server_tls(&ca.server(&["127.0.0.1"]), None),
    )
    .await;
    let kc = kubeconfig_with(
        &kube_dir(&c),
        "kubeconfig",
        &trusting(&front.url, &ca),
        &token(IDENTITY),
    );
    let text = format!(
        "node_name = \"{NODE}\"\nkubeconfig = \"{}\"\nstate_dir = \"{}\"\n\
         request_timeout = \"2s\"\n[drain]\nretry_interval = \"200ms\"\n",
        kc.display(),
        c.dir.path().join("state").display()
    );
    let settings = kube_shutdown_drain::config::Settings::from_str_at(&kc, &text).unwrap();
    let engine = kube_shutdown_drain::engine::Engine::new(std::sync::Arc::new(settings)).unwrap();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(20);
    let swap = async {
        until("a refused eviction", || {
            c.server.recorder().count("POST", "/eviction") >= 1
        })
        .await;
        let stranger = Ca::named("another cluster's CA");
        front.swap(server_tls(&stranger.server(&["127.0.0.1"]), None));
    };
    let (report, ()) = tokio::join!(engine.drain(deadline), swap);
    let text = report.to_text();
    assert!(!report.deadline_reached, "{text}");
    let row = report.pods.iter().find(|p| p.name == "guarded").unwrap();
    assert_eq!(
        row.outcome,
        kube_shutdown_drain::report::Outcome::Failed,
        "{text}"
    );
    assert!(
        row.detail
            .as_deref()
            .is_some_and(|d| d.contains("certificate refused (UnknownIssuer)")),
        "{text}"
    );
    assert!(c.pod(NS, "guarded").is_some(), "the pod stays");
}

/// A transient failure is still retried: `plan` against a port where nothing listens yet
/// (connection refused) tries again until the front comes up there, and succeeds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_connection_is_retried_until_the_server_comes_up() {
    let c = Cluster::start(vec![]).await;
    let ca = Ca::new();
    let port = {
        let free = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        free.local_addr().unwrap().port()
    };
    let url = format!("https://127.0.0.1:{port}");
    let kc = kubeconfig_with(
        &kube_dir(&c),
        "kubeconfig",
        &trusting(&url, &ca),
        &token(IDENTITY),
    );
    let config = config_with(&c, "config.toml", &kc);
    let run =
        tokio::spawn(async move { cli_with_log(&config, &["plan"], NO_BUS, Some("debug")).await });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    let tls = server_tls(&ca.server(&["127.0.0.1"]), None);
    let front = Front::on(listener, &c.server.url(), tls);
    let r = run.await.unwrap();
    succeeded_as(&c, &r, IDENTITY);
    assert!(
        r.stderr.contains("request succeeded after"),
        "refused first, then retried: {}",
        r.stderr
    );
    assert!(front.connections() >= 1);
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
    let front = Front::start(
        &c.server.url(),
        server_tls(&ca.server(&["127.0.0.1"]), Some(&ca)),
    )
    .await;
    let cluster = trusting(&front.url, &ca);
    let client = ca.client();

    // The server's alert reaches the client, or only its end of the connection (TLS 1.3: the
    // client's handshake is over before the server reads its certificate): transient either
    // way, as a server restarting may send one.
    let r = plan(&c, &cluster, &token(IDENTITY)).await;
    failed_unreachable(&c, &r, &front.url);
    assert!(
        r.stderr
            .contains("TLS handshake failed: received fatal alert: CertificateRequired")
            || r.stderr.contains("connection closed before an answer"),
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
    let front = Front::start(
        &c.server.url(),
        server_tls(&ca.server(&["127.0.0.1"]), Some(&ca)),
    )
    .await;
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
    let front = Front::start(
        &c.server.url(),
        server_tls(&ca.server(&["127.0.0.1"]), None),
    )
    .await;
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
