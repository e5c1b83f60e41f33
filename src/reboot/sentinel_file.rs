//! `[reboot] sentinel_file`: a path whose existence means the node needs a reboot
//! (`/var/run/reboot-required`, which Debian's and Ubuntu's package scripts create, as kured's
//! `--reboot-sentinel` reads it), watched with inotify: no polling, the file appearing and
//! going away both seen, and a missing directory followed down from its nearest existing
//! ancestor until it appears. Watched by the daemon's reboot follower (`crate::daemon::reboot`).
//!
//! One inotify watch is held at a time: on the file's directory when it exists, otherwise on
//! the deepest ancestor that does. Every event on it re-reads the file's state and re-arms the
//! watch (directories come and go); [`SentinelFile::next`] returns only when the answer changed.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};

use crate::host::inotify::Events;
use crate::reboot::need::Need;

/// The watch could not be set up or read; names the sentinel file.
#[derive(Debug, thiserror::Error)]
pub enum SentinelFileError {
    #[error("cannot watch {dir} for the reboot sentinel {file}: {source}")]
    Watch {
        dir: PathBuf,
        file: PathBuf,
        source: Errno,
    },
    #[error("cannot read the inotify events for the reboot sentinel {file}: {source}")]
    Events {
        file: PathBuf,
        source: std::io::Error,
    },
}

/// Events that can make the file or a missing directory on its way appear or go: created,
/// renamed in or out, removed, and the watched directory itself removed or renamed.
fn mask() -> AddWatchFlags {
    AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_DELETE_SELF
        | AddWatchFlags::IN_MOVE_SELF
        | AddWatchFlags::IN_ONLYDIR
}

/// The watch on one sentinel file.
pub struct SentinelFile {
    events: Events,
    file: PathBuf,
    /// The directory watched now and its watch.
    watched: (PathBuf, WatchDescriptor),
    /// What the last call of [`SentinelFile::next`] returned.
    said: Option<Need>,
}

impl SentinelFile {
    /// Watches `file` (an absolute path, as the config requires).
    pub fn new(file: impl Into<PathBuf>) -> Result<SentinelFile, SentinelFileError> {
        let file = file.into();
        let watch_error = |dir: &Path| {
            let (dir, file) = (dir.to_path_buf(), file.clone());
            move |source| SentinelFileError::Watch { dir, file, source }
        };
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
            .map_err(watch_error(&file))?;
        let watched = arm(&inotify, &file, None).map_err(|(dir, e)| watch_error(&dir)(e))?;
        let events = Events::register(inotify).map_err(|source| SentinelFileError::Events {
            file: file.clone(),
            source,
        })?;
        Ok(SentinelFile {
            events,
            file,
            watched,
            said: None,
        })
    }

    /// The file's answer now on the first call; afterwards waits (in the kernel, no timer)
    /// until the answer differs from the last one returned.
    pub async fn next(&mut self) -> Result<Need, SentinelFileError> {
        loop {
            let now = need(&self.file);
            if self.said.as_ref() != Some(&now) {
                self.said = Some(now.clone());
                return Ok(now);
            }
            self.wait_for_event().await?;
        }
    }

    /// Sleeps until the watched directory reports anything, then re-arms the watch where it
    /// belongs now.
    async fn wait_for_event(&mut self) -> Result<(), SentinelFileError> {
        self.events
            .next()
            .await
            .map_err(|source| SentinelFileError::Events {
                file: self.file.clone(),
                source,
            })?;
        let inotify = self.events.inotify();
        self.watched = arm(inotify, &self.file, Some(&self.watched)).map_err(|(dir, source)| {
            SentinelFileError::Watch {
                dir,
                file: self.file.clone(),
                source,
            }
        })?;
        Ok(())
    }
}

/// What the file says now.
pub fn need(file: &Path) -> Need {
    match std::fs::symlink_metadata(file) {
        Ok(_) => Need::Needed(format!("{} exists", file.display())),
        Err(e) if e.kind() == ErrorKind::NotFound => {
            match file.parent().filter(|dir| !dir.exists()) {
                Some(dir) => Need::NotNeeded(format!(
                    "{} does not exist (nor its directory {})",
                    file.display(),
                    dir.display()
                )),
                None => Need::NotNeeded(format!("{} does not exist", file.display())),
            }
        }
        Err(e) => Need::Unknown(format!("cannot check {}: {e}", file.display())),
    }
}

/// Puts the one watch on the deepest existing directory on the way to `file`, removing the
/// watch `before` when it is elsewhere. A directory that appears between finding it and
/// watching it is found by looking again after the watch is set, so no creation is missed.
fn arm(
    inotify: &Inotify,
    file: &Path,
    before: Option<&(PathBuf, WatchDescriptor)>,
) -> Result<(PathBuf, WatchDescriptor), (PathBuf, Errno)> {
    let mut held = before.cloned();
    loop {
        let dir = deepest_existing(file);
        // Watching the same directory again returns the same descriptor (inotify(7)).
        let wd = match inotify.add_watch(&dir, mask()) {
            Ok(wd) => wd,
            // Gone again between the look and the watch: look again.
            Err(Errno::ENOENT | Errno::ENOTDIR) => continue,
            Err(e) => return Err((dir, e)),
        };
        if let Some((_, old_wd)) = held.take()
            && old_wd != wd
        {
            // Already removed by the kernel when its directory went; nothing to undo then.
            let _ = inotify.rm_watch(old_wd);
        }
        held = Some((dir.clone(), wd));
        if deepest_existing(file) == dir {
            return Ok((dir, wd));
        }
    }
}

/// The deepest existing directory among `file`'s ancestors (`/` at worst).
fn deepest_existing(file: &Path) -> PathBuf {
    file.ancestors()
        .skip(1)
        .find(|dir| dir.is_dir())
        .unwrap_or(Path::new("/"))
        .to_path_buf()
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// The next answer; the deadline only keeps a broken watch from hanging the test run.
    async fn next(watch: &mut SentinelFile) -> Need {
        tokio::time::timeout(Duration::from_secs(60), watch.next())
            .await
            .expect("the watch saw no change (hang guard)")
            .unwrap()
    }

    /// The next answer after `change`, made once the watch is already waiting in the kernel
    /// (`join!` polls the watch first), so only an inotify event can wake it.
    async fn after(watch: &mut SentinelFile, change: impl FnOnce()) -> Need {
        let (need, ()) = tokio::join!(next(watch), async { change() });
        need
    }

    #[tokio::test]
    async fn the_file_appearing_and_going_away_are_both_seen() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("reboot-required");
        let mut watch = SentinelFile::new(&file).unwrap();
        let absent = Need::NotNeeded(format!("{} does not exist", file.display()));
        let present = Need::Needed(format!("{} exists", file.display()));
        assert_eq!(next(&mut watch).await, absent);
        let write = || std::fs::write(&file, "*** System restart required ***\n").unwrap();
        assert_eq!(after(&mut watch, write).await, present);
        let remove = || std::fs::remove_file(&file).unwrap();
        assert_eq!(after(&mut watch, remove).await, absent);
        // Renamed into place from another directory: only the arrival is seen here.
        let elsewhere = tempfile::tempdir_in(dir.path().parent().unwrap()).unwrap();
        let temp = elsewhere.path().join("reboot-required.tmp");
        std::fs::write(&temp, "").unwrap();
        let rename = || std::fs::rename(&temp, &file).unwrap();
        assert_eq!(after(&mut watch, rename).await, present);
    }

    /// A directory that does not exist yet is followed from its nearest existing ancestor, as
    /// it and the file appear, go and come back.
    #[tokio::test]
    async fn a_missing_directory_is_followed_until_the_file_appears_in_it() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a/b/reboot-required");
        let mut watch = SentinelFile::new(&file).unwrap();
        let first = next(&mut watch).await;
        assert_eq!(
            first,
            Need::NotNeeded(format!(
                "{} does not exist (nor its directory {})",
                file.display(),
                dir.path().join("a/b").display()
            ))
        );
        let make_dirs = || std::fs::create_dir_all(dir.path().join("a/b")).unwrap();
        // The directory alone changes the wording, not the answer's kind.
        let dir_only = after(&mut watch, make_dirs).await;
        assert!(matches!(dir_only, Need::NotNeeded(_)), "{dir_only}");
        let write = || std::fs::write(&file, "").unwrap();
        assert!(after(&mut watch, write).await.is_needed());
        let remove = || std::fs::remove_dir_all(dir.path().join("a")).unwrap();
        assert_eq!(after(&mut watch, remove).await, first);
        let both = || {
            make_dirs();
            write();
        };
        let mut again = after(&mut watch, both).await;
        if !again.is_needed() {
            // The directory's creation may be seen before the file's.
            again = next(&mut watch).await;
        }
        assert!(again.is_needed(), "{again}");
    }
}
