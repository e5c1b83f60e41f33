//! core/v1 Events on our Node (`kubectl describe node` shows them): drain started, finished with
//! counts, pods blocked by a budget, deadline reached, restored. An Event that cannot be written
//! is logged and otherwise ignored: Events are for people, never a reason to stop a drain.
//! Every message is cleaned ([`crate::text::clean`]: no control characters, at most
//! [`crate::text::EVENT_MESSAGE_MAX`] bytes), whatever it quotes (a state file, an API answer).

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use kube::api::{Api, PostParams};

use crate::api::Clients;
use crate::text;

/// The component name on our Events.
pub const COMPONENT: &str = "kube-shutdown-drain";
/// Node Events live in `default`, like the kubelet's.
pub(crate) const EVENT_NAMESPACE: &str = "default";

/// The Event reasons we write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    DrainStarted,
    DrainFinished,
    DrainBlocked,
    DrainDeadline,
    Restored,
    /// The daemon drains without a logind inhibitor (a shutdown was already under way).
    NoInhibitor,
    /// Our annotation held a marker we cannot have written; replaced or cleared.
    ForeignMarker,
    /// Restore left a cordon it cannot prove is ours.
    CordonKept,
    /// The kubelet holds its own delay inhibitor (Graceful Node Shutdown) beside ours.
    KubeletShutdown,
    /// Restore left the load-balancer exclusion label it cannot prove is ours.
    LabelKept,
    /// `[shutdown]` says to cordon only, or to do nothing, for this kind of shutdown.
    DrainSkipped,
    /// The previous boot ended with no shutdown announced to us (power loss, `reboot -f`).
    ShutdownWithoutDrain,
    /// The previous boot ended during, or after an incomplete, drain of ours.
    DrainIncomplete,
    /// The daemon's forecast turned to blocked: a drain now would not finish.
    DrainWouldBlock,
    /// The daemon's forecast, blocked before, says a drain now would complete.
    DrainWouldComplete,
    /// Another writer uncordoned the node (or removed our taint) during the drain; put back.
    CordonRemoved,
    /// The node took a drain slot (`[fleet]`).
    SlotTaken,
    /// The node gave its drain slot back (restore, cancel).
    SlotReleased,
    /// No drain slot came in time; `[fleet] on_no_slot` decided.
    SlotUnavailable,
    /// The restored node gave its slot back at `[fleet] settle_max` with disruption budgets of
    /// the pods it evicted still short (or unreadable).
    SlotUnsettled,
    /// A `[reboot]` trigger says the node needs a reboot.
    RebootRequired,
    /// The needed reboot waits: a hold, the fleet's pause, a blocking pod, no window (once per
    /// set of reasons).
    RebootWaiting,
    /// Nothing holds the needed reboot: the daemon drains the node and reboots it.
    RebootStarted,
    /// The drain waits for the pre-drain hook annotations of the cluster's operators.
    WaitingForHooks,
    /// A hook annotation was still there at `[fleet] hook_timeout` (or at half of logind's
    /// budget), or a pre-drain command hook failed.
    HookFailed,
    /// A post-restore command hook failed (the restore stands).
    PostRestoreHookFailed,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::DrainStarted => "DrainStarted",
            Reason::DrainFinished => "DrainFinished",
            Reason::DrainBlocked => "DrainBlockedByBudget",
            Reason::DrainDeadline => "DrainDeadlineReached",
            Reason::Restored => "Restored",
            Reason::NoInhibitor => "DrainWithoutInhibitor",
            Reason::ForeignMarker => "ForeignMarker",
            Reason::CordonKept => "CordonLeftInPlace",
            Reason::DrainSkipped => "DrainSkipped",
            Reason::LabelKept => "LoadBalancerExclusionLeftInPlace",
            Reason::KubeletShutdown => "KubeletGracefulShutdownActive",
            Reason::ShutdownWithoutDrain => "ShutdownWithoutDrain",
            Reason::DrainIncomplete => "DrainIncomplete",
            Reason::DrainWouldBlock => "DrainWouldBlock",
            Reason::DrainWouldComplete => "DrainWouldComplete",
            Reason::CordonRemoved => "CordonRemovedDuringDrain",
            Reason::SlotTaken => "DrainSlotTaken",
            Reason::SlotReleased => "DrainSlotReleased",
            Reason::SlotUnavailable => "DrainSlotUnavailable",
            Reason::SlotUnsettled => "DrainSlotUnsettled",
            Reason::RebootRequired => "RebootRequired",
            Reason::RebootWaiting => "RebootWaiting",
            Reason::RebootStarted => "RebootStarted",
            Reason::WaitingForHooks => "WaitingForHooks",
            Reason::HookFailed => "PreDrainHookFailed",
            Reason::PostRestoreHookFailed => "PostRestoreHookFailed",
        }
    }

    fn type_(self) -> &'static str {
        match self {
            Reason::DrainBlocked
            | Reason::DrainDeadline
            | Reason::NoInhibitor
            | Reason::ForeignMarker
            | Reason::CordonKept
            | Reason::LabelKept
            | Reason::KubeletShutdown
            | Reason::ShutdownWithoutDrain
            | Reason::DrainIncomplete
            | Reason::DrainWouldBlock
            | Reason::CordonRemoved
            | Reason::SlotUnavailable
            | Reason::SlotUnsettled
            | Reason::HookFailed
            | Reason::PostRestoreHookFailed => "Warning",
            _ => "Normal",
        }
    }
}

/// Writes Events about one node.
#[derive(Clone)]
pub struct NodeEvents {
    clients: Clients,
    node: String,
}

impl NodeEvents {
    pub fn new(clients: Clients, node: &str) -> NodeEvents {
        NodeEvents {
            clients,
            node: node.to_string(),
        }
    }

    /// The Event object (pure, for tests and for [`Self::emit`]).
    pub fn event(&self, reason: Reason, message: &str) -> Event {
        let now = jiff::Timestamp::now();
        Event {
            metadata: ObjectMeta {
                // client-go's recorder names Events `<object>.<unix nanos in hex>`.
                name: Some(format!("{}.{:x}", self.node, now.as_nanosecond())),
                namespace: Some(EVENT_NAMESPACE.to_string()),
                ..ObjectMeta::default()
            },
            involved_object: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(self.node.clone()),
                // The kubelet's node Events carry the node name as uid as well.
                uid: Some(self.node.clone()),
                ..ObjectReference::default()
            },
            reason: Some(reason.as_str().into()),
            message: Some(text::clean(message, text::EVENT_MESSAGE_MAX)),
            type_: Some(reason.type_().into()),
            count: Some(1),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            event_time: Some(MicroTime(now)),
            action: Some(
                if reason == Reason::Restored {
                    "Restore"
                } else {
                    "Drain"
                }
                .into(),
            ),
            reporting_component: Some(COMPONENT.into()),
            reporting_instance: Some(format!("{}-{}", COMPONENT, self.node)),
            source: Some(EventSource {
                component: Some(COMPONENT.into()),
                host: Some(self.node.clone()),
            }),
            ..Event::default()
        }
    }

    /// Writes one Event; failures are logged.
    pub async fn emit(&self, reason: Reason, message: &str) {
        let deadline = tokio::time::Instant::now() + self.clients.request_timeout;
        self.emit_by(reason, message, deadline).await;
    }

    /// [`Self::emit`], giving up at `deadline`.
    pub async fn emit_by(&self, reason: Reason, message: &str, deadline: tokio::time::Instant) {
        match self.try_emit_by(reason, message, deadline).await {
            Ok(()) => {
                let message = text::clean(message, text::EVENT_MESSAGE_MAX);
                tracing::debug!(node = %self.node, "event {} on node {}: {message}", reason.as_str(), self.node)
            }
            Err(e) => {
                tracing::warn!(node = %self.node, "cannot write {e}")
            }
        }
    }

    /// Writes one Event by `deadline`; the error names the Event and the node.
    pub async fn try_emit_by(
        &self,
        reason: Reason,
        message: &str,
        deadline: tokio::time::Instant,
    ) -> Result<(), crate::api::ApiError> {
        let api: Api<Event> = Api::namespaced(self.clients.api.clone(), EVENT_NAMESPACE);
        let ev = self.event(reason, message);
        let object = format!("event {} on node {}", reason.as_str(), self.node);
        self.clients
            .once(deadline, &object, api.create(&PostParams::default(), &ev))
            .await
            .map(|_| ())
    }
}
