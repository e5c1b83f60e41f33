//! `reboot`: how an admin or an update agent reboots a node of a fleet. It waits for a drain
//! slot (`[fleet] slots`) as long as told, drains with its own timeout (no logind clock), then
//! asks logind for the reboot; the service's drain at the shutdown then finds the node drained
//! and lets it go at once. A drain that did not complete reboots nothing unless `--force`.
//!
//! The daemon's reboot gate (`[fleet] gate`, `daemon::gate`) is a block lock logind would hold
//! this command's reboot to as well. logind's own way past a block lock (`Reboot` with the
//! ignore-inhibit polkit actions, `systemctl reboot -i`) needs polkit, which many node images
//! lack, and would also skip every other holder's lock; so the command instead asks the daemon
//! to drop its own (SIGUSR1 to the PID logind lists for it) and waits until logind no longer
//! lists it. Every other lock, block or delay, is honoured as for `systemctl reboot`.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::cli::slot_wait::{self, SlotWait};
use crate::cli::{CliError, EXIT_DONE, EXIT_INCOMPLETE, out};
use crate::config::Settings;
use crate::engine::Engine;
use crate::host::logind::{Logind, gate_holders};
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
    let mut engine = Engine::new(settings.clone())?.for_shutdown_kind(kind);
    if settings.fleet.slots > 0 && options.force {
        engine = engine.looking_once_for_a_slot();
        eprintln!(
            "--force: not waiting for a drain slot for node {node}; the drain takes one if one is \
             open now, else [fleet] on_no_slot = \"{}\" applies",
            settings.fleet.on_no_slot.as_str()
        );
    } else if settings.fleet.slots > 0 {
        engine = match slot_wait::wait(engine, options.slot_timeout, "not rebooting").await? {
            SlotWait::Holding(engine) => *engine,
            SlotWait::Full => return Ok(EXIT_INCOMPLETE),
        };
    }
    let deadline = Instant::now() + options.drain_timeout;
    let (prepared, report) = engine.prepare_and_drain(WHY, deadline, |_| {}).await;
    prepared?;
    out!("{}", report.to_text());
    if !report.complete && !options.force {
        eprintln!(
            "not rebooting node {node}: the drain did not complete (above); the node stays \
             cordoned: `kube-shutdown-drain restore` undoes it, `--force` reboots anyway"
        );
        return Ok(EXIT_INCOMPLETE);
    }
    let what = if options.poweroff {
        "power off"
    } else {
        "reboot"
    };
    let logind = Logind::connect()
        .await
        .map_err(|e| anyhow::anyhow!("cannot ask logind to {what} node {node}: {e}"))?;
    open_gate(&logind, &node).await?;
    logind
        .shut_down(options.poweroff)
        .await
        .map_err(|e| anyhow::anyhow!("cannot {what} node {node}: {e}"))?;
    eprintln!("asked logind to {what} node {node}");
    Ok(EXIT_DONE)
}

/// How long the daemon has to drop its gate after SIGUSR1.
const GATE_OPEN_MAX: Duration = Duration::from_secs(5);

/// Asks the daemon to open its reboot gate (SIGUSR1 to each PID logind lists for a block lock
/// of ours) and waits until logind lists none. Nothing when no gate is held.
async fn open_gate(logind: &Logind, node: &str) -> Result<(), CliError> {
    let list = || async {
        logind
            .list_inhibitors()
            .await
            .map(|locks| gate_holders(&locks))
            .map_err(|e| anyhow::anyhow!("cannot look for the reboot gate of node {node}: {e}"))
    };
    let holders = list().await?;
    if holders.is_empty() {
        return Ok(());
    }
    for &pid in &holders {
        let target = nix::unistd::Pid::from_raw(pid as i32);
        nix::sys::signal::kill(target, nix::sys::signal::Signal::SIGUSR1).map_err(|e| {
            anyhow::anyhow!(
                "cannot ask the daemon (PID {pid}) to open the reboot gate of node {node}: {e}; \
                 `systemctl stop kube-shutdown-drain` drops it"
            )
        })?;
    }
    eprintln!("asked the daemon (PID {holders:?}) to open the reboot gate of node {node}");
    let until = Instant::now() + GATE_OPEN_MAX;
    loop {
        let left = list().await?;
        if left.is_empty() {
            return Ok(());
        }
        if Instant::now() >= until {
            return Err(anyhow::anyhow!(
                "the reboot gate of node {node} (block lock of PID {left:?}) did not open within \
                 {} s; `systemctl stop kube-shutdown-drain` drops it",
                GATE_OPEN_MAX.as_secs()
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
