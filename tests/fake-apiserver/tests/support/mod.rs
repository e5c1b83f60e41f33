//! The kubectl harness shared by the fake's kubectl tests: the versioned real kubectl binaries
//! found beside the `kubectl` on PATH, run against a fake with its own kubeconfig and cache, and
//! the evictions the fake recorded.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Output;

use fake_apiserver::FakeApiServer;
use tempfile::TempDir;

/// The folder of the versioned kubectl binaries: where the `kubectl` on PATH really lives.
pub fn kubectl_dir() -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("kubectl"))
        .find(|p| p.is_file())
        .and_then(|p| std::fs::canonicalize(p).ok())
        .and_then(|p| p.parent().map(Path::to_path_buf))
}

pub fn kubectl(version: &str) -> Option<PathBuf> {
    let found = kubectl_dir()
        .map(|d| d.join(format!("kubectl.{version}")))
        .filter(|p| p.is_file());
    if found.is_none() {
        let why = format!("kubectl.{version} not found next to the kubectl on PATH");
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("{why}; CI=true requires it");
        }
        eprintln!("skipping: {why}");
    }
    found
}

pub struct Kubectl {
    bin: PathBuf,
    /// Its kubeconfig and cache; a test may put files of its own there.
    pub dir: TempDir,
}

impl Kubectl {
    pub fn new(bin: PathBuf, server: &FakeApiServer, token: &str) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        server
            .write_kubeconfig(&dir.path().join("kubeconfig"), token)
            .expect("kubeconfig written");
        Kubectl { bin, dir }
    }

    pub fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut c = tokio::process::Command::new(&self.bin);
        c.arg("--kubeconfig")
            .arg(self.dir.path().join("kubeconfig"))
            .arg("--cache-dir")
            .arg(self.dir.path().join("cache"))
            .args(args)
            .kill_on_drop(true);
        c
    }

    pub async fn run(&self, args: &[&str]) -> Output {
        let out = self.command(args).output().await.expect("kubectl runs");
        eprintln!(
            "$ kubectl {}\n-> {:?}\n{}{}",
            args.join(" "),
            out.status.code(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    /// Runs and requires exit 0; returns stdout.
    pub async fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args).await;
        assert!(
            out.status.success(),
            "kubectl {args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }
}

/// (pod, status) of every eviction, in order.
pub fn evictions(server: &FakeApiServer) -> Vec<(String, u16)> {
    server
        .recorder()
        .matching("POST", "/eviction")
        .into_iter()
        .map(|r| {
            let name = r
                .path
                .trim_end_matches("/eviction")
                .rsplit('/')
                .next()
                .unwrap_or("")
                .to_string();
            (name, r.status)
        })
        .collect()
}
