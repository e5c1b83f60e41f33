//! `status`: the marker, our taint, the cordon and the last report. Much of what it prints comes
//! from the Node (the marker, managers' names, reasons) or from state files, which anyone who can
//! write them fills: every text line goes out with its control characters escaped
//! ([`crate::text::escaped`]), so a marker cannot drive the admin's terminal; JSON escapes them
//! by itself.

use std::sync::Arc;

use serde::Serialize;

use crate::cli::{CliError, EXIT_DONE, Output, outln, print_json};
use crate::config::Settings;
use crate::engine::Engine;
use crate::host::boot_record::{self, PreviousBoot};
use crate::node::marker::restore_patch;
use crate::node::{Marker, MarkerRead, read_marker};
use crate::report::Report;

/// `outln!` with the line's control characters escaped.
macro_rules! say {
    ($($arg:tt)*) => {
        outln!("{}", crate::text::escaped(&format!($($arg)*)))
    };
}

#[derive(Serialize)]
struct Status {
    node: String,
    cordoned: bool,
    taint_present: bool,
    marker: Option<Marker>,
    /// Our annotation holds something we cannot have written (why); restore clears it and
    /// undoes nothing.
    foreign_marker: Option<String>,
    /// The marker says we cordoned and the node is cordoned, but the cordon is not provably
    /// ours (why): restore will leave it.
    cordon_kept: Option<String>,
    /// The marker says we added the load-balancer exclusion label and it is there, but it is not
    /// provably ours any more (why): restore will leave it.
    label_kept: Option<String>,
    last_report: Option<Report>,
    /// How the boot before this one ended, as the daemon judged it at its start (`boot-record`).
    previous_boot: Option<PreviousBoot>,
    /// With `[restore] wait_for_pods` / `wait_for_conditions`: what of the node's agents a boot
    /// restore would wait for now (`None`: nothing, or nothing configured).
    restore_waits_for: Option<String>,
    /// With `[fleet] slots`: the slots of this node's group and their holders.
    #[serde(skip_serializing_if = "Option::is_none")]
    drain_slots: Option<Vec<crate::fleet::slots::SlotView>>,
    /// With `[fleet] slots`, a slot held by this node and no marker (restored): what the slot
    /// waits for before the daemon gives it back (`[fleet] settle_max`).
    #[serde(skip_serializing_if = "Option::is_none")]
    settling: Option<String>,
    /// With `[fleet] slots`: why the slots could not be read (the kubelet's credentials may
    /// not read Leases outside `kube-node-lease`); the rest is shown all the same.
    #[serde(skip_serializing_if = "Option::is_none")]
    drain_slots_error: Option<String>,
    /// With a `[reboot]` trigger: whether a reboot is needed and what holds it.
    #[serde(skip_serializing_if = "Option::is_none")]
    reboot: Option<super::status_reboot::RebootView>,
}

pub async fn run(settings: Arc<Settings>, output: Output) -> Result<u8, CliError> {
    let engine = Engine::new(settings.clone())?;
    let status = read(&settings, &engine).await?;
    match output {
        Output::Json => print_json(&status)?,
        Output::Text => say_status(&settings, &status, engine.waits_for_agents()).await,
    }
    Ok(EXIT_DONE)
}

/// Reads the node, the state files and (with `[fleet] slots`) the drain slots; sends nothing.
async fn read(settings: &Arc<Settings>, engine: &Engine) -> Result<Status, CliError> {
    let node = engine.node().await?;
    let (marker, foreign_marker) = match read_marker(&node) {
        MarkerRead::Absent => (None, None),
        MarkerRead::Ours(m) => (Some(m), None),
        MarkerRead::Foreign(why) => (None, Some(why.to_string())),
    };
    // What a restore would leave, from the restore's own builder (nothing is sent).
    let (cordon_kept, label_kept) = marker
        .as_ref()
        .and_then(|m| restore_patch(&node, &settings.node_name, m, &settings.taint.key, true).ok())
        .map_or((None, None), |(_, plan)| {
            (plan.cordon_kept, plan.label_kept)
        });
    let restore_waits_for = if engine.waits_for_agents() {
        engine.agents_waiting(&node).await?
    } else {
        None
    };
    let (drain_slots, drain_slots_error) = if settings.fleet.slots > 0 {
        let slots = crate::fleet::slots::Slots {
            clients: engine.clients().await?,
            settings,
        };
        match slots.look(&node).await {
            Ok(views) => (Some(views), None),
            Err(e) => (None, Some(slots_unread(settings, &e))),
        }
    } else {
        (None, None)
    };
    let settling = match &drain_slots {
        Some(views) if marker.is_none() && foreign_marker.is_none() => {
            settling(engine, &settings.node_name, views).await
        }
        _ => None,
    };
    let spec = node.spec.unwrap_or_default();
    Ok(Status {
        settling,
        node: settings.node_name.clone(),
        cordoned: spec.unschedulable.unwrap_or(false),
        taint_present: spec
            .taints
            .unwrap_or_default()
            .iter()
            .any(|t| settings.taint.matches(t)),
        marker,
        foreign_marker,
        cordon_kept,
        label_kept,
        last_report: engine.last_report()?,
        previous_boot: previous_boot(settings),
        restore_waits_for,
        drain_slots,
        drain_slots_error,
        reboot: super::status_reboot::read(settings, engine).await,
    })
}

/// `status` as text: one line per thing, the node's name first. `waits`: whether `[restore]`
/// waits for node agents.
async fn say_status(settings: &Arc<Settings>, status: &Status, waits: bool) {
    say!("node {}", status.node);
    say!("  cordoned:      {}", yes_no(status.cordoned));
    say!("  our taint:     {}", yes_no(status.taint_present));
    say_marker(status);
    if let Some(why) = &status.cordon_kept {
        say!("  cordon:        not provably ours, restore leaves it: {why}");
    }
    if let Some(why) = &status.label_kept {
        say!("  lb exclusion:  not provably ours, restore leaves it: {why}");
    }
    if waits {
        match &status.restore_waits_for {
            None => say!("  node agents:   running ([restore] waits for nothing now)"),
            Some(left) => say!("  node agents:   a restore would wait for {left}"),
        }
    }
    if let Some(slots) = &status.drain_slots {
        say!(
            "  drain slots:   {}",
            slots_line(&status.node, slots, jiff::Timestamp::now())
        );
    }
    if let Some(settling) = &status.settling {
        say!("  settling:      {settling}");
    }
    if let Some(why) = &status.drain_slots_error {
        say!("  drain slots:   cannot be read: {why}");
    }
    super::logind_lines::logind_time_limit(settings, "  ").await;
    super::logind_lines::gate(settings, "  ").await;
    super::forecast::line(settings, "  ").await;
    if let Some(view) = &status.reboot {
        for line in super::status_reboot::say(view) {
            say!("{line}");
        }
    }
    match &status.last_report {
        None => say!("  last report:   none"),
        Some(r) => say!(
            "  last report:   {} (started {})",
            r.summary(),
            r.started_at
        ),
    }
    say_previous_boot(status);
}

/// The marker line: ours (what a restore will undo), foreign, or none.
fn say_marker(status: &Status) {
    match &status.marker {
        None if status.foreign_marker.is_some() => say!(
            "  marker:        FOREIGN, not one we wrote ({}); restore clears it and undoes nothing",
            status.foreign_marker.as_deref().unwrap_or_default()
        ),
        None => say!("  marker:        none"),
        Some(m) => {
            say!(
                "  marker:        written {} by boot {} ({}); was cordoned before: {}, taint was there before: {}",
                m.time,
                m.boot_id,
                m.why,
                yes_no(m.was_unschedulable),
                yes_no(m.taint_was_present)
            );
            // What a restore will undo: only what the marker says we did.
            let taints: Vec<String> = m.taints.iter().map(ToString::to_string).collect();
            say!(
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
}

/// For a restored node that still holds a slot: the budgets of its last drain's record it
/// waits for, and which are short now.
async fn settling(
    engine: &Engine,
    node: &str,
    views: &[crate::fleet::slots::SlotView],
) -> Option<String> {
    let mine = format!("{node}/");
    if !views
        .iter()
        .any(|v| v.holder.as_ref().is_some_and(|h| h.starts_with(&mine)))
    {
        return None;
    }
    let covering = engine.last_report().ok()??.settle?;
    let what = match &covering {
        crate::report::Covering::Budgets(names) => names.join(", "),
        crate::report::Covering::Namespaces(ns) => format!("every budget in {}", ns.join(", ")),
    };
    Some(match engine.settle_now(&covering).await {
        Ok(short) if short.is_empty() => {
            format!("the budgets of its evicted pods are healthy again ({what})")
        }
        Ok(short) => format!(
            "its slot waits for the budgets of its evicted pods: {}",
            crate::text::outside(&short.join("; "))
        ),
        Err(e) => format!("its slot waits for {what}, which cannot be read: {e}"),
    })
}

/// Why the drain slots could not be read, from `e`; a refusal says what the credentials lack.
fn slots_unread(settings: &Settings, e: &crate::api::ApiError) -> String {
    if e.is_forbidden() {
        format!(
            "{e}; the slot Leases in namespace {} need the node's own identity, not the \
             kubelet's (docs/credentials.md)",
            settings.fleet.lease_namespace
        )
    } else {
        e.to_string()
    }
}

/// The drain slots of `node`'s group and their holders, as one line, at `now`: a holder's time
/// ahead of this node's clock is said as such, not as "since". Pure.
fn slots_line(node: &str, slots: &[crate::fleet::slots::SlotView], now: jiff::Timestamp) -> String {
    let me = format!("{node}/");
    let skew = jiff::SignedDuration::try_from(crate::fleet::CLOCK_SKEW_MAX).unwrap_or_default();
    let each: Vec<String> = slots
        .iter()
        .map(|v| {
            let Some(h) = &v.holder else {
                return format!("{} free", v.name);
            };
            let when =
                v.since
                    .as_deref()
                    .map_or(String::new(), |t| match t.parse::<jiff::Timestamp>() {
                        Ok(at) if now.duration_until(at) > skew => format!(
                            " renewed at {t}, in the future of this node's clock (clock skew?)"
                        ),
                        _ => format!(" since {t}"),
                    });
            let mine = if h.starts_with(&me) {
                " (this node)"
            } else {
                ""
            };
            format!("{} held by {h}{when}{mine}", v.name)
        })
        .collect();
    each.join("; ")
}

/// How the boot before this one ended, as the daemon judged it.
fn say_previous_boot(status: &Status) {
    match &status.previous_boot {
        None => {
            say!("  previous boot: not judged (no earlier boot recorded in the state dir)")
        }
        Some(p) => match p.unclean {
            None => say!("  previous boot: {}", p.message),
            Some(reason) => say!(
                "  previous boot: UNCLEAN ({reason:?}): {}; Event {}",
                p.message,
                if p.event_posted {
                    "written"
                } else {
                    "not written yet (the daemon retries)"
                }
            ),
        },
    }
}

/// The daemon's verdict on the previous boot; a record that cannot be read is said on stderr.
fn previous_boot(settings: &Settings) -> Option<PreviousBoot> {
    match boot_record::read(&settings.state_dir) {
        Ok(record) => record.and_then(|r| r.previous),
        Err(e) => {
            tracing::warn!("{e}");
            None
        }
    }
}

fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::slots::SlotView;

    fn view(name: &str, holder: Option<&str>, since: Option<&str>) -> SlotView {
        SlotView {
            name: name.into(),
            holder: holder.map(str::to_string),
            since: since.map(str::to_string),
        }
    }

    /// A holder's time more than the skew ahead is not shown as "since" (issue 40 item 7).
    #[test]
    fn a_slot_renewed_in_the_future_is_said_so_not_since() {
        let now: jiff::Timestamp = "2026-12-02T06:00:00Z".parse().unwrap();
        let slots = [
            view(
                "slot-0",
                Some("node-b/boot-1"),
                Some("2026-12-03T06:00:00Z"),
            ),
            view(
                "slot-1",
                Some("node-a/boot-2"),
                Some("2026-12-02T06:00:30Z"),
            ),
            view("slot-2", None, None),
        ];
        assert_eq!(
            slots_line("node-a", &slots, now),
            "slot-0 held by node-b/boot-1 renewed at 2026-12-03T06:00:00Z, in the future of \
             this node's clock (clock skew?); slot-1 held by node-a/boot-2 since \
             2026-12-02T06:00:30Z (this node); slot-2 free"
        );
    }
}
