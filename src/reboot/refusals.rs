//! The journal's account of refused FleetLock connections: a caller's first refusal is said at
//! once, then one line a minute with the count refused since, so a flood of connections from
//! another local user costs two lines a minute, not one per connection. Pure: the server's
//! accept loop passes the time in and logs the lines it gets back.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use super::caller::{Refused, Who};
use crate::words;

/// How often a caller that goes on being refused is said again, with its count.
pub const EVERY: Duration = Duration::from_secs(60);

/// The refusals of each caller since its last line.
#[derive(Debug, Default)]
pub struct Refusals {
    callers: BTreeMap<Who, Window>,
}

#[derive(Debug, Clone, Copy)]
struct Window {
    /// When the caller's last line was said.
    said: Instant,
    /// Refusals since, not yet said.
    count: u64,
}

impl Refusals {
    /// Counts one refusal at `now`; the line to say at once when it is the caller's first in
    /// [`EVERY`] (its first at all, or the first after a quiet minute).
    pub fn refused(&mut self, refused: &Refused, now: Instant) -> Option<String> {
        let who = refused.who;
        if let Some(window) = self.callers.get_mut(&who) {
            window.count += 1;
            return None;
        }
        self.callers.insert(
            who,
            Window {
                said: now,
                count: 0,
            },
        );
        Some(format!(
            "refused a FleetLock connection from {who} ({} {}): {}; more refusals of {who} are \
             counted and said once a minute",
            refused.refusal.status.as_u16(),
            refused.refusal.kind.as_str(),
            refused.refusal.value
        ))
    }

    /// When the next line is due, if any caller has a window open.
    pub fn due(&self) -> Option<Instant> {
        self.callers.values().map(|w| w.said + EVERY).min()
    }

    /// The lines due at `now`: each caller refused since its last line, with the count; a
    /// caller refused no more is forgotten, so its next refusal is said at once again.
    pub fn flush(&mut self, now: Instant) -> Vec<String> {
        let mut lines = Vec::new();
        self.callers.retain(|who, window| {
            if now < window.said + EVERY {
                return true;
            }
            if window.count == 0 {
                return false;
            }
            lines.push(format!(
                "refused {} from {who} in the last {} s",
                words::plural(
                    window.count,
                    "more FleetLock connection",
                    "more FleetLock connections"
                ),
                now.duration_since(window.said).as_secs()
            ));
            *window = Window {
                said: now,
                count: 0,
            };
            true
        });
        lines
    }
}

#[cfg(test)]
mod tests {
    use http::StatusCode;

    use super::*;
    use crate::reboot::fleetlock::{Kind, Refusal};

    fn from(who: Who) -> Refused {
        Refused {
            who,
            refusal: Refusal::new(StatusCode::FORBIDDEN, Kind::NotTheAgent, "only the agent"),
        }
    }

    /// 2,000 refusals of one uid in ten seconds: the first said at once, one line with the
    /// other 1,999 a minute later, and nothing after a quiet minute until the next refusal.
    #[tokio::test(start_paused = true)]
    async fn a_flood_from_one_caller_is_one_line_at_once_and_one_a_minute() {
        let mut log = Refusals::default();
        let start = Instant::now();
        let mut said = Vec::new();
        for i in 0..2000u64 {
            let now = start + Duration::from_millis(5 * i);
            said.extend(log.refused(&from(Who::Uid(65534)), now));
            assert!(log.flush(now).is_empty());
        }
        assert_eq!(
            said,
            vec![
                "refused a FleetLock connection from uid 65534 (403 caller_not_update_agent): \
                 only the agent; more refusals of uid 65534 are counted and said once a minute"
            ]
        );
        assert_eq!(log.due(), Some(start + EVERY));
        assert_eq!(
            log.flush(start + EVERY),
            vec!["refused 1999 more FleetLock connections from uid 65534 in the last 60 s"]
        );
        // A quiet minute: nothing to say, and the caller is forgotten.
        assert!(log.flush(start + 2 * EVERY).is_empty());
        assert_eq!(log.due(), None);
        let again = log.refused(&from(Who::Uid(65534)), start + 3 * EVERY);
        assert!(again.is_some_and(|l| l.starts_with("refused a FleetLock connection")));
    }

    #[tokio::test(start_paused = true)]
    async fn each_caller_has_its_own_count() {
        let mut log = Refusals::default();
        let start = Instant::now();
        assert!(log.refused(&from(Who::Uid(1000)), start).is_some());
        assert!(log.refused(&from(Who::Unknown), start).is_some());
        assert!(log.refused(&from(Who::Uid(1000)), start).is_none());
        assert!(log.refused(&from(Who::Uid(1001)), start).is_some());
        assert_eq!(
            log.flush(start + EVERY),
            vec!["refused 1 more FleetLock connection from uid 1000 in the last 60 s"]
        );
    }
}
