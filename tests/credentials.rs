//! Credentials against the fake API server and the real binary: a `tokenFile` read like our
//! other files and trimmed as client-go does; exec credential plugins (shell scripts in a temp
//! dir) that succeed with an expiry, fail with a token in their output, arguments and
//! environment, or hang; a server URL's user name and password never printed; a TLS failure
//! named as such; a 404 that is not the API server's named with its path.

mod engine_support;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use engine_support::*;
use kube_shutdown_drain::api::Credentials;
use kube_shutdown_drain::engine::Engine;
use tokio::time::Instant;

const SECRET: &str = "s3cr3t-token-never-printed";

/// A kubeconfig for the fake at `server` whose user is `user` (YAML lines under `user:`).
fn kubeconfig_with(dir: &Path, name: &str, server: &str, user: &str) -> PathBuf {
    let path = dir.join(name);
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {server}\n\
         users:\n- name: u\n  user:\n{user}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    \
         user: u\ncurrent-context: fake\n"
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// A config file whose kubeconfig points at the fake with `user` (YAML lines under `user:`).
fn config_for_user(c: &Cluster, user: &str) -> (PathBuf, PathBuf) {
    let kc = kubeconfig_with(c.dir.path(), "kubeconfig", &c.server.url(), user);
    (config_with(c, "config.toml", &kc), kc)
}

/// An executable shell script `name` in `dir`.
fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// The `exec:` lines of a kubeconfig user running `command` with `args` and one env entry.
fn exec_user(command: &Path, args: &[&str]) -> String {
    let args: Vec<String> = args.iter().map(|a| format!("      - {a}\n")).collect();
    format!(
        "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: {}\n      \
         interactiveMode: Never\n      args:\n{}      env:\n      - name: PLUGIN_SECRET\n        \
         value: {SECRET}\n",
        command.display(),
        args.concat()
    )
}

/// An ExecCredential with `token`, expiring at `expiry` (RFC 3339) when given.
fn credential_json(token: &str, expiry: Option<&str>) -> String {
    let expiry = expiry
        .map(|e| format!(",\"expirationTimestamp\":\"{e}\""))
        .unwrap_or_default();
    format!(
        "{{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\
         \"status\":{{\"token\":\"{token}\"{expiry}}}}}"
    )
}

fn runs(counter: &Path) -> usize {
    std::fs::read_to_string(counter)
        .map(|t| t.lines().count())
        .unwrap_or(0)
}

/// What `kubectl create token NAME > file` writes: the token and a newline. It works; the
/// request carries the token without the newline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_file_ending_in_a_newline_is_trimmed_and_works() {
    let c = Cluster::start(vec![pod(NS, "web", NODE)]).await;
    let token = c.dir.path().join("token");
    std::fs::write(&token, "system:node:node-a\n").unwrap();
    let (config, _) = config_for_user(&c, &format!("    tokenFile: {}\n", token.display()));
    let r = cli(&config, &["plan"]).await;
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(r.stdout.contains("work/web"), "{}", r.stdout);
    let users = users(&c);
    assert!(
        users.iter().all(|u| u == "system:node:node-a"),
        "the file's token, trimmed, on every request: {users:?}"
    );
}

/// A FIFO, a device and an empty file as `tokenFile` are refused at once, naming the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_file_that_is_not_a_small_regular_file_is_refused_naming_it() {
    let c = Cluster::start(vec![]).await;
    let fifo = c.dir.path().join("token-fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
    let empty = c.dir.path().join("token-empty");
    std::fs::write(&empty, " \n").unwrap();
    for (file, says) in [
        (fifo.clone(), "is a FIFO, not a regular file"),
        (
            PathBuf::from("/dev/zero"),
            "is a character device, not a regular file",
        ),
        (empty.clone(), "holds no token"),
    ] {
        let (config, _) = config_for_user(&c, &format!("    tokenFile: {}\n", file.display()));
        let r = tokio::time::timeout(Duration::from_secs(30), cli(&config, &["plan"]))
            .await
            .expect("a FIFO without a writer does not hang the read");
        assert_eq!(r.code, 2, "{}\n{}", r.stdout, r.stderr);
        assert!(
            r.stderr.contains(&format!("token file {}", file.display())) && r.stderr.contains(says),
            "{}",
            r.stderr
        );
        assert!(!r.stderr.contains("unreachable"), "{}", r.stderr);
    }
}

/// A plugin that succeeds with an expiry runs once for all of a command's requests; the cache
/// runs it again only when asked to refresh within a span that reaches its expiry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exec_plugin_with_an_expiry_runs_once_and_refreshes_before_it() {
    let c = Cluster::start(vec![pod(NS, "web", NODE)]).await;
    let counter = c.dir.path().join("runs");
    let expiry = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(600);
    let plugin = script(
        c.dir.path(),
        "plugin-ok",
        &format!(
            "echo run >> {}\ncat <<'EOF'\n{}\nEOF",
            counter.display(),
            credential_json("system:node:node-a", Some(&expiry.to_string()))
        ),
    );
    let (config, kc) = config_for_user(&c, &exec_user(&plugin, &[]));
    let r = cli(&config, &["plan"]).await;
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert_eq!(runs(&counter), 1, "one run for the command");
    let users = users(&c);
    assert!(users.iter().all(|u| u == "system:node:node-a"), "{users:?}");

    // The cache a daemon keeps across engines.
    let settings = c.settings("");
    let mut with_plugin = (*settings).clone();
    with_plugin.kubeconfig = kc.clone();
    let settings = std::sync::Arc::new(with_plugin);
    let engine = Engine::new(settings.clone()).unwrap();
    let credentials: Credentials = engine.credentials().clone();
    let soon = Instant::now() + Duration::from_secs(10);
    credentials.prefetch(soon).await.unwrap();
    assert_eq!(runs(&counter), 2);
    assert_eq!(
        credentials.expires_at().map(|t| t.as_second()),
        Some(expiry.as_second())
    );
    assert!(
        !credentials
            .refresh_if_expiring_within(Duration::from_secs(60), soon)
            .await
            .unwrap(),
        "600 s left: no refresh for a 60 s span"
    );
    let later = Engine::with_credentials(settings.clone(), &credentials).unwrap();
    later.node().await.expect("the node, with the cached token");
    assert_eq!(runs(&counter), 2, "a later engine shares the cache");
    assert!(
        credentials
            .refresh_if_expiring_within(Duration::from_secs(900), soon)
            .await
            .unwrap(),
        "a 900 s span reaches the expiry"
    );
    assert_eq!(runs(&counter), 3);

    // A 401 makes the credential stale: the next request runs the plugin again.
    c.server.faults().fail_next(
        fake_apiserver::Route::new("GET", "/api/v1/nodes/node-a"),
        1,
        401,
    );
    assert!(later.node().await.is_err(), "the injected 401");
    later.node().await.expect("the node, after a new run");
    assert_eq!(runs(&counter), 4);
}

/// A failing plugin's error names the command and its exit status; its arguments, environment
/// and output (a token in each) appear nowhere: not on stderr, not in the error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_exec_plugin_is_named_by_command_and_status_without_its_secrets() {
    let c = Cluster::start(vec![]).await;
    let plugin = script(
        c.dir.path(),
        "plugin-fails",
        &format!(
            "echo \"$PLUGIN_SECRET $1\"\necho \"stderr $PLUGIN_SECRET\" >&2\ncat <<'EOF'\n{}\nEOF\nexit 3",
            credential_json(SECRET, None)
        ),
    );
    let (config, kc) = config_for_user(&c, &exec_user(&plugin, &[&format!("--token={SECRET}")]));
    for command in [&["plan"][..], &["drain", "--dry-run"], &["check"]] {
        let r = cli(&config, command).await;
        assert_eq!(r.code, 2, "{command:?}: {}\n{}", r.stdout, r.stderr);
        let all = format!("{}{}", r.stdout, r.stderr);
        assert!(
            !all.contains(SECRET),
            "{command:?} leaked the secret:\n{all}"
        );
        assert!(
            r.stderr.contains(&format!(
                "exec credential plugin {} (kubeconfig {}) exited with status 3",
                plugin.display(),
                kc.display()
            )),
            "{}",
            r.stderr
        );
        assert!(!r.stderr.contains("--token"), "{}", r.stderr);
    }
    assert!(
        c.server.recorder().requests().is_empty(),
        "no request without a credential"
    );
}

/// A plugin that hangs (and leaves a child behind) is killed with its process group after the
/// request timeout; the command ends with an error naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_exec_plugin_is_killed_with_its_children_and_named() {
    let c = Cluster::start(vec![]).await;
    let child_pid = c.dir.path().join("child.pid");
    let plugin = script(
        c.dir.path(),
        "plugin-hangs",
        &format!("sleep 300 &\necho $! > {}\nwait", child_pid.display()),
    );
    let (config, kc) = config_for_user(&c, &exec_user(&plugin, &[]));
    let r = tokio::time::timeout(Duration::from_secs(30), cli(&config, &["plan"]))
        .await
        .expect("plan returns: the plugin has a timeout");
    assert_eq!(r.code, 2, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains(&format!(
            "exec credential plugin {} (kubeconfig {}) gave no answer within 2.0 s and was killed",
            plugin.display(),
            kc.display()
        )),
        "{}",
        r.stderr
    );
    let pid: i32 = std::fs::read_to_string(&child_pid)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let gone = || {
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_err()
            || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| s.contains(") Z "))
    };
    until("the plugin's child is killed with it", gone).await;
}

/// A drain (the daemon's path) with a hanging plugin returns by its deadline, and the plugin
/// is gone once it has returned.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_with_a_hanging_exec_plugin_returns_by_its_deadline() {
    let c = Cluster::start(vec![pod(NS, "web", NODE)]).await;
    let plugin = script(c.dir.path(), "plugin-hangs", "exec sleep 300");
    let (_, kc) = config_for_user(&c, &exec_user(&plugin, &[]));
    let mut settings = (*c.settings("")).clone();
    settings.kubeconfig = kc;
    settings.request_timeout = Duration::from_secs(30);
    let engine = Engine::new(std::sync::Arc::new(settings)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(3);
    let (prepared, report) = tokio::time::timeout(
        Duration::from_secs(20),
        engine.prepare_and_drain("test", deadline, |_| {}),
    )
    .await
    .expect("the drain returns");
    assert!(
        Instant::now() < deadline + Duration::from_secs(2),
        "by the deadline"
    );
    assert!(prepared.is_err());
    assert!(!report.complete);
    assert!(
        report
            .errors
            .iter()
            .any(|e| e.contains("exec credential plugin") && e.contains("plugin-hangs")),
        "{:?}",
        report.errors
    );
    let still = std::process::Command::new("pgrep")
        .args(["-f", &plugin.display().to_string()])
        .output()
        .map(|o| o.status.success());
    if let Ok(running) = still {
        assert!(!running, "the plugin was killed");
    }
}

/// A user name and password in the server URL appear nowhere, in errors naming the server
/// either.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_password_in_the_server_url_is_never_printed() {
    let c = Cluster::start(vec![pod(NS, "web", NODE)]).await;
    let port = c.server.url().rsplit(':').next().unwrap().to_string();
    // The live server, then a port where nothing listens (the error names the server).
    for (port, code) in [(port.as_str(), 0), ("1", 3)] {
        let kc = kubeconfig_with(
            c.dir.path(),
            "kc-userinfo",
            &format!("http://admin:{SECRET}@127.0.0.1:{port}"),
            "    token: admin\n",
        );
        let r = cli(&config_with(&c, "config.toml", &kc), &["plan"]).await;
        assert_eq!(r.code, code, "{}\n{}", r.stdout, r.stderr);
        let all = format!("{}{}", r.stdout, r.stderr);
        assert!(!all.contains(SECRET) && !all.contains("admin:"), "{all}");
        if code == 3 {
            assert!(
                r.stderr
                    .contains("API server http://127.0.0.1:1 unreachable"),
                "{}",
                r.stderr
            );
        }
    }
}

/// `https://` to a plain-HTTP server: the error says TLS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_to_a_plain_http_server_is_named_a_tls_failure() {
    let c = Cluster::start(vec![]).await;
    let https = c.server.url().replace("http://", "https://");
    let kc = kubeconfig_with(c.dir.path(), "kc-https", &https, "    token: admin\n");
    let r = cli(&config_with(&c, "config.toml", &kc), &["plan"]).await;
    assert_eq!(r.code, 3, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains(&format!(
            "API server {https} unreachable: TLS handshake failed"
        )) && r.stderr.contains("did not answer in TLS"),
        "{}",
        r.stderr
    );
}

/// A server URL with a path prefix the server does not serve: the 404 has no Status body, and
/// the error names the status, the path and the prefix, never "node does not exist".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_404_that_is_not_the_api_servers_names_the_path_not_a_missing_node() {
    let c = Cluster::start(vec![]).await;
    let prefixed = format!("{}/k8s", c.server.url());
    let kc = kubeconfig_with(c.dir.path(), "kc-prefix", &prefixed, "    token: admin\n");
    let config = config_with(&c, "config.toml", &kc);
    for command in ["check", "status"] {
        let r = cli(&config, &[command]).await;
        assert_eq!(r.code, 3, "{command}: {}\n{}", r.stdout, r.stderr);
        assert!(
            r.stderr
                .contains("the server answered 404 for /k8s/api/v1/nodes/node-a")
                && r.stderr.contains("path prefix"),
            "{command}: {}",
            r.stderr
        );
        assert!(!r.stderr.contains("does not exist"), "{}", r.stderr);
    }
}

/// Auth providers other than `oidc` are refused before any request, naming the kubeconfig and
/// the exec plugin that replaces the provider; an `oidc` provider without its `id-token` too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_providers_but_oidc_are_refused_naming_the_kubeconfig_and_the_plugin_to_use() {
    let c = Cluster::start(vec![]).await;
    let cases = [
        (
            "      auth-provider:\n        name: gcp\n        config:\n          access-token: t\n",
            "auth provider `gcp` is not supported",
            "use gke-gcloud-auth-plugin exec credential plugin",
        ),
        (
            "      auth-provider:\n        name: azure\n",
            "auth provider `azure` is not supported",
            "use kubelogin exec credential plugin",
        ),
        (
            "      auth-provider:\n        name: oidc\n        config:\n          client-id: x\n",
            "the oidc auth provider has no id-token",
            "",
        ),
    ];
    for (i, (user, said, plugin)) in cases.into_iter().enumerate() {
        let kc = kubeconfig_with(c.dir.path(), &format!("kc-{i}"), &c.server.url(), user);
        let r = cli(
            &config_with(&c, &format!("config-{i}.toml"), &kc),
            &["plan"],
        )
        .await;
        assert_ne!(r.code, 0, "{user}: {}\n{}", r.stdout, r.stderr);
        let named = format!("kubeconfig {}: ", kc.display());
        assert!(
            r.stderr.contains(&format!("{named}{said}")) && r.stderr.contains(plugin),
            "{user}: {}",
            r.stderr
        );
    }
    assert!(users(&c).is_empty(), "no request was sent: {:?}", users(&c));
}

/// A proxy in the kubeconfig is refused before any request, naming the kubeconfig: the node
/// reaches its API server directly (kube without its proxy features refused it too).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_url_is_refused_naming_the_kubeconfig() {
    let c = Cluster::start(vec![]).await;
    let path = c.dir.path().join("kc-proxy");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: {}\n    \
         proxy-url: http://127.0.0.1:1\nusers:\n- name: u\n  user:\n    token: admin\n\
         contexts:\n- name: fake\n  context:\n    cluster: fake\n    user: u\n\
         current-context: fake\n",
        c.server.url()
    );
    std::fs::write(&path, text).unwrap();
    let r = cli(&config_with(&c, "config.toml", &path), &["plan"]).await;
    assert_ne!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    assert!(
        r.stderr.contains(&format!(
            "kubeconfig {}: a proxy (its proxy-url, or HTTPS_PROXY in the environment) is not \
             supported",
            path.display()
        )),
        "{}",
        r.stderr
    );
    assert!(users(&c).is_empty(), "no request was sent: {:?}", users(&c));
}
