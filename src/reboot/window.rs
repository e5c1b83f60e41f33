//! Maintenance windows: the weekly times at which a reboot the node asks for may start, shaped
//! as zincati's `periodic` strategy (`coreos/zincati/docs/usage/updates-strategy.md`); judged
//! among the holds (`holds.rs`).
//!
//! The semantics are zincati's:
//! - a window is a weekday, a start time (`hh:mm`) and a length in whole minutes; it may cross
//!   midnight and the week's end (Sunday 23:30 for 60 minutes ends Monday 00:30);
//! - every window is read in one time zone, UTC unless another is given;
//! - an instant is inside a window when its wall-clock time in that zone is: the clock times
//!   are obeyed, so a daylight-saving shift lengthens a window (the repeated hour counts twice)
//!   or shortens it (the skipped hour never comes), and a window lying wholly inside a skipped
//!   hour does not occur that day (zincati documents the same); it occurs again the next week;
//! - no window at all means any time.
//!
//! Like zincati (`coreos/zincati/docs/development/update-strategy-periodic.md`), windows are folded into
//! minutes since Monday 00:00, and one crossing the week's end is split in two. Finding when a
//! window opens or closes walks forward from one instant where the state may change to the
//! next: where the wall clock reaches a window's edge at the current offset, or the zone's next
//! offset transition, whichever comes first. No minute-by-minute scan, no sleep.

use std::ops::Range;

use jiff::civil::DateTime;
use jiff::tz::TimeZone;
use jiff::{SignedDuration, Timestamp};

pub use crate::config::reboot::{WEEK_MINUTES, Window};

/// Minutes in a day.
const DAY_MINUTES: u32 = 24 * 60;
/// The local time zone's file, for `time_zone = "localtime"` (localtime(5)).
const LOCALTIME: &str = "/etc/localtime";
/// How far ahead [`Windows::next_open`] and [`Windows::closes_at`] look: two weeks and a day,
/// so a window that a daylight-saving shift swallows one week is found the next.
const HORIZON: SignedDuration = SignedDuration::from_hours(15 * 24);

/// The node's windows in their time zone.
#[derive(Debug, Clone)]
pub struct Windows {
    zone: TimeZone,
    week: Week,
}

/// The weekly calendar.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Week {
    /// No window configured, or windows that cover the whole week.
    AnyTime,
    /// Open minutes since Monday 00:00: sorted, disjoint, not touching, within the week.
    Open(Vec<Range<u32>>),
}

impl Windows {
    /// No window: a reboot may start at any time.
    pub fn any_time() -> Windows {
        Windows {
            zone: TimeZone::UTC,
            week: Week::AnyTime,
        }
    }

    /// `windows` read in `zone`; none means any time.
    pub fn new(zone: TimeZone, windows: &[Window]) -> Windows {
        let mut spans: Vec<Range<u32>> = Vec::new();
        for w in windows {
            let day = u32::from(w.day.to_monday_zero_offset().unsigned_abs());
            let start = day * DAY_MINUTES + w.start_minute.min(DAY_MINUTES - 1);
            let end = start + w.length_minutes.clamp(1, WEEK_MINUTES);
            if end > WEEK_MINUTES {
                spans.push(start..WEEK_MINUTES);
                spans.push(0..end - WEEK_MINUTES);
            } else {
                spans.push(start..end);
            }
        }
        spans.sort_by_key(|s| (s.start, s.end));
        let mut merged: Vec<Range<u32>> = Vec::new();
        for s in spans {
            match merged.last_mut() {
                Some(last) if s.start <= last.end => last.end = last.end.max(s.end),
                _ => merged.push(s),
            }
        }
        let whole_week = merged.first() == Some(&(0..WEEK_MINUTES));
        let week = if merged.is_empty() || whole_week {
            Week::AnyTime
        } else {
            Week::Open(merged)
        };
        Windows { zone, week }
    }

    /// The maintenance windows of `[reboot]` in their zone; a zone that cannot be read is said and
    /// the windows are read in UTC (zincati's and kured's default).
    pub fn of(settings: &crate::config::Settings) -> Windows {
        let reboot = &settings.reboot;
        let zone = match crate::host::localtime::time_zone(
            &reboot.zone,
            std::path::Path::new(LOCALTIME),
        ) {
            Ok(zone) => zone,
            Err(e) => {
                tracing::warn!(
                    "{e}; the reboot windows of node {} are read in UTC",
                    settings.node_name
                );
                jiff::tz::TimeZone::UTC
            }
        };
        Windows::new(zone, &reboot.windows)
    }

    /// The time zone the windows are read in.
    pub fn zone(&self) -> &TimeZone {
        &self.zone
    }

    /// Whether a reboot may start at `ts`.
    pub fn contains(&self, ts: Timestamp) -> bool {
        match &self.week {
            Week::AnyTime => true,
            Week::Open(spans) => is_open(spans, week_minute(self.zone.to_datetime(ts))),
        }
    }

    /// The first instant at or after `ts` inside a window: `ts` itself when a window is open.
    /// `None` only when no window opens within the next 15 days, which only a zone whose
    /// shifts swallow every window could cause.
    pub fn next_open(&self, ts: Timestamp) -> Option<Timestamp> {
        if self.contains(ts) {
            return Some(ts);
        }
        self.next_change(ts)
    }

    /// When the window open at `ts` closes (windows that overlap or touch count as one).
    /// `None` when `ts` is outside every window, or when the windows never close (no window,
    /// or the whole week), or not within the next 15 days.
    pub fn closes_at(&self, ts: Timestamp) -> Option<Timestamp> {
        if matches!(self.week, Week::AnyTime) || !self.contains(ts) {
            return None;
        }
        self.next_change(ts)
    }

    /// The first instant after `ts` whose state (open or closed) differs from `ts`'s.
    fn next_change(&self, ts: Timestamp) -> Option<Timestamp> {
        let Week::Open(spans) = &self.week else {
            return None;
        };
        let open_at_start = self.contains(ts);
        let limit = ts.checked_add(HORIZON).ok()?;
        let mut cursor = ts;
        while cursor < limit {
            let local = self.zone.to_datetime(cursor);
            let minute = week_minute(local);
            // Where the wall clock reaches the next edge if the offset stays as it is now.
            let into_minute = SignedDuration::from_secs(i64::from(local.second()))
                + SignedDuration::from_nanos(i64::from(local.subsec_nanosecond()));
            let to_edge = SignedDuration::from_mins(i64::from(minutes_to_next_edge(spans, minute)));
            let mut next = cursor.checked_add(to_edge - into_minute).ok()?;
            if let Some(shift) = self.zone.following(cursor).next()
                && shift.timestamp() < next
            {
                next = shift.timestamp();
            }
            if self.contains(next) != open_at_start {
                return Some(next);
            }
            cursor = next;
        }
        None
    }
}

/// Minutes since Monday 00:00 of a wall-clock time.
fn week_minute(local: DateTime) -> u32 {
    let day = u32::from(local.weekday().to_monday_zero_offset().unsigned_abs());
    let hour = u32::from(local.hour().unsigned_abs());
    let minute = u32::from(local.minute().unsigned_abs());
    day * DAY_MINUTES + hour * 60 + minute
}

fn is_open(spans: &[Range<u32>], minute: u32) -> bool {
    spans.iter().any(|s| s.contains(&minute))
}

/// Minutes from `minute` to the next window edge after it, going round the week: from 1 to
/// [`WEEK_MINUTES`]. Edges are the spans' starts and ends; the week's end is not one unless a
/// span ends or starts there (a span split at the week's end continues at minute 0).
fn minutes_to_next_edge(spans: &[Range<u32>], minute: u32) -> u32 {
    spans
        .iter()
        .flat_map(|s| [s.start, s.end % WEEK_MINUTES])
        .map(|edge| (edge + WEEK_MINUTES - minute - 1) % WEEK_MINUTES + 1)
        .min()
        .unwrap_or(WEEK_MINUTES)
}
