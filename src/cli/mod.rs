//! The command line: clap definitions (public, so packaging can render the man page and shell
//! completions from `Cli`) and one file per subcommand. Exit codes are mapped in `main.rs`.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::config::{CONFIG_ENV, ConfigError, DEFAULT_CONFIG_PATH, Settings};
use crate::engine;

mod agent_line;
pub mod check;
pub mod drain;
pub mod file_modes;
pub mod fleet;
mod fleet_steer;
mod fleet_watch;
pub mod forecast;
mod logind_lines;
pub mod manual;
mod permissions;
pub mod plan;
pub mod reboot;
pub mod restore;
pub mod run;
mod slot_wait;
pub mod status;
mod status_reboot;

/// The exit codes, as `--help` documents them.
pub const EXIT_DONE: u8 = 0;
pub const EXIT_INCOMPLETE: u8 = 1;
pub const EXIT_USAGE: u8 = 2;
pub const EXIT_UNREACHABLE: u8 = 3;

const EXIT_CODES_HELP: &str = "\
Exit codes:
  0  done
  1  drain incomplete (pods remain, a check failed, or the forecast is not `completes`;
     for `fleet`: the API server refused a request)
  2  usage or configuration error (config file, kubeconfig)
  3  cluster unreachable or node missing";

/// Drains this Kubernetes node through the Eviction API before a shutdown, and restores it on
/// the next boot.
#[derive(Debug, Parser)]
#[command(
    name = "kube-shutdown-drain",
    version,
    about,
    long_about = DESCRIPTION,
    after_help = EXIT_CODES_HELP
)]
pub struct Cli {
    /// Configuration file [default: /etc/kube-shutdown-drain/config.toml, or the environment
    /// variable KUBE_SHUTDOWN_DRAIN_CONFIG].
    // Not clap's `env`: it reports an empty variable as an empty `--config` flag; see
    // `Cli::config_path`.
    #[arg(long, global = true, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// The node to act on (default: `node_name` from the config, else the host name).
    #[arg(long, global = true, value_name = "NAME")]
    pub node: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

/// The main page's DESCRIPTION and `--help` text: what NAME does not already say.
const DESCRIPTION: &str = "\
Run as a systemd service (the `run` subcommand), it holds a systemd-logind delay inhibitor. When \
logind announces a shutdown or reboot, it records on its Node what it will change, adds its taint, \
cordons the node and evicts its pods through the Eviction API, honouring PodDisruptionBudgets, then \
releases the inhibitor before logind's InhibitDelayMaxSec runs out. On the next boot it removes \
only the taint and the cordon it added itself.

The other subcommands are for an administrator: `check` before relying on the service, `plan` to \
see what a drain would do, `forecast` to see whether it would complete in time and what holds it, \
`drain` and `restore` for maintenance by hand, `status` to see the node's state and the last \
report.

`fleet`, run from an admin's machine with the admin's kubeconfig, shows every node that runs the \
service and steers their reboots (hold, release, pause, resume); installed as \
`kubectl-shutdown_drain`, it is also `kubectl shutdown-drain fleet`.";

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum Output {
    /// Lines for a person.
    #[default]
    Text,
    /// One pretty-printed JSON document, for scripts.
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show what a drain would do now; changes nothing.
    #[command(long_about = "\
Lists every pod on the node with the action a drain would take (evict, wait for it to complete, \
skip), the reason, and the order in which pods would be evicted. Reads the Node and its pods; \
writes nothing.")]
    Plan {
        /// Output format: text for a person, json for scripts.
        #[arg(long, value_enum, default_value_t)]
        output: Output,
    },
    /// Taint, cordon and drain the node now (maintenance by hand).
    #[command(long_about = "\
Does what the service does when a shutdown starts: records on the Node what it changes, adds the \
taint, cordons, evicts the pods as `plan` lists them and waits until they are gone or \
drain.timeout has passed. `restore` undoes it. With [fleet] slots it first waits for a drain slot \
(at most --slot-timeout, printing who holds them; none in time: exit 1, nothing changed) and \
holds it until `restore` gives it back; --no-slot drains without one. With --dry-run it only \
reports what it would do, as `plan` does, and changes nothing (no slot either).")]
    Drain {
        /// Change nothing: report which pods a drain would evict, wait for and skip.
        #[arg(long)]
        dry_run: bool,
        /// Output format: text for a person, json for scripts (the report).
        #[arg(long, value_enum, default_value_t)]
        output: Output,
        /// How long to wait for a drain slot (with [fleet] slots), e.g. "30m".
        #[arg(long, value_parser = duration_arg, default_value = "1h")]
        slot_timeout: std::time::Duration,
        /// Drain without a drain slot, even with [fleet] slots (the node may drain while other
        /// nodes hold every slot).
        #[arg(long)]
        no_slot: bool,
    },
    /// Undo what the last prepare changed (taint, cordon) and clear the marker.
    #[command(long_about = "\
Removes the taint and the cordon that the marker annotation on the Node says this program added, \
and clears the marker. A cordon or taint an administrator set is left alone. With [fleet] slots \
it then gives back every drain slot the node holds (credentials that may not list the slot \
Leases, such as the kubelet's, hold none: said once, and the restore completes). The service \
does this by itself on the next boot.")]
    Restore,
    /// Show the marker, the taint, the cordon and the last report.
    #[command(long_about = "\
Shows whether the node is cordoned and tainted, what the marker says this program changed, \
logind's delay budget and a summary of the last drain report. With [fleet] slots it shows every \
drain slot of the node's group and its holder (reads only; slots these credentials may not read, \
such as the kubelet's, are said with the refusal, and the rest is shown all the same), and with \
[fleet] gate whether the reboot gate binds root.")]
    Status {
        /// Output format: text for a person, json for scripts.
        #[arg(long, value_enum, default_value_t)]
        output: Output,
    },
    /// Forecast whether a drain now would complete within the shutdown budget; changes nothing.
    #[command(long_about = "\
Answers, before any shutdown: if this node shut down now, would its drain complete within the \
budget (drain.timeout, logind's InhibitDelayMaxSec less the release margin), and if not, what \
holds it. For every pod the drain would evict or wait for it gives a verdict (completes, cut at \
the deadline, blocked), the reason and what would fix it: the PodDisruptionBudgets that select \
it and whether each can let it go, grace periods longer than the time left, volumes to detach, \
and an estimate of the drain's time from the grace periods and the last report's timings. Reads \
the Node, its pods, the budgets and, where a replacement must run elsewhere, the other nodes; \
writes nothing. Exits 0 when the drain would complete, 1 otherwise.")]
    Forecast {
        /// Output format: text for a person, json for scripts.
        #[arg(long, value_enum, default_value_t)]
        output: Output,
    },
    /// Check the configuration, the connection, the node and every permission used.
    #[command(long_about = "\
Checks that the configuration loads, the kubeconfig is readable, the API server answers, the Node \
exists, every permission the drain uses is granted, the taint may be written (a server-side dry \
run), the state directory is writable and logind's delay budget fits the drain timeout. With \
[fleet] slots it reviews the permissions on the slot Leases in [fleet] lease_namespace (get, \
list, create, patch; watch is optional) and takes no slot. Exits 1 when something the service \
needs is missing.")]
    Check,
    /// Reboot (or power off) the node safely: wait for a drain slot, drain, then reboot.
    #[command(long_about = "\
The way an admin or an update agent reboots a node of a fleet: waits for a drain slot ([fleet] \
slots; at most --slot-timeout, printing who holds them), taints, cordons and drains the node with \
its own timeout (--drain-timeout, no logind clock), then asks logind to reboot (or, with \
--poweroff, to power off). The service's drain at the shutdown then finds the node drained and \
lets the shutdown go at once. The slot is taken once and held until the restore after the reboot \
gives it back. A drain that does not complete reboots nothing unless --force: the node stays \
cordoned and holds its slot (`restore` undoes both). With [fleet] gate the daemon's block lock is opened \
(SIGUSR1) just before logind is asked; every other lock is honoured. --force does not wait for a \
slot (the drain takes one only if one is open when it looks, else [fleet] on_no_slot applies) \
and reboots whatever the drain left: the way past the gate. Exits 0 once logind took the request, 1 \
when no slot came or the drain did not complete.")]
    Reboot {
        /// Power off instead of rebooting.
        #[arg(long)]
        poweroff: bool,
        /// How long to wait for a drain slot (with [fleet] slots), e.g. "30m".
        #[arg(long, value_parser = duration_arg, default_value = "1h")]
        slot_timeout: std::time::Duration,
        /// The drain's time; default: [drain] timeout.
        #[arg(long, value_parser = duration_arg)]
        drain_timeout: Option<std::time::Duration>,
        /// Reboot now: the drain looks once for a slot and does not wait for one, and the reboot
        /// comes even when the drain did not complete (the way past the reboot gate).
        #[arg(long)]
        force: bool,
    },
    /// Run the daemon (under systemd).
    #[command(long_about = "\
The service: started by kube-shutdown-drain.service (Type=notify). Holds the logind delay \
inhibitor, drains the node when a shutdown starts and restores it on the next boot. With [fleet] \
slots each drain first waits for a drain slot at most half its time ([fleet] on_no_slot decides \
without one), and the restore gives it back; with [fleet] gate it holds a logind block lock \
while no slot is open to the node. Logs to the journal with structured fields when started by \
systemd, else to stderr.")]
    Run,
    /// Show the fleet's nodes, drain slots and pause, and steer their reboots (from an admin's
    /// machine).
    #[command(long_about = "\
Run from an admin's machine with the admin's kubeconfig, found as kubectl finds it (--kubeconfig, \
else the KUBECONFIG list, else ~/.kube/config; --context); the service's config file is not \
read. Reads the Nodes, the Leases of the lease namespace and the Events about Nodes, and prints \
one line per node that runs the service (its state, since when, its last drain), then the drain \
slots and the pause. -o wide adds columns, -o json prints one document; --watch redraws at each \
change with a progress line, until Ctrl-C. The subcommands steer the reboots: `hold` and \
`release` a node (the annotation kube-shutdown-drain/hold), `pause` and `resume` the whole fleet \
(the Lease kube-shutdown-drain-pause); each prints what it changed. Installed as \
kubectl-shutdown_drain on the PATH, the binary is the kubectl plugin `kubectl shutdown-drain`. \
The ClusterRole kube-shutdown-drain-fleet-admin of rbac.yaml grants what it reads and writes.")]
    Fleet(fleet::FleetArgs),
}

/// A duration argument that is not one: the text given.
#[derive(Debug, thiserror::Error)]
#[error("{0:?} is not a duration such as \"90s\" or \"30m\"")]
struct NotADuration(String);

/// A duration argument, spelled as in the config file ("90s", "30m").
fn duration_arg(text: &str) -> Result<std::time::Duration, NotADuration> {
    crate::config::duration::parse_duration(text)
        .filter(|d| !d.is_zero())
        .ok_or_else(|| NotADuration(text.to_string()))
}

/// A subcommand failed. Displayed as one line for a person: an API answer inside it reads as
/// its message, reason and code, not as a dump of the Status object.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The problem and what is allowed, as `node_name` would report it.
    #[error("--node {0}")]
    NodeName(crate::config::Invalid),
    #[error("{}", human(.0.to_string(), .0))]
    Engine(#[from] engine::Error),
    #[error("{}", human(.0.to_string(), .0))]
    Forecast(#[from] crate::forecast::read::ReadError),
    #[error("{}", human(format!("{:#}", .0), .0.as_ref()))]
    Other(#[from] anyhow::Error),
    #[error("{}", human(.0.to_string(), .0))]
    Fleet(#[from] fleet::FleetError),
}

/// `text`, the message of `error`, as one line. API errors already render as one line naming
/// their object ([`crate::api::ApiError`]); kubeconfig errors may span lines.
fn human(text: String, _error: &(dyn std::error::Error + 'static)) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// `cmd` and its subcommands with every `long_about` led by its `about` and a blank line.
fn with_summaries(cmd: clap::Command) -> clap::Command {
    let long = match (cmd.get_about(), cmd.get_long_about()) {
        (Some(about), Some(long)) => Some(format!("{about}\n\n{long}")),
        _ => None,
    };
    let cmd = match long {
        Some(long) => cmd.long_about(long),
        None => cmd,
    };
    cmd.mut_subcommands(with_summaries)
}

impl CliError {
    /// The documented exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Config(_) | CliError::NodeName(_) => EXIT_USAGE,
            CliError::Engine(e) if e.is_config() => EXIT_USAGE,
            CliError::Engine(e) if e.is_unreachable() || e.is_node_missing() => EXIT_UNREACHABLE,
            CliError::Forecast(e) if e.is_config() => EXIT_USAGE,
            CliError::Forecast(e) if e.is_unreachable() => EXIT_UNREACHABLE,
            CliError::Fleet(e) => e.exit_code(),
            _ => EXIT_INCOMPLETE,
        }
    }
}

impl Cli {
    /// The command line as the program parses it: the derived one with every `long_about` led
    /// by its `about` ([`with_summaries`]), so `--help` starts with the one-line summary `-h`
    /// shows (clap shows one or the other). The man pages use [`clap::CommandFactory::command`]
    /// itself: their NAME says the summary, their DESCRIPTION the rest.
    pub fn help_command() -> clap::Command {
        with_summaries(<Cli as clap::CommandFactory>::command())
    }

    /// Parses the process's arguments with [`Cli::help_command`] (what `Cli::try_parse` does
    /// with the derived command), named as invoked ([`fleet::bin_name`]).
    pub fn try_parse_args() -> Result<Cli, clap::Error> {
        let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
        let name = fleet::bin_name(args.first().map(std::path::Path::new));
        let command = || Cli::help_command().bin_name(name);
        let mut matches = command().try_get_matches_from(args)?;
        <Cli as clap::FromArgMatches>::from_arg_matches_mut(&mut matches)
            .map_err(|e| e.format(&mut command()))
    }

    /// The config file: `--config`, else [`CONFIG_ENV`] (an empty value is an error naming the
    /// variable), else [`DEFAULT_CONFIG_PATH`].
    pub fn config_path(&self) -> Result<PathBuf, CliError> {
        config_path(self.config.as_deref(), std::env::var_os(CONFIG_ENV))
    }

    /// Loads the settings and applies `--node`, checked like `node_name`; given, it also stands
    /// in for the host name, which is then neither read nor checked.
    pub fn settings(&self) -> Result<Settings, CliError> {
        let path = self.config_path()?;
        let Some(n) = &self.node else {
            return Ok(Settings::load(&path)?);
        };
        crate::config::check_node_name(n).map_err(CliError::NodeName)?;
        let mut s = Settings::load_for_node(&path, n)?;
        s.node_name = n.clone();
        Ok(s)
    }

    /// Runs the subcommand; `Ok` carries the exit code (0 or 1).
    pub async fn dispatch(self) -> Result<u8, CliError> {
        // An admin's command: the kubeconfig is kubectl's, the daemon's config is not read.
        if let Command::Fleet(args) = &self.command {
            return Ok(fleet::run(args.clone()).await?);
        }
        let settings = std::sync::Arc::new(self.settings()?);
        match self.command {
            Command::Plan { output } => plan::run(settings, output).await,
            Command::Drain {
                dry_run,
                output,
                slot_timeout,
                no_slot,
            } => {
                let options = drain::Options {
                    dry_run,
                    output,
                    slot_timeout,
                    no_slot,
                };
                drain::run(settings, options).await
            }
            Command::Restore => restore::run(settings).await,
            Command::Status { output } => status::run(settings, output).await,
            Command::Forecast { output } => forecast::run(settings, output).await,
            Command::Check => check::run(settings).await,
            Command::Reboot {
                poweroff,
                slot_timeout,
                drain_timeout,
                force,
            } => {
                let options = reboot::Options {
                    poweroff,
                    slot_timeout,
                    drain_timeout: drain_timeout.unwrap_or(settings.drain.timeout),
                    force,
                };
                reboot::run(settings, options).await
            }
            Command::Run => {
                let code = run::run(settings).await?;
                Ok(u8::try_from(code).unwrap_or(EXIT_INCOMPLETE))
            }
            Command::Fleet(args) => Ok(fleet::run(args).await?),
        }
    }
}

/// [`Cli::config_path`] with the environment variable's value passed in.
fn config_path(
    flag: Option<&std::path::Path>,
    env: Option<std::ffi::OsString>,
) -> Result<PathBuf, CliError> {
    match (flag, env) {
        (Some(p), _) => Ok(p.to_path_buf()),
        (None, Some(v)) if v.is_empty() => Err(ConfigError::EmptyEnv { var: CONFIG_ENV }.into()),
        (None, Some(v)) => Ok(PathBuf::from(v)),
        (None, None) => Ok(PathBuf::from(DEFAULT_CONFIG_PATH)),
    }
}

/// Prints a value as pretty JSON on stdout.
pub(crate) fn print_json<T: serde::Serialize>(value: &T) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(value).map_err(anyhow::Error::from)?;
    outln!("{text}");
    Ok(())
}

/// Writes a piece of a command's output to stdout. A reader that went away (`plan | head`) is not
/// the command's failure: the rest of the output is dropped quietly and the command ends with its
/// own exit code (`println!` would panic, exit 134). Any other write error is said once on stderr.
pub(crate) fn emit(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    static SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if let Err(e) = std::io::stdout().lock().write_fmt(args)
        && e.kind() != std::io::ErrorKind::BrokenPipe
        && !SAID.swap(true, std::sync::atomic::Ordering::Relaxed)
    {
        eprintln!("error: cannot write the output to stdout: {e}");
    }
}

/// `print!` through [`emit`].
macro_rules! out {
    ($($arg:tt)*) => { $crate::cli::emit(format_args!($($arg)*)) };
}

/// `println!` through [`emit`].
macro_rules! outln {
    ($($arg:tt)*) => { $crate::cli::emit(format_args!("{}\n", format_args!($($arg)*))) };
}

pub(crate) use {out, outln};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ApiError;

    /// `--help` starts with the summary `-h` shows, for the program and every subcommand
    /// (issue 40 item 16: clap shows `long_about` instead of `about`).
    #[test]
    fn long_help_starts_with_the_short_helps_summary() {
        let mut cmd = Cli::help_command();
        cmd.build();
        let mut all = vec![cmd.clone()];
        all.extend(cmd.get_subcommands().cloned());
        for mut c in all {
            let short = c.render_help().to_string();
            let long = c.render_long_help().to_string();
            let summary = short.lines().next().unwrap_or_default().to_string();
            assert!(
                !summary.is_empty() && !summary.starts_with("Usage"),
                "{short}"
            );
            assert_eq!(
                long.lines().next(),
                Some(summary.as_str()),
                "{}",
                c.get_name()
            );
        }
    }

    /// Run as the kubectl plugin (kubectl execs `kubectl-shutdown_drain ARGS` for `kubectl
    /// shutdown-drain ARGS`), usage and help name the command the user typed.
    #[test]
    fn invoked_as_the_kubectl_plugin_the_help_names_kubectl_shutdown_drain() {
        use std::path::Path;
        let plugin = fleet::bin_name(Some(Path::new("/usr/bin/kubectl-shutdown_drain")));
        assert_eq!(plugin, "kubectl shutdown-drain");
        assert_eq!(
            fleet::bin_name(Some(Path::new("/usr/bin/kube-shutdown-drain"))),
            "kube-shutdown-drain"
        );
        assert_eq!(fleet::bin_name(None), "kube-shutdown-drain");
        let e = Cli::help_command()
            .bin_name(plugin)
            .try_get_matches_from(["kubectl-shutdown_drain", "fleet", "hold"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("Usage: kubectl shutdown-drain fleet hold"),
            "{e}"
        );
    }

    fn refusal(code: u16, reason: &str, message: &str) -> ApiError {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "code": code, "reason": reason, "message": message,
            "details": {"name": "node-a", "kind": "nodes"},
        }))
        .unwrap();
        let trust = crate::api::error::Trust {
            kubeconfig: "/etc/kc".into(),
            authority: true,
            server_name: None,
        };
        ApiError::from_kube(
            "pods of node node-a",
            "https://s:6443",
            &trust,
            kube::Error::Api(Box::new(status)),
        )
    }

    /// An API refusal inside a CLI error is one readable line that still names its object, and
    /// the exit code stays what `--help` documents.
    #[test]
    fn api_errors_read_as_one_line_naming_the_object() {
        let cases = [
            (
                refusal(
                    403,
                    "Forbidden",
                    "pods is forbidden: User \"x\" cannot list",
                ),
                "cannot list pods of node node-a: pods is forbidden: User \"x\" cannot list \
                 (Forbidden, HTTP 403)",
                EXIT_INCOMPLETE,
            ),
            (
                refusal(500, "", "etcd\nis down"),
                "cannot list pods of node node-a: etcd is down (HTTP 500)",
                EXIT_INCOMPLETE,
            ),
            (
                refusal(429, "TooManyRequests", ""),
                "cannot list pods of node node-a: the API server refused the request \
                 (TooManyRequests, HTTP 429)",
                EXIT_INCOMPLETE,
            ),
        ];
        for (source, want, code) in cases {
            let e = CliError::from(engine::Error::ListPods {
                node: "node-a".into(),
                source,
            });
            let text = e.to_string();
            assert_eq!(text, want);
            assert!(!text.contains("Status {") && !text.contains('\n'), "{text}");
            assert_eq!(e.exit_code(), code, "{text}");
        }
        let timeout = CliError::from(engine::Error::ListPods {
            node: "node-a".into(),
            source: ApiError::new(
                "pods of node node-a",
                "https://s:6443",
                crate::api::error::Kind::Timeout(std::time::Duration::from_secs(10)),
            ),
        });
        assert_eq!(
            timeout.to_string(),
            "cannot list pods of node node-a: no answer from API server https://s:6443 within 10s"
        );
        assert_eq!(timeout.exit_code(), EXIT_UNREACHABLE);
    }

    /// A certificate the kubeconfig's trust refuses is a configuration problem (exit 2), for the
    /// Node read (`check`, `plan`, `status`, `drain`) and for the list (`forecast`); a server
    /// that does not answer stays exit 3.
    #[test]
    fn a_refused_certificate_exits_as_a_configuration_error_not_as_unreachable() {
        use crate::api::error::{Cause, Kind, Refusal, Trust, Untrusted};
        let untrusted = ApiError::new(
            "node node-a",
            "https://s:6443",
            Kind::Untrusted(Untrusted {
                refusal: Refusal::UnknownIssuer,
                trust: Trust {
                    kubeconfig: "/etc/kc".into(),
                    authority: false,
                    server_name: None,
                },
            }),
        );
        let refused = ApiError::new(
            "node node-a",
            "https://s:6443",
            Kind::Transport(Cause::ConnectionRefused),
        );
        let read = |e: &ApiError| {
            CliError::from(engine::Error::Node(crate::node::NodeError::Get(e.clone())))
        };
        assert_eq!(read(&untrusted).exit_code(), EXIT_USAGE);
        assert_eq!(read(&refused).exit_code(), EXIT_UNREACHABLE);
        let list = |e: &ApiError| CliError::from(crate::forecast::read::ReadError::List(e.clone()));
        assert_eq!(list(&untrusted).exit_code(), EXIT_USAGE);
        assert_eq!(list(&refused).exit_code(), EXIT_UNREACHABLE);
    }

    /// `--config` wins, then the environment variable, then the default; an empty variable is
    /// an error that names the variable (clap's `env` would blame the `--config` flag).
    #[test]
    fn the_config_path_comes_from_the_flag_the_variable_or_the_default() {
        let flag = std::path::Path::new("/flag.toml");
        let env = |v: &str| Some(std::ffi::OsString::from(v));
        assert_eq!(config_path(Some(flag), env("")).unwrap(), flag);
        assert_eq!(config_path(Some(flag), env("/e.toml")).unwrap(), flag);
        assert_eq!(
            config_path(None, env("/e.toml")).unwrap(),
            PathBuf::from("/e.toml")
        );
        assert_eq!(
            config_path(None, None).unwrap(),
            PathBuf::from(DEFAULT_CONFIG_PATH)
        );
        let e = config_path(None, env("")).unwrap_err();
        assert_eq!(e.exit_code(), EXIT_USAGE);
        let text = e.to_string();
        assert!(
            text.contains(CONFIG_ENV) && !text.contains("--config"),
            "{text}"
        );
        // The help states the default and the variable, as clap's `env` did.
        let help = <Cli as clap::CommandFactory>::command()
            .render_long_help()
            .to_string();
        assert!(
            help.contains(DEFAULT_CONFIG_PATH) && help.contains(CONFIG_ENV),
            "{help}"
        );
    }

    #[test]
    fn anyhow_errors_with_an_api_cause_read_the_same() {
        let e = CliError::from(
            anyhow::Error::new(refusal(404, "NotFound", "nodes \"node-a\" not found"))
                .context("cannot check node node-a"),
        );
        assert_eq!(
            e.to_string(),
            "cannot check node node-a: pods of node node-a: nodes \"node-a\" not found (NotFound, \
             HTTP 404)"
        );
        let e = CliError::from(anyhow::Error::new(refusal(
            404,
            "NotFound",
            "nodes \"node-a\" not found",
        )));
        assert_eq!(
            e.to_string(),
            "pods of node node-a: nodes \"node-a\" not found (NotFound, HTTP 404)"
        );
    }
}
