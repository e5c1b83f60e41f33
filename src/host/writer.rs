//! The daemon's files (the boot record, the metrics textfile) written by one thread of their own,
//! so that no file write ever runs on the shutdown path: a caller hands over a file's newest
//! content and goes on; the thread replaces the file atomically ([`crate::state_file::replace`]).
//! A stalled disk (a frozen filesystem, a hung network mount) then stalls only this thread: the
//! shutdown goes on, and only what must be on disk before the lock goes is waited for, briefly
//! ([`Writer::written`]).
//!
//! Contents are coalesced per file: while one write is under way, later contents for that file
//! replace each other, and only the newest is written next. Nothing queues up behind a stall.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

use tokio::sync::watch;

/// A handle on the writer thread; cheap to clone.
#[derive(Clone)]
pub struct Writer {
    shared: Arc<Shared>,
}

struct Shared {
    pending: Mutex<Pending>,
    wake: Condvar,
    /// The number of the newest job the thread has finished (written or failed).
    finished: watch::Sender<u64>,
}

#[derive(Default)]
struct Pending {
    /// The newest content per file, and the job number that put it.
    files: BTreeMap<PathBuf, Job>,
    last: u64,
}

struct Job {
    number: u64,
    bytes: Vec<u8>,
    mode: u32,
    /// What the file is, for the warning when it cannot be written.
    what: &'static str,
    /// A state file: its directory is created (0700) when missing.
    state: bool,
}

/// Names a job handed to the writer, to wait for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ticket(u64);

impl Writer {
    /// Starts the writer thread. It sleeps until a file is handed over.
    pub fn start() -> std::io::Result<Writer> {
        let shared = Arc::new(Shared {
            pending: Mutex::new(Pending::default()),
            wake: Condvar::new(),
            finished: watch::Sender::new(0),
        });
        let theirs = shared.clone();
        std::thread::Builder::new()
            .name("file-writer".to_owned())
            .spawn(move || write_loop(&theirs))?;
        Ok(Writer { shared })
    }

    /// Hands over the newest content of the state file `name` in `state_dir` (mode 0600, the
    /// directory created 0700 when missing, as [`crate::state_file::write`]); returns at once.
    pub fn put_state(
        &self,
        state_dir: &std::path::Path,
        name: &str,
        bytes: Vec<u8>,
        what: &'static str,
    ) -> Ticket {
        self.put_job(state_dir.join(name), bytes, 0o600, what, true)
    }

    /// Hands over the newest content of `path` (mode `mode`); returns at once.
    pub fn put(&self, path: PathBuf, bytes: Vec<u8>, mode: u32, what: &'static str) -> Ticket {
        self.put_job(path, bytes, mode, what, false)
    }

    fn put_job(
        &self,
        path: PathBuf,
        bytes: Vec<u8>,
        mode: u32,
        what: &'static str,
        state: bool,
    ) -> Ticket {
        let number = {
            let mut pending = self.pending();
            pending.last += 1;
            let number = pending.last;
            pending.files.insert(
                path,
                Job {
                    number,
                    bytes,
                    mode,
                    what,
                    state,
                },
            );
            number
        };
        self.shared.wake.notify_one();
        Ticket(number)
    }

    /// Waits until the job `ticket` (or a newer one) is finished, or `by`; whether it finished.
    pub async fn written(&self, ticket: Ticket, by: tokio::time::Instant) -> bool {
        let mut finished = self.shared.finished.subscribe();
        let done = finished.wait_for(|n| *n >= ticket.0);
        matches!(tokio::time::timeout_at(by, done).await, Ok(Ok(_)))
    }

    /// Waits (until `by` at the latest) until everything handed over so far is written; whether
    /// it is. For the daemon's exit: a process that ends takes the writer thread with it.
    pub async fn settled(&self, by: tokio::time::Instant) -> bool {
        let last = self.pending().last;
        self.written(Ticket(last), by).await
    }

    fn pending(&self) -> MutexGuard<'_, Pending> {
        self.shared
            .pending
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }
}

/// The writer thread: takes the pending files, writes each, reports the newest job finished.
fn write_loop(shared: &Shared) {
    loop {
        let jobs = {
            let mut pending = shared.pending.lock().unwrap_or_else(|p| p.into_inner());
            while pending.files.is_empty() {
                pending = shared.wake.wait(pending).unwrap_or_else(|p| p.into_inner());
            }
            std::mem::take(&mut pending.files)
        };
        let newest = jobs.values().map(|j| j.number).max().unwrap_or(0);
        for (path, job) in jobs {
            let dir = path.parent().filter(|_| job.state);
            let made = dir.map_or(Ok(()), crate::state_file::ensure_dir);
            if let Err(e) =
                made.and_then(|()| crate::state_file::replace(&path, &job.bytes, job.mode))
            {
                tracing::warn!("cannot write the {} {}: {e}", job.what, path.display());
            }
        }
        // Jobs put while these were written are newer; they are in `pending` for the next round.
        shared.finished.send_modify(|n| *n = (*n).max(newest));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn the_newest_content_is_written_and_waited_for() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let writer = Writer::start().unwrap();
        writer.put(path.clone(), b"one".to_vec(), 0o600, "test file");
        let last = writer.put(path.clone(), b"two".to_vec(), 0o644, "test file");
        let by = tokio::time::Instant::now() + Duration::from_secs(10);
        assert!(writer.written(last, by).await);
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        let mode = std::os::unix::fs::PermissionsExt::mode(
            &std::fs::metadata(&path).unwrap().permissions(),
        );
        assert_eq!(mode & 0o777, 0o644);
    }

    #[tokio::test]
    async fn a_file_that_cannot_be_written_is_finished_all_the_same() {
        let writer = Writer::start().unwrap();
        let ticket = writer.put(
            PathBuf::from("/nonexistent-dir/kube-shutdown-drain/f"),
            b"x".to_vec(),
            0o600,
            "test file",
        );
        let by = tokio::time::Instant::now() + Duration::from_secs(10);
        assert!(
            writer.written(ticket, by).await,
            "a failed write is still finished"
        );
    }
}
