//! [`retry_until`]: a request repeated after transient failures until a deadline, never past it,
//! on the one backoff ([`crate::backoff`]); and that backoff for kube's watcher ([`for_watches`]).
//!
//! - A request that died before any answer on a connection the pool had kept open is sent again
//!   at once (the pool has dropped that connection, so the retry opens a new one): a real API
//!   server closes idle connections, and the next request on one fails with hyper's
//!   `SendRequest` error although the server is fine (measured on kube-apiserver v1.29.7).
//! - `Retry-After` (429, 503) is honoured; when it reaches past the deadline we stop at once.
//! - Each attempt is bounded by the caller ([`crate::api::Clients::once`]: min(request timeout,
//!   time left)), so no attempt runs past the deadline either.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use super::ApiError;
use crate::backoff::Backoff;

/// How long a watch must go without a pause before its backoff starts again from [`FIRST`].
const WATCH_RESET: Duration = Duration::from_secs(10);

/// The backoff for kube's watcher: the same curve, started again only after [`WATCH_RESET`]
/// without a pause. kube's watcher resets its backoff on every event it yields, and a watch that
/// answers 410 in a loop yields its relist's events each round; with plain resets the pause
/// would never grow (kube's own `ResetTimerBackoff` passes such resets through).
#[derive(Debug)]
pub struct WatchBackoff {
    curve: Backoff,
    last_pause: Option<Instant>,
}

/// A [`WatchBackoff`].
pub fn for_watches() -> WatchBackoff {
    WatchBackoff {
        curve: Backoff::new(),
        last_pause: None,
    }
}

impl Iterator for WatchBackoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        self.last_pause = Some(Instant::now());
        Some(self.curve.next_pause())
    }
}

impl kube::runtime::utils::Backoff for WatchBackoff {
    fn reset(&mut self) {
        if self.last_pause.is_none_or(|t| t.elapsed() >= WATCH_RESET) {
            self.curve.reset();
        }
    }
}

/// Runs `op` until it succeeds, fails for good, or the deadline. Transient failures (no answer,
/// a broken connection, 429, 5xx) are retried after the [`Backoff`] pause or the server's
/// `Retry-After`; a request that died on a kept-alive connection is retried at once, once. The
/// error returned at the deadline is the last one, carrying the number of attempts and the time
/// spent. No pause runs past `deadline`.
pub async fn retry_until<T, F, Fut>(deadline: Instant, mut op: F) -> Result<T, ApiError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ApiError>>,
{
    retry_with(deadline, Backoff::new(), &mut op).await
}

/// [`retry_until`] with a given backoff.
pub async fn retry_with<T, F, Fut>(
    deadline: Instant,
    mut backoff: Backoff,
    op: &mut F,
) -> Result<T, ApiError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, ApiError>>,
{
    let started = Instant::now();
    let mut attempts = 0;
    let mut fresh_connection_tried = false;
    loop {
        attempts += 1;
        let e = match op().await {
            Ok(v) => {
                if attempts > 1 {
                    tracing::debug!("request succeeded after {attempts} attempts");
                }
                return Ok(v);
            }
            Err(e) if !e.is_transient() => return Err(e),
            Err(e) => e,
        };
        let pause = if e.is_dead_connection() && !fresh_connection_tried {
            fresh_connection_tried = true;
            Duration::ZERO
        } else {
            fresh_connection_tried = false;
            e.retry_after().unwrap_or_else(|| backoff.next_pause())
        };
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || pause >= left {
            tracing::debug!("{e}; no time left to retry");
            return Err(e.after(attempts, started.elapsed()));
        }
        tracing::debug!("{e}; retrying in {pause:?} (attempt {attempts})");
        tokio::time::sleep(pause).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::error::{Cause, Kind};
    use crate::backoff::{FIRST, JITTER, MAX};

    fn timeout() -> ApiError {
        ApiError::new("node n", "http://s", Kind::Timeout(Duration::from_secs(1)))
    }

    fn status(code: u16, retry_after: Option<u64>) -> ApiError {
        ApiError::new(
            "node n",
            "http://s",
            Kind::Status {
                code,
                reason: String::new(),
                message: "m".into(),
                retry_after: retry_after.map(Duration::from_secs),
            },
        )
    }

    #[tokio::test(start_paused = true)]
    async fn transient_errors_back_off_doubling_to_the_cap_until_the_deadline() {
        let start = Instant::now();
        let mut calls = Vec::new();
        let result: Result<(), ApiError> = retry_with(
            start + Duration::from_secs(10),
            Backoff::exact(),
            &mut || {
                calls.push(start.elapsed().as_millis());
                async { Err(timeout()) }
            },
        )
        .await;
        // Pauses of 100, 200, 400, 800, 1600 ms, then 2 s each; the next pause would end at the
        // deadline, so the retries stop there, before it.
        assert_eq!(calls, vec![0, 100, 300, 700, 1500, 3100, 5100, 7100, 9100]);
        assert!(start.elapsed() <= Duration::from_secs(10));
        let e = result.unwrap_err();
        assert!(e.is_unreachable());
        assert!(e.to_string().contains("9 attempts"), "{e}");
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_backoff_grows_through_the_resets_of_a_410_loop() {
        use kube::runtime::utils::Backoff as _;
        let mut b = for_watches();
        let mut pauses = Vec::new();
        for _ in 0..7 {
            let p = b.next().unwrap();
            pauses.push(p);
            tokio::time::sleep(p).await;
            // The relist's events reset the watcher's backoff each round.
            b.reset();
        }
        assert!(pauses[6] >= MAX.mul_f64(1.0 - JITTER), "{pauses:?}");
        // Ten quiet seconds later the curve starts again.
        tokio::time::sleep(WATCH_RESET).await;
        b.reset();
        assert!(b.next().unwrap() <= FIRST);
    }

    #[tokio::test(start_paused = true)]
    async fn a_server_that_comes_back_is_used_and_a_final_answer_is_not_retried() {
        let start = Instant::now();
        let back = start + Duration::from_secs(6);
        let result = retry_with(
            start + Duration::from_secs(60),
            Backoff::exact(),
            &mut || async move {
                if Instant::now() < back {
                    Err(timeout())
                } else {
                    Ok(7)
                }
            },
        )
        .await;
        assert!(matches!(result, Ok(7)), "{result:?}");
        // The first attempt after the server came back (6 s) is at 7.1 s: the pause never grew
        // past 2 s.
        assert_eq!(start.elapsed(), Duration::from_millis(7100));

        let mut n = 0;
        let result: Result<(), ApiError> =
            retry_until(Instant::now() + Duration::from_secs(3), || {
                n += 1;
                async { Err(status(404, None)) }
            })
            .await;
        assert!(result.unwrap_err().is_not_found());
        assert_eq!(n, 1, "a final answer is not retried");
    }

    #[tokio::test(start_paused = true)]
    async fn retry_after_is_honoured_and_capped_by_the_deadline() {
        let start = Instant::now();
        let mut calls = Vec::new();
        let result: Result<(), ApiError> = retry_until(start + Duration::from_secs(12), || {
            calls.push(start.elapsed().as_secs());
            async { Err(status(429, Some(5))) }
        })
        .await;
        // At 0 and 5 s; at 10 s the next 5 s would pass the deadline: given up at once.
        assert_eq!(calls, vec![0, 5, 10]);
        assert_eq!(start.elapsed(), Duration::from_secs(10));
        assert_eq!(result.unwrap_err().code(), Some(429));
    }

    #[tokio::test(start_paused = true)]
    async fn a_dead_kept_alive_connection_is_retried_at_once_then_with_backoff() {
        let start = Instant::now();
        let mut calls = Vec::new();
        let _ = retry_with(
            start + Duration::from_millis(1000),
            Backoff::exact(),
            &mut || {
                calls.push(start.elapsed().as_millis());
                async {
                    Err::<(), _>(ApiError::new(
                        "node n",
                        "http://s",
                        Kind::Transport(Cause::ConnectionClosed),
                    ))
                }
            },
        )
        .await;
        // At once, then 100 ms, then at once again (a new connection died too), then 200 ms...
        assert_eq!(calls[..4], [0, 0, 100, 100]);
    }
}
