//! One procedure for a reboot the node decides: the daemon's own (a trigger of `[reboot]`), the
//! update agent's (FleetLock) and `kube-shutdown-drain reboot` by hand run these steps, from
//! here, each as its [`Plan`] says: a drain slot, the holds, the pre-drain hooks, the drain, the
//! holds once more, the block locks, logind. Each step is said as it comes ([`Step`]) and the
//! end is an [`Outcome`]; the caller says both in its own words (the journal, or the terminal).
//!
//! The pre-drain hooks, with the slot held and the holds clear: the commands of `[[hook]]` at
//! `pre-drain` (`super::hooks`), then the operators' hook annotations on the Node
//! (`crate::node::hooks`), waited for up to `[fleet] hook_timeout`. A command that fails or runs
//! past its timeout, or an annotation still there then, calls the reboot off as a hold (`hook`,
//! naming the hook and its last line; a Warning Event `PreDrainHookFailed`): the slot goes back
//! with the restore, and the next try runs the hooks again.
//!
//! The holds are judged twice (the daemon's reboots): after the slot, whose wait may have
//! outlasted a window or met a hold, weighing the drain still to come against the window; and
//! after the drain, for a hold set or a window closed meanwhile. The block locks: another
//! program's block lock on shutdowns is honoured by the daemon itself, also on systemd before 257
//! whose logind lets root's reboot past it; a reboot by hand instead asks the daemon to open its
//! own reboot gate (SIGUSR1) and leaves every other lock to logind.

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::config::hooks::HookAt;
use crate::engine::{Engine, Error, HooksWait};
use crate::events::Reason as EventReason;
use crate::fleet::slots::Taken;
use crate::forecast::Forecast;
use crate::host::logind::{Logind, gate_holders};
use crate::reboot::holds::Holds;
use crate::reboot::holds_read::{Weighed, holds_of};
use crate::reboot::hooks::{self, HookEnv, HookRun};
use crate::reboot::window::Windows;
use crate::report::Report;
use crate::shutdown_kind::ShutdownKind;
use crate::time_limit::RELEASE_GUARD;

/// How long one wait for a drain slot lasts, when it lasts as long as it takes, before it is said
/// again and renewed.
pub const SLOT_WAIT: Duration = Duration::from_secs(600);

/// How long the daemon has to drop its reboot gate after SIGUSR1.
const GATE_OPEN_MAX: Duration = Duration::from_secs(5);

/// Where the reboot's drain slot comes from (`[fleet] slots`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SlotPlan {
    /// No drain slots.
    None,
    /// Wait for one this long (`None`: as long as it takes, said again every [`SLOT_WAIT`]).
    Wait(Option<Duration>),
    /// Take one only if one is open now (`reboot --force`): the drain's own take, and
    /// `[fleet] on_no_slot` without one.
    LookOnce,
}

/// The holds the daemon's reboots judge: the windows, and the last forecast.
#[derive(Clone, Copy)]
pub struct HoldsPlan<'a> {
    pub windows: &'a Windows,
    pub forecast: Option<&'a Forecast>,
}

/// Another program's block lock on shutdowns, and the daemon's reboot gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockLocks {
    /// Refused here, whatever logind would let root do (the daemon's reboots).
    RefuseForeign,
    /// The daemon's own gate opened (SIGUSR1), every other lock left to logind (by hand).
    OpenOurGate,
}

/// Where logind is asked.
pub enum LogindAt<'a> {
    /// The daemon's connection of the moment (none while the bus is away).
    Watch(&'a watch::Receiver<Option<Logind>>),
    /// A connection of its own to the system bus, made at the last step.
    Connect,
}

/// Who says the steps (the journal, or the terminal).
pub type Say<'a> = dyn FnMut(Step<'_>) + Send + 'a;

/// What a reboot does, step by step.
pub struct Plan<'a> {
    /// The reason the marker, the report and the Events give.
    pub why: &'a str,
    pub slot: SlotPlan,
    /// True while the wait for a slot lasts (the daemon's FleetLock answers read it).
    pub slot_wait: Option<&'a watch::Sender<bool>>,
    pub drain_timeout: Duration,
    /// The holds, judged before and after the drain (the daemon's reboots; none by hand).
    pub holds: Option<HoldsPlan<'a>>,
    /// Reboot even when the drain did not complete (`reboot --force`).
    pub force: bool,
    /// End drained, handed over to the update agent (its FleetLock 200), logind not asked.
    pub hand_over: bool,
    pub poweroff: bool,
    pub block_locks: BlockLocks,
    pub logind: LogindAt<'a>,
}

/// A step of the reboot, said as it comes.
pub enum Step<'a> {
    /// The wait for a drain slot starts (`None`: as long as it takes).
    SlotWait(Option<Duration>),
    /// `reboot --force`: no wait for a slot.
    SlotNotWaited,
    /// The drain slot is held.
    SlotHeld(&'a str),
    /// A pre-drain command hook passed.
    HookPassed(&'a HookRun),
    /// Every slot is still held, by these, after [`SLOT_WAIT`]; the wait goes on.
    SlotStillFull(&'a [String]),
    /// The drain's report.
    Drained(&'a Report),
    /// The daemon's gate was asked to open (the PIDs holding it).
    GateAsked(&'a [u32]),
    /// logind is asked now (said before: its announcement may end the task first).
    AskingLogind,
}

/// Why a reboot gave up; nothing past the step named was done.
#[derive(Debug)]
pub enum GaveUp {
    /// logind is not reachable (the daemon's bus is away, or no connection could be made).
    NoLogind(String),
    /// No slot within the wait; the holders.
    NoSlot(Vec<String>),
    /// The slots could not be read.
    Slots(Error),
    /// A hold was found, looked at `when` ("before its drain", "after its drain").
    Held { holds: Holds, when: &'static str },
    /// The prepare failed (nothing was drained, or only without the cordon).
    Prepare(Error),
    /// The drain did not complete (its report).
    Incomplete(Box<Report>),
    /// The drain overran its deadline and was stopped by the release guard.
    Overran(String),
    /// Another program blocks shutdowns (its locks).
    ForeignBlock(Vec<String>),
    /// The daemon's gate did not open, or logind refused the reboot.
    Logind(String),
}

/// How a reboot ended; `slot_since`: when its drain slot was taken (none without slots).
#[derive(Debug)]
pub enum Outcome {
    /// logind was asked.
    Asked { slot_since: Option<Instant> },
    /// The node is drained and handed over to the update agent.
    HandedOver { slot_since: Option<Instant> },
    GaveUp {
        why: GaveUp,
        slot_since: Option<Instant>,
    },
}

/// Runs the reboot of `engine`'s node as `plan` says, each step said through `say`.
pub async fn run(engine: Engine, plan: Plan<'_>, say: &mut Say<'_>) -> Outcome {
    let gave_up = |why, slot_since| Outcome::GaveUp { why, slot_since };
    if let LogindAt::Watch(watch) = &plan.logind
        && watch.borrow().is_none()
    {
        return gave_up(GaveUp::NoLogind("logind is not reachable now".into()), None);
    }
    let (engine, slot_since) = match slot(engine, &plan, say).await {
        Ok(held) => held,
        Err(why) => return gave_up(why, None),
    };
    if let Some(holds) = plan.holds
        && let Err(why) = clear(&engine, holds, true, "before its drain").await
    {
        return gave_up(why, slot_since);
    }
    if let Err(why) = pre_drain_hooks(&engine, &plan, say).await {
        return gave_up(why, slot_since);
    }
    if let Err(why) = drain(&engine, &plan, say).await {
        return gave_up(why, slot_since);
    }
    if let Some(holds) = plan.holds
        && let Err(why) = clear(&engine, holds, false, "after its drain").await
    {
        return gave_up(why, slot_since);
    }
    if plan.hand_over {
        return Outcome::HandedOver { slot_since };
    }
    match ask_logind(&engine, &plan, say).await {
        Ok(()) => Outcome::Asked { slot_since },
        Err(why) => gave_up(why, slot_since),
    }
}

/// The slot step: the engine holding its slot (or looking once, or none), and when it took it.
async fn slot(
    engine: Engine,
    plan: &Plan<'_>,
    say: &mut Say<'_>,
) -> Result<(Engine, Option<Instant>), GaveUp> {
    let wait = match plan.slot {
        SlotPlan::None => return Ok((engine, None)),
        SlotPlan::LookOnce => {
            say(Step::SlotNotWaited);
            return Ok((engine.looking_once_for_a_slot(), None));
        }
        SlotPlan::Wait(wait) => wait,
    };
    // Back to false however the wait ends, an abort of the task included.
    let _waiting = plan.slot_wait.map(WaitFlag::raise);
    say(Step::SlotWait(wait));
    let started = Instant::now();
    loop {
        let until = Instant::now() + wait.unwrap_or(SLOT_WAIT);
        match engine.wait_for_slot(until).await {
            Ok(Taken::Slot(name) | Taken::Kept(name)) => {
                say(Step::SlotHeld(&name));
                let took = Instant::now();
                return Ok((engine.holding_slot(name, started.elapsed()), Some(took)));
            }
            Ok(Taken::Full(holders)) if wait.is_some() => return Err(GaveUp::NoSlot(holders)),
            Ok(Taken::Full(holders)) => say(Step::SlotStillFull(&holders)),
            Err(e) => return Err(GaveUp::Slots(e)),
        }
    }
}

/// Nothing holds the node now (`drain_to_come`: weigh the drain's length against the window),
/// or what does, looked at `when`.
async fn clear(
    engine: &Engine,
    plan: HoldsPlan<'_>,
    drain_to_come: bool,
    when: &'static str,
) -> Result<(), GaveUp> {
    let weighed = Weighed {
        forecast: plan.forecast.filter(|_| drain_to_come),
        drain_to_come,
    };
    let holds = holds_of(engine, plan.windows, weighed).await;
    if holds.may_go() {
        Ok(())
    } else {
        Err(GaveUp::Held { holds, when })
    }
}

/// The pre-drain hooks: the commands in their order, then the operators' annotations until
/// `[fleet] hook_timeout`; the first that does not pass calls the reboot off as a `hook` hold.
/// Once all passed, the post-restore hooks are recorded as due after the restore.
async fn pre_drain_hooks(
    engine: &Engine,
    plan: &Plan<'_>,
    say: &mut Say<'_>,
) -> Result<(), GaveUp> {
    let settings = engine.settings().clone();
    let node = settings.node_name.as_str();
    let kind = engine.shutdown_kind().unwrap_or(ShutdownKind::Reboot);
    let env = HookEnv {
        node,
        reason: plan.why,
        kind: kind.config_key(),
    };
    let called_off = |what: String| async move {
        let message = format!("the reboot of node {node} is called off: {what}");
        engine.event(EventReason::HookFailed, &message).await;
        Err(GaveUp::Held {
            holds: Holds::hook(node, message),
            when: "before its drain",
        })
    };
    match hooks::pre_drain(&settings.hooks, env).await {
        Ok(runs) => runs.iter().for_each(|run| say(Step::HookPassed(run))),
        Err(failed) => return called_off(format!("its {failed}")).await,
    }
    let timeout = settings.fleet.hook_timeout;
    match engine
        .wait_for_hooks(Instant::now() + timeout, plan.why)
        .await
    {
        Ok(HooksWait::None | HooksWait::Cleared(_)) => {}
        Ok(HooksWait::TimedOut(left)) => {
            return called_off(format!(
                "its pre-drain hooks ({}) were still there after [fleet] hook_timeout ({})",
                left.join(", "),
                crate::config::format_duration(timeout)
            ))
            .await;
        }
        // A kubeconfig or certificate no retry mends ends the reboot as the prepare's would:
        // a configuration error (exit 2 by hand), not a hold to wait out.
        Err(e) if e.is_config() => return Err(GaveUp::Prepare(e)),
        Err(e) => {
            let why = format!("cannot read the pre-drain hooks of node {node}: {e}");
            return Err(GaveUp::Held {
                holds: Holds::unknown(node, &why),
                when: "before its drain",
            });
        }
    }
    if settings.hooks.iter().any(|h| h.at == HookAt::PostRestore)
        && let Err(e) = hooks::mark_pending(&settings.state_dir, env)
    {
        tracing::warn!(
            node = %node,
            "the post-restore hooks of node {node} will not run after its restore: {e}"
        );
    }
    Ok(())
}

/// The drain step: prepare and drain within the plan's timeout, bounded by the release guard
/// whatever the engine does; a drain that did not complete ends the reboot unless forced.
async fn drain(engine: &Engine, plan: &Plan<'_>, say: &mut Say<'_>) -> Result<(), GaveUp> {
    let deadline = Instant::now() + plan.drain_timeout;
    let work = engine.prepare_and_drain(plan.why, deadline, |_| {});
    let Ok((prepared, report)) = tokio::time::timeout_at(deadline + RELEASE_GUARD, work).await
    else {
        let node = &engine.settings().node_name;
        let over = RELEASE_GUARD.as_millis();
        return Err(GaveUp::Overran(format!(
            "the drain of node {node} overran its deadline by {over} ms and was stopped"
        )));
    };
    prepared.map_err(GaveUp::Prepare)?;
    say(Step::Drained(&report));
    if !report.complete && !plan.force {
        return Err(GaveUp::Incomplete(Box::new(report)));
    }
    Ok(())
}

/// The last step: the block locks as the plan says, then logind's `Reboot` (or `PowerOff`).
async fn ask_logind(engine: &Engine, plan: &Plan<'_>, say: &mut Say<'_>) -> Result<(), GaveUp> {
    let node = engine.settings().node_name.clone();
    let what = if plan.poweroff { "power off" } else { "reboot" };
    let logind = match &plan.logind {
        LogindAt::Watch(watch) => watch
            .borrow()
            .clone()
            .ok_or_else(|| GaveUp::NoLogind("logind is not reachable now".into()))?,
        LogindAt::Connect => Logind::connect().await.map_err(|e| {
            GaveUp::NoLogind(format!("cannot ask logind to {what} node {node}: {e}"))
        })?,
    };
    match plan.block_locks {
        BlockLocks::RefuseForeign => refuse_foreign(&logind, &node).await?,
        BlockLocks::OpenOurGate => open_gate(&logind, &node, say).await?,
    }
    say(Step::AskingLogind);
    logind
        .shut_down(plan.poweroff)
        .await
        .map_err(|e| GaveUp::Logind(format!("cannot {what} node {node}: {e}")))
}

/// Another program's block lock on shutdowns is honoured (logind before 257 lets root past it);
/// a list that cannot be read is said, and logind asked anyway (it refuses what a block lock
/// binds itself).
async fn refuse_foreign(logind: &Logind, node: &str) -> Result<(), GaveUp> {
    match logind.list_inhibitors().await {
        Ok(locks) => {
            let theirs = crate::host::logind::foreign_blocks(&locks);
            if !theirs.is_empty() {
                return Err(GaveUp::ForeignBlock(theirs));
            }
        }
        Err(e) => tracing::warn!(
            "cannot list logind's inhibitors before the reboot of node {node} ({e}); asking \
             for it anyway (logind itself refuses what a block lock binds)"
        ),
    }
    Ok(())
}

/// Asks the daemon to open its reboot gate (SIGUSR1 to each PID logind lists for a block lock
/// of ours) and waits until logind lists none. Nothing when no gate is held.
async fn open_gate(logind: &Logind, node: &str, say: &mut Say<'_>) -> Result<(), GaveUp> {
    let list = || async {
        logind
            .list_inhibitors()
            .await
            .map(|locks| gate_holders(&locks))
            .map_err(|e| {
                GaveUp::Logind(format!(
                    "cannot look for the reboot gate of node {node}: {e}"
                ))
            })
    };
    let holders = list().await?;
    if holders.is_empty() {
        return Ok(());
    }
    for &pid in &holders {
        let target = nix::unistd::Pid::from_raw(pid as i32);
        nix::sys::signal::kill(target, nix::sys::signal::Signal::SIGUSR1).map_err(|e| {
            GaveUp::Logind(format!(
                "cannot ask the daemon (PID {pid}) to open the reboot gate of node {node}: {e}; \
                 `systemctl stop kube-shutdown-drain` drops it"
            ))
        })?;
    }
    say(Step::GateAsked(&holders));
    let until = Instant::now() + GATE_OPEN_MAX;
    loop {
        let left = list().await?;
        if left.is_empty() {
            return Ok(());
        }
        if Instant::now() >= until {
            return Err(GaveUp::Logind(format!(
                "the reboot gate of node {node} (block lock of PID {left:?}) did not open within \
                 {} s; `systemctl stop kube-shutdown-drain` drops it",
                GATE_OPEN_MAX.as_secs()
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// True on its watch while it lives.
struct WaitFlag<'a>(&'a watch::Sender<bool>);

impl<'a> WaitFlag<'a> {
    fn raise(flag: &'a watch::Sender<bool>) -> WaitFlag<'a> {
        flag.send_replace(true);
        WaitFlag(flag)
    }
}

impl Drop for WaitFlag<'_> {
    fn drop(&mut self) {
        self.0.send_replace(false);
    }
}
