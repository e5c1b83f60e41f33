//! The Node calls: read, prepare (one guarded patch: marker, taint, cordon), restore (one
//! guarded patch: taints, uncordon, marker) and the wait for Ready (kube's watcher).

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Taint};
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, watcher as watch};
use tokio::time::Instant;

use super::marker::{
    PrepareInput, PreparePlan, RestorePlan, is_unschedulable, marker_of, prepare_patch,
    restore_patch,
};
use super::{NodeError, PrepareOutcome, RestoreOutcome, is_ready};
use crate::api::Clients;
use crate::api::client::WATCH_SECONDS;
use crate::api::guarded::{self, GuardedError, Written};
use crate::api::retry;
use crate::config::Settings;

/// Node operations for one node.
pub struct NodeOps<'a> {
    pub clients: &'a Clients,
    pub settings: &'a Settings,
}

type Write<P> = Result<Written<Node, P>, GuardedError<NodeError>>;

impl NodeOps<'_> {
    fn name(&self) -> &str {
        &self.settings.node_name
    }

    fn object(&self) -> String {
        format!("node {}", self.name())
    }

    fn api(&self) -> Api<Node> {
        Api::all(self.clients.api.clone())
    }

    /// GETs the Node once (bounded by `request_timeout`); 404 is [`NodeError::Missing`].
    pub async fn get(&self) -> Result<Node, NodeError> {
        self.get_by(Instant::now() + self.clients.request_timeout)
            .await
    }

    /// GETs the Node, retrying transient failures until `deadline`.
    pub async fn get_by(&self, deadline: Instant) -> Result<Node, NodeError> {
        let api = self.api();
        self.clients
            .retry(deadline, &self.object(), || api.get(self.name()))
            .await
            .map_err(|e| {
                if e.is_not_found() {
                    NodeError::Missing {
                        node: self.name().to_string(),
                    }
                } else {
                    NodeError::Get(e)
                }
            })
    }

    fn failed(&self, what: &'static str, e: GuardedError<NodeError>) -> NodeError {
        match e {
            GuardedError::Build(e) => e,
            GuardedError::Api(source) if what == "prepare" => NodeError::WriteMarker(source),
            GuardedError::Api(source) => NodeError::Patch { what, source },
            GuardedError::Contended => NodeError::Contended {
                node: self.name().to_string(),
                what,
                attempts: guarded::ATTEMPTS,
            },
        }
    }

    /// One guarded write of this node, starting from `node` as read.
    async fn write<P>(
        &self,
        node: &Node,
        deadline: Instant,
        build: impl FnMut(&Node) -> Result<Option<(json_patch::Patch, P)>, NodeError>,
    ) -> Write<P> {
        let (api, object) = (self.api(), self.object());
        guarded::write(
            self.clients,
            &api,
            self.name(),
            &object,
            deadline,
            node.clone(),
            build,
        )
        .await
    }

    async fn write_prepare(
        &self,
        node: &Node,
        input: &PrepareInput,
        deadline: Instant,
    ) -> Write<PreparePlan> {
        let name = self.name();
        self.write(node, deadline, |n| prepare_patch(n, name, input).map(Some))
            .await
    }

    /// Writes the marker, the taint and the cordon in one guarded patch; transient failures are
    /// retried until `deadline`. When the taint is refused (403: credentials that may not change
    /// taints; or another final answer) the marker and the cordon are written without it, and a
    /// refusal other than 403 is returned after that. If nothing can be written, nothing changed.
    #[tracing::instrument(skip(self), fields(node = %self.settings.node_name))]
    pub async fn prepare(
        &self,
        why: &str,
        boot_id: &str,
        deadline: Instant,
    ) -> Result<PrepareOutcome, NodeError> {
        let name = self.name().to_string();
        let node = self.get_by(deadline).await?;
        let t = &self.settings.taint;
        let mut input = PrepareInput {
            why: why.to_string(),
            boot_id: boot_id.to_string(),
            time: jiff::Timestamp::now().to_string(),
            taint: t.enabled.then(|| Taint {
                key: t.key.clone(),
                value: t.value.clone(),
                effect: t.effect.as_str().to_string(),
                time_added: None,
            }),
            add_taint: true,
        };
        // What was ours before this prepare, to tell what this prepare changed (a write applied
        // although its answer was lost shows up only in the node read again).
        let before = marker_of(&node, &name)?;
        let had_cordon = before.as_ref().is_some_and(|m| m.cordoned) && is_unschedulable(&node);
        let (written, taint_forbidden, taint_error) = match self
            .write_prepare(&node, &input, deadline)
            .await
        {
            Ok(w) => (w, false, None),
            Err(GuardedError::Api(e)) if input.taint.is_some() && !e.is_transient() => {
                input.add_taint = false;
                let w = self
                    .write_prepare(&node, &input, deadline)
                    .await
                    .map_err(|e| self.failed("prepare", e))?;
                if e.is_forbidden() {
                    tracing::warn!(node = %name, "may not taint node {name} ({}; kubelet credentials?); cordoned without the taint", e.problem());
                    (w, true, None)
                } else {
                    tracing::error!(node = %name, "cannot taint {e}; cordoned node {name} anyway");
                    let error = NodeError::Patch {
                        what: "taint",
                        source: e,
                    };
                    (w, false, Some(error))
                }
            }
            Err(e) => return Err(self.failed("prepare", e)),
        };
        let marker = match (marker_of(&written.object, &name)?, written.applied) {
            (Some(m), _) => m,
            (None, Some(plan)) => plan.marker,
            // The prepare builder always writes; without a write there is no marker to show.
            (None, None) => return Err(self.failed("prepare", GuardedError::Contended)),
        };
        let ours = t.enabled.then(|| (t.key.as_str(), t.effect.as_str()));
        let listed = |m: &super::Marker| {
            ours.is_some_and(|(k, e)| m.taints.iter().any(|x| x.key == k && x.effect == e))
        };
        let outcome = PrepareOutcome {
            cordoned: marker.cordoned && !had_cordon,
            tainted: listed(&marker) && !before.as_ref().is_some_and(listed),
            taint_forbidden,
            marker,
        };
        tracing::info!(node = %name, cordoned = outcome.cordoned, tainted = outcome.tainted, was_unschedulable = outcome.marker.was_unschedulable, "wrote marker on node {name}{}{}", if outcome.tainted { ", tainted it" } else { "" }, if outcome.cordoned { ", cordoned it" } else { "" });
        match taint_error {
            Some(e) => Err(e),
            None => Ok(outcome),
        }
    }

    async fn write_restore(
        &self,
        node: &Node,
        remove_taints: bool,
        deadline: Instant,
    ) -> Write<RestorePlan> {
        let name = self.name();
        self.write(node, deadline, |n| match marker_of(n, name)? {
            // Cleared by another writer meanwhile: nothing left to do.
            None => Ok(None),
            Some(m) => restore_patch(n, name, &m, remove_taints).map(Some),
        })
        .await
    }

    /// Undoes what the marker says we did, then clears the marker, in one guarded patch;
    /// transient failures are retried until `deadline`. Removes exactly the taints the marker
    /// lists; uncordons only if the marker says we cordoned and the node is still cordoned. A
    /// taint these credentials may not remove (403) stays listed in the marker (the cordon part
    /// done) and is returned as [`NodeError::TaintLeft`]. Idempotent.
    #[tracing::instrument(skip(self), fields(node = %self.settings.node_name))]
    pub async fn restore(&self, deadline: Instant) -> Result<RestoreOutcome, NodeError> {
        let name = self.name().to_string();
        let node = self.get_by(deadline).await?;
        let Some(marker) = marker_of(&node, &name)? else {
            tracing::info!(node = %name, "no marker on node {name}; nothing to restore");
            return Ok(RestoreOutcome {
                marker: None,
                uncordoned: false,
                untainted: false,
                left_cordon_alone: false,
            });
        };
        if !marker.cordoned && marker.taints.is_empty() {
            tracing::info!(node = %name, "the marker on node {name} records no cordon and no taint of ours; only clearing it");
        }
        let (written, refused) = match self.write_restore(&node, true, deadline).await {
            Ok(w) => (w, None),
            Err(GuardedError::Api(e)) if e.is_forbidden() && !marker.taints.is_empty() => {
                tracing::warn!(node = %name, "may not remove taints from node {name} ({}); the marker keeps them", e.problem());
                let w = self
                    .write_restore(&node, false, deadline)
                    .await
                    .map_err(|e| self.failed("restore", e))?;
                (w, Some(e))
            }
            Err(e) => return Err(self.failed("restore", e)),
        };
        let Some(plan) = written.applied else {
            tracing::info!(node = %name, "the marker on node {name} was cleared by another writer");
            return Ok(RestoreOutcome {
                marker: Some(marker),
                uncordoned: false,
                untainted: false,
                left_cordon_alone: false,
            });
        };
        if plan.uncordons {
            tracing::info!(node = %name, "uncordoned node {name}");
        } else if is_unschedulable(&node) {
            tracing::info!(node = %name, "node {name} was not cordoned by us; leaving it cordoned");
        }
        for t in &plan.removes {
            tracing::info!(node = %name, "removed taint {t} from node {name}");
        }
        if let (Some(source), Some(t)) = (refused, plan.keeps.first()) {
            return Err(NodeError::TaintLeft {
                node: name,
                taint: t.to_string(),
                source,
            });
        }
        tracing::info!(node = %name, "cleared marker on node {name}");
        Ok(RestoreOutcome {
            marker: Some(marker),
            uncordoned: plan.uncordons,
            untainted: !plan.removes.is_empty(),
            left_cordon_alone: plan.left_cordon_alone,
        })
    }

    /// Waits until the Node's Ready condition is True, by kube's watcher (its backoff after
    /// errors, watch requests paced), until `deadline`.
    #[tracing::instrument(skip(self), fields(node = %self.settings.node_name))]
    pub async fn wait_ready(&self, deadline: Instant) -> Result<(), NodeError> {
        let started = Instant::now();
        let name = self.name().to_string();
        let api: Api<Node> = Api::all(self.clients.watch.clone());
        let config = watcher::Config::default()
            .fields(&format!("metadata.name={name}"))
            .timeout(WATCH_SECONDS);
        let wait = async {
            let stream = watch(api, config).backoff(retry::for_watches());
            let mut stream = std::pin::pin!(stream);
            let mut seen = false;
            while let Some(event) = stream.next().await {
                match event {
                    Ok(Event::Apply(n) | Event::InitApply(n)) => {
                        seen = true;
                        if is_ready(&n) {
                            return Ok(());
                        }
                    }
                    Ok(Event::Init) => seen = false,
                    Ok(Event::InitDone) if !seen => {
                        return Err(NodeError::Missing { node: name.clone() });
                    }
                    Ok(_) => {}
                    Err(e) => tracing::debug!(node = %name, "watch of node {name}: {e}"),
                }
            }
            Err(NodeError::NotReady {
                node: name.clone(),
                waited: started.elapsed(),
            })
        };
        match tokio::time::timeout_at(deadline, wait).await {
            Ok(r) => r,
            Err(_) => Err(NodeError::NotReady {
                node: name.clone(),
                waited: started.elapsed(),
            }),
        }
    }
}
