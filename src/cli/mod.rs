//! The command line: clap definitions (public, so packaging can render the man page and shell
//! completions from `Cli`) and one file per subcommand. Exit codes are mapped in `main.rs`.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::client::ApiError;
use crate::config::{ConfigError, DEFAULT_CONFIG_PATH, Settings};
use crate::drain::status_line;
use crate::engine;

pub mod check;
pub mod drain;
pub mod manual;
pub mod plan;
pub mod restore;
pub mod run;
pub mod status;

/// The exit codes, as `--help` documents them.
pub const EXIT_DONE: u8 = 0;
pub const EXIT_INCOMPLETE: u8 = 1;
pub const EXIT_USAGE: u8 = 2;
pub const EXIT_UNREACHABLE: u8 = 3;

const EXIT_CODES_HELP: &str = "\
Exit codes:
  0  done
  1  drain incomplete (pods remain, or a check failed)
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
    /// Configuration file.
    #[arg(long, global = true, env = crate::config::CONFIG_ENV, default_value = DEFAULT_CONFIG_PATH, value_name = "PATH")]
    pub config: PathBuf,
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
see what a drain would do, `drain` and `restore` for maintenance by hand, `status` to see the \
node's state and the last report.";

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
drain.timeout has passed. `restore` undoes it. With --dry-run it only reports what it would do, \
as `plan` does, and changes nothing.")]
    Drain {
        /// Change nothing: report which pods a drain would evict, wait for and skip.
        #[arg(long)]
        dry_run: bool,
        /// Output format: text for a person, json for scripts (the report).
        #[arg(long, value_enum, default_value_t)]
        output: Output,
    },
    /// Undo what the last prepare changed (taint, cordon) and clear the marker.
    #[command(long_about = "\
Removes the taint and the cordon that the marker annotation on the Node says this program added, \
and clears the marker. A cordon or taint an administrator set is left alone. The service does \
this by itself on the next boot.")]
    Restore,
    /// Show the marker, the taint, the cordon and the last report.
    #[command(long_about = "\
Shows whether the node is cordoned and tainted, what the marker says this program changed, \
logind's delay budget and a summary of the last drain report.")]
    Status {
        /// Output format: text for a person, json for scripts.
        #[arg(long, value_enum, default_value_t)]
        output: Output,
    },
    /// Check the configuration, the connection, the node and every permission used.
    #[command(long_about = "\
Checks that the configuration loads, the kubeconfig is readable, the API server answers, the Node \
exists, every permission the drain uses is granted, the taint may be written (a server-side dry \
run), the state directory is writable and logind's delay budget fits the drain timeout. Exits 1 \
when something the service needs is missing.")]
    Check,
    /// Run the daemon (under systemd).
    #[command(long_about = "\
The service: started by kube-shutdown-drain.service (Type=notify). Holds the logind delay \
inhibitor, drains the node when a shutdown starts and restores it on the next boot. Logs to the \
journal with structured fields when started by systemd, else to stderr.")]
    Run,
}

/// A subcommand failed. Displayed as one line for a person: an API answer inside it reads as
/// its message, reason and code, not as a dump of the Status object.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("--node {0:?} is not a node name")]
    NodeName(String),
    #[error("{}", human(.0.to_string(), .0))]
    Engine(#[from] engine::Error),
    #[error("{}", human(format!("{:#}", .0), .0.as_ref()))]
    Other(#[from] anyhow::Error),
}

/// `text`, the message of `error`, as one line. kube renders an API error as `ApiError: ...
/// (Status { ... })`; wherever a cause's text is embedded, it is replaced by [`status_line`].
fn human(mut text: String, error: &(dyn std::error::Error + 'static)) -> String {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = cause {
        let status = match (
            e.downcast_ref::<ApiError>(),
            e.downcast_ref::<kube::Error>(),
        ) {
            (Some(ApiError::Kube(kube::Error::Api(s))), _) | (_, Some(kube::Error::Api(s))) => {
                Some(s)
            }
            _ => None,
        };
        if let Some(status) = status {
            text = text.replace(&e.to_string(), &status_line(status));
            // The Status is the next cause; `{:#}` would repeat it after the line just written.
            text = text.replace(&format!(": {status}"), "");
        }
        cause = e.source();
    }
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl CliError {
    /// The documented exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Config(_) | CliError::NodeName(_) => EXIT_USAGE,
            CliError::Engine(e) if e.is_config() => EXIT_USAGE,
            CliError::Engine(e) if e.is_unreachable() || e.is_node_missing() => EXIT_UNREACHABLE,
            _ => EXIT_INCOMPLETE,
        }
    }
}

impl Cli {
    /// Loads the settings and applies `--node`.
    pub fn settings(&self) -> Result<Settings, CliError> {
        let mut s = Settings::load(&self.config)?;
        if let Some(n) = &self.node {
            let valid = !n.is_empty()
                && n.len() <= 253
                && n.split('.').all(|l| {
                    !l.is_empty()
                        && !l.starts_with('-')
                        && !l.ends_with('-')
                        && l.bytes()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                });
            if !valid {
                return Err(CliError::NodeName(n.clone()));
            }
            s.node_name = n.clone();
        }
        Ok(s)
    }

    /// Runs the subcommand; `Ok` carries the exit code (0 or 1).
    pub async fn dispatch(self) -> Result<u8, CliError> {
        let settings = std::sync::Arc::new(self.settings()?);
        match self.command {
            Command::Plan { output } => plan::run(settings, output).await,
            Command::Drain { dry_run, output } => drain::run(settings, dry_run, output).await,
            Command::Restore => restore::run(settings).await,
            Command::Status { output } => status::run(settings, output).await,
            Command::Check => check::run(settings).await,
            Command::Run => {
                let code = run::run(settings).await?;
                Ok(u8::try_from(code).unwrap_or(EXIT_INCOMPLETE))
            }
        }
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

    fn refusal(code: u16, reason: &str, message: &str) -> ApiError {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "code": code, "reason": reason, "message": message,
            "details": {"name": "node-a", "kind": "nodes"},
        }))
        .unwrap();
        ApiError::Kube(kube::Error::Api(Box::new(status)))
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
                "cannot list the pods of node node-a: pods is forbidden: User \"x\" cannot list \
                 (Forbidden, HTTP 403)",
                EXIT_INCOMPLETE,
            ),
            (
                refusal(500, "", "etcd\nis down"),
                "cannot list the pods of node node-a: etcd is down (HTTP 500)",
                EXIT_INCOMPLETE,
            ),
            (
                refusal(429, "TooManyRequests", ""),
                "cannot list the pods of node node-a: the API server refused the request \
                 (TooManyRequests, HTTP 429)",
                EXIT_INCOMPLETE,
            ),
        ];
        for (source, want, code) in cases {
            let raw = source.to_string();
            assert!(
                raw.contains("Status {"),
                "kube still dumps the Status: {raw}"
            );
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
            source: ApiError::Timeout(std::time::Duration::from_secs(10)),
        });
        assert_eq!(
            timeout.to_string(),
            "cannot list the pods of node node-a: no answer within 10s"
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
            "cannot check node node-a: nodes \"node-a\" not found (NotFound, HTTP 404)"
        );
        let e = CliError::from(anyhow::Error::new(refusal(
            404,
            "NotFound",
            "nodes \"node-a\" not found",
        )));
        assert_eq!(
            e.to_string(),
            "nodes \"node-a\" not found (NotFound, HTTP 404)"
        );
    }
}
