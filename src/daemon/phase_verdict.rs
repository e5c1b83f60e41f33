//! The verdict on the reboots the node asks for, as the table keeps it: what the followers saw
//! (the triggers' combined answer, the update agent's requests, what holds the node) turned into
//! the need that counts, the verdict ([`Ask`]), the pause after a reboot that ended without one,
//! whose reboot it is, and what has been said of it. Pure: every step is given the time it is.
//!
//! - The need: the triggers' answer and the update agent's (a FleetLock pre-reboot stands
//!   [`AGENT_ASKS_WITHIN`] after the last one; a steady-state ends it), combined
//!   (`Need::combined`), counts once it has stood `need::SETTLE` (`need::Settled`).
//! - The holds: looked at when the need starts to count, again at the agent's pre-reboot at
//!   most every [`AGENT_LOOK_AGAIN`] (the looks' pace otherwise is the looker's: every minute and
//!   at a window's opening); until the first look the verdict waits, unheld.
//! - The verdict: no need, or it waits (the pause, the holds, the first look), or it goes.
//! - The pause after a reboot that ended without one: [`retry_pause`] of the reboots that ended
//!   so in a row, said with what ended it ([`Setback`]); a need gone resets the count.
//! - What is said once: the need (and `RebootRequired` once per episode, with the
//!   `MaintenancePlanned` condition), the holds (and `RebootWaiting` once per set of known
//!   reasons), the metrics' facts when they change.

use std::time::Duration;

use tokio::time::Instant;

use super::{Ask, Effect, Setback};
use crate::daemon::metrics::RebootFacts;
use crate::reboot::fleetlock::Operation;
use crate::reboot::holds::Key;
use crate::reboot::need::{Need, Settled};

/// How long one FleetLock pre-reboot keeps the update agent's need standing. zincati asks again
/// at every tick of its state machine while an update is staged (`DEFAULT_REFRESH_PERIOD_SECS`,
/// 300 s plus up to 10 % jitter, in zincati's `src/update_agent/mod.rs`): four ticks missed
/// mean it no longer asks (stopped, or the update withdrawn), and the node is not kept drained
/// for it.
pub const AGENT_ASKS_WITHIN: Duration = Duration::from_secs(20 * 60);

/// The least time between two looks at the holds that the agent's requests ask for.
pub const AGENT_LOOK_AGAIN: Duration = Duration::from_secs(5);

/// The pause after a reboot of ours ended without one, before the next try; doubled after each
/// such end in a row, up to [`RETRY_MAX`], so a drain that a budget keeps blocking does not
/// evict the node's other pods every few minutes.
pub const RETRY_AFTER: Duration = Duration::from_secs(600);
/// The longest pause between two tries.
pub const RETRY_MAX: Duration = Duration::from_secs(4 * 3600);

/// The pause before the next try after `failures` reboots of ours in a row ended without one
/// (the first such end is failure 0): [`RETRY_AFTER`], doubled each time, at most
/// [`RETRY_MAX`]. Pure.
pub fn retry_pause(failures: u32) -> Duration {
    RETRY_AFTER
        .saturating_mul(1 << failures.min(8))
        .min(RETRY_MAX)
}

/// How long after logind was asked for the node's own reboot (or after a scheduled shutdown's
/// file went at its time) logind may take to announce it; logind sends
/// `PrepareForShutdown(true)` as it starts it, so this is generous.
pub const ANNOUNCE_WINDOW: Duration = Duration::from_secs(30);

/// The longest the node stays drained, holding its slot, for the update agent's reboot once the
/// drain for it ended. The agent's own pace sets the hand-over: each pre-reboot keeps its need
/// standing ([`AGENT_ASKS_WITHIN`], four of zincati's ticks), so a steady-state or a silence
/// ends it; zincati that postpones its reboot while a user is logged in (up to 10 times 60 s,
/// asking again each time) keeps it. Past this the node is restored whatever the agent asks,
/// and told `reboot_overdue`.
pub const AGENT_HOLD_MAX: Duration = Duration::from_secs(2 * 3600);

/// The shortest hand-over, whatever `hold_max` leaves: two of zincati's 5-minute ticks (its 200
/// at the next one, its reboot in it, another try in the one after).
pub const AGENT_HOLD_MIN: Duration = Duration::from_secs(600);

/// When the hand-over to the update agent ends, its drain having ended at `drained_at`:
/// [`AGENT_HOLD_MAX`] later, but with a drain slot taken at `slot_since` no later than half of
/// `[fleet] hold_max` after the take (the other half is the reboot's and the next boot's
/// restore, before the other nodes may judge the slot stale); never sooner than
/// [`AGENT_HOLD_MIN`] after the drain. Pure.
pub fn handover_ends(
    drained_at: Instant,
    slot_since: Option<Instant>,
    hold_max: Duration,
) -> Instant {
    let most = drained_at + AGENT_HOLD_MAX;
    let by_slot = slot_since.map_or(most, |taken| taken + hold_max / 2);
    most.min(by_slot).max(drained_at + AGENT_HOLD_MIN)
}

/// What holds the node, as the looker saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HoldsSeen {
    /// The keys of the reasons, each once (none: nothing holds it).
    pub keys: Vec<Key>,
    /// Every reason's message, or that nothing holds it.
    pub text: String,
}

/// The verdict on the node's reboot and its words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub ask: Ask,
    /// Why: the need's words, the holds' messages, the pause.
    pub why: String,
    /// What holds the node, when it waits for the holds (none otherwise).
    pub keys: Vec<Key>,
    /// What ended the last reboot, while the verdict waits out the pause after it.
    pub setback: Option<Setback>,
}

/// The update agent's last word (`[fleetlock]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum AgentSaid {
    Nothing,
    PreReboot(Instant),
    SteadyState,
}

/// What has been said, so each change is said once.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Said {
    need: Option<Need>,
    holds: Option<Vec<Key>>,
    /// `RebootRequired` was posted for the need now standing.
    required: bool,
    /// The known keys `RebootWaiting` was last posted for (`unknown` left out: a flaky API
    /// server would post it at every blip).
    waiting: Option<Vec<Key>>,
    facts: Option<RebootFacts>,
    /// Whether the looker was last told to look, and how it weighs the drain to come.
    look: Option<(bool, bool)>,
    /// The verdict the phases last took (a new one, even with the same ask, is said again).
    verdict: Option<Verdict>,
}

/// The reboots' side of the table's state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reboots {
    /// The triggers' combined answer (`None`: no trigger of `[reboot]` is set).
    triggers: Option<Need>,
    /// The agent's word (`None`: no `[fleetlock]`).
    agent: Option<AgentSaid>,
    settled: Settled,
    /// What holds the node, looked at for the need now counting (`None`: not yet).
    holds: Option<HoldsSeen>,
    /// When a look at the holds was last asked for.
    looked: Option<Instant>,
    /// A maintenance window is open (as the looker last said).
    window_open: bool,
    pause: Option<(Instant, Setback)>,
    failures: u32,
    /// The running reboot is the update agent's: it ends drained and handed over.
    by_agent: bool,
    /// When the running reboot asked logind (or handed the node over to the agent), and when it
    /// took its drain slot: the announcement is due by then.
    asked: Option<(Instant, Option<Instant>)>,
    /// `[fleet] hold_max`: the agent's hand-over ends within half of it after the slot's take.
    hold_max: Duration,
    said: Said,
}

impl Reboots {
    /// Nothing seen yet: `triggers` whether `[reboot]` sets one, `agent` whether `[fleetlock]`
    /// is on.
    pub fn new(triggers: bool, agent: bool, hold_max: Duration) -> Reboots {
        Reboots {
            triggers: triggers.then(|| Need::Unknown("the triggers have not answered yet".into())),
            agent: agent.then_some(AgentSaid::Nothing),
            settled: Settled::default(),
            holds: None,
            looked: None,
            window_open: true,
            pause: None,
            failures: 0,
            by_agent: false,
            asked: None,
            hold_max,
            said: Said::default(),
        }
    }

    /// Takes `verdict` as the phases' next: whether it differs from the last they took.
    pub fn applied(&mut self, verdict: Verdict) -> bool {
        let changed = self.said.verdict.as_ref() != Some(&verdict);
        self.said.verdict = Some(verdict);
        changed
    }

    /// Whether the node asks for reboots at all (a trigger, or the update agent).
    pub fn enabled(&self) -> bool {
        self.triggers.is_some() || self.agent.is_some()
    }

    /// The running reboot asked logind (or handed the node over) at `now`, its slot taken at
    /// `slot_since`.
    pub fn asked(&mut self, now: Instant, slot_since: Option<Instant>) {
        self.asked = Some((now, slot_since));
    }

    /// No reboot of ours waits for its announcement.
    pub fn not_asked(&mut self) {
        self.asked = None;
    }

    /// How long the update agent's hand-over lasts, once it started.
    pub fn handover(&self) -> Option<Duration> {
        let (at, _) = self.asked?;
        Some(self.announce_due()?.saturating_duration_since(at))
    }

    /// When logind's announcement of the running reboot is due: [`ANNOUNCE_WINDOW`] after the
    /// daemon asked logind; for the update agent's reboot, at the end of its hand-over
    /// ([`handover_ends`], from the end of its drain).
    pub fn announce_due(&self) -> Option<Instant> {
        let (at, slot_since) = self.asked?;
        Some(if self.by_agent {
            handover_ends(at, slot_since, self.hold_max)
        } else {
            at + ANNOUNCE_WINDOW
        })
    }

    /// The agent's need at `now`.
    fn agent_need(&self, now: Instant) -> Option<Need> {
        let minutes = AGENT_ASKS_WITHIN.as_secs() / 60;
        Some(match self.agent? {
            AgentSaid::PreReboot(at) if now.saturating_duration_since(at) < AGENT_ASKS_WITHIN => {
                Need::Needed("the update agent asks to reboot (FleetLock pre-reboot)".into())
            }
            AgentSaid::PreReboot(_) => Need::NotNeeded(format!(
                "the update agent has not asked for a reboot (FleetLock pre-reboot) for \
                 {minutes} min"
            )),
            AgentSaid::SteadyState => {
                Need::NotNeeded("the update agent reports steady state (FleetLock)".into())
            }
            AgentSaid::Nothing => {
                Need::NotNeeded("the update agent has not asked for a reboot".into())
            }
        })
    }

    /// Whether the agent's pre-reboot stands at `now`: its reboot is the agent's.
    pub fn agent_asks(&self, now: Instant) -> bool {
        self.agent_need(now).is_some_and(|n| n.is_needed())
    }

    /// The running reboot is the update agent's.
    pub fn by_agent(&self) -> bool {
        self.by_agent
    }

    /// The need that counts at `now` (`None`: no answer has stood yet), and when the one seen
    /// will count.
    fn need(&mut self, now: Instant) -> (Option<Need>, Option<Instant>) {
        let seen: Vec<Need> = self
            .triggers
            .clone()
            .into_iter()
            .chain(self.agent_need(now))
            .collect();
        let (counts, at) = self.settled.see(Need::combined(&seen), now);
        (counts.cloned(), at)
    }

    /// The verdict at `now`.
    pub fn verdict(&self, now: Instant) -> Verdict {
        let mut me = self.clone();
        let (need, _) = me.need(now);
        me.verdict_for(need.as_ref(), now)
    }

    fn verdict_for(&self, need: Option<&Need>, now: Instant) -> Verdict {
        let not_needed = |why: String| Verdict {
            ask: Ask::NotNeeded,
            why,
            keys: Vec::new(),
            setback: None,
        };
        let why = match need {
            Some(Need::Needed(why)) => why,
            Some(other) => return not_needed(other.to_string()),
            None => return not_needed("the triggers' answer has not stood yet".into()),
        };
        let waits = |why: String, keys: Vec<Key>, setback| Verdict {
            ask: Ask::Waits,
            why,
            keys,
            setback,
        };
        if let Some((at, setback)) = self.pause.filter(|(at, _)| *at > now) {
            let left = crate::time_limit::seconds(at - now);
            let says = setback.says();
            let why = format!(
                "{why}; the last reboot ended without one ({says}): trying again in {left}"
            );
            return waits(why, Vec::new(), Some(setback));
        }
        match &self.holds {
            None => waits(
                format!("{why}; its holds are being looked at"),
                Vec::new(),
                None,
            ),
            Some(h) if h.keys.is_empty() => Verdict {
                ask: Ask::Go,
                why: why.clone(),
                keys: Vec::new(),
                setback: None,
            },
            Some(h) => waits(h.text.clone(), h.keys.clone(), None),
        }
    }

    /// When the verdict may change with no fact seen: an answer settling, the agent's
    /// pre-reboot running out, the pause ending.
    pub fn next_tick(&self, now: Instant) -> Option<Instant> {
        if !self.enabled() {
            return None;
        }
        let mut me = self.clone();
        let (_, settles) = me.need(now);
        let expires = match self.agent {
            Some(AgentSaid::PreReboot(at)) if at + AGENT_ASKS_WITHIN > now => {
                Some(at + AGENT_ASKS_WITHIN)
            }
            _ => None,
        };
        let pause = self.pause.map(|(at, _)| at).filter(|at| *at > now);
        [settles, expires, pause].into_iter().flatten().min()
    }
}

/// What the followers saw, for the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// The triggers' combined answer.
    Triggers(Need),
    /// What holds the node.
    Holds(HoldsSeen),
    /// A maintenance window opened or closed.
    Window { open: bool },
}

impl Reboots {
    /// What the followers saw, taken at `now`; the effects of what changed.
    pub fn saw(&mut self, seen: Seen, now: Instant, drain_to_come: bool) -> Vec<Effect> {
        match seen {
            Seen::Triggers(need) => self.triggers = Some(need),
            Seen::Holds(holds) => self.holds = Some(holds),
            Seen::Window { open } => self.window_open = open,
        }
        self.settle(now, drain_to_come)
    }

    /// The update agent's request `operation` at `now`; the effects of what changed.
    pub fn agent_asked(
        &mut self,
        operation: Operation,
        now: Instant,
        drain_to_come: bool,
    ) -> Vec<Effect> {
        if self.agent.is_none() {
            return Vec::new();
        }
        self.agent = Some(match operation {
            Operation::PreReboot => AgentSaid::PreReboot(now),
            Operation::SteadyState => AgentSaid::SteadyState,
        });
        let mut effects = self.settle(now, drain_to_come);
        let stale = self
            .looked
            .is_none_or(|at| now.saturating_duration_since(at) >= AGENT_LOOK_AGAIN);
        let looking = effects
            .iter()
            .any(|e| matches!(e, Effect::LookAtHolds { .. }));
        if operation == Operation::PreReboot && self.holds.is_some() && stale && !looking {
            self.looked = Some(now);
            effects.push(Effect::LookAtHolds { drain_to_come });
        }
        effects
    }

    /// A reboot of ours ended without one (`after`): the pause before the next try, doubled for
    /// each such end in a row. Its length, to say.
    pub fn later(&mut self, after: Setback, now: Instant) -> Duration {
        let pause = retry_pause(self.failures);
        self.failures = self.failures.saturating_add(1);
        self.pause = Some((now + pause, after));
        pause
    }

    /// The node's reboot starts: it is the agent's when the agent's pre-reboot stands.
    pub fn starts(&mut self, now: Instant) {
        self.by_agent = self.agent_asks(now);
    }

    /// The time passed (a tick, or any event): the effects of what changed with it.
    pub fn settle(&mut self, now: Instant, drain_to_come: bool) -> Vec<Effect> {
        if !self.enabled() {
            return Vec::new();
        }
        let (need, _) = self.need(now);
        let mut effects = self.say_need(need.as_ref());
        effects.extend(self.look(need.as_ref(), now, drain_to_come));
        let verdict = self.verdict_for(need.as_ref(), now);
        if verdict.ask == Ask::NotNeeded {
            self.failures = 0;
        }
        effects.extend(self.say_holds(&verdict));
        let facts = RebootFacts {
            required: need.as_ref().is_some_and(Need::is_needed),
            waiting: match verdict.ask {
                Ask::Waits => self.said.holds.clone().unwrap_or_default(),
                _ => Vec::new(),
            },
            window_open: self.window_open,
        };
        if self.said.facts.as_ref() != Some(&facts) {
            self.said.facts = Some(facts.clone());
            effects.push(Effect::RebootFacts(facts));
        }
        effects
    }

    /// Whether the holds are looked at: while a need counts and no pause runs. Looks that
    /// start again start from nothing seen (what was seen before the pause, or for an earlier
    /// need, is stale); a new weighing of the drain to come is a new look.
    fn look(&mut self, need: Option<&Need>, now: Instant, drain_to_come: bool) -> Vec<Effect> {
        let paused = self.pause.is_some_and(|(at, _)| at > now);
        let wanted = need.is_some_and(Need::is_needed) && !paused;
        let look = (wanted, drain_to_come && wanted);
        if self.said.look == Some(look) {
            return Vec::new();
        }
        let started = !self.said.look.is_some_and(|(was, _)| was);
        self.said.look = Some(look);
        if !wanted {
            return vec![Effect::StopLooking];
        }
        if started {
            self.holds = None;
        }
        self.looked = Some(now);
        vec![Effect::LookAtHolds { drain_to_come }]
    }

    /// The need, said when it changed (`RebootRequired` once per episode).
    fn say_need(&mut self, need: Option<&Need>) -> Vec<Effect> {
        let Some(need) = need else {
            return Vec::new();
        };
        if self.said.need.as_ref() == Some(need) {
            return Vec::new();
        }
        let mut effects = vec![Effect::SayNeed(need.clone())];
        if need.is_needed() && !self.said.required {
            effects.push(Effect::PostRequired(need.clone()));
            self.said.required = true;
        }
        if let Need::NotNeeded(_) = need {
            if self.said.required {
                effects.push(Effect::NotPlanned(need.clone()));
            }
            self.said.required = false;
            self.said.waiting = None;
        }
        self.said.need = Some(need.clone());
        effects
    }

    /// The holds, said when their keys changed (`RebootWaiting` when the known ones did).
    fn say_holds(&mut self, verdict: &Verdict) -> Vec<Effect> {
        if verdict.ask == Ask::NotNeeded {
            self.said.holds = None;
            return Vec::new();
        }
        let Some(holds) = self.holds.clone().filter(|_| verdict.setback.is_none()) else {
            return Vec::new();
        };
        if self.said.holds.as_ref() == Some(&holds.keys) {
            return Vec::new();
        }
        let mut effects = vec![Effect::SayHolds {
            holds: holds.clone(),
            why: verdict.why.clone(),
        }];
        let known: Vec<Key> = holds
            .keys
            .iter()
            .copied()
            .filter(|k| *k != Key::Unknown)
            .collect();
        if !known.is_empty() && self.said.waiting.as_ref() != Some(&known) {
            effects.push(Effect::PostWaiting(holds.text.clone()));
            self.said.waiting = Some(known);
        }
        self.said.holds = Some(holds.keys);
        effects
    }
}

#[cfg(test)]
#[path = "phase_verdict_tests.rs"]
mod tests;
