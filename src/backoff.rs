//! The one backoff: pauses between attempts of anything that may fail for a while (API requests,
//! the connection to logind, a restore, an Event), [`FIRST`] doubling to [`MAX`] by default,
//! jittered down. A leaf: no I/O, nothing of the program's below it.

use std::hash::{BuildHasher, Hasher};
use std::time::{Duration, Instant};

/// First pause after a transient failure.
pub const FIRST: Duration = Duration::from_millis(100);
/// Longest pause: long enough to spare a struggling server, short enough to use a control plane
/// the moment it is back during a shutdown time limit of seconds.
pub const MAX: Duration = Duration::from_secs(2);
/// Up to this fraction of a pause is taken off at random, so many nodes shutting down at once do
/// not retry in step. Taken off, never added: no pause exceeds the curve.
pub const JITTER: f64 = 0.2;

/// The pauses between attempts: [`FIRST`] doubling to [`MAX`], each shortened by up to
/// [`JITTER`] at random.
#[derive(Debug)]
pub struct Backoff {
    next: Duration,
    first: Duration,
    max: Duration,
    jitter: bool,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff::new()
    }
}

impl Backoff {
    pub fn new() -> Backoff {
        Backoff::between(FIRST, MAX)
    }

    /// The same shape (doubling, jittered) between other bounds: the daemon's waits for logind
    /// and for a restore that keeps failing, which need no sub-second retries.
    pub fn between(first: Duration, max: Duration) -> Backoff {
        Backoff {
            next: first,
            first,
            max,
            jitter: true,
        }
    }

    /// The API curve without jitter (for tests that check exact instants).
    pub fn exact() -> Backoff {
        Backoff {
            jitter: false,
            ..Backoff::new()
        }
    }

    /// The next pause.
    pub fn next_pause(&mut self) -> Duration {
        let base = self.next;
        self.next = (self.next * 2).min(self.max);
        if self.jitter {
            base.mul_f64(1.0 - JITTER * random_unit())
        } else {
            base
        }
    }

    /// After a success: the next failure starts the curve again.
    pub fn reset(&mut self) {
        self.next = self.first;
    }
}

/// A number in [0, 1) from the standard library's per-process random hash keys (no extra crate
/// for a jitter that needs no quality).
fn random_unit() -> f64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(Instant::now().elapsed().as_nanos() as u64);
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jitter_only_shortens_the_pauses() {
        let mut b = Backoff::new();
        for base in [100, 200, 400, 800, 1600, 2000, 2000] {
            let p = b.next_pause().as_millis() as u64;
            assert!(p <= base && p >= base * 8 / 10, "{p} for {base}");
        }
    }
}
