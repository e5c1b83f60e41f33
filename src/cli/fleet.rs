//! `fleet`: the fleet of nodes that run the daemon, seen from an admin's machine with the
//! admin's kubeconfig (found as kubectl finds it, `config::kubeconfig_find`; the daemon's
//! config file is not read), and steered (`fleet_steer`). The one read: the Nodes, the Leases
//! of the lease namespace and the Events about Nodes, then `fleet::view` renders them;
//! `--watch` follows the same three (`fleet_watch`).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Subcommand, ValueEnum};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Node};
use kube::api::{Api, ListParams};
use tokio::time::Instant;

use super::{EXIT_INCOMPLETE, EXIT_UNREACHABLE, EXIT_USAGE, outln};
use crate::api::client::{ClientError, admin_user_agent, connect};
use crate::api::{ApiError, Clients, Credentials};
use crate::config::DEFAULT_LEASE_NAMESPACE;
use crate::config::kubeconfig_find::{FindError, Found, find};
use crate::fleet::view::{self, FleetView, Seen};

/// The ClusterRole an admin needs for `fleet`, shipped in rbac.yaml.
pub const ADMIN_ROLE: &str = "kube-shutdown-drain-fleet-admin";
/// Every request the fleet commands make, as RBAC names it: (verb, API group, resource). The
/// view lists Nodes, Leases and Events and `--watch` watches them; `hold` and `release` get and
/// patch Nodes; `pause` creates the pause Lease, `resume` gets and deletes it. rbac.yaml's
/// ClusterRole and Role `kube-shutdown-drain-fleet-admin` grant exactly these
/// (packaging/check-manifests); the SelfSubjectReview is every user's already.
pub const ADMIN_PERMISSIONS: &[(&str, &str, &str)] = &[
    ("get", "", "nodes"),
    ("list", "", "nodes"),
    ("watch", "", "nodes"),
    ("patch", "", "nodes"),
    ("list", "", "events"),
    ("watch", "", "events"),
    ("list", "coordination.k8s.io", "leases"),
    ("watch", "coordination.k8s.io", "leases"),
    ("create", "coordination.k8s.io", "leases"),
    ("get", "coordination.k8s.io", "leases"),
    ("delete", "coordination.k8s.io", "leases"),
];
/// How long one request of an admin's command may take. kubectl sets none by default
/// (`--request-timeout=0`); an admin's terminal should not hang on a server that never answers.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// The field selector of the Events the view reads: those about a Node, in every namespace
/// (the daemon writes its Node Events in `default`, as the kubelet does).
pub const NODE_EVENTS: &str = "involvedObject.kind=Node";

/// `fleet`'s output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum FleetOutput {
    /// One line per node, then the slots and the pause.
    #[default]
    Text,
    /// The same with more columns.
    Wide,
    /// One pretty-printed JSON document, for scripts (its shape: docs/fleet-view.md).
    Json,
}

/// Where the admin's cluster is: kubectl's flags of the same names.
#[derive(Debug, Clone, Args)]
pub struct Access {
    /// The kubeconfig file [default: the KUBECONFIG list, else ~/.kube/config], as kubectl
    /// finds it; the daemon's config file is not read.
    #[arg(long, global = true, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use [default: its current context].
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// The namespace of the drain slot Leases and the pause Lease: the nodes' `[fleet]
    /// lease_namespace`.
    #[arg(long, global = true, value_name = "NS", default_value = DEFAULT_LEASE_NAMESPACE)]
    pub lease_namespace: String,
}

/// `fleet` and its steering subcommands.
#[derive(Debug, Clone, Args)]
pub struct FleetArgs {
    #[command(subcommand)]
    pub action: Option<Steer>,
    /// Output format.
    #[arg(short = 'o', long, value_enum, default_value_t)]
    pub output: FleetOutput,
    /// Redraw the view at each change of the Nodes, Leases or Events, until Ctrl-C.
    #[arg(long)]
    pub watch: bool,
    /// Every Node, also those that show no sign of the daemon.
    #[arg(long)]
    pub all: bool,
    #[command(flatten)]
    pub access: Access,
}

/// The steering subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum Steer {
    /// Hold the reboots of these nodes (the hold annotation, saying why, who and when).
    #[command(long_about = "\
Sets the annotation kube-shutdown-drain/hold on each Node, its value the reason, who set it (the \
API server's SelfSubjectReview, else the kubeconfig's user name) and when. The daemon of a held \
node decides no reboot of its own until the annotation is removed (`fleet release`). A node held \
already keeps its hold, and is said so. Every node is read first: a node that does not exist is \
an error naming it, and nothing is changed.")]
    Hold {
        /// The Nodes to hold.
        #[arg(required = true, value_name = "NODE")]
        nodes: Vec<String>,
        /// Why, for whoever reads the hold later.
        #[arg(long, value_parser = reason_arg)]
        reason: String,
    },
    /// Remove the hold annotation from these nodes.
    #[command(long_about = "\
Removes the annotation kube-shutdown-drain/hold from each Node, whoever set it, printing the \
value it removed. A node not held is said so, and is not an error.")]
    Release {
        /// The Nodes to release.
        #[arg(required = true, value_name = "NODE")]
        nodes: Vec<String>,
    },
    /// Pause the reboots of every node (the pause Lease).
    #[command(long_about = "\
Creates the Lease kube-shutdown-drain-pause in the lease namespace, held by who paused (the API \
server's SelfSubjectReview, else the kubeconfig's user name), the reason in its annotation \
kube-shutdown-drain/reason. While it exists, no node decides a reboot of its own. A fleet \
paused already is said so, by whom and since when, and nothing is changed.")]
    Pause {
        /// Why, for whoever reads the pause later.
        #[arg(long, value_parser = reason_arg)]
        reason: String,
    },
    /// Resume the reboots of the fleet: delete the pause Lease.
    #[command(long_about = "\
Deletes the Lease kube-shutdown-drain-pause of the lease namespace, printing who had paused, \
since when and why. A fleet not paused is said so, and is not an error.")]
    Resume,
}

impl Steer {
    /// The subcommand's name, for messages.
    fn name(&self) -> &'static str {
        match self {
            Steer::Hold { .. } => "hold",
            Steer::Release { .. } => "release",
            Steer::Pause { .. } => "pause",
            Steer::Resume => "resume",
        }
    }
}

/// An empty reason is no reason.
fn reason_arg(text: &str) -> Result<String, String> {
    if text.trim().is_empty() {
        Err("the reason must say something".to_string())
    } else {
        Ok(text.to_string())
    }
}

/// `fleet` failed. Every message names the kubeconfig, the context or the object.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    #[error(transparent)]
    Find(#[from] Box<FindError>),
    #[error("kubeconfig {path} (context {context}): {source}")]
    Client {
        path: PathBuf,
        context: String,
        source: Box<ClientError>,
    },
    /// A request failed; a refusal (403) says which verb on which resource, and the role that
    /// grants it.
    #[error("cannot {verb} {what}: {}{}", .source.problem(), refusal_hint(.source, .verb, .resource))]
    Api {
        verb: &'static str,
        /// The resource as RBAC names it (`nodes`, `leases`, `events`).
        resource: &'static str,
        /// The object or list, for the message (`Node node-a`, `Leases in namespace ns`).
        what: String,
        source: ApiError,
    },
    #[error("{}", .0.join("; "))]
    NodesMissing(Vec<String>),
    /// `-o`, `--watch` or `--all` given to a steering subcommand, which prints what it changed.
    #[error("fleet {0}: -o, --watch and --all are for the view (`fleet` alone), not for {0}")]
    ViewOnly(&'static str),
    #[error("namespace {0} does not exist: create it (rbac.yaml does) or give --lease-namespace")]
    NoNamespace(String),
    #[error(
        "{0} kept changing while it was written ({attempts} attempts): run the command again",
        attempts = crate::api::guarded::ATTEMPTS
    )]
    Contended(String),
    #[error("cannot write the output: {0}")]
    Output(String),
}

/// The sentence a 403 ends with: which verb on which resource was refused, and who grants it
/// (the Leases: the Role of the lease namespace; the rest: the ClusterRole).
fn refusal_hint(e: &ApiError, verb: &str, resource: &str) -> String {
    if !e.is_forbidden() {
        return String::new();
    }
    let role = if resource == "leases" {
        format!("the Role {ADMIN_ROLE} in the lease namespace")
    } else {
        format!("the ClusterRole {ADMIN_ROLE}")
    };
    format!(
        "; {verb} on {resource} was refused: {role} of rbac.yaml \
         (/usr/share/kube-shutdown-drain/rbac.yaml) grants it, bound to you as its comment shows"
    )
}

impl FleetError {
    /// A failed request about `what`.
    pub fn api(
        verb: &'static str,
        resource: &'static str,
        what: impl Into<String>,
        source: ApiError,
    ) -> FleetError {
        FleetError::Api {
            verb,
            resource,
            what: what.into(),
            source,
        }
    }

    /// The documented exit code: 2 for the kubeconfig or a namespace to create, 3 for a server
    /// that does not answer or a node missing, else 1 (a refusal among them).
    pub fn exit_code(&self) -> u8 {
        match self {
            FleetError::Find(_)
            | FleetError::Client { .. }
            | FleetError::NoNamespace(_)
            | FleetError::ViewOnly(_) => EXIT_USAGE,
            FleetError::Api { source, .. } if source.is_permanent() => EXIT_USAGE,
            FleetError::Api { source, .. } if source.is_unreachable() => EXIT_UNREACHABLE,
            FleetError::NodesMissing(_) => EXIT_UNREACHABLE,
            _ => EXIT_INCOMPLETE,
        }
    }
}

/// The admin's connection: the clients, and the kubeconfig they came from.
pub struct Admin {
    pub clients: Clients,
    pub found: Found,
    pub namespace: String,
}

impl Admin {
    /// Finds the kubeconfig and connects (a credential plugin runs here).
    pub async fn connect(access: &Access) -> Result<Admin, FleetError> {
        let found =
            find(access.kubeconfig.as_deref(), access.context.as_deref()).map_err(Box::new)?;
        let credentials = Credentials::new(&found.kubeconfig, &found.path, REQUEST_TIMEOUT);
        let client_error = |source| FleetError::Client {
            path: found.path.clone(),
            context: found.context.clone(),
            source: Box::new(source),
        };
        let clients = connect(
            found.kubeconfig.clone(),
            &found.path,
            REQUEST_TIMEOUT,
            admin_user_agent(),
            &credentials,
            Instant::now() + REQUEST_TIMEOUT,
        )
        .await
        .map_err(client_error)?;
        Ok(Admin {
            clients,
            found,
            namespace: access.lease_namespace.clone(),
        })
    }

    /// The deadline of one request from now.
    pub fn deadline(&self) -> Instant {
        Instant::now() + REQUEST_TIMEOUT
    }

    /// The kubeconfig's user name of the context, when it names one.
    pub fn kubeconfig_user(&self) -> Option<String> {
        let name = self.found.context.as_str();
        self.found
            .kubeconfig
            .contexts
            .iter()
            .find(|c| c.name == name)?
            .context
            .as_ref()?
            .user
            .clone()
    }
}

/// Runs `fleet` or one of its steering subcommands.
pub async fn run(args: FleetArgs) -> Result<u8, FleetError> {
    if let Some(steer) = &args.action
        && (args.watch || args.all || args.output != FleetOutput::Text)
    {
        return Err(FleetError::ViewOnly(steer.name()));
    }
    let admin = Admin::connect(&args.access).await?;
    match args.action {
        Some(steer) => super::fleet_steer::run(&admin, steer).await,
        None if args.watch => super::fleet_watch::run(&admin, args.output, args.all).await,
        None => {
            let seen = read(&admin).await?;
            let shown = view::view(&seen, jiff::Timestamp::now(), args.all);
            outln!("{}", render(&shown, args.output)?.trim_end());
            Ok(super::EXIT_DONE)
        }
    }
}

/// The view as `output` prints it.
pub fn render(shown: &FleetView, output: FleetOutput) -> Result<String, FleetError> {
    match output {
        FleetOutput::Json => {
            serde_json::to_string_pretty(shown).map_err(|e| FleetError::Output(e.to_string()))
        }
        FleetOutput::Text => Ok(view::text(shown, false)),
        FleetOutput::Wide => Ok(view::text(shown, true)),
    }
}

/// The one read: every Node, every Lease of the lease namespace, every Event about a Node.
pub async fn read(admin: &Admin) -> Result<Seen, FleetError> {
    let c = &admin.clients;
    let ns = admin.namespace.as_str();
    let deadline = admin.deadline();
    let nodes_api: Api<Node> = Api::all(c.api.clone());
    let leases_api: Api<Lease> = Api::namespaced(c.api.clone(), ns);
    let events_api: Api<Event> = Api::all(c.api.clone());
    let leases_of = format!("Leases in namespace {ns}");
    let by_kind = ListParams::default().fields(NODE_EVENTS);
    let all = ListParams::default();
    let (nodes, leases, events) = tokio::join!(
        c.once(deadline, "Nodes", nodes_api.list(&all)),
        c.once(deadline, &leases_of, leases_api.list(&all)),
        c.once(deadline, "Events about Nodes", events_api.list(&by_kind)),
    );
    let nodes = nodes.map_err(|e| FleetError::api("list", "nodes", "Nodes", e))?;
    let leases = leases.map_err(|e| FleetError::api("list", "leases", leases_of.clone(), e))?;
    let events = events.map_err(|e| FleetError::api("list", "events", "Events about Nodes", e))?;
    Ok(Seen {
        nodes: nodes.items,
        leases: leases.items,
        events: events.items,
        namespace: ns.to_string(),
    })
}

/// The name kubectl finds a plugin by: `kubectl shutdown-drain ARGS` runs the executable
/// `kubectl-shutdown_drain` on the PATH with ARGS (kubernetes.io "Extend kubectl with plugins":
/// a dash in the command is an underscore or a dash in the file name).
pub const PLUGIN_NAME: &str = "kubectl-shutdown_drain";

/// The program's name in usage and help, from how it was invoked (`argv[0]`): as the kubectl
/// plugin ([`PLUGIN_NAME`], or the same with a dash) the command the user typed, `kubectl
/// shutdown-drain`; else `kube-shutdown-drain`. The arguments are the same either way.
pub fn bin_name(argv0: Option<&std::path::Path>) -> &'static str {
    match argv0.and_then(|p| p.file_name()).and_then(|n| n.to_str()) {
        Some(PLUGIN_NAME | "kubectl-shutdown-drain") => "kubectl shutdown-drain",
        _ => "kube-shutdown-drain",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(code: u16) -> ApiError {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "code": code, "reason": "Forbidden",
            "message": "nodes \"node-a\" is forbidden: User \"bob\" cannot patch resource \"nodes\"",
        }))
        .unwrap();
        let trust = crate::api::error::Trust {
            kubeconfig: "/k".into(),
            authority: true,
            server_name: None,
        };
        ApiError::from_kube(
            "Node node-a",
            "https://s:6443",
            &trust,
            kube::Error::Api(Box::new(status)),
        )
    }

    /// A 403 names the verb, the resource and the role that grants it; other failures do not
    /// send the admin to the role.
    #[test]
    fn a_refusal_says_which_verb_on_which_resource_and_which_role_grants_it() {
        let e = FleetError::api("patch", "nodes", "Node node-a", refused(403));
        let text = e.to_string();
        assert!(
            text.starts_with("cannot patch Node node-a: nodes \"node-a\" is forbidden")
                && text.contains(
                    "patch on nodes was refused: the ClusterRole \
                     kube-shutdown-drain-fleet-admin"
                ),
            "{text}"
        );
        assert_eq!(e.exit_code(), EXIT_INCOMPLETE);
        let other = FleetError::api("patch", "nodes", "Node node-a", refused(500)).to_string();
        assert!(!other.contains(ADMIN_ROLE), "{other}");
    }
}
