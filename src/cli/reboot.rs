//! `reboot`: how an admin or an update agent reboots a node of a fleet. It waits for a drain
//! slot (`[fleet] slots`) as long as told, drains with its own timeout (no logind clock), then
//! asks logind for the reboot; the service's drain at the shutdown then finds the node drained
//! and lets it go at once. A drain that did not complete reboots nothing unless `--force`.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::cli::{CliError, EXIT_DONE, EXIT_INCOMPLETE, out};
use crate::config::Settings;
use crate::daemon::logind::Logind;
use crate::engine::Engine;
use crate::fleet::slots::Taken;
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
    if settings.fleet.slots > 0 {
        eprintln!(
            "waiting up to {} s for a drain slot for node {node}",
            options.slot_timeout.as_secs()
        );
        match engine
            .wait_for_slot(Instant::now() + options.slot_timeout)
            .await?
        {
            Taken::Slot(name) => eprintln!("node {node} holds drain slot {name}"),
            Taken::Full(holders) => {
                eprintln!(
                    "no drain slot for node {node} within {} s: held by {}; nothing changed, \
                     not rebooting",
                    options.slot_timeout.as_secs(),
                    holders.join(", ")
                );
                return Ok(EXIT_INCOMPLETE);
            }
        }
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
    logind
        .shut_down(options.poweroff)
        .await
        .map_err(|e| anyhow::anyhow!("cannot {what} node {node}: {e}"))?;
    eprintln!("asked logind to {what} node {node}");
    Ok(EXIT_DONE)
}
