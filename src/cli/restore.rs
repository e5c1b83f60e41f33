//! `restore`: undo what the marker says we changed, and clear the marker.

use std::sync::Arc;

use crate::cli::{CliError, EXIT_DONE};
use crate::config::Settings;
use crate::engine::{Engine, describe_cordon};

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
    match &out.marker {
        None if out.foreign_marker.is_some() => {
            println!("node {node}: foreign marker cleared; cordon and taints left as they are")
        }
        None => println!("node {node}: no marker of ours; nothing to restore"),
        Some(m) => {
            let cordon = describe_cordon(&out, m);
            let taint = if out.untainted {
                "taint removed"
            } else {
                "no taint of ours to remove"
            };
            println!("node {node}: {cordon}, {taint}, marker cleared");
        }
    }
    Ok(EXIT_DONE)
}
