//! Tests of the daemon's state machine: every phase against every event, and the effects
//! each step asks for.

use super::Effect::*;
use super::*;

const REBOOT: ShutdownKind = ShutdownKind::Reboot;
/// A work's end that left pods (the rows that do not care).
const ENDED: Event = Event::Ended { left_work: true };
const STOP: Event = Event::Stop {
    signal: StopSignal::Term,
};

/// What a stop on SIGTERM says first, `during` what.
fn say_stop(during: During) -> Effect {
    SayStop {
        signal: StopSignal::Term,
        during,
    }
}

/// What a heard cancel of the reboot says first, `during` what.
fn say_cancelled(during: During) -> Effect {
    SayCancelled {
        kind: REBOOT,
        during,
    }
}

fn connected(under_way: Option<ShutdownKind>, locked: bool) -> Event {
    Event::Connected { under_way, locked }
}

fn draining(guarded: bool) -> Phase {
    Phase::Draining(Shutdown {
        kind: REBOOT,
        guarded,
    })
}

fn released(guarded: bool) -> Phase {
    Phase::Released(Shutdown {
        kind: REBOOT,
        guarded,
    })
}

fn step(from: Phase, event: Event) -> (Phase, Vec<Effect>) {
    from.on(event).unwrap_or_else(|e| panic!("refused: {e}"))
}

/// Each row: `from` on `event` leads `to`, with `effects`.
fn assert_steps(cases: Vec<(Phase, Event, Phase, Vec<Effect>)>) {
    for (from, event, to, effects) in cases {
        let (next, did) = step(from.clone(), event.clone());
        assert_eq!((&next, &did), (&to, &effects), "{from:?} on {event:?}");
    }
}

/// Each row, with the whole state (phase and gate).
fn assert_state_steps(cases: Vec<(State, Event, State, Vec<Effect>)>) {
    for (from, event, to, effects) in cases {
        let (next, did) = state_step(&from, event.clone());
        assert_eq!((&next, &did), (&to, &effects), "{from:?} on {event:?}");
    }
}

const ANNOUNCED: Event = Event::Announced {
    kind: REBOOT,
    locked: true,
};
const START_NOW: Effect = StartDrain {
    kind: REBOOT,
    announced_now: true,
};
const START_UNDER_WAY: Effect = StartDrain {
    kind: REBOOT,
    announced_now: false,
};

#[test]
fn a_connection_or_an_announcement_starts_a_drain_or_finds_none() {
    let cases: Vec<(Phase, Event, Phase, Vec<Effect>)> = vec![
        (
            Phase::Starting,
            connected(None, true),
            Phase::Waiting,
            vec![
                Quiet(true),
                ForgetShutdown {
                    undo: Undo::IfRecorded,
                },
                ShowWaiting,
            ],
        ),
        (
            Phase::Waiting,
            connected(None, true),
            Phase::Waiting,
            vec![
                Quiet(true),
                ForgetShutdown {
                    undo: Undo::IfRecorded,
                },
                ShowWaiting,
            ],
        ),
        (
            Phase::Starting,
            connected(Some(REBOOT), false),
            draining(false),
            vec![Quiet(false), START_UNDER_WAY],
        ),
        (
            released(true),
            connected(Some(REBOOT), false),
            draining(false),
            vec![Quiet(false), START_UNDER_WAY],
        ),
        (
            Phase::Waiting,
            ANNOUNCED,
            draining(true),
            vec![Quiet(false), START_NOW],
        ),
        (
            draining(true),
            connected(Some(REBOOT), false),
            draining(true),
            vec![],
        ),
        (draining(true), ANNOUNCED, draining(true), vec![]),
        (released(true), ANNOUNCED, released(true), vec![]),
    ];
    assert_steps(cases);
}

#[test]
fn a_drain_ends_or_is_cancelled_and_the_daemon_waits_again() {
    let cases: Vec<(Phase, Event, Phase, Vec<Effect>)> = vec![
        (
            draining(true),
            ENDED,
            released(true),
            vec![RecordEnd, ReleaseLock, SayOutcome],
        ),
        (
            draining(true),
            Event::Cancelled,
            Phase::Waiting,
            vec![
                say_cancelled(During::Drain),
                AbortDrain,
                Quiet(true),
                ForgetShutdown { undo: Undo::Heard },
                ShowWaiting,
            ],
        ),
        // A lockless drain cancelled: the lock is asked for again.
        (
            draining(false),
            Event::Cancelled,
            Phase::Waiting,
            vec![
                say_cancelled(During::Drain),
                AbortDrain,
                Quiet(true),
                ForgetShutdown { undo: Undo::Heard },
                TakeLock,
                ShowWaiting,
            ],
        ),
        // The cancel was missed while the bus was away.
        (
            draining(true),
            connected(None, true),
            Phase::Waiting,
            vec![
                AbortDrain,
                Quiet(true),
                ForgetShutdown { undo: Undo::Missed },
                ShowWaiting,
            ],
        ),
        (
            released(true),
            Event::Cancelled,
            Phase::Waiting,
            vec![
                say_cancelled(During::AfterDrain),
                Quiet(true),
                ForgetShutdown { undo: Undo::Heard },
                TakeLock,
                ShowWaiting,
            ],
        ),
        (
            Phase::Waiting,
            Event::Cancelled,
            Phase::Waiting,
            vec![ForgetShutdown {
                undo: Undo::Nothing,
            }],
        ),
        (
            released(true),
            connected(None, true),
            Phase::Waiting,
            vec![
                Quiet(true),
                ForgetShutdown { undo: Undo::Missed },
                TakeLock,
                ShowWaiting,
            ],
        ),
    ];
    assert_steps(cases);
}

#[test]
fn a_plain_stop_releases_the_lock_unless_it_is_gone() {
    let cases: Vec<(Phase, Event, Phase, Vec<Effect>)> = vec![
        (
            Phase::Waiting,
            STOP,
            Phase::Stopped,
            vec![say_stop(During::Waiting), RecordStopped, ReleaseLock],
        ),
        (
            Phase::Starting,
            STOP,
            Phase::Stopped,
            vec![say_stop(During::Waiting), RecordStopped, ReleaseLock],
        ),
        (
            draining(true),
            STOP,
            Phase::Stopped,
            vec![say_stop(During::Drain), AbortDrain, ReleaseLock],
        ),
        (
            released(true),
            STOP,
            Phase::Stopped,
            vec![say_stop(During::AfterDrain)],
        ),
    ];
    assert_steps(cases);
}

#[test]
fn events_a_phase_does_not_expect_are_refused_and_change_nothing() {
    let refused = [
        (Phase::Starting, ENDED),
        (Phase::Waiting, ENDED),
        (released(true), ENDED),
        (Phase::Starting, Event::Cancelled),
        (
            Phase::Starting,
            Event::Announced {
                kind: REBOOT,
                locked: true,
            },
        ),
        (Phase::Stopped, STOP),
        (Phase::Stopped, connected(None, true)),
    ];
    for (from, event) in refused {
        let err = from.on(event.clone()).expect_err("refused");
        assert_eq!((err.phase, err.event), (from, event));
    }
}

#[test]
fn the_lock_goes_exactly_once_per_shutdown_and_after_its_end_is_recorded() {
    // A whole life: start, a reboot drained, cancelled, a second reboot, stopped.
    let script = [
        connected(None, true),
        Event::Announced {
            kind: REBOOT,
            locked: true,
        },
        ENDED,
        Event::Cancelled,
        Event::Announced {
            kind: ShutdownKind::PowerOff,
            locked: true,
        },
        ENDED,
        STOP,
    ];
    let mut phase = Phase::Starting;
    let mut all = Vec::new();
    for event in script {
        let (next, effects) = step(phase, event);
        all.extend(effects);
        phase = next;
    }
    assert_eq!(phase, Phase::Stopped);
    let releases: Vec<usize> = all
        .iter()
        .enumerate()
        .filter(|(_, e)| **e == ReleaseLock)
        .map(|(i, _)| i)
        .collect();
    assert_eq!(releases.len(), 2, "{all:?}");
    for i in releases {
        assert_eq!(all[i - 1], RecordEnd, "the end is recorded first: {all:?}");
        assert_eq!(all[i + 1], SayOutcome, "and said after: {all:?}");
    }
    assert_eq!(
        all.iter().filter(|e| **e == TakeLock).count(),
        1,
        "the lock is taken again after the cancel only: {all:?}"
    );
}

#[test]
fn a_stop_in_a_shutdown_drains_in_the_stop_phase_without_the_lock() {
    let within = std::time::Duration::from_secs(30);
    let stage = |kind| StartStopStage { kind, within };
    let unknown = ShutdownKind::Unknown;
    let stopping = |kind| {
        Phase::Stopping(Shutdown {
            kind,
            guarded: false,
        })
    };
    let cases = [
        (
            Phase::Waiting,
            stopping(unknown),
            vec![Quiet(false), ReleaseLock, stage(unknown)],
        ),
        (
            Phase::Starting,
            stopping(unknown),
            vec![Quiet(false), ReleaseLock, stage(unknown)],
        ),
        (
            draining(true),
            stopping(REBOOT),
            vec![AbortDrain, ReleaseLock, stage(REBOOT)],
        ),
        (released(true), stopping(REBOOT), vec![stage(REBOOT)]),
        (
            Phase::Scheduled(planned(false)),
            stopping(REBOOT),
            vec![Quiet(false), ReleaseLock, stage(REBOOT)],
        ),
        (
            Phase::Early(planned(false)),
            stopping(REBOOT),
            vec![AbortDrain, Quiet(false), ReleaseLock, stage(REBOOT)],
        ),
        (stopping(REBOOT), stopping(REBOOT), vec![]),
    ];
    for (from, to, effects) in cases {
        let (next, did) = step(from.clone(), Event::StopInShutdown { within });
        assert_eq!((&next, &did), (&to, &effects), "{from:?}");
    }
    // The stage's end is recorded and said; a second stop aborts it; logind is not heard.
    assert_eq!(
        step(stopping(REBOOT), ENDED),
        (Phase::Stopped, vec![RecordEnd, SayOutcome])
    );
    assert_eq!(
        step(stopping(REBOOT), STOP),
        (Phase::Stopped, vec![say_stop(During::Waiting), AbortDrain])
    );
    assert_eq!(
        step(stopping(REBOOT), Event::Cancelled),
        (stopping(REBOOT), vec![])
    );
    assert!(Phase::Stopped.on(Event::StopInShutdown { within }).is_err());
}

#[test]
fn the_reboot_gate_may_be_held_only_while_the_daemon_waits() {
    let shutdown = Shutdown {
        kind: REBOOT,
        guarded: true,
    };
    let may: Vec<bool> = [
        Phase::Starting,
        Phase::Waiting,
        Phase::Scheduled(planned(false)),
        Phase::Draining(shutdown),
        Phase::Released(shutdown),
        Phase::Stopping(shutdown),
        Phase::Early(planned(false)),
        Phase::Ready(planned(true)),
        Phase::Stopped,
    ]
    .iter()
    .map(Phase::may_gate)
    .collect();
    assert_eq!(
        may,
        [false, true, true, false, false, false, false, false, false]
    );
}

fn planned(fired: bool) -> Planned {
    Planned {
        kind: REBOOT,
        fired,
    }
}

fn scheduled(policy: ShutdownPolicy) -> Event {
    Event::Scheduled {
        kind: REBOOT,
        policy,
    }
}

const DRAIN: Event = Event::Scheduled {
    kind: REBOOT,
    policy: ShutdownPolicy::Drain,
};
const NONE: Event = Event::Scheduled {
    kind: REBOOT,
    policy: ShutdownPolicy::None,
};

/// The phase `p` of the planned reboot.
fn on(p: fn(Planned) -> Phase, fired: bool) -> Phase {
    p(planned(fired))
}

/// A schedule gone before its time (or overdue): the node is restored.
fn restore() -> Vec<Effect> {
    vec![ForgetShutdown { undo: Undo::Heard }, ShowWaiting]
}

/// The same while the early drain runs: it stops first.
fn abort_restore() -> Vec<Effect> {
    let mut effects = vec![AbortDrain];
    effects.extend(restore());
    effects
}

#[test]
fn a_schedule_is_followed_until_its_lead() {
    let cases: Vec<(Phase, Event, Phase, Vec<Effect>)> = vec![
        (Phase::Waiting, NONE, Phase::Waiting, vec![ShowScheduled]),
        (
            Phase::Waiting,
            scheduled(ShutdownPolicy::Cordon),
            on(Phase::Scheduled, false),
            vec![ShowScheduled],
        ),
        (
            Phase::Waiting,
            DRAIN,
            on(Phase::Scheduled, false),
            vec![ShowScheduled],
        ),
        (
            on(Phase::Scheduled, false),
            DRAIN,
            on(Phase::Scheduled, false),
            vec![ShowScheduled],
        ),
        (
            on(Phase::Scheduled, false),
            NONE,
            Phase::Waiting,
            vec![ShowScheduled],
        ),
        (
            on(Phase::Scheduled, false),
            Event::Due,
            on(Phase::Early, false),
            vec![StartEarly { kind: REBOOT }],
        ),
        (
            on(Phase::Scheduled, false),
            Event::Unscheduled { fired: false },
            Phase::Waiting,
            vec![ShowWaiting],
        ),
        (
            Phase::Waiting,
            Event::Unscheduled { fired: false },
            Phase::Waiting,
            vec![],
        ),
    ];
    assert_steps(cases);
}

#[test]
fn an_early_drain_waits_ready_or_is_undone_when_the_schedule_goes() {
    let cases: Vec<(Phase, Event, Phase, Vec<Effect>)> = vec![
        (
            on(Phase::Early, false),
            ENDED,
            on(Phase::Ready, false),
            vec![SayEarly],
        ),
        (
            on(Phase::Early, false),
            Event::Unscheduled { fired: false },
            Phase::Waiting,
            abort_restore(),
        ),
        (
            on(Phase::Ready, false),
            Event::Unscheduled { fired: false },
            Phase::Waiting,
            restore(),
        ),
        (
            on(Phase::Ready, false),
            Event::Unscheduled { fired: true },
            on(Phase::Ready, true),
            vec![],
        ),
        (
            on(Phase::Early, false),
            Event::Unscheduled { fired: true },
            on(Phase::Early, true),
            vec![],
        ),
        (
            on(Phase::Ready, true),
            Event::Overdue,
            Phase::Waiting,
            restore(),
        ),
        (
            on(Phase::Ready, false),
            DRAIN,
            on(Phase::Ready, false),
            vec![],
        ),
    ];
    assert_steps(cases);
}

#[test]
fn logind_s_announcement_or_a_stop_ends_a_schedule_s_phases() {
    let cases: Vec<(Phase, Event, Phase, Vec<Effect>)> = vec![
        (
            on(Phase::Ready, true),
            ANNOUNCED,
            draining(true),
            vec![Quiet(false), START_NOW],
        ),
        (
            on(Phase::Scheduled, false),
            ANNOUNCED,
            draining(true),
            vec![Quiet(false), START_NOW],
        ),
        (
            on(Phase::Early, false),
            ANNOUNCED,
            draining(true),
            vec![AbortDrain, Quiet(false), START_NOW],
        ),
        (
            on(Phase::Ready, false),
            connected(Some(REBOOT), false),
            draining(false),
            vec![
                Quiet(false),
                StartDrain {
                    kind: REBOOT,
                    announced_now: false,
                },
            ],
        ),
        (
            on(Phase::Early, false),
            connected(None, true),
            on(Phase::Early, false),
            vec![],
        ),
        (
            on(Phase::Ready, false),
            Event::Cancelled,
            on(Phase::Ready, false),
            vec![],
        ),
        (
            on(Phase::Early, false),
            STOP,
            Phase::Stopped,
            vec![
                say_stop(During::Waiting),
                AbortDrain,
                RecordStopped,
                ReleaseLock,
            ],
        ),
        (
            on(Phase::Scheduled, false),
            STOP,
            Phase::Stopped,
            vec![say_stop(During::Waiting), RecordStopped, ReleaseLock],
        ),
    ];
    assert_steps(cases);
}

#[test]
fn logind_s_window_owns_the_node_whatever_the_schedule_does() {
    let cases: Vec<(Phase, Event, Phase, Vec<Effect>)> = vec![
        // logind's window owns the node: the schedule's file going as it fires changes nothing.
        (
            draining(true),
            Event::Unscheduled { fired: true },
            draining(true),
            vec![],
        ),
        (draining(true), DRAIN, draining(true), vec![]),
        (
            released(true),
            Event::Unscheduled { fired: false },
            released(true),
            vec![],
        ),
    ];
    assert_steps(cases);
}

#[test]
fn a_schedule_s_timers_out_of_their_phase_are_refused() {
    let refused = [
        (Phase::Waiting, Event::Due),
        (Phase::Waiting, Event::Overdue),
        (Phase::Starting, scheduled(ShutdownPolicy::Drain)),
        (Phase::Stopped, Event::Unscheduled { fired: false }),
        (Phase::Early(planned(false)), Event::Due),
        (Phase::Ready(planned(false)), Event::Overdue),
        (Phase::Ready(planned(false)), ENDED),
        (Phase::Scheduled(planned(false)), ENDED),
    ];
    for (from, event) in refused {
        let err = from.on(event.clone()).expect_err("refused");
        assert_eq!((err.phase, err.event), (from, event));
    }
}

#[test]
fn a_scheduled_drain_never_touches_the_lock_until_logind_announces_the_shutdown() {
    let script = [
        connected(None, true),
        scheduled(ShutdownPolicy::Drain),
        Event::Due,
        ENDED,
        Event::Unscheduled { fired: true },
        Event::Announced {
            kind: REBOOT,
            locked: true,
        },
        ENDED,
    ];
    let mut phase = Phase::Starting;
    let mut all = Vec::new();
    for event in script {
        let (next, effects) = step(phase, event.clone());
        if matches!(event, Event::Announced { .. }) {
            assert!(
                !all.contains(&ReleaseLock) && !all.contains(&TakeLock),
                "{all:?}"
            );
        }
        all.extend(effects);
        phase = next;
    }
    assert_eq!(phase, released(true));
    assert_eq!(
        all.iter().filter(|e| **e == ReleaseLock).count(),
        1,
        "{all:?}"
    );
}

fn state(phase: Phase, full: bool, pass: bool) -> State {
    State {
        reboots: State::starting().reboots,
        phase,
        gate: Gate { full, pass },
        left_work: true,
        reboot: Ask::NotNeeded,
    }
}

fn state_step(from: &State, event: Event) -> (State, Vec<Effect>) {
    from.on(event).unwrap_or_else(|e| panic!("refused: {e}"))
}

fn waiting(full: bool, pass: bool) -> State {
    state(Phase::Waiting, full, pass)
}

fn scheduled_at(full: bool, pass: bool) -> State {
    state(Phase::Scheduled(planned(false)), full, pass)
}

fn opened(because: GateOpened) -> Effect {
    DropGate { because }
}

/// A connection with no shutdown under way, the gate closed: held again.
fn connected_closed() -> Vec<Effect> {
    vec![
        Quiet(true),
        ForgetShutdown {
            undo: Undo::IfRecorded,
        },
        ShowWaiting,
        HoldGate,
    ]
}

#[test]
fn the_slots_close_and_open_the_gate_while_the_daemon_waits() {
    let cases: Vec<(State, Event, State, Vec<Effect>)> = vec![
        // The slots fill while the daemon waits: closed; a new reason is held again.
        (
            waiting(false, false),
            Event::SlotsFull,
            waiting(true, false),
            vec![HoldGate],
        ),
        (
            waiting(true, false),
            Event::SlotsFull,
            waiting(true, false),
            vec![HoldGate],
        ),
        (
            scheduled_at(false, false),
            Event::SlotsFull,
            scheduled_at(true, false),
            vec![HoldGate],
        ),
        // A slot opens: open.
        (
            waiting(true, false),
            Event::SlotsOpen,
            waiting(false, false),
            vec![opened(GateOpened::SlotOpen)],
        ),
        (
            waiting(false, false),
            Event::SlotsOpen,
            waiting(false, false),
            vec![],
        ),
        // The slots fill before the first connection: closed once the daemon waits.
        (
            state(Phase::Starting, false, false),
            Event::SlotsFull,
            state(Phase::Starting, true, false),
            vec![],
        ),
        (
            state(Phase::Starting, true, false),
            connected(None, true),
            waiting(true, false),
            connected_closed(),
        ),
        // A reconnect while closed asks again (the ask may have had no bus).
        (
            waiting(true, false),
            connected(None, true),
            waiting(true, false),
            connected_closed(),
        ),
        // The slots change during a drain: nothing.
        (
            state(draining(true), false, false),
            Event::SlotsFull,
            state(draining(true), true, false),
            vec![],
        ),
        // A schedule leaves the gate as it is.
        (
            waiting(true, false),
            scheduled(ShutdownPolicy::Drain),
            scheduled_at(true, false),
            vec![ShowScheduled],
        ),
    ];
    assert_state_steps(cases);
}

#[test]
fn a_pass_opens_the_gate_until_it_expires() {
    let cases: Vec<(State, Event, State, Vec<Effect>)> = vec![
        // A pass opens a closed gate; a second pass changes nothing.
        (
            waiting(true, false),
            Event::PassGiven,
            waiting(true, true),
            vec![opened(GateOpened::Pass)],
        ),
        (
            waiting(true, true),
            Event::PassGiven,
            waiting(true, true),
            vec![],
        ),
        (
            waiting(false, false),
            Event::PassGiven,
            waiting(false, true),
            vec![],
        ),
        // The slots fill during a pass: it stays open.
        (
            waiting(false, true),
            Event::SlotsFull,
            waiting(true, true),
            vec![],
        ),
        // The pass ends with no shutdown: said, and the gate closes again if the slots are full.
        (
            waiting(true, true),
            Event::PassExpired,
            waiting(true, false),
            vec![SayPassEnded, HoldGate],
        ),
        (
            waiting(false, true),
            Event::PassExpired,
            waiting(false, false),
            vec![SayPassEnded],
        ),
        // ... said only while the daemon waits.
        (
            state(draining(true), true, true),
            Event::PassExpired,
            state(draining(true), true, false),
            vec![],
        ),
    ];
    assert_state_steps(cases);
}

#[test]
fn the_gate_opens_when_the_daemon_no_longer_waits() {
    let cases: Vec<(State, Event, State, Vec<Effect>)> = vec![
        // An announcement opens it, after the drain's start.
        (
            waiting(true, false),
            ANNOUNCED,
            state(draining(true), true, false),
            vec![Quiet(false), START_NOW, opened(GateOpened::NoLongerWaits)],
        ),
        // So does the early drain of a scheduled shutdown, and the stop.
        (
            scheduled_at(true, false),
            Event::Due,
            state(Phase::Early(planned(false)), true, false),
            vec![
                StartEarly { kind: REBOOT },
                opened(GateOpened::NoLongerWaits),
            ],
        ),
        (
            waiting(true, false),
            STOP,
            state(Phase::Stopped, true, false),
            vec![
                say_stop(During::Waiting),
                RecordStopped,
                ReleaseLock,
                opened(GateOpened::NoLongerWaits),
            ],
        ),
        // The shutdown is cancelled with the slots full: closed again.
        (
            state(released(true), true, false),
            Event::Cancelled,
            waiting(true, false),
            vec![
                say_cancelled(During::AfterDrain),
                Quiet(true),
                ForgetShutdown { undo: Undo::Heard },
                TakeLock,
                ShowWaiting,
                HoldGate,
            ],
        ),
    ];
    assert_state_steps(cases);
}

#[test]
fn the_gate_s_events_move_no_phase_and_are_refused_after_the_stop() {
    let gate_events = [
        Event::SlotsFull,
        Event::SlotsOpen,
        Event::PassGiven,
        Event::PassExpired,
    ];
    let shutdown = Shutdown {
        kind: REBOOT,
        guarded: true,
    };
    for phase in [
        Phase::Starting,
        Phase::Waiting,
        Phase::Draining(shutdown),
        Phase::Released(shutdown),
        Phase::Stopping(shutdown),
        Phase::Scheduled(planned(false)),
        Phase::Early(planned(false)),
        Phase::Ready(planned(true)),
    ] {
        for event in gate_events.clone() {
            assert_eq!(step(phase.clone(), event), (phase.clone(), vec![]));
        }
    }
    for event in gate_events {
        let err = Phase::Stopped.on(event.clone()).expect_err("refused");
        assert_eq!((err.phase, err.event), (Phase::Stopped, event));
    }
}

#[test]
fn a_stop_signal_is_a_plain_stop_when_nothing_is_left_to_drain_else_systemd_is_asked() {
    let asked = Event::StopAsked {
        signal: StopSignal::Int,
    };
    let ask = vec![AskSystemd {
        signal: StopSignal::Int,
    }];
    let stopping = Phase::Stopping(Shutdown {
        kind: REBOOT,
        guarded: false,
    });
    let said = |during| SayStop {
        signal: StopSignal::Int,
        during,
    };
    let with_work = |phase, left_work| State {
        reboots: State::starting().reboots,
        phase,
        gate: Gate::default(),
        left_work,
        reboot: Ask::NotNeeded,
    };
    let stopped = |left_work| with_work(Phase::Stopped, left_work);
    // The state stays as it is; systemd is asked.
    let asks = |phase: Phase, left_work| {
        let state = with_work(phase, left_work);
        (state.clone(), state, ask.clone())
    };
    let cases: Vec<(State, State, Vec<Effect>)> = vec![
        // Something may be left to drain: systemd says whether the system shuts down.
        asks(Phase::Waiting, false),
        asks(Phase::Starting, true),
        asks(draining(true), false),
        asks(Phase::Early(planned(false)), false),
        asks(released(true), true),
        asks(Phase::Ready(planned(true)), true),
        // Drained, or in the stop phase already: a plain stop.
        (
            with_work(released(true), false),
            stopped(false),
            vec![said(During::AfterDrain)],
        ),
        (
            with_work(Phase::Ready(planned(false)), false),
            stopped(false),
            vec![said(During::Waiting), RecordStopped, ReleaseLock],
        ),
        (
            with_work(stopping, true),
            stopped(true),
            vec![said(During::Waiting), AbortDrain],
        ),
    ];
    for (from, to, effects) in cases {
        let (next, did) = state_step(&from, asked.clone());
        assert_eq!((&next, &did), (&to, &effects), "{from:?}");
    }
    // After the stop: refused, by the state and by the phase alone.
    let err = stopped(true).on(asked.clone()).expect_err("refused");
    assert_eq!((err.phase, err.event), (Phase::Stopped, asked.clone()));
    assert!(Phase::Waiting.on(asked).is_err());
}

#[test]
fn a_work_s_end_says_whether_it_left_pods_for_the_stop_phase() {
    let from = state(draining(true), false, false);
    for left_work in [false, true] {
        let (next, did) = state_step(&from, Event::Ended { left_work });
        assert_eq!(next.left_work, left_work);
        assert_eq!(next.phase, released(true));
        assert_eq!(did, vec![RecordEnd, ReleaseLock, SayOutcome]);
    }
    let early = state(Phase::Early(planned(false)), false, false);
    let (next, _) = state_step(&early, Event::Ended { left_work: false });
    assert_eq!(
        (next.phase, next.left_work),
        (Phase::Ready(planned(false)), false)
    );
    assert!(State::starting().left_work, "none ran yet: work is left");
}

#[test]
fn only_a_scheduled_shutdown_s_phases_run_a_timer() {
    let shutdown = Shutdown {
        kind: REBOOT,
        guarded: true,
    };
    let timers: Vec<Option<Event>> = [
        Phase::Starting,
        Phase::Waiting,
        Phase::Scheduled(planned(false)),
        Phase::Early(planned(false)),
        Phase::Early(planned(true)),
        Phase::Ready(planned(false)),
        Phase::Ready(planned(true)),
        Phase::Draining(shutdown),
        Phase::Released(shutdown),
        Phase::Stopping(shutdown),
        Phase::Stopped,
    ]
    .iter()
    .map(Phase::timer)
    .collect();
    let (due, overdue) = (Some(Event::Due), Some(Event::Overdue));
    assert_eq!(
        timers,
        [
            None,
            None,
            due,
            None,
            overdue.clone(),
            None,
            overdue,
            None,
            None,
            None,
            None
        ]
    );
}

/// systemd's answer decides the stop phase in the table: a plain stop while the system runs
/// on; while it shuts down, a second stage of what is left of the drain's time (at most the
/// unit's stop timeout less the margin), unless less than `STAGE_MIN` is left or the timeout
/// leaves nothing.
#[test]
fn systemd_s_answer_starts_a_second_stage_only_when_it_is_worth_starting() {
    let secs = std::time::Duration::from_secs;
    let from = State {
        reboots: State::starting().reboots,
        phase: draining(true),
        gate: Gate::default(),
        left_work: true,
        reboot: Ask::NotNeeded,
    };
    let signal = StopSignal::Term;
    let said = |stop_timeout, drain_left| Event::SystemSaid {
        signal,
        said: SystemSaid::ShutsDown {
            stop_timeout,
            drain_left,
            margin: secs(5),
        },
    };
    let runs = Event::SystemSaid {
        signal,
        said: SystemSaid::Runs,
    };
    assert_eq!(
        from.on(runs).unwrap(),
        from.on(Event::Stop { signal }).unwrap()
    );
    let stage = |event: Event| {
        let (next, effects) = from.on(event).unwrap();
        (next.phase, effects[0].clone())
    };
    let (phase, said_first) = stage(said(Some(secs(125)), secs(100)));
    assert!(matches!(phase, Phase::Stopping(_)), "{phase:?}");
    assert_eq!(
        said_first,
        SayStopStage(StageSaid::Draining { within: secs(100) })
    );
    let (phase, _) = stage(said(None, secs(100)));
    assert!(
        matches!(phase, Phase::Stopping(_)),
        "no stop timeout: the drain's time"
    );
    let (phase, said_first) = stage(said(Some(secs(125)), secs(4)));
    assert_eq!(phase, Phase::Stopped, "4 s left: not worth a stage");
    assert_eq!(
        said_first,
        SayStopStage(StageSaid::NoTimeLeft { left: secs(4) })
    );
    let (phase, said_first) = stage(said(Some(secs(5)), secs(100)));
    assert_eq!(
        phase,
        Phase::Stopped,
        "the margin takes the whole stop timeout"
    );
    assert!(matches!(said_first, SayStopStage(StageSaid::NoRoom { .. })));
    assert_eq!(STAGE_MIN, secs(5));
}

/// logind removes its schedule file both when the schedule fires and at `shutdown -c`: a file
/// gone within `FIRE_SLACK` of its time fired; earlier, it was cancelled.
#[test]
fn a_schedule_file_gone_at_its_time_fired_and_earlier_was_cancelled() {
    let secs = std::time::Duration::from_secs;
    assert!(fired(secs(0)));
    assert!(fired(FIRE_SLACK));
    assert!(!fired(secs(3)));
    assert!(!fired(secs(3600)));
}
