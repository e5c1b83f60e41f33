//! Prints docs/benchmarks.md's figure for issue 40 item 4: how long the update agent waits for
//! its FleetLock answer while another local user holds 500 connections to the server open, and
//! while it opens and closes connections as fast as it can; against the same with nobody else.
//! The library's server on 127.0.0.1 with this process (root) as the agent and an answerer that
//! grants every steady-state at once, so the figure is the server's own; the other user is
//! bash run as `nobody` through `setpriv --reuid`, opening its connections with `/dev/tcp`.
//!
//! Run: `cargo bench --bench fleetlock-figures` (a release build), or
//! `cargo test --bench fleetlock-figures -- --bench` (debug). Needs root (setpriv). Figures,
//! never assertions. Under `cargo test --all-targets` (no `--bench` argument) it only says how
//! to run it.

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::{Duration, Instant};

use kube_shutdown_drain::reboot::server::{Answer, Identity, Limits, Question, Server};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// Requests timed in each case.
const REQUESTS: usize = 20;
/// The other user's connections held open.
const HELD: usize = 500;
/// The other user's uid.
const NOBODY: u32 = 65534;

fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!(
            "fleetlock-figures: run with `cargo bench --bench fleetlock-figures` (needs root)"
        );
        return;
    }
    if !nix::unistd::geteuid().is_root() {
        println!("fleetlock-figures: needs root, to run the other user's connections as nobody");
        return;
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(figures());
}

async fn figures() {
    let addr = serve().await;
    report("nobody else connected", &times(addr).await);
    let mut held = other_user(addr, &hold_script(addr)).await;
    report(
        &format!("{HELD} connections of uid {NOBODY} held open"),
        &times(addr).await,
    );
    let _ = held.kill().await;
    let mut churn = other_user(addr, &churn_script(addr)).await;
    report(
        &format!("uid {NOBODY} connecting and closing in a loop"),
        &times(addr).await,
    );
    let _ = churn.kill().await;
}

/// The server, with this process's uid as the agent's, granting every request at once.
async fn serve() -> SocketAddr {
    let (tx, mut rx) = mpsc::channel::<Question>(1);
    let identity = Identity {
        node_id: "c988d2509fdf5cdcbed39037c56406fb".into(),
        agent_user: "root".into(),
        agent_uid: 0,
    };
    let server = Server::bind(
        "127.0.0.1:0".parse().unwrap(),
        identity,
        Limits::default(),
        tx,
    )
    .await
    .expect("a free port on 127.0.0.1");
    let addr = server.local_addr().expect("its address");
    tokio::spawn(server.run());
    tokio::spawn(async move {
        while let Some(q) = rx.recv().await {
            let _ = q.answer.send(Answer::Released);
        }
    });
    addr
}

/// Seconds from connect to the answer's end for [`REQUESTS`] steady-states as zincati sends
/// them, one after another.
async fn times(addr: SocketAddr) -> Vec<f64> {
    let body = r#"{"client_params":{"id":"c988d2509fdf5cdcbed39037c56406fb","group":"default"}}"#;
    let request = format!(
        "POST /v1/steady-state HTTP/1.1\r\nhost: {addr}\r\nfleet-lock-protocol: true\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut out = Vec::new();
    for _ in 0..REQUESTS {
        let start = Instant::now();
        let mut stream = TcpStream::connect(addr).await.expect("connect");
        stream.write_all(request.as_bytes()).await.expect("send");
        let mut answer = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(120), stream.read_to_end(&mut answer));
        match read.await {
            Ok(Ok(_)) if answer.starts_with(b"HTTP/1.1 200") => {
                out.push(start.elapsed().as_secs_f64())
            }
            other => println!(
                "  an answer that is not 200: {other:?} {:?}",
                String::from_utf8_lossy(&answer)
            ),
        }
    }
    out
}

fn report(case: &str, secs: &[f64]) {
    let mut s = secs.to_vec();
    s.sort_by(f64::total_cmp);
    if s.is_empty() {
        println!("{case}: no answer");
        return;
    }
    let ms = |v: f64| v * 1000.0;
    println!(
        "{case}: the agent's answer in {:.1} ms median ({:.1} min, {:.1} max, {} requests)",
        ms(s[s.len() / 2]),
        ms(s[0]),
        ms(s[s.len() - 1]),
        s.len()
    );
}

/// Opens [`HELD`] connections, says `ready`, and holds them.
fn hold_script(addr: SocketAddr) -> String {
    format!(
        "for i in $(seq {HELD}); do exec {{fd}}<>/dev/tcp/{}/{} || exit 1; done; echo ready; \
         exec sleep 600",
        addr.ip(),
        addr.port()
    )
}

/// Says `ready`, then connects and closes at once, for ever.
fn churn_script(addr: SocketAddr) -> String {
    format!(
        "echo ready; while :; do exec {{fd}}<>/dev/tcp/{}/{} && exec {{fd}}>&-; done",
        addr.ip(),
        addr.port()
    )
}

/// `script` run by bash as [`NOBODY`] through setpriv, once it says `ready`.
async fn other_user(addr: SocketAddr, script: &str) -> tokio::process::Child {
    let nobody = NOBODY.to_string();
    let mut child = tokio::process::Command::new("setpriv")
        .args(["--reuid", &nobody, "--regid", &nobody, "--clear-groups"])
        .args(["bash", "-c", script])
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("setpriv (util-linux)");
    let mut lines = tokio::io::BufReader::new(child.stdout.take().expect("its stdout")).lines();
    match lines.next_line().await {
        Ok(Some(line)) if line == "ready" => {}
        other => panic!("the other user's connections to {addr} did not open: {other:?}"),
    }
    child
}
