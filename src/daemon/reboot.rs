//! The reboots the node asks for (`[reboot]`, off without a trigger): the follower that turns
//! the triggers and the holds into one verdict for the phase table ([`Ask`]), and the daemon's
//! own reboot, which runs once the table says so (`service/reboot.rs`).
//!
//! The triggers: `sentinel_file` (inotify, `reboot::sentinel_file`), `sentinel_command` (run
//! every `check_interval`, `reboot::sentinel_command`), Flatcar's update_engine
//! (`reboot::update_engine`, on the system bus), and the update agent's FleetLock requests
//! (`[fleetlock]`: a pre-reboot makes a need that stands [`AGENT_ASKS_WITHIN`]; a steady-state
//! ends it). A reboot is needed when any says so; an unknown
//! answer (a command that failed, update_engine unreachable) never starts one and is said. Their
//! combined answer counts once it has stood `reboot::need::SETTLE` (5 s): a need that flaps is
//! never acted on, and each need is said (and `RebootRequired` posted) once per episode.
//! While one is needed the holds are judged (`reboot::holds`: the hold annotation, the fleet's
//! pause, a blocking pod, the windows) now, then every [`LOOK_EVERY`] and at the next window's
//! opening; each new set of reasons is said once. The verdict is `Go` only when nothing holds
//! the node. After a reboot of ours ended without one (or logind's shutdown was cancelled), the
//! table asks for a pause ([`RETRY_AFTER`]) before the next `Go`.

use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;

use crate::config::reboot::RebootSettings;
use crate::daemon::access::Access;
use crate::daemon::metrics::{Metrics, RebootFacts};
use crate::daemon::phase::{Ask, Setback};
use crate::engine::Engine;
use crate::events::Reason as EventReason;
use crate::forecast::Forecast;
use crate::node::conditions::{Condition, Type as ConditionType};
use crate::reboot::fleetlock::Operation;
use crate::reboot::holds::{Holds, Key};
use crate::reboot::holds_read::Weighed;
use crate::reboot::need::{Need, Settled};
use crate::reboot::window::Windows;

/// How often the holds are judged again while a reboot is needed and held (a hold annotation
/// removed, the pause Lease deleted, a blocking pod gone).
pub const LOOK_EVERY: Duration = Duration::from_secs(60);
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

/// How long one FleetLock pre-reboot keeps the update agent's need standing. zincati asks again
/// at every tick of its state machine while an update is staged (`DEFAULT_REFRESH_PERIOD_SECS`,
/// 300 s plus up to 10 % jitter, in zincati's `src/update_agent/mod.rs`): four ticks missed
/// mean it no longer asks (stopped, or the update withdrawn), and the node is not kept drained
/// for it.
pub const AGENT_ASKS_WITHIN: Duration = Duration::from_secs(20 * 60);

/// The least time between two looks at the holds that the agent's requests ask for.
const AGENT_LOOK_AGAIN: Duration = Duration::from_secs(5);

/// How long a trigger that stopped (its inotify watch, update_engine's bus) waits before it is
/// set up again.
const TRIGGER_RETRY: Duration = Duration::from_secs(30);
/// The reason the daemon's own reboot gives its marker and Events. A marker of this boot with it
/// is a reboot that never reached logind's window (the daemon was stopped, or the need went):
/// the next start restores it (`daemon::restore`).
pub const OWN_REBOOT_WHY: &str = "reboot the node asked for ([reboot])";

/// The follower's verdict and what it says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Verdict {
    pub ask: Ask,
    /// Why: the trigger's words, the holds' messages.
    pub why: String,
    /// What holds the node, when it waits for the holds (none otherwise).
    pub keys: Vec<Key>,
    /// What ended the last reboot, while the verdict waits out the pause after it.
    pub setback: Option<Setback>,
}

impl Verdict {
    fn not_needed(why: impl Into<String>) -> Verdict {
        Verdict {
            ask: Ask::NotNeeded,
            why: why.into(),
            keys: Vec::new(),
            setback: None,
        }
    }
}

/// Starts the triggers' tasks (on this runtime), each publishing on its own watch; `agent`: the
/// FleetLock requests of the update agent, with `[fleetlock]`.
fn start_triggers(
    reboot: &RebootSettings,
    bus_address: &str,
    agent: Option<mpsc::UnboundedReceiver<Operation>>,
) -> Vec<watch::Receiver<Need>> {
    let mut needs = Vec::new();
    if let Some(asks) = agent {
        let (tx, rx) = watch::channel(Need::NotNeeded(
            "the update agent has not asked for a reboot".into(),
        ));
        tokio::spawn(follow_agent(asks, tx));
        needs.push(rx);
    }
    if let Some(file) = &reboot.sentinel_file {
        let (tx, rx) = watch::channel(crate::reboot::sentinel_file::need(file));
        tokio::spawn(follow_file(file.clone(), tx));
        needs.push(rx);
    }
    if let Some(command) = &reboot.sentinel_command {
        let first = Need::Unknown(format!(
            "{} has not answered yet",
            crate::reboot::sentinel_command::shown(&command.argv)
        ));
        let (tx, rx) = watch::channel(first);
        tokio::spawn(crate::reboot::sentinel_command::run_every(
            command.argv.clone(),
            command.interval,
            command.timeout,
            tx,
        ));
        needs.push(rx);
    }
    if reboot.update_engine {
        let (tx, rx) = watch::channel(Need::Unknown("update_engine not read yet".into()));
        tokio::spawn(follow_update_engine(bus_address.to_owned(), tx));
        needs.push(rx);
    }
    needs
}

/// The sentinel file's answers; a watch that fails is said as unknown (no reboot starts) and set
/// up again after [`TRIGGER_RETRY`] (inotify instances run out on busy nodes, then free up).
async fn follow_file(file: std::path::PathBuf, tx: watch::Sender<Need>) {
    loop {
        let failed = match crate::reboot::sentinel_file::SentinelFile::new(&file) {
            Ok(mut watch) => loop {
                match watch.next().await {
                    Ok(need) => {
                        if tx.send(need).is_err() {
                            return;
                        }
                    }
                    Err(e) => break e,
                }
            },
            Err(e) => e,
        };
        if tx.send(Need::Unknown(failed.to_string())).is_err() {
            return;
        }
        tokio::select! {
            () = tokio::time::sleep(TRIGGER_RETRY) => {}
            () = tx.closed() => return,
        }
    }
}

/// The update agent's FleetLock requests as a need: a pre-reboot makes one that stands until a
/// steady-state, or until [`AGENT_ASKS_WITHIN`] passes without another pre-reboot. A pre-reboot
/// repeated at least [`AGENT_LOOK_AGAIN`] after the last one has the holds judged again (the
/// request itself is answered from the verdict before that look; the agent's next one gets its
/// result), so a hold removed is seen within a tick of the agent, not a minute later.
async fn follow_agent(mut asks: mpsc::UnboundedReceiver<Operation>, tx: watch::Sender<Need>) {
    let mut expires: Option<Instant> = None;
    let mut judged = Instant::now();
    loop {
        let ask = tokio::select! {
            ask = asks.recv() => ask,
            () = sleep_until(expires) => {
                expires = None;
                let minutes = AGENT_ASKS_WITHIN.as_secs() / 60;
                tx.send_replace(Need::NotNeeded(format!(
                    "the update agent has not asked for a reboot (FleetLock pre-reboot) for \
                     {minutes} min"
                )));
                continue;
            }
        };
        let need = match ask {
            None => return,
            Some(Operation::PreReboot) => {
                expires = Some(Instant::now() + AGENT_ASKS_WITHIN);
                Need::Needed("the update agent asks to reboot (FleetLock pre-reboot)".into())
            }
            Some(Operation::SteadyState) => {
                expires = None;
                Need::NotNeeded("the update agent reports steady state (FleetLock)".into())
            }
        };
        let again = need.is_needed() && judged.elapsed() >= AGENT_LOOK_AGAIN;
        let sent = tx.send_if_modified(|now| {
            let changed = *now != need || again;
            *now = need;
            changed
        });
        if sent {
            judged = Instant::now();
        }
    }
}

/// update_engine's answers on the system bus at `address`, followed again after
/// [`TRIGGER_RETRY`] whenever the bus or the service goes away.
async fn follow_update_engine(address: String, tx: watch::Sender<Need>) {
    loop {
        let bus = crate::host::logind::Logind::connect_with_backoff(&address).await;
        crate::reboot::update_engine::follow(bus.connection(), &tx).await;
        tokio::select! {
            () = tokio::time::sleep(TRIGGER_RETRY) => {}
            () = tx.closed() => return,
        }
    }
}

/// What the daemon's loop gives the follower besides the settings.
pub(crate) struct FromLoop {
    /// The table's pause after a reboot that ended without one, and what ended it.
    pub not_before: watch::Receiver<Option<(Instant, Setback)>>,
    /// The update agent's FleetLock requests, with `[fleetlock]`.
    pub agent: Option<mpsc::UnboundedReceiver<Operation>>,
    /// The last forecast (`[daemon] forecast_interval`).
    pub forecast: watch::Receiver<Option<Arc<Forecast>>>,
    /// True while the node is drained for its reboot.
    pub drained: watch::Receiver<bool>,
}

/// Follows the triggers and the holds, sending each verdict. Runs as a task beside the loop
/// until the daemon ends.
pub(crate) async fn follow(
    access: Access,
    bus_address: String,
    from_loop: FromLoop,
    verdict: watch::Sender<Verdict>,
    metrics: Metrics,
) {
    let FromLoop {
        mut not_before,
        agent,
        forecast,
        drained,
    } = from_loop;
    let mut needs = start_triggers(&access.settings.reboot, &bus_address, agent);
    let mut settled = Settled::default();
    let mut facts = None;
    let mut follower = Follower {
        windows: Windows::of(&access.settings),
        forecast,
        drained,
        access,
        said_need: None,
        said_holds: None,
        posted_required: false,
        posted_waiting: None,
    };
    loop {
        let now: Vec<Need> = needs
            .iter_mut()
            .map(|n| n.borrow_and_update().clone())
            .collect();
        // Nothing is said, written or taken for an answer that has not stood SETTLE.
        let (counts, settles_at) = settled.see(Need::combined(&now), Instant::now());
        let Some(need) = counts.cloned() else {
            tokio::select! {
                () = changed_any(&mut needs) => {}
                () = sleep_until(settles_at) => {}
                () = verdict.closed() => return,
            }
            continue;
        };
        follower.say_need(&need);
        let pause = not_before
            .borrow_and_update()
            .filter(|(at, _)| *at > Instant::now());
        let (next, recheck) = follower.verdict(&need, pause).await;
        let recheck = match (recheck, settles_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        let now_facts = RebootFacts {
            required: need.is_needed(),
            waiting: match next.ask {
                Ask::Waits => follower.said_holds.clone().unwrap_or_default(),
                _ => Vec::new(),
            },
            window_open: follower.windows.contains(Timestamp::now()),
        };
        if facts.as_ref() != Some(&now_facts) {
            metrics.reboot(now_facts.clone());
            facts = Some(now_facts);
        }
        verdict.send_if_modified(|v| {
            let changed = *v != next;
            *v = next;
            changed
        });
        tokio::select! {
            () = changed_any(&mut needs) => {}
            _ = not_before.changed() => {}
            () = sleep_until(recheck) => {}
            () = verdict.closed() => return,
        }
    }
}

/// What the follower keeps between looks: what it said last, so each change is said once.
struct Follower {
    access: Access,
    windows: Windows,
    /// The daemon's last forecast (`[daemon] forecast_interval`).
    forecast: watch::Receiver<Option<Arc<Forecast>>>,
    /// True while the node is drained for its reboot: the drain is no longer to come.
    drained: watch::Receiver<bool>,
    said_need: Option<Need>,
    said_holds: Option<Vec<Key>>,
    /// `RebootRequired` was posted for the need now standing (reset only once no trigger says
    /// needed: a trigger flapping between needed and unknown posts it once).
    posted_required: bool,
    /// The keys `RebootWaiting` was last posted for, `unknown` left out (a flaky API server
    /// would otherwise post it at every blip).
    posted_waiting: Option<Vec<Key>>,
}

impl Follower {
    /// Says the need when it changed (the journal; `RebootRequired` when it becomes needed).
    fn say_need(&mut self, need: &Need) {
        if self.said_need.as_ref() == Some(need) {
            return;
        }
        let node = &self.access.settings.node_name;
        say_need(node, need);
        if need.is_needed() && !self.posted_required {
            let message = format!("node {node} {need}");
            post(&self.access, EventReason::RebootRequired, message.clone());
            planned(&self.access, true, message);
            self.posted_required = true;
        }
        if matches!(need, Need::NotNeeded(_)) && self.posted_required {
            planned(&self.access, false, format!("node {node} {need}"));
        }
        if matches!(need, Need::NotNeeded(_)) {
            self.posted_required = false;
            self.posted_waiting = None;
        }
        self.said_need = Some(need.clone());
    }

    /// The verdict for `need` now, and when to look again (none: only at a trigger's change).
    /// `pause`: the table's pause after a reboot that ended without one, and what ended it.
    async fn verdict(
        &mut self,
        need: &Need,
        pause: Option<(Instant, Setback)>,
    ) -> (Verdict, Option<Instant>) {
        let node = &self.access.settings.node_name;
        let why = match need {
            Need::Needed(why) => why,
            other => {
                self.said_holds = None;
                return (Verdict::not_needed(other.to_string()), None);
            }
        };
        if let Some((at, setback)) = pause {
            let left = crate::time_limit::seconds(at - Instant::now());
            let why = format!(
                "{why}; the last reboot of node {node} ended without one ({}): trying again in \
                 {left}",
                setback.says()
            );
            return (
                Verdict {
                    ask: Ask::Waits,
                    why,
                    keys: Vec::new(),
                    setback: Some(setback),
                },
                Some(at),
            );
        }
        let forecast = self.forecast.borrow().clone();
        let drained = *self.drained.borrow();
        let weighed = Weighed {
            forecast: forecast.as_deref().filter(|_| !drained),
            drain_to_come: !drained,
        };
        let holds = judge(&self.access, &self.windows, weighed).await;
        let keys = holds.keys();
        if self.said_holds.as_ref() != Some(&keys) {
            say_holds(&holds, why);
            let known: Vec<Key> = keys
                .iter()
                .copied()
                .filter(|k| *k != Key::Unknown)
                .collect();
            if !known.is_empty() && self.posted_waiting.as_ref() != Some(&known) {
                post(&self.access, EventReason::RebootWaiting, holds.to_string());
                self.posted_waiting = Some(known);
            }
            self.said_holds = Some(keys.clone());
        }
        let recheck = Instant::now() + until_next_look(&self.windows, Timestamp::now());
        let verdict = if holds.may_go() {
            Verdict {
                ask: Ask::Go,
                why: why.clone(),
                keys: Vec::new(),
                setback: None,
            }
        } else {
            Verdict {
                ask: Ask::Waits,
                why: holds.to_string(),
                keys,
                setback: None,
            }
        };
        (verdict, Some(recheck))
    }
}

/// With `[node] lifecycle_conditions`, the Node condition `MaintenancePlanned` (KEP-5683): true
/// while a reboot is needed, false once not; off the follower's way (a failure is only logged).
fn planned(access: &Access, status: bool, message: String) {
    if !access.settings.lifecycle_conditions {
        return;
    }
    let settings = access.settings.clone();
    tokio::spawn(async move {
        let Ok(engine) = Engine::new(settings.clone()) else {
            return;
        };
        let condition = Condition {
            kind: ConditionType::MaintenancePlanned,
            status,
            reason: if status {
                "RebootNeeded"
            } else {
                "RebootNotNeeded"
            },
            message,
        };
        let by = Instant::now() + settings.request_timeout;
        engine.set_conditions(&[condition], by).await;
    });
}

/// Posts one Event on the Node, off the follower's way (a failure is only logged).
pub(crate) fn post(access: &Access, reason: EventReason, message: String) {
    let settings = access.settings.clone();
    tokio::spawn(Engine::post_event(settings, reason, message));
}

/// How long until the holds are judged again: [`LOOK_EVERY`], or sooner when a window opens.
fn until_next_look(windows: &Windows, now: Timestamp) -> Duration {
    if windows.contains(now) {
        return LOOK_EVERY;
    }
    let opens = windows
        .next_open(now)
        .and_then(|at| Duration::try_from(now.duration_until(at)).ok());
    opens.map_or(LOOK_EVERY, |d| d.min(LOOK_EVERY))
}

/// What holds the node now.
pub(crate) async fn judge(access: &Access, windows: &Windows, weighed: Weighed<'_>) -> Holds {
    match access.engine().await {
        Ok(engine) => crate::reboot::holds_read::holds_of(&engine, windows, weighed).await,
        Err(e) => Holds::unknown(&access.settings.node_name, &e.to_string()),
    }
}

fn say_need(node: &str, need: &Need) {
    match need {
        Need::Needed(why) => tracing::info!(node = %node, "node {node} needs a reboot: {why}"),
        Need::NotNeeded(why) => tracing::info!(node = %node, "node {node} needs no reboot: {why}"),
        Need::Unknown(why) => tracing::warn!(
            node = %node,
            "cannot tell whether node {node} needs a reboot ({why}); no reboot starts until a \
             trigger says so"
        ),
    }
}

fn say_holds(holds: &Holds, why: &str) {
    let node = &holds.node;
    if holds.may_go() {
        tracing::info!(node = %node, "nothing holds the reboot of node {node} ({why}): starting it");
    } else {
        let keys: Vec<&str> = holds.keys().into_iter().map(|k| k.as_str()).collect();
        tracing::info!(
            node = %node,
            "the reboot of node {node} waits ({}): {holds}",
            keys.join(", ")
        );
    }
}

/// Any trigger's next answer (never when there is none).
/// A trigger whose task ended (its sender dropped) keeps its last answer and is not waited on:
/// a closed channel would otherwise answer at once, forever.
async fn changed_any(needs: &mut [watch::Receiver<Need>]) {
    let changes: Vec<_> = needs
        .iter_mut()
        .map(|n| {
            Box::pin(async move {
                if n.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            })
        })
        .collect();
    if changes.is_empty() {
        return std::future::pending().await;
    }
    let ((), _, _) = futures::future::select_all(changes).await;
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pause_after_failed_tries_doubles_up_to_four_hours() {
        let minutes = |n| retry_pause(n).as_secs() / 60;
        assert_eq!([0, 1, 2, 3, 4, 5].map(minutes), [10, 20, 40, 80, 160, 240]);
        assert_eq!(retry_pause(u32::MAX), RETRY_MAX);
    }

    /// zincati's pre-reboot stands [`AGENT_ASKS_WITHIN`] after the last one, renewed by each;
    /// a steady-state ends it at once; a repeated pre-reboot wakes the follower to judge the
    /// holds again only [`AGENT_LOOK_AGAIN`] after the last look.
    #[tokio::test(start_paused = true)]
    async fn an_agents_ask_stands_twenty_minutes_from_the_last_and_a_steady_state_ends_it() {
        let (asks, rx) = mpsc::unbounded_channel();
        let (tx, mut need) = watch::channel(Need::NotNeeded("not asked".into()));
        tokio::spawn(follow_agent(rx, tx));
        let minute = Duration::from_secs(60);
        let ask = |op| asks.send(op).unwrap();
        // Lets the follower take what was sent, in paused time.
        async fn settle() {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        ask(Operation::PreReboot);
        settle().await;
        assert!(need.borrow_and_update().is_needed());
        tokio::time::sleep(19 * minute).await;
        assert!(need.borrow_and_update().is_needed(), "19 min after the ask");
        ask(Operation::PreReboot);
        settle().await;
        assert!(
            need.has_changed().unwrap(),
            "a repeat after 19 min is looked at again"
        );
        need.borrow_and_update();
        ask(Operation::PreReboot);
        settle().await;
        assert!(!need.has_changed().unwrap(), "a repeat within 5 s is not");
        tokio::time::sleep(19 * minute).await;
        assert!(
            need.borrow_and_update().is_needed(),
            "renewed by the last ask"
        );
        tokio::time::sleep(2 * minute).await;
        let ended = need.borrow_and_update().clone();
        assert_eq!(
            ended,
            Need::NotNeeded(
                "the update agent has not asked for a reboot (FleetLock pre-reboot) for 20 min"
                    .into()
            )
        );
        ask(Operation::PreReboot);
        settle().await;
        assert!(need.borrow_and_update().is_needed());
        ask(Operation::SteadyState);
        settle().await;
        assert_eq!(
            *need.borrow_and_update(),
            Need::NotNeeded("the update agent reports steady state (FleetLock)".into())
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_trigger_whose_task_ended_is_not_waited_on_and_the_others_still_are() {
        let (gone, rx_gone) = watch::channel(Need::Unknown("inotify failed".into()));
        let (file, rx_file) = watch::channel(Need::NotNeeded("no file".into()));
        drop(gone);
        let mut needs = vec![rx_gone, rx_file];
        let quiet = tokio::time::timeout(Duration::from_secs(3600), changed_any(&mut needs));
        assert!(quiet.await.is_err(), "a closed trigger wakes the follower");
        file.send(Need::Needed("the file exists".into())).unwrap();
        let woke = tokio::time::timeout(Duration::from_secs(1), changed_any(&mut needs));
        assert!(woke.await.is_ok(), "a live trigger's change is heard");
    }

    #[test]
    fn the_holds_are_looked_at_again_within_a_minute_or_when_a_window_opens() {
        use jiff::civil::Weekday;
        let now: Timestamp = "2026-12-05T22:00:00Z".parse().unwrap();
        assert_eq!(until_next_look(&Windows::any_time(), now), LOOK_EVERY);
        let soon = Windows::new(
            jiff::tz::TimeZone::UTC,
            &[crate::reboot::window::Window {
                day: Weekday::Saturday,
                start_minute: 22 * 60,
                length_minutes: 60,
            }],
        );
        // Open now: a minute.
        assert_eq!(until_next_look(&soon, now), LOOK_EVERY);
        let later: Timestamp = "2026-12-05T21:59:30Z".parse().unwrap();
        assert_eq!(until_next_look(&soon, later), Duration::from_secs(30));
    }
}
