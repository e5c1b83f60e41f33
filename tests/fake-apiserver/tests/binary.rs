//! The `fake-apiserver` binary as shell scripts use it: URL on stdout line 1, a kubeconfig
//! written, the `/_fake/` control endpoint (objects, Ready, taints, requests, faults, 410,
//! listener restart), and a clean exit on SIGTERM.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

const SCENARIO: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/drain-scenario.yaml"
);

struct Server {
    child: Child,
    port: u16,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start(kubeconfig: &std::path::Path) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_fake-apiserver"))
        .args([
            "--seed",
            SCENARIO,
            "--token",
            "system:node:node-a",
            "--kubeconfig",
        ])
        .arg(kubeconfig)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("binary starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("URL line");
    let port = line
        .trim()
        .strip_prefix("http://127.0.0.1:")
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"));
    Server { child, port }
}

/// One HTTP/1.1 request with `Connection: close`, as curl would send it.
fn http(port: u16, method: &str, path: &str, body: &str) -> (u16, Value) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("write");
    let mut raw = String::new();
    stream.read_to_string(&mut raw).expect("read");
    let (head, body) = raw.split_once("\r\n\r\n").expect("a full answer");
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("status");
    let body = if head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked")
    {
        dechunk(body)
    } else {
        body.to_string()
    };
    (status, serde_json::from_str(&body).unwrap_or(Value::Null))
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

#[test]
fn the_binary_serves_and_its_control_endpoint_drives_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    let kubeconfig = dir.path().join("kubeconfig");
    let server = start(&kubeconfig);
    let port = server.port;
    let written = std::fs::read_to_string(&kubeconfig).expect("kubeconfig written");
    assert!(written.contains(&format!("server: http://127.0.0.1:{port}")));
    assert!(written.contains("as: \"system:node:node-a\""));

    assert_eq!(http(port, "GET", "/_fake/healthz", "").0, 200);
    let (status, node) = http(port, "GET", "/api/v1/nodes/node-a", "");
    assert_eq!(status, 200);
    assert_eq!(node["metadata"]["name"], json!("node-a"));

    // Upsert a pod (YAML), mark it Ready, read it back.
    let (status, stored) = http(
        port,
        "POST",
        "/_fake/objects",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: extra, namespace: work}\nspec: {nodeName: node-a}\n",
    );
    assert_eq!(status, 200, "{stored}");
    assert_eq!(stored[0]["status"]["phase"], json!("Pending"));
    let (_, ready) = http(port, "POST", "/_fake/pods/work/extra/ready", "");
    assert_eq!(ready["status"]["phase"], json!("Running"));
    let (_, pod) = http(
        port,
        "GET",
        "/_fake/objects?kind=Pod&namespace=work&name=extra",
        "",
    );
    assert_eq!(pod["status"]["conditions"][0]["status"], json!("True"));
    let (status, _) = http(port, "POST", "/_fake/objects", "kind: Pod\n");
    assert_eq!(status, 400);

    // Taints as another writer.
    let (_, node) = http(
        port,
        "POST",
        "/_fake/nodes/node-a/taints",
        r#"{"key":"other.example/x","value":"1","effect":"NoSchedule"}"#,
    );
    assert_eq!(node["spec"]["taints"].as_array().map(Vec::len), Some(2));
    let (_, node) = http(
        port,
        "DELETE",
        "/_fake/nodes/node-a/taints?key=other.example/x",
        "",
    );
    assert_eq!(node["spec"]["taints"].as_array().map(Vec::len), Some(1));

    // The recorder saw the API GET, not the control calls.
    let (_, requests) = http(port, "GET", "/_fake/requests", "");
    let requests = requests.as_array().cloned().unwrap_or_default();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0]["path"], json!("/api/v1/nodes/node-a"));
    assert_eq!(requests[0]["status"], json!(200));
    http(port, "DELETE", "/_fake/requests", "");

    // Faults: fail the next GET of node-a with 503, once.
    let (status, _) = http(
        port,
        "PUT",
        "/_fake/faults",
        r#"{"fail":[{"route":{"method":"GET","path":"/nodes/node-a"},"remaining":1,"status":503}]}"#,
    );
    assert_eq!(status, 200);
    assert_eq!(http(port, "GET", "/api/v1/nodes/node-a", "").0, 503);
    assert_eq!(http(port, "GET", "/api/v1/nodes/node-a", "").0, 200);
    let (status, _) = http(port, "PUT", "/_fake/faults", r#"{"bogus":1}"#);
    assert_eq!(status, 400);
    http(port, "DELETE", "/_fake/faults", "");

    // The 410 knob: a watch from an old version gets an ERROR 410 event.
    let (_, rv) = http(port, "GET", "/_fake/resource-version", "");
    let old: u64 = rv["resourceVersion"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("rv");
    http(port, "POST", "/_fake/pods/work/extra/ready?ready=false", "");
    http(port, "POST", "/_fake/expire", "");
    let (status, event) = http(
        port,
        "GET",
        &format!("/api/v1/namespaces/work/pods?watch=true&resourceVersion={old}&timeoutSeconds=1"),
        "",
    );
    assert_eq!(status, 200);
    assert_eq!(event["type"], json!("ERROR"));
    assert_eq!(event["object"]["code"], json!(410));

    // The simulation's knobs and a node's kubelet.
    let (status, timings) = http(
        port,
        "PUT",
        "/_fake/simulation",
        r#"{"node_monitor_grace_seconds": 1, "noexecute_after_seconds": 0, "detach_seconds": null}"#,
    );
    assert_eq!(status, 200);
    assert_eq!(timings["node_monitor_grace_seconds"], json!(1.0));
    assert_eq!(timings["detach_seconds"], Value::Null);
    assert_eq!(
        timings["heartbeat_seconds"],
        json!(10.0),
        "unnamed fields kept"
    );
    let (status, _) = http(port, "PUT", "/_fake/simulation", r#"{"bogus": 1}"#);
    assert_eq!(status, 400);
    let (status, kubelet) = http(
        port,
        "POST",
        "/_fake/nodes/node-a/kubelet?running=false",
        "",
    );
    assert_eq!((status, &kubelet["running"]), (200, &json!(false)));
    let mut unknown = false;
    for _ in 0..50 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        let (_, node) = http(port, "GET", "/api/v1/nodes/node-a", "");
        unknown = node["status"]["conditions"].as_array().is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "Unknown")
        });
        if unknown {
            break;
        }
    }
    assert!(unknown, "Ready went Unknown after the 1 s grace");
    let (status, kubelet) = http(port, "POST", "/_fake/nodes/node-a/kubelet?running=true", "");
    assert_eq!((status, &kubelet["running"]), (200, &json!(true)));
    let (_, node) = http(port, "GET", "/api/v1/nodes/node-a", "");
    assert!(node["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    }));
    let (status, _) = http(port, "POST", "/_fake/nodes/nope/kubelet?running=false", "");
    assert_eq!(status, 404);

    // Listener restart: down for a moment, back on the same port.
    let (status, _) = http(port, "POST", "/_fake/listener/restart?down_seconds=1", "");
    assert_eq!(status, 202);
    std::thread::sleep(Duration::from_millis(400));
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "listener is down"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "listener did not come back");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(http(port, "GET", "/version", "").0, 200);

    // SIGTERM ends it with status 0.
    let pid = server.child.id();
    let status = Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success());
    let mut server = server;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        if let Some(code) = server.child.try_wait().expect("wait") {
            assert!(code.success(), "{code:?}");
            break;
        }
        assert!(Instant::now() < deadline, "did not exit on SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_bad_seed_file_is_named_in_the_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    let seed = dir.path().join("bad.yaml");
    std::fs::write(
        &seed,
        "apiVersion: v1\nkind: Node\nmetadata: {name: a}\n---\n- not an object\n",
    )
    .expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_fake-apiserver"))
        .arg("--seed")
        .arg(&seed)
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("bad.yaml") && stderr.contains("document 1"),
        "{stderr}"
    );

    // A kind the fake does not serve is named, with the kinds it serves.
    std::fs::write(
        &seed,
        "apiVersion: networking.k8s.io/v1\nkind: Ingress\nmetadata: {name: web, namespace: shop}\n",
    )
    .expect("write");
    let out = Command::new(env!("CARGO_BIN_EXE_fake-apiserver"))
        .arg("--seed")
        .arg(&seed)
        .output()
        .expect("runs");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("seed object 0 (networking.k8s.io/v1 Ingress shop/web)")
            && stderr.contains("batch/v1 Job")
            && stderr.contains("storage.k8s.io/v1 VolumeAttachment"),
        "{stderr}"
    );
}
