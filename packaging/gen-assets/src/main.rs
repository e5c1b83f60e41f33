//! Renders the shipped documentation assets from the CLI definition: the man pages (section 8,
//! a system daemon; see `src/cli/manual.rs`) and bash/zsh/fish completions. Run by `packaging/build`,
//! `debian/rules` and the rpm spec: `cargo run -p gen-assets -- OUT_DIR`.

use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use clap::CommandFactory;
use clap_complete::Shell;
use kube_shutdown_drain::cli::{Cli, manual};

use manual::BIN;

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

/// Writes `kube-shutdown-drain.8` and one page per subcommand (`kube-shutdown-drain-run.8`, ...),
/// rendered by `kube_shutdown_drain::cli::manual`.
fn write_man_page(out: &Path) -> Result<()> {
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
    for page in manual::pages(date.as_deref()) {
        let path = out.join(&page.file_name);
        fs::write(&path, page.roff).with_context(|| format!("writing {}", path.display()))?;
        println!("wrote {}", path.display());
    }
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
