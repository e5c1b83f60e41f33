//! The reasons a node's reboot waits, each with its stable key: what [`super::holds`] judges
//! and [`super::health`] adds, and what metrics, `status`, Events and the FleetLock kinds name.

use std::fmt;

/// Why a node waits, as metrics and `status` name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Key {
    Held,
    Paused,
    BlockingPods,
    OutsideWindow,
    ForecastBlocks,
    /// Too many other nodes of the slot group are out (`[fleet] max_unready`).
    UnreadyNodes,
    /// An alert of `[fleet.alerts]` is active.
    AlertsFiring,
    /// A pre-drain hook of the reboot did not pass.
    Hook,
    /// A read failed: whether the node must wait cannot be told, so it waits.
    Unknown,
}

impl Key {
    /// Every key, in the order the reasons are judged.
    pub const ALL: [Key; 9] = [
        Key::Held,
        Key::Paused,
        Key::BlockingPods,
        Key::OutsideWindow,
        Key::ForecastBlocks,
        Key::UnreadyNodes,
        Key::AlertsFiring,
        Key::Hook,
        Key::Unknown,
    ];

    /// The stable short name (a metric label value, a `status` word).
    pub fn as_str(self) -> &'static str {
        match self {
            Key::Held => "held",
            Key::Paused => "paused",
            Key::BlockingPods => "blocking_pods",
            Key::OutsideWindow => "outside_window",
            Key::ForecastBlocks => "forecast_blocks",
            Key::UnreadyNodes => "unready_nodes",
            Key::AlertsFiring => "alerts_firing",
            Key::Hook => "hook",
            Key::Unknown => "unknown",
        }
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One reason the node waits: its key and a message naming the node, the object, the pods.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reason {
    pub key: Key,
    pub message: String,
}

impl Reason {
    pub(crate) fn new(key: Key, message: String) -> Reason {
        Reason { key, message }
    }
}
