//! `reboot`: how an admin or an update agent reboots a node of a fleet, by the one procedure of
//! a reboot (`crate::reboot::procedure`, as the daemon's own reboots): it waits for a drain
//! slot (`[fleet] slots`) as long as told, drains with its own timeout (no logind clock), then
//! asks logind for the reboot; the service's drain at the shutdown then finds the node drained
//! and lets it go at once. A drain that did not complete reboots nothing unless `--force`. No
//! holds are judged: an admin's reboot by hand is the admin's.
//!
//! The daemon's reboot gate (`[fleet] gate`, `daemon::gate`) is a block lock logind would hold
//! this command's reboot to as well. logind's own way past a block lock (`Reboot` with the
//! ignore-inhibit polkit actions, `systemctl reboot -i`) needs polkit, which many node images
//! lack, and would also skip every other holder's lock; so the command instead asks the daemon
//! to drop its own (SIGUSR1 to the PID logind lists for it) and waits until logind no longer
//! lists it. Every other lock, block or delay, is honoured as for `systemctl reboot`.

use std::sync::Arc;
use std::time::Duration;

use crate::cli::{CliError, EXIT_DONE, EXIT_INCOMPLETE, out};
use crate::config::Settings;
use crate::engine::Engine;
use crate::reboot::procedure::{self, BlockLocks, GaveUp, LogindAt, Outcome, Plan, SlotPlan, Step};
use crate::shutdown_kind::ShutdownKind;

/// The `why` recorded in the marker and the report.
pub const WHY: &str = "reboot by kube-shutdown-drain reboot";

/// The command line's choices.
#[derive(Debug, Clone)]
pub struct Options {
    pub poweroff: bool,
    pub slot_timeout: Duration,
    pub drain_timeout: Duration,
    pub force: bool,
}

pub async fn run(settings: Arc<Settings>, options: Options) -> Result<u8, CliError> {
    let node = settings.node_name.clone();
    let kind = if options.poweroff {
        ShutdownKind::PowerOff
    } else {
        ShutdownKind::Reboot
    };
    let engine = Engine::new(settings.clone())?.for_shutdown_kind(kind);
    let slot = match (settings.fleet.slots, options.force) {
        (0, _) => SlotPlan::None,
        (_, true) => SlotPlan::LookOnce,
        (_, false) => SlotPlan::Wait(Some(options.slot_timeout)),
    };
    let plan = Plan {
        why: WHY,
        slot,
        slot_wait: None,
        drain_timeout: options.drain_timeout,
        holds: None,
        force: options.force,
        hand_over: false,
        poweroff: options.poweroff,
        block_locks: BlockLocks::OpenOurGate,
        logind: LogindAt::Connect,
    };
    let on_no_slot = settings.fleet.on_no_slot.as_str();
    let mut say = |step: Step<'_>| say(&node, on_no_slot, step);
    let outcome = procedure::run(engine, plan, &mut say).await;
    if let Outcome::GaveUp {
        why: GaveUp::Held { .. },
        slot_since: Some(_),
    } = &outcome
    {
        give_back(settings).await;
    }
    ended(&node, &options, outcome)
}

/// A pre-drain hook called the reboot off before the drain: the slot taken for it goes back
/// (nothing else was changed). A failure is said; the slot then ages out at `hold_max`.
async fn give_back(settings: Arc<Settings>) {
    let node = settings.node_name.clone();
    let deadline = tokio::time::Instant::now() + settings.request_timeout;
    let given = match Engine::new(settings) {
        Ok(engine) => engine.give_back_slots(deadline).await,
        Err(e) => Err(e),
    };
    if let Err(e) = given {
        eprintln!("cannot give back the drain slot of node {node}: {e}");
    }
}

/// A step of the reboot, on the terminal (the report on stdout, the rest on stderr).
fn say(node: &str, on_no_slot: &str, step: Step<'_>) {
    match step {
        Step::SlotWait(wait) => eprintln!(
            "waiting up to {} s for a drain slot for node {node}",
            wait.unwrap_or_default().as_secs()
        ),
        Step::SlotNotWaited => eprintln!(
            "--force: not waiting for a drain slot for node {node}; the drain takes one if one is \
             open now, else [fleet] on_no_slot = \"{on_no_slot}\" applies"
        ),
        Step::SlotHeld(name) => eprintln!("node {node} holds drain slot {name}"),
        Step::HookPassed(run) => eprintln!("{run} for node {node}"),
        Step::Drained(report) => out!("{}", report.to_text()),
        Step::GateAsked(pids) => {
            eprintln!("asked the daemon (PID {pids:?}) to open the reboot gate of node {node}")
        }
        Step::SlotStillFull(_) | Step::AskingLogind => {}
    }
}

/// The exit code of the reboot's `outcome`, its end said on stderr.
fn ended(node: &str, options: &Options, outcome: Outcome) -> Result<u8, CliError> {
    let what = if options.poweroff {
        "power off"
    } else {
        "reboot"
    };
    let why = match outcome {
        Outcome::Asked { .. } | Outcome::HandedOver { .. } => {
            eprintln!("asked logind to {what} node {node}");
            return Ok(EXIT_DONE);
        }
        Outcome::GaveUp { why, .. } => why,
    };
    match why {
        GaveUp::NoSlot(holders) => {
            eprintln!(
                "no drain slot for node {node} within {} s: held by {}; nothing changed, not \
                 rebooting",
                options.slot_timeout.as_secs(),
                holders.join(", ")
            );
            Ok(EXIT_INCOMPLETE)
        }
        GaveUp::Incomplete(_) => {
            eprintln!(
                "not rebooting node {node}: the drain did not complete (above); the node stays \
                 cordoned: `kube-shutdown-drain restore` undoes it, `--force` reboots anyway"
            );
            Ok(EXIT_INCOMPLETE)
        }
        GaveUp::Slots(e) | GaveUp::Prepare(e) => Err(e.into()),
        GaveUp::NoLogind(why) | GaveUp::Logind(why) | GaveUp::Overran(why) => {
            Err(anyhow::anyhow!(why).into())
        }
        GaveUp::Held { holds, .. } => {
            Err(anyhow::anyhow!("not rebooting node {node}: {holds}").into())
        }
        GaveUp::ForeignBlock(locks) => Err(anyhow::anyhow!(
            "not rebooting node {node}: another program blocks shutdowns ({})",
            locks.join("; ")
        )
        .into()),
    }
}
