//! The slot calls: take one (trying again until a time), give it back. Every write is a create
//! (409 when another node created that Lease first) or the guarded JSON patch of
//! [`crate::api::guarded`], rebuilt from the Lease read again after a failed guard, so a race
//! for one slot has one winner.

use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams, PostParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use tokio::time::Instant;

use super::{
    GROUP_LABEL, HeldTimes, Holder, held_too_long, holder_of, identity, new_lease, release_patch,
    renewed, slot_names, stale, take_patch,
};
use crate::api::client::WATCH_SECONDS;
use crate::api::guarded::{self, FIELD_MANAGER, GuardedError};
use crate::api::retry;
use crate::api::{ApiError, Clients};
use crate::config::Settings;

/// The longest pause between two looks at a full group whose Leases do not change.
pub const WAIT_MAX: Duration = Duration::from_secs(5);

/// Resolves at the next change of a watched Lease (written or deleted); never when the watch
/// only lists, or ends. A failing watch yields its errors at the backoff's pace.
async fn next_change(changes: &mut Changes) {
    loop {
        match changes.next().await {
            Some(Ok(Event::Apply(_) | Event::Delete(_))) | Some(Err(_)) => return,
            Some(Ok(_)) => {}
            None => std::future::pending::<()>().await,
        }
    }
}

/// A watch of one group's slot Leases ([`Slots::changes`]).
pub type Changes = BoxStream<'static, Result<Event<Lease>, watcher::Error>>;

/// Waits for the next look at a group: a change of its Leases, or `every` without one (a
/// holder that went stale, its Node deleted or back in another boot or `hold_max` passed,
/// writes nothing to the Lease), or `until`.
pub async fn next_look(changes: &mut Changes, until: Instant, every: Duration) {
    let look = until.min(Instant::now() + every);
    tokio::select! {
        () = next_change(changes) => {}
        () = tokio::time::sleep_until(look) => {}
    }
}

/// What a wait for a slot came to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Taken {
    /// This node holds the slot Lease of this name.
    Slot(String),
    /// Every slot of the group is held, by these holders (`NODE/BOOT_ID`, or a foreign
    /// identity as the Lease says it).
    Full(Vec<String>),
}

/// What one look at a slot Lease found, for this node.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Look {
    /// No one holds it.
    Free,
    /// It may be taken from the identity it holds now: this node's (in any boot), or a holder
    /// that will not give it back.
    Open(String),
    /// Someone else holds it, by this identity.
    Held(String),
}

/// What a give-back came to.
#[derive(Debug)]
pub enum GivenBack {
    /// The slots given back (none: this node held none).
    Slots(Vec<String>),
    /// The slot Leases could not be listed (403 or 404, the answer here): this node holds no
    /// slot it could give back (with these credentials it could never take one).
    NotLooked(ApiError),
}

/// One slot as `status` shows it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct SlotView {
    pub name: String,
    /// `NODE/BOOT_ID`; `None`: free.
    pub holder: Option<String>,
    /// RFC 3339: when the holder took (or last renewed) it.
    pub since: Option<String>,
}

/// The slots of one node.
pub struct Slots<'a> {
    pub clients: &'a Clients,
    pub settings: &'a Settings,
}

impl Slots<'_> {
    fn api(&self) -> Api<Lease> {
        Api::namespaced(
            self.clients.api.clone(),
            &self.settings.fleet.lease_namespace,
        )
    }

    /// The slot Lease `name`, if it exists.
    async fn read(&self, name: &str, deadline: Instant) -> Result<Option<Lease>, ApiError> {
        let api = self.api();
        self.clients
            .retry(deadline, &self.object(name), || api.get_opt(name))
            .await
    }

    fn object(&self, name: &str) -> String {
        format!(
            "drain slot lease {}/{name}",
            self.settings.fleet.lease_namespace
        )
    }

    /// Takes a slot of `node`'s group for boot `boot_id`, looking again at a pace until one is
    /// free or `until` (then [`Taken::Full`]); each look's requests end by `look_by` or `until`,
    /// whichever is later (an `until` of now looks once). An answer that is an error for good (403 with
    /// the kubelet's credentials, which may write Leases only in `kube-node-lease`) is returned
    /// at once.
    pub async fn take(
        &self,
        node: &Node,
        boot_id: &str,
        until: Instant,
        look_by: Instant,
    ) -> Result<Taken, ApiError> {
        let me = Holder {
            node: self.settings.node_name.clone(),
            boot_id: boot_id.to_string(),
        };
        let group = super::group_of(&self.settings.fleet, node);
        let mut changes = self.changes(&group);
        let mut said = false;
        let mut holders = Vec::new();
        let by = look_by.max(until);
        loop {
            holders = match self.try_take(&me, &group, by).await {
                Ok(Taken::Full(now_held)) => now_held,
                Ok(taken) => return Ok(taken),
                // A look cut by its deadline is the wait's end, not an error of the server's;
                // unless no look ever completed: then the error is all there is to say.
                Err(_) if Instant::now() >= by && !holders.is_empty() => {
                    return Ok(Taken::Full(holders));
                }
                Err(e) => return Err(e),
            };
            if Instant::now() >= until {
                return Ok(Taken::Full(holders));
            }
            if !said {
                said = true;
                tracing::info!(
                    node = %me.node,
                    "every drain slot of group {group} is held ({}); node {} waits for one",
                    holders.join(", "),
                    me.node
                );
            }
            next_look(&mut changes, until, WAIT_MAX).await;
            if Instant::now() >= until {
                return Ok(Taken::Full(holders));
            }
        }
    }

    /// The group's Leases, watched: a slot given back wakes the next look at once
    /// ([`next_look`]).
    pub fn changes(&self, group: &str) -> Changes {
        let config = watcher::Config::default()
            .labels(&format!("{GROUP_LABEL}={group}"))
            .timeout(WATCH_SECONDS);
        let watched: Api<Lease> = Api::namespaced(
            self.clients.watch.clone(),
            &self.settings.fleet.lease_namespace,
        );
        watcher::watcher(watched, config)
            .backoff(retry::for_watches())
            .boxed()
    }

    /// Whether a slot of `group` is open to `me` now (free, stale or already this node's),
    /// without writing anything: `None` when one is, else every holder. The reboot gate's look.
    pub async fn holders_if_full(
        &self,
        me: &Holder,
        group: &str,
        deadline: Instant,
    ) -> Result<Option<Vec<String>>, ApiError> {
        let mut holders = Vec::new();
        for name in slot_names(&self.settings.fleet, group) {
            let Some(lease) = self.read(&name, deadline).await? else {
                return Ok(None);
            };
            match self.judge(&lease, me, deadline, false).await? {
                Look::Held(holder) => holders.push(holder),
                Look::Free | Look::Open(_) => return Ok(None),
            }
        }
        Ok(Some(holders))
    }

    /// One look at every slot of `group`: the first free, stale or already ours is taken
    /// ([`Taken::Slot`]); else the holders ([`Taken::Full`]).
    async fn try_take(
        &self,
        me: &Holder,
        group: &str,
        deadline: Instant,
    ) -> Result<Taken, ApiError> {
        let fleet = &self.settings.fleet;
        let api = self.api();
        let mut holders = Vec::new();
        for name in slot_names(fleet, group) {
            let object = self.object(&name);
            let Some(lease) = self.read(&name, deadline).await? else {
                let lease = new_lease(&name, fleet, group, me, jiff::Timestamp::now());
                let pp = PostParams {
                    field_manager: Some(FIELD_MANAGER.to_string()),
                    ..PostParams::default()
                };
                match self
                    .clients
                    .retry(deadline, &object, || api.create(&pp, &lease))
                    .await
                {
                    Ok(_) => {
                        tracing::debug!(node = %me.node, "node {} created drain slot {name}", me.node);
                        return Ok(Taken::Slot(name));
                    }
                    // Another node created it first: it is theirs.
                    Err(e) if e.is_conflict() => {
                        holders.push(format!("{name} (just taken)"));
                        continue;
                    }
                    Err(e) => return Err(e),
                }
            };
            let expected = match self.judge(&lease, me, deadline, true).await? {
                Look::Free => None,
                Look::Open(id) => Some(id),
                Look::Held(holder) => {
                    holders.push(holder);
                    continue;
                }
            };
            let now = jiff::Timestamp::now();
            let written =
                guarded::write(self.clients, &api, &name, &object, deadline, lease, |l| {
                    take_patch(l, me, expected.as_deref(), now, fleet)
                })
                .await;
            match written {
                Ok(w) if w.applied.is_some() => {
                    tracing::debug!(node = %me.node, "node {} wrote drain slot {name}", me.node);
                    return Ok(Taken::Slot(name));
                }
                Ok(w) => holders.push(identity(&w.object).unwrap_or("?").to_string()),
                Err(GuardedError::Contended) => holders.push(format!("{name} (contended)")),
                Err(GuardedError::Api(e)) => return Err(e),
                Err(GuardedError::Build(e)) => {
                    return Err(self.clients.error(&object, kube::Error::SerdeError(e)));
                }
            }
        }
        Ok(Taken::Full(holders))
    }

    /// Whether `lease` may be taken by `me`: [`Look::Free`] when no one holds it,
    /// [`Look::Open`] when it is ours (this node in any boot) or stale, [`Look::Held`] when
    /// someone else holds it. A holder
    /// that is not `NODE/BOOT_ID` has no Node to look at: it is judged by the Lease's times
    /// alone ([`held_too_long`]). `taking`: a stale holder is about to lose it (said in the
    /// journal).
    async fn judge(
        &self,
        lease: &Lease,
        me: &Holder,
        deadline: Instant,
        taking: bool,
    ) -> Result<Look, ApiError> {
        let id = identity(lease).map(str::to_string);
        let Some(id) = id else {
            return Ok(Look::Free);
        };
        let now = jiff::Timestamp::now();
        let hold_max = self.settings.fleet.hold_max;
        let (holder, why) = match holder_of(lease) {
            Some(holder) if holder.node == me.node => return Ok(Look::Open(id)),
            Some(holder) => {
                let nodes: Api<Node> = Api::all(self.clients.api.clone());
                let object = format!("node {}", holder.node);
                let node = self
                    .clients
                    .retry(deadline, &object, || nodes.get_opt(&holder.node))
                    .await?;
                let why = stale(&holder, node.as_ref(), HeldTimes::of(lease), now, hold_max);
                (holder.to_string(), why)
            }
            // Not an identity we write: only its times can say it will never give it back.
            None => (
                format!("{id:?} (not NODE/BOOT_ID)"),
                held_too_long(HeldTimes::of(lease), now, hold_max),
            ),
        };
        let Some(why) = why else {
            return Ok(Look::Held(id));
        };
        if taking {
            tracing::warn!(
                node = %me.node,
                "drain slot {} is held by {holder}, which will not give it back ({why}); node {} takes it",
                lease.metadata.name.as_deref().unwrap_or("?"),
                me.node
            );
        }
        Ok(Look::Open(id))
    }

    /// Every slot of `node`'s group as it is now, for `status`: one GET each.
    pub async fn look(&self, node: &Node) -> Result<Vec<SlotView>, ApiError> {
        let fleet = &self.settings.fleet;
        let group = super::group_of(fleet, node);
        let deadline = Instant::now() + self.clients.request_timeout;
        let mut views = Vec::new();
        for name in slot_names(fleet, &group) {
            let lease = self.read(&name, deadline).await?;
            let holder = lease.as_ref().and_then(identity).map(str::to_string);
            views.push(SlotView {
                since: lease
                    .as_ref()
                    .filter(|_| holder.is_some())
                    .and_then(renewed)
                    .map(|t| t.to_string()),
                name,
                holder,
            });
        }
        Ok(views)
    }

    /// Gives back every slot this node holds (in any boot). A list of the Leases refused (403:
    /// the kubelet's credentials may touch only their own node Lease) or not found (404: no
    /// such namespace) means this node holds no slot it could give back:
    /// [`GivenBack::NotLooked`], not an error.
    pub async fn give_back(&self, deadline: Instant) -> Result<GivenBack, ApiError> {
        let api = self.api();
        let node = self.settings.node_name.as_str();
        let object = format!(
            "drain slot leases in namespace {}",
            self.settings.fleet.lease_namespace
        );
        let params = ListParams::default().labels(GROUP_LABEL);
        let leases = match self
            .clients
            .retry(deadline, &object, || api.list(&params))
            .await
        {
            Ok(leases) => leases,
            Err(e) if e.is_forbidden() || e.is_not_found() => return Ok(GivenBack::NotLooked(e)),
            Err(e) => return Err(e),
        };
        let mut given = Vec::new();
        for lease in leases.items {
            if holder_of(&lease).is_none_or(|h| h.node != node) {
                continue;
            }
            let name = lease.metadata.name.clone().unwrap_or_default();
            let object = self.object(&name);
            // A hold renewed since this list is a drain of this node that started meanwhile:
            // it keeps the slot.
            let seen = renewed(&lease);
            match guarded::write(self.clients, &api, &name, &object, deadline, lease, |l| {
                if renewed(l) != seen {
                    return Ok(None);
                }
                release_patch(l, node)
            })
            .await
            {
                Ok(w) if w.applied.is_some() => {
                    tracing::info!(node = %node, "node {node} gave back drain slot {name}");
                    given.push(name);
                }
                Ok(_) => {}
                Err(GuardedError::Api(e)) => return Err(e),
                Err(GuardedError::Contended) => {
                    tracing::warn!(node = %node, "cannot give back {object}: it keeps changing");
                }
                Err(GuardedError::Build(e)) => {
                    return Err(self.clients.error(&object, kube::Error::SerdeError(e)));
                }
            }
        }
        Ok(GivenBack::Slots(given))
    }
}
