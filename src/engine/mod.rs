//! `Engine`: the facade the CLI and the daemon use. It owns the settings and the kube clients
//! (built on first use, so `Engine::new` does no network I/O) and ties prepare, drain, restore,
//! the Node Events and the last report together.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::config::Kubeconfig;
use tokio::sync::OnceCell;
use tokio::time::Instant;

use crate::api::client;
use crate::api::{ApiError, ClientError, Clients, Credentials};
use crate::backoff::Backoff;
use crate::config::{OnNoSlot, Settings};
use crate::drain::{self, DrainOptions, GraceTo};
use crate::events::{NodeEvents, Reason as EventReason};
use crate::node::conditions::{Condition, Type as ConditionType};
use crate::node::hold::PutBack;
use crate::node::{self, Marker, NodeError, NodeOps};
use crate::policy::plan::Plan;
use crate::report::{Report, ReportError, SlotReport};
use crate::shutdown_kind::ShutdownKind;

pub use crate::node::{PrepareOutcome, RestoreOutcome};

mod conditions;
mod hooks;
mod restore;
pub mod settle;
mod slots;

pub use hooks::HooksWait;
pub use restore::{describe_cordon, restore_text};

/// An engine operation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Client(#[from] ClientError),
    #[error(transparent)]
    Node(#[from] NodeError),
    #[error("cannot list {source}")]
    ListPods { node: String, source: ApiError },
    #[error(transparent)]
    Report(#[from] ReportError),
    #[error("cannot write {0}")]
    Event(ApiError),
    #[error("drain slot of node {node}: {source}")]
    Slot { node: String, source: ApiError },
}

impl Error {
    /// The API server could not be reached.
    pub fn is_unreachable(&self) -> bool {
        match self {
            Error::Node(e) => e.is_unreachable(),
            Error::ListPods { source, .. } => source.is_unreachable(),
            _ => false,
        }
    }

    /// The Node object does not exist.
    pub fn is_node_missing(&self) -> bool {
        matches!(self, Error::Node(NodeError::Missing { .. }))
    }

    /// The kubeconfig is unusable, or its trust refused the server's certificate
    /// ([`Error::is_permanent`]): a configuration problem no retry mends.
    pub fn is_config(&self) -> bool {
        matches!(self, Error::Client(_)) || self.is_permanent()
    }

    /// The server's certificate was refused ([`ApiError::is_permanent`]): every request fails
    /// the same way until a person changes the kubeconfig, the certificate or the clock.
    pub fn is_permanent(&self) -> bool {
        match self {
            Error::Node(e) => e.api().is_some_and(ApiError::is_permanent),
            Error::ListPods { source, .. } | Error::Event(source) | Error::Slot { source, .. } => {
                source.is_permanent()
            }
            Error::Client(_) | Error::Report(_) => false,
        }
    }
}

/// The facade. Cheap to share behind an `Arc`.
pub struct Engine {
    settings: Arc<Settings>,
    kubeconfig: Kubeconfig,
    /// The token file's or exec plugin's credential, fetched by us (shareable across engines).
    credentials: Credentials,
    clients: OnceCell<Clients>,
    /// The kind of shutdown this engine prepares and drains for (marker and report).
    kind: Option<ShutdownKind>,
    /// How the drain of [`Engine::prepare_and_drain`] gets its drain slot.
    slot_way: SlotWay,
}

/// How a drain gets its drain slot (`[fleet] slots`).
#[derive(Debug, Clone, PartialEq, Eq)]
enum SlotWay {
    /// It waits for one, at most half its time (the daemon's drains).
    Wait,
    /// It looks once and never waits (`reboot --force`).
    LookOnce,
    /// The command took slot `name` before the drain, after `waited` (`reboot`, `drain`): the
    /// drain takes no other and writes nothing for it.
    Held { name: String, waited: Duration },
}

use crate::time_limit::{FINAL_EVENTS_MAX, RESTORE_EVENTS_ALLOWANCE, WRITE_ALLOWANCE};

/// How long past its deadline building the clients may take before it is cut off (see
/// [`Engine::clients_by`]).
const CONNECT_GRACE: Duration = Duration::from_millis(50);

impl Engine {
    /// Reads the kubeconfig (a bad one is an error here); no network I/O, no credential plugin.
    pub fn new(settings: Arc<Settings>) -> Result<Engine, Error> {
        let kubeconfig = client::read_kubeconfig(&settings.kubeconfig)?;
        let credentials =
            Credentials::new(&kubeconfig, &settings.kubeconfig, settings.request_timeout);
        Ok(Engine {
            settings,
            kubeconfig,
            credentials,
            clients: OnceCell::new(),
            kind: None,
            slot_way: SlotWay::Wait,
        })
    }

    /// [`Engine::new`] using `credentials` (a cache the caller keeps: the daemon fetches and
    /// refreshes them ahead of a shutdown, so its drain does not run a credential plugin) while
    /// the kubeconfig still names the same token file or plugin.
    pub fn with_credentials(
        settings: Arc<Settings>,
        credentials: &Credentials,
    ) -> Result<Engine, Error> {
        let mut engine = Engine::new(settings)?;
        engine.credentials =
            credentials.for_kubeconfig(&engine.kubeconfig, &engine.settings.kubeconfig);
        Ok(engine)
    }

    /// The credentials this engine's clients use.
    pub fn credentials(&self) -> &Credentials {
        &self.credentials
    }

    /// The same engine, recording `kind` (the kind of shutdown, "reboot", "soft-reboot", ...)
    /// in the marker its prepare writes and in the report its drain stores.
    pub fn for_shutdown_kind(mut self, kind: ShutdownKind) -> Engine {
        self.kind = Some(kind);
        self
    }

    /// The same engine, its drain taking a slot only if one is open when it looks: no wait for
    /// one (`kube-shutdown-drain reboot --force`; without one `[fleet] on_no_slot` decides).
    pub fn looking_once_for_a_slot(mut self) -> Engine {
        self.slot_way = SlotWay::LookOnce;
        self
    }

    /// The same engine, holding drain slot `name` already: [`Engine::wait_for_slot`] took it
    /// after `waited` (`kube-shutdown-drain reboot` and `drain`). Its drain looks for no slot
    /// and writes none; it says the take once (the journal, `DrainSlotTaken`, the report).
    pub fn holding_slot(mut self, name: String, waited: Duration) -> Engine {
        self.slot_way = SlotWay::Held { name, waited };
        self
    }

    /// The kind of shutdown given by [`Engine::for_shutdown_kind`], if any.
    pub fn shutdown_kind(&self) -> Option<ShutdownKind> {
        self.kind
    }

    pub fn settings(&self) -> &Arc<Settings> {
        &self.settings
    }

    /// The clients, built on first use (a credential plugin that gives a client certificate
    /// runs then, within the request timeout).
    pub async fn clients(&self) -> Result<&Clients, Error> {
        self.clients_by(Instant::now() + self.settings.request_timeout)
            .await
    }

    /// [`Engine::clients`], giving up at `deadline`.
    async fn clients_by(&self, deadline: Instant) -> Result<&Clients, Error> {
        let connect = self.clients.get_or_try_init(|| {
            client::connect(
                self.kubeconfig.clone(),
                &self.settings.kubeconfig,
                self.settings.request_timeout,
                client::user_agent(&self.settings.node_name),
                &self.credentials,
                deadline,
            )
        });
        // The credential fetch inside is bounded by `deadline` and says why it ran out; this
        // bound is for the rest, a moment later so that the fetch's own error comes first.
        match tokio::time::timeout_at(deadline + CONNECT_GRACE, connect).await {
            Ok(clients) => clients.map_err(Error::from),
            Err(_) => Err(Error::Client(ClientError::Credentials(
                crate::api::CredentialError::Deadline(self.credentials.describe()),
            ))),
        }
    }

    async fn ops(&self) -> Result<NodeOps<'_>, Error> {
        self.ops_by(Instant::now() + self.settings.request_timeout)
            .await
    }

    async fn ops_by(&self, deadline: Instant) -> Result<NodeOps<'_>, Error> {
        Ok(NodeOps {
            clients: self.clients_by(deadline).await?,
            settings: &self.settings,
            kind: self.kind,
        })
    }

    /// The current boot ID (from `settings.boot_id_path`).
    pub fn boot_id(&self) -> Result<String, Error> {
        Ok(node::read_boot_id(&self.settings.boot_id_path)?)
    }

    /// Reads the Node.
    pub async fn node(&self) -> Result<Node, Error> {
        Ok(self.ops().await?.get().await?)
    }

    /// Marker first, then the taint, then the cordon; transient failures are retried for up to
    /// the configured drain timeout ([`Engine::prepare_by`] takes a deadline).
    pub async fn prepare(&self, why: &str) -> Result<PrepareOutcome, Error> {
        self.prepare_by(why, Instant::now() + self.settings.drain.timeout)
            .await
    }

    /// [`Engine::prepare`], retrying transient failures (no answer, 5xx) until `deadline`.
    pub async fn prepare_by(&self, why: &str, deadline: Instant) -> Result<PrepareOutcome, Error> {
        let out = self.prepare_write(why, deadline).await?;
        self.say_foreign_replaced(&out, deadline).await;
        Ok(out)
    }

    /// The prepare's one guarded write (marker, taint, cordon), without the Events about it.
    async fn prepare_write(&self, why: &str, deadline: Instant) -> Result<PrepareOutcome, Error> {
        let boot_id = self.boot_id()?;
        Ok(self
            .ops_by(deadline)
            .await?
            .prepare(why, &boot_id, deadline)
            .await?)
    }

    /// The `ForeignMarker` Event when the prepare replaced a marker we did not write; by
    /// `deadline`.
    async fn say_foreign_replaced(&self, out: &PrepareOutcome, deadline: Instant) {
        let (Some(reason), Ok(clients)) = (&out.replaced_foreign, self.clients().await) else {
            return;
        };
        let msg = format!(
            "node {}: replaced a marker annotation we did not write ({reason}); tainted and cordoned as for no marker",
            self.settings.node_name
        );
        NodeEvents::new(clients.clone(), &self.settings.node_name)
            .emit_by(EventReason::ForeignMarker, &msg, deadline)
            .await;
    }

    /// What a drain would do now. Changes nothing.
    pub async fn plan(&self) -> Result<Plan, Error> {
        let clients = self.clients().await?;
        drain::plan(clients, &self.settings)
            .await
            .map_err(|source| Error::ListPods {
                node: self.settings.node_name.clone(),
                source,
            })
    }

    /// Drains the node with the reason "drain"; returns by `deadline`, always, and stores the
    /// report as the last report. [`Engine::drain_with`] takes the reason.
    pub async fn drain(&self, deadline: Instant) -> Report {
        let options = DrainOptions {
            why: "drain".to_string(),
            dry_run: false,
            grace_to: None,
        };
        self.drain_with(deadline, options).await
    }

    /// [`Engine::drain`] with options (`dry_run` changes nothing and stores no report). With a
    /// slot held ([`Engine::holding_slot`]) the report names it.
    pub async fn drain_with(&self, deadline: Instant, options: DrainOptions) -> Report {
        let slot = if options.dry_run {
            None
        } else {
            self.held_slot(deadline).await
        };
        self.drain_after(deadline, options, std::future::ready(()), |_| {}, slot)
            .await
    }

    /// Prepares and drains at once, both by `deadline`: the drain lists and plans the pods while
    /// the prepare writes the marker, the taint and the cordon, and starts evicting once the
    /// prepare is over (done, or failed for good: a shutdown drains anyway). Under a slow API
    /// server this saves the list's round trip from the shutdown's time. A prepare that keeps failing
    /// (throttled, a guard that keeps failing) keeps trying until the deadline, but the
    /// evictions wait for it only until [`evict_without_cordon_at`]: an uncordoned node may get
    /// replacements scheduled back onto it, yet a drain that never starts loses every pod's
    /// graceful end. The pre-drain hook annotations of the cluster's operators hold the
    /// evictions until the same moment (`engine/hooks.rs`).
    /// `on_plan` sees the drain's plan as soon as its one list is in (the daemon's `STATUS=`
    /// line), so nobody lists the pods a second time for it.
    pub async fn prepare_and_drain(
        &self,
        why: &str,
        deadline: Instant,
        on_plan: impl FnOnce(&Plan),
    ) -> (Result<PrepareOutcome, Error>, Report) {
        self.prepare_and_drain_fitting(why, deadline, None, on_plan)
            .await
    }

    /// [`Engine::prepare_and_drain`], the evictions' grace periods fitted to `grace_to` rather
    /// than to `deadline` (the daemon's drain in logind's window that goes on in the stop phase).
    pub async fn prepare_and_drain_fitting(
        &self,
        why: &str,
        deadline: Instant,
        grace_to: Option<GraceTo>,
        on_plan: impl FnOnce(&Plan),
    ) -> (Result<PrepareOutcome, Error>, Report) {
        // Boxed: the slot's calls would otherwise sit in this future's every poll frame.
        let (slot, refused) = Box::pin(self.take_slot(deadline))
            .await
            .map_or((None, None), |(s, r)| (Some(s), r));
        if let Some(refused) = refused
            && self.settings.fleet.on_no_slot == OnNoSlot::Cordon
        {
            return Box::pin(self.cordon_without_slot(why, deadline, refused, slot)).await;
        }
        let (done, prepared) = tokio::sync::oneshot::channel::<()>();
        let (over, prepare_over) = tokio::sync::oneshot::channel::<()>();
        let prepare = async {
            let outcome = self.prepare_write(why, deadline).await;
            // The evictions start now; an Event about a replaced marker must not hold them.
            let _ = done.send(());
            let _ = over.send(());
            if let Ok(out) = &outcome {
                self.say_foreign_replaced(out, deadline).await;
            }
            // A node this boot drained already keeps what that drain wrote, unless this one
            // finds more to do (below).
            if let Ok(out) = &outcome
                && !out.again
            {
                let started = Condition {
                    kind: ConditionType::DrainInProgress,
                    status: true,
                    reason: "DrainStarted",
                    message: format!(
                        "kube-shutdown-drain drains node {}: {why}",
                        self.settings.node_name
                    ),
                };
                // Like an Event: never holding the drain for long.
                let by = deadline.min(Instant::now() + FINAL_EVENTS_MAX);
                self.set_conditions(&[started], by).await;
            }
            outcome
        };
        let options = DrainOptions {
            why: why.to_string(),
            dry_run: false,
            grace_to,
        };
        let node = &self.settings.node_name;
        let anyway = evict_without_cordon_at(Instant::now(), deadline);
        let cordoned = async {
            tokio::select! {
                _ = prepared => {}
                _ = tokio::time::sleep_until(anyway) => tracing::warn!(
                    node = %node,
                    "node {node} is not cordoned yet and half of the drain's time is gone; \
                     evicting without the cordon (replacements may be scheduled onto node \
                     {node}) while the prepare keeps trying"
                ),
            }
        };
        // The operators' pre-drain hooks hold the evictions too, as long as the cordon may
        // (boxed: its watch would otherwise sit in this future's every poll frame).
        let ready = async {
            tokio::join!(cordoned, Box::pin(self.hooks_before_evictions(anyway, why)));
        };
        // The hold starts once the prepare is over (it would race the prepare's own write) and
        // ends with the drain: dropped when the drain returns, it never writes after it.
        let hold = async {
            if prepare_over.await.is_ok() {
                self.hold_prepared(why, deadline).await;
            }
            std::future::pending::<std::convert::Infallible>().await
        };
        let drain = async {
            tokio::select! {
                report = self.drain_after(deadline, options, ready, on_plan, slot) => report,
                never = hold => match never {},
            }
        };
        let (prepared, report) = tokio::join!(prepare, drain);
        if prepared
            .as_ref()
            .is_ok_and(|out| conditions::drain_changes_them(out, &report))
        {
            let by = deadline.min(Instant::now() + FINAL_EVENTS_MAX);
            self.set_conditions(&conditions::drain_ended(&report), by)
                .await;
        }
        (prepared, report)
    }

    /// Holds what this boot's prepare did while the drain runs: watches the Node and, when
    /// another writer uncordons it or removes our taint ([`node::hold::lost`]; a controller, an
    /// admin's script), writes the prepare again (the same guarded write, recorded by the
    /// marker's own rules) and says so in the log and in a `CordonRemovedDuringDrain` Event
    /// naming the writer where managedFields do. A writer that keeps undoing it is answered at
    /// a pace ([`HOLD_PACE`]), with at most [`HOLD_EVENTS_MAX`] Events. Returns at `deadline`,
    /// or when the Node cannot be watched for good (the drain goes on without the hold).
    async fn hold_prepared(&self, why: &str, deadline: Instant) {
        let (Ok(ops), Ok(boot_id)) = (self.ops_by(deadline).await, self.boot_id()) else {
            return;
        };
        let name = &self.settings.node_name;
        let t = &self.settings.taint;
        let ours = t.enabled.then(|| t.taint());
        let mut pace = Backoff::between(HOLD_PACE.0, HOLD_PACE.1);
        let mut events = 0;
        loop {
            let seen = std::sync::Mutex::new(None);
            let taken = |n: &Node| {
                let lost = node::hold::lost(n, &boot_id, ours.as_ref());
                let Some(lost) = lost else { return false };
                let taken = node::hold::Taken::of(n, name, &lost);
                *seen.lock().unwrap_or_else(|p| p.into_inner()) = Some(taken);
                true
            };
            if !matches!(ops.watch_until(deadline, taken).await, Ok(true)) {
                return;
            }
            let Some(taken) = seen.into_inner().unwrap_or_else(|p| p.into_inner()) else {
                return;
            };
            tracing::warn!(node = %name, "{}", PutBack::Trying(&taken));
            let message = match ops.prepare(why, &boot_id, deadline).await {
                Ok(_) => PutBack::Done(&taken).to_string(),
                Err(e) => {
                    tracing::warn!(node = %name, "cannot put the prepare of node {name} back: {e}");
                    PutBack::Failed(&taken, &e).to_string()
                }
            };
            if events < HOLD_EVENTS_MAX {
                events += 1;
                NodeEvents::new(ops.clients.clone(), name)
                    .emit_by(EventReason::CordonRemoved, &message, deadline)
                    .await;
            }
            tokio::time::sleep(pace.next_pause()).await;
        }
    }

    /// [`Engine::drain_with`], evicting only once `ready` resolves (bounded by the deadline).
    async fn drain_after(
        &self,
        deadline: Instant,
        options: DrainOptions,
        ready: impl std::future::Future<Output = ()>,
        on_plan: impl FnOnce(&Plan),
        slot: Option<SlotReport>,
    ) -> Report {
        let clients = match self.clients_by(deadline).await {
            Ok(c) => c,
            Err(e) => return self.failed_report(&options, e.to_string()),
        };
        let events = NodeEvents::new(clients.clone(), &self.settings.node_name);
        let settings = self.settings.clone();
        let mut report =
            drain::drain(clients, settings, events, options, deadline, ready, on_plan).await;
        report.kind = self.kind;
        report.slot = slot;
        if !report.dry_run {
            self.store_report(&report, deadline).await;
        }
        report
    }

    /// Writes the report to the state directory on a blocking thread, waiting for it at most
    /// [`WRITE_ALLOWANCE`] (and never later than that past `deadline`): a disk that stalls while
    /// the machine shuts down must not hold the drain (and the daemon's lock). A write still
    /// running then finishes on its own.
    async fn store_report(&self, report: &Report, deadline: Instant) {
        let node = &self.settings.node_name;
        let (mut copy, dir) = (report.clone(), self.settings.state_dir.clone());
        let node_name = node.clone();
        let write = tokio::task::spawn_blocking(move || {
            // What an earlier drain of this boot recorded for the settling stays recorded.
            if let (Ok(previous), Ok(boot)) = (Report::read_last(&dir), node::boot_started()) {
                copy.settle =
                    drain::settle::carried(copy.settle, previous.as_ref(), &node_name, boot);
            }
            copy.write_to(&dir)
        });
        let by = (Instant::now() + WRITE_ALLOWANCE).min(deadline + WRITE_ALLOWANCE);
        match tokio::time::timeout_at(by, write).await {
            Ok(Ok(Ok(path))) => tracing::info!(
                node = %node,
                "wrote report file {} for node {node}",
                path.display()
            ),
            Ok(Ok(Err(e))) => tracing::warn!(node = %node, "{e}"),
            Ok(Err(e)) => {
                tracing::warn!(node = %node, "the report file write for node {node} failed: {e}")
            }
            Err(_) => tracing::warn!(
                node = %node,
                "the report file for node {node} is still being written after {} ms; not \
                 waiting for it",
                WRITE_ALLOWANCE.as_millis()
            ),
        }
    }

    fn failed_report(&self, options: &DrainOptions, error: String) -> Report {
        let mut r = drain::empty_report(&self.settings, options, jiff::Timestamp::now());
        r.kind = self.kind;
        r.errors.push(error);
        r.finish();
        r
    }

    /// Writes one Event on the Node (e.g. the daemon's warning that no inhibitor guards its
    /// drain). Like every Event, a failure is logged, never returned: Events are for people.
    pub async fn event(&self, reason: EventReason, message: &str) {
        match self.clients().await {
            Ok(clients) => {
                NodeEvents::new(clients.clone(), &self.settings.node_name)
                    .emit(reason, message)
                    .await
            }
            Err(e) => tracing::warn!(
                node = %self.settings.node_name,
                "cannot write event {} on node {}: {e}",
                reason.as_str(),
                self.settings.node_name
            ),
        }
    }

    /// One Event on the Node by a fresh engine, bounded by the request timeout; a failure is
    /// only logged. For a long-lived caller (the daemon) that holds no engine between drains.
    pub async fn post_event(settings: Arc<Settings>, reason: EventReason, message: String) {
        let within = settings.request_timeout;
        let Ok(engine) = Engine::new(settings) else {
            return;
        };
        let _ = tokio::time::timeout(within, engine.event(reason, &message)).await;
    }

    /// Writes one Event on the Node within the request timeout, saying why when it could not
    /// (for an Event that must not be lost: the caller retries).
    pub async fn try_event(&self, reason: EventReason, message: &str) -> Result<(), Error> {
        let clients = self.clients().await?;
        let deadline = Instant::now() + clients.request_timeout;
        NodeEvents::new(clients.clone(), &self.settings.node_name)
            .try_emit_by(reason, message, deadline)
            .await
            .map_err(Error::Event)
    }

    /// The marker on the Node, if any.
    pub async fn marker(&self) -> Result<Option<Marker>, Error> {
        let node = self.node().await?;
        Ok(node::marker_of(&node, &self.settings.node_name)?)
    }

    /// The last stored report, if any.
    pub fn last_report(&self) -> Result<Option<Report>, Error> {
        Ok(Report::read_last(&self.settings.state_dir)?)
    }
}

/// The pauses between two answers to a writer that keeps undoing the prepare during a drain
/// (first, longest): the first answer comes at once (within one watch event), later ones no
/// faster than a fight with a controller is worth.
pub const HOLD_PACE: (Duration, Duration) = (Duration::from_millis(500), Duration::from_secs(10));
/// At most this many `CordonRemovedDuringDrain` Events per drain; the log has every one.
pub const HOLD_EVENTS_MAX: u32 = 3;

/// When the evictions of [`Engine::prepare_and_drain`] stop waiting for a prepare that keeps
/// failing: half way from `start` to `deadline`. The other half is the evictions' own: pods
/// terminate gracefully only with time left (grace periods are cut to the time left), so the
/// cordon may cost half the time, never all of it (the default 120 s drain timeout gives a
/// throttled or contended control plane a minute, and the pods' default 30 s grace still fits).
/// Pure.
pub fn evict_without_cordon_at(start: Instant, deadline: Instant) -> Instant {
    start + deadline.saturating_duration_since(start) / 2
}
