//! A test binary whose daemon tests cannot start their private bus (no `dbus-daemon`, no
//! python-dbusmock) passes without them, as before, but says so: one line on stderr per binary,
//! past libtest's capture, with the prefix `scripts/test` counts in its summary
//! (`logind::SKIP_PREFIX`); with `CI=true` the same binary fails. This binary runs itself again
//! with a PATH that has no `dbus-daemon`.

mod logind;

use std::process::{Command, Output};

/// Set for the inner run: only then do the tests needing the bus try to start it.
const INNER: &str = "KUBE_SHUTDOWN_DRAIN_TEST_SKIPS_INNER";

/// What every daemon test does first: start the private bus and the fake logind, or return.
async fn needs_the_bus() {
    if std::env::var_os(INNER).is_none() {
        return;
    }
    let Some(_rig) = logind::Rig::start(logind::LogindOptions::default()).await else {
        return;
    };
}

#[tokio::test]
async fn needs_the_bus_first() {
    needs_the_bus().await;
}

#[tokio::test]
async fn needs_the_bus_second() {
    needs_the_bus().await;
}

/// This binary's two bus tests, on a PATH without `dbus-daemon`, with `CI=true` or without.
fn inner_run(ci: bool) -> Output {
    let mut command = Command::new(std::env::current_exe().expect("the test binary's path"));
    command
        .args(["needs_the_bus", "--test-threads=2"])
        .env(INNER, "1")
        .env("PATH", "/nonexistent")
        .env_remove("CI");
    if ci {
        command.env("CI", "true");
    }
    command.output().expect("run the test binary again")
}

#[test]
fn a_binary_that_cannot_start_its_bus_says_so_once_and_fails_only_under_ci() {
    let out = inner_run(false);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "without CI the tests pass: {stderr}");
    assert_eq!(
        stderr.matches(logind::SKIP_PREFIX).count(),
        1,
        "one line for the binary, not one per test:\n{stderr}"
    );
    assert!(
        stderr.contains(&format!(
            "{} skipped_binaries: dbus-daemon (Debian package dbus) is missing",
            logind::SKIP_PREFIX
        )),
        "the line names the binary and what is missing:\n{stderr}"
    );

    let out = inner_run(true);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success() && stdout.contains("CI=true and dbus-daemon"),
        "with CI=true a missing bus fails the tests:\n{stdout}\n{stderr}"
    );
}
