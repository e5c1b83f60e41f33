//! Exec credential plugins (a kubeconfig's `users[].user.exec`), run by us, not by kube. kube 5
//! runs them with `std::process::Command::output()` and no timeout, first on the thread that
//! builds the client, later on a blocking thread (kube-client `client/auth/mod.rs`, `auth_exec`
//! and `RefreshableToken::to_header`): a hanging plugin holds a runtime worker and the process's
//! exit, and kube's error embeds the command's arguments, environment and output, tokens
//! included. Here a plugin runs as an async child in its own process group, which is killed
//! (SIGKILL) when its time is up or its caller gives up; its errors name the command and how it
//! ended, never its arguments, environment or output. The protocol is client-go's
//! (`plugin/pkg/client/auth/exec/exec.go`): `KUBERNETES_EXEC_INFO` in the environment, an
//! `ExecCredential` of the configured `apiVersion` on stdout, `interactiveMode`.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use kube::config::{AuthInfo, ExecAuthCluster, ExecInteractiveMode, Kubeconfig};

use crate::config::kubeconfig::current_cluster;
use crate::process_group;
use secrecy::SecretString;
use serde::Deserialize;
use tokio::io::AsyncReadExt;

/// The most a plugin may write on stdout: an ExecCredential is a few kilobytes, one with a
/// client certificate chain a few more.
const MAX_OUTPUT: u64 = 1024 * 1024;

/// One exec credential plugin as a kubeconfig describes it. Compared to tell whether a cache
/// built from an earlier read of the kubeconfig still applies.
#[derive(Debug, Clone, PartialEq)]
pub struct ExecPlugin {
    command: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
    api_version: String,
    interactive_mode: Option<ExecInteractiveMode>,
    install_hint: Option<String>,
    /// `spec.cluster` of `KUBERNETES_EXEC_INFO` (`provideClusterInfo: true`).
    cluster: Option<serde_json::Value>,
    /// The kubeconfig that names it, for messages.
    kubeconfig: PathBuf,
}

/// What a plugin gave: a bearer token or a client certificate and key, maybe with an expiry.
#[derive(Debug, Clone, Default)]
pub struct Issued {
    pub token: Option<SecretString>,
    /// (certificate PEM, key PEM).
    pub identity: Option<(String, SecretString)>,
    pub expires_at: Option<jiff::Timestamp>,
}

/// How a plugin run failed. Every variant names the command and the kubeconfig, none shows
/// the plugin's arguments, environment or output: they may hold credentials.
#[derive(Debug, thiserror::Error)]
#[error("exec credential plugin {command} (kubeconfig {kubeconfig}) {problem}")]
pub struct ExecError {
    command: String,
    kubeconfig: PathBuf,
    problem: Problem,
}

#[derive(Debug, thiserror::Error)]
enum Problem {
    #[error("cannot be started: {reason}{}", hint.as_deref().map(|h| format!(" ({h})")).unwrap_or_default())]
    Start {
        reason: std::io::Error,
        hint: Option<String>,
    },
    #[error("exited with status {0}; its output is not shown (it may hold credentials)")]
    Exit(i32),
    #[error("was killed by signal {0}")]
    Signal(i32),
    #[error("gave no answer within {:.1} s and was killed", .0.as_secs_f64())]
    Timeout(Duration),
    #[error("wrote more than {} KiB and was killed", MAX_OUTPUT / 1024)]
    TooMuch,
    #[error("cannot be read from: {0}")]
    Read(std::io::Error),
    #[error(
        "answered with something that is not an ExecCredential (not shown: it may hold credentials)"
    )]
    NotACredential,
    #[error(
        "answered with an ExecCredential of apiVersion {got:?}; the kubeconfig asks for {want:?}"
    )]
    Version { got: String, want: String },
    #[error("answered with neither a token nor a client certificate and key")]
    Empty,
    #[error("answered with an expirationTimestamp that is not an RFC 3339 time")]
    Expiry,
    #[error("needs a terminal (interactiveMode: Always); a service has none")]
    Interactive,
    #[error("has no apiVersion in the kubeconfig (client.authentication.k8s.io/v1 or v1beta1)")]
    NoApiVersion,
}

/// The ExecCredential a plugin prints (client-go `pkg/apis/clientauthentication/v1`).
#[derive(Deserialize)]
struct ExecCredential {
    #[serde(rename = "apiVersion", default)]
    api_version: String,
    #[serde(default)]
    status: Option<Status>,
}

#[derive(Deserialize)]
struct Status {
    #[serde(rename = "expirationTimestamp")]
    expiration_timestamp: Option<String>,
    token: Option<String>,
    #[serde(rename = "clientCertificateData")]
    client_certificate_data: Option<String>,
    #[serde(rename = "clientKeyData")]
    client_key_data: Option<String>,
}

impl ExecPlugin {
    /// The plugin of `user` (of `kubeconfig`, read from `path`), if it has one with a command.
    pub fn of(user: &AuthInfo, kubeconfig: &Kubeconfig, path: &Path) -> Option<ExecPlugin> {
        let exec = user.exec.as_ref()?;
        let command = exec.command.clone()?;
        let env = exec
            .env
            .iter()
            .flatten()
            .filter_map(|e| Some((e.get("name")?.clone(), e.get("value")?.clone())))
            .collect();
        let cluster = exec
            .provide_cluster_info
            .then(|| current_cluster(kubeconfig))
            .flatten()
            .and_then(|c| ExecAuthCluster::try_from(c).ok())
            .and_then(|c| serde_json::to_value(c).ok());
        Some(ExecPlugin {
            command,
            args: exec.args.clone().unwrap_or_default(),
            env,
            api_version: exec.api_version.clone().unwrap_or_default(),
            interactive_mode: exec.interactive_mode.clone(),
            install_hint: exec.install_hint.clone(),
            cluster,
            kubeconfig: path.to_path_buf(),
        })
    }

    /// The command as the kubeconfig names it (relative paths made absolute).
    pub fn command(&self) -> &str {
        &self.command
    }

    fn error(&self, problem: Problem) -> ExecError {
        ExecError {
            command: self.command.clone(),
            kubeconfig: self.kubeconfig.clone(),
            problem,
        }
    }

    /// `KUBERNETES_EXEC_INFO`: never interactive (a service has no terminal), the cluster
    /// when the kubeconfig asks for it.
    fn exec_info(&self) -> String {
        let mut spec = serde_json::json!({"interactive": false});
        if let Some(cluster) = &self.cluster {
            spec["cluster"] = cluster.clone();
        }
        serde_json::json!({
            "apiVersion": self.api_version,
            "kind": "ExecCredential",
            "spec": spec,
        })
        .to_string()
    }

    /// Runs the plugin, at most `limit`; dropping the future kills it too.
    pub async fn run(&self, limit: Duration) -> Result<Issued, ExecError> {
        if self.api_version.is_empty() {
            return Err(self.error(Problem::NoApiVersion));
        }
        if self.interactive_mode == Some(ExecInteractiveMode::Always) {
            return Err(self.error(Problem::Interactive));
        }
        let mut command = tokio::process::Command::new(&self.command);
        command
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env("KUBERNETES_EXEC_INFO", self.exec_info())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            // Its messages could carry what it read or got (tokens); never into our log.
            .stderr(Stdio::null());
        let (mut child, group) = process_group::spawn(&mut command).map_err(|reason| {
            let hint = (reason.kind() == std::io::ErrorKind::NotFound)
                .then(|| self.install_hint.clone())
                .flatten();
            self.error(Problem::Start { reason, hint })
        })?;
        let mut stdout = child.stdout.take();
        let finished = tokio::time::timeout(limit, async {
            let mut out = Vec::new();
            if let Some(stdout) = stdout.as_mut() {
                stdout
                    .take(MAX_OUTPUT + 1)
                    .read_to_end(&mut out)
                    .await
                    .map_err(Problem::Read)?;
            }
            if out.len() as u64 > MAX_OUTPUT {
                return Err(Problem::TooMuch);
            }
            let status = child.wait().await.map_err(Problem::Read)?;
            Ok((status, out))
        })
        .await;
        let (status, out) = match finished {
            Ok(Ok(done)) => {
                // Reaped: its process group may be gone and its number free again.
                group.disarm();
                done
            }
            Ok(Err(problem)) => return Err(self.error(problem)),
            Err(_) => return Err(self.error(Problem::Timeout(limit))),
        };
        match (status.code(), status.signal()) {
            (Some(0), _) => {}
            (Some(code), _) => return Err(self.error(Problem::Exit(code))),
            (None, Some(signal)) => return Err(self.error(Problem::Signal(signal))),
            (None, None) => return Err(self.error(Problem::Exit(-1))),
        }
        self.parse(&out)
    }

    /// The credential in a plugin's stdout. client-go decodes it with a YAML-tolerant codec, so
    /// YAML is read too (a superset of JSON).
    fn parse(&self, out: &[u8]) -> Result<Issued, ExecError> {
        let credential: ExecCredential =
            serde_saphyr::from_slice(out).map_err(|_| self.error(Problem::NotACredential))?;
        if credential.api_version != self.api_version {
            return Err(self.error(Problem::Version {
                got: credential.api_version,
                want: self.api_version.clone(),
            }));
        }
        let status = credential
            .status
            .ok_or_else(|| self.error(Problem::Empty))?;
        let expires_at = status
            .expiration_timestamp
            .filter(|t| !t.is_empty())
            .map(|t| t.parse::<jiff::Timestamp>())
            .transpose()
            .map_err(|_| self.error(Problem::Expiry))?;
        let token = status
            .token
            .filter(|t| !t.is_empty())
            .map(SecretString::from);
        let identity = match (status.client_certificate_data, status.client_key_data) {
            (Some(cert), Some(key)) if !cert.is_empty() && !key.is_empty() => {
                Some((cert, SecretString::from(key)))
            }
            _ => None,
        };
        if token.is_none() && identity.is_none() {
            return Err(self.error(Problem::Empty));
        }
        Ok(Issued {
            token,
            identity,
            expires_at,
        })
    }
}
