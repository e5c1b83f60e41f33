//! The FleetLock server spoken to as zincati speaks to it, over real HTTP on 127.0.0.1, with a
//! fake answerer in the daemon's place: steady-state at start, pre-reboot asked again until 200;
//! every bad request refused with a 4xx, a `kind` and a `value`, and the answerer never asked;
//! a caller that is not the agent refused at accept without a question; slow, idle and surplus
//! clients bounded, and the agent answered while 500 connections of another user are held open.
//! curl and bash are the clients where another uid is needed.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube_shutdown_drain::reboot::fleetlock::{Kind, Operation, Request};
use kube_shutdown_drain::reboot::server::{Answer, Identity, Limits, Question, Server};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// zincati's id for the node under test (any 32 hex digits; the server is told it).
const NODE_ID: &str = "c988d2509fdf5cdcbed39037c56406fb";

/// What the fake answerer saw.
type Seen = Arc<Mutex<Vec<Request>>>;

/// A server on a free loopback port for the agent `uid`, and its fake answerer, which answers
/// each question with `answer(request, how many were asked before)`.
async fn start(
    uid: u32,
    limits: Limits,
    answer: impl Fn(&Request, usize) -> Option<Answer> + Send + 'static,
) -> (SocketAddr, Seen) {
    let (tx, mut rx) = mpsc::channel::<Question>(1);
    let identity = Identity {
        node_id: NODE_ID.into(),
        agent_user: "the-agent".into(),
        agent_uid: uid,
    };
    let server = Server::bind("127.0.0.1:0".parse().unwrap(), identity, limits, tx)
        .await
        .unwrap();
    let addr = server.local_addr().unwrap();
    tokio::spawn(server.run());
    let seen = Seen::default();
    let record = seen.clone();
    tokio::spawn(async move {
        // Questions left unanswered are kept, so their askers time out rather than fail.
        let mut unanswered = Vec::new();
        while let Some(q) = rx.recv().await {
            let n = {
                let mut seen = record.lock().unwrap();
                seen.push(q.request.clone());
                seen.len() - 1
            };
            match answer(&q.request, n) {
                Some(a) => {
                    let _ = q.answer.send(a);
                }
                None => unanswered.push(q),
            }
        }
    });
    (addr, seen)
}

fn me() -> u32 {
    nix::unistd::geteuid().as_raw()
}

fn body(id: &str, group: &str) -> String {
    // zincati sends `serde_json::to_string_pretty` of its client identity.
    serde_json::to_string_pretty(&serde_json::json!({
        "client_params": { "id": id, "group": group }
    }))
    .unwrap()
}

/// A request as zincati's reqwest client writes it.
fn zincati(addr: SocketAddr, path: &str, body: &str) -> String {
    format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\naccept: */*\r\nfleet-lock-protocol: true\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Sends `raw` on a new connection; the status and the body of the answer (the server closes
/// every connection after one answer).
async fn send(addr: SocketAddr, raw: &[u8]) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(raw).await.unwrap();
    read_answer(&mut stream).await
}

async fn read_answer(stream: &mut TcpStream) -> (u16, String) {
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut out))
        .await
        .expect("the server answers and closes")
        .unwrap();
    let text = String::from_utf8(out).unwrap();
    let status = text
        .get(9..12)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {text:?}"));
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (status, body.to_string())
}

/// The error body's `kind` and `value`.
fn error(body: &str) -> (String, String) {
    let v: serde_json::Value =
        serde_json::from_str(body).unwrap_or_else(|e| panic!("{body:?}: {e}"));
    (
        v["kind"].as_str().unwrap().to_string(),
        v["value"].as_str().unwrap().to_string(),
    )
}

#[tokio::test]
async fn zincati_asks_steady_state_at_start_then_pre_reboot_until_it_is_granted() {
    let (addr, seen) = start(me(), Limits::default(), |r, n| {
        Some(match (r.operation, n) {
            (Operation::SteadyState, _) => Answer::Released,
            (Operation::PreReboot, 1 | 2) => Answer::Refused {
                kind: Kind::Draining,
                why: "node worker-1 is draining: 3 pods left".into(),
            },
            (Operation::PreReboot, _) => Answer::Granted,
        })
    })
    .await;
    let b = body(NODE_ID, "default");
    // At start, with no finalization pending: steady-state until it succeeds.
    let (status, _) = send(addr, zincati(addr, "/v1/steady-state", &b).as_bytes()).await;
    assert_eq!(status, 200);
    // An update staged: pre-reboot until 200, each refusal the protocol's error body.
    let mut tries = 0;
    loop {
        tries += 1;
        let (status, reply) = send(addr, zincati(addr, "/v1/pre-reboot", &b).as_bytes()).await;
        if status == 200 {
            break;
        }
        assert_eq!(status, 409);
        assert_eq!(
            error(&reply),
            (
                "drain_in_progress".into(),
                "node worker-1 is draining: 3 pods left".into()
            )
        );
        assert!(tries < 10, "never granted");
    }
    assert_eq!(tries, 3);
    let asked: Vec<_> = seen.lock().unwrap().clone();
    let request = |operation| Request {
        operation,
        id: NODE_ID.into(),
        group: "default".into(),
    };
    assert_eq!(
        asked,
        vec![
            request(Operation::SteadyState),
            request(Operation::PreReboot),
            request(Operation::PreReboot),
            request(Operation::PreReboot),
        ]
    );
}

/// curl, as an independent client, gets the same answers: 200 from steady-state, a JSON error
/// from a refused pre-reboot.
#[tokio::test]
async fn curl_speaking_the_protocol_gets_200_and_the_json_refusal() {
    let (addr, _seen) = start(me(), Limits::default(), |r, _| {
        Some(match r.operation {
            Operation::SteadyState => Answer::Released,
            Operation::PreReboot => Answer::Refused {
                kind: Kind::SemaphoreFull,
                why: "both drain slots are taken (by worker-2, worker-3)".into(),
            },
        })
    })
    .await;
    let (status, _) = curl(addr, "/v1/steady-state", None).await;
    assert_eq!(status, 200);
    let (status, reply) = curl(addr, "/v1/pre-reboot", None).await;
    assert_eq!(status, 409);
    assert_eq!(error(&reply).0, "failed_lock_semaphore_full");
}

/// curl POSTing zincati's body with the protocol's header, as the user `uid` when given; the
/// status and the body.
async fn curl(addr: SocketAddr, path: &str, uid: Option<u32>) -> (u16, String) {
    let mut command = tokio::process::Command::new("curl");
    command.args([
        "-sS",
        "-X",
        "POST",
        "-H",
        "fleet-lock-protocol: true",
        "--data",
        &body(NODE_ID, "default"),
        "-w",
        "\n%{http_code}",
        &format!("http://{addr}{path}"),
    ]);
    if let Some(uid) = uid {
        command.uid(uid).gid(uid);
    }
    let out = command.output().await.expect("curl (scripts/install-deps)");
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let (body, status) = text.rsplit_once('\n').unwrap();
    (status.parse().unwrap(), body.to_string())
}

#[tokio::test]
async fn every_bad_request_gets_a_4xx_kind_and_value_and_asks_nothing() {
    let (addr, seen) = start(me(), Limits::default(), |_, _| Some(Answer::Granted)).await;
    let good = body(NODE_ID, "default");
    let huge = format!(
        r#"{{"client_params": {{"id": "{NODE_ID}", "group": "g"}}, "pad": "{}"}}"#,
        " ".repeat(5000)
    );
    let huge_value = format!("the body has {} bytes; at most 4096", huge.len());
    let chunked_huge = format!(
        "POST /v1/pre-reboot HTTP/1.1\r\nhost: {addr}\r\nfleet-lock-protocol: true\r\n\
         transfer-encoding: chunked\r\n\r\n{:x}\r\n{huge}\r\n0\r\n\r\n",
        huge.len()
    );
    let cases: Vec<(&str, String, u16, &str, &str)> = vec![
        (
            "no protocol header",
            format!(
                "POST /v1/pre-reboot HTTP/1.1\r\nhost: {addr}\r\ncontent-length: {}\r\n\r\n{good}",
                good.len()
            ),
            400,
            "missing_protocol_header",
            "FleetLock requests carry the header `fleet-lock-protocol: true`",
        ),
        (
            "malformed body",
            zincati(addr, "/v1/pre-reboot", "{\"client_params\": "),
            400,
            "bad_request_body",
            "the body is not a JSON object",
        ),
        (
            "no id",
            zincati(
                addr,
                "/v1/pre-reboot",
                r#"{"client_params": {"group": "g"}}"#,
            ),
            400,
            "bad_request_body",
            "`client_params.id` is missing",
        ),
        (
            "wrong method",
            format!(
                "GET /v1/pre-reboot HTTP/1.1\r\nhost: {addr}\r\nfleet-lock-protocol: true\r\n\r\n"
            ),
            405,
            "method_not_allowed",
            "/v1/pre-reboot takes POST, not GET",
        ),
        (
            "wrong path",
            zincati(addr, "/v1/reboot", &good),
            404,
            "not_found",
            "no FleetLock endpoint at \"/v1/reboot\"",
        ),
        (
            "oversized body, by its length",
            zincati(addr, "/v1/pre-reboot", &huge),
            413,
            "bad_request_body",
            &huge_value,
        ),
        (
            "oversized body, chunked",
            chunked_huge,
            413,
            "bad_request_body",
            "the body has more than 4096 bytes; at most 4096",
        ),
        (
            "another node's id",
            zincati(
                addr,
                "/v1/pre-reboot",
                &body("0123456789abcdef0123456789abcdef", "default"),
            ),
            403,
            "not_this_node",
            "`client_params.id` \"0123456789abcdef0123456789abcdef\" is not this node's: this \
             server answers only for \"c988d2509fdf5cdcbed39037c56406fb\"",
        ),
        (
            "another node's id, steady-state",
            zincati(addr, "/v1/steady-state", &body("other", "default")),
            403,
            "not_this_node",
            "`client_params.id` \"other\" is not this node's",
        ),
    ];
    for (what, raw, status, kind, value) in cases {
        let (s, reply) = send(addr, raw.as_bytes()).await;
        assert_eq!(s, status, "{what}: {reply}");
        let (k, v) = error(&reply);
        assert_eq!(k, kind, "{what}: {v}");
        assert!(v.starts_with(value), "{what}: {v}");
    }
    assert_eq!(*seen.lock().unwrap(), vec![], "the answerer was asked");
    // A request that is not HTTP at all: hyper's own 400, and still nothing asked.
    let (s, _) = send(addr, b"\x16\x03\x01 not http\r\n\r\n").await;
    assert_eq!(s, 400);
    assert_eq!(*seen.lock().unwrap(), vec![]);
}

#[tokio::test]
async fn a_caller_that_is_not_the_agent_is_refused_and_nothing_is_asked() {
    // The agent is another user than this test's: its own requests are refused, good or not.
    let agent = if me() == 0 { 65534 } else { me() + 1 };
    let (addr, seen) = start(agent, Limits::default(), |_, _| Some(Answer::Granted)).await;
    for path in ["/v1/pre-reboot", "/v1/steady-state", "/v1/other"] {
        let (status, reply) = send(
            addr,
            zincati(addr, path, &body(NODE_ID, "default")).as_bytes(),
        )
        .await;
        assert_eq!(status, 403, "{path}: {reply}");
        let (kind, value) = error(&reply);
        assert_eq!(kind, "caller_not_update_agent");
        assert_eq!(
            value,
            format!(
                "only the update agent (user the-agent, uid {agent}) may ask this node's \
                 FleetLock server; this connection is from uid {}",
                me()
            )
        );
    }
    assert_eq!(*seen.lock().unwrap(), vec![], "the answerer was asked");

    // As root, the other way round: the agent is root and curl runs as nobody.
    if me() != 0 {
        eprintln!("not root: cannot run a client as another user");
        return;
    }
    let (addr, seen) = start(0, Limits::default(), |_, _| Some(Answer::Granted)).await;
    let (status, reply) = curl(addr, "/v1/pre-reboot", Some(65534)).await;
    assert_eq!(status, 403, "{reply}");
    assert!(
        error(&reply)
            .1
            .ends_with("this connection is from uid 65534"),
        "{reply}"
    );
    assert_eq!(*seen.lock().unwrap(), vec![]);
    // The same request from root, the agent, is asked.
    let (status, _) = curl(addr, "/v1/pre-reboot", None).await;
    assert_eq!(status, 200);
    assert_eq!(seen.lock().unwrap().len(), 1);
}

/// Reads until the server closes `stream` (20 s at most): closed, with at most an error answer,
/// never a 200.
async fn closed_without_200(stream: &mut TcpStream, what: &str) {
    let mut out = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(20), stream.read_to_end(&mut out))
        .await
        .unwrap_or_else(|_| panic!("{what}: the server kept the connection open"));
    assert!(
        read.is_err() || !String::from_utf8_lossy(&out).starts_with("HTTP/1.1 200"),
        "{what}"
    );
}

#[tokio::test]
async fn slow_and_idle_clients_are_cut_off_before_anything_is_asked() {
    // The head's own timeout, with the connection's far beyond the test's patience.
    let limits = Limits {
        header_timeout: Duration::from_millis(300),
        connection_timeout: Duration::from_secs(60),
        ..Limits::default()
    };
    let (addr, seen) = start(me(), limits, |_, _| Some(Answer::Granted)).await;
    // Half a head, then nothing.
    let mut slow_head = TcpStream::connect(addr).await.unwrap();
    slow_head
        .write_all(b"POST /v1/pre-reboot HTTP/1.1\r\nfleet-lock-protocol: true\r\n")
        .await
        .unwrap();
    closed_without_200(&mut slow_head, "half a head").await;
    // Connected, silent.
    let mut idle = TcpStream::connect(addr).await.unwrap();
    closed_without_200(&mut idle, "silent").await;
    assert_eq!(*seen.lock().unwrap(), vec![], "the answerer was asked");

    // A whole head announcing a body that never comes: the connection's timeout.
    let limits = Limits {
        connection_timeout: Duration::from_secs(1),
        ..Limits::default()
    };
    let (addr, seen) = start(me(), limits, |_, _| Some(Answer::Granted)).await;
    let mut slow_body = TcpStream::connect(addr).await.unwrap();
    let head = zincati(addr, "/v1/pre-reboot", "").replace("length: 0", "length: 80");
    slow_body.write_all(head.as_bytes()).await.unwrap();
    closed_without_200(&mut slow_body, "a body that never comes").await;
    assert_eq!(*seen.lock().unwrap(), vec![], "the answerer was asked");
}

/// The agent's own bound: beyond it a connection of the agent's is answered 503 at once, and
/// a new one is served once one has ended.
#[tokio::test]
async fn the_agents_connections_beyond_its_bound_get_503_at_once() {
    let limits = Limits {
        agent_connections: 1,
        ..Limits::default()
    };
    let (addr, seen) = start(me(), limits, |_, _| Some(Answer::Released)).await;
    // Accepted first (the kernel's queue is in connection order), it holds the one permit.
    let idle = TcpStream::connect(addr).await.unwrap();
    let request = zincati(addr, "/v1/steady-state", &body(NODE_ID, "g"));
    let (status, reply) = send(addr, request.as_bytes()).await;
    assert_eq!(status, 503, "{reply}");
    let (kind, value) = error(&reply);
    assert_eq!(kind, "no_answer");
    assert_eq!(
        value,
        "the update agent (user the-agent) has 1 FleetLock connection open already, the most \
         served at once; ask again once one has ended"
    );
    assert_eq!(*seen.lock().unwrap(), vec![]);
    // Once the server has seen the idle one go, the agent is served again (asked as zincati
    // does: again until 200).
    drop(idle);
    let mut tries = 0;
    while send(addr, request.as_bytes()).await.0 != 200 {
        tries += 1;
        assert!(tries < 100, "the agent's permit never came back");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(seen.lock().unwrap().len(), 1);
}

/// Another user is refused at accept, before a byte of its request is read: a connection that
/// never sends anything gets its 403 long before the head's timeout (60 s here), read or not.
#[tokio::test]
async fn a_silent_stranger_gets_its_403_without_sending_a_byte() {
    let agent = if me() == 0 { 65533 } else { me() + 1 };
    for refusals in [1, 0] {
        let limits = Limits {
            header_timeout: Duration::from_secs(60),
            connection_timeout: Duration::from_secs(60),
            refusals,
            refusal_read: Duration::from_millis(300),
            ..Limits::default()
        };
        let (addr, seen) = start(agent, limits, |_, _| Some(Answer::Granted)).await;
        let mut silent = TcpStream::connect(addr).await.unwrap();
        let (status, reply) = read_answer(&mut silent).await;
        assert_eq!(status, 403, "refusals {refusals}: {reply}");
        assert_eq!(error(&reply).0, "caller_not_update_agent");
        assert_eq!(*seen.lock().unwrap(), vec![]);
    }
}

/// The agent is answered while 500 connections of another local user are held open (they are
/// refused at accept and take nothing of the agent's). Needs root, to run the holder as
/// `nobody`; the holder is bash, whose `/dev/tcp` opens each connection.
#[tokio::test]
async fn the_agent_is_answered_while_500_connections_of_another_user_are_held_open() {
    if me() != 0 {
        eprintln!("not root: cannot hold connections as another user");
        return;
    }
    let (addr, seen) = start(me(), Limits::default(), |_, _| Some(Answer::Released)).await;
    let mut holder = hold_connections(addr, 500, 65534).await;
    let (status, reply) = send(
        addr,
        zincati(addr, "/v1/steady-state", &body(NODE_ID, "default")).as_bytes(),
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "only the agent was asked about"
    );
    holder.kill().await.unwrap();
}

/// A bash run as `uid` that opens `n` connections to `addr` and holds them open, sending
/// nothing; returned once all are open.
async fn hold_connections(addr: SocketAddr, n: usize, uid: u32) -> tokio::process::Child {
    use tokio::io::AsyncBufReadExt;
    let script = format!(
        "for i in $(seq {n}); do exec {{fd}}<>/dev/tcp/{}/{} || exit 1; done; echo ready; \
         exec sleep 600",
        addr.ip(),
        addr.port()
    );
    let mut child = tokio::process::Command::new("bash")
        .args(["-c", &script])
        .uid(uid)
        .gid(uid)
        .stdout(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("bash");
    let mut lines = tokio::io::BufReader::new(child.stdout.take().unwrap()).lines();
    let ready = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .expect("the holder opens its connections")
        .unwrap();
    assert_eq!(
        ready.as_deref(),
        Some("ready"),
        "the holder could not open {n} connections"
    );
    child
}

#[tokio::test]
async fn a_daemon_that_does_not_answer_gets_503_no_answer() {
    let limits = Limits {
        answer_timeout: Duration::from_millis(200),
        ..Limits::default()
    };
    let (addr, seen) = start(me(), limits, |_, _| None).await;
    let (status, reply) = send(
        addr,
        zincati(addr, "/v1/pre-reboot", &body(NODE_ID, "g")).as_bytes(),
    )
    .await;
    assert_eq!(status, 503);
    let (kind, value) = error(&reply);
    assert_eq!(kind, "no_answer");
    assert_eq!(
        value,
        "the daemon did not answer pre-reboot within 200ms; ask again later"
    );
    assert_eq!(seen.lock().unwrap().len(), 1);

    // No answerer at all (the channel's receiver gone).
    let (tx, rx) = mpsc::channel(1);
    drop(rx);
    let identity = Identity {
        node_id: NODE_ID.into(),
        agent_user: "the-agent".into(),
        agent_uid: me(),
    };
    let server = Server::bind(
        "127.0.0.1:0".parse().unwrap(),
        identity,
        Limits::default(),
        tx,
    )
    .await
    .unwrap();
    let addr = server.local_addr().unwrap();
    tokio::spawn(server.run());
    let (status, reply) = send(
        addr,
        zincati(addr, "/v1/steady-state", &body(NODE_ID, "g")).as_bytes(),
    )
    .await;
    assert_eq!(status, 503);
    assert_eq!(
        error(&reply).1,
        "the daemon is not answering FleetLock requests now; ask again later"
    );
}

#[tokio::test]
async fn a_listen_address_in_use_is_refused_naming_it() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let identity = Identity {
        node_id: NODE_ID.into(),
        agent_user: "the-agent".into(),
        agent_uid: me(),
    };
    let (tx, _rx) = mpsc::channel(1);
    let err = Server::bind(addr, identity, Limits::default(), tx)
        .await
        .err()
        .unwrap();
    assert!(
        err.to_string()
            .starts_with(&format!("cannot listen for FleetLock requests on {addr}: ")),
        "{err}"
    );
}

/// The zincati drop-in we ship points zincati at a base URL our `[fleetlock] listen` accepts,
/// with the trailing `/` zincati's URL join needs, and selects the fleet_lock strategy.
#[test]
fn the_shipped_zincati_drop_in_points_at_an_accepted_listen_address() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/packaging/zincati/90-kube-shutdown-drain.toml"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let dropin: toml::Table = toml::from_str(&text).unwrap();
    let updates = dropin["updates"].as_table().unwrap();
    assert_eq!(updates["strategy"].as_str(), Some("fleet_lock"));
    let base_url = updates["fleet_lock"]["base_url"].as_str().unwrap();
    let host_port = base_url
        .strip_prefix("http://")
        .and_then(|rest| rest.strip_suffix('/'))
        .unwrap_or_else(|| panic!("{path}: {base_url:?} is not http://HOST:PORT/"));
    let config = format!("node_name = \"n1\"\n[fleetlock]\nlisten = {host_port:?}");
    let settings = kube_shutdown_drain::config::Settings::from_str_at(
        std::path::Path::new("/etc/kube-shutdown-drain/config.toml"),
        &config,
    )
    .unwrap()
    .fleetlock
    .unwrap();
    assert_eq!(settings.listen.to_string(), host_port);
}

/// systemd as the oracle on a host that has it: the id the server answers for is `systemd-id128
/// machine-id --app-specific=APP_ID` of zincati's application id. Here rather than beside the
/// code, so its child process is not forked while the library's lock tests hold an fd that is
/// not yet close-on-exec.
#[test]
fn zincatis_id_is_what_systemd_id128_says_for_this_host() {
    use kube_shutdown_drain::reboot::zincati_id::{
        MACHINE_ID_PATH, ZINCATI_APP_ID, lower_hex, read,
    };
    let path = std::path::Path::new(MACHINE_ID_PATH);
    let out = std::process::Command::new("systemd-id128")
        .args(["machine-id", "--app-specific", &lower_hex(&ZINCATI_APP_ID)])
        .output();
    let Some(out) = out.ok().filter(|o| o.status.success() && path.exists()) else {
        eprintln!("no systemd-id128 or no {MACHINE_ID_PATH} on this host: nothing to compare");
        return;
    };
    let systemd = String::from_utf8(out.stdout).unwrap();
    assert_eq!(read(path).unwrap(), systemd.trim());
}
