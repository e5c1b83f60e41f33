//! Tests of the verdict's part of the table (`phase_verdict.rs`): the need that counts, the
//! agent's pre-reboot and its expiry, the holds' looks, the pause and its doubling, whose reboot
//! it is, and what is said once. Time is given, never read.

use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::reboot::need::SETTLE;

const MINUTE: Duration = Duration::from_secs(60);

fn needed() -> Need {
    Need::Needed("/run/reboot-required exists".into())
}

fn not_needed() -> Need {
    Need::NotNeeded("/run/reboot-required does not exist".into())
}

fn nothing_holds() -> HoldsSeen {
    HoldsSeen {
        keys: Vec::new(),
        text: "nothing holds the reboot of node n1".into(),
    }
}

fn held(keys: &[Key]) -> HoldsSeen {
    HoldsSeen {
        keys: keys.to_vec(),
        text: "node n1 is held: kernel bisect, ana".into(),
    }
}

/// A node with a sentinel file whose need has stood and whose holds let it go, at `t0`.
fn going(t0: Instant) -> Reboots {
    let mut r = Reboots::new(true, true, Duration::from_secs(3600));
    r.saw(Seen::Triggers(needed()), t0, true);
    r.settle(t0 + SETTLE, true);
    r.saw(Seen::Holds(nothing_holds()), t0 + SETTLE, true);
    r
}

#[test]
fn the_pause_after_failed_tries_doubles_up_to_four_hours() {
    let minutes = |n| retry_pause(n).as_secs() / 60;
    assert_eq!([0, 1, 2, 3, 4, 5].map(minutes), [10, 20, 40, 80, 160, 240]);
    assert_eq!(retry_pause(u32::MAX), RETRY_MAX);
}

/// The table keeps the count of reboots that ended without one: each pause doubles, the
/// verdict waits it out saying what ended the last, and a need that goes resets the count.
#[test]
fn each_reboot_that_ends_without_one_doubles_the_pause_and_a_need_gone_resets_it() {
    let t0 = Instant::now();
    let mut r = going(t0);
    let t = t0 + SETTLE;
    assert_eq!(r.verdict(t).ask, Ask::Go);
    assert_eq!(r.later(Setback::DrainIncomplete, t), 10 * MINUTE);
    let v = r.verdict(t);
    assert_eq!(
        (v.ask, v.setback),
        (Ask::Waits, Some(Setback::DrainIncomplete))
    );
    assert!(v.why.contains("its drain did not complete"), "{}", v.why);
    assert_eq!(r.next_tick(t), Some(t + 10 * MINUTE));
    assert_eq!(r.later(Setback::Held, t), 20 * MINUTE);
    assert_eq!(r.later(Setback::Failed, t), 40 * MINUTE);
    // The need goes (and stands gone): the next series starts at ten minutes again.
    r.saw(Seen::Triggers(not_needed()), t, true);
    r.settle(t + SETTLE, true);
    assert_eq!(r.verdict(t + SETTLE).ask, Ask::NotNeeded);
    assert_eq!(r.later(Setback::Cancelled, t + SETTLE), 10 * MINUTE);
}

/// The agent's pre-reboot stands 20 minutes from the last one, a steady-state ends it at once;
/// the need it makes counts once it has stood, as any trigger's.
#[test]
fn an_agents_ask_stands_twenty_minutes_from_the_last_and_a_steady_state_ends_it() {
    let t0 = Instant::now();
    let mut r = Reboots::new(false, true, Duration::from_secs(3600));
    r.agent_asked(Operation::PreReboot, t0, true);
    assert!(r.agent_asks(t0));
    assert_eq!(r.verdict(t0).ask, Ask::NotNeeded, "not stood yet");
    r.settle(t0 + SETTLE, true);
    assert_ne!(r.verdict(t0 + SETTLE).ask, Ask::NotNeeded);
    assert!(r.agent_asks(t0 + 19 * MINUTE), "19 min after the ask");
    r.agent_asked(Operation::PreReboot, t0 + 19 * MINUTE, true);
    assert!(r.agent_asks(t0 + 38 * MINUTE), "renewed by the last ask");
    let gone = t0 + 39 * MINUTE;
    assert!(!r.agent_asks(gone));
    assert_eq!(
        r.next_tick(t0 + 20 * MINUTE),
        Some(gone),
        "its expiry is the table's timer"
    );
    r.settle(gone, true);
    let v = r.verdict(gone + SETTLE);
    assert_eq!(v.ask, Ask::NotNeeded);
    assert!(
        v.why
            .contains("has not asked for a reboot (FleetLock pre-reboot) for 20 min"),
        "{}",
        v.why
    );
    r.agent_asked(Operation::PreReboot, gone, true);
    assert!(r.agent_asks(gone));
    r.agent_asked(Operation::SteadyState, gone + MINUTE, true);
    assert!(!r.agent_asks(gone + MINUTE));
    r.settle(gone + MINUTE + SETTLE, true);
    let v = r.verdict(gone + MINUTE + SETTLE);
    assert_eq!(
        v.why,
        "no reboot needed: the update agent reports steady state (FleetLock)"
    );
}

/// A repeated pre-reboot has the holds looked at again, but not more often than every 5 s.
#[test]
fn a_repeated_pre_reboot_looks_at_the_holds_again_at_most_every_five_seconds() {
    let t0 = Instant::now();
    let mut r = Reboots::new(false, true, Duration::from_secs(3600));
    let looks = |effects: &[Effect]| {
        effects
            .iter()
            .filter(|e| matches!(e, Effect::LookAtHolds { .. }))
            .count()
    };
    assert_eq!(looks(&r.agent_asked(Operation::PreReboot, t0, true)), 0);
    let t = t0 + SETTLE;
    assert_eq!(
        looks(&r.settle(t, true)),
        1,
        "the need counts: a first look"
    );
    r.saw(Seen::Holds(held(&[Key::Held])), t, true);
    let again = r.agent_asked(Operation::PreReboot, t + Duration::from_secs(1), true);
    assert_eq!(looks(&again), 0, "1 s after the last look");
    let again = r.agent_asked(Operation::PreReboot, t + AGENT_LOOK_AGAIN, true);
    assert_eq!(looks(&again), 1, "5 s after it");
}

/// Whose reboot it is: the agent's while its pre-reboot stands when the reboot starts.
#[test]
fn a_reboot_is_the_agents_while_its_pre_reboot_stands() {
    let t0 = Instant::now();
    let mut r = going(t0);
    r.starts(t0 + SETTLE);
    assert!(!r.by_agent(), "the sentinel file's");
    r.agent_asked(Operation::PreReboot, t0 + MINUTE, true);
    r.starts(t0 + MINUTE);
    assert!(r.by_agent());
    r.starts(t0 + MINUTE + AGENT_ASKS_WITHIN);
    assert!(!r.by_agent(), "its ask ran out");
}

/// The need, the holds and the facts are said once per change; `RebootRequired` once per
/// episode, `RebootWaiting` once per set of known reasons (an unknown one is not posted).
#[test]
fn each_change_is_said_once_and_each_episode_posted_once() {
    let t0 = Instant::now();
    let mut r = Reboots::new(true, false, Duration::from_secs(3600));
    let count =
        |effects: &[Effect], f: fn(&Effect) -> bool| effects.iter().filter(|e| f(e)).count();
    let mut all = r.saw(Seen::Triggers(needed()), t0, true);
    all.extend(r.settle(t0 + SETTLE, true));
    all.extend(r.settle(t0 + SETTLE + MINUTE, true));
    for keys in [
        &[Key::Unknown][..],
        &[Key::Held],
        &[Key::Held],
        &[Key::Held, Key::Unknown],
    ] {
        all.extend(r.saw(Seen::Holds(held(keys)), t0 + MINUTE, true));
    }
    assert_eq!(count(&all, |e| matches!(e, Effect::SayNeed(_))), 1);
    assert_eq!(count(&all, |e| matches!(e, Effect::PostRequired(_))), 1);
    assert_eq!(
        count(&all, |e| matches!(e, Effect::SayHolds { .. })),
        3,
        "{all:?}"
    );
    assert_eq!(
        count(&all, |e| matches!(e, Effect::PostWaiting(_))),
        1,
        "{all:?}"
    );
    // The need goes and comes back: a new episode, posted again.
    let mut more = r.saw(Seen::Triggers(not_needed()), t0 + 2 * MINUTE, true);
    more.extend(r.settle(t0 + 2 * MINUTE + SETTLE, true));
    more.extend(r.saw(Seen::Triggers(needed()), t0 + 3 * MINUTE, true));
    more.extend(r.settle(t0 + 3 * MINUTE + SETTLE, true));
    assert_eq!(count(&more, |e| matches!(e, Effect::NotPlanned(_))), 1);
    assert_eq!(count(&more, |e| matches!(e, Effect::PostRequired(_))), 1);
}

/// The holds are looked at while a need counts and no pause runs: a first look when it starts
/// to count (the verdict waits for it), none during a pause, again after it.
#[test]
fn the_holds_are_looked_at_while_a_need_counts_and_no_pause_runs() {
    let t0 = Instant::now();
    let mut r = Reboots::new(true, false, Duration::from_secs(3600));
    let last_look = |effects: &[Effect]| {
        effects.iter().rev().find_map(|e| match e {
            Effect::LookAtHolds { drain_to_come } => Some(Some(*drain_to_come)),
            Effect::StopLooking => Some(None),
            _ => None,
        })
    };
    r.saw(Seen::Triggers(needed()), t0, true);
    let t = t0 + SETTLE;
    assert_eq!(last_look(&r.settle(t, true)), Some(Some(true)));
    let v = r.verdict(t);
    assert_eq!(
        (v.ask, v.keys.len()),
        (Ask::Waits, 0),
        "until the first look"
    );
    r.saw(Seen::Holds(nothing_holds()), t, true);
    assert_eq!(r.verdict(t).ask, Ask::Go);
    // Drained for the reboot: the drain is no longer to come, a new look weighs it so.
    assert_eq!(last_look(&r.settle(t, false)), Some(Some(false)));
    assert_eq!(r.verdict(t).ask, Ask::Go, "what was seen stands");
    r.later(Setback::Held, t);
    assert_eq!(
        last_look(&r.settle(t, true)),
        Some(None),
        "no looks in the pause"
    );
    let after = t + RETRY_AFTER;
    assert_eq!(last_look(&r.settle(after, true)), Some(Some(true)));
    assert_eq!(
        r.verdict(after).ask,
        Ask::Waits,
        "a fresh look after the pause"
    );
}

/// The announcement of the node's own reboot is due 30 s after logind was asked; the agent's
/// hand-over lasts as long as it keeps asking, up to 2 h after the drain, and half of
/// `hold_max` after the slot's take, never less than 10 minutes.
#[test]
fn the_announcement_is_due_sooner_for_our_reboot_than_for_the_agents() {
    let hour = Duration::from_secs(3600);
    let at = Instant::now();
    let mut r = Reboots::new(true, true, hour);
    assert_eq!(r.announce_due(), None, "nothing asked yet");
    r.asked(at, None);
    assert_eq!(r.announce_due(), Some(at + ANNOUNCE_WINDOW));
    r.agent_asked(Operation::PreReboot, at, true);
    r.starts(at);
    assert!(r.by_agent());
    assert_eq!(r.announce_due(), Some(at + AGENT_HOLD_MAX));
    assert_eq!(AGENT_HOLD_MAX, 2 * hour);
    // A slot taken 5 minutes before the drain's end, hold_max 1 h: 25 minutes more.
    r.asked(at, Some(at - Duration::from_secs(300)));
    assert_eq!(r.announce_due(), Some(at + Duration::from_secs(1500)));
    assert_eq!(r.handover(), Some(Duration::from_secs(1500)));
    // A drain that took most of hold_max still leaves the agent two of its ticks.
    r.asked(at, Some(at - Duration::from_secs(1790)));
    assert_eq!(r.announce_due(), Some(at + AGENT_HOLD_MIN));
    assert!(ANNOUNCE_WINDOW < AGENT_HOLD_MIN);
    r.not_asked();
    assert_eq!(r.announce_due(), None);
}
