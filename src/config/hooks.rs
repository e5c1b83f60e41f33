//! `[[hook]]`: the commands run around the drains the node decides (its own reboots, the update
//! agent's, `kube-shutdown-drain reboot` by hand), and their validation into [`Hook`]s, which
//! `crate::reboot::hooks` runs. Shutdowns that logind announces run none of them.
//!
//! ```toml
//! [[hook]]
//! at = "pre-drain"                                # or "post-restore"
//! command = ["/usr/local/bin/storage-failover", "--node"]
//! timeout = "5m"                                  # default 1m, from 1s to 1h
//! ```

use std::time::Duration;

use serde::Deserialize;
use toml::Spanned;

use super::from_value::{Invalid, Named, deserialize_checked};
use super::reboot::Command;
use super::table::{Table, table};
use super::values::DurationIn;
use super::{ConfigError, Source};

/// How long one hook may run when its `timeout` is not given.
pub const DEFAULT_HOOK_TIMEOUT: Duration = Duration::from_secs(60);

/// `timeout`: from 1 s to 1 h (a hook runs while the node holds a drain slot the fleet waits
/// for; an hour is already long for that).
pub type HookTimeout = DurationIn<1000, 3_600_000>;

/// When a hook runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HookAt {
    /// After the drain slot and the holds, before the drain; a failure calls the reboot off.
    PreDrain,
    /// After the node's restore, before its drain slot goes back; a failure is a Warning Event.
    PostRestore,
}

impl Named for HookAt {
    const NAMES: &'static [(&'static str, Self)] = &[
        ("pre-drain", HookAt::PreDrain),
        ("post-restore", HookAt::PostRestore),
    ];
}

impl HookAt {
    /// The spelling in the file, and in the hook's environment (`KSD_HOOK_AT`).
    pub fn as_str(self) -> &'static str {
        self.name()
    }
}

deserialize_checked!(HookAt);

/// One hook as configured: when, what (an argv, no shell) and how long it may run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hook {
    pub at: HookAt,
    /// The program (an absolute path) and its arguments.
    pub argv: Vec<String>,
    pub timeout: Duration,
}

/// One `[[hook]]` entry as written; `at` and `command` are required.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawHook {
    pub at: Option<HookAt>,
    pub command: Option<Command>,
    /// Default: [`DEFAULT_HOOK_TIMEOUT`].
    pub timeout: Option<HookTimeout>,
}

/// A `[[hook]]` entry read through [`table`], so a non-table entry is refused by name.
#[derive(Debug)]
pub struct HookEntry(pub RawHook);

impl<'de> Deserialize<'de> for HookEntry {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        table(d).map(HookEntry)
    }
}

impl Table for RawHook {
    const EXPECTING: &'static str =
        "each `hook` entry to be a [[hook]] table (keys at, command, timeout)";
}

/// The `[[hook]]` entries of `src`, in their order, each with `at` and `command` given.
pub fn settings(raw: &[Spanned<HookEntry>], src: &Source<'_>) -> Result<Vec<Hook>, ConfigError> {
    raw.iter()
        .enumerate()
        .map(|(i, entry)| {
            let h = &entry.get_ref().0;
            let missing = |key: &str, example: &str| {
                src.invalid(
                    entry.span(),
                    &format!("hook[{i}].{key}"),
                    Invalid::new(
                        format!("a hook needs `{key}`"),
                        format!("at and command in every [[hook]], e.g. {example}"),
                    ),
                )
            };
            let Some(at) = h.at else {
                return Err(missing("at", "at = \"pre-drain\""));
            };
            let Some(Command(argv)) = h.command.clone() else {
                return Err(missing(
                    "command",
                    "command = [\"/usr/local/bin/failover\"]",
                ));
            };
            Ok(Hook {
                at,
                argv,
                timeout: h.timeout.map_or(DEFAULT_HOOK_TIMEOUT, |DurationIn(t)| t),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::Settings;
    use super::super::test_cases::{Refusal, unexpected_refusals};
    use super::*;

    fn parse(text: &str) -> Result<Settings, ConfigError> {
        Settings::from_str_at(
            Path::new("/etc/x.toml"),
            &format!("node_name = \"n1\"\n{text}"),
        )
    }

    #[test]
    fn no_hook_by_default_and_each_entry_read_in_its_order_with_its_timeout() {
        let s = parse("").unwrap();
        assert!(s.hooks.is_empty());
        assert_eq!(s.fleet.hook_timeout, super::super::DEFAULT_HOOK_WAIT);
        let s = parse(
            "[[hook]]\nat = \"pre-drain\"\ncommand = [\"/bin/a\", \"x y\"]\n\
             [[hook]]\nat = \"post-restore\"\ncommand = [\"/bin/b\"]\ntimeout = \"5m\"\n\
             [fleet]\nhook_timeout = \"90s\"",
        )
        .unwrap();
        assert_eq!(
            s.hooks,
            vec![
                Hook {
                    at: HookAt::PreDrain,
                    argv: vec!["/bin/a".into(), "x y".into()],
                    timeout: DEFAULT_HOOK_TIMEOUT,
                },
                Hook {
                    at: HookAt::PostRestore,
                    argv: vec!["/bin/b".into()],
                    timeout: Duration::from_secs(300),
                },
            ]
        );
        assert_eq!(s.fleet.hook_timeout, Duration::from_secs(90));
    }

    /// Every refusal (the file's first line is `node_name`): line, column, key, problem.
    const BAD: &[Refusal<'_>] = &[
        (
            "[[hook]]\nat = \"pre-drain\"\ncommand = [\"failover\"]",
            4,
            11,
            "hook[0].command",
            "the program \"failover\" is not an absolute path; allowed: an array of strings run \
             without a shell, the first an absolute path",
        ),
        (
            "[[hook]]\nat = \"pre-drain\"\ncommand = []",
            4,
            11,
            "hook[0].command",
            "an empty command",
        ),
        (
            "[[hook]]\nat = \"pre-reboot\"\ncommand = [\"/bin/a\"]",
            3,
            6,
            "hook[0].at",
            "unknown value \"pre-reboot\"; allowed: one of \"pre-drain\", \"post-restore\"",
        ),
        (
            "[[hook]]\nat = \"pre-drain\"\ncommand = [\"/bin/a\"]\ntimeout = \"2h\"",
            5,
            11,
            "hook[0].timeout",
            "\"2h\" is out of range; allowed: a duration from 1s to 1h",
        ),
        (
            "[[hook]]\nat = \"pre-drain\"\ncommand = [\"/bin/a\"]\ntimeout = \"0s\"",
            5,
            11,
            "hook[0].timeout",
            "\"0s\" ",
        ),
        (
            "[[hook]]\ncommand = [\"/bin/a\"]",
            2,
            1,
            "hook[0].at",
            "a hook needs `at`; allowed: at and command in every [[hook]]",
        ),
        (
            "[[hook]]\nat = \"pre-drain\"\ncommand = [\"/bin/a\"]\n[[hook]]\nat = \"post-restore\"",
            5,
            1,
            "hook[1].command",
            "a hook needs `command`",
        ),
        (
            "[fleet]\nhook_timeout = \"0s\"",
            3,
            16,
            "fleet.hook_timeout",
            "\"0s\" ",
        ),
    ];

    #[test]
    fn each_bad_hook_is_refused_naming_the_file_line_key_and_what_is_allowed() {
        let wrong = unexpected_refusals(BAD, parse);
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
        let err = parse("[[hook]]\nat = \"pre-drain\"\ncommand = [\"/bin/a\"]\nshell = true")
            .unwrap_err();
        assert!(
            err.to_string()
                .starts_with("/etc/x.toml:5:1: unknown field `shell`, expected one of"),
            "{err}"
        );
    }
}
