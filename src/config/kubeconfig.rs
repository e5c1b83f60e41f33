//! Reading the kubeconfig file: within the same limits as the config file, parsed by kube, with
//! relative file references made absolute against the file's directory (as kube's own
//! `Kubeconfig::read_from` and client-go's `ResolveLocalPaths` do), and errors that name the file,
//! line and column but never show its content: it holds bearer tokens and client keys, and the
//! YAML parser's messages quote the lines around an error.

use std::path::{Path, PathBuf};

use kube::config::Kubeconfig;

use super::file::{FileError, read_text};

/// A kubeconfig that could not be read or parsed. No variant carries any of its content.
#[derive(Debug, thiserror::Error)]
pub enum KubeconfigFileError {
    #[error(transparent)]
    File(#[from] FileError),
    #[error(
        "{path}:{line}:{column}: kubeconfig is not valid YAML or not a kubeconfig \
         (its content is not shown: it may hold credentials)"
    )]
    Parse {
        path: PathBuf,
        line: u64,
        column: u64,
    },
    #[error(
        "{path}: kubeconfig is not valid YAML or not a kubeconfig \
         (its content is not shown: it may hold credentials)"
    )]
    ParseSomewhere { path: PathBuf },
    /// Merging its YAML documents failed (kube's messages for this carry no content).
    #[error("kubeconfig {path} cannot be used: {source}")]
    Merge {
        path: PathBuf,
        source: kube::config::KubeconfigError,
    },
}

/// Reads and parses a kubeconfig (no network I/O).
pub fn read(path: &Path) -> Result<Kubeconfig, KubeconfigFileError> {
    let text = read_text(path, "kubeconfig")?;
    let mut config = Kubeconfig::from_yaml(&text).map_err(|e| match e {
        kube::config::KubeconfigError::Parse(yaml) => match yaml.location() {
            Some(at) => KubeconfigFileError::Parse {
                path: path.to_path_buf(),
                line: at.line(),
                column: at.column(),
            },
            None => KubeconfigFileError::ParseSomewhere {
                path: path.to_path_buf(),
            },
        },
        source => KubeconfigFileError::Merge {
            path: path.to_path_buf(),
            source,
        },
    })?;
    if let Some(dir) = path.parent() {
        resolve_relative_paths(&mut config, dir);
    }
    drop_userinfo(&mut config, path);
    Ok(config)
}

/// Takes a user name or password out of each cluster's server URL (`https://u:p@host`): the
/// API server takes no credentials there (kube's client does not send them; client-go would,
/// as basic auth, which Kubernetes removed in 1.19), and a URL is printed in many messages, so
/// no part of the program holds them past this point.
fn drop_userinfo(config: &mut Kubeconfig, path: &Path) {
    for named in &mut config.clusters {
        let Some(cluster) = named.cluster.as_mut() else {
            continue;
        };
        let Some(server) = cluster.server.as_deref() else {
            continue;
        };
        let clean = without_userinfo(server);
        if clean != server {
            tracing::warn!(
                "kubeconfig {}: the server URL of cluster {} carries a user name or password; \
                 it is not used and never shown",
                path.display(),
                named.name
            );
            cluster.server = Some(clean);
        }
    }
}

/// `url` without the user name and password of its authority (`https://u:p@h:1/x` ->
/// `https://h:1/x`). Pure.
pub fn without_userinfo(url: &str) -> String {
    let (scheme, rest) = match url.find("://") {
        Some(i) => url.split_at(i + 3),
        None => ("", url),
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}{}", &rest[at + 1..]),
        None => url.to_owned(),
    }
}

/// The current context of `kubeconfig`, as kube picks it.
fn current_context(kubeconfig: &Kubeconfig) -> Option<&kube::config::Context> {
    let name = kubeconfig.current_context.as_ref()?;
    kubeconfig
        .contexts
        .iter()
        .find(|c| &c.name == name)
        .and_then(|c| c.context.as_ref())
}

/// The cluster of the current context.
pub fn current_cluster(kubeconfig: &Kubeconfig) -> Option<&kube::config::Cluster> {
    let name = &current_context(kubeconfig)?.cluster;
    kubeconfig
        .clusters
        .iter()
        .find(|c| &c.name == name)
        .and_then(|c| c.cluster.as_ref())
}

/// The user of the current context.
pub fn current_user(kubeconfig: &Kubeconfig) -> Option<&kube::config::AuthInfo> {
    let name = current_context(kubeconfig)?.user.as_deref()?;
    kubeconfig
        .auth_infos
        .iter()
        .find(|a| a.name == name)
        .and_then(|a| a.auth_info.as_ref())
}

/// The user of the current context, to change it.
pub fn current_user_mut(kubeconfig: &mut Kubeconfig) -> Option<&mut kube::config::AuthInfo> {
    let name = current_context(kubeconfig)?.user.clone()?;
    kubeconfig
        .auth_infos
        .iter_mut()
        .find(|a| a.name == name)
        .and_then(|a| a.auth_info.as_mut())
}

/// Makes the file references of a kubeconfig absolute against `dir`: certificate authority,
/// client certificate and key, token file, and an exec command that contains a '/' (a bare
/// command is looked up in PATH).
fn resolve_relative_paths(config: &mut Kubeconfig, dir: &Path) {
    let absolute = |p: &mut Option<String>| {
        if let Some(file) = p.as_deref()
            && Path::new(file).is_relative()
            && let Some(joined) = dir.join(file).to_str()
        {
            *p = Some(joined.to_string());
        }
    };
    for cluster in config
        .clusters
        .iter_mut()
        .filter_map(|c| c.cluster.as_mut())
    {
        absolute(&mut cluster.certificate_authority);
    }
    for auth in config
        .auth_infos
        .iter_mut()
        .filter_map(|a| a.auth_info.as_mut())
    {
        absolute(&mut auth.client_certificate);
        absolute(&mut auth.client_key);
        absolute(&mut auth.token_file);
        if let Some(exec) = auth.exec.as_mut()
            && exec.command.as_deref().is_some_and(|c| c.contains('/'))
        {
            absolute(&mut exec.command);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "s3cr3t-bearer-token-do-not-print";

    /// A YAML syntax error names the file, line and column and none of the content, though the
    /// parser's own message would quote the lines around the error (the token among them).
    #[test]
    fn a_syntax_error_names_the_position_and_never_the_content() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        let text = format!(
            "apiVersion: v1\nusers:\n- name: u\n  user:\n    token: {SECRET}\n  bad: [unclosed\n"
        );
        std::fs::write(&path, &text).unwrap();
        let raw = Kubeconfig::from_yaml(&text).unwrap_err().to_string();
        assert!(raw.contains(SECRET), "the parser no longer quotes: {raw}");
        let msg = read(&path).unwrap_err().to_string();
        assert!(msg.starts_with(&format!("{}:", path.display())), "{msg}");
        let position = msg[path.display().to_string().len()..].to_string();
        assert!(
            position.starts_with(":6:") || position.starts_with(":7:"),
            "{msg}"
        );
        assert!(!msg.contains(SECRET) && !msg.contains("token"), "{msg}");
        assert!(msg.contains("its content is not shown"), "{msg}");
    }

    #[test]
    fn a_wrong_shape_is_refused_without_the_content() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        std::fs::write(&path, format!("users: {SECRET}\n")).unwrap();
        let msg = read(&path).unwrap_err().to_string();
        assert!(msg.contains(":1:") && !msg.contains(SECRET), "{msg}");
    }

    #[test]
    fn devices_and_large_files_are_refused() {
        let msg = read(Path::new("/dev/zero")).unwrap_err().to_string();
        assert_eq!(
            msg,
            "kubeconfig /dev/zero is a character device, not a regular file"
        );
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("kubeconfig");
        std::fs::write(&big, vec![b'#'; super::super::MAX_FILE_SIZE as usize + 1]).unwrap();
        let msg = read(&big).unwrap_err().to_string();
        assert!(msg.ends_with("is larger than 1024 KiB"), "{msg}");
    }

    #[test]
    fn a_user_name_or_password_in_the_server_url_is_dropped() {
        assert_eq!(
            without_userinfo("https://admin:s3cr3t@10.0.0.1:6443/k8s"),
            "https://10.0.0.1:6443/k8s"
        );
        assert_eq!(
            without_userinfo("https://a%40b:p@ss@h:6443"),
            "https://h:6443"
        );
        assert_eq!(without_userinfo("http://h/x@y"), "http://h/x@y");
        assert_eq!(without_userinfo("user@h:6443"), "h:6443");
        assert_eq!(without_userinfo("https://h:6443"), "https://h:6443");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nclusters:\n- name: c\n  cluster:\n    server: \
                 https://admin:{SECRET}@127.0.0.1:1\ncontexts:\n- name: x\n  context:\n    \
                 cluster: c\ncurrent-context: x\n"
            ),
        )
        .unwrap();
        let kc = read(&path).unwrap();
        let server = kc.clusters[0].cluster.as_ref().unwrap().server.clone();
        assert_eq!(server.as_deref(), Some("https://127.0.0.1:1"));
        assert_eq!(crate::api::client::server_url(&kc), "https://127.0.0.1:1");
    }

    #[test]
    fn relative_file_references_are_resolved_against_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubeconfig");
        std::fs::write(
            &path,
            "apiVersion: v1\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n    \
             certificate-authority: ca.crt\nusers:\n- name: u\n  user:\n    client-certificate: \
             /abs/c.crt\n    client-key: keys/c.key\n    exec:\n      apiVersion: v1\n      \
             command: ./plugin\n",
        )
        .unwrap();
        let kc = read(&path).unwrap();
        let d = dir.path().display();
        let cluster = kc.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.certificate_authority, Some(format!("{d}/ca.crt")));
        let user = kc.auth_infos[0].auth_info.as_ref().unwrap();
        assert_eq!(user.client_certificate.as_deref(), Some("/abs/c.crt"));
        assert_eq!(user.client_key, Some(format!("{d}/keys/c.key")));
        assert_eq!(
            user.exec.as_ref().unwrap().command,
            Some(format!("{d}/./plugin"))
        );
    }
}
