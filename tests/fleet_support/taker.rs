//! A slot taker for the benchmarks of many waiting nodes: a node name and its own client, as
//! each node's daemon has, taking and giving back drain slots through the product's calls.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kube_shutdown_drain::config::Settings;
use kube_shutdown_drain::engine::Engine;
use kube_shutdown_drain::fleet::slots::{GivenBack, Slots, Taken};
use tokio::time::Instant;

use crate::engine_support::{Cluster, identity_of, node};

/// The boot every taker is in.
const BOOT: &str = "0b0e1d00-0000-4000-8000-000000000001";

pub struct Taker {
    settings: Arc<Settings>,
    engine: Engine,
    node: k8s_openapi::api::core::v1::Node,
}

impl Taker {
    /// Node `name` of `c`, its group having `slots` slots, each request given `timeout`.
    pub async fn new(c: &Cluster, name: &str, slots: usize, timeout: &str) -> Taker {
        let text = format!(
            "node_name = \"{name}\"\nkubeconfig = \"{}\"\nstate_dir = \"{}\"\n\
             request_timeout = \"{timeout}\"\n[fleet]\nslots = {slots}\n",
            c.kubeconfig(&identity_of(name)).display(),
            c.dir.path().join(format!("state-{name}")).display()
        );
        let mut s = Settings::from_str_at(Path::new("/bench/config.toml"), &text)
            .unwrap_or_else(|e| panic!("bench settings are valid: {e}"));
        s.boot_id_path = c.dir.path().join("boot_id");
        let settings = Arc::new(s);
        let engine = Engine::new(settings.clone()).expect("an engine");
        engine.clients().await.expect("a client");
        let node = serde_json::from_value(node(name)).expect("a Node");
        Taker {
            settings,
            engine,
            node,
        }
    }

    async fn slots(&self) -> Slots<'_> {
        Slots {
            clients: self.engine.clients().await.expect("a client"),
            settings: &self.settings,
        }
    }

    /// Waits for a slot, `within` at most; `None` when none came.
    pub async fn take(&self, within: Duration) -> Option<String> {
        let until = Instant::now() + within;
        match self
            .slots()
            .await
            .take(&self.node, BOOT, until, until)
            .await
        {
            Ok(Taken::Slot(name) | Taken::Kept(name)) => Some(name),
            Ok(Taken::Full(_)) => None,
            Err(e) => panic!("{}: {e}", self.settings.node_name),
        }
    }

    /// Gives the slot back; panics when there was none.
    pub async fn give_back(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        match self.slots().await.give_back(deadline).await {
            Ok(GivenBack::Slots(given)) if !given.is_empty() => {}
            other => panic!("{}: gave back nothing: {other:?}", self.settings.node_name),
        }
    }
}
