//! The table of API resources the fake serves: group, version, plural, kind, scope and verbs.

/// One resource type of the API, as discovery announces it and the router finds it.
#[derive(Debug)]
pub struct ResourceType {
    /// The store's table key: the plural, with `.group` for non-core groups.
    pub key: &'static str,
    /// API group; empty for the core group.
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub singular: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
    pub verbs: &'static [&'static str],
    pub short_names: &'static [&'static str],
    /// Writes to the main resource keep the old `status` (and `/status` writes keep the rest),
    /// as the real registry strategies do for these types.
    pub has_status: bool,
    /// Field selectors this type accepts besides `metadata.name` and `metadata.namespace`.
    pub fields: &'static [&'static str],
}

const ALL_VERBS: &[&str] = &[
    "create", "delete", "get", "list", "patch", "update", "watch",
];

/// Every resource the fake stores.
pub static RESOURCES: &[ResourceType] = &[
    ResourceType {
        key: "nodes",
        group: "",
        version: "v1",
        plural: "nodes",
        singular: "node",
        kind: "Node",
        namespaced: false,
        verbs: ALL_VERBS,
        short_names: &["no"],
        has_status: true,
        fields: &["spec.unschedulable"],
    },
    ResourceType {
        key: "pods",
        group: "",
        version: "v1",
        plural: "pods",
        singular: "pod",
        kind: "Pod",
        namespaced: true,
        verbs: ALL_VERBS,
        short_names: &["po"],
        has_status: true,
        fields: &[
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        ],
    },
    ResourceType {
        key: "namespaces",
        group: "",
        version: "v1",
        plural: "namespaces",
        singular: "namespace",
        kind: "Namespace",
        namespaced: false,
        verbs: ALL_VERBS,
        short_names: &["ns"],
        has_status: true,
        fields: &["status.phase"],
    },
    ResourceType {
        key: "events",
        group: "",
        version: "v1",
        plural: "events",
        singular: "event",
        kind: "Event",
        namespaced: true,
        verbs: ALL_VERBS,
        short_names: &["ev"],
        has_status: false,
        fields: &[
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        ],
    },
    ResourceType {
        key: "daemonsets.apps",
        group: "apps",
        version: "v1",
        plural: "daemonsets",
        singular: "daemonset",
        kind: "DaemonSet",
        namespaced: true,
        verbs: ALL_VERBS,
        short_names: &["ds"],
        has_status: true,
        fields: &[],
    },
    ResourceType {
        key: "replicasets.apps",
        group: "apps",
        version: "v1",
        plural: "replicasets",
        singular: "replicaset",
        kind: "ReplicaSet",
        namespaced: true,
        verbs: ALL_VERBS,
        short_names: &["rs"],
        has_status: true,
        fields: &[],
    },
    ResourceType {
        key: "statefulsets.apps",
        group: "apps",
        version: "v1",
        plural: "statefulsets",
        singular: "statefulset",
        kind: "StatefulSet",
        namespaced: true,
        verbs: ALL_VERBS,
        short_names: &["sts"],
        has_status: true,
        fields: &[],
    },
    ResourceType {
        key: "deployments.apps",
        group: "apps",
        version: "v1",
        plural: "deployments",
        singular: "deployment",
        kind: "Deployment",
        namespaced: true,
        verbs: ALL_VERBS,
        short_names: &["deploy"],
        has_status: true,
        fields: &[],
    },
    ResourceType {
        key: "poddisruptionbudgets.policy",
        group: "policy",
        version: "v1",
        plural: "poddisruptionbudgets",
        singular: "poddisruptionbudget",
        kind: "PodDisruptionBudget",
        namespaced: true,
        verbs: ALL_VERBS,
        short_names: &["pdb"],
        has_status: true,
        fields: &[],
    },
    ResourceType {
        key: "events.events.k8s.io",
        group: "events.k8s.io",
        version: "v1",
        plural: "events",
        singular: "event",
        kind: "Event",
        namespaced: true,
        verbs: ALL_VERBS,
        short_names: &["ev"],
        has_status: false,
        fields: &[
            "regarding.kind",
            "regarding.namespace",
            "regarding.name",
            "regarding.uid",
            "reason",
            "reportingController",
            "type",
        ],
    },
    ResourceType {
        key: "leases.coordination.k8s.io",
        group: "coordination.k8s.io",
        version: "v1",
        plural: "leases",
        singular: "lease",
        kind: "Lease",
        namespaced: true,
        verbs: ALL_VERBS,
        short_names: &[],
        has_status: false,
        fields: &[],
    },
    ResourceType {
        key: "jobs.batch",
        group: "batch",
        version: "v1",
        plural: "jobs",
        singular: "job",
        kind: "Job",
        namespaced: true,
        verbs: ALL_VERBS,
        short_names: &[],
        has_status: true,
        fields: &["status.successful"],
    },
    ResourceType {
        key: "cronjobs.batch",
        group: "batch",
        version: "v1",
        plural: "cronjobs",
        singular: "cronjob",
        kind: "CronJob",
        namespaced: true,
        verbs: ALL_VERBS,
        short_names: &["cj"],
        has_status: true,
        fields: &[],
    },
    ResourceType {
        key: "persistentvolumes",
        group: "",
        version: "v1",
        plural: "persistentvolumes",
        singular: "persistentvolume",
        kind: "PersistentVolume",
        namespaced: false,
        verbs: ALL_VERBS,
        short_names: &["pv"],
        has_status: true,
        fields: &[],
    },
    ResourceType {
        key: "persistentvolumeclaims",
        group: "",
        version: "v1",
        plural: "persistentvolumeclaims",
        singular: "persistentvolumeclaim",
        kind: "PersistentVolumeClaim",
        namespaced: true,
        verbs: ALL_VERBS,
        short_names: &["pvc"],
        has_status: true,
        fields: &[],
    },
    ResourceType {
        key: "volumeattachments.storage.k8s.io",
        group: "storage.k8s.io",
        version: "v1",
        plural: "volumeattachments",
        singular: "volumeattachment",
        kind: "VolumeAttachment",
        namespaced: false,
        verbs: ALL_VERBS,
        short_names: &[],
        has_status: true,
        fields: &[],
    },
];

/// The groups discovery lists, in order, with the one version each serves.
pub const GROUPS: &[(&str, &str)] = &[
    ("apps", "v1"),
    ("events.k8s.io", "v1"),
    ("policy", "v1"),
    ("coordination.k8s.io", "v1"),
    ("batch", "v1"),
    ("storage.k8s.io", "v1"),
    ("authorization.k8s.io", "v1"),
    ("authentication.k8s.io", "v1"),
];

/// Every kind the fake serves, as `apiVersion Kind`, for errors about the ones it does not.
pub fn served_kinds() -> String {
    RESOURCES
        .iter()
        .map(|r| format!("{} {}", r.api_version(), r.kind))
        .collect::<Vec<_>>()
        .join(", ")
}

impl ResourceType {
    /// `v1` for the core group, `group/version` otherwise.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_string()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// The name errors use: `pods`, `daemonsets.apps`.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_string()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    pub fn list_kind(&self) -> String {
        format!("{}List", self.kind)
    }

    pub fn accepts_field(&self, field: &str) -> bool {
        field == "metadata.name" || field == "metadata.namespace" || self.fields.contains(&field)
    }
}

/// The resource served at `group/version/plural`.
pub fn by_path(group: &str, version: &str, plural: &str) -> Option<&'static ResourceType> {
    RESOURCES
        .iter()
        .find(|r| r.group == group && r.version == version && r.plural == plural)
}

/// The resource for an object's `apiVersion` and `kind`.
pub fn by_api_version(api_version: &str, kind: &str) -> Option<&'static ResourceType> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    RESOURCES
        .iter()
        .find(|r| r.group == group && r.version == version && r.kind == kind)
}

/// The resource for a kind name as tests write it: `Pod`, `Node`, `Event` (core/v1) or
/// `Event.events.k8s.io`; plurals and store keys (`pods`, `leases.coordination.k8s.io`) work too.
pub fn by_kind(kind: &str) -> Option<&'static ResourceType> {
    let matches = |r: &ResourceType, name: &str| r.kind == name || r.plural == name;
    match kind.split_once('.') {
        Some((name, group)) => RESOURCES
            .iter()
            .find(|r| r.group == group && matches(r, name)),
        // The core group wins (`Event` is core/v1), then the first other group.
        None => RESOURCES
            .iter()
            .find(|r| r.group.is_empty() && matches(r, kind))
            .or_else(|| RESOURCES.iter().find(|r| matches(r, kind))),
    }
}
