//! The table tests of `[fleetlock]`: off by default, the default user, every bad value with its
//! file, line, column, key and what is allowed, read through the top-level config file.

use std::path::Path;

use super::fleetlock::{DEFAULT_AGENT_USER, FleetLockSettings};
use super::test_cases::{Refusal, unexpected_refusals};
use super::{ConfigError, Source};

fn parse(text: &str) -> Result<Option<FleetLockSettings>, ConfigError> {
    let src = Source {
        path: Path::new("/etc/x.toml"),
        text,
    };
    super::from_toml(&src, Ok("n1")).map(|s| s.fleetlock)
}

#[test]
fn no_listen_means_no_server() {
    assert_eq!(parse("").unwrap(), None);
    assert_eq!(parse("[fleetlock]").unwrap(), None);
}

#[test]
fn a_loopback_listen_starts_the_server_for_zincati_by_default() {
    assert_eq!(
        parse("[fleetlock]\nlisten = \"127.0.0.1:9753\"").unwrap(),
        Some(FleetLockSettings {
            listen: "127.0.0.1:9753".parse().unwrap(),
            agent_user: DEFAULT_AGENT_USER.into(),
        })
    );
    assert_eq!(DEFAULT_AGENT_USER, "zincati");
    let s = parse("[fleetlock]\nlisten = \"[::1]:80\"\nagent_user = \"core\"")
        .unwrap()
        .unwrap();
    assert_eq!(s.listen, "[::1]:80".parse().unwrap());
    assert_eq!(s.agent_user, "core");
    // The whole 127.0.0.0/8 is loopback.
    assert!(
        parse("[fleetlock]\nlisten = \"127.0.0.53:9753\"")
            .unwrap()
            .is_some()
    );
}

/// Every refusal: (text, line, column, key, the problem and what is allowed).
const BAD: &[Refusal<'_>] = &[
    (
        "[fleetlock]\nlisten = \"0.0.0.0:9753\"",
        2,
        10,
        "fleetlock.listen",
        "\"0.0.0.0:9753\" is not a loopback address: the server would answer other hosts; \
         allowed: a loopback address and a port, e.g. \"127.0.0.1:9753\" or \"[::1]:9753\"",
    ),
    (
        "[fleetlock]\nlisten = \"10.0.0.7:9753\"",
        2,
        10,
        "fleetlock.listen",
        "\"10.0.0.7:9753\" is not a loopback address",
    ),
    (
        "[fleetlock]\nlisten = \"[::]:9753\"",
        2,
        10,
        "fleetlock.listen",
        "\"[::]:9753\" is not a loopback address",
    ),
    (
        "[fleetlock]\nlisten = \"localhost:9753\"",
        2,
        10,
        "fleetlock.listen",
        "\"localhost:9753\" is not an address and port; allowed: a loopback address",
    ),
    (
        "[fleetlock]\nlisten = \"127.0.0.1\"",
        2,
        10,
        "fleetlock.listen",
        "\"127.0.0.1\" is not an address and port",
    ),
    (
        "[fleetlock]\nlisten = \"127.0.0.1:0\"",
        2,
        10,
        "fleetlock.listen",
        "\"127.0.0.1:0\" has port 0: the agent's base_url needs a fixed port",
    ),
    (
        "[fleetlock]\nlisten = 9753",
        2,
        10,
        "fleetlock.listen",
        "expected a string, found an integer",
    ),
    (
        "[fleetlock]\nlisten = \"127.0.0.1:9753\"\nagent_user = \"zin cati\"",
        3,
        14,
        "fleetlock.agent_user",
        "\"zin cati\" is not a user name; allowed: a user name of the system",
    ),
    (
        "[fleetlock]\nlisten = \"127.0.0.1:9753\"\nagent_user = \"-x\"",
        3,
        14,
        "fleetlock.agent_user",
        "\"-x\" is not a user name",
    ),
    (
        "[fleetlock]\nlisten = \"127.0.0.1:9753\"\nagent_user = \"\"",
        3,
        14,
        "fleetlock.agent_user",
        "\"\" is not a user name",
    ),
    (
        "[fleetlock]\nagent_user = \"zincati\"",
        2,
        14,
        "fleetlock.agent_user",
        "it names who may call the FleetLock server, and `listen` starts none; allowed: \
         `listen = \"127.0.0.1:9753\"` in [fleetlock] together with it",
    ),
];

#[test]
fn every_bad_fleetlock_value_is_refused_at_its_place_with_what_is_allowed() {
    let wrong = unexpected_refusals(BAD, parse);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    let err = parse("[fleetlock]\nlisten = \"127.0.0.1:1\"\nuser = \"x\"").unwrap_err();
    assert!(
        err.to_string()
            == "/etc/x.toml:3:1: unknown field `user`, expected `listen` or `agent_user`",
        "{err}"
    );
}
