//! Test support: capture what the binary sends to the journal. The binary runs in a private
//! mount namespace (unshare(1), root) where `/run/systemd/journal/socket` is a datagram socket the
//! test bound; entries are parsed from the native protocol
//! (<https://systemd.io/JOURNAL_NATIVE_PROTOCOL/>), so a test sees the fields `journalctl -o json`
//! would show.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::os::fd::AsFd;
use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// One journal entry: every field with all its values (a field may repeat).
pub type Entry = BTreeMap<String, Vec<String>>;

/// Parses one datagram: `KEY=VALUE\n`, or `KEY\n` + 64-bit little-endian length + data + `\n`.
pub fn parse_entry(mut data: &[u8]) -> Entry {
    let mut entry = Entry::new();
    while !data.is_empty() {
        let end = data.iter().position(|&b| b == b'\n').expect("a field line");
        let line = &data[..end];
        if let Some(eq) = line.iter().position(|&b| b == b'=') {
            let key = String::from_utf8_lossy(&line[..eq]).into_owned();
            let value = String::from_utf8_lossy(&line[eq + 1..]).into_owned();
            entry.entry(key).or_default().push(value);
            data = &data[end + 1..];
        } else {
            let key = String::from_utf8_lossy(line).into_owned();
            let rest = &data[end + 1..];
            let len = u64::from_le_bytes(rest[..8].try_into().unwrap()) as usize;
            let value = String::from_utf8_lossy(&rest[8..8 + len]).into_owned();
            assert_eq!(rest[8 + len], b'\n', "field {key} ends with a newline");
            entry.entry(key).or_default().push(value);
            data = &rest[8 + len + 1..];
        }
    }
    entry
}

/// Why the capture cannot run here (no root, no unshare), if it cannot.
pub fn cannot_capture() -> Option<String> {
    let probe = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "true"])
        .status();
    match probe {
        Ok(s) if s.success() => None,
        Ok(s) => Some(format!("unshare --mount failed ({s}; it needs root)")),
        Err(e) => Some(format!("unshare(1) not runnable: {e}")),
    }
}

/// A bound journal socket and the thread reading it.
pub struct Journal {
    dir: tempfile::TempDir,
    done: Arc<AtomicBool>,
    /// While set, the reader stops reading: a journald that no longer drains its socket.
    stalled: Arc<AtomicBool>,
    reader: Option<std::thread::JoinHandle<Vec<Entry>>>,
}

impl Journal {
    pub fn start() -> Journal {
        let dir = tempfile::tempdir().unwrap();
        let socket = UnixDatagram::bind(dir.path().join("socket")).unwrap();
        // The sender blocks once the socket's queue (net.unix.max_dgram_qlen, often 10) is full,
        // so entries are read while the binary runs, until it is done and the queue is empty.
        socket
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let done = Arc::new(AtomicBool::new(false));
        let stalled = Arc::new(AtomicBool::new(false));
        let reader = std::thread::spawn({
            let done = done.clone();
            let stalled = stalled.clone();
            move || {
                let mut entries = Vec::new();
                let mut buf = vec![0u8; 256 * 1024];
                loop {
                    if stalled.load(Ordering::SeqCst) {
                        if done.load(Ordering::SeqCst) {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(50));
                        continue;
                    }
                    match socket.recv(&mut buf) {
                        Ok(0) => {}
                        Ok(n) => entries.push(parse_entry(&buf[..n])),
                        Err(_) if done.load(Ordering::SeqCst) => break,
                        Err(_) => {}
                    }
                }
                entries
            }
        });
        Journal {
            dir,
            done,
            stalled,
            reader: Some(reader),
        }
    }

    /// From now on nothing is read: the socket's queue fills and stays full, as under a
    /// journald that stopped reading.
    pub fn stall(&self) {
        self.stalled.store(true, Ordering::SeqCst);
    }

    /// `bin` wrapped so that it logs to this journal: in a private mount namespace with an
    /// empty /run and our directory as /run/systemd/journal, with `JOURNAL_STREAM` naming
    /// `stderr` (which the caller passes as the command's stderr).
    pub fn command(&self, bin: &Path, stderr: &std::fs::File) -> Command {
        let st = nix::sys::stat::fstat(stderr.as_fd()).unwrap();
        let script = "mount -t tmpfs tmpfs /run && mkdir -p /run/systemd/journal && \
                      mount --bind \"$0\" /run/systemd/journal && exec \"$@\"";
        let mut cmd = Command::new("unshare");
        cmd.args(["--mount", "--propagation", "private", "sh", "-c", script])
            .arg(self.dir.path())
            .arg(bin)
            .env("JOURNAL_STREAM", format!("{}:{}", st.st_dev, st.st_ino));
        cmd
    }

    /// Every entry received, once the binary is done.
    pub fn finish(&mut self) -> Vec<Entry> {
        self.done.store(true, Ordering::SeqCst);
        self.reader
            .take()
            .map(|r| r.join().unwrap())
            .unwrap_or_default()
    }
}

/// The single value of `key`; a repeated field fails the test.
pub fn one<'a>(e: &'a Entry, key: &str) -> Option<&'a str> {
    let values = e.get(key)?;
    assert_eq!(values.len(), 1, "{key} repeated in {e:?}");
    Some(values[0].as_str())
}

/// The first entry whose MESSAGE contains `needle`.
pub fn find<'a>(entries: &'a [Entry], needle: &str) -> &'a Entry {
    entries
        .iter()
        .find(|e| one(e, "MESSAGE").is_some_and(|m| m.contains(needle)))
        .unwrap_or_else(|| {
            let messages: Vec<&str> = entries.iter().filter_map(|e| one(e, "MESSAGE")).collect();
            panic!("no entry with {needle:?} in {messages:#?}")
        })
}

/// Every entry is ours, says each field at most once where it matters, and carries no Debug dump.
pub fn assert_clean(entries: &[Entry]) {
    for e in entries {
        assert_eq!(one(e, "SYSLOG_IDENTIFIER"), Some("kube-shutdown-drain"));
        for (key, values) in e {
            for v in values {
                assert!(
                    !v.contains("Instant {") && !v.contains("Status {"),
                    "{key}={v}"
                );
            }
        }
        for key in [
            "NODE",
            "POD",
            "BUDGET",
            "OUTCOME",
            "SHUTDOWN_KIND",
            "BOOT_ID",
            "MESSAGE",
        ] {
            let _ = one(e, key);
        }
    }
}
