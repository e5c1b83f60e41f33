//! The `fake-apiserver` binary: seed, listen, write a kubeconfig, print the URL, serve until
//! SIGINT or SIGTERM.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use fake_apiserver::{FakeApiServer, Options, Policy, load_seed_file};

/// A fake Kubernetes API server for tests (plain HTTP on 127.0.0.1).
#[derive(Parser)]
#[command(version)]
struct Cli {
    /// TCP port on 127.0.0.1 (0 picks a free port).
    #[arg(long, default_value_t = 0)]
    port: u16,
    /// YAML or JSON file of objects to load at start (several documents allowed; repeatable).
    #[arg(long)]
    seed: Vec<PathBuf>,
    /// Where to write a kubeconfig pointing at the server.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    /// Bearer token the kubeconfig carries (`system:node:NAME` acts as that node's kubelet,
    /// `system:serviceaccount:NS:NAME` as a ServiceAccount under `--rbac`).
    #[arg(long, default_value = "admin")]
    token: String,
    /// YAML file of Roles, ClusterRoles and bindings ServiceAccount tokens are authorized by
    /// (e.g. packaging/manifests/rbac.yaml; repeatable).
    #[arg(long)]
    rbac: Vec<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let mut seed = Vec::new();
    for file in &cli.seed {
        seed.extend(load_seed_file(file)?);
    }
    let mut rbac = Vec::new();
    for file in &cli.rbac {
        rbac.extend(load_seed_file(file)?);
    }
    let rbac = Policy::from_objects(&rbac, "--rbac")?;
    let server = FakeApiServer::start(Options {
        port: cli.port,
        seed,
    })
    .await?;
    server.set_rbac(rbac);
    if let Some(path) = &cli.kubeconfig {
        server.write_kubeconfig(path, &cli.token)?;
    }
    let mut stdout = std::io::stdout();
    writeln!(stdout, "{}", server.url()).context("cannot write the URL to stdout")?;
    stdout.flush().context("cannot flush stdout")?;

    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .context("cannot install the SIGTERM handler")?;
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    tracing::info!("fake apiserver on {} stopping", server.url());
    Ok(())
}
