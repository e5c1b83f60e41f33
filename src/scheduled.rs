//! A shutdown scheduled ahead (`shutdown -r +15`, `systemctl reboot --when=...`): logind's
//! schedule file, read within our state files' limits, and a watch on its directory that says
//! the current schedule at start and at every change, without polling.
//!
//! logind sends no change signal for its `ScheduledShutdown` property (systemd issue 22244),
//! but it keeps the schedule in [`SCHEDULE_DIR`]`/`[`SCHEDULE_FILE`]: systemd's logind-dbus.c
//! `update_schedule_file` (called by `method_schedule_shutdown` once
//! `manager_setup_shutdown_timers` has armed the timers) writes `KEY=VALUE` lines to a temporary
//! file in that directory (mode 0644) and renames it over `scheduled`; `reset_scheduled_shutdown`
//! unlinks it on `shutdown -c` and when the schedule fires. The keys: `USEC` (CLOCK_REALTIME, µs
//! since the epoch), `WARN_WALL` (`1`/`0`), `MODE` (`handle_action_to_string`: `reboot`,
//! `poweroff`, `halt`, `kexec`, `soft-reboot`), `UID`, `TTY` (when known), `WALL_MESSAGE`
//! (C-escaped, when set). We accept what logind itself accepts when it reads the file back at its
//! start (`manager_load_scheduled_shutdown`): `USEC` and `MODE` are required, the rest optional
//! and ignored when unreadable; unknown keys are ignored.
//!
//! logind strips the `dry-` of a `shutdown -k` before it records the kind, so a dry run's file
//! looks like a real schedule; nothing in the file tells them apart.
//!
//! The directory exists from boot on systemd >= 257; older logind creates it with the first
//! schedule, so the watch follows its parent until it appears (and again if it goes).

use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, InotifyEvent, WatchDescriptor};

use crate::host::inotify::Events;
use crate::shutdown_kind::ShutdownKind;

pub use crate::config::SCHEDULE_DIR;
/// The schedule file's name in [`SCHEDULE_DIR`].
pub const SCHEDULE_FILE: &str = "scheduled";

/// A shutdown logind has scheduled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// When logind will start it (`USEC`).
    pub at: jiff::Timestamp,
    /// `MODE`, read with the parser of logind's signal kinds.
    pub kind: ShutdownKind,
    /// `WARN_WALL`: whether logind sends wall messages before it.
    pub warn_wall: bool,
    /// `UID` of who scheduled it.
    pub uid: Option<u32>,
    /// `TTY` of who scheduled it.
    pub tty: Option<String>,
    /// `WALL_MESSAGE`, as logind wrote it (C-escaped).
    pub wall_message: Option<String>,
}

impl Schedule {
    /// "reboot scheduled for 2026-12-01T10:15:00Z": the reason a drain started for it gives.
    pub fn reason(&self) -> String {
        format!("{} scheduled for {}", self.kind, self.at)
    }

    /// How long from `now` until a drain `lead` ahead of the schedule should start; zero when
    /// that moment has passed (less time is left than the lead).
    pub fn wait_before_drain(&self, now: jiff::Timestamp, lead: Duration) -> Duration {
        let until = self.at.duration_since(now);
        let until = Duration::try_from(until).unwrap_or(Duration::ZERO);
        until.saturating_sub(lead)
    }
}

/// Why a schedule file's text is not a schedule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Garbled {
    #[error("it is not UTF-8 text")]
    NotText,
    #[error("line {0} is not KEY=VALUE")]
    Line(usize),
    #[error("it has no USEC")]
    NoTime,
    #[error("USEC={0:?} is not a time in microseconds since the epoch")]
    BadTime(String),
    #[error("it has no MODE")]
    NoKind,
}

/// Parses the schedule file's text. Pure.
pub fn parse(bytes: &[u8]) -> Result<Schedule, Garbled> {
    let text = std::str::from_utf8(bytes).map_err(|_| Garbled::NotText)?;
    let (mut usec, mut mode) = (None, None);
    let mut schedule = Schedule {
        at: jiff::Timestamp::UNIX_EPOCH,
        kind: ShutdownKind::Unknown,
        warn_wall: false,
        uid: None,
        tty: None,
        wall_message: None,
    };
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            return Err(Garbled::Line(i + 1));
        };
        match key {
            "USEC" => usec = Some(value),
            "MODE" => mode = Some(value),
            // systemd's parse_boolean; logind ignores a value it cannot read, so do we.
            "WARN_WALL" => {
                schedule.warn_wall = matches!(value, "1" | "yes" | "y" | "true" | "t" | "on")
            }
            "UID" => schedule.uid = value.parse().ok(),
            "TTY" => schedule.tty = Some(value.to_owned()),
            "WALL_MESSAGE" => schedule.wall_message = Some(value.to_owned()),
            _ => {}
        }
    }
    let usec = usec.ok_or(Garbled::NoTime)?;
    let bad_time = || Garbled::BadTime(usec.chars().take(40).collect());
    let micros: i64 = usec.parse().map_err(|_| bad_time())?;
    schedule.at = jiff::Timestamp::from_microsecond(micros).map_err(|_| bad_time())?;
    match mode {
        Some(m) if !m.is_empty() => {
            schedule.kind = ShutdownKind::from_logind(m).unwrap_or(ShutdownKind::Unknown)
        }
        _ => return Err(Garbled::NoKind),
    }
    Ok(schedule)
}

/// The schedule file could not be read or parsed; names the file.
#[derive(Debug, thiserror::Error)]
pub enum ScheduleError {
    #[error("cannot read logind's schedule file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("logind's schedule file {path} is garbled ({problem}); taken as no schedule")]
    Garbled { path: PathBuf, problem: Garbled },
}

/// Reads `dir/scheduled` within the state files' limits (a regular file, not through a symlink,
/// opened without blocking, at most `state_file::MAX_LEN`): `None` when there is none.
pub fn read(dir: &Path) -> Result<Option<Schedule>, ScheduleError> {
    let path = dir.join(SCHEDULE_FILE);
    let bytes = match crate::state_file::read(&path) {
        Ok(None) => return Ok(None),
        Ok(Some(bytes)) => bytes,
        Err(source) => return Err(ScheduleError::Read { path, source }),
    };
    parse(&bytes)
        .map(Some)
        .map_err(|problem| ScheduleError::Garbled { path, problem })
}

/// The inotify watch could not be set up or read; names the directory.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("cannot watch {dir} for logind's scheduled shutdowns: {source}")]
    Watch { dir: PathBuf, source: Errno },
    #[error("cannot read the inotify events for {dir}: {source}")]
    Events {
        dir: PathBuf,
        source: std::io::Error,
    },
}

/// Events on the schedule directory that can change the file: written in place, renamed into or
/// out of place, removed, created (a hard link comes without a write), and the directory itself
/// going.
fn dir_mask() -> AddWatchFlags {
    AddWatchFlags::IN_CLOSE_WRITE
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_DELETE_SELF
        | AddWatchFlags::IN_MOVE_SELF
        | AddWatchFlags::IN_ONLYDIR
}

/// Events on the parent that can bring the directory.
fn parent_mask() -> AddWatchFlags {
    AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO | AddWatchFlags::IN_ONLYDIR
}

/// What the watch is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum On {
    /// The schedule directory.
    Dir(WatchDescriptor),
    /// Its parent, until the directory appears.
    Parent(WatchDescriptor),
}

/// The watch on logind's schedule directory. [`ScheduleWatch::next`] gives the schedule now on
/// its first call and then each time it changes; in between it sleeps in the kernel (one
/// inotify descriptor, no timer), so an idle daemon wakes only when the directory changes.
pub struct ScheduleWatch {
    events: Events,
    dir: PathBuf,
    on: On,
    /// What the last call returned.
    said: Said,
    /// The last read problem warned about, so a garbled file is warned about once.
    warned: Option<String>,
}

/// What [`ScheduleWatch::next`] returned last.
#[derive(Debug, Clone, PartialEq)]
enum Said {
    /// It has not been called yet.
    NothingYet,
    /// No schedule.
    NoSchedule,
    /// This schedule.
    Schedule(Schedule),
}

impl Said {
    fn of(now: &Option<Schedule>) -> Said {
        match now {
            None => Said::NoSchedule,
            Some(s) => Said::Schedule(s.clone()),
        }
    }
}

impl ScheduleWatch {
    /// Watches `dir` ([`SCHEDULE_DIR`] outside tests); its parent must exist.
    pub fn new(dir: impl Into<PathBuf>) -> Result<ScheduleWatch, WatchError> {
        let dir = dir.into();
        let watch_error = |source| WatchError::Watch {
            dir: dir.clone(),
            source,
        };
        let inotify =
            Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).map_err(watch_error)?;
        let on = arm(&inotify, &dir, None).map_err(watch_error)?;
        let events = Events::register(inotify).map_err(|source| WatchError::Events {
            dir: dir.clone(),
            source,
        })?;
        Ok(ScheduleWatch {
            events,
            dir,
            on,
            said: Said::NothingYet,
            warned: None,
        })
    }

    /// The schedule now on the first call; afterwards waits until it differs from the last one
    /// returned. A file that cannot be read or is garbled counts as no schedule, with one
    /// warning naming the file.
    pub async fn next(&mut self) -> Result<Option<Schedule>, WatchError> {
        loop {
            let now = self.read_now();
            let said = Said::of(&now);
            if self.said != said {
                self.said = said;
                return Ok(now);
            }
            self.wait_for_change().await?;
        }
    }

    /// Reads the file, warning once per distinct problem.
    fn read_now(&mut self) -> Option<Schedule> {
        match read(&self.dir) {
            Ok(s) => {
                self.warned = None;
                s
            }
            Err(e) => {
                let text = e.to_string();
                if self.warned.as_ref() != Some(&text) {
                    tracing::warn!("{text}");
                    self.warned = Some(text);
                }
                None
            }
        }
    }

    /// Sleeps until an event that may have changed the schedule file (or where the directory
    /// is) arrives, re-arming the watch when the directory came or went.
    async fn wait_for_change(&mut self) -> Result<(), WatchError> {
        loop {
            let events = self
                .events
                .next()
                .await
                .map_err(|source| WatchError::Events {
                    dir: self.dir.clone(),
                    source,
                })?;
            let mut changed = false;
            for event in &events {
                changed |= self.handle(event)?;
            }
            if changed {
                return Ok(());
            }
        }
    }

    /// Whether `event` may have changed the schedule; re-arms when the directory came or went.
    fn handle(&mut self, event: &InotifyEvent) -> Result<bool, WatchError> {
        let rearm = |this: &mut ScheduleWatch| -> Result<bool, WatchError> {
            let inotify = this.events.inotify();
            this.on =
                arm(inotify, &this.dir, Some(this.on)).map_err(|source| WatchError::Watch {
                    dir: this.dir.clone(),
                    source,
                })?;
            Ok(true)
        };
        if event.mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
            return rearm(self);
        }
        match self.on {
            On::Parent(wd) if event.wd == wd => {
                if event.name.as_deref() == self.dir.file_name() {
                    return rearm(self);
                }
                Ok(false)
            }
            On::Dir(wd) if event.wd == wd => {
                let gone = AddWatchFlags::IN_DELETE_SELF
                    | AddWatchFlags::IN_MOVE_SELF
                    | AddWatchFlags::IN_IGNORED;
                if event.mask.intersects(gone) {
                    return rearm(self);
                }
                // Not logind's temporary file, nor anything else in the directory.
                Ok(event.name.as_deref() == Some(std::ffi::OsStr::new(SCHEDULE_FILE)))
            }
            // An event of a watch given up on.
            _ => Ok(false),
        }
    }
}

/// Puts the watch on `dir`, or on its parent while `dir` is missing; `before` is the watch held
/// until now (a parent watch is removed once `dir` is watched).
fn arm(inotify: &Inotify, dir: &Path, before: Option<On>) -> Result<On, Errno> {
    let missing = |e: Errno| matches!(e, Errno::ENOENT | Errno::ENOTDIR);
    let drop_parent = |on: Option<On>| {
        if let Some(On::Parent(wd)) = on {
            // Already gone when the parent went; nothing to undo then.
            let _ = inotify.rm_watch(wd);
        }
    };
    match inotify.add_watch(dir, dir_mask()) {
        Ok(wd) => {
            drop_parent(before);
            return Ok(On::Dir(wd));
        }
        Err(e) if !missing(e) => return Err(e),
        Err(_) => {}
    }
    let parent = dir.parent().unwrap_or(Path::new("/"));
    let pwd = inotify.add_watch(parent, parent_mask())?;
    // The directory may have appeared between the two calls.
    match inotify.add_watch(dir, dir_mask()) {
        Ok(wd) => {
            drop_parent(Some(On::Parent(pwd)));
            Ok(On::Dir(wd))
        }
        Err(e) if missing(e) => Ok(On::Parent(pwd)),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
#[path = "scheduled_tests.rs"]
mod tests;
