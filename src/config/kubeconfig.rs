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
    Ok(config)
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
