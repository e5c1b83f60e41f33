//! The table tests of `[fleet] max_unready` and `[fleet.alerts]`: off by default, a count or a
//! percentage, one server with kured's filter keys, and every bad value with its file, line,
//! column, key and what is allowed.

use std::path::{Path, PathBuf};

use super::gates::{AlertSource, MaxUnready};
use super::test_cases::{Refusal, unexpected_refusals};
use super::{ConfigError, FleetSettings, Source};

fn parse(text: &str) -> Result<FleetSettings, ConfigError> {
    let src = Source {
        path: Path::new("/etc/x.toml"),
        text,
    };
    super::from_toml(&src, Ok("n1")).map(|s| s.fleet)
}

#[test]
fn without_the_keys_nothing_is_judged() {
    let f = parse("").unwrap();
    assert_eq!((f.max_unready, f.alerts), (None, None));
}

#[test]
fn max_unready_is_a_count_or_a_percentage_of_the_group_this_node_included() {
    let m = |text: &str| {
        parse(&format!("[fleet]\nmax_unready = {text}"))
            .unwrap()
            .max_unready
    };
    assert_eq!(m("1"), Some(MaxUnready::Nodes(1)));
    assert_eq!(m("\"25%\""), Some(MaxUnready::Percent(25)));
    // A count is itself; a percentage rounds down, and is at least one node.
    assert_eq!(MaxUnready::Nodes(2).limit(40), 2);
    assert_eq!(MaxUnready::Percent(25).limit(10), 2);
    assert_eq!(MaxUnready::Percent(25).limit(3), 1);
    assert_eq!(MaxUnready::Percent(100).limit(3), 3);
    assert_eq!(MaxUnready::Percent(10).limit(0), 1);
}

#[test]
fn alerts_name_one_server_and_kureds_filter_keys() {
    let f = parse(
        "[fleet]\nslots = 1\n[fleet.alerts]\nprometheus_url = \"https://prom.example:9090/\"\n\
         filter = \"^Watchdog$\"\nfiring_only = true\nmatch_only = false\n\
         ca_file = \"/etc/ksd/ca.crt\"\nbearer_token_file = \"/etc/ksd/token\"",
    )
    .unwrap();
    assert_eq!(f.slots, 1, "[fleet] and [fleet.alerts] are read together");
    let a = f.alerts.unwrap();
    assert_eq!(a.source, AlertSource::Prometheus);
    assert_eq!(a.endpoint(), "https://prom.example:9090/api/v1/alerts");
    assert_eq!(a.filter.as_ref().map(|r| r.0.as_str()), Some("^Watchdog$"));
    assert!(a.firing_only && !a.match_only);
    assert_eq!(a.ca_file, Some(PathBuf::from("/etc/ksd/ca.crt")));
    assert_eq!(a.bearer_token_file, Some(PathBuf::from("/etc/ksd/token")));
    let a = parse("[fleet.alerts]\nalertmanager_url = \"http://127.0.0.1:9093/am\"")
        .unwrap()
        .alerts
        .unwrap();
    assert_eq!(a.source, AlertSource::Alertmanager);
    assert_eq!(
        a.endpoint(),
        "http://127.0.0.1:9093/am/api/v2/alerts?active=true&silenced=false&inhibited=false&\
         unprocessed=false"
    );
    assert!(a.filter.is_none() && !a.firing_only && !a.match_only);
    // A token on loopback over http stays on the machine.
    let a = parse(
        "[fleet.alerts]\nprometheus_url = \"http://localhost:9090\"\n\
         bearer_token_file = \"/t\"",
    );
    assert!(a.is_ok(), "{a:?}");
}

/// Every refusal: (text, line, column, key, the problem and what is allowed).
const BAD: &[Refusal<'_>] = &[
    (
        "[fleet]\nmax_unready = 0",
        2,
        15,
        "fleet.max_unready",
        "0 would never let a node of the group reboot; allowed: a number of nodes from 1 to \
         10000, or a percentage of the group's nodes from \"1%\" to \"100%\"",
    ),
    (
        "[fleet]\nmax_unready = \"0%\"",
        2,
        15,
        "fleet.max_unready",
        "\"0%\" is not a percentage",
    ),
    (
        "[fleet]\nmax_unready = \"101%\"",
        2,
        15,
        "fleet.max_unready",
        "\"101%\" is not a percentage",
    ),
    (
        "[fleet]\nmax_unready = \"one\"",
        2,
        15,
        "fleet.max_unready",
        "\"one\" is not a percentage",
    ),
    (
        "[fleet]\nmax_unready = 1.5",
        2,
        15,
        "fleet.max_unready",
        "expected an integer or a string, found a float",
    ),
    (
        "[fleet.alerts]\nfilter = \"x\"",
        1,
        1,
        "fleet.alerts.prometheus_url",
        "[fleet.alerts] names no server to ask; allowed: `prometheus_url = \"https://...\"` or \
         `alertmanager_url = \"https://...\"` in it",
    ),
    (
        "[fleet.alerts]\nprometheus_url = \"http://a:1\"\nalertmanager_url = \"http://b:2\"",
        3,
        20,
        "fleet.alerts.alertmanager_url",
        "the alerts are asked of one server, and prometheus_url is set too",
    ),
    (
        "[fleet.alerts]\nprometheus_url = \"ftp://prom:21\"",
        2,
        18,
        "fleet.alerts.prometheus_url",
        "\"ftp://prom:21\" is not an http or https URL",
    ),
    (
        "[fleet.alerts]\nprometheus_url = \"https://u:pw@prom:9090\"",
        2,
        18,
        "fleet.alerts.prometheus_url",
        "\"https://u:pw@prom:9090\" has user info",
    ),
    (
        "[fleet.alerts]\nprometheus_url = \"https://prom:9090/?x=1\"",
        2,
        18,
        "fleet.alerts.prometheus_url",
        "\"https://prom:9090/?x=1\" has a query or a fragment",
    ),
    (
        "[fleet.alerts]\nprometheus_url = \"prom:9090\"",
        2,
        18,
        "fleet.alerts.prometheus_url",
        "\"prom:9090\" is not an http or https URL",
    ),
    (
        "[fleet.alerts]\nprometheus_url = \"http://p:1\"\nfilter = \"(\"",
        3,
        10,
        "fleet.alerts.filter",
        "\"(\" is not a regular expression: ",
    ),
    (
        "[fleet.alerts]\nalertmanager_url = \"http://a:1\"\nfiring_only = true",
        3,
        15,
        "fleet.alerts.firing_only",
        "Alertmanager holds only alerts that fire",
    ),
    (
        "[fleet.alerts]\nprometheus_url = \"http://p:1\"\nmatch_only = true",
        3,
        14,
        "fleet.alerts.match_only",
        "it keeps the alerts `filter` matches, and there is no filter",
    ),
    (
        "[fleet.alerts]\nprometheus_url = \"http://p:1\"\nca_file = \"/ca\"",
        3,
        11,
        "fleet.alerts.ca_file",
        "http://p:1 is a plain http URL: there is no certificate to check",
    ),
    (
        "[fleet.alerts]\nprometheus_url = \"http://p:1\"\nbearer_token_file = \"/t\"",
        3,
        21,
        "fleet.alerts.bearer_token_file",
        "http://p:1 is a plain http URL of another host: the token would cross the network in \
         clear text",
    ),
    (
        "[fleet.alerts]\nprometheus_url = \"https://p:1\"\nbearer_token_file = \"token\"",
        3,
        21,
        "fleet.alerts.bearer_token_file",
        "\"token\" is not an absolute path",
    ),
];

#[test]
fn every_bad_gate_value_is_refused_at_its_place_with_what_is_allowed() {
    let wrong = unexpected_refusals(BAD, parse);
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    let err = parse("[fleet.alerts]\nprometheus_url = \"http://p:1\"\nurl = \"x\"").unwrap_err();
    assert!(
        err.to_string()
            .starts_with("/etc/x.toml:3:1: unknown field `url`"),
        "{err}"
    );
    let err = parse("[fleet]\nalerts = 1").unwrap_err().to_string();
    assert!(
        err.contains("key `fleet.alerts`") && err.contains("[fleet.alerts] table"),
        "{err}"
    );
}
