//! The host: what the node's own system offers the daemon, its commands and the forecast.
//! logind (the inhibitor locks, the shutdown announcements, `Reboot`), systemd's manager (its
//! version and state, a unit's properties), the kubelet's configuration, and the boot record
//! with the file writer that keeps it off the shutdown path. Nothing here knows the daemon.

pub mod boot_record;
pub mod kubelet;
pub mod lock;
pub mod logind;
pub mod systemd;
pub mod writer;
