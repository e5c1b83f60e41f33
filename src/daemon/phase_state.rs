//! The daemon's whole state around its phase (`State`): the reboot gate, what the last work
//! left, and the reboot follower's last verdict; `State::on` is the phase table's step plus the
//! gate's (the second table of `phase.rs`'s module doc) and the rules for a standing `Go`.

use tokio::time::Instant;

use super::{
    AgentAsk, AgentFacts, Ask, Effect, Event, Overdue, Phase, RebootEnd, Reboots, Refused, Setback,
    StageSaid, StopSignal, SystemSaid, stop_stage,
};
use crate::reboot::server::Answer;

/// What ended a reboot when `event` brings `phase` back to waiting with the reboot still
/// wanted: the reboot's own setback, its time run out, else a shutdown cancelled (logind's
/// window, a schedule's). Pure.
fn setback_of(phase: &Phase, event: &Event) -> Setback {
    match (phase, event) {
        (_, Event::RebootEnded(RebootEnd::GaveUp(setback))) => *setback,
        (Phase::Rebooting { asked: true }, Event::Overdue) => Setback::Overdue,
        _ => Setback::Cancelled,
    }
}

/// Why the reboot gate opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateOpened {
    /// A shutdown was announced, a drain started, or the daemon stops.
    NoLongerWaits,
    /// `kube-shutdown-drain reboot` asked (SIGUSR1).
    Pass,
    /// A drain slot is open to the node, or its slots cannot be read.
    SlotOpen,
}

/// The reboot gate as the table sees it: the gate's follower's verdict and the pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Gate {
    /// The follower says the slots are full.
    pub full: bool,
    /// A pass (SIGUSR1) runs.
    pub pass: bool,
}

impl Gate {
    /// Whether the gate is closed in `phase`.
    pub fn closed_in(&self, phase: &Phase) -> bool {
        phase.may_gate() && self.full && !self.pass
    }
}

/// The daemon's whole state: its phase, the reboot gate, what the last work left, and the
/// verdict on the reboots the node asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State {
    pub phase: Phase,
    pub gate: Gate,
    /// The last shutdown work left pods to drain (incomplete, or none ran yet): a stop in a
    /// shutdown drains them in the stop phase.
    pub left_work: bool,
    /// The verdict on the node's reboot as the phases last took it.
    pub reboot: Ask,
    /// What the verdict is made of (`phase_verdict.rs`).
    pub reboots: Reboots,
}

impl State {
    /// A state at start: no phase yet, the gate open, work left (none ran), no reboot asked for
    /// (with no trigger and no update agent: the tests give the verdict as `Reboot` events).
    pub fn starting() -> State {
        State::starting_with(Reboots::new(false, false, crate::config::DEFAULT_HOLD_MAX))
    }

    /// A state at start whose reboots are `reboots`'s.
    pub fn starting_with(reboots: Reboots) -> State {
        State {
            phase: Phase::Starting,
            gate: Gate::default(),
            left_work: true,
            reboot: Ask::NotNeeded,
            reboots,
        }
    }

    /// [`State::step`] now.
    pub fn on(&self, event: Event) -> Result<(State, Vec<Effect>), Refused> {
        self.step(event, Instant::now())
    }

    /// The state after `event` at `now`, and what to do on the way there: the phase's step and
    /// the gate's (the module doc's second table); the facts of the reboots taken into the
    /// verdict (`phase_verdict.rs`), and a verdict that changed applied as the table's own
    /// `Reboot` event.
    pub fn step(&self, event: Event, now: Instant) -> Result<(State, Vec<Effect>), Refused> {
        if let Event::StopAsked { signal } = event {
            return self.on_stop_asked(signal);
        }
        if let Event::SystemSaid { signal, said } = event {
            return self.on_system_said(signal, said, now);
        }
        let (mut next, mut effects) = self.phase_step(event.clone(), now)?;
        if event == Event::Overdue {
            effects.insert(0, Effect::SayOverdue(self.overdue()));
        }
        let weigh = next.drain_to_come();
        match event {
            Event::Seen(seen) => effects.extend(next.reboots.saw(seen, now, weigh)),
            Event::AgentAsked(facts) if facts.connected => {
                effects.extend(next.reboots.agent_asked(facts.operation, now, weigh))
            }
            Event::RebootEnded(RebootEnd::Asked { slot_since }) => {
                next.reboots.asked(now, slot_since)
            }
            _ => {}
        }
        effects.extend(next.reboots.settle(now, weigh));
        let verdict = next.reboots.verdict(now);
        let ask = verdict.ask;
        let live = next.reboots.enabled() && next.phase != Phase::Stopped;
        if live && next.reboots.applied(verdict) {
            let (after, more) = next.phase_step(Event::Reboot(ask), now)?;
            next = after;
            effects.extend(more);
            effects.extend(next.reboots.settle(now, next.drain_to_come()));
        }
        Ok((next, effects))
    }

    /// What did not come in its time when `Overdue` rings.
    fn overdue(&self) -> Overdue {
        match self.phase {
            Phase::Rebooting { .. } if self.reboots.by_agent() => Overdue::Agent {
                handover: self.reboots.handover().unwrap_or_default(),
            },
            Phase::Rebooting { .. } => Overdue::OwnReboot,
            _ => Overdue::Schedule {
                kind: self.phase.planned().map(|p| p.kind),
            },
        }
    }

    /// The daemon has stopped: the loop ends.
    pub fn done(&self) -> bool {
        self.phase == Phase::Stopped
    }

    /// Whether the node's drain for its reboot is still to come (the holds weigh its length).
    fn drain_to_come(&self) -> bool {
        self.phase != (Phase::Rebooting { asked: true })
    }

    /// The phase's step and the gate's, and the rules of a standing `Go`.
    fn phase_step(&self, event: Event, now: Instant) -> Result<(State, Vec<Effect>), Refused> {
        let (mut phase, mut effects) = self.phase.on(event.clone())?;
        let mut next = self.clone();
        if let Event::Reboot(ask) = event {
            next.reboot = ask;
        }
        // Back to waiting with a reboot still wanted: at the first connection it starts now;
        // after a shutdown or a reboot of ours that ended without one, the verdict says it
        // again after a pause (an admin's `shutdown -c` is not undone at once).
        if phase == Phase::Waiting && next.reboot == Ask::Go {
            if self.phase == Phase::Starting {
                phase = Phase::Rebooting { asked: false };
                effects.push(Effect::StartReboot);
            } else if self.phase != Phase::Waiting {
                let after = setback_of(&self.phase, &event);
                let pause = next.reboots.later(after, now);
                effects.push(Effect::RebootLater { after, pause });
            }
        }
        if effects.contains(&Effect::StartReboot) {
            next.reboots.starts(now);
        }
        if phase != (Phase::Rebooting { asked: true }) {
            next.reboots.not_asked();
        }
        next.gate_step(&event, &phase, &mut effects);
        next.phase = phase;
        Ok((next, effects))
    }

    /// The gate's step for `event`, the phase moving to `phase` (the module doc's second
    /// table).
    fn gate_step(&mut self, event: &Event, phase: &Phase, effects: &mut Vec<Effect>) {
        let mut gate = self.gate;
        match event {
            Event::Ended { left_work } => self.left_work = *left_work,
            Event::SlotsFull => gate.full = true,
            Event::SlotsOpen => gate.full = false,
            Event::PassGiven => gate.pass = true,
            Event::PassExpired => {
                gate.pass = false;
                if phase.may_gate() {
                    effects.push(Effect::SayPassEnded);
                }
            }
            _ => {}
        }
        let (was, is) = (self.gate.closed_in(&self.phase), gate.closed_in(phase));
        let again = matches!(event, Event::SlotsFull | Event::Connected { .. });
        if is && (!was || again) {
            effects.push(Effect::HoldGate);
        } else if was && !is {
            let because = if !phase.may_gate() {
                GateOpened::NoLongerWaits
            } else if gate.pass {
                GateOpened::Pass
            } else {
                GateOpened::SlotOpen
            };
            effects.push(Effect::DropGate { because });
        }
        self.gate = gate;
    }

    /// The verdict's timer: the reboot's announcement due (`Overdue`), or the verdict's own
    /// time (`Tick`: an answer settling, the agent's pre-reboot running out, a pause ending),
    /// whichever comes first.
    pub fn timer(&self, now: Instant) -> Option<(Instant, Event)> {
        let overdue = (self.phase == Phase::Rebooting { asked: true })
            .then(|| self.reboots.announce_due())
            .flatten()
            .map(|at| (at, Event::Overdue));
        let tick = self.reboots.next_tick(now).map(|at| (at, Event::Tick));
        [overdue, tick]
            .into_iter()
            .flatten()
            .min_by_key(|(at, _)| *at)
    }

    /// The answer to the update agent's request (`facts`), from the state the request moved the
    /// table to (`Phase::answer_agent`).
    pub fn answer_agent(&self, facts: AgentFacts, node: &str, now: Instant) -> Answer {
        let verdict = self.reboots.verdict(now);
        self.phase.answer_agent(&AgentAsk {
            operation: facts.operation,
            node,
            ask: verdict.ask,
            why: &verdict.why,
            keys: &verdict.keys,
            slot_wait: facts.slot_wait,
            by_agent: self.reboots.by_agent(),
            restoring: facts.restoring,
            setback: verdict.setback,
            connected: facts.connected,
        })
    }

    /// systemd's answer to `AskSystemd`: a plain stop while the system runs on; while it shuts
    /// down, the second stage when it is worth starting ([`stop_stage`]), said either way.
    fn on_system_said(
        &self,
        signal: StopSignal,
        said: SystemSaid,
        now: Instant,
    ) -> Result<(State, Vec<Effect>), Refused> {
        let SystemSaid::ShutsDown {
            stop_timeout,
            drain_left,
            margin,
        } = said
        else {
            return self.step(Event::Stop { signal }, now);
        };
        let stage = stop_stage(stop_timeout, drain_left, margin);
        let decided = match stage {
            StageSaid::Draining { within } => Event::StopInShutdown { within },
            _ => Event::Stop { signal },
        };
        let (next, effects) = self.step(decided, now)?;
        let mut said = vec![Effect::SayStopStage(stage)];
        said.extend(effects);
        Ok((next, said))
    }

    /// SIGTERM or SIGINT: a plain stop when nothing is left to drain (during the stop phase, or
    /// after a shutdown's complete drain), else systemd is asked.
    fn on_stop_asked(&self, signal: StopSignal) -> Result<(State, Vec<Effect>), Refused> {
        let drained = match self.phase {
            Phase::Stopped => {
                return Err(Refused {
                    phase: self.phase.clone(),
                    event: Event::StopAsked { signal },
                });
            }
            Phase::Stopping(_) => true,
            Phase::Released(_) | Phase::Ready(_) => !self.left_work,
            _ => false,
        };
        if drained {
            self.on(Event::Stop { signal })
        } else {
            Ok((self.clone(), vec![Effect::AskSystemd { signal }]))
        }
    }
}
