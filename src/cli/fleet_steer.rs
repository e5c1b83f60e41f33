//! `fleet hold`, `release`, `pause` and `resume`: the writes `fleet::steer` builds, sent with
//! the field manager [`ADMIN_FIELD_MANAGER`], each printed as what it changed (or that it
//! changed nothing, and why). Who steers comes from the API server (a SelfSubjectReview, what
//! `kubectl auth whoami` asks), else from the kubeconfig's user name.

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DeleteParams, PostParams, Preconditions};

use super::fleet::{Admin, FleetError, Steer};
use super::{EXIT_DONE, outln};
use crate::api::client::ADMIN_FIELD_MANAGER;
use crate::api::guarded::{self, GuardedError, Target};
use crate::fleet::steer::{
    HOLD_ANNOTATION, PAUSE_LEASE, hold_of, hold_patch, hold_value, pause_lease, pause_said,
    release_patch,
};

/// Runs one steering subcommand.
pub async fn run(admin: &Admin, steer: Steer) -> Result<u8, FleetError> {
    match steer {
        Steer::Hold { nodes, reason } => {
            let who = who(admin).await;
            let value = hold_value(&reason, &who, jiff::Timestamp::now());
            for (name, node) in read_nodes(admin, &nodes).await? {
                hold(admin, &name, node, &value).await?;
            }
        }
        Steer::Release { nodes } => {
            for (name, node) in read_nodes(admin, &nodes).await? {
                release(admin, &name, node).await?;
            }
        }
        Steer::Pause { reason } => pause(admin, &reason).await?,
        Steer::Resume => resume(admin).await?,
    }
    Ok(EXIT_DONE)
}

/// Who the credentials are: the API server's answer to a SelfSubjectReview, else (a server
/// before 1.28, or one that refuses it) the kubeconfig's user name for the context.
pub async fn who(admin: &Admin) -> String {
    let api: Api<SelfSubjectReview> = Api::all(admin.clients.api.clone());
    let review = SelfSubjectReview::default();
    let asked = admin
        .clients
        .once(
            admin.deadline(),
            "SelfSubjectReview",
            api.create(&PostParams::default(), &review),
        )
        .await;
    let answered = match asked {
        Ok(r) => r.status.and_then(|s| s.user_info).and_then(|u| u.username),
        Err(e) => {
            tracing::debug!("{e}; naming the kubeconfig's user instead");
            None
        }
    };
    answered
        .filter(|u| !u.trim().is_empty())
        .or_else(|| admin.kubeconfig_user())
        .unwrap_or_else(|| "an unnamed user".to_string())
}

/// Every Node named, read before any is changed: a missing one is an error naming it (all of
/// them), and nothing is written.
async fn read_nodes(admin: &Admin, names: &[String]) -> Result<Vec<(String, Node)>, FleetError> {
    let api: Api<Node> = Api::all(admin.clients.api.clone());
    let mut found = Vec::new();
    let mut missing = Vec::new();
    for name in names {
        if found.iter().any(|(n, _)| n == name) {
            continue;
        }
        let object = format!("Node {name}");
        match admin
            .clients
            .once(admin.deadline(), &object, api.get_opt(name))
            .await
        {
            Ok(Some(node)) => found.push((name.clone(), node)),
            Ok(None) => missing.push(format!("node {name} does not exist")),
            Err(e) => return Err(FleetError::api("get", "nodes", object, e)),
        }
    }
    if missing.is_empty() {
        Ok(found)
    } else {
        missing.push("nothing was changed".to_string());
        Err(FleetError::NodesMissing(missing))
    }
}

/// Sets the hold on `name` unless it is held already.
async fn hold(admin: &Admin, name: &str, node: Node, value: &str) -> Result<(), FleetError> {
    let written = patch_node(admin, name, node, |n| hold_patch(n, value).map(|p| (p, ()))).await?;
    match written.applied {
        Some(()) => outln!("node {name}: held: {HOLD_ANNOTATION}={value:?}"),
        None => outln!(
            "node {name}: held already ({HOLD_ANNOTATION}={:?}): unchanged",
            hold_of(&written.object).unwrap_or_default()
        ),
    }
    Ok(())
}

/// Removes the hold from `name`, if it has one.
async fn release(admin: &Admin, name: &str, node: Node) -> Result<(), FleetError> {
    let written = patch_node(admin, name, node, release_patch).await?;
    match written.applied {
        Some(value) => outln!("node {name}: released: removed {HOLD_ANNOTATION}={value:?}"),
        None => outln!("node {name}: not held ({HOLD_ANNOTATION} absent): unchanged"),
    }
    Ok(())
}

/// The guarded patch `build` makes of Node `name` (as read: `node`), as the admin's field
/// manager; `build` returning `None` writes nothing.
async fn patch_node<T>(
    admin: &Admin,
    name: &str,
    node: Node,
    build: impl Fn(&Node) -> Option<(json_patch::Patch, T)>,
) -> Result<guarded::Written<Node, T>, FleetError> {
    let api: Api<Node> = Api::all(admin.clients.api.clone());
    let object = format!("Node {name}");
    let at = Target {
        api: &api,
        name,
        object: &object,
    };
    guarded::write_as(
        ADMIN_FIELD_MANAGER,
        &admin.clients,
        at,
        admin.deadline(),
        node,
        |n: &Node| Ok::<_, ()>(build(n)),
    )
    .await
    .map_err(|e| write_error("patch", &object, e))
}

/// A guarded write that failed, as a [`FleetError`] about `object`.
fn write_error(verb: &'static str, object: &str, e: GuardedError<()>) -> FleetError {
    match e {
        GuardedError::Api(source) => FleetError::api(verb, "nodes", object, source),
        GuardedError::Build(()) | GuardedError::Contended => {
            FleetError::Contended(object.to_string())
        }
    }
}

/// Creates the pause Lease, unless the fleet is paused already.
async fn pause(admin: &Admin, reason: &str) -> Result<(), FleetError> {
    let ns = admin.namespace.as_str();
    let object = format!("Lease {ns}/{PAUSE_LEASE}");
    let api: Api<Lease> = Api::namespaced(admin.clients.api.clone(), ns);
    let who = who(admin).await;
    let lease = pause_lease(ns, &who, reason, jiff::Timestamp::now());
    let pp = PostParams {
        field_manager: Some(ADMIN_FIELD_MANAGER.to_string()),
        ..PostParams::default()
    };
    match admin
        .clients
        .once(admin.deadline(), &object, api.create(&pp, &lease))
        .await
    {
        Ok(made) => {
            outln!("paused the fleet: created {object}, {}", pause_said(&made));
            Ok(())
        }
        Err(e) if e.is_conflict() => {
            let there = admin
                .clients
                .once(admin.deadline(), &object, api.get(PAUSE_LEASE))
                .await
                .map_err(|e| FleetError::api("get", "leases", object.clone(), e))?;
            outln!(
                "the fleet is paused already ({object}), {}: unchanged",
                pause_said(&there)
            );
            Ok(())
        }
        Err(e) if e.is_not_found() => Err(FleetError::NoNamespace(ns.to_string())),
        Err(e) => Err(FleetError::api("create", "leases", object, e)),
    }
}

/// Deletes the pause Lease, if there is one: the very one read (a precondition on its uid).
async fn resume(admin: &Admin) -> Result<(), FleetError> {
    let ns = admin.namespace.as_str();
    let object = format!("Lease {ns}/{PAUSE_LEASE}");
    let api: Api<Lease> = Api::namespaced(admin.clients.api.clone(), ns);
    let there = admin
        .clients
        .once(admin.deadline(), &object, api.get_opt(PAUSE_LEASE))
        .await
        .map_err(|e| FleetError::api("get", "leases", object.clone(), e))?;
    let Some(lease) = there else {
        outln!("the fleet is not paused (no {object}): unchanged");
        return Ok(());
    };
    let dp = DeleteParams {
        preconditions: Some(Preconditions {
            uid: lease.metadata.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match admin
        .clients
        .once(admin.deadline(), &object, api.delete(PAUSE_LEASE, &dp))
        .await
    {
        Ok(_) => {
            outln!(
                "resumed the fleet: deleted {object}, paused {}",
                pause_said(&lease)
            );
            Ok(())
        }
        Err(e) if e.is_not_found() => {
            outln!("the fleet is not paused (no {object}; deleted meanwhile): unchanged");
            Ok(())
        }
        Err(e) => Err(FleetError::api("delete", "leases", object, e)),
    }
}
