//! `status`: the marker, our taint, the cordon and the last report.

use std::sync::Arc;

use serde::Serialize;

use crate::cli::{CliError, EXIT_DONE, Output, outln, print_json};
use crate::config::Settings;
use crate::engine::Engine;
use crate::node::{Marker, marker_of};
use crate::report::Report;

#[derive(Serialize)]
struct Status {
    node: String,
    cordoned: bool,
    taint_present: bool,
    marker: Option<Marker>,
    last_report: Option<Report>,
}

pub async fn run(settings: Arc<Settings>, output: Output) -> Result<u8, CliError> {
    let engine = Engine::new(settings.clone())?;
    let node = engine.node().await?;
    let marker = marker_of(&node, &settings.node_name).map_err(crate::engine::Error::from)?;
    let spec = node.spec.unwrap_or_default();
    let status = Status {
        node: settings.node_name.clone(),
        cordoned: spec.unschedulable.unwrap_or(false),
        taint_present: spec
            .taints
            .unwrap_or_default()
            .iter()
            .any(|t| t.key == settings.taint.key && t.effect == settings.taint.effect.as_str()),
        marker,
        last_report: engine.last_report()?,
    };
    match output {
        Output::Json => print_json(&status)?,
        Output::Text => {
            outln!("node {}", status.node);
            outln!("  cordoned:      {}", yes_no(status.cordoned));
            outln!("  our taint:     {}", yes_no(status.taint_present));
            match &status.marker {
                None => outln!("  marker:        none"),
                Some(m) => {
                    outln!(
                        "  marker:        written {} by boot {} ({}); was cordoned before: {}, taint was there before: {}",
                        m.time,
                        m.boot_id,
                        m.why,
                        yes_no(m.was_unschedulable),
                        yes_no(m.taint_was_present)
                    );
                    // What a restore will undo: only what the marker says we did.
                    let taints: Vec<String> = m.taints.iter().map(ToString::to_string).collect();
                    outln!(
                        "  we cordoned:   {}; taints we added: {}",
                        yes_no(m.cordoned),
                        if taints.is_empty() {
                            "none".to_owned()
                        } else {
                            taints.join(", ")
                        }
                    );
                }
            }
            super::check::logind_budget(&settings, "  ").await;
            match &status.last_report {
                None => outln!("  last report:   none"),
                Some(r) => outln!(
                    "  last report:   {} (started {})",
                    r.summary(),
                    r.started_at
                ),
            }
        }
    }
    Ok(EXIT_DONE)
}

fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}
