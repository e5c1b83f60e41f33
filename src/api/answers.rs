//! Answers that are not about the object asked for: an error status or a redirect whose body is
//! not a Kubernetes `Status` (a proxy's HTML page, the plain-text 400 a TLS port gives an
//! `http://` client, a redirect kube would not follow), and the API server's own 404 for a path
//! it does not serve (a `Status` that names no object: "the server could not find the requested
//! resource", what a server URL with a wrong path prefix gets). kube turns the first into a
//! Status of its own (`handle_api_errors` in kube-client `client/mod.rs`) and `get_opt` reads
//! any 404 as "no such object": both read like the object's own answer, a 404 as "node does not
//! exist". Here they end the request with [`NotApiAnswer`], which names the status and the path.

use std::fmt;
use std::future::Future;
use std::time::Duration;

use http::{Request, Response};
use http_body_util::BodyExt as _;
use kube::Client;
use kube::client::Body;

use super::around::{Step, around};

/// The most of an error answer's body read to tell whether it is a `Status`: they are small;
/// a larger one is not the API server's.
const BODY_MAX: usize = 64 * 1024;

/// Go's `net/http` answers a plain-HTTP request on a TLS port with this body.
const HTTP_TO_HTTPS: &str = "Client sent an HTTP request to an HTTPS server";

/// An answer that did not come from the Kubernetes API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotApiAnswer {
    pub code: u16,
    /// The request's path, with the server URL's path prefix.
    pub path: String,
    pub retry_after: Option<Duration>,
    hint: Hint,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Hint {
    /// A 404: often a path prefix in the server URL that is not the API server's.
    PathPrefix,
    /// A TLS port asked in plain HTTP.
    Tls,
    /// A redirect, which is not followed.
    Redirect,
    None,
}

impl fmt::Display for NotApiAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "the server answered {} for {}", self.code, self.path)?;
        match self.hint {
            Hint::PathPrefix => f.write_str(
                ": no Kubernetes API there (a path prefix in the server URL that the API server \
                 does not have, or one missing?)",
            ),
            Hint::Tls => f.write_str(": the server speaks TLS (use an https:// server URL)"),
            Hint::Redirect => f.write_str(": a redirect, not followed (is the server URL right?)"),
            Hint::None => f.write_str(", not as the Kubernetes API answers"),
        }
    }
}

impl std::error::Error for NotApiAnswer {}

impl NotApiAnswer {
    /// The answer to `path` with `code` and `body` (the first [`BODY_MAX`] bytes).
    fn new(code: u16, path: String, body: &[u8], retry_after: Option<Duration>) -> NotApiAnswer {
        let hint = if (300..400).contains(&code) {
            Hint::Redirect
        } else if code == 400 && body.starts_with(HTTP_TO_HTTPS.as_bytes()) {
            Hint::Tls
        } else if code == 404 {
            Hint::PathPrefix
        } else {
            Hint::None
        };
        NotApiAnswer {
            code,
            path,
            retry_after,
            hint,
        }
    }
}

/// Whether `body`, answered with `code`, is the API server's answer about the object asked
/// for: a `Status` (the API server sends one with every error), and for a 404 one that names
/// the object (`details.name`, as every NotFound of an object does), not the generic "the
/// server could not find the requested resource" of a path it does not serve.
fn is_api_answer(code: u16, body: &[u8]) -> bool {
    let Ok(status) = serde_json::from_slice::<serde_json::Value>(body) else {
        return false;
    };
    if status.get("kind").and_then(|k| k.as_str()) != Some("Status") {
        return false;
    }
    code != 404
        || status
            .pointer("/details/name")
            .and_then(|n| n.as_str())
            .is_some_and(|n| !n.is_empty())
}

/// The step ([`super::around`]) in front of a kube client that ends a request whose error
/// answer or redirect is not the API server's answer about the object with [`NotApiAnswer`].
#[derive(Clone)]
pub struct ApiAnswers {
    /// The server URL's path (`/prefix`, or empty), which kube puts before each request's.
    prefix: String,
}

impl ApiAnswers {
    /// `inner`, whose server is `server`, with its answers checked.
    pub fn client(inner: Client, server: &str) -> Client {
        let prefix = server
            .parse::<http::Uri>()
            .map(|u| u.path().trim_end_matches('/').to_owned())
            .unwrap_or_default();
        around(inner, ApiAnswers { prefix })
    }
}

impl Step for ApiAnswers {
    fn run(
        &self,
        inner: Client,
        request: Request<Body>,
    ) -> impl Future<Output = Result<Response<Body>, kube::Error>> + Send + 'static {
        let path = format!("{}{}", self.prefix, request.uri().path());
        async move {
            let response = inner.send(request).await?;
            let code = response.status().as_u16();
            // The API server's own flow control (priority and fairness, max-in-flight) answers
            // 429 in plain text, not a Status (k8s.io/apiserver `pkg/server/filters`): it is the
            // API's answer, read by its callers (`evict::throttled`, the retry's Retry-After).
            if code < 300 || code == 429 {
                return Ok(response);
            }
            let retry_after = response
                .headers()
                .get(http::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .map(Duration::from_secs);
            let (parts, body) = response.into_parts();
            let bytes = http_body_util::Limited::new(body, BODY_MAX)
                .collect()
                .await
                .map(|c| c.to_bytes())
                .unwrap_or_default();
            if is_api_answer(code, &bytes) {
                return Ok(Response::from_parts(parts, Body::from(bytes)));
            }
            Err(kube::Error::Service(Box::new(NotApiAnswer::new(
                code,
                path,
                &bytes,
                retry_after,
            ))))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_is_named_by_status_and_path_with_a_hint() {
        let html = NotApiAnswer::new(404, "/k8s/api/v1/nodes/n1".into(), b"<html>", None);
        assert_eq!(
            html.to_string(),
            "the server answered 404 for /k8s/api/v1/nodes/n1: no Kubernetes API there (a path \
             prefix in the server URL that the API server does not have, or one missing?)"
        );
        let tls = NotApiAnswer::new(
            400,
            "/api/v1/nodes/n1".into(),
            b"Client sent an HTTP request to an HTTPS server.\n",
            None,
        );
        assert!(
            tls.to_string()
                .ends_with(": the server speaks TLS (use an https:// server URL)")
        );
        let moved = NotApiAnswer::new(302, "/api".into(), b"", None);
        assert!(moved.to_string().contains("a redirect, not followed"));
        let proxy = NotApiAnswer::new(503, "/api".into(), b"<html>", None);
        assert_eq!(
            proxy.to_string(),
            "the server answered 503 for /api, not as the Kubernetes API answers"
        );
    }

    #[test]
    fn only_a_status_about_the_object_is_the_api_servers_answer() {
        let not_found = br#"{"kind":"Status","code":404,"reason":"NotFound",
            "details":{"name":"n1","kind":"nodes"}}"#;
        assert!(is_api_answer(404, not_found));
        let generic = br#"{"kind":"Status","code":404,"reason":"NotFound",
            "message":"the server could not find the requested resource","details":{}}"#;
        assert!(
            !is_api_answer(404, generic),
            "a path the server does not serve"
        );
        assert!(is_api_answer(403, br#"{"kind":"Status","code":403}"#));
        assert!(
            !is_api_answer(403, br#"{"code":403}"#),
            "only the API's Status counts"
        );
        assert!(!is_api_answer(404, b"404 page not found"));
    }
}
