//! Pacing of watch requests: at most one watch request per [`MIN_GAP`] for each watched
//! resource (path and selectors). kube's watcher backs off after errors (a 410 loop, a refused
//! watch), but a watch the server ends at once carries no error, and the watcher then starts the
//! next one immediately; without this a server doing that gets thousands of requests a second.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::{Request, Response};
use kube::Client;
use kube::client::Body;
use tokio::time::Instant;

use super::around::{Step, around};

/// The shortest time between two watch requests for one resource: 2 a second at most.
pub const MIN_GAP: Duration = Duration::from_millis(500);

/// The step ([`super::around`]) in front of a kube client that delays watch requests to keep
/// [`MIN_GAP`].
#[derive(Clone, Default)]
pub struct Paced {
    next: Arc<Mutex<HashMap<String, Instant>>>,
}

impl Paced {
    /// `inner` with its watch requests paced.
    pub fn client(inner: Client) -> Client {
        around(inner, Paced::default())
    }

    /// When a request to `key` may start, and books that slot.
    fn slot(&self, key: String) -> Instant {
        let now = Instant::now();
        let mut next = self.next.lock().unwrap_or_else(|p| p.into_inner());
        let at = next.get(&key).copied().unwrap_or(now).max(now);
        next.insert(key, at + MIN_GAP);
        at
    }
}

/// The resource a watch request is about (path and selectors), or `None` for other requests.
pub fn watch_key(uri: &http::Uri) -> Option<String> {
    let query = uri.query().unwrap_or_default();
    let mut is_watch = false;
    let mut selectors = Vec::new();
    for pair in query.split('&') {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        match k {
            "watch" => is_watch = v == "true" || v == "1",
            "fieldSelector" | "labelSelector" => selectors.push(pair),
            _ => {}
        }
    }
    is_watch.then(|| format!("{}?{}", uri.path(), selectors.join("&")))
}

impl Step for Paced {
    fn run(
        &self,
        inner: Client,
        request: Request<Body>,
    ) -> impl Future<Output = Result<Response<Body>, kube::Error>> + Send + 'static {
        let at = watch_key(request.uri()).map(|key| self.slot(key));
        async move {
            if let Some(at) = at {
                tokio::time::sleep_until(at).await;
            }
            inner.send(request).await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_watches_are_keyed_by_path_and_selectors() {
        let uri: http::Uri =
            "/api/v1/pods?fieldSelector=spec.nodeName%3Dn&resourceVersion=5&watch=true&timeoutSeconds=60"
                .parse()
                .unwrap();
        assert_eq!(
            watch_key(&uri).as_deref(),
            Some("/api/v1/pods?fieldSelector=spec.nodeName%3Dn")
        );
        let list: http::Uri = "/api/v1/pods?fieldSelector=x&limit=500".parse().unwrap();
        assert_eq!(watch_key(&list), None);
    }
}
