//! Fault knobs: latency per route, failing or dropping the next N matching requests, hanging
//! requests, gates that let matching requests through one permit at a time (a barrier for tests
//! that stage a race), the Retry-After header on PDB 429s, and the 429s of API priority and
//! fairness (answered as the apiserver's filter does, see [`crate::flowcontrol`]).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::watch;

/// Which requests a fault applies to: an optional method and a substring of `path?query`
/// (empty matches every request).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Route {
    #[serde(default)]
    pub method: Option<String>,
    #[serde(default)]
    pub path: String,
}

impl Route {
    /// Every request with this method whose `path?query` contains `path`.
    pub fn new(method: &str, path: &str) -> Self {
        Route {
            method: Some(method.to_string()),
            path: path.to_string(),
        }
    }

    /// Every request whose `path?query` contains `path`, whatever the method.
    pub fn any(path: &str) -> Self {
        Route {
            method: None,
            path: path.to_string(),
        }
    }

    pub fn matches(&self, method: &str, uri: &str) -> bool {
        self.method
            .as_deref()
            .is_none_or(|m| m.eq_ignore_ascii_case(method))
            && uri.contains(&self.path)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Latency {
    pub route: Route,
    pub millis: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Failure {
    pub route: Route,
    /// Requests still to fail.
    pub remaining: u32,
    /// 429, 500, 503 or 504 (any status works).
    pub status: u16,
    /// Retry-After seconds to send with the failure.
    #[serde(default)]
    pub retry_after: Option<u32>,
    /// The answer's body instead of a Status (an HTML page from a proxy, a crafted Status).
    #[serde(default)]
    pub body: Option<String>,
    /// The body's Content-Type (default `text/html; charset=utf-8`).
    #[serde(default)]
    pub content_type: Option<String>,
}

/// The next `remaining` matching requests are rejected as API priority and fairness rejects a
/// request it cannot queue: 429, `Retry-After`, the matched FlowSchema's and priority level's UID
/// headers and a plain-text body ([`crate::flowcontrol::rejection`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Throttle {
    pub route: Route,
    pub remaining: u32,
    /// The Retry-After seconds the rejection carries (the apiserver sends 1 to 60).
    pub retry_after: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Close {
    pub route: Route,
    pub remaining: u32,
}

/// All knobs at once; this is also the JSON the control endpoint reads and shows.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultState {
    #[serde(default)]
    pub latency: Vec<Latency>,
    #[serde(default)]
    pub fail: Vec<Failure>,
    #[serde(default)]
    pub close: Vec<Close>,
    #[serde(default)]
    pub throttle: Vec<Throttle>,
    /// Requests matching these routes are never answered while the route is listed.
    #[serde(default)]
    pub hang: Vec<Route>,
    /// Retry-After seconds on PDB 429s from the eviction subresource, which then read as for a
    /// budget the disruption controller has not observed yet ("... is still being processed by
    /// the server."); none by default, as the real apiserver once the PDB is observed.
    #[serde(default)]
    pub eviction_retry_after: Option<u32>,
    /// A request whose client went away is still finished (a write still lands), as the real
    /// kube-apiserver does; off by default, where the connection's end drops it.
    #[serde(default)]
    pub finish_abandoned: bool,
}

/// What the server must do with a request before routing it.
pub(crate) enum Action {
    Proceed,
    Fail {
        status: u16,
        retry_after: Option<u32>,
        /// `(content type, body)` instead of a Status.
        body: Option<(String, String)>,
    },
    Close,
    /// Reject as API priority and fairness does.
    Throttle {
        retry_after: u32,
    },
}

/// A gate: matching requests wait until a permit lets one through; `waiting` counts those held
/// now, `arrived` every request that reached the gate.
#[derive(Debug, Clone)]
struct Gate {
    route: Route,
    permits: u32,
    waiting: u32,
    arrived: u32,
}

/// The knobs. Cheap to clone; all clones share state.
#[derive(Clone)]
pub struct Faults {
    state: Arc<Mutex<FaultState>>,
    gates: Arc<Mutex<Vec<Gate>>>,
    changed: Arc<watch::Sender<u64>>,
}

impl Faults {
    pub(crate) fn new() -> Self {
        let (tx, _) = watch::channel(0);
        Faults {
            state: Arc::new(Mutex::new(FaultState::default())),
            gates: Arc::new(Mutex::new(Vec::new())),
            changed: Arc::new(tx),
        }
    }

    fn edit<R>(&self, f: impl FnOnce(&mut FaultState) -> R) -> R {
        let out = f(&mut self.state.lock().unwrap_or_else(|e| e.into_inner()));
        self.changed.send_modify(|n| *n += 1);
        out
    }

    fn read<R>(&self, f: impl FnOnce(&FaultState) -> R) -> R {
        f(&self.state.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Delays every matching request by `delay` before it is handled.
    pub fn add_latency(&self, route: Route, delay: Duration) {
        self.edit(|s| {
            s.latency.push(Latency {
                route,
                millis: delay.as_millis() as u64,
            })
        });
    }

    fn push_failure(&self, failure: Failure) {
        self.edit(|s| s.fail.push(failure));
    }

    /// Answers the next `n` matching requests with `status` (a Status body, no Retry-After).
    pub fn fail_next(&self, route: Route, n: u32, status: u16) {
        self.push_failure(Failure {
            route,
            remaining: n,
            status,
            retry_after: None,
            body: None,
            content_type: None,
        });
    }

    /// Answers the next `n` matching requests with `status` and `body` as `content_type`
    /// (`None`: `text/html; charset=utf-8`) instead of a Status: what a proxy or an ingress in
    /// front of the API server, or a crafted answer, sends.
    pub fn fail_next_with_body(
        &self,
        route: Route,
        n: u32,
        status: u16,
        content_type: Option<&str>,
        body: &str,
    ) {
        self.push_failure(Failure {
            route,
            remaining: n,
            status,
            retry_after: None,
            body: Some(body.to_string()),
            content_type: content_type.map(str::to_string),
        });
    }

    /// As `fail_next`, with a Retry-After: the header and `details.retryAfterSeconds` in the
    /// Status, as the apiserver sends them together.
    pub fn fail_next_with_retry_after(&self, route: Route, n: u32, status: u16, seconds: u32) {
        self.push_failure(Failure {
            route,
            remaining: n,
            status,
            retry_after: Some(seconds),
            body: None,
            content_type: None,
        });
    }

    /// Rejects the next `n` matching requests as API priority and fairness does (429 with
    /// `Retry-After: seconds` and the flow-control headers).
    pub fn throttle_next(&self, route: Route, n: u32, seconds: u32) {
        self.edit(|s| {
            s.throttle.push(Throttle {
                route,
                remaining: n,
                retry_after: seconds,
            })
        });
    }

    /// Closes the connection of the next `n` matching requests without an answer.
    pub fn close_next(&self, route: Route, n: u32) {
        self.edit(|s| {
            s.close.push(Close {
                route,
                remaining: n,
            })
        });
    }

    /// Stops answering matching requests (they wait) until `clear` or `unhang`.
    pub fn hang(&self, route: Route) {
        self.edit(|s| s.hang.push(route));
    }

    /// Lets hanging requests of `route` go on.
    pub fn unhang(&self, route: &Route) {
        self.edit(|s| s.hang.retain(|r| r != route));
    }

    fn edit_gates<R>(&self, f: impl FnOnce(&mut Vec<Gate>) -> R) -> R {
        let out = f(&mut self.gates.lock().unwrap_or_else(|e| e.into_inner()));
        self.changed.send_modify(|n| *n += 1);
        out
    }

    /// Holds every request matching `route` at a gate (before hangs, latency and failures) until
    /// `pass` gives it a permit: a test sees the request arrive (`waiting_at`), acts, then lets it
    /// go on. A second gate on the same route is one gate.
    pub fn gate(&self, route: Route) {
        self.edit_gates(|g| {
            if !g.iter().any(|x| x.route == route) {
                g.push(Gate {
                    route,
                    permits: 0,
                    waiting: 0,
                    arrived: 0,
                })
            }
        });
    }

    /// Lets `n` more requests through the gate of `route` (those waiting first).
    pub fn pass(&self, route: &Route, n: u32) {
        self.edit_gates(|g| {
            if let Some(x) = g.iter_mut().find(|x| &x.route == route) {
                x.permits += n;
            }
        });
    }

    /// Removes the gate of `route`; every request held there goes on.
    pub fn ungate(&self, route: &Route) {
        self.edit_gates(|g| g.retain(|x| &x.route != route));
    }

    /// How many requests wait at the gate of `route` now.
    pub fn waiting_at(&self, route: &Route) -> usize {
        self.gates
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|x| &x.route == route)
            .map_or(0, |x| x.waiting as usize)
    }

    /// How many requests reached the gate of `route` since it was set (held or let through).
    pub fn arrived_at(&self, route: &Route) -> usize {
        self.gates
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .find(|x| &x.route == route)
            .map_or(0, |x| x.arrived as usize)
    }

    /// Waits at the first gate matching the request until it has a permit for it (or the gate is
    /// removed). A request dropped while held (its client gave up) is no longer counted.
    async fn through_gates(&self, method: &str, uri: &str, changed: &mut watch::Receiver<u64>) {
        /// Counts one held request at the gate of `route` for as long as it lives.
        struct Held<'a> {
            gates: &'a Mutex<Vec<Gate>>,
            route: Route,
        }
        impl Drop for Held<'_> {
            fn drop(&mut self) {
                let mut g = self.gates.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(x) = g.iter_mut().find(|x| x.route == self.route) {
                    x.waiting = x.waiting.saturating_sub(1);
                }
            }
        }
        let mut held: Option<Held<'_>> = None;
        let mut first = true;
        loop {
            {
                let mut g = self.gates.lock().unwrap_or_else(|e| e.into_inner());
                let Some(x) = g.iter_mut().find(|x| x.route.matches(method, uri)) else {
                    drop(g);
                    return;
                };
                if std::mem::take(&mut first) {
                    x.arrived += 1;
                }
                if x.permits > 0 {
                    x.permits -= 1;
                    drop(g);
                    return;
                }
                if held.as_ref().is_none_or(|h| h.route != x.route) {
                    x.waiting += 1;
                    let route = x.route.clone();
                    drop(g);
                    // A previous Held (of a gate since removed) is dropped here, after the lock.
                    held = Some(Held {
                        gates: &self.gates,
                        route,
                    });
                }
            }
            if changed.changed().await.is_err() {
                return;
            }
        }
    }

    /// Sends `Retry-After: seconds` with PDB 429s (None: no header, the default).
    /// Finish requests whose client went away (see [`FaultState::finish_abandoned`]).
    pub fn set_finish_abandoned(&self, on: bool) {
        self.edit(|s| s.finish_abandoned = on);
    }

    pub(crate) fn finish_abandoned(&self) -> bool {
        self.read(|s| s.finish_abandoned)
    }

    pub fn set_eviction_retry_after(&self, seconds: Option<u32>) {
        self.edit(|s| s.eviction_retry_after = seconds);
    }

    pub fn eviction_retry_after(&self) -> Option<u32> {
        self.read(|s| s.eviction_retry_after)
    }

    /// Replaces all knobs at once.
    pub fn set(&self, state: FaultState) {
        self.edit(|s| *s = state);
    }

    /// The knobs as they are now.
    pub fn get(&self) -> FaultState {
        self.read(Clone::clone)
    }

    /// Removes every knob and gate; hanging and held requests go on.
    pub fn clear(&self) {
        self.gates.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.edit(|s| *s = FaultState::default());
    }

    /// Applies the knobs to one request: waits out hangs and latency, then says what to do.
    pub(crate) async fn apply(&self, method: &str, uri: &str) -> Action {
        let mut changed = self.changed.subscribe();
        self.through_gates(method, uri, &mut changed).await;
        while self.read(|s| s.hang.iter().any(|r| r.matches(method, uri))) {
            if changed.changed().await.is_err() {
                break;
            }
        }
        let delay: u64 = self.read(|s| {
            s.latency
                .iter()
                .filter(|l| l.route.matches(method, uri))
                .map(|l| l.millis)
                .sum()
        });
        if delay > 0 {
            tokio::time::sleep(Duration::from_millis(delay)).await;
        }
        self.edit(|s| {
            if let Some(c) = s
                .close
                .iter_mut()
                .find(|c| c.remaining > 0 && c.route.matches(method, uri))
            {
                c.remaining -= 1;
                return Action::Close;
            }
            if let Some(t) = s
                .throttle
                .iter_mut()
                .find(|t| t.remaining > 0 && t.route.matches(method, uri))
            {
                t.remaining -= 1;
                return Action::Throttle {
                    retry_after: t.retry_after,
                };
            }
            if let Some(f) = s
                .fail
                .iter_mut()
                .find(|f| f.remaining > 0 && f.route.matches(method, uri))
            {
                f.remaining -= 1;
                return Action::Fail {
                    status: f.status,
                    retry_after: f.retry_after,
                    body: f.body.clone().map(|b| {
                        let ct = f.content_type.clone();
                        (ct.unwrap_or_else(|| "text/html; charset=utf-8".into()), b)
                    }),
                };
            }
            s.close.retain(|c| c.remaining > 0);
            s.throttle.retain(|t| t.remaining > 0);
            s.fail.retain(|f| f.remaining > 0);
            Action::Proceed
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_gate_holds_matching_requests_until_passed() {
        let f = Faults::new();
        let route = Route::new("POST", "/eviction");
        f.gate(route.clone());
        let held = tokio::spawn({
            let f = f.clone();
            async move { matches!(f.apply("POST", "/a/eviction").await, Action::Proceed) }
        });
        let other = f.apply("GET", "/a/eviction").await;
        assert!(
            matches!(other, Action::Proceed),
            "another method is not held"
        );
        while f.waiting_at(&route) == 0 {
            tokio::task::yield_now().await;
        }
        assert!(!held.is_finished());
        f.pass(&route, 1);
        assert!(held.await.unwrap());
        assert_eq!((f.waiting_at(&route), f.arrived_at(&route)), (0, 1));

        // A held request whose client went away is no longer counted.
        let dropped = tokio::spawn({
            let f = f.clone();
            async move { f.apply("POST", "/b/eviction").await }
        });
        while f.waiting_at(&route) == 0 {
            tokio::task::yield_now().await;
        }
        dropped.abort();
        let _ = dropped.await;
        assert_eq!((f.waiting_at(&route), f.arrived_at(&route)), (0, 2));
        f.ungate(&route);
        assert!(matches!(
            f.apply("POST", "/c/eviction").await,
            Action::Proceed
        ));
    }
}
