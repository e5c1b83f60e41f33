//! `drain`: prepare (marker, taint, cordon) and drain the node now, by hand. With `[fleet]
//! slots` it first waits for a drain slot as `reboot` does (none in time: nothing changes), and
//! keeps it until `restore`; `--no-slot` drains without one.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::cli::slot_wait::{self, SlotWait};
use crate::cli::{CliError, EXIT_DONE, EXIT_INCOMPLETE, Output, out, print_json};
use crate::config::Settings;
use crate::drain::DrainOptions;
use crate::engine::Engine;

/// The `why` recorded in the marker and the report.
pub const WHY: &str = "drain by hand";

/// The command line's choices.
#[derive(Debug, Clone)]
pub struct Options {
    pub dry_run: bool,
    pub output: Output,
    /// How long to wait for a drain slot (with `[fleet] slots`).
    pub slot_timeout: Duration,
    /// Drain without a slot even with `[fleet] slots`.
    pub no_slot: bool,
}

pub async fn run(settings: Arc<Settings>, options: Options) -> Result<u8, CliError> {
    let node = settings.node_name.clone();
    let dry_run = options.dry_run;
    let mut engine = Engine::new(settings.clone())?;
    if settings.fleet.slots > 0 && !dry_run {
        if options.no_slot {
            eprintln!(
                "--no-slot: node {node} drains without a drain slot ([fleet] slots = {}): it may \
                 drain while other nodes hold every slot",
                settings.fleet.slots
            );
        } else {
            engine = match slot_wait::wait(engine, options.slot_timeout, "not draining").await? {
                SlotWait::Holding(engine) => *engine,
                SlotWait::Full => return Ok(EXIT_INCOMPLETE),
            };
        }
    }
    let deadline = Instant::now() + settings.drain.timeout;
    if dry_run {
        engine.node().await?;
    } else {
        let prepared = engine.prepare_by(WHY, deadline).await?;
        if prepared.taint_forbidden {
            eprintln!(
                "warning: these credentials may not taint node {node}; it is cordoned without the taint"
            );
        }
    }
    let report = engine
        .drain_with(
            deadline,
            DrainOptions {
                why: WHY.to_string(),
                dry_run,
                grace_to: None,
            },
        )
        .await;
    match options.output {
        Output::Json => print_json(&report)?,
        Output::Text => out!("{}", report.to_text()),
    }
    Ok(if report.complete {
        EXIT_DONE
    } else {
        EXIT_INCOMPLETE
    })
}
