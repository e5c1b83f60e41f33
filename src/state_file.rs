//! Files under the state directory (the last report, the shutdown start): the directory is
//! created 0700; a file is written to a random-named temporary file in the same directory and
//! renamed over its name, so nothing is ever written through a symlink planted there; a file is
//! read only when it is a regular file (opened without following a symlink, checked on the open
//! descriptor) of at most [`MAX_LEN`] bytes, owned by the user this program runs as (the
//! effective uid): a file someone else put there is not ours to believe.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::OFlag;

/// The largest state file read: ours are a few KiB (a report lists every pod of one node); a
/// larger one is not ours.
pub const MAX_LEN: u64 = 1024 * 1024;

/// Creates `dir` (and its missing parents) with mode 0700 when it is missing; an existing
/// directory is left as it is.
pub fn ensure_dir(dir: &Path) -> std::io::Result<()> {
    DirBuilder::new().recursive(true).mode(0o700).create(dir)
}

/// Writes `bytes` as `dir/name` with mode 0600 ([`replace`]), creating `dir` (0700) when it is
/// missing. Returns the file's path.
pub fn write(dir: &Path, name: &str, bytes: &[u8]) -> std::io::Result<PathBuf> {
    ensure_dir(dir)?;
    let path = dir.join(name);
    replace(&path, bytes, 0o600)?;
    Ok(path)
}

/// Replaces `path` with a file holding `bytes` and mode `mode`, atomically: a new file with a
/// random name in the same directory (created exclusively, so a symlink or file planted under
/// any fixed name is never opened), flushed to disk, then renamed over `path` (a symlink there
/// is replaced, not followed). A reader sees the old file or the new one, never half of one.
/// The one atomic writer: state files, and the metrics textfile (mode 0644 for node_exporter).
pub fn replace(path: &Path, bytes: &[u8], mode: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map_or_else(|| "file".into(), |n| n.to_string_lossy());
    let mut tmp = tempfile::Builder::new()
        .prefix(&format!(".{name}."))
        .suffix(".tmp")
        .tempfile_in(dir)?;
    // Set on the open file: a mode given at creation would be cut by the umask (the unit's is
    // 0077), and node_exporter, running as its own user, must read the metrics textfile.
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(mode))?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// Reads `path`, `None` when it does not exist. Refuses (an error saying why) a symlink, anything
/// but a regular file (a device, a FIFO: opened without blocking, never read), a file owned by
/// another user than the effective one, and a file larger than [`MAX_LEN`].
pub fn read(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags((OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC).bits())
        .open(path)
    {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        // O_NOFOLLOW on a symlink fails with ELOOP.
        Err(e) if e.raw_os_error() == Some(nix::libc::ELOOP) => {
            return Err(refused(
                "it is a symbolic link; state files are never followed",
            ));
        }
        Err(e) => return Err(e),
    };
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(refused("it is not a regular file"));
    }
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() != me {
        return Err(refused(&format!(
            "it is owned by uid {}, not by uid {me}, the user this program runs as",
            meta.uid()
        )));
    }
    if meta.len() > MAX_LEN {
        return Err(too_large());
    }
    read_bounded(file).map(Some)
}

/// Reads at most [`MAX_LEN`] bytes; a file that grew past it since the check is refused too.
fn read_bounded(file: File) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    file.take(MAX_LEN + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > MAX_LEN {
        return Err(too_large());
    }
    Ok(bytes)
}

fn refused(why: &str) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, format!("refused: {why}"))
}

fn too_large() -> std::io::Error {
    refused(&format!(
        "it is larger than {} KiB, which no state file of ours is",
        MAX_LEN / 1024
    ))
}

/// Whether files can be written in `dir` (created when missing): creates and removes one
/// random-named file there.
pub fn check_writable(dir: &Path) -> std::io::Result<()> {
    ensure_dir(dir)?;
    tempfile::Builder::new()
        .prefix(".write-check.")
        .tempfile_in(dir)?
        .close()
}

/// Whether `dir` lives in memory (tmpfs or ramfs), so nothing written there survives a reboot.
/// `false` when it cannot be told (e.g. `dir` missing).
pub fn is_volatile(dir: &Path) -> bool {
    use nix::sys::statfs::{FsType, TMPFS_MAGIC, statfs};
    // linux/magic.h; nix names no constant for it.
    const RAMFS_MAGIC: FsType = FsType(0x8584_58f6);
    statfs(dir).is_ok_and(|s| [TMPFS_MAGIC, RAMFS_MAGIC].contains(&s.filesystem_type()))
}

/// A JSON state file could not be read, parsed or written; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum JsonError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not valid: {source}")]
    Parse {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error("cannot write {path}: {source}")]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Reads `path` as JSON through [`read`]; `None` when it does not exist.
pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>, JsonError> {
    let bytes = match read(path) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => return Ok(None),
        Err(source) => {
            return Err(JsonError::Read {
                path: path.to_owned(),
                source,
            });
        }
    };
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|source| JsonError::Parse {
            path: path.to_owned(),
            source,
        })
}

/// Writes `value` as JSON to `dir/name` through [`write`].
pub fn write_json<T: serde::Serialize>(
    dir: &Path,
    name: &str,
    value: &T,
) -> Result<PathBuf, JsonError> {
    let write = || -> std::io::Result<PathBuf> {
        let json = serde_json::to_vec_pretty(value).map_err(std::io::Error::other)?;
        write(dir, name, &json)
    };
    write().map_err(|source| JsonError::Write {
        path: dir.join(name),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{PermissionsExt, symlink};

    #[test]
    fn written_files_are_read_back_and_the_dir_is_created_0700() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("state");
        let path = write(&dir, "f.json", b"{}").unwrap();
        assert_eq!(path, dir.join("f.json"));
        let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        assert_eq!(read(&path).unwrap().as_deref(), Some(&b"{}"[..]));
        assert_eq!(read(&dir.join("missing")).unwrap(), None);
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
        assert_eq!(left.len(), 1, "no temporary file left behind");
    }

    #[test]
    fn a_symlink_in_the_state_dir_is_replaced_never_written_through() {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("state");
        ensure_dir(&dir).unwrap();
        let victim = root.path().join("victim");
        std::fs::write(&victim, "precious").unwrap();
        symlink(&victim, dir.join("f.json")).unwrap();
        symlink(&victim, dir.join(".f.json.tmp")).unwrap();
        write(&dir, "f.json", b"report").unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
        assert!(
            !std::fs::symlink_metadata(dir.join("f.json"))
                .unwrap()
                .is_symlink()
        );
        assert_eq!(std::fs::read(dir.join("f.json")).unwrap(), b"report");
    }

    #[test]
    fn symlinks_devices_fifos_and_large_files_are_refused() {
        let root = tempfile::tempdir().unwrap();
        let zero = root.path().join("zero");
        symlink("/dev/zero", &zero).unwrap();
        let err = read(&zero).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");

        // A FIFO would block a plain open until a writer comes: refused without blocking.
        let fifo = root.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let err = read(&fifo).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");

        let large = root.path().join("large");
        std::fs::write(&large, vec![b' '; MAX_LEN as usize + 1]).unwrap();
        let err = read(&large).unwrap_err();
        assert!(err.to_string().contains("larger than 1024 KiB"), "{err}");
        std::fs::write(&large, vec![b' '; MAX_LEN as usize]).unwrap();
        assert!(read(&large).unwrap().is_some(), "exactly the limit is read");
    }

    #[test]
    fn a_file_owned_by_another_user_is_refused_naming_the_owner() {
        let root = tempfile::tempdir().unwrap();
        let path = root.path().join("last-report.json");
        std::fs::write(&path, "{}").unwrap();
        assert!(read(&path).unwrap().is_some(), "our own file is read");
        let me = nix::unistd::geteuid();
        // Root gives the file away; anyone else reads one of root's.
        let (path, owner) = if me.is_root() {
            std::os::unix::fs::chown(&path, Some(65534), None).unwrap();
            (path, 65534)
        } else {
            (PathBuf::from("/etc/hostname"), 0)
        };
        let err = read(&path).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "refused: it is owned by uid {owner}, not by uid {}, the user this program runs as",
                me.as_raw()
            )
        );
        let err = read_json::<serde_json::Value>(&path).unwrap_err();
        assert!(
            err.to_string().contains(&path.display().to_string()),
            "{err}"
        );
    }

    #[test]
    fn a_state_dir_in_memory_is_told_from_one_on_disk() {
        // /dev/shm is a tmpfs on every systemd machine; the checkout is on a disk.
        let shm = tempfile::tempdir_in("/dev/shm").unwrap();
        assert!(is_volatile(shm.path()));
        assert!(!is_volatile(Path::new(env!("CARGO_MANIFEST_DIR"))));
        assert!(!is_volatile(Path::new("/nonexistent/state")));
    }

    #[test]
    fn a_file_where_the_dir_should_be_is_not_writable() {
        let root = tempfile::tempdir().unwrap();
        let blocker = root.path().join("state");
        std::fs::write(&blocker, "").unwrap();
        assert!(check_writable(&blocker).is_err());
        assert!(check_writable(&root.path().join("fresh")).is_ok());
    }
}
