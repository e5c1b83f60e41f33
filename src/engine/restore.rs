//! The engine's restore: undo what the marker says this node's prepare did, after the node is
//! Ready and its agents run, and say what was undone and what was left.

use super::*;

impl Engine {
    /// Undoes only what the marker says we did; writes a Restored event when there was a marker.
    /// Transient failures are retried for up to the configured drain timeout
    /// ([`Engine::restore_by`] takes a deadline). A taint these credentials may not remove is an
    /// error ([`NodeError::TaintLeft`]); the marker then keeps it.
    pub async fn restore(&self) -> Result<RestoreOutcome, Error> {
        self.restore_by(Instant::now() + self.settings.drain.timeout)
            .await
    }

    /// [`Engine::restore`], retrying transient failures (no answer, 5xx) until `deadline`.
    pub async fn restore_by(&self, deadline: Instant) -> Result<RestoreOutcome, Error> {
        let out = self.restore_keeping_slots(deadline).await?;
        // The node's capacity is back: so is its drain slot.
        self.give_back_slots(deadline).await?;
        Ok(out)
    }

    /// [`Engine::restore_by`] but for the drain slots, which this node keeps
    /// (`[fleet] release_delay`: the caller gives them back after it).
    pub async fn restore_keeping_slots(&self, deadline: Instant) -> Result<RestoreOutcome, Error> {
        let clients = self.clients_by(deadline).await?;
        let out = self.ops_by(deadline).await?.restore(deadline).await?;
        let node = &self.settings.node_name;
        let events = NodeEvents::new(clients.clone(), node);
        let said = [
            out.foreign_marker.as_ref().map(|reason| {
                (
                    EventReason::ForeignMarker,
                    format!(
                        "node {node}: cleared a marker annotation we did not write ({reason}); undid nothing"
                    ),
                )
            }),
            out.cordon_kept.as_ref().map(|reason| {
                (
                    EventReason::CordonKept,
                    format!("node {node} left cordoned: {reason}"),
                )
            }),
            out.lb_label_kept.as_ref().map(|reason| {
                (
                    EventReason::LabelKept,
                    format!("node {node} left excluded from external load balancers: {reason}"),
                )
            }),
            out.marker.as_ref().map(|m| {
                (
                    EventReason::Restored,
                    format!("node {node} restored after {}: {}", m.why, restore_text(&out)),
                )
            }),
            // No marker, yet something of ours was undone or is left: said as well.
            (out.marker.is_none() && out.foreign_marker.is_none() && undid_or_left(&out)).then(
                || {
                    (
                        EventReason::Restored,
                        format!("node {node} restored: {}", restore_text(&out)),
                    )
                },
            ),
        ];
        // Events are for people: all of them at most a little past the restore's deadline.
        let until = deadline + RESTORE_EVENTS_ALLOWANCE;
        for (reason, msg) in said.into_iter().flatten() {
            events.emit_by(reason, &msg, until).await;
        }
        let restored = [
            ConditionType::MaintenancePlanned,
            ConditionType::DrainInProgress,
            ConditionType::Drained,
        ]
        .map(|kind| Condition {
            kind,
            status: false,
            reason: "Restored",
            message: format!("kube-shutdown-drain restored node {node}"),
        });
        self.set_conditions(&restored, until).await;
        Ok(out)
    }

    /// Waits, by a watch, until `deadline` for a live kubelet to report the Node Ready: Ready
    /// with a heartbeat (or Lease renewal) after this boot began ([`node::boot_started`]).
    pub async fn wait_ready(&self, deadline: Instant) -> Result<(), Error> {
        let since = node::boot_started()?;
        self.wait_ready_since(deadline, since).await
    }

    /// [`Engine::wait_ready`] with the boot's start given.
    pub async fn wait_ready_since(
        &self,
        deadline: Instant,
        since: jiff::Timestamp,
    ) -> Result<(), Error> {
        Ok(self
            .ops_by(deadline)
            .await?
            .wait_ready(deadline, since)
            .await?)
    }

    /// Removes the taint of the drain's last stage ([`node::daemonsets`]) ahead of the rest of
    /// the restore, by `deadline`; true when it was there (ours) and is gone now.
    pub async fn untaint_daemonsets(&self, deadline: Instant) -> Result<bool, Error> {
        Ok(self
            .ops_by(deadline)
            .await?
            .untaint_daemonsets(deadline)
            .await?)
    }

    /// Whether the boot restore waits for the node's agents (`[restore]` names pods or
    /// conditions).
    pub fn waits_for_agents(&self) -> bool {
        let r = &self.settings.restore;
        r.wait_for_pods.is_some() || !r.wait_for_conditions.is_empty()
    }

    /// Waits until `deadline` for the node's agents of `[restore]`
    /// ([`node::agents`]): the pods Ready since `since`, the conditions held; `waiting` hears
    /// what is still waited for.
    pub async fn wait_for_agents(
        &self,
        deadline: Instant,
        since: jiff::Timestamp,
        waiting: impl Fn(&str),
    ) -> Result<(), Error> {
        let r = &self.settings.restore;
        Ok(self
            .ops_by(deadline)
            .await?
            .wait_for_agents(
                deadline,
                since,
                r.wait_for_pods.as_ref(),
                &r.wait_for_conditions,
                waiting,
            )
            .await?)
    }

    /// What the boot restore would wait for now among the node's agents (`[restore]`), from one
    /// list of the node's matching pods and `node` as read; `None` when nothing. For `status`.
    pub async fn agents_waiting(&self, node: &Node) -> Result<Option<String>, Error> {
        use k8s_openapi::api::core::v1::Pod;
        let r = &self.settings.restore;
        let since = node::boot_started()?;
        let mut left = Vec::new();
        if let Some(sel) = &r.wait_for_pods {
            let clients = self.clients().await?;
            let name = &self.settings.node_name;
            let api: kube::Api<Pod> = kube::Api::all(clients.api.clone());
            let params = kube::api::ListParams::default()
                .fields(&format!("spec.nodeName={name}"))
                .labels(&sel.to_string());
            let object = format!("pods of node {name} matching {sel}");
            let pods = clients
                .retry(Instant::now() + clients.request_timeout, &object, || {
                    api.list(&params)
                })
                .await
                .map_err(|source| Error::ListPods {
                    node: name.clone(),
                    source,
                })?;
            left.extend(node::agents::pods_waiting(&pods.items, sel, since));
        }
        left.extend(node::agents::conditions_waiting(
            Some(node),
            &r.wait_for_conditions,
        ));
        Ok((!left.is_empty()).then(|| left.join("; ")))
    }

    /// Watches the Node until it carries a marker annotation (ours or not): `Ok(true)`, or
    /// `deadline` passes: `Ok(false)`.
    pub async fn wait_for_marker(&self, deadline: Instant) -> Result<bool, Error> {
        let has_marker = |n: &Node| {
            n.metadata
                .annotations
                .as_ref()
                .is_some_and(|a| a.contains_key(node::MARKER_ANNOTATION))
        };
        Ok(self.ops().await?.watch_until(deadline, has_marker).await?)
    }
}

/// What restore did with the cordon, in words for a person (the CLI, the journal, the Node
/// Event). A marker whose cordon is no longer recorded means an earlier restore already undid it
/// (or the cordon never happened); it is not an admin's cordon unless the node was cordoned
/// before the drain.
pub fn describe_cordon(out: &RestoreOutcome, m: &Marker) -> String {
    if out.uncordoned {
        "uncordoned".to_string()
    } else if let Some(why) = &out.cordon_kept {
        format!("left cordoned ({why})")
    } else if out.left_cordon_alone {
        "someone else had already uncordoned it".to_string()
    } else if m.was_unschedulable {
        "cordon left alone (the node was cordoned before the drain)".to_string()
    } else {
        "no cordon of ours left to undo".to_string()
    }
}

/// What a restore did, in words for a person: "uncordoned, taint removed, marker cleared", or
/// what there was not to undo.
pub fn restore_text(out: &RestoreOutcome) -> String {
    let Some(m) = &out.marker else {
        return if out.foreign_marker.is_some() {
            "foreign marker cleared; cordon and taints left as they are".to_owned()
        } else if undid_or_left(out) {
            unrecorded_text(out)
        } else {
            "no marker of ours; nothing left to undo".to_owned()
        };
    };
    let taint = if out.untainted {
        "taint removed"
    } else {
        "no taint of ours left to remove"
    };
    let label = if out.lb_label_removed {
        ", load-balancer exclusion label removed".to_owned()
    } else if let Some(why) = &out.lb_label_kept {
        format!(", load-balancer exclusion label left ({why})")
    } else {
        String::new()
    };
    format!(
        "{}, {taint}{label}, marker cleared",
        describe_cordon(out, m)
    )
}

/// Whether a restore that found no marker undid or left something of ours.
fn undid_or_left(out: &RestoreOutcome) -> bool {
    out.uncordoned || out.untainted || out.lb_label_removed || !out.unproven.is_empty()
}

/// What a restore without a marker did ([`crate::node::marker::unrecorded_patch`]): what it
/// undid because managedFields prove it ours, and what of ours it left, with the command.
fn unrecorded_text(out: &RestoreOutcome) -> String {
    let mut undid = Vec::new();
    if out.uncordoned {
        undid.push("uncordoned".to_owned());
    }
    for t in &out.removed_taints {
        undid.push(format!("taint {t} removed"));
    }
    if out.lb_label_removed {
        undid.push("load-balancer exclusion label removed".to_owned());
    }
    let mut text = "no marker of ours (someone removed it)".to_owned();
    if !undid.is_empty() {
        text.push_str(&format!(
            "; undid what managedFields prove ours: {}",
            undid.join(", ")
        ));
    }
    for u in &out.unproven {
        text.push_str(&format!("; {u}"));
    }
    text
}
