//! The record of when logind's shutdown timer started (`<state_dir>/shutdown-started`), so a
//! daemon restarted mid-shutdown counts its budget from logind's one timer, not from its own
//! start.
//!
//! The moment is CLOCK_BOOTTIME, which keeps counting across process restarts (and suspend)
//! within one boot and restarts at zero with the next boot; the boot ID says which boot the
//! moment belongs to, so a record from another boot is never used.

use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::time::{ClockId, clock_gettime};
use serde::{Deserialize, Serialize};

use crate::config::Settings;

/// The record's file name in the state directory.
pub const FILE: &str = "shutdown-started";

/// When logind announced the shutdown being prepared, and in which boot.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShutdownStart {
    /// `/proc/sys/kernel/random/boot_id` of the boot the moment belongs to.
    pub boot_id: String,
    /// CLOCK_BOOTTIME at `PrepareForShutdown(true)`, in nanoseconds.
    pub boottime_ns: u64,
}

impl ShutdownStart {
    /// The recorded moment as a duration since boot.
    pub fn at(&self) -> Duration {
        Duration::from_nanos(self.boottime_ns)
    }
}

/// Reading, writing or clearing the record failed.
#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("cannot read CLOCK_BOOTTIME: {source}")]
    Clock { source: nix::Error },
    #[error(transparent)]
    File(#[from] crate::state_file::JsonError),
    #[error("cannot remove the shutdown start {path}: {source}")]
    Remove {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// CLOCK_BOOTTIME now, as a duration since boot.
pub fn boottime_now() -> Result<Duration, RecordError> {
    let now =
        clock_gettime(ClockId::CLOCK_BOOTTIME).map_err(|source| RecordError::Clock { source })?;
    Ok(Duration::from(now))
}

/// The record's path in a state directory.
pub fn path_in(state_dir: &Path) -> PathBuf {
    state_dir.join(FILE)
}

/// Writes the record atomically and never through a symlink ([`crate::state_file::write`]),
/// creating the state directory (0700) when it is missing.
pub fn write(state_dir: &Path, start: &ShutdownStart) -> Result<PathBuf, RecordError> {
    Ok(crate::state_file::write_json(state_dir, FILE, start)?)
}

/// Reads the record, `None` when there is none; refuses anything but a small regular file
/// ([`crate::state_file::read`]).
pub fn read(state_dir: &Path) -> Result<Option<ShutdownStart>, RecordError> {
    Ok(crate::state_file::read_json(&path_in(state_dir))?)
}

/// Removes the record; a missing one is not an error. Returns whether one was removed.
pub fn clear(state_dir: &Path) -> Result<bool, RecordError> {
    let path = path_in(state_dir);
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(source) => Err(RecordError::Remove { path, source }),
    }
}

// What the daemon does with the record, each step logged and never failing the drain.

/// Records when logind's timer started (now) for a daemon restarted mid-shutdown. Never
/// fails the drain: a clock, boot ID or state directory problem is logged and passed over.
pub fn record_now(settings: &Settings) {
    let node = &settings.node_name;
    let state_dir = &settings.state_dir;
    let start = crate::node::read_boot_id(&settings.boot_id_path)
        .map_err(|e| e.to_string())
        .and_then(|boot_id| {
            let now = boottime_now().map_err(|e| e.to_string())?;
            Ok(ShutdownStart {
                boot_id,
                boottime_ns: u64::try_from(now.as_nanos()).unwrap_or(u64::MAX),
            })
        })
        .and_then(|start| write(state_dir, &start).map_err(|e| e.to_string()));
    if let Err(e) = start {
        tracing::warn!(
            "{e}; the drain of node {node} goes on, but a daemon restarted during this \
             shutdown will count its budget from its own start"
        );
    }
}

/// The CLOCK_BOOTTIME moment this boot's shutdown started, from the record; `None` (and a
/// log line saying why) when the budget must count from now instead.
pub fn recorded(settings: &Settings) -> Option<std::time::Duration> {
    let node = &settings.node_name;
    let from_now = "counting the drain budget from now";
    let record = match read(&settings.state_dir) {
        Ok(Some(record)) => record,
        Ok(None) => {
            tracing::warn!(
                "no record of when this shutdown started in {}; {from_now} for node {node}",
                path_in(&settings.state_dir).display()
            );
            return None;
        }
        Err(e) => {
            tracing::warn!("{e}; {from_now} for node {node}");
            return None;
        }
    };
    match crate::node::read_boot_id(&settings.boot_id_path) {
        Ok(boot_id) if boot_id == record.boot_id => Some(record.at()),
        Ok(boot_id) => {
            tracing::warn!(
                "the recorded shutdown start in {} is from boot {}, not this boot {boot_id}; \
                 {from_now} for node {node}",
                path_in(&settings.state_dir).display(),
                record.boot_id
            );
            None
        }
        Err(e) => {
            tracing::warn!("{e}; {from_now} for node {node}");
            None
        }
    }
}

/// Whether the state directory holds a shutdown record of this boot. A record or boot ID
/// that cannot be read counts as none (logged): a cancel cannot then be told from a reboot.
pub fn of_this_boot(settings: &Settings) -> bool {
    let record = match read(&settings.state_dir) {
        Ok(Some(record)) => record,
        Ok(None) => return false,
        Err(e) => {
            tracing::warn!("{e}; not restoring node {}", settings.node_name);
            return false;
        }
    };
    match crate::node::read_boot_id(&settings.boot_id_path) {
        Ok(boot_id) => boot_id == record.boot_id,
        Err(e) => {
            tracing::warn!("{e}; not restoring node {}", settings.node_name);
            false
        }
    }
}

/// Removes the record of a shutdown that is over without a reboot (cancelled, or gone while
/// the daemon was away). A failure is only logged: a record of another boot is ignored, and
/// a stale one of this boot can only make a restarted daemon release sooner, never later.
pub fn clear_logged(settings: &Settings, why: &str) {
    match clear(&settings.state_dir) {
        Ok(true) => tracing::info!(
            "removed the recorded shutdown start for node {}: {why}",
            settings.node_name
        ),
        Ok(false) => {}
        Err(e) => tracing::warn!("{e} ({why})"),
    }
}

/// Where logind's one timer started: `None` for now (`announced_now`: the signal just came; the
/// moment is recorded for a daemon that restarts before the shutdown ends), else the recorded
/// moment of a shutdown already under way at start (recorded now if there is none).
pub fn counted_from(settings: &Settings, announced_now: bool) -> Option<Duration> {
    let from = if announced_now {
        None
    } else {
        recorded(settings)
    };
    if from.is_none() {
        // Counted from now, and recorded so: a later restart counts from here, and a cancel
        // missed while away is seen as one (the node gets restored).
        record_now(settings);
    }
    from
}

#[cfg(test)]
mod tests {
    use super::*;

    fn start() -> ShutdownStart {
        ShutdownStart {
            boot_id: "7c1f0d4e-0000-4000-8000-000000000001".to_owned(),
            boottime_ns: 1_234_567_890_123,
        }
    }

    #[test]
    fn written_then_read_back_then_cleared() {
        let dir = tempfile::tempdir().expect("temp dir");
        let state = dir.path().join("state");
        assert_eq!(read(&state).expect("read"), None, "nothing recorded yet");
        let path = write(&state, &start()).expect("write creates the state dir");
        assert_eq!(path, state.join(FILE));
        assert_eq!(read(&state).expect("read"), Some(start()));
        assert_eq!(
            std::fs::read_dir(&state).expect("list").count(),
            1,
            "the temp file was renamed"
        );
        assert!(clear(&state).expect("clear"));
        assert!(!clear(&state).expect("clear again"), "already gone");
        assert_eq!(read(&state).expect("read"), None);
    }

    #[test]
    fn a_planted_symlink_is_never_written_through() {
        let dir = tempfile::tempdir().expect("temp dir");
        let state = dir.path().join("state");
        std::fs::create_dir(&state).expect("mkdir");
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "precious").expect("write");
        for name in [format!(".{FILE}.tmp"), FILE.to_string()] {
            std::os::unix::fs::symlink(&victim, state.join(name)).expect("symlink");
        }
        write(&state, &start()).expect("write");
        assert_eq!(std::fs::read_to_string(&victim).expect("read"), "precious");
        assert_eq!(read(&state).expect("read"), Some(start()));
    }

    #[test]
    fn a_garbled_record_names_its_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join(FILE), "not json").expect("write");
        let err = read(dir.path()).expect_err("garbled");
        assert!(err.to_string().contains(FILE), "{err}");
    }

    #[test]
    fn an_unwritable_state_dir_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().expect("temp dir");
        // A file where the state directory should be: create_dir_all fails.
        let blocker = dir.path().join("state");
        std::fs::write(&blocker, "").expect("write");
        let err = write(&blocker, &start()).expect_err("cannot write");
        assert!(err.to_string().contains(FILE), "{err}");
    }

    #[test]
    fn boottime_moves_forward() {
        let a = boottime_now().expect("clock");
        let b = boottime_now().expect("clock");
        assert!(b >= a && a > Duration::ZERO);
    }
}
