//! The kubelet's Graceful Node Shutdown beside us: whether the kubelet holds its own logind
//! delay inhibitor for `shutdown`, and its `shutdownGracePeriod` where its config file can be
//! read. logind signals every lock holder at the same moment (systemd `send_prepare_for`), so
//! with both on the kubelet kills pods locally, ignoring disruption budgets, while we evict
//! (kubernetes#96129): worth one warning.

use std::path::{Path, PathBuf};

use crate::config::Settings;
use crate::config::file::FileError;
use crate::host::logind::{Logind, LogindError};

/// The `who` the kubelet's inhibitor carries (kubelet `nodeshutdown/systemd` `InhibitShutdown`).
pub const KUBELET_WHO: &str = "kubelet";

/// Whether logind's inhibitor list holds a delay lock on `shutdown` taken by the kubelet. Each
/// entry is logind's `ListInhibitors` tuple (what, who, why, mode, uid, pid); `what` is a
/// colon-separated list.
pub fn kubelet_holds_delay(inhibitors: &[(String, String, String, String, u32, u32)]) -> bool {
    inhibitors.iter().any(|(what, who, _, mode, _, _)| {
        who == KUBELET_WHO && mode == "delay" && what.split(':').any(|w| w == "shutdown")
    })
}

/// The kubelet's effective `shutdownGracePeriod`, as its files set it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Grace {
    /// `period`, as written, by the last file that set it.
    Set { period: String, from: PathBuf },
    /// No file sets it: the kubelet's default, 0 (Graceful Node Shutdown off).
    Unset,
}

/// The kubelet's configuration could not be read. Each names its file or directory.
#[derive(Debug, thiserror::Error)]
pub enum KubeletConfigError {
    #[error(transparent)]
    Read(#[from] FileError),
    #[error(
        "the kubelet config {} is not a YAML map with a string shutdownGracePeriod",
        path.display()
    )]
    NotAMap { path: PathBuf },
    #[error("cannot read the kubelet's drop-in directory {}: {source}", dir.display())]
    DropIns {
        dir: PathBuf,
        source: std::io::Error,
    },
}

/// `shutdownGracePeriod` from the kubelet's config file: `Ok(None)` when the file does not set
/// it, `Err` naming the file when it cannot be read or is not a YAML map.
pub fn grace_period(path: &Path) -> Result<Option<String>, KubeletConfigError> {
    // The same limits as our own config: a regular file of at most 1 MiB.
    let text = crate::config::file::read_text(path, "the kubelet config")?;
    // serde-saphyr, the pure-Rust YAML parser kube already uses: no libyaml in the binary.
    let doc: KubeletConfig =
        serde_saphyr::from_str(&text).map_err(|_| KubeletConfigError::NotAMap {
            path: path.to_path_buf(),
        })?;
    Ok(doc.shutdown_grace_period)
}

/// The kubelet's effective `shutdownGracePeriod` and the file that set it: its config file,
/// then each `*.conf` of its drop-in directory (`--config-dir`) in lexical order, each overriding
/// what came before (the kubelet's merge order, kubernetes `cmd/kubelet/app/server.go`,
/// `mergeKubeletConfigurations`). A directory that does not exist holds nothing.
pub fn effective_grace(config: &Path, dir: &Path) -> Result<Grace, KubeletConfigError> {
    let set = |period, from: &Path| Grace::Set {
        period,
        from: from.to_path_buf(),
    };
    let mut found = grace_period(config)?.map_or(Grace::Unset, |g| set(g, config));
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(found),
        Err(source) => {
            return Err(KubeletConfigError::DropIns {
                dir: dir.to_path_buf(),
                source,
            });
        }
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "conf"))
        .collect();
    files.sort();
    for file in files {
        if let Some(g) = grace_period(&file)? {
            found = set(g, &file);
        }
    }
    Ok(found)
}

/// The kubelet's effective grace period in words, for `check` and the warning.
pub fn describe_grace(grace: &Result<Grace, KubeletConfigError>) -> String {
    match grace {
        Ok(Grace::Set { period, from }) => {
            format!("shutdownGracePeriod {period}, from {}", from.display())
        }
        Ok(Grace::Unset) => {
            "shutdownGracePeriod not set in its config file or drop-ins (0: off)".to_owned()
        }
        Err(e) => format!("its grace period unknown: {e}"),
    }
}

/// The effective grace of the kubelet `settings` name.
pub fn settings_grace(settings: &Settings) -> Result<Grace, KubeletConfigError> {
    effective_grace(
        &settings.daemon.kubelet_config,
        &settings.daemon.kubelet_config_dir,
    )
}

/// The one key of the kubelet's config file we read; every other key is ignored.
#[derive(serde::Deserialize)]
struct KubeletConfig {
    #[serde(rename = "shutdownGracePeriod", default)]
    shutdown_grace_period: Option<String>,
}

/// The warning for a kubelet delay inhibitor on `node`, naming the grace period where it was
/// read; `None` when the kubelet holds none.
pub fn warning(
    node: &str,
    holds: bool,
    grace: &Result<Grace, KubeletConfigError>,
) -> Option<String> {
    if !holds {
        return None;
    }
    let grace = describe_grace(grace);
    Some(format!(
        "the kubelet on node {node} holds a delay inhibitor for shutdowns (Graceful Node \
         Shutdown, {grace}): logind signals it at the same moment as us, and it kills pods \
         locally, ignoring disruption budgets, while we evict them; set shutdownGracePeriod: 0 \
         (docs/kubelet.md)"
    ))
}

/// The warning about the kubelet's own delay inhibitor for shutdowns, with its grace period
/// where its config file can be read; `None` when the kubelet holds none. What `check`, `status`
/// and the daemon say.
pub(crate) async fn inspect(
    settings: &Settings,
    logind: &Logind,
) -> Result<Option<String>, LogindError> {
    if !kubelet_holds_delay(&logind.list_inhibitors().await?) {
        return Ok(None);
    }
    Ok(warning(
        &settings.node_name,
        true,
        &settings_grace(settings),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock(what: &str, who: &str, mode: &str) -> (String, String, String, String, u32, u32) {
        (what.into(), who.into(), "why".into(), mode.into(), 0, 1)
    }

    #[test]
    fn only_a_kubelet_delay_lock_on_shutdown_counts() {
        assert!(kubelet_holds_delay(&[lock("shutdown", "kubelet", "delay")]));
        assert!(kubelet_holds_delay(&[lock(
            "sleep:shutdown",
            "kubelet",
            "delay"
        )]));
        assert!(!kubelet_holds_delay(&[lock(
            "shutdown", "kubelet", "block"
        )]));
        assert!(!kubelet_holds_delay(&[lock("sleep", "kubelet", "delay")]));
        assert!(!kubelet_holds_delay(&[lock(
            "shutdown",
            "kube-shutdown-drain",
            "delay"
        )]));
    }

    #[test]
    fn the_grace_period_is_read_from_the_config_file_and_errors_name_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.yaml");
        std::fs::write(
            &path,
            "kind: KubeletConfiguration\nshutdownGracePeriod: 30s\n",
        )
        .unwrap();
        assert_eq!(grace_period(&path).unwrap(), Some("30s".into()));
        std::fs::write(&path, "kind: KubeletConfiguration\n").unwrap();
        assert_eq!(grace_period(&path).unwrap(), None);
        let missing = dir.path().join("nope.yaml");
        let e = grace_period(&missing).unwrap_err().to_string();
        assert!(e.contains("nope.yaml"), "{e}");
        let set = Ok(Grace::Set {
            period: "30s".to_string(),
            from: path.clone(),
        });
        let w = warning("n1", true, &set).unwrap();
        assert!(
            w.contains("node n1") && w.contains("shutdownGracePeriod 30s, from "),
            "{w}"
        );
        assert_eq!(warning("n1", false, &set), None);
    }

    #[test]
    fn drop_ins_override_the_config_file_in_lexical_order() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("config.yaml");
        std::fs::write(
            &config,
            "kind: KubeletConfiguration
shutdownGracePeriod: 30s
",
        )
        .unwrap();
        let drop_ins = dir.path().join("kubelet.conf.d");
        assert_eq!(
            effective_grace(&config, &drop_ins).unwrap(),
            Grace::Set {
                period: "30s".into(),
                from: config.clone()
            },
            "a missing directory holds nothing"
        );
        std::fs::create_dir(&drop_ins).unwrap();
        // The file the packages ship, as an admin installs it; and one sorting before it.
        let shipped = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("packaging/kubelet/99-kube-shutdown-drain.conf");
        std::fs::copy(&shipped, drop_ins.join("99-kube-shutdown-drain.conf")).unwrap();
        std::fs::write(
            drop_ins.join("10-site.conf"),
            "shutdownGracePeriod: 45s
",
        )
        .unwrap();
        std::fs::write(
            drop_ins.join("zz-ignored.yaml"),
            "shutdownGracePeriod: 90s
",
        )
        .unwrap();
        assert_eq!(
            effective_grace(&config, &drop_ins).unwrap(),
            Grace::Set {
                period: "0s".into(),
                from: drop_ins.join("99-kube-shutdown-drain.conf")
            }
        );
        std::fs::write(drop_ins.join("10-site.conf"), "[not, a, map\n").unwrap();
        assert!(
            effective_grace(&config, &drop_ins)
                .unwrap_err()
                .to_string()
                .contains("10-site.conf")
        );
    }
}
