//! The engine's part of the drain slots (`[fleet]`, [`crate::fleet`]): the wait for a slot
//! before a prepare, the prepare alone when none came, and the give-back at a restore.

use tokio::time::Instant;

use super::{Engine, Error, PrepareOutcome, SlotWay, evict_without_cordon_at};
use crate::drain::DrainOptions;
use crate::events::{NodeEvents, Reason as EventReason};
use crate::fleet::{
    self,
    slots::{GivenBack, Taken},
};
use crate::report::{Report, SlotReport};
use crate::time_limit::FINAL_EVENTS_MAX;

impl Engine {
    /// With `[fleet] slots`, takes a drain slot before anything changes ([`crate::fleet`]),
    /// waiting for one at most half the time to `deadline` (the rest is the drain's; the wait
    /// counts against it and is said in the journal, the Events and the report). A node that
    /// carries our marker of this boot was prepared already (a slotless drain, an early drain,
    /// `reboot --force`, a `drain` by hand): its capacity is out, so it looks once (a slot it
    /// holds is found its own) and does not wait again; so does
    /// [`Engine::looking_once_for_a_slot`]. A slot the command took already
    /// ([`Engine::holding_slot`]) is not looked for again: one write and one line per take.
    /// `None`: no slots; else the wait, and with no slot why (`DrainSlotUnavailable` posted,
    /// naming the holders or the error).
    pub(super) async fn take_slot(
        &self,
        deadline: Instant,
    ) -> Option<(SlotReport, Option<String>)> {
        if self.settings.fleet.slots == 0 {
            return None;
        }
        let started = Instant::now();
        let half = evict_without_cordon_at(started, deadline);
        let (taken, elapsed) = match &self.slot_way {
            // Taken by the command before the drain: said once, here, and not written again.
            SlotWay::Held { name, waited } => (Ok(Taken::Slot(name.clone())), *waited),
            SlotWay::LookOnce => (
                self.look_for_slot(started, half, false).await,
                started.elapsed(),
            ),
            SlotWay::Wait => (
                self.look_for_slot(half, half, true).await,
                started.elapsed(),
            ),
        };
        Some(self.say_slot(taken, elapsed, deadline).await)
    }

    /// How a slot take went, said once: the journal, an Event (`DrainSlotTaken` or
    /// `DrainSlotUnavailable`) and the report's part; with no slot the refusal's words.
    async fn say_slot(
        &self,
        taken: Result<Taken, Error>,
        elapsed: std::time::Duration,
        deadline: Instant,
    ) -> (SlotReport, Option<String>) {
        let node = &self.settings.node_name;
        let waited = elapsed.as_secs_f64();
        let mut slot = SlotReport {
            slot: None,
            waited_ms: elapsed.as_millis() as u64,
            holders: Vec::new(),
            error: None,
        };
        match &taken {
            Ok(Taken::Slot(name) | Taken::Kept(name)) => slot.slot = Some(name.clone()),
            Ok(Taken::Full(holders)) => slot.holders = holders.clone(),
            Err(e) => slot.error = Some(e.to_string()),
        }
        let (reason, message, refused) = match taken {
            // Taken for this boot's earlier drain (the reboot's, before logind's announcement):
            // said then, and written then.
            Ok(Taken::Kept(name)) => {
                tracing::debug!(node = %node, "node {node} holds drain slot {name} already");
                return (slot, None);
            }
            Ok(Taken::Slot(name)) => (
                EventReason::SlotTaken,
                format!("node {node} took drain slot {name} after {waited:.1} s"),
                false,
            ),
            Ok(Taken::Full(holders)) => (
                EventReason::SlotUnavailable,
                format!(
                    "no drain slot for node {node} within {waited:.1} s: held by {}; [fleet] on_no_slot = \"{}\"",
                    holders.join(", "),
                    self.settings.fleet.on_no_slot.as_str()
                ),
                true,
            ),
            Err(e) => (
                EventReason::SlotUnavailable,
                format!(
                    "no drain slot for node {node}: {e}; [fleet] on_no_slot = \"{}\"",
                    self.settings.fleet.on_no_slot.as_str()
                ),
                true,
            ),
        };
        if refused {
            tracing::warn!(node = %node, "{message}");
        } else {
            tracing::info!(node = %node, "{message}");
        }
        // The Event is not worth the drain's time: a server that takes a slot's write but
        // hangs on Events gets at most FINAL_EVENTS_MAX of it.
        let posted_by = deadline.min(Instant::now() + FINAL_EVENTS_MAX);
        if let Ok(clients) = self.clients_by(posted_by).await {
            NodeEvents::new(clients.clone(), node)
                .emit_by(reason, &message, posted_by)
                .await;
        }
        (slot, refused.then_some(message))
    }

    /// The report's part of a slot `name` this engine holds already
    /// ([`Engine::holding_slot`]: `drain` waited `waited` for it), said once as a take is (the
    /// journal and `DrainSlotTaken`); `None` without one. For a drain without a prepare of its
    /// own ([`Engine::drain_with`]).
    pub(super) async fn held_slot(&self, deadline: Instant) -> Option<SlotReport> {
        let SlotWay::Held { name, waited } = &self.slot_way else {
            return None;
        };
        let taken = Ok(Taken::Slot(name.clone()));
        Some(self.say_slot(taken, *waited, deadline).await.0)
    }

    /// Takes a drain slot of this node's group (`[fleet]`), looking again at a pace until one
    /// is free or `until`; changes nothing else.
    pub async fn wait_for_slot(&self, until: Instant) -> Result<Taken, Error> {
        self.look_for_slot(until, until, false).await
    }

    /// [`Engine::wait_for_slot`] until `until`, each look's requests by `look_by` (not before
    /// `until`: a wait of none still looks once); `once_if_prepared`: a node this boot prepared
    /// already looks once (see [`Engine::take_slot`]).
    async fn look_for_slot(
        &self,
        until: Instant,
        look_by: Instant,
        once_if_prepared: bool,
    ) -> Result<Taken, Error> {
        let clients = self.clients_by(look_by).await?;
        let node = self.ops_by(look_by).await?.get_by(look_by).await?;
        let boot_id = self.boot_id()?;
        let until = match crate::node::read_marker(&node) {
            crate::node::MarkerRead::Ours(m) if once_if_prepared && m.boot_id == boot_id => {
                tracing::info!(
                    node = %self.settings.node_name,
                    "node {} was prepared already in this boot ({}, {}): it takes a drain slot \
                     only if one is open to it now, without waiting",
                    self.settings.node_name,
                    m.why,
                    m.time
                );
                Instant::now()
            }
            _ => until,
        };
        let slots = fleet::slots::Slots {
            clients,
            settings: &self.settings,
        };
        slots
            .take(&node, &boot_id, until, look_by)
            .await
            .map_err(|source| Error::Slot {
                node: self.settings.node_name.clone(),
                source,
            })
    }

    /// The reboot gate's look (`crate::daemon::gate`), writing nothing: `None` when a slot of
    /// this node's group is open to it (free, stale or its own), else the group and every
    /// holder; with the group's Leases watched from then on (`changes`, made at the first look).
    pub async fn slots_full(
        &self,
        changes: &mut Option<fleet::slots::Changes>,
        deadline: Instant,
    ) -> Result<Option<(String, Vec<String>)>, Error> {
        let clients = self.clients_by(deadline).await?;
        let node = self.ops_by(deadline).await?.get_by(deadline).await?;
        let me = fleet::Holder {
            node: self.settings.node_name.clone(),
            boot_id: self.boot_id()?,
        };
        let slots = fleet::slots::Slots {
            clients,
            settings: &self.settings,
        };
        let group = fleet::group_of(&self.settings.fleet, &node);
        if changes.is_none() {
            *changes = Some(slots.changes(&group));
        }
        let full = slots
            .holders_if_full(&me, &group, deadline)
            .await
            .map_err(|source| Error::Slot {
                node: me.node.clone(),
                source,
            })?;
        Ok(full.map(|holders| (group, holders)))
    }

    /// `[fleet] on_no_slot = "cordon"`: the prepare alone (marker, taint, cordon: no pod is
    /// scheduled onto a node going down), no eviction; the report says why.
    pub(super) async fn cordon_without_slot(
        &self,
        why: &str,
        deadline: Instant,
        refused: String,
        slot: Option<SlotReport>,
    ) -> (Result<PrepareOutcome, Error>, Report) {
        let outcome = self.prepare_by(why, deadline).await;
        let options = DrainOptions {
            why: why.to_string(),
            dry_run: false,
            grace_to: None,
        };
        let mut report =
            self.failed_report(&options, format!("{refused}: cordoned, nothing evicted"));
        report.slot = slot;
        self.store_report(&report, deadline).await;
        (outcome, report)
    }

    /// Gives back the drain slots this node holds (`[fleet]`), with a `DrainSlotReleased` Event
    /// each; by `deadline`. Nothing without slots. Slot Leases these credentials may not list
    /// (403, the kubelet's) or whose namespace is missing (404) are no slot to give back: said
    /// once in the journal, and the restore goes on.
    pub async fn give_back_slots(&self, deadline: Instant) -> Result<(), Error> {
        if self.settings.fleet.slots == 0 {
            return Ok(());
        }
        let node = &self.settings.node_name;
        let clients = self.clients_by(deadline).await?;
        let slots = fleet::slots::Slots {
            clients,
            settings: &self.settings,
        };
        let given = slots
            .give_back(deadline)
            .await
            .map_err(|source| Error::Slot {
                node: node.clone(),
                source,
            })?;
        let given = match given {
            GivenBack::Slots(given) => given,
            GivenBack::NotLooked(e) => {
                tracing::warn!(
                    node = %node,
                    "node {node} holds no drain slot it could give back: {e}; no slot was looked at"
                );
                return Ok(());
            }
        };
        let events = NodeEvents::new(clients.clone(), node);
        for name in given {
            let message = format!("node {node} gave back drain slot {name}");
            let posted_by = deadline.min(Instant::now() + FINAL_EVENTS_MAX);
            events
                .emit_by(EventReason::SlotReleased, &message, posted_by)
                .await;
        }
        Ok(())
    }

    /// Carries the drain slots this node holds from an earlier boot into this one, by
    /// `deadline`, so the slot stays this node's while `[fleet] release_delay` runs after the
    /// restore (a slot of another boot on a restored node is stale to the others). The slots
    /// this node holds in this boot after it; none without slots or with Leases these
    /// credentials may not list.
    pub async fn carry_slots(&self, deadline: Instant) -> Result<Vec<String>, Error> {
        if self.settings.fleet.slots == 0 {
            return Ok(Vec::new());
        }
        let clients = self.clients_by(deadline).await?;
        let slots = fleet::slots::Slots {
            clients,
            settings: &self.settings,
        };
        match slots.carry_into(&self.boot_id()?, deadline).await {
            Ok(GivenBack::Slots(carried)) => Ok(carried),
            Ok(GivenBack::NotLooked(_)) => Ok(Vec::new()),
            Err(source) => Err(Error::Slot {
                node: self.settings.node_name.clone(),
                source,
            }),
        }
    }
}
