//! The daemon's whole state around its phase (`State`): the reboot gate, what the last work
//! left, and the reboot follower's last verdict; `State::on` is the phase table's step plus the
//! gate's (the second table of `phase.rs`'s module doc) and the rules for a standing `Go`.

use super::{Ask, Effect, Event, Phase, RebootEnd, Refused, Setback, StopSignal};

/// What ended a reboot when `event` brings `phase` back to waiting with the reboot still
/// wanted: the reboot's own setback, its time run out, else a shutdown cancelled (logind's
/// window, a schedule's). Pure.
fn setback_of(phase: &Phase, event: Event) -> Setback {
    match (phase, event) {
        (_, Event::RebootEnded(RebootEnd::GaveUp(setback))) => setback,
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

/// The reboot gate as the table sees it: the follower's verdict and the pass.
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

/// The daemon's whole state: its phase, the reboot gate, and what the last work left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State {
    pub phase: Phase,
    pub gate: Gate,
    /// The last shutdown work left pods to drain (incomplete, or none ran yet): a stop in a
    /// shutdown drains them in the stop phase.
    pub left_work: bool,
    /// The reboot follower's last verdict.
    pub reboot: Ask,
}

impl State {
    /// A state at start: no phase yet, the gate open, work left (none ran).
    pub fn starting() -> State {
        State {
            phase: Phase::Starting,
            gate: Gate::default(),
            left_work: true,
            reboot: Ask::NotNeeded,
        }
    }

    /// The state after `event`, and what to do on the way there: the phase's step, then the
    /// gate's (the module doc's second table).
    pub fn on(&self, event: Event) -> Result<(State, Vec<Effect>), Refused> {
        if let Event::StopAsked { signal } = event {
            return self.on_stop_asked(signal);
        }
        let (mut phase, mut effects) = self.phase.on(event)?;
        let mut gate = self.gate;
        let mut left_work = self.left_work;
        let mut reboot = self.reboot;
        if let Event::Reboot(ask) = event {
            reboot = ask;
        }
        // Back to waiting with a reboot still wanted: at the first connection it starts now;
        // after a shutdown or a reboot of ours that ended without one, the follower says it
        // again after a pause (an admin's `shutdown -c` is not undone at once).
        if phase == Phase::Waiting && reboot == Ask::Go {
            if self.phase == Phase::Starting {
                phase = Phase::Rebooting { asked: false };
                effects.push(Effect::StartReboot);
            } else if self.phase != Phase::Waiting {
                let after = setback_of(&self.phase, event);
                effects.push(Effect::RebootLater { after });
            }
        }
        match event {
            Event::Ended { left_work: left } => left_work = left,
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
        let (was, is) = (self.gate.closed_in(&self.phase), gate.closed_in(&phase));
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
        Ok((
            State {
                phase,
                gate,
                left_work,
                reboot,
            },
            effects,
        ))
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
