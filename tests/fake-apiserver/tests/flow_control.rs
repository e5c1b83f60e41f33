//! The fake answers as API priority and fairness does: every API answer names the matched
//! FlowSchema and priority level by UID, and the `throttle` knob rejects requests with the
//! apiserver's own 429 (plain text, Retry-After), not with a Status. The recorder keeps each
//! request's User-Agent. Raw HTTP, so the headers are seen as sent.

use fake_apiserver::flowcontrol::{
    FLOW_SCHEMA_UID, FLOW_SCHEMA_UID_HEADER, PRIORITY_LEVEL_UID, PRIORITY_LEVEL_UID_HEADER,
    REJECTION_BODY,
};
use fake_apiserver::{FakeApiServer, Options, Route};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One HTTP/1.1 exchange: the status, the headers (names lower-cased) and the body.
async fn exchange(
    server: &FakeApiServer,
    head: &str,
    body: &str,
) -> (u16, Vec<(String, String)>, String) {
    let addr = server.url().trim_start_matches("http://").to_string();
    let mut stream = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let request = format!(
        "{head}\r\nHost: {addr}\r\nAuthorization: Bearer admin\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    let (head, body) = answer.split_once("\r\n\r\n").expect("a head and a body");
    let mut lines = head.lines();
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_lowercase(), v.trim().to_string()))
        .collect();
    (status, headers, body.to_string())
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

fn seed() -> Vec<serde_json::Value> {
    vec![
        json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "node-a"}}),
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "work"}}),
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a", "namespace": "work"},
               "spec": {"nodeName": "node-a", "containers": [{"name": "c", "image": "i"}]}}),
    ]
}

#[tokio::test]
async fn a_throttled_request_gets_the_apiservers_own_429_and_every_answer_names_its_flow() {
    let server = FakeApiServer::start(Options {
        port: 0,
        seed: seed(),
    })
    .await
    .unwrap();
    server
        .faults()
        .throttle_next(Route::new("POST", "/eviction"), 1, 7);
    let eviction = r#"{"apiVersion":"policy/v1","kind":"Eviction","metadata":{"name":"a","namespace":"work"}}"#;
    let post =
        "POST /api/v1/namespaces/work/pods/a/eviction HTTP/1.1\r\nUser-Agent: probe/1.0 (test)";

    let (status, headers, body) = exchange(&server, post, eviction).await;
    assert_eq!(status, 429);
    assert_eq!(body, REJECTION_BODY, "plain text, not a Status");
    assert_eq!(header(&headers, "retry-after"), Some("7"));
    assert_eq!(
        header(&headers, "content-type"),
        Some("text/plain; charset=utf-8")
    );
    assert_eq!(header(&headers, "x-content-type-options"), Some("nosniff"));
    assert_eq!(
        header(&headers, FLOW_SCHEMA_UID_HEADER),
        Some(FLOW_SCHEMA_UID)
    );
    assert_eq!(
        header(&headers, PRIORITY_LEVEL_UID_HEADER),
        Some(PRIORITY_LEVEL_UID)
    );

    // The knob is spent: the next eviction is served, and names its flow too.
    let (status, headers, _) = exchange(&server, post, eviction).await;
    assert_eq!(status, 201);
    assert_eq!(
        header(&headers, FLOW_SCHEMA_UID_HEADER),
        Some(FLOW_SCHEMA_UID)
    );
    assert_eq!(header(&headers, "retry-after"), None);

    let (status, headers, _) = exchange(&server, "GET /api/v1/nodes/node-a HTTP/1.1", "").await;
    assert_eq!(status, 200);
    assert_eq!(
        header(&headers, PRIORITY_LEVEL_UID_HEADER),
        Some(PRIORITY_LEVEL_UID)
    );

    // The recorder has each request's User-Agent, and None for the request that sent none.
    let agents: Vec<Option<String>> = server
        .recorder()
        .requests()
        .into_iter()
        .map(|r| r.user_agent)
        .collect();
    assert_eq!(
        agents,
        vec![
            Some("probe/1.0 (test)".to_string()),
            Some("probe/1.0 (test)".to_string()),
            None
        ]
    );
}
