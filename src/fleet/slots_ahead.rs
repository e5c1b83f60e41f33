//! What a waiting node knows of the line ([`crate::fleet::queue`]): the line as it last listed
//! it, and a watch of the one waiting Lease just ahead of its own there, so that it lists the
//! line again only when that node leaves it.

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::ListParams;
use kube::runtime::watcher::{self, Event};
use tokio::time::Instant;

use super::Slots;
use super::watch::Changes;
use crate::api::ApiError;
use crate::fleet::queue::{self, Line, SINCE_LABEL, WAITING_LABEL};
use crate::fleet::{CLOCK_SKEW_MAX, HeldTimes, Holder, identity, slot_names};

/// The line as a waiting node last listed it, and the node ahead of it there, watched.
pub(super) struct Ahead {
    /// The part of the group's waiting Leases last read (the whole line ahead of this node
    /// when `beyond` is 0); `None`: not read (yet, or the read failed).
    pub(super) listed: Option<Vec<Lease>>,
    /// How many nodes at least are ahead of this one besides those `listed`.
    pub(super) beyond: usize,
    /// When this node's wait started, as its waiting Lease says; `None` before it is written.
    pub(super) since: Option<jiff::Timestamp>,
    /// A list is due: never listed, or the node ahead left the line.
    pub(super) due: bool,
    /// When the last list failed: it is tried again [`queue::RETRY_AFTER`] later (meanwhile the node
    /// waits as if there were no line, looking at the slots every few seconds).
    failed_at: Option<Instant>,
    watching: Option<Watching>,
}

/// The waiting Lease ahead, as listed, and its watch.
struct Watching {
    /// The waiting Lease's name.
    name: String,
    /// Its holder (`NODE/BOOT_ID`) as listed: another holder is another wait.
    holder: String,
    /// When it was last renewed (as its holder's clock wrote it, a time ahead of this node's
    /// clock counted as when it was seen).
    renewed: jiff::Timestamp,
    changes: Changes,
}

impl Ahead {
    pub(super) fn new() -> Ahead {
        Ahead {
            listed: None,
            beyond: 0,
            since: None,
            due: true,
            failed_at: None,
            watching: None,
        }
    }

    /// Whether the line is to be listed now: the node ahead left it, or the last list failed
    /// [`queue::RETRY_AFTER`] ago.
    pub(super) fn list_due(&self) -> bool {
        self.due
            || self
                .failed_at
                .is_some_and(|at| at.elapsed() >= queue::RETRY_AFTER)
    }

    /// Resolves when the node ahead leaves the line: its waiting Lease deleted, given back or
    /// held by another holder (another boot's wait starts again, at the back), or not renewed
    /// for [`queue::STALE`]. Never without a node ahead. A failing watch is retried at the
    /// backoff's pace; the staleness still ends the wait.
    pub(super) async fn left(&mut self) {
        let Some(w) = self.watching.as_mut() else {
            return std::future::pending().await;
        };
        // Whether the watch's current list (since its last `Init`) holds the Lease.
        let mut seen = true;
        loop {
            let left = jiff::SignedDuration::try_from(queue::STALE)
                .unwrap_or(jiff::SignedDuration::MAX)
                .saturating_sub(jiff::Timestamp::now().duration_since(w.renewed));
            if !left.is_positive() {
                return;
            }
            let stale_at = Instant::now() + left.unsigned_abs();
            let event = tokio::select! {
                () = tokio::time::sleep_until(stale_at) => return,
                event = w.changes.next() => event,
            };
            match event {
                Some(Ok(Event::Init)) => seen = false,
                Some(Ok(Event::InitApply(lease) | Event::Apply(lease))) => {
                    if identity(&lease) != Some(w.holder.as_str()) {
                        return;
                    }
                    seen = true;
                    if let Some(at) = renewed(&lease) {
                        w.renewed = w.renewed.max(at);
                    }
                }
                Some(Ok(Event::InitDone)) if !seen => return,
                Some(Ok(Event::Delete(_))) => return,
                Some(Ok(Event::InitDone) | Err(_)) => {}
                None => return std::future::pending().await,
            }
        }
    }
}

/// When `lease` was last renewed, a time more than [`CLOCK_SKEW_MAX`] ahead counted as now.
fn renewed(lease: &Lease) -> Option<jiff::Timestamp> {
    let times = HeldTimes::of(lease);
    let at = times.renewed.or(times.acquired)?;
    let now = jiff::Timestamp::now();
    let skew = jiff::SignedDuration::try_from(CLOCK_SKEW_MAX).unwrap_or_default();
    Some(if now.duration_until(at) > skew {
        now
    } else {
        at
    })
}

impl Slots<'_> {
    /// Reads the line of `group` as `me` needs it, and watches the waiting Lease just ahead of
    /// `me`'s in it (the waiters `line` passed over left out). A read that fails is no line:
    /// said, and the node tries as without one until its next read.
    pub(super) async fn list_line(
        &self,
        me: &Holder,
        group: &str,
        line: &Line,
        ahead: &mut Ahead,
        deadline: Instant,
    ) {
        ahead.due = false;
        let what = format!(
            "the waiting Leases of group {group} in namespace {}",
            self.settings.fleet.lease_namespace
        );
        let (leases, beyond) = match self.read_line(me, group, line, ahead.since, deadline).await {
            Ok(read) => read,
            Err(e) => {
                tracing::warn!(
                    node = %me.node,
                    "node {} waits for a drain slot as if there were no line: cannot list {what}: {e}",
                    me.node
                );
                ahead.listed = None;
                ahead.watching = None;
                ahead.failed_at = Some(Instant::now());
                return;
            }
        };
        let order: Vec<_> = queue::order(&leases, jiff::Timestamp::now())
            .into_iter()
            .filter(|w| w.node == me.node || !line.passed_over(w))
            .collect();
        let next = queue::ahead(&order, &me.node).and_then(|w| {
            let lease = leases
                .iter()
                .find(|l| l.metadata.name.as_deref() == Some(queue::wait_name(&w.node).as_str()))?;
            Some((
                lease.metadata.name.clone()?,
                identity(lease)?.to_string(),
                w,
            ))
        });
        ahead.watching = match (next, ahead.watching.take()) {
            // The same wait ahead as before: its watch goes on.
            (Some((name, holder, _)), Some(kept)) if kept.name == name && kept.holder == holder => {
                Some(kept)
            }
            (next, _) => next.map(|(name, holder, w)| Watching {
                changes: self.watch_one(&name),
                name,
                holder,
                renewed: w.renewed.min(jiff::Timestamp::now()),
            }),
        };
        ahead.listed = Some(leases);
        ahead.beyond = beyond;
        ahead.failed_at = None;
    }

    /// The part of the line of `group` that `me` needs, and how many nodes at least are ahead of
    /// it besides: never the whole line of a fleet-wide wave, which every node reading at its
    /// join would cost the API server the square of the fleet.
    ///
    /// The waits that started up to `me`'s (`since`; now before it has written its own) are
    /// read [`queue::front_size`] + 1 at a time (`limit`), until that many are found ahead of
    /// it or none are left: a node with fewer ahead is in front and has read everything ahead
    /// of it (`0` besides). A node further back reads the waits that started in the last
    /// [`queue::windows`] milliseconds before its own, the nearest span first, until one holds a
    /// node ahead of it: the one just ahead is there (`front_size` besides: its place is not
    /// known, only that it is not in front). Waiting Leases written without
    /// [`queue::SINCE_LABEL`] (by an earlier version of this daemon) are read whole each time:
    /// normally none.
    async fn read_line(
        &self,
        me: &Holder,
        group: &str,
        line: &Line,
        since: Option<jiff::Timestamp>,
        deadline: Instant,
    ) -> Result<(Vec<Lease>, usize), ApiError> {
        let api = self.api();
        let what = format!(
            "the waiting Leases of group {group} in namespace {}",
            self.settings.fleet.lease_namespace
        );
        let list = |selector: String, limit: Option<u32>, token: Option<String>| {
            let mut params = ListParams::default().labels(&selector);
            params.limit = limit;
            params.continue_token = token;
            let api = api.clone();
            let what = &what;
            async move {
                self.clients
                    .retry(deadline, what, || api.list(&params))
                    .await
            }
        };
        let now = jiff::Timestamp::now();
        let ahead_of =
            |leases: &[&Lease]| queue::count_ahead(leases, &me.node, |w| line.passed_over(w), now);
        let group_is = format!("{WAITING_LABEL}={group}");
        let mut leases = list(format!("{group_is},!{SINCE_LABEL}"), None, None)
            .await?
            .items;
        let unlabelled = leases.len();
        // Up to and including the second this node's wait started in (its Lease's label).
        let up_to = format!(
            "{group_is},{SINCE_LABEL}<{}",
            since.unwrap_or(now).as_millisecond().saturating_add(1)
        );
        let front = queue::front_size(slot_names(&self.settings.fleet, group).len());
        let page_size = u32::try_from(front + 1).unwrap_or(u32::MAX);
        let mut token = None;
        loop {
            let page = list(up_to.clone(), Some(page_size), token).await?;
            leases.extend(page.items);
            if ahead_of(&leases.iter().collect::<Vec<_>>()) >= front {
                break;
            }
            token = page.metadata.continue_.filter(|t| !t.is_empty());
            if token.is_none() {
                return Ok((leases, 0));
            }
        }
        // Further back: the nearest span of the line that holds a node ahead of this one.
        let older: Vec<Lease> = leases.drain(..unlabelled).collect();
        let from = since.unwrap_or(now).as_millisecond();
        for span in queue::windows() {
            let selector = match span {
                Some(span) => format!(
                    "{up_to},{SINCE_LABEL}>{}",
                    from.saturating_sub(i64::try_from(span).unwrap_or(i64::MAX))
                ),
                None => up_to.clone(),
            };
            let found = list(selector, None, None).await?.items;
            if ahead_of(&found.iter().collect::<Vec<_>>()) > 0 || span.is_none() {
                let mut read = older;
                read.extend(found);
                return Ok((read, front));
            }
        }
        Ok((older, front))
    }

    /// A watch of the one Lease `name` of the lease namespace.
    fn watch_one(&self, name: &str) -> Changes {
        self.lease_watch(watcher::Config::default().fields(&format!("metadata.name={name}")))
    }
}
