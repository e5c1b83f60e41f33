//! The host: what the node's own system offers the daemon, its commands and the forecast.
//! logind (the inhibitor locks, the shutdown announcements, `Reboot`), systemd's manager (its
//! version and state, a unit's properties), the kubelet's configuration, and the boot record
//! with the file writer that keeps it off the shutdown path; and, for the reboots the node asks
//! for (`crate::daemon::reboot`), the reboot triggers (a sentinel file, a sentinel
//! command, Flatcar's update_engine) and the local time zone. Nothing here knows the daemon.

pub mod boot_record;
pub mod inotify;
pub mod kubelet;
pub mod localtime;
pub mod lock;
pub mod logind;
pub mod sentinel_command;
pub mod sentinel_file;
pub mod systemd;
pub mod update_engine;
pub mod writer;
