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
    /// The answers of several triggers as one: needed when any says so, else unknown when any
    /// cannot tell, else not needed. Pure.
    pub fn combined(needs: &[Need]) -> Need {
        let join = |pick: fn(&Need) -> Option<&String>| {
            let words: Vec<&str> = needs.iter().filter_map(pick).map(String::as_str).collect();
            (!words.is_empty()).then(|| words.join("; "))
        };
        if let Some(why) = join(|n| match n {
            Need::Needed(w) => Some(w),
            _ => None,
        }) {
            return Need::Needed(why);
        }
        if let Some(why) = join(|n| match n {
            Need::Unknown(w) => Some(w),
            _ => None,
        }) {
            return Need::Unknown(why);
        }
        Need::NotNeeded(
            join(|n| match n {
                Need::NotNeeded(w) => Some(w),
                _ => None,
            })
            .unwrap_or_else(|| "no reboot trigger is set".into()),
        )
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn any_needed_trigger_needs_a_reboot_and_an_unknown_one_never_starts_one() {
        let needed = Need::Needed("/run/reboot-required exists".into());
        let not = Need::NotNeeded("`needs-restarting -r` exited 0".into());
        let unknown = Need::Unknown("update_engine unreachable".into());
        assert_eq!(
            Need::combined(&[not.clone(), needed.clone(), unknown.clone()]),
            needed
        );
        assert_eq!(Need::combined(&[not.clone(), unknown.clone()]), unknown);
        assert_eq!(Need::combined(std::slice::from_ref(&not)), not);
        assert!(!Need::combined(&[]).is_needed());
        assert_eq!(
            Need::combined(&[
                needed.clone(),
                Need::Needed("update_engine: NEED_REBOOT".into())
            ]),
            Need::Needed("/run/reboot-required exists; update_engine: NEED_REBOOT".into())
        );
    }
}
