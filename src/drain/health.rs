//! What the drain's requests have seen of the API server since its last answer: when the
//! trouble began and the latest error. Read at the deadline, so the report can say the server
//! was unreachable rather than only that pods remained.

use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

use crate::api::ApiError;

#[derive(Default)]
pub struct ServerHealth {
    outage: Mutex<Option<Outage>>,
}

#[derive(Clone)]
pub struct Outage {
    pub since: Instant,
    pub last: String,
    pub unreachable: bool,
}

impl ServerHealth {
    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Outage>> {
        // One Option, replaced whole: a poisoned lock still holds a consistent value.
        self.outage.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The server answered (any answer, even a refusal).
    pub fn answered(&self) {
        *self.lock() = None;
    }

    /// A request failed; only server trouble (no answer, 5xx) counts.
    pub fn failed(&self, e: &ApiError) {
        if !e.is_server_trouble() {
            return;
        }
        let mut outage = self.lock();
        let since = outage.as_ref().map_or_else(Instant::now, |o| o.since);
        *outage = Some(Outage {
            since,
            last: e.to_string(),
            unreachable: e.is_unreachable(),
        });
    }

    /// Records the result of a request.
    pub fn record<T>(&self, result: &Result<T, ApiError>) {
        match result {
            Ok(_) => self.answered(),
            Err(e) => self.failed(e),
        }
    }

    pub fn outage(&self) -> Option<Outage> {
        self.lock().clone()
    }
}

/// The report line for an API server that did not answer: names the server and the node.
pub fn outage_message(server: &str, node: &str, what: &str, outage: &Outage) -> String {
    let for_: Duration = outage.since.elapsed();
    format!(
        "API server {server} {} for node {node} for {:.1} s, until the drain deadline; {what}; last error: {}",
        if outage.unreachable {
            "was unreachable"
        } else {
            "answered only server errors"
        },
        for_.as_secs_f64(),
        outage.last
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::error::Kind;

    #[test]
    fn server_health_remembers_the_start_of_an_outage_until_an_answer() {
        let h = ServerHealth::default();
        let refused = |code| {
            ApiError::new(
                "pod a/b",
                "http://s",
                Kind::Status {
                    code,
                    reason: String::new(),
                    message: String::new(),
                    retry_after: None,
                },
            )
        };
        h.failed(&refused(403));
        assert!(h.outage().is_none(), "a refusal is an answer");
        h.failed(&ApiError::new(
            "pod a/b",
            "http://s",
            Kind::Timeout(Duration::from_secs(1)),
        ));
        let first = h.outage().expect("an outage").since;
        h.failed(&refused(503));
        let o = h.outage().expect("still an outage");
        assert_eq!(o.since, first);
        assert!(!o.unreachable, "a 503 is an answer from something");
        h.answered();
        assert!(h.outage().is_none());
    }
}
