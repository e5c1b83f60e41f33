//! Tests of the reboot part of the phase table (`phase_reboot.rs`) and of the state's rules for
//! a standing `Go`.

use super::super::Effect::*;
use super::super::*;

const GO: Event = Event::Reboot(Ask::Go);
const WAITS: Event = Event::Reboot(Ask::Waits);
const NOT_NEEDED: Event = Event::Reboot(Ask::NotNeeded);
const ASKED: Event = Event::RebootEnded(RebootEnd::Asked { slot_since: None });
const GAVE_UP: Event = Event::RebootEnded(RebootEnd::GaveUp(Setback::DrainIncomplete));
/// The own reboot runs; it has asked logind.
const RUNS: Phase = Phase::Rebooting { asked: false };
const ASKED_LOGIND: Phase = Phase::Rebooting { asked: true };

fn planned() -> Planned {
    Planned {
        kind: ShutdownKind::Reboot,
        fired: false,
    }
}

fn shutdown(guarded: bool) -> Shutdown {
    Shutdown {
        kind: ShutdownKind::Reboot,
        guarded,
    }
}

/// Every phase but Stopped, for the sweeps.
fn every_live_phase() -> Vec<Phase> {
    vec![
        Phase::Starting,
        Phase::Waiting,
        Phase::Draining(shutdown(true)),
        Phase::Released(shutdown(true)),
        Phase::Stopping(shutdown(false)),
        Phase::Scheduled(planned()),
        Phase::Early(planned()),
        Phase::Ready(planned()),
        Phase::Rebooting { asked: false },
    ]
}

fn step(from: &Phase, event: Event) -> (Phase, Vec<Effect>) {
    from.on(event).unwrap_or_else(|e| panic!("refused: {e}"))
}

fn state(phase: Phase, reboot: Ask) -> State {
    State {
        reboots: State::starting().reboots,
        phase,
        gate: Gate::default(),
        left_work: true,
        reboot,
    }
}

#[test]
fn a_go_while_waiting_starts_the_reboot_and_only_then() {
    assert_eq!(step(&Phase::Waiting, GO), (RUNS, vec![StartReboot]));
    for from in every_live_phase() {
        for event in [WAITS, NOT_NEEDED] {
            let unchanged = match from {
                // What the reboot waits for goes into the status line.
                Phase::Waiting => vec![ShowWaiting],
                RUNS if event == NOT_NEEDED => continue,
                _ => vec![],
            };
            assert_eq!(
                step(&from, event.clone()),
                (from.clone(), unchanged),
                "{from:?} {event:?}"
            );
        }
        if from != Phase::Waiting {
            let (to, effects) = step(&from, GO);
            assert_eq!((&to, effects.as_slice()), (&from, &[][..]), "{from:?}");
        }
    }
    assert!(Phase::Stopped.on(GO).is_err());
}

#[test]
fn a_need_that_goes_away_calls_the_reboot_off_and_restores_the_node() {
    assert_eq!(
        step(&RUNS, NOT_NEEDED),
        (
            Phase::Waiting,
            vec![
                AbortReboot,
                ForgetShutdown { undo: Undo::Heard },
                ShowWaiting
            ]
        )
    );
    // Nothing else moves it back: a hold is looked at again before the reboot.
    assert_eq!(step(&RUNS, WAITS), (RUNS, vec![]));
}

#[test]
fn the_reboots_end_waits_for_logind_or_restores_the_node() {
    assert_eq!(step(&RUNS, ASKED), (ASKED_LOGIND, vec![]));
    // logind's announcement is due: the phase runs its timer, whose end restores the node.
    assert_eq!(ASKED_LOGIND.timer(), Some(Event::Overdue));
    assert_eq!(RUNS.timer(), None);
    assert_eq!(
        step(&ASKED_LOGIND, Event::Overdue),
        (
            Phase::Waiting,
            vec![ForgetShutdown { undo: Undo::Heard }, ShowWaiting]
        )
    );
    // Asked already, it ends no more.
    assert!(ASKED_LOGIND.on(ASKED).is_err() && ASKED_LOGIND.on(GAVE_UP).is_err());
    // The need gone while the announcement is due: called off as well.
    assert_eq!(
        step(&ASKED_LOGIND, NOT_NEEDED).0,
        Phase::Waiting,
        "the need went after logind was asked"
    );
    assert_eq!(
        step(&RUNS, GAVE_UP),
        (
            Phase::Waiting,
            vec![ForgetShutdown { undo: Undo::Heard }, ShowWaiting]
        )
    );
    // No reboot of ours runs anywhere else (in the stop phase nothing else matters).
    for from in every_live_phase() {
        if !matches!(from, RUNS | Phase::Stopping(_)) {
            assert!(
                from.on(ASKED).is_err() && from.on(GAVE_UP).is_err(),
                "{from:?}"
            );
        }
    }
}

#[test]
fn loginds_announcement_takes_over_from_the_reboot() {
    let drain = |kind, announced_now| StartDrain {
        kind,
        announced_now,
    };
    let announced = Event::Announced {
        kind: ShutdownKind::Reboot,
        locked: true,
    };
    assert_eq!(
        step(&RUNS, announced),
        (
            Phase::Draining(shutdown(true)),
            vec![AbortReboot, Quiet(false), drain(ShutdownKind::Reboot, true)]
        )
    );
    let under_way = Event::Connected {
        under_way: Some(ShutdownKind::PowerOff),
        locked: false,
    };
    assert_eq!(
        step(&RUNS, under_way),
        (
            Phase::Draining(Shutdown {
                kind: ShutdownKind::PowerOff,
                guarded: false
            }),
            vec![
                AbortReboot,
                Quiet(false),
                drain(ShutdownKind::PowerOff, false)
            ]
        )
    );
    for event in [
        Event::Connected {
            under_way: None,
            locked: true,
        },
        Event::Cancelled,
        Event::Scheduled {
            kind: ShutdownKind::Reboot,
            policy: crate::config::ShutdownPolicy::Drain,
        },
        Event::Unscheduled { fired: false },
    ] {
        assert_eq!(step(&RUNS, event.clone()), (RUNS, vec![]), "{event:?}");
    }
    for event in [Event::Ended { left_work: true }, Event::Due, Event::Overdue] {
        assert!(RUNS.on(event.clone()).is_err(), "{event:?}");
    }
}

#[test]
fn a_stop_while_rebooting_stops_the_reboot_first() {
    let stop = Event::Stop {
        signal: StopSignal::Term,
    };
    let said = SayStop {
        signal: StopSignal::Term,
        during: During::Waiting,
    };
    assert_eq!(
        step(&RUNS, stop),
        (
            Phase::Stopped,
            vec![said, AbortReboot, RecordStopped, ReleaseLock]
        )
    );
    let within = std::time::Duration::from_secs(60);
    let (to, effects) = step(&RUNS, Event::StopInShutdown { within });
    assert_eq!(to, Phase::Stopping(shutdown(false)));
    assert_eq!(
        effects,
        vec![
            AbortReboot,
            Quiet(false),
            ReleaseLock,
            StartStopStage {
                kind: ShutdownKind::Reboot,
                within
            }
        ]
    );
    // Something may be left to drain (its own drain ran or not): systemd is asked.
    let asked = Event::StopAsked {
        signal: StopSignal::Term,
    };
    let (next, effects) = state(RUNS, Ask::Go).on(asked).unwrap();
    assert_eq!(next.phase, RUNS);
    assert_eq!(
        effects,
        vec![AskSystemd {
            signal: StopSignal::Term
        }]
    );
}

#[test]
fn a_standing_go_starts_at_the_first_connection_and_waits_a_pause_after_a_failure() {
    let connected = Event::Connected {
        under_way: None,
        locked: true,
    };
    // The follower said go before logind was reached.
    let (next, effects) = state(Phase::Starting, Ask::NotNeeded).on(GO).unwrap();
    assert_eq!((next.phase.clone(), effects), (Phase::Starting, vec![]));
    assert_eq!(next.reboot, Ask::Go);
    let (next, effects) = next.on(connected).unwrap();
    assert_eq!(next.phase, RUNS);
    assert_eq!(effects.last(), Some(&StartReboot), "{effects:?}");
    // A reboot of ours that gave up: back to waiting, and the follower pauses before its go,
    // told what ended it.
    let (next, effects) = next.on(GAVE_UP).unwrap();
    assert_eq!(next.phase, Phase::Waiting);
    let later = |after| RebootLater {
        after,
        pause: crate::daemon::phase::verdict::RETRY_AFTER,
    };
    assert_eq!(
        effects.last(),
        Some(&later(Setback::DrainIncomplete)),
        "{effects:?}"
    );
    for setback in [Setback::Held, Setback::Failed] {
        let (_, effects) = state(RUNS, Ask::Go)
            .on(Event::RebootEnded(RebootEnd::GaveUp(setback)))
            .unwrap();
        assert_eq!(effects.last(), Some(&later(setback)), "{effects:?}");
    }
    // Drained and handed over, the reboot never came in its time.
    let (next, effects) = state(ASKED_LOGIND, Ask::Go).on(Event::Overdue).unwrap();
    assert_eq!(next.phase, Phase::Waiting);
    assert_eq!(
        effects.last(),
        Some(&later(Setback::Overdue)),
        "{effects:?}"
    );
    // logind's reboot cancelled (`shutdown -c`) while still needed: the same pause.
    let cancelled = state(Phase::Released(shutdown(true)), Ask::Go)
        .on(Event::Cancelled)
        .unwrap();
    assert_eq!(cancelled.0.phase, Phase::Waiting);
    assert_eq!(
        cancelled.1.last(),
        Some(&later(Setback::Cancelled)),
        "{:?}",
        cancelled.1
    );
    let is_later = |e: &Effect| matches!(e, RebootLater { .. });
    // Not needed any more: no pause asked for.
    let (next, effects) = state(RUNS, Ask::Go).on(NOT_NEEDED).unwrap();
    assert_eq!(next.reboot, Ask::NotNeeded);
    assert!(!effects.iter().any(is_later), "{effects:?}");
    // Waiting with a standing go on another event: nothing new.
    let (_, effects) = state(Phase::Waiting, Ask::Go).on(Event::Cancelled).unwrap();
    assert!(!effects.iter().any(is_later) && !effects.contains(&StartReboot));
}

#[test]
fn the_gate_opens_while_the_node_reboots_itself() {
    let closed = State {
        reboots: State::starting().reboots,
        phase: Phase::Waiting,
        gate: Gate {
            full: true,
            pass: false,
        },
        left_work: true,
        reboot: Ask::Waits,
    };
    let (next, effects) = closed.on(GO).unwrap();
    assert_eq!(next.phase, RUNS);
    assert_eq!(
        effects,
        vec![
            StartReboot,
            DropGate {
                because: GateOpened::NoLongerWaits
            }
        ]
    );
}

/// The update agent's FleetLock requests: 200 to pre-reboot only once the agent's reboot has
/// drained the node; 200 to steady-state only with nothing running; refusals name their kind.
#[test]
fn the_agent_gets_200_only_drained_or_restored_and_otherwise_the_kind_of_its_wait() {
    use crate::reboot::fleetlock::{Kind, Operation};
    use crate::reboot::holds::Key;
    use crate::reboot::server::Answer;
    let ask = |operation| AgentAsk {
        operation,
        node: "n1",
        ask: Ask::Go,
        why: "the holds' words",
        keys: &[],
        slot_wait: false,
        by_agent: true,
        restoring: false,
        setback: None,
        connected: true,
    };
    let kind = |a: Answer| match a {
        Answer::Refused { kind, .. } => Some(kind),
        _ => None,
    };
    let pre = ask(Operation::PreReboot);
    let steady = ask(Operation::SteadyState);
    assert_eq!(ASKED_LOGIND.answer_agent(&pre), Answer::Granted);
    // Drained for the agent, but a hold came (or a window closed) since: no 200.
    let held_since = AgentAsk {
        ask: Ask::Waits,
        keys: &[Key::Held],
        ..pre
    };
    assert_eq!(
        kind(ASKED_LOGIND.answer_agent(&held_since)),
        Some(Kind::Held)
    );
    // Logind asked by the daemon itself, not the agent's reboot: not the agent's 200.
    let ours = AgentAsk {
        by_agent: false,
        ..pre
    };
    assert_eq!(kind(ASKED_LOGIND.answer_agent(&ours)), Some(Kind::Draining));
    assert_eq!(kind(RUNS.answer_agent(&pre)), Some(Kind::Draining));
    let in_line = AgentAsk {
        slot_wait: true,
        ..pre
    };
    assert_eq!(kind(RUNS.answer_agent(&in_line)), Some(Kind::SemaphoreFull));
    assert_eq!(kind(Phase::Waiting.answer_agent(&pre)), Some(Kind::Pending));
    let held = |keys: &'static [Key]| AgentAsk {
        ask: Ask::Waits,
        keys,
        ..pre
    };
    for (keys, want) in [
        (&[Key::OutsideWindow][..], Kind::OutsideWindow),
        (&[Key::Held][..], Kind::Held),
        (&[Key::BlockingPods][..], Kind::Held),
        (&[Key::Held, Key::OutsideWindow][..], Kind::Held),
        (&[Key::UnreadyNodes][..], Kind::UnreadyNodes),
        (&[Key::AlertsFiring][..], Kind::AlertsFiring),
        (&[Key::UnreadyNodes, Key::AlertsFiring][..], Kind::Held),
        (&[Key::AlertsFiring, Key::Unknown][..], Kind::Held),
    ] {
        assert_eq!(
            kind(Phase::Waiting.answer_agent(&held(keys))),
            Some(want),
            "{keys:?}"
        );
    }
    // The pause after a reboot that ended without one: the kind says what ended it.
    for (setback, want) in [
        (Setback::DrainIncomplete, Kind::DrainIncomplete),
        (Setback::Held, Kind::Held),
        (Setback::Overdue, Kind::Overdue),
        (Setback::Cancelled, Kind::Cancelled),
        (Setback::Failed, Kind::Failed),
    ] {
        let paused = AgentAsk {
            setback: Some(setback),
            ..held(&[])
        };
        assert_eq!(
            kind(Phase::Waiting.answer_agent(&paused)),
            Some(want),
            "{setback:?}"
        );
    }
    // Without logind, nothing the agent asks can be acted on: 503, whatever the phase.
    let away = |a: &AgentAsk<'static>| AgentAsk {
        connected: false,
        ..*a
    };
    for phase in [Phase::Waiting, ASKED_LOGIND, RUNS] {
        for a in [&pre, &steady] {
            assert!(
                matches!(phase.answer_agent(&away(a)), Answer::Unavailable(_)),
                "{phase:?}"
            );
        }
    }
    for phase in [
        Phase::Scheduled(planned()),
        Phase::Early(planned()),
        Phase::Ready(planned()),
        Phase::Draining(shutdown(true)),
        Phase::Released(shutdown(true)),
    ] {
        assert_eq!(
            kind(phase.answer_agent(&pre)),
            Some(Kind::Draining),
            "{phase:?}"
        );
    }
    assert_eq!(Phase::Waiting.answer_agent(&steady), Answer::Released);
    for phase in [
        Phase::Scheduled(planned()),
        Phase::Early(planned()),
        Phase::Ready(planned()),
        Phase::Released(shutdown(true)),
    ] {
        assert_eq!(
            kind(phase.answer_agent(&steady)),
            Some(Kind::Draining),
            "{phase:?}"
        );
    }
    let own = AgentAsk {
        by_agent: false,
        ..steady
    };
    assert_eq!(kind(RUNS.answer_agent(&own)), Some(Kind::Draining));
    let restoring = AgentAsk {
        restoring: true,
        ..steady
    };
    assert_eq!(
        kind(Phase::Waiting.answer_agent(&restoring)),
        Some(Kind::Restoring)
    );
    assert_eq!(
        kind(ASKED_LOGIND.answer_agent(&steady)),
        Some(Kind::Restoring)
    );
    assert_eq!(
        kind(Phase::Draining(shutdown(true)).answer_agent(&steady)),
        Some(Kind::Draining)
    );
    for phase in [Phase::Starting, Phase::Stopped] {
        for a in [&pre, &steady] {
            assert!(matches!(phase.answer_agent(a), Answer::Unavailable(_)));
        }
    }
}
