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

use std::path::Path;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use crate::config::Settings;
use crate::daemon::logind::ShutdownKind;

/// The record's file name in the state directory.
pub const FILE: &str = "boot-record";

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
    /// "reboot", "power-off", "soft-reboot", ..., "unknown".
    pub kind: String,
    /// RFC 3339.
    pub at: String,
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
    fn add(&mut self, unclean: Unclean) {
        match unclean {
            Unclean::ShutdownWithoutDrain => self.shutdown_without_drain += 1,
            Unclean::DrainIncomplete => self.drain_incomplete += 1,
        }
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
        Some(s) if ShutdownKind::names_soft_reboot(&s.kind) => {
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
            let what = format!("the {} announced at {}", s.kind, s.at);
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

/// The daemon's handle on this boot's record: every change is written at once (a failure is
/// logged, never fatal). Inactive (changes ignored) until [`BootLog::open`] succeeded.
#[derive(Clone, Default)]
pub struct BootLog {
    inner: Arc<Mutex<Option<Opened>>>,
}

struct Opened {
    state_dir: std::path::PathBuf,
    node: String,
    record: BootRecord,
}

impl BootLog {
    /// Reads the record at the daemon's first connection to logind (`under_way`: logind is
    /// preparing a shutdown now) and starts this boot's: judges the record of a previous boot,
    /// or of a soft-reboot that is over. Returns the verdict whose Event is still to be posted.
    pub fn open(&self, settings: &Settings, under_way: bool) -> Option<PreviousBoot> {
        let node = &settings.node_name;
        let boot_id = match crate::node::read_boot_id(&settings.boot_id_path) {
            Ok(id) => id,
            Err(e) => {
                tracing::warn!("{e}; node {node}'s boots are not recorded");
                return None;
            }
        };
        let old = read(&settings.state_dir).unwrap_or_else(|e| {
            tracing::warn!("{e}; starting a new record for node {node}");
            None
        });
        let soft_reboot_over = |r: &BootRecord| {
            !under_way
                && r.shutdown
                    .as_ref()
                    .is_some_and(|s| ShutdownKind::names_soft_reboot(&s.kind))
        };
        let judged_now = |r: &BootRecord| r.boot_id != boot_id || soft_reboot_over(r);
        let (mut record, judged) = match old {
            None => (BootRecord::new(&boot_id), false),
            Some(r) if judged_now(&r) => (r.next(&boot_id, node), true),
            Some(r) => (r, false),
        };
        record.stopped_at = None;
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
    pub fn shutdown_started(&self, kind: &str, announced_now: bool) {
        self.change(|r| {
            if announced_now || r.shutdown.is_none() {
                r.shutdown = Some(ShutdownSeen {
                    kind: kind.to_owned(),
                    at: jiff::Timestamp::now().to_string(),
                    end: None,
                });
            }
        });
    }

    /// The drain for the announced shutdown ended so.
    pub fn shutdown_ended(&self, outcome: EndOutcome, detail: String) {
        self.end_shutdown(ShutdownEnd { outcome, detail }, true);
    }

    /// [`Self::shutdown_ended`] on a blocking thread, waited for until `by` at the latest: the
    /// lock is released after it, and a stalled disk must not hold it past the budget. A write
    /// still running then finishes on its own (the next change waits for it).
    pub async fn shutdown_ended_by(
        &self,
        by: tokio::time::Instant,
        outcome: EndOutcome,
        detail: String,
    ) {
        let Some((path, node)) = self
            .lock()
            .as_ref()
            .map(|o| (o.state_dir.join(FILE), o.node.clone()))
        else {
            return;
        };
        let log = self.clone();
        let write = tokio::task::spawn_blocking(move || log.shutdown_ended(outcome, detail));
        if tokio::time::timeout_at(by, write).await.is_err() {
            tracing::warn!(
                "{} is still being written at the drain deadline; releasing the inhibitor for \
                 node {node} first",
                path.display()
            );
        }
    }

    /// No drain ran (the budget was spent before this daemon started): recorded only when no
    /// earlier daemon recorded how its drain for this shutdown ended.
    pub fn shutdown_ended_unless_recorded(&self, outcome: EndOutcome, detail: String) {
        self.end_shutdown(ShutdownEnd { outcome, detail }, false);
    }

    fn end_shutdown(&self, end: ShutdownEnd, replace: bool) {
        self.change(|r| {
            if let Some(s) = &mut r.shutdown
                && (replace || s.end.is_none())
            {
                s.end = Some(end);
            }
        });
    }

    /// The shutdown is over without a reboot (cancelled, heard or missed while away).
    pub fn shutdown_cancelled(&self) {
        if self.record().is_some_and(|r| r.shutdown.is_some()) {
            self.change(|r| r.shutdown = None);
        }
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

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Opened>> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Changes the record and writes it; the lock is held through the write, so two changes
    /// cannot land in the other order.
    fn change(&self, change: impl FnOnce(&mut BootRecord)) {
        let mut guard = self.lock();
        let Some(opened) = guard.as_mut() else {
            return;
        };
        change(&mut opened.record);
        if let Err(e) = crate::state_file::write_json(&opened.state_dir, FILE, &opened.record) {
            tracing::warn!(
                "{e}; the next boot of node {} may misjudge how this one ended",
                opened.node
            );
        }
    }
}

/// First wait after a failed attempt to post the Event; doubled up to [`POST_RETRY_MAX`].
const POST_RETRY_FIRST: std::time::Duration = std::time::Duration::from_secs(1);
/// Longest wait between attempts: the Event is retried twice a minute until it is written.
const POST_RETRY_MAX: std::time::Duration = std::time::Duration::from_secs(30);

/// Writes the Warning Event about an unclean previous boot, retrying until the API server takes
/// it, then records it as posted (a daemon restarted before that posts it again).
pub async fn post_until_done(settings: Arc<Settings>, log: BootLog, previous: PreviousBoot) {
    use crate::events::Reason;
    let reason = match previous.unclean {
        Some(Unclean::ShutdownWithoutDrain) => Reason::ShutdownWithoutDrain,
        Some(Unclean::DrainIncomplete) => Reason::DrainIncomplete,
        None => return,
    };
    let node = &settings.node_name;
    let mut backoff = crate::api::retry::Backoff::between(POST_RETRY_FIRST, POST_RETRY_MAX);
    loop {
        let posted = match crate::engine::Engine::new(settings.clone()) {
            Ok(engine) => engine.try_event(reason, &previous.message).await,
            Err(e) => Err(e),
        };
        match posted {
            Ok(()) => {
                log.event_posted();
                tracing::info!(
                    "wrote Event {} on node {node} about boot {}",
                    reason.as_str(),
                    previous.boot_id
                );
                return;
            }
            Err(e) => {
                let wait = backoff.next_pause();
                tracing::warn!(
                    "{e}; the Event about boot {} is retried in {:.1} s",
                    previous.boot_id,
                    wait.as_secs_f64()
                );
                tokio::time::sleep(wait).await;
            }
        }
    }
}

#[cfg(test)]
#[path = "boot_record_tests.rs"]
mod tests;
