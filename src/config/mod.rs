//! Configuration: the typed `Settings` the rest of the code reads, and how a file becomes them
//! (read within limits, deserialized into the raw serde shape with checked newtypes, turned into
//! settings by one pure function). Every error reads "FILE:LINE:COLUMN: key `KEY`: PROBLEM;
//! allowed: WHAT IS ALLOWED".
//!
//! Every key, its default and the reason for the default are documented in `config.example.toml`
//! at the top of the repository; `tests/config_example.rs` parses that file so the two cannot drift.
//!
//! | file | owns |
//! |---|---|
//! | `mod.rs` | `Settings`, `ConfigError`, loading |
//! | `choices.rs` | the enums of the keys that name one of a few choices |
//! | `source.rs` | error positions: line and column, the key an error is about |
//! | `file.rs` | reading a config file or kubeconfig within limits (regular file, 1 MiB) |
//! | `values.rs` | the checked newtypes (bounded durations, names, enum names) |
//! | `from_value.rs` | how a value is checked as toml reads it (`FromValue`, `checked`) |
//! | `raw.rs` | the serde structs mirroring the TOML (`deny_unknown_fields`) |
//! | `validate.rs` | raw -> `Settings`: defaults and the checks spanning several keys |
//! | `reboot.rs` | `[reboot]` and `[[reboot.window]]`: the reboots the node asks for |
//! | `fleetlock.rs` | `[fleetlock]`: the FleetLock server for zincati |
//! | `gates.rs` | `[fleet] max_unready` and `[fleet.alerts]`: the cluster-health gates of a reboot |
//! | `hooks.rs` | `[[hook]]`: the commands run around the drains the node decides |
//! | `names.rs` | DNS label / subdomain, qualified name and label value syntax (shared) |
//! | `kubeconfig.rs` | reading the kubeconfig without ever printing its content |
//! | `duration.rs` | the duration syntax |
//! | `tests.rs` | the table tests: defaults, every bad value with its position, key and allowed |

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::shutdown_kind::ShutdownKind;
use selector::Selector;

pub mod advice;
mod choices;
pub mod duration;
pub mod file;
pub mod fleetlock;
#[cfg(test)]
mod fleetlock_tests;
mod from_value;
pub mod gates;
#[cfg(test)]
mod gates_tests;
pub mod hooks;
pub mod kubeconfig;
pub mod kubeconfig_find;
pub mod names;
mod raw;
pub mod reboot;
#[cfg(test)]
mod reboot_tests;
pub mod selector;
mod source;
mod table;
mod validate;
mod values;

pub use choices::{DaemonSetPolicy, OnDeadline, OnNoSlot, Policy, ShutdownPolicy, TaintEffect};
pub use duration::format_duration;
pub use file::{FileError, MAX_FILE_SIZE};
// Kept for callers that import these from `config` (they live in `names`).
pub use from_value::Invalid;
pub use names::{is_label_value, is_qualified_name};
pub use source::Source;
pub use values::NodeCondition;

/// Where the configuration is read from when neither `--config` nor the environment names a file.
pub const DEFAULT_CONFIG_PATH: &str = "/etc/kube-shutdown-drain/config.toml";
/// The environment variable that overrides [`DEFAULT_CONFIG_PATH`].
pub const CONFIG_ENV: &str = "KUBE_SHUTDOWN_DRAIN_CONFIG";
/// The kubeconfig used when the file does not name one: a dedicated identity, so the taint works.
pub const DEFAULT_KUBECONFIG: &str = "/etc/kube-shutdown-drain/kubeconfig";
/// The state directory (last report); the deb/rpm create it.
pub const DEFAULT_STATE_DIR: &str = "/var/lib/kube-shutdown-drain";
/// The kubelet's config file as kubeadm writes it (`--config`), read for `shutdownGracePeriod`.
pub const DEFAULT_KUBELET_CONFIG: &str = "/var/lib/kubelet/config.yaml";
/// The kubelet's drop-in directory (its `--config-dir`) as the kubelet's documentation sets it.
pub const DEFAULT_KUBELET_CONFIG_DIR: &str = "/etc/kubernetes/kubelet.conf.d";
/// The kernel's boot ID: a new random UUID every boot.
pub const DEFAULT_BOOT_ID_PATH: &str = "/proc/sys/kernel/random/boot_id";
/// Where logind keeps its schedule (logind-dbus.c `SHUTDOWN_SCHEDULE_FILE`'s directory; read
/// by `crate::scheduled`).
pub const SCHEDULE_DIR: &str = "/run/systemd/shutdown";
/// The taint key we own. Nothing else ever writes it.
pub const DEFAULT_TAINT_KEY: &str = "kube-shutdown-drain/shutdown";
/// `request_timeout` when absent: short, because the whole shutdown has a time limit.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

pub use crate::time_limit::MIN_RELEASE_MARGIN;
/// The smallest `drain.retry_interval`: a refused eviction (403, 500) is retried at most ten
/// times a second per pod, so a typo like "1ms" cannot flood the API server.
pub const MIN_RETRY_INTERVAL: Duration = Duration::from_millis(100);
/// The bounds of `drain.grace_period`: whole seconds (the API's `gracePeriodSeconds`), at least
/// 1 s because 0 s means an immediate force deletion, at most a day.
pub const MIN_GRACE_PERIOD: Duration = Duration::from_secs(1);
pub const MAX_GRACE_PERIOD: Duration = Duration::from_secs(24 * 3600);

/// What a matching rule does with a pod.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RuleAction {
    /// Evict it in the group `order` (lower orders finish first).
    Drain { order: i32 },
    /// Leave it alone.
    Skip,
    /// Do not evict it; the drain waits until it completes or goes.
    WaitCompleted,
}

/// One `[[rules]]` entry, in the spirit of Cluster API's MachineDrainRule.
#[derive(Debug, Clone, PartialEq)]
pub struct Rule {
    /// Pods whose labels match (an empty selector matches every pod).
    pub selector: Selector,
    /// Limits the rule to these namespaces; empty means every namespace.
    pub namespaces: Vec<String>,
    pub action: RuleAction,
}

/// The `[taint]` table.
#[derive(Debug, Clone, PartialEq)]
pub struct TaintSettings {
    pub enabled: bool,
    pub key: String,
    pub value: Option<String>,
    pub effect: TaintEffect,
}

impl TaintSettings {
    /// The taint the prepare adds (without `timeAdded`).
    pub fn taint(&self) -> k8s_openapi::api::core::v1::Taint {
        k8s_openapi::api::core::v1::Taint {
            key: self.key.clone(),
            value: self.value.clone(),
            effect: self.effect.as_str().to_owned(),
            time_added: None,
        }
    }

    /// Whether `t` is the configured taint (a node holds one taint per key and effect).
    pub fn matches(&self, t: &k8s_openapi::api::core::v1::Taint) -> bool {
        t.key == self.key && t.effect == self.effect.as_str()
    }
}

impl std::fmt::Display for TaintSettings {
    /// `key:effect`, as kubectl writes a taint.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}", self.key, self.effect.as_str())
    }
}

/// The `[filters]` table.
#[derive(Debug, Clone, PartialEq)]
pub struct FilterSettings {
    pub skip_tolerating_cordon: bool,
    pub skip_selector: Option<Selector>,
    pub skip_namespaces: BTreeSet<String>,
    pub honour_capi_drain_label: bool,
    pub emptydir: Policy,
    pub unreplicated: Policy,
    pub completed: Policy,
}

/// The `[drain]` table.
#[derive(Debug, Clone, PartialEq)]
pub struct DrainSettings {
    pub concurrency: usize,
    pub grace_period: Option<Duration>,
    pub retry_interval: Duration,
    pub timeout: Duration,
    pub on_deadline: OnDeadline,
    /// Label the node `node.kubernetes.io/exclude-from-external-load-balancers=true` during
    /// the prepare (and remove it at restore while it is still ours).
    pub exclude_from_load_balancers: bool,
    /// After the evicted pods are gone, wait (until the deadline) for the VolumeAttachments of
    /// their persistent volumes on this node to go.
    pub wait_for_detach: bool,
    /// Evict a pod whose grace period is longer than the time left with that time instead.
    pub fit_grace_to_deadline: bool,
    /// Leave the node's DaemonSet pods, or stop them last (`crate::drain` "the last stage").
    pub daemonsets: DaemonSetPolicy,
}

/// The `[daemon]` table.
#[derive(Debug, Clone, PartialEq)]
pub struct DaemonSettings {
    pub release_margin: Duration,
    pub restore_ready_timeout: Duration,
    /// The kubelet's config file, read (when readable) for its `shutdownGracePeriod`.
    pub kubelet_config: PathBuf,
    /// The kubelet's drop-in directory (`--config-dir`): its `*.conf` override the config file.
    pub kubelet_config_dir: PathBuf,
    /// Drain ahead of a shutdown logind has scheduled (`crate::scheduled`).
    pub drain_when_scheduled: bool,
    /// How long before a scheduled shutdown its drain starts (default `[drain] timeout`).
    pub scheduled_lead: Duration,
    /// How often the daemon makes a forecast (`None`: never, the default).
    pub forecast_interval: Option<Duration>,
}

/// The `[restore]` table: what the boot restore waits for, after a kubelet heartbeat of this
/// boot, before it uncordons (the node's own agents: CNI and CSI node pods, conditions).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RestoreSettings {
    /// Pods on this node matching it must all be Ready since this boot began (at least one).
    pub wait_for_pods: Option<Selector>,
    /// Node conditions that must hold, each `Type=Status`.
    pub wait_for_conditions: Vec<NodeCondition>,
}

/// The `[fleet]` table: drain slots on Kubernetes Leases (`crate::fleet`).
#[derive(Debug, Clone, PartialEq)]
pub struct FleetSettings {
    /// How many nodes (per group) may drain at once; 0: no slots (the default).
    pub slots: u32,
    /// Where the slot Leases live.
    pub lease_namespace: String,
    /// A Node label whose value names the node's group (N slots per group).
    pub group_label: Option<String>,
    /// A slot held longer than this is free again.
    pub hold_max: Duration,
    /// How long a node back from its drain keeps its slot after the restore, so its workloads
    /// settle before the next node drains (kured's `--lock-release-delay`); zero: none.
    pub release_delay: Duration,
    /// After the restore and `release_delay`, the slot also waits until the disruption budgets
    /// that covered the pods the drain evicted are healthy again, at most this long after the
    /// restore (then it goes back with a Warning Event); zero: not waited for.
    pub settle_max: Duration,
    pub on_no_slot: OnNoSlot,
    /// Hold a logind block lock while no slot is open to this node (the daemon's gate).
    pub gate: bool,
    /// No slot is taken while this many other nodes of the group, or more, are NotReady or
    /// cordoned by someone else; none: not judged.
    pub max_unready: Option<gates::MaxUnready>,
    /// No slot is taken while an alert of this server fires; none: no server asked.
    pub alerts: Option<gates::AlertsSettings>,
    /// How long a drain the node decides waits for the pre-drain hook annotations of the
    /// cluster's operators (`crate::node::hooks`) before it gives up.
    pub hook_timeout: Duration,
}

/// The default `[fleet] lease_namespace`: the namespace the RBAC manifest creates.
pub const DEFAULT_LEASE_NAMESPACE: &str = "kube-shutdown-drain";
/// The default `[fleet] hold_max`.
pub const DEFAULT_HOLD_MAX: Duration = Duration::from_secs(3600);
/// The default `[fleet] settle_max` (and at most half of `hold_max` when that is not set): a
/// slot kept longer than `hold_max` would read as stale to the other nodes.
pub const DEFAULT_SETTLE_MAX: Duration = Duration::from_secs(1800);
/// The default `[fleet] hook_timeout`: an operator's failover (a storage replica moved, a
/// database primary handed over) takes minutes; a node waits that long at most, then gives its
/// slot back.
pub const DEFAULT_HOOK_WAIT: Duration = Duration::from_secs(600);
/// How long a SIGUSR1 (`kube-shutdown-drain reboot`) keeps the gate open (`Settings::gate_pass`,
/// shorter in tests): long enough for the
/// command's call to logind that follows at once, short enough that a reboot logind refused for
/// another reason does not leave the node ungated.
pub const DEFAULT_GATE_PASS: Duration = Duration::from_secs(120);
/// How long after a cancel a prepare write may still land (`Settings::landing_window`, shorter
/// in tests): kube-apiserver's default `--request-timeout` (one minute), after which it gives
/// up on a request itself.
pub const DEFAULT_LANDING_WINDOW: Duration = Duration::from_secs(60);

impl Default for FleetSettings {
    fn default() -> Self {
        FleetSettings {
            slots: 0,
            lease_namespace: DEFAULT_LEASE_NAMESPACE.to_string(),
            group_label: None,
            hold_max: DEFAULT_HOLD_MAX,
            release_delay: Duration::ZERO,
            settle_max: DEFAULT_SETTLE_MAX,
            on_no_slot: OnNoSlot::Cordon,
            gate: false,
            max_unready: None,
            alerts: None,
            hook_timeout: DEFAULT_HOOK_WAIT,
        }
    }
}

/// The `[metrics]` table.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct MetricsSettings {
    /// The node_exporter textfile to write (`None`: off, the default).
    pub textfile: Option<PathBuf>,
}

/// The `[shutdown]` table: one policy per kind of shutdown, as logind names it in
/// `PrepareForShutdownWithMetadata` (`unknown`: a logind that sends no kind, systemd < 255).
#[derive(Debug, Clone, PartialEq)]
pub struct ShutdownSettings {
    pub reboot: ShutdownPolicy,
    pub poweroff: ShutdownPolicy,
    pub halt: ShutdownPolicy,
    pub kexec: ShutdownPolicy,
    pub soft_reboot: ShutdownPolicy,
    pub unknown: ShutdownPolicy,
}

impl ShutdownSettings {
    /// The policy for a kind of shutdown (its key is [`ShutdownKind::config_key`]).
    pub fn policy(&self, kind: ShutdownKind) -> ShutdownPolicy {
        match kind {
            ShutdownKind::Reboot => self.reboot,
            ShutdownKind::PowerOff => self.poweroff,
            ShutdownKind::Halt => self.halt,
            ShutdownKind::Kexec => self.kexec,
            ShutdownKind::SoftReboot => self.soft_reboot,
            ShutdownKind::Unknown => self.unknown,
        }
    }
}

impl Default for ShutdownSettings {
    fn default() -> Self {
        ShutdownSettings {
            reboot: ShutdownPolicy::Drain,
            poweroff: ShutdownPolicy::Drain,
            halt: ShutdownPolicy::Drain,
            kexec: ShutdownPolicy::Drain,
            soft_reboot: ShutdownPolicy::Drain,
            unknown: ShutdownPolicy::Drain,
        }
    }
}

/// Validated settings. Fields are public so tests and the CLI can override single values
/// (`--node`, `boot_id_path`) after loading.
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    /// The file these settings came from, if any.
    pub source: Option<PathBuf>,
    pub kubeconfig: PathBuf,
    /// A DNS subdomain: checked wherever it comes from (`node_name`, host name, `--node`).
    pub node_name: String,
    pub state_dir: PathBuf,
    pub request_timeout: Duration,
    /// Not a TOML key: the kernel's boot ID file, replaceable in tests.
    pub boot_id_path: PathBuf,
    /// Not a TOML key: logind's schedule directory ([`SCHEDULE_DIR`]), replaceable in
    /// tests.
    pub schedule_dir: PathBuf,
    /// Not a TOML key: how long SIGUSR1 opens the reboot gate (`DEFAULT_GATE_PASS`),
    /// shorter in tests.
    pub gate_pass: Duration,
    /// Not a TOML key: how long a restore after a cancel watches for a prepare write that lands
    /// late (`DEFAULT_LANDING_WINDOW`), shorter in tests.
    pub landing_window: Duration,
    pub taint: TaintSettings,
    pub filters: FilterSettings,
    pub rules: Vec<Rule>,
    pub drain: DrainSettings,
    pub daemon: DaemonSettings,
    pub metrics: MetricsSettings,
    pub shutdown: ShutdownSettings,
    pub restore: RestoreSettings,
    pub fleet: FleetSettings,
    /// `[reboot]`: the reboots the node asks for (none without a trigger).
    pub reboot: reboot::RebootSettings,
    /// `[fleetlock]`: the FleetLock server the update agent (zincati) asks before it reboots.
    pub fleetlock: Option<fleetlock::FleetLockSettings>,
    /// `[node] lifecycle_conditions`: the KEP-5683 conditions (`crate::node::conditions`).
    pub lifecycle_conditions: bool,
    /// `[[hook]]`: the commands run around the drains the node decides, in the file's order.
    pub hooks: Vec<hooks::Hook>,
}

/// A configuration that could not be used. Every variant names the file (or the variable).
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    Read(#[from] FileError),
    #[error("the environment variable {var} is set but empty; unset it or name a config file")]
    EmptyEnv { var: &'static str },
    #[error("{path}:{line}:{column}: {message}")]
    Syntax {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
    /// `problem` reads "PROBLEM; allowed: WHAT IS ALLOWED" (a toml message for a wrong table).
    #[error("{path}:{line}:{column}: key `{key}`: {problem}")]
    Invalid {
        path: PathBuf,
        line: usize,
        column: usize,
        key: String,
        problem: String,
    },
    #[error("{path}: key `node_name` is not set and the host name cannot be read: {reason}")]
    NoNodeName { path: PathBuf, reason: String },
    #[error("{path}: key `node_name` is not set and {problem}")]
    HostName { path: PathBuf, problem: Invalid },
}

/// Parses and validates a configuration text. Pure: the host name is passed in (`Err(reason)`
/// when it could not be read), so this can be table-tested without touching the machine.
pub fn from_toml(
    source: &Source<'_>,
    hostname: Result<&str, &str>,
) -> Result<Settings, ConfigError> {
    let raw: raw::RawConfig = toml::from_str(source.text).map_err(|e| source.toml_error(&e))?;
    validate::settings(raw, source, hostname)
}

/// The host name could not be read.
#[derive(Debug, thiserror::Error)]
pub enum HostnameError {
    /// gethostname(2) failed.
    #[error("{0}")]
    Read(nix::errno::Errno),
    #[error("the host name is not valid UTF-8")]
    NotUtf8,
}

/// The machine's host name, as the kubelet would register it (before lower-casing).
pub fn hostname() -> Result<String, HostnameError> {
    nix::unistd::gethostname()
        .map_err(HostnameError::Read)?
        .into_string()
        .map_err(|_| HostnameError::NotUtf8)
}

/// Checks a node name given on the command line or elsewhere, as `node_name` is checked.
pub fn check_node_name(name: &str) -> Result<(), from_value::Invalid> {
    values::NodeName::parse(name).map(|_| ())
}

impl Settings {
    /// Reads (within [`file::read_text`]'s limits) and validates a config file.
    pub fn load(path: &Path) -> Result<Settings, ConfigError> {
        let text = file::read_text(path, "config file")?;
        Settings::from_str_at(path, &text)
    }

    /// Like [`Settings::load`], with the node name that stands in when `node_name` is not set
    /// (`--node`), instead of the host name.
    pub fn load_for_node(path: &Path, node: &str) -> Result<Settings, ConfigError> {
        let text = file::read_text(path, "config file")?;
        from_toml(&Source { path, text: &text }, Ok(node))
    }

    /// Validates a configuration text as if it had been read from `path`.
    pub fn from_str_at(path: &Path, text: &str) -> Result<Settings, ConfigError> {
        let host = hostname().map_err(|e| e.to_string());
        from_toml(
            &Source { path, text },
            host.as_deref().map_err(String::as_str),
        )
    }
}

#[cfg(test)]
mod test_cases;
#[cfg(test)]
mod tests;
