//! `check`: the configuration is valid (it loaded), the API server answers, the node exists,
//! every permission the drain uses is granted (SelfSubjectAccessReview), the taint may be written,
//! the state directory is writable, nobody else can write the files the daemon trusts
//! ([`super::file_modes`]) and logind answers with a budget that fits. Exit 1 when
//! something the service needs is missing.
//!
//! The taint is checked by a server-side dry run of the taint patch (`?dryRun=All`): no review
//! can show it, because NodeRestriction is admission, not authorization, and a dry-run patch goes
//! through admission exactly like the real one (kubernetes-api.md, section 5).

use std::sync::Arc;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams, PostParams};

use crate::api::guarded::FIELD_MANAGER;
use crate::api::{ApiError, Clients};
use crate::cli::{CliError, EXIT_DONE, EXIT_INCOMPLETE, outln};
use crate::config::{OnDeadline, Settings, TaintEffect};
use crate::daemon::budget;
use crate::daemon::logind::Logind;
use crate::engine::Engine;

/// One permission the drain uses.
struct Permission {
    verb: &'static str,
    group: &'static str,
    resource: &'static str,
    subresource: &'static str,
    /// Scoped to our node's name (nodes) or unscoped.
    named: bool,
    /// Without it the drain cannot work; otherwise a feature degrades.
    required: bool,
    what: &'static str,
}

const fn perm(
    verb: &'static str,
    group: &'static str,
    resource: &'static str,
    subresource: &'static str,
    named: bool,
    required: bool,
    what: &'static str,
) -> Permission {
    Permission {
        verb,
        group,
        resource,
        subresource,
        named,
        required,
        what,
    }
}

fn permissions(settings: &Settings) -> Vec<Permission> {
    let mut p = vec![
        perm("get", "", "nodes", "", true, true, "read the node"),
        perm(
            "patch",
            "",
            "nodes",
            "",
            true,
            true,
            "marker, cordon, taint",
        ),
        perm(
            "watch",
            "",
            "nodes",
            "",
            true,
            false,
            "wait for Ready before restoring",
        ),
        perm("list", "", "pods", "", false, true, "list the node's pods"),
        perm("watch", "", "pods", "", false, true, "see evicted pods go"),
        perm("create", "", "pods", "eviction", false, true, "evict pods"),
        perm("create", "", "events", "", false, false, "Node Events"),
        perm(
            "get",
            "coordination.k8s.io",
            "leases",
            "",
            true,
            false,
            "see a live kubelet by its Lease before restoring",
        ),
        perm(
            "list",
            "policy",
            "poddisruptionbudgets",
            "",
            false,
            false,
            "read a budget that refused an eviction",
        ),
        perm(
            "watch",
            "policy",
            "poddisruptionbudgets",
            "",
            false,
            false,
            "retry a blocked eviction as soon as its budget opens",
        ),
    ];
    if settings.drain.wait_for_detach {
        p.push(perm(
            "get",
            "",
            "persistentvolumeclaims",
            "",
            false,
            false,
            "find the volumes of evicted pods",
        ));
        // Two calls, not a loop: packaging/check-manifests reads the verbs from the perm(...)s.
        p.push(perm(
            "list",
            "storage.k8s.io",
            "volumeattachments",
            "",
            false,
            false,
            "wait for evicted pods' volumes to detach",
        ));
        p.push(perm(
            "watch",
            "storage.k8s.io",
            "volumeattachments",
            "",
            false,
            false,
            "see evicted pods' volumes detach",
        ));
    }
    if settings.drain.on_deadline == OnDeadline::Delete {
        p.push(perm(
            "delete",
            "",
            "pods",
            "",
            false,
            true,
            "delete pods at the deadline",
        ));
    }
    p
}

pub async fn run(settings: Arc<Settings>) -> Result<u8, CliError> {
    let node = settings.node_name.clone();
    outln!(
        "config {}: valid",
        settings
            .source
            .as_ref()
            .map_or("<defaults>".into(), |p| p.display().to_string())
    );
    let engine = Engine::new(settings.clone())?;
    outln!("kubeconfig {}: readable", settings.kubeconfig.display());
    let node_object = engine.node().await?;
    outln!("node {node}: exists, the API server answers");
    let clients = engine.clients().await?;
    let api: Api<SelfSubjectAccessReview> = Api::all(clients.api.clone());
    let mut ok = true;
    for p in permissions(&settings) {
        let review = SelfSubjectAccessReview {
            spec: SelfSubjectAccessReviewSpec {
                resource_attributes: Some(ResourceAttributes {
                    verb: Some(p.verb.into()),
                    group: Some(p.group.into()),
                    resource: Some(p.resource.into()),
                    subresource: (!p.subresource.is_empty()).then(|| p.subresource.into()),
                    name: p.named.then(|| node.clone()),
                    ..ResourceAttributes::default()
                }),
                ..SelfSubjectAccessReviewSpec::default()
            },
            ..SelfSubjectAccessReview::default()
        };
        let resource = if p.subresource.is_empty() {
            p.resource.to_string()
        } else {
            format!("{}/{}", p.resource, p.subresource)
        };
        let object = format!("the review of permission {} {resource}", p.verb);
        let deadline = tokio::time::Instant::now() + clients.request_timeout;
        let answer = clients
            .once(
                deadline,
                &object,
                api.create(&PostParams::default(), &review),
            )
            .await
            .map_err(|e| anyhow::anyhow!("cannot get {e}"))?;
        let allowed = answer.status.as_ref().is_some_and(|s| s.allowed);
        let verdict = match (allowed, p.required) {
            (true, _) => "allowed",
            (false, true) => {
                ok = false;
                "DENIED"
            }
            (false, false) => "denied (optional)",
        };
        outln!(
            "permission {:<6} {resource:<26} {verdict:<17} {}",
            p.verb,
            p.what
        );
    }
    if settings.taint.enabled {
        let taint = settings.taint.to_string();
        match taint_dry_run(clients, &settings, &node_object).await {
            Ok(()) => outln!("taint {taint}: allowed (server-side dry run of the patch)"),
            Err(e) if e.is_forbidden() => outln!(
                "taint {taint}: denied (optional): {}; the drain cordons without it",
                e.problem()
            ),
            Err(e) => {
                ok = false;
                outln!("taint {taint}: cannot check: {e}");
            }
        }
    }
    if let Some(w) = taint_effect_warning(&settings) {
        outln!("taint: WARNING {w}");
    }
    match crate::state_file::check_writable(&settings.state_dir) {
        Ok(()) if crate::state_file::is_volatile(&settings.state_dir) => outln!(
            "state dir {}: writable; WARNING it is in memory (tmpfs): the boot record is lost at \
             every reboot, so the next boot cannot tell whether this one ended with a drain",
            settings.state_dir.display()
        ),
        Ok(()) => outln!("state dir {}: writable", settings.state_dir.display()),
        Err(e) => {
            ok = false;
            outln!(
                "state dir {}: NOT WRITABLE ({e}); the report and the shutdown start cannot be kept",
                settings.state_dir.display()
            );
        }
    }
    if !super::file_modes::check(&settings) {
        ok = false;
    }
    if !logind_budget(&settings, "").await {
        ok = false;
    }
    Ok(if ok { EXIT_DONE } else { EXIT_INCOMPLETE })
}

/// The taint patch the drain would send, as a server-side dry run (`?dryRun=All`): admission
/// (NodeRestriction, policies) answers it as it would the real one, and nothing is stored. Adds
/// our taint, or removes it when it is already there, so the patch always changes the taints.
async fn taint_dry_run(
    clients: &Clients,
    settings: &Settings,
    node: &Node,
) -> Result<(), ApiError> {
    let mut taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    if taints.iter().any(|t| settings.taint.matches(t)) {
        taints.retain(|t| !settings.taint.matches(t));
    } else {
        taints.push(settings.taint.taint());
    }
    let object = format!(
        "a dry run of the taint patch of node {}",
        settings.node_name
    );
    let patch: json_patch::Patch = serde_json::from_value(serde_json::json!([
        {"op": "add", "path": "/spec/taints", "value": taints}
    ]))
    .map_err(|e| clients.error(&object, kube::Error::SerdeError(e)))?;
    let params = PatchParams {
        dry_run: true,
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    };
    let api: Api<Node> = Api::all(clients.api.clone());
    let deadline = tokio::time::Instant::now() + clients.request_timeout;
    clients
        .once(
            deadline,
            &object,
            api.patch(&settings.node_name, &params, &Patch::<()>::Json(patch)),
        )
        .await
        .map(|_| ())
}

/// The advice for a taint effect that defeats the drain: a `NoExecute` taint makes the taint
/// manager delete every pod that does not tolerate it at once, ignoring PodDisruptionBudgets, the
/// drain's order and its filters. Said by `check`, `plan` and the daemon at start.
pub fn taint_effect_warning(settings: &Settings) -> Option<String> {
    (settings.taint.enabled && settings.taint.effect == TaintEffect::NoExecute).then(|| {
        format!(
            "[taint] effect = \"NoExecute\" in {}: Kubernetes deletes every pod on the node that \
             does not tolerate taint {} at once, ignoring PodDisruptionBudgets and the drain's \
             order; use \"PreferNoSchedule\" (the default) or \"NoSchedule\"",
            settings
                .source
                .as_ref()
                .map_or("the built-in defaults".into(), |p| p.display().to_string()),
            settings.taint.key
        )
    })
}

/// Prints the shutdown budget from logind's `InhibitDelayMaxUSec` (a read-only property on the
/// system bus). Returns false when logind cannot be reached or read (the daemon needs it) or cuts
/// the configured drain timeout short.
pub(crate) async fn logind_budget(settings: &Settings, indent: &str) -> bool {
    match Logind::connect().await {
        Err(e) => {
            outln!("{indent}logind: NOT REACHABLE ({e}); the daemon needs it");
            false
        }
        Ok(logind) => match budget::read(&logind, settings).await {
            Err(e) => {
                outln!("{indent}logind: cannot read InhibitDelayMaxUSec ({e})");
                false
            }
            Ok(b) => {
                outln!(
                    "{indent}logind: InhibitDelayMaxSec {}, shutdown drain budget {}",
                    budget::seconds(b.logind_max),
                    budget::seconds(b.drain)
                );
                kubelet_lock(&logind, settings, indent).await;
                match b.warning {
                    Some(w) => {
                        outln!("{indent}logind: WARNING {w}");
                        false
                    }
                    None => true,
                }
            }
        },
    }
}

/// Warns when the kubelet holds its own delay inhibitor for shutdowns (Graceful Node Shutdown):
/// it acts at the same moment as the daemon (README "Living with the kubelet's Graceful Node
/// Shutdown"). A warning only: the daemon works, but budgets are not honoured for what the
/// kubelet kills first.
async fn kubelet_lock(logind: &Logind, settings: &Settings, indent: &str) {
    match crate::daemon::kubelet::inspect(settings, logind).await {
        Err(e) => outln!("{indent}kubelet: cannot list logind's inhibitors ({e})"),
        Ok(Some(w)) => outln!("{indent}kubelet: WARNING {w}"),
        Ok(None) => outln!("{indent}kubelet: holds no shutdown inhibitor"),
    }
}
