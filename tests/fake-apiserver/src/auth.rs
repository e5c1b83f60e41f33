//! Identities by bearer token (or Impersonate-User) and what each may do: `system:node:NAME` plays that node's kubelet
//! under the Node authorizer, the `system:node` ClusterRole and NodeRestriction admission;
//! `system:serviceaccount:NS:NAME` is a ServiceAccount that RBAC governs (the server's loaded
//! [`crate::rbac::Policy`], e.g. the shipped rbac.yaml); any other token (or none) is a cluster
//! admin.
//!
//! The kubelet rules follow the bootstrap `system:node` ClusterRole and the NodeRestriction
//! plugin of kubernetes/kubernetes (plugin/pkg/admission/noderestriction): it may read pods and
//! nodes, create evictions and delete pods bound to itself, patch its own Node except taints,
//! write events and leases; it may not read DaemonSets or other workload controllers,
//! PodDisruptionBudgets or namespaces.

use serde_json::Value;

use crate::rbac::Policy;

/// Who a request comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Identity {
    Admin,
    /// A node's kubelet credentials: `system:node:NAME`.
    Node(String),
    /// A ServiceAccount's token: `system:serviceaccount:NAMESPACE:NAME`, under RBAC only.
    ServiceAccount {
        namespace: String,
        name: String,
    },
}

impl Identity {
    /// From the `Authorization` and `Impersonate-User` headers. kubectl (client-go) sends no
    /// bearer token to an `http://` server (measured with kubectl 1.32), but it does send
    /// `Impersonate-User` (`--as`, or `as:` in the kubeconfig); the impersonated user wins, as
    /// when an admin impersonates a node on a real apiserver.
    pub fn from_headers(authorization: Option<&str>, impersonate: Option<&str>) -> Self {
        let token = authorization
            .and_then(|h| {
                h.strip_prefix("Bearer ")
                    .or_else(|| h.strip_prefix("bearer "))
            })
            .map(str::trim);
        match impersonate
            .map(str::trim)
            .filter(|u| !u.is_empty())
            .or(token)
        {
            Some(user) => Self::from_user(user),
            None => Identity::Admin,
        }
    }

    /// The identity a user name stands for.
    pub fn from_user(user: &str) -> Self {
        if let Some(node) = user.strip_prefix("system:node:")
            && !node.is_empty()
        {
            return Identity::Node(node.to_string());
        }
        match user
            .strip_prefix("system:serviceaccount:")
            .and_then(|rest| rest.split_once(':'))
        {
            Some((namespace, name))
                if !namespace.is_empty() && !name.is_empty() && !name.contains(':') =>
            {
                Identity::ServiceAccount {
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                }
            }
            _ => Identity::Admin,
        }
    }

    /// The user name, as authorization messages print it.
    pub fn user(&self) -> String {
        match self {
            Identity::Admin => "admin".to_string(),
            Identity::Node(n) => format!("system:node:{n}"),
            Identity::ServiceAccount { namespace, name } => {
                format!("system:serviceaccount:{namespace}:{name}")
            }
        }
    }

    /// The groups the authenticator gives the identity (a ServiceAccount's, as the token
    /// authenticator of kubernetes pkg/serviceaccount gives them).
    pub fn groups(&self) -> Vec<String> {
        let groups = match self {
            Identity::Admin => vec!["system:masters".to_string()],
            Identity::Node(_) => vec!["system:nodes".to_string()],
            Identity::ServiceAccount { namespace, .. } => vec![
                "system:serviceaccounts".to_string(),
                format!("system:serviceaccounts:{namespace}"),
            ],
        };
        groups
            .into_iter()
            .chain(["system:authenticated".to_string()])
            .collect()
    }
}

/// The attributes of one request, as a SubjectAccessReview states them.
#[derive(Debug, Clone, Default)]
pub struct Attributes {
    pub verb: String,
    pub group: String,
    pub resource: String,
    pub subresource: String,
    pub namespace: String,
    pub name: String,
}

impl Attributes {
    /// The message RBAC answers a denied request with.
    pub fn denial(&self, identity: &Identity) -> String {
        let resource = if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        };
        let scope = if self.namespace.is_empty() {
            "at the cluster scope".to_string()
        } else {
            format!("in the namespace \"{}\"", self.namespace)
        };
        format!(
            "User \"{}\" cannot {} resource \"{}\" in API group \"{}\" {}",
            identity.user(),
            self.verb,
            resource,
            self.group,
            scope
        )
    }
}

const READ: &[&str] = &["get", "list", "watch"];

/// The Node authorizer's graph: its decision for `(node, attributes)`, or `None` when it does
/// not decide that resource.
pub type Graph<'a> = dyn Fn(&str, &Attributes) -> Option<Result<(), String>> + 'a;

/// The namespace of node Leases (`kube-node-lease`).
pub const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";

/// Whether `identity` may do what `attrs` describe (authorization only; NodeRestriction's
/// checks on the object itself are in `node_may_*`). `Err` carries the authorizer's reason,
/// empty for a plain RBAC denial; the 403 message appends it after a colon, as the real
/// apiserver does. `field_node` is the `spec.nodeName` a field selector requires (the query's
/// `fieldSelector`, or an access review's `resourceAttributes.fieldSelector`); `graph`
/// answers for the objects the Node authorizer relates to a node ([`crate::node_graph`]);
/// `rbac` decides for a ServiceAccount.
pub fn authorize(
    identity: &Identity,
    attrs: &Attributes,
    field_node: Option<&str>,
    graph: &Graph<'_>,
    policy: &Policy,
) -> Result<(), String> {
    let node = match identity {
        Identity::Admin => return Ok(()),
        Identity::ServiceAccount { .. } => {
            return policy
                .allowed_by(&identity.user(), &identity.groups(), attrs)
                .map(|_| ())
                .ok_or_else(String::new);
        }
        Identity::Node(n) => n.as_str(),
    };
    if let Some(decision) = graph(node, attrs) {
        return decision;
    }
    let verb = attrs.verb.as_str();
    let own = attrs.name.is_empty() || attrs.name == node;
    let rbac = |ok: bool| if ok { Ok(()) } else { Err(String::new()) };
    match (
        attrs.group.as_str(),
        attrs.resource.as_str(),
        attrs.subresource.as_str(),
    ) {
        // Patching other nodes passes authorization; NodeRestriction admission refuses it.
        ("", "nodes", "") => rbac(
            READ.contains(&verb)
                || matches!(verb, "patch" | "update")
                || (own && matches!(verb, "create" | "delete")),
        ),
        ("", "nodes", "status") => rbac(matches!(verb, "get" | "patch" | "update")),
        // The Node authorizer with selectors (default from 1.32): a node lists and watches only
        // its own pods, by a `spec.nodeName` field selector.
        ("", "pods", "") if matches!(verb, "list" | "watch") => {
            if field_node == Some(node) {
                Ok(())
            } else {
                Err("can only list/watch pods with spec.nodeName field selector".into())
            }
        }
        ("", "pods", "") => rbac(READ.contains(&verb) || matches!(verb, "create" | "delete")),
        ("", "pods", "status") => rbac(matches!(verb, "get" | "patch" | "update")),
        ("", "pods", "eviction") => rbac(verb == "create"),
        ("", "events", "") | ("events.k8s.io", "events", "") => {
            rbac(matches!(verb, "create" | "patch" | "update"))
        }
        // The Node authorizer's lease rule (node_authorizer.go, authorizeLease).
        ("coordination.k8s.io", "leases", "") => {
            if !matches!(verb, "get" | "create" | "update" | "patch" | "delete") {
                Err("can only get, create, update, patch, or delete a node lease".into())
            } else if attrs.namespace != NODE_LEASE_NAMESPACE {
                Err(format!(
                    "can only access leases in the \"{NODE_LEASE_NAMESPACE}\" system namespace"
                ))
            } else if verb != "create" && attrs.name != node {
                Err("can only access node lease with the same name as the requesting node".into())
            } else {
                Ok(())
            }
        }
        ("authorization.k8s.io", "selfsubjectaccessreviews", "") => rbac(verb == "create"),
        _ => rbac(false),
    }
}

/// The 403 message of a denied request: `WHAT is forbidden: User ... cannot ...[: REASON]`.
pub fn forbidden_message(
    what: &str,
    identity: &Identity,
    attrs: &Attributes,
    reason: &str,
) -> String {
    let denial = attrs.denial(identity);
    if reason.is_empty() {
        format!("{what} is forbidden: {denial}")
    } else {
        format!("{what} is forbidden: {denial}: {reason}")
    }
}

fn taints(node: &Value) -> Vec<Value> {
    node.pointer("/spec/taints")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// NodeRestriction on a Node write by `node`: only its own Node, and never its taints.
pub fn node_may_write_node(node: &str, old: &Value, new: &Value) -> Result<(), String> {
    let target = new
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    if target != node {
        return Err(format!(
            "node \"{node}\" is not allowed to modify node \"{target}\""
        ));
    }
    if taints(old) != taints(new) {
        return Err(format!("node \"{node}\" is not allowed to modify taints"));
    }
    Ok(())
}

/// NodeRestriction on a Lease create by `node` (kubernetes plugin/pkg/admission/noderestriction,
/// `admitLease`): the Node authorizer lets a node create any Lease in `kube-node-lease`, since a
/// create names no object; admission then reads the name from the object: only its own.
pub fn node_may_create_lease(node: &str, lease: &Value) -> Result<(), String> {
    let name = lease
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    if name == node {
        Ok(())
    } else {
        Err("can only access node lease with the same name as the requesting node".to_string())
    }
}

/// NodeRestriction on a pod delete or eviction by `node`: only pods bound to it.
pub fn node_may_remove_pod(node: &str, pod: &Value, verb: &str) -> Result<(), String> {
    let bound = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .unwrap_or("");
    if bound == node {
        Ok(())
    } else {
        Err(format!(
            // S5: no quotes around the node name in this message.
            "node {node} can only {verb} pods with spec.nodeName set to itself"
        ))
    }
}
