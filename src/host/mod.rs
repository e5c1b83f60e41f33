//! The host: what the node's own system offers the daemon, its commands and the forecast.
//! logind (the inhibitor locks, the shutdown announcements, `Reboot`), systemd's manager (its
//! version and state, a unit's properties), the kubelet's configuration, and the boot record
//! with the file writer that keeps it off the shutdown path, inotify, and the local time zone.
//! A leaf: it talks to the host and returns facts; it knows neither the daemon nor the cluster
//! nor any reboot policy (the reboot triggers are `crate::reboot`'s).

use std::path::Path;

pub mod boot_record;
pub mod inotify;
pub mod kubelet;
pub mod localtime;
pub mod lock;
pub mod logind;
pub mod systemd;
pub mod writer;

/// The kernel's boot ID as the file at `path` holds it (`/proc/sys/kernel/random/boot_id`: a new
/// random UUID every boot), trimmed.
pub fn boot_id(path: &Path) -> std::io::Result<String> {
    std::fs::read_to_string(path).map(|s| s.trim().to_string())
}
