//! The Node calls: read, restore (one guarded patch: taints, uncordon, marker), the wait for
//! Ready (kube's watcher); the prepare (one guarded patch: marker, taint, cordon) is
//! `node::prepare`'s.

use crate::shutdown_kind::ShutdownKind;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use kube::runtime::{WatchStreamExt, watcher as watch};
use tokio::time::Instant;

use super::marker::{
    EXCLUDE_LB_LABEL, MarkerRead, RestorePlan, clear_foreign_patch, is_unschedulable, read_marker,
    restore_patch, unrecorded_patch,
};
use super::{NodeError, RestoreOutcome, is_ready};
use crate::api::Clients;
use crate::api::client::WATCH_SECONDS;
use crate::api::guarded::{self, GuardedError, Written};
use crate::api::retry;
use crate::config::Settings;

/// The namespace of the kubelets' node Leases (the Node authorizer lets a node reach its Lease
/// only there); `check` reviews the same.
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// Node operations for one node.
pub struct NodeOps<'a> {
    pub clients: &'a Clients,
    pub settings: &'a Settings,
    /// The kind of shutdown a prepare is for, recorded in the marker (`None`: by hand).
    pub kind: Option<ShutdownKind>,
}

pub(super) type Write<P> = Result<Written<Node, P>, GuardedError<NodeError>>;

impl NodeOps<'_> {
    pub(super) fn name(&self) -> &str {
        &self.settings.node_name
    }

    fn object(&self) -> String {
        format!("node {}", self.name())
    }

    /// This Node alone, watched: the watch client's API and kube's watcher config for it.
    pub(super) fn node_watch(&self) -> (Api<Node>, watcher::Config) {
        let config = watcher::Config::default()
            .fields(&format!("metadata.name={}", self.name()))
            .timeout(WATCH_SECONDS);
        (Api::all(self.clients.watch.clone()), config)
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

    pub(super) fn failed(&self, what: &'static str, e: GuardedError<NodeError>) -> NodeError {
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
    pub(super) async fn write<P>(
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

    async fn write_restore(
        &self,
        node: &Node,
        remove_taints: bool,
        deadline: Instant,
    ) -> Write<RestorePlan> {
        let name = self.name();
        let key = &self.settings.taint.key;
        self.write(node, deadline, |n| match read_marker(n) {
            // Cleared by another writer meanwhile: nothing left to do.
            MarkerRead::Absent => Ok(None),
            MarkerRead::Ours(m) => restore_patch(n, name, &m, key, remove_taints).map(Some),
            MarkerRead::Foreign(why) => clear_foreign_patch(n, name, &why.to_string()).map(Some),
        })
        .await
    }

    /// Undoes what the marker says we did, then clears the marker, in one guarded patch;
    /// transient failures are retried until `deadline`. Removes exactly the taints of ours the
    /// marker lists (never another key); uncordons only if the marker says we cordoned, the node
    /// is still cordoned and the cordon is provably still ours ([`super::cordon_is_ours`]),
    /// else leaves it and says why. A foreign marker is cleared and nothing undone. A taint these
    /// credentials may not remove (403) stays listed in the marker (the cordon part done) and is
    /// returned as [`NodeError::TaintLeft`]. Idempotent.
    #[tracing::instrument(skip_all, fields(node = %self.settings.node_name))]
    pub async fn restore(&self, deadline: Instant) -> Result<RestoreOutcome, NodeError> {
        let name = self.name().to_string();
        let node = self.get_by(deadline).await?;
        let marker = match read_marker(&node) {
            MarkerRead::Absent => return self.restore_unrecorded(&node, deadline).await,
            MarkerRead::Foreign(why) => {
                tracing::warn!(
                    "the marker annotation on node {name} is not one we wrote ({why}); clearing it and undoing nothing"
                );
                None
            }
            MarkerRead::Ours(m) => {
                if !m.cordoned && m.taints.is_empty() {
                    tracing::info!(
                        "the marker on node {name} records no cordon and no taint of ours; only clearing it"
                    );
                }
                Some(m)
            }
        };
        let has_taints = marker.as_ref().is_some_and(|m| !m.taints.is_empty());
        let (written, refused) = match self.write_restore(&node, true, deadline).await {
            Ok(w) => (w, None),
            Err(GuardedError::Api(e)) if e.is_forbidden() && has_taints => {
                tracing::warn!(
                    "may not remove taints from node {name} ({}); the marker keeps them",
                    e.problem()
                );
                let w = self
                    .write_restore(&node, false, deadline)
                    .await
                    .map_err(|e| self.failed("restore", e))?;
                (w, Some(e))
            }
            Err(e) => return Err(self.failed("restore", e)),
        };
        let Some(plan) = written.applied else {
            tracing::info!("the marker on node {name} was cleared by another writer");
            return Ok(RestoreOutcome::nothing(marker));
        };
        if let Some(why) = &plan.foreign {
            tracing::warn!(
                "cleared the foreign marker on node {name} ({why}); left its cordon and taints as they are"
            );
            return Ok(RestoreOutcome {
                foreign_marker: Some(why.clone()),
                ..RestoreOutcome::nothing(None)
            });
        }
        if plan.uncordons {
            tracing::info!("uncordoned node {name}");
        } else if let Some(why) = &plan.cordon_kept {
            tracing::warn!("left node {name} cordoned: {why}");
        } else if is_unschedulable(&node) {
            tracing::info!("node {name} was not cordoned by us; leaving it cordoned");
        }
        if plan.includes {
            tracing::info!("removed label {EXCLUDE_LB_LABEL} from node {name}");
        } else if let Some(why) = &plan.label_kept {
            tracing::warn!("left label {EXCLUDE_LB_LABEL} on node {name}: {why}");
        }
        for t in &plan.removes {
            tracing::info!("removed taint {t} from node {name}");
        }
        for t in &plan.refused {
            tracing::warn!(
                "the marker on node {name} lists taint {t}, whose key is not ours; left it"
            );
        }
        if let (Some(source), Some(t)) = (refused, plan.keeps.first()) {
            return Err(NodeError::TaintLeft {
                node: name,
                taint: t.to_string(),
                source,
            });
        }
        tracing::info!("cleared marker on node {name}");
        Ok(RestoreOutcome {
            removed_taints: plan.removes.iter().map(ToString::to_string).collect(),
            unproven: Vec::new(),
            marker,
            uncordoned: plan.uncordons,
            untainted: !plan.removes.is_empty(),
            left_cordon_alone: plan.left_cordon_alone,
            cordon_kept: plan.cordon_kept,
            foreign_marker: None,
            refused_taints: plan.refused.iter().map(ToString::to_string).collect(),
            lb_label_removed: plan.includes,
            lb_label_kept: plan.label_kept,
        })
    }

    /// Restore when the node carries no marker (someone removed it, perhaps while our taint and
    /// cordon stayed): one guarded write removing only what managedFields prove ours
    /// ([`unrecorded_patch`]: our cordon, taints with a key of ours in a list our field manager
    /// wrote last, our label); what of ours stays unproven is logged with the command that
    /// removes it and returned in [`RestoreOutcome::unproven`].
    async fn restore_unrecorded(
        &self,
        node: &Node,
        deadline: Instant,
    ) -> Result<RestoreOutcome, NodeError> {
        let name = self.name();
        let key = &self.settings.taint.key;
        let written = self
            .write(node, deadline, |n| match read_marker(n) {
                // A marker appeared meanwhile (a prepare): it is the drain's now, not ours to undo.
                MarkerRead::Ours(_) | MarkerRead::Foreign(_) => Ok(None),
                MarkerRead::Absent => {
                    unrecorded_patch(n, name, key).map(|(patch, plan)| patch.map(|p| (p, plan)))
                }
            })
            .await
            .map_err(|e| self.failed("restore", e))?;
        let plan = match written.applied {
            Some(plan) => plan,
            None if matches!(read_marker(&written.object), MarkerRead::Absent) => {
                unrecorded_patch(&written.object, name, key)?.1
            }
            None => {
                tracing::info!(
                    "a marker appeared on node {name} during the restore; leaving the node to it"
                );
                return Ok(RestoreOutcome::nothing(None));
            }
        };
        if plan.uncordons || plan.includes || !plan.removes.is_empty() {
            tracing::warn!(
                "node {name} carries no marker (someone removed it); undoing only what \
                 managedFields prove ours"
            );
        } else if plan.unproven.is_empty() {
            tracing::info!("no marker on node {name}; nothing to restore");
        }
        if plan.uncordons {
            tracing::info!(
                "uncordoned node {name}: field manager {} alone owns spec.unschedulable",
                crate::api::guarded::FIELD_MANAGER
            );
        }
        for t in &plan.removes {
            tracing::info!(
                "removed taint {t} from node {name}: field manager {} wrote the taints last",
                crate::api::guarded::FIELD_MANAGER
            );
        }
        if plan.includes {
            tracing::info!("removed label {EXCLUDE_LB_LABEL} from node {name}");
        }
        for u in &plan.unproven {
            tracing::warn!("no marker on node {name}: {u}");
        }
        Ok(RestoreOutcome {
            uncordoned: plan.uncordons,
            untainted: !plan.removes.is_empty(),
            lb_label_removed: plan.includes,
            removed_taints: plan.removes.iter().map(ToString::to_string).collect(),
            unproven: plan.unproven,
            ..RestoreOutcome::nothing(None)
        })
    }

    /// Waits until a live kubelet reports the Node Ready: Ready=True with a `lastHeartbeatTime`
    /// later than `since` (this boot's start), or Ready=True and the node Lease's `renewTime`
    /// later than `since` (read every [`LEASE_POLL`]). A Ready=True left by the previous boot's
    /// kubelet stays for ~40 s after it stopped (the node lifecycle controller's
    /// `--node-monitor-grace-period`, kubernetes `pkg/controller/nodelifecycle`) and is not enough.
    /// By kube's watcher (its backoff after errors, watch requests paced), until `deadline`.
    #[tracing::instrument(skip_all, fields(node = %self.settings.node_name))]
    pub async fn wait_ready(
        &self,
        deadline: Instant,
        since: jiff::Timestamp,
    ) -> Result<(), NodeError> {
        let started = Instant::now();
        let name = self.name().to_string();
        let (api, config) = self.node_watch();
        let leases: Api<Lease> = Api::namespaced(self.clients.api.clone(), NODE_LEASE_NAMESPACE);
        let last = std::sync::Mutex::new(String::from("no Ready condition seen"));
        let wait = async {
            let stream = watch(api, config).backoff(retry::for_watches());
            let mut stream = std::pin::pin!(stream);
            let mut seen = false;
            let mut ready = false;
            let mut poll = tokio::time::interval(LEASE_POLL);
            loop {
                tokio::select! {
                    event = stream.next() => match event {
                        None => break,
                        Some(Ok(Event::Apply(n) | Event::InitApply(n))) => {
                            seen = true;
                            ready = is_ready(&n);
                            match heartbeat(&n) {
                                Some(at) if ready && at > since => {
                                    tracing::info!("node {name} is Ready with a heartbeat at {at}, after this boot began at {since}");
                                    return Ok(());
                                }
                                Some(at) if ready => *last.lock().unwrap_or_else(|p| p.into_inner()) = format!("Ready=True, but its last heartbeat at {at} is from before this boot began at {since}"),
                                _ if ready => *last.lock().unwrap_or_else(|p| p.into_inner()) = "Ready=True without a heartbeat time".into(),
                                _ => *last.lock().unwrap_or_else(|p| p.into_inner()) = "not Ready".into(),
                            }
                        }
                        Some(Ok(Event::Init)) => seen = false,
                        Some(Ok(Event::InitDone)) if !seen => {
                            return Err(NodeError::Missing { node: name.clone() });
                        }
                        Some(Ok(_)) => {}
                        Some(Err(e)) => tracing::debug!("watch of node {name}: {e}"),
                    },
                    _ = poll.tick(), if ready => match leases.get_opt(&name).await {
                        Ok(Some(lease)) => {
                            let renewed = lease.spec.and_then(|s| s.renew_time).map(|t| t.0);
                            if let Some(at) = renewed.filter(|at| *at > since) {
                                tracing::info!("node {name} is Ready and its Lease was renewed at {at}, after this boot began at {since}");
                                return Ok(());
                            }
                        }
                        Ok(None) => {}
                        Err(e) => tracing::debug!("cannot read the Lease of node {name}: {e}"),
                    },
                }
            }
            Err(NodeError::NotReady {
                node: name.clone(),
                waited: started.elapsed(),
                state: last.lock().unwrap_or_else(|p| p.into_inner()).clone(),
            })
        };
        let result = tokio::time::timeout_at(deadline, wait).await;
        let state = last.lock().unwrap_or_else(|p| p.into_inner()).clone();
        match result {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(e),
            Err(_) => Err(NodeError::NotReady {
                node: name,
                waited: started.elapsed(),
                state,
            }),
        }
    }
}

impl NodeOps<'_> {
    /// Watches the Node until `until` holds for it (`Ok(true)`) or `deadline` passes
    /// (`Ok(false)`); the Node's absence is an error.
    pub async fn watch_until(
        &self,
        deadline: Instant,
        until: impl Fn(&Node) -> bool,
    ) -> Result<bool, NodeError> {
        let name = self.name().to_string();
        let (api, config) = self.node_watch();
        let wait = async {
            let stream = watch(api, config).backoff(retry::for_watches());
            let mut stream = std::pin::pin!(stream);
            let mut seen = false;
            while let Some(event) = stream.next().await {
                match event {
                    Ok(Event::Apply(n) | Event::InitApply(n)) => {
                        seen = true;
                        if until(&n) {
                            return Ok(true);
                        }
                    }
                    Ok(Event::Init) => seen = false,
                    Ok(Event::InitDone) if !seen => {
                        return Err(NodeError::Missing { node: name.clone() });
                    }
                    Ok(_) => {}
                    Err(e) => tracing::debug!("watch of node {name}: {e}"),
                }
            }
            Ok(false)
        };
        tokio::time::timeout_at(deadline, wait)
            .await
            .unwrap_or(Ok(false))
    }
}

/// How often the Lease is read while the Node shows a Ready=True of unknown freshness.
pub const LEASE_POLL: std::time::Duration = std::time::Duration::from_secs(2);

/// The Ready condition's `lastHeartbeatTime`.
fn heartbeat(node: &Node) -> Option<jiff::Timestamp> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")?
        .last_heartbeat_time
        .as_ref()
        .map(|t| t.0)
}
