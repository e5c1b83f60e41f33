//! Whether the FleetLock server can see the update agent's uid: the user namespace the daemon
//! runs in must map it, or the kernel's socket table (`peer.rs`) shows the agent's connections,
//! as every unmapped user's, as the overflow uid 65534, and no request could be told from
//! another local user's.
//!
//! The daemon reads its own map, `/proc/self/uid_map` (user_namespaces(7): each line is
//! `ID-inside ID-outside LENGTH`; read by a process of the namespace itself, the inside IDs are
//! the ones it sees). `check`, outside the unit, reads what the unit asks systemd for: the
//! service's `PrivateUsersEx` property (systemd 257 and newer: `no`, `self`, `identity`, ...) or
//! its boolean `PrivateUsers` before that. systemd.exec(5), PrivateUsers=: `self` (the same as
//! `yes`) maps root and the unit's own user (root here) and nothing else; `identity` maps the
//! first 65536 uids to themselves; the shipped unit says `yes`, and the FleetLock drop-in
//! (`packaging/zincati/kube-shutdown-drain.service.d/50-fleetlock.conf`) `identity`.

use std::path::Path;

/// The daemon's own uid map.
pub const UID_MAP: &str = "/proc/self/uid_map";

/// The uid every unmapped uid reads as (the kernel's default `/proc/sys/kernel/overflowuid`,
/// which systemd does not support changing: systemd.io/UIDS-GIDS, "Special Linux UIDs").
pub const OVERFLOW_UID: u32 = 65534;

/// The unit the packages ship.
pub const UNIT: &str = "kube-shutdown-drain.service";

/// Where the packages ship the drop-in, and where an admin copies it.
pub const DROP_IN: &str =
    "/usr/share/kube-shutdown-drain/zincati/kube-shutdown-drain.service.d/50-fleetlock.conf";
pub const DROP_IN_DIR: &str = "/etc/systemd/system/kube-shutdown-drain.service.d/";

/// Why the agent's uid cannot be seen.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Unseen {
    #[error(
        "the update agent's user {user} (uid {uid}) is not mapped in the daemon's user \
         namespace ({seen}): the kernel's socket table shows its connections, as every unmapped \
         user's, as uid {OVERFLOW_UID}, so no request could be told from another local user's. \
         Copy {DROP_IN} into {DROP_IN_DIR} (it sets PrivateUsers=identity: systemd 257 or newer; \
         an older systemd ignores `identity`, so there write a drop-in with PrivateUsers=no \
         instead), then `systemctl daemon-reload` and `systemctl restart {UNIT}`"
    )]
    Unmapped {
        user: String,
        uid: u32,
        /// What says so: the map read, or the unit's setting.
        seen: String,
    },
    #[error(
        "the update agent's user {user} has uid {OVERFLOW_UID}, the uid every user the daemon's \
         user namespace does not map reads as ({seen}): its requests could not be told from \
         another local user's; run the agent as a user of its own"
    )]
    Overflow { user: String, seen: String },
    #[error("cannot read {path} to see whether the update agent's user {user} is mapped: {source}")]
    Read {
        path: String,
        user: String,
        source: std::sync::Arc<std::io::Error>,
    },
}

/// Whether `uid` is an ID inside the namespace of `uid_map` (its text). systemd maps every ID
/// to itself (`self`, `identity`), so an ID inside is the same ID outside.
pub fn maps(uid_map: &str, uid: u32) -> bool {
    extents(uid_map).any(|(first, count)| {
        let (uid, first) = (u64::from(uid), u64::from(first));
        first <= uid && uid < first + u64::from(count)
    })
}

/// Whether `uid_map` maps every uid there is: the initial namespace's `0 0 4294967295`.
pub fn maps_all(uid_map: &str) -> bool {
    extents(uid_map).any(|(first, count)| first == 0 && count == u32::MAX)
}

/// Each line's inside ID and length; lines that are not three numbers are skipped.
fn extents(uid_map: &str) -> impl Iterator<Item = (u32, u32)> + '_ {
    uid_map.lines().filter_map(|line| {
        let mut fields = line.split_whitespace().map(str::parse::<u32>);
        let (inside, _outside, count) = (fields.next()?, fields.next()?, fields.next()?);
        Some((inside.ok()?, count.ok()?))
    })
}

/// The verdict on the agent's `uid` from the text of a uid map read at `path`.
pub fn judge_map(path: &str, uid_map: &str, user: &str, uid: u32) -> Result<(), Unseen> {
    let seen = format!(
        "{path}: {}",
        uid_map.split_whitespace().collect::<Vec<_>>().join(" ")
    );
    if !maps(uid_map, uid) {
        return Err(Unseen::Unmapped {
            user: user.to_string(),
            uid,
            seen,
        });
    }
    if uid == OVERFLOW_UID && !maps_all(uid_map) {
        return Err(Unseen::Overflow {
            user: user.to_string(),
            seen,
        });
    }
    Ok(())
}

/// The verdict on the agent's `uid` in this process's namespace (`path`: [`UID_MAP`]; the tests
/// name another file). A kernel without user namespaces has no such file: every uid is seen.
pub fn judge_self(path: &Path, user: &str, uid: u32) -> Result<(), Unseen> {
    match std::fs::read_to_string(path) {
        Ok(text) => judge_map(&path.display().to_string(), &text, user, uid),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(Unseen::Read {
            path: path.display().to_string(),
            user: user.to_string(),
            source: std::sync::Arc::new(source),
        }),
    }
}

pub use crate::host::systemd::PrivateUsers;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_uid_is_seen_only_inside_an_extent_of_the_map() {
        // PrivateUsers=self of a root service, identity, none (the initial namespace).
        assert!(maps("         0          0          1\n", 0));
        assert!(!maps("         0          0          1\n", 978));
        assert!(maps("0 0 65536", 978));
        assert!(maps("0 0 65536", 65535));
        assert!(!maps("0 0 65536", 65536));
        assert!(maps("0 0 4294967295", 4_294_967_294));
        // A unit with a User= of its own gets two extents.
        assert!(maps("0 0 1\n978 978 1\n", 978));
        assert!(!maps("0 0 1\n978 978 1\n", 979));
        assert!(!maps("", 0));
        assert!(maps_all("0 0 4294967295\n"));
        assert!(!maps_all("0 0 65536\n"));
    }

    #[test]
    fn an_unmapped_agent_is_refused_naming_the_drop_in_and_the_older_systemds_way() {
        let err = judge_map("/proc/self/uid_map", "  0  0  1\n", "zincati", 978).unwrap_err();
        let text = err.to_string();
        assert!(
            text.starts_with(
                "the update agent's user zincati (uid 978) is not mapped in the daemon's user \
                 namespace (/proc/self/uid_map: 0 0 1): "
            ),
            "{text}"
        );
        for part in [
            DROP_IN,
            DROP_IN_DIR,
            "PrivateUsers=identity",
            "PrivateUsers=no",
            UNIT,
        ] {
            assert!(text.contains(part), "{part}: {text}");
        }
        assert!(judge_map("/proc/self/uid_map", "0 0 65536\n", "zincati", 978).is_ok());
    }

    #[test]
    fn an_agent_with_the_overflow_uid_is_refused_unless_every_uid_is_mapped() {
        let err = judge_map("m", "0 0 65536", "nobody", OVERFLOW_UID).unwrap_err();
        assert!(matches!(err, Unseen::Overflow { .. }), "{err}");
        assert!(judge_map("m", "0 0 4294967295", "nobody", OVERFLOW_UID).is_ok());
    }

    #[test]
    fn the_own_map_is_read_and_a_kernel_without_namespaces_sees_every_uid() {
        let dir = tempfile::tempdir().unwrap();
        let map = dir.path().join("uid_map");
        std::fs::write(&map, "0 0 1\n").unwrap();
        assert!(matches!(
            judge_self(&map, "zincati", 978),
            Err(Unseen::Unmapped { uid: 978, .. })
        ));
        assert!(judge_self(&dir.path().join("absent"), "zincati", 978).is_ok());
        // This test process's own map maps its own uid.
        let me = nix::unistd::getuid().as_raw();
        assert!(judge_self(Path::new(UID_MAP), "me", me).is_ok());
    }

    #[test]
    fn the_units_setting_gives_the_map_its_processes_get() {
        for (value, map) in [
            ("no", Some("0 0 4294967295")),
            ("self", Some("0 0 1")),
            ("identity", Some("0 0 65536")),
            ("full", None),
        ] {
            let p = PrivateUsers::from_ex(value);
            assert_eq!(p.uid_map(), map, "{value}");
            assert_eq!(p.as_str(), value);
        }
        assert_eq!(PrivateUsers::from_bool(true), PrivateUsers::SelfOnly);
        assert_eq!(PrivateUsers::from_bool(false), PrivateUsers::No);
    }
}
