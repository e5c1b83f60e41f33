//! The fleet view for people: the nodes, the slots, the pause and the progress line, as
//! kubectl prints a table (columns padded by 3 spaces, ages as `HumanDuration` writes them).
//! Text from the cluster is shown escaped ([`crate::text::escaped`]): an annotation or an
//! Event message can do nothing to a terminal.

use jiff::Timestamp;

use super::{FleetView, LastDrain, NodeRow, Outcome, SlotRow};
use crate::reboot::holds::PAUSE_LEASE;
use crate::text::{cut, escaped};

/// The longest detail a narrow table shows (`wide` shows it whole).
const DETAIL_NARROW: usize = 100;
/// The longest part of the last drain's message the wide table shows.
const LAST_DRAIN_WIDE: usize = 80;

/// The view as lines for a person: the nodes, the slots, the pause and the progress line;
/// `wide` adds columns (group, slot, place, Ready, boot ID, traces, the last drain's message)
/// and shows each detail whole and each time as a timestamp.
pub fn text(view: &FleetView, wide: bool) -> String {
    let now = view.observed_at;
    let mut out = String::new();
    if view.nodes.is_empty() {
        out.push_str("no node shows a trace of kube-shutdown-drain\n");
    } else {
        let mut head = vec!["NODE", "STATE", "SINCE"];
        if wide {
            head.extend(["GROUP", "SLOT", "PLACE", "READY", "BOOT", "TRACES"]);
        }
        head.extend(["LAST DRAIN", "DETAIL"]);
        let mut rows = vec![head.into_iter().map(str::to_string).collect()];
        rows.extend(view.nodes.iter().map(|r| node_cells(r, now, wide)));
        out.push_str(&table(&rows));
    }
    out.push('\n');
    if view.slots.is_empty() {
        out.push_str("no drain slot Lease in namespace ");
        out.push_str(&escaped(&view.namespace));
        out.push('\n');
    } else {
        let mut head = vec!["GROUP", "SLOT", "HOLDER", "SINCE"];
        if wide {
            head.push("RENEWED");
        }
        head.push("STALE");
        let mut rows = vec![head.into_iter().map(str::to_string).collect()];
        rows.extend(view.slots.iter().map(|s| slot_cells(s, now, wide)));
        out.push_str(&table(&rows));
    }
    out.push('\n');
    out.push_str(&pause_line(view, wide));
    out.push('\n');
    out.push_str(&progress_line(view));
    out.push('\n');
    out
}

/// One line of the wave's progress, for `--watch`: `done N / to do M, wave: NODES, estimate:
/// ...` (`no estimate yet` until a node is done).
pub fn progress_line(view: &FleetView) -> String {
    let p = &view.progress;
    let wave = if p.wave.is_empty() {
        "none".to_string()
    } else {
        p.wave.join(", ")
    };
    let estimate = match (&p.estimate, p.to_do) {
        (_, 0) => "nothing left to do".to_string(),
        (Some(e), _) => format!(
            "done by {} (in {}, {:.1} nodes an hour)",
            second(e.finishes_at),
            human(view.observed_at, e.finishes_at),
            e.per_hour
        ),
        (None, _) => "no estimate yet".to_string(),
    };
    let started = p
        .wave_started
        .map(|t| format!(" since {}", second(t)))
        .unwrap_or_default();
    format!(
        "done {} / to do {}{started}, wave: {}, estimate: {estimate}",
        p.done,
        p.to_do,
        escaped(&wave)
    )
}

fn node_cells(r: &NodeRow, now: Timestamp, wide: bool) -> Vec<String> {
    let dash = || "-".to_string();
    let mut cells = vec![
        escaped(&r.node),
        r.state.as_str().to_string(),
        r.since.map_or_else(dash, |t| when(now, t, wide)),
    ];
    if wide {
        cells.extend([
            r.group.as_deref().map_or_else(dash, escaped),
            r.slot.as_deref().map_or_else(dash, escaped),
            r.place
                .as_ref()
                .map_or_else(dash, |p| format!("{}/{}", p.number, p.of)),
            r.ready.as_deref().map_or_else(dash, escaped),
            r.boot_id.as_deref().map_or_else(dash, escaped),
            r.traces.join(","),
        ]);
    }
    cells.push(last_drain(&r.last_drain, now, wide));
    let detail = escaped(&r.detail);
    cells.push(if wide {
        detail
    } else {
        cut(&detail, DETAIL_NARROW)
    });
    cells
}

/// The outcome and how long ago; wide adds the message.
fn last_drain(d: &LastDrain, now: Timestamp, wide: bool) -> String {
    let outcome = match d.outcome {
        Outcome::Complete => "complete",
        Outcome::Incomplete => "incomplete",
        Outcome::DeadlineReached => "deadline-reached",
        Outcome::Unknown => "unknown",
    };
    let mut out = outcome.to_string();
    if let Some(at) = d.at {
        out.push_str(&format!(" ({})", when(now, at, wide)));
    }
    if wide && let Some(m) = &d.message {
        out.push_str(&format!(": {}", cut(&escaped(m), LAST_DRAIN_WIDE)));
    }
    out
}

fn slot_cells(s: &SlotRow, now: Timestamp, wide: bool) -> Vec<String> {
    let dash = || "-".to_string();
    let mut cells = vec![
        escaped(&s.group),
        escaped(&s.slot),
        s.holder
            .as_deref()
            .map_or_else(|| "(free)".to_string(), escaped),
        s.since.map_or_else(dash, |t| when(now, t, wide)),
    ];
    if wide {
        cells.push(s.renewed.map_or_else(dash, |t| when(now, t, wide)));
    }
    cells.push(match (&s.stale, &s.holder) {
        (Some(why), _) => format!("yes: {}", escaped(why)),
        (None, Some(_)) => "no".to_string(),
        (None, None) => "-".to_string(),
    });
    cells
}

fn pause_line(view: &FleetView, wide: bool) -> String {
    let Some(p) = &view.pause else {
        return "not paused".to_string();
    };
    let since = p
        .since
        .map(|t| format!(" since {}", when(view.observed_at, t, wide)))
        .unwrap_or_default();
    let by = if p.by.is_empty() {
        String::new()
    } else {
        format!(" by {}", escaped(&p.by.join(", ")))
    };
    let reason = p
        .reason
        .as_deref()
        .map(|r| format!(": {}", escaped(r)))
        .unwrap_or_default();
    format!(
        "PAUSED{since}{by}{reason} (every reboot waits until Lease {}/{PAUSE_LEASE} is deleted)",
        escaped(&view.namespace)
    )
}

/// `t` as the age kubectl shows, or in `wide` the timestamp to the second.
fn when(now: Timestamp, t: Timestamp, wide: bool) -> String {
    if wide { second(t) } else { human(t, now) }
}

/// A timestamp to the second: `2026-12-06T20:01:02Z`.
fn second(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The time from `from` to `to` as kubectl writes an age (`HumanDuration` in
/// k8s.io/apimachinery/pkg/util/duration/duration.go): `45s`, `4m10s`, `25m`, `3h5m`, `20h`,
/// `2d3h`, `40d`, `2y10d`, `9y`.
pub(super) fn human(from: Timestamp, to: Timestamp) -> String {
    let secs = from.duration_until(to).as_secs();
    if secs < -1 {
        return "<invalid>".to_string();
    }
    let secs = secs.max(0);
    let (mins, hours) = (secs / 60, secs / 3600);
    let pair = |a: i64, x: &str, b: i64, y: &str| {
        if b == 0 {
            format!("{a}{x}")
        } else {
            format!("{a}{x}{b}{y}")
        }
    };
    match () {
        _ if secs < 120 => format!("{secs}s"),
        _ if mins < 10 => pair(mins, "m", secs % 60, "s"),
        _ if mins < 180 => format!("{mins}m"),
        _ if hours < 8 => pair(hours, "h", mins % 60, "m"),
        _ if hours < 48 => format!("{hours}h"),
        _ if hours < 24 * 8 => pair(hours / 24, "d", hours % 24, "h"),
        _ if hours < 24 * 365 * 2 => format!("{}d", hours / 24),
        _ if hours < 24 * 365 * 8 => pair(hours / 24 / 365, "y", hours / 24 % 365, "d"),
        _ => format!("{}y", hours / 24 / 365),
    }
}

/// `rows` as columns: every cell but the last padded to its column's width, 3 spaces apart.
fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for row in rows {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            line.push_str(cell);
            if i + 1 < row.len() {
                let pad = widths[i] - cell.chars().count() + 3;
                line.push_str(&" ".repeat(pad));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}
