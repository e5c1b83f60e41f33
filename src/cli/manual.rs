//! The man pages (section 8): clap_mangen renders NAME, DESCRIPTION, OPTIONS and the subcommand
//! list from the `Cli` definition; this file adds what clap does not know (a SYNOPSIS that shows
//! option arguments, EXIT STATUS, ENVIRONMENT, FILES, SEE ALSO) and puts the version in every
//! page's footer. `packaging/gen-assets` writes the pages for the packages.

use std::fmt::Write as _;
use std::io::Write as _;

use clap::{Arg, ArgAction, Command, CommandFactory};

use crate::cli::Cli;

/// The installed name; the pages are named after it.
pub const BIN: &str = "kube-shutdown-drain";

/// One rendered page.
#[derive(Debug, Clone)]
pub struct Page {
    /// `kube-shutdown-drain.8`, `kube-shutdown-drain-plan.8`, ...
    pub file_name: String,
    pub roff: String,
}

const EXIT_STATUS: &str = r#".SH "EXIT STATUS"
.TP
\fB0\fR
Done.
.TP
\fB1\fR
The drain is incomplete (pods remain), a restore left something behind, \fBcheck\fR found a
problem, \fBforecast\fR says the drain would not complete (blocked, or cut at the deadline), or
\fBreboot\fR got no drain slot in time or did not reboot an incompletely drained node, or the
API server refused a request of \fBfleet\fR (the role it needs is named).
.TP
\fB2\fR
Usage or configuration error (the configuration file, the kubeconfig), including an API server
certificate the kubeconfig does not trust (unknown issuer, a name it does not carry, expired or
not yet valid): no retry passes, so none is made.
.TP
\fB3\fR
The cluster is unreachable (retried until the command's time is up) or the node does not exist.
"#;

const EXIT_STATUS_RUN: &str = r#".SH "EXIT STATUS"
.TP
\fB0\fR
Stopped by SIGTERM or SIGINT.
.TP
\fB1\fR
A failure the service may recover from by a restart (\fBRestart=on\-failure\fR).
.TP
\fB2\fR
A configuration error; the unit does not restart (\fBRestartPreventExitStatus=2\fR).
"#;

const ENVIRONMENT: &str = r#".SH ENVIRONMENT
.TP
\fBKUBE_SHUTDOWN_DRAIN_CONFIG\fR
The configuration file, as \fB\-\-config\fR.
.TP
\fBKUBE_SHUTDOWN_DRAIN_LOG\fR
The log filter (comma-separated directives, each a level or TARGET=LEVEL, e.g.
\fBdebug\fR or \fBkube_shutdown_drain=debug\fR); default \fBinfo\fR. A value that is not a
filter is a warning naming the variable, and the default applies. The kube client's own lines
appear only when a directive names \fBkube_client\fR or \fBkube_runtime\fR.
.TP
\fBJOURNAL_STREAM\fR
Set by systemd. When it names the process's stderr, logs go to the journal with structured fields
(\fBNODE\fR, \fBPOD\fR, \fBBUDGET\fR, \fBOUTCOME\fR, \fBSHUTDOWN_KIND\fR, \fBBOOT_ID\fR), shown by
\fBjournalctl \-o json\fR.
.TP
\fBNO_COLOR\fR
When set and not empty, logs on a terminal carry no colour. Logs to anything but a terminal never
do.
.TP
\fBDBUS_SYSTEM_BUS_ADDRESS\fR
The system bus on which logind is reached; default \fIunix:path=/run/dbus/system_bus_socket\fR.
"#;

const FILES: &str = r#".SH FILES
.TP
\fI/etc/kube\-shutdown\-drain/config.toml\fR
The configuration; every key is optional and documented in the shipped file
(\fI/usr/share/kube\-shutdown\-drain/config.example.toml\fR in the system extension image).
The service does not start until this file exists.
.TP
\fI/etc/kube\-shutdown\-drain/kubeconfig\fR
The node's credentials. The service does not start until this file exists.
.TP
\fI/var/lib/kube\-shutdown\-drain/\fR
State: the report of the last drain (\fIlast\-report.json\fR), the moment the current shutdown
was announced (\fIshutdown\-started\fR) and the record of this boot (\fIboot\-record\fR), from
which the next start tells whether the boot ended with a complete drain.
.TP
\fI/run/systemd/shutdown/scheduled\fR
logind's record of a shutdown scheduled ahead (\fBshutdown \-r +15\fR); watched (inotify) by the
daemon, which drains the node \fB[daemon] scheduled_lead\fR before its time unless
\fBdrain_when_scheduled = false\fR. \fBshutdown \-k\fR writes the same file and drains too.
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
"#;

/// `fleet` runs on an admin's machine: kubectl's environment and files, not the daemon's.
const ENVIRONMENT_FLEET: &str = r#".SH ENVIRONMENT
.TP
\fBKUBECONFIG\fR
A colon-separated list of kubeconfig files, merged as kubectl merges them (the first file to set
a value wins; files that do not exist are skipped), unless \fB\-\-kubeconfig\fR is given.
.TP
\fBHOME\fR
Without either, the kubeconfig is \fI$HOME/.kube/config\fR.
.TP
\fBKUBE_SHUTDOWN_DRAIN_LOG\fR
The log filter, as for the other commands; default \fBinfo\fR.
"#;

const FILES_FLEET: &str = r#".SH FILES
.TP
\fI~/.kube/config\fR
The admin's kubeconfig, when neither \fB\-\-kubeconfig\fR nor \fBKUBECONFIG\fR names one.
The daemon's configuration file is not read.
.TP
\fI/usr/bin/kubectl\-shutdown_drain\fR
A symbolic link to the binary: the kubectl plugin, so that \fBkubectl shutdown\-drain fleet\fR
runs this command.
.TP
\fI/usr/share/kube\-shutdown\-drain/rbac.yaml\fR
The ClusterRole and the Role \fBkube\-shutdown\-drain\-fleet\-admin\fR, which grant what
\fBfleet\fR reads and writes, with an example of their bindings.
"#;

const CREDENTIALS: &str = r#".SH CREDENTIALS
The daemon needs an identity that may patch its own Node, list and evict the pods on it and
create Events. Apply \fI/usr/share/kube\-shutdown\-drain/rbac.yaml\fR once per cluster, then on
each node (or from an admin workstation) run
\fB/usr/share/kube\-shutdown\-drain/make\-node\-kubeconfig\fR \fINODE\fR \fIOUT\fR, which
creates a ServiceAccount named after the node and writes a kubeconfig for its token.
\fIadmission\-policy.yaml\fR (Kubernetes 1.30 or later) limits each such identity to its own
Node object. The kubelet's kubeconfig also works, with one limitation: the NodeRestriction
admission plugin forbids a node to change its own taints, so no taint is set (the cordon still
is).
"#;

const SEE_ALSO: &str = r"\fBsystemd\-inhibit\fR(1), \fBlogind.conf\fR(5), \fBsystemctl\fR(1), \fBjournalctl\fR(1), \fBkubectl\-drain\fR(1)";

/// Every page: the main one first, then one per visible subcommand. `date` is the footer date
/// (reproducible builds pass the build's date; `None` leaves it empty).
pub fn pages(date: Option<&str>) -> Vec<Page> {
    let mut cmd = Cli::command().name(BIN).disable_help_subcommand(true);
    // Gives the subcommands their display names ("kube-shutdown-drain-run") and bin names
    // ("kube-shutdown-drain run"), and propagates the global options to them.
    cmd.build();
    let version = cmd.get_version().unwrap_or_default().to_owned();
    let subcommands: Vec<Command> = cmd
        .get_subcommands()
        .filter(|s| !s.is_hide_set())
        .cloned()
        .collect();
    let see_also_main = format!(
        "{}, {SEE_ALSO}\n",
        subcommands
            .iter()
            .map(|s| format!("\\fB{}\\fR(8)", escape(display_name(s))))
            .collect::<Vec<_>>()
            .join(", ")
    );
    let mut out = vec![page(&cmd, &version, date, true, &see_also_main)];
    let see_also_sub = format!("\\fB{}\\fR(8), {SEE_ALSO}\n", escape(BIN));
    for sub in &subcommands {
        out.push(page(sub, &version, date, false, &see_also_sub));
    }
    out
}

fn display_name(cmd: &Command) -> &str {
    cmd.get_display_name().unwrap_or_else(|| cmd.get_name())
}

fn page(cmd: &Command, version: &str, date: Option<&str>, main: bool, see_also: &str) -> Page {
    let mut man = clap_mangen::Man::new(cmd.clone())
        .section("8")
        .manual("System Administration")
        .source(format!("{BIN} {version}"));
    if let Some(d) = date {
        man = man.date(d);
    }
    // Each clap_mangen render starts with roff's preamble (the `Aq` string); keep the first.
    let mut roff = String::new();
    let mut piece = |render: &dyn Fn(&mut Vec<u8>) -> std::io::Result<()>| {
        let mut bytes = Vec::new();
        // Writing into a Vec cannot fail.
        let _ = render(&mut bytes);
        for line in String::from_utf8_lossy(&bytes).lines() {
            let preamble = line.starts_with(".ie \\n(.g .ds Aq") || line.starts_with(".el .ds Aq");
            if !preamble || roff.is_empty() {
                roff.push_str(line);
                roff.push('\n');
            }
        }
    };
    piece(&|w| man.render_title(w));
    piece(&|w| man.render_name_section(w));
    let synopsis = synopsis(cmd, main);
    piece(&|w| w.write_all(synopsis.as_bytes()));
    piece(&|w| man.render_description_section(w));
    piece(&|w| man.render_options_section(w));
    if main || cmd.has_subcommands() {
        piece(&|w| man.render_subcommands_section(w));
    }
    roff.push_str(if cmd.get_name() == "run" {
        EXIT_STATUS_RUN
    } else {
        EXIT_STATUS
    });
    let fleet = cmd.get_name() == "fleet";
    roff.push_str(if fleet {
        ENVIRONMENT_FLEET
    } else {
        ENVIRONMENT
    });
    roff.push_str(if fleet { FILES_FLEET } else { FILES });
    if main {
        roff.push_str(CREDENTIALS);
    }
    roff.push_str(".SH \"SEE ALSO\"\n");
    roff.push_str(see_also);
    Page {
        file_name: format!("{}.8", display_name(cmd)),
        roff,
    }
}

/// `.SH SYNOPSIS`: the command, then each option with its argument (`--config PATH`,
/// `--output text|json`), then `COMMAND` on the main page.
fn synopsis(cmd: &Command, main: bool) -> String {
    let name = cmd.get_bin_name().unwrap_or_else(|| cmd.get_name());
    let mut line = format!(".SH SYNOPSIS\n\\fB{}\\fR", escape(name));
    for arg in cmd
        .get_arguments()
        .filter(|a| !a.is_hide_set() && !a.is_positional())
    {
        let _ = write!(line, " [{}]", option(arg));
    }
    if main {
        line.push_str(" \\fICOMMAND\\fR");
    }
    line.push('\n');
    line
}

/// `\fB-h\fR|\fB--help\fR` or `\fB--output\fR \fItext\fR|\fIjson\fR`.
fn option(arg: &Arg) -> String {
    let mut names = Vec::new();
    if let Some(s) = arg.get_short() {
        names.push(format!("\\fB\\-{}\\fR", escape(&s.to_string())));
    }
    if let Some(l) = arg.get_long() {
        names.push(format!("\\fB\\-\\-{}\\fR", escape(l)));
    }
    let mut text = names.join("|");
    if matches!(arg.get_action(), ArgAction::Set | ArgAction::Append) {
        let possible: Vec<String> = arg
            .get_possible_values()
            .iter()
            .filter(|v| !v.is_hide_set())
            .map(|v| format!("\\fI{}\\fR", escape(v.get_name())))
            .collect();
        let value = if possible.is_empty() {
            let names = arg
                .get_value_names()
                .map(|n| n.iter().map(ToString::to_string).collect::<Vec<_>>())
                .unwrap_or_else(|| vec![arg.get_id().as_str().to_uppercase()]);
            format!("\\fI{}\\fR", escape(&names.join(" ")))
        } else {
            possible.join("|")
        };
        let _ = write!(text, " {value}");
    }
    text
}

/// Escapes text for roff: a backslash and a minus sign (which roff would render as a hyphen).
fn escape(text: &str) -> String {
    text.replace('\\', "\\e").replace('-', "\\-")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `.SH` headings of a page, in order.
    fn sections(roff: &str) -> Vec<String> {
        roff.lines()
            .filter_map(|l| l.strip_prefix(".SH "))
            .map(|h| h.trim_matches('"').to_owned())
            .collect()
    }

    /// The text of one section (up to the next `.SH`).
    fn section<'a>(roff: &'a str, name: &str) -> &'a str {
        let heading = if name.contains(' ') {
            format!(".SH \"{name}\"\n")
        } else {
            format!(".SH {name}\n")
        };
        let start = roff
            .find(&heading)
            .unwrap_or_else(|| panic!("no section {name}:\n{roff}"));
        let body = &roff[start + heading.len()..];
        &body[..body.find("\n.SH").unwrap_or(body.len())]
    }

    #[test]
    fn every_page_has_the_sections_and_the_version_in_its_footer() {
        let pages = pages(Some("2026-01-02"));
        let names: Vec<&str> = pages.iter().map(|p| p.file_name.as_str()).collect();
        assert_eq!(
            names,
            [
                "kube-shutdown-drain.8",
                "kube-shutdown-drain-plan.8",
                "kube-shutdown-drain-drain.8",
                "kube-shutdown-drain-restore.8",
                "kube-shutdown-drain-status.8",
                "kube-shutdown-drain-forecast.8",
                "kube-shutdown-drain-check.8",
                "kube-shutdown-drain-reboot.8",
                "kube-shutdown-drain-run.8",
                "kube-shutdown-drain-fleet.8",
            ]
        );
        let version = env!("CARGO_PKG_VERSION");
        for p in &pages {
            let th = p.roff.lines().find(|l| l.starts_with(".TH ")).unwrap();
            assert!(
                th.starts_with(".TH ") && th.contains(&format!("{BIN} {version}")),
                "{}: footer without the version: {th}",
                p.file_name
            );
            assert!(th.contains("2026-01-02"), "{th}");
            let got = sections(&p.roff);
            for want in [
                "NAME",
                "SYNOPSIS",
                "DESCRIPTION",
                "OPTIONS",
                "EXIT STATUS",
                "ENVIRONMENT",
                "FILES",
                "SEE ALSO",
            ] {
                assert!(
                    got.iter().any(|g| g == want),
                    "{}: no {want} in {got:?}",
                    p.file_name
                );
            }
            assert!(!got.iter().any(|g| g == "EXTRA"), "{}", p.file_name);
            // DESCRIPTION says more than NAME: none of its lines is NAME's text again.
            let name = section(&p.roff, "NAME");
            let about = name.split_once(" \\- ").map(|x| x.1.trim()).unwrap_or("");
            assert!(!about.is_empty(), "{}: {name}", p.file_name);
            let description = section(&p.roff, "DESCRIPTION");
            assert!(
                !description.contains(about),
                "{}: DESCRIPTION repeats NAME ({about})",
                p.file_name
            );
            assert!(description.split_whitespace().count() > 15, "{description}");
            // SYNOPSIS shows the arguments of the options.
            let synopsis = section(&p.roff, "SYNOPSIS");
            assert!(
                synopsis.contains("\\fB\\-\\-config\\fR \\fIPATH\\fR")
                    && synopsis.contains("\\fB\\-\\-node\\fR \\fINAME\\fR"),
                "{}: {synopsis}",
                p.file_name
            );
        }
        let plan = &pages[1].roff;
        assert!(
            section(plan, "SYNOPSIS").contains("\\fB\\-\\-output\\fR \\fItext\\fR|\\fIjson\\fR"),
            "{plan}"
        );
        assert!(section(&pages[0].roff, "SEE ALSO").contains("kube\\-shutdown\\-drain\\-plan"));
        assert!(section(&pages[8].roff, "EXIT STATUS").contains("RestartPreventExitStatus=2"));
    }

    #[test]
    fn every_option_and_value_has_help_text() {
        let mut cmd = Cli::command();
        cmd.build();
        let mut missing = Vec::new();
        let mut all = vec![&cmd];
        all.extend(cmd.get_subcommands());
        for c in all {
            if c.get_about().is_none() {
                missing.push(format!("command {}", c.get_name()));
            }
            for a in c.get_arguments() {
                if a.get_help().is_none() {
                    missing.push(format!("{} --{}", c.get_name(), a.get_id()));
                }
                let takes_value = matches!(a.get_action(), ArgAction::Set | ArgAction::Append);
                for v in a.get_possible_values().into_iter().filter(|_| takes_value) {
                    if v.get_help().is_none() {
                        missing.push(format!(
                            "{} --{} {}",
                            c.get_name(),
                            a.get_id(),
                            v.get_name()
                        ));
                    }
                }
            }
        }
        assert!(missing.is_empty(), "no help text: {missing:?}");
    }
}
