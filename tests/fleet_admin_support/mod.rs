//! The admin of the `fleet` tests: a ServiceAccount bound to the shipped
//! `kube-shutdown-drain-fleet-admin` roles as rbac.yaml's comment shows (so a request those roles
//! do not allow is a denial, and fails the test when `Cluster` drops), and the binary run as
//! `kube-shutdown-drain fleet` with kubectl's way to the kubeconfig.
#![allow(dead_code)]

use std::path::Path;

use crate::engine_support::{Cluster, Run};

/// An admin bound to the fleet-admin roles.
pub const ADMIN: &str = "system:serviceaccount:ops:alice";
/// A user bound to nothing.
pub const NOBODY: &str = "system:serviceaccount:ops:bob";
/// The lease namespace of the shipped manifests.
pub const LEASE_NS: &str = "kube-shutdown-drain";

/// The shipped rbac.yaml with the bindings its comment shows, for [`ADMIN`].
pub fn policy_with_admin() -> fake_apiserver::Policy {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/manifests/rbac.yaml");
    let shipped = std::fs::read_to_string(&path).unwrap();
    let bindings = format!(
        "---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: kube-shutdown-drain-fleet-admin}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: kube-shutdown-drain-fleet-admin}}
subjects: [{{kind: User, name: \"{ADMIN}\", apiGroup: rbac.authorization.k8s.io}}]
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {{name: kube-shutdown-drain-fleet-admin, namespace: {LEASE_NS}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: Role, name: kube-shutdown-drain-fleet-admin}}
subjects: [{{kind: User, name: \"{ADMIN}\", apiGroup: rbac.authorization.k8s.io}}]
"
    );
    fake_apiserver::Policy::parse(&format!("{shipped}\n{bindings}"), "rbac.yaml + bindings")
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The fake API server with `objects`, authorizing [`ADMIN`] by the shipped roles.
pub async fn cluster(objects: Vec<serde_json::Value>) -> Cluster {
    let c = Cluster::start(objects).await;
    c.server.set_rbac(policy_with_admin());
    c
}

/// `kube-shutdown-drain fleet ARGS` as `user`, the kubeconfig in `KUBECONFIG`, no config file
/// of the daemon anywhere.
pub fn fleet_command(c: &Cluster, user: &str, args: &[&str]) -> tokio::process::Command {
    let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_kube-shutdown-drain"));
    command
        .arg("fleet")
        .args(args)
        .env("KUBECONFIG", c.kubeconfig(user))
        .env("HOME", c.dir.path())
        .env("KUBE_SHUTDOWN_DRAIN_CONFIG", "/nonexistent/config.toml")
        .env("KUBE_SHUTDOWN_DRAIN_LOG", "warn")
        .kill_on_drop(true);
    command
}

/// Runs [`fleet_command`] to its end.
pub async fn fleet(c: &Cluster, user: &str, args: &[&str]) -> Run {
    let out = fleet_command(c, user, args)
        .output()
        .await
        .expect("the binary runs");
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}
