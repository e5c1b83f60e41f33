//! Renders the shipped documentation assets from the CLI definition: the man page (section 8,
//! a system daemon) and bash/zsh/fish completions. Run by `packaging/build`:
//! `cargo run --example gen-assets -- OUT_DIR`.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::CommandFactory;
use clap_complete::Shell;
use kube_shutdown_drain::cli::Cli;

/// The installed name; the man page and completions are keyed on it.
const BIN: &str = "kube-shutdown-drain";

/// Sections clap does not know about, in roff. Paths match the packages and the unit.
const EXTRA_SECTIONS: &str = r#".SH FILES
.TP
\fI/etc/kube\-shutdown\-drain/config.toml\fR
The configuration; every key is optional and documented in the shipped file. Another path can
be given with \fB\-\-config\fR or \fBKUBE_SHUTDOWN_DRAIN_CONFIG\fR.
.TP
\fI/etc/kube\-shutdown\-drain/kubeconfig\fR
The node's credentials. The service does not start until this file exists.
.TP
\fI/var/lib/kube\-shutdown\-drain/\fR
State: the report of the last drain.
.TP
\fI/usr/lib/systemd/system/kube\-shutdown\-drain.service\fR
The daemon's unit (\fBkube\-shutdown\-drain run\fR).
.TP
\fI/usr/lib/systemd/logind.conf.d/99\-zz\-kube\-shutdown\-drain.conf\fR
Raises logind's \fBInhibitDelayMaxSec\fR so that the drain fits; sorts after the kubelet's
\fI99\-kubelet.conf\fR.
.TP
\fI/usr/share/kube\-shutdown\-drain/\fR
Kubernetes manifests (ServiceAccount namespace, ClusterRole, binding, admission policy) and
\fBmake\-node\-kubeconfig\fR.
.SH CREDENTIALS
The daemon needs an identity that may patch its own Node, list and evict the pods on it and
create Events. Apply \fI/usr/share/kube\-shutdown\-drain/rbac.yaml\fR once per cluster, then on
each node (or from an admin workstation) run
\fB/usr/share/kube\-shutdown\-drain/make\-node\-kubeconfig\fR \fINODE\fR \fIOUT\fR, which
creates a ServiceAccount named after the node and writes a kubeconfig for its token.
\fIadmission\-policy.yaml\fR (Kubernetes 1.30 or later) limits each such identity to its own
Node object. The kubelet's kubeconfig also works, with one limitation: the NodeRestriction
admission plugin forbids a node to change its own taints, so no taint is set (the cordon still
is).
.SH SEE ALSO
\fBsystemd\-inhibit\fR(1), \fBlogind.conf\fR(5), \fBsystemctl\fR(1), \fBkubectl\-drain\fR(1)
"#;

fn main() -> Result<()> {
    let mut args = std::env::args_os().skip(1);
    let Some(out) = args.next().map(PathBuf::from) else {
        bail!("usage: gen-assets OUT_DIR");
    };
    fs::create_dir_all(&out).with_context(|| format!("creating {}", out.display()))?;
    write_man_page(&out)?;
    write_completions(&out)?;
    Ok(())
}

/// Writes `kube-shutdown-drain.8` (with [`EXTRA_SECTIONS`]) and one page per subcommand
/// (`kube-shutdown-drain-run.8`, ...), which the main page's SUBCOMMANDS section refers to.
fn write_man_page(out: &Path) -> Result<()> {
    let mut cmd = Cli::command().name(BIN).disable_help_subcommand(true);
    // Gives the subcommands their display names ("kube-shutdown-drain-run").
    cmd.build();
    // Reproducible builds: the date comes from the build, not from the clock.
    let date = match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(epoch) => {
            let secs: i64 = epoch
                .parse()
                .with_context(|| format!("SOURCE_DATE_EPOCH {epoch:?} is not a number"))?;
            let date = jiff::Timestamp::from_second(secs)
                .with_context(|| format!("SOURCE_DATE_EPOCH {epoch:?} is out of range"))?;
            Some(date.strftime("%Y-%m-%d").to_string())
        }
        Err(_) => None,
    };
    let page = |cmd: clap::Command| {
        let man = clap_mangen::Man::new(cmd)
            .section("8")
            .manual("System Administration");
        match &date {
            Some(d) => man.date(d.clone()),
            None => man,
        }
    };
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let man = page(sub.clone());
        let path = man.generate_to(out).with_context(|| {
            format!(
                "writing the man page of {} into {}",
                sub.get_name(),
                out.display()
            )
        })?;
        println!("wrote {}", path.display());
    }
    let man = page(cmd);
    let mut text = Vec::new();
    man.render(&mut text).context("rendering the man page")?;
    text.write_all(EXTRA_SECTIONS.as_bytes())?;
    let path = out.join(man.get_filename());
    fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    println!("wrote {}", path.display());
    Ok(())
}

fn write_completions(out: &Path) -> Result<()> {
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let mut cmd = Cli::command();
        let path = clap_complete::generate_to(shell, &mut cmd, BIN, out)
            .with_context(|| format!("writing the {shell} completion into {}", out.display()))?;
        println!("wrote {}", path.display());
    }
    Ok(())
}
