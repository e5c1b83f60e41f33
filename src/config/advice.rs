//! Advice about settings that are valid but defeat what the program is for, said by `check`,
//! `plan` and the daemon at start. Pure.

use super::{Settings, TaintEffect};

/// The advice for a taint effect that defeats the drain: a `NoExecute` taint makes the taint
/// manager delete every pod that does not tolerate it at once, ignoring PodDisruptionBudgets, the
/// drain's order and its filters. Said by `check`, `plan` and the daemon at start.
pub fn taint_effect(settings: &Settings) -> Option<String> {
    (settings.taint.enabled && settings.taint.effect == TaintEffect::NoExecute).then(|| {
        format!(
            "[taint] effect = \"NoExecute\" in {}: Kubernetes deletes every pod on the node that \
             does not tolerate taint {} at once, ignoring PodDisruptionBudgets and the drain's \
             order; use \"PreferNoSchedule\" (the default) or \"NoSchedule\"",
            settings
                .source
                .as_ref()
                .map_or("the built-in defaults".into(), |p| p.display().to_string()),
            settings.taint.key
        )
    })
}
