//! `plan`: what a drain would do now. Changes nothing.

use std::sync::Arc;

use crate::cli::{CliError, EXIT_DONE, Output, out, print_json};
use crate::config::Settings;
use crate::engine::Engine;

pub async fn run(settings: Arc<Settings>, output: Output) -> Result<u8, CliError> {
    if let Some(w) = crate::config::advice::taint_effect(&settings) {
        eprintln!("warning: {w}");
    }
    let engine = Engine::new(settings)?;
    // The node must exist: a plan of a node that is not there would be an empty list.
    engine.node().await?;
    let plan = engine.plan().await?;
    match output {
        Output::Json => print_json(&plan)?,
        Output::Text => out!("{}", plan.to_text()),
    }
    Ok(EXIT_DONE)
}
