//! `fleet --watch`: the view drawn once from one read, then again at each change of the Nodes,
//! the Leases of the lease namespace or the Events about Nodes, as kube's watchers and
//! reflectors see them (a watch that breaks or expires is listed and watched again by the
//! watcher, with its backoff). A burst of changes is drawn once, [`COALESCE`] after its first;
//! the ages the view shows are drawn again every [`REFRESH`]. Ends on Ctrl-C (SIGINT).

use std::io::IsTerminal;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Node};
use kube::api::Api;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use tokio::time::Instant;

use super::fleet::{Admin, FleetError, FleetOutput, NODE_EVENTS, read, render};
use super::{EXIT_DONE, out};
use crate::fleet::view::{self, Seen};

/// How long after a first change the view is drawn: the changes of one step of a node (its
/// Lease, its Node, its Event) come within a few milliseconds of each other.
pub const COALESCE: Duration = Duration::from_millis(200);
/// How often the view is drawn without a change, so its ages ("since 3m") stay true.
pub const REFRESH: Duration = Duration::from_secs(30);

/// What one of the three watches said.
enum Said {
    /// The first list of watch N (0 Nodes, 1 Leases, 2 Events) is in its store, or a new list
    /// after the watch broke.
    Ready(usize),
    Changed,
    /// Nothing to draw yet (an object of a list the watcher is still reading).
    Nothing,
    Failed(String),
}

/// A watcher's events as [`Said`], its objects kept in a reflector's store.
fn follow<K>(
    api: Api<K>,
    config: watcher::Config,
    (which, what): (usize, &'static str),
) -> (Store<K>, BoxStream<'static, Said>)
where
    K: kube::Resource<DynamicType = ()>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, config))
        .default_backoff()
        .map(move |event| match event {
            Ok(watcher::Event::InitDone) => Said::Ready(which),
            Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) => Said::Changed,
            Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => Said::Nothing,
            Err(e) => Said::Failed(format!("watching {what}: {e}; watching again")),
        })
        .boxed();
    (reader, stream)
}

/// Draws the view, and again after each change, until Ctrl-C.
pub async fn run(admin: &Admin, output: FleetOutput, all: bool) -> Result<u8, FleetError> {
    // The first read says what is refused as the plain `fleet` does, before any watch starts.
    let first = read(admin).await?;
    let terminal = std::io::stdout().is_terminal();
    draw(&first, output, all, terminal)?;
    let c = &admin.clients;
    let ns = admin.namespace.clone();
    let (nodes, nodes_said) = follow(
        Api::<Node>::all(c.watch.clone()),
        watcher::Config::default(),
        (0, "Nodes"),
    );
    let (leases, leases_said) = follow(
        Api::<Lease>::namespaced(c.watch.clone(), &ns),
        watcher::Config::default(),
        (1, "Leases"),
    );
    let (events, events_said) = follow(
        Api::<Event>::all(c.watch.clone()),
        watcher::Config::default().fields(NODE_EVENTS),
        (2, "Events about Nodes"),
    );
    let mut said = futures::stream::select(
        futures::stream::select(nodes_said, leases_said),
        events_said,
    );
    let seen = || Seen {
        nodes: nodes.state().iter().map(|n| (**n).clone()).collect(),
        leases: leases.state().iter().map(|l| (**l).clone()).collect(),
        events: events.state().iter().map(|e| (**e).clone()).collect(),
        namespace: ns.clone(),
    };
    // Nothing is drawn from the stores before each has its first list.
    let mut ready = [false; 3];
    let mut draw_at: Option<Instant> = None;
    let mut refresh = tokio::time::interval_at(Instant::now() + REFRESH, REFRESH);
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        let all_ready = ready.iter().all(|r| *r);
        let due = draw_at.filter(|_| all_ready);
        tokio::select! {
            _ = &mut ctrl_c => return Ok(EXIT_DONE),
            next = said.next() => match next {
                Some(Said::Ready(which)) => {
                    ready[which] = true;
                    draw_at.get_or_insert(Instant::now() + COALESCE);
                }
                Some(Said::Changed) => {
                    draw_at.get_or_insert(Instant::now() + COALESCE);
                }
                Some(Said::Nothing) => {}
                Some(Said::Failed(why)) => tracing::warn!("{why}"),
                None => return Ok(EXIT_DONE),
            },
            _ = sleep_until(due) => {
                draw_at = None;
                draw(&seen(), output, all, terminal)?;
            }
            _ = refresh.tick(), if all_ready => draw(&seen(), output, all, terminal)?,
        }
    }
}

/// Sleeps until `at`; forever without one.
async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// One drawing: on a terminal the screen cleared first, else a line with the time between two
/// drawings; JSON as one document per drawing.
fn draw(seen: &Seen, output: FleetOutput, all: bool, terminal: bool) -> Result<(), FleetError> {
    let now = jiff::Timestamp::now();
    let shown = view::view(seen, now, all);
    let body = render(&shown, output)?;
    if output == FleetOutput::Json {
        out!("{}\n", body.trim_end());
        return Ok(());
    }
    let head = if terminal {
        // ANSI (ECMA-48): cursor home, erase the screen, as watch(1) redraws.
        "\x1b[H\x1b[2J".to_string()
    } else {
        format!("--- {}\n", now.round(jiff::Unit::Second).unwrap_or(now))
    };
    out!(
        "{head}{}\n{}\n",
        body.trim_end(),
        view::progress_line(&shown)
    );
    Ok(())
}
