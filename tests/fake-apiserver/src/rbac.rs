//! RBAC for the identities it governs (ServiceAccounts): Roles, ClusterRoles and their bindings
//! read from YAML, and the decision for one request's attributes, as the apiserver's RBAC
//! authorizer makes it (kubernetes plugin/pkg/auth/authorizer/rbac, `RuleAllows` and
//! `appliesTo`).
//!
//! A rule allows a request when its verbs, apiGroups, resources (`pods/eviction` names a
//! subresource, `*/eviction` any resource's) and resourceNames (empty: every name) all match.
//! A ClusterRoleBinding applies in every namespace and at the cluster scope; a RoleBinding only
//! to requests in its own namespace, whether it refers to a Role or a ClusterRole. The
//! bootstrap `system:basic-user` grant (SelfSubjectAccessReview and SelfSubjectRulesReview
//! create for `system:authenticated`) is always there, as on a real cluster. Non-resource
//! rules and aggregation are not modelled: the fake does not authorize discovery.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

use crate::auth::Attributes;

/// Why a set of RBAC objects could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum RbacError {
    #[error("cannot read RBAC file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Documents(#[from] crate::seed::SeedError),
    #[error("{source_name}: {kind} {name} is not a valid RBAC object: {source}")]
    Object {
        source_name: String,
        kind: String,
        name: String,
        source: serde_json::Error,
    },
}

/// One rule of a Role or ClusterRole.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Rule {
    #[serde(default)]
    pub verbs: Vec<String>,
    #[serde(default)]
    pub api_groups: Vec<String>,
    #[serde(default)]
    pub resources: Vec<String>,
    #[serde(default)]
    pub resource_names: Vec<String>,
}

impl Rule {
    /// `RuleAllows` of the RBAC authorizer (non-resource rules never match a resource request).
    pub fn allows(&self, a: &Attributes) -> bool {
        let any = |list: &[String], want: &str| list.iter().any(|v| v == "*" || v == want);
        let combined = if a.subresource.is_empty() {
            a.resource.clone()
        } else {
            format!("{}/{}", a.resource, a.subresource)
        };
        let resource = self.resources.iter().any(|r| {
            r == "*"
                || *r == combined
                || (!a.subresource.is_empty()
                    && r.strip_prefix("*/") == Some(a.subresource.as_str()))
        });
        any(&self.verbs, &a.verb)
            && any(&self.api_groups, &a.group)
            && resource
            && (self.resource_names.is_empty() || self.resource_names.contains(&a.name))
    }
}

#[derive(Debug, Clone, Deserialize)]
struct Meta {
    name: String,
    #[serde(default)]
    namespace: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
struct RoleObject {
    metadata: Meta,
    #[serde(default)]
    rules: Vec<Rule>,
}

#[derive(Debug, Clone, Deserialize)]
struct RoleRef {
    kind: String,
    name: String,
}

#[derive(Debug, Clone, Deserialize)]
struct Subject {
    kind: String,
    name: String,
    #[serde(default)]
    namespace: Option<String>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
struct BindingObject {
    metadata: Meta,
    role_ref: RoleRef,
    #[serde(default)]
    subjects: Vec<Subject>,
}

impl Subject {
    /// `appliesTo` of the RBAC authorizer: a user, a group, or a ServiceAccount by its user name.
    fn matches(&self, user: &str, groups: &[String], binding_namespace: &str) -> bool {
        match self.kind.as_str() {
            "User" => self.name == user,
            "Group" => groups.contains(&self.name),
            "ServiceAccount" => {
                let ns = self.namespace.as_deref().unwrap_or(binding_namespace);
                user == format!("system:serviceaccount:{ns}:{}", self.name)
            }
            _ => false,
        }
    }

    fn describe(&self) -> String {
        match &self.namespace {
            Some(ns) if self.kind == "ServiceAccount" => {
                format!("{} \"{}/{}\"", self.kind, ns, self.name)
            }
            _ => format!("{} \"{}\"", self.kind, self.name),
        }
    }
}

/// The RBAC objects a server evaluates. Empty: every ServiceAccount request is denied except
/// the bootstrap access reviews.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    cluster_roles: Vec<RoleObject>,
    roles: Vec<RoleObject>,
    cluster_bindings: Vec<BindingObject>,
    bindings: Vec<BindingObject>,
}

/// The group every authenticated user has.
const AUTHENTICATED: &str = "system:authenticated";

impl Policy {
    /// The RBAC objects among `objects` (other kinds, such as a Namespace, are skipped);
    /// `source_name` (a file name) goes into errors.
    pub fn from_objects(objects: &[Value], source_name: &str) -> Result<Policy, RbacError> {
        let mut policy = Policy::default();
        for object in objects {
            let kind = object["kind"].as_str().unwrap_or("");
            let bad = |source| RbacError::Object {
                source_name: source_name.to_string(),
                kind: kind.to_string(),
                name: object["metadata"]["name"]
                    .as_str()
                    .unwrap_or("?")
                    .to_string(),
                source,
            };
            let role = || serde_json::from_value::<RoleObject>(object.clone()).map_err(bad);
            let binding = || serde_json::from_value::<BindingObject>(object.clone()).map_err(bad);
            match kind {
                "ClusterRole" => policy.cluster_roles.push(role()?),
                "Role" => policy.roles.push(role()?),
                "ClusterRoleBinding" => policy.cluster_bindings.push(binding()?),
                "RoleBinding" => policy.bindings.push(binding()?),
                _ => {}
            }
        }
        Ok(policy)
    }

    /// The RBAC objects of a YAML or JSON text (several documents allowed).
    pub fn parse(text: &str, source_name: &str) -> Result<Policy, RbacError> {
        Self::from_objects(
            &crate::seed::parse_documents(text, source_name)?,
            source_name,
        )
    }

    /// The RBAC objects of a file, e.g. the shipped `packaging/manifests/rbac.yaml`.
    pub fn load(path: &Path) -> Result<Policy, RbacError> {
        let text = std::fs::read_to_string(path).map_err(|source| RbacError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    fn rules_of(&self, role_ref: &RoleRef, namespace: &str) -> &[Rule] {
        let found = match role_ref.kind.as_str() {
            "ClusterRole" => self
                .cluster_roles
                .iter()
                .find(|r| r.metadata.name == role_ref.name),
            "Role" => self.roles.iter().find(|r| {
                r.metadata.name == role_ref.name
                    && r.metadata.namespace.as_deref() == Some(namespace)
            }),
            _ => None,
        };
        found.map_or(&[], |r| r.rules.as_slice())
    }

    /// The decision for `user` in `groups` asking `attrs`: the reason RBAC gives for an
    /// allowed request (the binding, role and subject that allowed it), `None` when no rule
    /// bound to the identity allows it.
    pub fn allowed_by(&self, user: &str, groups: &[String], attrs: &Attributes) -> Option<String> {
        if groups.iter().any(|g| g == AUTHENTICATED)
            && attrs.verb == "create"
            && attrs.group == "authorization.k8s.io"
            && matches!(
                attrs.resource.as_str(),
                "selfsubjectaccessreviews" | "selfsubjectrulesreviews"
            )
        {
            return Some(format!(
                "RBAC: allowed by ClusterRoleBinding \"system:basic-user\" of ClusterRole \
                 \"system:basic-user\" to Group \"{AUTHENTICATED}\""
            ));
        }
        let cluster = self
            .cluster_bindings
            .iter()
            .map(|b| (b, "", "ClusterRoleBinding"));
        let local = self
            .bindings
            .iter()
            .filter(|b| {
                !attrs.namespace.is_empty()
                    && b.metadata.namespace.as_deref() == Some(attrs.namespace.as_str())
            })
            .map(|b| {
                (
                    b,
                    b.metadata.namespace.as_deref().unwrap_or(""),
                    "RoleBinding",
                )
            });
        for (binding, namespace, binding_kind) in cluster.chain(local) {
            let Some(subject) = binding
                .subjects
                .iter()
                .find(|s| s.matches(user, groups, namespace))
            else {
                continue;
            };
            if self
                .rules_of(&binding.role_ref, namespace)
                .iter()
                .any(|r| r.allows(attrs))
            {
                let at = if namespace.is_empty() {
                    String::new()
                } else {
                    format!("/{namespace}")
                };
                return Some(format!(
                    "RBAC: allowed by {binding_kind} \"{}{at}\" of {} \"{}\" to {}",
                    binding.metadata.name,
                    binding.role_ref.kind,
                    binding.role_ref.name,
                    subject.describe()
                ));
            }
        }
        None
    }
}

/// One request (or access review) RBAC denied, as the server records it for tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Denial {
    /// `request` for an API request answered 403, `review` for a SelfSubjectAccessReview
    /// answered `allowed: false`.
    pub kind: &'static str,
    pub user: String,
    /// The authorizer's message (`User "..." cannot VERB resource ...`).
    pub message: String,
}

impl std::fmt::Display for Denial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} denied: {}", self.kind, self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SA: &str = "system:serviceaccount:drainers:node-a";

    fn groups() -> Vec<String> {
        [
            "system:serviceaccounts",
            "system:serviceaccounts:drainers",
            AUTHENTICATED,
        ]
        .map(String::from)
        .to_vec()
    }

    fn attrs(
        verb: &str,
        group: &str,
        resource: &str,
        sub: &str,
        ns: &str,
        name: &str,
    ) -> Attributes {
        Attributes {
            verb: verb.into(),
            group: group.into(),
            resource: resource.into(),
            subresource: sub.into(),
            namespace: ns.into(),
            name: name.into(),
        }
    }

    const POLICY: &str = r#"
kind: ClusterRole
apiVersion: rbac.authorization.k8s.io/v1
metadata: {name: drain}
rules:
  - {apiGroups: [""], resources: ["pods/eviction"], verbs: ["create"]}
  - {apiGroups: [""], resources: ["nodes"], verbs: ["get"], resourceNames: ["node-a"]}
  - {apiGroups: ["storage.k8s.io"], resources: ["*/status"], verbs: ["get"]}
---
kind: ClusterRoleBinding
apiVersion: rbac.authorization.k8s.io/v1
metadata: {name: drain}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: drain}
subjects: [{kind: Group, name: "system:serviceaccounts:drainers"}]
---
kind: Role
apiVersion: rbac.authorization.k8s.io/v1
metadata: {name: slots, namespace: drainers}
rules:
  - {apiGroups: ["coordination.k8s.io"], resources: ["leases"], verbs: ["get", "patch"]}
---
kind: RoleBinding
apiVersion: rbac.authorization.k8s.io/v1
metadata: {name: slots, namespace: drainers}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: slots}
subjects: [{kind: ServiceAccount, name: node-a, namespace: drainers}]
"#;

    fn allowed(a: Attributes) -> bool {
        let policy = Policy::parse(POLICY, "test policy").unwrap();
        policy.allowed_by(SA, &groups(), &a).is_some()
    }

    #[test]
    fn a_subresource_rule_allows_only_that_subresource() {
        assert!(allowed(attrs(
            "create", "", "pods", "eviction", "work", "web-1"
        )));
        assert!(!allowed(attrs("create", "", "pods", "", "work", "")));
        assert!(!allowed(attrs(
            "delete", "", "pods", "eviction", "work", "web-1"
        )));
        assert!(allowed(attrs(
            "get",
            "storage.k8s.io",
            "volumeattachments",
            "status",
            "",
            "v"
        )));
        assert!(!allowed(attrs(
            "get",
            "storage.k8s.io",
            "volumeattachments",
            "",
            "",
            "v"
        )));
    }

    #[test]
    fn resource_names_limit_the_rule_to_those_objects() {
        assert!(allowed(attrs("get", "", "nodes", "", "", "node-a")));
        assert!(!allowed(attrs("get", "", "nodes", "", "", "node-b")));
        // A list has no name: a rule with resourceNames never allows it.
        assert!(!allowed(attrs("get", "", "nodes", "", "", "")));
    }

    #[test]
    fn a_role_binding_applies_only_in_its_namespace() {
        assert!(allowed(attrs(
            "patch",
            "coordination.k8s.io",
            "leases",
            "",
            "drainers",
            "s"
        )));
        assert!(!allowed(attrs(
            "patch",
            "coordination.k8s.io",
            "leases",
            "",
            "default",
            "s"
        )));
        assert!(!allowed(attrs(
            "patch",
            "coordination.k8s.io",
            "leases",
            "",
            "",
            ""
        )));
        assert!(!allowed(attrs(
            "create",
            "coordination.k8s.io",
            "leases",
            "",
            "drainers",
            ""
        )));
    }

    #[test]
    fn only_bound_subjects_get_the_rules() {
        let policy = Policy::parse(POLICY, "test policy").unwrap();
        let other = "system:serviceaccount:elsewhere:node-a";
        let groups = [
            "system:serviceaccounts",
            "system:serviceaccounts:elsewhere",
            AUTHENTICATED,
        ]
        .map(String::from);
        let evict = attrs("create", "", "pods", "eviction", "work", "web-1");
        assert!(policy.allowed_by(other, &groups, &evict).is_none());
        // Every authenticated user may review its own access.
        let review = attrs(
            "create",
            "authorization.k8s.io",
            "selfsubjectaccessreviews",
            "",
            "",
            "",
        );
        assert!(policy.allowed_by(other, &groups, &review).is_some());
    }

    #[test]
    fn the_reason_names_the_binding_role_and_subject() {
        let policy = Policy::parse(POLICY, "test policy").unwrap();
        let why = policy
            .allowed_by(
                SA,
                &groups(),
                &attrs("get", "coordination.k8s.io", "leases", "", "drainers", "s"),
            )
            .unwrap();
        assert_eq!(
            why,
            "RBAC: allowed by RoleBinding \"slots/drainers\" of Role \"slots\" to ServiceAccount \"drainers/node-a\""
        );
    }
}
