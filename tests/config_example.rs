//! `config.example.toml` is the documentation of every key: it must parse, give exactly the
//! defaults, and its commented-out examples must be valid too. Bad files name the file.

use std::path::Path;

use kube_shutdown_drain::config::{ConfigError, RuleAction, Settings};

fn example_path() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("config.example.toml")
}

#[test]
fn the_example_parses_and_states_the_defaults() {
    let example = Settings::load(&example_path()).unwrap_or_else(|e| panic!("{e}"));
    let mut defaults = Settings::from_str_at(&example_path(), "").unwrap();
    defaults.source = example.source.clone();
    assert_eq!(
        example, defaults,
        "config.example.toml must show the defaults"
    );
}

/// A `[table]` header line alone (`[fleet.alerts]`), not prose that starts with one.
fn is_table_header(line: &str) -> bool {
    line.strip_prefix('[')
        .and_then(|l| l.strip_suffix(']'))
        .is_some_and(|name| {
            !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c == '_' || c == '.')
        })
}

/// Uncomment every `# key = value`, `# [table]`, `# [[rules]]` and `# [[reboot.window]]` line:
/// the examples in comments must be valid.
#[test]
fn the_commented_examples_are_valid() {
    let text = std::fs::read_to_string(example_path()).unwrap();
    let uncommented: String = text
        .lines()
        .map(|l| {
            let body = l.strip_prefix("# ").unwrap_or(l);
            let looks_like_toml = body.starts_with("[[")
                || is_table_header(body)
                || body.split_once(" = ").is_some_and(|(k, _)| {
                    !k.is_empty() && k.chars().all(|c| c.is_ascii_lowercase() || c == '_')
                });
            if looks_like_toml { body } else { l }
        })
        .collect::<Vec<_>>()
        .join("\n");
    // The rules examples sit at the end of [filters]; TOML puts them in the top-level array.
    let s = Settings::from_str_at(Path::new("/uncommented.toml"), &uncommented)
        .unwrap_or_else(|e| panic!("{e}\n{uncommented}"));
    assert_eq!(s.node_name, "worker-1");
    assert_eq!(s.rules.len(), 2);
    assert_eq!(s.rules[0].action, RuleAction::Drain { order: 1000 });
    assert_eq!(s.rules[1].action, RuleAction::WaitCompleted);
    assert!(s.filters.skip_selector.is_some());
    assert!(s.reboot.enabled() && s.reboot.update_engine && s.reboot.windows.len() == 2);
    let fleetlock = s.fleetlock.expect("[fleetlock] uncommented");
    assert_eq!(
        (
            fleetlock.listen.to_string().as_str(),
            fleetlock.agent_user.as_str()
        ),
        ("127.0.0.1:9753", "zincati")
    );
    assert_eq!(
        s.drain.grace_period,
        Some(std::time::Duration::from_secs(30))
    );
    assert_eq!(
        s.fleet.max_unready,
        Some(kube_shutdown_drain::config::gates::MaxUnready::Nodes(1))
    );
    let alerts = s.fleet.alerts.expect("[fleet.alerts] uncommented");
    assert_eq!(alerts.base, "https://prometheus.example:9090");
    assert!(
        alerts.filter.is_some() && alerts.ca_file.is_some() && alerts.bearer_token_file.is_some()
    );
}

#[test]
fn a_missing_or_bad_file_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.toml");
    let err = Settings::load(&missing).unwrap_err();
    assert!(matches!(err, ConfigError::Read { .. }));
    assert!(err.to_string().contains("nope.toml"), "{err}");

    let bad = dir.path().join("bad.toml");
    std::fs::write(
        &bad,
        "node_name = \"n\"\n\n[drain]\ntimeout = \"forever\"\n",
    )
    .unwrap();
    let err = Settings::load(&bad).unwrap_err().to_string();
    assert!(
        err.starts_with(&format!("{}:4:11: key `drain.timeout`", bad.display())),
        "{err}"
    );
    assert!(err.contains("allowed:"), "{err}");
}
