//! `check`: the configuration is valid (it loaded), the API server answers, the node exists, and
//! every permission the drain uses is granted (SelfSubjectAccessReview). The taint is checked
//! separately: NodeRestriction is admission, not authorization, so no review can show it.

use std::sync::Arc;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};

use crate::cli::{CliError, EXIT_DONE, EXIT_INCOMPLETE, outln};
use crate::config::{OnDeadline, Settings};
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
    engine.node().await?;
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
        let answer = clients
            .timed(api.create(&PostParams::default(), &review))
            .await
            .map_err(|e| anyhow::anyhow!("cannot review permission {} {resource}: {e}", p.verb))?;
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
        outln!(
            "taint {}:{}: not checkable here; kubelet credentials get 403 under NodeRestriction (the drain then goes on without it)",
            settings.taint.key,
            settings.taint.effect.as_str()
        );
    }
    if !logind_budget(&settings, "").await {
        ok = false;
    }
    Ok(if ok { EXIT_DONE } else { EXIT_INCOMPLETE })
}

/// Prints the shutdown budget from logind's `InhibitDelayMaxUSec` (a read-only property on the
/// system bus). Returns false when logind cuts the configured drain timeout short; an unreachable
/// logind (a container, a test) is reported and not counted as a failure here.
pub(crate) async fn logind_budget(settings: &Settings, indent: &str) -> bool {
    match Logind::connect().await {
        Err(e) => {
            outln!("{indent}logind: not reachable ({e}); the daemon needs it");
            true
        }
        Ok(logind) => match budget::read(&logind, settings).await {
            Err(e) => {
                outln!("{indent}logind: cannot read InhibitDelayMaxUSec ({e})");
                true
            }
            Ok(b) => {
                outln!(
                    "{indent}logind: InhibitDelayMaxSec {}, shutdown drain budget {}",
                    budget::seconds(b.logind_max),
                    budget::seconds(b.drain)
                );
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
