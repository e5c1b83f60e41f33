//! An admin's kubeconfig, found as kubectl finds it (client-go `tools/clientcmd/loader.go`,
//! `ClientConfigLoadingRules`; kubernetes.io "Organizing Cluster Access Using kubeconfig
//! Files"): the `--kubeconfig` file, which must exist; else every file of the `KUBECONFIG` list
//! (colon-separated, empty entries and files that do not exist skipped), merged so that the
//! first file to set a value wins (kube's `Kubeconfig::merge` follows the same rules); else
//! `~/.kube/config`. `--context` stands in for the current context. Each file is read as the
//! daemon reads its own ([`super::kubeconfig::read`]: within limits, relative paths resolved
//! against that file, errors without its content).

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use kube::config::Kubeconfig;

use super::file::FileError;
use super::kubeconfig::{KubeconfigFileError, read};

/// The environment variable kubectl reads its kubeconfig list from.
pub const KUBECONFIG_ENV: &str = "KUBECONFIG";

/// Where the files to read come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    /// `--kubeconfig PATH`: that file, which must exist.
    Flag(PathBuf),
    /// `KUBECONFIG`: these files, those that exist.
    Env(Vec<PathBuf>),
    /// `~/.kube/config`.
    Home(PathBuf),
}

impl Origin {
    /// Where the files come from, as kubectl looks: the flag, else the variable (unless empty),
    /// else the home directory's file. Pure.
    pub fn of(
        flag: Option<&Path>,
        env: Option<OsString>,
        home: Option<PathBuf>,
    ) -> Result<Origin, FindError> {
        if let Some(p) = flag {
            return Ok(Origin::Flag(p.to_path_buf()));
        }
        if let Some(list) = env.filter(|v| !v.is_empty()) {
            let mut files: Vec<PathBuf> = Vec::new();
            for p in std::env::split_paths(&list).filter(|p| !p.as_os_str().is_empty()) {
                // client-go's `deduplicate`: a file listed twice is read once.
                if !files.contains(&p) {
                    files.push(p);
                }
            }
            return Ok(Origin::Env(files));
        }
        match home {
            Some(h) => Ok(Origin::Home(h.join(".kube").join("config"))),
            None => Err(FindError::NoHome),
        }
    }

    /// Where it came from, for messages.
    fn describe(&self) -> String {
        match self {
            Origin::Flag(p) => format!("--kubeconfig {}", p.display()),
            Origin::Env(files) => format!(
                "{KUBECONFIG_ENV}={}",
                std::env::join_paths(files)
                    .map(|j| j.to_string_lossy().into_owned())
                    .unwrap_or_default()
            ),
            Origin::Home(p) => p.display().to_string(),
        }
    }
}

/// The admin's kubeconfig could not be found or used. Names the files, the variable or the
/// context; never shows a file's content.
#[derive(Debug, thiserror::Error)]
pub enum FindError {
    #[error(
        "no kubeconfig: give --kubeconfig, set {KUBECONFIG_ENV}, or set HOME (for ~/.kube/config)"
    )]
    NoHome,
    #[error("no kubeconfig: none of the files of {0} exists")]
    NoneExists(String),
    #[error(transparent)]
    File(#[from] KubeconfigFileError),
    #[error("kubeconfig files {files} cannot be merged: {source}")]
    Merge {
        files: String,
        source: kube::config::KubeconfigError,
    },
    #[error("kubeconfig {from} has no context {name:?} (contexts: {known})")]
    NoContext {
        from: String,
        name: String,
        known: String,
    },
    #[error("kubeconfig {from} names no current context: give --context")]
    NoCurrentContext { from: String },
}

/// The kubeconfig found, with its chosen context made current.
#[derive(Debug, Clone)]
pub struct Found {
    pub kubeconfig: Kubeconfig,
    /// The first file that defines the context: the one messages name.
    pub path: PathBuf,
    pub context: String,
}

/// Finds, reads and merges the kubeconfig from the process's environment.
pub fn find(flag: Option<&Path>, context: Option<&str>) -> Result<Found, FindError> {
    let home = std::env::var_os("HOME")
        .filter(|h| !h.is_empty())
        .map(PathBuf::from);
    let origin = Origin::of(flag, std::env::var_os(KUBECONFIG_ENV), home)?;
    load(&origin, context)
}

/// Reads and merges the files of `origin`, then picks `context` (else the current one).
pub fn load(origin: &Origin, context: Option<&str>) -> Result<Found, FindError> {
    let (files, must_exist) = match origin {
        Origin::Flag(p) => (vec![p.clone()], true),
        Origin::Env(files) => (files.clone(), false),
        Origin::Home(p) => (vec![p.clone()], false),
    };
    let mut read_files: Vec<(PathBuf, Kubeconfig)> = Vec::new();
    for path in files {
        match read(&path) {
            Ok(k) => read_files.push((path, k)),
            Err(KubeconfigFileError::File(FileError::Io { source, .. }))
                if !must_exist && source.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
    }
    let names = |files: &[(PathBuf, Kubeconfig)]| {
        files
            .iter()
            .map(|(p, _)| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let listed = names(&read_files);
    let mut merged: Option<Kubeconfig> = None;
    for (_, k) in &read_files {
        merged = Some(match merged {
            None => k.clone(),
            Some(m) => m.merge(k.clone()).map_err(|source| FindError::Merge {
                files: listed.clone(),
                source,
            })?,
        });
    }
    let Some(mut kubeconfig) = merged else {
        return Err(FindError::NoneExists(origin.describe()));
    };
    let from = if read_files.len() == 1 {
        listed.clone()
    } else {
        format!("{} (merged from {listed})", origin.describe())
    };
    let name = match context.or(kubeconfig.current_context.as_deref()) {
        Some(n) => n.to_string(),
        None => return Err(FindError::NoCurrentContext { from }),
    };
    if !kubeconfig.contexts.iter().any(|c| c.name == name) {
        let known: Vec<&str> = kubeconfig
            .contexts
            .iter()
            .map(|c| c.name.as_str())
            .collect();
        return Err(FindError::NoContext {
            from,
            name,
            known: if known.is_empty() {
                "none".to_string()
            } else {
                known.join(", ")
            },
        });
    }
    kubeconfig.current_context = Some(name.clone());
    let path = read_files
        .iter()
        .find(|(_, k)| k.contexts.iter().any(|c| c.name == name))
        .map_or_else(|| read_files[0].0.clone(), |(p, _)| p.clone());
    Ok(Found {
        kubeconfig,
        path,
        context: name,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(dir: &Path, name: &str, context: &str, current: Option<&str>, server: &str) -> PathBuf {
        let path = dir.join(name);
        let current = current
            .map(|c| format!("current-context: {c}\n"))
            .unwrap_or_default();
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: {context}\n  cluster:\n    \
                 server: {server}\nusers:\n- name: {context}\n  user:\n    token: t\n\
                 contexts:\n- name: {context}\n  context:\n    cluster: {context}\n    user: \
                 {context}\n{current}"
            ),
        )
        .unwrap();
        path
    }

    #[test]
    fn the_flag_wins_then_the_variable_then_the_home_file() {
        let home = Some(PathBuf::from("/home/a"));
        let flag = Path::new("/f");
        assert_eq!(
            Origin::of(Some(flag), Some("/e".into()), home.clone()).unwrap(),
            Origin::Flag(flag.into())
        );
        assert_eq!(
            Origin::of(None, Some("/e1::/e2:/e1".into()), home.clone()).unwrap(),
            Origin::Env(vec!["/e1".into(), "/e2".into()])
        );
        assert_eq!(
            Origin::of(None, Some("".into()), home.clone()).unwrap(),
            Origin::Home("/home/a/.kube/config".into())
        );
        assert!(matches!(
            Origin::of(None, None, None),
            Err(FindError::NoHome)
        ));
    }

    /// kubectl's merge: the first file to set the current context wins, a context defined
    /// twice is the first file's, files that do not exist in the list are skipped; a missing
    /// `--kubeconfig` file is an error naming it.
    #[test]
    fn the_kubeconfig_list_merges_first_file_wins_and_skips_missing_files() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let a = file(d, "a", "prod", None, "https://a:6443");
        let b = file(d, "b", "prod", Some("prod"), "https://b:6443");
        let c = file(d, "c", "dev", Some("dev"), "https://c:6443");
        let missing = d.join("missing");
        let origin = Origin::Env(vec![missing.clone(), a.clone(), b.clone(), c.clone()]);
        let found = load(&origin, None).unwrap();
        assert_eq!(found.context, "prod");
        assert_eq!(found.path, a);
        assert_eq!(
            crate::api::client::server_url(&found.kubeconfig),
            "https://a:6443"
        );
        let dev = load(&origin, Some("dev")).unwrap();
        assert_eq!((dev.context.as_str(), &dev.path), ("dev", &c));
        assert_eq!(
            crate::api::client::server_url(&dev.kubeconfig),
            "https://c:6443"
        );
        let e = load(&origin, Some("staging")).unwrap_err().to_string();
        assert!(
            e.contains("no context \"staging\"") && e.contains("prod, dev"),
            "{e}"
        );
        let e = load(&Origin::Flag(missing.clone()), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains(&missing.display().to_string()), "{e}");
        let e = load(&Origin::Env(vec![missing.clone()]), None)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("no kubeconfig: none of the files of KUBECONFIG="),
            "{e}"
        );
        let e = load(&Origin::Flag(a.clone()), None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("names no current context"), "{e}");
    }
}
