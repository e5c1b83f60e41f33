//! The record of the daemon's life in one boot (`<state_dir>/boot-record`), so the next start can
//! tell whether that boot ended with a drain by us.
//!
//! Written at the first connection to logind in a boot, when logind announces a shutdown, when
//! that shutdown's drain ends (or the shutdown is cancelled), and when the daemon is stopped with
//! no shutdown under way. The next boot judges it ([`judge`]): no shutdown announced means the
//! machine went down without one (power loss, panic, `reboot -f`): `ShutdownWithoutDrain`; a
//! shutdown whose drain never ended, or ended incomplete: `DrainIncomplete`. Either is posted once
//! as a Warning Event on the Node (retried until the API server takes it), counted in the
//! metrics and shown by `status`.
//!
//! A soft-reboot keeps the boot ID: a record of this boot holding a soft-reboot, read while logind
//! prepares no shutdown, is judged like a previous boot's (the daemon is a new process: the
//! soft-reboot stopped the old one).
//!
//! The record is also the one record of the shutdown under way: the moment logind announced it
//! (CLOCK_BOOTTIME, which keeps counting across process restarts within one boot), so a daemon
//! restarted during the shutdown counts its budget from logind's one timer, and a shutdown still
//! recorded when the daemon finds none under way was cancelled while it was away. Versions
//! before 0.2 kept that moment in a second file, `shutdown-started`; it is read once, folded in
//! and removed.
//!
//! The daemon writes the record through [`Writer`] (off the shutdown path); without one (tests,
//! tools) each change is written at once.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use nix::time::{ClockId, clock_gettime};
use serde::{Deserialize, Serialize};

use crate::config::Settings;
use crate::host::writer::{Ticket, Writer};
use crate::shutdown_kind::ShutdownKind;

/// The record's file name in the state directory.
pub const FILE: &str = "boot-record";
/// The file versions before 0.2 kept the shutdown's start in (`{boot_id, boottime_ns}`).
pub const LEGACY_SHUTDOWN_START: &str = "shutdown-started";

/// What the daemon saw of one boot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BootRecord {
    /// `/proc/sys/kernel/random/boot_id` of the boot.
    pub boot_id: String,
    /// RFC 3339: when the record was started (the daemon's first connection to logind).
    pub since: String,
    /// The shutdown logind announced in this boot, while it is not cancelled.
    #[serde(default)]
    pub shutdown: Option<ShutdownSeen>,
    /// RFC 3339: the daemon was stopped with no shutdown under way (cleared when it runs again).
    #[serde(default)]
    pub stopped_at: Option<String>,
    /// The verdict on the boot before this one.
    #[serde(default)]
    pub previous: Option<PreviousBoot>,
    /// Boots that ended unclean, as seen through this state directory (carried from record to
    /// record; the metrics' counters).
    #[serde(default)]
    pub unclean: UncleanCounts,
}

/// A shutdown announced by logind.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShutdownSeen {
    pub kind: ShutdownKind,
    /// RFC 3339.
    pub at: String,
    /// CLOCK_BOOTTIME at the announcement, in nanoseconds: where logind's one timer started.
    /// Absent in records of older versions and where the clock could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boottime_ns: Option<u64>,
    /// How the drain for it ended; `None` while it runs, and forever when the machine or the
    /// daemon went down during it.
    #[serde(default)]
    pub end: Option<ShutdownEnd>,
}

/// How the drain for a shutdown ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShutdownEnd {
    pub outcome: EndOutcome,
    /// The report's summary, or why it failed.
    pub detail: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum EndOutcome {
    /// Every pod went.
    Drained,
    /// The drain ran and left pods (deadline, budgets, errors).
    Incomplete,
    /// No drain could run (no client, the prepare used the budget, the budget already spent).
    Failed,
    /// `[shutdown]` said "cordon" for the kind.
    Cordoned,
    /// `[shutdown]` said "none" for the kind.
    LeftAsIs,
}

/// Why a boot's end was not clean; the names are the Node Events' reasons.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Unclean {
    ShutdownWithoutDrain,
    DrainIncomplete,
}

/// The verdict on the previous boot (or on the userspace before a soft-reboot).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreviousBoot {
    pub boot_id: String,
    /// `None`: it ended with a completed drain, or as the `[shutdown]` policy said.
    pub unclean: Option<Unclean>,
    /// One line for the log, the Event and `status`, naming the boot and the node.
    pub message: String,
    /// The Warning Event was written (only for an unclean end).
    #[serde(default)]
    pub event_posted: bool,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct UncleanCounts {
    pub shutdown_without_drain: u64,
    pub drain_incomplete: u64,
}

impl UncleanCounts {
    /// Counts one more; a count read from a forged record saturates instead of wrapping.
    fn add(&mut self, unclean: Unclean) {
        let count = match unclean {
            Unclean::ShutdownWithoutDrain => &mut self.shutdown_without_drain,
            Unclean::DrainIncomplete => &mut self.drain_incomplete,
        };
        *count = count.saturating_add(1);
    }
}

impl BootRecord {
    fn new(boot_id: &str) -> BootRecord {
        BootRecord {
            boot_id: boot_id.to_owned(),
            since: jiff::Timestamp::now().to_string(),
            shutdown: None,
            stopped_at: None,
            previous: None,
            unclean: UncleanCounts::default(),
        }
    }

    /// The record of the boot after `self` (`boot_id`), with the verdict on `self`.
    fn next(&self, boot_id: &str, node: &str) -> BootRecord {
        let previous = judge(self, node);
        let mut unclean = self.unclean;
        if let Some(why) = previous.unclean {
            unclean.add(why);
        }
        BootRecord {
            previous: Some(previous),
            unclean,
            ..BootRecord::new(boot_id)
        }
    }
}

/// The verdict on a finished boot's record. Pure.
pub fn judge(record: &BootRecord, node: &str) -> PreviousBoot {
    let boot = match &record.shutdown {
        Some(s) if s.kind.keeps_boot_id() => {
            format!("the userspace of boot {}", record.boot_id)
        }
        _ => format!("boot {}", record.boot_id),
    };
    let (unclean, message) = match &record.shutdown {
        None => (
            Some(Unclean::ShutdownWithoutDrain),
            match &record.stopped_at {
                Some(at) => format!(
                    "{boot} ended without a drain of node {node}: the daemon was stopped at {at} \
                     and no shutdown reached it afterwards"
                ),
                None => format!(
                    "{boot} ended without a drain of node {node}: logind announced no shutdown \
                     (power loss, a kernel panic or reset, or a forced reboot such as `reboot -f` \
                     or `systemctl reboot --force`)"
                ),
            },
        ),
        Some(s) => {
            let what = format!("the {} announced at {}", s.kind.noun(), s.at);
            match &s.end {
                None => (
                    Some(Unclean::DrainIncomplete),
                    format!(
                        "{boot} ended during the drain of node {node} for {what}: the machine \
                         or the daemon went down before the drain ended"
                    ),
                ),
                Some(end) => match end.outcome {
                    EndOutcome::Drained => (
                        None,
                        format!("{boot} ended after a complete drain of node {node} for {what}"),
                    ),
                    EndOutcome::Cordoned | EndOutcome::LeftAsIs => (
                        None,
                        format!(
                            "{boot} ended with {what}; node {node} was {} as [shutdown] says \
                             for that kind",
                            if end.outcome == EndOutcome::Cordoned {
                                "cordoned without a drain"
                            } else {
                                "left as it was"
                            }
                        ),
                    ),
                    EndOutcome::Incomplete | EndOutcome::Failed => (
                        Some(Unclean::DrainIncomplete),
                        format!(
                            "{boot} ended after an incomplete drain of node {node} for {what}: {}",
                            end.detail
                        ),
                    ),
                },
            }
        }
    };
    PreviousBoot {
        boot_id: record.boot_id.clone(),
        unclean,
        message,
        event_posted: false,
    }
}

/// Reads the record in `state_dir`, `None` when there is none.
pub fn read(state_dir: &Path) -> Result<Option<BootRecord>, crate::state_file::JsonError> {
    crate::state_file::read_json(&state_dir.join(FILE))
}

/// CLOCK_BOOTTIME now, as a duration since boot.
pub fn boottime_now() -> Result<Duration, nix::Error> {
    clock_gettime(ClockId::CLOCK_BOOTTIME).map(Duration::from)
}

/// The daemon's handle on this boot's record: every change is kept in memory and written (a
/// failure is logged, never fatal). Inactive (changes ignored) until [`BootLog::open`] succeeded.
#[derive(Clone, Default)]
pub struct BootLog {
    inner: Arc<Mutex<Option<Opened>>>,
    /// The daemon's file writer; without one, each change is written at once.
    writer: Option<Writer>,
    /// The last change handed to the writer.
    last: Arc<Mutex<Option<Ticket>>>,
}

struct Opened {
    state_dir: std::path::PathBuf,
    node: String,
    record: BootRecord,
}

impl BootLog {
    /// A handle whose changes are written by `writer`, off the caller's path.
    pub fn with_writer(writer: Writer) -> BootLog {
        BootLog {
            inner: Arc::default(),
            writer: Some(writer),
            last: Arc::default(),
        }
    }

    /// Reads the record at the daemon's first connection to logind (`under_way`: logind is
    /// preparing a shutdown now) and starts this boot's: judges the record of a previous boot,
    /// or of a soft-reboot that is over, and folds in an older version's `shutdown-started`.
    /// Returns the verdict whose Event is still to be posted.
    pub fn open(&self, settings: &Settings, under_way: bool) -> Option<PreviousBoot> {
        let node = &settings.node_name;
        let path = &settings.boot_id_path;
        let boot_id = match super::boot_id(path) {
            Ok(id) => id,
            Err(e) => {
                let path = path.display();
                tracing::warn!(
                    "cannot read the boot id from {path}: {e}; node {node}'s boots are not recorded"
                );
                return None;
            }
        };
        let old = read(&settings.state_dir).unwrap_or_else(|e| {
            tracing::warn!("{e}; starting a new record for node {node}");
            None
        });
        let soft_reboot_over = |r: &BootRecord| {
            !under_way && r.shutdown.as_ref().is_some_and(|s| s.kind.keeps_boot_id())
        };
        let judged_now = |r: &BootRecord| r.boot_id != boot_id || soft_reboot_over(r);
        let (mut record, judged) = match old {
            None => (BootRecord::new(&boot_id), false),
            Some(r) if judged_now(&r) => (r.next(&boot_id, node), true),
            Some(r) => (r, false),
        };
        record.stopped_at = None;
        fold_legacy_start(&mut record, settings);
        if judged && let Some(p) = &record.previous {
            if p.unclean.is_some() {
                tracing::warn!(node = %node, "{}", p.message);
            } else {
                tracing::info!(node = %node, "{}", p.message);
            }
        }
        let pending = record
            .previous
            .clone()
            .filter(|p| p.unclean.is_some() && !p.event_posted);
        *self.lock() = Some(Opened {
            state_dir: settings.state_dir.clone(),
            node: node.clone(),
            record,
        });
        self.change(|_| {});
        pending
    }

    /// This boot's record as it stands (`None` while inactive).
    pub fn record(&self) -> Option<BootRecord> {
        self.lock().as_ref().map(|o| o.record.clone())
    }

    /// logind announced a shutdown of `kind`. `announced_now`: its signal just came; else the
    /// daemon (re)started while it was under way, and a shutdown already recorded in this boot is
    /// that same one: kept as it is, with how an earlier daemon's drain for it ended.
    ///
    /// Returns where logind's timer started (CLOCK_BOOTTIME) when that is an earlier moment
    /// than now: the recorded start of a shutdown under way at (re)start. `None`: the budget
    /// counts from now (and now is recorded).
    pub fn shutdown_started(&self, kind: ShutdownKind, announced_now: bool) -> Option<Duration> {
        let now = boottime_now()
            .map_err(|e| tracing::warn!("cannot read CLOCK_BOOTTIME: {e}"))
            .ok();
        let mut counted_from = None;
        let now_ns = now.map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        self.change(|r| match &mut r.shutdown {
            Some(s) if !announced_now => match s.boottime_ns {
                Some(ns) => counted_from = Some(Duration::from_nanos(ns)),
                None => s.boottime_ns = now_ns,
            },
            _ => {
                r.shutdown = Some(ShutdownSeen {
                    kind,
                    at: jiff::Timestamp::now().to_string(),
                    boottime_ns: now_ns,
                    end: None,
                })
            }
        });
        counted_from
    }

    /// The drain for the announced shutdown ended so. Returns the write to wait for (the lock
    /// goes after it, briefly: the machine may go down the moment it goes).
    pub fn shutdown_ended(&self, outcome: EndOutcome, detail: String) -> Option<Ticket> {
        self.end_shutdown(ShutdownEnd { outcome, detail }, true)
    }

    /// No drain ran (the budget was spent before this daemon started): recorded only when no
    /// earlier daemon recorded how its drain for this shutdown ended.
    pub fn shutdown_ended_unless_recorded(
        &self,
        outcome: EndOutcome,
        detail: String,
    ) -> Option<Ticket> {
        self.end_shutdown(ShutdownEnd { outcome, detail }, false)
    }

    fn end_shutdown(&self, end: ShutdownEnd, replace: bool) -> Option<Ticket> {
        self.change(|r| {
            if let Some(s) = &mut r.shutdown
                && (replace || s.end.is_none())
            {
                s.end = Some(end);
            }
        })
    }

    /// The shutdown is over without a reboot (cancelled, heard or missed while away). Returns
    /// whether one was recorded: found while no shutdown is under way, it was cancelled while
    /// the daemon was away.
    pub fn shutdown_over(&self) -> bool {
        let recorded = self.record().is_some_and(|r| r.shutdown.is_some());
        if recorded {
            self.change(|r| r.shutdown = None);
        }
        recorded
    }

    /// The daemon stops with no shutdown under way.
    pub fn stopped(&self) {
        self.change(|r| r.stopped_at = Some(jiff::Timestamp::now().to_string()));
    }

    /// The Warning Event about the previous boot was written.
    pub fn event_posted(&self) {
        self.change(|r| {
            if let Some(p) = &mut r.previous {
                p.event_posted = true;
            }
        });
    }

    /// Waits (until `by` at the latest) for the write named by `ticket`; whether it is done.
    /// Without a writer every change is already written.
    pub async fn written(&self, ticket: Option<Ticket>, by: tokio::time::Instant) -> bool {
        match (&self.writer, ticket) {
            (Some(writer), Some(ticket)) => writer.written(ticket, by).await,
            _ => true,
        }
    }

    /// Waits (until `by` at the latest) until every change so far is written; whether it is.
    pub async fn settled(&self, by: tokio::time::Instant) -> bool {
        let last = *self.last.lock().unwrap_or_else(|p| p.into_inner());
        self.written(last, by).await
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Opened>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Changes the record and hands it to the writer (or writes it). The record's lock is held
    /// while it is handed over, so two changes cannot reach the file in the other order.
    fn change(&self, change: impl FnOnce(&mut BootRecord)) -> Option<Ticket> {
        let mut guard = self.lock();
        let opened = guard.as_mut()?;
        change(&mut opened.record);
        let bytes = match serde_json::to_vec_pretty(&opened.record) {
            Ok(bytes) => bytes,
            Err(e) => {
                tracing::warn!("cannot encode the boot record of node {}: {e}", opened.node);
                return None;
            }
        };
        match &self.writer {
            Some(writer) => {
                let ticket = writer.put_state(&opened.state_dir, FILE, bytes, "boot record");
                *self.last.lock().unwrap_or_else(|p| p.into_inner()) = Some(ticket);
                Some(ticket)
            }
            None => {
                if let Err(e) = crate::state_file::write(&opened.state_dir, FILE, &bytes) {
                    tracing::warn!(
                        "cannot write {}: {e}; the next boot of node {} may misjudge how this \
                         one ended",
                        opened.state_dir.join(FILE).display(),
                        opened.node
                    );
                }
                None
            }
        }
    }
}

/// The shutdown start an older version kept in `shutdown-started`: folded into this boot's
/// record (the moment of a shutdown it recorded, or the shutdown itself when only that file
/// knew of it), then the file is removed. A file of another boot is only removed.
fn fold_legacy_start(record: &mut BootRecord, settings: &Settings) {
    #[derive(Deserialize)]
    struct LegacyStart {
        boot_id: String,
        boottime_ns: u64,
    }
    let path = settings.state_dir.join(LEGACY_SHUTDOWN_START);
    let legacy = match crate::state_file::read_json::<LegacyStart>(&path) {
        Ok(Some(legacy)) => Some(legacy),
        Ok(None) => return,
        Err(e) => {
            tracing::warn!("{e}; removing it");
            None
        }
    };
    if let Some(legacy) = legacy.filter(|l| l.boot_id == record.boot_id) {
        let seen = record.shutdown.get_or_insert_with(|| ShutdownSeen {
            kind: ShutdownKind::Unknown,
            at: jiff::Timestamp::now().to_string(),
            boottime_ns: None,
            end: None,
        });
        seen.boottime_ns.get_or_insert(legacy.boottime_ns);
    }
    match std::fs::remove_file(&path) {
        Ok(()) => tracing::info!(
            "folded {} (an older version's record of the shutdown start) into {}",
            path.display(),
            settings.state_dir.join(FILE).display()
        ),
        Err(e) => tracing::warn!("cannot remove {}: {e}", path.display()),
    }
}

#[cfg(test)]
#[path = "boot_record_tests.rs"]
mod tests;
