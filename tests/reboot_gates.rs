//! The cluster-health gates of a reboot (issue 42), read with real parts: a fleet of three Nodes
//! on the fake API server whose kubelet stops and starts again (`[fleet] max_unready`), and a
//! real Prometheus (Debian's `prometheus`, started here on loopback) whose alert rule fires
//! while a metric this test serves says so (`[fleet.alerts]`). Each holds the node and lets it
//! go again; an unreachable Prometheus holds it as `unknown`. An Alertmanager answer behind a TLS
//! front of a test CA shows `ca_file` and `bearer_token_file` at work.

mod engine_support;
mod tls_support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use engine_support::*;
use kube_shutdown_drain::config::Settings;
use kube_shutdown_drain::engine::Engine;
use kube_shutdown_drain::reboot::holds::{Context, Holds, Key};
use kube_shutdown_drain::reboot::holds_read::holds;
use kube_shutdown_drain::reboot::window::Windows;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;

const THIRD_NODE: &str = "node-c";

/// What holds `settings`' node now, read with its identity within 5 s.
async fn holds_now(settings: &Arc<Settings>) -> Holds {
    let engine = Engine::new(settings.clone()).unwrap();
    let clients = engine.clients().await.unwrap();
    let windows = Windows::any_time();
    let cx = Context::new(settings, &settings.reboot, &windows, None, None);
    holds(clients, &cx, Instant::now() + Duration::from_secs(5)).await
}

/// Judges `settings`' holds every 200 ms until `want` says yes of them, within `limit`.
async fn until_holds(
    settings: &Arc<Settings>,
    limit: Duration,
    what: &str,
    want: impl Fn(&Holds) -> bool,
) -> Holds {
    let deadline = Instant::now() + limit;
    loop {
        let h = holds_now(settings).await;
        if want(&h) {
            return h;
        }
        assert!(
            Instant::now() < deadline,
            "{what} not seen within {limit:?}; the holds of node {}: {h}",
            settings.node_name
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The settings of `node` (its own identity) with `extra` TOML.
fn settings_of(c: &Cluster, node: &str, extra: &str) -> Arc<Settings> {
    let mut s = (*c.settings_as(&identity_of(node), extra)).clone();
    s.node_name = node.to_string();
    Arc::new(s)
}

/// A fleet of three, `max_unready = 1`: node-c's kubelet stops, the node-lifecycle controller
/// marks it NotReady, and node-a and node-b both wait (`unready_nodes`, naming node-c); its
/// kubelet starts again and both may go. An admin's cordon of node-c holds them the same way.
#[tokio::test]
async fn a_fleet_of_three_with_max_unready_1_waits_while_one_node_is_not_ready() {
    let c = Cluster::start(vec![node(THIRD_NODE)]).await;
    c.server
        .kubelets()
        .set_timing(Duration::from_millis(100), Duration::from_millis(800));
    let extra = "[fleet]\nslots = 1\nmax_unready = 1\n";
    let others = [
        settings_of(&c, NODE, extra),
        settings_of(&c, OTHER_NODE, extra),
    ];
    for s in &others {
        let h = holds_now(s).await;
        assert!(h.may_go(), "every node Ready: {h}");
    }
    c.server.kubelets().stop(THIRD_NODE).unwrap();
    for s in &others {
        let h = until_holds(s, Duration::from_secs(10), "unready_nodes", |h| {
            h.keys() == [Key::UnreadyNodes]
        })
        .await;
        assert!(
            h.to_string().starts_with(&format!(
                "1 other node of node {}'s group all is out (node-c NotReady): max_unready 1",
                s.node_name
            )),
            "{h}"
        );
    }
    c.server.kubelets().start(THIRD_NODE).unwrap();
    for s in &others {
        until_holds(s, Duration::from_secs(10), "nothing holding", Holds::may_go).await;
    }
    // Cordoned by someone else: out too, though Ready.
    cordon(&c, THIRD_NODE, true);
    for s in &others {
        let h = holds_now(s).await;
        assert_eq!(h.keys(), [Key::UnreadyNodes], "{h}");
        assert!(
            h.to_string().contains("(node-c cordoned by someone else)"),
            "{h}"
        );
    }
    cordon(&c, THIRD_NODE, false);
    // Without max_unready the group is not read and nothing holds.
    let plain = settings_of(&c, NODE, "[fleet]\nslots = 1\n");
    c.server.kubelets().stop(THIRD_NODE).unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let before = c.server.recorder().requests().len();
    assert!(holds_now(&plain).await.may_go());
    assert!(
        c.server.recorder().requests()[before..]
            .iter()
            .all(|q| q.path != "/api/v1/nodes"),
        "no Node list without max_unready"
    );
}

fn cordon(c: &Cluster, node: &str, on: bool) {
    c.server
        .store()
        .modify("Node", None, node, |n| {
            n["spec"]["unschedulable"] = serde_json::json!(on)
        })
        .unwrap();
}

/// The metric the alert rules read, served from a file the test rewrites: one HTTP answer per
/// connection (Prometheus scrapes every second).
async fn serve_metric(file: PathBuf) -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((mut conn, _)) = listener.accept().await else {
                return;
            };
            let body = std::fs::read_to_string(&file).unwrap_or_default();
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut buf = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match conn.read(&mut buf).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&buf[..n]),
                    }
                }
                let answer = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n\
                     Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(answer.as_bytes()).await;
            });
        }
    });
    port
}

/// A loopback port free a moment ago.
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A Prometheus of its own: its port, its files, killed when dropped.
struct Prometheus {
    child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

const RULES: &str = "groups:
  - name: gate
    rules:
      - alert: GateTestFiring
        expr: gate_test_flag > 0
      - alert: GateTestPending
        expr: gate_test_flag > 0
        for: 1h
";

impl Prometheus {
    /// Starts `/usr/bin/prometheus` on a free loopback port, scraping `target` and judging its
    /// rules every second; `None` when it is not installed (after [`skip_or_fail`]).
    async fn start(target: u16) -> Option<Prometheus> {
        let binary = Path::new("/usr/bin/prometheus");
        if !binary.exists() {
            skip_or_fail(
                "/usr/bin/prometheus is missing: scripts/install-deps installs prometheus",
            );
            return None;
        }
        for _ in 0..5 {
            let dir = tempfile::Builder::new()
                .prefix("ksd-prom-")
                .tempdir()
                .unwrap();
            std::fs::write(dir.path().join("rules.yml"), RULES).unwrap();
            std::fs::write(
                dir.path().join("prometheus.yml"),
                format!(
                    "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
                     rule_files: [\"{}\"]\nscrape_configs:\n  - job_name: gate\n    \
                     static_configs:\n      - targets: [\"127.0.0.1:{target}\"]\n",
                    dir.path().join("rules.yml").display()
                ),
            )
            .unwrap();
            let port = free_port();
            let log = std::fs::File::create(dir.path().join("prometheus.log")).unwrap();
            let child = Command::new(binary)
                .arg(format!(
                    "--config.file={}",
                    dir.path().join("prometheus.yml").display()
                ))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.path().join("data").display()
                ))
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                .stdin(Stdio::null())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .spawn()
                .expect("/usr/bin/prometheus starts");
            let mut p = Prometheus { child, port, dir };
            if p.ready(Duration::from_secs(30)).await {
                return Some(p);
            }
            eprintln!(
                "prometheus on port {port} did not get ready; trying another port; its log:\n{}",
                p.log()
            );
        }
        panic!("prometheus did not start on a loopback port in five tries");
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("prometheus.log")).unwrap_or_default()
    }

    /// Whether `/-/ready` answers 200 within `limit` (and the process still runs).
    async fn ready(&mut self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        while Instant::now() < deadline {
            if matches!(self.child.try_wait(), Ok(Some(_))) {
                return false;
            }
            if let Ok(mut conn) = TcpStream::connect(("127.0.0.1", self.port)).await {
                let ask = "GET /-/ready HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
                let mut answer = String::new();
                if conn.write_all(ask.as_bytes()).await.is_ok()
                    && conn.read_to_string(&mut answer).await.is_ok()
                    && answer.starts_with("HTTP/1.1 200")
                {
                    return true;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        false
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

/// A real Prometheus: while the metric says 1, its alert fires (and a second one, with
/// `for: 1h`, is pending) and the node waits (`alerts_firing`, naming both); `firing_only` and a
/// `filter` leave them as kured does; the metric back at 0, the node may go; Prometheus gone,
/// the node waits as `unknown`, naming the URL.
#[tokio::test]
async fn a_real_prometheus_alert_holds_the_node_and_lets_it_go() {
    let c = Cluster::start(vec![]).await;
    let flag = c.dir.path().join("metric.prom");
    std::fs::write(&flag, "gate_test_flag 0\n").unwrap();
    let target = serve_metric(flag.clone()).await;
    let Some(prometheus) = Prometheus::start(target).await else {
        return;
    };
    let url = prometheus.url();
    let alerts = |extra: &str| {
        c.settings(&format!(
            "[fleet.alerts]\nprometheus_url = \"{url}/\"\n{extra}"
        ))
    };
    let all = alerts("");
    let h = holds_now(&all).await;
    assert!(h.may_go(), "no alert yet: {h}\n{}", prometheus.log());
    std::fs::write(&flag, "gate_test_flag 1\n").unwrap();
    let h = until_holds(&all, Duration::from_secs(30), "alerts_firing", |h| {
        h.to_string().contains("GateTestPending (pending)")
    })
    .await;
    assert_eq!(h.keys(), [Key::AlertsFiring], "{h}");
    assert_eq!(
        h.to_string(),
        format!(
            "2 alerts are active at Prometheus {url}: GateTestFiring, GateTestPending \
             (pending); node node-a waits until none does"
        )
    );
    // kured's flags: the pending one does not count with firing_only, and the filter leaves
    // the firing one (or, with match_only, keeps only it).
    let firing_only = alerts("firing_only = true");
    let h = holds_now(&firing_only).await;
    assert!(
        h.to_string()
            .contains(": GateTestFiring; node node-a waits"),
        "{h}"
    );
    let filtered = alerts("firing_only = true\nfilter = \"^GateTestFiring$\"");
    let h = holds_now(&filtered).await;
    assert!(h.may_go(), "{h}");
    let only = alerts("filter = \"Pending\"\nmatch_only = true");
    let h = holds_now(&only).await;
    assert!(
        h.to_string().contains(": GateTestPending (pending); node"),
        "{h}"
    );
    // The metric back at 0: the alerts resolve and the node may go.
    std::fs::write(&flag, "gate_test_flag 0\n").unwrap();
    until_holds(
        &all,
        Duration::from_secs(30),
        "nothing holding",
        Holds::may_go,
    )
    .await;
    // Prometheus gone: the node waits, and the message names the URL.
    drop(prometheus);
    let h = holds_now(&all).await;
    assert_eq!(h.keys(), [Key::Unknown], "{h}");
    assert!(
        h.to_string().starts_with(&format!(
            "cannot tell whether an alert of Prometheus fires, so node node-a waits: \
             {url}/api/v1/alerts: "
        )),
        "{h}"
    );
}

/// `alertmanager_url` over https: the server checked against `ca_file`, the token of
/// `bearer_token_file` sent and read again at each query (a rotated token is used at once);
/// a server of another CA is an `unknown` naming the URL.
#[tokio::test]
async fn an_alertmanager_over_https_is_checked_against_ca_file_and_given_the_token() {
    let c = Cluster::start(vec![]).await;
    let answer = c.dir.path().join("alerts.json");
    std::fs::write(
        &answer,
        r#"[{"labels":{"alertname":"NodeDown"},"status":{"state":"active","silencedBy":[],"inhibitedBy":[]}}]"#,
    )
    .unwrap();
    let upstream = serve_metric(answer.clone()).await;
    let ca = tls_support::Ca::new();
    let tls = tls_support::server_tls(&ca.server(&["127.0.0.1"]), None);
    let front = tls_support::Front::start(&format!("http://127.0.0.1:{upstream}"), tls).await;
    let (ca_file, token) = (c.dir.path().join("ca.crt"), c.dir.path().join("token"));
    std::fs::write(&ca_file, &ca.pem).unwrap();
    std::fs::write(&token, "first-token\n").unwrap();
    let settings = c.settings(&format!(
        "[fleet.alerts]\nalertmanager_url = \"{}\"\nca_file = \"{}\"\n\
         bearer_token_file = \"{}\"\n",
        front.url,
        ca_file.display(),
        token.display()
    ));
    let h = holds_now(&settings).await;
    assert_eq!(h.keys(), [Key::AlertsFiring], "{h}");
    assert_eq!(
        h.to_string(),
        format!(
            "1 alert is active at Alertmanager {}: NodeDown; node node-a waits until none does",
            front.url
        )
    );
    std::fs::write(&token, "second-token").unwrap();
    std::fs::write(&answer, "[]").unwrap();
    let h = holds_now(&settings).await;
    assert!(h.may_go(), "{h}");
    assert_eq!(
        front.authorizations(),
        ["Bearer first-token", "Bearer second-token"]
    );
    // A CA that did not sign the server's certificate: nothing is sent, the node waits.
    std::fs::write(&ca_file, &tls_support::Ca::new().pem).unwrap();
    let h = holds_now(&settings).await;
    assert_eq!(h.keys(), [Key::Unknown], "{h}");
    let text = h.to_string();
    assert!(
        text.starts_with(&format!(
            "cannot tell whether an alert of Alertmanager fires, so node node-a waits: {}/api/v2/alerts?active=true",
            front.url
        )) && text.contains("certificate"),
        "{text}"
    );
    assert_eq!(
        front.authorizations().len(),
        2,
        "no token to an unchecked server"
    );
}
