//! What `check` says about who else may change the files the daemon trusts: the config file,
//! the kubeconfig (each with the directory holding it) and the state directory. Someone else who
//! can write one of them decides what the daemon does as root (another API server, other
//! credentials, a forged report or boot record), so that fails `check`; a kubeconfig holding
//! credentials that others can read is a warning (they can act as this node's identity).
//!
//! "Someone else" is the group or others by mode bits, or an owner other than root and the user
//! `check` runs as (an owner can always change the mode). A directory with the sticky bit (like
//! `/tmp`) lets others add files but not replace ours, so its `o+w` is no risk to them.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use crate::cli::outln;
use crate::config::Settings;

/// Prints what `check` finds about the config file, the kubeconfig and the state directory;
/// `false` when someone else can write one of them.
pub fn check(settings: &Settings) -> bool {
    let files = [
        ("config", settings.source.as_deref()),
        ("kubeconfig", Some(settings.kubeconfig.as_path())),
        ("state dir", Some(settings.state_dir.as_path())),
    ];
    let mut ok = true;
    for (what, path) in files {
        let Some(path) = path else { continue };
        if let Some(why) = writable_by_others(path) {
            ok = false;
            outln!(
                "{what} {}: UNSAFE: {why}; whoever can change it decides what the daemon does \
                 as root (chmod go-w, chown root)",
                path.display()
            );
        }
    }
    let kubeconfig = &settings.kubeconfig;
    let secret =
        crate::api::client::read_kubeconfig(kubeconfig).is_ok_and(|k| holds_credentials(&k));
    if secret && readable_by_others(kubeconfig) {
        outln!(
            "kubeconfig {}: WARNING it holds credentials and its group or others can read it: \
             they can act as this node's identity (chmod 0600)",
            kubeconfig.display()
        );
    }
    if ok {
        outln!("files: config, kubeconfig and state dir writable only by their owner");
    }
    ok
}

/// Why someone else can change a file or directory with this owner and mode, if they can. Pure.
pub fn others_can_write(uid: u32, mode: u32, is_dir: bool, me: u32) -> Option<String> {
    let sticky = is_dir && mode & 0o1000 != 0;
    if mode & 0o002 != 0 && !sticky {
        Some(format!("anyone can write it (mode {:04o})", mode & 0o7777))
    } else if mode & 0o020 != 0 && !sticky {
        Some(format!(
            "its group can write it (mode {:04o})",
            mode & 0o7777
        ))
    } else if uid != 0 && uid != me {
        Some(format!("it is owned by uid {uid}, who can change it"))
    } else {
        None
    }
}

/// Whether the group or others can read a file of this mode. Pure.
pub fn others_can_read(mode: u32) -> bool {
    mode & 0o044 != 0
}

/// The problem with `path` (a file, and the directory holding it; or a directory) that
/// `check` must fail on, if any.
pub fn writable_by_others(path: &Path) -> Option<String> {
    let me = nix::unistd::geteuid().as_raw();
    let judge = |p: &Path, what: &str| {
        let meta = std::fs::metadata(p).ok()?;
        others_can_write(meta.uid(), meta.permissions().mode(), meta.is_dir(), me)
            .map(|why| format!("{what} {}: {why}", p.display()))
    };
    let meta = std::fs::metadata(path).ok()?;
    if meta.is_dir() {
        return judge(path, "directory");
    }
    judge(path, "file").or_else(|| judge(path.parent()?, "its directory"))
}

/// Whether the group or others can read `path`.
pub fn readable_by_others(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| others_can_read(m.permissions().mode()))
}

/// Whether a kubeconfig holds credentials itself (a token, a password, a client key, an auth
/// provider's tokens), rather than naming files or a plugin that hold them.
pub fn holds_credentials(kubeconfig: &kube::config::Kubeconfig) -> bool {
    kubeconfig
        .auth_infos
        .iter()
        .filter_map(|a| a.auth_info.as_ref())
        .any(|a| {
            a.token.is_some()
                || a.password.is_some()
                || a.client_key_data.is_some()
                || a.auth_provider.is_some()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn who_else_can_write_is_told_from_the_mode_and_the_owner() {
        let me = 1000;
        assert_eq!(others_can_write(0, 0o100644, false, me), None);
        assert_eq!(others_can_write(me, 0o100600, false, me), None);
        assert_eq!(others_can_write(0, 0o40700, true, me), None);
        assert_eq!(
            others_can_write(0, 0o100666, false, me).as_deref(),
            Some("anyone can write it (mode 0666)")
        );
        assert_eq!(
            others_can_write(0, 0o40775, true, me).as_deref(),
            Some("its group can write it (mode 0775)")
        );
        assert_eq!(
            others_can_write(1001, 0o100600, false, me).as_deref(),
            Some("it is owned by uid 1001, who can change it")
        );
        // /tmp: anyone may add files, nobody may replace ours.
        assert_eq!(others_can_write(0, 0o41777, true, me), None);
        assert!(
            others_can_write(0, 0o101777, false, me).is_some(),
            "sticky means nothing on a file"
        );
        assert!(others_can_read(0o644) && others_can_read(0o640) && !others_can_read(0o600));
    }
}
