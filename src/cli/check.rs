//! `check`: the configuration is valid (it loaded), the API server answers, the node exists,
//! every permission the drain uses is granted (SelfSubjectAccessReview), the taint may be written,
//! the state directory is writable, nobody else can write the files the daemon trusts
//! ([`super::file_modes`]), logind answers with a budget that fits, and with `[fleetlock]` the
//! unit's user namespace maps the update agent ([`super::agent_line`]). Exit 1 when something
//! the service needs is missing.
//!
//! The taint is checked by a server-side dry run of the taint patch (`?dryRun=All`): no review
//! can show it, because NodeRestriction is admission, not authorization, and a dry-run patch goes
//! through admission exactly like the real one (kubernetes `plugin/pkg/admission/noderestriction`;
//! measured on kube-apiserver v1.29.7 and v1.36).

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};

use super::permissions::check_permissions;
use crate::api::guarded::FIELD_MANAGER;
use crate::api::{ApiError, Clients, Credentials};
use crate::cli::{CliError, EXIT_DONE, EXIT_INCOMPLETE, outln};
use crate::config::Settings;
use crate::engine::Engine;

/// `check`: the config, the credentials, the node, every permission the drain needs, the taints'
/// dry runs, the state dir, file modes and logind; exit 1 when something required fails.
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
    credentials_line(engine.credentials()).await?;
    let node_object = engine.node().await?;
    outln!("node {node}: exists, the API server answers");
    let clients = engine.clients().await?;
    let mut ok = check_permissions(clients, &settings).await?;
    ok &= check_taints(clients, &settings, &node_object).await;
    if let Some(w) = crate::config::advice::taint_effect(&settings) {
        outln!("taint: WARNING {w}");
    }
    ok &= check_state_dir(&settings);
    if !super::file_modes::check(&settings) {
        ok = false;
    }
    if !super::logind_lines::logind_time_limit(&settings, "").await {
        ok = false;
    }
    super::logind_lines::gate(&settings, "").await;
    ok &= super::agent_line::fleetlock(&settings, "").await;
    super::forecast::line(&settings, "").await;
    Ok(if ok { EXIT_DONE } else { EXIT_INCOMPLETE })
}

/// The server-side dry runs of our taint and of the DaemonSets' stop-last taint, as configured;
/// `false` when one that is needed cannot be set.
async fn check_taints(clients: &Clients, settings: &Settings, node_object: &Node) -> bool {
    let mut ok = true;
    if settings.taint.enabled {
        let taint = settings.taint.to_string();
        match taint_dry_run(clients, settings, node_object, &settings.taint.taint()).await {
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
    if settings.drain.daemonsets == crate::config::DaemonSetPolicy::StopLast {
        let taint = crate::node::daemonsets::taint();
        let name = format!("{}:{}", taint.key, taint.effect);
        match taint_dry_run(clients, settings, node_object, &taint).await {
            Ok(()) => outln!(
                "daemonsets stop-last: taint {name} allowed (server-side dry run of the patch)"
            ),
            Err(e) => {
                ok = false;
                let why = if e.is_forbidden() {
                    format!("denied: {}", e.problem())
                } else {
                    format!("cannot check: {e}")
                };
                outln!(
                    "daemonsets stop-last: taint {name} {why}; without it the drain leaves the \
                     DaemonSet pods of node {} running",
                    settings.node_name
                );
            }
        }
    }
    ok
}

/// Whether the state dir is writable (and a warning when it is in memory).
fn check_state_dir(settings: &Settings) -> bool {
    let dir = settings.state_dir.display();
    match crate::state_file::check_writable(&settings.state_dir) {
        Ok(()) if crate::state_file::is_volatile(&settings.state_dir) => outln!(
            "state dir {dir}: writable; WARNING it is in memory (tmpfs): the boot record is lost at \
             every reboot, so the next boot cannot tell whether this one ended with a drain"
        ),
        Ok(()) => outln!("state dir {dir}: writable"),
        Err(e) => {
            outln!(
                "state dir {dir}: NOT WRITABLE ({e}); the report and the shutdown start cannot be kept"
            );
            return false;
        }
    }
    true
}

/// The credential we fetch ourselves (token file, exec plugin), fetched now: what it gave and
/// until when. A failure is the command's error (exit 2), named without secrets.
async fn credentials_line(credentials: &Credentials) -> Result<(), CliError> {
    if !credentials.is_fetched() {
        return Ok(());
    }
    let deadline = tokio::time::Instant::now() + credentials.limit();
    credentials
        .prefetch(deadline)
        .await
        .map_err(|e| CliError::Engine(crate::engine::Error::Client(e.into())))?;
    let until = credentials.expires_at().map_or_else(
        || "no expiry given".to_owned(),
        |t| format!("valid until {t}"),
    );
    outln!("credentials: {} answered ({until})", credentials.describe());
    Ok(())
}

/// A taint patch the drain would send (`taint`: ours, or the last stage's), as a server-side
/// dry run (`?dryRun=All`): admission (NodeRestriction, policies) answers it as it would the
/// real one, and nothing is stored. Adds the taint, or removes it when it is already there, so
/// the patch always changes the taints.
async fn taint_dry_run(
    clients: &Clients,
    settings: &Settings,
    node: &Node,
    taint: &k8s_openapi::api::core::v1::Taint,
) -> Result<(), ApiError> {
    let mut taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    let same =
        |t: &k8s_openapi::api::core::v1::Taint| t.key == taint.key && t.effect == taint.effect;
    if taints.iter().any(same) {
        taints.retain(|t| !same(t));
    } else {
        taints.push(taint.clone());
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
