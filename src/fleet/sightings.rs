//! When this node first saw a slot Lease whose times lie ahead of its clock. Such a time reads
//! as now ([`super::CLOCK_SKEW_MAX`]), on every look: judged by it alone, the hold would never
//! age, and a Lease written a day ahead would keep its slot for ever. So a hold whose times are
//! all ahead is judged from the moment this node first saw it with those times
//! ([`super::HeldTimes::first_seen`]): `hold_max` runs from there. A Lease written again (another
//! holder, other times) is a new sighting.
//!
//! The memory is the process's, not an engine's: the daemon makes an engine per drain, per
//! restore and per look of its reboot gate, and a wait for a slot outlives them all. It is
//! bounded ([`KEPT`]), and measured on the monotonic clock (tokio's, so paused time in tests
//! moves it), which a wall clock set back or forth does not move.

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

use tokio::time::Instant;

use k8s_openapi::api::coordination::v1::Lease;

use super::{HeldTimes, identity};

/// The most sightings kept: the slots of a few groups many times over. When it is full, the one
/// looked at longest ago goes.
pub const KEPT: usize = 256;

/// One Lease as it was seen: which one, held by whom, with which times.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Seen {
    /// `NAMESPACE/NAME`.
    pub lease: String,
    /// `spec.holderIdentity` as written.
    pub holder: String,
    pub times: (Option<jiff::Timestamp>, Option<jiff::Timestamp>),
}

impl Seen {
    /// The Lease `lease` held by `holder` with `times`.
    pub fn new(lease: String, holder: String, times: HeldTimes) -> Seen {
        Seen {
            lease,
            holder,
            times: (times.acquired, times.renewed),
        }
    }
}

#[derive(Debug, Clone, Copy)]
struct Sight {
    first: Instant,
    last: Instant,
}

/// The sightings of Leases with times ahead of this node's clock.
#[derive(Debug, Default)]
pub struct Sightings {
    seen: Mutex<HashMap<Seen, Sight>>,
}

impl Sightings {
    /// The process's one memory.
    pub fn of_this_process() -> &'static Sightings {
        static SIGHTINGS: OnceLock<Sightings> = OnceLock::new();
        SIGHTINGS.get_or_init(Sightings::default)
    }

    /// When `seen` was first seen, `at` being now (so the first look returns `at`).
    pub fn first_seen(&self, seen: Seen, at: Instant) -> Instant {
        let mut all = self
            .seen
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(sight) = all.get_mut(&seen) {
            sight.last = sight.last.max(at);
            return sight.first;
        }
        if all.len() >= KEPT
            && let Some(oldest) = all
                .iter()
                .min_by_key(|(_, sight)| sight.last)
                .map(|(seen, _)| seen.clone())
        {
            all.remove(&oldest);
        }
        all.insert(
            seen,
            Sight {
                first: at,
                last: at,
            },
        );
        at
    }

    /// `times` of Lease `lease` held by `holder`, as read at `now` (`at` on the monotonic
    /// clock): with [`HeldTimes::first_seen`] when every time it carries lies more than the
    /// skew ahead, remembered from the first such look; else as they are, nothing remembered.
    pub fn judged(
        &self,
        lease: String,
        holder: &str,
        times: HeldTimes,
        now: jiff::Timestamp,
        at: Instant,
    ) -> HeldTimes {
        if !times.all_ahead_of(now) {
            return times;
        }
        let first = self.first_seen(Seen::new(lease, holder.to_string(), times), at);
        let since = jiff::SignedDuration::try_from(at.saturating_duration_since(first))
            .unwrap_or(jiff::SignedDuration::MAX);
        HeldTimes {
            first_seen: Some(now.checked_sub(since).unwrap_or(jiff::Timestamp::MIN)),
            ..times
        }
    }

    /// How many sightings are kept.
    pub fn len(&self) -> usize {
        self.seen
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .len()
    }

    /// Whether none is.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The times of `lease` (in namespace `namespace`) as read at `now`, judged with the process's
/// memory ([`Sightings::judged`]).
pub fn times_of(lease: &Lease, namespace: &str, now: jiff::Timestamp) -> HeldTimes {
    let name = lease.metadata.name.as_deref().unwrap_or_default();
    Sightings::of_this_process().judged(
        format!("{namespace}/{name}"),
        identity(lease).unwrap_or_default(),
        HeldTimes::of(lease),
        now,
        Instant::now(),
    )
}
