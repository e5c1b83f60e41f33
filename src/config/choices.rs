//! The keys whose value names one of a few choices (`[taint] effect`, `[drain] on_deadline`,
//! `[shutdown]`'s policies, ...): an enum each, read by its name ([`Named`]), written back by it
//! (`as_str`, `Serialize`).

use super::from_value::{Named, deserialize_checked};

/// The effect of our own taint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaintEffect {
    /// The scheduler avoids the node but may still use it (kured's choice; safe while cordoned).
    PreferNoSchedule,
    /// New pods that do not tolerate it are not scheduled.
    NoSchedule,
    /// Running pods that do not tolerate it are evicted by the taint manager, ignoring budgets.
    NoExecute,
}

impl Named for TaintEffect {
    const NAMES: &'static [(&'static str, Self)] = &[
        ("PreferNoSchedule", TaintEffect::PreferNoSchedule),
        ("NoSchedule", TaintEffect::NoSchedule),
        ("NoExecute", TaintEffect::NoExecute),
    ];
}

/// What to do with a class of pods (emptyDir, unreplicated, completed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Policy {
    /// Evict it like any other pod.
    Evict,
    /// Leave it alone.
    Skip,
}

impl Named for Policy {
    const NAMES: &'static [(&'static str, Self)] =
        &[("evict", Policy::Evict), ("skip", Policy::Skip)];
}

/// What happens when the drain deadline is reached with pods left.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnDeadline {
    /// Report the remaining pods and the budgets that blocked them, then stop.
    Report,
    /// Delete the remaining pods, ignoring their disruption budgets.
    Delete,
}

impl Named for OnDeadline {
    const NAMES: &'static [(&'static str, Self)] = &[
        ("report", OnDeadline::Report),
        ("delete", OnDeadline::Delete),
    ];
}

/// What the drain does with the node's DaemonSet pods (`[drain] daemonsets`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DaemonSetPolicy {
    /// Leave them running, as `kubectl drain --ignore-daemonsets` does (the default).
    Leave,
    /// Once every other planned pod is gone, taint the node with
    /// [`crate::node::DAEMONSETS_TAINT_KEY`]`:NoSchedule` and stop the DaemonSet pods that do
    /// not tolerate it, by priority, `system-node-critical` last.
    StopLast,
}

impl Named for DaemonSetPolicy {
    const NAMES: &'static [(&'static str, Self)] = &[
        ("leave", DaemonSetPolicy::Leave),
        ("stop-last", DaemonSetPolicy::StopLast),
    ];
}

/// What a node does at a shutdown when no drain slot came in time (`[fleet] on_no_slot`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnNoSlot {
    /// Taint and cordon, evict nothing (the default).
    Cordon,
    /// Drain anyway.
    Drain,
}

impl Named for OnNoSlot {
    const NAMES: &'static [(&'static str, Self)] =
        &[("cordon", OnNoSlot::Cordon), ("drain", OnNoSlot::Drain)];
}

/// `as_str` (the spelling in the file and, for the taint effect, the API's) and `Serialize`,
/// both from `NAMES`.
macro_rules! named_enum {
    ($($t:ty),*) => {$(
        impl $t {
            pub fn as_str(self) -> &'static str {
                self.name()
            }
        }
        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.name())
            }
        }
    )*};
}
/// What the daemon does for one kind of shutdown (`[shutdown]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShutdownPolicy {
    /// Taint, cordon and drain (the default).
    Drain,
    /// Taint and cordon, evict nothing.
    Cordon,
    /// Change nothing and release the inhibitor at once.
    None,
}

impl Named for ShutdownPolicy {
    const NAMES: &'static [(&'static str, Self)] = &[
        ("drain", ShutdownPolicy::Drain),
        ("cordon", ShutdownPolicy::Cordon),
        ("none", ShutdownPolicy::None),
    ];
}

named_enum!(
    TaintEffect,
    Policy,
    OnDeadline,
    ShutdownPolicy,
    DaemonSetPolicy,
    OnNoSlot
);
deserialize_checked!(
    TaintEffect,
    Policy,
    OnDeadline,
    ShutdownPolicy,
    DaemonSetPolicy,
    OnNoSlot
);
