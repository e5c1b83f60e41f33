//! Test support: a directory on a filesystem the test can freeze (`fsfreeze(8)`): an ext4 image
//! in the target directory, loop-mounted. While frozen, every write to it blocks in the kernel,
//! uninterruptibly, until it is thawed: a stalled disk, as a node's state or metrics directory
//! can stall. Thawed and unmounted on drop, so a failing test leaves nothing frozen. Needs root,
//! loop devices, mkfs.ext4 and fsfreeze.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

/// A loop-mounted ext4 filesystem.
pub struct FreezableDir {
    _dir: tempfile::TempDir,
    mount: PathBuf,
    frozen: bool,
}

fn run(program: &str, args: &[&std::ffi::OsStr]) -> Result<(), String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

impl FreezableDir {
    /// Makes and mounts the filesystem; `Err` says why it cannot be made here.
    pub fn create() -> Result<FreezableDir, String> {
        if !nix::unistd::geteuid().is_root() {
            return Err("freezing a filesystem needs root".to_owned());
        }
        let dir = tempfile::Builder::new()
            .prefix("ksd-freeze-")
            .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
            .map_err(|e| e.to_string())?;
        let image = dir.path().join("fs.img");
        let file = std::fs::File::create(&image).map_err(|e| e.to_string())?;
        file.set_len(32 << 20).map_err(|e| e.to_string())?;
        drop(file);
        run(
            "mkfs.ext4",
            &["-q".as_ref(), "-F".as_ref(), image.as_os_str()],
        )?;
        let mount = dir.path().join("mnt");
        std::fs::create_dir(&mount).map_err(|e| e.to_string())?;
        run(
            "mount",
            &[
                "-o".as_ref(),
                "loop".as_ref(),
                image.as_os_str(),
                mount.as_os_str(),
            ],
        )?;
        Ok(FreezableDir {
            _dir: dir,
            mount,
            frozen: false,
        })
    }

    /// The mounted filesystem's root.
    pub fn path(&self) -> &Path {
        &self.mount
    }

    /// From now on every write there blocks until [`FreezableDir::thaw`].
    pub fn freeze(&mut self) {
        run("fsfreeze", &["-f".as_ref(), self.mount.as_os_str()]).expect("fsfreeze -f");
        self.frozen = true;
    }

    pub fn thaw(&mut self) {
        if self.frozen {
            run("fsfreeze", &["-u".as_ref(), self.mount.as_os_str()]).expect("fsfreeze -u");
            self.frozen = false;
        }
    }
}

impl Drop for FreezableDir {
    fn drop(&mut self) {
        if self.frozen {
            let _ = run("fsfreeze", &["-u".as_ref(), self.mount.as_os_str()]);
        }
        // Lazily: a process still holding a file there (a daemon being killed) must not keep
        // the test from ending.
        let _ = run("umount", &["-l".as_ref(), self.mount.as_os_str()]);
    }
}
