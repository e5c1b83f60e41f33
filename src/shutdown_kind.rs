//! The kind of a shutdown, one typed value from logind's announcement to every record of it: the
//! `[shutdown]` key that decides what the daemon does, the marker, the boot record, the report,
//! the Events and the log.
//!
//! systemd >= 255 names the kind in `PrepareForShutdownWithMetadata` under `type`, with the names
//! of `handle_action_to_string()` (systemd `src/login/logind-action.c`): `reboot`, `poweroff`,
//! `halt`, `kexec`, `soft-reboot`. An older logind names none: that is [`ShutdownKind::Unknown`],
//! and so is a name this version does not know (logged where it is read).
//!
//! The written form (serde, `Display`) is the one earlier versions wrote into markers, boot
//! records and reports, so those stay readable: `power-off` for a power-off, `unknown` for none;
//! both `poweroff` and `power-off` are read.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The kind of a shutdown.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ShutdownKind {
    Reboot,
    #[serde(alias = "poweroff")]
    PowerOff,
    Halt,
    Kexec,
    SoftReboot,
    /// logind named no kind (systemd < 255), or one this version does not know.
    #[serde(other)]
    Unknown,
}

impl ShutdownKind {
    /// Every kind, in the order of the `[shutdown]` table.
    pub const ALL: [ShutdownKind; 6] = [
        ShutdownKind::Reboot,
        ShutdownKind::PowerOff,
        ShutdownKind::Halt,
        ShutdownKind::Kexec,
        ShutdownKind::SoftReboot,
        ShutdownKind::Unknown,
    ];

    /// Reads logind's `type` value; `None` for a name systemd does not document.
    pub fn from_logind(value: &str) -> Option<ShutdownKind> {
        match value {
            "reboot" => Some(ShutdownKind::Reboot),
            // systemd spells it `poweroff`; earlier versions of this program wrote `power-off`.
            "poweroff" | "power-off" => Some(ShutdownKind::PowerOff),
            "halt" => Some(ShutdownKind::Halt),
            "kexec" => Some(ShutdownKind::Kexec),
            "soft-reboot" => Some(ShutdownKind::SoftReboot),
            _ => None,
        }
    }

    /// The kind's key in the `[shutdown]` table.
    pub fn config_key(self) -> &'static str {
        match self {
            ShutdownKind::Reboot => "reboot",
            ShutdownKind::PowerOff => "poweroff",
            ShutdownKind::Halt => "halt",
            ShutdownKind::Kexec => "kexec",
            ShutdownKind::SoftReboot => "soft_reboot",
            ShutdownKind::Unknown => "unknown",
        }
    }

    /// The name as it is written into markers, boot records, reports and log lines.
    pub fn as_str(self) -> &'static str {
        match self {
            ShutdownKind::Reboot => "reboot",
            ShutdownKind::PowerOff => "power-off",
            ShutdownKind::Halt => "halt",
            ShutdownKind::Kexec => "kexec",
            ShutdownKind::SoftReboot => "soft-reboot",
            ShutdownKind::Unknown => "unknown",
        }
    }

    /// What a sentence calls it: "the reboot", "the shutdown" (a kind logind did not name).
    pub fn noun(self) -> &'static str {
        match self {
            ShutdownKind::Unknown => "shutdown",
            known => known.as_str(),
        }
    }

    /// A soft-reboot restarts userspace and keeps the kernel, so the boot ID stays.
    pub fn keeps_boot_id(self) -> bool {
        self == ShutdownKind::SoftReboot
    }
}

impl fmt::Display for ShutdownKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logind_names_and_written_names_read_back_as_the_same_kind() {
        for kind in ShutdownKind::ALL {
            let written = serde_json::to_string(&kind).unwrap();
            assert_eq!(written, format!("\"{}\"", kind.as_str()));
            assert_eq!(
                serde_json::from_str::<ShutdownKind>(&written).unwrap(),
                kind
            );
            if kind != ShutdownKind::Unknown {
                assert_eq!(ShutdownKind::from_logind(kind.as_str()), Some(kind));
            }
        }
        // systemd's own spelling, and what earlier versions wrote
        assert_eq!(
            ShutdownKind::from_logind("poweroff"),
            Some(ShutdownKind::PowerOff)
        );
        let read: ShutdownKind = serde_json::from_str("\"poweroff\"").unwrap();
        assert_eq!(read, ShutdownKind::PowerOff);
        // a name from a newer systemd reads as unknown, in a record and from logind
        let read: ShutdownKind = serde_json::from_str("\"warp\"").unwrap();
        assert_eq!(read, ShutdownKind::Unknown);
        assert_eq!(ShutdownKind::from_logind("warp"), None);
    }

    #[test]
    fn config_keys_are_the_shutdown_tables_keys() {
        let keys: Vec<_> = ShutdownKind::ALL.iter().map(|k| k.config_key()).collect();
        assert_eq!(
            keys,
            [
                "reboot",
                "poweroff",
                "halt",
                "kexec",
                "soft_reboot",
                "unknown"
            ]
        );
        assert_eq!(ShutdownKind::Unknown.noun(), "shutdown");
        assert_eq!(ShutdownKind::Kexec.noun(), "kexec");
    }
}
