//! `restore`: undo what the marker says we changed, and clear the marker.

use std::sync::Arc;

use crate::cli::{CliError, EXIT_DONE, outln};
use crate::config::Settings;
use crate::engine::Engine;

pub async fn run(settings: Arc<Settings>) -> Result<u8, CliError> {
    let node = settings.node_name.clone();
    let engine = Engine::new(settings)?;
    let out = engine.restore().await?;
    match &out.marker {
        None => outln!("node {node}: no marker of ours; nothing to restore"),
        Some(m) => {
            let cordon = if out.uncordoned {
                "uncordoned"
            } else if !m.cordoned {
                "cordon left as it was (we did not cordon it)"
            } else {
                "already uncordoned"
            };
            let taint = if out.untainted {
                "taint removed"
            } else {
                "no taint of ours to remove"
            };
            outln!("node {node}: {cordon}, {taint}, marker cleared");
        }
    }
    Ok(EXIT_DONE)
}
