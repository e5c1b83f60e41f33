//! `restore`: undo what the marker says we changed, and clear the marker; without a marker, undo
//! only what managedFields prove ours and name the rest of ours with its command.

use std::sync::Arc;

use crate::cli::{CliError, EXIT_DONE, outln};
use crate::config::Settings;
use crate::engine::Engine;

pub async fn run(settings: Arc<Settings>) -> Result<u8, CliError> {
    let node = settings.node_name.clone();
    let engine = Engine::new(settings)?;
    let out = engine.restore().await?;
    if let Some(why) = &out.foreign_marker {
        eprintln!(
            "warning: node {node}: the marker annotation was not one we wrote ({why}); cleared it and undid nothing"
        );
    }
    for t in &out.refused_taints {
        eprintln!(
            "warning: node {node}: the marker listed taint {t}, whose key is not ours; left it"
        );
    }
    outln!("node {node}: {}", crate::engine::restore_text(&out));
    Ok(EXIT_DONE)
}
