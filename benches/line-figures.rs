//! The waiting line at scale (issue 43): how much a fleet that waits for drain slots costs the
//! API server, for 500, 1,000 and 5,000 waiting nodes in one run. Each node is a slot taker
//! with its own client, as each node's daemon has, all on one runtime (not whole daemons),
//! against the fake API server; `[fleet] slots = 10`, held by ten more takers before anyone
//! waits. Everything is counted at the server (its request log and its watches' tally).
//!
//! For each size:
//! - **joining**: the takers start 20 ms apart; each finds the slots held and joins the line
//!   (its waiting Lease, written after 5 s of waiting, and one list of the line); the time until
//!   all are in it.
//! - **waiting**: 20 s in which nothing is handed off: requests a second of the whole waiting
//!   fleet, watch events sent; then 50 waiting Leases renewed as their nodes renew them (a
//!   guarded patch of `renewTime`), and the watch events each renewal sent. A node renews every
//!   10 minutes, so a minute of waiting holds N/10 renewals: the events a minute of waiting
//!   sends are those of the 20 s, scaled, plus N/10 renewals' worth.
//! - **hand-offs**: the ten holders give their slots back, 300 ms apart; each taker that gets
//!   one holds it 3 s and gives it back, until 30 slots have been taken: Lease writes (takes accepted and
//!   refused, give-backs, waiting Leases given back), lists, and watch events per hand-off,
//!   and the hand-off's time (a slot given back to its next take accepted).
//!
//! Then the fake's memory per watch: the process's resident memory before and after 2,000
//! watches opened by bare TCP clients (their sockets' user-space side counted with it, so an
//! upper bound).
//!
//! `cargo test --bench line-figures -- --bench` (debug), or with sizes after `--bench`
//! (`-- --bench 500`). Figures, never assertions; as root, or with `ulimit -n` above 30,000:
//! every watch is a connection (HTTP/1.1), both of whose ends are in this process.

use std::io::{Read, Write};
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, Patch, PatchParams};
use kube_shutdown_drain::fleet::queue::WAITING_LABEL;
use serde_json::{Value, json};
use tokio::time::Instant;

#[path = "../tests/engine_support/mod.rs"]
mod engine_support;

use engine_support::*;

#[path = "../tests/fleet_support/taker.rs"]
mod taker;
use taker::Taker;

/// The group's slots.
const SLOTS: usize = 10;
/// Slots taken in the hand-off part.
const TAKES: usize = 30;
/// How long a taker holds the slot it got (a drain and a reboot take minutes; the hand-offs
/// of ten slots then rarely meet).
const HOLD: Duration = Duration::from_secs(3);
/// The pause between two takers' starts: the fleet starts to wait over N x 20 ms (5,000 nodes:
/// 100 s), as update agents spread their reboots (zincati's and unattended-upgrades' timers are
/// randomized); all at once, 5,000 first looks of 20 reads each in 5 s swamp the fake on this
/// machine before any node is in line.
const START_SPACING: Duration = Duration::from_millis(20);
/// The pause between two of the holders' give-backs.
const STAGGER: Duration = Duration::from_millis(300);
/// The waiting part's length.
const WINDOW: Duration = Duration::from_secs(20);
/// Waiting Leases renewed in the waiting part.
const RENEWALS: usize = 50;
/// How often a waiting node renews its Lease (`fleet::queue::RENEW`).
const RENEW_MINUTES: f64 = 10.0;
const NS: &str = "kube-shutdown-drain";
const LEASES: &str = "/apis/coordination.k8s.io/v1/namespaces/kube-shutdown-drain/leases";

/// The waiting Leases held now.
fn in_line(c: &Cluster) -> Vec<Value> {
    c.server
        .store()
        .list("Lease", Some(NS))
        .into_iter()
        .filter(|l| {
            l.pointer("/metadata/labels")
                .and_then(|m| m.get(WAITING_LABEL))
                .is_some()
        })
        .filter(|l| l.pointer("/spec/holderIdentity").is_some_and(|h| h != ""))
        .collect()
}

/// This process's resident memory, bytes.
fn rss() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Whether `r` is a list of (part of) a group's line (not the list that starts a watch of one
/// Lease).
fn line_list(r: &fake_apiserver::RecordedRequest) -> bool {
    r.path == LEASES && r.method == "GET" && r.query.contains("waiting-in")
}

/// Whether `r` starts a node's read of the line: its first list, of the waits an earlier version
/// wrote (`!waiting-since`).
fn line_read(r: &fake_apiserver::RecordedRequest) -> bool {
    line_list(r) && r.query.contains("%21kube-shutdown-drain%2Fwaiting-since")
}

/// The reads of the line in `requests`, the lists they took and the bytes they were answered.
fn line_reads(requests: &[fake_apiserver::RecordedRequest]) -> (usize, usize, u64) {
    let lists: Vec<_> = requests
        .iter()
        .filter(|r| line_list(r) && !r.query.contains("watch=true"))
        .collect();
    (
        lists.iter().filter(|r| line_read(r)).count(),
        lists.len(),
        lists.iter().filter_map(|r| r.response_len).sum(),
    )
}

/// `requests` by kind, most first: `N watches of Leases, N GETs of Nodes, ...`.
fn request_kinds(requests: &[fake_apiserver::RecordedRequest]) -> String {
    let mut kinds: std::collections::BTreeMap<String, usize> = Default::default();
    for r in requests {
        let what = if r.path.contains("/leases") {
            "Leases"
        } else if r.path.contains("/nodes") {
            "Nodes"
        } else {
            "others"
        };
        let how = match r.method.as_str() {
            "GET" if r.query.contains("watch=true") => "watches of",
            "GET" if r.path.ends_with("/leases") || r.path.ends_with("/nodes") => "lists of",
            "GET" => "GETs of",
            _ => "writes of",
        };
        *kinds.entry(format!("{how} {what}")).or_default() += 1;
    }
    let mut kinds: Vec<_> = kinds.into_iter().collect();
    kinds.sort_by_key(|k| std::cmp::Reverse(k.1));
    kinds
        .iter()
        .map(|(k, n)| format!("{n} {k}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What the server saw of the hand-offs.
struct Handoffs {
    taken: usize,
    refused: usize,
    given_back: usize,
    other_writes: usize,
    /// Reads of the line, the lists they took, the bytes those were answered.
    line: (usize, usize, u64),
    gets: usize,
    ms: Vec<f64>,
}

fn handoffs(c: &Cluster) -> Handoffs {
    let requests = c.server.recorder().requests();
    let writes: Vec<_> = requests
        .iter()
        .filter(|r| r.path.starts_with(LEASES) && r.method != "GET")
        .collect();
    let slot = |r: &&&fake_apiserver::RecordedRequest| r.path.contains("-slot-");
    let take = |r: &&&fake_apiserver::RecordedRequest| {
        slot(r) && (r.method == "POST" || r.body.contains("holderIdentity"))
    };
    let accepted: Vec<_> = writes
        .iter()
        .filter(|r| slot(r) && r.status < 300)
        .collect();
    let mut ms = Vec::new();
    for (i, r) in accepted.iter().enumerate() {
        if take(r) {
            continue;
        }
        if let Some(next) = accepted[i + 1..]
            .iter()
            .find(|n| n.path == r.path && take(n))
        {
            ms.push((next.elapsed - r.elapsed) * 1000.0);
        }
    }
    let takes: Vec<_> = writes.iter().filter(take).collect();
    let reads = |list: bool| {
        requests
            .iter()
            .filter(|r| r.method == "GET" && !r.query.contains("watch=true"))
            .filter(|r| !list || line_list(r))
            .count()
    };
    Handoffs {
        taken: takes.iter().filter(|r| r.status < 300).count(),
        refused: takes.iter().filter(|r| r.status >= 300).count(),
        given_back: writes.iter().filter(|r| slot(r) && !take(r)).count(),
        other_writes: writes.iter().filter(|r| !slot(r)).count(),
        line: line_reads(&requests),
        gets: reads(false).saturating_sub(reads(true)),
        ms,
    }
}

/// One size: `n` waiting takers.
async fn run(n: usize) {
    let names: Vec<String> = (0..n + SLOTS).map(|i| format!("line-{i:05}")).collect();
    let c = Arc::new(Cluster::start(names.iter().map(|n| node(n)).collect()).await);
    // The fake's kubelets renew their node Leases every 10 s: at 5,000 nodes 500 writes a
    // second, each of which wakes every Lease watch in the fake, which has one channel for all
    // its watches (kube-apiserver's watch cache wakes only the watchers of the event's
    // namespace and object: `indexedWatchers` in k8s.io/apiserver's cacher). That alone
    // swamped the fake at 5,000; the line does not read those Leases, so here they renew once
    // an hour (and a node is judged down only after two hours without one).
    c.server
        .kubelets()
        .set_timing(Duration::from_secs(3600), Duration::from_secs(7200));
    let started = Instant::now();
    let mut takers = Vec::new();
    for name in &names {
        takers.push(Arc::new(Taker::new(&c, name, SLOTS, "20s").await));
    }
    let holders: Vec<Arc<Taker>> = takers.drain(..SLOTS).collect();
    for h in &holders {
        h.take(Duration::from_secs(3600))
            .await
            .expect("a free slot");
    }
    println!(
        "line {n}: {} clients made, the slots held, in {:.1} s",
        n + SLOTS,
        started.elapsed().as_secs_f64()
    );
    let (done_tx, mut done) = tokio::sync::mpsc::unbounded_channel();
    let mut waiting = tokio::task::JoinSet::new();
    let joined = Instant::now();
    for t in takers {
        tokio::time::sleep(START_SPACING).await;
        let done_tx = done_tx.clone();
        waiting.spawn(async move {
            if t.take(Duration::from_secs(3600)).await.is_some() {
                let _ = done_tx.send(());
                tokio::time::sleep(HOLD).await;
                t.give_back().await;
            }
        });
    }
    // Joining: until every taker is in line (said every 30 s, with the requests by kind).
    let deadline = Instant::now() + Duration::from_secs(1200);
    let mut said = Instant::now();
    while in_line(&c).len() < n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        if said.elapsed() >= Duration::from_secs(30) {
            said = Instant::now();
            eprintln!(
                "line {n}: {} in line after {:.0} s; so far {}",
                in_line(&c).len(),
                joined.elapsed().as_secs_f64(),
                request_kinds(&c.server.recorder().requests())
            );
        }
    }
    let joining = c.server.recorder().requests();
    let (reads, lists, bytes) = line_reads(&joining);
    println!(
        "line {n}: {} of {n} in line after {:.1} s (the first joins after 5 s of waiting); {} \
         requests; {reads} reads of the line in {lists} lists, answered {:.0} KiB ({:.1} KiB a \
         read); {} watch events sent",
        in_line(&c).len(),
        joined.elapsed().as_secs_f64(),
        joining.len(),
        bytes as f64 / 1024.0,
        bytes as f64 / 1024.0 / reads.max(1) as f64,
        c.server.recorder().watch_counts().live + c.server.recorder().watch_counts().initial,
    );
    // Waiting: the fleet's own pace, then renewals.
    eprintln!("line {n}: waiting for {} s", WINDOW.as_secs());
    tokio::time::sleep(Duration::from_secs(3)).await;
    c.server.recorder().clear();
    let window = Instant::now();
    tokio::time::sleep(WINDOW).await;
    let secs = window.elapsed().as_secs_f64();
    let seen = c.server.recorder().requests();
    let quiet = seen.len();
    let kinds = request_kinds(&seen);
    let counts = c.server.recorder().watch_counts();
    let fleet_rss = rss();
    c.server.recorder().clear();
    let admin = kube::Client::try_from(
        kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(c.kubeconfig("admin")).expect("a kubeconfig"),
            &kube::config::KubeConfigOptions::default(),
        )
        .await
        .expect("a config"),
    )
    .expect("a client");
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(admin, NS);
    let line = in_line(&c);
    eprintln!("line {n}: renewing {RENEWALS} waiting Leases");
    for lease in line
        .iter()
        .step_by((line.len() / RENEWALS).max(1))
        .take(RENEWALS)
    {
        let name = lease
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .expect("a name");
        // Guarded as a node's renewal is: read again and tried again when the Lease changed
        // meanwhile (its node wrote it).
        let mut tries = 0;
        loop {
            tries += 1;
            let current = leases.get(name).await.expect("a waiting Lease");
            let now = jiff::Timestamp::now()
                .strftime("%Y-%m-%dT%H:%M:%S%.6fZ")
                .to_string();
            let patch = json!([
                {"op": "test", "path": "/metadata/resourceVersion",
                 "value": current.metadata.resource_version},
                {"op": "replace", "path": "/spec/renewTime", "value": now},
            ]);
            let patch: json_patch::Patch = serde_json::from_value(patch).expect("a JSON patch");
            match leases
                .patch(name, &PatchParams::default(), &Patch::Json::<()>(patch))
                .await
            {
                Ok(_) => break,
                Err(kube::Error::Api(e)) if e.code == 422 && tries < 5 => continue,
                Err(e) => panic!("a renewal of {name}: {e}"),
            }
        }
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let per_renewal = c.server.recorder().watch_counts().live as f64 / RENEWALS as f64;
    let per_minute = counts.live as f64 * 60.0 / secs + per_renewal * n as f64 / RENEW_MINUTES;
    println!(
        "line {n}: waiting, {} watches open: {:.1} requests/s of the whole waiting fleet \
         ({quiet} in {secs:.0} s), {} watch events in {secs:.0} s; a renewal sends {per_renewal:.1} \
         watch events; a minute of waiting: {:.0} renewals, {per_minute:.0} watch events; the \
         process (fake and takers) {:.0} MiB, {:.0} KiB per waiting taker; the requests: {kinds}",
        counts.open,
        quiet as f64 / secs,
        counts.live,
        n as f64 / RENEW_MINUTES,
        fleet_rss as f64 / 1048576.0,
        fleet_rss as f64 / 1024.0 / (n + SLOTS) as f64,
    );
    // Hand-offs.
    eprintln!("line {n}: handing off {TAKES} slots");
    c.server.recorder().clear();
    let started = Instant::now();
    for h in &holders {
        h.give_back().await;
        tokio::time::sleep(STAGGER).await;
    }
    for _ in 0..TAKES {
        done.recv().await.expect("a taker got a slot");
    }
    let took = started.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let events = c.server.recorder().watch_counts();
    let h = handoffs(&c);
    waiting.abort_all();
    let mut ms = h.ms.clone();
    ms.sort_by(f64::total_cmp);
    let per = |x: usize| x as f64 / h.taken.max(1) as f64;
    println!(
        "line {n}: {} hand-offs in {:.1} s: {:.2} Lease writes per hand-off ({:.2} takes refused, \
         {:.2} give-backs, {:.2} waiting Leases given back), {:.2} reads of the line ({:.2} lists, \
         {:.1} KiB) and {:.1} \
         other reads per hand-off, {:.1} watch events per hand-off; hand-off median {:.0} ms (min {:.0}, \
         max {:.0})",
        h.taken,
        took.as_secs_f64(),
        per(h.taken + h.refused + h.given_back + h.other_writes),
        per(h.refused),
        per(h.given_back),
        per(h.other_writes),
        per(h.line.0),
        per(h.line.1),
        h.line.2 as f64 / 1024.0 / h.taken.max(1) as f64,
        per(h.gets),
        (events.live + events.initial) as f64 / h.taken.max(1) as f64,
        ms.get(ms.len() / 2).copied().unwrap_or(f64::NAN),
        ms.first().copied().unwrap_or(f64::NAN),
        ms.last().copied().unwrap_or(f64::NAN),
    );
    drop(waiting);
}

/// The fake's memory per watch: 2,000 watches opened by bare TCP clients.
async fn memory_per_watch() {
    const WATCHES: usize = 2000;
    let c = Cluster::start(Vec::new()).await;
    let port = c.server.url().rsplit(':').next().unwrap_or("0").to_string();
    let port: u16 = port.trim_end_matches('/').parse().expect("a port");
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = rss();
    let mut held = Vec::new();
    for i in 0..WATCHES {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("a connection");
        write!(
            s,
            "GET {LEASES}?watch=true&fieldSelector=metadata.name%3Dnone-{i}&timeoutSeconds=600 \
             HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer admin\r\n\r\n"
        )
        .expect("a request");
        held.push(s);
    }
    // Every watch answered (its headers read).
    for s in &mut held {
        let mut buf = [0u8; 512];
        let _ = s.read(&mut buf).expect("an answer");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let after = rss();
    println!(
        "watch memory: {} watches open at the fake, {:.1} KiB more resident per watch (the bare \
         client's side included)",
        c.server.recorder().watch_counts().open,
        after.saturating_sub(before) as f64 / 1024.0 / WATCHES as f64
    );
}

#[tokio::main]
async fn main() {
    if !std::env::args().any(|a| a == "--bench") {
        println!("run with: cargo bench --bench line-figures");
        return;
    }
    let sizes: Vec<usize> = std::env::args()
        .filter_map(|a| a.parse().ok())
        .collect::<Vec<_>>();
    let sizes = if sizes.is_empty() {
        vec![500, 1000, 5000]
    } else {
        sizes
    };
    if let Ok((_, hard)) =
        nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
    {
        let want = 200_000.max(hard);
        let _ =
            nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, want, want);
    }
    memory_per_watch().await;
    for n in sizes {
        run(n).await;
    }
}
