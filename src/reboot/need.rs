//! What one reboot trigger says about the node: a reboot is needed, is not, or cannot be told
//! (and why). The sentinel file, the sentinel command and Flatcar's update_engine
//! (`crate::host::sentinel`, `crate::host::update_engine`) all answer with this one type.
//! The daemon's reboot follower combines them (`crate::daemon::reboot::combined`).

use std::fmt;

/// One trigger's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Need {
    /// A reboot is needed; the text says who says so (`/run/reboot-required exists`).
    Needed(String),
    /// No reboot is needed; the text says who says so.
    NotNeeded(String),
    /// The trigger could not tell; the text says why and names the file, command or service.
    Unknown(String),
}

impl Need {
    /// True only for [`Need::Needed`]: an unknown answer never starts a reboot.
    pub fn is_needed(&self) -> bool {
        matches!(self, Need::Needed(_))
    }
}

impl fmt::Display for Need {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Need::Needed(why) => write!(f, "reboot needed: {why}"),
            Need::NotNeeded(why) => write!(f, "no reboot needed: {why}"),
            Need::Unknown(why) => write!(f, "reboot need unknown: {why}"),
        }
    }
}
