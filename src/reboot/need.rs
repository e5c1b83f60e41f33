//! What one reboot trigger says about the node: a reboot is needed, is not, or cannot be told
//! (and why). The sentinel file, the sentinel command and Flatcar's update_engine
//! (`sentinel_file.rs`, `sentinel_command.rs`, `update_engine.rs`) all answer with this one type.
//! The daemon's reboot follower combines them (`crate::daemon::reboot::combined`), and acts on
//! the result only once it has stood [`SETTLE`] ([`Settled`]).

use std::fmt;
use std::mem::discriminant;
use std::time::Duration;

use tokio::time::Instant;

/// How long the triggers' combined answer must stand, unchanged in kind (needed, not needed,
/// unknown), before it counts: nothing is written, taken or called off for an answer younger
/// than that. A sentinel file that an upgrade creates and removes in a burst, or a command that
/// fails once between two answers, then drains nothing and posts no Event.
pub const SETTLE: Duration = Duration::from_secs(5);

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

/// The need that counts: the last combined answer that stood [`SETTLE`], and the one seen since
/// that has not stood long enough yet.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Settled {
    counts: Option<Need>,
    pending: Option<(Need, Instant)>,
}

impl Settled {
    /// Takes the answer `seen` at `now`: the need that counts now (`None` until a first answer
    /// has stood [`SETTLE`]), and when the answer seen will count if it stands (`None`: it
    /// counts already). An answer of the same kind as the one that counts replaces it at once
    /// (its words may change: the command's output, the list of triggers). Pure.
    pub fn see(&mut self, seen: Need, now: Instant) -> (Option<&Need>, Option<Instant>) {
        let same = |a: &Need, b: &Need| discriminant(a) == discriminant(b);
        if self.counts.as_ref().is_some_and(|c| same(c, &seen)) {
            self.pending = None;
            self.counts = Some(seen);
            return (self.counts.as_ref(), None);
        }
        let since = match &self.pending {
            Some((p, since)) if same(p, &seen) => *since,
            _ => now,
        };
        let at = since + SETTLE;
        if now >= at {
            self.pending = None;
            self.counts = Some(seen);
            return (self.counts.as_ref(), None);
        }
        self.pending = Some((seen, since));
        (self.counts.as_ref(), Some(at))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A need counts once it has stood 5 s; a burst of needed and not needed never does, and an
    /// answer of the kind that counts replaces it at once.
    #[test]
    fn a_need_counts_once_it_has_stood_and_a_burst_never_does() {
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let needed = || Need::Needed("/run/reboot-required exists".into());
        let not = || Need::NotNeeded("/run/reboot-required does not exist".into());
        let mut s = Settled::default();
        assert_eq!(s.see(not(), ms(0)), (None, Some(ms(5000))));
        assert_eq!(s.see(not(), ms(5000)), (Some(&not()), None));
        // The burst: 100 flips in a second, ending not needed.
        for i in 0..100 {
            let seen = if i % 2 == 0 { needed() } else { not() };
            let (counts, _) = s.see(seen, ms(6000 + 10 * i));
            assert_eq!(counts, Some(&not()), "flip {i}");
        }
        // Needed, standing: counts 5 s after it was first seen, not before.
        assert_eq!(s.see(needed(), ms(8000)), (Some(&not()), Some(ms(13000))));
        assert_eq!(s.see(needed(), ms(12999)), (Some(&not()), Some(ms(13000))));
        assert_eq!(s.see(needed(), ms(13000)), (Some(&needed()), None));
        // New words of the same kind count at once.
        let more = Need::Needed("update_engine: NEED_REBOOT".into());
        assert_eq!(s.see(more.clone(), ms(13001)), (Some(&more), None));
        // A blip of unknown does not call it off; one that stands does.
        let unknown = || Need::Unknown("`needs-restarting -r` failed".into());
        assert_eq!(s.see(unknown(), ms(14000)).0, Some(&more));
        assert_eq!(s.see(more.clone(), ms(14100)), (Some(&more), None));
        assert_eq!(s.see(unknown(), ms(15000)).1, Some(ms(20000)));
        assert_eq!(s.see(unknown(), ms(20000)).0, Some(&unknown()));
    }

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
