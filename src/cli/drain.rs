//! `drain`: prepare (marker, taint, cordon) and drain the node now, by hand.

use std::sync::Arc;

use tokio::time::Instant;

use crate::cli::{CliError, EXIT_DONE, EXIT_INCOMPLETE, Output, out, print_json};
use crate::config::Settings;
use crate::drain::DrainOptions;
use crate::engine::Engine;

/// The `why` recorded in the marker and the report.
pub const WHY: &str = "drain by hand";

pub async fn run(settings: Arc<Settings>, dry_run: bool, output: Output) -> Result<u8, CliError> {
    let deadline = Instant::now() + settings.drain.timeout;
    let engine = Engine::new(settings)?;
    if dry_run {
        engine.node().await?;
    } else {
        let prepared = engine.prepare_by(WHY, deadline).await?;
        if prepared.taint_forbidden {
            eprintln!(
                "warning: these credentials may not taint node {}; it is cordoned without the taint",
                engine.settings().node_name
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
    match output {
        Output::Json => print_json(&report)?,
        Output::Text => out!("{}", report.to_text()),
    }
    Ok(if report.complete {
        EXIT_DONE
    } else {
        EXIT_INCOMPLETE
    })
}
