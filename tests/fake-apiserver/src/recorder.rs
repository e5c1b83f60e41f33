//! The request recorder: every API request with its answer, for tests and benchmarks to read.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;

/// One request the server answered (or dropped).
#[derive(Debug, Clone, Serialize)]
pub struct RecordedRequest {
    pub method: String,
    pub path: String,
    /// The raw query string, without `?`; empty when there was none.
    pub query: String,
    pub content_type: Option<String>,
    pub accept: Option<String>,
    /// The user the bearer token maps to (`system:node:NAME` or `admin`).
    pub user: String,
    /// The User-Agent header; `None` when the request had none (the apiserver's audit log
    /// then shows `userAgent: null`).
    pub user_agent: Option<String>,
    /// The body as text (lossy for binary bodies such as kubectl's protobuf DeleteOptions).
    pub body: String,
    pub body_len: usize,
    /// The answer's status; 0 when a fault closed the connection without one.
    pub status: u16,
    /// The answer's Retry-After header, if any.
    pub retry_after: Option<String>,
    /// The answer's body when its status is 300 or more (a Status); empty otherwise.
    pub response: String,
    /// The answer's body's length in bytes when known before it is sent (not a watch's).
    pub response_len: Option<u64>,
    /// When the request arrived.
    #[serde(with = "unix_seconds")]
    pub at: SystemTime,
    /// Seconds since the server started, when the request arrived.
    pub elapsed: f64,
}

mod unix_seconds {
    use serde::Serializer;
    use std::time::SystemTime;

    pub fn serialize<S: Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
        let secs = t
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        s.serialize_f64(secs)
    }
}

impl RecordedRequest {
    /// `path?query`, as traces print it.
    pub fn uri(&self) -> String {
        if self.query.is_empty() {
            self.path.clone()
        } else {
            format!("{}?{}", self.path, self.query)
        }
    }

    /// The body parsed as JSON, when it is JSON.
    pub fn json(&self) -> Option<serde_json::Value> {
        serde_json::from_str(&self.body).ok()
    }

    /// Value of a query parameter (percent-decoded).
    pub fn query_param(&self, name: &str) -> Option<String> {
        crate::server::query_pairs(&self.query)
            .into_iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v)
    }
}

/// Shared request log. Cheap to clone.
#[derive(Clone)]
pub struct Recorder {
    inner: Arc<Mutex<Vec<RecordedRequest>>>,
    started: Instant,
    watches: Arc<WatchTally>,
}

/// What the server's watches have sent, counted as they send it.
#[derive(Default)]
pub(crate) struct WatchTally {
    opened: AtomicU64,
    closed: AtomicU64,
    initial: AtomicU64,
    live: AtomicU64,
}

/// The watches' figures: open now, and the events sent since the last [`Recorder::clear`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct WatchCounts {
    /// Watches being served now.
    pub open: u64,
    /// Watches opened, since the server started.
    pub opened: u64,
    /// Events of the watches' initial lists (ADDED for each object there).
    pub initial: u64,
    /// Events of changes, each counted once per watch it was sent to.
    pub live: u64,
}

/// One watch being served: counted open until dropped.
pub(crate) struct OpenWatch(Arc<WatchTally>);

impl OpenWatch {
    /// Counts one event sent: of the initial list, or of a change.
    pub(crate) fn sent(&self, initial: bool) {
        let n = if initial {
            &self.0.initial
        } else {
            &self.0.live
        };
        n.fetch_add(1, Ordering::Relaxed);
    }
}

impl Drop for OpenWatch {
    fn drop(&mut self) {
        self.0.closed.fetch_add(1, Ordering::Relaxed);
    }
}

impl Recorder {
    pub(crate) fn new() -> Self {
        Recorder {
            inner: Arc::new(Mutex::new(Vec::new())),
            started: Instant::now(),
            watches: Arc::default(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<RecordedRequest>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn since_start(&self) -> Duration {
        self.started.elapsed()
    }

    pub(crate) fn push(&self, request: RecordedRequest) {
        self.lock().push(request);
    }

    /// Every request so far, in arrival order of their answers.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.lock().clone()
    }

    /// Forgets every request so far, and the watch events counted.
    pub fn clear(&self) {
        self.lock().clear();
        self.watches.initial.store(0, Ordering::Relaxed);
        self.watches.live.store(0, Ordering::Relaxed);
    }

    /// A watch starts being served.
    pub(crate) fn watch_opened(&self) -> OpenWatch {
        self.watches.opened.fetch_add(1, Ordering::Relaxed);
        OpenWatch(self.watches.clone())
    }

    /// The watches' figures now.
    pub fn watch_counts(&self) -> WatchCounts {
        let w = &self.watches;
        let opened = w.opened.load(Ordering::Relaxed);
        WatchCounts {
            open: opened.saturating_sub(w.closed.load(Ordering::Relaxed)),
            opened,
            initial: w.initial.load(Ordering::Relaxed),
            live: w.live.load(Ordering::Relaxed),
        }
    }

    /// How many requests had this method and a `path?query` containing `needle`.
    pub fn count(&self, method: &str, needle: &str) -> usize {
        self.lock()
            .iter()
            .filter(|r| r.method.eq_ignore_ascii_case(method) && r.uri().contains(needle))
            .count()
    }

    /// The requests with this method and a `path?query` containing `needle`.
    pub fn matching(&self, method: &str, needle: &str) -> Vec<RecordedRequest> {
        self.lock()
            .iter()
            .filter(|r| r.method.eq_ignore_ascii_case(method) && r.uri().contains(needle))
            .cloned()
            .collect()
    }
}
