//! The engine's side of the pre-drain hook annotations (`crate::node::hooks`): the wait for
//! them to go, said first (an Event `WaitingForHooks`, the `MaintenancePlanned` condition with
//! reason `WaitingForHooks`), and the hold of the evictions of [`Engine::prepare_and_drain`]
//! until they are gone or until [`super::evict_without_cordon_at`], as the cordon's.

use super::*;

/// How a wait for the pre-drain hook annotations ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HooksWait {
    /// None was on the Node.
    None,
    /// These were there, and all went.
    Cleared(Vec<String>),
    /// These were still there at the wait's end.
    TimedOut(Vec<String>),
}

impl Engine {
    /// Waits until the Node carries no pre-drain hook annotation, or `until`: one read, and a
    /// watch of the Node only while one is there, said first on the Node (`why`: the drain's
    /// reason).
    pub async fn wait_for_hooks(&self, until: Instant, why: &str) -> Result<HooksWait, Error> {
        let node = &self.settings.node_name;
        let first = node::hooks::pending(&self.node().await?);
        if first.is_empty() {
            return Ok(HooksWait::None);
        }
        let message = format!(
            "node {node} waits for its pre-drain hooks ({}) to be removed before it drains ({why})",
            first.join(", ")
        );
        tracing::info!(node = %node, "{message}");
        let say = async {
            // Like an Event: never holding the wait past its end.
            let by = until.min(Instant::now() + FINAL_EVENTS_MAX);
            let planned = [Condition {
                kind: ConditionType::MaintenancePlanned,
                status: true,
                reason: "WaitingForHooks",
                message: message.clone(),
            }];
            let _ = tokio::join!(
                tokio::time::timeout_at(by, self.event(EventReason::WaitingForHooks, &message)),
                self.set_conditions(&planned, by)
            );
        };
        let left = std::sync::Mutex::new(first.clone());
        let gone = |n: &Node| {
            let pending = node::hooks::pending(n);
            let done = pending.is_empty();
            *left.lock().unwrap_or_else(|e| e.into_inner()) = pending;
            done
        };
        let watch = async { Ok::<_, Error>(self.ops().await?.watch_until(until, gone).await?) };
        let (cleared, ()) = tokio::join!(watch, say);
        if cleared? {
            tracing::info!(node = %node, "the pre-drain hooks of node {node} are gone; draining");
            return Ok(HooksWait::Cleared(first));
        }
        Ok(HooksWait::TimedOut(
            left.into_inner().unwrap_or_else(|e| e.into_inner()),
        ))
    }

    /// The evictions' wait for the hook annotations on the drain's path, until `anyway` (half
    /// of the drain's time, as for the cordon): a read that fails holds nothing (said), hooks
    /// still there then are said with a Warning Event, and the drain goes on.
    pub(super) async fn hooks_before_evictions(&self, anyway: Instant, why: &str) {
        let node = &self.settings.node_name;
        let left = match tokio::time::timeout_at(anyway, self.wait_for_hooks(anyway, why)).await {
            Ok(Ok(HooksWait::None | HooksWait::Cleared(_))) => return,
            Ok(Ok(HooksWait::TimedOut(left))) => left,
            Ok(Err(e)) => {
                tracing::warn!(
                    node = %node,
                    "cannot read the pre-drain hooks of node {node} ({e}); draining without \
                     waiting for them"
                );
                return;
            }
            // The first read itself outlasted the wait.
            Err(_) => Vec::new(),
        };
        let message = format!(
            "half of the drain's time of node {node} is gone and its pre-drain hooks ({}) are \
             still there; draining without them",
            if left.is_empty() {
                "not read".to_string()
            } else {
                left.join(", ")
            }
        );
        tracing::warn!(node = %node, "{message}");
        // Off the drain's way: the evictions start now.
        tokio::spawn(Engine::post_event(
            self.settings.clone(),
            EventReason::HookFailed,
            message,
        ));
    }
}
