//! The writes to the slots this node already holds: give them back, or carry them into this
//! boot (`[fleet] release_delay`: a node back from its reboot keeps its slot while its workloads
//! settle, and a slot taken in the boot before would read as stale, [`super::stale`]).

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::ListParams;
use tokio::time::Instant;

use super::slots::Slots;
use super::{GROUP_LABEL, Holder, holder_of, identity, release_patch, renewed, take_patch};
use crate::api::ApiError;
use crate::api::guarded::{self, GuardedError};

/// What a give-back (or a carry into this boot) came to.
#[derive(Debug)]
pub enum GivenBack {
    /// The slots given back, or held in this boot after a carry (none: this node held none).
    Slots(Vec<String>),
    /// The slot Leases could not be listed (403 or 404, the answer here): this node holds no
    /// slot it could give back (with these credentials it could never take one).
    NotLooked(ApiError),
}

/// What to write to each slot this node holds.
#[derive(Clone, Copy)]
enum Write<'a> {
    GiveBack,
    /// Held again by this boot's holder, from now.
    Carry(&'a Holder),
}

impl Slots<'_> {
    /// Gives back every slot this node holds (in any boot). A list of the Leases refused (403:
    /// the kubelet's credentials may touch only their own node Lease) or not found (404: no
    /// such namespace) means this node holds no slot it could give back:
    /// [`GivenBack::NotLooked`], not an error.
    pub async fn give_back(&self, deadline: Instant) -> Result<GivenBack, ApiError> {
        self.write_held(Write::GiveBack, deadline).await
    }

    /// Carries every slot this node holds from an earlier boot into boot `boot_id`
    /// (`acquireTime` now, so `hold_max` counts from here); slots already held by this boot are
    /// left as they are. The slots this node holds in `boot_id` after it; listed as
    /// [`Slots::give_back`] lists.
    pub async fn carry_into(
        &self,
        boot_id: &str,
        deadline: Instant,
    ) -> Result<GivenBack, ApiError> {
        let me = Holder {
            node: self.settings.node_name.clone(),
            boot_id: boot_id.to_string(),
        };
        self.write_held(Write::Carry(&me), deadline).await
    }

    async fn write_held(&self, write: Write<'_>, deadline: Instant) -> Result<GivenBack, ApiError> {
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
        let mut written = Vec::new();
        for lease in leases.items {
            let Some(holder) = holder_of(&lease).filter(|h| h.node == node) else {
                continue;
            };
            let name = lease.metadata.name.clone().unwrap_or_default();
            let carried = matches!(write, Write::Carry(me) if holder.boot_id == me.boot_id);
            if carried || self.write_one(write, &name, lease, deadline).await? {
                written.push(name);
            }
        }
        Ok(GivenBack::Slots(written))
    }

    /// One guarded write of slot `name` (as read: `lease`); true when it was applied.
    async fn write_one(
        &self,
        write: Write<'_>,
        name: &str,
        lease: Lease,
        deadline: Instant,
    ) -> Result<bool, ApiError> {
        let api = self.api();
        let node = self.settings.node_name.as_str();
        let object = self.object(name);
        // A hold renewed since this list is a drain of this node that started meanwhile: it
        // keeps the slot as that drain wrote it.
        let seen = renewed(&lease);
        let read_as = identity(&lease).map(str::to_string);
        let now = jiff::Timestamp::now();
        let fleet = &self.settings.fleet;
        let written = guarded::write(self.clients, &api, name, &object, deadline, lease, |l| {
            if renewed(l) != seen {
                return Ok(None);
            }
            match write {
                Write::GiveBack => release_patch(l, node),
                Write::Carry(me) => take_patch(l, me, read_as.as_deref(), now, fleet),
            }
        })
        .await;
        match written {
            Ok(w) if w.applied.is_some() => {
                match write {
                    Write::GiveBack => {
                        tracing::info!(node = %node, "node {node} gave back drain slot {name}")
                    }
                    Write::Carry(me) => tracing::info!(
                        node = %node,
                        "node {node} holds drain slot {name} in boot {} now", me.boot_id
                    ),
                }
                Ok(true)
            }
            Ok(_) => Ok(false),
            Err(GuardedError::Api(e)) => Err(e),
            Err(GuardedError::Contended) => {
                tracing::warn!(node = %node, "cannot write {object}: it keeps changing");
                Ok(false)
            }
            Err(GuardedError::Build(e)) => {
                Err(self.clients.error(&object, kube::Error::SerdeError(e)))
            }
        }
    }
}
