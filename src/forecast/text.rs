//! The forecast for a person: the verdict, the time limit and the estimate, a line per pod, each
//! blocking budget with its fix, the node-level fixes and what was assumed.

use std::fmt::Write as _;

use super::{Forecast, Verdict};
use crate::policy::plan::key_width;

impl Forecast {
    /// The text output of `forecast`.
    pub fn to_text(&self) -> String {
        let b = &self.time_limit;
        let mut out = format!("{}\n", self.summary);
        let _ = writeln!(
            out,
            "budget: {} s for the drain (drain.timeout {} s; logind InhibitDelayMaxSec {} s, {}; release margin {} s)",
            b.drain_seconds,
            b.drain_timeout_seconds,
            b.logind_max_seconds,
            b.logind,
            b.release_margin_seconds
        );
        match self.estimate_seconds {
            Some(e) => {
                let _ = writeln!(
                    out,
                    "estimate: done {e:.1} s after the start, of {} s (grace periods as upper bounds where the last \
                     drain has no timing)",
                    b.drain_seconds
                );
            }
            None => {
                let _ = writeln!(
                    out,
                    "estimate: blocked pods hold the drain until its deadline"
                );
            }
        }
        if !self.volumes.is_empty() {
            let _ = writeln!(out, "volumes to detach: {}", self.volumes.join(", "));
        }
        let width = key_width(
            self.pods
                .iter()
                .map(|p| format!("{}/{}", p.namespace, p.name)),
        );
        let _ = writeln!(out, "{:<width$}  {:<19}  WHY", "POD", "VERDICT");
        for p in &self.pods {
            let key = format!("{}/{}", p.namespace, p.name);
            let _ = writeln!(
                out,
                "{key:<width$}  {:<19}  {}",
                p.verdict.as_str(),
                p.detail
            );
            if let (Some(fix), true) = (&p.fix, p.verdict != Verdict::Completes) {
                let _ = writeln!(out, "{:<width$}  {:<19}  fix: {fix}", "", "");
            }
        }
        if !self.blocking_budgets.is_empty() {
            let _ = writeln!(out, "blocking budgets:");
            for bb in &self.blocking_budgets {
                let _ = writeln!(
                    out,
                    "  {} keeps {} (allows {} disruptions; needs {} healthy, has {}, {} expected); fix: {}",
                    bb.budget,
                    bb.pods.join(", "),
                    bb.disruptions_allowed,
                    bb.desired_healthy,
                    bb.current_healthy,
                    bb.expected_pods,
                    bb.fix
                );
            }
        }
        for f in &self.fixes {
            let _ = writeln!(out, "fix: {f}");
        }
        for a in &self.assumptions {
            let _ = writeln!(out, "assumed: {a}");
        }
        out
    }
}
