//! The reboot gate (`[fleet] gate`, off by default): while no drain slot of its group is open to
//! the node (and, with `[daemon] forecast_interval`, while the last forecast says a drain would
//! block), the daemon holds a logind `block` lock on `shutdown` beside its delay lock, whose
//! reason names the holders and the way past it.
//!
//! A delay lock can only postpone a shutdown; a block lock makes logind refuse one. Before
//! systemd 257 logind lets root (UID 0) past a block lock unless the caller asks to be checked
//! (`verify_shutdown_creds` in logind-dbus.c), so root's `systemctl reboot` passes the gate:
//! there it binds only unprivileged users. From systemd 257 `block` binds root too (`block-weak` keeps the old rule;
//! systemd pull request 30307, `systemd-inhibit(1)`), and getting past it needs polkit's
//! `org.freedesktop.login1.reboot-ignore-inhibit` (`systemctl reboot -i`), which a node image
//! without polkit refuses to everybody. So the way past is the daemon's own and always works:
//! `kube-shutdown-drain reboot` (it waits for a slot, drains, then asks the daemon to open the
//! gate with SIGUSR1 and reboots), `--force` (the same without the wait for a slot: its drain
//! takes one only if one is open, else `[fleet] on_no_slot` decides), or stopping the unit,
//! which closes the lock's fd with the process.
//!
//! The gate never holds a shutdown logind has announced: it is held only while the daemon waits
//! (phases Waiting and Scheduled, [`crate::daemon::phase::Phase::may_gate`]) and dropped the
//! moment a shutdown is announced, a drain starts or the daemon stops. An API server that cannot
//! be read opens the gate (said in the journal): the gate is a guard for a working fleet, and a
//! node whose cluster is unreachable must stay rebootable.

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::daemon::access::Access;

/// The longest pause between two looks at the slots without a change of their Leases (a
/// holder gone stale writes nothing): the watch carries every give-back at once, so this only
/// bounds how long a stale holder keeps the gate closed.
const LOOK_EVERY: Duration = Duration::from_secs(60);
/// How long one look may take, its requests tried again after transient failures (a refused
/// connection, a 5xx) until then: a closed gate stays closed through a blip shorter than this,
/// and opens this long after the API server stopped answering (plus the moment the watch takes
/// to see it go). Short, because an outage must not keep the node from rebooting: a healthy
/// server answers a Lease read in milliseconds.
pub const LOOK_MAX: Duration = Duration::from_secs(5);
/// After a failed look, the next one comes this much later.
const RETRY_AFTER: Duration = Duration::from_secs(10);
/// The lock's reason: why the gate is closed and how to get past it. Pure. The holders are the
/// Leases' words, escaped ([`crate::text::escaped`]): logind hands the reason to whoever lists
/// the locks or is refused a reboot (`systemctl reboot` prints it on the admin's terminal).
pub fn reason(node: &str, slots: Option<(&str, &[String])>, blocked: Option<&str>) -> String {
    let mut why = Vec::new();
    if let Some((group, holders)) = slots {
        why.push(format!(
            "every drain slot of group {group} is held ({})",
            crate::text::escaped(&holders.join(", "))
        ));
    }
    if let Some(blocked) = blocked {
        why.push(blocked.to_string());
    }
    format!(
        "reboot gate of Kubernetes node {node}: {}; `kube-shutdown-drain reboot` waits for a slot, \
         drains and reboots; `kube-shutdown-drain reboot --force` reboots without a slot ([fleet] \
         on_no_slot says what its drain does); stopping kube-shutdown-drain.service drops this lock",
        why.join("; ")
    )
}

/// Why the gate is closed, as the follower saw it: typed, so the loop tells one reason from
/// another by value; its words ([`reason`]) are the lock's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GateReason {
    pub node: String,
    /// The group whose every slot is held, and the holders.
    pub slots: Option<(String, Vec<String>)>,
    /// The last forecast's summary while it says a drain would block.
    pub blocked: Option<String>,
}

impl std::fmt::Display for GateReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let slots = self.slots.as_ref().map(|(g, h)| (g.as_str(), h.as_slice()));
        f.write_str(&reason(&self.node, slots, self.blocked.as_deref()))
    }
}

/// Follows the slots for the gate while `wanted` is true, sending each verdict: `Some(reason)`
/// while the gate should be closed, `None` while open. `blocked`: the last forecast's summary
/// while it says a drain would block. Runs as a task beside the loop until the daemon ends.
pub(crate) async fn follow(
    access: Access,
    mut wanted: watch::Receiver<bool>,
    mut blocked: watch::Receiver<Option<String>>,
    verdict: watch::Sender<Option<GateReason>>,
) {
    let node = access.settings.node_name.clone();
    let mut changes = None;
    let mut failing = false;
    loop {
        if wanted.wait_for(|w| *w).await.is_err() {
            return;
        }
        let looked = match access.engine().await {
            Ok(engine) => engine
                .slots_full(&mut changes, Instant::now() + LOOK_MAX)
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        let next = match looked {
            Ok(full) => {
                if failing {
                    failing = false;
                    tracing::info!(node = %node, "the reboot gate of node {node} can read the drain slots again");
                }
                let blocked = blocked.borrow_and_update().clone();
                (full.is_some() || blocked.is_some()).then(|| GateReason {
                    node: node.clone(),
                    slots: full,
                    blocked,
                })
            }
            Err(e) => {
                if !failing {
                    failing = true;
                    tracing::warn!(
                        node = %node,
                        "the reboot gate of node {node} is open: cannot read its drain slots ({e}); \
                         looking again every {} s",
                        RETRY_AFTER.as_secs()
                    );
                }
                changes = None;
                None
            }
        };
        verdict.send_if_modified(|v| {
            let changed = *v != next;
            *v = next;
            changed
        });
        let until = Instant::now() + if failing { RETRY_AFTER } else { LOOK_EVERY };
        tokio::select! {
            () = look_again(&mut changes, until) => {}
            _ = wanted.changed() => {}
            _ = blocked.changed() => {}
        }
    }
}

/// The next look: a change of the group's Leases or `until`.
async fn look_again(changes: &mut Option<crate::fleet::slots::Changes>, until: Instant) {
    match changes {
        Some(c) => crate::fleet::slots::next_look(c, until, LOOK_EVERY).await,
        None => tokio::time::sleep_until(until).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reason_names_the_node_the_holders_and_the_way_past() {
        let holders = ["node-a/1".to_string(), "node-b/2".to_string()];
        let r = reason("node-c", Some(("all", &holders)), None);
        assert!(
            r.contains("node node-c")
                && r.contains("group all is held (node-a/1, node-b/2)")
                && r.contains("kube-shutdown-drain reboot --force")
                && r.contains("stopping kube-shutdown-drain.service"),
            "{r}"
        );
        // A foreign holder's NUL, ESC and U+202E (right-to-left override) reach no terminal.
        let foreign = ["x\0y\x1b[31mz\u{202e}w".to_string()];
        let r = reason("node-c", Some(("all", &foreign)), None);
        assert!(
            r.contains("held (x\\u{0}y\\u{1b}[31mz\\u{202e}w)")
                && !r.contains(['\0', '\x1b', '\u{202e}']),
            "{r:?}"
        );
        let r = reason(
            "node-c",
            None,
            Some("a drain now would be blocked: pdb web"),
        );
        assert!(
            r.contains("node-c: a drain now would be blocked") && !r.contains("slot of group"),
            "{r}"
        );
    }
}
