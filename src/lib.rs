//! kube-shutdown-drain: drains a Kubernetes node on shutdown.
