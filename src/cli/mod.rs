//! The command line: clap definitions (public, so packaging can render the man page and shell
//! completions from `Cli`) and one file per subcommand. Exit codes are mapped in `main.rs`.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

use crate::config::{ConfigError, DEFAULT_CONFIG_PATH, Settings};
use crate::engine;

pub mod check;
pub mod drain;
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
#[command(name = "kube-shutdown-drain", version, about, after_help = EXIT_CODES_HELP)]
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

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum Output {
    #[default]
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Show what a drain would do now; changes nothing.
    Plan {
        #[arg(long, value_enum, default_value_t)]
        output: Output,
    },
    /// Taint, cordon and drain the node now (maintenance by hand).
    Drain {
        /// Only list what would be evicted; change nothing.
        #[arg(long)]
        dry_run: bool,
        #[arg(long, value_enum, default_value_t)]
        output: Output,
    },
    /// Undo what the last prepare changed (taint, cordon) and clear the marker.
    Restore,
    /// Show the marker, the taint, the cordon and the last report.
    Status {
        #[arg(long, value_enum, default_value_t)]
        output: Output,
    },
    /// Check the configuration, the connection, the node and every permission used.
    Check,
    /// Run the daemon (under systemd).
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

/// `text`, the message of `error`, as one line. API errors already render as one line naming
/// their object ([`crate::api::ApiError`]); kubeconfig errors may span lines.
fn human(text: String, _error: &(dyn std::error::Error + 'static)) -> String {
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
    println!("{text}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::ApiError;

    fn refusal(code: u16, reason: &str, message: &str) -> ApiError {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "code": code, "reason": reason, "message": message,
            "details": {"name": "node-a", "kind": "nodes"},
        }))
        .unwrap();
        ApiError::from_kube(
            "pods of node node-a",
            "https://s:6443",
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
                crate::api::client::Kind::Timeout(std::time::Duration::from_secs(10)),
            ),
        });
        assert_eq!(
            timeout.to_string(),
            "cannot list pods of node node-a: no answer from API server https://s:6443 within 10s"
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
