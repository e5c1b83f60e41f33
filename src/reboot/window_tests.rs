//! Table tests of the maintenance windows with fixed instants: days, midnight and the week's
//! end, overlapping windows, a zone by name, and daylight-saving shifts both ways in
//! Europe/Berlin and America/New_York (the system's tz database, as the daemon reads it).

use jiff::Timestamp;
use jiff::civil::Weekday::{self, Friday, Saturday, Sunday};
use jiff::tz::TimeZone;

use super::window::{WEEK_MINUTES, Window, Windows};

fn at(text: &str) -> Timestamp {
    text.parse()
        .unwrap_or_else(|e| panic!("{text} is not an instant: {e}"))
}

fn window(day: Weekday, hh_mm: &str, length_minutes: u32) -> Window {
    let (h, m) = hh_mm.split_once(':').unwrap();
    Window {
        day,
        start_minute: h.parse::<u32>().unwrap() * 60 + m.parse::<u32>().unwrap(),
        length_minutes,
    }
}

fn zone(name: &str) -> TimeZone {
    TimeZone::get(name).unwrap_or_else(|e| panic!("{name} is not in the tz database: {e}"))
}

/// One expectation at one instant: open or not, and when the state next changes.
struct Case {
    at: &'static str,
    open: bool,
    /// `next_open` when closed, `closes_at` when open.
    next: Option<&'static str>,
}

const fn case(at: &'static str, open: bool, next: &'static str) -> Case {
    Case {
        at,
        open,
        next: Some(next),
    }
}

fn check(what: &str, w: &Windows, cases: &[Case]) {
    for c in cases {
        let ts = at(c.at);
        assert_eq!(w.contains(ts), c.open, "{what}: contains({})", c.at);
        let next = c.next.map(at);
        if c.open {
            assert_eq!(w.next_open(ts), Some(ts), "{what}: next_open({})", c.at);
            assert_eq!(w.closes_at(ts), next, "{what}: closes_at({})", c.at);
        } else {
            assert_eq!(w.next_open(ts), next, "{what}: next_open({})", c.at);
            assert_eq!(w.closes_at(ts), None, "{what}: closes_at({})", c.at);
        }
    }
}

// 2026-12-04 is a Friday, 2026-12-05 a Saturday, 2026-12-07 a Monday.

#[test]
fn no_window_means_any_time() {
    for w in [
        Windows::any_time(),
        Windows::new(zone("Europe/Berlin"), &[]),
    ] {
        for ts in ["2026-12-05T03:00:00Z", "2026-03-29T01:30:00Z"] {
            let ts = at(ts);
            assert!(w.contains(ts));
            assert_eq!(w.next_open(ts), Some(ts));
            assert_eq!(w.closes_at(ts), None, "any time never closes");
        }
    }
}

#[test]
fn a_window_is_open_on_its_days_from_its_start_for_its_length_crossing_midnight_and_the_week_end() {
    let w = Windows::new(
        TimeZone::UTC,
        &[window(Saturday, "22:30", 120), window(Sunday, "22:30", 120)],
    );
    check(
        "Sat+Sun 22:30 for 120 min, UTC",
        &w,
        &[
            case("2026-12-04T23:00:00Z", false, "2026-12-05T22:30:00Z"),
            case("2026-12-05T22:29:30Z", false, "2026-12-05T22:30:00Z"),
            case("2026-12-05T22:30:00Z", true, "2026-12-06T00:30:00Z"),
            // Saturday's window runs into Sunday.
            case("2026-12-06T00:29:59Z", true, "2026-12-06T00:30:00Z"),
            case("2026-12-06T00:30:00Z", false, "2026-12-06T22:30:00Z"),
            // Sunday's window runs into Monday, across the week's end.
            case("2026-12-07T00:15:00Z", true, "2026-12-07T00:30:00Z"),
            case("2026-12-07T00:30:00Z", false, "2026-12-12T22:30:00Z"),
        ],
    );
}

/// kured issue 204: a window from 22:00 to 06:00 never matched, its end being before its start.
/// A start and a length cannot say that, and the window holds the whole night.
#[test]
fn a_night_window_crossing_midnight_matches_all_night_kured_204() {
    let w = Windows::new(TimeZone::UTC, &[window(Friday, "22:00", 8 * 60)]);
    check(
        "Fri 22:00 for 8 h, UTC",
        &w,
        &[
            case("2026-12-04T21:59:00Z", false, "2026-12-04T22:00:00Z"),
            case("2026-12-04T23:00:00Z", true, "2026-12-05T06:00:00Z"),
            case("2026-12-05T03:00:00Z", true, "2026-12-05T06:00:00Z"),
            case("2026-12-05T06:00:00Z", false, "2026-12-11T22:00:00Z"),
        ],
    );
}

#[test]
fn overlapping_and_touching_windows_close_once_at_their_common_end() {
    let overlapping = Windows::new(
        TimeZone::UTC,
        &[window(Saturday, "22:00", 60), window(Saturday, "22:30", 60)],
    );
    check(
        "overlapping",
        &overlapping,
        &[case("2026-12-05T22:10:00Z", true, "2026-12-05T23:30:00Z")],
    );
    let touching = Windows::new(
        TimeZone::UTC,
        &[window(Saturday, "22:00", 30), window(Saturday, "22:30", 30)],
    );
    check(
        "touching",
        &touching,
        &[case("2026-12-05T22:10:00Z", true, "2026-12-05T23:00:00Z")],
    );
    // A week-long window from any start covers every minute: it never closes.
    let whole = Windows::new(TimeZone::UTC, &[window(Sunday, "23:30", WEEK_MINUTES)]);
    assert!(whole.contains(at("2026-12-02T12:00:00Z")));
    assert_eq!(whole.closes_at(at("2026-12-02T12:00:00Z")), None);
}

#[test]
fn a_zone_given_by_name_moves_the_windows_to_its_wall_clock() {
    // Berlin is UTC+1 in December: Saturday 22:30 there is 21:30 UTC.
    let w = Windows::new(zone("Europe/Berlin"), &[window(Saturday, "22:30", 120)]);
    check(
        "Sat 22:30 for 120 min, Europe/Berlin in winter",
        &w,
        &[
            case("2026-12-05T21:29:00Z", false, "2026-12-05T21:30:00Z"),
            case("2026-12-05T21:30:00Z", true, "2026-12-05T23:30:00Z"),
            case("2026-12-05T23:30:00Z", false, "2026-12-12T21:30:00Z"),
        ],
    );
}

/// Europe/Berlin, Sunday 2026-03-29: at 01:00 UTC the clocks go from 02:00 CET to 03:00 CEST.
/// Clock times are obeyed: a window across the jump is shortened by the skipped hour, one
/// wholly inside it does not occur that day and does the next Sunday.
#[test]
fn spring_forward_in_berlin_shortens_a_window_and_skips_one_inside_the_lost_hour() {
    let berlin = zone("Europe/Berlin");
    let across = Windows::new(berlin.clone(), &[window(Sunday, "01:00", 180)]);
    check(
        "Sun 01:00-04:00 Berlin, spring forward",
        &across,
        &[
            case("2026-03-28T23:59:00Z", false, "2026-03-29T00:00:00Z"),
            // 01:00 CET to 04:00 CEST: two hours of real time, not three.
            case("2026-03-29T00:00:00Z", true, "2026-03-29T02:00:00Z"),
        ],
    );
    let half = Windows::new(berlin.clone(), &[window(Sunday, "01:30", 60)]);
    check(
        "Sun 01:30-02:30 Berlin, spring forward",
        &half,
        &[
            // Opens at 01:30 CET and closes at the jump, where 02:00 CET becomes 03:00 CEST.
            case("2026-03-29T00:30:00Z", true, "2026-03-29T01:00:00Z"),
            case("2026-03-29T01:00:00Z", false, "2026-04-04T23:30:00Z"),
        ],
    );
    let inside = Windows::new(berlin, &[window(Sunday, "02:15", 30)]);
    check(
        "Sun 02:15-02:45 Berlin, spring forward",
        &inside,
        &[
            // 02:15 does not exist on 2026-03-29; the next Sunday, 02:15 CEST is 00:15 UTC.
            case("2026-03-28T23:00:00Z", false, "2026-04-05T00:15:00Z"),
            case("2026-03-22T01:15:00Z", true, "2026-03-22T01:45:00Z"),
        ],
    );
}

/// Europe/Berlin, Sunday 2026-10-25: at 01:00 UTC the clocks go from 03:00 CEST back to
/// 02:00 CET, so 02:00 to 03:00 happens twice and a window over it lasts an hour longer.
#[test]
fn fall_back_in_berlin_lengthens_a_window_over_the_repeated_hour() {
    let w = Windows::new(zone("Europe/Berlin"), &[window(Sunday, "02:00", 60)]);
    check(
        "Sun 02:00-03:00 Berlin, fall back",
        &w,
        &[
            case("2026-10-24T23:00:00Z", false, "2026-10-25T00:00:00Z"),
            // 02:00 CEST to 03:00 CET: open through the jump back, two hours in all.
            case("2026-10-25T00:00:00Z", true, "2026-10-25T02:00:00Z"),
            case("2026-10-25T01:30:00Z", true, "2026-10-25T02:00:00Z"),
            case("2026-10-25T02:00:00Z", false, "2026-11-01T01:00:00Z"),
        ],
    );
}

/// America/New_York, zincati's own example (Sunday 01:30 for 60 minutes). Spring forward on
/// 2026-03-08 at 07:00 UTC (02:00 EST becomes 03:00 EDT): the window lasts 30 minutes. Fall back
/// on 2026-11-01 at 06:00 UTC (02:00 EDT becomes 01:00 EST): 01:30 to 02:00 EDT, then again
/// 01:30 to 02:30 EST, 90 minutes in all.
#[test]
fn new_york_shifts_shorten_and_lengthen_zincatis_example_window() {
    let w = Windows::new(zone("America/New_York"), &[window(Sunday, "01:30", 60)]);
    check(
        "Sun 01:30-02:30 New York",
        &w,
        &[
            case("2026-03-08T06:00:00Z", false, "2026-03-08T06:30:00Z"),
            case("2026-03-08T06:30:00Z", true, "2026-03-08T07:00:00Z"),
            case("2026-03-08T07:00:00Z", false, "2026-03-15T05:30:00Z"),
            case("2026-11-01T05:30:00Z", true, "2026-11-01T06:00:00Z"),
            // 01:00 EST: the clock is back before the window's start.
            case("2026-11-01T06:00:00Z", false, "2026-11-01T06:30:00Z"),
            case("2026-11-01T06:30:00Z", true, "2026-11-01T07:30:00Z"),
            case("2026-11-01T07:30:00Z", false, "2026-11-08T06:30:00Z"),
        ],
    );
}
