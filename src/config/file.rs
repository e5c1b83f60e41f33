//! Reading a configuration file (the TOML config, the kubeconfig) within limits: a regular file
//! of at most [`MAX_FILE_SIZE`] bytes, opened without blocking, so a FIFO, a device such as
//! `/dev/zero`, a directory or a runaway file is refused instead of hanging or filling memory.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// The largest config file or kubeconfig read: either is a few kilobytes; a kubeconfig with
/// embedded certificates stays far below this.
pub const MAX_FILE_SIZE: u64 = 1024 * 1024;

/// A configuration file that could not be read. Every variant names the file.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    #[error("cannot read {what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{what} {path} is {kind}, not a regular file")]
    NotRegular {
        what: &'static str,
        path: PathBuf,
        kind: &'static str,
    },
    #[error("{what} {path} is larger than {} KiB", MAX_FILE_SIZE / 1024)]
    TooLarge { what: &'static str, path: PathBuf },
    #[error("{what} {path} is not UTF-8 text")]
    NotText { what: &'static str, path: PathBuf },
}

/// What a file that is not regular is, as the error names it.
fn kind_of(t: std::fs::FileType) -> &'static str {
    if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// Reads `path` as UTF-8 text. `what` names the file in errors ("config file", "kubeconfig").
/// A symbolic link to a regular file is followed; the type and size checks apply to the file
/// actually opened (its `fstat`), and the read itself stops after [`MAX_FILE_SIZE`] + 1 bytes, so
/// a file that grows meanwhile cannot make it unbounded either.
pub fn read_text(path: &Path, what: &'static str) -> Result<String, FileError> {
    let io = |source| FileError::Io {
        what,
        path: path.to_path_buf(),
        source,
    };
    // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever. It has
    // no effect on reading a regular file.
    let file: File = OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY)
        .open(path)
        .map_err(io)?;
    let meta = file.metadata().map_err(io)?;
    if !meta.file_type().is_file() {
        return Err(FileError::NotRegular {
            what,
            path: path.to_path_buf(),
            kind: kind_of(meta.file_type()),
        });
    }
    let too_large = || FileError::TooLarge {
        what,
        path: path.to_path_buf(),
    };
    if meta.len() > MAX_FILE_SIZE {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(usize::try_from(meta.len()).unwrap_or(0));
    file.take(MAX_FILE_SIZE + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > MAX_FILE_SIZE {
        return Err(too_large());
    }
    String::from_utf8(bytes).map_err(|_| FileError::NotText {
        what,
        path: path.to_path_buf(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal(path: &Path) -> String {
        read_text(path, "config file").unwrap_err().to_string()
    }

    #[test]
    fn a_regular_file_within_the_limit_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("c.toml");
        std::fs::write(&path, "a = 1\n").unwrap();
        assert_eq!(read_text(&path, "config file").unwrap(), "a = 1\n");
        let link = dir.path().join("link.toml");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        assert_eq!(read_text(&link, "config file").unwrap(), "a = 1\n");
        let limit = dir.path().join("limit.toml");
        std::fs::write(&limit, vec![b'#'; MAX_FILE_SIZE as usize]).unwrap();
        assert_eq!(
            read_text(&limit, "config file").unwrap().len(),
            MAX_FILE_SIZE as usize
        );
    }

    #[test]
    fn devices_directories_fifos_and_large_files_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let msg = refusal(Path::new("/dev/zero"));
        assert_eq!(
            msg,
            "config file /dev/zero is a character device, not a regular file"
        );
        let msg = refusal(dir.path());
        assert!(msg.ends_with("is a directory, not a regular file"), "{msg}");
        // Opening a FIFO without a writer would block forever without O_NONBLOCK.
        let fifo = dir.path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let msg = refusal(&fifo);
        assert!(msg.ends_with("fifo is a FIFO, not a regular file"), "{msg}");
        let big = dir.path().join("big.toml");
        std::fs::write(&big, vec![b'#'; MAX_FILE_SIZE as usize + 1]).unwrap();
        let msg = refusal(&big);
        assert!(msg.ends_with("big.toml is larger than 1024 KiB"), "{msg}");
        let binary = dir.path().join("bin.toml");
        std::fs::write(&binary, [0xff, 0xfe, 0x00]).unwrap();
        assert!(refusal(&binary).ends_with("is not UTF-8 text"));
        let missing = dir.path().join("missing.toml");
        assert!(refusal(&missing).contains("missing.toml: No such file"));
    }
}
