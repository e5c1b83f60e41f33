//! `restore`: undo what the marker says we changed, and clear the marker.

use std::sync::Arc;

use crate::cli::{CliError, EXIT_DONE, outln};
use crate::config::Settings;
use crate::engine::Engine;

pub async fn run(settings: Arc<Settings>) -> Result<u8, CliError> {
    let node = settings.node_name.clone();
    let engine = Engine::new(settings)?;
    let out = engine.restore().await?;
    outln!("node {node}: {}", crate::engine::restore_text(&out));
    Ok(EXIT_DONE)
}
